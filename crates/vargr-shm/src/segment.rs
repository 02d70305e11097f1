//! A segment: one process's inbox, a sealed memfd holding a header and one ring per
//! process of the host.
//!
//! Why a memfd: its pages live in shared memory, never written back to a disk (a file in a
//! runtime directory on ext4 would be), and it can be sealed against shrinking, so a
//! peer that truncates it cannot make our mapping fault (SIGBUS) under us. Peers open it
//! through `/proc/<pid>/fd/<fd>`, which the kernel allows only to processes that may
//! inspect the owner (same user); the pid and fd reach them through a pointer file in the
//! private runtime directory (see `Endpoint`).
//!
//! Layout (all offsets multiples of 64, so each written field has its own cache line):
//!
//! ```text
//! 0     header: magic, version, slots, ring_bytes, owner pid, probe address
//! 64    sleeping (u32: the owner is about to block), doorbell (u64: pushes so far)
//! 128   one bit per ring that has news (u64 words), rounded up to 64 bytes
//! R     ring 0: tail (64 B line), head (64 B line), producer waiting and single-copy
//!       reads done (64 B line), data
//! ...   ring 1, …
//! ```
//!
//! Everything after the header is written by peers, so nothing read from it is trusted:
//! the layout used is the one validated when the segment was opened, and the rings
//! check every position and length they read (see [`crate::ring`]).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

use crate::error::ShmError;
use crate::ring::Ring;

const MAGIC: u64 = u64::from_le_bytes(*b"VARGRSHM");
const VERSION: u32 = 1;
const HEADER: usize = 128;
/// Tail, head and producer-waiting lines before each ring's data.
pub(crate) const RING_HEADER: usize = 192;
/// Smallest and largest ring: a record header and some payload at least; a size whose
/// segment cannot overflow `usize` arithmetic at most.
pub const MIN_RING: usize = 4096;
pub const MAX_RING: usize = 1 << 30;
/// Most processes a segment has rings for.
pub const MAX_SLOTS: usize = 1 << 16;

/// A new memfd of `len` bytes, sealed so that no one may shrink it (a mapping of it
/// would fault) or change its seals.
pub(crate) fn sealed_memfd(name: &str, len: usize) -> Result<OwnedFd, ShmError> {
    let io = |what: &'static str| move |e| ShmError::io(what, name, e);
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .map_err(io("creating the memfd"))?;
    rustix::fs::ftruncate(&fd, len as u64).map_err(io("sizing the memfd"))?;
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::SEAL)
        .map_err(io("sealing the memfd"))?;
    Ok(fd)
}

/// Checks that `fd` is a memfd of this user sealed against shrinking; returns its size.
pub(crate) fn check_sealed(fd: &OwnedFd, who: &str) -> Result<usize, ShmError> {
    let bad = |why: String| ShmError::Refused {
        who: who.to_string(),
        why,
    };
    let st = rustix::fs::fstat(fd).map_err(|e| ShmError::io("inspecting", who, e))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(bad("not a regular file".into()));
    }
    if st.st_uid != rustix::process::getuid().as_raw() {
        return Err(bad(format!("owned by uid {}", st.st_uid)));
    }
    let seals = rustix::fs::fcntl_get_seals(fd).map_err(|e| {
        bad(format!(
            "not a sealable memfd ({e}): a peer could shrink it under the mapping"
        ))
    })?;
    if !seals.contains(SealFlags::SHRINK | SealFlags::SEAL) {
        return Err(bad("not sealed against shrinking".into()));
    }
    usize::try_from(st.st_size).map_err(|_| bad("negative size".into()))
}

/// Maps `len` bytes of `fd` shared, read and write. The caller unmaps it.
pub(crate) fn map_shared(fd: &OwnedFd, len: usize, who: &str) -> Result<NonNull<u8>, ShmError> {
    // SAFETY: a fresh shared mapping of `len` bytes of a file at least that long (checked
    // or just sized, and sealed against shrinking); the caller unmaps it in its Drop.
    let p = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            fd,
            0,
        )
    }
    .map_err(|e| ShmError::io("mapping", who, e))?;
    NonNull::new(p.cast::<u8>()).ok_or_else(|| ShmError::Layout("null map".into()))
}

