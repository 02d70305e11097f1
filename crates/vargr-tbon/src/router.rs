//! The protocol logic of one tree node: where each frame goes and which filters it meets.
//!
//! The same [`Router`] runs in the front-end (root), in every commnode and in every
//! back-end (leaf). It never touches a socket: frames come in through
//! [`Router::on_frame`] with the current time, and everything it wants sent goes to an
//! [`Out`] (the reactor, or an outbox when another thread holds the reactor). What is
//! meant for the local application (front-end user, back-end user) lands in
//! [`Deliveries`].
//!
//! The router also records the tree's link and filter events (see [`crate::trace`]) and
//! runs the clock-skew exchange (see [`crate::clock`]); its clock is a field, so tests
//! drive it with a fake one.
//!
//! Fault recovery (see [`crate::recovery`]) lives here too: a node whose parent died
//! becomes an orphan ([`Router::parent_lost`]) and keeps serving its children; an
//! ancestor adopts orphans ([`Router::adopt`]) and lines their waves up with its own.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use vargr_filter::{apply_guarded, FilterContext, Registry, SyncFilter, SyncMode, TransformFilter};
use vargr_net::LinkId;
use vargr_trace::NO_PEER;
use vargr_wire::{encode_header, Frame, FrameKind, Packet};

use crate::clock::ClockState;
use crate::log::vlog;
use crate::proto::{self, AdoptMsg, AdoptedMsg, Ancestor, FaultMsg, StreamOpenMsg, StreamProgress};
use crate::recovery::{Orphan, Recovery, TreeEvent};
use crate::{trace, TbonError};

/// Where frames leave a node.
pub trait Out {
    fn send(&mut self, link: LinkId, bytes: Bytes);
    /// Sends a latest-mode frame; a newer frame with the same `key` replaces it while
    /// the link is backed up.
    fn send_latest(&mut self, link: LinkId, key: u64, bytes: Bytes);

    /// Sends a monitor-plane frame: it leaves only when no other frame waits on the link.
    fn send_low(&mut self, link: LinkId, bytes: Bytes);

    /// Sends `bytes`, as a latest-mode frame when `latest` carries its key.
    fn forward(&mut self, link: LinkId, latest: Option<u64>, bytes: Bytes) {
        match latest {
            Some(key) => self.send_latest(link, key, bytes),
            None => self.send(link, bytes),
        }
    }

    /// Sends `bytes` on `lane`.
    fn send_on(&mut self, link: LinkId, lane: Lane, bytes: Bytes) {
        match lane {
            Lane::Normal => self.send(link, bytes),
            Lane::Latest(key) => self.send_latest(link, key, bytes),
            Lane::Low => self.send_low(link, bytes),
        }
    }
}

/// How a queued frame is to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Normal,
    /// Latest-mode, with its replacement key.
    Latest(u64),
    /// The monitor plane's low-priority lane.
    Low,
}

impl Out for vargr_net::Reactor {
    fn send(&mut self, link: LinkId, bytes: Bytes) {
        vargr_net::Reactor::send(self, link, bytes)
    }
    fn send_latest(&mut self, link: LinkId, key: u64, bytes: Bytes) {
        vargr_net::Reactor::send_latest(self, link, key, bytes)
    }
    fn send_low(&mut self, link: LinkId, bytes: Bytes) {
        vargr_net::Reactor::send_low(self, link, bytes)
    }
}

/// Frames waiting for the thread that holds the reactor.
#[derive(Default)]
pub struct Outbox(pub Vec<(LinkId, Lane, Bytes)>);

impl Out for Outbox {
    fn send(&mut self, link: LinkId, bytes: Bytes) {
        self.0.push((link, Lane::Normal, bytes));
    }
    fn send_latest(&mut self, link: LinkId, key: u64, bytes: Bytes) {
        self.0.push((link, Lane::Latest(key), bytes));
    }
    fn send_low(&mut self, link: LinkId, bytes: Bytes) {
        self.0.push((link, Lane::Low, bytes));
    }
}

/// Latest-mode replacement key: one slot per stream and source.
fn latest_key(stream: u32, source: u32) -> u64 {
    (u64::from(stream) << 32) | u64::from(source)
}

/// The source rank at the front of a data payload (see vargr-wire), without decoding it.
fn payload_source(payload: &[u8]) -> u32 {
    match payload.get(..4) {
        Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        None => u32::MAX,
    }
}

/// Encodes a frame into one shareable buffer.
pub fn frame_bytes(kind: FrameKind, stream: u32, tag: i32, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(vargr_wire::HEADER_LEN + payload.len());
    encode_header(kind, 0, stream, tag, payload.len(), &mut b);
    b.extend_from_slice(payload);
    b.freeze()
}

/// Encodes a data packet as a Data frame, in one buffer.
pub fn packet_bytes(p: &Packet) -> Bytes {
    let mut b = BytesMut::new();
    p.encode_frame(&mut b);
    b.freeze()
}

/// What a node hands to its local application.
#[derive(Default)]
pub struct Deliveries {
    /// Front-end: per-stream results; back-end: everything arrives on stream queues too.
    pub streams: FxHashMap<u32, VecDeque<Result<Packet, TbonError>>>,
    /// Back-end: packets in arrival order across streams (stream id inside the packet).
    pub inbox: VecDeque<Packet>,
    /// Faults seen (front-end), newest last.
    pub faults: Vec<TbonError>,
    /// Changes of the tree (front-end), oldest first.
    pub events: Vec<TreeEvent>,
    /// Set when the node must stop: shutdown requested or parent lost.
    pub closed: Option<TbonError>,
}

pub struct ChildInfo {
    pub link: LinkId,
    pub node: u32,
    pub host: String,
    pub backends: Vec<u32>,
    pub alive: bool,
    pub shutdown_done: bool,
    /// Once lost: per stream, the first wave (numbered here) released without it.
    pub lost_from: FxHashMap<u32, u64>,
}

