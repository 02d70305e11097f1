//! `vargr-bench io-rank`: what each vargr rank runs for collective I/O, in tests and in
//! `vargr bench io`.
//!
//! It is the twin of `bench/mpi/io_check.c`: the same workload views (computed by every
//! rank from `vargr_io::workload`), the same data (a pure function of the file offset,
//! so every writer makes the same file), the same timing (a barrier, the operation, the
//! slowest rank's time). Rank 0 prints one `RESULT {json}` line per operation and
//! iteration; reads are checked byte for byte.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use vargr_coll::{Comm, ElemKind, Op};
use vargr_io::workload::{self, Kind};
use vargr_io::{Aggregation, Count, File, Hints, Mode, Plan, Solver};

/// Arguments of one rank.
#[derive(Debug, Clone, Args)]
pub struct IoRankArgs {
    /// bips3d, stem2 or ior.
    #[arg(long)]
    pub workload: String,
    /// File size the workload is scaled to (bytes; the workload rounds it).
    #[arg(long)]
    pub bytes: u64,
    #[arg(long)]
    pub file: PathBuf,
    /// two-phase, la-two-phase or la-two-phase+codec.
    #[arg(long, default_value = "la-two-phase")]
    pub method: String,
    /// write, read or both.
    #[arg(long, default_value = "both")]
    pub op: String,
    #[arg(long, default_value_t = 1)]
    pub iters: u32,
    #[arg(long)]
    pub cb_nodes: Option<usize>,
    #[arg(long, default_value_t = 4 << 20)]
    pub cb_buffer: u64,
    /// What LA-Two-Phase counts: bytes or blocks.
    #[arg(long, default_value = "bytes")]
    pub count: String,
    #[arg(long, default_value = "jonker-volgenant")]
    pub solver: String,
    /// Tests: no process may write past this many bytes of a file (RLIMIT_FSIZE), as on a
    /// full disk: writes beyond it fail with EFBIG.
    #[arg(long, hide = true)]
    pub file_size_limit: Option<u64>,
    /// Tests: this rank's process exits just before the first collective write.
    #[arg(long, hide = true)]
    pub die_before_write: Option<usize>,
}

/// One operation's figures, as rank 0 prints them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IoRankResult {
    pub op: String,
    pub iter: u32,
    /// The slowest rank's time for the operation.
    pub seconds: f64,
    pub bytes: u64,
    pub ranks: usize,
    /// Data bytes sent between nodes, summed over ranks.
    pub bytes_between_nodes: u64,
    pub aggregators: Vec<usize>,
}

/// The hints a method name stands for.
pub fn hints_for(method: &str, count: &str, solver: &str) -> Result<Hints> {
    let locality = || -> Result<Aggregation> {
        Ok(Aggregation::Locality {
            count: match count {
                "bytes" => Count::Bytes,
                "blocks" => Count::Blocks,
                _ => bail!("count {count:?}: bytes or blocks"),
            },
            solver: solver.parse::<Solver>().map_err(anyhow::Error::msg)?,
        })
    };
    let (aggregation, compress) = match method {
        "two-phase" => (Aggregation::TwoPhase, false),
        "la-two-phase" => (locality()?, false),
        "la-two-phase+codec" => (locality()?, true),
        _ => bail!("method {method:?}: two-phase, la-two-phase or la-two-phase+codec"),
    };
    Ok(Hints {
        aggregation,
        compress,
        elem: ElemKind::F64,
        ..Hints::default()
    })
}

fn timed(comm: &Comm, f: impl FnOnce() -> vargr_io::Result<()>) -> Result<f64> {
    comm.barrier()?;
    let t = Instant::now();
    f()?;
    let mut s = [t.elapsed().as_secs_f64()];
    comm.allreduce(&mut s, &Op::Max)?;
    Ok(s[0])
}

fn report(comm: &Comm, file: &File, op: &str, iter: u32, seconds: f64, bytes: u64) -> Result<()> {
    let mut between = [file.stats().bytes_between_nodes];
    comm.allreduce(&mut between, &Op::Sum)?;
    if comm.rank() == 0 {
        let r = IoRankResult {
            op: op.into(),
            iter,
            seconds,
            bytes,
            ranks: comm.size(),
            bytes_between_nodes: between[0],
            aggregators: file.stats().aggregators.clone(),
        };
        println!("RESULT {}", serde_json::to_string(&r)?);
    }
    Ok(())
}

