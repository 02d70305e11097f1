//! Two pumps joined by byte buffers: what crosses, credit flow control, the held tail,
//! and the frames a pump refuses.

use super::*;
use vargr_dedup::cache::{MemCache, SharedCache};

type Cache = SharedCache<MemCache>;

fn settings(hold: Duration) -> PumpSettings {
    PumpSettings {
        bits: FpBits::DEFAULT,
        group: 20,
        zstd_level: 3,
        hold,
    }
}

fn pump_with(hold: Duration) -> Pump<Cache> {
    let s = settings(hold);
    let n = s.dedup_config().delta_index;
    let models = Models {
        similarity: SimilarityIndex::new(n),
        sent: StreamModel::new(n),
        received: StreamModel::new(n),
    };
    let cache = SharedCache::new(MemCache::new(s.bits, 256 << 20));
    Pump::new(&s, "cdc:64:256:2k", cache, models, Vec::new()).unwrap()
}

fn pump() -> Pump<Cache> {
    pump_with(Duration::ZERO)
}

/// Reproducible bytes that neither compress nor repeat (xorshift64).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Moves `from`'s frames to `to`; the link bytes moved.
fn carry(from: &mut Pump<Cache>, to: &mut Pump<Cache>) -> usize {
    let bytes = from.take_frames().concat();
    to.link_input(&bytes, false).unwrap();
    bytes.len()
}

/// Carries frames both ways until neither side has any.
fn exchange(a: &mut Pump<Cache>, b: &mut Pump<Cache>) {
    while carry(a, b) + carry(b, a) > 0 {}
}

/// Writes all of `p`'s application output to `sink`.
fn write_app(p: &mut Pump<Cache>, sink: &mut Vec<u8>) {
    let out = p.app_output();
    if !out.is_empty() {
        sink.extend_from_slice(out);
        let n = out.len();
        p.app_written(n);
    }
}

#[test]
fn bytes_cross_both_ways_and_each_end_shuts_the_far_write_side() {
    let (mut a, mut b) = (pump(), pump());
    let now = Instant::now();
    let (to_b, to_a) = (noise(300_000, 1), noise(5_000, 2));
    let (mut at_b, mut at_a) = (Vec::new(), Vec::new());
    a.app_input(&to_b, AppRead::Paused, now).unwrap();
    b.app_input(&to_a, AppRead::Paused, now).unwrap();
    exchange(&mut a, &mut b);
    write_app(&mut b, &mut at_b);
    write_app(&mut a, &mut at_a);
    assert_eq!(at_b, to_b);
    assert_eq!(at_a, to_a);
    assert!(!b.take_app_shutdown(), "a has not ended yet");

    a.app_input(&[], AppRead::Ended, now).unwrap();
    exchange(&mut a, &mut b);
    assert!(b.take_app_shutdown());
    assert!(!b.take_app_shutdown(), "said once");
    assert!(!a.is_done(0), "b still sends");
    b.app_input(&[], AppRead::Ended, now).unwrap();
    exchange(&mut a, &mut b);
    assert!(a.take_app_shutdown());
    assert!(a.is_done(0) && b.is_done(0));
    assert!(!a.is_done(1), "link bytes still to write");
    assert_eq!(a.app_bytes(), (to_b.len() as u64, to_a.len() as u64));
}

#[test]
fn a_repeat_crosses_as_fingerprints() {
    let (mut a, mut b) = (pump(), pump());
    let now = Instant::now();
    let data = noise(200_000, 3);
    let mut sink = Vec::new();
    a.app_input(&data, AppRead::Paused, now).unwrap();
    let first = carry(&mut a, &mut b);
    exchange(&mut a, &mut b);
    write_app(&mut b, &mut sink);
    a.app_input(&data, AppRead::Paused, now).unwrap();
    let second = carry(&mut a, &mut b);
    exchange(&mut a, &mut b);
    write_app(&mut b, &mut sink);
    assert_eq!(sink, [&data[..], &data[..]].concat());
    assert!(
        second * 10 < first,
        "second copy {second} B, first {first} B"
    );
    assert!(a.sender_stats().fingerprinted > 0);
}

