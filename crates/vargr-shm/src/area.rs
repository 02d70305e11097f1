//! A shared area where the ranks of a job on one host meet for small collectives.
//!
//! Why: an allreduce of a few bytes between processes costs a message per hop, and with
//! many ranks per core every hop is a trip through the scheduler. The threads of one
//! process avoid that with the PATHS wrapper (`vargr-coll`'s arena): every rank deposits
//! its buffer and waits, the last to arrive combines them and wakes everyone once. This
//! is the same meeting place across processes: one sealed memfd with a slot per rank, an
//! arrival counter, and a generation word that waiters block on with a futex (after a
//! few yields), so waiting never spins.
//!
//! Large buffers are combined by all ranks at once instead ("split" rounds): after every
//! rank has deposited, rank `b` combines block `b` of all slots into the result area,
//! and a second meeting tells everyone the result is whole. Any rank may mark such a
//! round failed, with a reason.
//!
//! The combining itself (element types, operators) belongs to the caller; this holds the
//! bytes and the synchronisation. Slots are written by peers, so every length read from
//! the area is checked against the slot size.
//!
//! ```text
//! 0     magic, ranks, slot bytes, owner pid
//! 64    arrived (u32)          128  generation (u32, the futex word)
//! 192   waiters (u32)          256  result length (u64), status (u32: 0 ok, 1 failed)
//! 268   failure flag (u32), failure length (u32)
//! 320   why a split round failed (256 bytes)
//! 576   slot lengths (u64 each), rounded up to 64 bytes
//! …     result, then one slot per rank (slot bytes each)
//! ```

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use rustix::thread::futex;

use crate::error::ShmError;

const MAGIC: u64 = u64::from_le_bytes(*b"VARGRCOL");
const FAILED: usize = 268;
const FAILED_LEN: usize = 272;
const WHY: usize = 320;
const WHY_BYTES: usize = 256;
const LENS: usize = WHY + WHY_BYTES;

/// The meeting place of `ranks` ranks for buffers of up to `slot` bytes.
pub struct Area {
    ptr: NonNull<u8>,
    len: usize,
    ranks: usize,
    slot: usize,
    fd: OwnedFd,
}

// SAFETY: as for `Segment`: all access to the shared bytes goes through atomics or
// copies whose results are checked.
unsafe impl Send for Area {}
unsafe impl Sync for Area {}

fn layout(ranks: usize, slot: usize) -> Option<(usize, usize)> {
    let lens = (ranks.checked_mul(8)?).div_ceil(64) * 64;
    let data = LENS.checked_add(lens)?;
    let len = slot.checked_mul(ranks.checked_add(1)?)?.checked_add(data)?;
    (len <= isize::MAX as usize).then_some((data, len))
}

/// The outcome a combining rank published.
pub enum Outcome {
    Done,
    Failed(String),
}

impl Area {
    /// A new area for `ranks` ranks and buffers of up to `slot` bytes.
    pub fn create(name: &str, ranks: usize, slot: usize) -> Result<Area, ShmError> {
        let (_, len) = layout(ranks, slot)
            .filter(|_| ranks > 0 && slot % 8 == 0)
            .ok_or_else(|| ShmError::Layout(format!("{ranks} slots of {slot} bytes")))?;
        let fd = crate::segment::sealed_memfd(name, len)?;
        let a = Area::map(fd, ranks, slot, len, name)?;
        let h = a.ptr.as_ptr();
        // SAFETY: the header of a mapping only this process has so far.
        unsafe {
            (h.add(8) as *mut u32).write(ranks as u32);
            (h.add(12) as *mut u32).write(slot as u32);
            (h.add(16) as *mut u32).write(std::process::id());
        }
        a.word64(0).store(MAGIC, Ordering::Release);
        Ok(a)
    }

