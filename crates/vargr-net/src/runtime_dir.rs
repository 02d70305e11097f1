//! The per-user directory for runtime files: rendezvous files, Unix sockets, status files.
//!
//! Why: these files steer who a process trusts. A rendezvous file names the address a
//! rank connects to and the secret it proves; a file another local user planted in the
//! shared temporary directory (or a symbolic link to one) would make that user rank 0 of
//! someone else's job. So every runtime file lives in one directory that only its owner
//! can write: `$XDG_RUNTIME_DIR/vargr`, else `vargr-<uid>` in the temporary directory.
//! The directory is created 0700 and then inspected without following links: a symbolic
//! link, another owner or any group or other write bit is refused, never repaired (a
//! directory someone else prepared stays theirs). Files in it are created with
//! `O_EXCL | O_NOFOLLOW` and mode 0600, so nothing that was already there is reused.
//!
//! Only [`default_path`] reads the environment; libraries take the directory as a
//! [`RuntimeDir`] or a path handed down from the program's settings.

use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// What is wrong with a runtime directory or file.
#[derive(Debug, Error)]
pub enum Problem {
    #[error("is a symbolic link (refused: it could point anywhere)")]
    Symlink,
    #[error("is not a directory")]
    NotDirectory,
    #[error("is not a regular file")]
    NotRegular,
    #[error("belongs to uid {owner}, not to this user (uid {me})")]
    Owner { owner: u32, me: u32 },
    #[error("is writable by group or others (mode {mode:04o}); it must be private (0700 for a directory, 0600 for a file)")]
    Writable { mode: u32 },
    #[error("already exists (runtime files are always created new)")]
    Exists,
    #[error("{0}")]
    Io(#[source] io::Error),
}

/// A runtime directory or file refused, with where and why.
#[derive(Debug, Error)]
#[error("runtime {what} {path}: {problem}")]
pub struct RuntimeDirError {
    /// `"directory"` or `"file"`.
    pub what: &'static str,
    pub path: PathBuf,
    #[source]
    pub problem: Problem,
}

fn fail(what: &'static str, path: &Path, problem: Problem) -> RuntimeDirError {
    RuntimeDirError {
        what,
        path: path.to_path_buf(),
        problem,
    }
}

fn io_problem(e: io::Error) -> Problem {
    match e.kind() {
        io::ErrorKind::AlreadyExists => Problem::Exists,
        // O_NOFOLLOW on a symbolic link.
        _ if e.raw_os_error() == Some(libc::ELOOP) => Problem::Symlink,
        _ => Problem::Io(e),
    }
}

fn my_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Group or other write bits.
const SHARED_WRITE: u32 = 0o022;

/// Where this user's runtime files go unless the program says otherwise:
/// `$XDG_RUNTIME_DIR/vargr` (private to the user's session by definition), else
/// `vargr-<uid>` in the temporary directory: also when `XDG_RUNTIME_DIR` names a
/// directory that does not exist (inherited by an ssh or batch session on a host that
/// has none). The one place that reads the environment.
pub fn default_path() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty() && Path::new(d).is_dir()) {
        Some(d) => PathBuf::from(d).join("vargr"),
        None => std::env::temp_dir().join(format!("vargr-{}", my_uid())),
    }
}

/// A directory checked to be this user's alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeDir {
    path: PathBuf,
}

impl RuntimeDir {
    /// Creates `path` (mode 0700; its parent must exist) unless it exists, then checks
    /// what is there: a directory, not a link, owned by this user, no group or other
    /// write bit. Race-safe: the check inspects the name after `mkdir`, so whoever won
    /// a race to create it, only a directory that passes is used.
    pub fn open(path: impl Into<PathBuf>) -> Result<RuntimeDir, RuntimeDirError> {
        let path = path.into();
        let dir_err = |p| fail("directory", &path, p);
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(dir_err(Problem::Io(e))),
        }
        let m = std::fs::symlink_metadata(&path).map_err(|e| dir_err(Problem::Io(e)))?;
        if m.file_type().is_symlink() {
            return Err(dir_err(Problem::Symlink));
        }
        if !m.is_dir() {
            return Err(dir_err(Problem::NotDirectory));
        }
        check_owner_and_mode(&m).map_err(dir_err)?;
        Ok(RuntimeDir { path })
    }

    /// [`RuntimeDir::open`] on [`default_path`].
    pub fn open_default() -> Result<RuntimeDir, RuntimeDirError> {
        RuntimeDir::open(default_path())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in this directory.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    /// A private subdirectory (created 0700 if missing), checked like this one.
    pub fn subdir(&self, name: &str) -> Result<RuntimeDir, RuntimeDirError> {
        RuntimeDir::open(self.path.join(name))
    }

    /// Creates `name` here, new, for writing; see [`create_new_private`].
    pub fn create_file(&self, name: &str) -> Result<File, RuntimeDirError> {
        create_new_private(&self.path.join(name))
    }
}

