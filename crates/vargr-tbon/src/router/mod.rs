//! The protocol logic of one tree node: where each frame goes and which filters it meets.
//!
//! The same [`Router`] runs in the front-end (root), in every commnode and in every
//! back-end (leaf). It is a sans-IO state machine with a small event API:
//!
//! - in: a frame ([`Router::on_frame`]), a link closing ([`Router::on_closed`]), a
//!   timer ([`Router::on_timer`] once [`Router::next_deadline`] is due), the periodic
//!   tick ([`Router::on_tick`]), and the local application's commands (open a stream,
//!   send down or up, start the clock exchange or a monitor pull, shut down);
//! - out: frames, through an [`Out`] (the reactor, an outbox when another thread holds
//!   the reactor, or the simulated tree's wires), and what is meant for the local
//!   application (front-end user, back-end user) in its [`Deliveries`].
//!
//! Its state is its own: the driver (the engine, or the simulated tree of the tests)
//! builds it with its place in the tree, then only feeds it events and reads what it
//! reports. The parts by concern:
//!
//! - `streams`: streams, multicasts, waves through the sync and transformation filters,
//!   point-to-point routing;
//! - `faults`: fault reports on their way to the front-end, links that close;
//! - `adoption`: fault recovery (see [`crate::recovery`]): a node whose parent died
//!   becomes an orphan ([`Router::parent_lost`]) and keeps serving its children; an
//!   ancestor adopts orphans ([`Router::adopt`]) and lines their waves up with its own;
//! - `flow`: heartbeats, backpressure and shutdown;
//! - the clock-skew exchange ([`crate::clock::ClockState`]) and the monitor plane
//!   ([`crate::monitor::MonitorState`]): sub-states the router owns and hands each of
//!   their frames, with the node's [`Place`].
//!
//! The router also records the tree's link and filter events (see [`crate::trace`]).

mod adoption;
mod faults;
mod flow;
mod observe;
mod streams;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use vargr_filter::Registry;
use vargr_net::LinkId;
use vargr_trace::{Alignment, NO_PEER};
use vargr_wire::{Frame, FrameKind, Packet};

use crate::clock::{ClockFn, ClockMsgError, ClockState};
use crate::monitor::{MonitorState, Pulled};
use crate::node::{ChildInfo, Place};
use crate::out::{frame_bytes, Out};
use crate::proto::{self, Ancestor, FaultMsg, StreamOpenMsg};
use crate::recovery::{Orphan, Recovery, TreeEvent};
use crate::{trace, TbonError};

use observe::ObserveState;
pub use observe::Observed;
use streams::StreamState;

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
    /// Answers to the local application's observe requests, oldest first.
    pub observed: Vec<Observed>,
}

/// One node's protocol state: built with its place in the tree, then driven by events
/// (see the module docs).
pub struct Router {
    node: u32,
    host: String,
    /// Back-end rank when this node is a leaf.
    backend_rank: Option<u32>,
    parent: Option<LinkId>,
    /// Node id of the parent (trace records name it), or [`NO_PEER`] at the root.
    parent_node: u32,
    children: Vec<ChildInfo>,
    streams: FxHashMap<u32, StreamState>,
    registry: Arc<Registry>,
    deliveries: Deliveries,
    shutting_down: bool,
    heartbeat: Duration,
    heartbeat_timeout: Duration,
    clock: ClockState,
    /// The monitor plane: pulls in progress, this node's reducer.
    monitor: MonitorState,
    recovery: Recovery,
    /// Where this node's ancestors accept orphans, its parent first.
    ancestors: Vec<Ancestor>,
    /// Where this node accepts orphans (internal nodes with recovery on).
    listen: Option<Ancestor>,
    /// Set while the parent is dead and an adoption is being sought.
    orphan: Option<Orphan>,
    /// Front-end: per (stream, back-end), the first wave (and the node that died) of a
    /// loss not yet closed by an adoption.
    open_losses: FxHashMap<(u32, u32), (u64, u32)>,
    /// Observed elements: each one's cached newest value and who waits for a newer one.
    observe: ObserveState,
}

/// The `end` of a [`FaultMsg::WavesLost`] whose back-ends have not come back yet.
pub const OPEN: u64 = u64::MAX;

