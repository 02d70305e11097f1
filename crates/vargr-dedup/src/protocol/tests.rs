use std::collections::HashMap;

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::testdata::random;

/// An exact in-memory cache keyed by truncated fingerprint (latest insert wins), so
/// collisions at small widths really replace segments.
struct MapCache {
    bits: FpBits,
    map: HashMap<u64, Bytes>,
}

impl MapCache {
    fn new(bits: u8) -> MapCache {
        MapCache {
            bits: FpBits::new(bits).unwrap(),
            map: HashMap::new(),
        }
    }
}

impl SegmentCache for MapCache {
    fn bits(&self) -> FpBits {
        self.bits
    }
    fn may_contain(&self, fp: Fingerprint) -> bool {
        self.map.contains_key(&fp.0)
    }
    fn get(&mut self, fp: Fingerprint) -> Result<Option<Bytes>, CacheError> {
        Ok(self.map.get(&fp.0).cloned())
    }
    fn insert(&mut self, full: Fingerprint, segment: &[u8]) -> Result<(), CacheError> {
        self.map
            .insert(full.truncate(self.bits).0, Bytes::copy_from_slice(segment));
        Ok(())
    }
}

/// Runs messages from a sender to a receiver, moving bytes both ways in pieces of
/// `chunk`, and returns what was delivered and the bytes the sender sent.
fn transfer(
    tx: &mut Sender<MapCache>,
    rx: &mut Receiver<MapCache>,
    messages: &[Vec<Vec<u8>>],
    chunk: usize,
) -> (Vec<Vec<u8>>, usize) {
    let mut delivered = Vec::new();
    let mut wire = 0;
    let mut pending = Vec::new();
    let mut back = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let segs: Vec<&[u8]> = m.iter().map(Vec::as_slice).collect();
        tx.send_message(i as u32, &[i as u8], &segs).unwrap();
    }
    tx.flush();
    for _ in 0..10_000 {
        tx.take_output(&mut pending);
        wire += pending.len();
        for piece in pending.chunks(chunk.max(1)) {
            rx.handle_input(piece).unwrap();
        }
        pending.clear();
        while let Some(d) = rx.poll_delivered() {
            assert_eq!(d.layout[..], [d.channel as u8]);
            delivered.push(d.segments.concat());
        }
        rx.take_output(&mut back);
        if back.is_empty() && tx.is_idle() {
            break;
        }
        tx.handle_input(&back).unwrap();
        back.clear();
    }
    rx.finish().unwrap();
    (delivered, wire)
}

fn pair(bits: u8, group: u32) -> (Sender<MapCache>, Receiver<MapCache>) {
    pair_batching(bits, group, 0)
}

/// A pair whose sender gathers deferred deltas into batches of `batch` bytes.
fn pair_batching(bits: u8, group: u32, batch: usize) -> (Sender<MapCache>, Receiver<MapCache>) {
    let config = Config {
        bits: FpBits::new(bits).unwrap(),
        group,
        delta_batch: batch,
        ..Config::default()
    };
    (
        Sender::new(config, MapCache::new(bits)).unwrap(),
        Receiver::new(config, MapCache::new(bits)).unwrap(),
    )
}

fn segments(data: &[u8], size: usize) -> Vec<Vec<u8>> {
    data.chunks(size).map(<[u8]>::to_vec).collect()
}

#[test]
fn repeated_data_crosses_as_fingerprints() {
    let (mut tx, mut rx) = pair(40, 20);
    let v1 = random(64 << 10, 1);
    let mut v2 = v1.clone();
    v2[1000] ^= 1;
    let msgs = vec![segments(&v1, 64), segments(&v2, 64)];
    let (got, wire) = transfer(&mut tx, &mut rx, &msgs, 4096);
    assert_eq!(got, vec![v1.clone(), v2]);
    // The first copy costs 66 bytes per 64-byte segment; the second about 6 (a
    // fingerprint) plus one changed segment: 1.2 copies for two.
    let first = v1.len();
    assert!(wire < first * 6 / 5, "{wire} bytes on the wire");
    assert_eq!(tx.stats().pushed, 1024 + 1);
    assert_eq!(rx.stats().collisions, 0);
}

