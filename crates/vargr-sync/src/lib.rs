//! `vargr sync`: copies a file or a tree to a receiver, sending only the segments the
//! receiver's cache lacks (the two-level fingerprint protocol of `vargr-dedup`).
//!
//! One session is one direction. The sender writes a short preamble (who it is, where
//! the tree goes), then one zstd stream carrying the dedup protocol; every control
//! message (the manifest, a file's start and end with its BLAKE3) travels inside that
//! stream as a dedup message on channel 0, so it arrives in order with the file data
//! (channel 1) and repeats of it cost fingerprints too. The receiver answers with
//! framed replies: the dedup protocol's requests and acknowledgements, and JSON
//! control (which files it already has, the final result).
//!
//! Why zstd around the stream: segments the receiver lacks would otherwise cross raw;
//! fingerprints do not compress, new data does.
//!
//! Files land as `.NAME.vargr-partial` (a unique suffix added when that name is taken
//! by anything but a stale partial file) and are renamed into place only once their
//! length and BLAKE3 match the sender's, with the sender's mode and mtime. The
//! receiver never follows a symbolic link under its destination (`beneath`): links of
//! the tree are recreated as links, their targets opaque. An
//! interrupted sync leaves complete files in place and its segments in both caches, so
//! running it again sends fingerprints for what already crossed.

mod beneath;
mod frame;
pub mod manifest;
mod recv;
mod send;
pub mod zpieces;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub use frame::{put_frame, split_frame, FRAME_HEAD_LEN, PROTOCOL_VERSION};

/// Every decoder of a peer's bytes in one call, for the fuzz target (`sync_frames`).
#[doc(hidden)]
pub mod fuzzing {
    use std::path::Path;

    use crate::frame::{read_frame, read_preamble, Control, Reply};

    /// Feeds `data` to the preamble reader, the reply-frame reader, the control and
    /// reply parsers and the path check of every manifest entry. Errors are fine;
    /// panics and unbounded allocations are not.
    pub fn decode_all(data: &[u8]) {
        if let Ok(p) = read_preamble(&mut &data[..]) {
            let _ = crate::manifest::safe_join(Path::new("/dest"), &p.dest);
        }
        let mut r = data;
        while let Ok(Some((_, body))) = read_frame(&mut r) {
            let _ = serde_json::from_slice::<Reply>(&body);
            if let Ok(Control::Manifest { manifest }) = serde_json::from_slice::<Control>(&body) {
                for e in &manifest.entries {
                    let _ = crate::manifest::safe_join(Path::new("/dest"), &e.path);
                }
            }
        }
    }
}
pub use manifest::{Entry, Kind, Manifest};
pub use recv::{receive, Access, RecvOptions, RecvReport};
pub use send::{
    cache_key, host_name, send, sender_config, stream_encoder, Counting, Progress, SendOptions,
    SendReport, DEFAULT_SEGMENTER,
};

/// The byte streams of a session: to the peer and from it.
pub struct Transport {
    pub reader: Box<dyn Read + Send>,
    pub writer: Box<dyn Write + Send>,
    /// How the peer is named in errors, and (by the sender) which cache to use.
    pub peer: String,
}

/// Why a sync failed; each names what and where.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{peer}: {what}: {source}")]
    Link {
        peer: String,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("path {path:?}: {reason}")]
    Path { path: String, reason: String },
    /// A path of the tree would pass through a symbolic link, which the receiver never
    /// follows.
    #[error("refusing to pass through the symbolic link {link}")]
    ThroughLink { link: String },
    /// Sent to the client as is: names no path of the daemon's machine.
    #[error("this receiver is read-only (vargr sync --serve --read-only): uploads are refused")]
    ReadOnly,
    #[error("{peer}: {reason}")]
    Protocol { peer: String, reason: String },
    #[error("{peer}: {source}")]
    Dedup {
        peer: String,
        #[source]
        source: vargr_dedup::ProtocolError,
    },
    #[error("segment cache: {0}")]
    Cache(#[from] vargr_dedup::CacheError),
    #[error("{path}: received {got} bytes with BLAKE3 {got_hash}, the sender had {want} bytes with BLAKE3 {want_hash}")]
    Verify {
        path: String,
        got: u64,
        want: u64,
        got_hash: String,
        want_hash: String,
    },
    #[error("the receiver reported: {0}")]
    Remote(String),
}

