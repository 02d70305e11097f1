//! The sending side: scans the tree, streams it through the dedup sender.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use serde::Serialize;
use vargr_dedup::cache::{CacheStats, DiskCache, DiskConfig};
use vargr_dedup::protocol::Stats;
use vargr_dedup::{Config, FpBits, Sender};

use crate::frame::{self, Control, Preamble, Reply, F_CONTROL, F_DEDUP};
use crate::manifest::{Kind, Manifest};
use crate::{SyncError, Transport};

/// Bytes of changed segments a sync gathers into one delta batch: between two releases
/// of a source tarball, 256 KiB batches cost 0.6 of what the same deltas cost inline.
const DELTA_BATCH: usize = 256 << 10;

/// The zstd stream a sync's sender writes through: compressed by zstd's own worker
/// threads (up to four, one per core), so that the first sync of new data, which
/// zstd limits, also uses the cores the reader and the protocol leave idle
/// (docs/benchmarks.md has the measurement).
pub fn stream_encoder<W: Write>(
    w: W,
    level: i32,
) -> std::io::Result<zstd::stream::write::Encoder<'static, W>> {
    let mut z = zstd::stream::write::Encoder::new(w, level)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    z.multithread(cores.min(4) as u32)?;
    Ok(z)
}

/// How a sync cuts files unless told otherwise: large content-defined segments. Between
/// two Django release tars (60 MB, nearly every 32 KiB differing from the old release in
/// a few tar-header bytes) segments of 32 KiB on average moved 328 KB where 2 KiB moved
/// 805 KB: each changed segment goes as a delta against cached ones, so a segment's
/// size costs little in bytes, and every segment costs a name, its share of a group
/// hash and a delta header.
pub const DEFAULT_SEGMENTER: &str = "cdc:8k:32k:256k";

/// The dedup protocol's parameters of a sync's sender: deltas in batches at zstd level
/// `delta_level`, or inline in the stream (`None`); none against segments the stream's
/// zstd already carried.
pub fn sender_config(bits: FpBits, group: u32, delta_level: Option<i32>) -> Config {
    Config {
        bits,
        group,
        session_bases: false,
        delta_batch: if delta_level.is_some() {
            DELTA_BATCH
        } else {
            0
        },
        batch_level: delta_level.unwrap_or(Config::default().batch_level),
        ..Config::default()
    }
}

/// How a sync sends.
#[derive(Debug, Clone)]
pub struct SendOptions {
    /// Segmenter spec (a 1-D one; see `vargr_dedup::by_name`).
    pub segmenter: String,
    pub cache_root: PathBuf,
    pub cache: DiskConfig,
    /// Where the tree goes, relative to the root a daemon serves; empty otherwise.
    pub dest: String,
    /// How the receiver names this sender (its cache for us).
    pub sender_name: String,
    pub group: u32,
    /// zstd level for the stream (new segments; fingerprints do not compress).
    pub zstd_level: i32,
    /// zstd level of delta batches, or `None` (the default) for deltas inline in the
    /// stream. Batches carry most of a sync's information when little changed: they
    /// send fewer bytes for much more of the sender's CPU, so they pay only on links
    /// far slower than 100 Mbit/s (docs/benchmarks.md).
    pub delta_level: Option<i32>,
    /// Bytes read from a file at a time.
    pub read_chunk: usize,
}

impl Default for SendOptions {
    fn default() -> Self {
        SendOptions {
            segmenter: DEFAULT_SEGMENTER.into(),
            // Callers name their cache; this one is the system's temporary directory's.
            cache_root: crate::default_cache_root(|_| None),
            cache: DiskConfig::default(),
            dest: String::new(),
            sender_name: host_name(),
            group: 20,
            zstd_level: 3,
            delta_level: None,
            read_chunk: 4 << 20,
        }
    }
}

/// Where a sync stands, for a progress bar.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub files_done: u64,
    pub files_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// Bytes written to the link so far (compressed).
    pub wire_bytes: u64,
    pub current: String,
}

