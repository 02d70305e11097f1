//! The monitor plane (EventSpace's event scopes, seed 004): monitors *pull* records from
//! every process's collectors, so a monitor may run slower than the events it reads and
//! the application never waits for it.
//!
//! Each process runs one agent thread at the lowest CPU priority. The monitor, a thread
//! in rank 0's process, opens a listener and tells the agents where it is (one small
//! message over the job's mesh); from then on monitor traffic has its own authenticated
//! connections, marked as lower-effort traffic, and never queues behind or in front of
//! application frames. A pull carries a [`Scope`]: which collectors (by pattern) and how
//! to reduce them at the source. The load-balance monitor asks for one [`CallSummary`]
//! per collective call per process (who arrived last there, and when); the distributed
//! statistics monitor asks each agent for its own statistics and gathers only those.
//! Requests go to every child before any answer is awaited (parallel gather), and the
//! agents form a gather tree ([`crate::gather`], [`MonitorConfig::fanout`]): the monitor
//! invites every agent over the mesh with its place in the tree, an interior agent tells
//! its children over the mesh where it listens, and each pull's answers merge on their
//! way up, so that monitoring a thousand processes does not converge on one. An agent
//! whose parent agent's process goes joins the monitor directly.
//!
//! Records carry ticks of each process's clock; agents convert them to the root's time
//! axis with the alignment measured at start-up (see [`crate::clocksync`]).
//!
//! With a status file ([`MonitorConfig::status_file`]) the monitor rewrites it after every
//! pull with what `vargr top` shows.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use vargr_net::gate::{Gate, GateConfig};
use vargr_net::{auth, mesh::Mesh, LinkSecurity, NetError, SecureConn};
use vargr_trace::analysis::{Stats, StatsMonitor, MEDIAN_WINDOW};
use vargr_trace::scope::{
    CallSummary, CollectorStats, Reduce, Reduced, Reply, Scope, ScopeReducer, MAX_SAMPLE,
};
use vargr_trace::Tracer;
use vargr_wire::{Frame, FrameKind};

use crate::gather::{self, Child, Children, Gathered, Head, Pull, LAST_ANSWER};
use crate::job::MeshTransport;
use crate::transport::{Tag, Transport};

/// Whether monitors pull and analyse (benchmarks pause them to compare like with like).
static ACTIVE: AtomicBool = AtomicBool::new(true);
/// Whether monitors analyse only while a rank of their process waits in a receive (the
/// seed's coscheduling: analysis uses cycles the application is not using).
static COSCHEDULE: AtomicBool = AtomicBool::new(false);
/// Ranks of this process waiting in a receive right now (counted only when coscheduling).
static BLOCKED: AtomicUsize = AtomicUsize::new(0);

/// Pauses or resumes this process's monitor.
pub fn set_active(on: bool) {
    ACTIVE.store(on, Ordering::Relaxed);
}

/// Counts a rank as blocked for as long as the guard lives (only when coscheduling).
pub(crate) struct Blocked(bool);

