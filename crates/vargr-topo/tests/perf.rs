//! Size limits of the largest accepted topologies. Timings are printed (run with
//! `--nocapture`), never asserted: speed belongs to benchmarks, not tests. Debug builds
//! run the secondary cases at a tenth of the size to keep `cargo test` quick.

use std::time::{Duration, Instant};

use vargr_topo::{Topology, MAX_NODES};

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let v = f();
    (v, start.elapsed())
}

fn check_time(what: &str, took: Duration, limit: Duration) {
    eprintln!("{what}: {took:?} (budget {limit:?})");
}

#[test]
fn million_node_flat_tree() {
    let (t, took) = timed(|| Topology::generate("flat:999999").unwrap());
    assert_eq!(t.len(), MAX_NODES);
    assert_eq!(t.num_backends(), MAX_NODES - 1);
    let ((), took_validate) = timed(|| t.validate().unwrap());
    check_time("generate flat:999999", took, Duration::from_millis(500));
    check_time("validate", took_validate, Duration::from_millis(500));
    check_time(
        "generate + validate",
        took + took_validate,
        Duration::from_millis(900),
    );
    assert!(Topology::generate("flat:1000000").is_err());
    if cfg!(debug_assertions) {
        return;
    }
    let (text, took) = timed(|| t.to_mrnet());
    check_time("to_mrnet", took, Duration::from_secs(1));
    let (again, took) = timed(|| Topology::parse_mrnet(&text, "big").unwrap());
    check_time("parse_mrnet", took, Duration::from_secs(2));
    assert_eq!(again, t);
    let (drawing, took) = timed(|| t.draw());
    check_time("draw", took, Duration::from_secs(1));
    assert_eq!(drawing.lines().count(), 9);
}

#[test]
fn million_node_deep_and_knomial_trees() {
    let scale = if cfg!(debug_assertions) { 10 } else { 1 };
    let n = 400_000 / scale;
    let (t, took) = timed(|| Topology::generate(&format!("kary:2@{n}")).unwrap());
    check_time("generate kary:2@400000", took, Duration::from_secs(1));
    assert_eq!(t.num_backends(), n);
    assert!(1usize << t.depth() >= n && 1usize << (t.depth() - 1) < n);
    let n = 600_000 / scale;
    let (t, took) = timed(|| Topology::generate(&format!("binomial@{n}")).unwrap());
    check_time("generate binomial@600000", took, Duration::from_secs(1));
    assert_eq!(t.num_backends(), n);
    assert!(t.draw().lines().count() < 200);
    // a million-node chain draws, sub-trees and drops without recursion
    let len = 1_000_000 / scale;
    let chain = vec!["1"; len - 1].join("x") + "x1";
    let (t, took) = timed(|| Topology::generate(&chain).unwrap());
    check_time(
        "generate 1x1x...x1 (1M levels)",
        took,
        Duration::from_secs(1),
    );
    assert_eq!(t.depth(), len - 1);
    assert!(t.draw().lines().count() < 100);
    assert_eq!(t.subtree(len as u32 / 2).unwrap().len(), len / 2);
    assert_eq!(t.backends_under(0), vec![0]);
}
