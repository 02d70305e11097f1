//! `vargr bench sor` on a small grid, as real processes on one site and across an
//! emulated WAN: every user-level scheduler computes the same grid, and every record
//! carries the overdecomposition metrics (TLP, rank states, CPU times, context
//! switches, and hardware counters or why there are none).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::run_cli;
use serde_json::Value;

const PER_PROCESS: u64 = 2;

fn share(v: &Value, key: &str) -> f64 {
    let x = v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {v}"));
    assert!((0.0..=1.0 + 1e-9).contains(&x), "{key} = {x}: {v}");
    x
}

#[test]
fn every_scheduler_computes_the_same_grid_and_reports_thread_usage() {
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("sor.json");
    let args = [
        "bench",
        "sor",
        "--side",
        "24",
        "--epsilon",
        "5",
        "--per-core",
        "2",
        "--net",
        "lan,wan",
        "--tests",
        "cond",
        "--rtt",
        "2ms",
        "--sample-ms",
        "1",
        "--repeat",
        "2",
        "--json",
        json.to_str().unwrap(),
    ];
    let run = run_cli(&args, Duration::from_secs(300));
    assert!(
        run.status.success(),
        "vargr {args:?}\nstdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    for col in ["TLP_1", "TLP_2", "sys s", "switches"] {
        assert!(run.stdout.contains(col), "no {col} column:\n{}", run.stdout);
    }
    let records: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // Four schedulers on each of the two networks.
    assert_eq!(records.len(), 8, "{records:?}");
    let scheds: BTreeSet<&str> = records
        .iter()
        .map(|r| r["sched"].as_str().unwrap())
        .collect();
    assert_eq!(
        scheds,
        BTreeSet::from(["coschedule", "none", "priority", "serialize"])
    );
    let first = &records[0];
    for r in &records {
        // The same answer under every scheduler, on both networks.
        assert_eq!(r["iterations"], first["iterations"], "{r}");
        assert_eq!(r["checksum"], first["checksum"], "{r}");
        assert!(r["iterations"].as_u64().unwrap() > 10, "{r}");
        assert_eq!(r["runs_s"].as_array().unwrap().len(), 2, "{r}");
        let (t1, t2) = (share(r, "tlp_1"), share(r, "tlp_2"));
        assert!(t2 <= t1 + 1e-9, "{r}");
        let states = share(r, "computing_share")
            + share(r, "communication_share")
            + share(r, "slot_wait_share");
        assert!((states - 1.0).abs() < 1e-6, "{r}");
        share(r, "os_runnable_2");
        assert!(r["system_s"].as_f64().unwrap() >= 0.0, "{r}");
        assert!(r["user_s"].as_f64().unwrap() >= 0.0, "{r}");
        // Linux keeps per-task scheduler statistics: time runnable without a CPU.
        assert!(
            r["runqueue_wait_s"].as_f64().is_some_and(|w| w >= 0.0),
            "{r}"
        );
        // Ranks block in receives and wake up: the kernel counted their switches.
        let switches =
            r["voluntary_switches"].as_u64().unwrap() + r["involuntary_switches"].as_u64().unwrap();
        assert!(switches > 0, "{r}");
        // Counters, or the kernel's reason for refusing them.
        let has_counters = r["instructions"].as_u64().is_some_and(|n| n > 0);
        let why = r["counters_unavailable"].as_str().unwrap_or("");
        assert!(has_counters || !why.is_empty(), "{r}");
        let procs = r["processes"].as_array().unwrap();
        let ranks = r["ranks"].as_u64().unwrap();
        assert_eq!(procs.len() as u64 * PER_PROCESS, ranks, "{r}");
        for p in procs {
            assert_eq!(p["ranks"], PER_PROCESS, "{p}");
            let tlp: f64 = p["tlp"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .sum();
            assert!((tlp - 1.0).abs() < 1e-6, "{p}");
            assert!(
                p["tlp"].as_array().unwrap().len() as u64 <= PER_PROCESS + 1,
                "{p}"
            );
            assert!(p["transitions"].as_u64().unwrap() > 0, "{p}");
            assert!(p["os_samples"].as_u64().unwrap() > 0, "{p}");
            let per_rank = p["per_rank"].as_array().unwrap();
            assert_eq!(per_rank.len() as u64, PER_PROCESS, "{p}");
        }
    }
    let wan = records.iter().filter(|r| r["sites"] == 2).count();
    assert_eq!(wan, 4);
}
