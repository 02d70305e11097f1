//! A file shared by the ranks of a communicator, with independent and collective I/O.
//!
//! Why: this is the MPI-IO model vargr's users know (open collectively, set a view,
//! `write_all`/`read_all`), on vargr's communicators, with the aggregation strategy as a
//! setting: ROMIO's fixed two-phase pattern or LA-Two-Phase's locality-aware one
//! (see [`crate::plan`]). Collective operations run in the stages the seed lists: the
//! ranks' extents, the file domains and their aggregators, the access requests sent to
//! each aggregator once, then rounds of at most a collective buffer per aggregator in
//! which the data moves and the aggregators write (or read and send).
//!
//! Every collective operation ends every rank alike: a rank whose part failed tells the
//! others (with its reason) instead of leaving them waiting.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use rustix::fs::{FallocateFlags, OFlags};
use vargr_coll::{Comm, ElemKind, Op};

use crate::error::{ErrorClass, IoError, Result};
use crate::plan::{Aggregation, Plan, Requests};
use crate::view::View;

/// How a file is opened (MPI's `MODE_*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode {
    pub read: bool,
    pub write: bool,
    /// Create the file if it does not exist (rank 0 creates it, the others then open it).
    pub create: bool,
    /// With `create`: fail if the file exists.
    pub exclusive: bool,
    /// Empty the file on open.
    pub truncate: bool,
}

impl Mode {
    pub const READ: Mode = Mode {
        read: true,
        write: false,
        create: false,
        exclusive: false,
        truncate: false,
    };
    pub const WRITE: Mode = Mode {
        read: false,
        write: true,
        ..Mode::READ
    };
    pub const READ_WRITE: Mode = Mode {
        read: true,
        write: true,
        ..Mode::READ
    };

    /// Read and write, created if missing and emptied.
    pub fn create() -> Mode {
        Mode {
            create: true,
            truncate: true,
            ..Mode::READ_WRITE
        }
    }
}

/// Settings of collective I/O (MPI's info hints, typed).
#[derive(Debug, Clone, PartialEq)]
pub struct Hints {
    /// Number of aggregators (ROMIO's `cb_nodes`); default one per node.
    pub cb_nodes: Option<usize>,
    /// Bytes an aggregator handles per round (ROMIO's `cb_buffer_size`).
    pub cb_buffer_size: u64,
    pub aggregation: Aggregation,
    /// Send the redistributed data as elements of `elem`, so that links which compress
    /// (between sites) choose a codec for them (Dynamic-CoMPI); `false` sends it as it is.
    pub compress: bool,
    pub elem: ElemKind,
    /// The node of every rank (ranks of one node share data without the network). By
    /// default ranks of one host of one site are one node.
    pub nodes: Option<Vec<usize>>,
}

impl Default for Hints {
    fn default() -> Hints {
        Hints {
            cb_nodes: None,
            cb_buffer_size: 4 << 20,
            aggregation: Aggregation::TwoPhase,
            compress: true,
            elem: ElemKind::U8,
            nodes: None,
        }
    }
}

/// What the last collective operation moved, as this rank saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoStats {
    /// The rank that aggregated each file domain.
    pub aggregators: Vec<usize>,
    pub rounds: u64,
    /// Data bytes this rank sent to ranks of other nodes.
    pub bytes_between_nodes: u64,
    /// Data bytes this rank sent to other ranks of its node.
    pub bytes_within_node: u64,
    /// Data bytes that stayed in this rank (it aggregates them itself).
    pub bytes_kept: u64,
    /// Bytes this rank read to fill holes before writing (ROMIO's data sieving).
    pub bytes_sieved: u64,
}

/// An open file shared by the ranks of a communicator.
pub struct File {
    comm: Comm,
    fd: OwnedFd,
    path: PathBuf,
    view: View,
    hints: Hints,
    node: Vec<usize>,
    stats: IoStats,
    /// The plan and access requests of the last collective operation, reused while no
    /// rank changes its view or hints (the seed computes the aggregator pattern once).
    planned: Option<Arc<Planned>>,
    /// This rank set a view or took the hints since the plan was made.
    changed: bool,
}

// The bindings hand a file to other threads (Python releases the GIL around each call).
const _: fn() = || {
    fn send<T: Send>() {}
    send::<File>();
};