fn rank(comm: &Comm, a: &IoRankArgs) -> Result<()> {
    let kind = Kind::parse(&a.workload)
        .with_context(|| format!("workload {:?}: bips3d, stem2 or ior", a.workload))?;
    let w = workload::sized(kind, comm.size(), a.bytes)?;
    let view = w.views[comm.rank()].clone();
    let data = workload::fill_pattern(view.runs(), 8);
    let mut hints = hints_for(&a.method, &a.count, &a.solver)?;
    hints.cb_nodes = a.cb_nodes;
    hints.cb_buffer_size = a.cb_buffer;
    let (write, read) = match a.op.as_str() {
        "write" => (true, false),
        "read" => (false, true),
        "both" => (true, true),
        o => bail!("op {o:?}: write, read or both"),
    };
    let mode = if write { Mode::create() } else { Mode::READ };
    let mut f = File::open(comm, &a.file, mode, hints)?;
    f.set_view(view.clone());
    for iter in 0..a.iters {
        if write {
            if a.die_before_write == Some(comm.rank()) {
                eprintln!("rank {}: exiting before the write, as asked", comm.rank());
                std::process::exit(3);
            }
            let s = timed(comm, || f.write_all(&data))?;
            report(comm, &f, "write", iter, s, w.file_len)?;
        }
        if read {
            let mut back = vec![0u8; data.len()];
            let s = timed(comm, || f.read_all(&mut back))?;
            if let Some(i) = back.iter().zip(&data).position(|(x, y)| x != y) {
                bail!(
                    "rank {}: read_all gave a wrong byte at data offset {i} of {}",
                    comm.rank(),
                    data.len()
                );
            }
            report(comm, &f, "read", iter, s, w.file_len)?;
        }
    }
    f.close()?;
    Ok(())
}

pub fn run_rank(a: IoRankArgs) -> Result<()> {
    if let Some(limit) = a.file_size_limit {
        // A write past the limit then fails with EFBIG instead of killing the process.
        // SAFETY: setting a signal's disposition to ignore, before any thread starts.
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
        let lim = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        // SAFETY: a plain system call on a valid struct.
        ensure!(
            unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &lim) } == 0,
            "setrlimit(RLIMIT_FSIZE): {}",
            std::io::Error::last_os_error()
        );
    }
    let job = vargr_config::join_job()?;
    job.run(|c| {
        rank(&c, &a).map_err(|e| vargr_coll::CollError::Job {
            reason: format!("{e:#}"),
        })
    })?;
    job.finish();
    Ok(())
}

/// `vargr bench io`: the seed's workloads written and read collectively by vargr's
/// methods on emulated hosts, and by Open MPI's MPI-IO (ROMIO and OMPIO) on the same
/// machine.
#[derive(Debug, Clone, Args)]
pub struct BenchIoArgs {
    /// Workloads: bips3d, stem2, ior.
    #[arg(long, value_delimiter = ',', default_value = "bips3d,stem2,ior")]
    pub workloads: Vec<String>,
    /// File sizes in bytes (each workload rounds them).
    #[arg(long, value_delimiter = ',', default_values_t = [1u64 << 20, 16 << 20])]
    pub sizes: Vec<u64>,
    #[arg(long, default_value_t = 8)]
    pub ranks: usize,
    /// Emulated hosts (vargr sites; ranks fill them in consecutive blocks).
    #[arg(long, default_value_t = 4)]
    pub hosts: usize,
    /// Links between emulated hosts, as vargr run's --wan profiles take bandwidths.
    #[arg(long, value_delimiter = ',', default_value = "100mbit,1gbit")]
    pub links: Vec<String>,
    /// Round-trip time between emulated hosts.
    #[arg(long, default_value = "0.2ms")]
    pub rtt: String,
    /// Methods: two-phase, la-two-phase, la-two-phase+codec, romio, ompio.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "two-phase,la-two-phase,la-two-phase+codec,romio,ompio"
    )]
    pub methods: Vec<String>,
    /// Timed repetitions of each write and read.
    #[arg(long, default_value_t = 3)]
    pub iters: u32,
    /// Seconds one run may take.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Run both systems on network namespaces shaped by the kernel (bench/netns/hosts.sh;
    /// needs root) instead of vargr's emulator, so that Open MPI crosses the same links.
    #[arg(long)]
    pub netns: bool,
    /// Where the records go (default bench/results/io.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One measured (workload, size, link, method, op).
