//! The tree's event collectors and its trace files.
//!
//! Every node records, always on (vargr-trace costs tens of nanoseconds per record):
//!
//! | collector | op | one record per | seq | peer | bytes |
//! |---|---|---|---|---|---|
//! | `tbon/link/in`, `tbon/link/out` | LinkIn / LinkOut | Data or PointToPoint frame | header stream field (stream id; destination rank for point-to-point) | node id at the other end of the link | whole frame |
//! | `tbon/link/in/observe`, `tbon/link/out/observe` | LinkIn / LinkOut | observed-element value (ObserveVal, ObservePublish; requests are control) | element id | node id at the other end | whole frame |
//! | `tbon/link/in/control`, `tbon/link/out/control` | LinkIn / LinkOut | any other frame (heartbeats, clock, stream open, shutdown…) | header stream field | node id at the other end | whole frame |
//! | `tbon/sync/<mode>` | Filter | packet pushed into a stream's synchronisation filter | stream id | child node the packet came from | packet payload |
//! | `tbon/filter/up/<name>`, `tbon/filter/down/<name>` | Filter | transformation filter call (one wave up, one packet down) | stream id | this node's id | input packets |
//! | `tbon/wave/last` | User | wave completed by a child's packet (that child arrived last) | stream id | the child's node id | 0 |
//!
//! Data, observed-element and control traffic have separate collectors so a user can
//! look at the application's frames alone (`tbon/link/in`), at what the observe caches
//! cost each link (`tbon/link/in/observe`), or at all of them (the `tbon/link/` prefix). LinkIn spans from the frame's arrival at the router to the end of its
//! routing (filters included); LinkOut spans the hand-off to the link's queue.
//!
//! When a trace directory is configured every node process writes `node-<id>.vtr` there
//! when it shuts down ([`TraceDump`]). Nodes started as threads of the front-end's
//! process share its rings, so only the front-end writes, for all of them.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bytes::Bytes;
use vargr_net::LinkId;
use vargr_trace::{EventOp, Record, NO_PEER};
use vargr_wire::FrameKind;

use crate::out::Out;

/// Collector ids of the link collectors, registered once per process.
pub(crate) struct LinkCollectors {
    pub data_in: u16,
    pub data_out: u16,
    pub ctl_in: u16,
    pub ctl_out: u16,
    pub obs_in: u16,
    pub obs_out: u16,
}

pub(crate) fn links() -> &'static LinkCollectors {
    static IDS: OnceLock<LinkCollectors> = OnceLock::new();
    IDS.get_or_init(|| LinkCollectors {
        data_in: vargr_trace::collector("tbon/link/in"),
        data_out: vargr_trace::collector("tbon/link/out"),
        ctl_in: vargr_trace::collector("tbon/link/in/control"),
        ctl_out: vargr_trace::collector("tbon/link/out/control"),
        obs_in: vargr_trace::collector("tbon/link/in/observe"),
        obs_out: vargr_trace::collector("tbon/link/out/observe"),
    })
}

/// The collector of a frame of `kind`: `(data, observe, control)[class]`.
fn class(kind: u8, [data, observe, control]: [u16; 3]) -> u16 {
    const OBSERVE: [u8; 2] = [FrameKind::ObserveVal as u8, FrameKind::ObservePublish as u8];
    if kind == FrameKind::Data as u8 || kind == FrameKind::PointToPoint as u8 {
        data
    } else if OBSERVE.contains(&kind) {
        observe
    } else {
        control
    }
}

