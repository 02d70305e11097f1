//! Wake-ups between processes: a FIFO per process that peers write a byte into.
//!
//! Why a FIFO: the process that waits usually waits for sockets too (its mesh may have
//! links to other hosts, and accepts connections), so the wake-up must be a file
//! descriptor its poller can watch alongside them. A futex cannot be polled; an eventfd
//! can, but cannot be opened by another process (reopening it through `/proc` fails), and
//! passing it needs a socket exchange first. A FIFO in the private runtime directory is
//! pollable and opened by name. Writes happen only when the owner said it is about to
//! block (the segment's `sleeping` word), so a busy exchange costs no system calls.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

use crate::error::ShmError;

/// The owner's end: created new, read to drain wake-ups.
pub struct Bell {
    fd: OwnedFd,
    path: PathBuf,
}

fn check_fifo(fd: &OwnedFd, path: &Path) -> Result<(), ShmError> {
    let st = rustix::fs::fstat(fd).map_err(|e| ShmError::io("inspecting", path, e))?;
    let refuse = |why: String| ShmError::Refused {
        who: path.display().to_string(),
        why,
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::Fifo {
        return Err(refuse("not a FIFO".into()));
    }
    if st.st_uid != rustix::process::getuid().as_raw() {
        return Err(refuse(format!("owned by uid {}", st.st_uid)));
    }
    if st.st_mode & 0o077 != 0 {
        return Err(refuse(format!(
            "mode {:04o}: others could ring it",
            st.st_mode & 0o7777
        )));
    }
    Ok(())
}

impl Bell {
    /// Makes a new FIFO at `path` (mode 0600; fails if anything is there) and opens it.
    /// The caller removes the file when done with it.
    pub fn create(path: &Path) -> Result<Bell, ShmError> {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .map_err(|e| ShmError::io("creating", path, e))?;
        // Read and write, so the FIFO never reports end-of-file when no peer has it open
        // and opening it does not wait for a writer.
        let fd = rustix::fs::open(
            path,
            OFlags::RDWR | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ShmError::io("opening", path, e))?;
        check_fifo(&fd, path)?;
        Ok(Bell {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The descriptor to poll for readability.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads away every pending wake-up.
    pub fn drain(&self) {
        let mut buf = [0u8; 64];
        while let Ok(n) = rustix::io::read(&self.fd, &mut buf) {
            if n < buf.len() {
                break;
            }
        }
    }

    /// Waits until rung or `timeout` passes (for users without a poller of their own).
    pub fn wait(&self, timeout: std::time::Duration) {
        let mut fds = [rustix::event::PollFd::new(
            &self.fd,
            rustix::event::PollFlags::IN,
        )];
        let ts = rustix::event::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let _ = rustix::event::poll(&mut fds, Some(&ts));
    }
}

/// A peer's bell, opened for ringing.
pub struct Ringer {
    fd: OwnedFd,
}

impl Ringer {
    /// Opens the FIFO at `path` for writing, refusing anything but a private FIFO of
    /// this user (not a link).
    pub fn open(path: &Path) -> Result<Ringer, ShmError> {
        let fd = rustix::fs::open(
            path,
            OFlags::WRONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ShmError::io("opening", path, e))?;
        check_fifo(&fd, path)?;
        Ok(Ringer { fd })
    }

    /// Rings once. A full FIFO already holds a wake-up, so "would block" is success.
    pub fn ring(&self) -> io::Result<()> {
        match rustix::io::write(&self.fd, &[1]) {
            Ok(_) | Err(rustix::io::Errno::AGAIN) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
