//! Finding a cached segment similar to a new one, so the new one can go as a delta
//! ([`crate::delta`]) instead of whole.
//!
//! Resemblance detection as in stream-informed delta compression for WAN replication
//! (Shilane et al., FAST 2012), with cheaper features: a gear hash over the last 32
//! bytes picks content-defined *anchors* (one position in 32), and each anchor's hash
//! falls in one of six bins whose minimum is a feature (one-permutation min-hashing, Li,
//! Owen and Zhang 2012: two segments share a feature with a probability equal to the
//! overlap of their anchor sets, for one hash per anchor instead of one per feature,
//! which is faster: docs/benchmarks.md). Pairs of features make
//! *super-features*. Two segments that share any super-feature are probably alike: with
//! 90 % of anchors in common, one of three super-features matches with a probability
//! of 1 − (1 − 0.9²)³ ≈ 0.99, while unrelated segments almost never share one.
//!
//! [`SimilarityIndex`] maps super-features to the (optimistic) fingerprint of the
//! segment that had them, bounded in entries (oldest out first). It lives on the sender only, and
//! [`SimilarityIndex::to_bytes`] lets a tool keep it beside the segment cache, since the
//! bases it names must outlive a session to help the next one. A stale entry is harmless:
//! the sender finds the base gone from its cache and sends the segment whole.

use xxhash_rust::xxh3::xxh3_64;

use crate::aged::AgedMap;
use crate::fp::Fingerprint;
use crate::segment::cdc::table;

/// Min-hash features per segment.
const FEATURES: usize = 6;
/// Super-features (pairs of features) per segment.
pub const SUPER: usize = FEATURES / 2;
/// Segments shorter than this are not worth a delta.
pub const MIN_SEGMENT: usize = 128;
/// One position in 2^5 is an anchor.
const ANCHOR_BITS: u32 = 5;
/// Fewest anchors for a sketch to mean anything.
const MIN_ANCHORS: u32 = 4;

/// A gear table of its own, so anchors do not coincide with `cdc`'s cut points.
const GEAR: [u64; 256] = table(0x7369_6d69_6c61_7201);

/// The salt of the one min-hash permutation.
const SALT: u64 = 0x243f_6a88_85a3_08d3;
/// A super-feature with an empty bin in it: matches nothing (two short segments with
/// the same bin empty are not alike for that).
const NO_FEATURE: u64 = 0;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The super-features of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sketch(pub [u64; SUPER]);

/// The sketch of `segment`, or `None` when it is too short or too uniform to have one.
pub fn sketch(segment: &[u8]) -> Option<Sketch> {
    if segment.len() < MIN_SEGMENT {
        return None;
    }
    // The anchor test reads bits below 32 of the gear hash, which depend on the last 32
    // bytes only (carries run upwards). So the second half is hashed beside the first,
    // after a warm-up on the 32 bytes before it: the same anchors, from two dependency
    // chains the CPU runs side by side instead of one.
    let (first, second) = segment.split_at(segment.len() / 2);
    let mut h2 = segment[first.len().saturating_sub(32)..first.len()]
        .iter()
        .fold(0u64, |h, &b| gear_step(h, b));
    let mut h1 = 0u64;
    let mut acc = Minima::new();
    for (&a, &b) in first.iter().zip(second) {
        h1 = gear_step(h1, a);
        h2 = gear_step(h2, b);
        acc.offer(h1);
        acc.offer(h2);
    }
    for &b in &second[first.len()..] {
        h2 = gear_step(h2, b);
        acc.offer(h2);
    }
    acc.sketch()
}

fn gear_step(h: u64, b: u8) -> u64 {
    (h << 1).wrapping_add(GEAR[usize::from(b)])
}

/// The one-permutation min-hash features of a segment's anchors, gathered in any order.
struct Minima {
    mins: [u64; FEATURES],
    anchors: u32,
}

impl Minima {
    fn new() -> Minima {
        Minima {
            mins: [u64::MAX; FEATURES],
            anchors: 0,
        }
    }

