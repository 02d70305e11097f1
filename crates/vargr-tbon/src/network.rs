//! The front-end: creates the tree, opens streams, multicasts down, receives reductions.
//!
//! It is also the root of clock-skew estimation (its own edges are measured before
//! [`Network::new`] returns, see [`crate::clock`]) and, with a trace directory, writes
//! its own trace file once the whole tree has shut down.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vargr_filter::SyncMode;
use vargr_net::auth::Secret;
use vargr_net::launch::{ChildSpec, Launcher};
use vargr_net::Reactor;
use vargr_topo::Topology;
use vargr_wire::{Packet, Value};

use crate::commnode::{finish_children, registry};
use crate::engine::{Engine, Watch};
use crate::proto::{NodeFilters, NodeSel, RunConfig, StreamOpenMsg};
use crate::rendezvous::Rendezvous;
use crate::router::Router;
use crate::spawn::{start_children, BackendFn, ChildHandle, Spawner};
use crate::trace::{self, TraceDump};
use crate::{Alignment, Backend, Result, TbonError};

/// Stream ids below this are reserved for vargr's own streams.
pub const FIRST_USER_STREAM: u32 = 16;

/// What runs at the leaves.
#[derive(Clone)]
pub enum BackendSpec {
    /// A program started once per back-end (with `VARGR_*` variables set).
    Command { program: String, args: Vec<String> },
    /// A closure run on a thread per back-end, everything in this process (tests,
    /// embedded use). Commnodes become threads too.
    Threads(BackendFn),
    /// Attach mode: back-ends are started by another launcher (`mpirun`, `srun`) and
    /// meet their parents through a rendezvous (see [`AttachSpec`]).
    Attach(AttachSpec),
}

/// Where attaching back-ends come from and how they find the tree.
#[derive(Debug, Clone, Default)]
pub struct AttachSpec {
    /// A command the front-end runs to start the back-ends, e.g. `mpirun -n {n}
    /// my_daemon`; `{n}` becomes the number of back-ends. It gets `VARGR_RENDEZVOUS`
    /// and `VARGR_SECRET` in its environment (Open MPI across hosts: add `-x
    /// VARGR_RENDEZVOUS -x VARGR_SECRET`). None: they are started some other way.
    pub launch: Option<Vec<String>>,
    /// Also write the rendezvous (address, secret; mode 0600) to this file, for
    /// back-ends started with `VARGR_RENDEZVOUS=file:PATH`.
    pub file: Option<PathBuf>,
}

impl BackendSpec {
    pub fn command(program: impl Into<String>, args: &[&str]) -> BackendSpec {
        BackendSpec::Command {
            program: program.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
        }
    }
    pub fn threads(f: impl Fn(Backend) + Send + Sync + 'static) -> BackendSpec {
        BackendSpec::Threads(Arc::new(f))
    }
}

/// Knobs of a network, each with a default that works on one machine.
#[derive(Debug, Clone)]
pub struct NetworkOptions {
    /// Remote-shell template (`ssh -o BatchMode=yes {host} {cmd}`); None: local processes.
    pub remote_template: Option<String>,
    /// "unix" (default for local runs) or "tcp".
    pub transport: String,
    /// The `vargr` binary that runs commnodes. Default: `$VARGR_COMMNODE`, else a `vargr`
    /// next to the current executable, else `vargr` on the PATH.
    pub commnode_program: Option<String>,
    pub max_frame: usize,
    pub heartbeat: Duration,
    pub heartbeat_timeout: Duration,
    pub startup_timeout: Duration,
    /// Unsent bytes per link before reading pauses (backpressure).
    pub queue_limit: usize,
    pub plugins: Vec<String>,
    /// Sites of hosts and the WAN between them (emulated on cross-site links).
    pub link_stages: crate::LinkStages,
    /// Every node (front-end, commnodes, back-end processes) writes its event trace to
    /// `DIR/node-<id>.vtr` at shutdown. None: `$VARGR_TRACE_DIR` if set, else no files.
    pub trace_dir: Option<PathBuf>,
    /// A thread of the front-end pulls event counts through the tree every
    /// `monitor_period` and keeps this file up to date for `vargr top`.
    pub monitor_status: Option<PathBuf>,
    pub monitor_period: Duration,
    /// The user's private directory; the network's Unix sockets go in a directory of
    /// their own inside it, removed at shutdown. Default:
    /// [`vargr_net::runtime_dir::default_path`].
    pub runtime_dir: PathBuf,
    /// What each node asks of the TCP links to its children: by default MACs on
    /// loopback, encryption to other hosts, nothing on Unix sockets.
    pub link_security: vargr_net::LinkSecurity,
    /// What the orphans of a dead commnode do (see [`crate::recovery`]). Default:
    /// adoption by the nearest live ancestor, as in MRNet.
    pub recovery: crate::Recovery,
    /// Test-only, for measuring clock-skew estimation on one host: nanoseconds added to
    /// the clock each node (by topology id) reads in the skew exchange, so that its
    /// processes look like hosts whose clocks are that far off. Empty: real clocks.
    pub clock_offsets_ns: BTreeMap<u32, i64>,
}

