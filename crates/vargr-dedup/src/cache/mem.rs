//! [`MemCache`]: the segment cache in memory only, for short-lived links and tests.
//!
//! Segments are appended to blocks of up to 1 MiB (`[len u32 | payload]` records); the
//! oldest block goes when the byte budget is exceeded. A hit on a segment in the older
//! half of the blocks copies it into the current block, so segments in use survive
//! while the rest ages out: FIFO with re-insertion, which behaves like LRU by segment
//! without a linked list (16 bytes of list per segment, a cache miss per hit to relink).
//! Hits return slices of the block (no copy) except from the block still being filled.
//!
//! Membership is exact (the index is in memory anyway), so there is no Bloom filter and
//! no checksum: memory is trusted, and the protocol's group hash catches the rest.

use bytes::Bytes;
use std::collections::VecDeque;

use super::index::{sweep_due, Index, Loc};
use super::stats::{AgeHistogram, CacheStats, Counters};
use super::{CacheError, SegmentCache};
use crate::fp::{Fingerprint, FpBits};

const LEN: usize = 4;

#[derive(Debug)]
struct Block {
    /// Bytes the cache had written when this block began (for hit ages).
    start: u64,
    data: Bytes,
    live: u64,
}

/// The in-memory segment cache. See the module docs.
#[derive(Debug)]
pub struct MemCache {
    bits: FpBits,
    budget: u64,
    block_bytes: usize,
    /// Closed blocks, oldest first; `blocks[i]` is block number `first + i`.
    blocks: VecDeque<Block>,
    first: u32,
    cur: Vec<u8>,
    cur_start: u64,
    cur_live: u64,
    /// Bytes held in `blocks` and `cur`.
    held: u64,
    written: u64,
    index: Index,
    stale: u64,
    counters: Counters,
    ages: AgeHistogram,
}

impl MemCache {
    /// A cache holding at most about `budget_bytes` of segments (plus its index, about
    /// 26 bytes per segment).
    pub fn new(bits: FpBits, budget_bytes: u64) -> MemCache {
        let block_bytes = (budget_bytes / 16).clamp(4 << 10, 1 << 20) as usize;
        MemCache {
            bits,
            budget: budget_bytes,
            block_bytes,
            blocks: VecDeque::new(),
            first: 0,
            cur: Vec::with_capacity(block_bytes),
            cur_start: 0,
            cur_live: 0,
            held: 0,
            written: 0,
            index: Index::new(bits),
            stale: 0,
            counters: Counters::default(),
            ages: AgeHistogram::default(),
        }
    }

    /// Largest segment accepted: a quarter of the budget.
    pub fn max_segment(&self) -> usize {
        (self.budget / 4).min(u64::from(u32::MAX)) as usize
    }

    pub fn stats(&self) -> CacheStats {
        let index = self.index.bytes();
        let mut s = CacheStats {
            kind: "memory",
            fp_bits: self.bits.get(),
            segments: self.index.len() as u64 - self.stale,
            bytes: self.held,
            containers: self.blocks.len() as u64 + 1,
            memory_bytes: index + self.held,
            index_bytes: index,
            hit_ages: self.ages.buckets(),
            ..CacheStats::default()
        };
        self.counters.fill(&mut s);
        s
    }

    fn cur_unit(&self) -> u32 {
        self.first.wrapping_add(self.blocks.len() as u32)
    }

    fn append(&mut self, full: u64, segment: &[u8]) {
        if !self.cur.is_empty() && self.cur.len() + LEN + segment.len() > self.block_bytes {
            let data = Bytes::from(std::mem::replace(
                &mut self.cur,
                Vec::with_capacity(self.block_bytes),
            ));
            self.blocks.push_back(Block {
                start: self.cur_start,
                data,
                live: self.cur_live,
            });
            self.cur_start = self.written;
            self.cur_live = 0;
        }
        let loc = Loc::new(self.cur_unit(), self.cur.len() as u32);
        self.cur
            .extend_from_slice(&(segment.len() as u32).to_le_bytes());
        self.cur.extend_from_slice(segment);
        let n = (LEN + segment.len()) as u64;
        self.written += n;
        self.held += n;
        self.cur_live += 1;
        if let Some(old) = self.index.insert(full, loc) {
            self.forget(old.loc);
        }
        while self.held > self.budget {
            let Some(b) = self.blocks.pop_front() else {
                break;
            };
            self.first = self.first.wrapping_add(1);
            self.held -= b.data.len() as u64;
            self.stale += b.live;
            self.counters.disk_evictions += 1;
        }
        if sweep_due(self.stale, self.index.len()) {
            let (first, n) = (self.first, self.blocks.len() as u32 + 1);
            self.index.retain(|s| s.loc.unit().wrapping_sub(first) < n);
            self.stale = 0;
        }
    }

    /// Accounts for the index entry `old` having been overwritten or removed.
    fn forget(&mut self, old: Loc) {
        if old.unit() == self.cur_unit() {
            self.cur_live -= 1;
        } else if let Some(i) = self.block_index(old.unit()) {
            self.blocks[i].live -= 1;
        } else {
            self.stale -= 1;
        }
    }

    fn alive(&self, unit: u32) -> bool {
        unit == self.cur_unit() || self.block_index(unit).is_some()
    }

    /// Whether block `i` is in the older half, the half evicted first.
    fn is_older(&self, i: usize) -> bool {
        i < self.blocks.len() / 2
    }

