//! The receiving side: rebuilds the tree from the dedup stream, verifying every file.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use vargr_dedup::cache::{DiskCache, DiskConfig};
use vargr_dedup::{Config, Delivered, FpBits, Receiver};

use crate::frame::{self, Control, Reply, F_CONTROL, F_DEDUP};
use crate::manifest::{safe_join, Entry, Kind, Manifest};
use crate::send::cache_key;
use crate::{SyncError, Transport};

/// Where and how a receiver writes.
#[derive(Debug, Clone)]
pub struct RecvOptions {
    /// The destination; for a daemon (`serve`), the root that senders' paths are under.
    pub dest: PathBuf,
    pub serve: bool,
    pub cache_root: PathBuf,
    pub cache: DiskConfig,
    /// How this receiver names itself to senders (their cache of it).
    pub receiver_name: String,
}

/// What a finished receive did.
#[derive(Debug, Clone, Serialize)]
pub struct RecvReport {
    pub sender: String,
    pub files_written: u64,
    pub bytes_written: u64,
    pub failed: u64,
    pub seconds: f64,
}

/// The file being written.
struct Open {
    index: u32,
    partial: PathBuf,
    sink: Sink,
    hasher: blake3::Hasher,
    size: u64,
}

/// Where a file's bytes go. A file already at the destination with the announced size
/// is compared first, and written only from its first difference: between two releases
/// most files of a tree differ in mtime alone, and creating thousands of new inodes
/// was most of a tree sync's time.
enum Sink {
    /// Every byte so far equals the existing file's (`size` of them).
    Comparing(std::io::BufReader<File>),
    Writing(File),
}

impl Open {
    fn take(&mut self, bytes: &[u8], target: &Path) -> Result<(), SyncError> {
        if let Sink::Comparing(existing) = &mut self.sink {
            let mut have = vec![0; bytes.len()];
            let same = existing.read_exact(&mut have).is_ok() && have == bytes;
            if !same {
                // The equal prefix, from the existing file, then what differs. The
                // prefix is hashed again as copied: the file may change meanwhile.
                let mut file = File::create(&self.partial)
                    .map_err(|e| SyncError::io("creating", &self.partial, e))?;
                let mut prefix = File::open(target)
                    .map_err(|e| SyncError::io("reading", target, e))?
                    .take(self.size);
                let mut copied = blake3::Hasher::new();
                let mut buf = vec![0; 256 << 10];
                loop {
                    let n = prefix
                        .read(&mut buf)
                        .map_err(|e| SyncError::io("reading", target, e))?;
                    if n == 0 {
                        break;
                    }
                    copied.update(&buf[..n]);
                    file.write_all(&buf[..n])
                        .map_err(|e| SyncError::io("writing", &self.partial, e))?;
                }
                if copied.finalize() != self.hasher.finalize() {
                    return Err(SyncError::io(
                        "copying the unchanged start of",
                        target,
                        std::io::Error::other("the file changed while it was read"),
                    ));
                }
                self.sink = Sink::Writing(file);
            }
        }
        if let Sink::Writing(file) = &mut self.sink {
            file.write_all(bytes)
                .map_err(|e| SyncError::io("writing", &self.partial, e))?;
        }
        self.hasher.update(bytes);
        self.size += bytes.len() as u64;
        Ok(())
    }
}

struct State {
    dest: PathBuf,
    manifest: Option<Manifest>,
    open: Option<Open>,
    written: u64,
    bytes: u64,
    failed: u64,
    done: bool,
    replies: Vec<Reply>,
}

/// Receives one sync session over `t`.
pub fn receive(t: Transport, opts: &RecvOptions) -> Result<RecvReport, SyncError> {
    let Transport {
        mut reader,
        mut writer,
        peer,
    } = t;
    let r = run(&mut *reader, &mut *writer, &peer, opts);
    if let Err(e) = &r {
        // Best effort: the sender shows the reason instead of a closed connection.
        let body = serde_json::to_vec(&Reply::Error {
            message: e.to_string(),
        })
        .expect("serializable");
        let _ = frame::write_frame(&mut *writer, F_CONTROL, &body);
        let _ = writer.flush();
    }
    r
}

