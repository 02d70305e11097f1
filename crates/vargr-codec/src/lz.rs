//! LZ4 and zstd, through the maintained crates (`lz4_flex`, `zstd`).
//!
//! LZ4 plays the part LZO played in the seed: very fast, modest ratio. zstd gives the
//! better ratios at a few levels. Both are used in their one-shot block forms, because
//! the frame header already carries the original length: the decoder gets an output
//! buffer of exactly that length (already checked against the receiver's limit) and
//! fails if the stream wants to write past it or stops short of it.

use std::cell::RefCell;

use crate::{CodecError, CodecId};

/// Appends one LZ4 block for `input` to `out`.
pub(crate) fn lz4_compress(input: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(
        start + lz4_flex::block::get_maximum_output_size(input.len()),
        0,
    );
    // The buffer has the worst-case size, so the encoder cannot run out of room.
    let n = lz4_flex::block::compress_into(input, &mut out[start..])
        .expect("lz4 output buffer has the maximum output size");
    out.truncate(start + n);
}

/// Appends exactly `len` bytes decoded from one LZ4 block to `out`.
pub(crate) fn lz4_decompress(
    codec: CodecId,
    payload: &[u8],
    len: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let start = out.len();
    out.resize(start + len, 0);
    match lz4_flex::block::decompress_into(payload, &mut out[start..]) {
        Ok(n) if n == len => Ok(()),
        Ok(n) => Err(CodecError::LengthMismatch {
            codec,
            expected: len,
            got: n,
        }),
        Err(_) => Err(CodecError::corrupt(codec, "lz4 block")),
    }
}

thread_local! {
    // zstd contexts cost tens of kilobytes to set up; one pair per thread is reused.
    static ZSTD_C: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
    static ZSTD_D: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// The zstd levels accepted: zstd's own range, negative levels being its fast modes.
pub const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = -7..=22;

/// Appends one zstd frame for `input` at `level` to `out`.
pub(crate) fn zstd_compress(input: &[u8], level: i32, out: &mut Vec<u8>) -> Result<(), CodecError> {
    if !ZSTD_LEVELS.contains(&level) {
        return Err(CodecError::InvalidParam(format!(
            "zstd level {level}: expected -7..=22"
        )));
    }
    let start = out.len();
    out.resize(start + zstd::zstd_safe::compress_bound(input.len()), 0);
    let res = ZSTD_C.with(|cell| {
        let mut slot = cell.borrow_mut();
        if let Some((l, c)) = slot.as_mut() {
            if *l != level {
                c.set_compression_level(level)?;
                *l = level;
            }
        } else {
            *slot = Some((level, zstd::bulk::Compressor::new(level)?));
        }
        let (_, c) = slot.as_mut().expect("compressor was just set");
        c.compress_to_buffer(input, &mut out[start..])
    });
    match res {
        Ok(n) => {
            out.truncate(start + n);
            Ok(())
        }
        Err(e) => {
            out.truncate(start);
            Err(CodecError::InvalidParam(format!(
                "zstd compression failed: {e}"
            )))
        }
    }
}

/// Appends exactly `len` bytes decoded from one zstd frame to `out`.
pub(crate) fn zstd_decompress(
    codec: CodecId,
    payload: &[u8],
    len: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let start = out.len();
    out.resize(start + len, 0);
    let res = ZSTD_D.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new()?);
        }
        let d = slot.as_mut().expect("decompressor was just set");
        // A slice, not a Vec: zstd writes at most `len` bytes and fails beyond.
        d.decompress_to_buffer(payload, &mut out[start..])
    });
    match res {
        Ok(n) if n == len => Ok(()),
        Ok(n) => Err(CodecError::LengthMismatch {
            codec,
            expected: len,
            got: n,
        }),
        Err(_) => Err(CodecError::corrupt(codec, "zstd frame")),
    }
}