impl Blocked {
    #[inline]
    pub(crate) fn enter() -> Blocked {
        let on = COSCHEDULE.load(Ordering::Relaxed);
        if on {
            BLOCKED.fetch_add(1, Ordering::Relaxed);
        }
        Blocked(on)
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        if self.0 {
            BLOCKED.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Context id reserved for monitor and clock traffic: no communicator ever gets it.
pub(crate) const MONITOR_CTX: u32 = u32::MAX;
/// Monitor → agents over the mesh: where the monitor plane listens, and the scope.
const TAG_PLANE: u64 = 1;

/// How often an agent drains the rings when nobody pulls: as rarely as the busiest
/// ring allows (a quarter of a ring between drains), within these bounds.
const AGENT_POLL_MIN: Duration = Duration::from_millis(5);
const AGENT_POLL_MAX: Duration = Duration::from_millis(100);
/// Records an agent holds per thread between pulls (32 MiB at most per thread).
const AGENT_HOLD: usize = 1 << 20;
/// Largest pull request (a scope) an agent accepts.
const MAX_REQUEST: usize = 64 << 10;
/// How long the monitor waits for agents to connect, and for one answer.
pub(crate) const PLANE_TIMEOUT: Duration = Duration::from_secs(30);

/// Parent agent → its children over the mesh: where the parent listens.
const TAG_PARENT: u64 = 2;

/// What the monitor sends the agents over the mesh to open the plane: where the monitor
/// listens, the scope, and the agent's place in the gather tree ([`crate::gather`]).
#[derive(Serialize, Deserialize)]
struct PlaneInvite {
    addr: String,
    scope: Scope,
    /// The first rank of the parent agent's process; none: the monitor is the parent.
    #[serde(default)]
    parent: Option<u32>,
    /// The first ranks of the children's processes.
    #[serde(default)]
    children: Vec<u32>,
}

/// How long a finishing process keeps its agent up for the monitor's final pull.
const AGENT_LINGER: Duration = Duration::from_secs(10);

/// A running agent; [`AgentHandle::linger`] waits for the monitor to let it go.
pub(crate) struct AgentHandle {
    ended: std::sync::mpsc::Receiver<()>,
}

impl AgentHandle {
    /// Waits (up to [`AGENT_LINGER`]) until the agent has answered the monitor's final
    /// pull and been told to stop, so the last records of a process that finishes before
    /// rank 0's are not lost with it.
    pub(crate) fn linger(self) {
        let _ = self.ended.recv_timeout(AGENT_LINGER);
    }
}

/// Answers pulls from the monitor at world rank `monitor` until the process ends or the
/// monitor says stop. `local_ranks` is how many ranks this process hosts.
pub(crate) fn spawn_agent(
    t: Arc<MeshTransport>,
    mesh: Arc<Mesh>,
    monitor: usize,
    process: String,
    local_ranks: u32,
) -> AgentHandle {
    let (alive, ended) = std::sync::mpsc::channel::<()>();
    let _ = std::thread::Builder::new()
        .name("vargr-monitor-agent".into())
        .spawn(move || {
            // Dropped when the agent returns: wakes `linger`.
            let _alive = alive;
            lowest_priority();
            vargr_trace::set_thread_label("monitor agent", None);
            if let Err(e) = run_agent(&t, &mesh, monitor, &process, local_ranks) {
                tracing::warn!(process, "monitor agent: {e}");
            }
        });
    AgentHandle { ended }
}

fn run_agent(
    t: &MeshTransport,
    mesh: &Mesh,
    monitor: usize,
    process: &str,
    local_ranks: u32,
) -> Result<(), String> {
    let mut tracer = Tracer::new();
    let capacity = vargr_trace::ring_capacity() as f64;
    let mut last_drain = Instant::now();
    // Drains, and picks the next interval from the busiest thread's rate.
    let mut drain = |red: &mut ScopeReducer| {
        let threads = tracer.read();
        let busiest = threads.iter().map(|t| t.records.len()).max().unwrap_or(0);
        let rate = busiest as f64 / last_drain.elapsed().as_secs_f64().max(1e-6);
        last_drain = Instant::now();
        red.add(&Tracer::file_of(process, threads));
        next_drain(capacity, rate)
    };
    // Until the invitation comes, records are kept as they are.
    let mut red = ScopeReducer::new(
        Scope {
            collectors: Vec::new(),
            reduce: Reduce::All,
            by_seq: false,
            sample: 0,
        },
        local_ranks,
        AGENT_HOLD,
    );
    // The agent never waits in a mesh receive: a thread blocked there could end up
    // polling the sockets for the ranks and put itself between them and their messages.
    let invite: PlaneInvite = loop {
        match t.try_recv(monitor, Tag::user(MONITOR_CTX, TAG_PLANE)) {
            Ok(Some(b)) => {
                break serde_json::from_slice(&b)
                    .map_err(|e| format!("bad invitation from the monitor: {e}"))?
            }
            Ok(None) => {
                let wait = drain(&mut red);
                std::thread::sleep(wait.min(Duration::from_millis(20)));
            }
            Err(_) => return Ok(()),
        }
    };
    red.set_scope(invite.scope.clone());
    let mut children = Children::default();
    if !invite.children.is_empty() {
        open_to_children(t, mesh, &invite.children, &mut children)?;
    }
    // The parent's address comes over the mesh from the parent; one that does not come
    // (its process failed) leaves the monitor as the parent.
    let mut up = match invite.parent {
        None => invite.addr.clone(),
        Some(p) => {
            let deadline = Instant::now() + PLANE_TIMEOUT;
            loop {
                match t.try_recv(p as usize, Tag::user(MONITOR_CTX, TAG_PARENT)) {
                    Ok(Some(b)) => break String::from_utf8_lossy(&b).into_owned(),
                    Ok(None) if Instant::now() < deadline => {
                        let wait = drain(&mut red);
                        std::thread::sleep(wait.min(Duration::from_millis(20)));
                    }
                    Ok(None) => {
                        tracing::warn!(process, "monitor agent: no address from the agent of rank {p}; joining the monitor");
                        break invite.addr.clone();
                    }
                    Err(_) => return Ok(()),
                }
            }
        }
    };
    loop {
        let addr: vargr_net::Addr = up
            .parse()
            .map_err(|e: NetError| format!("monitor plane address {up:?}: {e}"))?;
        let peer = if up == invite.addr {
            format!("monitor at {up}")
        } else {
            format!("parent agent at {up}")
        };
        let conn = vargr_net::connect(&addr, PLANE_TIMEOUT).map_err(|e| e.to_string())?;
        let mut conn = auth::connect(
            conn,
            mesh.secret(),
            t.rank() as u32,
            LinkSecurity::Auto,
            PLANE_TIMEOUT,
            &peer,
        )
        .map_err(|e| e.to_string())?;
        conn.conn().set_low_priority();
        let ended = answer_pulls(
            &mut conn,
            &peer,
            process,
            &mut red,
            &mut drain,
            &mut children,
            None,
        )?;
        // A parent agent that went (its process failed) leaves its sub-tree to join the
        // monitor directly; the records held here were not lost with it.
        if ended == Ended::Stopped || up == invite.addr {
            children.release();
            return Ok(());
        }
        tracing::warn!(process, "monitor agent: {peer} went; joining the monitor");
        up = invite.addr.clone();
    }
}

/// Listens for this agent's children and tells them where, over the mesh; they are
/// accepted at the next pulls.
fn open_to_children(
    t: &MeshTransport,
    mesh: &Mesh,
    ranks: &[u32],
    children: &mut Children,
) -> Result<(), String> {
    let vargr_net::mesh::Bound {
        listener,
        addr,
        socket,
        ..
    } = Mesh::bind(mesh.env().single_host(), mesh.runtime_dir())
        .map_err(|e| format!("monitor plane: listening for children: {e}"))?;
    children.gates.push(Gate::open(
        listener,
        mesh.secret().clone(),
        GateConfig {
            deadline: Duration::from_secs(5),
            ..GateConfig::default()
        },
        Box::new(|e| tracing::warn!("monitor agent refused a plane connection: {e}")),
    ));
    let text = Bytes::from(addr.to_string());
    for &c in ranks {
        t.send(c as usize, Tag::user(MONITOR_CTX, TAG_PARENT), text.clone())
            .map_err(|e| format!("telling the agent of rank {c} where to connect: {e}"))?;
    }
    children.sockets.extend(socket);
    Ok(())
}

/// Why [`answer_pulls`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The monitor let the agent go, or it answered its last pull.
    Stopped,
    /// The connection up ended without a word: the parent's process went.
    ParentGone,
}

/// The agent's side of a plane connection once it is open: drains the rings while
/// nobody asks (`drain` returns how long to wait before the next drain), and answers
/// each pull with what `red` reduced since the last, gathered with what `children`
/// answered within the pull's budget (an interior agent of the gather tree forwards
/// each pull to them first). Returns when the monitor says stop or the parent goes,
/// or, once `finishing` is set, after the first pull that came later (so the monitor
/// has everything recorded before it was set).
pub(crate) fn answer_pulls(
    conn: &mut SecureConn,
    peer: &str,
    process: &str,
    red: &mut ScopeReducer,
    drain: &mut dyn FnMut(&mut ScopeReducer) -> Duration,
    children: &mut Children,
    finishing: Option<&AtomicBool>,
) -> Result<Ended, String> {
    let mut wait = AGENT_POLL_MIN;
    loop {
        match conn.conn().wait_readable(wait) {
            Ok(false) => {
                wait = drain(red);
                continue;
            }
            Ok(true) => {}
            Err(e) => return Err(format!("{peer}: {e}")),
        }
        // A request is small and written whole: once its first byte is here, the rest
        // follows at once.
        conn.set_timeout(Some(PLANE_TIMEOUT));
        let req = match conn.read_frame(MAX_REQUEST) {
            Ok(f) => f,
            // The parent's process ended: nothing more to answer here.
            Err(_) => return Ok(Ended::ParentGone),
        };
        if req.payload.as_ref() == b"stop" {
            children.release();
            return Ok(Ended::Stopped);
        }
        let last = finishing.is_some_and(|f| f.load(Ordering::Acquire));
        let pull: Pull = serde_json::from_slice(&req.payload)
            .map_err(|e| format!("{peer}: bad pull request: {e}"))?;
        let deadline = Instant::now() + Duration::from_millis(pull.budget_ms);
        // The sub-trees first, so that they gather while this agent reduces its own.
        let below = (!children.is_leaf()).then(|| {
            let down = pull.for_children();
            children.ask(req.stream, &down, Duration::from_millis(down.budget_ms));
        });
        red.set_scope(pull.scope);
        wait = drain(red);
        let own = red.reply(Tracer::file_of(process, Vec::new()));
        let below = below.map(|()| children.collect(req.stream, deadline));
        let body = Gathered::answer(own, below);
        let mut f = Frame::new(FrameKind::Data, req.stream, 0, Bytes::from(body));
        if last {
            f.flags |= LAST_ANSWER;
        }
        if conn.write_frame(&f).is_err() {
            return Ok(Ended::ParentGone);
        }
        if last {
            return Ok(Ended::Stopped);
        }
    }
}

/// How long an agent may wait before it drains again, given the busiest thread's
/// records per second: a quarter of a ring, within bounds.
pub(crate) fn next_drain(ring_capacity: f64, records_per_s: f64) -> Duration {
    Duration::from_secs_f64(ring_capacity / 4.0 / records_per_s.max(1.0))
        .clamp(AGENT_POLL_MIN, AGENT_POLL_MAX)
}

pub(crate) fn lowest_priority() {
    // SAFETY: setpriority on the calling thread (who = 0 with PRIO_PROCESS names the
    // calling thread on Linux) only changes its scheduling niceness.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 19);
    }
}

/// The load-balance monitor's view of one collector.
#[derive(Debug, Clone, Default)]
pub struct Culprits {
    /// Complete calls seen.
    pub calls: u64,
    /// How often each world rank arrived last.
    pub last: BTreeMap<u32, u64>,
    /// Longest time the first rank waited for the last (ns).
    pub longest_wait_ns: u64,
    /// Latency of each call (first arrival to last departure), in µs.
    pub latency_us: StatsMonitor,
}

impl Culprits {
    /// The rank most often last, with its share of the calls.
    pub fn culprit(&self) -> Option<(u32, f64)> {
        let (&r, &n) = self.last.iter().max_by_key(|(_, &n)| n)?;
        Some((r, n as f64 / self.calls.max(1) as f64))
    }
}

/// One process as the monitor last heard from it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeStatus {
    pub process: String,
    pub host: String,
    pub records: u64,
    pub lost: u64,
    pub clock_error_ns: u64,
}

