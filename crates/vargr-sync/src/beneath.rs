//! The receiver's file operations, each resolved beneath the destination directory
//! without following a symbolic link.
//!
//! Why: the tree comes from the sender, and a sender may be hostile (a daemon's client,
//! or a tree unpacked from elsewhere). With plain paths, a link it created earlier
//! (`d -> /elsewhere`, then files under `d/`) or one named like a temporary file
//! (`.f.vargr-partial -> ~/.bashrc`) made the receiver write, chmod and touch outside
//! the destination. Here every path is walked component by component from an open
//! directory with `openat(O_PATH|O_DIRECTORY|O_NOFOLLOW)`: a link on the way stops the
//! walk with [`SyncError::ThroughLink`] naming it. Files are created with
//! `O_CREAT|O_EXCL|O_NOFOLLOW`, existing ones opened with `O_NOFOLLOW`; metadata is set
//! on the open descriptor (`fchmod`, `futimens`) or, for a link, with
//! `AT_SYMLINK_NOFOLLOW`; renames stay inside one directory descriptor. A link in the
//! tree is data: it is recreated with `symlinkat` and never followed.
//!
//! Where an entry of the wrong kind is in the way, it is replaced as rsync does: a
//! link or file where a directory goes is unlinked (the link itself, not its target)
//! and the directory made; a file or link lands by `renameat` over whatever non-directory
//! is there. A directory where a file or link goes is an error, never emptied.
//!
//! Why rustix and a component-wise walk rather than `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`: openat2 needs Linux 5.6 and container seccomp filters often
//! answer ENOSYS, so a fallback walk would be needed anyway; the walk costs one
//! `openat` per level and the receiver keeps the last directory open, so the files of
//! one directory cost none. rustix gives the `*at` calls with owned descriptors and no
//! unsafe code; cap-std would also work but follows links that stay inside its root,
//! and a link in a synced tree must never be followed at all.
//!
//! The root itself is opened following links: it is the path the user (or the
//! daemon's operator) named, as with rsync.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;

use crate::SyncError;

/// An open directory beneath the destination, and its path for messages.
#[derive(Debug)]
pub(crate) struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

fn io(what: &'static str, path: &Path, e: Errno) -> SyncError {
    SyncError::io(what, path, e.into())
}

const DIR_FLAGS: OFlags = OFlags::PATH
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