impl NetworkOptions {
    /// Writes every node's trace file into `dir` at shutdown (see
    /// [`NetworkOptions::trace_dir`](NetworkOptions#structfield.trace_dir)).
    pub fn trace_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.trace_dir = Some(dir.into());
        self
    }

    /// Keeps `path` up to date with per-node and per-stream rates for `vargr top`.
    pub fn monitor_status(mut self, path: impl Into<PathBuf>) -> Self {
        self.monitor_status = Some(path.into());
        self
    }
}

/// How long [`Network::new`] waits for its own children's clocks to be measured: long
/// enough for a back-end that is not receiving yet (its keeper answers every half
/// heartbeat), short enough not to hold up start-up much when one is slow.
const CLOCK_WAIT: Duration = Duration::from_secs(2);

impl Default for NetworkOptions {
    fn default() -> Self {
        NetworkOptions {
            remote_template: None,
            transport: "unix".into(),
            commnode_program: None,
            max_frame: vargr_wire::DEFAULT_MAX_FRAME,
            heartbeat: Duration::from_millis(500),
            heartbeat_timeout: Duration::from_millis(1500),
            startup_timeout: Duration::from_secs(30),
            queue_limit: 8 << 20,
            plugins: Vec::new(),
            link_stages: crate::LinkStages::default(),
            trace_dir: None,
            monitor_status: None,
            monitor_period: Duration::from_millis(500),
            runtime_dir: vargr_net::runtime_dir::default_path(),
            link_security: vargr_net::LinkSecurity::Auto,
            recovery: crate::Recovery::default(),
            clock_offsets_ns: BTreeMap::new(),
        }
    }
}

/// The commnode program when the options name none: the running program if it is
/// `vargr`, else a `vargr` beside it, else `vargr` on the PATH.
fn default_commnode() -> String {
    if let Ok(exe) = std::env::current_exe() {
        if exe.file_name().is_some_and(|n| n == "vargr") {
            return exe.display().to_string();
        }
        if let Some(dir) = exe.parent() {
            for cand in [dir.join("vargr"), dir.join("../vargr")] {
                if cand.is_file() {
                    return cand.display().to_string();
                }
            }
        }
    }
    "vargr".into()
}

/// A set of back-ends a stream talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Communicator {
    ranks: Vec<u32>,
}

impl Communicator {
    pub fn ranks(&self) -> &[u32] {
        &self.ranks
    }
}

/// How a stream treats its packets.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    /// Upstream transformation filter spec (`sum`, `max`, `histogram:0,10,5`, …).
    pub up: String,
    /// Sync filter spec: a [`SyncMode`] (`all`, `timeout:250ms`, `dontwait`) or a user
    /// sync filter registered or loaded from a plugin (`k_of_n:2`).
    pub sync: String,
    /// Downstream filter applied at every node on the way down.
    pub down: Option<String>,
    /// Latest mode: slow receivers see only the newest packet (PATHS last-observe).
    pub latest: bool,
    /// Heterogeneous filters (MRNet's per-node filter assignment): the back-ends run
    /// this on each packet they send, before it goes up. It should give one packet per
    /// packet (a wave waits for one from each back-end). None: no back-end filter.
    pub up_backend: Option<String>,
    /// The front-end runs this instead of `up`, last, on the waves of its children.
    pub up_frontend: Option<String>,
    /// Heterogeneous filters beyond the three roles: up and sync filters of their own
    /// for the front-end and commnodes chosen by depth or node id ([`NodeSel`]; a node
    /// rule wins over a depth rule, and either over `up_frontend`).
    pub per_node: Vec<NodeFilters>,
    /// No packet waits longer than this at a node, whatever its sync filter decides
    /// (the wave leaves, and the first time is reported as the filter's fault). None: no
    /// deadline, which lets a sync filter that never releases hold the stream forever.
    pub wave_deadline: Option<Duration>,
}

impl StreamOptions {
    /// The default [`StreamOptions::wave_deadline`]: long enough for any live child of a
    /// working tree, short enough that a stuck sync filter shows.
    pub const DEFAULT_WAVE_DEADLINE: Duration = Duration::from_secs(60);

