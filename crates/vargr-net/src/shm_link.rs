//! The mesh's shared-memory path between processes of one host (see `vargr-shm`).
//!
//! Why a separate module: the mesh keeps one mailbox and one poller; this is the part
//! that connects them to `vargr-shm`'s rings, so that `mesh.rs` only gains a send branch
//! and a few calls in its poll loop. Messages to a process of this host go into its
//! inbox instead of a socket; what arrives in ours is delivered into the same mailboxes
//! the sockets fill, after checking that its addresses could have come from that
//! process. The poller watches our bell with the sockets.
//!
//! Slots are first ranks: a segment has a ring per rank of the job, of which only the
//! rings of processes' first ranks are ever touched (untouched memfd pages cost nothing),
//! so the segment can be made before wire-up, when only the job's size is known, and
//! exists before any peer can learn where it is.
//!
//! Rank 0's process also makes the job's collective area (`vargr_shm::Area`), which
//! `vargr-coll`'s arena uses for small collectives between processes; the others open it
//! through its pointer file at first use.
//!
//! Shared memory is used only when the whole job is on this host (every address a Unix
//! socket, whose path names the peer's files). A peer whose inbox cannot be opened is
//! reached over its socket for good; the choice is made once per peer, at the first
//! send, so one (source, tag) never mixes two paths.

use std::collections::HashMap;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::path::Path;

use bytes::Bytes;
use vargr_shm::{Area, Endpoint, Layout, MsgHead, PeerFiles, ShmError, Stats, Watch};

use crate::runtime_dir::RemoveOnDrop;
use crate::wireup::{JobEnv, PeerInfo};
use crate::{Addr, NetError};

/// Shared memory a segment may use for its rings in all: the rings of a job's size
/// share it, between 64 KiB and 1 MiB each.
const SEGMENT_BUDGET: usize = 32 << 20;

/// `sched_yield` calls a waiting poller makes, watching the doorbell, before it blocks:
/// with more ranks than cores the rank being waited for usually gets the core and
/// answers within a few, and a wake-up through the bell costs two system calls more.
const YIELDS: u32 = 32;

/// Socket polls a poller skips in a row while shared memory is busy (each costs a system
/// call that on one host almost never finds anything).
const MAX_SKIPS: u32 = 16;

/// Largest job whose ranks get a collective area, and the buffers it takes: an area
/// holds a slot per rank (untouched slots cost nothing); larger buffers cross it a slot's
/// worth at a time.
const AREA_MAX_RANKS: u32 = 1024;
const AREA_SLOT: usize = 1 << 20;

/// The job's collective area, as this process knows it.
enum AreaState {
    /// Made here (rank 0's process) or opened.
    Open(std::sync::Arc<Area>),
    /// Rank 0's process made it: its pointer file, opened at first use.
    There(std::path::PathBuf),
    None,
}

pub(crate) struct ShmLink {
    ep: Endpoint,
    /// Ranks of each process on shared memory, by its first rank (its slot).
    ranks: HashMap<u32, Range<u32>>,
    /// Whether sends to a process (by first rank) go through shared memory; decided at
    /// the first send.
    path: HashMap<u32, bool>,
    /// Socket polls skipped in a row because shared memory had traffic.
    skipped: u32,
    area: AreaState,
    size: u32,
    _files: [RemoveOnDrop; 2],
    _area_file: Option<RemoveOnDrop>,
}

/// Ring size for a job of `size` ranks.
fn ring_bytes(size: u32) -> usize {
    let per = SEGMENT_BUDGET / size.max(1) as usize;
    let pow = if per.is_power_of_two() {
        per
    } else {
        per.next_power_of_two() / 2
    };
    pow.clamp(64 << 10, 1 << 20)
}