fn check_owner_and_mode(m: &std::fs::Metadata) -> Result<(), Problem> {
    let me = my_uid();
    if m.uid() != me {
        return Err(Problem::Owner { owner: m.uid(), me });
    }
    if m.mode() & SHARED_WRITE != 0 {
        return Err(Problem::Writable {
            mode: m.mode() & 0o7777,
        });
    }
    Ok(())
}

/// Creates `path` for writing with `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600: it fails
/// if anything (a file, a link) is already there, so a file planted in advance is
/// never written into or trusted.
pub fn create_new_private(path: &Path) -> Result<File, RuntimeDirError> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| fail("file", path, io_problem(e)))
}

/// Opens `path` for reading if it is a regular file (not a link) owned by this user
/// with no group or other write bit. Checked on the opened file, so what is checked is
/// what is read.
pub fn open_private(path: &Path) -> Result<File, RuntimeDirError> {
    let err = |p| fail("file", path, p);
    let f = std::fs::OpenOptions::new()
        .read(true)
        // O_NONBLOCK: opening a FIFO someone planted must not hang the reader.
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| err(io_problem(e)))?;
    let m = f.metadata().map_err(|e| err(Problem::Io(e)))?;
    if !m.is_file() {
        return Err(err(Problem::NotRegular));
    }
    check_owner_and_mode(&m).map_err(err)?;
    Ok(f)
}

/// Removes a file (a Unix socket, a status file) when dropped, or when the process exits
/// without dropping it (a Python program's job lives until the interpreter ends, a C
/// program may `exit` with its handles open): runtime files must not outlive the process
/// that made them, or the directory fills with dead sockets.
#[derive(Debug)]
pub struct RemoveOnDrop(PathBuf);

/// Files still to remove when the process exits.
static AT_EXIT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
static AT_EXIT_HOOK: std::sync::Once = std::sync::Once::new();

extern "C" fn remove_at_exit() {
    // `try_lock`: a thread that called `exit` while holding the lock must not hang it.
    if let Ok(mut files) = AT_EXIT.try_lock() {
        for f in files.drain(..) {
            let _ = std::fs::remove_file(f);
        }
    }
}

impl RemoveOnDrop {
    pub fn new(path: PathBuf) -> RemoveOnDrop {
        AT_EXIT_HOOK.call_once(|| {
            // SAFETY: registers a plain function without arguments; it only removes
            // files, which is safe at any point of `exit`.
            unsafe { libc::atexit(remove_at_exit) };
        });
        AT_EXIT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(path.clone());
        RemoveOnDrop(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        AT_EXIT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| p != &self.0);
    }
}

/// The name prefix of the mesh sockets of process `pid` (see `Mesh::bind`): `vargr run`
/// removes what a rank that was killed could not.
pub fn mesh_socket_prefix(pid: u32) -> String {
    format!("mesh-{pid}-")
}

