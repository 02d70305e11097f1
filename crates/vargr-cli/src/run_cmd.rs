//! `vargr run`: start the ranks of a parallel job and wire them up.
//!
//! Like `mpirun`, but only what vargr needs: N ranks (K per process as threads if asked)
//! started locally or through ssh on the hosts of a hostfile, each told its rank, the job
//! size, its site and where the job's rendezvous is. The first rank to fail ends the job,
//! and the exit status says which: like mpirun, `vargr run` names that rank and exits
//! with its exit status. A rank that stops answering the rendezvous's heartbeats
//! (stopped, or hung so hard its heartbeat thread cannot run) ends the job too, within
//! `--liveness-timeout`, named with its pid and host.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use vargr_net::auth::Secret;
use vargr_net::job::{JobRendezvous, Liveness};
use vargr_net::launch::{self, ChildSpec, Launcher};
use vargr_net::runtime_dir::{self, RuntimeDir};
use vargr_net::{Addr, Listener};
use vargr_topo::HostFile;

#[derive(Args)]
pub struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "np")]
    ranks: u32,
    /// Hostfile (Open MPI style, `site=NAME` per host); ranks fill each host's slots in
    /// order and start through --launcher. Default: all ranks on this machine.
    #[arg(long)]
    hosts: Option<PathBuf>,
    /// Ranks per process, run as threads of one process (overdecomposition).
    #[arg(long, default_value_t = 1)]
    ranks_per_process: u32,
    /// Remote-shell template for --hosts, split into words as a shell would (quotes
    /// group). `--` keeps ssh from reading a host as an option.
    #[arg(long, default_value = "ssh -o BatchMode=yes -- {host} {cmd}")]
    launcher: String,
    /// Site label for local runs (sets VARGR_SITE).
    #[arg(long)]
    site: Option<String>,
    /// Split the ranks into sites: `3` (three equal sites s0, s1, s2) or `east:4,west:8`
    /// (consecutive ranks per site). A process never straddles two sites.
    #[arg(long, conflicts_with = "site")]
    sites: Option<String>,
    /// WAN emulated between sites (sets VARGR_WAN): a profile for every pair of sites,
    /// `rtt=36ms,bandwidth=100mbit`, or per pair, `east-west:rtt=36ms;*:rtt=10ms`; a
    /// recorded trace replays with `trace=FILE[,jitter=1ms]` (rows as for `vargr emu`).
    #[arg(long)]
    wan: Option<String>,
    /// Compression on links between sites (sets VARGR_CODEC): off, fixed:CODEC (e.g.
    /// fixed:lz4, fixed:zstd:3) or adaptive (the default: the engine compresses what
    /// pays on each link).
    #[arg(long)]
    codec: Option<String>,
    /// Settings of the adaptive engine, as a TOML file (sets VARGR_CODEC_CONFIG): any
    /// field of vargr_codec::EngineConfig, such as `min_size = 8192`,
    /// `reevaluate_after = 500` or `[candidates] f64 = ["fpc:16", "zstd:3"]`.
    #[arg(long, value_name = "FILE")]
    codec_config: Option<PathBuf>,
    /// Redundancy elimination on links between sites (sets VARGR_DEDUP): a segmenter
    /// spec such as `cdc:256:1k:8k`; messages the link carried before cross as
    /// fingerprints. Off by default.
    #[arg(long, value_name = "SEGMENTER")]
    dedup: Option<String>,
    /// Record samples of what links between sites carry into this directory, for
    /// `vargr codec plan` (the guided strategy's first run).
    #[arg(long)]
    codec_trace: Option<PathBuf>,
    /// How ranks that share a process share its cores (sets VARGR_SCHED): none,
    /// serialize (one computes at a time) or priority (ranks talking to other processes
    /// run first).
    #[arg(long)]
    sched: Option<String>,
    /// Write every process's collector records (trace files) into this directory at the
    /// end of the run, for `vargr trace export` and `vargr trace report`.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Run the load-balance monitor: rank 0's process pulls every process's collector
    /// records during the run and reports on stderr which rank arrives last at the
    /// world's collectives, how often, and how long the others wait for it.
    /// `--monitor load-balance,stats` adds the statistics monitor (latency mean, min,
    /// max, standard deviation, median of the last 100 calls); `stats,distributed` runs
    /// the statistics on every process and gathers only the results. Watch it live with
    /// `vargr top`.
    #[arg(long, num_args = 0..=1, default_missing_value = "load-balance")]
    monitor: Option<String>,
    /// Collectors the monitor watches, as name patterns (default `ctx0/*`: the world
    /// communicator's collectives).
    #[arg(long, requires = "monitor")]
    monitor_scope: Option<String>,
    /// Where the monitor keeps the status `vargr top` shows (default: a file per run in
    /// the user's runtime directory, which `vargr top` finds by itself).
    #[arg(long, requires = "monitor")]
    status: Option<PathBuf>,
    /// Monitors analyse only while a rank of their process waits in a receive.
    #[arg(long, requires = "monitor")]
    coschedule: bool,
    /// Seconds the ranks have to reach the rendezvous.
    #[arg(long, default_value_t = 60)]
    startup_timeout: u64,
    /// Seconds a rank's process may leave the rendezvous's heartbeat unanswered (it is
    /// stopped or hung) before the job ends with that rank named; 0 turns the heartbeats
    /// off (for ranks stopped in a debugger).
    #[arg(long, default_value_t = 4.0, value_name = "SECS")]
    liveness_timeout: f64,
    /// Seconds between the rendezvous's heartbeats to each rank's process.
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    heartbeat: f64,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// One started process and the ranks it hosts.
struct Proc {
    first: u32,
    count: u32,
    host: String,
    child: Child,
}