impl ShmLink {
    /// Makes this process's inbox beside its socket `socket` (first rank `me` of a job of
    /// `size`).
    pub(crate) fn bind(
        socket: &Path,
        me: u32,
        size: u32,
        max_message: usize,
    ) -> Result<ShmLink, ShmError> {
        let files = PeerFiles::beside(socket);
        let layout = Layout::new(size as usize, ring_bytes(size))?;
        let ep = Endpoint::create(me as usize, layout, files.clone(), max_message)?;
        // Rank 0's process makes the job's collective area; the others open it later.
        let (area, area_file) = if me == 0 && size <= AREA_MAX_RANKS {
            let a = Area::create("vargr-coll", size as usize, AREA_SLOT)?;
            vargr_shm::write_pointer(&files.area, a.fd())?;
            (
                AreaState::Open(std::sync::Arc::new(a)),
                Some(RemoveOnDrop::new(files.area.clone())),
            )
        } else {
            (AreaState::None, None)
        };
        Ok(ShmLink {
            area,
            size,
            _area_file: area_file,
            ep,
            ranks: HashMap::new(),
            path: HashMap::new(),
            skipped: 0,
            _files: [
                RemoveOnDrop::new(files.pointer),
                RemoveOnDrop::new(files.bell),
            ],
        })
    }

    /// Learns the other processes from the job's table; false if the job is not all on
    /// this host (then shared memory stays unused).
    pub(crate) fn start(&mut self, table: &[PeerInfo]) -> bool {
        let mut first = 0;
        while first < table.len() {
            let addr = &table[first].addr;
            let mut end = first + 1;
            while end < table.len() && table[end].addr == *addr {
                end += 1;
            }
            let Addr::Unix(path) = addr else {
                self.ranks.clear();
                return false;
            };
            if first != self.ep.slot() {
                self.ep.locate(first, PeerFiles::beside(path));
            }
            if first == 0 && self.ep.slot() != 0 && self.size <= AREA_MAX_RANKS {
                self.area = AreaState::There(PeerFiles::beside(path).area);
            }
            self.ranks.insert(first as u32, first as u32..end as u32);
            first = end;
        }
        true
    }