/// Removes the mesh sockets process `pid` left in `dir` (with their shared-memory
/// files). Returns how many went.
pub fn remove_mesh_sockets(dir: &RuntimeDir, pid: u32) -> usize {
    let prefix = mesh_socket_prefix(pid);
    let Ok(rd) = std::fs::read_dir(dir.path()) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        // The socket, and the shared-memory pointer file and bell made beside it.
        let ours = [".sock", ".sock.shm", ".sock.bell", ".sock.coll"]
            .iter()
            .any(|s| name.ends_with(s));
        if name.starts_with(&prefix) && ours && std::fs::remove_file(e.path()).is_ok() {
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Run as a child by the test below: makes `$VARGR_TEST_EXIT_FILE` and exits
    /// without dropping its guard. Does nothing in a normal test run.
    #[test]
    fn exit_without_drop_child() {
        if let Some(p) = std::env::var_os("VARGR_TEST_EXIT_FILE") {
            let p = PathBuf::from(p);
            std::fs::write(&p, "").unwrap();
            std::fs::write(p.with_extension("ran"), "").unwrap();
            let guard = RemoveOnDrop::new(p);
            std::mem::forget(guard);
            std::process::exit(0);
        }
    }

    #[test]
    fn a_runtime_file_goes_when_its_process_exits_without_dropping_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("left.sock");
        let st = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "runtime_dir::tests::exit_without_drop_child"])
            .env("VARGR_TEST_EXIT_FILE", &p)
            .status()
            .unwrap();
        assert!(st.success());
        assert!(p.with_extension("ran").exists(), "the child did not run");
        assert!(!p.exists(), "{} outlived its process", p.display());
    }

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_new_directory_is_created_private() {
        let t = tempfile::tempdir().unwrap();
        let d = RuntimeDir::open(t.path().join("vargr")).unwrap();
        let m = std::fs::metadata(d.path()).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.mode() & 0o077, 0, "mode {:o}", m.mode());
        // Opening it again accepts what is there.
        RuntimeDir::open(d.path()).unwrap();
    }

    #[test]
    fn a_group_or_world_writable_directory_is_refused_and_left_alone() {
        let t = tempfile::tempdir().unwrap();
        for mode in [0o777, 0o770, 0o702] {
            let p = t.path().join(format!("d{mode:o}"));
            std::fs::create_dir(&p).unwrap();
            chmod(&p, mode);
            let e = RuntimeDir::open(&p).unwrap_err();
            assert!(matches!(e.problem, Problem::Writable { .. }), "{e}");
            let text = e.to_string();
            assert!(
                text.contains(&p.display().to_string()) && text.contains("writable"),
                "{text}"
            );
            // Refused, not repaired.
            let m = std::fs::metadata(&p).unwrap();
            assert_eq!(m.mode() & 0o777, mode);
        }
    }

    #[test]
    fn a_symlink_in_place_of_the_directory_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("elsewhere");
        std::fs::create_dir(&real).unwrap();
        chmod(&real, 0o700);
        let link = t.path().join("vargr");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = RuntimeDir::open(&link).unwrap_err();
        assert!(matches!(e.problem, Problem::Symlink), "{e}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }

    #[test]
    fn a_file_in_place_of_the_directory_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("vargr");
        std::fs::write(&p, "x").unwrap();
        let e = RuntimeDir::open(&p).unwrap_err();
        assert!(matches!(e.problem, Problem::NotDirectory), "{e}");
    }

    #[test]
    fn files_are_created_new_and_private() {
        let t = tempfile::tempdir().unwrap();
        let d = RuntimeDir::open(t.path().join("vargr")).unwrap();
        d.create_file("a").unwrap();
        let m = std::fs::metadata(d.join("a")).unwrap();
        assert_eq!(m.mode() & 0o777, 0o600);
        // A file already there, planted or stale, is never reused.
        let e = d.create_file("a").unwrap_err();
        assert!(matches!(e.problem, Problem::Exists), "{e}");
        // Nor is a link, even a dangling one.
        std::os::unix::fs::symlink(t.path().join("target"), d.join("b")).unwrap();
        let e = d.create_file("b").unwrap_err();
        assert!(matches!(e.problem, Problem::Exists), "{e}");
        assert!(!t.path().join("target").exists());
    }

    #[test]
    fn only_private_regular_files_are_read() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        std::fs::write(&f, "x").unwrap();
        chmod(&f, 0o600);
        open_private(&f).unwrap();
        chmod(&f, 0o620);
        let e = open_private(&f).unwrap_err();
        assert!(matches!(e.problem, Problem::Writable { .. }), "{e}");
        chmod(&f, 0o606);
        assert!(open_private(&f).is_err());
        chmod(&f, 0o600);
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        let e = open_private(&link).unwrap_err();
        assert!(matches!(e.problem, Problem::Symlink), "{e}");
        let e = open_private(t.path()).unwrap_err();
        assert!(matches!(e.problem, Problem::NotRegular), "{e}");
    }

    #[test]
    fn remove_on_drop_removes_and_mesh_sockets_of_a_pid_are_swept() {
        let t = tempfile::tempdir().unwrap();
        let d = RuntimeDir::open(t.path().join("vargr")).unwrap();
        let p = d.join("x.sock");
        std::fs::write(&p, "").unwrap();
        drop(RemoveOnDrop::new(p.clone()));
        assert!(!p.exists());
        for name in [
            "mesh-7-a.sock",
            "mesh-7-b.sock",
            "mesh-70-a.sock",
            "job.rendezvous",
        ] {
            std::fs::write(d.join(name), "").unwrap();
        }
        assert_eq!(remove_mesh_sockets(&d, 7), 2);
        assert!(d.join("mesh-70-a.sock").exists() && d.join("job.rendezvous").exists());
    }
}