fn run(
    reader: &mut (dyn Read + Send),
    writer: &mut (dyn Write + Send),
    peer: &str,
    opts: &RecvOptions,
) -> Result<RecvReport, SyncError> {
    let t0 = Instant::now();
    let proto = |reason: String| SyncError::Protocol {
        peer: peer.to_string(),
        reason,
    };
    let pre = frame::read_preamble(reader).map_err(proto)?;
    if pre.version != frame::PROTOCOL_VERSION {
        return Err(proto(format!(
            "the sender speaks sync protocol {}, this receiver {}",
            pre.version,
            frame::PROTOCOL_VERSION
        )));
    }
    let bits = FpBits::new(pre.fp_bits).ok_or_else(|| {
        proto(format!(
            "{}-bit fingerprints are not supported",
            pre.fp_bits
        ))
    })?;
    let dest = if opts.serve {
        safe_join(&opts.dest, &pre.dest)?
    } else {
        opts.dest.clone()
    };
    let cfg = DiskConfig {
        bits,
        ..opts.cache.clone()
    };
    let cache = DiskCache::open_for_peer(
        &opts.cache_root,
        &cache_key(&format!("from-{}", pre.sender)),
        cfg,
    )?;
    let config = Config {
        bits,
        ..Config::default()
    };
    let dedup_err = |e| SyncError::Dedup {
        peer: peer.to_string(),
        source: e,
    };
    let stream = crate::load_stream(cache.dir(), config.delta_index);
    let mut rx = Receiver::new(config, cache).map_err(dedup_err)?;
    rx.set_stream(stream);
    let hello = serde_json::to_vec(&Reply::Hello {
        receiver: opts.receiver_name.clone(),
    })
    .expect("serializable");
    frame::write_frame(writer, F_CONTROL, &hello)
        .and_then(|_| writer.flush())
        .map_err(|e| SyncError::Link {
            peer: peer.to_string(),
            what: "replying",
            source: e,
        })?;
    let mut st = State {
        dest,
        manifest: None,
        open: None,
        written: 0,
        bytes: 0,
        failed: 0,
        done: false,
        replies: Vec::new(),
    };
    let mut z = zstd::stream::read::Decoder::new(reader).map_err(|e| SyncError::Link {
        peer: peer.to_string(),
        what: "starting zstd",
        source: e,
    })?;
    let mut buf = vec![0u8; 256 << 10];
    let mut out = Vec::new();
    loop {
        let n = match z.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(SyncError::Link {
                    peer: peer.to_string(),
                    what: "receiving",
                    source: e,
                })
            }
        };
        if n == 0 {
            rx.finish().map_err(dedup_err)?;
            if !st.done {
                return Err(proto(
                    "the sender's stream ended before the sync finished; complete files are in place, run it again to resume".into(),
                ));
            }
            break;
        }
        rx.handle_input(&buf[..n]).map_err(dedup_err)?;
        while let Some(d) = rx.poll_delivered() {
            apply(&mut st, d, peer, &mut rx)?;
        }
        rx.take_output(&mut out);
        let link = |e| SyncError::Link {
            peer: peer.to_string(),
            what: "replying",
            source: e,
        };
        if !out.is_empty() {
            frame::write_frame(writer, F_DEDUP, &out).map_err(link)?;
            out.clear();
        }
        for r in st.replies.drain(..) {
            let body = serde_json::to_vec(&r).expect("serializable");
            frame::write_frame(writer, F_CONTROL, &body).map_err(link)?;
        }
        writer.flush().map_err(link)?;
        if st.done {
            // The result is out; the sender closes its stream after reading it.
            break;
        }
    }
    Ok(RecvReport {
        sender: pre.sender,
        files_written: st.written,
        bytes_written: st.bytes,
        failed: st.failed,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

fn apply(
    st: &mut State,
    d: Delivered,
    peer: &str,
    rx: &mut Receiver<DiskCache>,
) -> Result<(), SyncError> {
    let proto = |reason: String| SyncError::Protocol {
        peer: peer.to_string(),
        reason,
    };
    if d.channel == 1 {
        let Some(index) = st.open.as_ref().map(|o| o.index) else {
            return Err(proto("file data outside a file".into()));
        };
        let target = target(st, index, peer)?;
        let o = st.open.as_mut().expect("checked above");
        for s in &d.segments {
            o.take(s, &target)?;
        }
        return Ok(());
    }
    if d.channel != 0 {
        return Err(proto(format!("unknown channel {}", d.channel)));
    }
    let mut body = d.layout.to_vec();
    for s in &d.segments {
        body.extend_from_slice(s);
    }
    let c: Control = serde_json::from_slice(&body)
        .map_err(|e| proto(format!("malformed control message: {e}")))?;
    match c {
        Control::Manifest { manifest } => {
            let have = prepare(st, &manifest)?;
            st.manifest = Some(manifest);
            st.replies.push(Reply::Have { indices: have });
        }
        Control::FileStart { index } => {
            let target = target(st, index, peer)?;
            let partial = partial_path(&target);
            let size =
                st.manifest.as_ref().expect("checked by target").entries[index as usize].size;
            let existing = std::fs::symlink_metadata(&target)
                .is_ok_and(|m| m.is_file() && m.len() == size)
                .then(|| File::open(&target).ok())
                .flatten();
            let sink = match existing {
                Some(f) => Sink::Comparing(std::io::BufReader::with_capacity(256 << 10, f)),
                None => Sink::Writing(
                    File::create(&partial).map_err(|e| SyncError::io("creating", &partial, e))?,
                ),
            };
            st.open = Some(Open {
                index,
                partial,
                sink,
                hasher: blake3::Hasher::new(),
                size: 0,
            });
        }
        Control::FileEnd { size, blake3 } => {
            let o = st
                .open
                .take()
                .ok_or_else(|| proto("the end of a file, with no file started".into()))?;
            let index = o.index;
            let target = target(st, index, peer)?;
            let got = frame::file_hash(&o.hasher);
            let entry =
                st.manifest.as_ref().expect("checked by target").entries[index as usize].clone();
            let unchanged = match o.sink {
                // Equal so far; equal in all if the existing file ends here too.
                Sink::Comparing(mut existing) => existing.read(&mut [0u8; 1]).is_ok_and(|n| n == 0),
                Sink::Writing(_) => false,
            };
            if o.size != size || got != blake3 {
                let _ = std::fs::remove_file(&o.partial);
                let e = SyncError::Verify {
                    path: target.display().to_string(),
                    got: o.size,
                    want: size,
                    got_hash: got,
                    want_hash: blake3,
                };
                st.failed += 1;
                st.replies.push(Reply::Failed {
                    index,
                    error: e.to_string(),
                });
            } else if unchanged {
                // The bytes verified are the file's already: its metadata is all.
                set_meta(&target, &entry)?;
                st.written += 1;
                st.bytes += size;
            } else {
                set_meta(&o.partial, &entry)?;
                std::fs::rename(&o.partial, &target)
                    .map_err(|e| SyncError::io("renaming into place", &target, e))?;
                st.written += 1;
                st.bytes += size;
            }
            // What crossed survives an interruption of the rest.
            rx.cache().flush()?;
        }
        Control::Done => {
            if let Some(m) = &st.manifest {
                // Deepest first, so setting a directory's mtime is not undone by its
                // children.
                for e in m.entries.iter().rev() {
                    let p = safe_join(&st.dest, &e.path)?;
                    match e.kind {
                        Kind::Dir => set_meta(&p, e)?,
                        Kind::Symlink { .. } => set_link_mtime(&p, e.mtime_ns)?,
                        Kind::File => {}
                    }
                }
            }
            rx.cache().flush()?;
            let stats = rx.cache().stats();
            crate::save_session_stats(rx.cache().dir(), &stats);
            let dir = rx.cache().dir().to_path_buf();
            crate::save_stream(&dir, rx.stream());
            st.done = true;
            st.replies.push(Reply::Result {
                files_written: st.written,
                bytes_written: st.bytes,
                failed: st.failed,
            });
        }
    }
    Ok(())
}

/// Makes directories and links, and says which files are already in place.
fn prepare(st: &mut State, m: &Manifest) -> Result<Vec<u32>, SyncError> {
    if m.single_file {
        if st.dest.is_dir() {
            st.dest = safe_join(&st.dest, &m.name)?;
        } else if let Some(parent) = st.dest.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| SyncError::io("creating", parent, e))?;
        }
    } else {
        std::fs::create_dir_all(&st.dest).map_err(|e| SyncError::io("creating", &st.dest, e))?;
    }
    let mut have = Vec::new();
    for (i, e) in m.entries.iter().enumerate() {
        let p = safe_join(&st.dest, &e.path)?;
        match &e.kind {
            Kind::Dir => {
                if !p.is_dir() {
                    std::fs::create_dir_all(&p)
                        .map_err(|err| SyncError::io("creating", &p, err))?;
                }
            }
            Kind::Symlink { target } => {
                if std::fs::read_link(&p).ok().as_deref() != Some(Path::new(target)) {
                    let _ = std::fs::remove_file(&p);
                    std::os::unix::fs::symlink(target, &p)
                        .map_err(|err| SyncError::io("creating link", &p, err))?;
                }
            }
            Kind::File => {
                if let Ok(meta) = std::fs::symlink_metadata(&p) {
                    use std::os::unix::fs::MetadataExt;
                    let mtime = meta.mtime() * 1_000_000_000 + meta.mtime_nsec();
                    if meta.is_file() && meta.len() == e.size && mtime == e.mtime_ns {
                        have.push(i as u32);
                    }
                }
            }
        }
    }
    Ok(have)
}

