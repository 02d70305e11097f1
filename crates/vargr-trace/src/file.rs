//! Trace files: what one process's collectors recorded, with what is needed to read it
//! on another machine (collector names, thread labels, clock calibration).
//!
//! Layout (version 2): the magic `VARGRTR2`, a little-endian `u32` header length, a JSON
//! header, each thread's records (32 bytes each) in header order, then the 32-byte
//! BLAKE3 hash of everything before it. Files come from crashed or foreign processes,
//! so reading is bounded and every inconsistency is an error naming the file and what
//! is wrong, never a panic or a huge allocation.
//!
//! The checksum is there because the structure alone cannot tell a damaged file: a
//! flipped bit in a record's timestamps or in a header number still parses, and the
//! report built on it would be quietly wrong. Version 1 files (`VARGRTR1`, the same
//! layout without the checksum) are still read, unchecked, since nothing else changed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::clock::{Alignment, Calibration};
use crate::record::Record;
use crate::usage::ProcessUsage;

const MAGIC: &[u8; 8] = b"VARGRTR2";
/// Version 1: no checksum.
const MAGIC_V1: &[u8; 8] = b"VARGRTR1";
/// The BLAKE3 hash at the end of a version 2 file.
const CHECKSUM_LEN: usize = 32;
/// Largest header accepted.
const MAX_HEADER: usize = 16 << 20;

/// One thread's records.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadTrace {
    pub label: String,
    pub rank: Option<u32>,
    /// Records lost to ring overwrites before they were read.
    pub lost: u64,
    pub records: Vec<Record>,
}

/// One process's trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceFile {
    /// What the process was (e.g. `ranks 0..4`).
    pub process: String,
    pub host: String,
    pub pid: u32,
    pub clock: Calibration,
    /// This process's clock relative to the job's or network's root clock.
    pub align: Alignment,
    /// Collector names by id.
    pub collectors: Vec<String>,
    pub threads: Vec<ThreadTrace>,
    /// What the process's rank threads did with the CPU (absent in older files and in
    /// processes that ran no ranks). Boxed: most files are read and passed around
    /// without it.
    pub usage: Option<Box<ProcessUsage>>,
}

#[derive(Serialize, Deserialize)]
struct Header {
    process: String,
    host: String,
    pid: u32,
    clock: Calibration,
    /// Absent in files written before clocks were aligned: the root's own clock.
    #[serde(default)]
    align: Alignment,
    collectors: Vec<String>,
    threads: Vec<ThreadHeader>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    usage: Option<Box<ProcessUsage>>,
}

#[derive(Serialize, Deserialize)]
struct ThreadHeader {
    label: String,
    rank: Option<u32>,
    lost: u64,
    records: u64,
}

