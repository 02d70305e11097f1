//! `vargr bench tree`: the experiment of MRNet's figure 7 (start-up, multicast+reduction
//! round trip, pipelined reduction throughput) on local processes; `--experiment load`
//! is figure 9's (a filter that costs CPU per input packet, flat against a tree). Also
//! the helpers every benchmark shares: medians, percentiles, JSON records.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use vargr_tbon::{BackendSpec, Network, NetworkOptions, StreamOptions, Value};
use vargr_topo::Topology;

use crate::{Programs, TAG_BURN, TAG_ECHO};

#[derive(Args, Clone)]
pub struct TreeArgs {
    /// Write the records as JSON here (default bench/results/tree.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run only this topology (e.g. 1x4x16, kary:4@16, flat:64).
    #[arg(long)]
    topology: Option<String>,
    /// Run only the pairs (flat and tree) with this many back-ends.
    #[arg(long)]
    backends: Option<usize>,
    /// Timed round trips per run (default: 2000 up to 64 back-ends, 500 above).
    #[arg(long)]
    iters: Option<usize>,
    /// Waves kept outstanding in the throughput test.
    #[arg(long, default_value_t = 32)]
    window: usize,
    /// Waves timed in the throughput test (default: 20000 up to 64 back-ends, 4000 above).
    #[arg(long)]
    waves: Option<usize>,
    /// fig7 (default) or load (figure 9: a filter costing --filter-cost-us per packet).
    #[arg(long, default_value = "fig7")]
    experiment: String,
    /// CPU cost of the load experiment's filter per input packet, in microseconds.
    #[arg(long, default_value_t = 20)]
    filter_cost_us: u64,
    /// Skip running the bare C floor for comparison.
    #[arg(long)]
    no_floor: bool,
    /// Links between the tree's processes: unix (default) or tcp (over loopback).
    #[arg(long, default_value = "unix", value_name = "unix|tcp")]
    transport: String,
    /// Protection of the links after their handshake: auto (none on Unix sockets, MACs
    /// on loopback TCP, encryption to other hosts), mac or encrypt.
    #[arg(long, default_value = "auto", value_name = "auto|mac|encrypt")]
    link_security: vargr_net::LinkSecurity,
}

#[derive(Serialize, Debug, Clone)]
struct Record {
    experiment: String,
    topology: String,
    shape: String,
    backends: usize,
    startup_s: f64,
    rtt_median_us: f64,
    rtt_p90_us: f64,
    rtt_p99_us: f64,
    rtt_mean_us: f64,
    iters: usize,
    waves_per_s: f64,
    window: usize,
    waves: usize,
    floor_rtt_median_us: Option<f64>,
    floor_waves_per_s: Option<f64>,
    filter_cost_us: Option<u64>,
    transport: String,
    link_security: String,
    /// The tree's processes after the timed waves, before shutdown.
    #[serde(flatten)]
    memory: crate::procs::Memory,
    /// From the shutdown request until every process of the tree has exited.
    shutdown_s: f64,
}

/// Writes `records` as pretty JSON to `json`, or to `bench/results/<default_name>`, and
/// says where.
pub(crate) fn write_records<T: Serialize>(
    json: Option<&Path>,
    default_name: &str,
    records: &[T],
) -> Result<()> {
    let path = json.map_or_else(
        || crate::results_dir().join(default_name),
        Path::to_path_buf,
    );
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&path, serde_json::to_string_pretty(records)?)
        .with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {} records to {}", records.len(), path.display());
    Ok(())
}

fn level_spec(n: usize) -> String {
    // The balanced two-level tree MRNet's experiments use: sqrt(n) commnodes.
    let k = (n as f64).sqrt().round() as usize;
    if k * k == n && k > 1 {
        format!("1x{k}x{n}")
    } else {
        format!("kary:4@{n}")
    }
}

/// The median (the mean of the middle two for an even count; NaN for none).
pub(crate) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

