//! [`SharedCache`]: one cache for every transfer to and from a peer.
//!
//! The seed's Canidae ran both directions of every connection to a peer against one
//! segment cache: what one side sent, the other can later send back by fingerprint. In
//! a process that is one cache behind a mutex, cloned into each transfer. A cache
//! operation is short (a hash probe, at worst one chunk read), so one lock is enough.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use super::{CacheError, CacheStats, SegmentCache};
use crate::fp::{Fingerprint, FpBits};

/// A cache shared between threads: clones use the same cache.
#[derive(Debug)]
pub struct SharedCache<C> {
    inner: Arc<Mutex<C>>,
    bits: FpBits,
}

impl<C> Clone for SharedCache<C> {
    fn clone(&self) -> Self {
        SharedCache {
            inner: Arc::clone(&self.inner),
            bits: self.bits,
        }
    }
}

impl<C: SegmentCache> SharedCache<C> {
    pub fn new(cache: C) -> SharedCache<C> {
        let bits = cache.bits();
        SharedCache {
            inner: Arc::new(Mutex::new(cache)),
            bits,
        }
    }

    /// The cache itself, for what the trait does not offer. A panic while another
    /// holder had it does not poison it: records are checksummed and the index is only
    /// changed in whole steps, so the cache stays usable.
    pub fn lock(&self) -> MutexGuard<'_, C> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<C: SegmentCache> SegmentCache for SharedCache<C> {
    fn bits(&self) -> FpBits {
        self.bits
    }

    fn may_contain(&self, fp: Fingerprint) -> bool {
        self.lock().may_contain(fp)
    }

    fn get(&mut self, fp: Fingerprint) -> Result<Option<Bytes>, CacheError> {
        self.lock().get(fp)
    }

    fn insert(&mut self, full: Fingerprint, segment: &[u8]) -> Result<(), CacheError> {
        self.lock().insert(full, segment)
    }

    fn flush(&mut self) -> Result<(), CacheError> {
        self.lock().flush()
    }

    fn stats(&self) -> CacheStats {
        self.lock().stats()
    }
}
