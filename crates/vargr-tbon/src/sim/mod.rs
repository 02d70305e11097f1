//! A simulated tree: many routers wired together in memory on a fake clock, so that
//! whole-tree behaviour (waves, filters, faults, recovery, backpressure, clock
//! alignment, the monitor plane) is tested without processes or sockets, in
//! milliseconds and without a single timing assertion.
//!
//! The harness plays the engine's part for every node: it feeds each router the frames
//! that reach it, its timers and its ticks, applies its backpressure after every event
//! as the engine does after every poll, and carries what it sends over wires.
//!
//! - Time is fake: an [`Instant`] base plus an offset that only the harness moves.
//!   [`Sim::settle`] runs every frame and timer in time order until nothing is left;
//!   [`Sim::advance`] also runs the periodic ticks (heartbeats, silence) up to a time.
//! - A wire is one direction of a link: a FIFO of frames, each due [`SimConfig::latency`]
//!   after it was sent. A frame is delivered when due, unless the wire is blocked (a
//!   slow or stuck link, [`Sim::block`]) or the receiver paused reading it
//!   (backpressure). Every frame not yet delivered counts as the sending link's
//!   backlog; a delivery lets the sender look at its backpressure again, as a link
//!   turning writable wakes its engine. A latest-mode frame replaces an undelivered one
//!   with the same key; the monitor's low lane is plain FIFO here.
//! - A stopped node ([`Sim::stop`], as by SIGSTOP) keeps its links: frames reaching it
//!   vanish into its socket buffers, and it neither reads, sends nor times out.
//! - Each node's skew-exchange clock is the fake time plus its own skew
//!   ([`Sim::skew`]), so alignment estimates can be checked against the truth.
//! - A node that dies ([`Sim::kill`]) loses every wire, frames on them included; its
//!   neighbours see their links close when the test says so ([`Sim::lose`]), in the
//!   order it chooses, or all at once ([`Sim::crash`]).
//!
//! Links are numbered as a real node numbers them: a node's link to its parent is
//! `LinkId(0)`, its children's follow (from 0 at the root), and links added later
//! (adoptions) take the next free number.

mod clock;
mod faults;
mod flow;
mod monitor;
mod observe;
mod recovery;
mod waves;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustc_hash::FxHashMap;
use vargr_filter::Registry;
use vargr_net::LinkId;
use vargr_wire::{decode_exact, FrameKind, Packet};

use crate::node::ChildInfo;
use crate::out::{Lane, LinkActivity, Links, Out};
use crate::proto::{Ancestor, StreamOpenMsg};
use crate::recovery::Recovery;
use crate::router::Router;
use crate::TbonError;

/// Where the fake clocks start, in ns: far enough from zero for any negative skew.
const CLOCK_START_NS: u64 = 1 << 40;
/// More events than this in one run means the tree never settles.
const MAX_EVENTS: usize = 10_000_000;

/// How the simulated tree is set up.
#[derive(Clone)]
pub struct SimConfig {
    pub recovery: Recovery,
    pub heartbeat: Duration,
    pub heartbeat_timeout: Duration,
    /// Every node's queue limit (see [`Router::apply_backpressure`]).
    pub queue_limit: usize,
    /// How long a frame takes over a wire (see [`Sim::latency`] for one wire).
    pub latency: Duration,
    /// Every node a thread of one process on one host (the thread launcher): they share
    /// a pid and a host, so clock edges are exact.
    pub one_process: bool,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            recovery: Recovery::Ancestor,
            heartbeat: Duration::from_millis(500),
            heartbeat_timeout: Duration::from_millis(1500),
            queue_limit: 8 << 20,
            latency: Duration::from_micros(10),
            one_process: false,
        }
    }
}

struct Queued {
    due: Instant,
    /// Sending order, to break ties between wires.
    seq: u64,
    lane: Lane,
    bytes: Bytes,
}

/// One direction of a link.
struct Wire {
    to: u32,
    at: LinkId,
    queue: VecDeque<Queued>,
    blocked: bool,
    latency: Duration,
}

/// A node's end of one link, as its reactor would keep it.
struct End {
    paused: bool,
    last_read: Instant,
    last_write: Instant,
}

struct SimNode {
    router: Router,
    ends: FxHashMap<LinkId, End>,
    next_link: usize,
    next_tick: Instant,
    dead: bool,
    /// Stopped (as by SIGSTOP): frames reaching it vanish into its socket buffers, and
    /// it neither sends nor runs timers.
    stopped: bool,
    skew_ns: Arc<AtomicI64>,
}