pub fn run(a: RunArgs) -> Result<()> {
    if a.ranks == 0 {
        bail!("-n must be at least 1");
    }
    let k = a.ranks_per_process.max(1);
    let hosts = match &a.hosts {
        Some(p) => Some(HostFile::load(p)?),
        None => None,
    };
    let secret = Secret::random();
    let (bind, launcher) = match &hosts {
        Some(_) => (
            Addr::Tcp("0.0.0.0:0".into()),
            Launcher::remote(&a.launcher)?,
        ),
        None => (Addr::Tcp("127.0.0.1:0".into()), Launcher::Local),
    };
    let listener = Listener::bind(&bind)?;
    let addr = match (listener.local_addr()?, &hosts) {
        (a, Some(_)) => a.advertised(),
        (a, None) => a,
    };
    let timeout = Duration::from_secs(a.startup_timeout);
    let liveness = liveness_of(a.heartbeat, a.liveness_timeout)?;
    let rv = JobRendezvous::start(
        listener,
        addr.clone(),
        a.ranks,
        secret.clone(),
        timeout,
        liveness,
    );

    // Processes: K consecutive ranks each, placed on the hostfile's slots in order.
    // Absolute, so ranks started elsewhere (another directory, ssh) write where asked.
    let trace_dir = match &a.trace {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            Some(
                d.canonicalize()
                    .with_context(|| format!("resolving {}", d.display()))?,
            )
        }
        None => None,
    };
    if let Some(m) = &a.monitor {
        if let Some(bad) = m
            .split(',')
            .find(|k| !matches!(*k, "load-balance" | "stats" | "distributed"))
        {
            bail!("--monitor: unknown monitor {bad:?} (load-balance, stats, distributed)");
        }
    }
    let status_file = match (&a.monitor, &a.status) {
        (None, _) => None,
        (Some(_), Some(p)) => Some(p.clone()),
        (Some(_), None) => {
            let dir = RuntimeDir::open_default()?.subdir("top")?;
            Some(dir.join(format!("run-{}.json", std::process::id())))
        }
    };
    let mut placement = place(a.ranks, k, hosts.as_ref())?;
    if let Some(spec) = &a.sites {
        assign_sites(&mut placement, &parse_sites(spec, a.ranks)?)?;
    }
    if let Some(w) = &a.wan {
        vargr_emu::WanMap::parse_line(w).context("--wan")?;
    }
    if let Some(p) = &a.sched {
        p.parse::<vargr_coll::SchedPolicy>()
            .map_err(|e| anyhow::anyhow!("--sched: {e}"))?;
    }
    // Plans are read by every rank, wherever it starts: make the path absolute.
    let codec = match a.codec.as_deref() {
        Some(m) => {
            let m = match m.strip_prefix("guided:") {
                Some(p) => format!(
                    "guided:{}",
                    std::path::Path::new(p)
                        .canonicalize()
                        .with_context(|| format!("--codec: plan {p}"))?
                        .display()
                ),
                None => m.to_string(),
            };
            m.parse::<vargr_codec::stage::CodecMode>()
                .map_err(|e| anyhow::anyhow!("--codec: {e}"))?;
            Some(m)
        }
        None => None,
    };
    // Read by every rank, wherever it starts: checked here and made absolute.
    let codec_config = match &a.codec_config {
        Some(f) => {
            vargr_codec::EngineConfig::from_toml_file(f).context("--codec-config")?;
            Some(f.canonicalize()?)
        }
        None => None,
    };
    if let Some(spec) = a.dedup.as_deref().filter(|s| *s != "off") {
        let opts = vargr_dedup::stage::DedupOptions {
            segmenter: spec.to_string(),
            ..Default::default()
        };
        vargr_dedup::stage::DedupStage::new(&opts, 1 << 20)
            .map_err(|e| anyhow::anyhow!("--dedup {spec}: {e}"))?;
    }
    let codec_trace = match &a.codec_trace {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            Some(d.canonicalize()?)
        }
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    ctrlc::set_handler(move || s2.store(true, Ordering::SeqCst))
        .context("installing the Ctrl-C handler")?;
    let mut procs = Vec::new();
    for Placement {
        first,
        count,
        host,
        site,
    } in placement
    {
        let mut env = vec![
            ("VARGR_RANK".to_string(), first.to_string()),
            ("VARGR_SIZE".to_string(), a.ranks.to_string()),
            ("VARGR_RANKS_PER_PROCESS".to_string(), count.to_string()),
            ("VARGR_JOB".to_string(), addr.to_string()),
            ("VARGR_SECRET".to_string(), secret.to_hex()),
        ];
        if let Some(s) = site.or_else(|| a.site.clone()) {
            env.push(("VARGR_SITE".into(), s));
        }
        if let Some(w) = &a.wan {
            env.push(("VARGR_WAN".into(), w.clone()));
        }
        if let Some(p) = &a.sched {
            env.push(("VARGR_SCHED".into(), p.clone()));
        }
        if let Some(m) = &codec {
            env.push(("VARGR_CODEC".into(), m.clone()));
        }
        if let Some(f) = &codec_config {
            env.push((vargr_coll::CODEC_CONFIG_ENV.into(), f.display().to_string()));
        }
        if let Some(d) = &a.dedup {
            env.push(("VARGR_DEDUP".into(), d.clone()));
        }
        if let Some(d) = &codec_trace {
            env.push(("VARGR_CODEC_TRACE".into(), d.display().to_string()));
        }
        if let Some(m) = &a.monitor {
            env.push(("VARGR_MONITOR".into(), m.clone()));
        }
        if a.coschedule {
            env.push(("VARGR_MONITOR_COSCHEDULE".into(), "1".into()));
        }
        if let Some(p) = &a.monitor_scope {
            env.push(("VARGR_MONITOR_SCOPE".into(), p.clone()));
        }
        if let Some(f) = &status_file {
            env.push(("VARGR_MONITOR_STATUS".into(), f.display().to_string()));
        }
        if let Some(d) = &trace_dir {
            env.push(("VARGR_TRACE_DIR".into(), d.display().to_string()));
        }
        let spec = ChildSpec {
            node: first,
            host: host.clone(),
            program: a.command[0].clone(),
            args: a.command[1..].to_vec(),
            env,
        };
        let child = launch::spawn(&launcher, &spec)
            .with_context(|| format!("starting ranks {first}..{} on {host}", first + count))?;
        procs.push(Proc {
            first,
            count,
            host,
            child,
        });
    }
    let status = supervise(&mut procs, &stop, &rv);
    // The rendezvous has served everyone, or the job ended before it could.
    drop(rv);
    if matches!(launcher, Launcher::Local) {
        // What a killed rank could not remove; the others removed theirs on exit.
        if let Ok(dir) = RuntimeDir::open_default() {
            for p in &procs {
                runtime_dir::remove_mesh_sockets(&dir, p.child.id());
            }
        }
    }
    if let (Some(f), None) = (&status_file, &a.status) {
        // Ours to clean up: `vargr top` must not show a finished run as live.
        let _ = std::fs::remove_file(f);
    }
    status
}

