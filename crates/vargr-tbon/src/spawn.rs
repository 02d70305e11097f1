//! Instantiation: every node starts its own children, hands them their sub-tree and
//! waits until each sub-tree reports the back-ends it reaches (MRNet's recursive start).

use std::process::Child;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vargr_net::auth::{self, Secret};
use vargr_net::gate::{Gate, GateConfig};
use vargr_net::launch::{self, ChildSpec, Launcher};
use vargr_net::{Addr, LinkSecurity, Listener, Reactor, ReactorEvent, SecureConn};
use vargr_topo::Topology;
use vargr_wire::{Frame, FrameKind};

use crate::node::ChildInfo;
use crate::out::frame_bytes;
use crate::proto::{self, Ancestor, ReadyMsg, RunConfig, SubtreeMsg};
use crate::{Backend, TbonError};

/// A back-end body run as a thread by the in-process launcher.
pub type BackendFn = Arc<dyn Fn(Backend) + Send + Sync>;

/// How a node starts its children.
#[derive(Clone)]
pub enum Spawner {
    Processes(Launcher),
    Threads(BackendFn),
}

/// How long an attaching back-end waits for the rendezvous to place it.
const ATTACH_WAIT: Duration = Duration::from_secs(120);

/// What a node needs to join its parent.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    pub parent: Addr,
    pub node: u32,
    pub secret: Secret,
}

impl Bootstrap {
    /// Reads `VARGR_PARENT`, `VARGR_NODE` and the secret, as set by a vargr parent.
    /// Without `VARGR_PARENT` but with `VARGR_RENDEZVOUS`, attaches instead: the rank
    /// comes from the launcher's variables (see [`vargr_net::wireup::RANK_VARIABLES`]).
    pub fn from_env() -> Result<Bootstrap, TbonError> {
        if std::env::var_os("VARGR_PARENT").is_none() {
            if let Ok(spec) = std::env::var("VARGR_RENDEZVOUS") {
                let rv = vargr_net::wireup::resolve_rendezvous(&spec)?;
                let rank = vargr_net::wireup::rank_from_env()?;
                return crate::rendezvous::attach(&rv.addr, &rv.secret, rank, ATTACH_WAIT);
            }
        }
        let get = |k: &str| {
            std::env::var(k).map_err(|_| TbonError::Config(format!("{k} is not set: this program must be started by a vargr network (or use attach mode)")))
        };
        let parent: Addr = get("VARGR_PARENT")?.parse()?;
        let node = get("VARGR_NODE")?
            .parse()
            .map_err(|_| TbonError::Config("VARGR_NODE is not a number".into()))?;
        let secret = launch::secret_from_env()?;
        Ok(Bootstrap {
            parent,
            node,
            secret,
        })
    }
}

pub enum ChildHandle {
    Process(u32, Child),
    Thread(u32, JoinHandle<()>),
}

impl ChildHandle {
    /// The node this child runs.
    pub fn node(&self) -> u32 {
        match self {
            ChildHandle::Process(n, _) | ChildHandle::Thread(n, _) => *n,
        }
    }

    /// Waits up to `grace` for the child to exit, then kills it.
    pub fn finish(self, grace: Duration) {
        match self {
            ChildHandle::Process(_, mut c) => {
                let deadline = Instant::now() + grace;
                loop {
                    match c.try_wait() {
                        Ok(Some(_)) => return,
                        Ok(None) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(2))
                        }
                        _ => {
                            let _ = c.kill();
                            let _ = c.wait();
                            return;
                        }
                    }
                }
            }
            ChildHandle::Thread(_, h) => {
                let deadline = Instant::now() + grace;
                while !h.is_finished() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(2));
                }
                if h.is_finished() {
                    let _ = h.join();
                }
            }
        }
    }
}

/// Once joined, with recovery on and an ancestor beyond the parent, a local child
/// process stops dying with its parent ([`launch::spawn`] ties it): it may now be
/// adopted. Until then (start-up) it dies with it, as it has nowhere to go; the front-
/// end's own children stay tied, so a killed front-end still takes the tree down.
pub(crate) fn untie_if_adoptable(msg: &SubtreeMsg) -> bool {
    if msg.config.recovery != crate::Recovery::Ancestor
        || msg.ancestors.len() < 2
        || crate::trace::in_process()
    {
        return false;
    }
    untie_this_thread();
    true
}

