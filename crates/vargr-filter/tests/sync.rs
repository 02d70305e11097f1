//! The synchronization filter on a fake clock.

mod common;

use std::time::{Duration, Instant};

use common::*;
use vargr_filter::{FilterError, SyncFilter, SyncMode};
use vargr_wire::{Packet, Value};

fn p(child: u32, seq: i32) -> Packet {
    pkt_from(child, "%d", vec![Value::Int(seq)])
}

/// (child, seq) pairs of each wave.
fn ids(waves: Vec<Vec<Packet>>) -> Vec<Vec<(u32, i32)>> {
    waves
        .into_iter()
        .map(|w| {
            w.into_iter()
                .map(|p| {
                    (
                        p.source,
                        if let Value::Int(s) = p.values[0] {
                            s
                        } else {
                            -1
                        },
                    )
                })
                .collect()
        })
        .collect()
}

#[test]
fn wait_for_all_pipelines_per_child_queues() {
    let t = Instant::now();
    let mut s = SyncFilter::new(SyncMode::WaitForAll, 3);
    assert!(s.push(0, p(0, 1), t).is_empty());
    assert!(s.push(0, p(0, 2), t).is_empty());
    assert!(s.push(2, p(2, 1), t).is_empty());
    assert_eq!(s.queued(), 3);
    assert_eq!(s.queued_from(0), 2);
    assert_eq!(s.poll_timeout(), None);
    // Child 1's first packet completes wave 1; waves list packets in child order.
    assert_eq!(
        ids(s.push(1, p(1, 1), t)),
        vec![vec![(0, 1), (1, 1), (2, 1)]]
    );
    assert!(s.push(1, p(1, 2), t).is_empty());
    assert_eq!(
        ids(s.push(2, p(2, 2), t)),
        vec![vec![(0, 2), (1, 2), (2, 2)]]
    );
    assert_eq!(s.queued(), 0);
    // Far in the future nothing times out.
    assert!(s.push(0, p(0, 3), t).is_empty());
    assert!(s.on_timeout(t + Duration::from_secs(3600)).is_empty());
}

#[test]
fn wait_for_all_child_removal_releases_waves() {
    let t = Instant::now();
    let mut s = SyncFilter::new(SyncMode::WaitForAll, 3);
    s.push(0, p(0, 1), t);
    s.push(0, p(0, 2), t);
    s.push(1, p(1, 1), t);
    s.push(1, p(1, 2), t);
    s.push(2, p(2, 1), t); // wave 1 complete
    assert_eq!(s.queued(), 2);
    s.push(2, p(2, 2), t); // wave 2 complete
    s.push(0, p(0, 3), t);
    s.push(2, p(2, 3), t);
    // Child 1 dies: wave 3 no longer waits for it.
    assert_eq!(ids(s.remove_child(1, t)), vec![vec![(0, 3), (2, 3)]]);
    assert_eq!(s.live_children(), 2);
    // Packets from a removed child are dropped and counted.
    assert!(s.push(1, p(1, 9), t).is_empty());
    assert_eq!(s.dropped(), 1);
    assert_eq!(ids(s.push(0, p(0, 4), t)), Vec::<Vec<(u32, i32)>>::new());
    assert_eq!(ids(s.push(2, p(2, 4), t)), vec![vec![(0, 4), (2, 4)]]);
}

#[test]
fn removed_childs_queued_packets_still_travel() {
    let t = Instant::now();
    let mut s = SyncFilter::new(SyncMode::WaitForAll, 2);
    s.push(0, p(0, 1), t);
    s.push(0, p(0, 2), t);
    assert_eq!(
        ids(s.remove_child(1, t)),
        vec![vec![(0, 1)], vec![(0, 2)]],
        "nobody left to wait for"
    );
    let mut s = SyncFilter::new(SyncMode::WaitForAll, 2);
    s.push(1, p(1, 1), t);
    s.push(1, p(1, 2), t);
    assert!(s.remove_child(1, t).is_empty());
    assert_eq!(s.queued(), 2, "child 0 still alive and silent");
    assert_eq!(ids(s.push(0, p(0, 1), t)), vec![vec![(0, 1), (1, 1)]]);
}

