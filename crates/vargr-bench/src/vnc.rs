//! `vargr bench vnc`: Varg against direct VNC over the seed's slow links (issue 28).
//!
//! **Sessions.** Each session (`scrolling-text`, `panning-image`, `redrawn-plot`,
//! `idle`) is recorded once from TigerVNC's Xvnc while `bench/vnc/session.sh NAME`
//! draws on it, into `--recordings DIR` (default `target/vnc-recordings`) as
//! `NAME.vncrec`; an existing file is replayed as it is, so every method and every
//! later run sees identical sessions. `vargr vnc --record DIR` writes the same format,
//! so a user's own sessions replay here too.
//!
//! **Direct VNC**, as measured here, is a replay server (vargr-vnc's `NearSide` fed the
//! recording at its recorded times) serving the viewer in the encoding it asks for
//! (Raw, Hextile, ZRLE or Tight without JPEG), with CopyRect where the recording has
//! one. Like Xvnc it answers one outstanding request at a time with everything changed
//! since its last answer, so a viewer behind a slow link gets fewer, larger updates,
//! as it would from a real server; its encoders are vargr-rfb's, not TigerVNC's.
//! **Varg** is the viewer (ZRLE, on the LAN) → a near `vargr vnc` process → the
//! emulated WAN → a far `vargr vnc` process → the same replay server, each replay with
//! empty caches. The WAN is vargr's relay (`vargr_emu::Relay`) with the seed's
//! profiles; its byte counts, both ways, are the bytes on the wire.
//!
//! **Latency** of an update is the time from the replay server applying it to the
//! viewer's screen being current: the screen's hash after every recorded update is
//! known, and the viewer (in this process, on the same clock) looks up its own hash
//! after each update it draws; every update up to the newest matching state is then
//! shown. Updates not shown `--drain` seconds after the last one count as never shown.
//! The recording's clock starts when the server gets the viewer's first message after
//! the RFB handshake, so setting up the connection (direct: RFB's handshake over the
//! WAN; varg: the proxies' link) counts for no update.
//!
//! Rows go to the table (per profile) and, with `--json`, to `bench/results/vnc.json`.

mod record;
mod replay;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use vargr_emu::WanProfile;
use vargr_rfb::encoding::{HEXTILE, RAW, TIGHT, ZRLE};

use crate::Programs;
use record::{RecordPlan, Recording};
use replay::{Outcome, Route};

/// The seed's WAN profiles (its Table 22): name, text for `WanProfile`.
pub const PROFILES: [(&str, &str); 3] = [
    ("boston", "rtt=11ms,bandwidth=2.13MB/s"),
    ("san-diego", "rtt=72ms,bandwidth=0.38MB/s"),
    ("tromso", "rtt=120ms,bandwidth=0.20MB/s"),
];

pub const SESSIONS: [&str; 5] = [
    "scrolling-text",
    "panning-image",
    "redrawn-plot",
    "idle",
    "revisited-slides",
];

const METHODS: [&str; 5] = [
    "direct-raw",
    "direct-hextile",
    "direct-zrle",
    "direct-tight",
    "varg",
];

/// Methods run only when asked for: `varg-tiles` is the pair with the far proxy's
/// `--regions tiles`, which separates what Varg's regions cost from the rest.
const EXTRA_METHODS: [&str; 1] = ["varg-tiles"];

