//! `vargr emu record` with real processes: a path through a `vargr emu` relay of a known
//! profile is recorded into a trace near that profile, and the trace replays with
//! `vargr emu --trace FILE`.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use vargr_emu::Trace;

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A `vargr ARGS` process in the background, killed when dropped.
struct Background(Child);

impl Background {
    fn start(args: &[&str]) -> Background {
        Background(
            Command::new(vargr())
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until something listens on `port` (the process binds after it starts).
fn listening(port: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing listens on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn record(port: u16, out: &std::path::Path, seconds: &str) -> Trace {
    let target = format!("127.0.0.1:{port}");
    let args = [
        "emu",
        "record",
        "--connect",
        &target,
        "--seconds",
        seconds,
        "--interval",
        "400ms",
        "--probe-bytes",
        "64k",
        "--out",
        out.to_str().unwrap(),
    ];
    let run = run_cli(&args, Duration::from_secs(60));
    assert!(run.status.success(), "vargr {args:?}\n{}", run.stderr);
    Trace::load(out).unwrap()
}

#[test]
fn a_recorded_path_is_near_its_profile_and_replays() {
    let d = tempfile::tempdir().unwrap();
    let (echo_port, relay_port, replay_port) = (free_port(), free_port(), free_port());
    let echo_addr = format!("127.0.0.1:{echo_port}");
    let _echo = Background::start(&["emu", "echo", "--listen", &echo_addr]);
    listening(echo_port);
    let relay_addr = format!("127.0.0.1:{relay_port}");
    let _relay = Background::start(&[
        "emu",
        "--listen",
        &relay_addr,
        "--connect",
        &echo_addr,
        "--latency",
        "6ms",
        "--bandwidth",
        "16mbit",
        "--no-realtime",
    ]);
    listening(relay_port);
    let recorded = d.path().join("recorded.trace");
    let trace = record(relay_port, &recorded, "1.5");
    assert!(trace.rows().len() >= 3, "{:?}", trace.rows());
    // Wide margins: the machine is shared, and a late wake-up only adds time.
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for r in trace.rows() {
        assert!((5.5..25.0).contains(&ms(r.latency)), "{r:?}");
        let mbit = r.bandwidth_bits_per_s.unwrap() as f64 / 1e6;
        assert!((8.0..24.0).contains(&mbit), "{r:?}");
    }
    // The file replays: a relay following it delays as the recorded path did.
    let trace_arg = recorded.to_str().unwrap().to_string();
    let replay_addr = format!("127.0.0.1:{replay_port}");
    let _replay = Background::start(&[
        "emu",
        "--listen",
        &replay_addr,
        "--connect",
        &echo_addr,
        "--trace",
        &trace_arg,
        "--no-realtime",
    ]);
    listening(replay_port);
    let again = record(replay_port, &d.path().join("again.trace"), "0.8");
    for r in again.rows() {
        assert!((5.5..40.0).contains(&ms(r.latency)), "{r:?}");
        let mbit = r.bandwidth_bits_per_s.unwrap() as f64 / 1e6;
        assert!((6.0..24.0).contains(&mbit), "{r:?}");
    }
}