    pub fn new(up: &str) -> StreamOptions {
        StreamOptions {
            up: up.into(),
            sync: SyncMode::WaitForAll.to_string(),
            down: None,
            latest: false,
            up_backend: None,
            up_frontend: None,
            per_node: Vec::new(),
            wave_deadline: Some(Self::DEFAULT_WAVE_DEADLINE),
        }
    }
    /// The sync filter: a [`SyncMode`] or a sync filter spec (`"k_of_n:2"`).
    pub fn sync(mut self, s: impl std::fmt::Display) -> Self {
        self.sync = s.to_string();
        self
    }
    /// Up and sync filters (None: the stream's) for the nodes at `depth` (the front-end
    /// is 0).
    pub fn at_depth(self, depth: u32, up: Option<&str>, sync: Option<&str>) -> Self {
        self.at(NodeSel::Depth(depth), up, sync)
    }
    /// Up and sync filters (None: the stream's) for node `node` (a node id of the
    /// topology, not a back-end rank).
    pub fn at_node(self, node: u32, up: Option<&str>, sync: Option<&str>) -> Self {
        self.at(NodeSel::Node(node), up, sync)
    }
    fn at(mut self, at: NodeSel, up: Option<&str>, sync: Option<&str>) -> Self {
        self.per_node.push(NodeFilters {
            at,
            up: up.map(String::from),
            sync: sync.map(String::from),
        });
        self
    }
    pub fn wave_deadline(mut self, d: Option<Duration>) -> Self {
        self.wave_deadline = d;
        self
    }
    pub fn latest(mut self) -> Self {
        self.latest = true;
        self
    }
    /// Filters of their own for the back-ends and the front-end; `up` stays the
    /// commnodes' (see [`StreamOptions::up_backend`]).
    pub fn per_role(mut self, backend: Option<&str>, frontend: Option<&str>) -> Self {
        self.up_backend = backend.map(String::from);
        self.up_frontend = frontend.map(String::from);
        self
    }
}

/// The front-end's handle on a running tree.
pub struct Network {
    engine: Arc<Engine>,
    topology: Topology,
    handles: Mutex<Vec<ChildHandle>>,
    next_stream: AtomicU32,
    /// Receives from any stream.
    any: AnyStream,
    sockdir: Option<PathBuf>,
    startup: Duration,
    down: bool,
    trace: Option<TraceDump>,
    status: Option<StatusThread>,
    /// The emulated WAN's shared bottlenecks, held while the network runs.
    _gateways: Option<vargr_emu::Gateways>,
}

/// The front-end thread that writes the network's status for `vargr top`.
struct StatusThread {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl StatusThread {
    fn start(engine: &Arc<Engine>, path: PathBuf, period: Duration) -> StatusThread {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, weak) = (stop.clone(), Arc::downgrade(engine));
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut last = Instant::now();
            let mut pulls = 0;
            let scope = crate::monitor::NetworkStatus::scope();
            while !s.load(Ordering::Relaxed) {
                std::thread::sleep(period);
                let Some(engine) = weak.upgrade() else { return };
                let started = Instant::now();
                let pulled = pull_on(&engine, &scope, period.max(Duration::from_millis(200)));
                let clocks = engine.lock().router.clock_reports().clone();
                let mut st = crate::monitor::NetworkStatus::of(
                    &pulled,
                    last.elapsed().as_secs_f64(),
                    &clocks,
                );
                last = Instant::now();
                pulls += 1;
                st.uptime_s = t0.elapsed().as_secs_f64();
                st.period_ms = period.as_millis() as u64;
                st.pulls = pulls;
                st.last_pull_ms = started.elapsed().as_secs_f64() * 1e3;
                if let Err(e) = st.write(&path) {
                    tracing::warn!(path = %path.display(), "monitor status: {e}");
                    return;
                }
            }
        });
        StatusThread { stop, thread }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

/// One pull through the tree (see [`Network::pull`]).
fn pull_on(
    engine: &Engine,
    scope: &vargr_trace::scope::Scope,
    budget: Duration,
) -> crate::monitor::Pulled {
    let id = engine.with_router(|r, out| r.start_pull(scope.clone(), budget, Instant::now(), out));
    // The router gives up on late sub-trees at the budget; the slack covers the last hop.
    let deadline = Instant::now() + budget + Duration::from_secs(1);
    engine
        .wait_for(Some(deadline), |st| st.router.take_pull(id))
        .unwrap_or_else(|| crate::monitor::Pulled {
            answers: Default::default(),
            root: None,
        })
}