/// Replaces `path` with `bytes` through a temporary name and a rename, so readers (a
/// report, `vargr top`) never see half a file.
///
/// The temporary file is created new (`O_EXCL | O_NOFOLLOW`) under a name of this
/// process and call: a file or link planted beside `path` is never written through
/// (a fixed `path.tmp` let anyone who could write the directory first redirect it), and
/// two writers never share one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".tmp{}-{n}", std::process::id()));
    let tmp = PathBuf::from(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    let r = f
        .write_all(bytes)
        .and_then(|()| std::fs::rename(&tmp, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a vargr trace file ({what})")]
    Format { path: PathBuf, what: String },
    /// The file's checksum does not match its bytes: changed or cut after it was
    /// written (a disk error, a partial copy, an edit).
    #[error("{path}: damaged trace file ({what})")]
    Damaged { path: PathBuf, what: String },
    /// The directory given holds no run's traces.
    #[error("{path}: {what}")]
    NoRun { path: PathBuf, what: String },
}

impl TraceFile {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let header = Header {
            process: self.process.clone(),
            host: self.host.clone(),
            pid: self.pid,
            clock: self.clock,
            align: self.align,
            collectors: self.collectors.clone(),
            threads: self
                .threads
                .iter()
                .map(|t| ThreadHeader {
                    label: t.label.clone(),
                    rank: t.rank,
                    lost: t.lost,
                    records: t.records.len() as u64,
                })
                .collect(),
            usage: self.usage.clone(),
        };
        let h = serde_json::to_vec(&header).expect("a trace header always serializes");
        let n: usize = self.threads.iter().map(|t| t.records.len()).sum();
        let mut out = Vec::with_capacity(12 + h.len() + n * Record::LEN + CHECKSUM_LEN);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(h.len() as u32).to_le_bytes());
        out.extend_from_slice(&h);
        for t in &self.threads {
            for r in &t.records {
                r.encode(&mut out);
            }
        }
        let sum = blake3::hash(&out);
        out.extend_from_slice(sum.as_bytes());
        out
    }

    /// Parses a file's bytes; `path` only names it in errors.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<TraceFile, FileError> {
        let bad = |what: String| FileError::Format {
            path: path.to_path_buf(),
            what,
        };
        let bytes = match bytes.get(..8) {
            Some(m) if m == MAGIC => {
                let Some(end) = bytes.len().checked_sub(CHECKSUM_LEN).filter(|&e| e >= 12) else {
                    return Err(FileError::Damaged {
                        path: path.to_path_buf(),
                        what: format!("cut short: {} bytes", bytes.len()),
                    });
                };
                let (body, sum) = bytes.split_at(end);
                if blake3::hash(body).as_bytes() != sum {
                    return Err(FileError::Damaged {
                        path: path.to_path_buf(),
                        what: "its BLAKE3 checksum does not match its contents".into(),
                    });
                }
                body
            }
            Some(m) if m == MAGIC_V1 && bytes.len() >= 12 => bytes,
            _ => return Err(bad("missing the VARGRTR2 (or VARGRTR1) magic".into())),
        };
        let hlen = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
        if hlen > MAX_HEADER || 12 + hlen > bytes.len() {
            return Err(bad(format!(
                "header of {hlen} bytes does not fit a {}-byte file",
                bytes.len()
            )));
        }
        let header: Header = serde_json::from_slice(&bytes[12..12 + hlen])
            .map_err(|e| bad(format!("header: {e}")))?;
        let body = &bytes[12 + hlen..];
        let want: u64 = header
            .threads
            .iter()
            .try_fold(0u64, |a, t| a.checked_add(t.records))
            .ok_or_else(|| bad("record counts overflow".into()))?;
        if want.checked_mul(Record::LEN as u64) != Some(body.len() as u64) {
            return Err(bad(format!(
                "the header lists {want} records, the file holds {} bytes of them",
                body.len()
            )));
        }
        let mut at = 0;
        let mut threads = Vec::with_capacity(header.threads.len());
        for t in header.threads {
            let n = t.records as usize;
            let records = body[at..at + n * Record::LEN]
                .chunks_exact(Record::LEN)
                .map(|c| Record::decode(c).expect("exact chunks"))
                .collect();
            at += n * Record::LEN;
            threads.push(ThreadTrace {
                label: t.label,
                rank: t.rank,
                lost: t.lost,
                records,
            });
        }
        Ok(TraceFile {
            process: header.process,
            host: header.host,
            pid: header.pid,
            clock: header.clock,
            align: header.align,
            collectors: header.collectors,
            threads,
            usage: header.usage,
        })
    }

    /// Writes the file atomically (a temporary name, then a rename).
    pub fn write(&self, path: &Path) -> Result<(), FileError> {
        let io = |source| FileError::Io {
            path: path.to_path_buf(),
            source,
        };
        write_atomic(path, &self.encode()).map_err(io)
    }

    pub fn read(path: &Path) -> Result<TraceFile, FileError> {
        let bytes = std::fs::read(path).map_err(|source| FileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        TraceFile::decode(&bytes, path)
    }

    /// Every `*.vtr` file of a directory, in name order.
    /// The trace files of one run (the DIR of `vargr run --trace DIR`): a directory
    /// that is missing, is not one, or holds no trace file is an error that says so,
    /// for every front end alike.
    pub fn read_run(dir: &Path) -> Result<Vec<TraceFile>, FileError> {
        let no_run = |what: String| FileError::NoRun {
            path: dir.to_path_buf(),
            what,
        };
        if !dir.exists() {
            return Err(no_run("no such directory".into()));
        }
        if !dir.is_dir() {
            return Err(no_run(
                "not a directory (give the DIR of `vargr run --trace DIR`)".into(),
            ));
        }
        let files = TraceFile::read_dir(dir)?;
        if files.is_empty() {
            return Err(no_run(format!(
                "no trace files (*.vtr) here; write them with `vargr run --trace {} -- PROG`",
                dir.display()
            )));
        }
        Ok(files)
    }

    pub fn read_dir(dir: &Path) -> Result<Vec<TraceFile>, FileError> {
        let io = |source| FileError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "vtr"))
            .collect();
        paths.sort();
        paths.iter().map(|p| TraceFile::read(p)).collect()
    }

    /// A record tick as nanoseconds on the root's time axis (the host's monotonic clock
    /// corrected by the process's alignment).
    pub fn to_ns(&self, tick: u64) -> u64 {
        self.align.to_root(self.clock.to_ns(tick))
    }

    /// Name of the collector with `id`.
    pub fn collector_name(&self, id: u16) -> &str {
        self.collectors
            .get(id as usize)
            .map_or("unknown", String::as_str)
    }
}

