//! Bit-level writer and reader shared by the Rice and Huffman codecs.
//!
//! Bits are packed least-significant first, as in DEFLATE: the first bit written is bit 0
//! of the first byte. That order lets the reader keep a 64-bit accumulator, peek the next
//! bits with a mask and count a unary prefix with `trailing_zeros`.
//!
//! The reader never fails on its own: past the end of its input it supplies zero bits and
//! remembers that it did, and decoders check [`BitReader::overrun`] where it matters. The
//! decoders' loops are bounded by the announced output length, so reading zeros cannot
//! run away.

/// Appends bits to a byte vector.
pub(crate) struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    nbits: u32,
}

impl<'a> BitWriter<'a> {
    pub(crate) fn new(out: &'a mut Vec<u8>) -> Self {
        BitWriter {
            out,
            acc: 0,
            nbits: 0,
        }
    }

    /// Writes the low `count` bits of `bits`; `count` is at most 32 and the bits above
    /// it are zero.
    #[inline]
    pub(crate) fn write(&mut self, bits: u64, count: u32) {
        debug_assert!(count <= 32 && (count == 32 || bits >> count == 0));
        self.acc |= bits << self.nbits;
        self.nbits += count;
        if self.nbits >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.nbits -= 32;
        }
    }

    /// Writes the low `count` bits of `bits`, `count` up to 64.
    #[inline]
    pub(crate) fn write_long(&mut self, bits: u64, count: u32) {
        if count <= 32 {
            self.write(bits & low_mask(count), count);
        } else {
            self.write(bits & 0xffff_ffff, 32);
            self.write((bits >> 32) & low_mask(count - 32), count - 32);
        }
    }

    /// Flushes the last partial byte, padding it with zero bits.
    pub(crate) fn finish(self) {
        let bytes = self.nbits.div_ceil(8) as usize;
        self.out.extend_from_slice(&self.acc.to_le_bytes()[..bytes]);
    }
}

/// Reads bits written by [`BitWriter`], supplying zeros past the end.
pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    /// Next byte of `data` to load; runs past `data.len()` when zeros are supplied.
    pos: usize,
    acc: u64,
    nbits: u32,
}

impl<'a> BitReader<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        BitReader {
            data,
            pos: 0,
            acc: 0,
            nbits: 0,
        }
    }

    /// Tops the accumulator up to at least 56 valid bits.
    #[inline]
    fn refill(&mut self) {
        if let Some(word) = self.data.get(self.pos..self.pos + 8) {
            // Load eight bytes at once. The bytes that do not fit whole land above the
            // valid bits and are loaded again, unchanged, by the next refill.
            let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
            self.acc |= word << self.nbits;
            let whole = (63 - self.nbits) >> 3;
            self.pos += whole as usize;
            self.nbits += whole * 8;
        } else {
            while self.nbits <= 56 {
                let b = self.data.get(self.pos).copied().unwrap_or(0);
                self.acc |= u64::from(b) << self.nbits;
                self.pos += 1;
                self.nbits += 8;
            }
        }
    }

    /// Makes sure at least 56 bits can be peeked without another refill.
    #[inline]
    pub(crate) fn fill(&mut self) {
        if self.nbits < 56 {
            self.refill();
        }
    }

    /// The next `count` bits, which an earlier [`fill`](Self::fill) made available.
    #[inline]
    pub(crate) fn peek_filled(&self, count: u32) -> u64 {
        debug_assert!(count <= self.nbits);
        self.acc & low_mask(count)
    }

    /// The next `count` (at most 32) bits without consuming them.
    #[inline]
    pub(crate) fn peek(&mut self, count: u32) -> u64 {
        debug_assert!(count <= 32);
        if self.nbits < count {
            self.refill();
        }
        self.acc & low_mask(count)
    }

    /// Drops `count` bits already seen through [`peek`](Self::peek).
    #[inline]
    pub(crate) fn consume(&mut self, count: u32) {
        debug_assert!(count <= self.nbits);
        self.acc >>= count;
        self.nbits -= count;
    }

    /// Reads `count` (at most 32) bits.
    #[inline]
    pub(crate) fn read(&mut self, count: u32) -> u64 {
        let v = self.peek(count);
        self.consume(count);
        v
    }

    /// Reads `count` (up to 64) bits.
    #[inline]
    pub(crate) fn read_long(&mut self, count: u32) -> u64 {
        if count <= 32 {
            self.read(count)
        } else {
            let lo = self.read(32);
            lo | (self.read(count - 32) << 32)
        }
    }

    /// Bits consumed so far, counting zeros supplied past the end.
    pub(crate) fn bits_consumed(&self) -> usize {
        self.pos * 8 - self.nbits as usize
    }

    /// Whether more bits were consumed than the input holds.
    pub(crate) fn overrun(&self) -> bool {
        self.bits_consumed() > self.data.len() * 8
    }

    /// Whether the reader stopped inside the last byte of its input (a bit stream that
    /// was not padded out with extra bytes).
    pub(crate) fn at_end(&self) -> bool {
        self.bits_consumed().div_ceil(8) == self.data.len()
    }
}

/// The `count` low bits set (`count` up to 64).
#[inline]
pub(crate) fn low_mask(count: u32) -> u64 {
    if count >= 64 {
        u64::MAX
    } else {
        (1u64 << count) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip_across_word_boundaries() {
        let fields: Vec<(u64, u32)> = (0..500u64)
            .map(|i| {
                let count = (i * 7 % 65) as u32;
                (
                    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & low_mask(count),
                    count,
                )
            })
            .collect();
        let mut buf = Vec::new();
        let mut w = BitWriter::new(&mut buf);
        for &(v, c) in &fields {
            w.write_long(v, c);
        }
        w.finish();
        let total: u32 = fields.iter().map(|f| f.1).sum();
        assert_eq!(buf.len(), total.div_ceil(8) as usize);
        let mut r = BitReader::new(&buf);
        for &(v, c) in &fields {
            assert_eq!(r.read_long(c), v);
        }
        assert!(!r.overrun());
        assert!(r.at_end());
        r.read(8);
        assert!(r.overrun());
    }
}