pub fn run(a: TreeArgs, programs: &Programs) -> Result<()> {
    let load = match a.experiment.as_str() {
        "fig7" => false,
        "load" | "fig9" => true,
        other => bail!("unknown --experiment {other:?} (expected fig7 or load)"),
    };
    let mut specs: Vec<String> = Vec::new();
    if let Some(t) = &a.topology {
        specs.push(t.clone());
    } else {
        let sizes: Vec<usize> = match a.backends {
            Some(n) => vec![n],
            None if load => vec![256],
            None => vec![4, 16, 64, 256],
        };
        for n in sizes {
            specs.push(format!("flat:{n}"));
            specs.push(if load {
                format!("kary:16@{n}")
            } else {
                level_spec(n)
            });
        }
    }
    // The back-ends are `vargr backend echo`.
    let exe = programs.vargr()?;
    let floor = if a.no_floor || load {
        None
    } else {
        build_floor()
    };
    let mut records = Vec::new();
    println!(
        "{:<14} {:>4} {:>9} {:>9} {:>9} {:>9} {:>10} {:>11} {:>11} {:>10} {:>9}",
        "topology",
        "BEs",
        "start s",
        "rtt med",
        "rtt p90",
        "rtt p99",
        "waves/s",
        "floor med",
        "floor w/s",
        "BE PSS KiB",
        "stop s"
    );
    for spec in &specs {
        let rec = run_one(exe, spec, &a, load, floor.as_deref())
            .with_context(|| format!("benchmark of {spec}"))?;
        println!(
            "{:<14} {:>4} {:>9.3} {:>9.1} {:>9.1} {:>9.1} {:>10.0} {:>11} {:>11} {:>10.0} {:>9.3}",
            rec.topology,
            rec.backends,
            rec.startup_s,
            rec.rtt_median_us,
            rec.rtt_p90_us,
            rec.rtt_p99_us,
            rec.waves_per_s,
            rec.floor_rtt_median_us
                .map(|v| format!("{v:.1}"))
                .unwrap_or_else(|| "-".into()),
            rec.floor_waves_per_s
                .map(|v| format!("{v:.0}"))
                .unwrap_or_else(|| "-".into()),
            rec.memory.backend_pss_kib_mean,
            rec.shutdown_s,
        );
        records.push(rec);
    }
    let name = if load { "tree-load.json" } else { "tree.json" };
    write_records(a.json.as_deref(), name, &records)?;
    Ok(())
}

fn run_one(
    exe: &Path,
    spec: &str,
    a: &TreeArgs,
    load: bool,
    floor: Option<&Path>,
) -> Result<Record> {
    let topo = Topology::generate(spec)?;
    let n = topo.num_backends();
    let mut opts = NetworkOptions {
        transport: a.transport.clone(),
        link_security: a.link_security,
        ..NetworkOptions::default()
    };
    // The configured commnode (VARGR_COMMNODE), else the vargr whose back-ends run.
    vargr_config::from_process()?.tree_defaults(&mut opts);
    opts.commnode_program
        .get_or_insert_with(|| exe.display().to_string());
    if load {
        opts.queue_limit = 1 << 20;
        // 256 back-ends sending flat out on 2 cores starve some of them of CPU for
        // seconds: their silence is load, not death.
        opts.heartbeat_timeout = std::time::Duration::from_secs(10);
    }
    let net = Network::new(
        topo.clone(),
        BackendSpec::command(exe.display().to_string(), &["backend", "echo"]),
        opts,
    )?;
    let startup_s = net.startup_time().as_secs_f64();
    let up = if load {
        format!("spin:{}", a.filter_cost_us)
    } else {
        "sum".to_string()
    };
    let stream = net.open_stream(&net.broadcast_communicator(), StreamOptions::new(&up))?;
    let big = n > 64;
    let iters = a.iters.unwrap_or(if big { 500 } else { 2000 });
    let mut rtts = Vec::with_capacity(iters);
    if !load {
        for i in 0..(iters / 10 + iters) {
            let t = Instant::now();
            stream.send(TAG_ECHO, "%d", vec![Value::Int(i as i32)])?;
            let p = stream.recv()?;
            let el = t.elapsed();
            let expect = i as i64 * n as i64;
            match p.values.first() {
                Some(Value::Int(v)) if *v as i64 == expect => {}
                other => bail!("round trip {i}: sum was {other:?}, expected {expect}"),
            }
            if i >= iters / 10 {
                rtts.push(el.as_secs_f64() * 1e6);
            }
        }
    }
    rtts.sort_by(f64::total_cmp);
    let waves = a.waves.unwrap_or(if big { 4000 } else { 20000 });
    let waves_per_s = if load {
        // Every back-end sends `waves` samples as fast as backpressure lets it.
        let t = Instant::now();
        stream.send(TAG_BURN, "%ud", vec![Value::UInt(waves as u32)])?;
        for _ in 0..waves {
            stream.recv()?;
        }
        waves as f64 / t.elapsed().as_secs_f64()
    } else {
        let window = a.window.max(1);
        let t = Instant::now();
        let mut sent = 0;
        while sent < window.min(waves) {
            stream.send(TAG_ECHO, "%d", vec![Value::Int(1)])?;
            sent += 1;
        }
        for _ in 0..waves {
            stream.recv()?;
            if sent < waves {
                stream.send(TAG_ECHO, "%d", vec![Value::Int(1)])?;
                sent += 1;
            }
        }
        waves as f64 / t.elapsed().as_secs_f64()
    };
    let (memory, pids) = crate::procs::sample();
    let t = Instant::now();
    net.shutdown()?;
    let left = crate::procs::survivors(&pids, std::time::Duration::from_secs(10));
    let shutdown_s = t.elapsed().as_secs_f64();
    if !left.is_empty() {
        bail!(
            "{} processes of the tree outlived its shutdown by 10 s: {left:?}",
            left.len()
        );
    }
    let (floor_rtt, floor_wps) = match floor {
        Some(f) => run_floor(f, &topo, iters, a.window, waves),
        None => (None, None),
    };
    let mean = if rtts.is_empty() {
        f64::NAN
    } else {
        rtts.iter().sum::<f64>() / rtts.len() as f64
    };
    Ok(Record {
        experiment: if load { "load".into() } else { "fig7".into() },
        topology: spec.to_string(),
        shape: shape_of(&topo),
        backends: n,
        startup_s,
        rtt_median_us: percentile(&rtts, 50.0),
        rtt_p90_us: percentile(&rtts, 90.0),
        rtt_p99_us: percentile(&rtts, 99.0),
        rtt_mean_us: mean,
        iters: rtts.len(),
        waves_per_s,
        window: a.window,
        waves,
        floor_rtt_median_us: floor_rtt,
        floor_waves_per_s: floor_wps,
        filter_cost_us: load.then_some(a.filter_cost_us),
        transport: a.transport.clone(),
        link_security: a.link_security.to_string(),
        memory,
        shutdown_s,
    })
}

