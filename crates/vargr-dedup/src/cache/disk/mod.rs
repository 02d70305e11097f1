//! [`DiskCache`]: the segment cache as a directory of append-only container files.
//!
//! Segments are appended, in the order they arrive, to the current container file; a
//! container closes when the next record would take it past
//! [`DiskConfig::container_bytes`]. Appending in arrival order is the seed's bet that
//! segments sent together are asked for together: when a record is read, the chunk of
//! the container around it ([`DiskConfig::chunk_bytes`]) is loaded and kept, and its
//! neighbours then come from memory (the seed's demand-paged segment chunks).
//!
//! A segment already held under the same full fingerprint is not written again; its
//! container is marked used instead, so what keeps being sent stays cached.
//!
//! Every record carries a checksum (see `record.rs`), verified whenever it is read. At
//! open, a sealed container is indexed from its sidecar (`sidecar.rs`: 16 bytes a record,
//! written when the container was sealed), so opening a full cache reads about 1 % of
//! it. A container without a good sidecar (the newest, or one whose sidecar is damaged
//! or stale) is read through once: good records go into the index and the Bloom filter;
//! a bad record is dropped; a bad length, a torn tail (a crash mid-write) or two bad
//! records in a row cut the container at the first bad byte, since what follows can no
//! longer be framed. A record that fails its checksum when read (damage the open did not
//! read, or damage after it) is dropped and reported as a miss: the protocol then asks
//! the peer for it again.
//!
//! Limits: a container is the unit of eviction. Beyond [`DiskConfig::disk_bytes`] the
//! least recently used container file is deleted; beyond [`DiskConfig::memory_bytes`] the
//! least recently used container's chunks are dropped from memory (the seed's working-set
//! replacement: one timestamp per container, a linear scan to find the oldest).
//! Recency survives a reopen: the closer saves the containers' use order (`recency`).
//!
//! Writes are buffered ([`DiskConfig::write_buffer_bytes`]) and written on
//! [`DiskCache::flush`] and on drop; nothing is fsynced unless [`DiskCache::sync`] is
//! called, since a crash costs at most resends, never wrong bytes.

mod scan;
pub(super) mod sidecar;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use rustc_hash::FxHashMap;

use super::bloom::{bloom_model, Bloom};
use super::config::DiskConfig;
use super::index::{sweep_due, Index, Loc};
use super::lock::{self, DirLock};
use super::record::{self, Header, HEADER_LEN, REC_HEAD, REC_OVERHEAD};
use super::stats::{AgeHistogram, BloomStats, CacheStats, Counters, Warnings};
use super::{CacheError, SegmentCache};
use crate::fp::{Fingerprint, FpBits};

/// One container file, as known in memory.
#[derive(Debug)]
struct Container {
    path: PathBuf,
    /// Bytes the cache had written over its life when this container began.
    start: u64,
    /// Bytes in the container, the write buffer included.
    len: u64,
    /// Index entries that point here.
    live: u64,
    payload: u64,
    /// Last read or write (for LRU).
    stamp: u64,
    /// Loaded read-ahead chunks by chunk number.
    chunks: FxHashMap<u32, Bytes>,
}

impl Container {
    fn chunk_bytes(&self) -> u64 {
        self.chunks.values().map(|c| c.len() as u64).sum()
    }
}

/// The container being appended to.
#[derive(Debug)]
struct Writer {
    seq: u32,
    file: File,
    buf: Vec<u8>,
    /// Bytes of the container already in the file.
    flushed: u64,
    /// Every record of the container, for its index when it is sealed.
    records: Vec<sidecar::Entry>,
}

/// The on-disk segment cache. See the module docs; one per directory (a lock file keeps
/// other openers out), shared within a process through [`super::SharedCache`].
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    cfg: DiskConfig,
    containers: BTreeMap<u32, Container>,
    writer: Option<Writer>,
    next_seq: u64,
    /// Bytes written over the cache's life (headers included): the clock of hit ages.
    written: u64,
    disk_used: u64,
    chunk_mem: u64,
    index: Index,
    /// Index entries whose container is gone.
    stale: u64,
    bloom: Bloom,
    lookups: Cell<u64>,
    positives: Cell<u64>,
    false_positives: Cell<u64>,
    tick: u64,
    counters: Counters,
    ages: AgeHistogram,
    warnings: Warnings,
    /// The newest container's records while opening, for the writer that resumes it.
    resume_records: Vec<sidecar::Entry>,
    _lock: DirLock,
}

