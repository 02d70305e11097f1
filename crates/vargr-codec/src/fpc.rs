//! FPC, Burtscher and Ratanaworabhan's fast lossless compressor for floating-point
//! arrays, as the seed (CoMPI, section 2.4.5) describes it, plus a 32-bit variant.
//!
//! Each value is predicted twice, from hash tables of past values:
//!
//! - FCM (finite context method): the table, indexed by a hash of the recent values,
//!   holds the value that followed that context last time;
//! - DFCM (differential FCM): the table, indexed by a hash of the recent strides
//!   (differences), holds the stride that followed; the prediction is the previous
//!   value plus that stride.
//!
//! The value is XORed with the prediction that shares more leading bits with it. Close
//! predictions leave leading zero bytes, which are not sent: a 4-bit code says how many
//! there are and which predictor was used, and only the remaining low bytes follow. Both
//! sides start with zeroed tables and update them with the true value after every
//! prediction, so they predict alike. Values are handled as integers throughout: NaNs,
//! infinities, signed zeros and denormals pass bit for bit.
//!
//! ```text
//! payload:  table_bits (1 byte) | codes, 2 per byte, first in the low nibble
//!           | residual bytes, low bytes of each XOR, little-endian | trailing partial element
//! code:     bit 3 = predictor (0 FCM, 1 DFCM); bits 0-2 = leading-zero-byte count c
//!   64-bit: c = 0..3 → 0..3 zero bytes, c = 4..7 → 5..8 zero bytes; a count of 4 is
//!           sent as 3 (as in FPC: it is rare), the fourth zero byte goes as a residual
//!   32-bit: c = 0..4 → 0..4 zero bytes; 5..7 are invalid. With five possible counts a
//!           2-bit field would lose a case and a 3-bit one fits the same nibble, so both
//!           widths share the nibble format.
//! hashes:   64-bit  fcm = (fcm << 6) ^ (value >> 48);   dfcm = (dfcm << 2) ^ (stride >> 40)
//!           32-bit  fcm = (fcm << 5) ^ (value >> 20);   dfcm = (dfcm << 2) ^ (stride >> 16)
//!           each masked to the table size (the shifts keep sign, exponent and the top
//!           mantissa bits, the part of a float that repeats)
//! ```
//!
//! The table size is the sender's choice (`2^table_bits` entries), but never more than
//! the number of values (and at least 16 entries): a frame cannot make the receiver
//! allocate tables larger than twice its output (four times, for 32-bit values).

use std::ops::RangeInclusive;

use crate::{CodecError, CodecId, ElemKind};

/// Accepted values for the sender's `table_bits`.
pub const TABLE_BITS: RangeInclusive<u8> = 4..=20;

const C: CodecId = CodecId::Fpc;
const MIN_TABLE_BITS: u8 = 4;

/// The table size actually used for `n` values when `requested` bits are asked for.
fn effective_bits(requested: u8, n: usize) -> u8 {
    let cap = (usize::BITS - 1 - n.max(1).leading_zeros()) as u8;
    requested.min(cap.max(MIN_TABLE_BITS))
}

/// Both predictors' state for values `BYTES` wide (4 or 8).
struct Predictor<const BYTES: usize> {
    fcm: Vec<u64>,
    dfcm: Vec<u64>,
    mask: u64,
    fcm_hash: u64,
    dfcm_hash: u64,
    last: u64,
}

impl<const BYTES: usize> Predictor<BYTES> {
    const VALUE_MASK: u64 = if BYTES == 8 {
        u64::MAX
    } else {
        u32::MAX as u64
    };

    fn new(bits: u8) -> Self {
        let size = 1usize << bits;
        Predictor {
            fcm: vec![0; size],
            dfcm: vec![0; size],
            mask: size as u64 - 1,
            fcm_hash: 0,
            dfcm_hash: 0,
            last: 0,
        }
    }

    /// The (FCM, DFCM) predictions for the next value.
    #[inline]
    fn predict(&self) -> (u64, u64) {
        let f = self.fcm[self.fcm_hash as usize];
        let d = self.dfcm[self.dfcm_hash as usize].wrapping_add(self.last) & Self::VALUE_MASK;
        (f, d)
    }

    #[inline]
    fn update(&mut self, value: u64) {
        let stride = value.wrapping_sub(self.last) & Self::VALUE_MASK;
        self.fcm[self.fcm_hash as usize] = value;
        self.dfcm[self.dfcm_hash as usize] = stride;
        if BYTES == 8 {
            self.fcm_hash = ((self.fcm_hash << 6) ^ (value >> 48)) & self.mask;
            self.dfcm_hash = ((self.dfcm_hash << 2) ^ (stride >> 40)) & self.mask;
        } else {
            self.fcm_hash = ((self.fcm_hash << 5) ^ (value >> 20)) & self.mask;
            self.dfcm_hash = ((self.dfcm_hash << 2) ^ (stride >> 16)) & self.mask;
        }
        self.last = value;
    }
}