#[test]
fn the_sender_stops_at_the_window_until_the_far_application_is_written() {
    let (mut a, mut b) = (pump(), pump());
    let now = Instant::now();
    let mut taken = 0usize;
    // Far more turns than a window needs: the window must stop the sender first.
    for turn in 0..(4 * WINDOW as usize / READ_BUDGET) {
        if !a.wants_app_bytes(0) {
            break;
        }
        let n = a.app_read_budget();
        a.app_input(&noise(n, turn as u64 + 10), AppRead::Budget, now)
            .unwrap();
        taken += n;
        exchange(&mut a, &mut b);
    }
    assert!(!a.wants_app_bytes(0), "still reading after {taken} bytes");
    assert!(taken as u64 <= WINDOW + PENDING_CAP as u64, "{taken}");
    let waiting = b.app_output().len();
    assert!(
        waiting as u64 >= WINDOW / 2 && waiting as u64 <= WINDOW,
        "{waiting}"
    );

    // The far application takes it all: a credit goes back and the sender resumes.
    let mut sink = Vec::new();
    write_app(&mut b, &mut sink);
    assert!(!a.wants_app_bytes(0), "no credit has crossed yet");
    exchange(&mut a, &mut b);
    assert!(a.wants_app_bytes(0));
    assert_eq!(a.app_read_budget(), READ_BUDGET);
}

#[test]
fn a_full_link_stops_the_application_reads() {
    let a = pump();
    assert!(a.wants_app_bytes(0));
    assert!(!a.wants_app_bytes(LINK_OUT_HIGH));
}

#[test]
fn a_held_tail_goes_when_its_time_comes() {
    let hold = Duration::from_millis(3);
    let (mut a, mut b) = (pump_with(hold), pump());
    let t0 = Instant::now();
    let data = noise(50_000, 4);
    a.app_input(&data, AppRead::Paused, t0).unwrap();
    assert_eq!(a.hold_until(), Some(t0 + hold));
    exchange(&mut a, &mut b);
    let early = b.app_output().len();
    assert!(early < data.len(), "the tail waits");

    a.on_time(t0 + hold / 2).unwrap();
    assert_eq!(a.hold_until(), Some(t0 + hold));
    a.on_time(t0 + hold).unwrap();
    assert_eq!(a.hold_until(), None);
    exchange(&mut a, &mut b);
    assert_eq!(b.app_output(), &data[..]);
}

/// What a fresh pump makes of `link` bytes.
fn refused(link: &[u8], ended: bool) -> PumpError {
    pump()
        .link_input(link, ended)
        .expect_err("the pump accepted it")
}

#[test]
fn a_frame_beyond_the_limit_is_refused_before_its_body() {
    let e = refused(&[F_DATA, 0xff, 0xff, 0xff, 0xff], false);
    assert!(e.to_string().contains("exceeds"), "{e}");
    assert!(e.tell_peer(), "the link works: the peer hears why");
}

#[test]
fn bad_frames_name_what_was_wrong() {
    for (link, want) in [
        (frame(99, b""), "unknown frame type 99"),
        (frame(F_CREDIT, &[1, 2, 3]), "credit of 3 bytes"),
        (
            frame(F_CREDIT, &5u64.to_le_bytes()),
            "credit for 5 bytes, only 0 were sent",
        ),
        (frame(F_DATA, b"not zstd"), "data frame"),
    ] {
        let e = refused(&link, false);
        assert!(e.to_string().contains(want), "{e}, expected {want}");
        assert!(e.to_string().starts_with("from the other proxy: "), "{e}");
    }
}

#[test]
fn an_abort_from_the_peer_ends_the_pump_without_an_answer() {
    let e = refused(&frame(F_ABORT, b"disk full"), false);
    assert_eq!(e.to_string(), "the other proxy gave up: disk full");
    assert!(!e.tell_peer());
}

#[test]
fn a_frame_in_pieces_is_read_whole_and_a_cut_one_is_an_error() {
    let mut p = pump();
    let f = frame(F_CREDIT, &0u64.to_le_bytes());
    for byte in &f {
        p.link_input(std::slice::from_ref(byte), false).unwrap();
    }
    let e = refused(&f[..f.len() - 1], true);
    assert!(e.to_string().contains("ended inside a frame"), "{e}");
    assert!(!e.tell_peer());
}

#[test]
fn a_link_closed_before_both_streams_ended_is_an_error() {
    let mut p = pump();
    p.link_input(&[], true).unwrap();
    assert!(p.link_ended());
    let e = p.check_link_end().expect_err("closed early");
    assert!(e.to_string().contains("before the connection ended"), "{e}");
}

#[test]
fn a_segmenter_that_needs_whole_messages_is_refused() {
    assert!(stream_segmenter("cdc:64:256:2k").is_ok());
    assert!(matches!(
        stream_segmenter("tiles"),
        Err(StreamSegmenterError::NeedsMessages(_))
    ));
    assert!(matches!(
        stream_segmenter("no-such-segmenter"),
        Err(StreamSegmenterError::Spec(_))
    ));
}
