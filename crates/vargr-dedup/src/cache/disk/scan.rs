//! Opening a cache directory: index every container, from its sidecar index if it has
//! a good one (see `sidecar.rs`), else by reading it through and keeping what verifies.

use std::fs::{self, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::PathBuf;

use rustc_hash::FxHashMap;

use super::sidecar::{self, Sidecar};
use super::{io_err, parse_container_name, Container, DiskCache, Writer};
use crate::cache::index::Loc;
use crate::cache::record::{self, Header, HeaderFault, HEADER_LEN, REC_HEAD, REC_OVERHEAD};
use crate::cache::CacheError;

impl DiskCache {
    /// Reads every container file in the directory, oldest first, so that where two
    /// records share an optimistic fingerprint the later one wins, as it did when written.
    pub(super) fn scan_dir(&mut self) -> Result<(), CacheError> {
        let dir = self.dir.clone();
        let mut found = Vec::new();
        let entries = fs::read_dir(&dir).map_err(io_err(&dir, "listing"))?;
        for entry in entries {
            let entry = entry.map_err(io_err(&dir, "listing"))?;
            let name = entry.file_name();
            let Some(seq) = name.to_str().and_then(parse_container_name) else {
                continue;
            };
            match u32::try_from(seq) {
                Ok(seq) => found.push((seq, entry.path())),
                Err(_) => self.warn(format!(
                    "{}: container number out of range; ignored",
                    entry.path().display()
                )),
            }
        }
        found.sort();
        for (seq, path) in found {
            self.resume_records = self.scan_container(seq, path)?;
        }
        self.next_seq = self
            .containers
            .keys()
            .next_back()
            .map_or(0, |&s| u64::from(s) + 1);
        self.tick = self.next_seq;
        self.written = self
            .containers
            .values()
            .map(|c| c.start + c.len)
            .max()
            .unwrap_or(0);
        Ok(())
    }

    /// Appends to the newest container if it has room, rather than leaving a small
    /// container behind on every run.
    pub(super) fn resume_writer(&mut self) -> Result<(), CacheError> {
        let Some((&seq, cont)) = self.containers.last_key_value() else {
            return Ok(());
        };
        if cont.len >= self.cfg.container_bytes {
            return Ok(());
        }
        let file = OpenOptions::new()
            .append(true)
            .open(&cont.path)
            .map_err(io_err(&cont.path, "opening for append"))?;
        // A container written to again gets a new index when it is sealed.
        let _ = fs::remove_file(sidecar::path_for(&cont.path));
        self.writer = Some(Writer {
            seq,
            file,
            buf: Vec::with_capacity(self.cfg.write_buffer_bytes as usize + 4096),
            flushed: cont.len,
            records: std::mem::take(&mut self.resume_records),
        });
        Ok(())
    }

    /// Indexes container `seq` at `path`: the records its sidecar lists, then by reading
    /// whatever follows them (everything, without a good sidecar). Returns its records.
    fn scan_container(
        &mut self,
        seq: u32,
        path: PathBuf,
    ) -> Result<Vec<sidecar::Entry>, CacheError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err(&path, "opening"))?;
        let file_len = file
            .metadata()
            .map_err(io_err(&path, "reading metadata"))?
            .len();
        let mut h = [0u8; HEADER_LEN];
        let header = if file_len < HEADER_LEN as u64 {
            Err("shorter than a container header")
        } else {
            (&file)
                .read_exact(&mut h)
                .map_err(io_err(&path, "reading the header"))?;
            match Header::decode(&h) {
                Ok(h) if h.seq == u64::from(seq) => Ok(h),
                Ok(_) => Err("header names another container"),
                Err(HeaderFault::Magic) => Err("not a vargr segment container (bad magic)"),
                Err(HeaderFault::Checksum) => Err("container header fails its checksum"),
                Err(HeaderFault::Version(found)) => {
                    return Err(CacheError::Version {
                        path: path.display().to_string(),
                        found,
                        supported: record::VERSION,
                    })
                }
            }
        };
        let header = match header {
            Ok(h) => h,
            Err(why) => {
                drop(file);
                self.counters.damaged_containers += 1;
                let removed = match fs::remove_file(&path) {
                    Ok(()) => "removed".to_string(),
                    Err(e) => format!("could not remove it: {e}"),
                };
                let _ = fs::remove_file(sidecar::path_for(&path));
                self.warn(format!("{}: {why}; {removed}", path.display()));
                return Ok(Vec::new());
            }
        };
        self.containers.insert(
            seq,
            Container {
                path: path.clone(),
                start: header.start,
                len: HEADER_LEN as u64,
                live: 0,
                payload: 0,
                stamp: u64::from(seq),
                chunks: FxHashMap::default(),
            },
        );

        // No record is larger than a container could be; a length beyond that is damage.
        let max_len = self
            .cfg
            .container_bytes
            .max(u64::from(self.cfg.max_segment_bytes));
        let mask = self.cfg.bits.mask();
        let mut records = Vec::new();
        let mut off = HEADER_LEN as u64;
        if let Some(side) = self.usable_sidecar(seq, &path, file_len, max_len) {
            for e in &side.entries {
                self.index_record(seq, e.full, e.off, u64::from(e.len), mask);
            }
            off = side.container_len;
            records = side.entries;
            (&file)
                .seek(SeekFrom::Start(off))
                .map_err(io_err(&path, "seeking past the indexed records"))?;
        }
        let mut r = BufReader::with_capacity(1 << 20, &file);
        let mut rec = Vec::new();
        // Offset of a bad record just skipped: a second in a row means we lost framing.
        let mut bad_at: Option<u64> = None;
        let mut cut: Option<(u64, String)> = None;
        while off < file_len {
            let left = file_len - off;
            if off > u64::from(u32::MAX) {
                cut = Some((off, "container longer than 4 GiB".to_string()));
                break;
            }
            if left < REC_OVERHEAD as u64 {
                self.counters.damaged_records += 1;
                cut = Some((
                    bad_at.unwrap_or(off),
                    format!("torn record of {left} bytes at offset {off}"),
                ));
                break;
            }
            rec.resize(REC_HEAD, 0);
            r.read_exact(&mut rec)
                .map_err(io_err(&path, "reading a record"))?;
            let len = u64::from(record::head_len(&rec));
            if len > max_len || REC_OVERHEAD as u64 + len > left {
                self.counters.damaged_records += 1;
                let why = if len > max_len {
                    format!("record at offset {off} has an impossible length {len}")
                } else {
                    format!("record at offset {off} claims {len} bytes, {left} remain (torn)")
                };
                cut = Some((bad_at.unwrap_or(off), why));
                break;
            }
            rec.resize(REC_OVERHEAD + len as usize, 0);
            r.read_exact(&mut rec[REC_HEAD..])
                .map_err(io_err(&path, "reading a record"))?;
            match record::verify(&rec) {
                Some(full) => {
                    bad_at = None;
                    self.index_record(seq, full, off as u32, len, mask);
                    records.push(sidecar::Entry {
                        full,
                        off: off as u32,
                        len: len as u32,
                    });
                }
                None => {
                    self.counters.damaged_records += 1;
                    if let Some(first) = bad_at {
                        cut = Some((
                            first,
                            format!("records at offsets {first} and {off} fail their checksums"),
                        ));
                        break;
                    }
                    self.warn(format!(
                        "{}: record at offset {off} fails its checksum; dropped",
                        path.display()
                    ));
                    bad_at = Some(off);
                }
            }
            off += REC_OVERHEAD as u64 + len;
        }
        drop(r);

        let mut len = file_len;
        if let Some((at, why)) = cut {
            // What follows `at` cannot be framed: cut it so appends start clean.
            self.counters.damaged_containers += 1;
            self.warn(format!(
                "{}: {why}; the rest of the container ({} bytes) dropped",
                path.display(),
                file_len - at
            ));
            file.set_len(at)
                .map_err(io_err(&path, "cutting a damaged tail"))?;
            len = at;
        }
        let c = self.containers.get_mut(&seq).expect("inserted above");
        c.len = len;
        self.disk_used += len;
        Ok(records)
    }

    fn index_record(&mut self, seq: u32, full: u64, off: u32, len: u64, mask: u64) {
        if let Some(old) = self.index.insert(full, Loc::new(seq, off)) {
            self.forget(old.loc);
        }
        self.bloom.insert(full & mask);
        let c = self.containers.get_mut(&seq).expect("indexed container");
        c.live += 1;
        c.payload += len;
    }

    /// The sidecar of container `seq`, if it is intact and agrees with the container:
    /// its records lie in order inside the `file_len` bytes the file holds.
    fn usable_sidecar(
        &mut self,
        seq: u32,
        path: &std::path::Path,
        file_len: u64,
        max_len: u64,
    ) -> Option<Sidecar> {
        let side_path = sidecar::path_for(path);
        let bytes = fs::read(&side_path).ok()?;
        let side = Sidecar::decode(&bytes).filter(|s| {
            let mut end = HEADER_LEN as u64;
            s.seq == u64::from(seq)
                && s.container_len <= file_len
                && s.entries.iter().all(|e| {
                    let ok = u64::from(e.off) == end && u64::from(e.len) <= max_len;
                    end = u64::from(e.off) + REC_OVERHEAD as u64 + u64::from(e.len);
                    ok
                })
                && end == s.container_len
        });
        if side.is_none() {
            let _ = fs::remove_file(&side_path);
            self.warn(format!(
                "{}: damaged or stale; the container is read through instead",
                side_path.display()
            ));
        }
        side
    }
}
