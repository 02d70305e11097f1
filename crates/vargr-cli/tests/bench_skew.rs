//! `vargr bench skew` on a small tree: both methods run on real processes with injected
//! clock offsets, and every estimate holds the truth within the bound it gives for
//! itself (exact for constant offsets), which fails if the offsets never reached the
//! nodes' clocks (estimates near 0 against offsets of at least 1 ms). No timing
//! assertions.

mod common;

use std::time::Duration;

use common::bench_records;

#[test]
fn skew_bench_estimates_known_offsets_within_their_bounds() {
    let records = bench_records(
        &[
            "bench",
            "skew",
            "--backends",
            "4",
            "--fanout",
            "2",
            "--runs",
            "1",
        ],
        Duration::from_secs(240),
    );
    let methods: Vec<&str> = records
        .iter()
        .map(|r| r["method"].as_str().unwrap())
        .collect();
    assert_eq!(methods, vec!["tree", "direct"]);
    for r in &records {
        assert_eq!(r["samples"], 4, "{r}");
        assert_eq!(r["within_bound_pct"], 100.0, "{r}");
    }
    assert_eq!(records[0]["depth"], 2);
    assert_eq!(records[1]["depth"], 1);
}