impl Network {
    /// Starts the tree described by `topology` with `backend` at every leaf.
    pub fn new(topology: Topology, backend: BackendSpec, opts: NetworkOptions) -> Result<Network> {
        let t0 = Instant::now();
        let secret = Secret::random();
        let (program, args, spawner) = match &backend {
            BackendSpec::Command { program, args } => {
                let launcher = match &opts.remote_template {
                    Some(t) => Launcher::remote(t)?,
                    None => Launcher::Local,
                };
                (program.clone(), args.clone(), Spawner::Processes(launcher))
            }
            BackendSpec::Threads(f) => (String::new(), Vec::new(), Spawner::Threads(f.clone())),
            BackendSpec::Attach(_) => {
                let launcher = match &opts.remote_template {
                    Some(t) => Launcher::remote(t)?,
                    None => Launcher::Local,
                };
                (String::new(), Vec::new(), Spawner::Processes(launcher))
            }
        };
        let transport = if opts.remote_template.is_some() {
            "tcp".to_string()
        } else {
            opts.transport.clone()
        };
        if transport != "unix" && transport != "tcp" {
            return Err(TbonError::Config(format!(
                "unknown transport {transport:?} (expected unix or tcp)"
            )));
        }
        // Created only once the options are known to be good, so errors leave nothing behind.
        opts.link_stages.validate()?;
        let trace_dir = opts.trace_dir.clone();
        if let Some(d) = &trace_dir {
            trace::check_dir(d)?;
        }
        let sockdir = make_sockdir(&opts.runtime_dir)?;
        let config = RunConfig {
            backend_program: program,
            backend_args: args,
            commnode_program: opts
                .commnode_program
                .clone()
                .unwrap_or_else(default_commnode),
            remote_template: opts.remote_template.clone(),
            transport,
            sockdir: sockdir.display().to_string(),
            recovery: opts.recovery,
            max_frame: opts.max_frame,
            heartbeat_ms: opts.heartbeat.as_millis() as u64,
            heartbeat_timeout_ms: opts.heartbeat_timeout.as_millis() as u64,
            startup_timeout_ms: opts.startup_timeout.as_millis() as u64,
            queue_limit: opts.queue_limit,
            num_backends: topology.num_backends() as u32,
            plugins: opts.plugins.clone(),
            attach: None,
            link_stages: opts.link_stages.clone(),
            trace_dir: trace_dir.as_ref().map(|d| d.display().to_string()),
            link_security: opts.link_security,
            clock_offsets_ns: opts.clock_offsets_ns.clone(),
        };
        let mut config = config;
        let mut launched = None;
        let cleanup = |e: TbonError, launched: &mut Option<ChildHandle>| {
            if let Some(h) = launched.take() {
                h.finish(Duration::ZERO);
            }
            let _ = std::fs::remove_dir_all(&sockdir);
            e
        };
        // The emulated WAN's gateways, when every node runs on this machine: local
        // processes or threads, not a remote template or another launcher's back-ends.
        // The pointer lives in the private socket directory and goes with it.
        let all_here = opts.remote_template.is_none() && !matches!(backend, BackendSpec::Attach(_));
        let gateways = if all_here && !config.link_stages.wan.is_empty() {
            let pointer = sockdir.join("gateways");
            let table = vargr_emu::Gateways::create()
                .and_then(|g| g.write_pointer(&pointer).map(|()| g))
                .map_err(|e| {
                    cleanup(TbonError::Startup(format!("gateways: {e}")), &mut launched)
                })?;
            config.link_stages.gateways = Some(pointer.display().to_string());
            Some(table)
        } else {
            None
        };
        let reg = registry(&config.plugins).map_err(|e| cleanup(e, &mut launched))?;
        let rendezvous = match &backend {
            BackendSpec::Attach(spec) => {
                let rv = start_rendezvous(&topology, &config, &secret, spec)
                    .and_then(|rv| Ok((launch_backends(&rv, &secret, spec, &topology)?, rv)));
                let (h, rv) = rv.map_err(|e| cleanup(e, &mut launched))?;
                launched = h;
                config.attach = Some(rv.addr().to_string());
                Some(rv)
            }
            _ => None,
        };
        let mut reactor = Reactor::new()
            .map_err(|e| cleanup(TbonError::Startup(e.to_string()), &mut launched))?;
        let root = topology.root().clone();
        let crate::spawn::Started {
            children,
            mut handles,
            adopter,
        } = start_children(
            root.id,
            &topology,
            &config,
            &secret,
            &spawner,
            &mut reactor,
            &[],
        )
        .map_err(|e| cleanup(e, &mut launched))?;
        drop(rendezvous);
        handles.extend(launched);
        let router = Router::new(root.id, root.host.clone(), None, reg)
            .with_children(children)
            .with_heartbeat(opts.heartbeat, opts.heartbeat_timeout)
            .with_recovery(
                opts.recovery,
                Vec::new(),
                adopter.as_ref().map(|a| a.me.clone()),
            )
            .with_clock_offset(&opts.clock_offsets_ns);
        let engine = Engine::new(router, reactor, opts.queue_limit);
        engine.lock().adopter = adopter;
        trace::label_thread(root.id, "front-end");
        engine.start_keeper(opts.heartbeat / 2, root.id);
        // Measured here, while this thread polls: a pong's arrival is timed when it is
        // handled, and nothing else would handle it promptly before the first receive.
        engine.with_router(|r, out| r.start_clock(out));
        engine.wait_for(Some(Instant::now() + CLOCK_WAIT), |st| {
            st.router.clock_edges_done().then_some(())
        });
        let status = opts
            .monitor_status
            .clone()
            .map(|p| StatusThread::start(&engine, p, opts.monitor_period));
        Ok(Network {
            status,
            _gateways: gateways,
            any: AnyStream {
                engine: engine.clone(),
                last: Arc::new(AtomicU32::new(0)),
            },
            engine,
            topology,
            handles: Mutex::new(handles),
            next_stream: AtomicU32::new(FIRST_USER_STREAM),
            sockdir: Some(sockdir),
            startup: t0.elapsed(),
            down: false,
            trace: trace_dir.map(|dir| TraceDump {
                dir,
                node: root.id,
                role: "front-end".into(),
            }),
        })
    }