/// Names `path` and what was being done in an I/O error (formatted only on error).
fn io_err<'a>(path: &'a Path, what: &'a str) -> impl FnOnce(io::Error) -> CacheError + 'a {
    move |source| CacheError::Io {
        path: format!("{} ({what})", path.display()),
        source,
    }
}

/// The file holding the containers' use order between runs, and its first line.
const RECENCY: &str = "recency";
const RECENCY_HEAD: &str = "vargr segment cache recency 1";

fn container_name(seq: u32) -> String {
    format!("{seq:016x}.vgc")
}

/// The sequence number of a container file name, if it is one.
fn parse_container_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".vgc")?;
    // Lowercase only, as written: one name per container number.
    let digit = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if hex.len() != 16 || !hex.bytes().all(digit) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

impl DiskCache {
    /// Opens (creating if needed) the cache in `dir`: takes the directory's lock, indexes
    /// every container (from its sidecar index when sealed, else by reading it), rebuilds
    /// the Bloom filter, and resumes appending to the newest container if it has room.
    pub fn open(dir: impl AsRef<Path>, cfg: DiskConfig) -> Result<DiskCache, CacheError> {
        cfg.validate()?;
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(io_err(&dir, "creating the directory"))?;
        let lock = lock::acquire(&dir)?;
        let bloom = Bloom::new(
            cfg.bloom_entries(),
            cfg.bloom_bits_per_entry,
            cfg.bloom_hashes,
        );
        let index = Index::new(cfg.bits);
        let mut c = DiskCache {
            dir,
            cfg,
            containers: BTreeMap::new(),
            writer: None,
            next_seq: 0,
            written: 0,
            disk_used: 0,
            chunk_mem: 0,
            index,
            stale: 0,
            bloom,
            lookups: Cell::new(0),
            positives: Cell::new(0),
            false_positives: Cell::new(0),
            tick: 0,
            counters: Counters::default(),
            ages: AgeHistogram::default(),
            warnings: Warnings::default(),
            resume_records: Vec::new(),
            _lock: lock,
        };
        c.scan_dir()?;
        c.load_recency();
        c.resume_writer()?;
        c.enforce_disk_limit()?;
        Ok(c)
    }

    /// Restores the containers' use order saved by the last closer ([`RECENCY`]), so
    /// what kept being read outlives what did not across runs too. Containers it does
    /// not name (new since) count as the most recent, in creation order.
    fn load_recency(&mut self) {
        let Ok(text) = fs::read_to_string(self.dir.join(RECENCY)) else {
            return;
        };
        let mut lines = text.lines();
        if lines.next() != Some(RECENCY_HEAD) {
            return;
        }
        let mut tick = 0u64;
        let mut named = std::collections::HashSet::new();
        for seq in lines.filter_map(|l| l.trim().parse::<u32>().ok()) {
            if let Some(c) = self.containers.get_mut(&seq) {
                if named.insert(seq) {
                    tick += 1;
                    c.stamp = tick;
                }
            }
        }
        for (seq, c) in self.containers.iter_mut() {
            if !named.contains(seq) {
                tick += 1;
                c.stamp = tick;
            }
        }
        self.tick = self.tick.max(tick);
    }

    /// Saves the containers' use order, oldest first (a failure only loses it).
    fn save_recency(&self) {
        let mut order: Vec<(u64, u32)> =
            self.containers.iter().map(|(&s, c)| (c.stamp, s)).collect();
        order.sort_unstable();
        let mut text = format!("{RECENCY_HEAD}\n");
        for (_, seq) in order {
            text.push_str(&format!("{seq}\n"));
        }
        let tmp = self.dir.join(format!("{RECENCY}.tmp"));
        if fs::write(&tmp, text).is_ok() {
            let _ = fs::rename(&tmp, self.dir.join(RECENCY));
        }
    }

