//! Canonical Huffman coding over bytes, the seed's entropy coder for text and binary data
//! whose byte values are unevenly used but not repeated in long strings.
//!
//! Code lengths are limited to [`MAX_BITS`] (12) bits so that the decoder resolves every
//! code with one lookup in a 4096-entry table; on byte data the limit costs well under a
//! percent of ratio. Codes are canonical, so only the lengths travel. The payload starts
//! with a mode byte:
//!
//! ```text
//! 0  single symbol:  [0, sym]                       every byte is `sym`
//! 1  sparse table:   [1, n-1, (sym, len) × n]       then the bit stream
//! 2  dense table:    [2, 128 bytes of 4-bit lengths, symbol 2i in the low nibble]
//!                                                   then the bit stream
//! ```
//!
//! The encoder picks whichever table is shorter. The bit stream packs each code LSB
//! first (codes bit-reversed, as in DEFLATE). The decoder rejects lengths over 12,
//! over-subscribed codes, duplicate symbols, codes that the table leaves unassigned, a
//! stream that ends early and bytes after it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::bits::BitReader;
use crate::{CodecError, CodecId};

/// The longest code, in bits.
pub const MAX_BITS: u32 = 12;

const C: CodecId = CodecId::Huffman;
const MODE_SINGLE: u8 = 0;
const MODE_SPARSE: u8 = 1;
const MODE_DENSE: u8 = 2;

/// Appends the Huffman payload for `input` to `out`.
pub(crate) fn compress(input: &[u8], out: &mut Vec<u8>) {
    let mut freq = [0u64; 256];
    for &b in input {
        freq[usize::from(b)] += 1;
    }
    let used: Vec<u8> = (0..=255u8).filter(|&s| freq[usize::from(s)] > 0).collect();
    if used.len() <= 1 {
        out.extend_from_slice(&[MODE_SINGLE, used.first().copied().unwrap_or(0)]);
        return;
    }
    let lens = code_lengths(&freq);
    if 2 * used.len() < 128 {
        out.extend_from_slice(&[MODE_SPARSE, (used.len() - 1) as u8]);
        for &s in &used {
            out.extend_from_slice(&[s, lens[usize::from(s)]]);
        }
    } else {
        out.push(MODE_DENSE);
        out.extend(lens.chunks_exact(2).map(|p| p[0] | p[1] << 4));
    }
    let codes = canonical_codes(&lens);
    // The exact size is known, so write whole words into a sized buffer and advance by
    // the bytes completed: four codes (at most 48 bits) per word.
    let bits: u64 = (0..256).map(|s| freq[s] * u64::from(lens[s])).sum();
    let bytes = bits.div_ceil(8) as usize;
    let start = out.len();
    out.resize(start + bytes + 8, 0);
    let buf = &mut out[start..];
    let (mut pos, mut acc, mut nbits) = (0usize, 0u64, 0u32);
    for quad in input.chunks(4) {
        for &b in quad {
            let (code, len) = codes[usize::from(b)];
            acc |= u64::from(code) << nbits;
            nbits += u32::from(len);
        }
        buf[pos..pos + 8].copy_from_slice(&acc.to_le_bytes());
        let done = nbits / 8;
        pos += done as usize;
        acc >>= 8 * done; // done <= 6: at most 7 + 48 bits were pending
        nbits -= 8 * done;
    }
    buf[pos..pos + 8].copy_from_slice(&acc.to_le_bytes());
    out.truncate(start + bytes);
}

/// Huffman code lengths for the symbols with nonzero frequency (at least two), limited
/// to `MAX_BITS`.
fn code_lengths(freq: &[u64; 256]) -> [u8; 256] {
    // Nodes 0..256 are leaves; internal nodes are appended. Ties break on the node
    // index so the result does not depend on the heap's internals.
    let mut parent = vec![usize::MAX; 256];
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = (0..256)
        .filter(|&s| freq[s] > 0)
        .map(|s| Reverse((freq[s], s)))
        .collect();
    while heap.len() > 1 {
        let Reverse((fa, a)) = heap.pop().expect("two nodes");
        let Reverse((fb, b)) = heap.pop().expect("two nodes");
        let node = parent.len();
        parent.push(usize::MAX);
        parent[a] = node;
        parent[b] = node;
        heap.push(Reverse((fa + fb, node)));
    }
    // Internal nodes come after their children, so depths fill in from the root down.
    let mut depth = vec![0u32; parent.len()];
    for i in (0..parent.len()).rev() {
        if parent[i] != usize::MAX {
            depth[i] = depth[parent[i]] + 1;
        }
    }
    let mut lens = [0u8; 256];
    for s in 0..256 {
        if freq[s] > 0 {
            lens[s] = depth[s].min(MAX_BITS) as u8;
        }
    }
    limit_lengths(&mut lens, freq);
    lens
}

