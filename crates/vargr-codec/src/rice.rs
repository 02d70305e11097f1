//! Rice (Golomb with a power-of-two divisor) codes for integer arrays with small deltas:
//! counters, indices, timestamps, sorted keys, the column indices of a sparse matrix.
//!
//! Each element (1, 2, 4 or 8 bytes, little-endian) is replaced by its difference from
//! the previous one, wrapping in the element width, so signed and unsigned arrays are
//! handled alike. The difference is zigzag-mapped (0, -1, 1, -2, … → 0, 1, 2, 3, …) and
//! Rice-coded with a parameter `k` chosen per block of [`BLOCK`] values:
//!
//! ```text
//! per block:  k in 7 bits (0..=width)
//! per value:  q = v >> k;  q < QMAX: q zero bits, a one bit, then the k low bits of v
//!                          q ≥ QMAX: QMAX zero bits, then v in `width` bits (escape)
//! ```
//!
//! The escape bounds the cost of an outlier at `QMAX + width` bits, so one large jump
//! does not cost millions of unary bits. `k` is the cheapest within a small window around
//! log2 of the block's mean, which is where the optimum of a geometric distribution lies.
//! Bits are packed LSB first (see `bits`); a trailing partial element follows the bit
//! stream verbatim.

use crate::bits::{low_mask, BitReader, BitWriter};
use crate::{CodecError, CodecId};

/// Values per block sharing one `k`.
pub const BLOCK: usize = 128;

/// Unary quotients from this value on are sent as an escape and the raw value.
pub const QMAX: u32 = 24;

const C: CodecId = CodecId::Rice;

#[inline]
fn load(chunk: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..chunk.len()].copy_from_slice(chunk);
    u64::from_le_bytes(b)
}

#[inline]
fn zigzag(d: u64, width: u32) -> u64 {
    // Sign-extend the width-bit difference, then interleave signs.
    let s = ((d << (64 - width)) as i64) >> (64 - width);
    ((s << 1) ^ (s >> 63)) as u64 & low_mask(width)
}

#[inline]
fn unzigzag(z: u64) -> u64 {
    (z >> 1) ^ (z & 1).wrapping_neg()
}

/// Bits needed for `v` with parameter `k`.
#[inline]
fn cost(v: u64, k: u32, width: u32) -> u64 {
    let q = if k >= 64 { 0 } else { v >> k };
    if q < u64::from(QMAX) {
        q + 1 + u64::from(k)
    } else {
        u64::from(QMAX + width)
    }
}

fn choose_k(block: &[u64], width: u32) -> u32 {
    let sum: u128 = block.iter().map(|&v| u128::from(v)).sum();
    let mean = (sum / block.len() as u128) as u64;
    let center = 64 - mean.leading_zeros();
    let lo = center.saturating_sub(3);
    let hi = (center + 1).min(width);
    (lo..=hi)
        .min_by_key(|&k| block.iter().map(|&v| cost(v, k, width)).sum::<u64>())
        .unwrap_or(0)
}

/// Appends the Rice stream for `input`, taken as elements of `size` bytes, to `out`.
pub(crate) fn compress(input: &[u8], size: usize, out: &mut Vec<u8>) {
    match size {
        1 => compress_w::<1>(input, out),
        2 => compress_w::<2>(input, out),
        4 => compress_w::<4>(input, out),
        _ => compress_w::<8>(input, out),
    }
}

fn compress_w<const S: usize>(input: &[u8], out: &mut Vec<u8>) {
    let width = (S * 8) as u32;
    let n = input.len() / S;
    let mut w = BitWriter::new(out);
    let mut prev = 0u64;
    let mut block = Vec::with_capacity(BLOCK);
    for chunk in input[..n * S].chunks(BLOCK * S) {
        block.clear();
        for e in chunk.chunks_exact(S) {
            let x = load(e);
            block.push(zigzag(x.wrapping_sub(prev), width));
            prev = x;
        }
        let k = choose_k(&block, width);
        w.write(u64::from(k), 7);
        for &v in &block {
            let q = if k >= 64 { 0 } else { v >> k };
            if q >= u64::from(QMAX) {
                w.write(0, QMAX);
                w.write_long(v, width);
            } else if q as u32 + 1 + k <= 32 {
                // The usual case: unary prefix and low bits in one write.
                let q = q as u32;
                w.write((1 << q) | ((v & low_mask(k)) << (q + 1)), q + 1 + k);
            } else {
                w.write(1 << q, q as u32 + 1);
                w.write_long(v, k);
            }
        }
    }
    w.finish();
    out.extend_from_slice(&input[n * S..]);
}

