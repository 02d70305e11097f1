//! [`DiskConfig`]: the disk cache's knobs, checked once at open.

use super::record::{HEADER_LEN, REC_OVERHEAD};
use super::CacheError;
use crate::fp::FpBits;

/// How a [`super::DiskCache`] is laid out and bounded. The defaults suit one machine: a
/// 1 GiB cache with 64 MiB containers, 256 MiB of read-ahead memory and a 10-bit-per-entry
/// Bloom filter (about 17 MiB at the default sizing, 1 % false positives).
#[derive(Debug, Clone, PartialEq)]
pub struct DiskConfig {
    /// Width of the optimistic fingerprints (default 40). May differ from the width the
    /// containers were written with: records carry the full 64-bit fingerprint.
    pub bits: FpBits,
    /// A container is closed when the next record would take it past this (default
    /// 64 MiB, at most 4 GiB: offsets are 32-bit).
    pub container_bytes: u64,
    /// Total size of the container files; the least recently used container is deleted
    /// beyond it (default 1 GiB, at least `container_bytes`).
    pub disk_bytes: u64,
    /// Memory for read-ahead chunks and the write buffer; the least recently used
    /// container's chunks are dropped beyond it (default 256 MiB). The index (about 26
    /// bytes per segment) and the Bloom filter are not counted here: they stay in memory.
    pub memory_bytes: u64,
    /// Read-ahead: a miss in memory loads this much of the container around the record
    /// (default 256 KiB; the seed used 1 MB chunks).
    pub chunk_bytes: u32,
    /// Records are written to the file when this much is buffered (default 1 MiB), on
    /// [`super::DiskCache::flush`] and on drop.
    pub write_buffer_bytes: u32,
    /// Bloom filter bits per expected entry (default 10).
    pub bloom_bits_per_entry: u32,
    /// Bloom filter hash functions, 1..=16 (default 7; best is `bits ln 2`).
    pub bloom_hashes: u32,
    /// Entries the Bloom filter is sized for; `None`: `disk_bytes / 80`, a full cache of
    /// 64-byte segments. More entries than this raise the false-positive rate, which
    /// [`super::CacheStats::bloom`] reports.
    pub bloom_entries: Option<u64>,
    /// Largest segment accepted (default 1 MiB).
    pub max_segment_bytes: u32,
}

impl Default for DiskConfig {
    fn default() -> Self {
        DiskConfig {
            bits: FpBits::DEFAULT,
            container_bytes: 64 << 20,
            disk_bytes: 1 << 30,
            memory_bytes: 256 << 20,
            chunk_bytes: 256 << 10,
            write_buffer_bytes: 1 << 20,
            bloom_bits_per_entry: 10,
            bloom_hashes: 7,
            bloom_entries: None,
            max_segment_bytes: 1 << 20,
        }
    }
}

impl DiskConfig {
    /// Entries the Bloom filter is sized for.
    pub fn bloom_entries(&self) -> u64 {
        self.bloom_entries.unwrap_or(self.disk_bytes / 80).max(1)
    }

    /// Refuses settings that cannot work, saying which and why.
    pub fn validate(&self) -> Result<(), CacheError> {
        let bad = |what: String| Err(CacheError::Config { what });
        if !(4096..=u64::from(u32::MAX)).contains(&self.container_bytes) {
            return bad(format!(
                "container_bytes = {}: expected 4096 ..= {} (offsets are 32-bit)",
                self.container_bytes,
                u32::MAX
            ));
        }
        let room = self.container_bytes - (HEADER_LEN + REC_OVERHEAD) as u64;
        if self.max_segment_bytes == 0 || u64::from(self.max_segment_bytes) > room {
            return bad(format!(
                "max_segment_bytes = {}: expected 1 ..= {room} (a record must fit in a \
                 container of {} bytes)",
                self.max_segment_bytes, self.container_bytes
            ));
        }
        if self.disk_bytes < self.container_bytes {
            return bad(format!(
                "disk_bytes = {} is below container_bytes = {}: the container being \
                 written could not fit",
                self.disk_bytes, self.container_bytes
            ));
        }
        if self.chunk_bytes < 4096 {
            return bad(format!(
                "chunk_bytes = {}: expected at least 4096",
                self.chunk_bytes
            ));
        }
        let floor = u64::from(self.chunk_bytes) + u64::from(self.write_buffer_bytes);
        if self.memory_bytes < floor {
            return bad(format!(
                "memory_bytes = {} is below chunk_bytes + write_buffer_bytes = {floor}",
                self.memory_bytes
            ));
        }
        if !(1..=64).contains(&self.bloom_bits_per_entry) {
            return bad(format!(
                "bloom_bits_per_entry = {}: expected 1 ..= 64",
                self.bloom_bits_per_entry
            ));
        }
        if !(1..=16).contains(&self.bloom_hashes) {
            return bad(format!(
                "bloom_hashes = {}: expected 1 ..= 16",
                self.bloom_hashes
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_errors_name_the_knob() {
        DiskConfig::default().validate().unwrap();
        let c = DiskConfig {
            disk_bytes: 1 << 20,
            ..DiskConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("disk_bytes"), "{e}");
        let c = DiskConfig {
            bloom_hashes: 0,
            ..DiskConfig::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("bloom_hashes"));
    }
}