    /// Opens the cache of one peer, `root/peer/`: every transfer to and from that peer
    /// shares it. `peer` must be a plain name (letters, digits, `.-_:@`).
    pub fn open_for_peer(
        root: impl AsRef<Path>,
        peer: &str,
        cfg: DiskConfig,
    ) -> Result<DiskCache, CacheError> {
        DiskCache::open(lock::peer_dir(root.as_ref(), peer)?, cfg)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &DiskConfig {
        &self.cfg
    }

    /// Writes buffered records to the current container file.
    pub fn flush(&mut self) -> Result<(), CacheError> {
        let Some(w) = self.writer.as_mut() else {
            return Ok(());
        };
        if w.buf.is_empty() {
            return Ok(());
        }
        if let Err(e) = w.file.write_all(&w.buf) {
            // What was buffered is lost: cut the file back to its last good end and
            // start a new container next time. Index entries into the lost part are
            // found past the end on lookup and dropped.
            let _ = w.file.set_len(w.flushed);
            let lost = w.buf.len() as u64;
            let seq = w.seq;
            self.writer = None;
            let cont = self.containers.get_mut(&seq).expect("writer's container");
            cont.len -= lost;
            self.disk_used -= lost;
            let err = io_err(&cont.path, "appending records");
            return Err(err(e));
        }
        w.flushed += w.buf.len() as u64;
        w.buf.clear();
        Ok(())
    }

    /// [`DiskCache::flush`], then asks the OS to put the current container on disk.
    pub fn sync(&mut self) -> Result<(), CacheError> {
        self.flush()?;
        if let Some(w) = &self.writer {
            let path = &self.containers[&w.seq].path;
            w.file.sync_data().map_err(io_err(path, "syncing"))?;
        }
        Ok(())
    }

    pub fn stats(&self) -> CacheStats {
        let index = self.index.bytes();
        let wbuf = self.writer.as_ref().map_or(0, |w| w.buf.capacity() as u64);
        let lookups = self.lookups.get();
        let positives = self.positives.get();
        let fps = self.false_positives.get();
        let negatives = lookups - (positives - fps);
        let bits_per_entry = (self.bloom.bytes() * 8) as f64 / self.index.len().max(1) as f64;
        let mut s = CacheStats {
            kind: "disk",
            fp_bits: self.cfg.bits.get(),
            segments: self.index.len() as u64 - self.stale,
            bytes: self.containers.values().map(|c| c.payload).sum(),
            containers: self.containers.len() as u64,
            memory_bytes: index
                + self.bloom.bytes()
                + self.chunk_mem
                + wbuf
                + self.containers.len() as u64 * 128,
            index_bytes: index,
            chunk_bytes: self.chunk_mem,
            disk_bytes: self.disk_used,
            bloom: Some(BloomStats {
                bytes: self.bloom.bytes(),
                hashes: self.bloom.hashes(),
                sized_for: self.bloom.sized_for(),
                lookups,
                positives,
                false_positives: fps,
                measured_rate: if negatives == 0 {
                    0.0
                } else {
                    fps as f64 / negatives as f64
                },
                model_rate: bloom_model(bits_per_entry, self.bloom.hashes()),
            }),
            hit_ages: self.ages.buckets(),
            warnings: self.warnings.list(),
            ..CacheStats::default()
        };
        self.counters.fill(&mut s);
        s
    }

    /// Whether `key` (a truncated fingerprint) is in the index and its container alive.
    fn is_live(&self, key: u64) -> bool {
        self.index
            .get(key)
            .is_some_and(|s| self.containers.contains_key(&s.loc.unit()))
    }

    /// Accounts for the index entry `old` having been overwritten or removed; whether its
    /// container was still there.
    fn forget(&mut self, old: Loc) -> bool {
        match self.containers.get_mut(&old.unit()) {
            Some(c) => {
                c.live -= 1;
                true
            }
            None => {
                self.stale -= 1;
                false
            }
        }
    }

    fn warn(&mut self, w: String) {
        self.warnings.push(w);
    }

    /// Closes the current container and starts the next one.
    fn roll(&mut self) -> Result<(), CacheError> {
        self.flush()?;
        if let Some(w) = self.writer.take() {
            self.write_sidecar(w.seq, w.records);
        }
        let seq = u32::try_from(self.next_seq).map_err(|_| CacheError::Config {
            what: format!(
                "{}: container numbers exhausted; remove the directory",
                self.dir.display()
            ),
        })?;
        let path = self.dir.join(container_name(seq));
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&path)
            .map_err(io_err(&path, "creating a container"))?;
        self.next_seq += 1;
        let header = Header {
            bits: self.cfg.bits.get(),
            seq: u64::from(seq),
            start: self.written,
        };
        let mut buf = Vec::with_capacity(self.cfg.write_buffer_bytes as usize + 4096);
        buf.extend_from_slice(&header.encode());
        self.tick += 1;
        self.containers.insert(
            seq,
            Container {
                path,
                start: self.written,
                len: HEADER_LEN as u64,
                live: 0,
                payload: 0,
                stamp: self.tick,
                chunks: FxHashMap::default(),
            },
        );
        self.written += HEADER_LEN as u64;
        self.disk_used += HEADER_LEN as u64;
        self.writer = Some(Writer {
            seq,
            file,
            buf,
            flushed: 0,
            records: Vec::new(),
        });
        Ok(())
    }