    /// The gear hash at one position: an anchor if its low 32 bits say so.
    #[inline(always)]
    fn offer(&mut self, h: u64) {
        let w = h & 0xffff_ffff;
        if w >> (32 - ANCHOR_BITS) == 0 {
            self.anchors += 1;
            let v = mix(w ^ SALT);
            // The bin from the high half, so the minimum within it ranks the rest.
            let bin = ((v >> 32) * FEATURES as u64) >> 32;
            let m = &mut self.mins[bin as usize];
            *m = (*m).min(v);
        }
    }

    fn sketch(&self) -> Option<Sketch> {
        if self.anchors < MIN_ANCHORS {
            return None;
        }
        let mut sf = [0u64; SUPER];
        for (i, s) in sf.iter_mut().enumerate() {
            let (a, b) = (self.mins[2 * i], self.mins[2 * i + 1]);
            *s = if a == u64::MAX || b == u64::MAX {
                NO_FEATURE
            } else {
                // The index keeps super-feature i apart from super-feature j.
                mix(a ^ b.rotate_left(32) ^ i as u64).max(1)
            };
        }
        Some(Sketch(sf))
    }
}

/// Where to look for a base by content: super-feature → the newest segment that had it.
/// (The other place to look, the segment the stream reached in an earlier one, is
/// [`crate::stream::StreamModel`]'s.)
#[derive(Debug, Clone)]
pub struct SimilarityIndex {
    features: AgedMap,
}

/// Version 3: features by one-permutation hashing (version 2's mean nothing now).
const MAGIC: &[u8; 8] = b"VSIMIDX3";
/// Entry kinds in the saved form (1, successors, moved to the stream model; files
/// that still hold them are read without them).
const KIND_FEATURE: u8 = 0;
const KIND_OLD_SUCCESSOR: u8 = 1;

impl SimilarityIndex {
    /// An empty index of at most `capacity` super-features (a segment takes three).
    pub fn new(capacity: usize) -> SimilarityIndex {
        SimilarityIndex {
            features: AgedMap::new(capacity),
        }
    }

