//! A monitor plane that agents join by address, for processes that are not one vargr
//! job: the ranks of an MPI program under `libvargr_mpi.so` (crates/vargr-mpi) have no
//! vargr mesh to be invited over, so `vargr mpi-run` runs an [`OpenMonitor`] and tells
//! every rank, through the launcher's environment, where it listens and the secret
//! that admits an agent. Pulls, replies, the status file and the culprits are those of
//! [`crate::monitor`]; what differs is how agents arrive and leave:
//!
//! - The monitor listens on a Unix socket in the user's private runtime directory (ranks
//!   of this host, also inside network namespaces) and on TCP (ranks of other hosts);
//!   an agent tries the addresses in that order.
//! - Agents come whenever their rank starts: each says which rank of how many it is,
//!   and the monitor measures the agent's clock ([`SkewProbe`]) before its first pull,
//!   so records from every host land on the monitor's time axis.
//! - An agent whose rank finishes answers one more pull and leaves
//!   ([`JoinedAgent::finish`]); the monitor keeps pulling from the others.
//! - Agents gather through a tree ([`crate::gather`]): after measuring a rank's clock
//!   the monitor tells it its place, the addresses of its parent agent (once that one
//!   has joined and said where it listens; after [`PARENT_WAIT`] the monitor takes the
//!   rank itself) and whether it has children to listen for. A rank whose parent
//!   finished first, or went, joins the monitor again as the monitor's own child.
//!
//! Frame after frame, the connection is the monitor plane's: authenticated by the
//! handshake with the run's secret, then sealed.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use vargr_net::auth::{self, Secret};
use vargr_net::gate::{Gate, GateConfig};
use vargr_net::mesh::{Bound, Mesh};
use vargr_net::{Addr, LinkSecurity, NetError, SecureConn};
use vargr_trace::clock::trace_ns;
use vargr_trace::scope::{Scope, ScopeReducer};
use vargr_trace::{Alignment, SkewProbe};
use vargr_wire::{Frame, FrameKind};

use crate::clocksync;
use crate::gather::{self, Child, Children};
use crate::monitor::{answer_pulls, lowest_priority, Ended, Gatherer, LoadBalance, MonitorConfig};

/// How long one agent's greeting and clock probe may take.
const JOIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest greeting or clock frame.
const MAX_SETUP: usize = 64 << 10;
/// Records an agent holds between pulls (as the job agents do).
const AGENT_HOLD: usize = 1 << 20;
const PING: u8 = b'P';
const SET: u8 = b'S';

/// What an agent says first.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Hello {
    rank: u32,
    size: u32,
    /// A rank whose parent agent went: the monitor takes it as its own child.
    #[serde(default)]
    direct: bool,
}

/// Where an [`OpenMonitor`] listens and what admits an agent: what its ranks are told.
#[derive(Debug, Clone)]
pub struct PlaneAddress {
    /// Addresses to try in order (`unix:PATH`, `tcp:HOST:PORT`).
    pub addrs: Vec<Addr>,
    pub secret: Secret,
}

impl PlaneAddress {
    /// The addresses as one line (`unix:/run/...,tcp:host:4711`), for an environment
    /// variable; [`PlaneAddress::parse_addrs`] reads it back.
    pub fn addrs_text(&self) -> String {
        let list: Vec<String> = self.addrs.iter().map(Addr::to_string).collect();
        list.join(",")
    }

    pub fn parse_addrs(text: &str) -> Result<Vec<Addr>, NetError> {
        let addrs = text
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<Addr>, NetError>>()?;
        if addrs.is_empty() {
            return Err(NetError::BadAddr {
                addr: text.to_string(),
                reason: "no address".into(),
            });
        }
        Ok(addrs)
    }
}

/// A monitor whose agents join by address; see the module docs.
pub struct OpenMonitor {
    address: PlaneAddress,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<LoadBalance>>,
}