impl ChildInfo {
    pub fn new(link: LinkId, node: u32, host: String, backends: Vec<u32>) -> ChildInfo {
        ChildInfo {
            link,
            node,
            host,
            backends,
            alive: true,
            shutdown_done: false,
            lost_from: FxHashMap::default(),
        }
    }
}

struct StreamState {
    open: StreamOpenMsg,
    /// Indices into `children` of the children with members, and each one's input slot.
    child_slots: Vec<(usize, usize)>,
    sync: SyncFilter,
    up: Option<Box<dyn TransformFilter>>,
    down: Option<Box<dyn TransformFilter>>,
    /// Fast path: identity filter with don't-wait, forwarded without decoding.
    passthrough: bool,
    /// Trace collectors of the sync filter and the up and down transformation filters.
    sync_collector: u16,
    up_collector: u16,
    down_collector: u16,
    /// Multicasts this node received (or, at the root, sent) on the stream.
    heard: u64,
    /// Packets a back-end sent up the stream.
    sent: u64,
    /// Per child index: its wave `w` is wave `w + shift` here (non-zero for adopted
    /// children, which count from their own start).
    shifts: FxHashMap<usize, i64>,
}

impl StreamState {
    fn progress(&self, is_leaf: bool) -> StreamProgress {
        StreamProgress {
            stream: self.open.id,
            heard: self.heard,
            answered: if is_leaf {
                self.sent
            } else {
                self.sync.released()
            },
        }
    }

    fn aligned(&self) -> bool {
        self.sync.mode() == SyncMode::WaitForAll && !self.passthrough
    }
}

pub struct Router {
    pub node: u32,
    pub host: String,
    /// Back-end rank when this node is a leaf.
    pub backend_rank: Option<u32>,
    pub parent: Option<LinkId>,
    pub children: Vec<ChildInfo>,
    streams: FxHashMap<u32, StreamState>,
    registry: std::sync::Arc<Registry>,
    pub deliveries: Deliveries,
    pub shutting_down: bool,
    pub heartbeat: Duration,
    pub heartbeat_timeout: Duration,
    /// Node id of the parent (trace records name it), or [`NO_PEER`] at the root.
    pub parent_node: u32,
    /// The clock skew estimation reads: [`vargr_trace::clock::trace_ns`] unless a test
    /// substitutes its own.
    pub clock_ns: fn() -> u64,
    /// This process's id: a child answering with the same one (and on the same host)
    /// shares our clock.
    pub pid: u32,
    /// Whether an alignment received makes this process's trace alignment (not for
    /// nodes running as threads of another node's process).
    pub adopt_alignment: bool,
    pub clock: ClockState,
    /// The monitor plane: pulls in progress, this node's reducer.
    pub monitor: crate::monitor::MonitorState,
    pub recovery: Recovery,
    /// Where this node's ancestors accept orphans, its parent first.
    pub ancestors: Vec<Ancestor>,
    /// Where this node accepts orphans (internal nodes with recovery on).
    pub listen: Option<Ancestor>,
    /// Set while the parent is dead and an adoption is being sought.
    pub orphan: Option<Orphan>,
    /// Front-end: per (stream, back-end), the first wave (and the node that died) of a
    /// loss not yet closed by an adoption.
    open_losses: FxHashMap<(u32, u32), (u64, u32)>,
}

/// The `end` of a [`FaultMsg::WavesLost`] whose back-ends have not come back yet.
pub const OPEN: u64 = u64::MAX;

impl Router {
    pub fn new(
        node: u32,
        host: String,
        backend_rank: Option<u32>,
        registry: std::sync::Arc<Registry>,
    ) -> Router {
        Router {
            node,
            host,
            backend_rank,
            parent: None,
            children: Vec::new(),
            streams: FxHashMap::default(),
            registry,
            deliveries: Deliveries::default(),
            shutting_down: false,
            heartbeat: Duration::from_millis(500),
            heartbeat_timeout: Duration::from_millis(1500),
            parent_node: NO_PEER,
            clock_ns: vargr_trace::clock::trace_ns,
            pid: std::process::id(),
            adopt_alignment: !trace::in_process(),
            clock: ClockState::default(),
            monitor: Default::default(),
            recovery: Recovery::Off,
            ancestors: Vec::new(),
            listen: None,
            orphan: None,
            open_losses: FxHashMap::default(),
        }
    }

    pub fn is_root(&self) -> bool {
        self.parent.is_none() && self.orphan.is_none()
    }

    fn child_index(&self, link: LinkId) -> Option<usize> {
        // Link ids are reused: a dead child's may now be an adopted one's.
        self.children.iter().position(|c| c.alive && c.link == link)
    }

