//! `vargr run`: start the ranks of a parallel job and wire them up.
//!
//! Like `mpirun`, but only what vargr needs: N ranks (K per process as threads if asked)
//! started locally or through ssh on the hosts of a hostfile. This module checks the
//! arguments and turns them into the job's variables; `vargr_net::job_launch` places,
//! starts and watches the ranks. Like mpirun, `vargr run` names the rank that failed
//! first and exits with its exit status ([`JobFailed`]).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::top_cmd::MonitorArgs;
pub use vargr_net::job_launch::JobFailed;
use vargr_net::job_launch::{JobLaunchError, JobSpec, Slot, Slots};
use vargr_net::launch::Launcher;
use vargr_net::runtime_dir::{RemoveOnDrop, RuntimeDir};
use vargr_net::wireup::Liveness;
use vargr_topo::HostFile;

#[derive(Args)]
pub struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "np")]
    ranks: u32,
    /// Hostfile (Open MPI style, `site=NAME` per host); ranks fill each host's slots in
    /// order and start through --launcher. Default: all ranks on this machine.
    #[arg(long, visible_alias = "hostfile", conflicts_with = "host")]
    hosts: Option<PathBuf>,
    /// Hosts as mpirun takes them on the command line: `a,b:2` (one slot each unless
    /// `:SLOTS` says more), filled in order as a hostfile's.
    #[arg(long, value_name = "HOST[:SLOTS],...")]
    host: Option<String>,
    /// Accepted for mpirun's users: vargr never refuses more ranks than cores (ranks
    /// waiting in a receive give their core away).
    #[arg(long)]
    oversubscribe: bool,
    /// Prefix every line the ranks print with the rank, as Open MPI does
    /// (`[1,RANK]<stdout>:`). Lines of different ranks never mix mid-line either way.
    #[arg(long)]
    tag_output: bool,
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
    /// `vargr codec plan` (the guided strategy's first run). `--codec-trace` is its old
    /// name ("trace" is kept for event traces and recorded WAN traces).
    #[arg(long, alias = "codec-trace", value_name = "DIR")]
    codec_samples: Option<PathBuf>,
    /// How ranks that share a process share its cores (sets VARGR_SCHED): none,
    /// serialize (one computes at a time), priority (ranks talking to other processes
    /// run first) or coschedule (collective communication goes before computation).
    #[arg(long)]
    sched: Option<String>,
    /// Write every process's collector records (trace files) into this directory at the
    /// end of the run, for `vargr trace export` and `vargr trace report`.
    #[arg(long)]
    trace: Option<PathBuf>,
    #[command(flatten)]
    mon: MonitorArgs,
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
    /// The program and its arguments (after `--`, or simply after vargr's options, as
    /// with mpirun). Rank 0 reads vargr run's standard input when it runs on this host.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    command: Vec<String>,
}

/// mpirun's single-dash `-np N` as `--np N`: the first `-np` followed by a number, unless
/// `--` or vargr's own `-n`/`--np` came first, so that a program's own `-np` is left alone.
pub fn mpirun_spelling(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = args.into_iter().collect();
    let Some(run) = args.iter().position(|a| a == "run") else {
        return args;
    };
    for i in run + 1..args.len() {
        let a = args[i].to_string_lossy();
        // `--`, or vargr's own count (`-n`, `-n4`, `--np`) before any `-np`.
        if a == "--" || (a.starts_with("-n") && a != "-np") || a.starts_with("--np") {
            break;
        }
        let number_follows = args
            .get(i + 1)
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.parse::<u32>().is_ok());
        if a == "-np" && number_follows {
            args[i] = "--np".into();
            break;
        }
    }
    args
}

