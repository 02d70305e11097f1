//! The segment cache: segments by fingerprint, in memory and on disk.
//!
//! The two-level protocol only pays if the receiver still holds what the sender names,
//! so the cache is large (gigabytes), persists across runs, and is shared by every
//! transfer to and from the same peer. It answers to *optimistic* fingerprints: the
//! low [`FpBits`] bits of a segment's XXH3-64. Two segments may share one; the later
//! insert wins, and the protocol's group hash turns a wrong answer into a resend.
//!
//! - [`MemCache`]: in memory, byte-budgeted, oldest blocks evicted, hot segments kept.
//! - [`DiskCache`]: a directory of append-only, checksummed container files with an
//!   in-memory index, a Bloom filter in front, read-ahead, LRU eviction of containers
//!   under memory and disk limits ([`DiskConfig`]). A damaged record is dropped, never
//!   served. [`DiskCache::open_for_peer`] keeps one directory per peer.
//! - [`SharedCache`]: one cache behind a mutex, cloned into every transfer.
//! - [`CacheStats`]: what `vargr dedup stats` prints, including the Bloom filter's
//!   measured false-positive rate beside [`bloom_model`], the rate it should have.
//!
//! Memory per segment, which matters with 32-256-byte segments: about 26 bytes of index
//! (see `index.rs`) and `bloom_bits_per_entry / 8` bytes of Bloom filter; record
//! overhead on disk is 16 bytes.

mod bloom;
mod config;
mod disk;
mod index;
mod lock;
mod mem;
mod record;
mod shared;
mod stats;
#[cfg(test)]
mod tests;

use bytes::Bytes;

use crate::fp::{Fingerprint, FpBits};

pub use bloom::{bloom_best_hashes, bloom_model};
pub use config::DiskConfig;
pub use disk::DiskCache;
pub use mem::MemCache;
pub use shared::SharedCache;
pub use stats::{AgeBucket, BloomStats, CacheStats};

/// Why the cache failed. Damage to cached data is not an error: the damaged part is
/// dropped, counted in [`CacheStats`], and reads as a miss.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("segment cache {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "segment cache {path} is in use by another opener (pid {holder}); within one \
         process share it through SharedCache"
    )]
    Locked { path: String, holder: String },
    #[error(
        "segment cache {path}: container format version {found}, this vargr reads \
         version {supported}; use a newer vargr or another cache directory"
    )]
    Version {
        path: String,
        found: u16,
        supported: u16,
    },
    #[error("segment cache {cache}: segment of {len} bytes, the largest accepted is {max}")]
    SegmentTooLarge {
        cache: String,
        len: usize,
        max: usize,
    },
    #[error("segment cache configuration: {what}")]
    Config { what: String },
    #[error(
        "segment cache: peer name {peer:?} cannot be a directory name; use letters, \
         digits and . - _ : @ (at most 128)"
    )]
    BadPeer { peer: String },
}

/// What the two-level protocol needs from a cache.
pub trait SegmentCache: Send {
    /// Width of the optimistic fingerprints this cache answers to.
    fn bits(&self) -> FpBits;
    /// Quick membership test (the Bloom filter): `false` means surely absent.
    fn may_contain(&self, fp: Fingerprint) -> bool;
    /// The segment stored under optimistic fingerprint `fp` (already truncated to
    /// [`SegmentCache::bits`]), if any. Damaged records are dropped, never returned.
    fn get(&mut self, fp: Fingerprint) -> Result<Option<Bytes>, CacheError>;
    /// [`SegmentCache::get`] behind the Bloom filter: a sure miss costs no index or
    /// disk access (and the filter's measured rate counts every lookup).
    fn lookup(&mut self, fp: Fingerprint) -> Result<Option<Bytes>, CacheError> {
        if self.may_contain(fp) {
            self.get(fp)
        } else {
            Ok(None)
        }
    }
    /// Stores `segment`, whose full 64-bit fingerprint is `full`; a later segment with
    /// the same truncated fingerprint replaces it. The caches here skip a segment they
    /// already hold under the same full fingerprint (the sender inserts every segment
    /// it sends, most of them repeats).
    fn insert(&mut self, full: Fingerprint, segment: &[u8]) -> Result<(), CacheError>;
    /// Writes buffered segments to storage (a no-op in memory).
    fn flush(&mut self) -> Result<(), CacheError> {
        Ok(())
    }
    /// Counters and sizes; empty for caches that keep none.
    fn stats(&self) -> CacheStats {
        CacheStats::default()
    }
}