/// Restores the Kraft inequality after clamping lengths to `MAX_BITS`: lengthen the
/// rarest of the longest codes below the limit until the code fits, then shorten the
/// most frequent codes while there is room.
fn limit_lengths(lens: &mut [u8; 256], freq: &[u64; 256]) {
    let full = 1u64 << MAX_BITS;
    let units = |l: u8| 1u64 << (MAX_BITS - u32::from(l));
    let mut kraft: u64 = lens.iter().filter(|&&l| l > 0).map(|&l| units(l)).sum();
    // Symbols from rarest to most frequent.
    let mut order: Vec<usize> = (0..256).filter(|&s| lens[s] > 0).collect();
    order.sort_by_key(|&s| (freq[s], s));
    while kraft > full {
        let s = *order
            .iter()
            .filter(|&&s| u32::from(lens[s]) < MAX_BITS)
            .max_by_key(|&&s| (lens[s], Reverse(freq[s])))
            .expect("at most 256 symbols fit in 12-bit codes");
        kraft -= units(lens[s] + 1);
        lens[s] += 1;
    }
    for &s in order.iter().rev() {
        while lens[s] > 1 && kraft + units(lens[s]) <= full {
            kraft += units(lens[s]);
            lens[s] -= 1;
        }
    }
}

/// Canonical codes, bit-reversed for LSB-first writing: `(code, length)` per symbol.
fn canonical_codes(lens: &[u8; 256]) -> [(u16, u8); 256] {
    let mut count = [0u16; MAX_BITS as usize + 1];
    for &l in lens.iter().filter(|&&l| l > 0) {
        count[usize::from(l)] += 1;
    }
    let mut next = [0u16; MAX_BITS as usize + 2];
    for l in 1..=MAX_BITS as usize {
        next[l + 1] = (next[l] + count[l]) << 1;
    }
    let mut codes = [(0u16, 0u8); 256];
    for s in 0..256 {
        let l = lens[s];
        if l > 0 {
            let code = next[usize::from(l)];
            next[usize::from(l)] += 1;
            codes[s] = (code.reverse_bits() >> (16 - u32::from(l)), l);
        }
    }
    codes
}

/// Appends exactly `len` decoded bytes to `out`.
pub(crate) fn decompress(payload: &[u8], len: usize, out: &mut Vec<u8>) -> Result<(), CodecError> {
    let Some((&mode, rest)) = payload.split_first() else {
        return Err(CodecError::corrupt(C, "huffman mode byte missing"));
    };
    let mut lens = [0u8; 256];
    let stream = match mode {
        MODE_SINGLE => {
            let [sym] = *rest else {
                return Err(CodecError::corrupt(
                    C,
                    "huffman single-symbol payload is not one byte",
                ));
            };
            out.resize(out.len() + len, sym);
            return Ok(());
        }
        MODE_SPARSE => {
            let Some((&n, rest)) = rest.split_first() else {
                return Err(CodecError::corrupt(C, "huffman symbol count missing"));
            };
            let n = usize::from(n) + 1;
            let Some((table, stream)) = rest.split_at_checked(2 * n) else {
                return Err(CodecError::corrupt(C, "huffman sparse table truncated"));
            };
            for pair in table.chunks_exact(2) {
                let (s, l) = (usize::from(pair[0]), pair[1]);
                if lens[s] != 0 {
                    return Err(CodecError::corrupt(
                        C,
                        "huffman sparse table repeats a symbol",
                    ));
                }
                if l == 0 {
                    return Err(CodecError::corrupt(
                        C,
                        "huffman sparse table has a zero length",
                    ));
                }
                lens[s] = l;
            }
            stream
        }
        MODE_DENSE => {
            let Some((table, stream)) = rest.split_at_checked(128) else {
                return Err(CodecError::corrupt(C, "huffman dense table truncated"));
            };
            for (i, &b) in table.iter().enumerate() {
                lens[2 * i] = b & 0x0f;
                lens[2 * i + 1] = b >> 4;
            }
            stream
        }
        _ => return Err(CodecError::corrupt(C, "huffman mode byte")),
    };
    let table = decode_table(&lens)?;
    let start = out.len();
    out.resize(start + len, 0);
    let mut r = BitReader::new(stream);
    // One refill gives at least 56 bits, enough for four codes.
    for quad in out[start..].chunks_mut(4) {
        r.fill();
        for slot in quad {
            let entry = table[r.peek_filled(MAX_BITS) as usize];
            let l = u32::from(entry >> 8);
            if l == 0 {
                return Err(CodecError::corrupt(C, "huffman code not in the table"));
            }
            r.consume(l);
            *slot = entry as u8;
        }
    }
    if r.overrun() {
        return Err(CodecError::corrupt(C, "huffman bit stream ends early"));
    }
    if !r.at_end() {
        return Err(CodecError::corrupt(C, "huffman bytes after the bit stream"));
    }
    Ok(())
}