    /// Time from `Network::new` to every back-end reporting ready.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    pub fn num_backends(&self) -> usize {
        self.topology.num_backends()
    }

    /// Every back-end.
    pub fn broadcast_communicator(&self) -> Communicator {
        Communicator {
            ranks: (0..self.num_backends() as u32).collect(),
        }
    }

    /// A communicator over some back-ends.
    pub fn communicator(&self, ranks: &[u32]) -> Result<Communicator> {
        let mut r = ranks.to_vec();
        r.sort_unstable();
        r.dedup();
        if r.is_empty() {
            return Err(TbonError::BadCommunicator("no back-ends given".into()));
        }
        if let Some(bad) = r.iter().find(|&&x| x as usize >= self.num_backends()) {
            return Err(TbonError::BadCommunicator(format!(
                "rank {bad} does not exist (the network has {} back-ends)",
                self.num_backends()
            )));
        }
        Ok(Communicator { ranks: r })
    }

    /// Opens a stream to `comm` with filter options.
    pub fn open_stream(&self, comm: &Communicator, opts: StreamOptions) -> Result<Stream> {
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let msg = StreamOpenMsg {
            id,
            members: comm.ranks.clone(),
            up: opts.up.clone(),
            sync: opts.sync.clone(),
            down: opts.down.clone(),
            latest: opts.latest,
            update: false,
            up_backend: opts.up_backend.clone(),
            up_frontend: opts.up_frontend.clone(),
            per_node: opts.per_node.clone(),
            wave_deadline_ms: opts
                .wave_deadline
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)),
        };
        self.engine.with_router(|r, out| r.open_stream(msg, out))?;
        Ok(Stream {
            engine: self.engine.clone(),
            id,
            members: comm.ranks.len(),
        })
    }

    /// Another handle on the open stream `id` (MRNet's `get_Stream`), e.g. to answer on
    /// the stream a [`Network::recv_any`] result came from.
    pub fn stream(&self, id: u32) -> Result<Stream> {
        let members = self
            .engine
            .lock()
            .router
            .stream_open(id)
            .map(|m| m.members.len());
        let members = members.ok_or(TbonError::NoStream(id))?;
        Ok(Stream {
            engine: self.engine.clone(),
            id,
            members,
        })
    }

    /// The next result on any stream (MRNet's `Network::recv`); see [`AnyStream::recv`].
    pub fn recv_any(&self, timeout: Option<Duration>) -> Result<Option<(u32, Result<Packet>)>> {
        self.any.recv(timeout)
    }

    /// A handle that receives from any stream without borrowing the network, so that
    /// one thread may wait in it while others use the network (or shut it down).
    pub fn any_stream(&self) -> AnyStream {
        self.any.clone()
    }

    /// A descriptor that is readable while [`Network::recv_any`] (`stream` None) or
    /// stream `stream`'s receive would return at once (MRNet's
    /// `get_DataNotificationFd`), for a program that waits in `select`, `poll` or an
    /// event loop. It stays readable until the results are received (no clearing step),
    /// and becomes readable at shutdown. Asking starts a thread that makes progress
    /// while the program is outside vargr. The descriptor belongs to the network: do not
    /// read or close it; it is closed when the network is dropped.
    pub fn notification_fd(&self, stream: Option<u32>) -> Result<std::os::fd::RawFd> {
        let watch = match stream {
            None => Watch::AnyStream,
            Some(id) => {
                if self.engine.lock().router.stream_open(id).is_none() {
                    return Err(TbonError::NoStream(id));
                }
                Watch::Stream(id)
            }
        };
        self.engine
            .notification_fd(watch)
            .map_err(|e| TbonError::Net(format!("making a notification descriptor: {e}")))
    }

    /// Changes of the tree from now on, one at a time (see [`TreeEvents`]): what
    /// topology-change callbacks are built on.
    pub fn tree_events(&self) -> TreeEvents {
        let seen = self.engine.lock().router.deliveries().events.len();
        TreeEvents {
            engine: Arc::downgrade(&self.engine),
            seen,
        }
    }

    /// Process ids of the front-end's direct children (commnodes or back-ends started as
    /// local or remote-shell processes; empty for the threads launcher).
    pub fn child_pids(&self) -> Vec<u32> {
        let handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        handles
            .iter()
            .filter_map(|h| match h {
                ChildHandle::Process(_, c) => Some(c.id()),
                ChildHandle::Thread(..) => None,
            })
            .collect()
    }

    /// Pulls every node's collectors through the tree (the monitor plane, see
    /// [`crate::monitor`]): each node selects and reduces its records with `scope`,
    /// sub-trees answer within `budget`, and nodes that could not are listed as missing.
    pub fn pull(
        &self,
        scope: &vargr_trace::scope::Scope,
        budget: Duration,
    ) -> crate::monitor::Pulled {
        pull_on(&self.engine, scope, budget)
    }

    /// Publishes version `version` of observed element `element` (PATHS' last-observe):
    /// back-ends waiting in [`crate::Backend::observe_newer`] get it through the caches of the
    /// nodes above them. Versions only grow: [`TbonError::ObserveStale`] otherwise.
    pub fn publish(&self, element: u32, version: u64, value: &[u8]) -> Result<()> {
        crate::observe::publish(&self.engine, element, version, value)
    }

    /// Waits for a value of `element` newer than `have` at the front-end (one a
    /// back-end published, or this front-end's own).
    pub fn observe_newer(
        &self,
        element: u32,
        have: Option<u64>,
        timeout: Duration,
    ) -> Result<(u64, bytes::Bytes)> {
        crate::observe::observe_newer(&self.engine, element, have, timeout)
    }

    /// The clock alignment of every node that reported one so far (the front-end's is
    /// [`Alignment::ROOT`]): `local = front-end + offset_ns`, within `error_ns`.
    /// Alignments travel up a level at a time after start-up; see
    /// [`Network::wait_clock_alignment`].
    pub fn clock_alignment(&self) -> BTreeMap<u32, Alignment> {
        self.engine.lock().router.clock_reports().clone()
    }

    /// Like [`Network::clock_alignment`], first waiting up to `timeout` until every node
    /// of the topology has reported.
    pub fn wait_clock_alignment(&self, timeout: Duration) -> BTreeMap<u32, Alignment> {
        let n = self.topology.len();
        self.engine.wait_for(Some(Instant::now() + timeout), |st| {
            (st.router.clock_reports().len() >= n).then_some(())
        });
        self.clock_alignment()
    }

    /// Changes of the tree so far (nodes lost, orphans adopted, waves that went without
    /// some back-ends), oldest first; see [`crate::recovery`].
    pub fn events(&self) -> Vec<crate::TreeEvent> {
        self.engine.lock().router.deliveries().events.clone()
    }

    /// Faults seen so far (lost nodes, failed filters), oldest first.
    pub fn faults(&self) -> Vec<TbonError> {
        self.engine.lock().router.deliveries().faults.clone()
    }

    /// Shuts the tree down: every node is told to stop, confirms, and exits; stragglers
    /// are killed after a grace period.
    pub fn shutdown(mut self) -> Result<()> {
        self.shutdown_inner()
    }

    fn shutdown_inner(&mut self) -> Result<()> {
        if self.down {
            return Ok(());
        }
        self.down = true;
        if let Some(s) = self.status.take() {
            s.stop();
        }
        self.engine.with_router(|r, out| r.begin_shutdown(out));
        let deadline = Instant::now() + Duration::from_secs(5);
        let clean = self
            .engine
            .wait_for(Some(deadline), |st| st.router.children_done().then_some(()));
        let handles = std::mem::take(&mut *self.handles.lock().unwrap_or_else(|p| p.into_inner()));
        finish_children(handles);
        // Whether or not every child confirmed, streams still receiving must end.
        self.engine.close_deliveries();
        if let Some(d) = self.sockdir.take() {
            let _ = std::fs::remove_dir_all(d);
        }
        // Last, so that nodes running as threads of this process are in it too.
        let traced = self.trace.take().map(|d| d.write()).transpose();
        match (clean, traced) {
            (None, Err(e)) => {
                tracing::warn!("shutdown: {e}");
                Err(TbonError::Timeout(5000))
            }
            (None, Ok(_)) => Err(TbonError::Timeout(5000)),
            (Some(()), Err(e)) => Err(e.into()),
            (Some(()), Ok(_)) => Ok(()),
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Nobody sees the result of an implicit shutdown: say when the trace is lost.
        if let Err(e @ TbonError::Trace(_)) = self.shutdown_inner() {
            tracing::warn!("shutdown: {e}");
        }
    }
}