    /// Saves the record index of sealed container `seq` beside it; a failure only costs
    /// the next open a scan of this container.
    fn write_sidecar(&mut self, seq: u32, entries: Vec<sidecar::Entry>) {
        let Some(cont) = self.containers.get(&seq) else {
            return;
        };
        let path = sidecar::path_for(&cont.path);
        let body = sidecar::Sidecar {
            seq: u64::from(seq),
            container_len: cont.len,
            entries,
        }
        .encode();
        let mut tmp = path.clone().into_os_string();
        tmp.push(".tmp");
        let r = fs::write(&tmp, &body).and_then(|()| fs::rename(&tmp, &path));
        if let Err(e) = r {
            let _ = fs::remove_file(&tmp);
            self.warn(format!("{}: could not save the index: {e}", path.display()));
        }
    }

    /// Deletes least recently used containers until the files fit in the disk limit.
    fn enforce_disk_limit(&mut self) -> Result<(), CacheError> {
        let mut result = Ok(());
        while self.disk_used > self.cfg.disk_bytes {
            let cur = self.writer.as_ref().map(|w| w.seq);
            let victim = self
                .containers
                .iter()
                .filter(|(s, _)| Some(**s) != cur)
                .min_by_key(|(_, c)| c.stamp)
                .map(|(s, _)| *s);
            let Some(seq) = victim else {
                break;
            };
            let c = self.containers.remove(&seq).expect("victim exists");
            self.chunk_mem -= c.chunk_bytes();
            self.disk_used -= c.len;
            self.stale += c.live;
            self.counters.disk_evictions += 1;
            let _ = fs::remove_file(sidecar::path_for(&c.path));
            if let Err(e) = fs::remove_file(&c.path) {
                if e.kind() != io::ErrorKind::NotFound && result.is_ok() {
                    result = Err(io_err(&c.path, "removing an evicted container")(e));
                }
            }
        }
        self.maybe_sweep();
        result
    }

    /// Drops stale index entries and rebuilds the Bloom filter without them, once they
    /// are a quarter of the index (amortised: each sweep follows that many evictions).
    fn maybe_sweep(&mut self) {
        if !sweep_due(self.stale, self.index.len()) {
            return;
        }
        let (lo, hi) = match (
            self.containers.first_key_value(),
            self.containers.last_key_value(),
        ) {
            (Some((&lo, _)), Some((&hi, _))) => (lo, hi),
            _ => (0, 0),
        };
        let mut alive = vec![false; (hi - lo) as usize + 1];
        for &s in self.containers.keys() {
            alive[(s - lo) as usize] = true;
        }
        self.index.retain(|s| {
            s.loc
                .unit()
                .checked_sub(lo)
                .and_then(|i| alive.get(i as usize).copied())
                .unwrap_or(false)
        });
        self.stale = 0;
        self.bloom.clear();
        for k in self.index.keys() {
            self.bloom.insert(k);
        }
    }

    /// Drops chunks of least recently used containers until `need` more bytes fit.
    fn make_room(&mut self, need: u64) {
        let fixed = u64::from(self.cfg.write_buffer_bytes);
        while self.chunk_mem + need + fixed > self.cfg.memory_bytes {
            let victim = self
                .containers
                .iter()
                .filter(|(_, c)| !c.chunks.is_empty())
                .min_by_key(|(_, c)| c.stamp)
                .map(|(s, _)| *s);
            let Some(seq) = victim else {
                break;
            };
            let c = self.containers.get_mut(&seq).expect("victim exists");
            self.chunk_mem -= c.chunk_bytes();
            c.chunks.clear();
            self.counters.memory_evictions += 1;
        }
    }

