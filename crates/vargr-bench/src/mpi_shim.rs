//! `vargr bench mpi-shim`: what libvargr_mpi.so costs and gains unmodified MPI programs.
//!
//! Each program runs under Open MPI's `mpirun` without the library (mode `off`), traced
//! (`trace`), watched by the live monitor (`monitor`) and compressing between sites
//! (`codec-adaptive`, `codec-fixed:CODEC`), in interleaved rounds so that every mode sees
//! the same machine state. Three networks: `local` (one machine, ranks on shared memory,
//! where a message takes a fraction of a microsecond: the harshest view of what tracing
//! costs), `tcp` (one machine, ranks over TCP on loopback, where a message takes
//! microseconds, as on a cluster's network) and `wan` (two sites in network namespaces
//! joined by a link shaped with tc tbf, bench/mpi/sites.sh, needing root: what
//! compression gains). A program's time is its own measure (NetPIPE's message times,
//! IS's timed iterations, HPCC's kernel times, the IMB-like loops' time per call), so
//! mpirun's start-up is not in it; the statistic is the median over rounds, and beside
//! it the median over rounds of each round's ratio to mode off (a change of the machine's
//! speed between rounds cancels). Bytes between sites are the link's device counters
//! around each run.
//!
//! A shared machine's speed moves from run to run by more than tracing costs a small
//! message, so `--pcontrol-pairs N` also times the IMB-like loops within each run: N
//! pairs of blocks, one recorded and one paused with `MPI_Pcontrol`, whose ratios give
//! tracing's cost against the library loaded but paused, with a 95 % confidence
//! interval of the median (in mode off, where `MPI_Pcontrol` does nothing, the same
//! ratios show how finely the machine resolves).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;

#[derive(Debug, Clone, Args)]
pub struct MpiShimArgs {
    /// Programs: netpipe (NetPIPE, 64 KiB to 4 MiB), is (an integer sort's exchange like
    /// NAS IS, bench/mpi/is_exchange.c), hpcc (the HPC Challenge: one row per kernel),
    /// imb (IMB-like loops of small calls, bench/mpi/imb_loops.c: PingPong of 8 bytes,
    /// Allreduce of one double, Barrier, and unsuccessful MPI_Test polls, on 2 ranks, one
    /// on each site over wan).
    #[arg(long, value_delimiter = ',', default_value = "netpipe,is,hpcc,imb")]
    pub programs: Vec<String>,
    /// Modes: off, trace, monitor, codec-adaptive, codec-fixed:CODEC (codec modes run on
    /// wan only).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "off,trace,monitor,codec-adaptive,codec-fixed:lz4"
    )]
    pub modes: Vec<String>,
    /// Networks: local (one machine's shared memory), tcp (one machine, TCP on
    /// loopback), wan (two emulated sites; root).
    #[arg(long, value_delimiter = ',', default_value = "local,tcp,wan")]
    pub networks: Vec<String>,
    /// Ranks of IS and HPCC (half on each site); NetPIPE runs two.
    #[arg(long, default_value_t = 4)]
    pub ranks: usize,
    /// The link between the sites, as tc tbf takes rates.
    #[arg(long, default_value = "100mbit")]
    pub link: String,
    /// Rounds: every mode of every program once per round; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Smaller problems (a check of the harness, not a measurement).
    #[arg(long)]
    pub quick: bool,
    /// imb: also time this many pairs of blocks within each run, one recorded and one
    /// paused with MPI_Pcontrol (0: no pairs).
    #[arg(long, default_value_t = 0)]
    pub pcontrol_pairs: usize,
    /// Seconds one run may take.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Where the records go (default bench/results/mpi-shim.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One (program, network, mode): the fields and the runs behind the median.
#[derive(Debug, Clone, Serialize)]
pub struct ShimRecord {
    pub benchmark: String,
    pub program: String,
    pub ranks: usize,
    pub sites: usize,
    pub link: String,
    pub mode: String,
    /// Median over rounds of the program's own time.
    pub seconds: f64,
    /// Against mode off on the same network; positive is slower.
    pub overhead_pct: Option<f64>,
    /// Median over rounds of the bytes both directions of the link carried (wan only).
    pub bytes_between_sites: Option<u64>,
    pub times_s: Vec<f64>,
    /// What the program's time is.
    pub measure: String,
    /// The program's own check passed and its result equals the one without the library.
    pub verified: bool,
    /// The library's summary line (compression modes), from the last round.
    pub summary: Option<String>,
    /// Median over rounds of the round's time against mode off's in the same round,
    /// in percent, and the range over rounds.
    pub paired_overhead_pct: Option<f64>,
    pub paired_range_pct: Option<[f64; 2]>,
    /// Recorded against paused blocks within runs (`--pcontrol-pairs`).
    pub pcontrol: Option<PcontrolPairs>,
}