#[derive(Debug, Clone, Serialize)]
pub struct IoRecord {
    pub benchmark: String,
    pub workload: String,
    pub ranks: usize,
    pub hosts: usize,
    /// File size.
    pub bytes: u64,
    pub op: String,
    pub method: String,
    pub link: String,
    /// None where it is not known (OMPIO's aggregators).
    pub bytes_between_hosts: Option<u64>,
    /// How `bytes_between_hosts` was found.
    pub between_hosts_from: String,
    pub median_s: f64,
    pub p90_s: f64,
    pub times_s: Vec<f64>,
    /// The file equals the one ROMIO wrote (or, without MPI, the pattern).
    pub identical: bool,
    /// Where the ranks' messages went: the emulated link, or (Open MPI) the machine's
    /// shared memory.
    pub network: String,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn times(out: &str, op: &str, prefix: &str) -> Vec<(f64, u64)> {
    out.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|j| serde_json::from_str::<serde_json::Value>(j).ok())
        .filter(|v| v["op"] == op)
        .map(|v| {
            (
                v["seconds"].as_f64().unwrap_or(f64::NAN),
                v["bytes_between_nodes"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn build_io_check(dir: &std::path::Path) -> Result<PathBuf> {
    let src = [
        PathBuf::from("bench/mpi/io_check.c"),
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/mpi/io_check.c"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .context("bench/mpi/io_check.c not found (run from the repository root)")?;
    let exe = dir.join("io_check");
    let out = std::process::Command::new("mpicc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .context("running mpicc (install Open MPI: openmpi-bin, libopenmpi-dev)")?;
    if !out.status.success() {
        bail!("mpicc failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(exe)
}

/// The emulated network of one link, and how each system starts ranks on it.
enum Network {
    /// vargr's own emulator between sites (`vargr run --sites --wan`); Open MPI runs on
    /// the machine's shared memory.
    Emulated,
    /// Network namespaces shaped by the kernel (`bench/netns/hosts.sh`): both systems'
    /// ranks run on the emulated hosts.
    Namespaces {
        exec: PathBuf,
        vargr_hosts: PathBuf,
        mpi_hosts: PathBuf,
    },
}

fn script(name: &str) -> Result<PathBuf> {
    [
        PathBuf::from("bench/netns").join(name),
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../bench/netns")
            .join(name),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .with_context(|| format!("bench/netns/{name} not found (run from the repository root)"))
}

/// Takes the namespaced hosts down when the link's runs end, however they end.
struct HostsUp {
    script: PathBuf,
    hosts: usize,
}

impl Drop for HostsUp {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.script)
            .args(["down", &self.hosts.to_string()])
            .status();
    }
}

fn hosts_up(a: &BenchIoArgs, link: &str, dir: &std::path::Path) -> Result<(Network, HostsUp)> {
    let up = script("hosts.sh")?;
    let _ = std::process::Command::new(&up)
        .args(["down", &a.hosts.to_string()])
        .status();
    let out = std::process::Command::new(&up)
        .args(["up", &a.hosts.to_string(), link])
        .output()
        .context("running bench/netns/hosts.sh (needs root)")?;
    let guard = HostsUp {
        script: up,
        hosts: a.hosts,
    };
    ensure!(
        out.status.success(),
        "bench/netns/hosts.sh up failed (it needs root and ip, tc): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let addrs: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let node = workload::host_layout(a.ranks, a.hosts)?;
    let slots = |h: usize| node.iter().filter(|&&n| n == h).count();
    let mut vh = String::new();
    let mut mh = String::new();
    for (h, addr) in addrs.iter().enumerate() {
        // One site per host, so that compression applies between hosts only.
        vh.push_str(&format!("{addr} slots={} site=h{h}\n", slots(h)));
        mh.push_str(&format!("{addr} slots={}\n", slots(h)));
    }
    let vargr_hosts = dir.join("hosts.vargr");
    let mpi_hosts = dir.join("hosts.mpi");
    std::fs::write(&vargr_hosts, vh)?;
    std::fs::write(&mpi_hosts, mh)?;
    Ok((
        Network::Namespaces {
            exec: script("exec.sh")?,
            vargr_hosts,
            mpi_hosts,
        },
        guard,
    ))
}

/// The reference file of a workload: ROMIO's, or the pattern without MPI.
fn reference(
    w: &workload::Workload,
    io_check: Option<&PathBuf>,
    runs: &std::path::Path,
    path: &std::path::Path,
    ranks: usize,
    timeout: std::time::Duration,
) -> Result<Vec<u8>> {
    match io_check {
        Some(exe) => {
            let mut cmd = std::process::Command::new("mpirun");
            cmd.args([
                "--allow-run-as-root",
                "--oversubscribe",
                "--bind-to",
                "none",
            ])
            .args(["--mca", "io", "romio321", "-n", &ranks.to_string()])
            .arg(exe)
            .arg("write")
            .arg(runs)
            .arg(path)
            .env_remove("VARGR_JOB");
            crate::coll::run_with_timeout(cmd, timeout)?;
            Ok(std::fs::read(path)?)
        }
        None => Ok(workload::expected_file(w, 8)),
    }
}

pub fn bench(a: BenchIoArgs, programs: &crate::Programs) -> Result<()> {
    use std::process::Command;
    use std::time::Duration;
    let timeout = Duration::from_secs(a.timeout);
    let dir = std::env::temp_dir().join(format!("vargr-bench-io-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let _cleanup = scopeguard(&dir);
    let wants_mpi = a.methods.iter().any(|m| m == "romio" || m == "ompio");
    let io_check = if wants_mpi {
        Some(build_io_check(&dir)?)
    } else {
        None
    };
    let node = workload::host_layout(a.ranks, a.hosts)?;
    // Workloads, their runs files (for MPI-IO) and reference files, once.
    let mut cases = Vec::new();
    for wname in &a.workloads {
        let kind = Kind::parse(wname).with_context(|| format!("workload {wname:?}"))?;
        for &size in &a.sizes {
            let w = workload::sized(kind, a.ranks, size)?;
            let runs = dir.join(format!("{wname}-{size}"));
            std::fs::create_dir_all(&runs)?;
            workload::write_runs_dir(&runs, &w)?;
            let refpath = dir.join(format!("{wname}-{size}.ref"));
            let want = reference(&w, io_check.as_ref(), &runs, &refpath, a.ranks, timeout)?;
            let _ = std::fs::remove_file(&refpath);
            let romio_between = Plan::offline(&w.views, &node, &Hints::default())
                .map_err(anyhow::Error::msg)?
                .bytes_between_nodes(&w.views, &node);
            cases.push((wname.clone(), size, w, runs, want, romio_between));
        }
    }
    let mut records = Vec::new();
    let total = cases.len() * a.links.len() * a.methods.len();
    let mut step = 0;
    for link in &a.links {
        let (network, _hosts) = if a.netns {
            let (n, g) = hosts_up(&a, link, &dir)?;
            (n, Some(g))
        } else {
            (Network::Emulated, None)
        };
        for (wname, size, w, runs, want, romio_between) in &cases {
            for method in &a.methods {
                step += 1;
                let mpi = method == "romio" || method == "ompio";
                if mpi && matches!(network, Network::Emulated) && link != &a.links[0] {
                    // Open MPI does not run over vargr's emulator: one run is enough.
                    continue;
                }
                let file = dir.join(format!("{wname}-{size}-{method}"));
                let _ = std::fs::remove_file(&file);
                let n = a.ranks.to_string();
                let iters = a.iters.to_string();
                let out = if mpi {
                    let component = if method == "romio" {
                        "romio321"
                    } else {
                        "ompio"
                    };
                    let mut cmd = Command::new("mpirun");
                    cmd.args([
                        "--allow-run-as-root",
                        "--oversubscribe",
                        "--bind-to",
                        "none",
                    ]);
                    if let Network::Namespaces {
                        exec, mpi_hosts, ..
                    } = &network
                    {
                        cmd.arg("--hostfile")
                            .arg(mpi_hosts)
                            .arg("--mca")
                            .arg("plm_rsh_agent")
                            .arg(exec)
                            .args(["--mca", "oob_tcp_if_include", "10.77.0.0/24"])
                            .args(["--mca", "btl", "tcp,vader,self"])
                            .args(["--mca", "btl_tcp_if_include", "10.77.0.0/24"])
                            // The hostfile's slots hide that the hosts share two cores:
                            // without this, ranks spin where vargr's block.
                            .args(["--mca", "mpi_yield_when_idle", "1"]);
                    }
                    cmd.args(["--mca", "io", component, "-n", &n])
                        .arg(io_check.as_ref().context("the MPI program was not built")?)
                        .arg("both")
                        .arg(runs)
                        .arg(&file)
                        .args(["--iters", &iters])
                        .env_remove("VARGR_JOB");
                    crate::coll::run_with_timeout(cmd, timeout)?
                } else {
                    let codec = if method.ends_with("+codec") {
                        "adaptive"
                    } else {
                        "off"
                    };
                    let mut cmd = Command::new(programs.vargr()?);
                    cmd.args(["run", "-n", &n]);
                    match &network {
                        Network::Emulated => {
                            let wan = format!("rtt={},bandwidth={link}", a.rtt);
                            cmd.args(["--sites", &a.hosts.to_string(), "--wan", &wan]);
                        }
                        Network::Namespaces {
                            exec, vargr_hosts, ..
                        } => {
                            cmd.arg("--hosts")
                                .arg(vargr_hosts)
                                .arg("--launcher")
                                .arg(format!("{} {{host}} {{cmd}}", exec.display()));
                        }
                    }
                    cmd.args(["--codec", codec, "--"])
                        .arg(programs.bench())
                        .args(["io-rank", "--workload", wname])
                        .args(["--bytes", &size.to_string(), "--method", method])
                        .arg("--file")
                        .arg(&file)
                        .args(["--iters", &iters]);
                    crate::coll::run_with_timeout(cmd, timeout)?
                };
                let identical = std::fs::read(&file).map(|f| &f == want).unwrap_or(false);
                let _ = std::fs::remove_file(&file);
                for op in ["write", "read"] {
                    let found = times(&out, op, if mpi { "" } else { "RESULT " });
                    ensure!(!found.is_empty(), "{method}: no {op} results in:\n{out}");
                    let times_s: Vec<f64> = found.iter().map(|x| x.0).collect();
                    let mut t = times_s.clone();
                    t.sort_by(f64::total_cmp);
                    let (between, from) = match method.as_str() {
                        "romio" => (Some(*romio_between), "computed from the views (ROMIO's pattern: one aggregator per host, equal domains)"),
                        "ompio" => (None, "not known (OMPIO chooses its own aggregators)"),
                        _ => (Some(found[0].1), "measured (data bytes vargr's ranks sent to other hosts)"),
                    };
                    let rec = IoRecord {
                        benchmark: "io".into(),
                        workload: wname.clone(),
                        ranks: a.ranks,
                        hosts: a.hosts,
                        bytes: w.file_len,
                        op: op.into(),
                        method: method.clone(),
                        link: if mpi && matches!(network, Network::Emulated) {
                            "-".into()
                        } else {
                            link.clone()
                        },
                        bytes_between_hosts: between,
                        between_hosts_from: from.into(),
                        median_s: quantile(&t, 0.5),
                        p90_s: quantile(&t, 0.9),
                        times_s,
                        identical,
                        network: match (&network, mpi) {
                            (Network::Namespaces { .. }, _) => {
                                format!("network namespaces, each host's traffic shaped to {link} (tc tbf)")
                            }
                            (Network::Emulated, true) => {
                                "shared memory of one machine (not emulated)".into()
                            }
                            (Network::Emulated, false) => {
                                format!("vargr's emulator: {link}, rtt {}", a.rtt)
                            }
                        },
                    };
                    eprintln!(
                        "[{step}/{total}] {wname} {} B {op} {method} {}: median {:.4} s, {} B between hosts{}",
                        rec.bytes,
                        rec.link,
                        rec.median_s,
                        between.map_or("?".into(), |b| b.to_string()),
                        if identical { "" } else { ", FILE DIFFERS" }
                    );
                    records.push(rec);
                }
            }
        }
    }
    print_table(&records);
    let path = a
        .json
        .unwrap_or_else(|| crate::results_dir().join("io.json"));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&path, serde_json::to_string_pretty(&records)?)?;
    eprintln!("wrote {} records to {}", records.len(), path.display());
    ensure!(
        records.iter().all(|r| r.identical),
        "some files differ from the reference (see `identical` in the records)"
    );
    Ok(())
}

fn print_table(records: &[IoRecord]) {
    println!(
        "{:<8} {:>10} {:<6} {:<8} {:<20} {:>10} {:>10} {:>14} {:>9}",
        "workload",
        "bytes",
        "op",
        "link",
        "method",
        "median_s",
        "p90_s",
        "between_hosts",
        "identical"
    );
    for r in records {
        println!(
            "{:<8} {:>10} {:<6} {:<8} {:<20} {:>10.4} {:>10.4} {:>14} {:>9}",
            r.workload,
            r.bytes,
            r.op,
            r.link,
            r.method,
            r.median_s,
            r.p90_s,
            r.bytes_between_hosts.map_or("?".into(), |b| b.to_string()),
            r.identical
        );
    }
}

/// Removes the scratch directory when the benchmark ends, however it ends.
pub(crate) fn scopeguard(dir: &std::path::Path) -> impl Drop + '_ {
    struct Remove<'a>(&'a std::path::Path);
    impl Drop for Remove<'_> {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(self.0);
        }
    }
    Remove(dir)
}
