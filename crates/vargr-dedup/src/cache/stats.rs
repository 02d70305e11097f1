//! What a cache reports: `vargr dedup stats` prints this.

use std::collections::VecDeque;

use serde::Serialize;

/// A snapshot of a cache's size, traffic and health.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CacheStats {
    /// `"memory"` or `"disk"`.
    pub kind: &'static str,
    /// Width of the optimistic fingerprints it answers to.
    pub fp_bits: u8,
    /// Segments reachable through the index.
    pub segments: u64,
    /// Payload bytes held in live containers (replaced copies included until their
    /// container goes).
    pub bytes: u64,
    /// Live containers (disk) or blocks (memory).
    pub containers: u64,
    /// Memory in use: index, Bloom filter, loaded chunks and write buffer.
    pub memory_bytes: u64,
    /// Of which the fingerprint index.
    pub index_bytes: u64,
    /// Of which read-ahead chunks (disk cache).
    pub chunk_bytes: u64,
    /// Bytes of container files, including the write buffer not yet flushed.
    pub disk_bytes: u64,
    pub inserts: u64,
    /// Inserts of a segment already held (same full fingerprint): not written again.
    pub duplicates: u64,
    /// Inserts whose optimistic fingerprint was already indexed (the older copy is no
    /// longer served).
    pub replaced: u64,
    pub hits: u64,
    pub misses: u64,
    /// `None` where membership is exact (the memory cache).
    pub bloom: Option<BloomStats>,
    /// Records dropped because their checksum or length was bad.
    pub damaged_records: u64,
    /// Container files dropped whole (bad header) or cut short (damaged length, torn tail).
    pub damaged_containers: u64,
    /// Containers deleted to keep within the disk limit (blocks, for the memory cache).
    pub disk_evictions: u64,
    /// Containers whose chunks were dropped from memory to keep within the memory limit.
    pub memory_evictions: u64,
    /// Read-ahead chunks read from disk.
    pub chunk_loads: u64,
    /// Hits by age: bytes the cache had written between a segment's insert and its hit.
    pub hit_ages: Vec<AgeBucket>,
    /// The latest warnings (damage found, files removed), oldest first.
    pub warnings: Vec<String>,
}

/// Bloom filter size and measured accuracy.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BloomStats {
    pub bytes: u64,
    pub hashes: u32,
    /// Entries it was sized for.
    pub sized_for: u64,
    /// `may_contain` calls.
    pub lookups: u64,
    /// Lookups the filter passed.
    pub positives: u64,
    /// Passed lookups for which the index had nothing.
    pub false_positives: u64,
    /// `false_positives / (lookups - true positives)`: the rate among absent keys.
    pub measured_rate: f64,
    /// [`super::bloom_model`] at the filter's bits per *current* entry.
    pub model_rate: f64,
}

/// One bucket of the hit-age histogram.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgeBucket {
    /// Upper bound in bytes written (exclusive); `None` for the last bucket.
    pub below_bytes: Option<u64>,
    pub hits: u64,
}

const AGE_BOUNDS: [u64; 5] = [1 << 16, 1 << 20, 1 << 24, 1 << 28, 1 << 32];

/// Hits counted by how many bytes were written since the segment was.
#[derive(Debug, Clone, Default)]
pub(crate) struct AgeHistogram([u64; AGE_BOUNDS.len() + 1]);

impl AgeHistogram {
    pub fn record(&mut self, age_bytes: u64) {
        let i = AGE_BOUNDS.partition_point(|&b| b <= age_bytes);
        self.0[i] += 1;
    }

    pub fn buckets(&self) -> Vec<AgeBucket> {
        self.0
            .iter()
            .enumerate()
            .map(|(i, &hits)| AgeBucket {
                below_bytes: AGE_BOUNDS.get(i).copied(),
                hits,
            })
            .collect()
    }
}

/// The last few warnings: enough to see what happened without growing without bound.
#[derive(Debug, Clone, Default)]
pub(crate) struct Warnings(VecDeque<String>);

impl Warnings {
    const KEEP: usize = 32;

    pub fn push(&mut self, w: String) {
        if self.0.len() == Self::KEEP {
            self.0.pop_front();
        }
        self.0.push_back(w);
    }

    pub fn list(&self) -> Vec<String> {
        self.0.iter().cloned().collect()
    }
}

/// Traffic counters both caches keep.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counters {
    pub inserts: u64,
    pub duplicates: u64,
    pub replaced: u64,
    pub hits: u64,
    pub misses: u64,
    pub damaged_records: u64,
    pub damaged_containers: u64,
    pub disk_evictions: u64,
    pub memory_evictions: u64,
    pub chunk_loads: u64,
}

impl Counters {
    pub fn fill(&self, s: &mut CacheStats) {
        s.inserts = self.inserts;
        s.duplicates = self.duplicates;
        s.replaced = self.replaced;
        s.hits = self.hits;
        s.misses = self.misses;
        s.damaged_records = self.damaged_records;
        s.damaged_containers = self.damaged_containers;
        s.disk_evictions = self.disk_evictions;
        s.memory_evictions = self.memory_evictions;
        s.chunk_loads = self.chunk_loads;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_fall_in_buckets() {
        let mut h = AgeHistogram::default();
        h.record(0);
        h.record((1 << 16) - 1);
        h.record(1 << 16);
        h.record(u64::MAX);
        let b = h.buckets();
        assert_eq!(b.len(), 6);
        assert_eq!(b[0].hits, 2);
        assert_eq!(b[1].hits, 1);
        assert_eq!(b[5].below_bytes, None);
        assert_eq!(b[5].hits, 1);
    }
}