/// Building a router: a node starts as a root without children; its driver gives it its
/// place in the tree before the first event.
impl Router {
    pub fn new(
        node: u32,
        host: String,
        backend_rank: Option<u32>,
        registry: Arc<Registry>,
    ) -> Router {
        Router {
            node,
            host,
            backend_rank,
            parent: None,
            parent_node: NO_PEER,
            children: Vec::new(),
            streams: FxHashMap::default(),
            registry,
            deliveries: Deliveries::default(),
            shutting_down: false,
            heartbeat: Duration::from_millis(500),
            heartbeat_timeout: Duration::from_millis(1500),
            clock: ClockState::default(),
            monitor: MonitorState::default(),
            recovery: Recovery::Off,
            ancestors: Vec::new(),
            listen: None,
            orphan: None,
            open_losses: FxHashMap::default(),
            observe: ObserveState::default(),
        }
    }

    /// The link to the parent and the parent's node id.
    pub fn with_parent(mut self, link: LinkId, node: u32) -> Router {
        self.parent = Some(link);
        self.parent_node = node;
        self
    }

    pub fn with_children(mut self, children: Vec<ChildInfo>) -> Router {
        self.children = children;
        self
    }

    /// How often idle links carry a heartbeat, and how long a silent link lives.
    pub fn with_heartbeat(mut self, period: Duration, timeout: Duration) -> Router {
        self.heartbeat = period;
        self.heartbeat_timeout = timeout;
        self
    }

    /// The recovery policy, this node's ancestors (parent first) and, for a node that
    /// adopts orphans, where it listens.
    pub fn with_recovery(
        mut self,
        recovery: Recovery,
        ancestors: Vec<Ancestor>,
        listen: Option<Ancestor>,
    ) -> Router {
        self.recovery = recovery;
        self.ancestors = ancestors;
        self.listen = listen;
        self
    }

    /// Test-only: this node's entry of `offsets` (ns, by node id) is added to the clock
    /// the skew exchange reads (see [`crate::NetworkOptions::clock_offsets_ns`]).
    pub fn with_clock_offset(self, offsets: &std::collections::BTreeMap<u32, i64>) -> Router {
        match offsets.get(&self.node).copied().filter(|o| *o != 0) {
            Some(off) => {
                let read: ClockFn =
                    Arc::new(move || vargr_trace::clock::trace_ns().saturating_add_signed(off));
                self.with_clock(read, std::process::id(), !crate::trace::in_process())
            }
            None => self,
        }
    }

    /// The clock the skew exchange reads, and the process it counts as this node's
    /// (see [`ClockState::new`]); by default the trace clock and this process.
    pub fn with_clock(mut self, read_ns: ClockFn, pid: u32, adopt_alignment: bool) -> Router {
        self.clock = ClockState::new(read_ns, pid, adopt_alignment);
        self
    }
}

/// What the driver may read of a router.
impl Router {
    pub fn node(&self) -> u32 {
        self.node
    }

    /// The back-end rank, when this node is a leaf.
    pub fn backend_rank(&self) -> Option<u32> {
        self.backend_rank
    }

    pub fn is_root(&self) -> bool {
        self.parent.is_none() && self.orphan.is_none()
    }

    /// Set while the parent is dead and an adoption is being sought.
    pub fn is_orphan(&self) -> bool {
        self.orphan.is_some()
    }

    /// Every link with the node at its other end: the parent's first, then the
    /// children's.
    pub fn neighbours(&self) -> impl Iterator<Item = (LinkId, u32)> + '_ {
        self.parent
            .map(|p| (p, self.parent_node))
            .into_iter()
            .chain(self.children.iter().map(|c| (c.link, c.node)))
    }

    /// The period of [`Router::on_tick`]: twice per heartbeat.
    pub fn tick_period(&self) -> Duration {
        self.heartbeat / 2
    }

    pub fn deliveries(&self) -> &Deliveries {
        &self.deliveries
    }

    /// How stream `id` was opened (with its current filters), if it is open here.
    pub fn stream_open(&self, id: u32) -> Option<&StreamOpenMsg> {
        self.streams.get(&id).map(|st| &st.open)
    }

    /// The local application takes what was delivered from here.
    pub fn deliveries_mut(&mut self) -> &mut Deliveries {
        &mut self.deliveries
    }

    /// Ends deliveries with `why`, unless they ended already.
    pub fn close(&mut self, why: TbonError) {
        self.deliveries.closed.get_or_insert(why);
    }

    pub fn is_closed(&self) -> bool {
        self.deliveries.closed.is_some()
    }

    fn child_index(&self, link: LinkId) -> Option<usize> {
        // Link ids are reused: a dead child's may now be an adopted one's.
        self.children.iter().position(|c| c.alive && c.link == link)
    }

    /// This node's place, and the sub-states that act on it.
    fn parts(&mut self) -> (Place<'_>, &mut ClockState, &mut MonitorState) {
        let place = Place {
            node: self.node,
            host: &self.host,
            parent: self.parent,
            is_root: self.parent.is_none() && self.orphan.is_none(),
            children: &self.children,
        };
        (place, &mut self.clock, &mut self.monitor)
    }
}