fn target(st: &State, index: u32, peer: &str) -> Result<PathBuf, SyncError> {
    let m = st.manifest.as_ref().ok_or_else(|| SyncError::Protocol {
        peer: peer.to_string(),
        reason: "a file before the manifest".into(),
    })?;
    let e = m
        .entries
        .get(index as usize)
        .filter(|e| e.kind == Kind::File)
        .ok_or_else(|| SyncError::Protocol {
            peer: peer.to_string(),
            reason: format!("file {index} is not a file of the manifest"),
        })?;
    safe_join(&st.dest, &e.path)
}

fn partial_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.vargr-partial"))
}

fn set_meta(p: &Path, e: &Entry) -> Result<(), SyncError> {
    use std::os::unix::fs::PermissionsExt;
    let t = if e.mtime_ns >= 0 {
        std::time::UNIX_EPOCH + std::time::Duration::from_nanos(e.mtime_ns as u64)
    } else {
        std::time::UNIX_EPOCH - std::time::Duration::from_nanos(e.mtime_ns.unsigned_abs())
    };
    // The mtime first: the mode may take away the right to open the file.
    File::open(p)
        .and_then(|f| f.set_modified(t))
        .map_err(|err| SyncError::io("setting the mtime of", p, err))?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(e.mode))
        .map_err(|err| SyncError::io("setting the mode of", p, err))
}

/// A symbolic link's own mtime (std only sets the target's).
fn set_link_mtime(p: &Path, mtime_ns: i64) -> Result<(), SyncError> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|_| SyncError::Path {
        path: p.display().to_string(),
        reason: "contains a NUL byte".into(),
    })?;
    let t = libc::timespec {
        tv_sec: mtime_ns.div_euclid(1_000_000_000) as libc::time_t,
        tv_nsec: mtime_ns.rem_euclid(1_000_000_000) as libc::c_long,
    };
    let times = [t, t];
    // SAFETY: `c` is a NUL-terminated path and `times` two valid timespecs.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(SyncError::io(
            "setting the mtime of",
            p,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}