/// Pairs of blocks of one run, one recorded and one paused by `MPI_Pcontrol`, over all
/// rounds: the median of the pairs' ratios of recorded to paused time, in percent above
/// 1, and the 95 % confidence interval of that median (order statistics).
#[derive(Debug, Clone, Serialize)]
pub struct PcontrolPairs {
    pub pairs: usize,
    pub median_pct: f64,
    pub ci95_pct: [f64; 2],
}

impl PcontrolPairs {
    fn of(ratios: &[f64]) -> Option<PcontrolPairs> {
        let mut s = ratios.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        if n == 0 {
            return None;
        }
        // The median's 95 % interval runs between the order statistics n/2 ∓ 0.98·√n
        // (the binomial's normal approximation).
        let half = 0.98 * (n as f64).sqrt();
        let lo = ((n as f64 / 2.0 - half).floor().max(0.0) as usize).min(n - 1);
        let hi = ((n as f64 / 2.0 + half).ceil() as usize).min(n - 1);
        let pct = |r: f64| (r - 1.0) * 100.0;
        Some(PcontrolPairs {
            pairs: n,
            median_pct: pct(crate::tree::median(&s)),
            ci95_pct: [pct(s[lo]), pct(s[hi])],
        })
    }
}

/// A program's figures from one run: kernel name to seconds, and what must match mode
/// off's (a checksum, or the verdicts).
struct Outcome {
    times: Vec<(String, f64)>,
    /// Kernel to its recorded/paused ratios (`--pcontrol-pairs`).
    pairs: Vec<(String, Vec<f64>)>,
    result: String,
    passed: bool,
}

/// The programs and the inputs they need, in one scratch directory.
struct Programs {
    dir: PathBuf,
    is_exchange: Option<PathBuf>,
    imb_loops: Option<PathBuf>,
}