/// Binds and starts the attach-mode rendezvous next to the front-end.
fn start_rendezvous(
    topology: &Topology,
    config: &RunConfig,
    secret: &Secret,
    spec: &AttachSpec,
) -> Result<Rendezvous> {
    let bind = match crate::spawn::listen_addr(0, config) {
        vargr_net::Addr::Unix(p) => vargr_net::Addr::Unix(p.with_file_name("rendezvous.sock")),
        a => a,
    };
    let listener = vargr_net::Listener::bind(&bind)?;
    let addr = crate::spawn::advertised(listener.local_addr()?, config);
    let rv = Rendezvous::start(
        listener,
        addr,
        topology,
        secret.clone(),
        Duration::from_millis(config.startup_timeout_ms),
    );
    if let Some(path) = &spec.file {
        rv.write_file(path, secret)?;
    }
    Ok(rv)
}

/// Runs the attach spec's launch command, if any, with the rendezvous in its environment.
fn launch_backends(
    rv: &Rendezvous,
    secret: &Secret,
    spec: &AttachSpec,
    topology: &Topology,
) -> Result<Option<ChildHandle>> {
    let Some(words) = &spec.launch else {
        return Ok(None);
    };
    let n = topology.num_backends().to_string();
    let words: Vec<String> = words.iter().map(|w| w.replace("{n}", &n)).collect();
    let Some((program, args)) = words.split_first() else {
        return Err(TbonError::Config(
            "the attach launch command is empty".into(),
        ));
    };
    let spec = ChildSpec {
        node: u32::MAX,
        host: "localhost".into(),
        program: program.clone(),
        args: args.to_vec(),
        env: vec![
            ("VARGR_RENDEZVOUS".into(), rv.addr().to_string()),
            ("VARGR_SECRET".into(), secret.to_hex()),
        ],
        stdin: false,
        capture_output: false,
    };
    let child = vargr_net::launch::spawn(&Launcher::Local, &spec)?;
    Ok(Some(ChildHandle::Process(u32::MAX, child)))
}