/// Leading zero bytes of `x` taken as `BYTES` wide → (3-bit count code, bytes not sent).
#[inline]
fn count_code<const BYTES: usize>(x: u64) -> (u8, usize) {
    let lzb = ((x.leading_zeros() - (64 - 8 * BYTES as u32)) / 8) as usize;
    if BYTES == 8 {
        match lzb {
            0..=3 => (lzb as u8, lzb),
            4 => (3, 3),
            _ => ((lzb - 1) as u8, lzb),
        }
    } else {
        (lzb as u8, lzb)
    }
}

/// Zero bytes not sent for a 3-bit count code, or `None` if the code is invalid.
#[inline]
fn zero_bytes<const BYTES: usize>(code: u8) -> Option<usize> {
    let c = usize::from(code);
    if BYTES == 8 {
        Some(if c < 4 { c } else { c + 1 })
    } else if c <= 4 {
        Some(c)
    } else {
        None
    }
}

/// Appends the FPC payload for `input` to `out`.
pub(crate) fn compress(
    input: &[u8],
    elem: ElemKind,
    table_bits: u8,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    if !TABLE_BITS.contains(&table_bits) {
        return Err(CodecError::InvalidParam(format!(
            "fpc table bits {table_bits}: expected 4..=20"
        )));
    }
    match elem.size() {
        8 => compress_w::<8>(input, table_bits, out),
        4 => compress_w::<4>(input, table_bits, out),
        _ => return Err(CodecError::Unsupported { codec: C, elem }),
    }
    Ok(())
}

fn compress_w<const BYTES: usize>(input: &[u8], table_bits: u8, out: &mut Vec<u8>) {
    let n = input.len() / BYTES;
    let bits = effective_bits(table_bits, n);
    let ncodes = n.div_ceil(2);
    // Worst case, plus room for the last full-word store below.
    let start = out.len();
    out.resize(start + 1 + ncodes + n * BYTES + 8, 0);
    let buf = &mut out[start..];
    buf[0] = bits;
    let (codes, residuals) = buf[1..].split_at_mut(ncodes);
    let mut pos = 0;
    let mut p = Predictor::<BYTES>::new(bits);
    for (i, e) in input.chunks_exact(BYTES).enumerate() {
        let mut b = [0u8; 8];
        b[..BYTES].copy_from_slice(e);
        let value = u64::from_le_bytes(b);
        let (pf, pd) = p.predict();
        let (xf, xd) = (value ^ pf, value ^ pd);
        // Ties go to FCM; the choice only has to be the same on both sides.
        let (xor, sel) = if xd.leading_zeros() > xf.leading_zeros() {
            (xd, 8)
        } else {
            (xf, 0)
        };
        let (code, zeros) = count_code::<BYTES>(xor);
        codes[i / 2] |= (sel | code) << (4 * (i % 2));
        // Store a whole word and keep only the bytes that count: no variable-length copy.
        residuals[pos..pos + 8].copy_from_slice(&xor.to_le_bytes());
        pos += BYTES - zeros;
        p.update(value);
    }
    let tail = &input[n * BYTES..];
    residuals[pos..pos + tail.len()].copy_from_slice(tail);
    out.truncate(start + 1 + ncodes + pos + tail.len());
}

/// Appends exactly `len` decoded bytes to `out`.
pub(crate) fn decompress(
    payload: &[u8],
    elem: ElemKind,
    len: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    match elem.size() {
        8 => decompress_w::<8>(payload, len, out),
        4 => decompress_w::<4>(payload, len, out),
        _ => Err(CodecError::Unsupported { codec: C, elem }),
    }
}