#[test]
fn collisions_with_12_bit_fingerprints_never_deliver_wrong_bytes() {
    // 4096 distinct fingerprints and thousands of distinct segments: many collide.
    let (mut tx, mut rx) = pair(12, 20);
    let mut msgs = Vec::new();
    for round in 0..4 {
        let data = random(96 << 10, 7 + round % 2);
        msgs.push(segments(&data, 32));
    }
    let expect: Vec<Vec<u8>> = msgs.iter().map(|m| m.concat()).collect();
    let (got, _) = transfer(&mut tx, &mut rx, &msgs, 1000);
    assert_eq!(got, expect);
    assert!(rx.stats().collisions > 0, "{:?}", rx.stats());
    assert!(tx.stats().requested > 0);
}

#[test]
fn a_receiver_missing_cached_segments_asks_for_them() {
    let (mut tx, mut rx) = pair(40, 20);
    let data = random(8 << 10, 3);
    // The sender believes the receiver has everything (a shared cache from an earlier
    // session the receiver has since lost).
    for s in segments(&data, 100) {
        tx.cache().insert(Fingerprint::full(&s), &s).unwrap();
    }
    let (got, _) = transfer(&mut tx, &mut rx, &[segments(&data, 100)], 17);
    assert_eq!(got, vec![data]);
    assert_eq!(rx.stats().requested, 82);
}

/// `data` with one byte changed every `every` bytes.
fn edited(data: &[u8], every: usize, salt: u8) -> Vec<u8> {
    let mut v = data.to_vec();
    for i in (every / 2..v.len()).step_by(every) {
        v[i] = v[i].wrapping_add(salt | 1);
    }
    v
}

#[test]
fn edited_segments_cross_as_deltas() {
    let (mut tx, mut rx) = pair(40, 20);
    let v1 = random(64 << 10, 5);
    let v2 = edited(&v1, 1000, 1);
    let msgs = vec![segments(&v1, 1024), segments(&v2, 1024)];
    let (got, wire) = transfer(&mut tx, &mut rx, &msgs, 4096);
    assert_eq!(got, vec![v1.clone(), v2.clone()]);
    assert_eq!(tx.stats().deltas, 64, "{:?}", tx.stats());
    assert_eq!(rx.stats().deltas, 64);
    // Each 1 KiB segment with one or two changed bytes costs tens of bytes.
    assert!(wire < v1.len() + v2.len() / 20, "{wire} bytes on the wire");
    assert_eq!(rx.stats().requested, 0);
    // A sender without the index sends them whole.
    let config = Config {
        delta_index: 0,
        ..Config::default()
    };
    let (mut tx, mut rx) = (
        Sender::new(config, MapCache::new(40)).unwrap(),
        Receiver::new(config, MapCache::new(40)).unwrap(),
    );
    let (got, wire) = transfer(&mut tx, &mut rx, &msgs, 4096);
    assert_eq!(got, vec![v1.clone(), v2]);
    assert_eq!(tx.stats().deltas, 0);
    assert!(wire > 2 * v1.len());
}

#[test]
fn without_session_bases_only_segments_of_earlier_sessions_are_delta_bases() {
    let config = Config {
        session_bases: false,
        ..Config::default()
    };
    let fresh = |c: &MapCache| {
        let mut m = MapCache::new(40);
        m.map = c.map.clone();
        m
    };
    let (mut tx, mut rx) = (
        Sender::new(config, MapCache::new(40)).unwrap(),
        Receiver::new(config, MapCache::new(40)).unwrap(),
    );
    let v1 = random(64 << 10, 5);
    let v2 = edited(&v1, 1000, 1);
    let msgs = vec![segments(&v1, 1024), segments(&v2, 1024)];
    let (got, _) = transfer(&mut tx, &mut rx, &msgs, 4096);
    assert_eq!(got, vec![v1.clone(), v2]);
    // v2's likeness to v1 is left to the stream's compressor.
    assert_eq!(tx.stats().deltas, 0, "{:?}", tx.stats());
    // The next session's edit of v1 goes as deltas on the cached v1.
    let (mut tx2, mut rx2) = (
        Sender::new(config, fresh(tx.cache())).unwrap(),
        Receiver::new(config, fresh(rx.cache())).unwrap(),
    );
    tx2.set_similarity(tx.similarity().clone());
    let v3 = edited(&v1, 1000, 3);
    let (got, _) = transfer(&mut tx2, &mut rx2, &[segments(&v3, 1024)], 4096);
    assert_eq!(got, vec![v3]);
    assert_eq!(tx2.stats().deltas, 64, "{:?}", tx2.stats());
}

