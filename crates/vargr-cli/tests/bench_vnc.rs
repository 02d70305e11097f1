//! `vargr bench vnc` end to end on a small screen: a 3-second session recorded from a
//! real Xvnc, replayed over the Boston profile to Raw, ZRLE and Varg viewers. Checks
//! what must hold whatever the machine's speed: every update shown, the relay's byte
//! counts equal to the sockets' at both ends, the best direct method's ratio 1, every
//! viewer's last screen the recording's (hashed here independently), and a second run
//! replaying the same recording rather than making a new one.
//!
//! Skipped with a printed reason when Xvnc or xsetroot is missing, unless
//! `VARGR_REQUIRE_XVNC=1` (scripts/test.sh), which makes the skip a failure.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{vargr, wait_guarded};
use serde_json::Value;
use vargr_rfb::Framebuffer;
use vargr_vnc::{ProxyLimits, RecordReader};

#[path = "../../vargr-rfb/tests/xvnc_support/mod.rs"]
mod xvnc_support;

/// A session of its own (not bench/vnc/session.sh: fewer programs, and the test does
/// not change when the benchmark's sessions do): root colours, and an xterm that
/// scrolls, so the recording has CopyRects, when xterm is installed.
const DRAW: &str = r#"#!/usr/bin/env bash
set -eu
duration=$SECONDS
pid=
if command -v xterm >/dev/null; then
  xterm -geometry 30x8+0+0 -e bash -c 'for i in $(seq 1 300); do echo "line $i of a test log"; sleep 0.02; done; sleep 600' &
  pid=$!
fi
for c in '#203040' '#405060' '#204020'; do xsetroot -solid "$c"; sleep 0.3; done
sleep $((duration > 1 ? duration - 1 : 1))
[[ -n $pid ]] && kill "$pid"
exit 0
"#;

/// Runs `vargr bench vnc ARGS`; returns (success, stdout, stderr).
fn bench(args: &[&str], cwd: &Path) -> (bool, String, String) {
    let mut child = Command::new(vargr())
        .args(["bench", "vnc"])
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            r.read_to_string(&mut s).unwrap();
            s
        })
    };
    let out = read(Box::new(child.stdout.take().unwrap()));
    let err = read(Box::new(child.stderr.take().unwrap()));
    let status = wait_guarded(&mut child, Duration::from_secs(120)).expect("bench vnc hung");
    (status.success(), out.join().unwrap(), err.join().unwrap())
}

/// The hash the benchmark compares screens by, computed here from the recording.
fn recording_final_hash(path: &Path) -> String {
    let mut r =
        RecordReader::new(std::fs::File::open(path).unwrap(), ProxyLimits::default()).unwrap();
    let mut fb: Option<Framebuffer> = None;
    while let Some((_, m)) = r.next_record().unwrap() {
        m.paint_on(&mut fb).unwrap();
    }
    let fb = fb.unwrap();
    let seed = (fb.width() as u64) << 16 | fb.height() as u64;
    let bytes: Vec<u8> = fb.pixels().iter().flat_map(|p| p.to_ne_bytes()).collect();
    format!(
        "{:016x}",
        xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, seed)
    )
}

fn u(r: &Value, k: &str) -> u64 {
    r[k].as_u64().unwrap_or_else(|| panic!("{k} in {r}"))
}