    /// Creates a stream here and forwards its creation to the children with members.
    pub fn open_stream(&mut self, msg: StreamOpenMsg, out: &mut dyn Out) -> Result<(), TbonError> {
        let sync: SyncMode = msg
            .sync
            .parse()
            .map_err(|e: vargr_filter::FilterError| TbonError::BadStream(e.to_string()))?;
        let up = self
            .registry
            .create(&msg.up)
            .map_err(|e| TbonError::BadStream(e.to_string()))?;
        let down = match &msg.down {
            Some(d) => Some(
                self.registry
                    .create(d)
                    .map_err(|e| TbonError::BadStream(e.to_string()))?,
            ),
            None => None,
        };
        let mut child_slots = Vec::new();
        for (i, c) in self.children.iter().enumerate() {
            if c.alive
                && c.backends
                    .iter()
                    .any(|b| msg.members.binary_search(b).is_ok())
            {
                child_slots.push((i, child_slots.len()));
            }
        }
        if self.is_root() && child_slots.is_empty() {
            return Err(TbonError::BadCommunicator(format!(
                "none of the stream's {} back-ends is reachable (all were lost)",
                msg.members.len()
            )));
        }
        let passthrough =
            matches!(msg.up.as_str(), "null" | "identity") && matches!(sync, SyncMode::DontWait);
        let sync_name = sync.to_string();
        let sync_name = sync_name.split(':').next().unwrap_or("");
        let sync_collector = vargr_trace::collector(&format!("tbon/sync/{sync_name}"));
        let up_collector = trace::filter_collector("up", &msg.up);
        let down_collector = msg
            .down
            .as_deref()
            .map_or(0, |d| trace::filter_collector("down", d));
        let bytes = frame_bytes(FrameKind::StreamOpen, msg.id, 0, &proto::to_json(&msg));
        for &(ci, _) in &child_slots {
            out.send(self.children[ci].link, bytes.clone());
        }
        self.deliveries.streams.entry(msg.id).or_default();
        let st = StreamState {
            sync: SyncFilter::new(sync, child_slots.len()),
            child_slots,
            up: Some(up),
            down,
            passthrough,
            sync_collector,
            up_collector,
            down_collector,
            open: msg,
            heard: 0,
            sent: 0,
            shifts: FxHashMap::default(),
        };
        self.streams.insert(st.open.id, st);
        Ok(())
    }

    /// Sends a packet down a stream from this node (front-end multicast).
    pub fn send_down(&mut self, p: Packet, out: &mut dyn Out) -> Result<(), TbonError> {
        let st = self
            .streams
            .get_mut(&p.stream)
            .ok_or(TbonError::NoStream(p.stream))?;
        let latest = st.open.latest;
        let is_root = self.parent.is_none() && self.orphan.is_none();
        if is_root {
            st.heard += 1;
        }
        let ctx = FilterContext {
            node_id: self.node,
            stream: p.stream,
            is_root,
            num_inputs: 1,
        };
        let packets = match st.down.as_mut() {
            Some(f) => {
                let (t0, bytes) = (vargr_trace::now(), p.encoded_len());
                let r = apply_guarded(f.as_mut(), &ctx, vec![p]);
                trace::filter(
                    st.down_collector,
                    ctx.stream,
                    bytes,
                    self.node,
                    t0,
                    r.is_ok(),
                );
                r.map_err(|e| TbonError::Filter {
                    stream: ctx.stream,
                    node: self.node,
                    filter: e.to_string(),
                    reason: e.to_string(),
                })?
            }
            None => vec![p],
        };
        for p in packets {
            let bytes = packet_bytes(&p);
            let key = latest.then(|| latest_key(p.stream, p.source));
            for &(ci, _) in &st.child_slots {
                let c = &self.children[ci];
                if c.alive {
                    out.forward(c.link, key, bytes.clone());
                }
            }
        }
        Ok(())
    }

    /// Sends a packet up towards the front-end (back-end side).
    pub fn send_up(&mut self, p: &Packet, out: &mut dyn Out) -> Result<(), TbonError> {
        if self.is_root() {
            return Err(TbonError::Net(
                "the front-end has no parent to send to".into(),
            ));
        }
        if let Some(st) = self.streams.get_mut(&p.stream) {
            st.sent += 1;
        }
        let Some(parent) = self.parent else {
            if let Some(o) = self.orphan.as_mut() {
                o.held.push((p.stream, packet_bytes(p)));
            }
            return Ok(());
        };
        let bytes = packet_bytes(p);
        let latest = self.streams.get(&p.stream).is_some_and(|st| st.open.latest);
        out.forward(
            parent,
            latest.then(|| latest_key(p.stream, p.source)),
            bytes,
        );
        Ok(())
    }

    /// Routes a point-to-point packet to back-end `dest`.
    pub fn send_p2p(&mut self, dest: u32, p: &Packet, out: &mut dyn Out) -> Result<(), TbonError> {
        let mut payload = BytesMut::new();
        p.encode_payload(&mut payload);
        let bytes = frame_bytes(FrameKind::PointToPoint, dest, p.tag, &payload);
        self.route_p2p(dest, bytes, None, out)
    }

    fn route_p2p(
        &mut self,
        dest: u32,
        bytes: Bytes,
        from: Option<LinkId>,
        out: &mut dyn Out,
    ) -> Result<(), TbonError> {
        if let Some(c) = self
            .children
            .iter()
            .find(|c| c.alive && c.backends.binary_search(&dest).is_ok())
        {
            out.send(c.link, bytes);
            return Ok(());
        }
        match self.parent {
            Some(p) if Some(p) != from => {
                out.send(p, bytes);
                Ok(())
            }
            None if self.orphan.is_some() => Ok(()),
            _ => Err(TbonError::BadCommunicator(format!(
                "no back-end with rank {dest} is reachable"
            ))),
        }
    }

    /// Handles one frame from `link`, recording it (LinkIn) from arrival to the end of
    /// its routing.
    pub fn on_frame(&mut self, link: LinkId, f: Frame, now: Instant, out: &mut dyn Out) {
        let t0 = vargr_trace::now();
        let from_parent = Some(link) == self.parent;
        let child = if from_parent {
            None
        } else {
            self.child_index(link)
        };
        let peer = match child {
            Some(ci) => self.children[ci].node,
            None if from_parent => self.parent_node,
            None => NO_PEER,
        };
        let (kind, stream, len) = (f.kind, f.stream, f.wire_len());
        self.route(link, from_parent, child, f, now, out);
        trace::link_in(kind, stream, len, peer, t0);
    }