impl OpenMonitor {
    /// Listens (a Unix socket in the runtime directory `dir`, and TCP on every
    /// interface) and pulls from whoever joins, every `cfg.period`.
    pub fn start(dir: &Path, cfg: MonitorConfig) -> Result<OpenMonitor, NetError> {
        let secret = Secret::random();
        let unix = Mesh::bind(true, dir)?;
        let tcp = Mesh::bind(false, dir)?;
        let address = PlaneAddress {
            addrs: vec![unix.addr.clone(), tcp.addr.clone()],
            secret: secret.clone(),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("vargr-monitor".into())
            .spawn(move || {
                // The monitor shares the machine with ranks that may use every core.
                lowest_priority();
                let gates = [gate(unix, &secret), gate(tcp, &secret)];
                let mut lb = LoadBalance::new(0);
                serve(&gates, &mut lb, &cfg, &s);
                lb
            })
            .map_err(|e| NetError::Job {
                reason: format!("cannot start the monitor thread: {e}"),
            })?;
        Ok(OpenMonitor {
            address,
            stop,
            thread: Some(thread),
        })
    }

    /// What agents need to join.
    pub fn address(&self) -> &PlaneAddress {
        &self.address
    }

    /// Pulls once more from the agents still there, lets them go, and returns what the
    /// monitor saw.
    pub fn stop(mut self) -> Option<LoadBalance> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take()?.join().ok()
    }
}

impl Drop for OpenMonitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A gate on `bound`'s listener; the socket file (if any) lives as long as the gate's
/// owner keeps `bound`'s guard, which moves into the gate's reporter.
fn gate(bound: Bound, secret: &Secret) -> Gate {
    let Bound {
        listener, socket, ..
    } = bound;
    Gate::open(
        listener,
        secret.clone(),
        GateConfig {
            deadline: JOIN_TIMEOUT,
            ..GateConfig::default()
        },
        Box::new(move |e| {
            let _keep = &socket;
            tracing::warn!("monitor refused a plane connection: {e}")
        }),
    )
}

/// An agent that has said who it is and had its clock measured, waiting for its place.
struct Joining {
    conn: SecureConn,
    hello: Hello,
    set: Vec<u8>,
    name: String,
    since: Instant,
}

fn serve(gates: &[Gate], lb: &mut LoadBalance, cfg: &MonitorConfig, s: &AtomicBool) {
    let mut g = Gatherer::new(cfg);
    let mut children = Children::default();
    let scope = cfg.scope(1);
    let mut joining: Vec<Joining> = Vec::new();
    // Where each interior agent listens for its children, by rank.
    let mut listening: HashMap<u32, Vec<String>> = HashMap::new();
    loop {
        let last = s.load(Ordering::Relaxed);
        for gate in gates {
            while let Ok(a) = gate.accept_timeout(Duration::ZERO) {
                let name = format!("agent of rank {}", a.node);
                match admit(a.conn) {
                    Ok((conn, hello, set)) => {
                        lb.grow_to(hello.size as usize);
                        joining.push(Joining {
                            conn,
                            hello,
                            set,
                            name,
                            since: Instant::now(),
                        });
                    }
                    Err(e) => tracing::warn!("monitor: {name}: {e}"),
                }
            }
        }
        // Parents before their children, so that a sub-tree arriving at once is placed
        // in one pass.
        joining.sort_by_key(|j| j.hello.rank);
        let mut waiting = Vec::new();
        for j in joining.drain(..) {
            let (rank, size) = (j.hello.rank as usize, j.hello.size as usize);
            let parent = match gather::parent(rank, cfg.fanout) {
                Some(_) if j.hello.direct => Some(Vec::new()),
                Some(p) => listening.get(&(p as u32)).cloned().or_else(|| {
                    // A parent that has not come (yet) leaves the monitor as the parent.
                    (last || j.since.elapsed() >= PARENT_WAIT).then(Vec::new)
                }),
                None => Some(Vec::new()),
            };
            let Some(parent) = parent else {
                waiting.push(j);
                continue;
            };
            let place = Place {
                scope: scope.clone(),
                listen: !gather::children(Some(rank), cfg.fanout, size).is_empty(),
                parent,
            };
            match settle(j.conn, j.set, &place) {
                Ok((conn, addrs)) => {
                    if let Some(a) = addrs {
                        listening.insert(j.hello.rank, a);
                    }
                    if place.parent.is_empty() {
                        children.list.push(Child { conn, name: j.name });
                    }
                }
                Err(e) => tracing::warn!("monitor: {}: {e}", j.name),
            }
        }
        joining = waiting;
        if !g.turn(&mut children, lb, last) {
            break;
        }
    }
    children.release();
}