/// The wires, keyed by their sending end.
type Wires = FxHashMap<(u32, LinkId), Wire>;

/// One node's view of the wires while it handles an event: its [`Out`] and [`Links`].
pub struct NodeLinks<'a> {
    me: u32,
    wires: &'a mut Wires,
    ends: &'a mut FxHashMap<LinkId, End>,
    now: Instant,
    seq: &'a mut u64,
}

impl NodeLinks<'_> {
    fn push(&mut self, link: LinkId, lane: Lane, bytes: Bytes) {
        let Some(w) = self.wires.get_mut(&(self.me, link)) else {
            return; // a cut link: the frame is lost
        };
        if let Some(e) = self.ends.get_mut(&link) {
            e.last_write = self.now;
        }
        if let Lane::Latest(_) = lane {
            if let Some(q) = w.queue.iter_mut().find(|q| q.lane == lane) {
                q.bytes = bytes;
                return;
            }
        }
        *self.seq += 1;
        w.queue.push_back(Queued {
            due: self.now + w.latency,
            seq: *self.seq,
            lane,
            bytes,
        });
    }
}

impl Out for NodeLinks<'_> {
    fn send(&mut self, link: LinkId, bytes: Bytes) {
        self.push(link, Lane::Normal, bytes)
    }
    fn send_latest(&mut self, link: LinkId, key: u64, bytes: Bytes) {
        self.push(link, Lane::Latest(key), bytes)
    }
    fn send_low(&mut self, link: LinkId, bytes: Bytes) {
        self.push(link, Lane::Low, bytes)
    }
}

impl Links for NodeLinks<'_> {
    fn activity(&self, link: LinkId) -> Option<LinkActivity> {
        let w = self.wires.get(&(self.me, link))?;
        let e = self.ends.get(&link)?;
        Some(LinkActivity {
            backlog: w.queue.iter().map(|q| q.bytes.len()).sum(),
            paused: e.paused,
            last_read: e.last_read,
            last_write: e.last_write,
        })
    }
    fn set_paused(&mut self, link: LinkId, paused: bool) {
        if let Some(e) = self.ends.get_mut(&link) {
            e.paused = paused;
        }
    }
    fn restart_silence(&mut self, link: LinkId, now: Instant) {
        if let Some(e) = self.ends.get_mut(&link) {
            e.last_read = now;
        }
    }
}

/// What happens next in the simulated world.
enum Next {
    Frame(u32, LinkId),
    Timer(u32),
    Tick(u32),
}

/// Routers indexed by node id, the wires between them, and the fake clock.
pub struct Sim {
    nodes: Vec<SimNode>,
    wires: Wires,
    /// The most recent link between two nodes, from the first one's side.
    links: FxHashMap<(u32, u32), LinkId>,
    cfg: SimConfig,
    base: Instant,
    now: Instant,
    /// Fake time since `base` in ns, for the nodes' skewed clocks.
    elapsed_ns: Arc<AtomicU64>,
    seq: u64,
    /// Frames and bytes delivered, by sending node, receiving node and kind.
    carried: FxHashMap<(u32, u32, FrameKind), (u64, u64)>,
}

fn ancestor(node: u32) -> Ancestor {
    Ancestor {
        node,
        host: format!("h{node}"),
        addr: format!("unix:/n{node}.sock"),
    }
}

/// Building a tree.
impl Sim {
    /// The tree of a topology spec (`"1x2x4"`, `"kary:4@16"`…), node ids as there.
    pub fn topology(spec: &str, cfg: SimConfig) -> Sim {
        let topo = vargr_topo::Topology::generate(spec).expect("a valid topology spec");
        let rows: Vec<(u32, u32, Option<u32>)> = topo
            .nodes()
            .map(|n| (n.id, n.parent.unwrap_or(0), n.backend_rank))
            .collect();
        Sim::rows(&rows, cfg)
    }