/// The prefix of the socket directories of the network started by process `pid`, in
/// the runtime directory.
pub fn sockdir_prefix(pid: u32) -> String {
    format!("tree-{pid}-")
}

/// A new private directory for this network's Unix sockets, in the user's runtime
/// directory (never the shared temporary directory, where another user could plant a
/// socket or a link in advance).
fn make_sockdir(runtime_dir: &std::path::Path) -> Result<PathBuf> {
    let mut r = [0u8; 6];
    getrandom::getrandom(&mut r).map_err(|e| TbonError::Startup(e.to_string()))?;
    let name: String = r.iter().map(|b| format!("{b:02x}")).collect();
    let base =
        vargr_net::runtime_dir::RuntimeDir::open(runtime_dir).map_err(vargr_net::NetError::from)?;
    let name = format!("{}{name}", sockdir_prefix(std::process::id()));
    // Must be new: a directory already there is someone else's doing.
    let dir = base.join(&name);
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| TbonError::Startup(format!("creating {}: {e}", dir.display())))?;
    Ok(dir)
}

/// The front-end's results on every stream ([`Network::any_stream`]). Cheap to clone.
#[derive(Clone)]
pub struct AnyStream {
    engine: Arc<Engine>,
    /// The stream served last: the next search starts after it.
    last: Arc<AtomicU32>,
}

impl AnyStream {
    /// The next result on any stream: `Ok(Some((stream, result)))`, where the result is
    /// a filtered wave or that stream's error; `Ok(None)` after `timeout` (None: wait
    /// for ever); `Err` once the network is shut down. Streams with results are served
    /// in turn (round robin by id), so a busy stream cannot starve a quiet one.
    pub fn recv(&self, timeout: Option<Duration>) -> Result<Option<(u32, Result<Packet>)>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let got = self.engine.wait_for(deadline, |st| {
            let d = st.router.deliveries_mut();
            let last = self.last.load(Ordering::Relaxed);
            let ready = d
                .streams
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(&id, _)| id);
            // The smallest id after the last one served, else the smallest of all.
            let pick = ready
                .min_by_key(|&id| (id <= last, id))
                .and_then(|id| Some((id, d.streams.get_mut(&id)?.pop_front()?)));
            if let Some((id, r)) = pick {
                self.last.store(id, Ordering::Relaxed);
                return Some(Ok((id, r)));
            }
            d.closed.clone().map(Err)
        });
        got.transpose()
    }
}

/// Changes of the tree as they happen ([`Network::tree_events`]). It does not keep the
/// network alive, and may be moved to a thread of its own: waiting in
/// [`TreeEvents::next_timeout`] also makes progress, so faults are noticed while the
/// rest of the program is busy elsewhere.
pub struct TreeEvents {
    engine: std::sync::Weak<Engine>,
    seen: usize,
}

impl TreeEvents {
    /// The next change of the tree: `Ok(None)` when none came within `timeout`;
    /// `Err` once the network is shut down (after every event before it) or dropped.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<crate::TreeEvent>> {
        let Some(engine) = self.engine.upgrade() else {
            return Err(TbonError::Shutdown);
        };
        let seen = self.seen;
        let got = engine.wait_for(Some(Instant::now() + timeout), |st| {
            let d = st.router.deliveries();
            if let Some(e) = d.events.get(seen) {
                return Some(Ok(e.clone()));
            }
            d.closed.clone().map(Err)
        });
        match got {
            Some(Ok(e)) => {
                self.seen += 1;
                Ok(Some(e))
            }
            Some(Err(e)) => Err(e),
            None => Ok(None),
        }
    }
}

