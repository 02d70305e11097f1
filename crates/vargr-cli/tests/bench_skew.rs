//! `vargr bench skew` on a small tree: both methods run on real processes with injected
//! clock offsets, and every estimate holds the truth within the bound it gives for
//! itself (exact for constant offsets), which fails if the offsets never reached the
//! nodes' clocks (estimates near 0 against offsets of at least 1 ms). No timing
//! assertions.

mod common;

use std::process::Command;

use common::vargr;

#[test]
fn skew_bench_estimates_known_offsets_within_their_bounds() {
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("skew.json");
    let out = Command::new(vargr())
        .args([
            "bench",
            "skew",
            "--backends",
            "4",
            "--fanout",
            "2",
            "--runs",
            "1",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
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