#[test]
fn deltas_on_colliding_or_missing_bases_still_deliver_the_right_bytes() {
    // 12-bit fingerprints: bases collide, so some deltas rebuild from the wrong
    // segment; the group hash catches it and the segment is requested whole.
    let (mut tx, mut rx) = pair(12, 20);
    let base = random(256 << 10, 11);
    let mut msgs = vec![segments(&base, 200)];
    for salt in 1..4u8 {
        msgs.push(segments(&edited(&base, 150 + usize::from(salt), salt), 200));
    }
    let expect: Vec<Vec<u8>> = msgs.iter().map(|m| m.concat()).collect();
    let (got, _) = transfer(&mut tx, &mut rx, &msgs, 999);
    assert_eq!(got, expect);
    assert!(tx.stats().deltas > 0, "{:?}", tx.stats());
    assert!(rx.stats().collisions > 0, "{:?}", rx.stats());

    // A receiver that lost the bases asks for every delta segment whole: a second
    // session whose sender keeps its cache and index, whose receiver starts empty.
    let (mut tx, mut rx) = pair(40, 20);
    let v1 = random(16 << 10, 12);
    let (got, _) = transfer(&mut tx, &mut rx, &[segments(&v1, 512)], 64);
    assert_eq!(got, vec![v1.clone()]);
    let (mut tx2, mut rx) = pair(40, 20);
    tx2.cache().map = tx.cache().map.clone();
    tx2.set_similarity(tx.similarity().clone());
    let mut tx = tx2;
    let v2 = edited(&v1, 300, 3);
    let (got, _) = transfer(&mut tx, &mut rx, &[segments(&v2, 512)], 64);
    assert_eq!(got, vec![v2]);
    let deltas = tx.stats().deltas;
    assert!(deltas >= 28, "{:?}", tx.stats());
    assert_eq!(rx.stats().requested, deltas);
}

/// A second session between the same peers: each keeps its cache, the sender its
/// similarity index, and each its stream model unless told it lost it.
fn next_session(
    tx: &mut Sender<MapCache>,
    rx: &mut Receiver<MapCache>,
    receiver_keeps_model: bool,
) -> (Sender<MapCache>, Receiver<MapCache>) {
    let (mut tx2, mut rx2) = pair(40, 20);
    tx2.cache().map = tx.cache().map.clone();
    rx2.cache().map = rx.cache().map.clone();
    tx2.set_similarity(tx.similarity().clone());
    tx2.set_stream(tx.stream().clone());
    if receiver_keeps_model {
        rx2.set_stream(rx.stream().clone());
    }
    (tx2, rx2)
}

#[test]
fn a_stream_sent_again_is_named_by_prediction() {
    let (mut tx, mut rx) = pair(40, 20);
    let v1 = random(64 << 10, 21);
    let (got, first) = transfer(&mut tx, &mut rx, &[segments(&v1, 512)], 100);
    assert_eq!(got, vec![v1.clone()]);
    assert_eq!(tx.stream().token(), rx.stream().token());

    let (mut tx, mut rx) = next_session(&mut tx, &mut rx, true);
    let (got, wire) = transfer(&mut tx, &mut rx, &[segments(&v1, 512)], 100);
    assert_eq!(got, vec![v1.clone()]);
    let st = tx.stats();
    // The first segment by fingerprint (nothing precedes it), the other 127 by one byte.
    assert_eq!((st.fingerprinted, st.predicted), (128, 127), "{st:?}");
    assert_eq!(rx.stats().requested, 0);
    assert!(wire < first / 100, "{wire} bytes for a repeat of {first}");

    // An edited copy: changed segments go as deltas on bases named by the stream, the
    // rest by prediction, and the bytes are right.
    let (mut tx, mut rx) = next_session(&mut tx, &mut rx, true);
    let v2 = edited(&v1, 700, 5);
    let (got, _) = transfer(&mut tx, &mut rx, &[segments(&v2, 512)], 37);
    assert_eq!(got, vec![v2]);
    let st = tx.stats();
    assert!(st.deltas >= 60 && st.predicted >= 30, "{st:?}");
    assert_eq!((rx.stats().requested, rx.stats().collisions), (0, 0));
    assert_eq!(tx.stream().token(), rx.stream().token());
}

