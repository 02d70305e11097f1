//! The segment caches of a proxy process, one per peer proxy and role, opened on first
//! use and shared by every connection; and what each cache keeps beside its segments
//! (a delta-base index, a stream model per direction), handed to one connection at a
//! time and saved at exit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use vargr_dedup::cache::{DiskCache, DiskConfig, SharedCache};
use vargr_dedup::similar::SimilarityIndex;
use vargr_dedup::stream::StreamModel;

use crate::error::ProxyError;
use crate::pump::Models;

/// The stream model files of a proxy's cache.
const STREAM_SENT: &str = "stream-sent.model";
const STREAM_RECEIVED: &str = "stream-received.model";

pub(crate) struct Caches {
    root: PathBuf,
    cfg: DiskConfig,
    open: Mutex<HashMap<String, SharedCache<DiskCache>>>,
    /// Each cache's delta-base index.
    similar: Held<SimilarityIndex>,
    /// Each cache's stream models, one per direction: what this side sends to the peer,
    /// and what it receives from it. Two connections at once may pair a model on this
    /// side with another on the peer's: the tokens then differ and both sides reset,
    /// which costs predictions and never bytes.
    sent: Held<StreamModel>,
    received: Held<StreamModel>,
}

/// What a cache keeps beside its segments that one connection at a time uses, by cache
/// directory: handed to a connection from memory if no other holds it, else from its
/// file the first time, else empty (the others start empty); put back when the
/// connection ends (the first one back stays); saved at exit.
struct Held<T> {
    idle: Mutex<HashMap<PathBuf, T>>,
    load: fn(&Path, usize) -> T,
    save: fn(&Path, &T),
}

impl<T> Held<T> {
    fn new(load: fn(&Path, usize) -> T, save: fn(&Path, &T)) -> Held<T> {
        Held {
            idle: Mutex::new(HashMap::new()),
            load,
            save,
        }
    }

    fn take(&self, dir: &Path, capacity: usize) -> T {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.remove(dir)
            .unwrap_or_else(|| (self.load)(dir, capacity))
    }

    fn put(&self, dir: &Path, value: T) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.entry(dir.to_path_buf()).or_insert(value);
    }

    fn save_all(&self) {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        for (dir, value) in idle.iter() {
            (self.save)(dir, value);
        }
    }
}

impl Caches {
    pub fn new(root: PathBuf, cfg: DiskConfig) -> Caches {
        Caches {
            root,
            cfg,
            open: Mutex::new(HashMap::new()),
            similar: Held::new(vargr_sync::load_similarity, vargr_sync::save_similarity),
            sent: Held::new(
                |dir, capacity| vargr_sync::load_stream_as(dir, STREAM_SENT, capacity),
                |dir, model| vargr_sync::save_stream_as(dir, STREAM_SENT, model),
            ),
            received: Held::new(
                |dir, capacity| vargr_sync::load_stream_as(dir, STREAM_RECEIVED, capacity),
                |dir, model| vargr_sync::save_stream_as(dir, STREAM_RECEIVED, model),
            ),
        }
    }

    /// The cache of `prefix` + the peer's `name` (`proxy-to-NAME`, `proxy-from-NAME`).
    pub fn get(&self, prefix: &str, name: &str) -> Result<SharedCache<DiskCache>, ProxyError> {
        let key = vargr_sync::cache_key(&format!("{prefix}{name}"));
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = open.get(&key) {
            return Ok(c.clone());
        }
        let c = DiskCache::open_for_peer(&self.root, &key, self.cfg.clone()).map_err(|source| {
            ProxyError::Cache {
                key: key.clone(),
                root: self.root.clone(),
                source,
            }
        })?;
        let c = SharedCache::new(c);
        open.insert(key, c.clone());
        Ok(c)
    }

    /// The models of the cache in `dir`, for a connection.
    pub fn take_models(&self, dir: &Path, capacity: usize) -> Models {
        Models {
            similarity: self.similar.take(dir, capacity),
            sent: self.sent.take(dir, capacity),
            received: self.received.take(dir, capacity),
        }
    }

    /// A connection's models, back for the next one.
    pub fn put_models(&self, dir: &Path, m: Models) {
        self.sent.put(dir, m.sent);
        self.received.put(dir, m.received);
        self.similar.put(dir, m.similarity);
    }

    pub fn flush_all(&self) {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        for c in open.values() {
            let _ = c.lock().flush();
        }
        self.similar.save_all();
        self.sent.save_all();
        self.received.save_all();
    }
}

/// Flushes a cache and saves its counters where `vargr dedup stats` finds them; a
/// failure only loses the statistics (the records stay buffered until the next flush).
pub(crate) fn save_cache(cache: &SharedCache<DiskCache>) {
    let mut c = cache.lock();
    let _ = c.flush();
    if let Ok(body) = serde_json::to_vec_pretty(&c.stats()) {
        let _ = std::fs::write(c.dir().join(vargr_sync::SESSION_STATS), body);
    }
}