    fn route(
        &mut self,
        link: LinkId,
        from_parent: bool,
        child: Option<usize>,
        f: Frame,
        now: Instant,
        out: &mut dyn Out,
    ) {
        match f.kind {
            FrameKind::Data if from_parent => self.on_data_down(f, out),
            FrameKind::Data => {
                if let Some(ci) = child {
                    self.on_data_up(ci, f, now, out)
                }
            }
            FrameKind::StreamOpen if from_parent => {
                let opened = proto::from_json::<StreamOpenMsg>("StreamOpen", &f.payload)
                    .and_then(|msg| self.open_stream(msg, out));
                if let Err(e) = opened {
                    let fault = FaultMsg::Filter {
                        stream: f.stream,
                        node: self.node,
                        filter: String::new(),
                        reason: e.to_string(),
                    };
                    self.report(fault, out);
                }
            }
            FrameKind::StreamClose if from_parent => {
                if let Some(st) = self.streams.remove(&f.stream) {
                    for &(ci, _) in &st.child_slots {
                        out.send(
                            self.children[ci].link,
                            frame_bytes(FrameKind::StreamClose, f.stream, 0, &[]),
                        );
                    }
                }
            }
            FrameKind::PointToPoint => {
                let dest = f.stream;
                if self.backend_rank == Some(dest) {
                    match Packet::decode_payload(dest, f.tag, &f.payload) {
                        Ok(p) => self.deliveries.inbox.push_back(p),
                        Err(e) => self.deliveries.faults.push(e.into()),
                    }
                } else {
                    let bytes = f.to_wire();
                    if let Err(e) = self.route_p2p(dest, bytes, Some(link), out) {
                        self.deliveries.faults.push(e);
                    }
                }
            }
            FrameKind::Fault => {
                if let Ok(mut fault) = proto::from_json::<FaultMsg>("Fault", &f.payload) {
                    if let (
                        Some(ci),
                        FaultMsg::WavesLost {
                            stream, first, end, ..
                        },
                    ) = (child, &mut fault)
                    {
                        // Into this node's wave numbers.
                        let shift = self
                            .streams
                            .get(stream)
                            .and_then(|st| st.shifts.get(&ci))
                            .copied()
                            .unwrap_or(0);
                        *first = first.saturating_add_signed(shift);
                        if *end != OPEN {
                            *end = end.saturating_add_signed(shift);
                        }
                    }
                    self.report(fault, out);
                }
            }
            FrameKind::WaveHole => {
                if let Some(ci) = child {
                    self.on_hole(ci, f.stream, now, out)
                }
            }
            FrameKind::Heartbeat => {}
            FrameKind::ClockPing if from_parent => self.on_clock_ping(&f, out),
            FrameKind::ClockPong => {
                if let Some(ci) = child {
                    self.on_clock_pong(ci, &f, out)
                }
            }
            FrameKind::ClockSet if from_parent => self.on_clock_set(&f, out),
            FrameKind::ClockReport if child.is_some() => self.on_clock_report(&f, out),
            FrameKind::MonitorPull if from_parent => self.on_monitor_pull(&f, out),
            FrameKind::MonitorData => {
                if let Some(ci) = child {
                    self.on_monitor_data(ci, &f, out)
                }
            }
            FrameKind::Shutdown if from_parent => self.begin_shutdown(out),
            FrameKind::ShutdownDone => {
                if let Some(ci) = child {
                    self.children[ci].shutdown_done = true;
                }
            }
            _ => {}
        }
    }

    fn on_data_down(&mut self, f: Frame, out: &mut dyn Out) {
        if self.backend_rank.is_some() {
            if let Some(st) = self.streams.get_mut(&f.stream) {
                st.heard += 1;
            }
            match Packet::decode_payload(f.stream, f.tag, &f.payload) {
                Ok(p) => self.deliveries.inbox.push_back(p),
                Err(e) => self.deliveries.faults.push(e.into()),
            }
            return;
        }
        let Some(st) = self.streams.get_mut(&f.stream) else {
            return;
        };
        st.heard += 1;
        if st.down.is_some() {
            match Packet::decode_payload(f.stream, f.tag, &f.payload) {
                Ok(p) => {
                    if let Err(e) = self.send_down(p, out) {
                        self.deliveries.faults.push(e);
                    }
                }
                Err(e) => self.deliveries.faults.push(e.into()),
            }
            return;
        }
        let bytes = f.to_wire();
        let key = st
            .open
            .latest
            .then(|| latest_key(f.stream, payload_source(&f.payload)));
        for &(ci, _) in &st.child_slots {
            let c = &self.children[ci];
            if c.alive {
                out.forward(c.link, key, bytes.clone());
            }
        }
    }

    fn on_data_up(&mut self, ci: usize, f: Frame, now: Instant, out: &mut dyn Out) {
        let Some(st) = self.streams.get_mut(&f.stream) else {
            return;
        };
        let Some(&(_, slot)) = st.child_slots.iter().find(|(c, _)| *c == ci) else {
            return;
        };
        if st.passthrough {
            let root = self.parent.is_none() && self.orphan.is_none();
            match self.parent {
                None if !root => {}
                Some(p) => {
                    let bytes = f.to_wire();
                    let key = st
                        .open
                        .latest
                        .then(|| latest_key(f.stream, payload_source(&f.payload)));
                    out.forward(p, key, bytes);
                }
                None => {
                    let r = Packet::decode_payload(f.stream, f.tag, &f.payload)
                        .map_err(TbonError::from);
                    let q = self.deliveries.streams.entry(f.stream).or_default();
                    if st.open.latest {
                        // Keep only the newest packet of each source.
                        let src = payload_source(&f.payload);
                        q.retain(|r| !matches!(r, Ok(p) if p.source == src));
                    }
                    q.push_back(r);
                }
            }
            return;
        }
        match Packet::decode_payload(f.stream, f.tag, &f.payload) {
            Ok(p) => {
                let t0 = vargr_trace::now();
                let waves = st.sync.push(slot, p, now);
                let child = self.children[ci].node;
                trace::filter(
                    st.sync_collector,
                    f.stream,
                    f.payload.len(),
                    child,
                    t0,
                    true,
                );
                if !waves.is_empty() && st.child_slots.len() > 1 {
                    trace::last_arrival(f.stream, child);
                }
                self.run_waves(f.stream, waves, out);
            }
            Err(e) => {
                let fault = FaultMsg::Filter {
                    stream: f.stream,
                    node: self.node,
                    filter: "decode".into(),
                    reason: e.to_string(),
                };
                self.report(fault, out);
            }
        }
    }