/// What a finished sync did.
#[derive(Debug, Clone, Serialize)]
pub struct SendReport {
    pub files_sent: u64,
    pub files_skipped: u64,
    pub files_failed: u64,
    /// Why each failed file failed (it was not put in place).
    pub failures: Vec<String>,
    /// File bytes read and sent (skipped files not counted).
    pub bytes_in: u64,
    /// Bytes written to the link, preamble included.
    pub bytes_on_wire: u64,
    /// Bytes the receiver sent back.
    pub reply_bytes: u64,
    pub seconds: f64,
    pub dedup: Stats,
    pub cache: CacheStats,
}

/// This machine's name, for the receiver's cache of us.
pub fn host_name() -> String {
    match vargr_net::launch::hostname() {
        n if n.is_empty() => "localhost".into(),
        n => n,
    }
}

/// A cache directory name for any peer description: safe characters kept, others
/// replaced, long names cut and told apart by a hash.
pub fn cache_key(peer: &str) -> String {
    let mut k: String = peer
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '@') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if k.len() > 96 || k.is_empty() || k == "." || k == ".." {
        let h = blake3::hash(peer.as_bytes()).to_hex();
        k.truncate(64);
        k = format!("{k}-{}", &h[..16]);
    }
    k
}

/// Counts what goes through a writer.
pub struct Counting {
    inner: Box<dyn Write + Send>,
    count: Arc<AtomicU64>,
}

impl Counting {
    /// A writer into `inner` that adds what it writes to `count`.
    pub fn new(inner: impl Write + Send + 'static, count: Arc<AtomicU64>) -> Counting {
        Counting {
            inner: Box::new(inner),
            count,
        }
    }
}

impl Write for Counting {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(b)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

enum Incoming {
    Dedup(Vec<u8>),
    Control(Reply),
    End,
    Failed(String),
}

struct Session {
    dx: Sender<DiskCache>,
    z: zstd::stream::write::Encoder<'static, Counting>,
    rx: mpsc::Receiver<Incoming>,
    peer: String,
    out: Vec<u8>,
    have: Option<Vec<u32>>,
    result: Option<(u64, u64, u64)>,
    failed: Vec<(u32, String)>,
}

impl Session {
    fn link_err(&self, what: &'static str, e: std::io::Error) -> SyncError {
        SyncError::Link {
            peer: self.peer.clone(),
            what,
            source: e,
        }
    }

    /// Hands what the dedup sender produced to zstd, which sends it when a block fills
    /// or [`Session::wait`] flushes it: a flush after every small file cost a zstd
    /// block's framing per file and compressed each file's names alone.
    fn write_out(&mut self) -> Result<(), SyncError> {
        self.dx.take_output(&mut self.out);
        if !self.out.is_empty() {
            let r = self.z.write_all(&self.out);
            self.out.clear();
            r.map_err(|e| self.link_err("sending", e))?;
        }
        Ok(())
    }

    /// Sends a control message as segments (see [`Control`]).
    fn control(&mut self, c: &Control) -> Result<(), SyncError> {
        let body = serde_json::to_vec(c).expect("serializable");
        let segs: Vec<&[u8]> = body.chunks(64 << 10).collect();
        self.dx
            .send_message(0, &[], &segs)
            .map_err(|e| self.dedup_err(e))
    }

    /// Sends a small control message in a message's layout (see [`Control`]).
    fn control_raw(&mut self, c: &Control) -> Result<(), SyncError> {
        let body = serde_json::to_vec(c).expect("serializable");
        self.dx
            .send_message(0, &body, &[])
            .map_err(|e| self.dedup_err(e))
    }

    fn dedup_err(&self, e: vargr_dedup::ProtocolError) -> SyncError {
        SyncError::Dedup {
            peer: self.peer.clone(),
            source: e,
        }
    }

    fn on_incoming(&mut self, m: Incoming) -> Result<(), SyncError> {
        match m {
            Incoming::Dedup(b) => {
                self.dx.handle_input(&b).map_err(|e| self.dedup_err(e))?;
                self.write_out()
            }
            Incoming::Control(Reply::Have { indices }) => {
                self.have = Some(indices);
                Ok(())
            }
            Incoming::Control(Reply::Failed { index, error }) => {
                self.failed.push((index, error));
                Ok(())
            }
            Incoming::Control(Reply::Result {
                files_written,
                bytes_written,
                failed,
            }) => {
                self.result = Some((files_written, bytes_written, failed));
                Ok(())
            }
            Incoming::Control(Reply::Error { message }) => Err(SyncError::Remote(message)),
            Incoming::Control(Reply::Hello { .. }) => Err(SyncError::Protocol {
                peer: self.peer.clone(),
                reason: "a second hello from the receiver".into(),
            }),
            Incoming::End => Err(SyncError::Protocol {
                peer: self.peer.clone(),
                reason: "the receiver closed the connection before the sync finished".into(),
            }),
            Incoming::Failed(reason) => Err(SyncError::Protocol {
                peer: self.peer.clone(),
                reason,
            }),
        }
    }