#[test]
fn a_receiver_that_lost_its_stream_model_is_reset_and_still_gets_the_right_bytes() {
    let (mut tx, mut rx) = pair(40, 20);
    let v1 = random(64 << 10, 22);
    transfer(&mut tx, &mut rx, &[segments(&v1, 512)], 100);

    // The receiver starts with an empty model: it says so, both reset, and whatever
    // went out predicted before the reset is asked for and comes whole.
    let (mut tx, mut rx) = next_session(&mut tx, &mut rx, false);
    let v2 = edited(&v1, 700, 6);
    let (got, _) = transfer(&mut tx, &mut rx, &[segments(&v2, 512)], 100);
    assert_eq!(got, vec![v2.clone()]);
    assert!(rx.stats().requested > 0, "{:?}", rx.stats());
    let token = tx.stream().token();
    assert_eq!(token, rx.stream().token());
    assert_ne!(token.epoch, 0);

    // The models agree again. (This sender heard of the difference only after it had
    // sent everything, so the reset left both empty: the next session teaches them,
    // the one after predicts.)
    for session in 0..2 {
        (tx, rx) = next_session(&mut tx, &mut rx, true);
        let (got, _) = transfer(&mut tx, &mut rx, &[segments(&v2, 512)], 100);
        assert_eq!(got, vec![v2.clone()]);
        assert_eq!(rx.stats().requested, 0);
        assert_eq!(tx.stream().token(), rx.stream().token());
        if session == 1 {
            assert!(tx.stats().predicted >= 120, "{:?}", tx.stats());
        }
    }
}

#[test]
fn batched_deltas_arrive_intact_and_cost_less_than_inline_ones() {
    let v1 = random(256 << 10, 31);
    // The same few bytes changed in every segment (a version string in each header).
    let mut v2 = v1.clone();
    for at in (100..v2.len()).step_by(512) {
        v2[at..at + 5].copy_from_slice(b"5.0.2");
    }
    let mut wires = Vec::new();
    for batch in [0, 64 << 10] {
        let (mut tx, mut rx) = pair_batching(40, 20, batch);
        transfer(&mut tx, &mut rx, &[segments(&v1, 512)], 100);
        let (mut tx2, mut rx2) = pair_batching(40, 20, batch);
        tx2.cache().map = tx.cache().map.clone();
        rx2.cache().map = rx.cache().map.clone();
        tx2.set_similarity(tx.similarity().clone());
        tx2.set_stream(tx.stream().clone());
        rx2.set_stream(rx.stream().clone());
        let (got, wire) = transfer(&mut tx2, &mut rx2, &[segments(&v2, 512)], 77);
        assert_eq!(got, vec![v2.clone()]);
        assert_eq!(tx2.stats().deltas, 512, "{:?}", tx2.stats());
        assert_eq!(rx2.stats().requested, 0);
        assert_eq!(tx2.stream().token(), rx2.stream().token());
        wires.push(wire);
    }
    assert!(
        wires[1] * 2 < wires[0],
        "batched {} bytes against {} inline",
        wires[1],
        wires[0]
    );
}