fn clamp(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Records one frame that arrived from `peer` (a node id or [`NO_PEER`]).
pub(crate) fn link_in(kind: FrameKind, stream: u32, len: usize, peer: u32, start: u64) {
    let c = links();
    vargr_trace::record(&Record {
        start,
        end: vargr_trace::now(),
        seq: stream,
        bytes: clamp(len),
        collector: class(kind as u8, [c.data_in, c.obs_in, c.ctl_in]),
        op: EventOp::LinkIn as u8,
        status: 0,
        peer,
    });
}

/// What a record of an outgoing frame needs from its encoded header: kind, stream and
/// length (frames this node built, but read defensively).
pub(crate) fn header_of(bytes: &[u8]) -> (u8, u32, usize) {
    let kind = bytes.get(2).copied().unwrap_or(0);
    let stream = bytes
        .get(8..12)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    (kind, stream, bytes.len())
}

/// Records one encoded frame (see [`header_of`]) handed to the link towards `peer`.
pub(crate) fn link_out((kind, stream, len): (u8, u32, usize), peer: u32, start: u64) {
    let c = links();
    vargr_trace::record(&Record {
        start,
        end: vargr_trace::now(),
        seq: stream,
        bytes: clamp(len),
        collector: class(kind, [c.data_out, c.obs_out, c.ctl_out]),
        op: EventOp::LinkOut as u8,
        status: 0,
        peer,
    });
}

/// Records one filter call that started at `start`.
pub(crate) fn filter(collector: u16, stream: u32, bytes: usize, peer: u32, start: u64, ok: bool) {
    vargr_trace::record(&Record {
        start,
        end: vargr_trace::now(),
        seq: stream,
        bytes: clamp(bytes),
        collector,
        op: EventOp::Filter as u8,
        status: u8::from(!ok),
        peer,
    });
}

/// The collector of a filter spec such as `histogram:0,10,5` (named without its
/// arguments, so instances of one filter share it).
pub(crate) fn filter_collector(direction: &str, spec: &str) -> u16 {
    let name = spec.split(':').next().unwrap_or(spec);
    vargr_trace::collector(&format!("tbon/filter/{direction}/{name}"))
}

/// Node ids at the far end of each link, indexed by link id, so recording a frame
/// costs an index instead of a search.
#[derive(Default)]
pub(crate) struct LinkPeers(Vec<u32>);

impl LinkPeers {
    pub fn new(links: impl IntoIterator<Item = (LinkId, u32)>) -> LinkPeers {
        let mut v = Vec::new();
        for (l, node) in links {
            if v.len() <= l.0 {
                v.resize(l.0 + 1, NO_PEER);
            }
            v[l.0] = node;
        }
        LinkPeers(v)
    }

    /// Names the node at the other end of a link added after start-up (adoption).
    pub fn set(&mut self, l: LinkId, node: u32) {
        if self.0.len() <= l.0 {
            self.0.resize(l.0 + 1, NO_PEER);
        }
        self.0[l.0] = node;
    }

    pub fn of(&self, l: LinkId) -> u32 {
        self.0.get(l.0).copied().unwrap_or(NO_PEER)
    }
}

/// An [`Out`] that records every frame it passes on.
pub(crate) struct TracedOut<'a> {
    pub inner: &'a mut dyn Out,
    pub peers: &'a LinkPeers,
}

impl Out for TracedOut<'_> {
    fn send(&mut self, link: LinkId, bytes: Bytes) {
        let t = vargr_trace::now();
        let h = header_of(&bytes);
        self.inner.send(link, bytes);
        link_out(h, self.peers.of(link), t);
    }

    fn send_latest(&mut self, link: LinkId, key: u64, bytes: Bytes) {
        let t = vargr_trace::now();
        let h = header_of(&bytes);
        self.inner.send_latest(link, key, bytes);
        link_out(h, self.peers.of(link), t);
    }

    fn send_low(&mut self, link: LinkId, bytes: Bytes) {
        let t = vargr_trace::now();
        let h = header_of(&bytes);
        self.inner.send_low(link, bytes);
        link_out(h, self.peers.of(link), t);
    }
}

/// Records that `child`'s packet completed a wave of `stream` (it arrived last): the
/// load-balance view of the tree, counted per stream and child by the monitor.
pub(crate) fn last_arrival(stream: u32, child: u32) {
    static ID: OnceLock<u16> = OnceLock::new();
    let id = *ID.get_or_init(|| vargr_trace::collector("tbon/wave/last"));
    let t = vargr_trace::now();
    vargr_trace::record(&Record {
        start: t,
        end: t,
        seq: stream,
        bytes: 0,
        collector: id,
        op: EventOp::User as u8,
        status: 0,
        peer: child,
    });
}

