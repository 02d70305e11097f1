//! Backpressure in the simulated tree: a node pauses reading where its next hop is
//! backed up (see `Router::apply_backpressure`), so a slow link or an unread front-end
//! slows the producers instead of filling memory, and a paused link is never taken for
//! a dead one.

use std::time::Duration;

use vargr_wire::{Packet, Value};

use super::{Sim, SimConfig};

const STREAM: u32 = 16;
const KIB: usize = 1024;

fn small_queue() -> SimConfig {
    SimConfig {
        queue_limit: 64 * KIB,
        ..SimConfig::default()
    }
}

fn int(v: i64) -> Packet {
    Packet::new(STREAM, 0, "%ld", vec![Value::Long(v)]).unwrap()
}

fn long(p: &Packet) -> i64 {
    match p.values.first() {
        Some(Value::Long(v)) => *v,
        other => panic!("not a long: {other:?}"),
    }
}

/// Every back-end echoes whatever reaches it, until nothing more does.
fn echo_everything(sim: &mut Sim) {
    while let Some(b) = sim
        .backends()
        .into_iter()
        .find(|&b| !sim.router(b).deliveries().inbox.is_empty())
    {
        sim.answer(b, usize::MAX, |_, p| int(long(p)));
    }
}

/// Reads the front-end's results until `n` have come, letting the tree go on between
/// reads.
fn read(sim: &mut Sim, n: usize) -> Vec<i64> {
    let mut got = Vec::new();
    while got.len() < n {
        let more = sim.results(STREAM);
        assert!(!more.is_empty(), "results stopped after {}", got.len());
        got.extend(more.into_iter().map(|r| long(&r.unwrap())));
        sim.settle();
    }
    got
}

/// A 1 KiB packet carrying `i` first.
fn kib(i: i32) -> Packet {
    let mut v = vec![1i32; 256];
    v[0] = i;
    Packet::new(STREAM, 0, "%ad", vec![Value::IntArray(v)]).unwrap()
}

/// The logic of vargr-cli's `late_reader_over_the_pause_threshold_keeps_its_tree`, in
/// fake time: with a 64 KiB queue limit the front-end stops reading its children once
/// 64 results wait unread, and heartbeats cannot cross the paused links; several
/// heartbeat time-outs later nobody has been declared dead, and once the user reads,
/// every result arrives in order.
#[test]
fn an_unread_front_end_pauses_its_children_and_keeps_them() {
    const WAVES: i64 = 200;
    let mut sim = Sim::topology("flat:2", small_queue());
    let ranks = sim.ranks();
    sim.open(STREAM, ranks, "sum", "all").unwrap();
    for i in 0..WAVES {
        sim.multicast(int(i));
    }
    echo_everything(&mut sim);
    let unread = sim.router(0).deliveries().streams[&STREAM].len();
    assert_eq!(unread, 64 + 1, "reading stops just past the limit");
    assert!(sim.paused(0, 1) && sim.paused(0, 2));
    let waiting = sim.backlog(1, 0) + sim.backlog(2, 0);
    assert!(waiting > 0, "answers wait on the paused links");
    sim.advance(SimConfig::default().heartbeat_timeout * 4);
    assert!(sim.router(0).deliveries().faults.is_empty());
    for b in sim.backends() {
        assert!(
            !sim.router(b).is_closed() && !sim.router(b).is_orphan(),
            "node {b}"
        );
    }
    let got = read(&mut sim, WAVES as usize);
    assert_eq!(got, (0..WAVES).map(|i| 2 * i).collect::<Vec<_>>());
    assert!(!sim.paused(0, 1) && !sim.paused(0, 2));
}

/// A blocked link below a commnode: the commnode's queue to that back-end grows past
/// the limit, so it stops reading from its parent; the front-end's queue to it grows in
/// turn, which is what holds a front-end's sender back. The other half of the tree is
/// not held back, and once the link flows again every packet arrives, in order.
#[test]
fn a_blocked_link_holds_back_its_branch_only() {
    const PACKETS: i32 = 40;
    let limit = 4 * KIB;
    let cfg = SimConfig {
        queue_limit: limit,
        ..SimConfig::default()
    };
    // 0 → {1 → {3, 4}, 2 → {5, 6}}.
    let mut sim = Sim::topology("1x2x4", cfg);
    let ranks = sim.ranks();
    sim.open(STREAM, ranks, "null", "dontwait").unwrap();
    let mut got: [Vec<Packet>; 4] = Default::default();
    sim.block(1, 3, true);
    for i in 0..PACKETS {
        sim.multicast(kib(i));
        // Their users read: only the blocked link holds anything back.
        for b in [4, 5, 6] {
            got[b - 3].extend(sim.take_inbox(b as u32));
        }
    }
    assert!(sim.backlog(1, 3) > limit, "the blocked link backs up");
    assert!(
        sim.paused(1, 0),
        "commnode 1 stops reading from the front-end"
    );
    assert!(
        sim.backlog(0, 1) > limit,
        "the front-end's queue to it grows"
    );
    let backlog = |l| {
        let peer = sim.router(0).neighbours().find(|&(x, _)| x == l).unwrap().1;
        sim.backlog(0, peer)
    };
    assert!(sim.router(0).down_backed_up(backlog, limit));
    assert!(!sim.paused(2, 0), "the other branch reads on");
    assert_eq!(got[2].len(), PACKETS as usize);
    assert_eq!(got[3].len(), PACKETS as usize);
    assert!(
        got[1].len() < PACKETS as usize,
        "node 4 shares the held-back branch"
    );

    sim.block(1, 3, false);
    while got[0].len() < PACKETS as usize || got[1].len() < PACKETS as usize {
        sim.settle();
        let before = got[0].len() + got[1].len();
        for b in [3, 4] {
            got[b as usize - 3].extend(sim.take_inbox(b));
        }
        assert!(got[0].len() + got[1].len() > before, "the branch stalled");
    }
    for b in [3, 4] {
        let firsts: Vec<i32> = got[b - 3]
            .iter()
            .map(|p| match &p.values[0] {
                Value::IntArray(v) => v[0],
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(firsts, (0..PACKETS).collect::<Vec<_>>(), "node {b}");
    }
    assert!(!sim.paused(1, 0));
    assert_eq!(sim.backlog(0, 1), 0);
}

/// A back-end whose user does not read: its inbox over the limit stops it reading from
/// its parent, and that is the only link paused.
#[test]
fn an_unread_back_end_stops_reading_from_its_parent() {
    let limit = 8 * KIB;
    let cfg = SimConfig {
        queue_limit: limit,
        ..SimConfig::default()
    };
    let mut sim = Sim::topology("flat:2", cfg);
    let ranks = sim.ranks();
    sim.open(STREAM, ranks, "sum", "all").unwrap();
    for i in 0..20 {
        sim.multicast(int(i));
    }
    // Each back-end holds limit / 1024 + 1 packets, the rest wait on its link.
    for b in sim.backends() {
        assert_eq!(sim.router(b).deliveries().inbox.len(), 9, "node {b}");
        assert!(sim.paused(b, 0), "node {b}");
    }
    assert!(!sim.paused(0, 1));
    // Paused is not silent: a while later both are alive.
    sim.advance(Duration::from_secs(5));
    assert!(sim.router(0).deliveries().faults.is_empty());
    echo_everything(&mut sim);
    let got = read(&mut sim, 20);
    assert_eq!(got, (0..20).map(|i| 2 * i).collect::<Vec<_>>());
}