#[cfg(test)]
mod tests {

    /// Links planted at the final name and at the temporary name the writer once used
    /// (`path.tmp`) are replaced or left alone, never written through.
    #[test]
    fn write_atomic_never_writes_through_a_planted_link() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("status.json");
        let victim = d.path().join("victim");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        std::os::unix::fs::symlink(&victim, path.with_extension("tmp")).unwrap();
        write_atomic(&path, b"{}").unwrap();
        assert!(!victim.exists(), "written through a planted link");
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
        write_atomic(&path, b"[]").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"[]");
    }

    use super::*;
    use crate::clock::ClockPoint;
    use proptest::prelude::*;

    fn sample() -> TraceFile {
        TraceFile {
            process: "ranks 0..2".into(),
            host: "h".into(),
            pid: 7,
            clock: Calibration {
                first: ClockPoint { tick: 0, ns: 100 },
                last: ClockPoint {
                    tick: 1000,
                    ns: 600,
                },
            },
            align: Alignment::default(),
            collectors: vec!["coll/allreduce".into()],
            threads: vec![ThreadTrace {
                label: "rank 0".into(),
                rank: Some(0),
                lost: 3,
                records: vec![Record {
                    start: 10,
                    end: 20,
                    seq: 1,
                    bytes: 8,
                    collector: 0,
                    op: 1,
                    status: 0,
                    peer: 1,
                }],
            }],
            usage: None,
        }
    }

    #[test]
    fn usage_travels_in_the_header_and_its_absence_writes_the_old_header() {
        let bytes = sample().encode();
        let hlen = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
        let header = std::str::from_utf8(&bytes[12..12 + hlen]).unwrap();
        // Without usage the header is what older versions wrote, and reads back the same.
        assert!(!header.contains("usage"), "{header}");
        let mut f = sample();
        f.usage = Some(Box::new(crate::usage::ProcessUsage {
            seconds: 1.5,
            ranks: 2,
            tlp: vec![0.5, 0.25, 0.25],
            transitions: 9,
            ..Default::default()
        }));
        let back = TraceFile::decode(&f.encode(), Path::new("u.vtr")).unwrap();
        assert_eq!(back, f);
        // A header from before usage existed (no key at all) still reads.
        let old = TraceFile::decode(&bytes, Path::new("old.vtr")).unwrap();
        assert_eq!(old.usage, None);
    }

    #[test]
    fn files_round_trip_through_disk() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.vtr");
        sample().write(&p).unwrap();
        assert_eq!(TraceFile::read_dir(dir.path()).unwrap(), vec![sample()]);
        assert_eq!(sample().clock.to_ns(500), 350);
    }

    /// `bytes` (a version 2 file without its checksum) with a valid checksum, so that
    /// the checks behind it are reached.
    fn sealed(mut bytes: Vec<u8>) -> Vec<u8> {
        let sum = blake3::hash(&bytes);
        bytes.extend_from_slice(sum.as_bytes());
        bytes
    }

    #[test]
    fn damaged_files_are_refused_with_the_reason() {
        let p = Path::new("t.vtr");
        let good = sample().encode();
        let body = &good[..good.len() - CHECKSUM_LEN];
        let e = TraceFile::decode(&sealed(body[..body.len() - 1].to_vec()), p).unwrap_err();
        assert!(
            e.to_string().contains("t.vtr") && e.to_string().contains("records"),
            "{e}"
        );
        let e = TraceFile::decode(b"NOTATRACE...", p).unwrap_err();
        assert!(e.to_string().contains("magic"), "{e}");
        let mut big = body.to_vec();
        big[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = TraceFile::decode(&sealed(big), p).unwrap_err();
        assert!(e.to_string().contains("header of 4294967295 bytes"), "{e}");
    }

    /// Any changed byte, and any cut, is caught by the checksum: a record's timestamps
    /// or a header number would otherwise still parse and give a wrong report.
    #[test]
    fn a_changed_or_cut_file_is_damaged() {
        let good = sample().encode();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            match TraceFile::decode(&bad, Path::new("t.vtr")) {
                Err(FileError::Damaged { path, what }) => {
                    assert_eq!(path, Path::new("t.vtr"));
                    assert!(what.contains("checksum"), "{what}");
                }
                // The magic's version digit turns into another file kind: refused too.
                Err(FileError::Format { .. }) if i < 8 => {}
                other => panic!("byte {i} flipped: {other:?}"),
            }
        }
        for n in [0, 11, 12, 43, good.len() - 1] {
            assert!(
                TraceFile::decode(&good[..n], Path::new("t.vtr")).is_err(),
                "cut to {n} bytes"
            );
        }
    }

    #[test]
    fn a_flipped_byte_on_disk_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.vtr");
        sample().write(&p).unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        // A record's end time: structurally still a valid file.
        let at = bytes.len() - CHECKSUM_LEN - Record::LEN + 8;
        bytes[at] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        let e = TraceFile::read_dir(dir.path()).unwrap_err();
        assert!(matches!(e, FileError::Damaged { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "{}: damaged trace file (its BLAKE3 checksum does not match its contents)",
                p.display()
            )
        );
    }

    /// Version 1 files (no checksum) written before it was added still read.
    #[test]
    fn version_1_files_still_read() {
        let good = sample().encode();
        let mut v1 = good[..good.len() - CHECKSUM_LEN].to_vec();
        v1[..8].copy_from_slice(MAGIC_V1);
        assert_eq!(
            TraceFile::decode(&v1, Path::new("old.vtr")).unwrap(),
            sample()
        );
    }

    proptest! {
        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = TraceFile::decode(&b, Path::new("x"));
            // Behind both magics; the version 2 one with a valid checksum, so the
            // structural checks see the garbage.
            let mut v1 = MAGIC_V1.to_vec();
            v1.extend_from_slice(&b);
            let _ = TraceFile::decode(&v1, Path::new("x"));
            let mut v2 = MAGIC.to_vec();
            v2.extend_from_slice(&b);
            let _ = TraceFile::decode(&sealed(v2), Path::new("x"));
        }
    }
}
