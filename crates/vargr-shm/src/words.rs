//! A small table of 64-bit words shared by the processes of one host.
//!
//! Why: some state is a handful of numbers that every process of a job updates with
//! atomics (an emulated WAN's shared bottleneck is one clock per pair of sites, see
//! `vargr_emu::Gateways`); it needs no rings and no bell, only memory that all of them
//! map. As for [`Segment`](crate::Segment), the memory is a sealed memfd (no peer can
//! shrink it under a mapping and make it fault), found through a pointer file in the
//! user's private runtime directory ([`write_pointer`](crate::write_pointer)), and gone
//! when the last process that holds it ends. What it holds is the caller's to check:
//! any process of the user may have written any value into any word.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use crate::error::ShmError;
use crate::segment::{check_sealed, map_shared, sealed_memfd};

/// The most words a table may have (8 MiB): larger is not a table.
pub const MAX_WORDS: usize = 1 << 20;

/// `n` shared words, zero when created.
pub struct Words {
    ptr: NonNull<AtomicU64>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is only reached through `&[AtomicU64]`, which is Send and Sync;
// the memfd is sealed, so the mapping cannot be shrunk under it.
unsafe impl Send for Words {}
unsafe impl Sync for Words {}

impl Words {
    /// A new table of `n` zero words in a sealed memfd named `name` (the name shows in
    /// `/proc/<pid>/fd`, for whoever debugs).
    pub fn create(name: &str, n: usize) -> Result<Words, ShmError> {
        if n == 0 || n > MAX_WORDS {
            return Err(ShmError::Layout(format!("table of {n} words")));
        }
        let fd = sealed_memfd(name, n * 8)?;
        Words::map(fd, n, name)
    }

    /// Opens the table `fd` refers to: a sealed memfd of this user whose size is a whole
    /// number of words, at most [`MAX_WORDS`].
    pub fn open(fd: OwnedFd, who: &str) -> Result<Words, ShmError> {
        let size = check_sealed(&fd, who)?;
        if size == 0 || size % 8 != 0 || size / 8 > MAX_WORDS {
            return Err(ShmError::Refused {
                who: who.to_string(),
                why: format!("{size} bytes is not a table of words"),
            });
        }
        Words::map(fd, size / 8, who)
    }

    /// Opens the table a pointer file (written by [`crate::write_pointer`]) names.
    pub fn open_pointer(path: &Path) -> Result<Words, ShmError> {
        let (_, fd, who) = crate::open_pointer(path)?;
        Words::open(fd, &who)
    }

    fn map(fd: OwnedFd, n: usize, who: &str) -> Result<Words, ShmError> {
        let ptr = map_shared(&fd, n * 8, who)?.cast::<AtomicU64>();
        Ok(Words { ptr, len: n, fd })
    }

    /// The words, for atomic loads, stores and compare-and-swaps.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: a live shared mapping of `len` words (page-aligned, so aligned for
        // AtomicU64), sealed against shrinking, unmapped only in Drop.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The memfd, for a pointer file.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl std::fmt::Debug for Words {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Words({} words)", self.len)
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`; borrows of it end with `self`.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len * 8) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering;

    #[test]
    fn two_mappings_of_one_table_see_the_same_words() {
        let a = Words::create("vargr-test-words", 16).unwrap();
        let path = format!("/proc/self/fd/{}", a.fd().as_raw_fd());
        let fd: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap()
            .into();
        let b = Words::open(fd, &path).unwrap();
        assert_eq!(b.words().len(), 16);
        a.words()[3].store(42, Ordering::Release);
        assert_eq!(b.words()[3].load(Ordering::Acquire), 42);
    }

    #[test]
    fn a_pointer_file_finds_the_table_and_bad_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = Words::create("vargr-test-words", 4).unwrap();
        let p = dir.path().join("t.ptr");
        crate::write_pointer(&p, a.fd()).unwrap();
        let b = Words::open_pointer(&p).unwrap();
        b.words()[0].store(7, Ordering::Release);
        assert_eq!(a.words()[0].load(Ordering::Acquire), 7);
        // A plain file could be shrunk under the mapping: refused.
        let plain = dir.path().join("plain");
        std::fs::write(&plain, [0u8; 64]).unwrap();
        let fd: OwnedFd = std::fs::File::open(&plain).unwrap().into();
        let e = Words::open(fd, "plain").unwrap_err().to_string();
        assert!(e.contains("plain refused"), "{e}");
        assert!(Words::create("x", 0).is_err());
        assert!(Words::create("x", MAX_WORDS + 1).is_err());
    }
}