/// Where one process goes and which ranks it hosts.
struct Placement {
    first: u32,
    count: u32,
    host: String,
    site: Option<String>,
}

/// Consecutive ranks per process, processes on the hostfile's slots in order.
fn place(ranks: u32, k: u32, hosts: Option<&HostFile>) -> Result<Vec<Placement>> {
    let mut out = Vec::new();
    let mut slots: Vec<(String, Option<String>)> = Vec::new();
    if let Some(h) = hosts {
        for e in h.entries() {
            for _ in 0..e.slots {
                slots.push((e.host.clone(), e.site.clone()));
            }
        }
        let need = ranks.div_ceil(k) as usize;
        if slots.len() < need {
            bail!(
                "{} needs {need} process slots for {ranks} ranks at {k} per process, the hostfile has {}",
                h.name(),
                slots.len()
            );
        }
    }
    let mut first = 0;
    let mut i = 0;
    while first < ranks {
        let count = k.min(ranks - first);
        let (host, site) = slots
            .get(i)
            .cloned()
            .unwrap_or_else(|| ("localhost".into(), None));
        out.push(Placement {
            first,
            count,
            host,
            site,
        });
        first += count;
        i += 1;
    }
    Ok(out)
}

/// Sites and their rank counts from `--sites` (`3`, or `name:count,...`), checked
/// against the job size.
fn parse_sites(spec: &str, ranks: u32) -> Result<Vec<(String, u32)>> {
    let sites: Vec<(String, u32)> = if let Ok(n) = spec.trim().parse::<u32>() {
        if n == 0 || n > ranks {
            bail!("--sites {n}: need between 1 and {ranks} sites for {ranks} ranks");
        }
        (0..n)
            .map(|i| (format!("s{i}"), ranks / n + u32::from(i < ranks % n)))
            .collect()
    } else {
        spec.split(',')
            .map(|part| {
                let (name, count) = part.trim().split_once(':').with_context(|| {
                    format!("--sites: {part:?} is not NAME:COUNT (e.g. east:4,west:4) or a number of sites")
                })?;
                let count: u32 = count
                    .trim()
                    .parse()
                    .with_context(|| format!("--sites: the count in {part:?} is not a number"))?;
                if name.trim().is_empty() || count == 0 {
                    bail!("--sites: {part:?} needs a name and at least one rank");
                }
                Ok((name.trim().to_string(), count))
            })
            .collect::<Result<_>>()?
    };
    let total: u32 = sites.iter().map(|s| s.1).sum();
    if total != ranks {
        bail!("--sites {spec}: the sites hold {total} ranks, the job has {ranks}");
    }
    Ok(sites)
}

