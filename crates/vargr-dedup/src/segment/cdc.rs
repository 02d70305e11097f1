//! `cdc`: content-defined chunking of byte streams (FastCDC).
//!
//! LBFS cut a stream where a rolling hash of the last bytes hit a pattern, so an insert
//! moves only the boundaries next to it; FastCDC does the same with a gear hash (one
//! shift, one add and one table load a byte), skips the bytes below the minimum size,
//! and *normalizes*: a stricter mask before the average size and a looser one after, so
//! sizes cluster near the average.
//!
//! Why not the `fastcdc` crate: its FastCDC-2020 refuses averages below 256 bytes and
//! minimums below 64, and the two-level fingerprint protocol wants 32-256-byte segments.
//! This one takes any average from 16 bytes up. Two more choices:
//! - the hash restarts at each chunk (warmed up on the bytes just below the minimum),
//!   so a boundary depends only on its own chunk and a stream cut piece by piece
//!   ([`Segmenter::boundaries`]) gives the same segments as a whole cut;
//! - the masks test the bits just below bit `k`, the minimum size clamped to the mask
//!   width and 64. Bit `j` of a gear hash depends only on the last `j + 1` bytes, so
//!   past the minimum every candidate is decided by the `k` bytes before it, wherever
//!   the chunk began, and boundaries fall back in step right after an edit (testing the
//!   top bits, a 64-byte window, a 64-byte average took about six segments to do so).

use super::{SegmentError, StreamCuts};

const NAME: &str = "cdc";

/// Normalization level (FastCDC's NC2): mask bits added before, removed after the average.
const NC: u32 = 2;

/// The gear table: 256 fixed pseudo-random words (splitmix64), the same on every peer so
/// that independent senders cut the same content the same way.
pub(crate) const GEAR: [u64; 256] = table(0x7661_7267_7200_0001);

pub(crate) const fn table(seed: u64) -> [u64; 256] {
    let mut t = [0u64; 256];
    let mut s = seed;
    let mut i = 0;
    while i < 256 {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        t[i] = z ^ (z >> 31);
        i += 1;
    }
    t
}

/// FastCDC with a minimum, average and maximum segment size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cdc {
    min: usize,
    avg: usize,
    max: usize,
    /// Bytes before a boundary that decide it.
    window: usize,
    /// Mask for sizes up to the average (harder to hit).
    mask_s: u64,
    /// Mask for sizes beyond it (easier).
    mask_l: u64,
}

impl Default for Cdc {
    /// LBFS's sizes: 2 KiB, 8 KiB, 64 KiB.
    fn default() -> Self {
        Cdc::new(2 << 10, 8 << 10, 64 << 10).expect("default sizes are valid")
    }
}

impl Cdc {
    /// Smallest average accepted (the loose mask keeps at least two bits).
    pub const MIN_AVG: usize = 16;
    /// Largest maximum accepted.
    pub const MAX_MAX: usize = 1 << 30;

    /// Needs `1 <= min <= avg <= max`, `avg >= 16` and `max <= 1 GiB`. The average is
    /// rounded to the nearest power of two.
    pub fn new(min: usize, avg: usize, max: usize) -> Result<Cdc, SegmentError> {
        if !(min >= 1 && min <= avg && avg <= max && avg >= Self::MIN_AVG && max <= Self::MAX_MAX) {
            return Err(SegmentError::Invalid {
                segmenter: NAME,
                reason: format!(
                    "sizes min {min}, avg {avg}, max {max}: need 1 <= min <= avg <= max, \
                     avg >= {}, max <= {}",
                    Self::MIN_AVG,
                    Self::MAX_MAX
                ),
            });
        }
        let floor = usize::BITS - 1 - avg.leading_zeros();
        let bits = if avg - (1 << floor) > (1 << floor) / 2 {
            floor + 1
        } else {
            floor
        };
        let window = (min as u64).clamp(u64::from(bits + NC), 64) as u32;
        let mask = |n: u32| (!0u64 >> (64 - n)) << (window - n);
        Ok(Cdc {
            min,
            avg,
            max,
            window: window as usize,
            mask_s: mask(bits + NC),
            mask_l: mask(bits - NC),
        })
    }

    /// (min, avg, max)
    pub fn sizes(&self) -> (usize, usize, usize) {
        (self.min, self.avg, self.max)
    }

    /// Length of the chunk at the start of `data`, if `data` decides it.
    fn first(&self, data: &[u8]) -> Option<usize> {
        if data.len() < self.min {
            return None;
        }
        let limit = data.len().min(self.max);
        let normal = self.avg.min(limit);
        let mut fp = 0u64;
        for &b in &data[self.min.saturating_sub(self.window)..self.min - 1] {
            fp = (fp << 1).wrapping_add(GEAR[b as usize]);
        }
        // Byte index i gives a chunk of i + 1 bytes.
        let mut i = self.min - 1;
        for &b in &data[i..normal] {
            fp = (fp << 1).wrapping_add(GEAR[b as usize]);
            i += 1;
            if fp & self.mask_s == 0 {
                return Some(i);
            }
        }
        for &b in &data[i..limit] {
            fp = (fp << 1).wrapping_add(GEAR[b as usize]);
            i += 1;
            if fp & self.mask_l == 0 {
                return Some(i);
            }
        }
        (limit == self.max).then_some(self.max)
    }
}

impl StreamCuts for Cdc {
    const NAME: &'static str = NAME;

    fn ends(&self, data: &[u8], last: bool) -> Vec<usize> {
        let mut ends = Vec::with_capacity(data.len() / self.avg + 2);
        let mut start = 0;
        while let Some(n) = self.first(&data[start..]) {
            start += n;
            ends.push(start);
        }
        if last && start < data.len() {
            ends.push(data.len());
        }
        ends
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_checked() {
        assert!(Cdc::new(0, 64, 256).is_err());
        assert!(Cdc::new(16, 8, 256).is_err());
        assert!(Cdc::new(4, 8, 256).is_err());
        assert!(Cdc::new(64, 64, 64).is_ok());
        assert_eq!(Cdc::new(16, 100, 1000).unwrap().mask_s.count_ones(), 7 + NC);
    }

    #[test]
    fn sizes_stay_in_bounds_and_average_near_target() {
        let data = crate::testdata::random(1 << 20, 7);
        for (min, avg, max) in [(16, 64, 256), (64, 256, 1024), (2048, 8192, 65536)] {
            let c = Cdc::new(min, avg, max).unwrap();
            let ends = c.ends(&data, true);
            let mut start = 0;
            for (k, &e) in ends.iter().enumerate() {
                let n = e - start;
                assert!(n <= max);
                assert!(n >= min || k == ends.len() - 1);
                start = e;
            }
            let mean = data.len() / ends.len();
            assert!(mean > avg / 2 && mean < avg * 2, "avg {avg}: mean {mean}");
        }
    }
}