/// The one-lookup decode table: for every `MAX_BITS`-bit window, `length << 8 | symbol`
/// of the code it starts with, 0 where no code does.
fn decode_table(lens: &[u8; 256]) -> Result<Vec<u16>, CodecError> {
    if lens.iter().any(|&l| u32::from(l) > MAX_BITS) {
        return Err(CodecError::corrupt(C, "huffman code length over 12 bits"));
    }
    let kraft: u64 = lens
        .iter()
        .filter(|&&l| l > 0)
        .map(|&l| 1u64 << (MAX_BITS - u32::from(l)))
        .sum();
    if kraft > 1 << MAX_BITS {
        return Err(CodecError::corrupt(
            C,
            "huffman code lengths over-subscribed",
        ));
    }
    let codes = canonical_codes(lens);
    let mut table = vec![0u16; 1 << MAX_BITS];
    for (s, &(code, l)) in codes.iter().enumerate() {
        if l == 0 {
            continue;
        }
        let entry = u16::from(l) << 8 | s as u16;
        let mut i = usize::from(code);
        while i < table.len() {
            table[i] = entry;
            i += 1 << l;
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trip(input: &[u8]) -> usize {
        let mut c = Vec::new();
        compress(input, &mut c);
        let mut d = Vec::new();
        decompress(&c, input.len(), &mut d).unwrap();
        assert_eq!(d, input);
        c.len()
    }

    #[test]
    fn skewed_text_shrinks() {
        let text = b"the quick brown fox jumps over the lazy dog; ".repeat(50);
        assert!(trip(&text) < text.len() * 6 / 10);
    }

    #[test]
    fn lengths_stay_within_the_limit_on_fibonacci_frequencies() {
        // Fibonacci frequencies give the deepest possible Huffman tree.
        let mut freq = [0u64; 256];
        let (mut a, mut b) = (1u64, 1u64);
        for f in freq.iter_mut().take(40) {
            *f = a;
            (a, b) = (b, a + b);
        }
        let lens = code_lengths(&freq);
        assert!(lens.iter().all(|&l| u32::from(l) <= MAX_BITS));
        assert!(decode_table(&lens).is_ok());
        let input: Vec<u8> = (0..40u8)
            .flat_map(|s| std::iter::repeat_n(s, (s as usize % 7) + 1))
            .collect();
        trip(&input);
    }

    #[test]
    fn all_byte_values_and_single_symbols() {
        let all: Vec<u8> = (0..=255).cycle().take(5000).collect();
        trip(&all);
        assert_eq!(trip(&[42; 1000]), 2);
        assert_eq!(trip(&[]), 2);
        trip(&[1, 2]);
    }

    #[test]
    fn over_subscribed_lengths_are_refused() {
        let bad = [MODE_SPARSE, 2, 0, 1, 1, 1, 2, 1, 0];
        assert!(decompress(&bad, 3, &mut Vec::new()).is_err());
    }
}