    /// A tree from `(node, parent, rank)` rows: node ids 0..n in order, 0 the root (its
    /// parent column is ignored), children in row order. Every internal node adopts
    /// orphans.
    pub fn rows(rows: &[(u32, u32, Option<u32>)], cfg: SimConfig) -> Sim {
        for (i, &(id, parent, _)) in rows.iter().enumerate() {
            assert_eq!(id as usize, i, "rows in node id order");
            assert!(id == 0 || parent < id, "parents before children");
        }
        let base = Instant::now();
        let mut sim = Sim {
            nodes: Vec::new(),
            wires: Wires::default(),
            links: FxHashMap::default(),
            cfg,
            base,
            now: base,
            elapsed_ns: Arc::default(),
            seq: 0,
            carried: FxHashMap::default(),
        };
        let registry = Arc::new(Registry::with_builtins());
        let mut children: Vec<Vec<ChildInfo>> = rows.iter().map(|_| Vec::new()).collect();
        for &(id, parent, _) in &rows[1..] {
            let p = parent as usize;
            let link = LinkId(children[p].len() + usize::from(p != 0));
            let host = match sim.cfg.one_process {
                true => "localhost".to_string(),
                false => format!("h{id}"),
            };
            children[p].push(ChildInfo::new(link, id, host, below(rows, id)));
        }
        for (&(id, parent, rank), children) in rows.iter().zip(children) {
            let skew_ns = Arc::new(AtomicI64::new(0));
            let node = (id, parent, rank);
            let router = sim.new_router(node, rows, children, &registry, &skew_ns);
            let next_link = router.neighbours().map(|(l, _)| l.0 + 1).max().unwrap_or(0);
            sim.nodes.push(SimNode {
                router,
                ends: FxHashMap::default(),
                next_link,
                next_tick: base,
                dead: false,
                stopped: false,
                skew_ns,
            });
        }
        for &(id, parent, _) in &rows[1..] {
            let down = sim.nodes[parent as usize]
                .router
                .neighbours()
                .find(|&(_, n)| n == id)
                .expect("the parent knows its child")
                .0;
            sim.wire(parent, down, id, LinkId(0));
        }
        sim
    }

    /// Node `(id, parent, rank)` of the tree of `rows`, on the fake clock plus `skew_ns`.
    fn new_router(
        &self,
        (id, parent, rank): (u32, u32, Option<u32>),
        rows: &[(u32, u32, Option<u32>)],
        children: Vec<ChildInfo>,
        registry: &Arc<Registry>,
        skew_ns: &Arc<AtomicI64>,
    ) -> Router {
        let (elapsed, skew) = (self.elapsed_ns.clone(), skew_ns.clone());
        let clock = Arc::new(move || {
            let t = CLOCK_START_NS + elapsed.load(Ordering::Relaxed);
            t.saturating_add_signed(skew.load(Ordering::Relaxed))
        });
        // Parent first, up to the root.
        let mut ancestors = Vec::new();
        let mut a = (id != 0).then_some(parent);
        while let Some(n) = a {
            ancestors.push(ancestor(n));
            a = (n != 0).then(|| rows[n as usize].1);
        }
        let listen = (!children.is_empty()).then(|| ancestor(id));
        let (host, pid) = match self.cfg.one_process {
            true => ("localhost".to_string(), 1000),
            false => (format!("h{id}"), 1000 + id),
        };
        let mut r = Router::new(id, host, rank, registry.clone())
            .with_children(children)
            .with_heartbeat(self.cfg.heartbeat, self.cfg.heartbeat_timeout)
            .with_recovery(self.cfg.recovery, ancestors, listen)
            .with_clock(clock, pid, false);
        if id != 0 {
            r = r.with_parent(LinkId(0), parent);
        }
        r
    }

    /// Connects `a`'s link `la` with `b`'s link `lb`.
    fn wire(&mut self, a: u32, la: LinkId, b: u32, lb: LinkId) {
        let now = self.now;
        for (from, l, to, at) in [(a, la, b, lb), (b, lb, a, la)] {
            self.wires.insert(
                (from, l),
                Wire {
                    to,
                    at,
                    queue: VecDeque::new(),
                    blocked: false,
                    latency: self.cfg.latency,
                },
            );
            self.nodes[from as usize].ends.insert(
                l,
                End {
                    paused: false,
                    last_read: now,
                    last_write: now,
                },
            );
            self.links.insert((from, to), l);
        }
    }
}

/// The back-end ranks in node `n`'s sub-tree.
fn below(rows: &[(u32, u32, Option<u32>)], n: u32) -> Vec<u32> {
    let mut v: Vec<u32> = rows
        .iter()
        .filter(|&&(id, _, r)| {
            let mut a = id;
            while a != 0 && a != n {
                a = rows[a as usize].1;
            }
            a == n && r.is_some()
        })
        .filter_map(|&(_, _, r)| r)
        .collect();
    v.sort_unstable();
    v
}

/// Looking at nodes and acting on them.
impl Sim {
    pub fn router(&self, n: u32) -> &Router {
        &self.nodes[n as usize].router
    }

