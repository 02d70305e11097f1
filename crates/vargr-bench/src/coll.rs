//! `vargr bench coll`: collective latency of vargr against Open MPI, in one run.
//!
//! A number for vargr means little alone; this command measures, for each (op, bytes,
//! ranks), four configurations with the same iteration counts and the same timing loop
//! (`coll_rank.rs` for vargr, `bench/mpi/coll_bench.c` for MPI): vargr with ranks as
//! processes (through shared memory, as a job on one host runs by default), the same
//! over their Unix sockets (`VARGR_SHM=false`), vargr with all ranks as threads of one
//! process, Open MPI over TCP and Open MPI over shared memory (`btl vader,self`). It also runs the seed's Gsum (20,000 allreduces of one f64) and
//! Compute-gsum (the same with fixed computation between calls). Records go to JSON, a
//! table to stdout, one progress line per run to stderr.
//!
//! The headline is what IMB and OSU report: the mean time per call of the slowest rank
//! (each rank's elapsed time for the timed loop over the number of calls, the maximum
//! over ranks; `per_call_us`). The median over calls of the slowest rank's time is kept
//! beside it (`median_us`): on oversubscribed cores it flatters whichever system waits
//! longest in the kernel, so it is not the comparison.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use crate::coll_rank::{spin, BenchOp, RankResult};
use crate::tree::percentile;
use crate::Programs;

#[derive(Args, Clone)]
pub struct CollBenchArgs {
    /// Rank counts.
    #[arg(long, value_delimiter = ',', default_values_t = [4usize, 16, 64])]
    ranks: Vec<usize>,
    /// Message sizes in bytes for allreduce and bcast (multiples of 8).
    #[arg(long, value_delimiter = ',', default_values_t = [8usize, 65536, 1048576])]
    bytes: Vec<usize>,
    /// Operations: allreduce, bcast, gsum, compute-gsum.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "allreduce,bcast,gsum,compute-gsum"
    )]
    ops: Vec<String>,
    /// Timed calls per allreduce/bcast run (default: 1000 for small messages, fewer for
    /// large ones and for many ranks; see `default_iters`).
    #[arg(long)]
    iters: Option<usize>,
    /// Allreduces per gsum and compute-gsum run (default: the seed's 20,000 up to 4 ranks,
    /// then fewer in proportion to the ranks; see `default_gsum_calls`).
    #[arg(long)]
    gsum_calls: Option<usize>,
    /// Computation before each compute-gsum allreduce, in microseconds of this machine's
    /// time for the spin kernel (calibrated once, then the same step count on both sides).
    #[arg(long, default_value_t = 20.0)]
    compute_us: f64,
    /// Also run gsum and compute-gsum summed as the seed's sum wrappers do, a reduce to
    /// rank 0 then a bcast in each of these shapes, on vargr's three configurations:
    /// `flat,kary:4` is PATHS's flat against hierarchical global sum (its figure 6).
    #[arg(long, value_delimiter = ',', value_name = "flat|kary:K")]
    gsum_shapes: Vec<String>,
    /// Measure vargr only.
    #[arg(long)]
    no_mpi: bool,
    /// Seconds one run may take before it is killed and reported as failed.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Write the records as JSON here (default bench/results/coll.json).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The configurations compared in every row.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    VargrProcesses,
    VargrSockets,
    VargrThreads,
    OmpiTcp,
    OmpiShm,
}

impl Variant {
    const ALL: [Variant; 5] = [
        Variant::VargrProcesses,
        Variant::VargrSockets,
        Variant::VargrThreads,
        Variant::OmpiTcp,
        Variant::OmpiShm,
    ];
    fn system(self) -> &'static str {
        match self {
            Variant::VargrProcesses | Variant::VargrSockets | Variant::VargrThreads => "vargr",
            _ => "openmpi",
        }
    }
    fn transport(self) -> &'static str {
        match self {
            Variant::VargrProcesses => "processes",
            Variant::VargrSockets => "sockets",
            Variant::VargrThreads => "threads",
            Variant::OmpiTcp => "tcp",
            Variant::OmpiShm => "shm",
        }
    }
    fn is_mpi(self) -> bool {
        self.system() == "openmpi"
    }
}

