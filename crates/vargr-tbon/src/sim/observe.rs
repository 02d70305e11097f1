//! Observed elements in the simulated tree: every node caches the newest value, requests
//! of several children are coalesced into one upwards, slow readers skip to the newest
//! value, and the transfers on each link are counted exactly.

use std::time::Duration;

use vargr_wire::{Frame, FrameKind};

use super::{Sim, SimConfig};
use crate::router::Observed;
use crate::TbonError;

const EL: u32 = 7;
/// Long enough that no request times out unless a test means it to.
const PATIENT: Duration = Duration::from_secs(3600);
/// Enough fake time for any frame to cross the tree (latency is 10 µs a wire).
const STEP: Duration = Duration::from_millis(5);

/// Root 0; commnode 1 with back-ends 3, 4, 5; commnode 2 with back-end 6.
fn tree() -> Sim {
    Sim::rows(
        &[
            (0, 0, None),
            (1, 0, None),
            (2, 0, None),
            (3, 1, Some(0)),
            (4, 1, Some(1)),
            (5, 1, Some(2)),
            (6, 2, Some(3)),
        ],
        SimConfig::default(),
    )
}

fn observe(sim: &mut Sim, n: u32, have: Option<u64>, wait: Duration) -> u64 {
    let deadline = sim.now() + wait;
    sim.on(n, |r, out| r.observe(EL, have, deadline, out))
}

fn publish(sim: &mut Sim, n: u32, version: u64) -> Result<(), TbonError> {
    let value = frame_value(version);
    sim.on(n, |r, out| r.publish(EL, version, &value, out))
}

/// A value that names its version, of a size that makes bytes easy to tell apart.
fn frame_value(version: u64) -> Vec<u8> {
    let mut v = vec![0xA5; 1000];
    v[..8].copy_from_slice(&version.to_le_bytes());
    v
}

fn taken(sim: &mut Sim, n: u32) -> Vec<Observed> {
    sim.on(n, |r, _| r.take_observed())
}

/// The one answer node `n` got: its version, checked against its value.
fn one_version(sim: &mut Sim, n: u32) -> u64 {
    let got = taken(sim, n);
    assert_eq!(got.len(), 1, "node {n}: one answer, got {got:?}");
    let (version, value) = got[0].result.clone().expect("a value");
    assert_eq!(value.as_ref(), frame_value(version).as_slice(), "node {n}");
    version
}

fn vals(sim: &Sim, from: u32, to: u32) -> u64 {
    sim.carried(from, to, FrameKind::ObserveVal).0
}

fn reqs(sim: &Sim, from: u32, to: u32) -> u64 {
    sim.carried(from, to, FrameKind::ObserveReq).0
}

#[test]
fn readers_under_one_commnode_cost_one_transfer_per_version() {
    let mut sim = tree();
    let readers = [3, 4, 5, 6];
    let mut have = [None; 4];
    for version in 1..=5u64 {
        // The readers ask at different times, before the value exists.
        for (i, &n) in readers.iter().enumerate() {
            observe(&mut sim, n, have[i], PATIENT);
            sim.advance(STEP);
        }
        publish(&mut sim, 0, version).unwrap();
        sim.advance(STEP);
        for (i, &n) in readers.iter().enumerate() {
            assert_eq!(one_version(&mut sim, n), version, "reader {n}");
            have[i] = Some(version);
        }
        // One request and one value per version on each commnode's up link, however
        // many readers are below it.
        for c in [1, 2] {
            assert_eq!(reqs(&sim, c, 0), version, "requests up from commnode {c}");
            assert_eq!(vals(&sim, 0, c), version, "values down to commnode {c}");
        }
        for &n in &readers {
            let parent = if n == 6 { 2 } else { 1 };
            assert_eq!(vals(&sim, parent, n), version, "values down to reader {n}");
        }
    }
    let (_, bytes) = sim.carried(0, 1, FrameKind::ObserveVal);
    assert!(
        bytes > 5 * 1000,
        "the values crossed the link: {bytes} bytes"
    );
}

#[test]
fn a_cache_newer_than_the_reader_answers_without_asking_up() {
    let mut sim = tree();
    observe(&mut sim, 3, None, PATIENT);
    publish(&mut sim, 0, 1).unwrap();
    sim.advance(STEP);
    assert_eq!(one_version(&mut sim, 3), 1);
    // Reader 4 arrives later: commnode 1 has version 1 cached.
    observe(&mut sim, 4, None, PATIENT);
    sim.advance(STEP);
    assert_eq!(one_version(&mut sim, 4), 1);
    assert_eq!((reqs(&sim, 1, 0), vals(&sim, 0, 1)), (1, 1));
    // A reader that holds the cached version waits for a newer one instead.
    observe(&mut sim, 4, Some(1), PATIENT);
    sim.advance(STEP);
    assert!(taken(&mut sim, 4).is_empty(), "nothing newer than 1 yet");
    publish(&mut sim, 0, 2).unwrap();
    sim.advance(STEP);
    assert_eq!(one_version(&mut sim, 4), 2);
}