    pub fn now(&self) -> Instant {
        self.now
    }

    /// Runs a command on node `n` (as its application would), then its backpressure.
    pub fn on<R>(&mut self, n: u32, f: impl FnOnce(&mut Router, &mut NodeLinks<'_>) -> R) -> R {
        let now = self.now;
        let node = &mut self.nodes[n as usize];
        assert!(!node.dead, "node {n} is dead");
        let mut links = NodeLinks {
            me: n,
            wires: &mut self.wires,
            ends: &mut node.ends,
            now,
            seq: &mut self.seq,
        };
        let r = f(&mut node.router, &mut links);
        node.router
            .apply_backpressure(&mut links, self.cfg.queue_limit);
        r
    }

    /// The back-end ranks of the tree's nodes, by node id.
    pub fn backends(&self) -> Vec<u32> {
        (0..self.nodes.len() as u32)
            .filter(|&n| self.router(n).backend_rank().is_some())
            .collect()
    }

    /// Frames of `kind` delivered from node `from` to node `to` so far, and their bytes.
    pub fn carried(&self, from: u32, to: u32, kind: FrameKind) -> (u64, u64) {
        self.carried
            .get(&(from, to, kind))
            .copied()
            .unwrap_or_default()
    }

    /// Node `n`'s link to `peer` (the most recent one, dead or alive).
    pub fn link(&self, n: u32, peer: u32) -> LinkId {
        self.links[&(n, peer)]
    }

    /// Gives node `n`'s skew-exchange clock `skew_ns` on the fake time.
    pub fn skew(&mut self, n: u32, skew_ns: i64) {
        self.nodes[n as usize]
            .skew_ns
            .store(skew_ns, Ordering::Relaxed);
    }

    /// Blocks (or unblocks) the wire from `from` to `to`: frames wait on it, as on a
    /// link whose receiver stopped reading.
    pub fn block(&mut self, from: u32, to: u32, blocked: bool) {
        let l = self.link(from, to);
        if let Some(w) = self.wires.get_mut(&(from, l)) {
            w.blocked = blocked;
        }
    }

    /// Frames from `from` to `to` take `latency` from now on.
    pub fn latency(&mut self, from: u32, to: u32, latency: Duration) {
        let l = self.link(from, to);
        if let Some(w) = self.wires.get_mut(&(from, l)) {
            w.latency = latency;
        }
    }

    /// Node `n` stops (as by SIGSTOP): its links stay up, but it reads, sends and
    /// times out nothing.
    pub fn stop(&mut self, n: u32) {
        self.nodes[n as usize].stopped = true;
    }

    /// Node `n` handles frame `f` as if it came from `peer` (a damaged frame, say).
    pub fn inject(&mut self, n: u32, peer: u32, f: vargr_wire::Frame) {
        let (l, now) = (self.link(n, peer), self.now);
        self.on(n, |r, out| r.on_frame(l, f, now, out));
    }

    /// Bytes waiting on the wire from `from` to `to`.
    pub fn backlog(&self, from: u32, to: u32) -> usize {
        let l = self.link(from, to);
        self.wires
            .get(&(from, l))
            .map_or(0, |w| w.queue.iter().map(|q| q.bytes.len()).sum())
    }

    /// Whether node `n` has paused reading its link to `peer`.
    pub fn paused(&self, n: u32, peer: u32) -> bool {
        let l = self.link(n, peer);
        self.nodes[n as usize]
            .ends
            .get(&l)
            .is_some_and(|e| e.paused)
    }

    /// Node `n` dies: every wire to it is cut, frames on the way are lost.
    pub fn kill(&mut self, n: u32) {
        self.nodes[n as usize].dead = true;
        self.wires.retain(|&(a, _), w| a != n && w.to != n);
    }

    /// Node `n` sees its link to `peer` close.
    pub fn lose(&mut self, n: u32, peer: u32) {
        let l = self.link(n, peer);
        self.cut(n, l);
        let now = self.now;
        self.on(n, |r, out| r.on_closed(l, "killed".into(), now, out));
    }

    /// Node `n` dies and every live node linked to it sees the link close, lowest id
    /// first.
    pub fn crash(&mut self, n: u32) {
        let mut peers: Vec<u32> = self
            .wires
            .iter()
            .filter(|(_, w)| w.to == n)
            .map(|(&(a, _), _)| a)
            .collect();
        peers.sort_unstable();
        self.kill(n);
        for p in peers {
            self.lose(p, n);
        }
    }

    /// Removes both directions of node `n`'s link `l`, as closing a socket does.
    fn cut(&mut self, n: u32, l: LinkId) {
        if let Some(w) = self.wires.remove(&(n, l)) {
            self.wires.remove(&(w.to, w.at));
        }
    }

    /// Orphan `n` asks node `by` for adoption, over a new link; both ends act as their
    /// engines do (see `engine::accept_orphans`).
    pub fn adopt_by(&mut self, by: u32, n: u32) -> Result<(), String> {
        let msg = self.router(n).adopt_request().expect("an orphan");
        let reply = self.router(by).adoption_answer()?;
        let claiming = self.router(by).children_claiming(&msg.backends)?;
        let now = self.now;
        for l in claiming {
            self.cut(by, l);
            self.on(by, |r, out| r.on_closed(l, "unreachable".into(), now, out));
        }
        let by_link = self.new_link(by);
        let own_link = self.new_link(n);
        self.wire(by, by_link, n, own_link);
        self.on(by, |r, out| r.adopt(by_link, msg, now, out));
        self.on(n, |r, out| r.adopted(own_link, reply, out));
        self.settle();
        Ok(())
    }

    fn new_link(&mut self, n: u32) -> LinkId {
        let node = &mut self.nodes[n as usize];
        node.next_link += 1;
        LinkId(node.next_link - 1)
    }
}

/// Letting time pass.
impl Sim {
    /// Runs frames and timers in time order, moving the fake clock on, until none is
    /// left. Ticks do not run: a settled tree is one where nothing more would happen
    /// without them.
    pub fn settle(&mut self) {
        self.run(None)
    }

