//! The stable fuzz runner: what CI runs instead of `cargo fuzz` (which needs nightly).
//!
//! For each target it replays every file of `corpus/NAME/` (every crash found before
//! is kept there, so this is the regression run), then mutates the corpus for a
//! bounded number of inputs or seconds. A panic is caught, the input is written to
//! `artifacts/NAME/crash-HASH`, and the run fails naming the target and the file; an
//! abort (a failed allocation, a stack overflow) saves the input the same way before
//! the signal ends the process.
//!
//! ```text
//! fuzz-run [--target NAME] [--seconds N] [--runs N] [--seed S] [--max-len N]
//! fuzz-run --make-corpus     # (re)writes corpus/NAME/seed-* from the crates' encoders
//! fuzz-run --list
//! ```
//! `--seconds` and `--runs` bound each target (defaults: 10 s, no run limit); a run
//! prints its seed and input count, and `--seed S --runs N` replays it exactly.

use std::panic;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vargr_fuzz::mutate::{mutate, Rng};
use vargr_fuzz::{Target, TARGETS};

/// An input slower than this is reported as a hang (debug builds on a loaded machine
/// are slow, so the bar is far above any decoder's normal time).
const HANG: Duration = Duration::from_secs(10);
/// Mutated inputs kept for further mutation, so that mutations stack across runs.
const POOL: usize = 512;

struct Options {
    target: Option<String>,
    seconds: f64,
    runs: Option<u64>,
    seed: u64,
    max_len: usize,
    make_corpus: bool,
    list: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: fuzz-run [--target NAME] [--seconds N] [--runs N] [--seed S] [--max-len N]\n\
         \x20      fuzz-run --make-corpus | --list"
    );
    std::process::exit(2)
}

fn parse() -> Options {
    let mut o = Options {
        target: None,
        seconds: 10.0,
        runs: None,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        max_len: 1 << 16,
        make_corpus: false,
        list: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |what: &str| {
            args.next().unwrap_or_else(|| {
                eprintln!("fuzz-run: {a} needs {what}");
                usage()
            })
        };
        let number = |s: String, flag: &str| {
            s.parse::<u64>().unwrap_or_else(|e| {
                eprintln!("fuzz-run: {flag} {s:?}: {e}");
                usage()
            })
        };
        match a.as_str() {
            "--target" => o.target = Some(value("a target name")),
            "--seconds" => {
                let s = value("a number of seconds");
                o.seconds = match s.parse::<f64>() {
                    Ok(n) if n.is_finite() && n >= 0.0 => n,
                    Ok(_) => {
                        eprintln!("fuzz-run: --seconds {s:?}: not a number of seconds");
                        usage()
                    }
                    Err(e) => {
                        eprintln!("fuzz-run: --seconds {s:?}: {e}");
                        usage()
                    }
                }
            }
            "--runs" => o.runs = Some(number(value("a number of inputs"), "--runs")),
            "--seed" => o.seed = number(value("a seed"), "--seed"),
            "--max-len" => o.max_len = number(value("a length"), "--max-len") as usize,
            "--make-corpus" => o.make_corpus = true,
            "--list" => o.list = true,
            _ => {
                eprintln!("fuzz-run: unknown argument {a:?}");
                usage()
            }
        }
    }
    o
}

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// FNV-1a, to name artifacts by content (the same input always gets the same name).
fn hash(data: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Every file of `dir`, in name order; a missing directory is an empty corpus.
fn read_corpus(dir: &Path) -> std::io::Result<Vec<(PathBuf, Vec<u8>)>> {
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    paths.retain(|p| p.is_file());
    paths.sort();
    paths
        .into_iter()
        .map(|p| std::fs::read(&p).map(|b| (p, b)))
        .collect()
}

/// Why one input failed: the panic message, or how long it took.
enum Failure {
    Panic(String),
    Hang(Duration),
}

/// The message of the last panic, set by the hook (the default hook's output would
/// drown the log in expected-looking backtraces).
type LastPanic = Arc<Mutex<Option<String>>>;

fn run_one(t: &Target, data: &[u8], last: &LastPanic) -> Result<(), Failure> {
    vargr_fuzz::abort::set_input(data);
    let start = Instant::now();
    let r = panic::catch_unwind(panic::AssertUnwindSafe(|| (t.run)(data)));
    let took = start.elapsed();
    match r {
        Err(_) => {
            let msg = last.lock().unwrap().take().unwrap_or_default();
            Err(Failure::Panic(msg))
        }
        Ok(()) if took > HANG => Err(Failure::Hang(took)),
        Ok(()) => Ok(()),
    }
}

/// Writes a failing input to `artifacts/NAME/` and says what and where.
fn report(t: &Target, data: &[u8], what: &str, f: &Failure) {
    let (kind, why) = match f {
        Failure::Panic(m) => ("crash", format!("panicked: {m}")),
        Failure::Hang(d) => ("hang", format!("took {:.1} s", d.as_secs_f64())),
    };
    let dir = fuzz_dir().join("artifacts").join(t.name);
    let path = dir.join(format!("{kind}-{}", hash(data)));
    let saved = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, data));
    let at = match saved {
        Ok(()) => format!("input saved to {}", path.display()),
        Err(e) => format!("could not save the input to {}: {e}", path.display()),
    };
    eprintln!("FAIL {}: {what} {why}\n     {at}", t.name);
}

