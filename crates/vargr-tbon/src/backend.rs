//! The back-end side: a leaf of the tree, embedded in the tool's daemon.

use std::sync::Arc;
use std::time::{Duration, Instant};

use vargr_net::Reactor;
use vargr_wire::{Packet, Value};

use crate::commnode::registry;
use crate::engine::{Engine, Watch};
use crate::router::Router;
use crate::spawn::{self, Bootstrap};
use crate::trace::TraceDump;
use crate::{Result, TbonError};

/// A back-end's handle on the network. Cheap to clone; all clones share one connection.
#[derive(Clone)]
pub struct Backend {
    engine: Arc<Engine>,
    rank: u32,
    num_backends: u32,
    node: u32,
    /// Recovery may adopt this back-end when its parent dies (see [`Backend::untie`]).
    adoptable: bool,
}

impl Backend {
    /// Joins the network this process was started by (reads `VARGR_PARENT`,
    /// `VARGR_NODE`, `VARGR_SECRET`).
    pub fn from_env() -> Result<Backend> {
        Backend::join(Bootstrap::from_env()?)
    }

    /// Joins the network as described by `boot`.
    pub fn join(boot: Bootstrap) -> Result<Backend> {
        let (conn, msg) = spawn::join_parent(&boot, Duration::from_secs(30))?;
        let adoptable = spawn::untie_if_adoptable(&msg);
        let root = msg.topology.root();
        let parent_node = root.parent.unwrap_or(0);
        let rank = root.backend_rank.ok_or_else(|| {
            TbonError::Startup(format!(
                "node {} was started as a back-end but is not a leaf",
                boot.node
            ))
        })?;
        let mut reactor = Reactor::new().map_err(|e| TbonError::Startup(e.to_string()))?;
        let link = conn
            .into_link("parent", msg.config.max_frame)
            .map_err(|e| TbonError::Startup(e.to_string()))?;
        let stages = msg
            .config
            .link_stages
            .chain(
                &root.host,
                &msg.parent_host,
                boot.node,
                spawn::seed(boot.node, parent_node),
                msg.config.max_frame,
            )
            .map_err(|e| TbonError::Startup(format!("node {}: {e}", boot.node)))?;
        let parent = reactor
            .add(link.with_stages(stages))
            .map_err(|e| TbonError::Startup(e.to_string()))?;
        let ready = spawn::ready_frame(boot.node, vec![rank]);
        crate::trace::send_recorded(&mut reactor, parent, ready, parent_node);
        reactor.flush_all();
        let router = Router::new(
            boot.node,
            root.host.clone(),
            Some(rank),
            registry(&msg.config.plugins)?,
        )
        .with_parent(parent, parent_node)
        .with_heartbeat(
            Duration::from_millis(msg.config.heartbeat_ms),
            Duration::from_millis(msg.config.heartbeat_timeout_ms),
        )
        .with_recovery(msg.config.recovery, msg.ancestors.clone(), None)
        .with_clock_offset(&msg.config.clock_offsets_ns);
        let role = format!("back-end {rank}");
        crate::trace::label_thread(boot.node, &role);
        let dump = match crate::trace::in_process() {
            true => None,
            false => TraceDump::configured(msg.config.trace_dir.as_deref(), boot.node, role),
        };
        let engine = Engine::new(router, reactor, msg.config.queue_limit);
        {
            let mut st = engine.lock();
            st.dump_on_close = dump;
            if msg.config.recovery == crate::Recovery::Ancestor {
                st.rejoin = Some(crate::engine::Rejoin {
                    secret: boot.secret.clone(),
                    max_frame: msg.config.max_frame,
                });
            }
        }
        engine.start_keeper(
            Duration::from_millis(msg.config.heartbeat_ms / 2),
            boot.node,
        );
        Ok(Backend {
            engine,
            rank,
            num_backends: msg.config.num_backends,
            node: boot.node,
            adoptable,
        })
    }

    /// Keeps this process alive when its parent node dies, so that recovery can have
    /// it adopted; [`Backend::join`] does it for the thread it runs on. The parent-death
    /// signal that would kill it is an attribute of the process's first thread, so a
    /// program that joined on another thread (Python's binding joins on a thread of
    /// its own, so that Ctrl-C works) calls this from its main thread.
    pub fn untie(&self) {
        if self.adoptable {
            spawn::untie_this_thread();
        }
    }

    /// For a program that joins on another thread (Python's binding): loosens the
    /// calling thread's tie to the parent *before* the join starts, so that no moment
    /// passes between the tree seeing this back-end joined and the process surviving
    /// its parent's death. [`StartupTie::settle`] ties it again if the back-end turns
    /// out not to be adoptable.
    pub fn loosen_for_join() -> StartupTie {
        // SAFETY: getppid cannot fail.
        let parent = unsafe { libc::getppid() };
        spawn::untie_this_thread();
        StartupTie { parent }
    }

    /// This back-end's rank, 0..[`Backend::num_backends`].
    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn num_backends(&self) -> u32 {
        self.num_backends
    }

    /// The topology node id of this back-end.
    pub fn node_id(&self) -> u32 {
        self.node
    }

    /// Waits for the next packet on any stream (or point-to-point). Returns
    /// `Err(TbonError::Shutdown)` once the front-end shut the network down.
    pub fn recv(&self) -> Result<Packet> {
        self.recv_until(None).expect("no deadline")
    }

