//! Shared memory between the processes of one host.
//!
//! Why: ranks that are processes on one host otherwise talk over Unix sockets, paying
//! for system calls, a frame MAC and two copies through the kernel on every message;
//! with many ranks per core the wake-ups dominate. Here each process owns an inbox
//! ([`Segment`]) with one ring per process of the host; a sender copies a message into its
//! ring in the receiver's inbox and rings the receiver's [`Bell`] only if the receiver
//! said it is about to block. Waiting never spins: the waiter polls the bell's file
//! descriptor (with its sockets) until woken.
//!
//! Small collectives need no messages at all: in the job's collective [`Area`] every rank
//! deposits its buffer, the last to arrive combines them, the others wait on a futex.
//! And state that is a few numbers updated with atomics (an emulated WAN's shared
//! bottlenecks) lives in a table of [`Words`].
//!
//! The crate is sans-I/O where it can be: [`ring`] is pure data-structure code over a
//! mapping, tested within and between processes, and [`Endpoint`] decides what to push,
//! drain and wake but leaves waiting to the caller's poller.
//!
//! Peers are other processes of the same user; they are trusted to be who they are (the
//! files live in the user's private runtime directory) but not to be correct: every
//! position, length and header read from shared memory is checked, and a violation is an
//! [`ShmError::Corrupt`] naming the peer.

mod area;
mod bell;
mod error;
pub mod ring;
mod segment;
mod words;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

pub use area::{Area, Outcome};
pub use bell::{Bell, Ringer};
pub use error::ShmError;
pub use ring::{Incoming, MsgHead, Outgoing, Ring, RingError};
pub use segment::{Layout, Segment, MAX_RING, MIN_RING};
pub use words::{Words, MAX_WORDS};

/// Where a process's inbox can be found: its pointer file (naming the memfd as
/// `<pid> <fd>`) and its bell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerFiles {
    pub pointer: PathBuf,
    pub bell: PathBuf,
    /// The pointer file of the job's collective [`Area`] (made by rank 0's process).
    pub area: PathBuf,
}

impl PeerFiles {
    /// The files next to a process's `base` path (its socket, say): `base.shm` and
    /// `base.bell`.
    pub fn beside(base: &Path) -> PeerFiles {
        let with = |ext: &str| {
            let mut s = base.as_os_str().to_owned();
            s.push(ext);
            PathBuf::from(s)
        };
        PeerFiles {
            pointer: with(".shm"),
            bell: with(".bell"),
            area: with(".coll"),
        }
    }
}

/// Counters of what went through shared memory (for tests and traces).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub sent: u64,
    pub received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Bells this process rang (wake-ups it caused).
    pub rings: u64,
    /// Messages sent by single copy (the receiver read them from our memory).
    pub single_copy: u64,
}

struct Peer {
    seg: Segment,
    ringer: Ringer,
    tx: Outgoing,
}

enum PeerState {
    Unknown,
    Attached(Box<Peer>),
    Failed(String),
}

/// This process's end: its inbox and bell, and the inboxes of the peers it sends to.
pub struct Endpoint {
    me: usize,
    inbox: Arc<Segment>,
    bell: Bell,
    files: PeerFiles,
    max_message: usize,
    rx: Vec<Incoming>,
    rx_failed: Vec<bool>,
    peers: Vec<PeerState>,
    where_: Vec<Option<PeerFiles>>,
    /// The doorbell when the inbox was last drained.
    seen: u64,
    stats: Stats,
}

/// A cheap, lock-free view of an inbox's doorbell (for waiting loops that yield).
#[derive(Clone)]
pub struct Watch {
    inbox: Arc<Segment>,
    seen: u64,
}

impl Watch {
    /// Whether anything arrived since the endpoint last drained.
    pub fn news(&self) -> bool {
        self.inbox.doorbell().load(Ordering::Acquire) != self.seen
    }
}