impl Dir {
    /// Opens a directory the user named, creating it (and its parents) if missing.
    /// Links in this path are followed: it is the user's own argument.
    pub fn open_root(path: &Path, create: bool) -> Result<Dir, SyncError> {
        if create {
            std::fs::create_dir_all(path).map_err(|e| SyncError::io("creating", path, e))?;
        }
        let fd = rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io("opening", path, e))?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The path of `name` in this directory, for messages.
    pub fn show(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// What `name` is, without following it; None if it does not exist.
    pub fn kind(&self, name: &str) -> Result<Option<FileType>, SyncError> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(FileType::from_raw_mode(st.st_mode))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(io("examining", &self.show(name), e)),
        }
    }

    /// `name`'s status, without following it; None if it cannot be read.
    pub fn stat(&self, name: &str) -> Option<rustix::fs::Stat> {
        rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).ok()
    }

    /// The existing directory `name`; a link there is refused with an error naming it.
    pub fn open_dir(&self, name: &str) -> Result<Dir, SyncError> {
        let path = self.show(name);
        match rustix::fs::openat(&self.fd, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(Dir { fd, path }),
            Err(e) => Err(match self.kind(name) {
                Ok(Some(FileType::Symlink)) => SyncError::ThroughLink {
                    link: path.display().to_string(),
                },
                _ => io("opening the directory", &path, e),
            }),
        }
    }

    /// The directory at `rel` (components below this one, none of them a link).
    pub fn walk<'a>(&self, comps: impl IntoIterator<Item = &'a str>) -> Result<Dir, SyncError> {
        let mut d = self.try_clone()?;
        for c in comps {
            d = d.open_dir(c)?;
        }
        Ok(d)
    }

    pub fn try_clone(&self) -> Result<Dir, SyncError> {
        Ok(Dir {
            fd: self
                .fd
                .try_clone()
                .map_err(|e| SyncError::io("duplicating the descriptor of", &self.path, e))?,
            path: self.path.clone(),
        })
    }

    /// The directory `name`, made if missing; a link or file in the way is removed
    /// first (the entry itself: its target is never touched).
    pub fn make_dir(&self, name: &str) -> Result<Dir, SyncError> {
        let path = self.show(name);
        match self.kind(name)? {
            Some(FileType::Directory) => return self.open_dir(name),
            Some(_) => rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())
                .map_err(|e| io("replacing with a directory", &path, e))?,
            None => {}
        }
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(io("creating", &path, e)),
        }
        self.open_dir(name)
    }

    /// Opens `name` for reading if it is a regular file (a link is not followed; a
    /// FIFO does not block the open).
    pub fn open_file(&self, name: &str) -> Option<File> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty()).ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        (FileType::from_raw_mode(st.st_mode) == FileType::RegularFile).then(|| File::from(fd))
    }

    /// Creates a temporary file for `name`: `.NAME.vargr-partial`, or, when that name
    /// is taken by something else than a stale partial file of ours (a link, a
    /// directory, an entry of the tree: `keep_existing`), that name with a unique
    /// suffix. Never opens an existing entry.
    pub fn create_temp(
        &self,
        name: &str,
        keep_existing: bool,
    ) -> Result<(File, String), SyncError> {
        let base = partial_name(name);
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mode = Mode::from_raw_mode(0o600);
        let mut candidate = base.clone();
        for attempt in 0..16u32 {
            match rustix::fs::openat(&self.fd, candidate.as_str(), flags, mode) {
                Ok(fd) => return Ok((File::from(fd), candidate)),
                Err(Errno::EXIST) => {
                    // A regular file at the plain name is an interrupted sync's partial:
                    // unlinking the name removes no one else's data.
                    if attempt == 0
                        && !keep_existing
                        && self.kind(&candidate)? == Some(FileType::RegularFile)
                        && rustix::fs::unlinkat(&self.fd, candidate.as_str(), AtFlags::empty())
                            .is_ok()
                    {
                        continue;
                    }
                    candidate = format!("{base}.{}", unique_suffix());
                }
                Err(e) => return Err(io("creating", &self.show(&candidate), e)),
            }
        }
        Err(io(
            "creating a temporary file for",
            &self.show(name),
            Errno::EXIST,
        ))
    }

    pub fn remove_file(&self, name: &str) -> Result<(), SyncError> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())
            .map_err(|e| io("removing", &self.show(name), e))
    }

    /// Renames `from` to `to` inside this directory, replacing a non-directory at `to`
    /// (a link there is replaced, not written through).
    pub fn rename(&self, from: &str, to: &str) -> Result<(), SyncError> {
        rustix::fs::renameat(&self.fd, from, &self.fd, to)
            .map_err(|e| io("renaming into place", &self.show(to), e))
    }

    /// Makes `name` a symbolic link to `target` (opaque bytes: never resolved here),
    /// replacing a non-directory in the way.
    pub fn symlink(&self, target: &str, name: &str) -> Result<(), SyncError> {
        let path = self.show(name);
        match rustix::fs::readlinkat(&self.fd, name, Vec::new()) {
            Ok(t) if t.as_bytes() == target.as_bytes() => return Ok(()),
            _ => {}
        }
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(io("replacing with a link", &path, e)),
        }
        rustix::fs::symlinkat(target, &self.fd, name).map_err(|e| io("creating link", &path, e))
    }

    /// A link's own mtime.
    pub fn set_link_mtime(&self, name: &str, mtime_ns: i64) -> Result<(), SyncError> {
        rustix::fs::utimensat(&self.fd, name, &times(mtime_ns), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| io("setting the mtime of", &self.show(name), e))
    }

    /// Sets the mode and mtime of the directory `name` through a descriptor of it.
    pub fn set_dir_meta(&self, name: &str, mode: u32, mtime_ns: i64) -> Result<(), SyncError> {
        let path = self.show(name);
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd =
            rustix::fs::openat(&self.fd, name, flags, Mode::empty()).map_err(|e| {
                match self.kind(name) {
                    Ok(Some(FileType::Symlink)) => SyncError::ThroughLink {
                        link: path.display().to_string(),
                    },
                    _ => io("opening the directory", &path, e),
                }
            })?;
        set_meta(&fd, mode, mtime_ns, &path)
    }
}