    fn on_hole(&mut self, ci: usize, stream: u32, now: Instant, out: &mut dyn Out) {
        let Some(st) = self.streams.get_mut(&stream) else {
            return;
        };
        let Some(&(_, slot)) = st.child_slots.iter().find(|(c, _)| *c == ci) else {
            return;
        };
        if st.passthrough {
            return;
        }
        let waves = st.sync.push_hole(slot, now);
        self.run_waves(stream, waves, out);
    }

    fn run_waves(&mut self, stream: u32, waves: Vec<Vec<Packet>>, out: &mut dyn Out) {
        if waves.is_empty() {
            return;
        }
        let is_root = self.is_root();
        let Some(st) = self.streams.get_mut(&stream) else {
            return;
        };
        let ctx = FilterContext {
            node_id: self.node,
            stream,
            is_root,
            num_inputs: st.sync.live_children(),
        };
        let mut faults = Vec::new();
        // In wave order: a result, or the number of a wave made only of holes (it still
        // counts, so it travels on as a hole instead of vanishing).
        let mut results: Vec<Result<Packet, u64>> = Vec::new();
        let first_wave = st.sync.released().saturating_sub(waves.len() as u64);
        for (i, wave) in waves.into_iter().enumerate() {
            if wave.is_empty() {
                results.push(Err(first_wave + i as u64));
                continue;
            }
            let Some(f) = st.up.as_mut() else { break };
            let t0 = vargr_trace::now();
            let bytes: usize = wave.iter().map(Packet::encoded_len).sum();
            let r = apply_guarded(f.as_mut(), &ctx, wave);
            trace::filter(st.up_collector, stream, bytes, self.node, t0, r.is_ok());
            match r {
                Ok(ps) => results.extend(ps.into_iter().map(Ok)),
                Err(e) => {
                    // A failed instance may hold broken state: stop using it.
                    st.up = None;
                    faults.push(FaultMsg::Filter {
                        stream,
                        node: self.node,
                        filter: st.open.up.clone(),
                        reason: e.to_string(),
                    });
                }
            }
        }
        let latest = st.open.latest;
        for r in results {
            match (r, self.parent) {
                (Ok(mut p), Some(parent)) => {
                    p.stream = stream;
                    let bytes = packet_bytes(&p);
                    out.forward(parent, latest.then(|| latest_key(stream, p.source)), bytes);
                }
                (Err(_), Some(parent)) => {
                    out.send(parent, frame_bytes(FrameKind::WaveHole, stream, 0, &[]))
                }
                // Held until adopted: the adopter counts on them (see `adopt_request`).
                (r, None) if !is_root => {
                    let bytes = match r {
                        Ok(mut p) => {
                            p.stream = stream;
                            packet_bytes(&p)
                        }
                        Err(_) => frame_bytes(FrameKind::WaveHole, stream, 0, &[]),
                    };
                    if let Some(o) = self.orphan.as_mut() {
                        o.held.push((stream, bytes));
                    }
                }
                (Ok(mut p), None) => {
                    p.stream = stream;
                    let q = self.deliveries.streams.entry(stream).or_default();
                    if latest {
                        q.retain(|r| !matches!(r, Ok(old) if old.source == p.source));
                    }
                    q.push_back(Ok(p));
                }
                (Err(wave), None) => self
                    .deliveries
                    .streams
                    .entry(stream)
                    .or_default()
                    .push_back(Err(TbonError::WaveEmpty { stream, wave })),
            }
        }
        for f in faults {
            self.report(f, out);
        }
    }