#[test]
fn a_slow_reader_skips_to_the_newest_and_fast_ones_prefetch_for_it() {
    let mut sim = tree();
    let mut fast = None;
    let mut seen = Vec::new();
    for version in 1..=10u64 {
        observe(&mut sim, 3, fast, PATIENT);
        publish(&mut sim, 0, version).unwrap();
        sim.advance(STEP);
        let v = one_version(&mut sim, 3);
        seen.push(v);
        fast = Some(v);
        if version == 1 || version == 10 {
            // The slow reader asks only now and then.
            observe(&mut sim, 4, (version == 10).then_some(1), PATIENT);
            sim.advance(STEP);
            assert_eq!(
                one_version(&mut sim, 4),
                version,
                "slow reader gets the newest"
            );
        }
    }
    assert_eq!(seen, (1..=10).collect::<Vec<_>>());
    // The slow reader's link carried 2 values, not 10; the commnode's up link 10.
    assert_eq!(vals(&sim, 1, 4), 2);
    assert_eq!(vals(&sim, 0, 1), 10);
    // Versions skipped by the slow reader were dropped, never queued.
    assert_eq!(sim.router(4).observed_version(EL), Some(10));
}

#[test]
fn a_deadline_passes_with_a_typed_timeout_and_the_value_still_lands_in_the_cache() {
    let mut sim = tree();
    let req = observe(&mut sim, 6, None, Duration::from_millis(100));
    sim.advance(Duration::from_millis(200));
    let got = taken(&mut sim, 6);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].req, req);
    assert!(
        matches!(
            got[0].result,
            Err(TbonError::ObserveTimeout {
                element: EL,
                have: None
            })
        ),
        "{:?}",
        got[0].result
    );
    // The request stayed open above; the value comes down to the reader's cache, and
    // its next request is answered there without a frame.
    publish(&mut sim, 0, 1).unwrap();
    sim.advance(STEP);
    assert!(taken(&mut sim, 6).is_empty(), "no local request waits");
    assert_eq!(sim.router(6).observed_version(EL), Some(1));
    let before = reqs(&sim, 6, 2);
    observe(&mut sim, 6, None, PATIENT);
    assert_eq!(one_version(&mut sim, 6), 1);
    assert_eq!(reqs(&sim, 6, 2), before);
}

#[test]
fn a_back_end_publishes_through_the_front_end_whose_versions_only_grow() {
    let mut sim = tree();
    observe(&mut sim, 3, None, PATIENT);
    publish(&mut sim, 6, 4).unwrap();
    sim.advance(STEP);
    assert_eq!(one_version(&mut sim, 3), 4);
    assert_eq!(sim.router(0).observed_version(EL), Some(4));
    // An older version is refused at the front-end, and dropped when it comes from below.
    assert!(matches!(
        publish(&mut sim, 0, 3),
        Err(TbonError::ObserveStale {
            element: EL,
            version: 3,
            newest: 4
        })
    ));
    publish(&mut sim, 6, 2).unwrap();
    sim.advance(STEP);
    assert_eq!(sim.router(0).observed_version(EL), Some(4));
}

#[test]
fn the_front_end_reads_its_own_element() {
    let mut sim = tree();
    observe(&mut sim, 0, None, PATIENT);
    assert!(taken(&mut sim, 0).is_empty());
    publish(&mut sim, 0, 1).unwrap();
    assert_eq!(one_version(&mut sim, 0), 1);
}

#[test]
fn an_adopted_reader_asks_its_new_parent_again() {
    let mut sim = tree();
    observe(&mut sim, 3, None, PATIENT);
    publish(&mut sim, 0, 1).unwrap();
    sim.advance(STEP);
    assert_eq!(one_version(&mut sim, 3), 1);
    // Reader 3's request for something newer than 1 dies with its commnode: the new
    // parent must be asked, although this node's own request was open. (A short wait:
    // the adoption settles the tree, running every timer, and an hour of fake time
    // would silence every link.)
    observe(&mut sim, 3, Some(1), Duration::from_millis(50));
    sim.advance(STEP);
    sim.kill(1);
    sim.lose(0, 1);
    for n in [3, 4, 5] {
        sim.lose(n, 1);
    }
    // The old request times out while the adoption settles.
    sim.adopt_by(0, 3).unwrap();
    taken(&mut sim, 3);
    observe(&mut sim, 3, Some(1), PATIENT);
    sim.advance(STEP);
    publish(&mut sim, 0, 2).unwrap();
    sim.advance(STEP);
    assert_eq!(one_version(&mut sim, 3), 2);
    assert_eq!(vals(&sim, 0, 3), 1, "straight from the front-end now");
}

#[test]
fn malformed_observe_frames_are_faults_naming_them_and_change_nothing() {
    let mut sim = tree();
    publish(&mut sim, 0, 1).unwrap();
    // A request that says it holds a version but carries 3 bytes of it, from back-end 3.
    sim.inject(1, 3, Frame::new(FrameKind::ObserveReq, EL, 1, vec![7u8; 3]));
    // A value too short to hold its version, from the root.
    sim.inject(1, 0, Frame::new(FrameKind::ObserveVal, EL, 0, vec![7u8; 5]));
    let faults: Vec<String> = sim
        .router(1)
        .deliveries()
        .faults
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(faults.len(), 2, "{faults:?}");
    assert!(faults[0].contains("malformed ObserveReq") && faults[0].contains("3 payload bytes"));
    assert!(faults[1].contains("malformed ObserveVal"), "{faults:?}");
    // Nothing was asked for or cached on their account: a real reader still gets v1.
    sim.settle();
    assert_eq!(reqs(&sim, 1, 0), 0);
    observe(&mut sim, 3, None, PATIENT);
    sim.advance(STEP);
    assert_eq!(one_version(&mut sim, 3), 1);
}
