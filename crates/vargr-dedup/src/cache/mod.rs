//! The segment cache: segments by fingerprint, in memory and on disk.
//!
//! Placeholder interface; the cache itself is being written.

/// Why the cache failed.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("segment cache {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

use bytes::Bytes;

use crate::fp::{Fingerprint, FpBits};

/// What the two-level protocol needs from a cache.
pub trait SegmentCache: Send {
    /// Width of the optimistic fingerprints this cache answers to.
    fn bits(&self) -> FpBits;
    /// Quick membership test (the Bloom filter): `false` means surely absent.
    fn may_contain(&self, fp: Fingerprint) -> bool;
    /// The segment stored under optimistic fingerprint `fp` (already truncated to
    /// [`SegmentCache::bits`]), if any. Damaged records are dropped, never returned.
    fn get(&mut self, fp: Fingerprint) -> Result<Option<Bytes>, CacheError>;
    /// Stores `segment`, whose full 64-bit fingerprint is `full`; a later segment with
    /// the same truncated fingerprint replaces it.
    fn insert(&mut self, full: Fingerprint, segment: &[u8]) -> Result<(), CacheError>;
}