/// Bytes of the news bitmap for `slots` rings, whole cache lines.
fn bitmap_bytes(slots: usize) -> usize {
    (slots.div_ceil(64) * 8).div_ceil(64) * 64
}

/// The shape of a segment: how many rings and how large each is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    slots: usize,
    ring_bytes: usize,
}

impl Layout {
    /// `slots` rings of `ring_bytes` each (a power of two between [`MIN_RING`] and
    /// [`MAX_RING`]).
    pub fn new(slots: usize, ring_bytes: usize) -> Result<Layout, ShmError> {
        if slots == 0 || slots > MAX_SLOTS {
            return Err(ShmError::Layout(format!(
                "{slots} rings (1 to {MAX_SLOTS} allowed)"
            )));
        }
        if !ring_bytes.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&ring_bytes) {
            return Err(ShmError::Layout(format!(
                "rings of {ring_bytes} bytes (a power of two from {MIN_RING} to {MAX_RING})"
            )));
        }
        let len = (RING_HEADER + ring_bytes)
            .checked_mul(slots)
            .and_then(|r| r.checked_add(HEADER + bitmap_bytes(slots)));
        if len.is_none() || len > Some(isize::MAX as usize) {
            return Err(ShmError::Layout(format!(
                "{slots} rings of {ring_bytes} bytes do not fit in memory"
            )));
        }
        Ok(Layout { slots, ring_bytes })
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    pub fn ring_bytes(&self) -> usize {
        self.ring_bytes
    }

    /// Bytes of the whole segment.
    pub fn len(&self) -> usize {
        self.rings_start() + self.slots * (RING_HEADER + self.ring_bytes)
    }

    /// Whether the layout has no rings (never true for a validated layout).
    pub fn is_empty(&self) -> bool {
        self.slots == 0
    }

    fn rings_start(&self) -> usize {
        HEADER + bitmap_bytes(self.slots)
    }

    fn ring_offset(&self, i: usize) -> usize {
        self.rings_start() + i * (RING_HEADER + self.ring_bytes)
    }
}

/// A mapped segment, created here or opened from a peer.
pub struct Segment {
    ptr: NonNull<u8>,
    layout: Layout,
    fd: OwnedFd,
    /// The owner's pid, and where the segment's magic lies in the owner's memory (a
    /// peer reads it with `process_vm_readv` to learn whether single copies work).
    owner: u32,
    probe: u64,
}

// SAFETY: the mapping is shared memory that other processes write concurrently anyway;
// every access to it goes through atomics or raw copies whose results are validated, so
// sharing the handle between threads adds nothing a peer process cannot already do.
unsafe impl Send for Segment {}
unsafe impl Sync for Segment {}

impl Segment {
    /// Creates a new segment as a sealed memfd named `name` (the name shows in
    /// `/proc/<pid>/fd`, for whoever debugs), owned by process `pid`.
    pub fn create(name: &str, layout: Layout) -> Result<Segment, ShmError> {
        let fd = sealed_memfd(name, layout.len())?;
        let mut seg = Segment::map(fd, layout, name)?;
        let h = seg.ptr.as_ptr();
        seg.probe = h as u64;
        // SAFETY: the header lies inside the mapping just made, which nobody else has yet.
        unsafe {
            (h.add(8) as *mut u32).write(VERSION);
            (h.add(12) as *mut u32).write(layout.slots as u32);
            (h.add(16) as *mut u64).write(layout.ring_bytes as u64);
            (h.add(24) as *mut u32).write(std::process::id());
            (h.add(32) as *mut u64).write(h as u64);
        }
        seg.header_word(0).store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Opens the segment that `fd` refers to, made by process `owner` for `slots`
    /// processes. Refuses anything that is not a sealed segment of that shape: a file
    /// another process could shrink under our mapping, a foreign header, a size that
    /// does not match.
    pub fn open(fd: OwnedFd, owner: u32, slots: usize, who: &str) -> Result<Segment, ShmError> {
        let bad = |why: String| ShmError::Refused {
            who: who.to_string(),
            why,
        };
        let size = check_sealed(&fd, who)?;
        // Read the header through a pread, not the mapping: its size is not known yet.
        let mut h = [0u8; 40];
        let n = rustix::io::pread(&fd, &mut h, 0).map_err(|e| ShmError::io("reading", who, e))?;
        if n != h.len() {
            return Err(bad("shorter than a header".into()));
        }
        let word = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().expect("4 bytes"));
        let magic = u64::from_le_bytes(h[0..8].try_into().expect("8 bytes"));
        if magic != MAGIC || word(8) != VERSION {
            return Err(bad("not a vargr segment of this version".into()));
        }
        if word(24) != owner {
            return Err(bad(format!("made by process {}, not {owner}", word(24))));
        }
        if word(12) as usize != slots {
            return Err(bad(format!("{} rings, expected {slots}", word(12))));
        }
        let ring_bytes = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
        let layout = usize::try_from(ring_bytes)
            .map_err(|_| bad(format!("rings of {ring_bytes} bytes")))
            .and_then(|r| Layout::new(slots, r).map_err(|e| bad(e.to_string())))?;
        if layout.len() != size {
            return Err(bad(format!(
                "{size} bytes, expected {} for its layout",
                layout.len()
            )));
        }
        let mut seg = Segment::map(fd, layout, who)?;
        seg.owner = owner;
        seg.probe = u64::from_le_bytes(h[32..40].try_into().expect("8 bytes"));
        Ok(seg)
    }