/// Which of a stream's filters [`Stream::set_filter`] changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterRole {
    /// The transformation filter of the waves going up.
    Up,
    /// The synchronization filter (spec: `all`, `dontwait`, `timeout:250ms`).
    Sync,
    /// The transformation filter of the multicasts going down (spec `""`: none).
    Down,
}

/// A logical channel between the front-end and a communicator's back-ends.
pub struct Stream {
    engine: Arc<Engine>,
    id: u32,
    members: usize,
}

impl Stream {
    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn num_members(&self) -> usize {
        self.members
    }

    /// Multicasts values to every back-end of the stream.
    pub fn send(&self, tag: i32, format: &str, values: Vec<Value>) -> Result<()> {
        let p = Packet::new(self.id, tag, format, values)?;
        self.send_packet(p)
    }

    pub fn send_packet(&self, mut p: Packet) -> Result<()> {
        p.stream = self.id;
        self.engine.with_router(|r, out| r.send_down(p, out))?;
        // Backpressure: wait while any child link is over its limit. If the tree is held
        // back by this front-end's own unread results for long, waiting would never end
        // (nobody reads them while we send): say so instead of hanging.
        let started = Instant::now();
        let stuck_after = Duration::from_secs(2);
        self.engine
            .wait_for(None, |st| {
                let limit = st.queue_limit;
                let over = st.router.down_backed_up(|l| Engine::backlog(st, l), limit);
                if !over {
                    return Some(Ok(()));
                }
                let own_full = st.router.results_backed_up(limit);
                if own_full && started.elapsed() > stuck_after {
                    return Some(Err(TbonError::Backpressure(format!(
                        "sending on stream {} is blocked because results are not being received \
                         (more than {} waves wait unread): receive, or raise queue_limit",
                        self.id,
                        limit / 1024
                    ))));
                }
                None
            })
            .unwrap_or(Ok(()))
    }

    /// Replaces one of the stream's filters at every node (MRNet's
    /// `set_FilterParameters`): `spec` is a filter spec such as `histogram:0,100,10`, a
    /// sync mode, or for [`FilterRole::Down`] `""` to remove the down filter. The
    /// front-end makes the filter before anything changes, so a bad spec fails here and
    /// changes nothing (a plugin missing on some host is reported as a fault). The change
    /// travels down with the multicasts, so it applies from the next one on; a changed
    /// transformation filter starts with fresh state.
    pub fn set_filter(&self, role: FilterRole, spec: &str) -> Result<()> {
        self.engine.with_router(|r, out| {
            let mut msg = r
                .stream_open(self.id)
                .cloned()
                .ok_or(TbonError::NoStream(self.id))?;
            match role {
                FilterRole::Up => msg.up = spec.to_string(),
                FilterRole::Sync => msg.sync = spec.to_string(),
                FilterRole::Down => msg.down = (!spec.is_empty()).then(|| spec.to_string()),
            }
            msg.update = true;
            r.open_stream(msg, out)
        })
    }

    /// A descriptor readable while this stream's receive would return at once (MRNet's
    /// `Stream::get_DataNotificationFd`); see [`Network::notification_fd`].
    pub fn notification_fd(&self) -> Result<std::os::fd::RawFd> {
        self.engine
            .notification_fd(Watch::Stream(self.id))
            .map_err(|e| TbonError::Net(format!("making a notification descriptor: {e}")))
    }

    /// The stream's current filter spec of `role` (`""`: no down filter).
    pub fn filter(&self, role: FilterRole) -> Result<String> {
        let g = self.engine.lock();
        let msg = g
            .router
            .stream_open(self.id)
            .ok_or(TbonError::NoStream(self.id))?;
        Ok(match role {
            FilterRole::Up => msg.up.clone(),
            FilterRole::Sync => msg.sync.clone(),
            FilterRole::Down => msg.down.clone().unwrap_or_default(),
        })
    }

    /// Waits for the next result on this stream (a filtered wave, or an error naming a
    /// lost node or failed filter).
    pub fn recv(&self) -> Result<Packet> {
        match self.recv_until(None) {
            Some(r) => r,
            None => Err(TbonError::Shutdown),
        }
    }

    /// Like [`Stream::recv`], giving up after `timeout` with `Ok(None)`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Option<Packet>> {
        self.recv_until(Some(Instant::now() + timeout))
            .map_or(Ok(None), |r| r.map(Some))
    }

    fn recv_until(&self, deadline: Option<Instant>) -> Option<Result<Packet>> {
        let id = self.id;
        self.engine.wait_for(deadline, |st| {
            let d = st.router.deliveries_mut();
            if let Some(r) = d.streams.get_mut(&id).and_then(|q| q.pop_front()) {
                return Some(r);
            }
            d.closed.clone().map(Err)
        })
    }
}