    /// The bytes of the record at `off` in container `seq`, unverified; `None` if they
    /// are not all there.
    fn read_record(&mut self, seq: u32, off: u64) -> Result<Option<Bytes>, CacheError> {
        let cont = &self.containers[&seq];
        if off + REC_OVERHEAD as u64 > cont.len {
            return Ok(None);
        }
        let mut flushed = cont.len;
        if let Some(w) = self.writer.as_ref().filter(|w| w.seq == seq) {
            if off >= w.flushed {
                let b = &w.buf[(off - w.flushed) as usize..];
                let n = REC_OVERHEAD + record::head_len(b) as usize;
                return Ok((n <= b.len()).then(|| Bytes::copy_from_slice(&b[..n])));
            }
            flushed = w.flushed;
        }
        let cb = u64::from(self.cfg.chunk_bytes);
        let chunk = self.chunk(seq, (off / cb) as u32, flushed)?;
        let rel = (off % cb) as usize;
        if chunk.len() >= rel + REC_HEAD {
            let n = REC_OVERHEAD + record::head_len(&chunk[rel..]) as usize;
            if rel + n <= chunk.len() {
                return Ok(Some(chunk.slice(rel..rel + n)));
            }
        }
        // The record runs past the chunk: read it alone.
        self.read_direct(seq, off, flushed)
    }

    /// Chunk `ci` of container `seq` (of which `flushed` bytes are in the file), loaded
    /// if absent or shorter than the file now holds.
    fn chunk(&mut self, seq: u32, ci: u32, flushed: u64) -> Result<Bytes, CacheError> {
        let cb = u64::from(self.cfg.chunk_bytes);
        let start = u64::from(ci) * cb;
        let want = cb.min(flushed.saturating_sub(start));
        let cont = self.containers.get_mut(&seq).expect("caller checked");
        if let Some(c) = cont.chunks.get(&ci) {
            if c.len() as u64 >= want {
                return Ok(c.clone());
            }
        }
        if let Some(old) = cont.chunks.remove(&ci) {
            self.chunk_mem -= old.len() as u64;
        }
        self.make_room(want);
        let cont = self.containers.get_mut(&seq).expect("caller checked");
        let mut buf = vec![0u8; want as usize];
        let n = read_file_at(&cont.path, &mut buf, start)?;
        buf.truncate(n);
        let chunk = Bytes::from(buf);
        self.chunk_mem += chunk.len() as u64;
        cont.chunks.insert(ci, chunk.clone());
        self.counters.chunk_loads += 1;
        Ok(chunk)
    }

    fn read_direct(&mut self, seq: u32, off: u64, end: u64) -> Result<Option<Bytes>, CacheError> {
        let path = &self.containers[&seq].path;
        let mut head = [0u8; REC_HEAD];
        if read_file_at(path, &mut head, off)? < REC_HEAD {
            return Ok(None);
        }
        let n = REC_OVERHEAD as u64 + u64::from(record::head_len(&head));
        if off + n > end {
            return Ok(None);
        }
        let mut buf = vec![0u8; n as usize];
        let got = read_file_at(path, &mut buf, off)?;
        Ok((got == buf.len()).then(|| Bytes::from(buf)))
    }

    /// Removes the damaged record `loc` found under `key`.
    fn drop_damaged(&mut self, key: u64, loc: Loc, why: &str) {
        self.index.remove(key);
        self.forget(loc);
        self.counters.damaged_records += 1;
        let path = self.containers[&loc.unit()].path.display().to_string();
        self.warn(format!(
            "{path}: record at offset {} {why}; dropped",
            loc.offset()
        ));
    }
}