/// Clears the parent-death signal of the calling thread (Linux keeps it per thread:
/// the process's first thread carries the one the launcher set).
pub(crate) fn untie_this_thread() {
    // SAFETY: prctl(PR_SET_PDEATHSIG, 0) changes only this thread's death signal.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, 0);
    }
}

/// Joins the parent: connect, authenticate, receive the sub-tree.
pub fn join_parent(
    boot: &Bootstrap,
    timeout: Duration,
) -> Result<(SecureConn, SubtreeMsg), TbonError> {
    let peer = boot.parent.to_string();
    let conn = vargr_net::connect(&boot.parent, timeout)?;
    let mut conn = auth::connect(
        conn,
        &boot.secret,
        boot.node,
        LinkSecurity::Auto,
        timeout,
        &peer,
    )?;
    conn.set_timeout(Some(timeout));
    let f = conn.read_frame(64 << 20)?;
    if f.kind != FrameKind::Subtree {
        return Err(TbonError::Startup(format!(
            "expected the sub-tree from {peer}, got {}",
            f.kind.name()
        )));
    }
    let msg: SubtreeMsg = proto::from_json("Subtree", &f.payload)?;
    Ok((conn, msg))
}

pub(crate) fn listen_addr(me: u32, config: &RunConfig) -> Addr {
    match config.transport.as_str() {
        "tcp" => Addr::Tcp(if config.remote_template.is_some() {
            "0.0.0.0:0".into()
        } else {
            "127.0.0.1:0".into()
        }),
        _ => Addr::Unix(std::path::Path::new(&config.sockdir).join(format!("n{me}.sock"))),
    }
}

/// Where children reach a node's listener: by host name when they may be on other hosts.
pub(crate) fn advertised(addr: Addr, config: &RunConfig) -> Addr {
    if config.remote_template.is_some() {
        addr.advertised()
    } else {
        addr
    }
}

/// An internal node's listener, kept open after start-up for orphans (recovery on).
pub struct Adopter {
    pub gate: Gate,
    /// This node as its descendants know it.
    pub me: Ancestor,
    pub max_frame: usize,
}

/// What [`start_children`] leaves running.
pub struct Started {
    /// In topology order.
    pub children: Vec<ChildInfo>,
    pub handles: Vec<ChildHandle>,
    pub adopter: Option<Adopter>,
}

/// Starts, authenticates and initialises every child of node `me`, adding their links
/// to `reactor`. Returns once each sub-tree is ready. `ancestors` are `me`'s, parent
/// first; the children learn them (and `me`) for adoption.
pub fn start_children(
    me: u32,
    topo: &Topology,
    config: &RunConfig,
    secret: &Secret,
    spawner: &Spawner,
    reactor: &mut Reactor,
    ancestors: &[Ancestor],
) -> Result<Started, TbonError> {
    let node = topo
        .node(me)
        .ok_or_else(|| TbonError::Startup(format!("node {me} is not in its own sub-tree")))?;
    if node.children.is_empty() {
        return Ok(Started {
            children: Vec::new(),
            handles: Vec::new(),
            adopter: None,
        });
    }
    let timeout = Duration::from_millis(config.startup_timeout_ms);
    let listener = Listener::bind(&listen_addr(me, config))?;
    let addr = advertised(listener.local_addr()?, config);
    let gate = Gate::open(
        listener,
        secret.clone(),
        GateConfig {
            deadline: timeout,
            security: config.link_security,
            ..GateConfig::default()
        },
        Box::new(move |e| tracing::warn!(node = me, "refused a connection: {e}")),
    );
    let startup = Startup {
        me,
        node,
        topo,
        config,
        secret,
        addr,
        timeout,
        deadline: Instant::now() + timeout,
    };
    let me_ancestor = Ancestor {
        node: me,
        host: node.host.clone(),
        addr: startup.addr.to_string(),
    };
    let mut handles = Vec::new();
    let started = startup
        .launch(spawner, &mut handles)
        .and_then(|attaching| startup.accept(&gate, attaching, &mut handles))
        .and_then(|conns| startup.hand_subtrees(conns, &me_ancestor, ancestors, reactor))
        .and_then(|mut children| {
            startup.await_ready(reactor, &mut children)?;
            Ok(children)
        });
    let mut children = match started {
        Ok(c) => c,
        Err(e) => {
            for h in handles {
                h.finish(Duration::ZERO);
            }
            return Err(e);
        }
    };
    // Order children as the topology does, so routing is deterministic.
    children.sort_by_key(|c| node.children.iter().position(|&x| x == c.node));
    let adopter = (config.recovery == crate::Recovery::Ancestor).then_some(Adopter {
        gate,
        me: me_ancestor,
        max_frame: config.max_frame,
    });
    Ok(Started {
        children,
        handles,
        adopter,
    })
}