/// Writes a pointer file naming memfd `fd` of this process (`<pid> <fd>`), new, 0600.
pub fn write_pointer(path: &Path, fd: std::os::fd::BorrowedFd<'_>) -> Result<(), ShmError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| ShmError::io("creating", path, e))?;
    writeln!(f, "{} {}", std::process::id(), fd.as_raw_fd())
        .map_err(|e| ShmError::io("writing", path, e))
}

/// Opens the segment a pointer file names, for `slots` processes.
fn open_segment(path: &Path, slots: usize) -> Result<Segment, ShmError> {
    let (pid, fd, who) = open_pointer(path)?;
    Segment::open(fd, pid, slots, &who)
}

/// Opens the memfd a pointer file names: its owner's pid, the descriptor, and its
/// `/proc` path (for messages).
pub fn open_pointer(path: &Path) -> Result<(u32, OwnedFd, String), ShmError> {
    use std::os::unix::fs::MetadataExt;
    let refuse = |why: String| ShmError::Refused {
        who: path.display().to_string(),
        why,
    };
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(path)
        .map_err(|e| ShmError::io("opening", path, e))?;
    let m = f
        .metadata()
        .map_err(|e| ShmError::io("inspecting", path, e))?;
    if !m.is_file() || m.uid() != rustix::process::getuid().as_raw() || m.mode() & 0o022 != 0 {
        return Err(refuse("not a private file of this user".into()));
    }
    let mut s = String::new();
    Read::by_ref(&mut f)
        .take(64)
        .read_to_string(&mut s)
        .map_err(|e| ShmError::io("reading", path, e))?;
    let mut it = s.split_whitespace().map(str::parse::<u32>);
    let (Some(Ok(pid)), Some(Ok(fd)), None) = (it.next(), it.next(), it.next()) else {
        return Err(refuse(format!(
            "does not name a process and a descriptor: {s:?}"
        )));
    };
    let proc_path = PathBuf::from(format!("/proc/{pid}/fd/{fd}"));
    let fd: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(rustix::fs::OFlags::CLOEXEC.bits() as i32)
        .open(&proc_path)
        .map_err(|e| ShmError::io("opening", &proc_path, e))?
        .into();
    Ok((pid, fd, proc_path.display().to_string()))
}

impl Endpoint {
    /// Creates the inbox of process `me` of `layout.slots()` on this host, with its
    /// pointer file and bell at `files` (both new; the caller removes them when done).
    /// Messages claiming more than `max_message` bytes are refused as corrupt.
    pub fn create(
        me: usize,
        layout: Layout,
        files: PeerFiles,
        max_message: usize,
    ) -> Result<Endpoint, ShmError> {
        if me >= layout.slots() {
            return Err(ShmError::Layout(format!(
                "slot {me} of {} rings",
                layout.slots()
            )));
        }
        let seg = Segment::create(&format!("vargr-shm-{me}"), layout)?;
        write_pointer(&files.pointer, seg.fd())?;
        let bell = match Bell::create(&files.bell) {
            Ok(b) => b,
            Err(e) => {
                let _ = std::fs::remove_file(&files.pointer);
                return Err(e);
            }
        };
        let n = layout.slots();
        Ok(Endpoint {
            me,
            inbox: Arc::new(seg),
            bell,
            files,
            max_message,
            rx: (0..n).map(|_| Incoming::default()).collect(),
            rx_failed: vec![false; n],
            peers: (0..n).map(|_| PeerState::Unknown).collect(),
            where_: vec![None; n],
            seen: 0,
            stats: Stats::default(),
        })
    }

    /// This process's files (for the caller to remove, and for peers to find).
    pub fn files(&self) -> &PeerFiles {
        &self.files
    }

    pub fn slot(&self) -> usize {
        self.me
    }

    pub fn slots(&self) -> usize {
        self.rx.len()
    }

    /// Tells where peer `slot`'s files are (before sending to it or draining from it).
    pub fn locate(&mut self, slot: usize, files: PeerFiles) {
        if let Some(w) = self.where_.get_mut(slot) {
            *w = Some(files);
        }
    }