/// How long an agent waits for its parent in the gather tree to join before the
/// monitor takes it as its own child.
const PARENT_WAIT: Duration = Duration::from_secs(1);

/// An agent's place in the gather tree, sent after its clock's alignment.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Place {
    scope: Scope,
    /// Where its parent agent listens (tried in order); empty: the monitor is its parent.
    #[serde(default)]
    parent: Vec<String>,
    /// Whether it has children to listen for.
    #[serde(default)]
    listen: bool,
}

/// First byte of an agent's frame saying where it listens for its children.
const LISTEN: u8 = b'L';

/// Reads an agent's greeting and measures its clock; returns the start of the frame that
/// will tell it its alignment and place.
fn admit(mut conn: SecureConn) -> Result<(SecureConn, Hello, Vec<u8>), String> {
    conn.set_timeout(Some(JOIN_TIMEOUT));
    conn.conn().set_low_priority();
    let f = conn.read_frame(MAX_SETUP).map_err(|e| e.to_string())?;
    let hello: Hello =
        serde_json::from_slice(&f.payload).map_err(|e| format!("bad greeting: {e}"))?;
    let mut probe = SkewProbe::new();
    for _ in 0..SkewProbe::ROUNDS {
        let sent = trace_ns();
        conn.write_frame(&frame(vec![PING]))
            .map_err(|e| e.to_string())?;
        let f = conn.read_frame(MAX_SETUP).map_err(|e| e.to_string())?;
        let got = trace_ns();
        let clock: [u8; 8] = f
            .payload
            .as_ref()
            .try_into()
            .map_err(|_| format!("{}-byte clock reading", f.payload.len()))?;
        probe.sample(sent, u64::from_le_bytes(clock), got);
    }
    let align = Alignment::ROOT.then(probe.estimate().expect("sampled"));
    Ok((conn, hello, clocksync::encode(align).to_vec()))
}

/// Sends an admitted agent its alignment and place; an agent with children to listen
/// for answers with its addresses, which are returned.
fn settle(
    mut conn: SecureConn,
    mut set: Vec<u8>,
    place: &Place,
) -> Result<(SecureConn, Option<Vec<String>>), String> {
    set.extend_from_slice(&serde_json::to_vec(place).expect("a place serializes"));
    conn.write_frame(&frame(set)).map_err(|e| e.to_string())?;
    let addrs = if place.listen {
        let f = conn.read_frame(MAX_SETUP).map_err(|e| e.to_string())?;
        match f.payload.split_first() {
            Some((&LISTEN, body)) => Some(
                serde_json::from_slice::<Vec<String>>(body)
                    .map_err(|e| format!("bad listening addresses: {e}"))?,
            ),
            _ => return Err("no listening addresses after its place".into()),
        }
    } else {
        None
    };
    conn.set_timeout(Some(crate::monitor::PLANE_TIMEOUT));
    Ok((conn, addrs))
}

fn frame(body: Vec<u8>) -> Frame {
    Frame::new(FrameKind::Data, 0, 0, Bytes::from(body))
}

/// Who an agent is and where it goes.
pub struct AgentSpec {
    pub address: PlaneAddress,
    pub rank: u32,
    pub size: u32,
    /// The process's name in replies and in `vargr top`.
    pub process: String,
}

