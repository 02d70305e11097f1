//! Clock alignment in the simulated tree: every node's clock is the fake time plus a
//! skew of its own, so each estimate can be checked against the truth. With the same
//! latency both ways an edge's estimate is exact and its error bound is the latency;
//! an asymmetric edge is off by half the asymmetry, within its bound.

use std::time::Duration;

use vargr_trace::Alignment;
use vargr_wire::{Frame, FrameKind};

use super::{Sim, SimConfig};
use crate::clock::ClockMsgError;
use crate::TbonError;

/// Runs the exchange from the front-end until the tree settles.
fn align(sim: &mut Sim) {
    sim.on(0, |r, out| r.start_clock(out));
    sim.settle();
}

fn latency_ns() -> u64 {
    SimConfig::default().latency.as_nanos() as u64
}

#[test]
fn alignments_add_up_down_the_tree_and_reach_the_front_end() {
    // 0 → {1, 2} → two back-ends each: skews on every level, both signs.
    let mut sim = Sim::topology("1x2x4", SimConfig::default());
    let skews = [0i64, 50_000, -20_000, 7_000, -3_000_000, 123, -20_000];
    for (n, &s) in skews.iter().enumerate() {
        sim.skew(n as u32, s);
    }
    align(&mut sim);
    let reports = sim.router(0).clock_reports().clone();
    assert_eq!(reports.len(), skews.len(), "{reports:?}");
    assert_eq!(reports[&0], Alignment::ROOT);
    for (n, &truth) in skews.iter().enumerate().skip(1) {
        let n = n as u32;
        let a = reports[&n];
        let hops = if n <= 2 { 1 } else { 2 };
        assert_eq!(a.offset_ns, truth, "node {n}: {a:?}");
        assert_eq!(a.error_ns, hops as u64 * latency_ns(), "node {n}: {a:?}");
        assert_eq!(a.hops, hops, "node {n}");
        assert_eq!(sim.router(n).alignment(), Some(a), "node {n}");
        assert!(sim.router(n).clock_edges_done(), "node {n}");
    }
    assert!(sim.router(0).clock_edges_done());
    assert!(sim.router(0).deliveries().faults.is_empty());
}

#[test]
fn an_asymmetric_edge_is_off_by_half_the_asymmetry_within_its_bound() {
    let mut sim = Sim::topology("flat:1", SimConfig::default());
    sim.skew(1, 40_000);
    // 10 µs down, 90 µs up.
    sim.latency(1, 0, Duration::from_micros(90));
    align(&mut sim);
    let a = sim.router(0).clock_reports()[&1];
    assert_eq!(a.offset_ns, 40_000 - (90_000 - 10_000) / 2, "{a:?}");
    assert_eq!(a.error_ns, 50_000, "{a:?}");
    assert!((a.offset_ns - 40_000).unsigned_abs() <= a.error_ns);
}

#[test]
fn nodes_in_one_process_get_exact_edges_in_one_round() {
    let cfg = SimConfig {
        one_process: true,
        ..SimConfig::default()
    };
    let mut sim = Sim::topology("1x2x4", cfg);
    align(&mut sim);
    // Measured, every edge would be off by up to the latency.
    for n in 1..7 {
        let a = sim.router(n).alignment().unwrap();
        assert_eq!((a.offset_ns, a.error_ns), (0, 0), "node {n}: {a:?}");
    }
}

#[test]
fn malformed_clock_frames_are_faults_at_the_front_end_and_change_nothing() {
    let mut sim = Sim::topology("flat:1", SimConfig::default());
    sim.on(0, |r, out| r.start_clock(out));
    sim.inject(0, 1, Frame::new(FrameKind::ClockPong, 0, 0, vec![1u8; 3]));
    assert!(matches!(
        sim.router(0).deliveries().faults.as_slice(),
        [TbonError::Clock(ClockMsgError::Length {
            expected: 12,
            found: 3,
            ..
        })]
    ));
    assert!(!sim.router(0).clock_edges_done());
    // A child ignores a ClockSet that does not decode, and says nothing to its user.
    sim.inject(1, 0, Frame::new(FrameKind::ClockSet, 0, 0, vec![0u8; 2]));
    assert_eq!(sim.router(1).alignment(), None);
    assert!(sim.router(1).deliveries().faults.is_empty());
    // The exchange still completes.
    sim.settle();
    assert!(sim.router(0).clock_edges_done());
    assert!(sim.router(1).alignment().is_some());
}