    /// Releases waves whose time-out expired.
    pub fn on_timer(&mut self, now: Instant, out: &mut dyn Out) {
        let due: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| s.sync.poll_timeout().is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let waves = self
                .streams
                .get_mut(&id)
                .map(|s| s.sync.on_timeout(now))
                .unwrap_or_default();
            self.run_waves(id, waves, out);
        }
        self.monitor_timer(now, out);
    }

    /// The earliest time a sync filter or a monitor pull needs [`Router::on_timer`].
    pub fn next_deadline(&self) -> Option<Instant> {
        self.streams
            .values()
            .filter_map(|s| s.sync.poll_timeout())
            .chain(self.monitor_deadline())
            .min()
    }

    /// Passes a fault towards the front-end, or records it there.
    pub fn report(&mut self, fault: FaultMsg, out: &mut dyn Out) {
        vlog!(self.node, "fault: {fault:?}");
        if let Some(p) = self.parent {
            out.send(
                p,
                frame_bytes(FrameKind::Fault, 0, 0, &proto::to_json(&fault)),
            );
            return;
        }
        if let Some(o) = self.orphan.as_mut() {
            // Sent on once adopted.
            o.pending.push(fault);
            return;
        }
        let err = match fault {
            FaultMsg::NodeLost {
                node,
                host,
                reason,
                backends,
            } => {
                self.deliveries.events.push(TreeEvent::NodeLost {
                    node,
                    host: host.clone(),
                    backends: backends.clone(),
                });
                TbonError::NodeLost {
                    node,
                    host,
                    reason,
                    backends,
                }
            }
            FaultMsg::Filter {
                stream,
                node,
                filter,
                reason,
            } => TbonError::Filter {
                stream,
                node,
                filter,
                reason,
            },
            FaultMsg::Reparented {
                node,
                lost_parent,
                lost_host,
                new_parent,
                backends,
            } => {
                // A parent that died with its own parent (killed together) was seen to
                // die only by its orphans: report it for them.
                let known =
                    self.deliveries.events.iter().any(
                        |e| matches!(e, TreeEvent::NodeLost { node, .. } if *node == lost_parent),
                    );
                if !known {
                    self.report(
                        FaultMsg::NodeLost {
                            node: lost_parent,
                            host: lost_host,
                            reason: format!("its child node {node} saw it die"),
                            backends: backends.clone(),
                        },
                        out,
                    );
                }
                // Back: a loss still open for them ended before any wave went without them.
                self.open_losses.retain(|(_, b), _| !backends.contains(b));
                // Not a fault: the back-ends are reachable again.
                self.deliveries.events.push(TreeEvent::Reparented {
                    node,
                    lost_parent,
                    new_parent,
                    backends,
                });
                return;
            }
            FaultMsg::WavesLost {
                stream,
                first,
                end: OPEN,
                backends,
                lost,
            } => {
                // Reported when they come back, or never (then `NodeLost` says it all).
                for b in backends {
                    let e = self.open_losses.entry((stream, b)).or_insert((first, lost));
                    if first < e.0 {
                        *e = (first, lost);
                    }
                }
                return;
            }
            FaultMsg::WavesLost {
                stream,
                first,
                end,
                backends,
                lost,
            } => {
                // A back-end whose loss began above its adopter (two nodes died
                // together) went missing from the earlier wave the dead node reported.
                let mut by_first: Vec<(u64, Vec<u32>)> = Vec::new();
                for b in backends {
                    let f = match self.open_losses.remove(&(stream, b)) {
                        Some((f0, _)) => f0.min(first),
                        None => first,
                    };
                    match by_first.iter_mut().find(|(x, _)| *x == f) {
                        Some((_, v)) => v.push(b),
                        None => by_first.push((f, vec![b])),
                    }
                }
                for (first, backends) in by_first {
                    self.deliveries.events.push(TreeEvent::WavesLost {
                        stream,
                        first,
                        end,
                        backends: backends.clone(),
                        lost,
                    });
                    let err = TbonError::WavesLost {
                        stream,
                        first,
                        end,
                        backends,
                        lost,
                    };
                    self.deliveries
                        .streams
                        .entry(stream)
                        .or_default()
                        .push_back(Err(err.clone()));
                    self.deliveries.faults.push(err);
                }
                return;
            }
        };
        for (id, st) in &self.streams {
            let affected = match &err {
                TbonError::NodeLost { backends, .. } => backends
                    .iter()
                    .any(|b| st.open.members.binary_search(b).is_ok()),
                TbonError::Filter { stream, .. } => stream == id,
                _ => false,
            };
            if affected {
                self.deliveries
                    .streams
                    .entry(*id)
                    .or_default()
                    .push_back(Err(err.clone()));
            }
        }
        self.deliveries.faults.push(err);
    }

    /// A link went away. Children: every stream stops waiting for it and the loss is
    /// reported up. Parent: this node must stop.
    pub fn on_closed(&mut self, link: LinkId, reason: String, now: Instant, out: &mut dyn Out) {
        vlog!(self.node, "link {link:?} closed: {reason}");
        if Some(link) == self.parent {
            self.parent_lost(reason);
            return;
        }
        let Some(ci) = self.child_index(link) else {
            return;
        };
        if !self.children[ci].alive {
            return;
        }
        self.children[ci].alive = false;
        self.monitor_child_lost(ci, out);
        if self.shutting_down && self.children[ci].shutdown_done {
            return;
        }
        // The loss is reported first, so a receiver sees why the next wave is partial.
        if !self.shutting_down {
            let c = &self.children[ci];
            let fault = FaultMsg::NodeLost {
                node: c.node,
                host: c.host.clone(),
                reason,
                backends: c.backends.clone(),
            };
            self.report(fault, out);
        }
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        let mut open = Vec::new();
        for id in ids {
            let waves = {
                let st = self.streams.get_mut(&id).expect("id taken from the map");
                match st.child_slots.iter().find(|(c, _)| *c == ci) {
                    Some(&(_, slot)) => {
                        // Its queued packets ride along; the waves after them go without it.
                        let from = st.sync.released() + st.sync.queued_from(slot) as u64;
                        self.children[ci].lost_from.insert(id, from);
                        let members: Vec<u32> = self.children[ci]
                            .backends
                            .iter()
                            .copied()
                            .filter(|b| st.open.members.binary_search(b).is_ok())
                            .collect();
                        if st.aligned() && !members.is_empty() && !self.shutting_down {
                            // Open-ended: whoever adopts them (maybe not us: we may die
                            // first) closes it; the front-end joins the two.
                            open.push(FaultMsg::WavesLost {
                                stream: id,
                                first: from,
                                end: OPEN,
                                backends: members,
                                lost: self.children[ci].node,
                            });
                        }
                        st.sync.remove_child(slot, now)
                    }
                    None => Vec::new(),
                }
            };
            for f in open.drain(..) {
                self.report(f, out);
            }
            self.run_waves(id, waves, out);
        }
    }

    /// The parent is gone. With recovery on, a node that has something to save (a
    /// back-end, or children still alive) and an ancestor to ask becomes an orphan;
    /// otherwise it must stop.
    pub fn parent_lost(&mut self, reason: String) {
        vlog!(self.node, "parent lost: {reason}");
        let worth_saving = self.backend_rank.is_some() || self.children.iter().any(|c| c.alive);
        if self.recovery == Recovery::Ancestor
            && !self.shutting_down
            && self.deliveries.closed.is_none()
            && self.orphan.is_none()
            && self.ancestors.len() > 1
            && worth_saving
        {
            self.parent = None;
            self.orphan = Some(Orphan {
                lost_parent: self.parent_node,
                reason,
                rejoining: false,
                pending: Vec::new(),
                held: Vec::new(),
            });
            return;
        }
        if self.deliveries.closed.is_none() {
            self.deliveries.closed = Some(if self.shutting_down {
                TbonError::Shutdown
            } else {
                TbonError::ParentLost(reason)
            });
        }
    }

    /// Starts an orderly shutdown of the sub-tree below this node.
    pub fn begin_shutdown(&mut self, out: &mut dyn Out) {
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        for c in &self.children {
            if c.alive {
                out.send(c.link, frame_bytes(FrameKind::Shutdown, 0, 0, &[]));
            }
        }
        if self.children.is_empty() {
            if let Some(p) = self.parent {
                out.send(p, frame_bytes(FrameKind::ShutdownDone, 0, 0, &[]));
            }
            self.deliveries.closed.get_or_insert(TbonError::Shutdown);
        }
    }

    /// True once every child confirmed shutdown or is gone.
    pub fn children_done(&self) -> bool {
        self.children.iter().all(|c| c.shutdown_done || !c.alive)
    }

    /// Sends heartbeats on idle links and declares silent links dead. Returns the links
    /// to close.
    pub fn on_tick(
        &mut self,
        now: Instant,
        reactor: &mut vargr_net::Reactor,
    ) -> Vec<(LinkId, String)> {
        self.monitor_drain();
        let mut dead = Vec::new();
        let links: Vec<(LinkId, u32)> = self
            .parent
            .map(|p| (p, self.parent_node))
            .into_iter()
            .chain(
                self.children
                    .iter()
                    .filter(|c| c.alive)
                    .map(|c| (c.link, c.node)),
            )
            .collect();
        for (id, peer) in links {
            let Some(l) = reactor.link_mut(id) else {
                continue;
            };
            // Silence is evidence of death only on a link that flows freely: when we pause
            // it, or the peer does not take our writes, the peer is held back by flow
            // control and cannot send heartbeats; a peer that really dies closes the socket
            // (or TCP keepalive notices). The silence clock restarts once the link flows.
            if l.is_paused() || l.backlog() > 0 {
                l.last_read = now;
            }
            if now.saturating_duration_since(l.last_read) > self.heartbeat_timeout {
                dead.push((
                    id,
                    format!("no heartbeat for {} ms", self.heartbeat_timeout.as_millis()),
                ));
                continue;
            }
            if now.saturating_duration_since(l.last_write) >= self.heartbeat && l.backlog() == 0 {
                let t0 = vargr_trace::now();
                let hb = frame_bytes(FrameKind::Heartbeat, 0, 0, &[]);
                let h = trace::header_of(&hb);
                reactor.send(id, hb);
                trace::link_out(h, peer, t0);
            }
        }
        dead
    }

    pub fn stream_members(&self, id: u32) -> Option<&[u32]> {
        self.streams.get(&id).map(|s| s.open.members.as_slice())
    }

    pub fn has_stream(&self, id: u32) -> bool {
        self.streams.contains_key(&id)
    }
}