#[derive(Args, Clone, Debug)]
pub struct VncBenchArgs {
    /// Write the rows as JSON, to PATH or bench/results/vnc.json.
    #[arg(
        long,
        value_name = "PATH",
        num_args = 0..=1,
        default_missing_value = "bench/results/vnc.json"
    )]
    json: Option<PathBuf>,
    /// Sessions to replay (comma-separated; default scrolling-text, panning-image,
    /// redrawn-plot, idle, revisited-slides). A session not yet in --recordings is
    /// recorded first.
    #[arg(long, value_delimiter = ',')]
    sessions: Vec<String>,
    /// WAN profiles (comma-separated): boston (11 ms RTT, 2.13 MB/s), san-diego (72 ms,
    /// 0.38 MB/s), tromso (120 ms, 0.20 MB/s); default all three.
    #[arg(long, value_delimiter = ',', value_parser = ["boston", "san-diego", "tromso"])]
    profiles: Vec<String>,
    /// Methods (comma-separated): direct-raw, direct-hextile, direct-zrle,
    /// direct-tight, varg (default all five), and varg-tiles (the pair cutting changes
    /// into tiles instead of Varg's regions).
    #[arg(long, value_delimiter = ',', value_parser = [METHODS.as_slice(), EXTRA_METHODS.as_slice()].concat())]
    methods: Vec<String>,
    /// Length of a new recording, in seconds (the session script's SECONDS).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// Where recordings are kept (NAME.vncrec) and looked for.
    #[arg(long, value_name = "DIR", default_value = "target/vnc-recordings")]
    recordings: PathBuf,
    /// Screen size of new recordings.
    #[arg(long, value_name = "WxH", default_value = "1024x768")]
    geometry: String,
    /// Seconds a replay goes on after the last update for the viewer to catch up;
    /// updates still not shown then count as never shown.
    #[arg(long, default_value_t = 5.0)]
    drain: f64,
    /// The script that draws a session on $DISPLAY for $SECONDS.
    #[arg(long, value_name = "PATH", default_value = "bench/vnc/session.sh")]
    session_script: PathBuf,
}

