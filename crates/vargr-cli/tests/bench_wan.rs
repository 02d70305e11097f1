//! `vargr bench wan` and `vargr bench noise` on a small job of real processes over an
//! emulated WAN: every input makes well-formed records, and conditional allreduce
//! settles alone exactly the tests each input's definition lets a site settle.

mod common;

use std::time::Duration;

use common::bench_records;
use serde_json::Value;
use vargr_bench::cond_inputs::{Input, TraceArgs, Workload};

const RANKS: usize = 6;
const SITES: usize = 3;

/// Small SOR grids, so the traces are a few dozen calls long.
fn trace() -> TraceArgs {
    TraceArgs {
        sor_side: 16,
        sor_epsilon: 5.0,
        grid_seed: 1,
    }
}

/// The job and SOR flags both benches take.
const JOB: &[&str] = &[
    "--ranks",
    "6",
    "--sites",
    "3",
    "--ranks-per-process",
    "2",
    "--rtt",
    "2ms",
    "--sor-side",
    "16",
    "--sor-epsilon",
    "5",
    "--grid-seed",
    "1",
];

fn bench(args: &[&str]) -> Vec<Value> {
    let mut all: Vec<&str> = args.to_vec();
    all.extend_from_slice(JOB);
    bench_records(&all, Duration::from_secs(240))
}

fn input(name: &str) -> Input {
    Input::ALL
        .into_iter()
        .find(|i| i.name() == name)
        .unwrap_or_else(|| panic!("unknown input {name:?}"))
}

/// A record is well-formed; a conditional one counts, per site, the tests its input
/// lets that site settle alone (within the sums that lie on epsilon to rounding).
fn check(r: &Value, benchmark: &str) {
    assert_eq!(r["benchmark"], benchmark, "{r}");
    assert_eq!(r["ranks"], RANKS as u64, "{r}");
    assert_eq!(r["bytes"], 8, "{r}");
    let iters = r["iterations"].as_u64().unwrap();
    let (mean, median, p90) = (
        r["mean_us"].as_f64().unwrap(),
        r["median_us"].as_f64().unwrap(),
        r["p90_us"].as_f64().unwrap(),
    );
    assert!(
        iters > 0 && mean > 0.0 && median > 0.0 && median <= p90,
        "{r}"
    );
    let wan = r["sites"] == SITES as u64;
    assert_eq!(r["wan_rtt_ms"], if wan { 2.0 } else { 0.0 }, "{r}");
    if r["algorithm"] != "cond_allreduce" {
        assert!(r["decided_locally"].is_null(), "{r}");
        assert!(r.get("decided_locally_by_site").is_none(), "{r}");
        return;
    }
    let name = r["input"].as_str().unwrap();
    let w = Workload::new(input(name), RANKS, SITES, &trace(), iters).unwrap();
    let by_site: Vec<u64> = r["decided_locally_by_site"]
        .as_array()
        .unwrap_or_else(|| panic!("no per-site counts: {r}"))
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(r["decided_locally"].as_u64(), Some(by_site[0]), "{r}");
    let expected = w.decided_locally();
    assert_eq!(by_site.len(), SITES, "{r}");
    for (got, (want, close)) in by_site.iter().zip(&expected) {
        assert!(
            got.abs_diff(*want) <= *close,
            "{name}: {by_site:?} against {expected:?}"
        );
    }
    match w.input() {
        Input::Best => assert_eq!(by_site, vec![iters - 1; SITES], "{r}"),
        Input::Worst => assert_eq!(by_site, vec![0; SITES], "{r}"),
        _ => {
            // Whole replays; each one's converged call needs every site.
            let len = w.trace_len();
            assert_eq!(iters % len, 0, "{r}");
            assert!(
                by_site.iter().all(|&l| l > 0 && l + iters / len <= iters),
                "{r}"
            );
        }
    }
}

#[test]
fn bench_wan_runs_every_input_and_counts_what_each_lets_sites_decide() {
    let records = bench(&[
        "bench",
        "wan",
        "--wan-iters",
        "4",
        "--gsum-iters",
        "25",
        "--trace-iters",
        "60",
    ]);
    // One site, then tree, MagPIe and cond_allreduce on each of the five inputs.
    assert_eq!(records.len(), 1 + 3 * 5);
    for r in &records {
        check(r, "gsum-wan");
    }
    for name in ["best", "worst", "frosty", "tridiagonal", "random"] {
        let algs: Vec<&Value> = records
            .iter()
            .filter(|r| r["input"] == name && r["sites"] == SITES as u64)
            .map(|r| &r["algorithm"])
            .collect();
        assert_eq!(
            algs,
            ["hierarchical:tree", "hierarchical:magpie", "cond_allreduce"],
            "{name}"
        );
    }
    // A traced input replays its trace whole, as near 60 calls as it gets.
    for r in records
        .iter()
        .filter(|r| r["algorithm"] == "cond_allreduce")
    {
        let w = Workload::new(
            input(r["input"].as_str().unwrap()),
            RANKS,
            SITES,
            &trace(),
            1,
        )
        .unwrap();
        let want = match w.input() {
            Input::Best => 25,
            Input::Worst => 4,
            _ => w.replays(60).1,
        };
        assert_eq!(r["iterations"], want, "{r}");
    }
}

#[test]
fn bench_noise_sorts_between_calls_and_counts_late_iterations() {
    let records = bench(&[
        "bench",
        "noise",
        "--compute-ms",
        "1",
        "--iters",
        "12",
        "--inputs",
        "best,worst,sor",
        "--modes",
        "tree,cond",
        "--rounds",
        "2",
    ]);
    let names: Vec<(&str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["algorithm"].as_str().unwrap(),
                r["input"].as_str().unwrap(),
            )
        })
        .collect();
    // Two rounds of the same runs; `sor` is the old name of frosty.
    let round = [
        ("hierarchical:tree", "best"),
        ("cond_allreduce", "best"),
        ("cond_allreduce", "worst"),
        ("cond_allreduce", "frosty"),
    ];
    assert_eq!(names, [round, round].concat());
    // Every run sorts the same list, tuned once.
    let len = records[0]["noise"]["sort_len"].as_u64().unwrap();
    assert!(len > 0);
    for (i, r) in records.iter().enumerate() {
        check(r, "noise-allreduce");
        let n = &r["noise"];
        let iters = r["iterations"].as_u64().unwrap();
        assert_eq!(n["compute_target_ms"], 1.0, "{r}");
        assert_eq!(
            (n["sort_len"].as_u64(), n["round"].as_u64()),
            (Some(len), Some(i as u64 / 4)),
            "{r}"
        );
        assert!(n["compute_mean_ms"].as_f64().unwrap() > 0.0, "{r}");
        // The loop's wall time covers every iteration's mean.
        let total_us = n["total_s"].as_f64().unwrap() * 1e6;
        assert!(
            (total_us - r["mean_us"].as_f64().unwrap() * iters as f64).abs() < 1.0,
            "{r}"
        );
        let delayed: Vec<(f64, u64)> = n["delayed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["over_ms"].as_f64().unwrap(),
                    d["iterations"].as_u64().unwrap(),
                )
            })
            .collect();
        let over: Vec<f64> = delayed.iter().map(|d| d.0).collect();
        assert_eq!(over, [1.0, 5.0, 10.0, 30.0], "{r}");
        // Counts of "later than x" fall as x grows, and stay within the iterations.
        assert!(delayed.windows(2).all(|w| w[0].1 >= w[1].1), "{r}");
        assert!(delayed[0].1 <= iters, "{r}");
    }
}