#[derive(Serialize, Debug, Clone)]
struct Record {
    benchmark: String,
    op: String,
    /// Gsum summed as reduce + bcast in this shape (`--gsum-shapes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    shape: Option<String>,
    bytes: usize,
    ranks: usize,
    ranks_per_process: usize,
    algorithm: String,
    system: String,
    transport: String,
    iters: usize,
    warmup: usize,
    median_us: f64,
    p90_us: f64,
    p99_us: f64,
    mean_us: f64,
    min_us: f64,
    /// The slowest rank's time for the whole timed loop.
    total_s: f64,
    /// `total_s` over the calls: the headline (IMB's t_max, OSU's average latency).
    per_call_us: f64,
    /// What `per_call_us` is, for readers of the JSON.
    statistic: &'static str,
    compute_iters: Option<u64>,
    compute_us: Option<f64>,
    /// Wall time of the whole run, start-up and shutdown included.
    wall_s: f64,
    cores: usize,
}

/// One (op, bytes, ranks) row of the comparison.
#[derive(Clone, PartialEq, Eq)]
struct Case {
    op: BenchOp,
    bytes: usize,
    ranks: usize,
    iters: usize,
    /// Gsum as reduce + bcast in this shape (`--gsum-shapes`); vargr only.
    shape: Option<String>,
}

impl Case {
    /// The op as the table names it: `gsum/flat` for a shaped gsum.
    fn label(&self) -> String {
        match &self.shape {
            Some(s) => format!("{}/{s}", self.op.name()),
            None => self.op.name().to_string(),
        }
    }
}

/// Whether `v` measures `case`: shaped gsums are vargr's own (MPI has no such switch).
fn runs(case: &Case, v: Variant) -> bool {
    case.shape.is_none() || !v.is_mpi()
}

/// Iterations when `--iters` is not given: 1000 small calls, fewer for large messages and
/// many ranks, so that the default run stays within minutes on a 2-core machine where
/// 64 ranks share two CPUs.
fn default_iters(bytes: usize, ranks: usize) -> usize {
    let base = match bytes {
        0..=8192 => 1000,
        8193..=131072 => 300,
        _ => 100,
    };
    match ranks {
        0..=16 => base,
        17..=32 => base / 2,
        _ => base / 5,
    }
    .max(10)
}

/// Gsum calls when `--gsum-calls` is not given. With all ranks sharing two cores a call
/// costs about in proportion to the ranks, so this keeps each run to seconds.
fn default_gsum_calls(ranks: usize) -> usize {
    if ranks <= 4 {
        20_000
    } else {
        (80_000 / ranks).max(1000)
    }
}

fn warmup_for(iters: usize) -> usize {
    (iters / 10).clamp(2, 50)
}

/// Spin-kernel steps that take `us` microseconds here (the fastest of a few tries, so
/// that a busy machine does not inflate it).
pub(crate) fn calibrate_spin(us: f64) -> (u64, f64) {
    const PROBE: u64 = 200_000;
    let best = (0..5)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(spin(std::hint::black_box(PROBE), 0.5));
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    let per_step_us = best * 1e6 / PROBE as f64;
    let steps = (us / per_step_us).round().max(1.0) as u64;
    (steps, steps as f64 * per_step_us)
}

/// The MPI program, built by mpicc; None (after a warning) when MPI is missing.
struct Mpi {
    bin: PathBuf,
    dir: PathBuf,
}

