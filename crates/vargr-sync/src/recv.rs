//! The receiving side: rebuilds the tree from the dedup stream, verifying every file.
//!
//! Every file operation goes through [`crate::beneath`]: resolved beneath the
//! destination without following links, so a hostile sender cannot write, chmod or
//! touch outside it. A daemon's [`RecvOptions`] also say what a client may do
//! ([`Access`]) and whether setuid, setgid and sticky bits survive.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

use rustix::fs::FileType;
use serde::Serialize;
use vargr_dedup::cache::{DiskCache, DiskConfig};
use vargr_dedup::{Config, Delivered, FpBits, Receiver};

use crate::beneath::{self, Dir};
use crate::frame::{self, Control, Reply, F_CONTROL, F_DEDUP};
use crate::manifest::{components, Entry, Kind, Manifest};
use crate::send::cache_key;
use crate::{SyncError, Transport};

/// What a daemon's clients may do.
///
/// A sync session only ever uploads to the receiver (there is no pull), so a
/// read-only daemon refuses every session, with a reason the client shows; it freezes
/// a root without stopping the daemon or changing its clients. A write-only daemon
/// (a drop box) accepts files but does not tell a client which of its files are
/// already in place, so a client cannot probe what others put there by name, size and
/// mtime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Access {
    #[default]
    ReadWrite,
    ReadOnly,
    WriteOnly,
}

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
    /// Keep setuid, setgid and sticky bits of the sender's modes. A daemon strips them
    /// by default: a client's `4755` file owned by the daemon's user would otherwise
    /// run as that user (root, for a daemon started as root).
    pub keep_special_bits: bool,
    pub access: Access,
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
    /// Its directory and name there.
    dir: Rc<Dir>,
    name: String,
    /// The temporary file's name in `dir`, once one is made.
    partial: Option<String>,
    /// Whether the plain temporary name is an entry of the tree (not to be removed).
    partial_in_tree: bool,
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
    fn take(&mut self, bytes: &[u8]) -> Result<(), SyncError> {
        if let Sink::Comparing(existing) = &mut self.sink {
            let mut have = vec![0; bytes.len()];
            let same = existing.read_exact(&mut have).is_ok() && have == bytes;
            if !same {
                // The equal prefix, from the existing file (the descriptor compared,
                // not its name again), then what differs. The prefix is hashed again
                // as copied: the file may change meanwhile.
                let target = self.dir.show(&self.name);
                let (mut file, partial) = self.dir.create_temp(&self.name, self.partial_in_tree)?;
                self.partial = Some(partial);
                let partial = self.dir.show(self.partial.as_deref().unwrap_or_default());
                let existing = existing.get_ref();
                let mut copied = blake3::Hasher::new();
                let mut buf = vec![0; 256 << 10];
                let mut at = 0u64;
                while at < self.size {
                    let want = buf.len().min((self.size - at) as usize);
                    let n = existing
                        .read_at(&mut buf[..want], at)
                        .map_err(|e| SyncError::io("reading", &target, e))?;
                    if n == 0 {
                        break;
                    }
                    copied.update(&buf[..n]);
                    file.write_all(&buf[..n])
                        .map_err(|e| SyncError::io("writing", &partial, e))?;
                    at += n as u64;
                }
                if copied.finalize() != self.hasher.finalize() {
                    return Err(SyncError::io(
                        "copying the unchanged start of",
                        &target,
                        std::io::Error::other("the file changed while it was read"),
                    ));
                }
                self.sink = Sink::Writing(file);
            }
        }
        if let Sink::Writing(file) = &mut self.sink {
            file.write_all(bytes).map_err(|e| {
                let p = self.dir.show(self.partial.as_deref().unwrap_or_default());
                SyncError::io("writing", &p, e)
            })?;
        }
        self.hasher.update(bytes);
        self.size += bytes.len() as u64;
        Ok(())
    }
}

/// Where the tree goes, known once the manifest says whether it is one file.
struct Placed {
    /// The tree's directory, or the single file's.
    root: Rc<Dir>,
    /// The single file's name in `root`.
    single: Option<String>,
    /// Entry paths, so a temporary name that is also an entry is never removed.
    names: HashSet<String>,
    /// The last parent directory looked up, by its relative path: consecutive files
    /// of a directory walk no path.
    last: Option<(String, Rc<Dir>)>,
}