#[test]
fn a_batch_whose_bases_the_receiver_lost_is_sent_whole_and_right() {
    let v1 = random(64 << 10, 32);
    let v2 = edited(&v1, 300, 7);
    let (mut tx, mut rx) = pair_batching(12, 20, 16 << 10);
    transfer(&mut tx, &mut rx, &[segments(&v1, 512)], 100);
    // The receiver's cache forgot half its segments; at 12 bits, others collide.
    let (mut tx2, mut rx2) = pair_batching(12, 20, 16 << 10);
    tx2.cache().map = tx.cache().map.clone();
    rx2.cache().map = rx
        .cache()
        .map
        .iter()
        .step_by(2)
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    tx2.set_similarity(tx.similarity().clone());
    tx2.set_stream(tx.stream().clone());
    rx2.set_stream(rx.stream().clone());
    let (got, _) = transfer(&mut tx2, &mut rx2, &[segments(&v2, 512)], 100);
    assert_eq!(got, vec![v2]);
    assert!(tx2.stats().deltas > 50, "{:?}", tx2.stats());
    assert!(rx2.stats().requested > 0, "{:?}", rx2.stats());
}

#[test]
fn a_stream_that_ends_before_its_batch_is_an_error() {
    let (mut tx, mut rx) = pair_batching(40, 20, 1 << 20);
    let v1 = random(16 << 10, 33);
    transfer(&mut tx, &mut rx, &[segments(&v1, 512)], 100);
    let (mut tx2, mut rx2) = pair_batching(40, 20, 1 << 20);
    tx2.cache().map = tx.cache().map.clone();
    rx2.cache().map = rx.cache().map.clone();
    tx2.set_similarity(tx.similarity().clone());
    let v2 = edited(&v1, 300, 8);
    let segs = segments(&v2, 512);
    let refs: Vec<&[u8]> = segs.iter().map(Vec::as_slice).collect();
    tx2.send_message(0, &[0], &refs).unwrap();
    let mut out = Vec::new();
    tx2.take_output(&mut out); // no flush: the batch never goes
    rx2.handle_input(&out).unwrap();
    assert!(tx2.stats().deltas > 0);
    let e = rx2.finish().unwrap_err();
    assert!(e.to_string().contains("batch"), "{e}");
}

#[test]
fn empty_messages_and_segments_are_delivered() {
    let (mut tx, mut rx) = pair(40, 3);
    let msgs = vec![
        vec![],
        vec![vec![], b"x".to_vec(), vec![]],
        vec![b"abc".to_vec()],
    ];
    let (got, _) = transfer(&mut tx, &mut rx, &msgs, 1);
    assert_eq!(got, vec![vec![], b"x".to_vec(), b"abc".to_vec()]);
}

#[test]
fn mismatched_parameters_are_refused() {
    let (mut tx, _) = pair(40, 20);
    let mut rx = Receiver::new(
        Config {
            bits: FpBits::new(32).unwrap(),
            ..Config::default()
        },
        MapCache::new(32),
    )
    .unwrap();
    let mut out = Vec::new();
    tx.take_output(&mut out);
    let e = rx.handle_input(&out).unwrap_err();
    assert!(e.to_string().contains("40-bit"), "{e}");
    assert!(Sender::new(Config::default(), MapCache::new(32)).is_err());
}

#[test]
fn a_lying_sender_is_caught() {
    let (mut tx, mut rx) = pair(40, 4);
    tx.send_message(0, &[], &[b"hello", b"world"]).unwrap();
    tx.flush();
    let mut out = Vec::new();
    tx.take_output(&mut out);
    // Flip a byte of the conservative hash (the last 16 bytes).
    let n = out.len();
    out[n - 3] ^= 0x40;
    let e = rx.handle_input(&out).unwrap_err();
    assert!(matches!(e, ProtocolError::GroupMismatch { .. }), "{e}");
    assert_eq!(rx.poll_delivered(), None);
}

#[test]
fn stray_replies_are_errors_naming_the_offset() {
    let (mut tx, _) = pair(40, 4);
    let e = tx.handle_input(&[wire::T_ACK]).unwrap_err();
    assert!(e.to_string().contains("at byte 0"), "{e}");
    let (mut tx, _) = pair(40, 4);
    let e = tx.handle_input(&[wire::T_REQUEST, 9, 0, 0, 0]).unwrap_err();
    assert!(
        matches!(e, ProtocolError::UnknownSegment { seq: 9, .. }),
        "{e}"
    );
}