    /// Opens the area `fd` refers to, made by process `owner` for `ranks` ranks and
    /// `slot`-byte buffers; anything else (unsealed, another shape) is refused.
    pub fn open(
        fd: OwnedFd,
        owner: u32,
        ranks: usize,
        slot: usize,
        who: &str,
    ) -> Result<Area, ShmError> {
        let bad = |why: String| ShmError::Refused {
            who: who.to_string(),
            why,
        };
        let size = crate::segment::check_sealed(&fd, who)?;
        let (_, len) = layout(ranks, slot).ok_or_else(|| bad("impossible shape".into()))?;
        if size != len {
            return Err(bad(format!("{size} bytes, expected {len}")));
        }
        let mut h = [0u8; 20];
        let n = rustix::io::pread(&fd, &mut h, 0).map_err(|e| ShmError::io("reading", who, e))?;
        let word = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().expect("4 bytes"));
        if n != h.len() || u64::from_le_bytes(h[0..8].try_into().expect("8")) != MAGIC {
            return Err(bad("not a vargr collective area".into()));
        }
        if (word(8) as usize, word(12) as usize, word(16)) != (ranks, slot, owner) {
            return Err(bad(format!(
                "{} slots of {} bytes made by process {}, expected {ranks} of {slot} by {owner}",
                word(8),
                word(12),
                word(16)
            )));
        }
        Area::map(fd, ranks, slot, len, who)
    }

    fn map(
        fd: OwnedFd,
        ranks: usize,
        slot: usize,
        len: usize,
        who: &str,
    ) -> Result<Area, ShmError> {
        let ptr = crate::segment::map_shared(&fd, len, who)?;
        Ok(Area {
            ptr,
            len,
            ranks,
            slot,
            fd,
        })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// Largest buffer a rank may deposit.
    pub fn slot_bytes(&self) -> usize {
        self.slot
    }

    fn word32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: an aligned header word inside the mapping, alive as long as self.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU32) }
    }

    fn word64(&self, off: usize) -> &AtomicU64 {
        // SAFETY: as word32.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU64) }
    }

    fn data(&self, i: usize) -> *mut u8 {
        let (start, _) = layout(self.ranks, self.slot).expect("validated");
        // SAFETY: area `i` (0: the result, 1 + r: rank r's slot) lies inside the mapping.
        unsafe { self.ptr.as_ptr().add(start + i * self.slot) }
    }

    /// The round now under way (read before depositing).
    pub fn generation(&self) -> u32 {
        self.word32(128).load(Ordering::Acquire)
    }

    /// Puts rank `r`'s buffer in its slot.
    pub fn deposit(&self, r: usize, data: &[u8]) -> Result<(), ShmError> {
        if r >= self.ranks || data.len() > self.slot {
            return Err(ShmError::Layout(format!(
                "{} bytes from rank {r} in slots of {} for {} ranks",
                data.len(),
                self.slot,
                self.ranks
            )));
        }
        // SAFETY: rank r's slot, `slot` bytes long; only rank r writes it in a round.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.data(1 + r), data.len()) };
        self.word64(LENS + 8 * r)
            .store(data.len() as u64, Ordering::Release);
        Ok(())
    }

    /// Counts this rank in; true for the last of the round (which must combine and
    /// [`Area::publish`]).
    pub fn arrive(&self) -> bool {
        self.word32(64).fetch_add(1, Ordering::AcqRel) as usize + 1 == self.ranks
    }

    /// The length of rank `r`'s deposit, checked against the slot.
    fn deposited(&self, r: usize) -> Result<usize, ShmError> {
        if r >= self.ranks {
            return Err(ShmError::Layout(format!("rank {r} of {}", self.ranks)));
        }
        let n = self.word64(LENS + 8 * r).load(Ordering::Acquire);
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.slot)
            .ok_or_else(|| ShmError::Corrupt {
                slot: r,
                why: format!("rank {r} deposited {n} bytes in a {}-byte slot", self.slot),
            })
    }

    /// The length every rank deposited this round, or which rank deposited another.
    pub fn common_length(&self) -> Result<usize, String> {
        let first = self.deposited(0).map_err(|e| e.to_string())?;
        for r in 1..self.ranks {
            let n = self.deposited(r).map_err(|e| e.to_string())?;
            if n != first {
                return Err(format!("rank {r} contributed {n} bytes, rank 0 {first}"));
            }
        }
        Ok(first)
    }

    /// Copies bytes `at..at + dst.len()` of rank `r`'s deposit into `dst`.
    pub fn read_slot_part(&self, r: usize, at: usize, dst: &mut [u8]) -> Result<(), ShmError> {
        let n = self.deposited(r)?;
        if at.checked_add(dst.len()).is_none_or(|end| end > n) {
            return Err(ShmError::Corrupt {
                slot: r,
                why: format!("bytes {at}+{} of a {n}-byte deposit", dst.len()),
            });
        }
        // SAFETY: inside rank r's deposit (checked), which lies inside its slot.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data(1 + r).add(at), dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }

    /// Writes `src` at `at` in the result area (each rank its own block in a split round).
    pub fn write_result_part(&self, at: usize, src: &[u8]) -> Result<(), ShmError> {
        if at.checked_add(src.len()).is_none_or(|end| end > self.slot) {
            return Err(ShmError::Layout(format!(
                "bytes {at}+{} of a {}-byte result area",
                src.len(),
                self.slot
            )));
        }
        // SAFETY: inside the result area (checked).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.data(0).add(at), src.len()) };
        Ok(())
    }

    /// Copies the first `dst.len()` bytes of the result area of a split round.
    pub fn read_result_part(&self, dst: &mut [u8]) -> Result<(), ShmError> {
        if dst.len() > self.slot {
            return Err(ShmError::Layout(format!(
                "{} bytes from a {}-byte result area",
                dst.len(),
                self.slot
            )));
        }
        // SAFETY: inside the result area (checked).
        unsafe { std::ptr::copy_nonoverlapping(self.data(0), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Marks the split round failed; the first reason given is kept.
    pub fn fail(&self, why: &str) {
        if self
            .word32(FAILED)
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let mut n = why.len().min(WHY_BYTES);
            while !why.is_char_boundary(n) {
                n -= 1;
            }
            // SAFETY: the reason's bytes, only written by the rank that set the flag.
            unsafe { std::ptr::copy_nonoverlapping(why.as_ptr(), self.ptr.as_ptr().add(WHY), n) };
            self.word32(FAILED_LEN).store(n as u32, Ordering::Release);
        }
    }

    /// Why the split round failed, once every rank has met after combining.
    pub fn failure(&self) -> Option<String> {
        if self.word32(FAILED).load(Ordering::Acquire) == 0 {
            return None;
        }
        let n = (self.word32(FAILED_LEN).load(Ordering::Acquire) as usize).min(WHY_BYTES);
        let mut why = vec![0u8; n];
        // SAFETY: n bytes of the reason (bounded above).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(WHY), why.as_mut_ptr(), n) };
        Some(String::from_utf8_lossy(&why).into_owned())
    }

    /// Starts a split round with no failure; the last rank to arrive calls it.
    pub fn clear_failure(&self) {
        self.word32(FAILED_LEN).store(0, Ordering::Relaxed);
        self.word32(FAILED).store(0, Ordering::Release);
    }

    /// Copies rank `r`'s deposit into `dst` (resized to it).
    pub fn read_slot(&self, r: usize, dst: &mut Vec<u8>) -> Result<(), ShmError> {
        let n = self.deposited(r)?;
        dst.clear();
        dst.reserve(n);
        // SAFETY: n bytes of rank r's slot (checked above) into spare capacity, then
        // exposed.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data(1 + r), dst.as_mut_ptr(), n);
            dst.set_len(n);
        }
        Ok(())
    }

    /// The last rank publishes the round's result (or why it failed) and wakes the
    /// others; `gen` is the generation it read before depositing.
    pub fn publish(&self, gen: u32, result: Result<&[u8], &str>) {
        let (bytes, status) = match result {
            Ok(b) => (b, 0u32),
            Err(why) => (why.as_bytes(), 1),
        };
        let n = bytes.len().min(self.slot);
        // SAFETY: the result area, `slot` bytes long; nobody reads it until the
        // generation below moves.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.data(0), n) };
        self.word64(256).store(n as u64, Ordering::Relaxed);
        self.word32(264).store(status, Ordering::Relaxed);
        self.word32(64).store(0, Ordering::Relaxed);
        self.word32(128)
            .store(gen.wrapping_add(1), Ordering::SeqCst);
        if self.word32(192).load(Ordering::SeqCst) > 0 {
            // The count is an int to the kernel: u32::MAX would read as -1 and wake one.
            let _ = futex::wake(self.word32(128), futex::Flags::empty(), i32::MAX as u32);
        }
    }

    /// The last rank to arrive ends round `gen` without a result (a meeting of a split
    /// round) and wakes the others.
    pub fn release(&self, gen: u32) {
        self.word32(64).store(0, Ordering::Relaxed);
        self.end_round(gen);
    }

    fn end_round(&self, gen: u32) {
        self.word32(128)
            .store(gen.wrapping_add(1), Ordering::SeqCst);
        if self.word32(192).load(Ordering::SeqCst) > 0 {
            // The count is an int to the kernel: u32::MAX would read as -1 and wake one.
            let _ = futex::wake(self.word32(128), futex::Flags::empty(), i32::MAX as u32);
        }
    }

    /// Waits until the round `gen` ends: yields `yields` times, then blocks on the
    /// generation word for at most `slice`. Returns whether it ended (the caller checks
    /// its deadlines and calls again otherwise).
    pub fn wait(&self, gen: u32, yields: u32, slice: Duration) -> bool {
        let done = || self.word32(128).load(Ordering::Acquire) != gen;
        for _ in 0..yields {
            if done() {
                return true;
            }
            std::thread::yield_now();
        }
        self.word32(192).fetch_add(1, Ordering::SeqCst);
        if !done() {
            let ts = rustix::thread::futex::Timespec {
                tv_sec: slice.as_secs() as i64,
                tv_nsec: i64::from(slice.subsec_nanos()),
            };
            let _ = futex::wait(self.word32(128), futex::Flags::empty(), gen, Some(&ts));
        }
        self.word32(192).fetch_sub(1, Ordering::SeqCst);
        done()
    }

    /// Copies the round's result into `dst` (which must have its length).
    pub fn result(&self, dst: &mut [u8]) -> Result<Outcome, ShmError> {
        let n = self.word64(256).load(Ordering::Acquire);
        let status = self.word32(264).load(Ordering::Acquire);
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.slot)
            .ok_or_else(|| ShmError::Corrupt {
                slot: 0,
                why: format!("a result of {n} bytes in a {}-byte area", self.slot),
            })?;
        if status != 0 {
            let mut why = vec![0u8; n];
            // SAFETY: n bytes of the result area (checked).
            unsafe { std::ptr::copy_nonoverlapping(self.data(0), why.as_mut_ptr(), n) };
            return Ok(Outcome::Failed(String::from_utf8_lossy(&why).into_owned()));
        }
        if n != dst.len() {
            return Err(ShmError::Corrupt {
                slot: 0,
                why: format!("a result of {n} bytes for a {}-byte buffer", dst.len()),
            });
        }
        // SAFETY: n bytes of the result area (checked) into a buffer of n bytes.
        unsafe { std::ptr::copy_nonoverlapping(self.data(0), dst.as_mut_ptr(), n) };
        Ok(Outcome::Done)
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unused after this.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
