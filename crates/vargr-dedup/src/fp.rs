//! Fingerprints of segments and groups.
//!
//! The optimistic fingerprint is the low `bits` bits of XXH3-64 of the segment: the seed
//! used a 40-bit FNV hash; XXH3 is as well distributed and runs at memory speed. The
//! conservative hash of a group is BLAKE3 over its segments in order and then their
//! lengths, truncated to [`CONSERVATIVE_LEN`] bytes.

use xxhash_rust::xxh3::xxh3_64;

/// Bytes of the conservative group hash on the wire (BLAKE3 truncated to 128 bits; the
/// seed sent 160-bit SHA-1).
pub const CONSERVATIVE_LEN: usize = 16;

/// Width of optimistic fingerprints, 8..=64 bits (default 40, the seed's choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FpBits(u8);

impl FpBits {
    pub const DEFAULT: FpBits = FpBits(40);

    /// `None` outside 8..=64.
    pub fn new(bits: u8) -> Option<FpBits> {
        (8..=64).contains(&bits).then_some(FpBits(bits))
    }

    pub fn get(self) -> u8 {
        self.0
    }

    /// Bytes a fingerprint of this width takes on the wire.
    pub fn wire_len(self) -> usize {
        usize::from(self.0).div_ceil(8)
    }

    /// The mask that keeps this many low bits.
    pub fn mask(self) -> u64 {
        if self.0 == 64 {
            u64::MAX
        } else {
            (1u64 << self.0) - 1
        }
    }
}

impl Default for FpBits {
    fn default() -> Self {
        FpBits::DEFAULT
    }
}

/// An optimistic fingerprint: a segment's XXH3-64 cut to some [`FpBits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub u64);

impl Fingerprint {
    /// The full 64-bit fingerprint of `segment` (caches store this one).
    pub fn full(segment: &[u8]) -> Fingerprint {
        Fingerprint(xxh3_64(segment))
    }

    /// This fingerprint cut to `bits`.
    pub fn truncate(self, bits: FpBits) -> Fingerprint {
        Fingerprint(self.0 & bits.mask())
    }
}

/// The conservative hash of a group: BLAKE3 over its segments back to back, then each
/// one's length and their count (u64, little-endian), which fixes the boundaries. The
/// lengths go last so that a sender holding the group in one buffer hashes it in one
/// call ([`GroupHasher::add_run`]), where BLAKE3 hashes many chunks at once.
#[derive(Default)]
pub struct GroupHasher {
    hasher: blake3::Hasher,
    lens: Vec<u8>,
    count: u64,
}

impl GroupHasher {
    pub fn new() -> GroupHasher {
        GroupHasher::default()
    }

    pub fn add(&mut self, segment: &[u8]) {
        self.hasher.update(segment);
        self.push_len(segment.len());
    }

    /// Adds segments held back to back in `data`, ending at offsets `ends`.
    ///
    /// # Panics
    ///
    /// If `ends` does not rise to `data.len()`.
    pub fn add_run(&mut self, data: &[u8], ends: &[u32]) {
        assert_eq!(ends.last().map_or(0, |&e| e as usize), data.len());
        self.hasher.update(data);
        let mut start = 0;
        for &e in ends {
            self.push_len(e as usize - start);
            start = e as usize;
        }
    }

    fn push_len(&mut self, len: usize) {
        self.lens.extend_from_slice(&(len as u64).to_le_bytes());
        self.count += 1;
    }

    pub fn finish(&self) -> [u8; CONSERVATIVE_LEN] {
        let mut h = self.hasher.clone();
        h.update(&self.lens);
        h.update(&self.count.to_le_bytes());
        let mut out = [0u8; CONSERVATIVE_LEN];
        out.copy_from_slice(&h.finalize().as_bytes()[..CONSERVATIVE_LEN]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_and_masks() {
        assert_eq!(FpBits::new(7), None);
        assert_eq!(FpBits::new(65), None);
        assert_eq!(FpBits::DEFAULT.wire_len(), 5);
        assert_eq!(FpBits::new(12).unwrap().wire_len(), 2);
        assert_eq!(FpBits::new(64).unwrap().mask(), u64::MAX);
        let f = Fingerprint::full(b"segment");
        assert_eq!(f.truncate(FpBits::new(12).unwrap()).0 >> 12, 0);
    }

    #[test]
    fn group_hash_sees_boundaries() {
        let (mut a, mut b) = (GroupHasher::new(), GroupHasher::new());
        a.add(b"ab");
        a.add(b"c");
        b.add(b"a");
        b.add(b"bc");
        assert_ne!(a.finish(), b.finish());
        let mut c = GroupHasher::new();
        c.add_run(b"abc", &[2, 3]);
        assert_eq!(a.finish(), c.finish());
        assert_ne!(GroupHasher::new().finish(), {
            let mut e = GroupHasher::new();
            e.add(b"");
            e.finish()
        });
    }
}