#[test]
fn a_short_session_replays_to_every_method_and_every_update_is_shown() {
    let found = xvnc_support::find("Xvnc").filter(|_| xvnc_support::find("xsetroot").is_some());
    if found.is_none() {
        xvnc_support::skip(
            "Xvnc or xsetroot not found (tigervnc-standalone-server, x11-xserver-utils)",
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("draw.sh"), DRAW).unwrap();
    let common_args = [
        "--sessions",
        "test-draw",
        "--profiles",
        "boston",
        "--geometry",
        "320x200",
        "--seconds",
        "3",
        "--drain",
        "10",
        "--recordings",
        "rec",
        "--session-script",
        "draw.sh",
    ];
    let mut args = common_args.to_vec();
    args.extend([
        "--methods",
        "direct-raw,direct-zrle,varg",
        "--json",
        "vnc.json",
    ]);
    let (ok, out, err) = bench(&args, d.path());
    assert!(ok, "stdout:\n{out}\nstderr:\n{err}");
    assert!(err.contains("vnc: recorded test-draw"), "{err}");
    let rec = d.path().join("rec/test-draw.vncrec");
    let final_hash = recording_final_hash(&rec);
    let rows: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("vnc.json")).unwrap()).unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    let updates = u(&rows[0], "updates");
    assert!(updates >= 3, "a session that changes the screen: {rows:?}");
    for r in &rows {
        let what = format!("{}: {r}", r["method"]);
        assert_eq!(r["benchmark"], "vnc");
        assert_eq!(r["geometry"], "320x200");
        assert_eq!(u(r, "updates"), updates, "one recording for all: {what}");
        assert_eq!(u(r, "never_shown"), 0, "{what}");
        assert!(
            u(r, "bytes_to_viewer") > 0 && u(r, "bytes_to_server") > 0,
            "{what}"
        );
        assert_eq!(
            u(r, "bytes_on_wire"),
            u(r, "bytes_to_viewer") + u(r, "bytes_to_server")
        );
        assert_eq!(r["final_screen_equal"], true, "{what}");
        assert_eq!(r["final_screen_xxh3"], final_hash.as_str(), "{what}");
        assert_eq!(r["recording_final_xxh3"], final_hash.as_str(), "{what}");
        assert!(r["p90_update_ms"].as_f64().is_some(), "{what}");
        // Every update's pixels uncompressed: at least the first screen, 3 bytes a pixel.
        let uncompressed = u(r, "uncompressed_bytes");
        assert!(uncompressed >= 3 * 320 * 200, "{what}");
        let ratio = r["ratio_vs_uncompressed"].as_f64().unwrap();
        assert!(
            (ratio - uncompressed as f64 / u(r, "bytes_on_wire") as f64).abs() < 1e-9,
            "{what}"
        );
        let direct = r["method"].as_str().unwrap().starts_with("direct-");
        if direct {
            // The relay delivered exactly what the sockets at both ends counted.
            assert_eq!(u(r, "viewer_bytes_in"), u(r, "bytes_to_viewer"), "{what}");
            assert_eq!(u(r, "server_bytes_out"), u(r, "bytes_to_viewer"), "{what}");
            assert_eq!(u(r, "viewer_bytes_out"), u(r, "bytes_to_server"), "{what}");
            assert_eq!(u(r, "server_bytes_in"), u(r, "bytes_to_server"), "{what}");
        } else {
            // The far proxy's link counter is the relayed bytes less the link's
            // handshake (sealed records only).
            let report = r["far_proxy"].as_str().expect("the far proxy's report");
            let link_out: u64 = report
                .split("link ")
                .nth(1)
                .and_then(|s| s.split(' ').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("{report}"));
            let relayed = u(r, "bytes_to_viewer");
            assert!(
                link_out <= relayed && relayed - link_out < 1024,
                "{link_out} vs {relayed}: {what}"
            );
        }
    }
    let ratios: Vec<f64> = rows
        .iter()
        .filter(|r| r["method"].as_str().unwrap().starts_with("direct-"))
        .map(|r| r["ratio_vs_direct"].as_f64().unwrap())
        .collect();
    // The best direct method is the reference; the others send more.
    assert_eq!(
        ratios.iter().cloned().fold(0.0, f64::max),
        1.0,
        "{ratios:?}"
    );
    assert!(
        out.contains("boston (rtt=11ms,bandwidth=2.13MB/s)"),
        "{out}"
    );

    // Again: the recording is replayed, not made anew; another size is refused.
    let mut again = common_args.to_vec();
    again.extend(["--methods", "direct-hextile"]);
    let (ok, out, err) = bench(&again, d.path());
    assert!(ok, "stdout:\n{out}\nstderr:\n{err}");
    assert!(!err.contains("vnc: recorded"), "{err}");
    assert!(
        err.contains(&format!("test-draw: {updates} updates")),
        "{err}"
    );
    assert!(err.contains("0 never shown, final screen equal"), "{err}");
    let mut other: Vec<&str> = common_args
        .iter()
        .map(|&a| if a == "320x200" { "640x480" } else { a })
        .collect();
    other.extend(["--methods", "direct-hextile"]);
    let (ok, _, err) = bench(&other, d.path());
    assert!(
        !ok && err.contains("is 320x200, not --geometry 640x480"),
        "{err}"
    );
}