/// A plan with its access requests, and whether its views were checked for overlaps.
struct Planned {
    plan: Plan,
    requests: Requests,
    overlap_checked: AtomicBool,
}

/// Ends a collective step alike on every rank: if any rank's `local` failed, every
/// rank fails, the others with the first failing rank's reason.
pub(crate) fn agree<T>(comm: &Comm, local: Result<T>) -> Result<T> {
    let mut all = vec![0u8; comm.size()];
    comm.allgather(&[u8::from(local.is_err())], &mut all)?;
    let Some(first) = all.iter().position(|&x| x != 0) else {
        return local;
    };
    // What the first failing rank says: its error's kind, OS error number and text.
    let mut head = [0u64; 3];
    let mut reason = match &local {
        Err(e) if comm.rank() == first => {
            let mut s = e.to_string();
            let mut n = s.len().min(4096);
            while !s.is_char_boundary(n) {
                n -= 1;
            }
            s.truncate(n);
            head = [
                u64::from(e.class().code()),
                e.errno().map_or(0, |n| 1 + n as u32 as u64),
                s.len() as u64,
            ];
            s.into_bytes()
        }
        _ => Vec::new(),
    };
    comm.bcast(&mut head, first)?;
    reason.resize(head[2].min(4096) as usize, 0);
    comm.bcast(&mut reason, first)?;
    match local {
        Err(e) => Err(e),
        Ok(_) => Err(IoError::Elsewhere {
            rank: first,
            reason: String::from_utf8_lossy(&reason).into_owned(),
            class: ErrorClass::from_code(head[0] as u8),
            errno: head[1].checked_sub(1).map(|n| n as u32 as i32),
        }),
    }
}

fn open_fd(path: &Path, mode: Mode, creating: bool, rank: usize) -> Result<OwnedFd> {
    let mut flags = OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK;
    flags |= match (mode.read, mode.write) {
        (true, true) => OFlags::RDWR,
        (false, true) => OFlags::WRONLY,
        _ => OFlags::RDONLY,
    };
    if creating && mode.create {
        flags |= OFlags::CREATE;
        if mode.exclusive {
            flags |= OFlags::EXCL;
        }
    }
    if creating && mode.truncate {
        flags |= OFlags::TRUNC;
    }
    let os = |op, e: rustix::io::Errno| IoError::Os {
        op,
        path: path.to_path_buf(),
        rank,
        source: e.into(),
    };
    // Not following a link at the last step, and not blocking on a FIFO.
    let fd = rustix::fs::open(path, flags, rustix::fs::Mode::from_raw_mode(0o644))
        .map_err(|e| os("opening", e))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| os("checking", e))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(IoError::Refused {
            rank,
            what: format!("{} is not a regular file", path.display()),
        });
    }
    Ok(fd)
}

impl File {
    /// Opens `path` on every rank of `comm` (collective). Rank 0 creates or empties it
    /// first if `mode` says so; if any rank cannot open it, every rank gets the error.
    pub fn open(comm: &Comm, path: impl AsRef<Path>, mode: Mode, hints: Hints) -> Result<File> {
        let comm = comm.dup()?;
        let me = comm.rank();
        let path = path.as_ref().to_path_buf();
        let node = agree(&comm, crate::plan::nodes(&comm, hints.nodes.as_deref()))?;
        let first = if me == 0 {
            open_fd(&path, mode, true, me).map(Some)
        } else {
            Ok(None)
        };
        let first = agree(&comm, first)?;
        let fd = match first {
            Some(fd) => Ok(fd),
            None => open_fd(&path, mode, false, me),
        };
        let fd = agree(&comm, fd)?;
        Ok(File {
            comm,
            fd,
            path,
            view: View::default(),
            hints,
            node,
            stats: IoStats::default(),
            planned: None,
            changed: true,
        })
    }

    /// Sets this rank's view (each rank its own; collective operations use the views
    /// every rank has set).
    pub fn set_view(&mut self, view: View) {
        self.view = view;
        self.changed = true;
    }

    pub fn view(&self) -> &View {
        &self.view
    }

    pub fn hints(&self) -> &Hints {
        &self.hints
    }