/// Merges pulled call summaries and finds who arrives last in the world's collectives.
#[derive(Debug, Default)]
pub struct LoadBalance {
    size: usize,
    /// (collector id, seq) → the call so far, until every rank's part is in. Fx: keys
    /// are two small numbers from authenticated agents, hashed a million times a second.
    pending: FxHashMap<(u32, u32), CallSummary>,
    /// Collector ids (into `collector_names`), so that a call's key is two numbers.
    collector_ids: HashMap<String, u32>,
    collector_names: Vec<String>,
    /// Call summaries received (every rank's part of every call analysed).
    pub parts: u64,
    /// The sparsest sampling an agent applied since the last pull (it had more calls
    /// than a reply carries, `vargr_trace::scope::REPLY_CALLS`).
    pub agent_sample: u32,
    pub by_collector: BTreeMap<String, Culprits>,
    /// Distributed statistics, per process and collector, as the agents computed them.
    pub node_stats: BTreeMap<String, Vec<CollectorStats>>,
    pub nodes: BTreeMap<String, NodeStatus>,
    pub records_lost: u64,
    pub records: u64,
    /// Agents that did not answer the last pull in time (or left), as their parents
    /// named them.
    pub missing: Vec<String>,
    /// What gathering cost the monitor.
    pub gather: GatherCost,
}