fn decompress_w<const BYTES: usize>(
    payload: &[u8],
    len: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let n = len / BYTES;
    let tail = len % BYTES;
    let Some((&bits, rest)) = payload.split_first() else {
        return Err(CodecError::corrupt(C, "fpc table size byte missing"));
    };
    if bits > effective_bits(*TABLE_BITS.end(), n) {
        return Err(CodecError::corrupt(
            C,
            "fpc table size larger than the values justify",
        ));
    }
    let Some((codes, rest)) = rest.split_at_checked(n.div_ceil(2)) else {
        return Err(CodecError::corrupt(C, "fpc code nibbles truncated"));
    };
    let Some(res_len) = rest.len().checked_sub(tail) else {
        return Err(CodecError::corrupt(
            C,
            "fpc payload shorter than its trailing bytes",
        ));
    };
    let (mut residuals, tail_bytes) = rest.split_at(res_len);
    if n % 2 == 1 && codes[n / 2] >> 4 != 0 {
        return Err(CodecError::corrupt(C, "fpc unused code nibble is not zero"));
    }
    out.reserve(len);
    let mut p = Predictor::<BYTES>::new(bits);
    for i in 0..n {
        let nibble = (codes[i / 2] >> (4 * (i % 2))) & 0x0f;
        let Some(zeros) = zero_bytes::<BYTES>(nibble & 7) else {
            return Err(CodecError::corrupt(
                C,
                "fpc leading-zero count out of range",
            ));
        };
        let take = BYTES - zeros;
        let xor = if let Some(word) = residuals.first_chunk::<8>() {
            // Fast path: load a whole word and mask off the bytes of the next values.
            u64::from_le_bytes(*word) & crate::bits::low_mask(8 * take as u32)
        } else {
            let Some(r) = residuals.get(..take) else {
                return Err(CodecError::corrupt(C, "fpc residual bytes truncated"));
            };
            let mut b = [0u8; 8];
            b[..take].copy_from_slice(r);
            u64::from_le_bytes(b)
        };
        residuals = &residuals[take..];
        let (pf, pd) = p.predict();
        let value = xor ^ if nibble & 8 != 0 { pd } else { pf };
        out.extend_from_slice(&value.to_le_bytes()[..BYTES]);
        p.update(value);
    }
    if !residuals.is_empty() {
        return Err(CodecError::corrupt(C, "fpc residual bytes left over"));
    }
    out.extend_from_slice(tail_bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trip(input: &[u8], elem: ElemKind) -> usize {
        let mut c = Vec::new();
        compress(input, elem, 16, &mut c).unwrap();
        let mut d = Vec::new();
        decompress(&c, elem, input.len(), &mut d).unwrap();
        assert_eq!(d, input);
        c.len()
    }

    #[test]
    fn count_codes_cover_every_width() {
        for lzb in 0..=8usize {
            let x = if lzb == 8 {
                0
            } else {
                0x80u64 << (8 * (7 - lzb))
            };
            let (code, zeros) = count_code::<8>(x);
            assert_eq!(zero_bytes::<8>(code), Some(zeros));
            assert_eq!(zeros, if lzb == 4 { 3 } else { lzb });
        }
        for lzb in 0..=4usize {
            let x = if lzb == 4 {
                0
            } else {
                0x80u64 << (8 * (3 - lzb))
            };
            assert_eq!(count_code::<4>(x), (lzb as u8, lzb));
        }
        assert_eq!(zero_bytes::<4>(5), None);
    }

    #[test]
    fn linear_sequences_predict_well() {
        let ramp: Vec<u8> = (0..4096)
            .flat_map(|i| (i as f64 * 0.5).to_le_bytes())
            .collect();
        assert!(trip(&ramp, ElemKind::F64) < ramp.len() / 3);
        let ramp32: Vec<u8> = (0..4096).flat_map(|i| (i as f32).to_le_bytes()).collect();
        assert!(trip(&ramp32, ElemKind::F32) < ramp32.len() * 3 / 4);
    }

    #[test]
    fn special_values_pass_bit_for_bit() {
        let vals = [
            f64::NAN,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            5e-324,
            f64::MIN_POSITIVE,
            1.0,
        ];
        let bytes: Vec<u8> = vals
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .chain([1, 2, 3])
            .collect();
        trip(&bytes, ElemKind::F64);
        let vals32 = [f32::NAN, -0.0, f32::INFINITY, 1e-45, 3.5];
        let bytes32: Vec<u8> = vals32.iter().flat_map(|v| v.to_le_bytes()).collect();
        trip(&bytes32, ElemKind::F32);
    }

    #[test]
    fn small_inputs_get_small_tables() {
        assert_eq!(effective_bits(16, 0), 4);
        assert_eq!(effective_bits(16, 1000), 9);
        assert_eq!(effective_bits(16, 1 << 20), 16);
        let mut c = Vec::new();
        compress(&[0; 80], ElemKind::F64, 20, &mut c).unwrap();
        assert_eq!(c[0], 4);
    }

    #[test]
    fn two_byte_elements_are_unsupported() {
        assert!(matches!(
            compress(&[0; 8], ElemKind::U16, 16, &mut Vec::new()),
            Err(CodecError::Unsupported { .. })
        ));
    }
}
