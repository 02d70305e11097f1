//! The seed's video distribution (PATHS, 001 §3 and §4.4) in one process: the front-end
//! publishes ~20 KB frames at 12.5 Hz into an observed element, and viewers of
//! different speeds at the back-ends each take the newest frame whenever they are ready
//! (last-observe). Every node of the tree caches the newest frame, so the two commnodes
//! fetch each frame once for their four viewers, and slow viewers skip frames instead
//! of queueing them.
//!
//! `cargo run -p vargr-tbon --example video`; `vargr bench video` measures the same over
//! an emulated WAN, with and without the caching commnodes.

use std::time::{Duration, Instant};

use vargr_tbon::{Backend, BackendSpec, Network, NetworkOptions, StreamOptions, TbonError, Value};
use vargr_topo::Topology;

const ELEMENT: u32 = 1;
const HZ: f64 = 12.5;
const FRAMES: u64 = 38;
const FRAME_BYTES: usize = 20_000;
/// Time each viewer spends on a frame, by rank (cycled): the feed's period is 80 ms.
const CONSUME_MS: [u64; 4] = [0, 40, 120, 250];

/// One viewer: the newest frame each time, until the last; then its count goes up the
/// stream the front-end opened.
fn viewer(be: Backend) {
    let start = match be.recv() {
        Ok(p) => p,
        Err(e) => return eprintln!("viewer {}: {e}", be.rank()),
    };
    let consume = Duration::from_millis(CONSUME_MS[be.rank() as usize % CONSUME_MS.len()]);
    let (mut have, mut seen) = (None, Vec::new());
    while have.is_none_or(|h| h < FRAMES) {
        match be.observe_newer(ELEMENT, have, Duration::from_secs(10)) {
            Ok((version, _frame)) => {
                seen.push(version);
                have = Some(version);
                std::thread::sleep(consume);
            }
            Err(TbonError::ObserveTimeout { .. }) => break,
            Err(e) => {
                eprintln!("viewer {}: {e}", be.rank());
                return;
            }
        }
    }
    let skipped = FRAMES - seen.len() as u64;
    let _ = be.send(
        start.stream,
        0,
        "%uld %uld",
        vec![Value::ULong(seen.len() as u64), Value::ULong(skipped)],
    );
    // A back-end that returns leaves the tree (a fault at the front-end): stay until
    // the shutdown.
    while be.recv().is_ok() {}
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Front-end, two commnodes, four viewers under each.
    let topo = Topology::generate("1x2x8")?;
    let net = Network::new(
        topo,
        BackendSpec::threads(viewer),
        NetworkOptions::default(),
    )?;
    let s = net.open_stream(&net.broadcast_communicator(), StreamOptions::new("null"))?;
    s.send(0, "%d", vec![Value::Int(0)])?;
    let period = Duration::from_secs_f64(1.0 / HZ);
    let t0 = Instant::now();
    for version in 1..=FRAMES {
        let mut frame = vec![(version % 251) as u8; FRAME_BYTES];
        frame[..8].copy_from_slice(&version.to_le_bytes());
        std::thread::sleep(
            (t0 + period.mul_f64((version - 1) as f64)).saturating_duration_since(Instant::now()),
        );
        net.publish(ELEMENT, version, &frame)?;
    }
    let mut reports = Vec::new();
    for _ in 0..net.num_backends() {
        let p = s
            .recv_timeout(Duration::from_secs(30))?
            .ok_or("a viewer did not report")?;
        if let [Value::ULong(got), Value::ULong(skipped)] = p.values.as_slice() {
            reports.push((p.source, *got, *skipped));
        }
    }
    reports.sort_unstable();
    for (rank, got, skipped) in reports {
        println!(
            "viewer {rank} ({:>3} ms a frame): {got:>2} frames, {skipped:>2} skipped",
            CONSUME_MS[rank as usize % CONSUME_MS.len()]
        );
    }
    net.shutdown()?;
    Ok(())
}