/// Builds one of bench/mpi's C programs with Open MPI's mpicc.
fn build_c(dir: &Path, name: &str) -> Result<PathBuf> {
    let exe = dir.join(name);
    let out = Command::new("mpicc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(repo_file(&format!("bench/mpi/{name}.c"))?)
        .output()
        .context("running mpicc (apt-get install libopenmpi-dev)")?;
    ensure!(
        out.status.success(),
        "mpicc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(exe)
}

/// HPCC's input, with the problem size, block size and process grid to fill in (shared
/// with vargr-mpi's HPCC test).
const HPCC_INPUT: &str = include_str!("../../../bench/mpi/hpccinf.txt.in");

fn repo_file(rel: &str) -> Result<PathBuf> {
    [
        PathBuf::from(rel),
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(rel),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .with_context(|| format!("{rel} not found (run from the repository root)"))
}

fn need(program: &str, package: &str) -> Result<()> {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()));
    ensure!(found, "{program} not found: apt-get install {package}");
    Ok(())
}

impl Programs {
    fn prepare(a: &MpiShimArgs, dir: &Path) -> Result<Programs> {
        need("mpirun", "openmpi-bin libopenmpi-dev")?;
        let mut is_exchange = None;
        let mut imb_loops = None;
        for p in &a.programs {
            match p.as_str() {
                "netpipe" => need("NPopenmpi", "netpipe-openmpi")?,
                "hpcc" => need("hpcc", "hpcc")?,
                "is" => is_exchange = Some(build_c(dir, "is_exchange")?),
                "imb" => imb_loops = Some(build_c(dir, "imb_loops")?),
                other => bail!("program {other:?}: netpipe, is, hpcc or imb"),
            }
        }
        Ok(Programs {
            dir: dir.to_path_buf(),
            is_exchange,
            imb_loops,
        })
    }

    /// The program's command line, and how many ranks it runs.
    fn command(
        &self,
        program: &str,
        a: &MpiShimArgs,
        network: &str,
        run_dir: &Path,
    ) -> Result<(Vec<String>, usize)> {
        let wan = network == "wan";
        Ok(match program {
            "netpipe" => {
                // Between sites, the large messages compression is for; on one machine,
                // the small ones whose latency shows what the library's calls cost.
                let (lower, upper, repeats) = match (wan, a.quick) {
                    (true, false) => ("65536", "4194304", "10"),
                    (true, true) => ("65536", "262144", "10"),
                    (false, false) => ("1", "4096", "5000"),
                    (false, true) => ("1", "4096", "200"),
                };
                let out = run_dir.join("np.out");
                (
                    vec![
                        "NPopenmpi".into(),
                        "-l".into(),
                        lower.into(),
                        "-u".into(),
                        upper.into(),
                        "-n".into(),
                        repeats.into(),
                        "-p".into(),
                        "0".into(),
                        "-o".into(),
                        out.display().to_string(),
                    ],
                    2,
                )
            }
            "is" => {
                let keys = if a.quick { "18" } else { "22" };
                let exe = self.is_exchange.as_ref().context("is_exchange not built")?;
                (
                    vec![
                        exe.display().to_string(),
                        keys.into(),
                        "19".into(),
                        "5".into(),
                    ],
                    a.ranks,
                )
            }
            "hpcc" => {
                let n = if a.quick { "600" } else { "2000" };
                // One row of processes: on a square grid between two sites, PTRANS
                // times a rank whose own blocks stay put, so its time misses the
                // crossing (docs/benchmarks.md); on one row every repetition has it.
                let input = HPCC_INPUT
                    .replace("@N@", n)
                    .replace("@NB@", "80")
                    .replace("@P@", "1")
                    .replace("@Q@", &a.ranks.to_string());
                std::fs::write(run_dir.join("hpccinf.txt"), input)?;
                (vec!["hpcc".into()], a.ranks)
            }
            "imb" => {
                // About a second per loop on each network.
                let iters = match (network, a.quick) {
                    (_, true) => "2000",
                    ("local", false) => "1000000",
                    ("wan", false) => "30000",
                    _ => "100000",
                };
                let exe = self.imb_loops.as_ref().context("imb_loops not built")?;
                (
                    vec![
                        exe.display().to_string(),
                        iters.into(),
                        "8".into(),
                        a.pcontrol_pairs.to_string(),
                    ],
                    2,
                )
            }
            other => bail!("program {other:?}"),
        })
    }
}

/// Reads a program's figures from its output (and files in its run directory).
fn outcome(program: &str, wan: bool, stdout: &str, run_dir: &Path) -> Result<Outcome> {
    match program {
        "netpipe" => {
            // np.out: one line per message size: bytes, Mbit/s, seconds one way.
            let out = std::fs::read_to_string(run_dir.join("np.out"))
                .context("NetPIPE wrote no np.out")?;
            let mut total = 0.0;
            let mut sizes = 0;
            for l in out.lines().filter(|l| !l.trim().is_empty()) {
                let seconds: f64 = l
                    .split_whitespace()
                    .nth(2)
                    .and_then(|t| t.parse().ok())
                    .with_context(|| format!("np.out line {l:?}"))?;
                total += seconds;
                sizes += 1;
            }
            ensure!(sizes > 0, "np.out holds no results");
            Ok(Outcome {
                times: vec![(if wan { "netpipe" } else { "netpipe-small" }.into(), total)],
                pairs: Vec::new(),
                result: format!("{sizes} sizes"),
                passed: true,
            })
        }
        "is" => {
            let l = stdout
                .lines()
                .find(|l| l.starts_with("IS "))
                .with_context(|| format!("no IS line in:\n{stdout}"))?;
            let field = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
                    .map(str::to_string)
                    .with_context(|| format!("{k} missing in {l:?}"))
            };
            let per: f64 = field("seconds_per_iteration")?.parse()?;
            let iters: f64 = field("iterations")?.parse()?;
            Ok(Outcome {
                times: vec![("is".into(), per * iters)],
                pairs: Vec::new(),
                result: field("checksum")?,
                passed: field("verification")? == "SUCCESSFUL",
            })
        }
        "hpcc" => {
            let out = std::fs::read_to_string(run_dir.join("hpccoutf.txt"))
                .context("hpcc wrote no hpccoutf.txt")?;
            // The summary's key=value lines, the last run's.
            let summary = out
                .rsplit_once("Begin of Summary section.")
                .map(|(_, s)| s)
                .context("no summary in hpccoutf.txt")?;
            let kv: BTreeMap<&str, &str> = summary
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.trim(), v.trim()))
                .collect();
            let num = |k: &str| -> Result<f64> {
                kv.get(k)
                    .with_context(|| format!("{k} missing in hpcc's summary"))?
                    .parse::<f64>()
                    .with_context(|| format!("{k} in hpcc's summary"))
            };
            let fft: f64 = (0..7)
                .map(|i| num(&format!("MPIFFT_time{i}")))
                .sum::<Result<f64>>()?;
            // HPCC verifies its own kernels; every verdict is compared with mode off's.
            // PTRANS prints a CPU-time row beside each wall-time row only when the CPU
            // time rounds to more than zero, so those rows come and go between runs.
            let verdicts: Vec<&str> = out
                .lines()
                .filter(|l| !l.starts_with("CPU "))
                .filter(|l| l.contains("PASSED") || l.contains("FAILED"))
                .map(|l| if l.contains("FAILED") { "F" } else { "P" })
                .collect();
            let passed = num("Success")? == 1.0
                && !verdicts.contains(&"F")
                && num("MPIRandomAccess_Errors")? == 0.0
                && num("MPIFFT_maxErr")? < 1e-10;
            Ok(Outcome {
                times: vec![
                    ("hpcc-hpl".into(), num("HPL_time")?),
                    ("hpcc-ptrans".into(), num("PTRANS_time")?),
                    ("hpcc-randomaccess".into(), num("MPIRandomAccess_time")?),
                    ("hpcc-fft".into(), fft),
                ],
                pairs: Vec::new(),
                result: verdicts.concat(),
                passed,
            })
        }
        "imb" => {
            // Lines "PingPong 8 B: T us", "Allreduce 8 B: T us", "Barrier: T us", "Test: T us",
            // "check: N".
            let value = |prefix: &str| -> Result<f64> {
                let l = stdout
                    .lines()
                    .find(|l| l.starts_with(prefix))
                    .with_context(|| format!("no {prefix} line in:\n{stdout}"))?;
                let us: f64 = l
                    .rsplit(':')
                    .next()
                    .and_then(|v| v.trim().strip_suffix(" us"))
                    .and_then(|v| v.parse().ok())
                    .with_context(|| format!("line {l:?}"))?;
                Ok(us / 1e6)
            };
            let check = stdout
                .lines()
                .find_map(|l| l.strip_prefix("check: "))
                .context("no check line")?;
            // With pairs: "PingPong recorded/paused: R R ...", one ratio per pair.
            let mut pairs = Vec::new();
            for (name, kernel) in [
                ("PingPong", "imb-pingpong"),
                ("Allreduce", "imb-allreduce"),
                ("Barrier", "imb-barrier"),
                ("Test", "imb-test"),
            ] {
                let prefix = format!("{name} recorded/paused:");
                if let Some(l) = stdout.lines().find_map(|l| l.strip_prefix(&prefix)) {
                    let ratios = l
                        .split_whitespace()
                        .map(str::parse)
                        .collect::<Result<Vec<f64>, _>>()
                        .with_context(|| format!("{name}'s ratios {l:?}"))?;
                    pairs.push((kernel.to_string(), ratios));
                }
            }
            Ok(Outcome {
                times: vec![
                    ("imb-pingpong".into(), value("PingPong")?),
                    ("imb-allreduce".into(), value("Allreduce")?),
                    ("imb-barrier".into(), value("Barrier")?),
                    ("imb-test".into(), value("Test")?),
                ],
                pairs,
                result: check.to_string(),
                passed: true,
            })
        }
        other => bail!("program {other:?}"),
    }
}