/// What the monitor's gathers cost it: with a gather tree, its connections are its
/// children and its bytes their sub-trees' merged answers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GatherCost {
    pub pulls: u64,
    pub pull_ms_total: f64,
    pub pull_ms_max: f64,
    /// Answer bytes the monitor received.
    pub reply_bytes: u64,
    /// Connections the monitor pulls over (its children in the gather tree).
    pub connections: usize,
}

impl LoadBalance {
    pub fn new(size: usize) -> LoadBalance {
        LoadBalance {
            size,
            ..LoadBalance::default()
        }
    }

    /// Makes calls complete only when `size` ranks took part (for monitors whose ranks
    /// say how many they are as they join).
    pub fn grow_to(&mut self, size: usize) {
        self.size = self.size.max(size);
    }

    fn count<T>(&mut self, r: &Reduced<T>) {
        self.count_head(&Head {
            process: r.process.clone(),
            host: r.host.clone(),
            records: r.records,
            lost: r.lost,
            clock_error_ns: r.clock_error_ns,
        });
    }

    fn count_head(&mut self, r: &Head) {
        self.records += r.records;
        self.records_lost += r.lost;
        let n = self.nodes.entry(r.process.clone()).or_default();
        n.process.clone_from(&r.process);
        n.host.clone_from(&r.host);
        n.records += r.records;
        n.lost += r.lost;
        n.clock_error_ns = r.clock_error_ns;
    }

    /// Adds one pull's answer from the gather tree, and who was missing from it.
    pub fn add_gathered(&mut self, g: &Gathered) {
        for h in &g.processes {
            self.count_head(h);
        }
        if let Some(c) = &g.calls {
            self.agent_sample = self.agent_sample.max(c.sample);
            self.add_calls(&c.collectors, &c.body);
        }
        for r in &g.others {
            if let Reply::Stats(r) = r {
                self.node_stats.insert(r.process.clone(), r.body.clone());
            }
        }
        self.missing.clone_from(&g.missing);
    }

    /// Adds one agent's answer.
    pub fn add(&mut self, reply: &Reply) {
        match reply {
            Reply::Calls(r) => {
                self.count(r);
                self.agent_sample = self.agent_sample.max(r.sample);
                self.add_calls(&r.collectors, &r.body);
            }
            Reply::Stats(r) => {
                self.count(r);
                self.node_stats.insert(r.process.clone(), r.body.clone());
            }
            Reply::Counts(r) => self.count(r),
            Reply::Records(_) => {
                let (records, lost) = reply.counts();
                self.records += records;
                self.records_lost += lost;
            }
        }
    }

    /// Adds per-process call summaries (collector indices into `names`).
    pub fn add_calls(&mut self, names: &[String], calls: &[CallSummary]) {
        // This monitor's id of each of the reply's collectors, once per reply: the
        // world communicator's (context 0) only, since others have other members.
        let ids: Vec<Option<u32>> = names
            .iter()
            .map(|n| n.starts_with("ctx0/").then(|| self.collector_id(n)))
            .collect();
        for c in calls {
            let Some(&Some(id)) = ids.get(c.collector as usize) else {
                continue;
            };
            let key = (id, c.seq);
            let done = match self.pending.get_mut(&key) {
                Some(p) => {
                    p.merge(c);
                    p.ranks as usize >= self.size
                }
                None => {
                    self.pending.insert(key, *c);
                    c.ranks as usize >= self.size
                }
            };
            if done {
                let v = self.pending.remove(&key).expect("present");
                let name = &self.collector_names[id as usize];
                let cu = match self.by_collector.get_mut(name) {
                    Some(cu) => cu,
                    None => self.by_collector.entry(name.clone()).or_default(),
                };
                cu.calls += 1;
                *cu.last.entry(v.last_rank).or_default() += 1;
                cu.longest_wait_ns = cu
                    .longest_wait_ns
                    .max(v.last_arrival_ns.saturating_sub(v.first_arrival_ns));
                cu.latency_us
                    .push(v.last_departure_ns.saturating_sub(v.first_arrival_ns) as f64 / 1e3);
            }
        }
        self.parts += calls.len() as u64;
    }

    /// Called after each pull, when every agent's part of a call had its chance to
    /// arrive: calls whose records were lost never complete, so the map is kept bounded
    /// (between the replies of one pull it may hold a whole pull's calls).
    pub fn end_pull(&mut self) {
        if self.pending.len() > 100_000 {
            self.pending.clear();
        }
    }

