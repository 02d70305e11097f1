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
    /// comes from the launcher's variables (see [`vargr_net::job::RANK_VARIABLES`]).
    pub fn from_env() -> Result<Bootstrap, TbonError> {
        if std::env::var_os("VARGR_PARENT").is_none() {
            if let Ok(spec) = std::env::var("VARGR_RENDEZVOUS") {
                let rv = vargr_net::job::resolve_rendezvous(&spec)?;
                let rank = vargr_net::job::rank_from_env()?;
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
pub(crate) fn untie_if_adoptable(msg: &SubtreeMsg) {
    if msg.config.recovery != crate::Recovery::Ancestor
        || msg.ancestors.len() < 2
        || crate::trace::in_process()
    {
        return;
    }
    // SAFETY: prctl(PR_SET_PDEATHSIG, 0) changes only this process's death signal.
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
    let deadline = Instant::now() + timeout;
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

    let mut handles = Vec::new();
    let fail = |handles: Vec<ChildHandle>, e: TbonError| {
        for h in handles {
            h.finish(Duration::ZERO);
        }
        Err(e)
    };
    let mut attaching = false;
    for &cid in &node.children {
        let child = topo.node(cid).expect("children are in the topology");
        let is_leaf = child.children.is_empty();
        if is_leaf && config.attach.is_some() {
            // Started by another launcher; it finds us through the rendezvous.
            attaching = true;
            continue;
        }
        let handle = match spawner {
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
                    host: child.host.clone(),
                    program,
                    args,
                    env: vec![
                        ("VARGR_PARENT".into(), addr.to_string()),
                        ("VARGR_NODE".into(), cid.to_string()),
                        ("VARGR_SECRET".into(), secret.to_hex()),
                    ],
                };
                match launch::spawn(launcher, &spec) {
                    Ok(c) => ChildHandle::Process(cid, c),
                    Err(e) => return fail(handles, e.into()),
                }
            }
            Spawner::Threads(body) => {
                let boot = Bootstrap {
                    parent: addr.clone(),
                    node: cid,
                    secret: secret.clone(),
                };
                let spawner = spawner.clone();
                let body = body.clone();
                let h = std::thread::Builder::new()
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
                    .map_err(|e| {
                        TbonError::Startup(format!("spawning thread for node {cid}: {e}"))
                    });
                match h {
                    Ok(h) => ChildHandle::Thread(cid, h),
                    Err(e) => return fail(handles, e),
                }
            }
        };
        handles.push(handle);
    }

    if let (true, Some(rv)) = (attaching, &config.attach) {
        let registered = rv
            .parse()
            .map_err(TbonError::from)
            .and_then(|rv| crate::rendezvous::register_parent(&rv, secret, me, &addr, timeout));
        if let Err(e) = registered {
            return fail(handles, e);
        }
    }

    // Accept and authenticate every child, in whatever order they arrive.
    let mut pending: Vec<u32> = node.children.clone();
    let mut conns: Vec<(u32, SecureConn)> = Vec::new();
    while !pending.is_empty() {
        let now = Instant::now();
        if now >= deadline {
            let e = if attaching {
                let mut ranks: Vec<u32> = pending
                    .iter()
                    .filter_map(|&n| topo.node(n).and_then(|n| n.backend_rank))
                    .collect();
                ranks.sort_unstable();
                TbonError::Startup(format!(
                    "node {me}: back-ends {} never attached within {} s (were they started, with VARGR_RENDEZVOUS set?)",
                    crate::fmt_ranks(&ranks),
                    timeout.as_secs()
                ))
            } else {
                TbonError::Startup(format!(
                    "node {me}: {} children never connected (first: node {} on {})",
                    pending.len(),
                    pending[0],
                    host_of(topo, pending[0])
                ))
            };
            return fail(handles, e);
        }
        if let Some(e) = exited_early(&mut handles, &pending, topo) {
            return fail(handles, e);
        }
        let (id, conn) = match gate.accept_timeout((deadline - now).min(Duration::from_millis(100)))
        {
            Ok(a) => (a.node, a.conn),
            Err(vargr_net::NetError::Timeout { .. }) => continue,
            Err(e) => return fail(handles, e.into()),
        };
        match pending.iter().position(|&p| p == id) {
            Some(i) => {
                pending.swap_remove(i);
                conns.push((id, conn));
            }
            None => tracing::warn!(
                node = me,
                claimed = id,
                "dropped a connection claiming to be a node that is not a child"
            ),
        }
    }

    // Hand each child its sub-tree, then wait for all of them to report ready.
    let me_ancestor = Ancestor {
        node: me,
        host: node.host.clone(),
        addr: addr.to_string(),
    };
    let child_ancestors: Vec<Ancestor> = std::iter::once(me_ancestor.clone())
        .chain(ancestors.iter().cloned())
        .collect();
    let mut children = Vec::new();
    for (id, mut conn) in conns {
        let sub = topo.subtree(id).expect("child ids come from the topology");
        let msg = SubtreeMsg {
            topology: sub,
            config: config.clone(),
            parent_host: node.host.clone(),
            ancestors: child_ancestors.clone(),
        };
        let f = Frame::new(FrameKind::Subtree, 0, 0, proto::to_json(&msg));
        let peer = format!("node {id}");
        if let Err(e) = conn.write_frame(&f) {
            return fail(handles, e.into());
        }
        let link = match conn.into_link(
            format!("node {id} on {}", host_of(topo, id)),
            config.max_frame,
        ) {
            Ok(l) => l,
            Err(e) => return fail(handles, TbonError::Startup(format!("{peer}: {e}"))),
        };
        let stages = config.link_stages.chain(
            &node.host,
            &host_of(topo, id),
            seed(me, id),
            config.max_frame,
        );
        let link = match reactor.add(link.with_stages(stages)) {
            Ok(l) => l,
            Err(e) => {
                return fail(
                    handles,
                    TbonError::Startup(format!("registering node {id}: {e}")),
                )
            }
        };
        children.push(ChildInfo::new(link, id, host_of(topo, id), Vec::new()));
    }
    let mut ready = 0;
    let mut events = Vec::new();
    // A sub-tree that is ready runs its own router, which takes a parent silent for the
    // heartbeat time-out for dead: beat to it while the others are still coming up.
    let beat = Duration::from_millis((config.heartbeat_ms / 2).max(1));
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
        if now >= deadline {
            let missing: Vec<u32> = children
                .iter()
                .filter(|c| c.backends.is_empty())
                .map(|c| c.node)
                .collect();
            return fail(
                handles,
                TbonError::Startup(format!(
                    "node {me}: sub-trees {missing:?} never reported ready"
                )),
            );
        }
        if let Err(e) = reactor.poll(Some((deadline - now).min(beat)), &mut events) {
            return fail(handles, TbonError::Startup(format!("node {me}: poll: {e}")));
        }
        for ev in events.drain(..) {
            match ev {
                ReactorEvent::Frame(link, f) if f.kind == FrameKind::Ready => {
                    let msg: ReadyMsg = match proto::from_json("Ready", &f.payload) {
                        Ok(m) => m,
                        Err(e) => return fail(handles, e),
                    };
                    if let Some(c) = children.iter_mut().find(|c| c.link == link) {
                        if c.backends.is_empty() {
                            ready += 1;
                        }
                        c.backends = msg.backends;
                        c.backends.sort_unstable();
                    }
                }
                ReactorEvent::Frame(link, f) if f.kind == FrameKind::Refused => {
                    let who = children
                        .iter()
                        .find(|c| c.link == link)
                        .map(|c| format!("node {} on {}", c.node, c.host))
                        .unwrap_or_default();
                    let why = String::from_utf8_lossy(&f.payload).into_owned();
                    return fail(
                        handles,
                        TbonError::Startup(format!("{who} failed to start its sub-tree: {why}")),
                    );
                }
                ReactorEvent::Frame(..) | ReactorEvent::Woken => {}
                ReactorEvent::Closed(link, err) => {
                    let c = children.iter().find(|c| c.link == link);
                    let who = c
                        .map(|c| format!("node {} on {}", c.node, c.host))
                        .unwrap_or_default();
                    let why = err
                        .map(|e| e.to_string())
                        .unwrap_or_else(|| "it closed its connection".into());
                    return fail(
                        handles,
                        TbonError::Startup(format!("{who} failed during start-up: {why}")),
                    );
                }
            }
        }
    }
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