impl Drop for Mpi {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn mpi_source() -> Option<PathBuf> {
    // From the repository root (how the command is meant to run), else from the source
    // tree this binary was built from.
    let here = Path::new("bench/mpi/coll_bench.c");
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/mpi/coll_bench.c");
    [here.to_path_buf(), built]
        .into_iter()
        .find(|p| p.is_file())
}

fn tool_present(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn build_mpi() -> Result<Mpi> {
    for tool in ["mpicc", "mpirun"] {
        if !tool_present(tool) {
            bail!("`{tool}` was not found on PATH (install Open MPI: openmpi-bin, libopenmpi-dev)");
        }
    }
    let src = mpi_source().context(
        "bench/mpi/coll_bench.c not found (run from the repository root or rebuild vargr)",
    )?;
    let dir = std::env::temp_dir().join(format!("vargr-bench-coll-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mpi = Mpi {
        bin: dir.join("coll_bench"),
        dir,
    };
    // No FP contraction: the spin kernel must do the same arithmetic as the Rust one.
    let out = Command::new("mpicc")
        .args(["-O2", "-ffp-contract=off", "-o"])
        .arg(&mpi.bin)
        .arg(&src)
        .output()
        .context("running mpicc")?;
    if !out.status.success() {
        bail!(
            "mpicc failed on {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(mpi)
}

pub fn run(a: CollBenchArgs, programs: &Programs) -> Result<()> {
    let ops = a
        .ops
        .iter()
        .map(|s| BenchOp::parse(s))
        .collect::<Result<Vec<_>>>()?;
    if let Some(b) = a.bytes.iter().find(|b| **b < 8 || !b.is_multiple_of(8)) {
        bail!("--bytes {b} is not a positive multiple of 8 (buffers hold f64s)");
    }
    if let Some(r) = a.ranks.iter().find(|r| **r == 0) {
        bail!("--ranks {r}: a job needs at least one rank");
    }
    if a.iters == Some(0) || a.gsum_calls == Some(0) {
        bail!("--iters and --gsum-calls must be at least 1");
    }
    if !(a.compute_us.is_finite() && a.compute_us > 0.0) {
        bail!(
            "--compute-us {} must be a positive number of microseconds",
            a.compute_us
        );
    }
    for s in &a.gsum_shapes {
        let alg: vargr_coll::Algorithm = s.parse().with_context(|| format!("--gsum-shapes {s}"))?;
        if !(alg.supports(vargr_coll::CollKind::Reduce)
            && alg.supports(vargr_coll::CollKind::Bcast))
        {
            bail!("--gsum-shapes {s}: not a shape of both reduce and bcast (flat, kary:K)");
        }
    }
    let mpi = if a.no_mpi {
        None
    } else {
        match build_mpi() {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("vargr: warning: measuring vargr only: {e:#}");
                None
            }
        }
    };
    let (compute_iters, compute_us) = calibrate_spin(a.compute_us);
    if ops.contains(&BenchOp::ComputeGsum) {
        eprintln!(
            "compute-gsum: {compute_iters} spin steps per iteration (≈{compute_us:.1} µs here)"
        );
    }

    let mut cases = Vec::new();
    for &op in &ops {
        for &ranks in &a.ranks {
            match op {
                BenchOp::Allreduce | BenchOp::Bcast => {
                    for &bytes in &a.bytes {
                        let iters = a.iters.unwrap_or_else(|| default_iters(bytes, ranks));
                        cases.push(Case {
                            op,
                            bytes,
                            ranks,
                            iters,
                            shape: None,
                        });
                    }
                }
                BenchOp::Gsum | BenchOp::ComputeGsum => {
                    let shapes = std::iter::once(None).chain(a.gsum_shapes.iter().map(Some));
                    for shape in shapes {
                        cases.push(Case {
                            op,
                            bytes: 8,
                            ranks,
                            iters: a.gsum_calls.unwrap_or_else(|| default_gsum_calls(ranks)),
                            shape: shape.cloned(),
                        });
                    }
                }
            }
        }
    }
    let variants: Vec<Variant> = Variant::ALL
        .into_iter()
        .filter(|v| !v.is_mpi() || mpi.is_some())
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let timeout = Duration::from_secs(a.timeout.max(1));
    let mut records = Vec::new();
    let mut failures = Vec::new();
    let mut done = 0;
    let total: usize = cases
        .iter()
        .map(|c| variants.iter().filter(|v| runs(c, **v)).count())
        .sum();
    for case in &cases {
        for &v in variants.iter().filter(|v| runs(case, **v)) {
            done += 1;
            let what = format!(
                "{} {} B, {} ranks, {} {}",
                case.label(),
                case.bytes,
                case.ranks,
                v.system(),
                v.transport()
            );
            let mpi_bin = mpi.as_ref().map(|m| m.bin.as_path());
            match run_one(programs, mpi_bin, v, case, compute_iters, timeout) {
                Ok(mut rec) => {
                    if case.op == BenchOp::ComputeGsum {
                        rec.compute_iters = Some(compute_iters);
                        rec.compute_us = Some(compute_us);
                    }
                    rec.cores = cores;
                    eprintln!(
                        "[{done}/{total}] {what} ({}): mean {:.1} µs per call, median {:.1} µs, \
                         p90 {:.1} µs, {} iters in {:.3} s (run {:.2} s)",
                        rec.algorithm,
                        rec.per_call_us,
                        rec.median_us,
                        rec.p90_us,
                        rec.iters,
                        rec.total_s,
                        rec.wall_s
                    );
                    records.push(rec);
                }
                Err(e) => {
                    eprintln!("[{done}/{total}] {what}: FAILED: {e:#}");
                    failures.push(format!("{what}: {e:#}"));
                }
            }
        }
    }

    print_table(&cases, &records);
    crate::tree::write_records(a.json.as_deref(), "coll.json", &records)?;
    if !failures.is_empty() {
        bail!(
            "{} of {total} runs failed:\n  {}",
            failures.len(),
            failures.join("\n  ")
        );
    }
    Ok(())
}

/// Starts one job and turns rank 0's `RESULT` line into a record.
fn run_one(
    programs: &Programs,
    mpi_bin: Option<&Path>,
    v: Variant,
    case: &Case,
    compute_iters: u64,
    timeout: Duration,
) -> Result<Record> {
    let n = case.ranks.to_string();
    let warmup = warmup_for(case.iters);
    let compute = if case.op == BenchOp::ComputeGsum {
        compute_iters
    } else {
        0
    };
    let mut cmd;
    if v.is_mpi() {
        let bin = mpi_bin.context("the MPI program was not built")?;
        let btl = if v == Variant::OmpiTcp {
            "tcp,self"
        } else {
            "vader,self"
        };
        cmd = Command::new("mpirun");
        // ob1 so that the btl choice holds (UCX would bypass it); no binding, as vargr
        // binds nothing either.
        cmd.args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
        ])
        .args(["--mca", "pml", "ob1", "--mca", "btl", btl, "-n", &n])
        .arg(bin)
        .arg(case.op.name())
        .arg(case.bytes.to_string())
        .arg(case.iters.to_string())
        .arg(warmup.to_string())
        .arg(compute.to_string())
        .env_remove("VARGR_JOB");
    } else {
        let per_process = if v == Variant::VargrThreads { &n } else { "1" };
        cmd = Command::new(programs.vargr()?);
        let shm = if v == Variant::VargrSockets {
            "false"
        } else {
            "true"
        };
        cmd.env("VARGR_SHM", shm)
            .args(["run", "-n", &n, "--ranks-per-process", per_process, "--"])
            .arg(programs.bench())
            .arg("coll-bench-rank")
            .args(["--op", case.op.name()])
            .args(["--bytes", &case.bytes.to_string()])
            .args(["--iters", &case.iters.to_string()])
            .args(["--warmup", &warmup.to_string()])
            .args(["--compute-iters", &compute.to_string()]);
        if let Some(shape) = &case.shape {
            cmd.args(["--shape", shape]);
        }
    }
    let t = Instant::now();
    let stdout = run_with_timeout(cmd, timeout)?;
    let wall_s = t.elapsed().as_secs_f64();
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .context("the job printed no RESULT line")?;
    let res: RankResult = serde_json::from_str(line).context("reading the RESULT line")?;
    if res.times_us.len() != case.iters {
        bail!(
            "the job timed {} calls, expected {}",
            res.times_us.len(),
            case.iters
        );
    }
    let mut sorted = res.times_us.clone();
    sorted.sort_by(f64::total_cmp);
    let algorithm = match v {
        Variant::OmpiTcp => "ompi-tcp".to_string(),
        Variant::OmpiShm => "ompi-shm".to_string(),
        _ => res.algorithm.unwrap_or_else(|| "?".into()),
    };
    Ok(Record {
        benchmark: "coll".into(),
        op: case.op.name().into(),
        shape: case.shape.clone(),
        bytes: case.bytes,
        ranks: case.ranks,
        ranks_per_process: if v == Variant::VargrThreads {
            case.ranks
        } else {
            1
        },
        algorithm,
        system: v.system().into(),
        transport: v.transport().into(),
        iters: res.iters,
        warmup,
        median_us: percentile(&sorted, 50.0),
        p90_us: percentile(&sorted, 90.0),
        p99_us: percentile(&sorted, 99.0),
        mean_us: sorted.iter().sum::<f64>() / sorted.len().max(1) as f64,
        min_us: sorted.first().copied().unwrap_or(f64::NAN),
        total_s: res.total_s,
        per_call_us: res.total_s * 1e6 / res.iters.max(1) as f64,
        statistic: "per_call_us: mean time per call of the slowest rank (IMB t_max)",
        compute_iters: None,
        compute_us: None,
        wall_s,
        cores: 0,
    })
}

/// Runs `cmd` in its own process group, returns its stdout; kills the whole group (the
/// launcher and every rank) when it takes longer than `timeout`.
pub(crate) fn run_with_timeout(cmd: Command, timeout: Duration) -> Result<String> {
    run_with_timeout_both(cmd, timeout).map(|(out, _)| out)
}

/// [`run_with_timeout`], returning the job's standard error too.
pub(crate) fn run_with_timeout_both(
    mut cmd: Command,
    timeout: Duration,
) -> Result<(String, String)> {
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    // Read both pipes on threads, so a chatty job never blocks on a full pipe.
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().context("waiting for the job")? {
            break Some(s);
        }
        if start.elapsed() > timeout {
            // The group id is the child's pid (process_group(0) above).
            // SAFETY: kill(2) on a process group this function started.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let tail = |s: &str| {
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    };
    match status {
        None => bail!(
            "killed after {} s (--timeout); its last output:\n{}",
            timeout.as_secs(),
            tail(&stderr)
        ),
        Some(s) if !s.success() => bail!("the job failed ({s}):\n{}", tail(&stderr)),
        Some(_) => Ok((stdout, stderr)),
    }
}

fn cell(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

fn ratio(mpi: Option<f64>, vargr: Option<f64>) -> String {
    match (mpi, vargr) {
        (Some(m), Some(v)) if v > 0.0 => format!("{:.2}", m / v),
        _ => "-".into(),
    }
}

/// One row per (op, bytes, ranks): the means per call of every configuration side by
/// side, then how many times faster vargr is than Open MPI (ompi mean / vargr mean; below
/// 1 is slower) and shared memory than sockets; then the same with medians.
fn print_table(cases: &[Case], records: &[Record]) {
    print_stat(cases, records, "mean", |r| r.per_call_us);
    print_stat(cases, records, "median", |r| r.median_us);
}

fn print_stat(cases: &[Case], records: &[Record], name: &str, stat: fn(&Record) -> f64) {
    let find = |c: &Case, v: Variant| {
        records.iter().find(|r| {
            r.op == c.op.name()
                && r.shape == c.shape
                && r.bytes == c.bytes
                && r.ranks == c.ranks
                && r.transport == v.transport()
        })
    };
    println!();
    println!("{name} latency per call of the slowest rank, µs (compute-gsum: per iteration)");
    println!(
        "speed-up = Open MPI {name} / vargr {name} (P = vargr processes through shared \
         memory, S = vargr processes over sockets, T = vargr threads)"
    );
    println!(
        "{:<19} {:>8} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>6} {:>6} {:>6} {:>6}  algorithm (P / T)",
        "op",
        "bytes",
        "ranks",
        "vargr-P",
        "vargr-S",
        "vargr-T",
        "ompi-tcp",
        "ompi-shm",
        "P/shm",
        "S/tcp",
        "T/shm",
        "P/S"
    );
    for c in cases {
        let m = |v| find(c, v).map(stat);
        let (p, sock, t, tcp, shm) = (
            m(Variant::VargrProcesses),
            m(Variant::VargrSockets),
            m(Variant::VargrThreads),
            m(Variant::OmpiTcp),
            m(Variant::OmpiShm),
        );
        let alg = |v| find(c, v).map_or("-", |r| r.algorithm.as_str());
        println!(
            "{:<19} {:>8} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>6} {:>6} {:>6} {:>6}  {} / {}",
            c.label(),
            c.bytes,
            c.ranks,
            cell(p),
            cell(sock),
            cell(t),
            cell(tcp),
            cell(shm),
            ratio(shm, p),
            ratio(tcp, sock),
            ratio(shm, t),
            ratio(sock, p),
            alg(Variant::VargrProcesses),
            alg(Variant::VargrThreads)
        );
    }
    let gsums: Vec<&Case> = cases
        .iter()
        .filter(|c| matches!(c.op, BenchOp::Gsum | BenchOp::ComputeGsum))
        .collect();
    if gsums.is_empty() || name != "mean" {
        return;
    }
    println!();
    println!("gsum totals: seconds for all calls (slowest rank), and per-call mean in µs");
    println!(
        "{:<19} {:>5} {:>7} {:>17} {:>17} {:>17} {:>17} {:>17}",
        "op", "ranks", "calls", "vargr-P", "vargr-S", "vargr-T", "ompi-tcp", "ompi-shm"
    );
    for c in gsums {
        let t = |v| {
            find(c, v).map_or_else(
                || "-".to_string(),
                |r| format!("{:.3} s ({:.1})", r.total_s, r.per_call_us),
            )
        };
        println!(
            "{:<19} {:>5} {:>7} {:>17} {:>17} {:>17} {:>17} {:>17}",
            c.label(),
            c.ranks,
            c.iters,
            t(Variant::VargrProcesses),
            t(Variant::VargrSockets),
            t(Variant::VargrThreads),
            t(Variant::OmpiTcp),
            t(Variant::OmpiShm)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 5.0);
        assert_eq!(percentile(&v, 90.0), 9.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn default_iterations_shrink_with_size_and_ranks() {
        assert_eq!(default_iters(8, 4), 1000);
        assert!(default_iters(1 << 20, 4) < default_iters(65536, 4));
        assert!(default_iters(8, 64) < default_iters(8, 16));
        assert!(default_iters(1 << 20, 64) >= 10);
        assert_eq!(default_gsum_calls(4), 20_000);
        assert!(default_gsum_calls(64) < default_gsum_calls(16));
    }

    #[test]
    fn ops_parse_and_reject_unknown_names() {
        for op in BenchOp::ALL {
            assert_eq!(BenchOp::parse(op.name()).unwrap(), op);
        }
        assert!(BenchOp::parse("alltoall").is_err());
    }

    #[test]
    fn spin_is_deterministic_work() {
        assert_eq!(spin(0, 0.5), 0.5);
        assert!(spin(1000, 0.5) > 0.5);
    }
}
