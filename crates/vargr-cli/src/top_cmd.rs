//! `vargr top`: a live terminal view of a monitored run (`vargr run --monitor`) or tree
//! (`NetworkOptions::monitor_status`).
//!
//! The job's monitor (or the network's front-end) rewrites a small status file after
//! every pull; `top` redraws it.
//! Reading a file instead of connecting to the job keeps `top` out of the job's way: it
//! can start, stop and run slowly without the job noticing.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use clap::Args;
use vargr_coll::monitor::Status;
use vargr_tbon::monitor::NetworkStatus;

/// The live monitor's flags, the same for `vargr run` and `vargr mpi-run`; `vargr top`
/// shows what such a monitor writes.
#[derive(Debug, Args)]
pub struct MonitorArgs {
    /// Run the live monitor: during the run it pulls every process's records of the
    /// world's collectives and reports on stderr which rank arrives last, how often, and
    /// how long the others wait for it (`load-balance`, the default). `stats` adds
    /// latency statistics (mean, min, max, standard deviation, median of the last 100
    /// calls); `stats,distributed` computes them in the ranks and gathers only the
    /// results. Watch it live with `vargr top`.
    #[arg(long, num_args = 0..=1, default_missing_value = "load-balance")]
    pub monitor: Option<String>,
    /// Collectors the monitor watches, as name patterns [default: the world
    /// communicator's collectives; ctx1.0/* is another communicator's].
    #[arg(long, requires = "monitor")]
    pub monitor_scope: Option<String>,
    /// Where the monitor keeps the status `vargr top` shows [default: a file per run in
    /// the user's runtime directory, which `vargr top` finds by itself].
    #[arg(long, requires = "monitor")]
    pub status: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// The status file (`vargr run --status FILE`); default: the newest run's.
    file: Option<PathBuf>,
    /// Print one view and exit (for scripts and logs).
    #[arg(long)]
    once: bool,
    /// Seconds between redraws.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
}

/// Where runs keep their status files unless told otherwise: `top` in the user's
/// runtime directory (see [`vargr_net::runtime_dir`]).
pub fn status_dir() -> PathBuf {
    vargr_net::runtime_dir::default_path().join("top")
}

fn newest(dir: &Path) -> Result<PathBuf> {
    let mut best: Option<(SystemTime, PathBuf)> = None;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "json") {
                if let Ok(m) = e.metadata().and_then(|m| m.modified()) {
                    if best.as_ref().is_none_or(|(t, _)| m > *t) {
                        best = Some((m, p));
                    }
                }
            }
        }
    }
    match best {
        Some((_, p)) => Ok(p),
        None => bail!(
            "no monitored run found in {} (start one with `vargr run --monitor ...`, \
             or name its status file)",
            dir.display()
        ),
    }
}