/// What every step of starting a node's children shares.
struct Startup<'a> {
    me: u32,
    node: &'a vargr_topo::Node,
    topo: &'a Topology,
    config: &'a RunConfig,
    secret: &'a Secret,
    /// Where the children reach this node.
    addr: Addr,
    timeout: Duration,
    /// When start-up as a whole gives up.
    deadline: Instant,
}

impl Startup<'_> {
    /// Starts every child this node starts itself (processes or threads), pushing each
    /// onto `handles`. Returns whether some back-ends attach instead (started by another
    /// launcher, they find this node through the rendezvous, where it is registered).
    fn launch(&self, spawner: &Spawner, handles: &mut Vec<ChildHandle>) -> Result<bool, TbonError> {
        let mut attaching = false;
        for &cid in &self.node.children {
            let child = self.topo.node(cid).expect("children are in the topology");
            let is_leaf = child.children.is_empty();
            if is_leaf && self.config.attach.is_some() {
                attaching = true;
                continue;
            }
            handles.push(self.spawn(cid, &child.host, is_leaf, spawner)?);
        }
        if let (true, Some(rv)) = (attaching, &self.config.attach) {
            let rv = rv.parse()?;
            crate::rendezvous::register_parent(
                &rv,
                self.secret,
                self.me,
                &self.addr,
                self.timeout,
            )?;
        }
        Ok(attaching)
    }

    /// Starts child `cid`: a process through the launcher, or a thread of this process.
    fn spawn(
        &self,
        cid: u32,
        host: &str,
        is_leaf: bool,
        spawner: &Spawner,
    ) -> Result<ChildHandle, TbonError> {
        let config = self.config;
        match spawner {
            Spawner::Processes(launcher) => {
                let (program, args) = if is_leaf {
                    (config.backend_program.clone(), config.backend_args.clone())
                } else {
                    (
                        config.commnode_program.clone(),
                        vec!["commnode".to_string()],
                    )
                };
                let spec = ChildSpec {
                    node: cid,
                    host: host.to_string(),
                    program,
                    args,
                    env: vec![
                        ("VARGR_PARENT".into(), self.addr.to_string()),
                        ("VARGR_NODE".into(), cid.to_string()),
                        ("VARGR_SECRET".into(), self.secret.to_hex()),
                    ],
                    stdin: false,
                    capture_output: false,
                };
                Ok(ChildHandle::Process(cid, launch::spawn(launcher, &spec)?))
            }
            Spawner::Threads(body) => {
                let boot = Bootstrap {
                    parent: self.addr.clone(),
                    node: cid,
                    secret: self.secret.clone(),
                };
                let spawner = spawner.clone();
                let body = body.clone();
                std::thread::Builder::new()
                    .name(format!("vargr-node-{cid}"))
                    .spawn(move || {
                        crate::trace::mark_in_process();
                        if is_leaf {
                            match Backend::join(boot) {
                                Ok(be) => body(be),
                                Err(e) => tracing::error!(node = cid, "back-end: {e}"),
                            }
                        } else if let Err(e) = crate::commnode::run(boot, spawner) {
                            tracing::error!(node = cid, "commnode: {e}");
                        }
                    })
                    .map(|h| ChildHandle::Thread(cid, h))
                    .map_err(|e| TbonError::Startup(format!("spawning thread for node {cid}: {e}")))
            }
        }
    }

    /// Accepts and authenticates every child, in whatever order they arrive.
    fn accept(
        &self,
        gate: &Gate,
        attaching: bool,
        handles: &mut [ChildHandle],
    ) -> Result<Vec<(u32, SecureConn)>, TbonError> {
        let mut pending: Vec<u32> = self.node.children.clone();
        let mut conns = Vec::new();
        while !pending.is_empty() {
            let now = Instant::now();
            if now >= self.deadline {
                return Err(self.never_connected(&pending, attaching));
            }
            if let Some(e) = exited_early(handles, &pending, self.topo) {
                return Err(e);
            }
            let wait = (self.deadline - now).min(Duration::from_millis(100));
            let (id, conn) = match gate.accept_timeout(wait) {
                Ok(a) => (a.node, a.conn),
                Err(vargr_net::NetError::Timeout { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            match pending.iter().position(|&p| p == id) {
                Some(i) => {
                    pending.swap_remove(i);
                    conns.push((id, conn));
                }
                None => tracing::warn!(
                    node = self.me,
                    claimed = id,
                    "dropped a connection claiming to be a node that is not a child"
                ),
            }
        }
        Ok(conns)
    }

    /// The error for children still `pending` at the deadline.
    fn never_connected(&self, pending: &[u32], attaching: bool) -> TbonError {
        let me = self.me;
        if attaching {
            let mut ranks: Vec<u32> = pending
                .iter()
                .filter_map(|&n| self.topo.node(n).and_then(|n| n.backend_rank))
                .collect();
            ranks.sort_unstable();
            TbonError::Startup(format!(
                "node {me}: back-ends {} never attached within {} s (were they started, with VARGR_RENDEZVOUS set?)",
                crate::fmt_ranks(&ranks),
                self.timeout.as_secs()
            ))
        } else {
            TbonError::Startup(format!(
                "node {me}: {} children never connected (first: node {} on {})",
                pending.len(),
                pending[0],
                host_of(self.topo, pending[0])
            ))
        }
    }

    /// Hands each child its sub-tree and this node's ancestry, and makes its connection a
    /// link of `reactor` with the stages the link policy gives it.
    fn hand_subtrees(
        &self,
        conns: Vec<(u32, SecureConn)>,
        me_ancestor: &Ancestor,
        ancestors: &[Ancestor],
        reactor: &mut Reactor,
    ) -> Result<Vec<ChildInfo>, TbonError> {
        let (me, config) = (self.me, self.config);
        let child_ancestors: Vec<Ancestor> = std::iter::once(me_ancestor.clone())
            .chain(ancestors.iter().cloned())
            .collect();
        // Made once for all children; checked by `validate` at the front-end.
        let policy = config
            .link_stages
            .policy(config.max_frame)
            .map_err(|e| TbonError::Startup(format!("node {me}: {e}")))?;
        let mut children = Vec::new();
        for (id, mut conn) in conns {
            let host = host_of(self.topo, id);
            let msg = SubtreeMsg {
                topology: self
                    .topo
                    .subtree(id)
                    .expect("child ids come from the topology"),
                config: config.clone(),
                parent_host: self.node.host.clone(),
                ancestors: child_ancestors.clone(),
            };
            conn.write_frame(&Frame::new(FrameKind::Subtree, 0, 0, proto::to_json(&msg)))?;
            let link = conn
                .into_link(format!("node {id} on {host}"), config.max_frame)
                .map_err(|e| TbonError::Startup(format!("node {id}: {e}")))?;
            let stages = config
                .link_stages
                .chain_by(&policy, &self.node.host, &host, id, seed(me, id))
                .map_err(|e| TbonError::Startup(format!("node {me}: {e}")))?;
            let link = reactor
                .add(link.with_stages(stages))
                .map_err(|e| TbonError::Startup(format!("registering node {id}: {e}")))?;
            children.push(ChildInfo::new(link, id, host, Vec::new()));
        }
        Ok(children)
    }

    /// Waits until every child's sub-tree reports ready, recording its back-ends.
    fn await_ready(
        &self,
        reactor: &mut Reactor,
        children: &mut [ChildInfo],
    ) -> Result<(), TbonError> {
        let me = self.me;
        let mut ready = 0;
        let mut events = Vec::new();
        // A sub-tree that is ready runs its own router, which takes a parent silent for
        // the heartbeat time-out for dead: beat to it while the others are still coming up.
        let beat = Duration::from_millis((self.config.heartbeat_ms / 2).max(1));
        let mut beaten = Instant::now();
        while ready < children.len() {
            let now = Instant::now();
            if now >= beaten + beat {
                for c in children.iter().filter(|c| !c.backends.is_empty()) {
                    reactor.send(c.link, frame_bytes(FrameKind::Heartbeat, 0, 0, &[]));
                }
                reactor.flush_all();
                beaten = now;
            }
            if now >= self.deadline {
                let missing: Vec<u32> = children
                    .iter()
                    .filter(|c| c.backends.is_empty())
                    .map(|c| c.node)
                    .collect();
                return Err(TbonError::Startup(format!(
                    "node {me}: sub-trees {missing:?} never reported ready"
                )));
            }
            reactor
                .poll(Some((self.deadline - now).min(beat)), &mut events)
                .map_err(|e| TbonError::Startup(format!("node {me}: poll: {e}")))?;
            for ev in events.drain(..) {
                if on_startup_event(ev, children)? {
                    ready += 1;
                }
            }
        }
        Ok(())
    }
}

/// One reactor event while children start: whether it made one more sub-tree ready; an
/// error for a child that refused or failed.
fn on_startup_event(ev: ReactorEvent, children: &mut [ChildInfo]) -> Result<bool, TbonError> {
    let who = |children: &[ChildInfo], link| {
        children
            .iter()
            .find(|c| c.link == link)
            .map(|c| format!("node {} on {}", c.node, c.host))
            .unwrap_or_default()
    };
    match ev {
        ReactorEvent::Frame(link, f) if f.kind == FrameKind::Ready => {
            let msg: ReadyMsg = proto::from_json("Ready", &f.payload)?;
            let Some(c) = children.iter_mut().find(|c| c.link == link) else {
                return Ok(false);
            };
            let first = c.backends.is_empty();
            c.backends = msg.backends;
            c.backends.sort_unstable();
            Ok(first)
        }
        ReactorEvent::Frame(link, f) if f.kind == FrameKind::Refused => {
            let why = String::from_utf8_lossy(&f.payload).into_owned();
            Err(TbonError::Startup(format!(
                "{} failed to start its sub-tree: {why}",
                who(children, link)
            )))
        }
        ReactorEvent::Frame(..) | ReactorEvent::Woken => Ok(false),
        ReactorEvent::Closed(link, err) => {
            let why = err
                .map(|e| e.to_string())
                .unwrap_or_else(|| "it closed its connection".into());
            Err(TbonError::Startup(format!(
                "{} failed during start-up: {why}",
                who(children, link)
            )))
        }
    }
}

/// Jitter seed of the link from node `from` to node `to`: fixed, so runs repeat.
pub(crate) fn seed(from: u32, to: u32) -> u64 {
    (u64::from(from) << 32) | u64::from(to)
}

fn host_of(topo: &Topology, id: u32) -> String {
    topo.node(id)
        .map(|n| n.host.clone())
        .unwrap_or_else(|| "?".into())
}

fn exited_early(
    handles: &mut [ChildHandle],
    pending: &[u32],
    topo: &Topology,
) -> Option<TbonError> {
    for h in handles.iter_mut() {
        if let ChildHandle::Process(id, c) = h {
            if pending.contains(id) {
                if let Ok(Some(status)) = c.try_wait() {
                    return Some(TbonError::Startup(format!(
                        "node {id} on {} exited before connecting ({status})",
                        host_of(topo, *id)
                    )));
                }
            }
        }
    }
    None
}

/// Sends the Ready report for this sub-tree to the parent.
pub fn ready_frame(node: u32, backends: Vec<u32>) -> bytes::Bytes {
    frame_bytes(
        FrameKind::Ready,
        0,
        0,
        &proto::to_json(&ReadyMsg { node, backends }),
    )
}