    /// Like [`Backend::recv`], giving up after `timeout` with `Ok(None)`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Option<Packet>> {
        self.recv_until(Some(Instant::now() + timeout))
            .map_or(Ok(None), |r| r.map(Some))
    }

    fn recv_until(&self, deadline: Option<Instant>) -> Option<Result<Packet>> {
        self.engine.wait_for(deadline, |st| {
            let d = st.router.deliveries_mut();
            if let Some(p) = d.inbox.pop_front() {
                return Some(Ok(p));
            }
            if let Some(e) = d.faults.pop() {
                return Some(Err(e));
            }
            d.closed.clone().map(Err)
        })
    }

    /// Waits for the next packet multicast on `stream` (MRNet's back-end
    /// `Stream::recv`), leaving other streams' packets and point-to-point messages for
    /// [`Backend::recv`] or other threads: one thread per stream works. `Ok(None)` after
    /// `timeout` (None: wait for ever); `Err(TbonError::Shutdown)` once the network is
    /// shut down.
    pub fn recv_stream(&self, stream: u32, timeout: Option<Duration>) -> Result<Option<Packet>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let got = self.engine.wait_for(deadline, |st| {
            let d = st.router.deliveries_mut();
            let at = d
                .inbox
                .iter()
                .position(|p| crate::engine::is_multicast_on(p, stream));
            if let Some(p) = at.and_then(|i| d.inbox.remove(i)) {
                return Some(Ok(p));
            }
            d.closed.clone().map(Err)
        });
        got.transpose()
    }

    /// A descriptor that is readable while [`Backend::recv`] (`stream` None) or
    /// [`Backend::recv_stream`] on `stream` would return at once (MRNet's
    /// `get_DataNotificationFd` on a back-end); see [`crate::Network::notification_fd`].
    pub fn notification_fd(&self, stream: Option<u32>) -> Result<std::os::fd::RawFd> {
        let watch = stream.map_or(Watch::Inbox, Watch::InboxStream);
        self.engine
            .notification_fd(watch)
            .map_err(|e| TbonError::Net(format!("making a notification descriptor: {e}")))
    }

    /// Sends values up `stream` (towards the front-end, through the stream's filters).
    pub fn send(&self, stream: u32, tag: i32, format: &str, values: Vec<Value>) -> Result<()> {
        let mut p = Packet::new(stream, tag, format, values)?;
        p.source = self.rank;
        self.send_packet(&p)
    }

    pub fn send_packet(&self, p: &Packet) -> Result<()> {
        self.check_open()?;
        self.engine.with_router(|r, out| r.send_up(p, out))?;
        self.wait_backlog();
        Ok(())
    }

    /// Sends values to back-end `dest`, routed through the lowest common ancestor.
    pub fn send_to(&self, dest: u32, tag: i32, format: &str, values: Vec<Value>) -> Result<()> {
        self.check_open()?;
        let mut p = Packet::new(dest, tag, format, values)?;
        p.source = self.rank;
        if dest == self.rank {
            self.engine
                .with_router(|r, _| r.deliveries_mut().inbox.push_back(p));
            return Ok(());
        }
        self.engine
            .with_router(|r, out| r.send_p2p(dest, &p, out))?;
        self.wait_backlog();
        Ok(())
    }

    /// Publishes version `version` of observed element `element`; it travels up to the
    /// front-end, which keeps it if it is newer than the element's newest (see
    /// [`crate::Network::publish`]).
    pub fn publish(&self, element: u32, version: u64, value: &[u8]) -> Result<()> {
        crate::observe::publish(&self.engine, element, version, value)
    }

    /// Waits for a value of observed element `element` newer than `have` (PATHS'
    /// last-observe): the newest one the tree holds, taken from the nearest cache that
    /// has one. [`TbonError::ObserveTimeout`] once `timeout` passes.
    pub fn observe_newer(
        &self,
        element: u32,
        have: Option<u64>,
        timeout: Duration,
    ) -> Result<(u64, bytes::Bytes)> {
        crate::observe::observe_newer(&self.engine, element, have, timeout)
    }

    fn check_open(&self) -> Result<()> {
        match self.engine.lock().router.deliveries().closed.clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Blocks while the link to the parent holds more than the queue limit (backpressure).
    fn wait_backlog(&self) {
        self.engine.wait_for(None, |st| {
            let over = st
                .router
                .up_backed_up(|l| Engine::backlog(st, l), st.queue_limit);
            (!over || st.router.is_closed()).then_some(())
        });
    }
}

/// The calling thread's tie to its parent, loosened for the join (see
/// [`Backend::loosen_for_join`]).
#[must_use = "settle it once the join is done"]
pub struct StartupTie {
    parent: libc::pid_t,
}

impl StartupTie {
    /// Keeps the thread untied if `be` can be adopted; otherwise ties it to its parent
    /// again, failing if the parent already died in between (the process would
    /// otherwise live on with nowhere to go).
    pub fn settle(self, be: &Backend) -> Result<(), TbonError> {
        if be.adoptable {
            return Ok(());
        }
        // SAFETY: prctl(PR_SET_PDEATHSIG) changes only this thread's death signal.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        }
        // SAFETY: getppid cannot fail.
        if unsafe { libc::getppid() } != self.parent {
            return Err(TbonError::Shutdown);
        }
        Ok(())
    }
}