proptest! {
    #[test]
    fn any_messages_arrive_intact(
        msgs in prop::collection::vec(
            prop::collection::vec(prop::collection::vec(0u8..4, 0..40), 0..30), 0..6),
        bits in prop::sample::select(vec![8u8, 12, 40]),
        group in 1u32..8,
        chunk in 1usize..64,
    ) {
        let (mut tx, mut rx) = pair(bits, group);
        let expect: Vec<Vec<u8>> = msgs.iter().map(|m| m.concat()).collect();
        let (got, _) = transfer(&mut tx, &mut rx, &msgs, chunk);
        prop_assert_eq!(got, expect);
    }

    #[test]
    fn edited_messages_arrive_intact(
        sizes in prop::collection::vec(100usize..700, 1..12),
        edits in prop::collection::vec((any::<u16>(), any::<u8>()), 0..20),
        rounds in 2usize..4,
        bits in prop::sample::select(vec![8u8, 12, 40]),
        chunk in 1usize..300,
        batch in prop::sample::select(vec![0usize, 1, 2000]),
    ) {
        let (mut tx, mut rx) = pair_batching(bits, 5, batch);
        let mut data = random(sizes.iter().sum(), 99);
        let mut msgs = Vec::new();
        for r in 0..rounds {
            let mut segs = Vec::new();
            let mut at = 0;
            for &n in &sizes {
                segs.push(data[at..at + n].to_vec());
                at += n;
            }
            msgs.push(segs);
            for &(pos, v) in edits.iter().skip(r) {
                let i = usize::from(pos) % data.len();
                data[i] = v;
            }
        }
        let expect: Vec<Vec<u8>> = msgs.iter().map(|m| m.concat()).collect();
        let (got, _) = transfer(&mut tx, &mut rx, &msgs, chunk);
        prop_assert_eq!(got, expect);
    }

    #[test]
    fn garbage_is_an_error_or_a_wait_never_a_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let (mut tx, mut rx) = pair(40, 4);
        let mut hello = Vec::new();
        tx.take_output(&mut hello);
        let _ = rx.handle_input(&hello);
        let _ = rx.handle_input(&bytes);
        while rx.poll_delivered().is_some() {}
        let _ = tx.handle_input(&bytes);
    }

    #[test]
    fn a_damaged_delta_batch_is_an_error_or_a_resend_never_a_panic_or_wrong_bytes(
        flips in prop::collection::vec((any::<u16>(), 1u8..=255), 1..4),
    ) {
        let v1 = random(32 << 10, 41);
        let (mut tx, mut rx) = pair_batching(40, 20, 8 << 10);
        transfer(&mut tx, &mut rx, &[segments(&v1, 512)], 100);
        let (mut tx2, mut rx2) = pair_batching(40, 20, 8 << 10);
        tx2.cache().map = tx.cache().map.clone();
        rx2.cache().map = rx.cache().map.clone();
        tx2.set_similarity(tx.similarity().clone());
        tx2.set_stream(tx.stream().clone());
        rx2.set_stream(rx.stream().clone());
        let v2 = edited(&v1, 300, 9);
        let segs = segments(&v2, 512);
        let refs: Vec<&[u8]> = segs.iter().map(Vec::as_slice).collect();
        tx2.send_message(0, &[0], &refs).unwrap();
        tx2.flush();
        let mut out = Vec::new();
        tx2.take_output(&mut out);
        // Damage the last batch frame, which ends the output (flush sends it last).
        assert!(tx2.stats().batched > 0);
        for (at, x) in flips {
            let i = out.len() - 1 - usize::from(at) % 64;
            out[i] ^= x;
        }
        if rx2.handle_input(&out).is_ok() {
            let mut back = Vec::new();
            rx2.take_output(&mut back);
            // Whatever is delivered is right (the rest waits for the resends).
            while let Some(d) = rx2.poll_delivered() {
                prop_assert_eq!(d.segments.concat(), v2.clone());
            }
            prop_assert!(tx2.handle_input(&back).is_ok() || !back.is_empty());
        }
    }
}