impl SyncError {
    pub(crate) fn io(what: &'static str, path: &Path, source: std::io::Error) -> SyncError {
        SyncError::Io {
            what,
            path: path.display().to_string(),
            source,
        }
    }
}

/// Where caches live when not configured, from the variables `var` finds (the front end
/// passes its environment): `VARGR_CACHE_DIR`, else `XDG_CACHE_HOME/vargr/dedup`, else
/// `HOME/.cache/vargr/dedup`, else under the temporary directory.
pub fn default_cache_root(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    if let Some(d) = var("VARGR_CACHE_DIR") {
        return PathBuf::from(d);
    }
    let base = var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("vargr").join("dedup")
}

/// The file in a peer's cache directory holding its last session's counters (hits,
/// Bloom filter rate, hit ages), which `vargr dedup stats` shows.
pub const SESSION_STATS: &str = "last-session.json";

/// Writes `stats` next to the cache; a failure only loses the statistics.
pub(crate) fn save_session_stats(dir: &Path, stats: &vargr_dedup::cache::CacheStats) {
    if let Ok(body) = serde_json::to_vec_pretty(stats) {
        let _ = std::fs::write(dir.join(SESSION_STATS), body);
    }
}

/// The file in a receiver's cache directory (on the sender) holding the index that
/// finds delta bases, so the next sync to that receiver can send changed segments as
/// deltas against this one's.
pub const SIMILARITY_INDEX: &str = "similar.idx";

/// The sender's delta-base index for the cache in `dir`: the saved one, or an empty one
/// if there is none or it is damaged (it is only a hint).
pub fn load_similarity(dir: &Path, capacity: usize) -> vargr_dedup::similar::SimilarityIndex {
    std::fs::read(dir.join(SIMILARITY_INDEX))
        .ok()
        .and_then(|b| vargr_dedup::similar::SimilarityIndex::from_bytes(&b, capacity))
        .unwrap_or_else(|| vargr_dedup::similar::SimilarityIndex::new(capacity))
}

/// Saves the index beside the cache; a failure only costs the next session its deltas.
pub fn save_similarity(dir: &Path, index: &vargr_dedup::similar::SimilarityIndex) {
    save_beside(dir, SIMILARITY_INDEX, &index.to_bytes());
}

/// The file in a peer's cache directory (on both sides) holding the order of the
/// streams exchanged with it, which the two sides keep alike
/// ([`vargr_dedup::stream`]).
pub const STREAM_MODEL: &str = "stream.model";

/// The stream model kept for the peer whose cache is in `dir`, or an empty one if there
/// is none or it is damaged (the peers then notice the difference and both restart).
pub fn load_stream(dir: &Path, capacity: usize) -> vargr_dedup::stream::StreamModel {
    load_stream_as(dir, STREAM_MODEL, capacity)
}

/// [`load_stream`] from the file `name` (a cache that serves both directions with a
/// peer, as the proxy's do, keeps one model per direction).
pub fn load_stream_as(dir: &Path, name: &str, capacity: usize) -> vargr_dedup::stream::StreamModel {
    std::fs::read(dir.join(name))
        .ok()
        .and_then(|b| vargr_dedup::stream::StreamModel::from_bytes(&b, capacity))
        .unwrap_or_else(|| vargr_dedup::stream::StreamModel::new(capacity))
}

/// Saves the model beside the cache at the end of a session.
pub fn save_stream(dir: &Path, model: &vargr_dedup::stream::StreamModel) {
    save_stream_as(dir, STREAM_MODEL, model);
}

/// [`save_stream`] to the file `name`.
pub fn save_stream_as(dir: &Path, name: &str, model: &vargr_dedup::stream::StreamModel) {
    save_beside(dir, name, &model.to_bytes());
}

/// Writes `name` in `dir` through a rename, so a crash leaves the old file; a failure
/// is only a lost hint.
fn save_beside(dir: &Path, name: &str, bytes: &[u8]) {
    let tmp = dir.join(format!("{name}.tmp"));
    if std::fs::write(&tmp, bytes).is_ok() {
        let _ = std::fs::rename(&tmp, dir.join(name));
    }
}

#[cfg(test)]
mod tests;