thread_local! {
    static IN_PROCESS: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as a node started inside the front-end's process (thread
/// launcher): it shares the process's rings and clock, so it writes no trace file and
/// sets no process-wide clock alignment.
pub(crate) fn mark_in_process() {
    IN_PROCESS.with(|c| c.set(true));
}

pub(crate) fn in_process() -> bool {
    IN_PROCESS.with(Cell::get)
}

/// Sends a frame straight through the reactor (start-up, before the engine), recording it.
pub(crate) fn send_recorded(
    reactor: &mut vargr_net::Reactor,
    link: LinkId,
    bytes: Bytes,
    peer: u32,
) {
    let t0 = vargr_trace::now();
    let h = header_of(&bytes);
    reactor.send(link, bytes);
    link_out(h, peer, t0);
}

/// Labels the calling thread's track.
pub(crate) fn label_thread(node: u32, role: &str) {
    vargr_trace::set_thread_label(&format!("node {node} ({role})"), None);
}

/// Writing a node's trace file failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("writing the trace of node {node} to {}: {reason}", path.display())]
pub struct TraceDumpError {
    pub node: u32,
    pub path: PathBuf,
    pub reason: String,
}

/// Where and as what one node writes its trace at shutdown.
#[derive(Debug, Clone)]
pub struct TraceDump {
    pub dir: PathBuf,
    pub node: u32,
    /// What the node is (`front-end`, `commnode`, `back-end 3`), for the file header.
    pub role: String,
}

impl TraceDump {
    /// The trace directory of this node: the network's, if it has one.
    pub fn configured(config_dir: Option<&str>, node: u32, role: String) -> Option<TraceDump> {
        let dir = PathBuf::from(config_dir?);
        Some(TraceDump { dir, node, role })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(format!("node-{}.vtr", self.node))
    }

    /// Writes everything this process's collectors hold to [`TraceDump::path`].
    pub fn write(&self) -> Result<PathBuf, TraceDumpError> {
        let path = self.path();
        let err = |reason: String| TraceDumpError {
            node: self.node,
            path: path.clone(),
            reason,
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| {
            err(format!(
                "cannot create the directory {}: {e}",
                self.dir.display()
            ))
        })?;
        let file =
            vargr_trace::Tracer::new().snapshot(&format!("node {} ({})", self.node, self.role));
        file.write(&path).map_err(|e| err(e.to_string()))?;
        Ok(path)
    }

    /// Writes, reporting a failure on stderr: for commnodes and back-ends, whose
    /// failures have nobody else to go to.
    pub fn write_or_log(&self) {
        if let Err(e) = self.write() {
            tracing::warn!("{e}");
        }
    }
}

/// Checks that `dir` can hold trace files (creating it), before anything starts.
pub(crate) fn check_dir(dir: &Path) -> Result<(), crate::TbonError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| crate::TbonError::Config(format!("trace directory {}: {e}", dir.display())))
}

/// (sending node, receiving node) → (frames, bytes).
pub type PerLink = std::collections::BTreeMap<(u32, u32), (u64, u64)>;

/// Observed-element values that crossed each link, from the trace files in `dir`:
/// (sending node, receiving node) → (frames, bytes), counted where they arrived (the
/// `tbon/link/in/observe` records; see the module docs). What the observe caches save
/// shows here: a link below a cache carries each version at most once.
pub fn observed_per_link(dir: &Path) -> Result<PerLink, vargr_trace::FileError> {
    let mut out = PerLink::new();
    for f in vargr_trace::TraceFile::read_dir(dir)? {
        // Node processes are named "node <id> (<role>)".
        let Some(node) = f
            .process
            .strip_prefix("node ")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Some(obs) = f
            .collectors
            .iter()
            .position(|c| c == "tbon/link/in/observe")
        else {
            continue;
        };
        for r in f.threads.iter().flat_map(|t| &t.records) {
            if usize::from(r.collector) == obs && r.op == EventOp::LinkIn as u8 {
                let e: &mut (u64, u64) = out.entry((r.peer, node)).or_default();
                e.0 += 1;
                e.1 += u64::from(r.bytes);
            }
        }
    }
    Ok(out)
}