    pub fn hints_mut(&mut self) -> &mut Hints {
        self.changed = true;
        &mut self.hints
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's communicator (a duplicate of the one it was opened on).
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// What the last collective operation moved.
    pub fn stats(&self) -> &IoStats {
        &self.stats
    }

    fn at_err(&self, op: &'static str, offset: u64, len: u64, e: std::io::Error) -> IoError {
        IoError::At {
            op,
            path: self.path.clone(),
            rank: self.comm.rank(),
            offset,
            end: offset + len,
            source: e,
        }
    }

    fn os_err(&self, op: &'static str, e: rustix::io::Errno) -> IoError {
        IoError::Os {
            op,
            path: self.path.clone(),
            rank: self.comm.rank(),
            source: e.into(),
        }
    }

    /// Writes all of `data` at file offset `offset`.
    fn pwrite_all(&self, mut offset: u64, mut data: &[u8]) -> Result<()> {
        let (start, len) = (offset, data.len() as u64);
        while !data.is_empty() {
            match rustix::io::pwrite(&self.fd, data, offset) {
                Ok(0) => {
                    let e = std::io::Error::from(std::io::ErrorKind::WriteZero);
                    return Err(self.at_err("writing", start, len, e));
                }
                Ok(n) => {
                    data = &data[n..];
                    offset += n as u64;
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(self.at_err("writing", start, len, e.into())),
            }
        }
        Ok(())
    }

    /// Fills `buf` from file offset `offset`; returns the bytes read, fewer at the end of
    /// the file (the rest of `buf` is zeroed).
    fn pread_full(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            match rustix::io::pread(&self.fd, &mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    return Err(self.at_err("reading", offset, buf.len() as u64, e.into()));
                }
            }
        }
        buf[got..].fill(0);
        Ok(got)
    }

    /// Writes `data` as data bytes `at ..` of this rank's view (independent).
    pub fn write_at(&self, at: u64, data: &[u8]) -> Result<()> {
        for (run, d) in self.view.map(at, data.len() as u64)? {
            let from = (d - at) as usize;
            self.pwrite_all(run.offset, &data[from..from + run.len as usize])?;
        }
        Ok(())
    }

    /// Reads data bytes `at ..` of this rank's view into `buf` (independent); returns the
    /// bytes read, fewer if the file ends first.
    pub fn read_at(&self, at: u64, buf: &mut [u8]) -> Result<usize> {
        let mut total = 0;
        for (run, d) in self.view.map(at, buf.len() as u64)? {
            let from = (d - at) as usize;
            let n = self.pread_full(run.offset, &mut buf[from..from + run.len as usize])?;
            total += n;
            if n < run.len as usize {
                break;
            }
        }
        Ok(total)
    }

    /// The file's size in bytes.
    pub fn size(&self) -> Result<u64> {
        let st = rustix::fs::fstat(&self.fd).map_err(|e| self.os_err("checking", e))?;
        Ok(st.st_size as u64)
    }

    /// Makes the file `len` bytes long (collective: rank 0 resizes).
    pub fn set_size(&self, len: u64) -> Result<()> {
        let r = if self.comm.rank() == 0 {
            rustix::fs::ftruncate(&self.fd, len).map_err(|e| self.os_err("resizing", e))
        } else {
            Ok(())
        };
        agree(&self.comm, r)
    }

    /// Reserves disk space for the first `len` bytes (collective: rank 0 allocates), so
    /// that a full disk shows here rather than in the middle of a write.
    pub fn preallocate(&self, len: u64) -> Result<()> {
        let r = if self.comm.rank() == 0 {
            rustix::fs::fallocate(&self.fd, FallocateFlags::empty(), 0, len)
                .map_err(|e| self.os_err("preallocating", e))
        } else {
            Ok(())
        };
        agree(&self.comm, r)
    }

    /// Flushes every rank's writes to the disk (collective).
    pub fn sync(&self) -> Result<()> {
        let r = rustix::fs::fsync(&self.fd).map_err(|e| self.os_err("syncing", e));
        agree(&self.comm, r)
    }

    /// Closes the file on every rank (collective), after a sync.
    pub fn close(self) -> Result<()> {
        self.sync()
    }

    fn send(&mut self, dest: usize, tag: u64, data: Bytes) -> Result<()> {
        let n = data.len() as u64;
        if self.node[dest] == self.node[self.comm.rank()] {
            self.stats.bytes_within_node += n;
        } else {
            self.stats.bytes_between_nodes += n;
        }
        if self.hints.compress {
            self.comm
                .send_bytes_typed(dest, tag, data, self.hints.elem)?;
        } else {
            self.comm.send_bytes_uncompressed(dest, tag, data)?;
        }
        Ok(())
    }