    /// Super-features held.
    pub fn len(&self) -> usize {
        self.features.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The segment sharing the most super-features with `sketch` (the first on a tie).
    pub fn most_similar(&self, sketch: &Sketch) -> Option<Fingerprint> {
        let found: Vec<Fingerprint> = sketch
            .0
            .iter()
            .filter(|&&k| k != NO_FEATURE)
            .filter_map(|&k| self.features.get(k))
            .collect();
        let mut best: Option<(Fingerprint, usize)> = None;
        for f in &found {
            let votes = found.iter().filter(|g| *g == f).count();
            if best.is_none_or(|(_, v)| votes > v) {
                best = Some((*f, votes));
            }
        }
        best.map(|(f, _)| f)
    }

    /// Records a segment that went whole or as a delta, named by `fp`.
    pub fn record(&mut self, fp: Fingerprint, sketch: &Sketch) {
        if self.features.capacity() == 0 {
            return;
        }
        for &k in sketch.0.iter().filter(|&&k| k != NO_FEATURE) {
            self.features.insert(k, fp);
        }
        self.features.evict();
    }

    /// The index as bytes, oldest entries first, with a checksum.
    pub fn to_bytes(&self) -> Vec<u8> {
        let live: Vec<(u64, Fingerprint)> = self.features.live().collect();
        let mut out = Vec::with_capacity(24 + live.len() * 17);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(live.len() as u64).to_le_bytes());
        for (k, f) in live {
            out.push(KIND_FEATURE);
            out.extend_from_slice(&k.to_le_bytes());
            out.extend_from_slice(&f.0.to_le_bytes());
        }
        let sum = xxh3_64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// An index read back from [`SimilarityIndex::to_bytes`]; `None` if the bytes are
    /// damaged (the index is only a hint: start empty).
    pub fn from_bytes(bytes: &[u8], capacity: usize) -> Option<SimilarityIndex> {
        let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
        if xxh3_64(body).to_le_bytes() != sum || body.get(..8)? != MAGIC {
            return None;
        }
        let n = u64::from_le_bytes(body.get(8..16)?.try_into().ok()?);
        let entries = body.get(16..)?;
        if entries.len() as u64 != n.checked_mul(17)? {
            return None;
        }
        let mut ix = SimilarityIndex::new(capacity);
        for e in entries.chunks_exact(17) {
            let k = u64::from_le_bytes(e[1..9].try_into().ok()?);
            let f = Fingerprint(u64::from_le_bytes(e[9..].try_into().ok()?));
            match e[0] {
                KIND_FEATURE => ix.features.insert(k, f),
                KIND_OLD_SUCCESSOR => {}
                _ => return None,
            }
        }
        ix.features.evict();
        Some(ix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text-like bytes: 18 symbols.
    fn text(n: usize, seed: u64) -> Vec<u8> {
        crate::testdata::random(n, seed)
            .into_iter()
            .map(|b| b"abcdefghij klmnop\n"[usize::from(b) % 18])
            .collect()
    }

    /// The sketch as one chain over the whole segment: what the two chains must equal.
    fn one_chain(segment: &[u8]) -> Option<Sketch> {
        if segment.len() < MIN_SEGMENT {
            return None;
        }
        let mut acc = Minima::new();
        let mut h = 0u64;
        for &b in segment {
            h = gear_step(h, b);
            acc.offer(h);
        }
        acc.sketch()
    }

    proptest::proptest! {
        #[test]
        fn two_chains_give_the_one_chain_sketch(
            seed in proptest::prelude::any::<u64>(),
            len in 0usize..5000,
            symbols in 2usize..256,
        ) {
            let data: Vec<u8> = crate::testdata::random(len, seed)
                .into_iter()
                .map(|b| (usize::from(b) % symbols) as u8)
                .collect();
            proptest::prop_assert_eq!(sketch(&data), one_chain(&data));
        }
    }

    #[test]
    fn an_edited_segment_finds_its_original_and_a_stranger_does_not() {
        let mut ix = SimilarityIndex::new(1 << 16);
        let originals: Vec<Vec<u8>> = (0..200).map(|i| text(4096, 2 * i + 1)).collect();
        for o in &originals {
            ix.record(Fingerprint::full(o), &sketch(o).unwrap());
        }
        let mut found = 0;
        for o in &originals {
            let mut e = o.clone();
            e[100..105].copy_from_slice(b"5.0.2");
            e[3000..3010].copy_from_slice(b"1700000000");
            if ix.most_similar(&sketch(&e).unwrap()) == Some(Fingerprint::full(o)) {
                found += 1;
            }
        }
        assert!(
            found >= 190,
            "{found} of 200 edited segments found their original"
        );
        let strangers = (1000..1200)
            .filter(|&i| {
                ix.most_similar(&sketch(&text(4096, 2 * i + 1)).unwrap())
                    .is_some()
            })
            .count();
        assert!(strangers <= 2, "{strangers} unrelated segments matched");
        assert_eq!(
            sketch(&[7u8; 4096]),
            None,
            "a uniform segment has no anchors"
        );
        assert_eq!(sketch(b"short"), None);
    }

    #[test]
    fn the_index_is_bounded_and_survives_a_round_trip_but_not_damage() {
        let mut ix = SimilarityIndex::new(30);
        for i in 0..50u64 {
            let t = text(1024, i + 7);
            ix.record(Fingerprint(i), &sketch(&t).unwrap());
        }
        assert!(ix.features.len() <= 30);
        let bytes = ix.to_bytes();
        let back = SimilarityIndex::from_bytes(&bytes, 30).unwrap();
        assert_eq!(back.len(), ix.len());
        let newest = text(1024, 49 + 7);
        assert_eq!(
            back.most_similar(&sketch(&newest).unwrap()),
            Some(Fingerprint(49))
        );
        let mut bad = bytes.clone();
        bad[20] ^= 1;
        assert!(SimilarityIndex::from_bytes(&bad, 30).is_none());
        assert!(SimilarityIndex::from_bytes(&bytes[..10], 30).is_none());
        assert!(
            SimilarityIndex::from_bytes(&bytes, 6)
                .unwrap()
                .features
                .len()
                <= 6
        );
    }
}