    /// Runs frames, timers and ticks in time order for `dt` of fake time.
    pub fn advance(&mut self, dt: Duration) {
        self.run(Some(self.now + dt))
    }

    fn run(&mut self, until: Option<Instant>) {
        let mut events = 0;
        while let Some((at, next)) = self.next_event(until.is_some()) {
            if until.is_some_and(|u| at > u) {
                break;
            }
            events += 1;
            assert!(events < MAX_EVENTS, "the simulated tree never settles");
            self.set_now(at.max(self.now));
            match next {
                Next::Frame(from, link) => self.deliver(from, link),
                Next::Timer(n) => {
                    let now = self.now;
                    self.on(n, |r, out| r.on_timer(now, out));
                }
                Next::Tick(n) => self.tick(n),
            }
        }
        if let Some(u) = until {
            self.set_now(u.max(self.now));
        }
    }

    fn set_now(&mut self, now: Instant) {
        self.now = now;
        let ns = now.duration_since(self.base).as_nanos() as u64;
        self.elapsed_ns.store(ns, Ordering::Relaxed);
    }

    /// The earliest thing due: a frame that may be delivered, a timer, or (`ticks`) a
    /// tick.
    fn next_event(&self, ticks: bool) -> Option<(Instant, Next)> {
        let mut best: Option<(Instant, u64, Next)> = None;
        let mut offer = |at: Instant, seq: u64, next: Next| {
            if best.as_ref().is_none_or(|(t, s, _)| (at, seq) < (*t, *s)) {
                best = Some((at, seq, next));
            }
        };
        for (&(from, link), w) in &self.wires {
            let Some(q) = w.queue.front() else { continue };
            let to = &self.nodes[w.to as usize];
            // A stopped node's socket buffers take frames in whether it reads or not.
            let paused = to.ends.get(&w.at).is_some_and(|e| e.paused) && !to.stopped;
            if !w.blocked && !paused && !to.dead {
                offer(q.due, q.seq, Next::Frame(from, link));
            }
        }
        for (n, node) in self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.dead && !s.stopped)
        {
            if let Some(t) = node.router.next_deadline() {
                offer(t, 0, Next::Timer(n as u32));
            }
            if ticks {
                offer(node.next_tick, 0, Next::Tick(n as u32));
            }
        }
        best.map(|(at, _, next)| (at, next))
    }