pub fn run(a: TopArgs) -> Result<()> {
    if !(a.interval > 0.0 && a.interval.is_finite()) {
        bail!("--interval must be a positive number of seconds");
    }
    let path = match &a.file {
        Some(p) => p.clone(),
        None => newest(&status_dir())?,
    };
    loop {
        let view = match std::fs::read(&path) {
            Ok(b) => {
                let age = std::fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|m| m.elapsed().ok())
                    .unwrap_or_default();
                let what = || format!("{}: not a vargr monitor status", path.display());
                let v: serde_json::Value = serde_json::from_slice(&b).with_context(what)?;
                if v.get("kind").and_then(|k| k.as_str()) == Some("network") {
                    render_network(&path, &serde_json::from_value(v).with_context(what)?, age)
                } else {
                    render(&path, &serde_json::from_value(v).with_context(what)?, age)
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !a.once => {
                format!("{}: the run has ended.\n", path.display())
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        if a.once {
            print!("{view}");
            return Ok(());
        }
        // Home the cursor and clear, like top.
        print!("\x1b[H\x1b[2J{view}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::thread::sleep(Duration::from_secs_f64(a.interval));
    }
}

fn stat_cell(s: Option<f64>) -> String {
    s.map_or("-".into(), |v| format!("{v:.1}"))
}

/// `[no update for N s]` when the file is older than a few periods.
fn staleness(age: Duration, period_ms: u64) -> String {
    if age.as_millis() as u64 > 3 * period_ms.max(100) + 1000 {
        format!("  [no update for {:.0} s]", age.as_secs_f64())
    } else {
        String::new()
    }
}

fn rate(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// The view of a network's status, as text.
pub fn render_network(path: &Path, st: &NetworkStatus, age: Duration) -> String {
    let every = match st.period_ms {
        0 => "one pull".to_string(),
        p => format!("pull every {p} ms"),
    };
    let mut o = format!(
        "vargr top — {}  tree of {} nodes, up {:.1} s, {every} through the tree (last took {:.2} ms){}\n",
        path.display(),
        st.nodes.len() + st.missing.len(),
        st.uptime_s,
        st.last_pull_ms,
        staleness(age, st.period_ms)
    );
    if !st.missing.is_empty() {
        o += &format!("not answering: nodes {:?}\n", st.missing);
    }
    o += &format!(
        "\n{:>7} {:>10} {:>10} {:>10}  {:<28}\n",
        "STREAM", "PACKETS/S", "WAVES/S", "FILTER µs", "LAST TO ARRIVE (path, share)"
    );
    for s in &st.streams {
        o += &format!(
            "{:>7} {:>10} {:>10} {:>10.1}  {:<28}\n",
            s.stream,
            rate(s.packets_per_s),
            rate(s.waves_per_s),
            s.filter_mean_us,
            match s.last_path.as_slice() {
                [] => "-".into(),
                path => format!(
                    "node {} via {} ({:.0} %)",
                    path[path.len() - 1],
                    path.iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join("→"),
                    s.last_share * 100.0
                ),
            }
        );
    }
    if st.streams.is_empty() {
        o += "(no stream traffic in the last period)\n";
    }
    o += &format!(
        "\n{:>5} {:<26} {:<12} {:>9} {:>9} {:>10} {:>10} {:>9} {:>9} {:>7} {:>11}\n",
        "NODE",
        "PROCESS",
        "HOST",
        "FRAMES/S↓",
        "FRAMES/S↑",
        "BYTES/S↓",
        "BYTES/S↑",
        "FILTER %",
        "RECORDS",
        "LOST",
        "CLOCK ±µs"
    );
    for n in &st.nodes {
        o += &format!(
            "{:>5} {:<26} {:<12} {:>9} {:>9} {:>10} {:>10} {:>9.2} {:>9} {:>7} {:>11.1}\n",
            n.node,
            n.process,
            n.host,
            rate(n.frames_in_per_s),
            rate(n.frames_out_per_s),
            rate(n.bytes_in_per_s),
            rate(n.bytes_out_per_s),
            n.filter_us_per_s / 1e4,
            n.records,
            n.lost,
            n.clock_error_ns as f64 / 1e3
        );
    }
    o
}

/// The view of one status, as text.
pub fn render(path: &Path, st: &Status, age: Duration) -> String {
    let mut o = String::new();
    o += &format!(
        "vargr top — {}  {} ranks, {} processes, up {:.1} s, pull every {} ms (last took {:.2} ms{}){}\n",
        path.display(),
        st.ranks,
        st.nodes.len(),
        st.uptime_s,
        st.period_ms,
        st.last_pull_ms,
        match st.connections {
            0 => String::new(),
            1 => ", over 1 connection".into(),
            n => format!(", over {n} connections"),
        },
        staleness(age, st.period_ms)
    );
    o += &format!(
        "records gathered {}  lost {}  gather rate {:.2} %{}\n\n",
        st.records,
        st.lost,
        st.gather_rate * 100.0,
        if st.sample > 1 {
            format!(
                "  analysing 1 call in {} (calls too frequent for every one; CALLS counts those)",
                st.sample
            )
        } else {
            String::new()
        }
    );
    if !st.missing.is_empty() {
        // Named by their parents in the gather tree; their answers join a later pull.
        o += &format!("not answering in time: {}\n", st.missing.join(", "));
    }
    o += &format!(
        "{:<24} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10}  {:<22} {:>9}\n",
        "COLLECTIVE",
        "CALLS",
        "CALLS/S",
        "MEAN µs",
        "MEDIAN µs",
        "MIN µs",
        "MAX µs",
        "LAST TO ARRIVE",
        "WAIT ms"
    );
    for c in &st.collectors {
        let l = c.latency_us.as_ref();
        o += &format!(
            "{:<24} {:>9} {:>9.0} {:>10} {:>10} {:>10} {:>10}  {:<22} {:>9.2}\n",
            c.name.trim_start_matches("ctx0/"),
            c.calls,
            c.rate,
            stat_cell(l.map(|s| s.mean)),
            stat_cell(l.map(|s| s.median)),
            stat_cell(l.map(|s| s.min)),
            stat_cell(l.map(|s| s.max)),
            c.culprit.map_or("-".into(), |r| format!(
                "rank {r} ({:.0} %)",
                c.culprit_share * 100.0
            )),
            c.longest_wait_ms
        );
    }
    if st.collectors.is_empty() {
        o += "(no complete collective call yet)\n";
    }
    // MPI ranks name their MPI too ("rank 0 of 4 (Open MPI v4.1.4)").
    let w = st
        .nodes
        .iter()
        .map(|n| n.process.chars().count())
        .max()
        .unwrap_or(0)
        .max(28);
    o += &format!(
        "\n{:<w$} {:<16} {:>12} {:>8} {:>12}\n",
        "PROCESS", "HOST", "RECORDS", "LOST", "CLOCK ±µs"
    );
    for n in &st.nodes {
        o += &format!(
            "{:<w$} {:<16} {:>12} {:>8} {:>12.1}\n",
            n.process,
            n.host,
            n.records,
            n.lost,
            n.clock_error_ns as f64 / 1e3
        );
    }
    if !st.node_stats.is_empty() {
        o += &format!(
            "\n{:<28} {:<24} {:>9} {:>10} {:>10} {:>10}\n",
            "PROCESS (distributed)", "COLLECTIVE", "CALLS", "MEAN µs", "MEDIAN µs", "MAX µs"
        );
        for (p, list) in &st.node_stats {
            for c in list {
                o += &format!(
                    "{:<28} {:<24} {:>9} {:>10.1} {:>10.1} {:>10.1}\n",
                    p,
                    c.collector.trim_start_matches("ctx0/"),
                    c.stats.count,
                    c.stats.mean,
                    c.stats.median,
                    c.stats.max
                );
            }
        }
    }
    o
}