impl Placed {
    /// The directory holding the entry `rel`, and its name there.
    fn locate(&mut self, rel: &str) -> Result<(Rc<Dir>, String), SyncError> {
        if let Some(name) = &self.single {
            return Ok((self.root.clone(), name.clone()));
        }
        let comps = components(rel)?;
        let Some((name, parents)) = comps.split_last() else {
            return Err(SyncError::Path {
                path: rel.into(),
                reason: "an empty path in a tree".into(),
            });
        };
        let parent_rel = parents.join("/");
        if let Some((p, d)) = &self.last {
            if *p == parent_rel {
                return Ok((d.clone(), name.to_string()));
            }
        }
        let d = Rc::new(self.root.walk(parents.iter().copied())?);
        self.last = Some((parent_rel, d.clone()));
        Ok((d, name.to_string()))
    }

    fn partial_in_tree(&self, rel: &str, name: &str) -> bool {
        let partial = beneath::partial_name(name);
        let rel = match rel.rsplit_once('/') {
            Some((parent, _)) => format!("{parent}/{partial}"),
            None => partial,
        };
        self.single.is_none() && self.names.contains(&rel)
    }
}

struct State {
    /// The destination as the user (or the daemon's root) names it.
    dest: PathBuf,
    /// A daemon client's path under `dest`, resolved without following links.
    serve_rel: Option<String>,
    placed: Option<Placed>,
    manifest: Option<Manifest>,
    open: Option<Open>,
    written: u64,
    bytes: u64,
    failed: u64,
    done: bool,
    replies: Vec<Reply>,
    mode_mask: u32,
    reveal: bool,
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
    if opts.access == Access::ReadOnly {
        return Err(SyncError::ReadOnly);
    }
    // Checked now, resolved beneath the root once the manifest is in.
    let serve_rel = if opts.serve {
        components(&pre.dest)?;
        Some(pre.dest.clone())
    } else {
        None
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
        dest: opts.dest.clone(),
        serve_rel,
        placed: None,
        mode_mask: if opts.keep_special_bits {
            0o7777
        } else {
            0o777
        },
        reveal: opts.access != Access::WriteOnly,
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
        let o = st
            .open
            .as_mut()
            .ok_or_else(|| proto("file data outside a file".into()))?;
        for s in &d.segments {
            o.take(s)?;
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
            if st.manifest.is_some() {
                return Err(proto("a second manifest".into()));
            }
            let have = prepare(st, &manifest)?;
            st.manifest = Some(manifest);
            st.replies.push(Reply::Have { indices: have });
        }
        Control::FileStart { index } => {
            let entry = file_entry(st, index, peer)?;
            let placed = st.placed.as_mut().expect("placed with the manifest");
            let (dir, name) = placed.locate(&entry.path)?;
            let partial_in_tree = placed.partial_in_tree(&entry.path, &name);
            let existing = dir
                .open_file(&name)
                .filter(|f| f.metadata().is_ok_and(|m| m.len() == entry.size));
            let (sink, partial) = match existing {
                Some(f) => (
                    Sink::Comparing(std::io::BufReader::with_capacity(256 << 10, f)),
                    None,
                ),
                None => {
                    let (f, partial) = dir.create_temp(&name, partial_in_tree)?;
                    (Sink::Writing(f), Some(partial))
                }
            };
            st.open = Some(Open {
                index,
                dir,
                name,
                partial,
                partial_in_tree,
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
            let entry = file_entry(st, index, peer)?;
            let target = o.dir.show(&o.name);
            let got = frame::file_hash(&o.hasher);
            let mode = entry.mode & st.mode_mask;
            if o.size != size || got != blake3 {
                if let Some(p) = &o.partial {
                    let _ = o.dir.remove_file(p);
                }
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
            } else {
                match o.sink {
                    // Equal so far; equal in all if the existing file ends here too: its
                    // metadata is all, set on the descriptor compared.
                    Sink::Comparing(mut existing) => {
                        if !existing.read(&mut [0u8; 1]).is_ok_and(|n| n == 0) {
                            return Err(SyncError::io(
                                "comparing",
                                &target,
                                std::io::Error::other("the file grew while it was compared"),
                            ));
                        }
                        beneath::set_meta(existing.get_ref(), mode, entry.mtime_ns, &target)?;
                    }
                    Sink::Writing(f) => {
                        let partial = o.partial.as_deref().expect("a file being written has one");
                        beneath::set_meta(&f, mode, entry.mtime_ns, &o.dir.show(partial))?;
                        drop(f);
                        if let Err(e) = o.dir.rename(partial, &o.name) {
                            // A directory in the way: the verified bytes are not kept.
                            let _ = o.dir.remove_file(partial);
                            return Err(e);
                        }
                    }
                }
                st.written += 1;
                st.bytes += size;
            }
            // What crossed survives an interruption of the rest.
            rx.cache().flush()?;
        }
        Control::Done => {
            if let (Some(m), Some(placed)) = (&st.manifest, st.placed.as_mut()) {
                // Deepest first, so setting a directory's mtime is not undone by its
                // children.
                for e in m.entries.iter().rev() {
                    if e.kind == Kind::File {
                        continue;
                    }
                    let (dir, name) = placed.locate(&e.path)?;
                    match e.kind {
                        Kind::Dir => dir.set_dir_meta(&name, e.mode & st.mode_mask, e.mtime_ns)?,
                        Kind::Symlink { .. } => dir.set_link_mtime(&name, e.mtime_ns)?,
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

/// Opens the destination for `m`: the tree's directory, or a single file's directory
/// and name.
fn place(st: &State, m: &Manifest) -> Result<Placed, SyncError> {
    let single_name = || -> Result<String, SyncError> {
        match components(&m.name)?.as_slice() {
            [n] => Ok(n.to_string()),
            _ => Err(SyncError::Path {
                path: m.name.clone(),
                reason: "a single file's name must be one plain name".into(),
            }),
        }
    };
    let (root, single) = match (&st.serve_rel, m.single_file) {
        // The user's own path: links in it are followed, as their shell would.
        (None, false) => (Dir::open_root(&st.dest, true)?, None),
        (None, true) if st.dest.is_dir() => {
            (Dir::open_root(&st.dest, false)?, Some(single_name()?))
        }
        (None, true) => {
            let name = st
                .dest
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| SyncError::Path {
                    path: st.dest.display().to_string(),
                    reason: "names no file".into(),
                })?;
            let parent = st.dest.parent().filter(|p| !p.as_os_str().is_empty());
            (
                Dir::open_root(parent.unwrap_or(Path::new(".")), true)?,
                Some(name.to_string()),
            )
        }
        // A daemon client's path: beneath the root, through no link.
        (Some(rel), single_file) => {
            let root = Dir::open_root(&st.dest, true)?;
            let comps = components(rel)?;
            match (comps.split_last(), single_file) {
                (None, false) => (root, None),
                (None, true) => (root, Some(single_name()?)),
                (Some(_), false) => (ensure_dirs(root, &comps)?, None),
                (Some((last, parents)), true) => {
                    let parent = ensure_dirs(root, parents)?;
                    match parent.kind(last)? {
                        Some(FileType::Directory) => (parent.open_dir(last)?, Some(single_name()?)),
                        Some(FileType::Symlink) => {
                            return Err(SyncError::ThroughLink {
                                link: parent.show(last).display().to_string(),
                            })
                        }
                        _ => (parent, Some(last.to_string())),
                    }
                }
            }
        }
    };
    Ok(Placed {
        root: Rc::new(root),
        single,
        names: m.entries.iter().map(|e| e.path.clone()).collect(),
        last: None,
    })
}

/// The directories `comps` beneath `root`, made where missing; a link on the way is
/// refused (the daemon's operator may have put it there: not replaced).
fn ensure_dirs(root: Dir, comps: &[&str]) -> Result<Dir, SyncError> {
    let mut d = root;
    for c in comps {
        d = match d.kind(c)? {
            None => d.make_dir(c)?,
            Some(_) => d.open_dir(c)?,
        };
    }
    Ok(d)
}

/// Makes directories and links, and says which files are already in place.
fn prepare(st: &mut State, m: &Manifest) -> Result<Vec<u32>, SyncError> {
    let mut placed = place(st, m)?;
    let mut have = Vec::new();
    for (i, e) in m.entries.iter().enumerate() {
        let (dir, name) = placed.locate(&e.path)?;
        match &e.kind {
            Kind::Dir => {
                dir.make_dir(&name)?;
            }
            // The target is the sender's bytes, never resolved here.
            Kind::Symlink { target } => dir.symlink(target, &name)?,
            Kind::File => {
                if !st.reveal {
                    continue;
                }
                // One lstat per file: most of a tree is usually in place.
                if let Some(st) = dir.stat(&name) {
                    let mtime = st.st_mtime * 1_000_000_000 + st.st_mtime_nsec as i64;
                    if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
                        && st.st_size as u64 == e.size
                        && mtime == e.mtime_ns
                    {
                        have.push(i as u32);
                    }
                }
            }
        }
    }
    st.placed = Some(placed);
    Ok(have)
}

/// The manifest's entry `index`, which must be a file.
fn file_entry(st: &State, index: u32, peer: &str) -> Result<Entry, SyncError> {
    let m = st.manifest.as_ref().ok_or_else(|| SyncError::Protocol {
        peer: peer.to_string(),
        reason: "a file before the manifest".into(),
    })?;
    m.entries
        .get(index as usize)
        .filter(|e| e.kind == Kind::File)
        .cloned()
        .ok_or_else(|| SyncError::Protocol {
            peer: peer.to_string(),
            reason: format!("file {index} is not a file of the manifest"),
        })
}