/// Labels each process with the site of its ranks.
fn assign_sites(placement: &mut [Placement], sites: &[(String, u32)]) -> Result<()> {
    let mut bounds = Vec::new();
    let mut at = 0;
    for (name, count) in sites {
        bounds.push((at, at + count, name));
        at += count;
    }
    for p in placement {
        let last = p.first + p.count - 1;
        let (_, _, name) = bounds
            .iter()
            .find(|(lo, hi, _)| (*lo..*hi).contains(&p.first))
            .expect("the sites cover every rank");
        let (_, _, last_site) = bounds
            .iter()
            .find(|(lo, hi, _)| (*lo..*hi).contains(&last))
            .expect("the sites cover every rank");
        if name != last_site {
            bail!(
                "ranks {}..={last} share a process but --sites puts them in {name} and {last_site}; \
                 choose --ranks-per-process to divide each site's rank count",
                p.first
            );
        }
        p.site = Some((*name).clone());
    }
    Ok(())
}

/// The heartbeat settings from the command line (`None`: off).
fn liveness_of(heartbeat: f64, timeout: f64) -> Result<Option<Liveness>> {
    let secs = |what: &str, v: f64| {
        Duration::try_from_secs_f64(v)
            .map_err(|_| anyhow::anyhow!("{what} {v}: expected a number of seconds, 0 or more"))
    };
    let timeout = secs("--liveness-timeout", timeout)?;
    if timeout.is_zero() {
        return Ok(None);
    }
    let heartbeat = secs("--heartbeat", heartbeat)?;
    if heartbeat.is_zero() || heartbeat >= timeout {
        bail!(
            "--heartbeat {:.1} must be above 0 and below --liveness-timeout {:.1}",
            heartbeat.as_secs_f64(),
            timeout.as_secs_f64()
        );
    }
    Ok(Some(Liveness { heartbeat, timeout }))
}

