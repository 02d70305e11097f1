//! One writer per cache directory, across processes.
//!
//! Two processes appending to the same containers would interleave records and
//! rebuild different indexes, so the directory holds a `lock` file that the open cache
//! keeps locked (`flock`, exclusive). The kernel drops the lock when the process dies,
//! so a crash leaves no stale lock behind. The file itself stays; it holds the pid of
//! the last holder, for the error message. A second opener, in this process or another,
//! gets [`CacheError::Locked`]; within one process share one cache through
//! [`super::SharedCache`] instead.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use super::CacheError;

pub(crate) const LOCK_FILE: &str = "lock";

/// Held for as long as the cache is open.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
}

pub(crate) fn acquire(dir: &Path) -> Result<DirLock, CacheError> {
    let path = dir.join(LOCK_FILE);
    let io = |source| CacheError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    if !try_lock(&file).map_err(io)? {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        return Err(CacheError::Locked {
            path: path.display().to_string(),
            holder: holder.trim().to_string(),
        });
    }
    let pid = std::process::id().to_string();
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    file.write_all(pid.as_bytes()).map_err(io)?;
    Ok(DirLock { _file: file })
}

#[cfg(unix)]
fn try_lock(file: &File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this function borrows; no memory is passed.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::WouldBlock {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Elsewhere the lock is advisory only: nothing stops a second opener.
#[cfg(not(unix))]
fn try_lock(_file: &File) -> std::io::Result<bool> {
    Ok(true)
}

/// `root/peer`, after checking that `peer` is a plain directory name.
pub(crate) fn peer_dir(root: &Path, peer: &str) -> Result<PathBuf, CacheError> {
    let ok = !peer.is_empty()
        && peer.len() <= 128
        && peer != "."
        && peer != ".."
        && peer
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'@'));
    if ok {
        Ok(root.join(peer))
    } else {
        Err(CacheError::BadPeer {
            peer: peer.to_string(),
        })
    }
}