    /// Sends through shared memory if process `proc_` (a first rank) is reached that way;
    /// gives `data` back if it is reached over its socket.
    pub(crate) fn send(
        &mut self,
        proc_: u32,
        head: MsgHead,
        data: Bytes,
    ) -> Result<Result<(), NetError>, Bytes> {
        if !self.ranks.contains_key(&proc_) || proc_ as usize == self.ep.slot() {
            return Err(data);
        }
        let on =
            *self
                .path
                .entry(proc_)
                .or_insert_with(|| match self.ep.reachable(proc_ as usize) {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!("rank {proc_}'s process is reached over its socket: {e}");
                        false
                    }
                });
        if !on {
            return Err(data);
        }
        Ok(self.ep.send(proc_ as usize, head, data).map_err(corrupt))
    }

    /// Pushes queued messages and hands what arrived to `deliver(dest, src, tag, data)`.
    /// A message whose addresses its sender could not have sent is a broken peer: the
    /// error names its process (first rank) for the caller to count it lost.
    pub(crate) fn progress(
        &mut self,
        is_local: impl Fn(u32) -> bool,
        mut deliver: impl FnMut(u32, u32, u64, Bytes),
    ) -> Result<bool, (u32, String)> {
        let mut bad: Option<(u32, String)> = None;
        let ranks = &self.ranks;
        let r = self.ep.progress(|slot, h, b| {
            let slot = slot as u32;
            let from_there = ranks.get(&slot).is_some_and(|r| r.contains(&h.src));
            if from_there && is_local(h.dest) {
                deliver(h.dest, h.src, h.tag, b);
            } else if bad.is_none() {
                bad = Some((
                    slot,
                    format!(
                        "its shared-memory ring carried a message from rank {} to rank {}",
                        h.src, h.dest
                    ),
                ));
            }
        });
        match (r, bad) {
            (_, Some(b)) => Err(b),
            (Err(ShmError::Corrupt { slot, why }), None) => Err((
                slot as u32,
                format!("its shared-memory ring is corrupt: {why}"),
            )),
            (Err(e), None) => Err((self.ep.slot() as u32, e.to_string())),
            (Ok(moved), None) => Ok(moved),
        }
    }

    pub(crate) fn prepare_sleep(&mut self) -> Result<bool, (u32, String)> {
        self.ep.prepare_sleep().map_err(|e| match e {
            ShmError::Corrupt { slot, why } => (
                slot as u32,
                format!("its shared-memory ring is corrupt: {why}"),
            ),
            e => (self.ep.slot() as u32, e.to_string()),
        })
    }

    /// Whether the poller may skip the sockets this round because shared memory has
    /// traffic: yes, but not [`MAX_SKIPS`] times in a row, so a message on a socket (a
    /// peer that fell back to it) is never starved by a busy ring.
    pub(crate) fn may_skip_sockets(&mut self) -> bool {
        self.skipped += 1;
        if self.skipped > MAX_SKIPS {
            self.skipped = 0;
            return false;
        }
        true
    }

    /// The job's collective area, opened at first use; `None` if rank 0's process made
    /// none (then no process has one). Every process must agree, or their collectives
    /// would take different algorithms and wait for each other for ever: an area that
    /// exists but cannot be opened is an error.
    pub(crate) fn area(&mut self) -> Result<Option<std::sync::Arc<Area>>, NetError> {
        if let AreaState::There(path) = &self.area {
            if !path.exists() {
                self.area = AreaState::None;
            } else {
                let a = vargr_shm::open_pointer(path)
                    .and_then(|(pid, fd, who)| {
                        Area::open(fd, pid, self.size as usize, AREA_SLOT, &who)
                    })
                    .map_err(|e| NetError::Job {
                        reason: format!(
                            "the job's collective area cannot be opened ({e}); VARGR_SHM=false \
                             runs the job without shared memory"
                        ),
                    })?;
                self.area = AreaState::Open(std::sync::Arc::new(a));
            }
        }
        Ok(match &self.area {
            AreaState::Open(a) => Some(a.clone()),
            _ => None,
        })
    }

    pub(crate) fn woke(&self) {
        self.ep.woke();
    }

    pub(crate) fn watch(&self) -> Watch {
        self.ep.watch()
    }

    pub(crate) fn backlog(&self) -> bool {
        self.ep.backlog()
    }

    pub(crate) fn stats(&self) -> Stats {
        self.ep.stats()
    }
}

/// This process's inbox beside its Unix socket at `addr`, if it can be made (a warning
/// and sockets otherwise).
pub(crate) fn bind(addr: &Addr, env: &JobEnv) -> Option<ShmLink> {
    let Addr::Unix(path) = addr else {
        return None;
    };
    match ShmLink::bind(path, env.rank, env.size, crate::mesh::MAX_MESSAGE) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("no shared memory between this host's processes: {e}");
            None
        }
    }
}

/// Learns the job's processes and has `reactor` watch the bell; `None` if the job is
/// not all on this host or the bell cannot be watched.
pub(crate) fn start(
    mut s: ShmLink,
    table: &[PeerInfo],
    reactor: &mut crate::Reactor,
) -> Option<ShmLink> {
    if !s.start(table) {
        return None;
    }
    match reactor.watch_fd(s.ep.bell().fd().as_raw_fd()) {
        Ok(()) => Some(s),
        Err(e) => {
            tracing::warn!(
                "no shared memory between this host's processes: watching the bell: {e}"
            );
            None
        }
    }
}

/// Yields while the inbox stays quiet, up to [`YIELDS`] times; true if it stayed quiet
/// (then the caller blocks).
pub(crate) fn yield_for(w: &Watch) -> bool {
    for _ in 0..YIELDS {
        if w.news() {
            return false;
        }
        std::thread::yield_now();
    }
    !w.news()
}

fn corrupt(e: ShmError) -> NetError {
    NetError::Job {
        reason: e.to_string(),
    }
}