    fn deliver(&mut self, from: u32, link: LinkId) {
        let w = self.wires.get_mut(&(from, link)).expect("a live wire");
        let q = w.queue.pop_front().expect("a queued frame");
        let (to, at) = (w.to, w.at);
        if self.nodes[to as usize].stopped {
            return;
        }
        let f = decode_exact(&q.bytes, 1 << 30).expect("routers send whole frames");
        let tally = self.carried.entry((from, to, f.kind)).or_default();
        tally.0 += 1;
        tally.1 += q.bytes.len() as u64;
        let now = self.now;
        if let Some(e) = self.nodes[to as usize].ends.get_mut(&at) {
            e.last_read = now;
        }
        self.on(to, |r, out| r.on_frame(at, f, now, out));
        // The sender's queue shrank: its engine would poll (the link turned writable)
        // and look at its backpressure again.
        if !self.nodes[from as usize].dead && !self.nodes[from as usize].stopped {
            self.on(from, |_, _| ());
        }
    }

    /// The periodic tick, as the engine runs it: heartbeats, and links silent too long
    /// closed at both ends.
    fn tick(&mut self, n: u32) {
        let now = self.now;
        let dead = self.on(n, |r, links| r.on_tick(now, links));
        for (l, reason) in dead {
            let peer = self.wires.get(&(n, l)).map(|w| (w.to, w.at));
            self.cut(n, l);
            self.on(n, |r, out| r.on_closed(l, reason, now, out));
            let lives = |p: u32| !self.nodes[p as usize].dead && !self.nodes[p as usize].stopped;
            if let Some((p, pl)) = peer.filter(|&(p, _)| lives(p)) {
                self.on(p, |r, out| {
                    r.on_closed(pl, "connection closed".into(), now, out)
                });
            }
        }
        let node = &mut self.nodes[n as usize];
        node.next_tick = now + node.router.tick_period();
    }
}

/// The front-end and back-ends, as their applications use them.
impl Sim {
    /// Opens a stream at the front-end and lets its creation reach the tree.
    pub fn open(
        &mut self,
        id: u32,
        members: Vec<u32>,
        up: &str,
        sync: &str,
    ) -> Result<(), TbonError> {
        self.open_msg(StreamOpenMsg {
            id,
            members,
            up: up.into(),
            sync: sync.into(),
            down: None,
            latest: false,
            update: false,
            up_backend: None,
            up_frontend: None,
            per_node: Vec::new(),
            wave_deadline_ms: None,
        })
    }

    /// [`Sim::open`] with every option of the message.
    pub fn open_msg(&mut self, msg: StreamOpenMsg) -> Result<(), TbonError> {
        self.on(0, |r, out| r.open_stream(msg, out))?;
        self.settle();
        Ok(())
    }

    /// The back-ends neither dead nor stopped, by node id.
    pub fn live_backends(&self) -> Vec<u32> {
        self.backends()
            .into_iter()
            .filter(|&n| !self.nodes[n as usize].dead && !self.nodes[n as usize].stopped)
            .collect()
    }

    /// Every back-end's rank, sorted.
    pub fn ranks(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .backends()
            .into_iter()
            .filter_map(|n| self.router(n).backend_rank())
            .collect();
        v.sort_unstable();
        v
    }

    /// The front-end multicasts `p` and the tree settles.
    pub fn multicast(&mut self, p: Packet) {
        self.on(0, |r, out| r.send_down(p, out)).expect("a stream");
        self.settle();
    }

    /// Back-end node `n` answers up to `max` of the packets it has received, each with
    /// `answer(rank, packet)`, and the tree settles.
    pub fn answer(&mut self, n: u32, max: usize, answer: impl Fn(u32, &Packet) -> Packet) {
        self.reply(n, max, answer);
        self.settle();
    }

    /// Like [`Sim::answer`], without letting time pass: the answers are on their way.
    pub fn reply(&mut self, n: u32, max: usize, answer: impl Fn(u32, &Packet) -> Packet) {
        for _ in 0..max {
            let Some(p) = self.nodes[n as usize]
                .router
                .deliveries_mut()
                .inbox
                .pop_front()
            else {
                break;
            };
            let rank = self.router(n).backend_rank().expect("a back-end");
            let mut a = answer(rank, &p);
            a.source = rank;
            self.on(n, |r, out| r.send_up(&a, out)).expect("sent up");
        }
    }

    /// What back-end `n` received so far, taken (as its user's receives would).
    pub fn take_inbox(&mut self, n: u32) -> Vec<Packet> {
        self.on(n, |r, _| r.deliveries_mut().inbox.drain(..).collect())
    }

    /// The front-end's results on `stream` so far, taken.
    pub fn results(&mut self, stream: u32) -> Vec<Result<Packet, TbonError>> {
        let r = self.on(0, |r, _| {
            let q = r.deliveries_mut().streams.entry(stream).or_default();
            q.drain(..).collect()
        });
        r
    }
}