/// Sets `fd`'s mtime, then its mode (on the descriptor: nothing is looked up again).
pub(crate) fn set_meta(
    fd: impl AsFd,
    mode: u32,
    mtime_ns: i64,
    path: &Path,
) -> Result<(), SyncError> {
    rustix::fs::futimens(&fd, &times(mtime_ns)).map_err(|e| io("setting the mtime of", path, e))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
        .map_err(|e| io("setting the mode of", path, e))
}

fn times(mtime_ns: i64) -> Timestamps {
    let t = Timespec {
        tv_sec: mtime_ns.div_euclid(1_000_000_000) as _,
        tv_nsec: mtime_ns.rem_euclid(1_000_000_000) as _,
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}

/// Where `name` is written before it is verified.
pub(crate) fn partial_name(name: &str) -> String {
    format!(".{name}.vargr-partial")
}

/// A suffix no earlier call in any process made (pid, time, counter, hashed): the
/// names need not be secret, `O_EXCL` keeps them from opening anything that exists.
fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = blake3::Hasher::new();
    h.update(&std::process::id().to_le_bytes());
    h.update(&N.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.update(&now.as_nanos().to_le_bytes());
    h.finalize().to_hex()[..12].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A tree root, and a directory outside it holding a file.
    fn setup() -> (tempfile::TempDir, Dir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("f"), b"precious").unwrap();
        let root = Dir::open_root(&d.path().join("root"), true).unwrap();
        (d, root, outside)
    }

    /// What a hostile manifest (`d` a link, then `d/f` a file) would need: the walk
    /// stops at the link and names it.
    #[test]
    fn a_walk_through_a_link_is_refused_naming_it() {
        let (d, root, outside) = setup();
        symlink(&outside, d.path().join("root/d")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let before = std::fs::metadata(&outside).unwrap().permissions().mode();
        let e = root.walk(["d"]).unwrap_err();
        assert!(matches!(e, SyncError::ThroughLink { .. }), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("{}/root/d", d.path().display())),
            "{e}"
        );
        let e = root.set_dir_meta("d", 0o700, 0).unwrap_err();
        assert!(matches!(e, SyncError::ThroughLink { .. }), "{e}");
        let after = std::fs::metadata(&outside).unwrap().permissions().mode();
        assert_eq!(before, after, "chmod through the link");
    }

    #[test]
    fn temporary_files_never_open_what_is_there() {
        let (d, root, outside) = setup();
        symlink(outside.join("f"), d.path().join("root/.x.vargr-partial")).unwrap();
        let (mut f, name) = root.create_temp("x", false).unwrap();
        assert_ne!(name, ".x.vargr-partial");
        std::io::Write::write_all(&mut f, b"new").unwrap();
        assert_eq!(std::fs::read(outside.join("f")).unwrap(), b"precious");
        // A stale partial file of ours at the plain name is replaced, unless it is an
        // entry of the tree.
        std::fs::write(d.path().join("root/.y.vargr-partial"), b"stale").unwrap();
        assert_eq!(root.create_temp("y", false).unwrap().1, ".y.vargr-partial");
        std::fs::write(d.path().join("root/.z.vargr-partial"), b"entry").unwrap();
        assert_ne!(root.create_temp("z", true).unwrap().1, ".z.vargr-partial");
        assert_eq!(
            std::fs::read(d.path().join("root/.z.vargr-partial")).unwrap(),
            b"entry"
        );
    }

    #[test]
    fn entries_in_the_way_are_replaced_not_followed_and_directories_kept() {
        let (d, root, outside) = setup();
        symlink(&outside, d.path().join("root/d")).unwrap();
        root.make_dir("d").unwrap();
        assert!(std::fs::symlink_metadata(d.path().join("root/d"))
            .unwrap()
            .is_dir());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
        std::fs::write(d.path().join("root/l"), b"file").unwrap();
        root.symlink("../outside/f", "l").unwrap();
        assert_eq!(
            std::fs::read_link(d.path().join("root/l")).unwrap(),
            Path::new("../outside/f")
        );
        // A directory where a link goes is an error, and stays.
        std::fs::write(d.path().join("root/d/keep"), b"k").unwrap();
        assert!(root.symlink("x", "d").is_err());
        assert!(d.path().join("root/d/keep").exists());
    }
}