/// The two emulated sites, taken down however the benchmark ends.
struct Sites {
    script: PathBuf,
}

impl Sites {
    fn up(link: &str) -> Result<Sites> {
        let script = repo_file("bench/mpi/sites.sh")?;
        let _ = Command::new(&script).arg("down").status();
        let out = Command::new(&script)
            .args(["up", link])
            .output()
            .context("running bench/mpi/sites.sh")?;
        let sites = Sites { script };
        ensure!(
            out.status.success(),
            "bench/mpi/sites.sh up failed (it needs root, ip and tc): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(sites)
    }

    /// Bytes the link carried so far, both directions.
    fn bytes(&self) -> Result<u64> {
        let out = Command::new(&self.script).arg("bytes").output()?;
        ensure!(out.status.success(), "bench/mpi/sites.sh bytes failed");
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum())
    }
}

impl Drop for Sites {
    fn drop(&mut self) {
        let _ = Command::new(&self.script).arg("down").status();
    }
}

/// The whole command of one run: the launcher (under `vargr mpi-run` unless off), the
/// placement on the network, and the program.
fn launch(
    vargr: &Path,
    mode: &str,
    network: &str,
    prog: &[String],
    ranks: usize,
    run_dir: &Path,
) -> Result<Command> {
    let wan = network == "wan";
    let mut cmd = if mode == "off" {
        Command::new("mpirun")
    } else {
        let mut c = Command::new(vargr);
        c.arg("mpi-run");
        match mode {
            "trace" => {
                c.arg("--trace").arg(run_dir.join("trace"));
            }
            "monitor" => {
                c.args(["--monitor", "load-balance", "--status"])
                    .arg(run_dir.join("status.json"));
            }
            m => {
                let codec = m
                    .strip_prefix("codec-")
                    .with_context(|| format!("mode {m:?}: off, trace or codec-MODE"))?;
                c.args(["--codec", codec, "--sites", "blocks:2"]);
            }
        }
        c.args(["--", "mpirun"]);
        c
    };
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
    ]);
    // More ranks than cores: waiting ranks yield instead of spinning. Not otherwise: a
    // rank that yields at every poll runs HPCC's RandomAccess five times as slowly, and
    // hides what each poll costs.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if ranks > cores {
        cmd.args(["--mca", "mpi_yield_when_idle", "1"]);
    }
    cmd.env_remove("LD_PRELOAD").env_remove("VARGR_JOB");
    if wan {
        // PMIx and mpirun's own traffic go over the sites' control links to the root
        // namespace; the ranks' messages over the shaped link only.
        cmd.env("PMIX_MCA_ptl_tcp_remote_connections", "1")
            .env("PMIX_MCA_ptl_tcp_if_include", "10.78.0.0/16")
            .env("OMPI_MCA_oob_tcp_if_include", "10.78.0.0/16")
            .args(["--mca", "btl", "tcp,self"])
            .args(["--mca", "btl_tcp_if_include", "10.77.0.0/24"]);
        let half = ranks / 2;
        for (i, site) in ["vargr-site-a", "vargr-site-b"].into_iter().enumerate() {
            if i == 1 {
                cmd.arg(":");
            }
            let n = if i == 0 { half } else { ranks - half };
            cmd.args(["-n", &n.to_string(), "ip", "netns", "exec", site]);
            cmd.args(prog);
        }
    } else {
        if network == "tcp" {
            cmd.args(["--mca", "btl", "tcp,self"]);
        }
        cmd.args(["-n", &ranks.to_string()]).args(prog);
    }
    Ok(cmd)
}

