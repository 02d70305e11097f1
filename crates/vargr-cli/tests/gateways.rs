//! The emulated WAN's shared gateways with real processes: flows between two sites, from
//! separate rank processes of one `vargr run` job, compete for one bottleneck per
//! direction, as they would on a real WAN (seed 000, Longcut's gateways), instead of each
//! link getting the whole bandwidth.

mod common;

use std::time::Duration;

use common::*;

/// The emulated WAN's bandwidth.
const WAN_BITS_PER_S: f64 = 20e6;

/// Runs 4 ranks (one process each) in two sites over the emulated WAN, with `pairs`
/// pairs streaming 1 MiB each across it at once; returns the aggregate bits per second.
fn aggregate(pairs: usize) -> f64 {
    let pairs = pairs.to_string();
    let args = [
        "run",
        "-n",
        "4",
        "--sites",
        "2",
        "--wan",
        "latency=1ms,bandwidth=20mbit",
        "--codec",
        "off",
        "--",
        vargr_bench(),
        "stream-check",
        "--pairs",
        &pairs,
    ];
    let run = run_cli(&args, Duration::from_secs(120));
    assert!(
        run.status.success(),
        "vargr {args:?}\nstdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("RESULT"))
        .unwrap_or_else(|| panic!("no RESULT line:\n{}", run.stdout));
    let words: Vec<&str> = line.split_whitespace().collect();
    let field = |name: &str| -> f64 {
        let i = words.iter().position(|w| *w == name).unwrap();
        words[i + 1].parse().unwrap()
    };
    assert_eq!(
        field("bytes") as usize,
        (1 << 20) * pairs.parse::<usize>().unwrap(),
        "{line}"
    );
    field("bits_per_s")
}

#[test]
fn flows_between_two_sites_share_one_bottleneck() {
    // Wide margins: the machine is shared, so only what no load can produce fails.
    let one = aggregate(1);
    assert!(
        one > 0.6 * WAN_BITS_PER_S && one < 1.5 * WAN_BITS_PER_S,
        "one flow: {one:.0} bit/s on a {WAN_BITS_PER_S} bit/s WAN"
    );
    // Two flows from two processes: together about the WAN's bandwidth, not twice it.
    let two = aggregate(2);
    assert!(
        two > 0.6 * WAN_BITS_PER_S && two < 1.5 * WAN_BITS_PER_S,
        "two flows: {two:.0} bit/s together on a {WAN_BITS_PER_S} bit/s WAN"
    );
}