    fn block_index(&self, unit: u32) -> Option<usize> {
        let i = unit.wrapping_sub(self.first) as usize;
        (i < self.blocks.len()).then_some(i)
    }
}

impl SegmentCache for MemCache {
    fn bits(&self) -> FpBits {
        self.bits
    }

    fn may_contain(&self, fp: Fingerprint) -> bool {
        self.index
            .get(fp.0 & self.bits.mask())
            .is_some_and(|s| self.alive(s.loc.unit()))
    }

    fn get(&mut self, fp: Fingerprint) -> Result<Option<Bytes>, CacheError> {
        let key = fp.0 & self.bits.mask();
        let Some(slot) = self.index.get(key) else {
            self.counters.misses += 1;
            return Ok(None);
        };
        let off = slot.loc.offset() as usize;
        let (seg, start, older) = if slot.loc.unit() == self.cur_unit() {
            let len = read_len(&self.cur[off..]);
            let seg = Bytes::copy_from_slice(&self.cur[off + LEN..off + LEN + len]);
            (seg, self.cur_start, false)
        } else if let Some(i) = self.block_index(slot.loc.unit()) {
            let b = &self.blocks[i];
            let len = read_len(&b.data[off..]);
            let seg = b.data.slice(off + LEN..off + LEN + len);
            (seg, b.start, self.is_older(i))
        } else {
            self.index.remove(key);
            self.stale -= 1;
            self.counters.misses += 1;
            return Ok(None);
        };
        self.counters.hits += 1;
        self.ages.record(self.written - (start + off as u64));
        if older {
            // Re-insert so a segment in use outlives its block.
            self.append(slot.full, &seg);
        }
        Ok(Some(seg))
    }

    fn insert(&mut self, full: Fingerprint, segment: &[u8]) -> Result<(), CacheError> {
        if segment.len() > self.max_segment() {
            return Err(CacheError::SegmentTooLarge {
                cache: "memory cache".into(),
                len: segment.len(),
                max: self.max_segment(),
            });
        }
        self.counters.inserts += 1;
        if let Some(s) = self.index.get(full.truncate(self.bits).0) {
            let unit = s.loc.unit();
            if s.full == full.0 && self.alive(unit) {
                // Already held: only move it forward if its block is going soon.
                self.counters.duplicates += 1;
                if !self.block_index(unit).is_some_and(|i| self.is_older(i)) {
                    return Ok(());
                }
            } else if self.alive(unit) {
                self.counters.replaced += 1;
            }
        }
        self.append(full.0, segment);
        Ok(())
    }

    fn stats(&self) -> CacheStats {
        MemCache::stats(self)
    }
}

fn read_len(b: &[u8]) -> usize {
    u32::from_le_bytes(b[..LEN].try_into().expect("4 bytes")) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distinct for distinct `i`.
    fn seg(i: u64, len: usize) -> Vec<u8> {
        let mut v: Vec<u8> = (0..len).map(|j| (i as usize * 31 + j * 7) as u8).collect();
        v[..8].copy_from_slice(&i.to_le_bytes());
        v
    }

    #[test]
    fn round_trip_and_replace() {
        let mut c = MemCache::new(FpBits::DEFAULT, 1 << 20);
        let a = seg(1, 100);
        let f = Fingerprint::full(&a);
        c.insert(f, &a).unwrap();
        assert!(c.may_contain(f.truncate(c.bits())));
        assert_eq!(
            c.get(f.truncate(c.bits())).unwrap().as_deref(),
            Some(&a[..])
        );
        // Same 40-bit fingerprint, another segment: replaces.
        let b = seg(2, 50);
        c.insert(Fingerprint(f.0 ^ (1 << 50)), &b).unwrap();
        assert_eq!(
            c.get(f.truncate(c.bits())).unwrap().as_deref(),
            Some(&b[..])
        );
        assert_eq!(c.stats().replaced, 1);
        // The same segment again: held already, not stored twice.
        let held = c.stats().bytes;
        c.insert(Fingerprint(f.0 ^ (1 << 50)), &b).unwrap();
        assert_eq!((c.stats().duplicates, c.stats().bytes), (1, held));
        assert_eq!(c.get(Fingerprint(3)).unwrap(), None);
    }

    #[test]
    fn budget_evicts_oldest_but_keeps_hot_segments() {
        let bits = FpBits::new(64).unwrap();
        let mut c = MemCache::new(bits, 256 << 10);
        let hot = seg(0, 200);
        let hot_fp = Fingerprint::full(&hot);
        c.insert(hot_fp, &hot).unwrap();
        let mut fps = Vec::new();
        for i in 1..20_000u64 {
            let s = seg(i, 200);
            let f = Fingerprint::full(&s);
            c.insert(f, &s).unwrap();
            fps.push((f, s));
            if i % 100 == 0 {
                assert_eq!(c.get(hot_fp).unwrap().as_deref(), Some(&hot[..]));
            }
        }
        let st = c.stats();
        assert!(st.bytes <= 256 << 10, "{st:?}");
        assert!(st.disk_evictions > 0);
        assert_eq!(c.get(fps[0].0).unwrap(), None);
        let (f, s) = fps.last().unwrap();
        assert_eq!(c.get(*f).unwrap().as_deref(), Some(&s[..]));
        assert_eq!(c.get(hot_fp).unwrap().as_deref(), Some(&hot[..]));
    }
}