/// Reads up to `buf.len()` bytes of `path` at `off`; fewer only at the end of the file.
fn read_file_at(path: &Path, buf: &mut [u8], off: u64) -> Result<usize, CacheError> {
    let len = buf.len();
    let what = || format!("reading {len} bytes at offset {off}");
    let file = File::open(path).map_err(|e| io_err(path, &what())(e))?;
    read_at(&file, buf, off).map_err(|e| io_err(path, &what())(e))
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], off + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(not(unix))]
fn read_at(mut file: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    use std::io::{Read, Seek, SeekFrom};
    file.seek(SeekFrom::Start(off))?;
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl SegmentCache for DiskCache {
    fn bits(&self) -> FpBits {
        self.cfg.bits
    }

    fn may_contain(&self, fp: Fingerprint) -> bool {
        let key = fp.0 & self.cfg.bits.mask();
        self.lookups.set(self.lookups.get() + 1);
        if !self.bloom.contains(key) {
            return false;
        }
        self.positives.set(self.positives.get() + 1);
        if !self.is_live(key) {
            self.false_positives.set(self.false_positives.get() + 1);
        }
        true
    }

    fn get(&mut self, fp: Fingerprint) -> Result<Option<Bytes>, CacheError> {
        let key = fp.0 & self.cfg.bits.mask();
        let Some(slot) = self.index.get(key) else {
            self.counters.misses += 1;
            return Ok(None);
        };
        let loc = slot.loc;
        let (seq, off) = (loc.unit(), u64::from(loc.offset()));
        if !self.containers.contains_key(&seq) {
            self.index.remove(key);
            self.stale -= 1;
            self.counters.misses += 1;
            return Ok(None);
        }
        let why = match self.read_record(seq, off)? {
            None => "runs past the end of the file",
            Some(rec) => match record::verify(&rec) {
                Some(full) if full == slot.full => {
                    self.tick += 1;
                    let cont = self.containers.get_mut(&seq).expect("checked above");
                    cont.stamp = self.tick;
                    self.ages.record(self.written - (cont.start + off));
                    self.counters.hits += 1;
                    return Ok(Some(rec.slice(REC_HEAD..rec.len() - 4)));
                }
                Some(_) => "holds another fingerprint",
                None => "fails its checksum",
            },
        };
        self.counters.misses += 1;
        self.drop_damaged(key, loc, why);
        Ok(None)
    }

    fn insert(&mut self, full: Fingerprint, segment: &[u8]) -> Result<(), CacheError> {
        if segment.len() > self.cfg.max_segment_bytes as usize {
            return Err(CacheError::SegmentTooLarge {
                cache: self.dir.display().to_string(),
                len: segment.len(),
                max: self.cfg.max_segment_bytes as usize,
            });
        }
        self.counters.inserts += 1;
        let key = full.truncate(self.cfg.bits).0;
        if let Some(s) = self.index.get(key).filter(|s| s.full == full.0) {
            if let Some(c) = self.containers.get_mut(&s.loc.unit()) {
                // Already held: not written again, but its container counts as used.
                self.tick += 1;
                c.stamp = self.tick;
                self.counters.duplicates += 1;
                return Ok(());
            }
        }
        let n = (REC_OVERHEAD + segment.len()) as u64;
        let roll = match &self.writer {
            None => true,
            Some(w) => {
                let len = self.containers[&w.seq].len;
                len > HEADER_LEN as u64 && len + n > self.cfg.container_bytes
            }
        };
        if roll {
            self.roll()?;
        }
        let w = self.writer.as_mut().expect("rolled above");
        let seq = w.seq;
        record::append(&mut w.buf, full.0, segment);
        w.records.push(sidecar::Entry {
            full: full.0,
            off: self.containers[&seq].len as u32,
            len: segment.len() as u32,
        });
        let full_buf = w.buf.len() >= self.cfg.write_buffer_bytes as usize;
        self.tick += 1;
        let cont = self.containers.get_mut(&seq).expect("writer's container");
        let off = cont.len;
        cont.len += n;
        cont.live += 1;
        cont.payload += segment.len() as u64;
        cont.stamp = self.tick;
        self.disk_used += n;
        self.written += n;
        if let Some(old) = self.index.insert(full.0, Loc::new(seq, off as u32)) {
            if self.forget(old.loc) {
                self.counters.replaced += 1;
            }
        }
        self.bloom.insert(key);
        if full_buf {
            self.flush()?;
        }
        self.enforce_disk_limit()
    }

    fn flush(&mut self) -> Result<(), CacheError> {
        DiskCache::flush(self)
    }

    fn stats(&self) -> CacheStats {
        DiskCache::stats(self)
    }
}

impl Drop for DiskCache {
    /// Writes what is buffered and the containers' use order; call
    /// [`DiskCache::flush`] first to see its errors.
    fn drop(&mut self) {
        let _ = self.flush();
        self.save_recency();
    }
}
