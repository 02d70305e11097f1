//! Fault recovery in the simulated tree: a commnode dies with a wave half reduced in
//! it; its back-ends are adopted by an ancestor; every wave's result and every report
//! is checked exactly.

use vargr_wire::{Packet, Value};

use super::{Sim, SimConfig};
use crate::recovery::TreeEvent;
use crate::TbonError;

const STREAM: u32 = 16;

/// Opens the `sum` stream over every back-end, waiting for all.
fn with_stream(mut sim: Sim) -> Sim {
    let ranks = sim.ranks();
    sim.open(STREAM, ranks, "sum", "all").unwrap();
    sim
}

/// Front-end 0 with children commnode 1 (back-ends 3 and 4: ranks 0 and 1) and back-end
/// 2 (rank 2).
fn tree() -> Sim {
    with_stream(Sim::rows(
        &[
            (0, 0, None),
            (1, 0, None),
            (2, 0, Some(2)),
            (3, 1, Some(0)),
            (4, 1, Some(1)),
        ],
        SimConfig::default(),
    ))
}

fn build(rows: &[(u32, u32, Option<u32>)]) -> Sim {
    with_stream(Sim::rows(rows, SimConfig::default()))
}

impl Sim {
    fn multicast_value(&mut self, v: i64) {
        self.multicast(Packet::new(STREAM, 0, "%ld", vec![Value::Long(v)]).unwrap());
    }

    /// Back-end `n` answers up to `max` of the multicasts it has heard: `v 2^rank`.
    fn answer_bits(&mut self, n: u32, max: usize) {
        self.answer(n, max, |rank, p| {
            Packet::new(
                STREAM,
                0,
                "%ld %ld",
                vec![p.values[0].clone(), Value::Long(1 << rank)],
            )
            .unwrap()
        });
    }

    /// The front-end's stream results so far: (sum, contributors) or the error.
    fn sums(&mut self) -> Vec<Result<(i64, i64), TbonError>> {
        self.results(STREAM)
            .into_iter()
            .map(|r| {
                r.map(|p| match p.values[..] {
                    [Value::Long(s), Value::Long(m)] => (s, m),
                    _ => panic!("{p:?}"),
                })
            })
            .collect()
    }

    fn adopt_by_root(&mut self, n: u32) {
        self.adopt_by(0, n).unwrap();
    }
}