fn measure_of(program: &str) -> &'static str {
    match program {
        "netpipe" => "sum over message sizes (64 KiB to 4 MiB, doubling and between) of NetPIPE's one-way time",
        "netpipe-small" => "sum over message sizes (1 B to 4 KiB) of NetPIPE's one-way time",
        "is" => "the slowest rank's time over the timed iterations (a barrier, then bucket, Alltoall, Alltoallv, local sort)",
        "hpcc-hpl" => "HPCC's HPL_time",
        "hpcc-ptrans" => "HPCC's PTRANS_time (on a 1 x RANKS grid)",
        "hpcc-randomaccess" => "HPCC's MPIRandomAccess_time",
        "hpcc-fft" => "HPCC's MPIFFT phases (MPIFFT_time0..6) summed",
        "imb-pingpong" => "half the round trip of an 8-byte PingPong between 2 ranks (IMB's t)",
        "imb-allreduce" => "the slowest rank's mean time per Allreduce of one double (IMB's t_max)",
        "imb-barrier" => "the slowest rank's mean time per Barrier (IMB's t_max)",
        "imb-test" => "rank 0's mean time per unsuccessful MPI_Test of a receive nothing matches",
        _ => "",
    }
}

pub fn run(a: MpiShimArgs, programs: &crate::Programs) -> Result<()> {
    ensure!(a.runs >= 1, "--runs must be at least 1");
    ensure!(
        a.ranks >= 2 && a.ranks.is_multiple_of(2),
        "--ranks: an even number, 2 or more"
    );
    for n in &a.networks {
        ensure!(
            ["local", "tcp", "wan"].contains(&n.as_str()),
            "network {n:?}: local, tcp or wan"
        );
    }
    for m in &a.modes {
        ensure!(
            ["off", "trace", "monitor"].contains(&m.as_str()) || m.starts_with("codec-"),
            "mode {m:?}: off, trace, monitor, codec-adaptive or codec-fixed:CODEC"
        );
    }
    let vargr = programs.vargr()?.to_path_buf();
    let dir = std::env::temp_dir().join(format!("vargr-bench-mpi-shim-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let _cleanup = crate::io::scopeguard(&dir);
    let progs = Programs::prepare(&a, &dir)?;
    let timeout = Duration::from_secs(a.timeout);
    let mut records = Vec::new();
    for network in &a.networks {
        let wan = network == "wan";
        let sites = if wan { Some(Sites::up(&a.link)?) } else { None };
        let modes: Vec<&String> = a
            .modes
            .iter()
            .filter(|m| wan || !m.starts_with("codec-"))
            .collect();
        let net_programs: Vec<&String> = a.programs.iter().collect();
        // (program, mode) -> rows of (kernel, seconds, bytes), one per round.
        type Runs = Vec<(Outcome, u64, Option<String>)>;
        let mut runs: BTreeMap<(String, String), Runs> = BTreeMap::new();
        let total = a.runs * net_programs.len() * modes.len();
        let mut step = 0;
        for round in 0..a.runs {
            for &program in &net_programs {
                for mode in &modes {
                    step += 1;
                    let run_dir = progs
                        .dir
                        .join(format!("{network}-{program}-{round}-{mode}"));
                    std::fs::create_dir_all(&run_dir)?;
                    let (prog, ranks) = progs.command(program, &a, network, &run_dir)?;
                    let mut cmd = launch(&vargr, mode, network, &prog, ranks, &run_dir)?;
                    cmd.current_dir(&run_dir);
                    let before = match &sites {
                        Some(s) => s.bytes()?,
                        None => 0,
                    };
                    let (stdout, stderr) = crate::coll::run_with_timeout_both(cmd, timeout)
                        .with_context(|| format!("{program} ({mode}, {network})"))?;
                    let bytes = match &sites {
                        Some(s) => s.bytes()? - before,
                        None => 0,
                    };
                    let o = outcome(program, wan, &stdout, &run_dir)
                        .with_context(|| format!("{program} ({mode}, {network})"))?;
                    let summary = stderr
                        .lines()
                        .find(|l| l.starts_with("vargr-mpi: compression "))
                        .map(str::to_string);
                    eprintln!(
                        "[{step}/{total}] {network} {program} {mode}: {}{}",
                        o.times
                            .iter()
                            .map(|(k, s)| format!("{k} {}", time_cell(*s)))
                            .collect::<Vec<_>>()
                            .join(", "),
                        if wan {
                            format!(", {bytes} B between sites")
                        } else {
                            String::new()
                        }
                    );
                    let _ = std::fs::remove_dir_all(&run_dir);
                    runs.entry((program.clone(), mode.to_string()))
                        .or_default()
                        .push((o, bytes, summary));
                }
            }
        }
        for &program in &net_programs {
            let off_runs = runs.get(&(program.clone(), "off".into()));
            let reference = off_runs.and_then(|r| r.first()).map(|r| r.0.result.clone());
            for mode in &modes {
                let Some(rs) = runs.get(&(program.clone(), mode.to_string())) else {
                    continue;
                };
                let kernels: Vec<String> = rs[0].0.times.iter().map(|(k, _)| k.clone()).collect();
                let verified = rs
                    .iter()
                    .all(|r| r.0.passed && reference.as_ref().is_none_or(|x| *x == r.0.result));
                let bytes: Vec<f64> = rs.iter().map(|r| r.1 as f64).collect();
                for (i, kernel) in kernels.iter().enumerate() {
                    let times_s: Vec<f64> = rs.iter().map(|r| r.0.times[i].1).collect();
                    let seconds = crate::tree::median(&times_s);
                    let off_times: Option<Vec<f64>> =
                        off_runs.map(|o| o.iter().map(|r| r.0.times[i].1).collect());
                    let off_seconds = off_times.as_deref().map(crate::tree::median);
                    let round_pct: Vec<f64> = off_times
                        .iter()
                        .flat_map(|o| times_s.iter().zip(o))
                        .map(|(t, o)| (t / o - 1.0) * 100.0)
                        .collect();
                    let ratios: Vec<f64> = rs
                        .iter()
                        .flat_map(|r| &r.0.pairs)
                        .filter(|(k, _)| k == kernel)
                        .flat_map(|(_, v)| v.iter().copied())
                        .collect();
                    records.push(ShimRecord {
                        benchmark: "mpi-shim".into(),
                        program: kernel.clone(),
                        ranks: if ["netpipe", "imb"].contains(&program.as_str()) {
                            2
                        } else {
                            a.ranks
                        },
                        sites: if wan { 2 } else { 1 },
                        link: match network.as_str() {
                            "wan" => a.link.clone(),
                            "tcp" => "TCP on loopback".into(),
                            _ => "shared memory".into(),
                        },
                        mode: mode.to_string(),
                        seconds,
                        overhead_pct: off_seconds.map(|off| (seconds / off - 1.0) * 100.0),
                        bytes_between_sites: wan.then(|| crate::tree::median(&bytes) as u64),
                        times_s,
                        measure: measure_of(kernel).into(),
                        verified,
                        summary: rs.last().and_then(|r| r.2.clone()),
                        paired_overhead_pct: (!round_pct.is_empty())
                            .then(|| crate::tree::median(&round_pct)),
                        paired_range_pct: (!round_pct.is_empty()).then(|| {
                            [
                                round_pct.iter().copied().fold(f64::INFINITY, f64::min),
                                round_pct.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                            ]
                        }),
                        pcontrol: PcontrolPairs::of(&ratios),
                    });
                }
            }
        }
        drop(sites);
    }
    print_table(&records);
    crate::tree::write_records(a.json.as_deref(), "mpi-shim.json", &records)?;
    ensure!(
        records.iter().all(|r| r.verified),
        "some runs failed their checks or differ from mode off (see `verified`)"
    );
    Ok(())
}

/// Seconds, in the unit that keeps a few digits (the loops' times per call are µs).
fn time_cell(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.4} µs", s * 1e6)
    } else {
        format!("{s:.4} s")
    }
}