    /// The plan of a collective operation (collective): the last one if no rank changed
    /// its view or hints since, else a new one. With `writing`, views that overlap are
    /// refused (once per plan).
    fn plan(&mut self, writing: bool) -> Result<Arc<Planned>> {
        let mut stale = [u8::from(self.changed || self.planned.is_none())];
        self.comm.allreduce(&mut stale, &Op::Max)?;
        let planned = match (&self.planned, stale[0]) {
            (Some(p), 0) => p.clone(),
            _ => {
                self.planned = None;
                let plan = Plan::make(&self.comm, &self.view, &self.node, &self.hints)?;
                let requests = plan.exchange_requests(&self.comm, &self.view)?;
                self.changed = false;
                Arc::new(Planned {
                    plan,
                    requests,
                    overlap_checked: AtomicBool::new(false),
                })
            }
        };
        if writing && !planned.overlap_checked.load(Ordering::Relaxed) {
            agree(&self.comm, planned.requests.check_overlap())?;
            planned.overlap_checked.store(true, Ordering::Relaxed);
        }
        self.planned = Some(planned.clone());
        self.stats = IoStats {
            aggregators: planned.plan.aggregators().to_vec(),
            rounds: planned.plan.rounds(),
            ..IoStats::default()
        };
        Ok(planned)
    }

    /// Writes every rank's data through its view (collective): `data` holds exactly the
    /// view's bytes. Views must not overlap between ranks.
    pub fn write_all(&mut self, data: &[u8]) -> Result<()> {
        self.check_length(data.len())?;
        let planned = self.plan(true)?;
        let (plan, requests) = (&planned.plan, &planned.requests);
        let me = self.comm.rank();
        for k in 0..plan.rounds() {
            let tag = k + 1;
            let mut kept = None;
            for (d, &agg) in plan.aggregators().iter().enumerate() {
                let (lo, hi) = plan.window(d, k);
                let mut out = Vec::new();
                for (a, b, from) in requests.mine_within(d, lo, hi) {
                    out.extend_from_slice(&data[from as usize..(from + b - a) as usize]);
                }
                if out.is_empty() {
                    continue;
                }
                if agg == me {
                    self.stats.bytes_kept += out.len() as u64;
                    kept = Some(out);
                } else {
                    self.send(agg, tag, Bytes::from(out))?;
                }
            }
            let written = match plan.my_domain() {
                Some(d) => self.aggregate_write(plan, requests, d, k, tag, kept),
                None => Ok(()),
            };
            agree(&self.comm, written)?;
        }
        Ok(())
    }

    /// An aggregator's part of write round `k`: receive the pieces of its window, fill
    /// holes from the file if there are any, write the range once.
    fn aggregate_write(
        &mut self,
        plan: &Plan,
        requests: &Requests,
        d: usize,
        k: u64,
        tag: u64,
        mut kept: Option<Vec<u8>>,
    ) -> Result<()> {
        let (lo, hi) = plan.window(d, k);
        let me = self.comm.rank();
        let mut incoming = Vec::new();
        let (mut first, mut last, mut covered) = (u64::MAX, 0, 0);
        // A bad message is reported after all of them are received, so that none is
        // left behind to be taken for a later round's.
        let mut bad = None;
        for src in 0..self.comm.size() {
            let pieces: Vec<(u64, u64)> = requests.sent_by(src, lo, hi);
            if pieces.is_empty() {
                continue;
            }
            let expected: u64 = pieces.iter().map(|(a, b)| b - a).sum();
            let data = if src == me {
                Bytes::from(kept.take().unwrap_or_default())
            } else {
                self.comm.recv_bytes(src, tag)?
            };
            if data.len() as u64 != expected {
                bad.get_or_insert(IoError::Refused {
                    rank: me,
                    what: format!(
                        "rank {src} sent {} bytes for round {k}, its requests make {expected}",
                        data.len()
                    ),
                });
                continue;
            }
            first = first.min(pieces[0].0);
            last = last.max(pieces[pieces.len() - 1].1);
            covered += expected;
            incoming.push((pieces, data));
        }
        if let Some(e) = bad {
            return Err(e);
        }
        if incoming.is_empty() {
            return Ok(());
        }
        let mut buf = vec![0u8; (last - first) as usize];
        if covered < last - first {
            // Holes between the pieces: keep what the file holds there.
            self.pread_full(first, &mut buf)?;
            self.stats.bytes_sieved += last - first;
        }
        for (pieces, data) in incoming {
            let mut at = 0usize;
            for (a, b) in pieces {
                let n = (b - a) as usize;
                let to = (a - first) as usize;
                buf[to..to + n].copy_from_slice(&data[at..at + n]);
                at += n;
            }
        }
        self.pwrite_all(first, &buf)
    }

