//! Lost nodes in the simulated tree: a back-end or a commnode dies mid-wave, the
//! front-end hears who and which back-ends, and the waves go on over the survivors.
//! (Recovery by adoption is in `recovery`.)

use std::time::Duration;

use vargr_wire::{Packet, Value};

use super::{Sim, SimConfig};
use crate::recovery::{Recovery, TreeEvent};
use crate::TbonError;

const STREAM: u32 = 16;

fn int(stream: u32, v: i64) -> Packet {
    Packet::new(stream, 0, "%ld", vec![Value::Long(v)]).unwrap()
}

fn long(p: &Packet) -> i64 {
    match p.values.first() {
        Some(Value::Long(v)) => *v,
        other => panic!("not a long: {other:?}"),
    }
}

/// One wave on `stream`: multicast `v`, every live back-end answers `echo(v)` or
/// `v + rank` (`by_rank`).
fn wave(sim: &mut Sim, stream: u32, v: i64, by_rank: bool) {
    sim.multicast(int(stream, v));
    for b in sim.live_backends() {
        sim.answer(b, 1, |rank, p| {
            let add = if by_rank { i64::from(rank) } else { 0 };
            int(stream, long(p) + add)
        });
    }
}

/// Moved from vargr-cli's `faults.rs` (it ran real processes, one exiting on its
/// second packet): rank 2 dies before answering wave 1. The loss is reported first,
/// with its node and rank; the wave and every later one reduce over the survivors; a
/// new stream over everyone waits for the living only.
#[test]
fn a_lost_back_end_leaves_the_others_working() {
    let mut sim = Sim::topology("1x2x4", SimConfig::default());
    let ranks = sim.ranks();
    sim.open(STREAM, ranks.clone(), "sum", "all").unwrap();
    wave(&mut sim, STREAM, 10, false);
    let ok: Vec<i64> = sim
        .results(STREAM)
        .iter()
        .map(|r| long(r.as_ref().unwrap()))
        .collect();
    assert_eq!(ok, vec![40]);

    let loser = sim.backends()[2];
    sim.multicast(int(STREAM, 100));
    sim.crash(loser);
    for b in sim.live_backends() {
        sim.answer(b, 1, |_, p| int(STREAM, long(p)));
    }
    let got = sim.results(STREAM);
    match &got[..] {
        [Err(e @ TbonError::NodeLost { node, backends, .. }), Ok(p)] => {
            assert_eq!(*node, loser, "{e}");
            assert_eq!(backends, &vec![2], "{e}");
            assert!(e.to_string().contains(&format!("node {loser}")), "{e}");
            assert_eq!(long(p), 300, "wave 1 over the three survivors");
        }
        other => panic!("expected the loss of node {loser}, then a result: {other:?}"),
    }
    for v in [1, 2, 3] {
        wave(&mut sim, STREAM, v, false);
        let got = sim.results(STREAM);
        assert!(matches!(&got[..], [Ok(p)] if long(p) == 3 * v), "{got:?}");
    }
    sim.open(STREAM + 1, ranks, "max", "all").unwrap();
    wave(&mut sim, STREAM + 1, 0, true);
    let got = sim.results(STREAM + 1);
    assert!(matches!(&got[..], [Ok(p)] if long(p) == 3), "{got:?}");
    assert_eq!(sim.router(0).deliveries().faults.len(), 1);
}

/// Moved from vargr-cli's `faults.rs` (it ran back-ends exiting at once): once every
/// back-end is lost, a new stream over them can never produce a result, and opening it
/// says so.
#[test]
fn a_stream_over_lost_back_ends_is_refused() {
    let mut sim = Sim::topology("flat:2", SimConfig::default());
    let ranks = sim.ranks();
    sim.open(STREAM, ranks.clone(), "sum", "all").unwrap();
    sim.multicast(int(STREAM, 1));
    for b in sim.backends() {
        sim.crash(b);
    }
    let got = sim.results(STREAM);
    assert!(matches!(got[0], Err(TbonError::NodeLost { .. })), "{got:?}");
    assert_eq!(sim.router(0).deliveries().faults.len(), 2);
    let r = sim.open(STREAM + 1, ranks, "sum", "all");
    assert!(
        matches!(&r, Err(TbonError::BadCommunicator(m)) if m.contains("reachable")),
        "{r:?}"
    );
}

