//! Finding a cached segment similar to a new one, so the new one can go as a delta
//! ([`crate::delta`]) instead of whole.
//!
//! Resemblance detection as in stream-informed delta compression for WAN replication
//! (Shilane et al., FAST 2012), with cheaper features: a gear hash over the last 32
//! bytes picks content-defined *anchors* (one position in 32), each feature is the
//! minimum of one hash permutation over the anchors (a min-hash, so two segments share a
//! feature with a probability equal to the overlap of their anchor sets), and pairs of
//! features make *super-features*. Two segments that share any super-feature are
//! probably alike: with 90 % of anchors in common, one of three super-features matches
//! with a probability of 1 − (1 − 0.9²)³ ≈ 0.99, while unrelated segments almost never
//! share one.
//!
//! [`SimilarityIndex`] maps super-features to the full fingerprint of the segment that
//! had them, bounded in entries (oldest out first). It lives on the sender only, and
//! [`SimilarityIndex::to_bytes`] lets a tool keep it beside the segment cache, since the
//! bases it names must outlive a session to help the next one. A stale entry is harmless:
//! the sender finds the base gone from its cache and sends the segment whole.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use xxhash_rust::xxh3::xxh3_64;

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

/// Per-feature salts of the min-hash permutations.
const SALTS: [u64; FEATURES] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
    0x4528_21e6_38d0_1377,
    0xbe54_66cf_34e9_0c6c,
];

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
    let mut h = 0u64;
    let mut mins = [u64::MAX; FEATURES];
    let mut anchors = 0u32;
    for &b in segment {
        h = (h << 1).wrapping_add(GEAR[usize::from(b)]);
        // Bits below 32 depend on the last 32 bytes only.
        let w = h & 0xffff_ffff;
        if w >> (32 - ANCHOR_BITS) == 0 {
            anchors += 1;
            for (m, salt) in mins.iter_mut().zip(SALTS) {
                *m = (*m).min(mix(w ^ salt));
            }
        }
    }
    if anchors < MIN_ANCHORS {
        return None;
    }
    let mut sf = [0u64; SUPER];
    for (i, s) in sf.iter_mut().enumerate() {
        // The index keeps super-feature i apart from super-feature j.
        *s = mix(mins[2 * i] ^ mins[2 * i + 1].rotate_left(32) ^ i as u64);
    }
    Some(Sketch(sf))
}

/// Segments to take a delta against, concatenated in this order, and the one the new
/// segment stands for in the stream (whose successor the next segment will try).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseChoice {
    pub segments: Vec<Fingerprint>,
    pub anchor: Fingerprint,
}

/// Where to look for a base: the segment after the last one matched in the stream
/// (versioned data keeps its order), and segments sharing super-features.
#[derive(Debug, Clone)]
pub struct SimilarityIndex {
    /// Super-feature → the newest segment that had it.
    features: FxHashMap<u64, (Fingerprint, u32)>,
    /// Segment → the segment that followed it when it was last sent.
    next: FxHashMap<u64, (Fingerprint, u32)>,
    /// Keys oldest first, with their map and the generation each was inserted at.
    order: VecDeque<(Map, u64, u32)>,
    generation: u32,
    capacity: usize,
    /// The previous segment of this stream.
    prev: Option<Fingerprint>,
    /// Where the previous segment came from: itself if it was a repeat, its base if it
    /// went as a delta; `None` if it was new.
    matched: Option<Fingerprint>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Map {
    Features,
    Next,
}

const MAGIC: &[u8; 8] = b"VSIMIDX2";

impl SimilarityIndex {
    /// An empty index of at most `capacity` entries of each kind (a segment takes three
    /// super-features and one successor).
    pub fn new(capacity: usize) -> SimilarityIndex {
        SimilarityIndex {
            features: FxHashMap::default(),
            next: FxHashMap::default(),
            order: VecDeque::new(),
            generation: 0,
            capacity,
            prev: None,
            matched: None,
        }
    }