    fn collector_id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.collector_ids.get(name) {
            return i;
        }
        let i = self.collector_names.len() as u32;
        self.collector_names.push(name.to_string());
        self.collector_ids.insert(name.to_string(), i);
        i
    }

    /// One line per collector with the latency statistics (the statistics monitor).
    pub fn stats_summary(&self) -> Vec<String> {
        let line = |name: &str, what: &str, s: &Stats| {
            format!(
                "{}{what} µs: mean {:.1} min {:.1} max {:.1} sd {:.1} median(last {}) {:.1}",
                name.trim_start_matches("ctx0/"),
                s.mean,
                s.min,
                s.max,
                s.sd,
                MEDIAN_WINDOW,
                s.median
            )
        };
        let mut out: Vec<String> = self
            .by_collector
            .iter()
            .filter_map(|(name, c)| Some(line(name, " latency", &c.latency_us.summary()?)))
            .collect();
        for (process, list) in &self.node_stats {
            for c in list {
                out.push(line(
                    &c.collector,
                    &format!(" on {process}, call time"),
                    &c.stats,
                ));
            }
        }
        out
    }

    /// Logs the final culprits, statistics and gather rate (at the end of a run).
    pub fn log_final(&self) {
        for l in self.summary().into_iter().chain(self.stats_summary()) {
            tracing::info!(target: "vargr::monitor", "vargr monitor (final): {l}");
        }
        let g = &self.gather;
        tracing::info!(
            target: "vargr::monitor",
            "vargr monitor: {} pulls, mean {:.2} ms, longest {:.2} ms; {} answer bytes over {} connections at the monitor",
            g.pulls,
            g.pull_ms_total / g.pulls.max(1) as f64,
            g.pull_ms_max,
            g.reply_bytes,
            g.connections
        );
        if !self.missing.is_empty() {
            tracing::info!(
                target: "vargr::monitor",
                "vargr monitor: missing from the last pull: {}",
                self.missing.join(", ")
            );
        }
        tracing::info!(
            target: "vargr::monitor",
            "vargr monitor: gathered {} records, {} overwritten before a pull (gather rate {:.4})",
            self.records,
            self.records_lost,
            self.gather_rate()
        );
    }

    /// Fraction of the records written that reached the monitor.
    pub fn gather_rate(&self) -> f64 {
        let all = self.records + self.records_lost;
        if all == 0 {
            1.0
        } else {
            self.records as f64 / all as f64
        }
    }

    /// One line per collector: the culprit, how often, the longest wait.
    pub fn summary(&self) -> Vec<String> {
        self.by_collector
            .iter()
            .filter_map(|(name, c)| {
                let (r, share) = c.culprit()?;
                Some(format!(
                    "{}: rank {r} arrived last in {:.0} % of {} calls (longest wait {:.2} ms)",
                    name.trim_start_matches("ctx0/"),
                    share * 100.0,
                    c.calls,
                    c.longest_wait_ns as f64 / 1e6
                ))
            })
            .collect()
    }
}

fn one() -> u32 {
    1
}

/// What `vargr top` reads: the monitor's view after its latest pull.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Status {
    /// Seconds since the monitor started.
    pub uptime_s: f64,
    pub ranks: usize,
    pub pulls: u64,
    /// Time the last parallel gather took (ms).
    pub last_pull_ms: f64,
    pub period_ms: u64,
    /// One call in this many is analysed (1: every call); calls and rates count those.
    #[serde(default = "one")]
    pub sample: u32,
    pub records: u64,
    pub lost: u64,
    pub gather_rate: f64,
    pub collectors: Vec<CollectorStatus>,
    pub nodes: Vec<NodeStatus>,
    /// Distributed statistics (per process), when the monitor runs that way.
    pub node_stats: BTreeMap<String, Vec<CollectorStats>>,
    /// Agents that did not answer the last pull in time, or left.
    #[serde(default)]
    pub missing: Vec<String>,
    /// Connections the monitor pulls over (its children in the gather tree), and the
    /// answer bytes it received in all.
    #[serde(default)]
    pub connections: usize,
    #[serde(default)]
    pub reply_bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CollectorStatus {
    pub name: String,
    pub calls: u64,
    /// Calls per second since the previous pull.
    pub rate: f64,
    pub latency_us: Option<Stats>,
    pub culprit: Option<u32>,
    pub culprit_share: f64,
    pub longest_wait_ms: f64,
}

impl Status {
    fn of(lb: &LoadBalance, prev: &Status, dt: f64) -> Status {
        let collectors = lb
            .by_collector
            .iter()
            .map(|(name, c)| {
                let before = prev
                    .collectors
                    .iter()
                    .find(|p| &p.name == name)
                    .map_or(0, |p| p.calls);
                let culprit = c.culprit();
                CollectorStatus {
                    name: name.clone(),
                    calls: c.calls,
                    rate: (c.calls - before.min(c.calls)) as f64 / dt.max(1e-9),
                    latency_us: c.latency_us.summary(),
                    culprit: culprit.map(|x| x.0),
                    culprit_share: culprit.map_or(0.0, |x| x.1),
                    longest_wait_ms: c.longest_wait_ns as f64 / 1e6,
                }
            })
            .collect();
        Status {
            ranks: lb.size,
            records: lb.records,
            lost: lb.records_lost,
            gather_rate: lb.gather_rate(),
            collectors,
            nodes: lb.nodes.values().cloned().collect(),
            node_stats: lb.node_stats.clone(),
            missing: lb.missing.clone(),
            connections: lb.gather.connections,
            reply_bytes: lb.gather.reply_bytes,
            ..Status::default()
        }
    }

    /// Replaces `path` atomically, so `vargr top` never reads half a file.
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        vargr_trace::write_atomic(path, &serde_json::to_vec_pretty(self)?)
    }
}