    /// Handles replies until `done` holds, blocking for them (after sending everything
    /// written: the receiver may need it to reply).
    fn wait(&mut self, done: impl Fn(&Session) -> bool) -> Result<(), SyncError> {
        while !done(self) {
            self.z.flush().map_err(|e| self.link_err("sending", e))?;
            let m = self.rx.recv().unwrap_or(Incoming::End);
            self.on_incoming(m)?;
        }
        Ok(())
    }

    /// Handles the replies already here, then blocks while the window is full.
    fn poll(&mut self) -> Result<(), SyncError> {
        while let Ok(m) = self.rx.try_recv() {
            self.on_incoming(m)?;
        }
        self.wait(|s| !s.dx.window_full())
    }

    /// Sends the manifest and waits for the receiver's answer: the indices of the files
    /// it holds already.
    fn exchange_manifest(&mut self, manifest: &Manifest) -> Result<HashSet<u32>, SyncError> {
        self.control(&Control::Manifest {
            manifest: manifest.clone(),
        })?;
        self.dx.flush();
        self.write_out()?;
        self.wait(|s| s.have.is_some())?;
        Ok(self.have.take().unwrap_or_default().into_iter().collect())
    }

    /// Streams the files in `todo`, read, cut and hashed on a second core while the
    /// protocol, the group hashes and zstd run on this one. Returns the files and the
    /// bytes sent.
    fn send_files(
        &mut self,
        todo: Vec<ToRead>,
        segmenter: Box<dyn vargr_dedup::Segmenter>,
        chunk_size: usize,
        wire: &AtomicU64,
        p: &mut Progress,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<(u64, u64), SyncError> {
        let (chunks_tx, chunks) = mpsc::sync_channel::<Vec<Chunk>>(2);
        let reader = std::thread::Builder::new()
            .name("vargr-sync-read".into())
            .spawn(move || read_files(todo, segmenter, chunk_size, chunks_tx))
            .map_err(|e| self.link_err("starting the file reader", e))?;
        let (mut sent, mut bytes_in) = (0, 0);
        for chunk in chunks.iter().flatten() {
            match chunk {
                Chunk::Start { index, path } => {
                    p.current = path;
                    self.control_raw(&Control::FileStart { index })?;
                }
                Chunk::Data { data, ends, fps } => {
                    p.bytes_done += self.send_segments(&data, &ends, &fps)?;
                    p.wire_bytes = wire.load(Ordering::Relaxed);
                    progress(p);
                    self.poll()?;
                }
                Chunk::End { size, hash } => {
                    // No flush here: the file is checked and put in place when its group
                    // closes, a few segments on; closing a group at every file cost a
                    // group hash per file, and a batch per file, in a tree of small ones.
                    self.control(&Control::FileEnd { size, blake3: hash })?;
                    self.write_out()?;
                    sent += 1;
                    bytes_in += size;
                    p.files_done += 1;
                    progress(p);
                }
                Chunk::Failed(e) => return Err(e),
            }
        }
        let _ = reader.join();
        Ok((sent, bytes_in))
    }

    /// Sends the segments `ends` cuts `data` into, fingerprinted by `fps`; returns the
    /// bytes they hold.
    fn send_segments(
        &mut self,
        data: &[u8],
        ends: &[usize],
        fps: &[vargr_dedup::Prepared],
    ) -> Result<u64, SyncError> {
        let mut segs = Vec::with_capacity(ends.len());
        let mut at = 0;
        for &end in ends {
            segs.push(&data[at..end]);
            at = end;
        }
        if !segs.is_empty() {
            self.dx
                .send_message_prepared(1, &[], &segs, fps)
                .map_err(|err| self.dedup_err(err))?;
        }
        self.write_out()?;
        // What this side believes the receiver holds survives a kill of this
        // process, so a rerun sends fingerprints for it.
        self.dx.cache().flush()?;
        Ok(at as u64)
    }

    /// Tells the receiver every file has gone, and waits for its result.
    fn finish(&mut self) -> Result<(), SyncError> {
        self.control_raw(&Control::Done)?;
        self.dx.flush();
        self.write_out()?;
        self.wait(|s| s.result.is_some())
    }

    /// Saves what the next sync to this receiver starts from (the cache, the similarity
    /// index, the stream model); returns the cache's counters.
    fn save_state(&mut self) -> Result<CacheStats, SyncError> {
        self.dx.cache().flush()?;
        let cache = self.dx.cache().stats();
        crate::save_session_stats(self.dx.cache().dir(), &cache);
        let dir = self.dx.cache().dir().to_path_buf();
        crate::save_similarity(&dir, self.dx.similarity());
        crate::save_stream(&dir, self.dx.stream());
        Ok(cache)
    }
}

/// Sends `src` (a file or a directory) over `t`.
pub fn send(
    src: &Path,
    t: Transport,
    opts: &SendOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<SendReport, SyncError> {
    let t0 = Instant::now();
    let segmenter = stream_segmenter(&opts.segmenter)?;
    let manifest = Manifest::scan(src)?;
    let peer = t.peer.clone();

    let wire = Arc::new(AtomicU64::new(0));
    let z = start_stream(t.writer, wire.clone(), opts, &peer)?;
    let mut reader = t.reader;
    let receiver = read_hello(&mut *reader, &peer)?;
    let dx = open_sender(opts, &receiver, &peer)?;
    let (tx, rx) = mpsc::channel();
    let reply_bytes = Arc::new(AtomicU64::new(0));
    let reply_thread = spawn_reply_reader(reader, tx, reply_bytes.clone(), &peer)?;

    let mut s = Session {
        dx,
        z,
        rx,
        peer,
        out: Vec::new(),
        have: None,
        result: None,
        failed: Vec::new(),
    };
    let have = s.exchange_manifest(&manifest)?;
    let (todo, mut p) = plan(src, &manifest, &have);
    let skipped = p.files_done; // so far, the files the receiver has
    progress(&p);
    let (sent, bytes_in) =
        s.send_files(todo, segmenter, opts.read_chunk, &wire, &mut p, progress)?;
    s.finish()?;
    let cache = s.save_state()?;
    let dedup = s.dx.stats().clone();
    let failures: Vec<String> = s
        .failed
        .iter()
        .map(|(i, e)| format!("{}: {e}", manifest.entries[*i as usize].path))
        .collect();
    let Session { z, .. } = s;
    // The receiver may already have closed its end: the result is what counts.
    if let Ok(mut w) = z.finish() {
        let _ = w.flush();
    }
    let _ = reply_thread.join();
    p.wire_bytes = wire.load(Ordering::Relaxed);
    progress(&p);
    Ok(SendReport {
        files_sent: sent,
        files_skipped: skipped,
        files_failed: failures.len() as u64,
        failures,
        bytes_in,
        bytes_on_wire: wire.load(Ordering::Relaxed),
        reply_bytes: reply_bytes.load(Ordering::Relaxed),
        seconds: t0.elapsed().as_secs_f64(),
        dedup,
        cache,
    })
}

/// The segmenter `spec` names, if it cuts byte streams (a sync cuts files).
fn stream_segmenter(spec: &str) -> Result<Box<dyn vargr_dedup::Segmenter>, SyncError> {
    let segmenter = vargr_dedup::by_name(spec).map_err(|e| SyncError::Path {
        path: spec.to_string(),
        reason: e.to_string(),
    })?;
    if segmenter.boundaries(&[], true).is_none() {
        return Err(SyncError::Path {
            path: spec.to_string(),
            reason: "sync needs a segmenter of byte streams (cdc, static or sw)".into(),
        });
    }
    Ok(segmenter)
}

/// Writes the preamble to `writer` and starts the zstd stream after it; `wire` counts
/// every byte written.
fn start_stream(
    writer: Box<dyn Write + Send>,
    wire: Arc<AtomicU64>,
    opts: &SendOptions,
    peer: &str,
) -> Result<zstd::stream::write::Encoder<'static, Counting>, SyncError> {
    let link_err = |what, source| SyncError::Link {
        peer: peer.to_string(),
        what,
        source,
    };
    let mut writer = Counting {
        inner: writer,
        count: wire,
    };
    let preamble = Preamble {
        version: frame::PROTOCOL_VERSION,
        sender: opts.sender_name.clone(),
        dest: opts.dest.clone(),
        fp_bits: opts.cache.bits.get(),
        group: opts.group,
    };
    frame::write_preamble(&mut writer, &preamble)
        .map_err(|e| link_err("sending the preamble", e))?;
    stream_encoder(writer, opts.zstd_level).map_err(|e| link_err("starting zstd", e))
}

/// The receiver's name from its hello. It names itself first: this side's cache of
/// what it holds is per receiver, whatever address reached it.
fn read_hello(reader: &mut dyn Read, peer: &str) -> Result<String, SyncError> {
    let protocol_err = |reason: String| SyncError::Protocol {
        peer: peer.to_string(),
        reason,
    };
    match frame::read_frame(reader) {
        Ok(Some((F_CONTROL, body))) => match serde_json::from_slice(&body) {
            Ok(Reply::Hello { receiver }) => Ok(receiver),
            Ok(Reply::Error { message }) => Err(SyncError::Remote(message)),
            _ => Err(protocol_err(
                "the receiver did not start with its hello".into(),
            )),
        },
        Ok(_) => Err(protocol_err(
            "the receiver closed the connection or did not start with its hello".into(),
        )),
        Err(reason) => Err(protocol_err(reason)),
    }
}

/// The dedup sender for `receiver`, on this side's cache of what it holds and with the
/// similarity index and stream model the last sync to it left.
fn open_sender(
    opts: &SendOptions,
    receiver: &str,
    peer: &str,
) -> Result<Sender<DiskCache>, SyncError> {
    let cache = DiskCache::open_for_peer(
        &opts.cache_root,
        &cache_key(&format!("to-{receiver}")),
        opts.cache.clone(),
    )?;
    let config = sender_config(opts.cache.bits, opts.group, opts.delta_level);
    let similar = crate::load_similarity(cache.dir(), config.delta_index);
    let stream = crate::load_stream(cache.dir(), config.delta_index);
    let mut dx = Sender::new(config, cache).map_err(|e| SyncError::Dedup {
        peer: peer.to_string(),
        source: e,
    })?;
    dx.set_similarity(similar);
    dx.set_stream(stream);
    Ok(dx)
}

/// Starts the thread that reads the receiver's replies into `tx`, counting their bytes
/// in `reply_bytes`, until the link ends or fails.
fn spawn_reply_reader(
    mut reader: Box<dyn Read + Send>,
    tx: mpsc::Sender<Incoming>,
    reply_bytes: Arc<AtomicU64>,
    peer: &str,
) -> Result<std::thread::JoinHandle<()>, SyncError> {
    std::thread::Builder::new()
        .name("vargr-sync-replies".into())
        .spawn(move || loop {
            let m = match frame::read_frame(&mut *reader) {
                Ok(None) => Incoming::End,
                Err(e) => Incoming::Failed(e),
                Ok(Some((kind, body))) => {
                    reply_bytes.fetch_add(5 + body.len() as u64, Ordering::Relaxed);
                    if kind == F_DEDUP {
                        Incoming::Dedup(body)
                    } else {
                        debug_assert_eq!(kind, F_CONTROL);
                        match serde_json::from_slice(&body) {
                            Ok(r) => Incoming::Control(r),
                            Err(e) => Incoming::Failed(format!("malformed reply: {e}")),
                        }
                    }
                }
            };
            let last = matches!(m, Incoming::End | Incoming::Failed(_));
            if tx.send(m).is_err() || last {
                return;
            }
        })
        .map_err(|e| SyncError::Link {
            peer: peer.to_string(),
            what: "starting the reply reader",
            source: e,
        })
}

/// The files of `manifest` the receiver does not `have`, to read from under `src`, and
/// the progress with the ones it has counted done.
fn plan(src: &Path, manifest: &Manifest, have: &HashSet<u32>) -> (Vec<ToRead>, Progress) {
    let files: Vec<usize> = (0..manifest.entries.len())
        .filter(|&i| manifest.entries[i].kind == Kind::File)
        .collect();
    let mut p = Progress {
        files_total: files.len() as u64,
        bytes_total: manifest.file_bytes(),
        ..Progress::default()
    };
    let mut todo = Vec::new();
    for &i in &files {
        let e = &manifest.entries[i];
        if have.contains(&(i as u32)) {
            p.files_done += 1;
            p.bytes_done += e.size;
        } else {
            let path = if manifest.single_file {
                src.to_path_buf()
            } else {
                src.join(&e.path)
            };
            todo.push(ToRead {
                index: i as u32,
                rel: e.path.clone(),
                path,
                size: e.size,
            });
        }
    }
    (todo, p)
}

/// What the reader thread hands the protocol thread.
enum Chunk {
    Start {
        index: u32,
        path: String,
    },
    /// Whole segments: `ends` cut `data`, `fps` fingerprint each.
    Data {
        data: Vec<u8>,
        ends: Vec<usize>,
        fps: Vec<vargr_dedup::Prepared>,
    },
    End {
        size: u64,
        hash: String,
    },
    Failed(SyncError),
}

/// A file the reader thread is to send: its manifest index, its path in the manifest
/// and on disk, and the size the manifest gave it (a hint: the file may have changed).
struct ToRead {
    index: u32,
    rel: String,
    path: PathBuf,
    size: u64,
}

/// Chunks handed over at once: a hand-off per chunk cost a tree of small files several
/// futex wake-ups per file on each side of the channel.
const BATCH_CHUNKS: usize = 256;

/// Reads each file, cuts it into segments and fingerprints them, in order, handing the
/// chunks over in batches of up to [`BATCH_CHUNKS`] or about `chunk` bytes.
fn read_files(
    todo: Vec<ToRead>,
    segmenter: Box<dyn vargr_dedup::Segmenter>,
    chunk: usize,
    out: mpsc::SyncSender<Vec<Chunk>>,
) {
    let mut batch = Vec::new();
    let mut batch_bytes = 0usize;
    // False once the protocol thread has gone.
    let mut emit = |c: Chunk, flush: bool| -> bool {
        if let Chunk::Data { data, .. } = &c {
            batch_bytes += data.len();
        }
        batch.push(c);
        if flush || batch.len() >= BATCH_CHUNKS || batch_bytes >= chunk {
            batch_bytes = 0;
            return out.send(std::mem::take(&mut batch)).is_ok();
        }
        true
    };
    let last_file = todo.len().saturating_sub(1);
    for (k, f) in todo.into_iter().enumerate() {
        if !emit(
            Chunk::Start {
                index: f.index,
                path: f.rel,
            },
            false,
        ) {
            return;
        }
        let msg = match read_file(&f.path, f.size, &*segmenter, chunk, &mut emit) {
            Ok((size, hash)) => Chunk::End { size, hash },
            Err(e) => Chunk::Failed(e),
        };
        let failed = matches!(msg, Chunk::Failed(_));
        if !emit(msg, k == last_file || failed) {
            return;
        }
    }
}

/// Reads one file (`size` bytes by the manifest) in chunks of up to `chunk` bytes of
/// whole segments, handing each to `emit`. Returns its size and hash; the hash is empty
/// if `emit` said the protocol thread has gone.
fn read_file(
    path: &Path,
    size_hint: u64,
    segmenter: &dyn vargr_dedup::Segmenter,
    chunk: usize,
    emit: &mut impl FnMut(Chunk, bool) -> bool,
) -> Result<(u64, String), SyncError> {
    let mut file = File::open(path).map_err(|err| SyncError::io("opening", path, err))?;
    let mut hasher = blake3::Hasher::new();
    let mut size = 0u64;
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let mut buf = std::mem::take(&mut tail);
        let start = buf.len();
        // Room for what the manifest says is left (and a byte to see the end
        // by), zeroed: the file read into it in one call, its end seen by a
        // second. `read_to_end` into an empty buffer probed with 32 bytes and
        // doubled, eight reads for a typical source file.
        let left = size_hint.saturating_sub(size);
        let want = if left > 0 || size == 0 {
            (left as usize).saturating_add(1).min(chunk)
        } else {
            chunk // it grew since the manifest was made
        };
        buf.resize(start + want, 0);
        let (n, eof) = read_up_to(&mut file, &mut buf[start..], path)?;
        buf.truncate(start + n);
        hasher.update(&buf[start..]);
        size += n as u64;
        let ends = segmenter.boundaries(&buf, eof).unwrap_or_default();
        let used = ends.last().copied().unwrap_or(0);
        let mut fps = Vec::with_capacity(ends.len());
        let mut at = 0;
        for &end in &ends {
            fps.push(vargr_dedup::Prepared::of(&buf[at..end]));
            at = end;
        }
        tail = buf[used..].to_vec();
        buf.truncate(used);
        if !emit(
            Chunk::Data {
                data: buf,
                ends,
                fps,
            },
            false,
        ) {
            return Ok((size, String::new()));
        }
        if eof {
            return Ok((size, frame::file_hash(&hasher)));
        }
    }
}

/// Reads into `buf` until it is full or the file ends: the bytes read, and whether the
/// file ended.
fn read_up_to(file: &mut File, buf: &mut [u8], path: &Path) -> Result<(usize, bool), SyncError> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => return Ok((filled, true)),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(SyncError::io("reading", path, err)),
        }
    }
    Ok((filled, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `read_files` handed over: the batches, and per file its bytes, size and hash.
    fn read_all(files: Vec<ToRead>, chunk: usize) -> (usize, Vec<(Vec<u8>, u64, String)>) {
        let (tx, rx) = mpsc::sync_channel(2);
        let seg = vargr_dedup::segment::by_name("cdc:256:1k:4k").unwrap();
        let reader = std::thread::spawn(move || read_files(files, seg, chunk, tx));
        let batches: Vec<Vec<Chunk>> = rx.iter().collect();
        reader.join().unwrap();
        let mut got = Vec::new();
        for c in batches.iter().flatten() {
            match c {
                Chunk::Start { .. } => got.push((Vec::new(), 0, String::new())),
                Chunk::Data { data, .. } => got.last_mut().unwrap().0.extend_from_slice(data),
                Chunk::End { size, hash } => {
                    let last = got.last_mut().unwrap();
                    (last.1, last.2) = (*size, hash.clone());
                }
                Chunk::Failed(e) => panic!("{e}"),
            }
        }
        (batches.len(), got)
    }

    #[test]
    fn files_are_read_whole_whatever_size_the_manifest_gave_and_handed_over_in_batches() {
        let d = tempfile::tempdir().unwrap();
        // (actual size, the manifest's size): exact, grown, shrunk, empty, grown from
        // empty, larger than a chunk.
        let cases = [
            (5000, 5000),
            (300_000, 1000),
            (1000, 300_000),
            (0, 0),
            (70_000, 0),
            (200_000, 200_000),
        ];
        let mut files = Vec::new();
        let mut want = Vec::new();
        for (k, &(n, hint)) in cases.iter().enumerate() {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 7 + k * 13 % 251) as u8).collect();
            let path = d.path().join(format!("f{k}"));
            std::fs::write(&path, &bytes).unwrap();
            let mut h = blake3::Hasher::new();
            h.update(&bytes);
            want.push((bytes, n as u64, frame::file_hash(&h)));
            files.push(ToRead {
                index: k as u32,
                rel: format!("f{k}"),
                path,
                size: hint,
            });
        }
        // Many small files: fewer hand-offs than files.
        for k in 0..600 {
            let path = d.path().join(format!("small{k}"));
            let bytes = format!("file {k}\n").into_bytes();
            std::fs::write(&path, &bytes).unwrap();
            let mut h = blake3::Hasher::new();
            h.update(&bytes);
            want.push((bytes.clone(), bytes.len() as u64, frame::file_hash(&h)));
            files.push(ToRead {
                index: 10 + k,
                rel: format!("small{k}"),
                path,
                size: bytes.len() as u64,
            });
        }
        let (batches, got) = read_all(files, 64 << 10);
        assert_eq!(got.len(), want.len());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g == w, "file {k}: {} bytes read, {} on disk", g.1, w.1);
        }
        assert!(batches < 60, "{batches} hand-offs for {} files", want.len());
    }
}