/// The job failed: what to tell the user, and the exit status `vargr run` ends with.
#[derive(Debug)]
pub struct JobFailed {
    pub message: String,
    pub code: i32,
}

impl std::fmt::Display for JobFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for JobFailed {}

/// The exit status `vargr run` reports for a rank that ended with `st`: its own exit
/// code, or 128 plus the signal that killed it. What Open MPI's mpirun does (4.1.4 here:
/// a rank killed with SIGKILL makes it exit 137, one that exits 3 makes it exit 3) and
/// what a POSIX shell reports for a killed command, so scripts read all three alike.
fn exit_code(st: ExitStatus) -> i32 {
    match (st.code(), st.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

/// Waits for every process; the first failure (or Ctrl-C, or a process that stopped
/// answering heartbeats) stops the rest.
fn supervise(procs: &mut [Proc], stop: &AtomicBool, rv: &JobRendezvous) -> Result<()> {
    let mut failure: Option<JobFailed> = None;
    let mut done = vec![false; procs.len()];
    let mut kill_at: Option<Instant> = None;
    loop {
        let mut running = 0;
        let mut failed = Vec::new();
        for (i, p) in procs.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            match p.child.try_wait() {
                Ok(Some(st)) => {
                    done[i] = true;
                    if !st.success() {
                        failed.push((i, st));
                    }
                }
                Ok(None) => running += 1,
                Err(e) => {
                    done[i] = true;
                    failure.get_or_insert(JobFailed {
                        message: format!("waiting for ranks of {}: {e}", p.host),
                        code: 1,
                    });
                }
            }
        }
        if failure.is_none() {
            if let Some(s) = rv.silent() {
                // Stopped or hung: it will not exit on its own, nor will the ranks
                // waiting for it. Checked before the exits of this sweep: the others
                // are told to fail once it is found silent, and must not be blamed.
                failure = Some(JobFailed {
                    message: format!("{s}; the job was stopped"),
                    code: 1,
                });
                kill_at = Some(Instant::now());
            }
        }
        if failure.is_none() {
            // Several failures found in one sweep: the others may have failed because
            // of the first, so blame the process whose connection to the rendezvous
            // closed first, then one killed by a signal, then the lowest rank (in rank
            // order alone, rank 0 failing over a lost rank 2 was blamed instead).
            failed.sort_by_key(|&(i, st)| {
                let closed = rv.closed_at(procs[i].first);
                (
                    closed.is_none(),
                    closed,
                    st.signal().is_none(),
                    procs[i].first,
                )
            });
            if let Some(&(i, st)) = failed.first() {
                failure = Some(JobFailed {
                    message: describe(&procs[i], st),
                    code: exit_code(st),
                });
                // Give the others a moment to notice and exit on their own.
                kill_at = Some(Instant::now() + Duration::from_secs(1));
            }
        }
        if running == 0 {
            break;
        }
        if stop.load(Ordering::SeqCst) && failure.is_none() {
            failure = Some(JobFailed {
                message: "interrupted".into(),
                code: 1,
            });
            kill_at = Some(Instant::now());
        }
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            for (i, p) in procs.iter_mut().enumerate() {
                if !done[i] {
                    let _ = p.child.kill();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    match failure {
        Some(f) => Err(f.into()),
        None => Ok(()),
    }
}

fn describe(p: &Proc, st: ExitStatus) -> String {
    let ranks = if p.count == 1 {
        format!("rank {}", p.first)
    } else {
        format!("ranks {}..{}", p.first, p.first + p.count)
    };
    format!(
        "{ranks} (pid {} on {}) failed first ({st}); the job was stopped",
        p.child.id(),
        p.host
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_is_the_rank_s_code_or_128_plus_its_signal() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGSEGV)), 139);
    }

    #[test]
    fn liveness_settings_are_checked() {
        assert_eq!(liveness_of(1.0, 0.0).unwrap(), None);
        let l = liveness_of(0.5, 2.0).unwrap().unwrap();
        assert_eq!(
            (l.heartbeat, l.timeout),
            (Duration::from_millis(500), Duration::from_secs(2))
        );
        for (hb, to) in [(5.0, 2.0), (0.0, 2.0), (1.0, -1.0), (f64::NAN, 2.0)] {
            assert!(liveness_of(hb, to).is_err(), "{hb} {to}");
        }
    }
}