    /// Whether this process can read the owner's memory directly (`process_vm_readv`,
    /// which the kernel allows to processes that may ptrace it): then large messages go
    /// by one copy, the receiver reading the sender's buffer. Probed by reading the
    /// segment's magic where the owner says it lies.
    pub fn single_copy_works(&self) -> bool {
        let mut word = [0u8; 8];
        crate::ring::read_remote(self.owner, self.probe, &mut word).is_ok()
            && u64::from_le_bytes(word) == MAGIC
    }

    fn map(fd: OwnedFd, layout: Layout, who: &str) -> Result<Segment, ShmError> {
        let ptr = map_shared(&fd, layout.len(), who)?;
        Ok(Segment {
            ptr,
            layout,
            fd,
            owner: std::process::id(),
            probe: 0,
        })
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The memfd, for the pointer file (`/proc/<pid>/fd/<fd>`).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Ring `i` (the one process `i` of the host writes into).
    pub fn ring(&self, i: usize) -> Ring<'_> {
        assert!(i < self.layout.slots, "ring {i} of {}", self.layout.slots);
        let off = self.layout.ring_offset(i);
        // SAFETY: `off` and the ring's extent lie inside the mapping (the layout was
        // validated against the mapping's length).
        unsafe { Ring::new(self.ptr.as_ptr().add(off), self.layout.ring_bytes, self) }
    }

    fn header_word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= HEADER);
        // SAFETY: an aligned word of the header, inside the mapping for as long as self.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU64) }
    }

    /// Set by the owner just before it blocks; a producer that clears it must wake it.
    pub fn sleeping(&self) -> &AtomicU32 {
        // SAFETY: as header_word.
        unsafe { &*(self.ptr.as_ptr().add(64) as *const AtomicU32) }
    }

    /// Bumped by every producer after a push, so the owner checks one word, not every
    /// ring, to know whether anything arrived.
    pub fn doorbell(&self) -> &AtomicU64 {
        self.header_word(72)
    }

    /// Marks ring `i` as having news (by its producer, before the doorbell), so the
    /// owner reads only rings that have some: scanning every ring of a large job costs
    /// a cache miss each, and touching untouched rings would make their pages.
    pub fn mark(&self, i: usize) {
        self.news_word(i / 64)
            .fetch_or(1 << (i % 64), Ordering::SeqCst);
    }

    /// Takes the news bits of rings `64 w .. 64 w + 63`.
    pub fn take_news(&self, w: usize) -> u64 {
        self.news_word(w).swap(0, Ordering::AcqRel)
    }

    /// Words of news bits.
    pub fn news_words(&self) -> usize {
        self.layout.slots.div_ceil(64)
    }

    fn news_word(&self, w: usize) -> &AtomicU64 {
        assert!(w < self.news_words());
        // SAFETY: an aligned word of the bitmap, inside the mapping for as long as self.
        unsafe { &*(self.ptr.as_ptr().add(HEADER + 8 * w) as *const AtomicU64) }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, not used after this (borrows of it end with
        // `self`).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.layout.len()) };
    }
}
