//! `vargr bench coll --gsum-shapes`: the seed's flat and hierarchical global sums (PATHS
//! figure 6) on a small job of real processes and threads. Every configuration makes a
//! record of its shape, and each rank checks one shaped sum's answer before rank 0
//! reports (a wrong sum fails the run).

mod common;

use std::time::Duration;

use common::run_cli;
use serde_json::Value;

#[test]
fn gsum_shapes_run_as_reduce_and_bcast_in_every_vargr_configuration() {
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("coll.json");
    let args = [
        "bench",
        "coll",
        "--ops",
        "gsum",
        "--ranks",
        "5",
        "--gsum-calls",
        "50",
        "--gsum-shapes",
        "flat,kary:2",
        "--no-mpi",
        "--json",
        json.to_str().unwrap(),
    ];
    let run = run_cli(&args, Duration::from_secs(240));
    assert!(
        run.status.success(),
        "stdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    let records: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let mut seen: Vec<(String, String)> = records
        .iter()
        .map(|r| {
            assert_eq!(r["ranks"], 5, "{r}");
            assert_eq!(r["iters"], 50, "{r}");
            assert!(r["per_call_us"].as_f64().unwrap() > 0.0, "{r}");
            let shape = r["shape"].as_str().unwrap_or("-").to_string();
            let alg = r["algorithm"].as_str().unwrap().to_string();
            match shape.as_str() {
                "-" => assert!(!alg.starts_with("reduce+bcast"), "{r}"),
                s => assert_eq!(alg, format!("reduce+bcast {s}"), "{r}"),
            }
            (shape, r["transport"].as_str().unwrap().to_string())
        })
        .collect();
    seen.sort();
    let mut want = Vec::new();
    for shape in ["-", "flat", "kary:2"] {
        for transport in ["processes", "sockets", "threads"] {
            want.push((shape.to_string(), transport.to_string()));
        }
    }
    want.sort();
    assert_eq!(seen, want);
    assert!(run.stdout.contains("gsum/kary:2"), "{}", run.stdout);
}