/// Replays the corpus, then mutates it; whether the target held.
fn fuzz(t: &Target, o: &Options, last: &LastPanic) -> bool {
    let dir = fuzz_dir().join("corpus").join(t.name);
    let corpus = match read_corpus(&dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("FAIL {}: reading the corpus {}: {e}", t.name, dir.display());
            return false;
        }
    };
    if corpus.is_empty() {
        eprintln!(
            "FAIL {}: no corpus in {} (fuzz-run --make-corpus writes one)",
            t.name,
            dir.display()
        );
        return false;
    }
    let artifacts = fuzz_dir().join("artifacts").join(t.name);
    if let Err(e) = vargr_fuzz::abort::set_dir(&artifacts) {
        eprintln!("FAIL {}: creating {}: {e}", t.name, artifacts.display());
        return false;
    }
    for (path, data) in &corpus {
        if let Err(f) = run_one(t, data, last) {
            report(t, data, &format!("corpus file {}", path.display()), &f);
            return false;
        }
    }
    let mut pool: Vec<Vec<u8>> = corpus.into_iter().map(|(_, b)| b).collect();
    let seeds = pool.len();
    // Each target its own stream, so that --target NAME replays what a full run did.
    let salt = u64::from_le_bytes(hash(t.name.as_bytes()).as_bytes()[..8].try_into().unwrap());
    let mut rng = Rng::new(o.seed ^ salt);
    let deadline = Instant::now() + Duration::from_secs_f64(o.seconds);
    let mut runs = 0u64;
    while o.runs.is_none_or(|n| runs < n) && Instant::now() < deadline {
        let mut data = pool[rng.below(pool.len())].clone();
        mutate(&mut data, &pool, &mut rng, o.max_len);
        runs += 1;
        if let Err(f) = run_one(t, &data, last) {
            let what = format!(
                "input {runs} of seed {} (fuzz-run --target {} --seed {} --runs {runs} \
                 makes it again)",
                o.seed, t.name, o.seed
            );
            report(t, &data, &what, &f);
            return false;
        }
        // Keep some mutants: replace a random one beyond the seeds once the pool is full.
        if pool.len() < POOL {
            pool.push(data);
        } else if rng.chance(4) {
            let i = seeds + rng.below(POOL - seeds);
            pool[i] = data;
        }
    }
    println!(
        "ok   {}: {seeds} corpus files, {runs} mutated inputs (seed {})",
        t.name, o.seed
    );
    true
}

fn make_corpus(targets: &[&Target]) -> std::io::Result<()> {
    for t in targets {
        let dir = fuzz_dir().join("corpus").join(t.name);
        std::fs::create_dir_all(&dir)?;
        // Seeds of an older generator go; crash inputs kept as regressions stay.
        for e in std::fs::read_dir(&dir)? {
            let p = e?.path();
            if p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("seed-"))
            {
                std::fs::remove_file(&p)?;
            }
        }
        for (name, bytes) in (t.seeds)() {
            let file = format!("seed-{}", vargr_fuzz::file_name(&name));
            std::fs::write(dir.join(file), bytes)?;
        }
        println!("wrote the seeds of {} to {}", t.name, dir.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let o = parse();
    if o.list {
        for t in TARGETS {
            println!("{}", t.name);
        }
        return ExitCode::SUCCESS;
    }
    let targets: Vec<&Target> = match &o.target {
        Some(n) => match TARGETS.iter().find(|t| t.name == n) {
            Some(t) => vec![t],
            None => {
                eprintln!("fuzz-run: no target {n:?} (fuzz-run --list names them)");
                return ExitCode::from(2);
            }
        },
        None => TARGETS.iter().collect(),
    };
    if o.make_corpus {
        return match make_corpus(&targets) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("fuzz-run: writing the corpus: {e}");
                ExitCode::FAILURE
            }
        };
    }
    vargr_fuzz::abort::install();
    let last: LastPanic = Arc::default();
    let hook_last = last.clone();
    panic::set_hook(Box::new(move |info| {
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        *hook_last.lock().unwrap() = Some(format!("{msg}{at}"));
    }));
    let failed: Vec<&str> = targets
        .iter()
        .filter(|t| !fuzz(t, &o, &last))
        .map(|t| t.name)
        .collect();
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("fuzz-run: failing targets: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}