/// Without recovery a commnode that dies mid-wave takes its sub-tree along: the
/// front-end hears of the commnode and the back-ends it took, its back-ends stop, and
/// the wave completes over the other half.
#[test]
fn without_recovery_a_lost_commnode_takes_its_sub_tree() {
    let cfg = SimConfig {
        recovery: Recovery::Off,
        ..SimConfig::default()
    };
    let mut sim = Sim::topology("1x2x4", cfg);
    let ranks = sim.ranks();
    sim.open(STREAM, ranks, "sum", "all").unwrap();
    sim.multicast(int(STREAM, 0));
    // Rank 0 answers into commnode 1, which dies with the wave half reduced.
    let rank0 = sim.backends()[0];
    sim.answer(rank0, 1, |rank, _| int(STREAM, 1 << rank));
    sim.crash(1);
    for b in sim.backends() {
        if sim.router(b).is_closed() {
            continue;
        }
        sim.answer(b, 1, |rank, _| int(STREAM, 1 << rank));
    }
    let got = sim.results(STREAM);
    match &got[..] {
        [Err(TbonError::NodeLost {
            node: 1, backends, ..
        }), Ok(p)] => {
            assert_eq!(backends, &vec![0, 1]);
            assert_eq!(long(p), 0b1100, "the wave over ranks 2 and 3");
        }
        other => panic!("{other:?}"),
    }
    for b in &sim.backends()[..2] {
        assert!(
            matches!(
                sim.router(*b).deliveries().closed,
                Some(TbonError::ParentLost(_))
            ),
            "node {b} stops with its parent"
        );
        assert!(!sim.router(*b).is_orphan());
    }
    assert_eq!(
        sim.router(0).deliveries().events,
        vec![TreeEvent::NodeLost {
            node: 1,
            host: "h1".into(),
            backends: vec![0, 1],
        }]
    );
}

/// A commnode that stops (SIGSTOP) keeps its links up but falls silent: its parent and
/// its back-ends each declare it dead after the heartbeat time-out, the back-ends are
/// orphans instead of stopping, and once adopted by the front-end waves include them
/// again.
#[test]
fn a_silent_commnode_is_declared_dead_and_its_back_ends_adopted() {
    let mut sim = Sim::topology("1x2x4", SimConfig::default());
    let ranks = sim.ranks();
    sim.open(STREAM, ranks, "sum", "all").unwrap();
    // A while of quiet: heartbeats keep every link alive.
    sim.advance(Duration::from_secs(5));
    assert!(sim.router(0).deliveries().faults.is_empty());
    sim.stop(1);
    sim.advance(SimConfig::default().heartbeat_timeout * 2);
    let lost: Vec<u32> = sim
        .router(0)
        .deliveries()
        .events
        .iter()
        .filter_map(|e| match e {
            TreeEvent::NodeLost { node, .. } => Some(*node),
            _ => None,
        })
        .collect();
    assert_eq!(lost, vec![1]);
    let orphans: Vec<u32> = sim.backends()[..2].to_vec();
    for &b in &orphans {
        assert!(sim.router(b).is_orphan(), "node {b}");
        sim.adopt_by(0, b).unwrap();
    }
    wave(&mut sim, STREAM, 0, true);
    let got = sim.results(STREAM);
    assert!(
        matches!(got.last(), Some(Ok(p)) if long(p) == 6),
        "a wave over all four ranks: {got:?}"
    );
}
