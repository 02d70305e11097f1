//! Decoders given garbage return an error or some bytes, never panic, and never allocate
//! more than the caller's limit justifies.
//!
//! A counting global allocator records, per thread, the peak of live heap bytes during
//! each decode. The bound checked is 5 × `max_len` + 16 KiB: the output, one scratch copy
//! (shuffle), the two FPC tables (at most 2 × the output for 32-bit values) and the
//! 8 KiB Huffman decode table. zstd's own context is allocated by C `malloc`, once per
//! thread, and is not counted here.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;
use vargr_codec::testdata;
use vargr_codec::{decode, encode, Codec, CodecId, ElemKind, Header};

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            track(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            track(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        track(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            track(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Decodes `frame` with limit `max_len`, checking the output and allocation bounds.
fn bounded_decode(frame: &[u8], max_len: usize) -> Result<(), TestCaseError> {
    let base = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(base));
    let mut out = Vec::new();
    let res = decode(frame, max_len, &mut out);
    let peak = PEAK.with(|p| p.get()) - base;
    let bound = 5 * max_len as isize + 16 * 1024;
    prop_assert!(
        peak <= bound,
        "decode used {peak} bytes of heap, bound {bound}: {res:?}"
    );
    match res {
        Ok(h) => {
            prop_assert!(out.len() <= max_len);
            prop_assert_eq!(out.len() as u64, h.original_len);
        }
        Err(_) => prop_assert!(out.is_empty()),
    }
    Ok(())
}

fn header(codec: CodecId, elem: ElemKind, len: u64) -> Vec<u8> {
    let mut v = Vec::new();
    Header {
        codec,
        elem,
        original_len: len,
        span: None,
    }
    .write(&mut v);
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_frames(frame in prop::collection::vec(any::<u8>(), 0..200), max_len in 0usize..4096) {
        bounded_decode(&frame, max_len)?;
    }

    #[test]
    fn valid_header_then_garbage(
        id in prop::sample::select(CodecId::ALL.to_vec()),
        elem in prop::sample::select(ElemKind::ALL.to_vec()),
        len in prop_oneof![0u64..64, 0u64..5000, Just(u64::MAX), Just(1 << 40)],
        payload in prop::collection::vec(any::<u8>(), 0..300),
        max_len in prop_oneof![Just(4096usize), 0usize..5000],
    ) {
        let mut frame = header(id, elem, len);
        frame.extend(&payload);
        bounded_decode(&frame, max_len)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Real frames with bytes flipped, inserted or cut: the corruption a codec bug or a
    /// broken peer would produce, which plain random bytes rarely reach.
    #[test]
    fn mutated_real_frames(
        codec in prop::sample::select(Codec::CATALOG.to_vec()),
        set in 0usize..10,
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let sets = testdata::standard_sets(2048);
        let s = &sets[set];
        let elem = if codec.supports(s.elem) { s.elem } else { ElemKind::F64 };
        let mut frame = Vec::new();
        encode(codec, elem, &s.bytes, &mut frame);
        for (at, x) in flips {
            let i = at.index(frame.len());
            frame[i] ^= x.max(1);
        }
        if let Some(c) = cut {
            frame.truncate(c.index(frame.len() + 1));
        }
        bounded_decode(&frame, 4096)?;
    }
}

#[test]
fn every_codec_refuses_an_empty_payload_for_a_long_message() {
    for id in CodecId::ALL {
        for elem in ElemKind::ALL {
            let frame = header(id, elem, 100);
            let mut out = Vec::new();
            assert!(decode(&frame, 4096, &mut out).is_err(), "{id} {elem}");
            assert!(out.is_empty());
        }
    }
}

#[test]
fn announced_length_over_the_limit_allocates_nothing() {
    let mut frame = header(CodecId::Zstd, ElemKind::U8, 1 << 40);
    frame.extend([0x28, 0xb5, 0x2f, 0xfd]);
    let base = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(base));
    assert!(decode(&frame, 1 << 20, &mut Vec::new()).is_err());
    assert_eq!(PEAK.with(|p| p.get()), base);
}