impl Router {
    /// Pauses reading where the next hop is backed up, so memory stays bounded and a slow
    /// consumer slows its producers instead. Latest-mode streams never back up (they
    /// replace), so they do not count.
    pub fn apply_backpressure(&mut self, reactor: &mut vargr_net::Reactor, limit: usize) {
        let over = |l: Option<LinkId>, r: &vargr_net::Reactor| {
            l.and_then(|l| r.link(l))
                .is_some_and(|l| l.backlog() > limit)
        };
        // Upward: parent link, or the front-end's own result queues.
        let up_blocked = match self.parent {
            Some(p) => over(Some(p), reactor),
            None => self
                .deliveries
                .streams
                .values()
                .any(|q| q.len() > limit / 1024),
        };
        for c in &self.children {
            reactor.set_paused(c.link, up_blocked);
        }
        // Downward: any child backed up stops reading from the parent.
        if let Some(p) = self.parent {
            let inbox_full = self.deliveries.inbox.len() > limit / 1024;
            let down_blocked =
                inbox_full || self.children.iter().any(|c| over(Some(c.link), reactor));
            reactor.set_paused(p, down_blocked);
        }
    }
}

/// Fault recovery: the orphan's side and the adopter's (see [`crate::recovery`]).
impl Router {
    /// What this orphan asks an ancestor: who it is, what it lost, what it brings.
    pub fn adopt_request(&self) -> Option<AdoptMsg> {
        let o = self.orphan.as_ref()?;
        let mut backends: Vec<u32> = match self.backend_rank {
            Some(r) => vec![r],
            None => self
                .children
                .iter()
                .filter(|c| c.alive)
                .flat_map(|c| c.backends.iter().copied())
                .collect(),
        };
        backends.sort_unstable();
        // Held answers reach the adopter after all, as answers to waves gone by.
        let mut streams: Vec<StreamProgress> = self
            .streams
            .values()
            .map(|st| {
                let mut p = st.progress(self.backend_rank.is_some());
                let held = o.held.iter().filter(|(s, _)| *s == p.stream).count();
                p.answered = p.answered.saturating_sub(held as u64);
                p
            })
            .collect();
        streams.sort_unstable_by_key(|p| p.stream);
        Some(AdoptMsg {
            node: self.node,
            host: self.host.clone(),
            lost_parent: o.lost_parent,
            lost_host: self
                .ancestors
                .first()
                .map(|a| a.host.clone())
                .unwrap_or_default(),
            backends,
            streams,
        })
    }