fn print_table(records: &[ShimRecord]) {
    println!(
        "{:<18} {:<16} {:<20} {:>12} {:>9} {:>22} {:>26} {:>14} {:>8}",
        "program",
        "link",
        "mode",
        "time",
        "overhead",
        "per round [range]",
        "recorded/paused [95% CI]",
        "between_sites",
        "verified"
    );
    for r in records {
        println!(
            "{:<18} {:<16} {:<20} {:>12} {:>9} {:>22} {:>26} {:>14} {:>8}",
            r.program,
            r.link,
            r.mode,
            time_cell(r.seconds),
            r.overhead_pct.map_or("-".into(), |p| format!("{p:+.1}%")),
            match (r.paired_overhead_pct, r.paired_range_pct) {
                (Some(p), Some([lo, hi])) => format!("{p:+.1}% [{lo:+.0}, {hi:+.0}]"),
                _ => "-".into(),
            },
            r.pcontrol.as_ref().map_or("-".into(), |p| format!(
                "{:+.1}% [{:+.1}, {:+.1}] ({})",
                p.median_pct, p.ci95_pct[0], p.ci95_pct[1], p.pairs
            )),
            r.bytes_between_sites.map_or("-".into(), |b| b.to_string()),
            r.verified
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcontrol_pairs_give_the_median_and_its_order_statistic_interval() {
        // 1.00, 1.01, ..., 1.24: median 1.12; n = 25, 12.5 -/+ 4.9 -> indices 7 and 18.
        let ratios: Vec<f64> = (0..25).rev().map(|i| 1.0 + i as f64 / 100.0).collect();
        let p = PcontrolPairs::of(&ratios).unwrap();
        assert_eq!(p.pairs, 25);
        assert!((p.median_pct - 12.0).abs() < 1e-9, "{p:?}");
        assert!((p.ci95_pct[0] - 7.0).abs() < 1e-9, "{p:?}");
        assert!((p.ci95_pct[1] - 18.0).abs() < 1e-9, "{p:?}");
        assert!(PcontrolPairs::of(&[]).is_none());
    }
}