/// How the monitor of a job runs.
#[derive(Debug, Clone)]
pub struct MonitorConfig {
    pub period: Duration,
    /// Print latency statistics, not only culprits.
    pub stats: bool,
    /// Run the statistics on every node and gather only results (no culprits then).
    pub distributed: bool,
    pub coschedule: bool,
    /// Collector patterns to watch (default `ctx0/*`, the world's collectives).
    pub collectors: Vec<String>,
    pub status_file: Option<PathBuf>,
    /// Children of each agent in the gather tree ([`crate::gather`]); at least the
    /// number of processes: every agent answers the monitor directly.
    pub fanout: usize,
    /// Time a whole tree has to answer a pull; agents that take longer are named
    /// missing, and their answers merged into a later pull.
    pub pull_budget: Duration,
}

impl MonitorConfig {
    /// A pull of [`MonitorConfig::scope`] within the budget.
    pub(crate) fn pull(&self, sample: u32) -> Pull {
        Pull {
            scope: self.scope(sample),
            budget_ms: self.pull_budget.as_millis() as u64,
        }
    }

    /// What agents are asked for, analysing one call in `sample`.
    pub(crate) fn scope(&self, sample: u32) -> Scope {
        Scope {
            collectors: self.collectors.clone(),
            reduce: if self.distributed {
                Reduce::Stats
            } else {
                Reduce::LastArrival
            },
            by_seq: false,
            sample,
        }
    }
}

/// Call summaries (one per rank per call) a second the load-balance monitor takes
/// before it samples: merging one costs the monitor a few hundred nanoseconds, taken
/// from cores the ranks may need, so a program making a million collective calls a
/// second would otherwise feed the monitor a core. Sampled, it analyses every K-th call
/// of each collector (the same calls on every rank; K a power of two, halved again when
/// the rate falls).
const PARTS_PER_S: f64 = 50_000.0;
/// The least time the final pull gives the tree: the processes have finished and wait
/// for it, and it carries their last records.
const FINAL_BUDGET: Duration = Duration::from_secs(5);

/// The monitor thread of rank 0's process.
pub(crate) struct MonitorHandle {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<LoadBalance>>,
}

impl MonitorHandle {
    /// Opens the plane to the agents of `processes` (their first ranks) and pulls from
    /// them every period, printing culprits to stderr when they change.
    pub(crate) fn start(
        t: Arc<dyn Transport>,
        mesh: Arc<Mesh>,
        processes: Vec<usize>,
        size: usize,
        cfg: MonitorConfig,
    ) -> MonitorHandle {
        COSCHEDULE.store(cfg.coschedule, Ordering::Relaxed);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("vargr-monitor".into())
            .spawn(move || {
                let mut lb = LoadBalance::new(size);
                match open_plane(&*t, &mesh, &processes, &cfg) {
                    Ok(children) => monitor_loop(children, &mut lb, &cfg, &s),
                    Err(e) => tracing::warn!("monitor: {e}"),
                }
                lb
            })
            .ok();
        MonitorHandle { stop, thread }
    }

    /// Stops the monitor and returns what it saw.
    pub(crate) fn stop(mut self) -> Option<LoadBalance> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take()?.join().ok()
    }
}

/// Listens, invites every agent over the mesh with its place in the gather tree, and
/// accepts the connections of the monitor's own children (the others connect to their
/// parent agents; any that lose theirs come back through the monitor's gate).
fn open_plane(
    t: &dyn Transport,
    mesh: &Mesh,
    processes: &[usize],
    cfg: &MonitorConfig,
) -> Result<Children, String> {
    // `socket` removes a Unix socket's file when the monitor ends: agents need the
    // name to connect, and those that lose their parent agent connect later.
    let vargr_net::mesh::Bound {
        listener,
        addr,
        socket,
        ..
    } = Mesh::bind(mesh.env().single_host(), mesh.runtime_dir())
        .map_err(|e| format!("monitor plane: {e}"))?;
    let n = processes.len();
    let rank_of = |a: usize| processes[a] as u32;
    for (i, &p) in processes.iter().enumerate() {
        let invite = serde_json::to_vec(&PlaneInvite {
            addr: addr.to_string(),
            scope: cfg.scope(1),
            parent: gather::parent(i, cfg.fanout).map(rank_of),
            children: gather::children(Some(i), cfg.fanout, n)
                .map(rank_of)
                .collect(),
        })
        .expect("serializable");
        t.send(p, Tag::user(MONITOR_CTX, TAG_PLANE), Bytes::from(invite))
            .map_err(|e| format!("inviting the agent of rank {p}: {e}"))?;
    }
    let expected = gather::children(None, cfg.fanout, n).len();
    let deadline = Instant::now() + PLANE_TIMEOUT;
    // A stranger on the port is refused by the handshake, and is not fatal.
    let gate = Gate::open(
        listener,
        mesh.secret().clone(),
        GateConfig {
            deadline: Duration::from_secs(5),
            ..GateConfig::default()
        },
        Box::new(|e| tracing::warn!("monitor refused a plane connection: {e}")),
    );
    let mut children = Children::default();
    while children.list.len() < expected {
        let left = deadline.saturating_duration_since(Instant::now());
        let a = gate.accept_timeout(left).map_err(|e| {
            format!(
                "monitor plane: {} of {expected} agents connected: {e}",
                children.list.len(),
            )
        })?;
        let conn = a.conn;
        conn.conn().set_low_priority();
        children.list.push(Child {
            conn,
            name: format!("agent of rank {}", a.node),
        });
    }
    children.gates.push(gate);
    children.sockets.extend(socket);
    Ok(children)
}

