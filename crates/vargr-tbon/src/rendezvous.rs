//! Attach mode: back-ends started by another launcher (`mpirun`, `srun`, a batch
//! script) find their leaf parents through a rendezvous run by the front-end.
//!
//! MPI jobs place their own processes, so the tree cannot spawn its leaves. Instead every
//! node whose children are back-ends registers its listening address with the
//! rendezvous, and each back-end connects there with its rank (read from the variables
//! the launcher already sets), learns its node id and parent, and then joins the tree
//! exactly as a spawned back-end would. Both sides prove the network secret first.
//!
//! The rendezvous address reaches back-ends through `VARGR_RENDEZVOUS`: either the address
//! itself (`unix:/path`, `tcp:host:port`) with the secret in `VARGR_SECRET`, or
//! `file:PATH` naming a file (mode 0600, on a shared file system) whose first line is the
//! address and whose second line is the secret.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vargr_net::auth::{self, Secret};
use vargr_net::gate::{Gate, GateConfig};
use vargr_net::{Addr, LinkSecurity, Listener, SecureConn};
use vargr_topo::Topology;
use vargr_wire::{Frame, FrameKind};

use crate::proto::{self, AttachMsg, AttachReplyMsg};
use crate::spawn::Bootstrap;
use crate::TbonError;

/// Node id an attaching back-end claims before it knows its own.
const UNKNOWN_NODE: u32 = u32::MAX;

#[derive(Default)]
struct Table {
    /// Listening address of each registered leaf parent.
    parents: HashMap<u32, String>,
    /// Ranks already handed out (a second claim is an error in the launch).
    claimed: HashSet<u32>,
}

struct Shared {
    table: Mutex<Table>,
    registered: Condvar,
    stop: AtomicBool,
}