/// Events in.
impl Router {
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
            FrameKind::ObserveReq => {
                if let Some(ci) = child {
                    self.on_observe_req(ci, &f, out)
                }
            }
            FrameKind::ObserveVal if from_parent => self.on_observe_val(f, out),
            FrameKind::ObservePublish if child.is_some() => self.on_observe_publish(f, out),
            FrameKind::Heartbeat => {}
            FrameKind::ClockPing
            | FrameKind::ClockPong
            | FrameKind::ClockSet
            | FrameKind::ClockReport => self.on_clock_frame(from_parent, child, &f, out),
            FrameKind::MonitorPull if from_parent => {
                let (at, _, monitor) = self.parts();
                monitor.on_pull(&f, now, at, out)
            }
            FrameKind::MonitorData => {
                if let Some(ci) = child {
                    let (at, _, monitor) = self.parts();
                    monitor.on_data(ci, &f, at, out)
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

    /// Releases waves whose time-out expired, and gives up on sub-trees late for a pull.
    pub fn on_timer(&mut self, now: Instant, out: &mut dyn Out) {
        self.streams_timer(now, out);
        self.observe_timer(now);
        let (at, _, monitor) = self.parts();
        monitor.on_timer(now, at, out);
    }

    /// The earliest time a sync filter, a monitor pull or an observe request needs [`Router::on_timer`].
    pub fn next_deadline(&self) -> Option<Instant> {
        self.streams_deadline()
            .into_iter()
            .chain(self.monitor.deadline())
            .chain(self.observe_deadline())
            .min()
    }
}

/// The clock-skew exchange (see [`crate::clock`]), run by [`ClockState`].
impl Router {
    /// Front-end: starts estimation from the root's own clock.
    pub fn start_clock(&mut self, out: &mut dyn Out) {
        let (at, clock, _) = self.parts();
        clock.start(at, out);
    }

    /// This node's alignment, once its parent sent it (always, at the front-end).
    pub fn alignment(&self) -> Option<Alignment> {
        self.clock.own()
    }

    /// Front-end: the alignment of every node reported so far, its own included.
    pub fn clock_reports(&self) -> &BTreeMap<u32, Alignment> {
        self.clock.reports()
    }

    /// True once every live child's edge is measured (and its alignment sent).
    pub fn clock_edges_done(&self) -> bool {
        self.clock.edges_done(&self.children)
    }

    fn on_clock_frame(
        &mut self,
        from_parent: bool,
        child: Option<usize>,
        f: &Frame,
        out: &mut dyn Out,
    ) {
        let (at, clock, _) = self.parts();
        let r = match (f.kind, child) {
            (FrameKind::ClockPing, _) if from_parent => clock.on_ping(f, at, out),
            (FrameKind::ClockPong, Some(ci)) => clock.on_pong(ci, f, at, out),
            (FrameKind::ClockSet, _) if from_parent => clock.on_set(f, at, out),
            (FrameKind::ClockReport, Some(_)) => clock.on_report(f, at, out),
            _ => Ok(()),
        };
        if let Err(e) = r {
            self.clock_fault(e);
        }
    }

    /// A malformed clock frame: the front-end lists it among its faults; elsewhere it
    /// is logged (a back-end's application should not see it as a receive error).
    fn clock_fault(&mut self, e: ClockMsgError) {
        tracing::debug!(node = self.node, "{e}");
        if self.is_root() {
            self.deliveries.faults.push(TbonError::Clock(e));
        }
    }
}

/// The monitor plane (see [`crate::monitor`]), run by [`MonitorState`].
impl Router {
    /// Front-end: starts a pull of `scope` with `budget` for the whole tree; the result
    /// is [`Router::take_pull`] under the returned id.
    pub fn start_pull(
        &mut self,
        scope: vargr_trace::scope::Scope,
        budget: Duration,
        now: Instant,
        out: &mut dyn Out,
    ) -> u32 {
        let (at, _, monitor) = self.parts();
        monitor.start_pull(scope, budget, now, at, out)
    }

    /// A finished pull, once.
    pub fn take_pull(&mut self, id: u32) -> Option<Pulled> {
        self.monitor.take_done(id)
    }
}