/// Moves this process's records to a reducer; returns how long the agent may wait before
/// it drains again (if no pull comes first).
pub type Drain = Box<dyn FnMut(&mut ScopeReducer) -> Duration + Send>;

/// A running agent of this process.
pub struct JoinedAgent {
    finishing: Arc<AtomicBool>,
    ended: mpsc::Receiver<()>,
}

impl JoinedAgent {
    /// Joins the plane on a thread of the lowest priority and answers pulls until the
    /// monitor goes; a monitor that cannot be reached is reported on stderr once, and
    /// the process runs on unmonitored.
    pub fn spawn(spec: AgentSpec, mut drain: Drain) -> JoinedAgent {
        let finishing = Arc::new(AtomicBool::new(false));
        let (alive, ended) = mpsc::channel::<()>();
        let f = finishing.clone();
        let _ = std::thread::Builder::new()
            .name("vargr-monitor-agent".into())
            .spawn(move || {
                let _alive = alive;
                lowest_priority();
                if let Err(e) = join(&spec, &mut drain, &f) {
                    eprintln!("vargr: rank {}: monitor agent: {e}", spec.rank);
                }
            });
        JoinedAgent { finishing, ended }
    }

    /// Called when the process has recorded its last: waits (up to `timeout`) until the
    /// monitor has pulled everything recorded so far.
    pub fn finish(self, timeout: Duration) {
        self.finishing.store(true, Ordering::Release);
        let _ = self.ended.recv_timeout(timeout);
    }
}

fn join(spec: &AgentSpec, drain: &mut Drain, finishing: &AtomicBool) -> Result<(), String> {
    let (mut conn, mut peer, place) = join_monitor(spec, false)?;
    let mut red = ScopeReducer::new(place.scope.clone(), 1, AGENT_HOLD);
    let mut children = Children::default();
    if place.listen {
        let addrs = listen_for_children(spec, &mut children);
        let mut body = vec![LISTEN];
        body.extend_from_slice(&serde_json::to_vec(&addrs).expect("addresses serialize"));
        conn.write_frame(&frame(body))
            .map_err(|e| format!("{peer}: {e}"))?;
    }
    let mut to_monitor = true;
    if !place.parent.is_empty() {
        match connect_any(&place.parent, spec, "parent agent") {
            Ok((c, p)) => {
                (conn, peer, to_monitor) = (c, p, false);
            }
            Err(e) => {
                tracing::debug!("rank {}: {e}; staying with the monitor", spec.rank);
                (conn, peer, _) = join_monitor(spec, true)?;
            }
        }
    }
    loop {
        conn.conn().set_low_priority();
        let ended = answer_pulls(
            &mut conn,
            &peer,
            &spec.process,
            &mut red,
            &mut **drain,
            &mut children,
            Some(finishing),
        )?;
        // A parent agent whose rank finished (or failed) leaves its sub-tree to the
        // monitor; what this agent holds was not lost with it.
        if ended == Ended::Stopped || to_monitor {
            return Ok(());
        }
        let (c, p, place) = join_monitor(spec, true)?;
        red.set_scope(place.scope);
        (conn, peer, to_monitor) = (c, p, true);
    }
}

/// Connects and authenticates to the first of `addrs` that answers.
fn connect_any(
    addrs: &[String],
    spec: &AgentSpec,
    what: &str,
) -> Result<(SecureConn, String), String> {
    let mut last_err = format!("no address for the {what}");
    for a in addrs {
        let addr: Addr = match a.parse() {
            Ok(x) => x,
            Err(e) => {
                last_err = format!("{what} address {a:?}: {e}");
                continue;
            }
        };
        let peer = format!("{what} at {addr}");
        match vargr_net::connect_once(&addr, JOIN_TIMEOUT) {
            Ok(c) => {
                let c = auth::connect(
                    c,
                    &spec.address.secret,
                    spec.rank,
                    LinkSecurity::Auto,
                    JOIN_TIMEOUT,
                    &peer,
                )
                .map_err(|e| e.to_string())?;
                return Ok((c, peer));
            }
            Err(e) => last_err = format!("{peer}: {e}"),
        }
    }
    Err(last_err)
}