#[test]
fn timeout_releases_partial_waves() {
    let t0 = Instant::now();
    let d = Duration::from_millis(250);
    let mut s = SyncFilter::new(SyncMode::TimeOut(d), 3);
    assert_eq!(s.poll_timeout(), None);
    assert!(s.push(0, p(0, 1), t0).is_empty());
    assert_eq!(s.poll_timeout(), Some(t0 + d));
    assert!(s
        .push(1, p(1, 1), t0 + Duration::from_millis(100))
        .is_empty());
    assert_eq!(
        s.poll_timeout(),
        Some(t0 + d),
        "deadline counts from the wave's first packet"
    );
    assert!(s.on_timeout(t0 + Duration::from_millis(249)).is_empty());
    assert_eq!(ids(s.on_timeout(t0 + d)), vec![vec![(0, 1), (1, 1)]]);
    assert_eq!(s.poll_timeout(), None);
    // All contribute before the deadline: released at once.
    let t1 = t0 + Duration::from_secs(1);
    s.push(2, p(2, 2), t1);
    s.push(0, p(0, 2), t1);
    assert_eq!(
        ids(s.push(1, p(1, 2), t1)),
        vec![vec![(0, 2), (1, 2), (2, 2)]]
    );
}

#[test]
fn timeout_pipelined_waves_each_have_their_own_deadline() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut s = SyncFilter::new(SyncMode::TimeOut(ms(100)), 2);
    s.push(0, p(0, 1), t0);
    s.push(0, p(0, 2), t0 + ms(50));
    assert_eq!(ids(s.on_timeout(t0 + ms(100))), vec![vec![(0, 1)]]);
    assert_eq!(s.poll_timeout(), Some(t0 + ms(150)));
    // A packet arriving after a missed deadline does not join the expired wave.
    let waves = s.push(1, p(1, 2), t0 + ms(400));
    assert_eq!(ids(waves), vec![vec![(0, 2)]]);
    assert_eq!(s.poll_timeout(), Some(t0 + ms(500)));
    assert_eq!(ids(s.remove_child(0, t0 + ms(401))), vec![vec![(1, 2)]]);
}