fn waves_lost(sim: &Sim) -> Vec<(u64, u64, Vec<u32>)> {
    sim.router(0)
        .deliveries()
        .events
        .iter()
        .filter_map(|e| match e {
            TreeEvent::WavesLost {
                first,
                end,
                backends,
                ..
            } => Some((*first, *end, backends.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn orphans_adopted_mid_stream_line_up_and_every_loss_is_reported() {
    let mut sim = tree();
    // Wave 0: everyone.
    sim.multicast_value(1);
    for n in [2, 3, 4] {
        sim.answer_bits(n, 1);
    }
    assert!(matches!(sim.sums()[..], [Ok((3, 0b111))]));

    // Wave 1: rank 0 answers into node 1, which then dies with the wave half reduced.
    sim.multicast_value(2);
    sim.answer_bits(3, 1);
    sim.kill(1);
    sim.lose(0, 1);
    for n in [3, 4] {
        sim.lose(n, 1);
        assert!(sim.router(n).is_orphan(), "node {n} orphaned");
        assert!(!sim.router(n).is_closed());
    }
    // Wave 2 is multicast while the orphans are unreachable; rank 2 answers wave 1 only.
    sim.multicast_value(3);
    sim.answer_bits(2, 1);
    // Rank 1 answers wave 1 while orphaned: held, and dropped by the adopter as late.
    sim.answer_bits(4, 1);

    sim.adopt_by_root(3);
    sim.adopt_by_root(4);
    // Wave 2 waits for no orphan (they never heard it); wave 3 has everyone again.
    sim.answer_bits(2, 1);
    sim.multicast_value(4);
    for n in [2, 3, 4] {
        sim.answer_bits(n, 1);
    }
    let results = sim.sums();
    let lost = |b: u32| TbonError::WavesLost {
        stream: STREAM,
        first: 1,
        end: 3,
        backends: vec![b],
        lost: 1,
    };
    let oks: Vec<(i64, i64)> = results.iter().filter_map(|r| r.clone().ok()).collect();
    assert_eq!(
        oks,
        vec![(2, 0b100), (3, 0b100), (4 * 3, 0b111)],
        "waves 1 and 2 hold rank 2 alone, wave 3 everyone: {results:?}"
    );
    let errs: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    assert!(errs[0].contains("node 1 on h1 was lost"), "{errs:?}");
    assert_eq!(errs[1..], [lost(0).to_string(), lost(1).to_string()]);
    let events = &sim.router(0).deliveries().events;
    let moved = |node: u32, b: u32| TreeEvent::Reparented {
        node,
        lost_parent: 1,
        new_parent: 0,
        backends: vec![b],
    };
    let gone = |b: u32| TreeEvent::WavesLost {
        stream: STREAM,
        first: 1,
        end: 3,
        backends: vec![b],
        lost: 1,
    };
    assert_eq!(
        events,
        &vec![
            TreeEvent::NodeLost {
                node: 1,
                host: "h1".into(),
                backends: vec![0, 1]
            },
            gone(0),
            moved(3, 0),
            gone(1),
            moved(4, 1),
        ]
    ); // Node 1 back from the dead, still claiming both: refused, not handed them back.
    let stale = sim.router(0).children_claiming(&[0, 1]);
    assert!(stale.is_err(), "{stale:?}");
}

/// Commnode 2 dies with a wave half reduced in it; its parent, commnode 1, reports the
/// loss from that wave on and dies too before adopting anyone. The front-end adopts
/// every orphan and still reports the loss of ranks 0 and 1 from wave 1, where it
/// began, not from wave 2, where the front-end itself first missed them.
#[test]
fn a_loss_seen_by_a_node_that_died_too_is_reported_from_its_first_wave() {
    // 0 -> {1, 5 (rank 2)}; 1 -> {2, 6 (rank 3)}; 2 -> {3 (rank 0), 4 (rank 1)}.
    let mut sim = build(&[
        (0, 0, None),
        (1, 0, None),
        (2, 1, None),
        (3, 2, Some(0)),
        (4, 2, Some(1)),
        (5, 0, Some(2)),
        (6, 1, Some(3)),
    ]);
    let backends = [3, 4, 5, 6];
    sim.multicast_value(1);
    for n in backends {
        sim.answer_bits(n, 1);
    }
    // Wave 1: rank 0 answers into node 2, which dies; node 1 goes on with rank 3.
    sim.multicast_value(2);
    sim.answer_bits(3, 1);
    sim.kill(2);
    sim.lose(1, 2);
    sim.settle();
    sim.answer_bits(6, 1);
    sim.answer_bits(5, 1);
    // Node 1 dies; wave 2 reaches rank 2 alone.
    sim.kill(1);
    sim.lose(0, 1);
    for (n, parent) in [(3, 2), (4, 2), (6, 1)] {
        sim.lose(n, parent);
    }
    sim.multicast_value(3);
    sim.answer_bits(5, 1);
    sim.adopt_by_root(3);
    sim.adopt_by_root(4);
    sim.adopt_by_root(6);
    // Rank 1's answer to wave 1 comes late, and is dropped; wave 3 has everyone.
    sim.answer_bits(4, 1);
    sim.multicast_value(4);
    for n in backends {
        sim.answer_bits(n, 1);
    }
    let oks: Vec<(i64, i64)> = sim.sums().into_iter().filter_map(Result::ok).collect();
    assert_eq!(
        oks,
        vec![(4, 0b1111), (2 * 2, 0b1100), (3, 0b100), (4 * 4, 0b1111)]
    );
    let lost = waves_lost(&sim);
    assert_eq!(
        lost,
        vec![(1, 3, vec![0]), (1, 3, vec![1]), (2, 3, vec![3])],
        "{:#?}",
        sim.router(0).deliveries().events
    );
}

/// Adopted with nothing in flight, ranks 0 and 1 lose no wave; lost again later, the
/// report starts at the later loss, not at the first one.
#[test]
fn a_loss_that_cost_no_wave_is_forgotten_at_the_adoption() {
    // 0 -> {1, 5 (rank 2)}; 1 -> 2; 2 -> {3 (rank 0), 4 (rank 1)}.
    let mut sim = build(&[
        (0, 0, None),
        (1, 0, None),
        (2, 1, None),
        (3, 2, Some(0)),
        (4, 2, Some(1)),
        (5, 0, Some(2)),
    ]);
    let backends = [3, 4, 5];
    sim.multicast_value(1);
    for n in backends {
        sim.answer_bits(n, 1);
    }
    sim.kill(2);
    sim.lose(1, 2);
    for n in [3, 4] {
        sim.lose(n, 2);
    }
    sim.settle();
    sim.adopt_by(1, 3).unwrap();
    sim.adopt_by(1, 4).unwrap();
    for v in [2, 3] {
        sim.multicast_value(v);
        for n in backends {
            sim.answer_bits(n, 1);
        }
    }
    // Wave 3: rank 0 answers into node 1, which dies.
    sim.multicast_value(4);
    sim.answer_bits(3, 1);
    sim.kill(1);
    sim.lose(0, 1);
    for n in [3, 4] {
        sim.lose(n, 1);
    }
    sim.answer_bits(5, 1);
    sim.adopt_by_root(3);
    sim.adopt_by_root(4);
    sim.answer_bits(4, 1);
    sim.multicast_value(5);
    for n in backends {
        sim.answer_bits(n, 1);
    }
    let oks: Vec<(i64, i64)> = sim.sums().into_iter().filter_map(Result::ok).collect();
    assert_eq!(
        oks,
        vec![(3, 0b111), (6, 0b111), (9, 0b111), (4, 0b100), (15, 0b111)]
    );
    assert_eq!(
        waves_lost(&sim),
        vec![(3, 4, vec![0]), (3, 4, vec![1])],
        "{:#?}",
        sim.router(0).deliveries().events
    );
}