/// Appends exactly `len` decoded bytes to `out`.
pub(crate) fn decompress(
    payload: &[u8],
    size: usize,
    len: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    match size {
        1 => decompress_w::<1>(payload, len, out),
        2 => decompress_w::<2>(payload, len, out),
        4 => decompress_w::<4>(payload, len, out),
        _ => decompress_w::<8>(payload, len, out),
    }
}

fn decompress_w<const S: usize>(
    payload: &[u8],
    len: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let width = (S * 8) as u32;
    let n = len / S;
    let tail = len % S;
    let Some(split) = payload.len().checked_sub(tail) else {
        return Err(CodecError::corrupt(
            C,
            "rice payload shorter than its trailing bytes",
        ));
    };
    let (stream, tail_bytes) = payload.split_at(split);
    let start = out.len();
    out.resize(start + n * S, 0);
    let mut r = BitReader::new(stream);
    let mut prev = 0u64;
    for block in out[start..].chunks_mut(BLOCK * S) {
        let k = r.read(7) as u32;
        if k > width {
            return Err(CodecError::corrupt(
                C,
                "rice block parameter k larger than the element width",
            ));
        }
        for slot in block.chunks_exact_mut(S) {
            r.fill();
            let unary = r.peek_filled(QMAX);
            let v = if unary == 0 {
                r.consume(QMAX);
                r.read_long(width)
            } else {
                let q = unary.trailing_zeros();
                r.consume(q + 1);
                // At least 56 - 24 = 32 bits are still buffered.
                let low = if k <= 32 {
                    let low = r.peek_filled(k);
                    r.consume(k);
                    low
                } else {
                    r.read_long(k)
                };
                let v = (u128::from(q) << k) | u128::from(low);
                if v > u128::from(low_mask(width)) {
                    return Err(CodecError::corrupt(C, "rice value wider than the element"));
                }
                v as u64
            };
            let x = prev.wrapping_add(unzigzag(v)) & low_mask(width);
            slot.copy_from_slice(&x.to_le_bytes()[..S]);
            prev = x;
        }
        if r.overrun() {
            return Err(CodecError::corrupt(C, "rice bit stream ends early"));
        }
    }
    if !r.at_end() {
        return Err(CodecError::corrupt(C, "rice bytes after the bit stream"));
    }
    out.extend_from_slice(tail_bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_is_a_bijection_per_width() {
        for width in [8, 16, 32, 64] {
            for d in [
                0u64,
                1,
                2,
                3,
                low_mask(width),
                low_mask(width) - 1,
                1 << (width - 1),
            ] {
                let z = zigzag(d, width);
                assert!(z <= low_mask(width));
                assert_eq!(unzigzag(z) & low_mask(width), d);
            }
        }
        assert_eq!(zigzag(low_mask(32), 32), 1); // -1
        assert_eq!(zigzag(1, 32), 2);
    }

    #[test]
    fn small_deltas_cost_a_few_bits() {
        let xs: Vec<u8> = (0..1000i32)
            .flat_map(|i| (i * 3 + i % 2).to_le_bytes())
            .collect();
        let mut c = Vec::new();
        compress(&xs, 4, &mut c);
        assert!(c.len() < xs.len() / 6, "{} bytes", c.len());
        let mut d = Vec::new();
        decompress(&c, 4, xs.len(), &mut d).unwrap();
        assert_eq!(d, xs);
    }

    #[test]
    fn outliers_use_the_escape() {
        let xs: Vec<u8> = [0u64, 1, u64::MAX, 2, 1 << 63, 3]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .chain([7, 7, 7])
            .collect();
        let mut c = Vec::new();
        compress(&xs, 8, &mut c);
        let mut d = Vec::new();
        decompress(&c, 8, xs.len(), &mut d).unwrap();
        assert_eq!(d, xs);
    }
}
