//! `vargr bench longcut` on a tiny run: every workload under every WAN makes a
//! well-formed record, the constant WAN holds the varying trace's means, and slowdowns
//! are against it.

mod common;

use std::time::Duration;

use common::bench_records;

#[test]
fn trace_against_constant_records_every_workload_under_every_wan() {
    let args = [
        "bench",
        "longcut",
        "--pingpong-iters",
        "3",
        "--allreduce-iters",
        "3",
        "--sizes",
        "8",
        "--sor-side",
        "16",
        "--sor-epsilon",
        "5",
    ];
    let records = bench_records(&args, Duration::from_secs(240));
    // Three WANs (constant, eventspace, nws) by three workloads.
    assert_eq!(records.len(), 9, "{records:?}");
    let find = |w: &str, t: &str| {
        records
            .iter()
            .find(|r| r["workload"] == w && r["trace"] == t)
            .unwrap_or_else(|| panic!("no {w} under {t}"))
    };
    for w in ["pingpong", "allreduce", "sor"] {
        let c = find(w, "constant");
        assert_eq!(c["slowdown"], 1.0, "{c}");
        let es = find(w, "eventspace");
        // The constant WAN is the varying trace's means.
        assert_eq!(c["mean_latency_ms"], es["mean_latency_ms"], "{c} {es}");
        assert_eq!(
            c["mean_bandwidth_mbit"], es["mean_bandwidth_mbit"],
            "{c} {es}"
        );
        for t in ["constant", "eventspace", "nws"] {
            let r = find(w, t);
            let (mean, slow) = (
                r["mean_us"].as_f64().unwrap(),
                r["slowdown"].as_f64().unwrap(),
            );
            let base = c["mean_us"].as_f64().unwrap();
            assert!(mean > 0.0 && (slow - mean / base).abs() < 1e-9, "{r}");
        }
    }
    // The NWS-like WAN is the seed's slower, lower-latency measurement of the link.
    let nws = find("pingpong", "nws");
    assert!(nws["mean_bandwidth_mbit"].as_f64().unwrap() < 7.0, "{nws}");
}