/// Listens for this agent's children: beside the monitor's Unix socket when this rank
/// shares its host, and on TCP. Returns the addresses, Unix first.
fn listen_for_children(spec: &AgentSpec, children: &mut Children) -> Vec<String> {
    let mut addrs = Vec::new();
    let unix_dir = spec.address.addrs.iter().find_map(|a| match a {
        Addr::Unix(p) => p.parent().map(Path::to_path_buf),
        _ => None,
    });
    let unix = unix_dir.and_then(|d| Mesh::bind(true, &d).ok());
    let tcp = Mesh::bind(false, Path::new(".")).ok();
    for b in unix.into_iter().chain(tcp) {
        addrs.push(b.addr.to_string());
        let Bound {
            listener, socket, ..
        } = b;
        children.sockets.extend(socket);
        children.gates.push(Gate::open(
            listener,
            spec.address.secret.clone(),
            GateConfig {
                deadline: JOIN_TIMEOUT,
                ..GateConfig::default()
            },
            Box::new(|e| tracing::warn!("monitor agent refused a plane connection: {e}")),
        ));
    }
    addrs
}

/// Joins the monitor: greets it (`direct`: as a child of its own, whatever the tree
/// says), has the clock measured, and reads the place in the gather tree.
fn join_monitor(spec: &AgentSpec, direct: bool) -> Result<(SecureConn, String, Place), String> {
    let mut last_err = String::new();
    let mut conn = None;
    let deadline = Instant::now() + crate::monitor::PLANE_TIMEOUT;
    'found: while Instant::now() < deadline {
        for addr in &spec.address.addrs {
            let peer = format!("monitor at {addr}");
            let c = match vargr_net::connect_once(addr, JOIN_TIMEOUT) {
                Ok(c) => c,
                Err(e) => {
                    last_err = e.to_string();
                    continue;
                }
            };
            // A refused handshake is final: the secret is wrong.
            let c = auth::connect(
                c,
                &spec.address.secret,
                spec.rank,
                LinkSecurity::Auto,
                JOIN_TIMEOUT,
                &peer,
            )
            .map_err(|e| e.to_string())?;
            conn = Some((c, peer));
            break 'found;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some((mut conn, peer)) = conn else {
        return Err(format!("no monitor to join: {last_err}"));
    };
    conn.conn().set_low_priority();
    let hello = serde_json::to_vec(&Hello {
        rank: spec.rank,
        size: spec.size,
        direct,
    })
    .expect("a greeting serializes");
    let io = |e: NetError| format!("{peer}: {e}");
    conn.write_frame(&frame(hello)).map_err(io)?;
    // The monitor may hold the place back until the parent agent has joined.
    conn.set_timeout(Some(JOIN_TIMEOUT + PARENT_WAIT));
    let place = loop {
        let f = conn.read_frame(MAX_SETUP).map_err(io)?;
        match f.payload.first() {
            Some(&PING) => conn
                .write_frame(&frame(trace_ns().to_le_bytes().to_vec()))
                .map_err(io)?,
            Some(&SET) if f.payload.len() >= clocksync::ENCODED_LEN => {
                let (align, place) = f.payload.split_at(clocksync::ENCODED_LEN);
                vargr_trace::set_alignment(clocksync::decode(align, 0).map_err(|e| e.to_string())?);
                break serde_json::from_slice::<Place>(place)
                    .map_err(|e| format!("{peer}: bad place in the gather tree: {e}"))?;
            }
            _ => return Err(format!("{peer}: unexpected frame while joining")),
        }
    };
    Ok((conn, peer, place))
}