#[test]
fn dontwait_passes_each_packet() {
    let t = Instant::now();
    let mut s = SyncFilter::new(SyncMode::DontWait, 2);
    assert_eq!(ids(s.push(1, p(1, 1), t)), vec![vec![(1, 1)]]);
    assert_eq!(ids(s.push(1, p(1, 2), t)), vec![vec![(1, 2)]]);
    assert_eq!(s.queued(), 0);
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn late_children_and_flush() {
    let t = Instant::now();
    let mut s = SyncFilter::new(SyncMode::WaitForAll, 1);
    assert_eq!(s.add_child(), 1);
    s.push(0, p(0, 1), t);
    assert!(
        s.push(3, p(3, 1), t).is_empty(),
        "index 3 adds children 2 and 3"
    );
    assert_eq!(s.live_children(), 4);
    assert_eq!(ids(s.flush()), vec![vec![(0, 1), (3, 1)]]);
    assert_eq!(s.queued(), 0);
}

#[test]
fn sync_mode_parsing() {
    let ok = |s: &str| s.parse::<SyncMode>().unwrap();
    assert_eq!(ok("all"), SyncMode::WaitForAll);
    assert_eq!(ok("wait-for-all"), SyncMode::WaitForAll);
    assert_eq!(ok("dontwait"), SyncMode::DontWait);
    assert_eq!(ok("none"), SyncMode::DontWait);
    assert_eq!(
        ok("timeout:250ms"),
        SyncMode::TimeOut(Duration::from_millis(250))
    );
    assert_eq!(
        ok("timeout:250"),
        SyncMode::TimeOut(Duration::from_millis(250))
    );
    assert_eq!(
        ok("timeout:1.5s"),
        SyncMode::TimeOut(Duration::from_millis(1500))
    );
    assert_eq!(
        ok("timeout:20us"),
        SyncMode::TimeOut(Duration::from_micros(20))
    );
    for m in ["all", "dontwait", "timeout:250ms", "timeout:20us"] {
        assert_eq!(ok(m).to_string(), m);
    }
    let e = "timeout:soon".parse::<SyncMode>().unwrap_err();
    assert!(matches!(e, FilterError::BadSyncMode { .. }));
    assert!(e.to_string().contains("\"timeout:soon\""), "{e}");
    assert!("sometimes"
        .parse::<SyncMode>()
        .unwrap_err()
        .to_string()
        .contains("expected all"));
    assert!("timeout:-1".parse::<SyncMode>().is_err());
}

/// The straightforward definition the filter's counters must agree with: a wave goes
/// out whenever some packet waits and every live child has one.
struct Model {
    queues: Vec<std::collections::VecDeque<(u32, i32)>>,
    live: Vec<bool>,
}

impl Model {
    fn release(&mut self) -> Vec<Vec<(u32, i32)>> {
        let mut out = Vec::new();
        loop {
            let any = self.queues.iter().any(|q| !q.is_empty());
            let all = self
                .queues
                .iter()
                .zip(&self.live)
                .all(|(q, l)| !l || !q.is_empty());
            if !(any && all) {
                return out;
            }
            out.push(
                self.queues
                    .iter_mut()
                    .filter_map(|q| q.pop_front())
                    .collect(),
            );
        }
    }
}

proptest::proptest! {
    #[test]
    fn wait_for_all_matches_its_definition(
        children in 1usize..6,
        ops in proptest::collection::vec((0usize..6, 0u8..10), 0..80),
    ) {
        let t = Instant::now();
        let mut s = SyncFilter::new(SyncMode::WaitForAll, children);
        let mut m = Model {
            queues: vec![Default::default(); children],
            live: vec![true; children],
        };
        for (seq, (child, op)) in ops.into_iter().enumerate() {
            let child = child % children;
            let seq = seq as i32;
            let (got, want) = if op == 0 {
                // A child is lost: its leftovers ride along with later waves.
                m.live[child] = false;
                (ids(s.remove_child(child, t)), m.release())
            } else {
                let got = ids(s.push(child, p(child as u32, seq), t));
                if m.live[child] {
                    m.queues[child].push_back((child as u32, seq));
                }
                (got, m.release())
            };
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(s.live_children(), m.live.iter().filter(|l| **l).count());
        }
        let rest: Vec<Vec<(u32, i32)>> = ids(s.flush());
        let mut want = Vec::new();
        while m.queues.iter().any(|q| !q.is_empty()) {
            want.push(m.queues.iter_mut().filter_map(|q| q.pop_front()).collect::<Vec<_>>());
        }
        proptest::prop_assert_eq!(rest, want);
    }
}

/// An adopted child (index 2) that still owes the answer to wave 1, which was released
/// without it, and missed wave 3 while orphaned: its late answer is dropped, wave 3
/// leaves without it, and its next packet joins wave 4, not an older one.
#[test]
fn an_adopted_child_lines_up_with_the_waves_it_answers() {
    let t = Instant::now();
    let mut s = SyncFilter::new(SyncMode::WaitForAll, 2);
    // Wave 1: child 1 is lost before answering; released with child 0 alone.
    assert!(s.push(0, p(0, 1), t).is_empty());
    assert_eq!(ids(s.remove_child(1, t)), vec![vec![(0, 1)]]);
    assert_eq!(ids(s.push(0, p(0, 2), t)), vec![vec![(0, 2)]]);
    assert_eq!(s.released(), 2);
    // Child 1's orphaned sub-tree comes back: it heard waves 1-2 and answered none; the
    // node here already multicast wave 3 (released 2 so far): skip 2, one hole.
    let c = s.join_child(2, 1, t);
    assert_eq!(c, 2);
    assert!(s.push(c, p(2, 1), t).is_empty(), "answer to wave 1 dropped");
    assert!(s.push(c, p(2, 2), t).is_empty(), "answer to wave 2 dropped");
    assert_eq!(s.dropped(), 2);
    assert_eq!(
        ids(s.push(0, p(0, 3), t)),
        vec![vec![(0, 3)]],
        "hole for wave 3"
    );
    assert!(
        s.push(0, p(0, 4), t).is_empty(),
        "wave 4 waits for the adoptee"
    );
    assert_eq!(ids(s.push(c, p(2, 4), t)), vec![vec![(0, 4), (2, 4)]]);
    assert_eq!(s.released(), 4);
}

/// A child whose whole sub-tree missed a wave sends a hole: the wave does not wait for
/// it, and a wave of nothing but holes still comes out (empty) and counts.
#[test]
fn holes_stand_in_for_missed_waves() {
    let t = Instant::now();
    let mut s = SyncFilter::new(SyncMode::WaitForAll, 2);
    assert!(s.push_hole(1, t).is_empty());
    assert_eq!(ids(s.push(0, p(0, 1), t)), vec![vec![(0, 1)]]);
    assert!(s.push_hole(0, t).is_empty());
    assert_eq!(ids(s.push_hole(1, t)), vec![vec![]]);
    assert_eq!(s.released(), 2);
    assert_eq!(s.queued(), 0);
}

/// Every other child is gone: the holes of a child joining are all the waiting waves
/// lacked, and they leave without waiting for another packet.
#[test]
fn a_joining_childs_holes_release_waves_at_once() {
    let t = Instant::now();
    let mut s = SyncFilter::new(SyncMode::WaitForAll, 1);
    assert!(s.remove_child(0, t).is_empty());
    let c = s.join_child(0, 2, t);
    assert_eq!(ids(s.take_ready(t)), vec![vec![], vec![]]);
    assert_eq!(s.released(), 2);
    assert_eq!(ids(s.push(c, p(c as u32, 3), t)), vec![vec![(c as u32, 3)]]);
}