    /// Reads every rank's view into `data` (collective), which must hold exactly the
    /// view's bytes. Bytes past the end of the file read as zeros.
    pub fn read_all(&mut self, data: &mut [u8]) -> Result<()> {
        self.check_length(data.len())?;
        let planned = self.plan(false)?;
        let (plan, requests) = (&planned.plan, &planned.requests);
        let me = self.comm.rank();
        for k in 0..plan.rounds() {
            let tag = k + 1;
            let mut kept = None;
            let served = match plan.my_domain() {
                Some(d) => self.aggregate_read(plan, requests, d, k, tag, &mut kept),
                None => Ok(()),
            };
            let mut bad = None;
            for (d, &agg) in plan.aggregators().iter().enumerate() {
                let (lo, hi) = plan.window(d, k);
                let pieces: Vec<(u64, u64, u64)> = requests.mine_within(d, lo, hi).collect();
                if pieces.is_empty() {
                    continue;
                }
                let got = if agg == me {
                    Bytes::from(kept.take().unwrap_or_default())
                } else {
                    self.comm.recv_bytes(agg, tag)?
                };
                let expected: u64 = pieces.iter().map(|(a, b, _)| b - a).sum();
                if got.len() as u64 != expected {
                    // Reported when the round ends on every rank, not by leaving it.
                    bad.get_or_insert(IoError::Refused {
                        rank: me,
                        what: format!(
                            "aggregator {agg} sent {} bytes for round {k}, {expected} were asked",
                            got.len()
                        ),
                    });
                    continue;
                }
                let mut at = 0usize;
                for (a, b, to) in pieces {
                    let n = (b - a) as usize;
                    data[to as usize..to as usize + n].copy_from_slice(&got[at..at + n]);
                    at += n;
                }
            }
            agree(&self.comm, served.and_then(|()| bad.map_or(Ok(()), Err)))?;
        }
        Ok(())
    }

    /// An aggregator's part of read round `k`: read the range its window's requests
    /// span once, send each rank its pieces. A failed read still sends (zeros), so that
    /// no rank waits; the round then fails on every rank.
    fn aggregate_read(
        &mut self,
        plan: &Plan,
        requests: &Requests,
        d: usize,
        k: u64,
        tag: u64,
        kept: &mut Option<Vec<u8>>,
    ) -> Result<()> {
        let (lo, hi) = plan.window(d, k);
        let me = self.comm.rank();
        let per_src: Vec<Vec<(u64, u64)>> = (0..self.comm.size())
            .map(|src| requests.sent_by(src, lo, hi))
            .collect();
        let first = per_src.iter().filter_map(|p| p.first()).map(|p| p.0).min();
        let last = per_src.iter().filter_map(|p| p.last()).map(|p| p.1).max();
        let (Some(first), Some(last)) = (first, last) else {
            return Ok(());
        };
        let mut buf = vec![0u8; (last - first) as usize];
        let read = self.pread_full(first, &mut buf).map(|_| ());
        if read.is_err() {
            buf.fill(0);
        }
        for (src, pieces) in per_src.into_iter().enumerate() {
            if pieces.is_empty() {
                continue;
            }
            let mut out = Vec::new();
            for (a, b) in pieces {
                out.extend_from_slice(&buf[(a - first) as usize..(b - first) as usize]);
            }
            if src == me {
                self.stats.bytes_kept += out.len() as u64;
                *kept = Some(out);
            } else {
                self.send(src, tag, Bytes::from(out))?;
            }
        }
        read
    }

    fn check_length(&self, got: usize) -> Result<()> {
        let r = if got as u64 == self.view.bytes() {
            Ok(())
        } else {
            Err(IoError::Length {
                rank: self.comm.rank(),
                expected: self.view.bytes(),
                got: got as u64,
            })
        };
        agree(&self.comm, r)
    }
}