fn monitor_loop(mut children: Children, lb: &mut LoadBalance, cfg: &MonitorConfig, s: &AtomicBool) {
    let mut g = Gatherer::new(cfg);
    // Once stopped, one last pull: the ranks have finished, and every process keeps its
    // agent up for it (`AgentHandle::linger`); `MonitorHandle::stop`'s caller prints the
    // final summary.
    while g.turn(&mut children, lb, s.load(Ordering::Relaxed)) {}
    children.release();
}

/// The monitor's side of a plane, one pull at a time: gathers, keeps the status file,
/// and speaks when a culprit changes.
pub(crate) struct Gatherer<'a> {
    cfg: &'a MonitorConfig,
    request: Pull,
    /// The next pull's id (answers carry it, so late ones are told apart).
    next_id: u32,
    /// One call in this many is analysed ([`PARTS_PER_S`]).
    sample: u32,
    t0: Instant,
    status: Status,
    last_status: Instant,
    last_culprits: Vec<(String, Option<u32>)>,
    last_print: Instant,
    /// Call summaries received by the last pull, and when, for the rate.
    parts_before: u64,
    last_rate: Instant,
}

impl<'a> Gatherer<'a> {
    pub(crate) fn new(cfg: &'a MonitorConfig) -> Gatherer<'a> {
        Gatherer {
            cfg,
            request: cfg.pull(1),
            next_id: 1,
            sample: 1,
            t0: Instant::now(),
            status: Status::default(),
            last_status: Instant::now(),
            last_culprits: Vec::new(),
            last_print: Instant::now(),
            parts_before: 0,
            last_rate: Instant::now(),
        }
    }

    /// One turn: a period's wait (unless `last`), a pull, and the culprits said; false
    /// once the last pull is done.
    pub(crate) fn turn(
        &mut self,
        children: &mut Children,
        lb: &mut LoadBalance,
        last: bool,
    ) -> bool {
        if !last && !self.wait_for_turn() {
            return true;
        }
        self.pull(children, lb, last);
        if last {
            return false;
        }
        self.speak(lb);
        true
    }

    /// Sleeps a period; false when monitors are paused, so this turn has no pull.
    fn wait_for_turn(&self) -> bool {
        std::thread::sleep(self.cfg.period);
        if !ACTIVE.load(Ordering::Relaxed) {
            return false;
        }
        if self.cfg.coschedule {
            // Wait (a period at most) for a moment when a rank here is blocked.
            let until = Instant::now() + self.cfg.period;
            while BLOCKED.load(Ordering::Relaxed) == 0 && Instant::now() < until {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        true
    }

    /// One gather down the tree (requests to every child first, then the answers);
    /// children that have not answered within the budget are named in the status and
    /// kept. The final pull (`last`) waits longer, for the records of every process.
    /// Rewrites the status file if there is one.
    pub(crate) fn pull(&mut self, children: &mut Children, lb: &mut LoadBalance, last: bool) {
        let pull = Instant::now();
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let mut request = self.request.clone();
        if last {
            request.budget_ms = request.budget_ms.max(FINAL_BUDGET.as_millis() as u64);
        }
        let deadline = pull + Duration::from_millis(request.budget_ms);
        let down = request.for_children();
        children.ask(id, &down, Duration::from_millis(down.budget_ms));
        let before = children.bytes;
        let gathered = children.collect(id, deadline);
        lb.add_gathered(&gathered);
        lb.gather.pulls += 1;
        lb.gather.reply_bytes += children.bytes - before;
        lb.gather.connections = children.list.len();
        let pull_ms = pull.elapsed().as_secs_f64() * 1e3;
        lb.gather.pull_ms_total += pull_ms;
        lb.gather.pull_ms_max = lb.gather.pull_ms_max.max(pull_ms);
        lb.end_pull();
        self.resample(lb);
        if let Some(path) = &self.cfg.status_file {
            let mut next = Status::of(lb, &self.status, self.last_status.elapsed().as_secs_f64());
            next.sample = self.sample;
            next.uptime_s = self.t0.elapsed().as_secs_f64();
            next.pulls = self.status.pulls + 1;
            next.last_pull_ms = pull_ms;
            next.period_ms = self.cfg.period.as_millis() as u64;
            if let Err(e) = next.write(path) {
                tracing::warn!(path = %path.display(), "monitor status: {e}");
            }
            self.status = next;
            self.last_status = Instant::now();
        }
    }

    /// Samples more calls, or fewer, from the rate of call summaries since the last pull.
    fn resample(&mut self, lb: &mut LoadBalance) {
        let dt = self.last_rate.elapsed().as_secs_f64().max(1e-3);
        let rate = lb.parts.saturating_sub(self.parts_before) as f64 / dt;
        self.parts_before = lb.parts;
        self.last_rate = Instant::now();
        // An agent that had to sample harder than asked sets the pace for all.
        let base = self.sample.max(std::mem::take(&mut lb.agent_sample));
        let next = if rate > PARTS_PER_S {
            // Enough to land under the budget at once, if the rate holds.
            let factor = (rate / PARTS_PER_S).ceil() as u32;
            (base.saturating_mul(factor.next_power_of_two())).min(MAX_SAMPLE)
        } else if rate < PARTS_PER_S / 4.0 {
            (base / 2).max(1)
        } else {
            base
        };
        if next != self.sample && !self.cfg.distributed {
            self.sample = next;
            self.request = self.cfg.pull(next);
        }
    }

    /// Logs the culprits (or statistics) when a culprit changes, else every few seconds.
    pub(crate) fn speak(&mut self, lb: &LoadBalance) {
        let culprits: Vec<(String, Option<u32>)> = lb
            .by_collector
            .iter()
            .map(|(n, c)| (n.clone(), c.culprit().map(|x| x.0)))
            .collect();
        if culprits != self.last_culprits || self.last_print.elapsed() >= Duration::from_secs(5) {
            let lines = if self.cfg.stats || self.cfg.distributed {
                lb.stats_summary()
            } else {
                lb.summary()
            };
            for l in lines {
                tracing::info!(
                    target: "vargr::monitor",
                    "vargr monitor {:.1} s: {l}",
                    self.t0.elapsed().as_secs_f64()
                );
            }
            self.last_culprits = culprits;
            self.last_print = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vargr_trace::{Calibration, ClockPoint, EventOp, Record, ThreadTrace, TraceFile};

    fn file(rank: u32, arrivals: &[u64]) -> TraceFile {
        TraceFile {
            process: String::new(),
            host: "h".into(),
            pid: 1,
            clock: Calibration {
                first: ClockPoint { tick: 0, ns: 0 },
                last: ClockPoint { tick: 1, ns: 1 },
            },
            align: Default::default(),
            collectors: vec!["ctx0/allreduce".into()],
            threads: vec![ThreadTrace {
                label: format!("rank {rank}"),
                rank: Some(rank),
                lost: 0,
                records: arrivals
                    .iter()
                    .enumerate()
                    .map(|(seq, &a)| Record {
                        start: a,
                        end: a + 10,
                        seq: seq as u32,
                        bytes: 8,
                        collector: 0,
                        op: EventOp::Call as u8,
                        status: 0,
                        peer: vargr_trace::NO_PEER,
                    })
                    .collect(),
            }],
            usage: None,
        }
    }

    /// What an agent of a one-rank process answers for these records.
    fn pulled(rank: u32, arrivals: &[u64]) -> Reply {
        let mut r = ScopeReducer::new(
            Scope {
                collectors: vec!["ctx0/*".into()],
                reduce: Reduce::LastArrival,
                by_seq: false,
                sample: 0,
            },
            1,
            1000,
        );
        r.add(&file(rank, arrivals));
        r.reply(file(rank, &[]))
    }

    #[test]
    fn the_monitor_samples_calls_when_they_come_too_fast_and_stops_when_they_slow() {
        let cfg = MonitorConfig {
            period: Duration::from_millis(200),
            stats: false,
            distributed: false,
            coschedule: false,
            collectors: vec!["ctx0/*".into()],
            status_file: None,
            fanout: gather::DEFAULT_FANOUT,
            pull_budget: gather::DEFAULT_BUDGET,
        };
        let mut g = Gatherer::new(&cfg);
        let mut lb = LoadBalance::new(1);
        let analysed = |lb: &mut LoadBalance, parts: u64| lb.parts += parts;
        // 250,000 call summaries in a second: five times the budget, so 1 in 8 from now.
        analysed(&mut lb, 250_000);
        g.last_rate = Instant::now() - Duration::from_secs(1);
        g.resample(&mut lb);
        assert_eq!(g.sample, 8);
        assert_eq!(g.request.scope.sample, 8);
        // Within the budget: kept; far below it: halved, down to every call.
        analysed(&mut lb, 40_000);
        g.last_rate = Instant::now() - Duration::from_secs(1);
        g.resample(&mut lb);
        assert_eq!(g.sample, 8);
        for want in [4, 2, 1, 1] {
            analysed(&mut lb, 100);
            g.last_rate = Instant::now() - Duration::from_secs(1);
            g.resample(&mut lb);
            assert_eq!(g.sample, want);
        }
        // An agent that had more calls than a reply carries sampled harder: everyone
        // is asked for that from the next pull.
        lb.agent_sample = 16;
        analysed(&mut lb, 30_000);
        g.last_rate = Instant::now() - Duration::from_secs(1);
        g.resample(&mut lb);
        assert_eq!((g.sample, lb.agent_sample), (16, 0));
    }

    #[test]
    fn the_rank_that_arrives_last_is_named() {
        let mut lb = LoadBalance::new(3);
        lb.add(&pulled(0, &[100, 200, 300]));
        lb.add(&pulled(1, &[600, 900, 310]));
        // Rank 2's third call has not been pulled yet: only two calls are complete.
        lb.add(&pulled(2, &[500, 210]));
        let c = &lb.by_collector["ctx0/allreduce"];
        assert_eq!(c.calls, 2);
        assert_eq!(c.culprit(), Some((1, 1.0)));
        assert_eq!(c.longest_wait_ns, 700);
        assert!(lb.summary()[0].contains("of 2 calls"));
        // Latencies: first arrival to last departure (records end 10 after they start).
        let st = lb.by_collector["ctx0/allreduce"]
            .latency_us
            .summary()
            .unwrap();
        assert_eq!((st.count, st.min * 1e3, st.max * 1e3), (2, 510.0, 710.0));
        assert_eq!(lb.gather_rate(), 1.0);
        let status = Status::of(&lb, &Status::default(), 1.0);
        assert_eq!(status.collectors[0].culprit, Some(1));
        assert_eq!(status.collectors[0].rate, 2.0);
    }
}