fn chosen<'a>(list: &'a [String], all: &[&'a str]) -> Vec<&'a str> {
    if list.is_empty() {
        all.to_vec()
    } else {
        list.iter().map(String::as_str).collect()
    }
}

fn parse_geometry(text: &str) -> Result<(u16, u16)> {
    let parsed = text
        .split_once('x')
        .and_then(|(w, h)| Some((w.parse::<u16>().ok()?, h.parse::<u16>().ok()?)));
    match parsed {
        Some((w, h)) if w >= 64 && h >= 64 => Ok((w, h)),
        _ => bail!("--geometry {text:?}: expected WIDTHxHEIGHT, each 64 to 65535, e.g. 1024x768"),
    }
}

fn route(method: &str) -> Route {
    match method {
        "direct-raw" => Route::Direct(RAW),
        "direct-hextile" => Route::Direct(HEXTILE),
        "direct-zrle" => Route::Direct(ZRLE),
        "direct-tight" => Route::Direct(TIGHT),
        "varg-tiles" => Route::Varg { tiles: true },
        _ => Route::Varg { tiles: false },
    }
}

/// One row of the results.
#[derive(Serialize, Debug, Clone)]
struct Row {
    benchmark: &'static str,
    session: String,
    profile: String,
    profile_spec: String,
    method: String,
    /// Both directions, as the relay delivered them.
    bytes_on_wire: u64,
    bytes_to_viewer: u64,
    bytes_to_server: u64,
    /// Bytes of the best direct method for this session and profile ÷ this method's.
    ratio_vs_direct: Option<f64>,
    /// The recording's updates as uncompressed pixels, 3 bytes each (every rectangle
    /// of every update, a CopyRect as its area): what the seed's ratios (30:1 to 289:1)
    /// were against.
    uncompressed_bytes: u64,
    ratio_vs_uncompressed: f64,
    updates: usize,
    never_shown: usize,
    /// Nearest-rank percentiles over all updates, never-shown ones as infinitely slow
    /// (null when the percentile falls on one).
    p50_update_ms: Option<f64>,
    p90_update_ms: Option<f64>,
    frac_under_100ms: f64,
    /// FramebufferUpdates the viewer received.
    viewer_updates: u64,
    final_screen_equal: bool,
    /// xxh3 of the viewer's last screen (hex), against the recording's last.
    final_screen_xxh3: Option<String>,
    recording_final_xxh3: String,
    geometry: String,
    recording_seconds: f64,
    replay_seconds: f64,
    drain_seconds: f64,
    /// Bytes counted at the viewer's and the replay server's sockets.
    viewer_bytes_in: u64,
    viewer_bytes_out: u64,
    server_bytes_in: u64,
    server_bytes_out: u64,
    /// The far proxy's session report (varg).
    far_proxy: Option<String>,
    command: String,
}

/// Nearest-rank percentile of latencies in ms, `None` counting as infinite.
fn percentile(sorted: &[Option<f64>], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let k = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[k]
}

fn row(
    session: &str,
    (profile, spec): (&str, &str),
    method: &str,
    rec: &Recording,
    o: &Outcome,
    drain: f64,
    command: &str,
) -> Row {
    let mut ms: Vec<Option<f64>> = o
        .latencies
        .iter()
        .map(|l| l.map(|d| d.as_secs_f64() * 1e3))
        .collect();
    ms.sort_by(|a, b| match (a, b) {
        (Some(x), Some(y)) => x.total_cmp(y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    let n = ms.len();
    let under = ms.iter().filter(|m| m.is_some_and(|v| v < 100.0)).count();
    let last = *rec.hashes.last().expect("a recording has steps");
    let uncompressed = rec.uncompressed_bytes();
    Row {
        benchmark: "vnc",
        session: session.into(),
        profile: profile.into(),
        profile_spec: spec.into(),
        method: method.into(),
        bytes_on_wire: o.forward + o.backward,
        bytes_to_viewer: o.backward,
        bytes_to_server: o.forward,
        ratio_vs_direct: None,
        uncompressed_bytes: uncompressed,
        ratio_vs_uncompressed: uncompressed as f64 / (o.forward + o.backward).max(1) as f64,
        updates: n,
        never_shown: ms.iter().filter(|m| m.is_none()).count(),
        p50_update_ms: percentile(&ms, 0.5),
        p90_update_ms: percentile(&ms, 0.9),
        frac_under_100ms: if n == 0 { 0.0 } else { under as f64 / n as f64 },
        viewer_updates: o.viewer_updates,
        final_screen_equal: o.final_hash == Some(last),
        final_screen_xxh3: o.final_hash.map(|h| format!("{h:016x}")),
        recording_final_xxh3: format!("{last:016x}"),
        geometry: format!("{}x{}", rec.width, rec.height),
        recording_seconds: rec.seconds(),
        replay_seconds: o.seconds,
        drain_seconds: drain,
        viewer_bytes_in: o.viewer_in,
        viewer_bytes_out: o.viewer_out,
        server_bytes_in: o.server_in,
        server_bytes_out: o.server_out,
        far_proxy: o.far_report.clone(),
        command: command.into(),
    }
}

/// Fills in each row's ratio against the fewest bytes of a direct method with the
/// same session and profile.
fn set_ratios(rows: &mut [Row]) {
    let best: Vec<Option<u64>> = rows
        .iter()
        .map(|r| {
            rows.iter()
                .filter(|d| {
                    d.session == r.session
                        && d.profile == r.profile
                        && d.method.starts_with("direct-")
                })
                .map(|d| d.bytes_on_wire)
                .min()
        })
        .collect();
    for (r, b) in rows.iter_mut().zip(best) {
        r.ratio_vs_direct = b.map(|b| b as f64 / r.bytes_on_wire.max(1) as f64);
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "never".into(), |v| format!("{v:.0}"))
}

fn print_tables(rows: &[Row], profiles: &[(&str, &str)]) {
    for (name, spec) in profiles {
        println!("\n{name} ({spec})");
        println!(
            "{:<16} {:<15} {:>10} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7} {:>6}",
            "session",
            "method",
            "KB",
            "ratio",
            "vs unc",
            "updates",
            "p50 ms",
            "p90 ms",
            "<100ms",
            "never"
        );
        for r in rows.iter().filter(|r| r.profile == *name) {
            println!(
                "{:<16} {:<15} {:>10.1} {:>7} {:>7.1} {:>8} {:>7} {:>7} {:>6.1}% {:>6}",
                r.session,
                r.method,
                r.bytes_on_wire as f64 / 1e3,
                r.ratio_vs_direct
                    .map_or_else(|| "-".into(), |x| format!("{x:.2}")),
                r.ratio_vs_uncompressed,
                r.updates,
                ms(r.p50_update_ms),
                ms(r.p90_update_ms),
                r.frac_under_100ms * 100.0,
                r.never_shown
            );
        }
    }
}

pub fn run(a: VncBenchArgs, programs: &Programs) -> Result<()> {
    let (width, height) = parse_geometry(&a.geometry)?;
    ensure!(
        a.drain.is_finite() && a.drain >= 0.0,
        "--drain {}: expected seconds, 0 or more",
        a.drain
    );
    let drain = Duration::from_secs_f64(a.drain);
    let sessions = chosen(&a.sessions, &SESSIONS);
    for s in &sessions {
        ensure!(
            !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "--sessions {s:?}: a session is named by letters, digits and '-' (its file is \
             NAME.vncrec)"
        );
    }
    let profiles: Vec<(&str, &str)> = chosen(&a.profiles, &PROFILES.map(|p| p.0))
        .into_iter()
        .map(|n| *PROFILES.iter().find(|p| p.0 == n).expect("clap checked"))
        .collect();
    let methods = chosen(&a.methods, &METHODS);
    let vargr = if methods.iter().any(|m| m.starts_with("varg")) {
        Some(programs.vargr()?.to_path_buf())
    } else {
        None
    };
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let scratch = std::env::temp_dir().join(format!("vargr-bench-vnc-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let result = run_all(
        &a,
        &sessions,
        &profiles,
        &methods,
        vargr.as_deref(),
        (width, height),
        drain,
        &scratch,
        &command,
    );
    let _ = std::fs::remove_dir_all(&scratch);
    let mut rows = result?;
    set_ratios(&mut rows);
    print_tables(&rows, &profiles);
    if let Some(path) = &a.json {
        crate::tree::write_records(Some(path), "vnc.json", &rows)?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn run_all(
    a: &VncBenchArgs,
    sessions: &[&str],
    profiles: &[(&str, &str)],
    methods: &[&str],
    vargr: Option<&Path>,
    (width, height): (u16, u16),
    drain: Duration,
    scratch: &Path,
    command: &str,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for session in sessions {
        let path = a.recordings.join(format!("{session}.vncrec"));
        record::ensure(&RecordPlan {
            session,
            path: &path,
            seconds: a.seconds,
            width,
            height,
            script: &a.session_script,
        })?;
        let rec = Arc::new(record::load(&path)?);
        eprintln!(
            "vnc: {session}: {} updates over {:.1} s ({})",
            rec.steps.len(),
            rec.seconds(),
            path.display()
        );
        for &(profile, spec) in profiles {
            let wan: WanProfile = spec.parse().with_context(|| format!("profile {spec}"))?;
            // Interleaved: each method right after the others, on alike machine state.
            for &method in methods {
                let o = replay::replay(
                    &rec,
                    wan,
                    route(method),
                    vargr.unwrap_or(Path::new("vargr")),
                    drain,
                    scratch,
                )
                .with_context(|| format!("replaying {session} over {profile} by {method}"))?;
                let r = row(session, (profile, spec), method, &rec, &o, a.drain, command);
                eprintln!(
                    "vnc: {session} {profile} {method}: {:.1} KB, {} updates, p50 {} ms, p90 {} \
                     ms, {:.1}% under 100 ms, {} never shown, final screen {}; {:.1} s",
                    r.bytes_on_wire as f64 / 1e3,
                    r.updates,
                    ms(r.p50_update_ms),
                    ms(r.p90_update_ms),
                    r.frac_under_100ms * 100.0,
                    r.never_shown,
                    if r.final_screen_equal {
                        "equal"
                    } else {
                        "DIFFERS"
                    },
                    o.seconds
                );
                rows.push(r);
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_profiles_parse_as_meant() {
        // MB/s is megabytes (×8 bits); rtt is halved into each direction's latency.
        let want = [
            (5_500, 17_040_000),
            (36_000, 3_040_000),
            (60_000, 1_600_000),
        ];
        for ((_, spec), (latency_us, bits)) in PROFILES.iter().zip(want) {
            let p: WanProfile = spec.parse().unwrap();
            assert_eq!(p.latency, Duration::from_micros(latency_us), "{spec}");
            assert_eq!(p.bandwidth_bits_per_s, Some(bits), "{spec}");
        }
    }

    #[test]
    fn percentiles_count_never_shown_updates_as_slowest() {
        let v = [Some(1.0), Some(2.0), Some(3.0), None];
        assert_eq!(percentile(&v, 0.5), Some(2.0));
        assert_eq!(percentile(&v, 0.75), Some(3.0));
        assert_eq!(percentile(&v, 0.9), None);
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn geometry_is_checked() {
        assert_eq!(parse_geometry("1024x768").unwrap(), (1024, 768));
        for bad in ["1024", "x768", "10x768", "1024x768x1", "70000x768"] {
            assert!(parse_geometry(bad).is_err(), "{bad}");
        }
    }
}