    /// Entries held (super-features and successors).
    pub fn len(&self) -> usize {
        self.features.len() + self.next.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Candidate bases for a new segment with `sketch`, best first: the segments around
    /// the successor of what the previous segment matched (the new one may start a little
    /// before or end a little after it), then the one segment sharing the most
    /// super-features with it.
    pub fn bases(&self, sketch: Option<&Sketch>) -> Vec<BaseChoice> {
        let mut out = Vec::with_capacity(2);
        if let Some(m) = self.matched {
            let segments = self.run_from(m, 3);
            let anchor = segments.get(1).copied().unwrap_or(m);
            out.push(BaseChoice { segments, anchor });
        }
        if let Some(f) = sketch.and_then(|k| self.most_similar(k)) {
            if !out.iter().any(|c| c.segments.contains(&f)) {
                out.push(BaseChoice {
                    segments: self.run_from(f, 2),
                    anchor: f,
                });
            }
        }
        out
    }

    /// `first` and up to `n - 1` of its successors.
    fn run_from(&self, first: Fingerprint, n: usize) -> Vec<Fingerprint> {
        let mut run = vec![first];
        while run.len() < n {
            match self.successor(run[run.len() - 1]) {
                Some(s) if !run.contains(&s) => run.push(s),
                _ => break,
            }
        }
        run
    }

    fn successor(&self, f: Fingerprint) -> Option<Fingerprint> {
        self.next.get(&f.0).map(|&(n, _)| n)
    }

    /// The segment sharing the most super-features with `sketch` (the first on a tie).
    fn most_similar(&self, sketch: &Sketch) -> Option<Fingerprint> {
        let found: Vec<Fingerprint> = sketch
            .0
            .iter()
            .filter_map(|k| self.features.get(k).map(|&(f, _)| f))
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

    /// Records the stream's next segment, `full`: its `sketch` if it has one (segments
    /// that went whole or as deltas), and what it `matched` (itself for a repeat, its
    /// base for a delta, `None` for a new segment).
    pub fn record(
        &mut self,
        full: Fingerprint,
        sketch: Option<&Sketch>,
        matched: Option<Fingerprint>,
    ) {
        if self.capacity == 0 {
            return;
        }
        if let Some(p) = self.prev {
            self.push(Map::Next, p.0, full);
        }
        if let Some(sketch) = sketch {
            for &k in &sketch.0 {
                self.push(Map::Features, k, full);
            }
        }
        self.prev = Some(full);
        self.matched = matched;
        self.evict();
    }

    /// Forgets the stream position (a new file, a new connection): the next segment
    /// follows nothing.
    pub fn restart(&mut self) {
        self.prev = None;
        self.matched = None;
    }

    fn map(&mut self, m: Map) -> &mut FxHashMap<u64, (Fingerprint, u32)> {
        match m {
            Map::Features => &mut self.features,
            Map::Next => &mut self.next,
        }
    }

    fn push(&mut self, m: Map, key: u64, full: Fingerprint) {
        self.generation = self.generation.wrapping_add(1);
        let g = self.generation;
        self.map(m).insert(key, (full, g));
        self.order.push_back((m, key, g));
    }

    /// Drops the oldest entries beyond the capacity (and stale order entries).
    fn evict(&mut self) {
        let cap = self.capacity;
        while self.features.len() > cap
            || self.next.len() > cap
            || self.order.len() > 4 * cap.max(1)
        {
            let Some((m, k, g)) = self.order.pop_front() else {
                break;
            };
            let map = self.map(m);
            if map.get(&k).is_some_and(|&(_, have)| have == g) {
                map.remove(&k);
            }
        }
    }

    /// The index as bytes, oldest entries first, with a checksum.
    pub fn to_bytes(&self) -> Vec<u8> {
        let live: Vec<(u8, u64, Fingerprint)> = self
            .order
            .iter()
            .filter_map(|&(m, k, g)| {
                let map = match m {
                    Map::Features => &self.features,
                    Map::Next => &self.next,
                };
                match map.get(&k) {
                    Some(&(f, have)) if have == g => Some((m as u8, k, f)),
                    _ => None,
                }
            })
            .collect();
        let mut out = Vec::with_capacity(24 + live.len() * 17);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(live.len() as u64).to_le_bytes());
        for (m, k, f) in live {
            out.push(m);
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
            let m = match e[0] {
                0 => Map::Features,
                1 => Map::Next,
                _ => return None,
            };
            let k = u64::from_le_bytes(e[1..9].try_into().ok()?);
            let f = Fingerprint(u64::from_le_bytes(e[9..].try_into().ok()?));
            ix.push(m, k, f);
        }
        ix.evict();
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

    #[test]
    fn an_edited_segment_finds_its_original_and_a_stranger_does_not() {
        let mut ix = SimilarityIndex::new(1 << 16);
        let originals: Vec<Vec<u8>> = (0..200).map(|i| text(4096, 2 * i + 1)).collect();
        for o in &originals {
            ix.record(Fingerprint::full(o), sketch(o).as_ref(), None);
        }
        ix.restart();
        let mut found = 0;
        for o in &originals {
            let mut e = o.clone();
            e[100..105].copy_from_slice(b"5.0.2");
            e[3000..3010].copy_from_slice(b"1700000000");
            let bases = ix.bases(sketch(&e).as_ref());
            if bases.first().map(|c| c.segments[0]) == Some(Fingerprint::full(o)) {
                found += 1;
            }
        }
        assert!(
            found >= 190,
            "{found} of 200 edited segments found their original"
        );
        let strangers = (1000..1200)
            .filter(|&i| !ix.bases(sketch(&text(4096, 2 * i + 1)).as_ref()).is_empty())
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
    fn the_successor_of_the_last_match_comes_first() {
        let mut ix = SimilarityIndex::new(1 << 10);
        let old: Vec<Vec<u8>> = (0..3).map(|i| text(1024, 2 * i + 1)).collect();
        for o in &old {
            ix.record(Fingerprint::full(o), sketch(o).as_ref(), None);
        }
        ix.restart();
        // The new stream repeats old[0], then has something quite unlike old[1].
        ix.record(
            Fingerprint::full(&old[0]),
            None,
            Some(Fingerprint::full(&old[0])),
        );
        let unlike = text(1024, 99);
        let full: Vec<Fingerprint> = old.iter().map(|o| Fingerprint::full(o)).collect();
        assert_eq!(
            ix.bases(sketch(&unlike).as_ref()),
            vec![BaseChoice {
                segments: full.clone(),
                anchor: full[1]
            }]
        );
        // A new segment breaks the chain.
        ix.record(Fingerprint::full(&unlike), sketch(&unlike).as_ref(), None);
        assert!(ix.bases(None).is_empty());
    }

    #[test]
    fn the_index_is_bounded_and_survives_a_round_trip_but_not_damage() {
        let mut ix = SimilarityIndex::new(30);
        for i in 0..50u64 {
            let t = text(1024, i + 7);
            ix.record(Fingerprint(i), sketch(&t).as_ref(), None);
        }
        assert!(ix.features.len() <= 30 && ix.next.len() <= 30);
        let bytes = ix.to_bytes();
        let back = SimilarityIndex::from_bytes(&bytes, 30).unwrap();
        assert_eq!(back.len(), ix.len());
        let newest = text(1024, 49 + 7);
        let found = back.bases(sketch(&newest).as_ref());
        assert_eq!(found[0].anchor, Fingerprint(49));
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