/// The front-end's rendezvous server; stops when dropped.
pub struct Rendezvous {
    addr: Addr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Rendezvous {
    /// Serves attach requests for `topology` on `listener` until dropped. `wait` bounds
    /// how long a back-end may wait for its parent to register.
    pub fn start(
        listener: Listener,
        advertised: Addr,
        topology: &Topology,
        secret: Secret,
        wait: Duration,
    ) -> Rendezvous {
        let shared = Arc::new(Shared {
            table: Mutex::new(Table::default()),
            registered: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        // Each back-end rank's node and the node it hangs from.
        let placement: Arc<HashMap<u32, (u32, u32)>> = Arc::new(
            topology
                .nodes()
                .filter_map(|n| Some((n.backend_rank?, (n.id, n.parent?))))
                .collect(),
        );
        let num_backends = topology.num_backends() as u32;
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("vargr-rendezvous".into())
            .spawn(move || {
                let gate = Gate::open(
                    listener,
                    secret,
                    GateConfig::default(),
                    Box::new(|e| tracing::warn!("rendezvous refused a connection: {e}")),
                );
                while !sh.stop.load(Ordering::Relaxed) {
                    let conn = match gate.accept_timeout(Duration::from_millis(100)) {
                        Ok(a) => a.conn,
                        Err(vargr_net::NetError::Timeout { .. }) => continue,
                        Err(e) => {
                            tracing::error!("rendezvous: {e}");
                            return;
                        }
                    };
                    let (sh, placement) = (sh.clone(), placement.clone());
                    let _ = std::thread::Builder::new()
                        .name("vargr-rendezvous-conn".into())
                        .spawn(move || serve_one(conn, &sh, &placement, num_backends, wait));
                }
            })
            .expect("spawning the rendezvous thread");
        Rendezvous {
            addr: advertised,
            shared,
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> &Addr {
        &self.addr
    }

    /// Writes the rendezvous file (address, then secret), readable by its owner only.
    pub fn write_file(&self, path: &Path, secret: &Secret) -> Result<(), TbonError> {
        vargr_net::wireup::write_rendezvous_file(path, &self.addr, secret).map_err(TbonError::from)
    }

    /// Ranks that have not attached yet.
    pub fn missing(&self, num_backends: u32) -> Vec<u32> {
        let t = self.shared.table.lock().unwrap_or_else(|p| p.into_inner());
        (0..num_backends)
            .filter(|r| !t.claimed.contains(r))
            .collect()
    }
}

impl Drop for Rendezvous {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.registered.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_one(
    mut conn: SecureConn,
    sh: &Shared,
    placement: &HashMap<u32, (u32, u32)>,
    num_backends: u32,
    wait: Duration,
) {
    conn.set_timeout(Some(Duration::from_secs(10)));
    let req = conn
        .read_frame(64 << 10)
        .map_err(TbonError::from)
        .and_then(|f| match f.kind {
            FrameKind::Attach => proto::from_json::<AttachMsg>("Attach", &f.payload),
            k => Err(TbonError::Net(format!(
                "expected an Attach request, got {}",
                k.name()
            ))),
        });
    let reply = match req {
        Ok(AttachMsg::Parent { node, addr }) => {
            let mut t = sh.table.lock().unwrap_or_else(|p| p.into_inner());
            t.parents.insert(node, addr);
            sh.registered.notify_all();
            Ok(Frame::new(FrameKind::AttachReply, 0, 0, &b"{}"[..]))
        }
        Ok(AttachMsg::Backend { rank }) => place_backend(sh, placement, num_backends, rank, wait)
            .map(|(node, parent)| {
                Frame::new(
                    FrameKind::AttachReply,
                    0,
                    0,
                    proto::to_json(&AttachReplyMsg { node, parent }),
                )
            }),
        Err(e) => Err(e.to_string()),
    };
    let f = reply.unwrap_or_else(|why| Frame::new(FrameKind::Refused, 0, 0, why));
    let _ = conn.write_frame(&f);
}

fn place_backend(
    sh: &Shared,
    placement: &HashMap<u32, (u32, u32)>,
    num_backends: u32,
    rank: u32,
    wait: Duration,
) -> Result<(u32, String), String> {
    let Some(&(node, parent)) = placement.get(&rank) else {
        return Err(format!(
            "rank {rank} is out of range: the network has {num_backends} back-ends (ranks 0..{num_backends})"
        ));
    };
    let deadline = Instant::now() + wait;
    let mut t = sh.table.lock().unwrap_or_else(|p| p.into_inner());
    if !t.claimed.insert(rank) {
        return Err(format!(
            "rank {rank} attached twice: check the launcher's rank variables"
        ));
    }
    loop {
        if let Some(addr) = t.parents.get(&parent) {
            return Ok((node, addr.clone()));
        }
        let now = Instant::now();
        if now >= deadline || sh.stop.load(Ordering::Relaxed) {
            t.claimed.remove(&rank);
            return Err(format!(
                "the parent of rank {rank} (node {parent}) did not come up in time"
            ));
        }
        t = sh
            .registered
            .wait_timeout(t, deadline - now)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}

/// Registers node `node`, listening at `addr` for attaching back-ends.
pub fn register_parent(
    rendezvous: &Addr,
    secret: &Secret,
    node: u32,
    addr: &Addr,
    timeout: Duration,
) -> Result<(), TbonError> {
    let msg = AttachMsg::Parent {
        node,
        addr: addr.to_string(),
    };
    exchange(rendezvous, secret, node, &msg, timeout).map(|_| ())
}

fn exchange(
    rendezvous: &Addr,
    secret: &Secret,
    node: u32,
    msg: &AttachMsg,
    timeout: Duration,
) -> Result<Frame, TbonError> {
    let peer = format!("the rendezvous at {rendezvous}");
    let conn = vargr_net::connect(rendezvous, timeout)?;
    let mut conn = auth::connect(conn, secret, node, LinkSecurity::Auto, timeout, &peer)?;
    conn.set_timeout(Some(timeout));
    conn.write_frame(&Frame::new(FrameKind::Attach, 0, 0, proto::to_json(msg)))?;
    let f = conn.read_frame(64 << 10)?;
    match f.kind {
        FrameKind::AttachReply => Ok(f),
        FrameKind::Refused => Err(TbonError::Startup(format!(
            "{peer} refused: {}",
            String::from_utf8_lossy(&f.payload)
        ))),
        k => Err(TbonError::Startup(format!(
            "{peer} answered with {}",
            k.name()
        ))),
    }
}

/// Asks the rendezvous where back-end `rank` belongs.
pub fn attach(
    rendezvous: &Addr,
    secret: &Secret,
    rank: u32,
    timeout: Duration,
) -> Result<Bootstrap, TbonError> {
    let f = exchange(
        rendezvous,
        secret,
        UNKNOWN_NODE,
        &AttachMsg::Backend { rank },
        timeout,
    )?;
    let reply: AttachReplyMsg = proto::from_json("AttachReply", &f.payload)?;
    Ok(Bootstrap {
        parent: reply.parent.parse()?,
        node: reply.node,
        secret: secret.clone(),
    })
}