    /// The bell's descriptor, to poll with the caller's other sources.
    pub fn bell(&self) -> &Bell {
        &self.bell
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    pub fn watch(&self) -> Watch {
        Watch {
            inbox: self.inbox.clone(),
            seen: self.seen,
        }
    }

    fn peer(&mut self, slot: usize) -> Result<&mut Peer, ShmError> {
        let slots = self.rx.len();
        let state = self
            .peers
            .get_mut(slot)
            .ok_or_else(|| ShmError::Layout(format!("slot {slot} of {slots}")))?;
        if let PeerState::Unknown = state {
            let files = self.where_[slot].clone().ok_or_else(|| ShmError::Refused {
                who: format!("process {slot} of this host"),
                why: "its files are unknown".into(),
            })?;
            *state = match open_segment(&files.pointer, slots)
                .and_then(|seg| Ok((seg, Ringer::open(&files.bell)?)))
            {
                Ok((seg, ringer)) => {
                    let mut tx = Outgoing::default();
                    if seg.single_copy_works() {
                        tx.enable_single_copy();
                    }
                    PeerState::Attached(Box::new(Peer { seg, ringer, tx }))
                }
                Err(e) => PeerState::Failed(e.to_string()),
            };
        }
        match state {
            PeerState::Attached(p) => Ok(p),
            PeerState::Failed(why) => Err(ShmError::Refused {
                who: format!("process {slot} of this host"),
                why: why.clone(),
            }),
            PeerState::Unknown => unreachable!("attached above"),
        }
    }

    /// Whether sending to `slot` goes through shared memory: attaches on first use;
    /// false (and the reason) if its inbox cannot be opened, for the caller to fall back
    /// to another transport for good.
    pub fn reachable(&mut self, slot: usize) -> Result<(), ShmError> {
        if slot == self.me {
            return Err(ShmError::Layout("a ring to oneself".into()));
        }
        self.peer(slot).map(|_| ())
    }

    /// Sends `data` to process `slot` of the host: into its ring what fits, the rest
    /// queued for [`Endpoint::progress`]. Never waits for the receiver.
    pub fn send(&mut self, slot: usize, head: MsgHead, data: Bytes) -> Result<(), ShmError> {
        self.reachable(slot)?;
        let len = data.len() as u64;
        let me = self.me;
        let p = self.peer(slot)?;
        p.tx.enqueue(head, data);
        let (rang, single) = push(p, me, slot)?;
        self.stats.sent += 1;
        self.stats.bytes_sent += len;
        self.stats.rings += u64::from(rang);
        self.stats.single_copy += single as u64;
        Ok(())
    }

    /// Whether messages wait in queues for space in a peer's ring, or for a peer to
    /// read them by single copy (the process must not exit before).
    pub fn backlog(&self) -> bool {
        self.peers
            .iter()
            .any(|p| matches!(p, PeerState::Attached(p) if p.busy()))
    }

    /// Pushes queued messages and drains the inbox, handing each message to `deliver`
    /// with the slot of its sender. Returns whether anything moved. A corrupt ring stops
    /// being read and is reported once.
    pub fn progress(
        &mut self,
        mut deliver: impl FnMut(usize, MsgHead, Bytes),
    ) -> Result<bool, ShmError> {
        let mut moved = false;
        let me = self.me;
        for slot in 0..self.peers.len() {
            if let PeerState::Attached(p) = &mut self.peers[slot] {
                if p.busy() {
                    let before = (p.tx.backlog(), p.tx.pinned());
                    let (rang, single) = push(p, me, slot)?;
                    self.stats.rings += u64::from(rang);
                    self.stats.single_copy += single as u64;
                    moved |= (p.tx.backlog(), p.tx.pinned()) != before;
                }
            }
        }
        let bell = self.inbox.doorbell().load(Ordering::Acquire);
        if bell == self.seen {
            return Ok(moved);
        }
        self.seen = bell;
        let mut wake = Vec::new();
        let mut first_err = None;
        let news = (0..self.inbox.news_words()).flat_map(|w| {
            let bits = self.inbox.take_news(w);
            (0..64)
                .filter(move |b| bits & (1 << b) != 0)
                .map(move |b| w * 64 + b)
        });
        let news: Vec<usize> = news.collect();
        for slot in news {
            if slot == me || slot >= self.rx.len() || self.rx_failed[slot] {
                continue;
            }
            let ring = self.inbox.ring(slot);
            let stats = &mut self.stats;
            match self.rx[slot].drain(&ring, self.max_message, |h, b| {
                stats.received += 1;
                stats.bytes_received += b.len() as u64;
                deliver(slot, h, b)
            }) {
                Ok(d) => {
                    moved |= d.records > 0;
                    if d.wake_producer {
                        wake.push(slot);
                    }
                }
                Err(e) => {
                    self.rx_failed[slot] = true;
                    first_err.get_or_insert(ShmError::Corrupt { slot, why: e.0 });
                }
            }
        }
        for slot in wake {
            if let Ok(p) = self.peer(slot) {
                if ring_if_sleeping(p) {
                    self.stats.rings += 1;
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(moved),
        }
    }

    /// Call before blocking on the bell: asks peers to wake us for space our queues
    /// wait for, says we are about to sleep, and checks once more. Returns false if
    /// something is already there (then do not block, call [`Endpoint::progress`]).
    pub fn prepare_sleep(&mut self) -> Result<bool, ShmError> {
        let mut pushed = false;
        let me = self.me;
        for slot in 0..self.peers.len() {
            if let PeerState::Attached(p) = &mut self.peers[slot] {
                if p.busy() {
                    let ring = p.seg.ring(me);
                    let r =
                        p.tx.ask_for_space(&ring)
                            .map_err(|e| ShmError::Corrupt { slot, why: e.0 })?;
                    self.stats.single_copy += r.single as u64;
                    if r.records > 0 {
                        pushed = true;
                        p.seg.mark(me);
                        p.seg.doorbell().fetch_add(1, Ordering::SeqCst);
                        if ring_if_sleeping(p) {
                            self.stats.rings += 1;
                        }
                    }
                }
            }
        }
        self.inbox.sleeping().store(1, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        if pushed || self.inbox.doorbell().load(Ordering::SeqCst) != self.seen {
            self.inbox.sleeping().store(0, Ordering::SeqCst);
            return Ok(false);
        }
        Ok(true)
    }

    /// Call after waking from the bell (or timing out): clears the sleeping word and
    /// the bell.
    pub fn woke(&self) {
        self.inbox.sleeping().store(0, Ordering::SeqCst);
        self.bell.drain();
    }
}

impl Peer {
    /// Whether messages wait for room in its ring or for it to read them.
    fn busy(&self) -> bool {
        !self.tx.is_empty() || self.tx.pinned() > 0
    }
}

/// Pushes `p`'s queue into its ring for us and wakes it if it sleeps; asks to be woken
/// for space if some is left. Returns whether it rang the bell, and how many messages
/// went by single copy.
fn push(p: &mut Peer, me: usize, slot: usize) -> Result<(bool, usize), ShmError> {
    let ring = p.seg.ring(me);
    let corrupt = |e: RingError| ShmError::Corrupt { slot, why: e.0 };
    let mut r = p.tx.push(&ring).map_err(corrupt)?;
    if !p.tx.is_empty() {
        let again = p.tx.ask_for_space(&ring).map_err(corrupt)?;
        r.records += again.records;
        r.single += again.single;
    }
    if r.records == 0 {
        return Ok((false, r.single));
    }
    p.seg.mark(me);
    p.seg.doorbell().fetch_add(1, Ordering::SeqCst);
    Ok((ring_if_sleeping(p), r.single))
}

/// Rings `p`'s bell if it said it is about to sleep (clearing that, so only one of
/// several producers pays for the system call).
fn ring_if_sleeping(p: &Peer) -> bool {
    let s = p.seg.sleeping();
    if s.load(Ordering::SeqCst) != 0 && s.swap(0, Ordering::SeqCst) != 0 {
        // A failed write means the peer is gone; its loss is the job's to notice.
        let _ = p.ringer.ring();
        return true;
    }
    false
}