/// The level list of a balanced topology (`1x4x16`), or None when levels are uneven.
fn shape_of(t: &Topology) -> String {
    let mut levels = vec![0usize; t.depth() + 1];
    let mut depth = vec![0usize; t.len()];
    for n in t.nodes() {
        let d = n.parent.map(|p| depth[p as usize] + 1).unwrap_or(0);
        depth[n.id as usize] = d;
        levels[d] += 1;
    }
    levels
        .iter()
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join("x")
}

/// Builds bench/floor/tree_floor (the bare C tree) if a C compiler is around.
fn build_floor() -> Option<PathBuf> {
    let src = Path::new("bench/floor/tree_floor.c");
    if !src.is_file() {
        return None;
    }
    let out = std::env::temp_dir().join(format!("vargr-tree-floor-{}", std::process::id()));
    let ok = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(src)
        .arg("-lm")
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    ok.then_some(out)
}

fn run_floor(
    bin: &Path,
    topo: &Topology,
    iters: usize,
    window: usize,
    waves: usize,
) -> (Option<f64>, Option<f64>) {
    let shape = shape_of(topo);
    // The floor program only knows balanced level lists.
    let counts: Vec<usize> = shape.split('x').filter_map(|s| s.parse().ok()).collect();
    if counts.windows(2).any(|w| w[1] % w[0] != 0) {
        return (None, None);
    }
    let get = |args: &[String], key: &str| -> Option<f64> {
        let out = Command::new(bin).args(args).output().ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        v.get(key)?.as_f64()
    };
    let rtt = get(
        &[shape.clone(), iters.to_string(), (iters / 10).to_string()],
        "rtt_median_us",
    );
    let wps = get(
        &[
            shape,
            waves.to_string(),
            "200".into(),
            "--window".into(),
            window.min(128).to_string(),
        ],
        "waves_per_s",
    );
    (rtt, wps)
}

/// The `manifest.tsv` of a benchmark's downloaded data in `dir`, and its text; when it
/// is missing and `fetch` allows, `script DIR` (run from the repository root) fetches
/// `what` first. Errors say what is missing and how to get it.
pub(crate) fn fetched_manifest(
    dir: &Path,
    script: &Path,
    fetch: bool,
    what: &str,
) -> std::result::Result<(PathBuf, String), String> {
    let manifest = dir.join("manifest.tsv");
    if !manifest.is_file() {
        if !fetch {
            return Err(format!("{} not found (--no-fetch)", manifest.display()));
        }
        if !script.is_file() {
            return Err(format!(
                "{} not found and no {} here (run from the repository root, or give --data)",
                manifest.display(),
                script.display()
            ));
        }
        eprintln!("fetching {what}: {} {}", script.display(), dir.display());
        let out = Command::new("sh")
            .arg(script)
            .arg(dir)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} failed: {}",
                script.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        eprint!("{}", String::from_utf8_lossy(&out.stdout));
    }
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| format!("reading {}: {e}", manifest.display()))?;
    Ok((manifest, text))
}

/// Runs `cmd` with its output captured; after `timeout` it is stopped with SIGTERM
/// (`vargr run` then ends its ranks) and the error names `what`.
pub(crate) fn output_within(mut cmd: Command, timeout: Duration, what: &str) -> Result<Output> {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => out.with_context(|| format!("waiting for {what}")),
        Err(_) => {
            // SAFETY: kill(2) on a child we started and have not reaped yet.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
            let _ = rx.recv_timeout(Duration::from_secs(10));
            bail!(
                "{what} took longer than {} s and was stopped",
                timeout.as_secs()
            )
        }
    }
}

/// Fails, naming `what` and quoting its standard error, unless `out` is a success.
pub(crate) fn check_output(out: &Output, what: &str) -> Result<()> {
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