/// `config_file`: the global `--config`, under these flags.
pub fn run(a: RunArgs, config_file: Option<&std::path::Path>) -> Result<()> {
    if a.ranks == 0 {
        bail!("-n must be at least 1");
    }
    if a.ranks_per_process > 1 && is_python(&a.command) {
        bail!(
            "--ranks-per-process {}: a Python rank is an interpreter of its own \
             (vargr.World() is one rank per process); run without it, or use more processes",
            a.ranks_per_process
        );
    }
    if a.oversubscribe {
        tracing::debug!(
            "--oversubscribe: nothing to allow, vargr never refuses more ranks than cores"
        );
    }
    let hosts = match (&a.hosts, &a.host) {
        (Some(p), _) => Some(slots_of(&HostFile::load(p)?)),
        (None, Some(list)) => Some(host_list(list)?),
        (None, None) => None,
    };
    let launcher = match &hosts {
        Some(_) => Launcher::remote(&a.launcher)?,
        None => Launcher::Local,
    };
    let liveness = liveness_of(a.heartbeat, a.liveness_timeout)?;
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
    let status_file = match (&a.mon.monitor, &a.mon.status) {
        (None, _) => None,
        (Some(_), Some(p)) => Some(p.clone()),
        (Some(_), None) => {
            let dir = RuntimeDir::open_default()?.subdir("top")?;
            Some(dir.join(format!("run-{}.json", std::process::id())))
        }
    };
    let sites = match &a.sites {
        Some(spec) => Some(parse_sites(spec, a.ranks)?),
        None => None,
    };
    // Plans are read by every rank, wherever it starts: make the path absolute.
    let codec = match a.codec.as_deref() {
        Some(m) => Some(match m.strip_prefix("guided:") {
            Some(p) => format!(
                "guided:{}",
                std::path::Path::new(p)
                    .canonicalize()
                    .with_context(|| format!("--codec: plan {p}"))?
                    .display()
            ),
            None => m.to_string(),
        }),
        None => None,
    };
    let codec_config = match &a.codec_config {
        Some(f) => Some(
            f.canonicalize()
                .with_context(|| format!("--codec-config {}", f.display()))?,
        ),
        None => None,
    };
    let codec_samples = match &a.codec_samples {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            Some(d.canonicalize()?)
        }
        None => None,
    };
    // The flags over the configuration file and the environment, checked in one place;
    // every process is told the result besides its ranks and where the job meets.
    let (mut layers, _) = crate::config_cmd::layers(config_file)?;
    let path = |p: &std::path::Path| p.display().to_string();
    let flags: [(&str, &str, Option<String>); 10] = [
        ("links.wan", "--wan", a.wan.clone()),
        ("job.sched", "--sched", a.sched.clone()),
        ("links.codec", "--codec", codec),
        (
            "links.codec_engine",
            "--codec-config",
            codec_config.as_deref().map(path),
        ),
        ("links.dedup", "--dedup", a.dedup.clone()),
        (
            "links.codec_samples",
            "--codec-samples",
            codec_samples.as_deref().map(path),
        ),
        ("monitor.kinds", "--monitor", a.mon.monitor.clone()),
        (
            "monitor.scope",
            "--monitor-scope",
            a.mon.monitor_scope.clone(),
        ),
        (
            "monitor.status",
            "--status",
            status_file.as_deref().map(path),
        ),
        ("trace.dir", "--trace", trace_dir.as_deref().map(path)),
    ];
    for (key, flag, value) in flags {
        if let Some(v) = value {
            layers.flag(key, flag, v);
        }
    }
    if a.coschedule {
        layers.flag("monitor.coschedule", "--coschedule", "true");
    }
    let config = vargr_config::Config::resolve(&layers)?;
    let mut env: Vec<(String, String)> = config
        .to_env()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    // Held until the job ends: the table lives while this process does, its pointer
    // file is removed when it ends.
    let _gateways = match (&launcher, config.wan.is_empty()) {
        (Launcher::Local, false) => {
            let (table, pointer) = gateways()?;
            env.retain(|(k, _)| k != "VARGR_GATEWAYS");
            env.push((
                "VARGR_GATEWAYS".into(),
                pointer.path().display().to_string(),
            ));
            Some((table, pointer))
        }
        _ => None,
    };
    let spec = JobSpec {
        ranks: a.ranks,
        ranks_per_process: a.ranks_per_process,
        hosts,
        launcher,
        sites,
        site: a.site.clone(),
        env,
        command: a.command.clone(),
        startup_timeout: Duration::from_secs(a.startup_timeout),
        liveness,
        tag_output: a.tag_output,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    ctrlc::set_handler(move || s2.store(true, Ordering::SeqCst))
        .context("installing the Ctrl-C handler")?;
    let status = vargr_net::job_launch::run_job(&spec, &stop);
    if let (Some(f), None) = (&status_file, &a.mon.status) {
        // Ours to clean up: `vargr top` must not show a finished run as live.
        let _ = std::fs::remove_file(f);
    }
    status.map_err(|e| match e {
        // main ends with its exit status.
        JobLaunchError::Failed(f) => anyhow::Error::new(f),
        e => e.into(),
    })
}

/// The shared bottlenecks of an emulated WAN for ranks on this host (the seed's
/// gateways: every flow between two sites competes for one WAN), and the pointer file
/// that finds them, removed when dropped. Ranks started on other hosts (a hostfile and
/// a remote launcher) are not given it and keep one bottleneck per link.
fn gateways() -> Result<(vargr_emu::Gateways, RemoveOnDrop)> {
    let table = vargr_emu::Gateways::create()?;
    let path = RuntimeDir::open_default()?.join(format!("run-{}.gateways", std::process::id()));
    // One of an earlier process with this pid, which has ended; never followed.
    let _ = std::fs::remove_file(&path);
    let pointer = RemoveOnDrop::new(path.clone());
    table.write_pointer(&path)?;
    Ok((table, pointer))
}

/// A hostfile's process slots, in order.
fn slots_of(h: &HostFile) -> Slots {
    let mut slots = Vec::new();
    for e in h.entries() {
        for _ in 0..e.slots {
            slots.push(Slot {
                host: e.host.clone(),
                site: e.site.clone(),
            });
        }
    }
    Slots {
        name: h.name().to_string(),
        slots,
    }
}

/// Whether `command` runs a Python program: the interpreter, or a `.py` script.
fn is_python(command: &[String]) -> bool {
    command.first().is_some_and(|p| {
        let name = std::path::Path::new(p)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        name.starts_with("python") || name.ends_with(".py")
    })
}

/// `--host a,b:2`: one slot per host unless `:SLOTS` says more.
fn host_list(list: &str) -> Result<Slots> {
    let mut slots = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (host, n) = match item.rsplit_once(':') {
            Some((h, n)) => (
                h,
                n.parse::<u32>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| anyhow::anyhow!("--host {item}: {n:?} is not a slot count"))?,
            ),
            None => (item, 1),
        };
        vargr_net::launch::check_host(host).with_context(|| format!("--host {item}"))?;
        for _ in 0..n {
            slots.push(Slot {
                host: host.to_string(),
                site: None,
            });
        }
    }
    if slots.is_empty() {
        bail!("--host {list:?}: no host");
    }
    Ok(Slots {
        name: "--host".into(),
        slots,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

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
