//! Opening a cache directory: read every container, keep what verifies.

use std::fs::{self, OpenOptions};
use std::io::{BufReader, Read};
use std::path::PathBuf;

use rustc_hash::FxHashMap;

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
            self.scan_container(seq, path)?;
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
        self.writer = Some(Writer {
            seq,
            file,
            buf: Vec::with_capacity(self.cfg.write_buffer_bytes as usize + 4096),
            flushed: cont.len,
        });
        Ok(())
    }

    /// Reads container `seq` at `path`, indexing each good record.
    fn scan_container(&mut self, seq: u32, path: PathBuf) -> Result<(), CacheError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err(&path, "opening"))?;
        let file_len = file
            .metadata()
            .map_err(io_err(&path, "reading metadata"))?
            .len();
        let mut r = BufReader::with_capacity(1 << 20, &file);

        let mut h = [0u8; HEADER_LEN];
        let header = if file_len < HEADER_LEN as u64 {
            Err("shorter than a container header")
        } else {
            r.read_exact(&mut h)
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
                drop(r);
                drop(file);
                self.counters.damaged_containers += 1;
                let removed = match fs::remove_file(&path) {
                    Ok(()) => "removed".to_string(),
                    Err(e) => format!("could not remove it: {e}"),
                };
                self.warn(format!("{}: {why}; {removed}", path.display()));
                return Ok(());
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
        let mut rec = Vec::new();
        let mut off = HEADER_LEN as u64;
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
                    let key = full & mask;
                    if let Some(old) = self.index.insert(full, Loc::new(seq, off as u32)) {
                        self.forget(old.loc);
                    }
                    self.bloom.insert(key);
                    let c = self.containers.get_mut(&seq).expect("inserted above");
                    c.live += 1;
                    c.payload += len;
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
        Ok(())
    }
}
