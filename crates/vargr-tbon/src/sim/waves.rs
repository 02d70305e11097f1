//! Waves in the simulated tree: multicasts down every level, answers synchronised and
//! reduced on the way up, results exact and in order, over every shape the topology
//! generator knows and over sub-communicators.

use std::time::Duration;

use vargr_wire::{Packet, Value};

use super::{Sim, SimConfig};
use crate::proto::StreamOpenMsg;

const STREAM: u32 = 16;

fn long(p: &Packet) -> i64 {
    match p.values.first() {
        Some(Value::Long(v)) => *v,
        other => panic!("not a long: {other:?}"),
    }
}

fn value(stream: u32, v: i64) -> Packet {
    Packet::new(stream, 0, "%ld", vec![Value::Long(v)]).unwrap()
}

/// Every back-end answers each packet it holds with `v + rank`.
fn answer_all(sim: &mut Sim, stream: u32) {
    for n in sim.backends() {
        sim.answer(n, usize::MAX, |rank, p| {
            value(stream, long(p) + i64::from(rank))
        });
    }
}

fn results_ok(sim: &mut Sim, stream: u32) -> Vec<i64> {
    sim.results(stream)
        .into_iter()
        .map(|r| long(&r.expect("a result")))
        .collect()
}

#[test]
fn sums_are_exact_through_every_shape() {
    for spec in ["flat:8", "1x2x4", "kary:4@16", "binomial@8", "kary:2^4"] {
        let mut sim = Sim::topology(spec, SimConfig::default());
        let ranks = sim.ranks();
        let n = ranks.len() as i64;
        sim.open(STREAM, ranks, "sum", "all").unwrap();
        sim.multicast(value(STREAM, 1000));
        answer_all(&mut sim, STREAM);
        assert_eq!(
            results_ok(&mut sim, STREAM),
            vec![1000 * n + n * (n - 1) / 2],
            "{spec}: Σ(1000 + rank)"
        );
    }
}

#[test]
fn pipelined_waves_come_back_in_order() {
    let mut sim = Sim::topology("kary:2^3", SimConfig::default());
    let ranks = sim.ranks();
    let n = ranks.len() as i64;
    sim.open(STREAM, ranks, "sum", "all").unwrap();
    for i in 0..20 {
        sim.multicast(value(STREAM, i * 100));
    }
    // Back-ends answer in different orders of one another: waves still line up.
    for b in sim.backends().into_iter().rev() {
        sim.answer(b, usize::MAX, |rank, p| {
            value(STREAM, long(p) + i64::from(rank))
        });
    }
    let want: Vec<i64> = (0..20).map(|i| i * 100 * n + n * (n - 1) / 2).collect();
    assert_eq!(results_ok(&mut sim, STREAM), want);
}

#[test]
fn fields_and_arrays_reduce_element_wise() {
    let mut sim = Sim::topology("1x2x4", SimConfig::default());
    let ranks = sim.ranks();
    sim.open(STREAM, ranks, "sum", "all").unwrap();
    sim.multicast(value(STREAM, 0));
    for b in sim.backends() {
        sim.answer(b, 1, |rank, _| {
            let r = rank as i32;
            let vals = vec![Value::Long(1 << 40), Value::IntArray(vec![1, -2, r])];
            Packet::new(STREAM, 0, "%ld %ad", vals).unwrap()
        });
    }
    let r = sim.results(STREAM);
    let p = r[0].as_ref().unwrap();
    assert_eq!(p.values[0], Value::Long(4 << 40));
    assert_eq!(p.values[1], Value::IntArray(vec![4, -8, 6]));
}

#[test]
fn sub_communicators_reduce_over_their_members_only() {
    let mut sim = Sim::topology("kary:4@16", SimConfig::default());
    let subsets: [&[u32]; 4] = [&[0], &[15], &[1, 7, 15], &[1, 4, 7, 10, 13]];
    let mut id = STREAM;
    for ranks in subsets {
        let lo = i64::from(ranks[0]);
        let hi = i64::from(*ranks.last().unwrap());
        let total: i64 = ranks.iter().map(|&r| 10 + i64::from(r)).sum();
        for (filter, want) in [("min", 10 + lo), ("max", 10 + hi), ("sum", total)] {
            sim.open(id, ranks.to_vec(), filter, "all").unwrap();
            sim.multicast(value(id, 10));
            answer_all(&mut sim, id);
            assert_eq!(
                results_ok(&mut sim, id),
                vec![want],
                "{filter} over ranks {ranks:?}"
            );
            id += 1;
        }
    }
    // Back-ends outside every communicator heard nothing.
    let rank_2 = sim.backends()[2];
    assert!(sim.router(rank_2).deliveries().inbox.is_empty());
}

#[test]
fn a_time_out_wave_goes_on_without_the_late_back_end() {
    let mut sim = Sim::topology("flat:4", SimConfig::default());
    let ranks = sim.ranks();
    sim.open(STREAM, ranks, "sum", "timeout:50ms").unwrap();
    let start = sim.now();
    sim.multicast(value(STREAM, 0));
    let late = *sim.backends().last().unwrap();
    for b in sim.backends().into_iter().filter(|&b| b != late) {
        sim.reply(b, 1, |rank, _| value(STREAM, 1 << rank));
    }
    sim.settle();
    // Settling ran the time-out: the wave left without rank 3.
    assert!(sim.now() >= start + Duration::from_millis(50));
    assert_eq!(results_ok(&mut sim, STREAM), vec![0b0111]);
    // Its late answer is a wave of its own.
    sim.answer(late, 1, |rank, _| value(STREAM, 1 << rank));
    assert_eq!(results_ok(&mut sim, STREAM), vec![0b1000]);
}

#[test]
fn dont_wait_forwards_every_packet_as_it_comes() {
    let mut sim = Sim::topology("1x2x4", SimConfig::default());
    let ranks = sim.ranks();
    sim.open(STREAM, ranks, "null", "dontwait").unwrap();
    sim.multicast(value(STREAM, 5));
    answer_all(&mut sim, STREAM);
    let mut got = results_ok(&mut sim, STREAM);
    got.sort_unstable();
    assert_eq!(got, vec![5, 6, 7, 8]);
}

/// A latest-mode stream keeps one slot per back-end: a front-end that reads late gets
/// each back-end's newest packet, and none older.
#[test]
fn latest_mode_keeps_each_back_ends_newest_for_a_late_reader() {
    let mut sim = Sim::topology("1x2x4", SimConfig::default());
    let ranks = sim.ranks();
    sim.open_msg(StreamOpenMsg {
        id: STREAM,
        members: ranks,
        up: "null".into(),
        sync: "dontwait".into(),
        down: None,
        latest: true,
        update: false,
        up_backend: None,
        up_frontend: None,
        per_node: Vec::new(),
        wave_deadline_ms: None,
    })
    .unwrap();
    for i in 0..50 {
        sim.multicast(value(STREAM, i * 10));
    }
    // One answer at a time, each reaching the front-end before the next leaves: it is
    // the front-end's queue that keeps the newest, not a backed-up link.
    for _ in 0..50 {
        for b in sim.backends() {
            sim.answer(b, 1, |rank, p| value(STREAM, long(p) + i64::from(rank)));
        }
    }
    let mut got: Vec<(u32, i64)> = sim
        .results(STREAM)
        .into_iter()
        .map(|r| {
            let p = r.unwrap();
            (p.source, long(&p))
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, vec![(0, 490), (1, 491), (2, 492), (3, 493)]);
}