    /// This orphan was adopted over `link`: faults held meanwhile go up now.
    pub fn adopted(&mut self, link: LinkId, msg: AdoptedMsg, out: &mut dyn Out) {
        let Some(o) = self.orphan.take() else {
            return;
        };
        vlog!(
            self.node,
            "adopted by node {} (orphaned by node {})",
            msg.parent,
            o.lost_parent
        );
        self.parent = Some(link);
        self.parent_node = msg.parent;
        self.ancestors = msg.ancestors;
        for (_, bytes) in o.held {
            out.send(link, bytes);
        }
        for f in o.pending {
            self.report(f, out);
        }
    }

    /// The answer to an orphan: adopted (with where this node sits), or why not.
    pub fn adoption_answer(&self) -> Result<AdoptedMsg, String> {
        if self.shutting_down {
            return Err(format!("node {} is shutting down", self.node));
        }
        if self.orphan.is_some() {
            return Err(format!("node {} is itself orphaned", self.node));
        }
        let Some(me) = &self.listen else {
            return Err(format!("node {} does not adopt orphans", self.node));
        };
        Ok(AdoptedMsg {
            parent: self.node,
            parent_host: self.host.clone(),
            ancestors: std::iter::once(me.clone())
                .chain(self.ancestors.iter().cloned())
                .collect(),
        })
    }

    /// Live children that still claim some of `backends`: an orphan holding them could
    /// not reach us through them, so their path is dead even if their link is not. A
    /// child that holds only some of them is no such path: the orphan is stale (its
    /// children were adopted already), and the answer is why it must be refused.
    pub fn children_claiming(&self, backends: &[u32]) -> Result<Vec<LinkId>, String> {
        let mut out = Vec::new();
        for c in self.children.iter().filter(|c| c.alive) {
            let held = backends
                .iter()
                .filter(|b| c.backends.binary_search(b).is_ok())
                .count();
            if held == backends.len() {
                out.push(c.link);
            } else if held > 0 {
                return Err(format!(
                    "back-ends {} are node {}'s already",
                    crate::fmt_ranks(&c.backends),
                    c.node
                ));
            }
        }
        Ok(out)
    }

    /// Adopts the orphan of `msg` over `link`: it becomes a child of every stream it
    /// has members in, lined up with this node's waves, and the front-end hears who
    /// moved and which waves went without it.
    pub fn adopt(&mut self, link: LinkId, msg: AdoptMsg, now: Instant, out: &mut dyn Out) {
        let mut backends = msg.backends.clone();
        backends.sort_unstable();
        // The dead child that had them: from which wave on it was missing, per stream.
        let mut lost_from: FxHashMap<u32, u64> = FxHashMap::default();
        for c in self.children.iter_mut().filter(|c| !c.alive) {
            if c.backends.iter().any(|b| backends.binary_search(b).is_ok()) {
                for (&s, &w) in &c.lost_from {
                    let e = lost_from.entry(s).or_insert(w);
                    *e = (*e).min(w);
                }
                c.backends.retain(|b| backends.binary_search(b).is_err());
            }
        }
        self.children.push(ChildInfo::new(
            link,
            msg.node,
            msg.host.clone(),
            backends.clone(),
        ));
        let ci = self.children.len() - 1;
        let progress: FxHashMap<u32, StreamProgress> =
            msg.streams.iter().map(|p| (p.stream, *p)).collect();
        let mut ids: Vec<u32> = self.streams.keys().copied().collect();
        ids.sort_unstable();
        let mut lost = Vec::new();
        let mut ready = Vec::new();
        for id in ids {
            let st = self.streams.get_mut(&id).expect("id taken from the map");
            let members: Vec<u32> = backends
                .iter()
                .copied()
                .filter(|b| st.open.members.binary_search(b).is_ok())
                .collect();
            if members.is_empty() {
                continue;
            }
            let p = progress.get(&id).copied();
            if p.is_none() {
                // Opened while it was unreachable.
                let open = frame_bytes(FrameKind::StreamOpen, id, 0, &proto::to_json(&st.open));
                out.send(link, open);
            }
            let (heard, answered) = p.map_or((0, 0), |p| (p.heard, p.answered));
            let (here, released) = (st.heard, st.sync.released());
            let slot = if st.aligned() {
                // Its late answers to what it heard are for waves gone by; it never
                // heard the multicasts since, so it has nothing for waves up to `here`.
                let skip = heard.saturating_sub(answered);
                st.sync.join_child(skip, here.saturating_sub(released), now)
            } else {
                st.sync.join_child(0, 0, now)
            };
            st.child_slots.push((ci, slot));
            st.shifts.insert(ci, here as i64 - heard as i64);
            // Its holes may be all a wave was waiting for (every other child is gone).
            ready.push((id, st.sync.take_ready(now)));
            let first = lost_from.get(&id).copied().unwrap_or(0);
            if st.aligned() && here > first {
                lost.push(FaultMsg::WavesLost {
                    stream: id,
                    first,
                    end: here,
                    backends: members,
                    lost: msg.lost_parent,
                });
            }
        }
        for p in &msg.streams {
            if !self.streams.contains_key(&p.stream) {
                out.send(link, frame_bytes(FrameKind::StreamClose, p.stream, 0, &[]));
            }
        }
        // The waves first: the front-end closes a loss still open for these back-ends
        // with them, and forgets whatever is left open at the adoption.
        for f in lost {
            self.report(f, out);
        }
        self.report(
            FaultMsg::Reparented {
                node: msg.node,
                lost_parent: msg.lost_parent,
                lost_host: msg.lost_host.clone(),
                new_parent: self.node,
                backends,
            },
            out,
        );
        for (id, waves) in ready {
            self.run_waves(id, waves, out);
        }
    }
}
