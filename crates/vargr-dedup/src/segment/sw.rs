//! `sw`: the seed's modified Spring & Wetherall segmentation of byte streams.
//!
//! Spring and Wetherall found repeats in packets by selecting Rabin fingerprints of a
//! sliding `w`-byte window (where the low `k` bits are zero, Manber's rule) and growing
//! each match left and right against a FIFO of past traffic. The seed adapted it to a
//! segment cache: every selected window anchors one fixed `s`-byte segment with the
//! window in its middle, `(s - w) / 2` bytes either side, and uncovered bytes travel
//! unfingerprinted. It used `s` = 256.
//!
//! Here segments must partition the message (the fingerprint protocol sends whole
//! segments), so, choices of ours:
//! - an anchored segment that would overlap the previous one, or run past the end of
//!   the data, is skipped (the seed let segments overlap in the cache but never sent a
//!   byte twice; skipping keeps each anchored segment a function of its anchor alone);
//! - the bytes between anchored segments become plain segments of at most `s` bytes,
//!   counted from the end of the previous anchored segment, so they are fingerprinted
//!   and cached too rather than sent raw;
//! - the fingerprint is Rabin-Karp (a polynomial over a random byte table, modulo
//!   2^64), which rolls in one multiply-add like Rabin's GF(2) polynomial and selects as
//!   evenly.
//!
//! What is lost is the seed's growing of matches past `s` bytes against cache contents:
//! that needs the cache inside the segmenter.

use super::cdc::table;
use super::{SegmentError, StreamCuts};

const NAME: &str = "sw";

const TABLE: [u64; 256] = table(0x7377_5261_6269_6e00);
/// Odd multiplier of the rolling polynomial.
const B: u64 = 0x0000_0100_0000_01b3;

/// Fixed segments around content-selected windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpringWetherall {
    seg: usize,
    win: usize,
    every: usize,
    /// B^win, to take the leaving byte out of the hash.
    out_pow: u64,
}

impl Default for SpringWetherall {
    /// 256-byte segments (the seed's), 32-byte windows, a window selected every 128 bytes.
    fn default() -> Self {
        SpringWetherall::new(256, 32, 128).expect("default parameters are valid")
    }
}

impl SpringWetherall {
    /// Segment size `seg`, window `win` (1 <= win <= seg), and `every`, the mean
    /// distance between selected windows: a power of two (the low log2(every) bits of
    /// the fingerprint must be zero).
    pub fn new(seg: usize, win: usize, every: usize) -> Result<SpringWetherall, SegmentError> {
        if !(win >= 1 && win <= seg && every.is_power_of_two()) {
            return Err(SegmentError::Invalid {
                segmenter: NAME,
                reason: format!(
                    "segment {seg}, window {win}, every {every}: need 1 <= window <= segment \
                     and every a power of two"
                ),
            });
        }
        let mut out_pow = 1u64;
        for _ in 0..win {
            out_pow = out_pow.wrapping_mul(B);
        }
        Ok(SpringWetherall {
            seg,
            win,
            every,
            out_pow,
        })
    }

    /// (segment, window, every)
    pub fn params(&self) -> (usize, usize, usize) {
        (self.seg, self.win, self.every)
    }

    /// Pushes ends of plain segments of at most `seg` bytes from `from` to `to`; with
    /// `whole`, only full ones.
    fn fill(&self, ends: &mut Vec<usize>, from: usize, to: usize, whole: bool) {
        let mut p = from;
        while p < to {
            let e = (p + self.seg).min(to);
            if whole && e - p < self.seg {
                break;
            }
            ends.push(e);
            p = e;
        }
    }
}

impl StreamCuts for SpringWetherall {
    const NAME: &'static str = NAME;

    fn ends(&self, data: &[u8], last: bool) -> Vec<usize> {
        let (n, w, s) = (data.len(), self.win, self.seg);
        let half = (s - w) / 2;
        let mask = self.every as u64 - 1;
        let mut ends = Vec::with_capacity(2 * n / s + 2);
        // End of the last anchored segment: nothing before it can change.
        let mut done = 0;
        if n >= w {
            let mut h = 0u64;
            for &b in &data[..w] {
                h = h.wrapping_mul(B).wrapping_add(TABLE[b as usize]);
            }
            // `i` is the end of the window.
            let mut i = w;
            loop {
                if h & mask == 0 && i >= w + half {
                    let start = i - w - half;
                    if start >= done && start + s <= n {
                        self.fill(&mut ends, done, start, false);
                        done = start + s;
                        ends.push(done);
                    }
                }
                if i == n {
                    break;
                }
                h = h
                    .wrapping_mul(B)
                    .wrapping_add(TABLE[data[i] as usize])
                    .wrapping_sub(TABLE[data[i - w] as usize].wrapping_mul(self.out_pow));
                i += 1;
            }
        }
        if last {
            self.fill(&mut ends, done, n, false);
        } else {
            // A later anchored segment would start after n - s; plain segments ending
            // before that are final.
            self.fill(&mut ends, done, n.saturating_sub(s).max(done), true);
        }
        ends
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchored_segments_are_whole_and_zeros_fall_back_to_static() {
        let sw = SpringWetherall::new(64, 16, 8).unwrap();
        let data = crate::testdata::random(10_000, 3);
        let ends = sw.ends(&data, true);
        let mut start = 0;
        for &e in &ends {
            assert!(e - start <= 64 && e > start);
            start = e;
        }
        assert_eq!(start, data.len());
        // Zeros select every window or none; either way segments come out 64 bytes.
        let zeros = vec![0u8; 1000];
        let ends = sw.ends(&zeros, true);
        assert!(ends
            .windows(2)
            .take(ends.len() - 2)
            .all(|p| p[1] - p[0] == 64));
    }
}
