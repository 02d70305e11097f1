//! The progress engine: a reactor and a router shared by the threads of one process.
//!
//! There is no I/O thread on the latency path. Whichever thread needs progress (a user
//! thread waiting in `recv`, a sender whose link is backed up, the keeper thread that
//! sends heartbeats) takes the reactor out of the shared state, polls with the state
//! unlocked, then locks the state again to run the router on what arrived. Other threads
//! meanwhile wait on a condition variable, or, if they only want to send, put frames in
//! an outbox and wake the poller. In a commnode the one thread simply loops.
//!
//! Every frame the router sends passes a [`TracedOut`], which records it (LinkOut); a
//! back-end's trace file is written here, the moment its router closes, while its
//! ShutdownDone still waits in the link queue: the front-end's shutdown returns only
//! once every file is written.
//!
//! Notification descriptors (MRNet's `get_DataNotificationFd`) are here too: a
//! program that waits in `select`/`poll` is not in the library, so asking for one
//! starts a progress thread that polls on its behalf, and the descriptor is kept
//! readable exactly while a receive would return at once (see [`Watch`]).
//!
//! Fault recovery's I/O is here too (the protocol is in the router, see
//! [`crate::recovery`]): an internal node takes orphans from its gate, reads each
//! request on a thread and adopts it at the next poll; an orphan asks its ancestors on
//! a thread of its own. Neither side blocks the poller, so both keep serving their
//! other links (and heartbeats) meanwhile.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use vargr_net::auth::Secret;
use vargr_net::{Reactor, ReactorEvent, SecureConn};
use vargr_wire::{Frame, FrameKind};

use crate::out::{Out, Outbox};
use crate::proto::{self, AdoptMsg, AdoptedMsg};
use crate::recovery::{self, ADOPT_TIMEOUT};
use crate::router::Router;
use crate::spawn::Adopter;
use crate::trace::{LinkPeers, TraceDump, TracedOut};
use crate::TbonError;

/// What an orphan needs to rejoin the tree.
pub struct Rejoin {
    pub secret: Secret,
    pub max_frame: usize,
}

pub struct State {
    pub router: Router,
    reactor: Option<Reactor>,
    outbox: Outbox,
    /// Reused between polls so that a poll allocates nothing.
    events: Vec<ReactorEvent>,
    next_tick: Instant,
    /// Bytes a link may hold unsent (and packets a local queue may hold) before reading
    /// from the other side pauses.
    pub queue_limit: usize,
    /// Threads blocked on the condition variable: notifying costs a system call, so it
    /// is only done when someone listens.
    waiters: usize,
    /// The node at the other end of each link, for trace records.
    peers: LinkPeers,
    /// Written once, when the router closes (back-ends).
    pub dump_on_close: Option<TraceDump>,
    /// Internal nodes with recovery on: where orphans knock.
    pub adopter: Option<Adopter>,
    /// Non-root nodes with recovery on: how to ask for adoption.
    pub rejoin: Option<Rejoin>,
    /// The link to a new parent, for the next poll to install (only the poller holds
    /// the reactor, and a user thread in `recv` may hold it back to back).
    new_parent: Option<(vargr_net::Link, AdoptedMsg)>,
    /// Orphans' requests, read by their threads, waiting for the next poll.
    asked: Arc<Mutex<Vec<(SecureConn, AdoptMsg)>>>,
    /// Notification descriptors handed out, kept in step with the deliveries.
    notifiers: Vec<Notifier>,
}

/// What a notification descriptor reports: it is readable while a receive of this kind
/// would return at once (a result, a fault, or the end of the network).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// Front-end: a result on any stream.
    AnyStream,
    /// Front-end: a result on this stream.
    Stream(u32),
    /// Back-end: a packet (or fault) for `Backend::recv`.
    Inbox,
    /// Back-end: a packet multicast on this stream.
    InboxStream(u32),
}

/// A socket pair whose read end is the user's descriptor. Level-triggered (a byte sits
/// in it while something is pending, and is taken out when nothing is) so that a
/// program that receives only part of what is pending is woken again: MRNet's
/// `clear_DataNotificationFd` becomes unnecessary, and a missed clear cannot lose a
/// wake-up.
struct Notifier {
    watch: Watch,
    reader: UnixStream,
    writer: UnixStream,
    raised: bool,
}

impl Notifier {
    fn new(watch: Watch) -> std::io::Result<Notifier> {
        let (reader, writer) = UnixStream::pair()?;
        reader.set_nonblocking(true)?;
        writer.set_nonblocking(true)?;
        Ok(Notifier {
            watch,
            reader,
            writer,
            raised: false,
        })
    }

    fn set(&mut self, due: bool) {
        if due == self.raised {
            return;
        }
        self.raised = due;
        if due {
            let _ = (&self.writer).write(&[1]);
        } else {
            let mut buf = [0u8; 64];
            while matches!((&self.reader).read(&mut buf), Ok(n) if n > 0) {}
        }
    }
}

/// Whether a receive watched by `w` would return at once.
pub fn pending(router: &Router, w: Watch) -> bool {
    let d = router.deliveries();
    if d.closed.is_some() {
        return true;
    }
    match w {
        Watch::AnyStream => d.streams.values().any(|q| !q.is_empty()),
        Watch::Stream(id) => d.streams.get(&id).is_some_and(|q| !q.is_empty()),
        Watch::Inbox => !d.inbox.is_empty() || !d.faults.is_empty(),
        Watch::InboxStream(id) => d.inbox.iter().any(|p| is_multicast_on(p, id)),
    }
}

/// A packet that came down `stream` (not a point-to-point message, whose stream field
/// holds its destination rank and whose source is the sending back-end).
pub fn is_multicast_on(p: &vargr_wire::Packet, stream: u32) -> bool {
    p.stream == stream && p.source == u32::MAX
}

/// How long the progress thread polls before checking whether its engine is still wanted.
const PROGRESS_SLICE: Duration = Duration::from_millis(100);

impl State {
    /// Brings every notification descriptor in line with the deliveries.
    fn sync_notifiers(&mut self) {
        for n in &mut self.notifiers {
            n.set(pending(&self.router, n.watch));
        }
    }
}

pub struct Engine {
    state: Mutex<State>,
    cv: Condvar,
    waker: Arc<vargr_net::Waker>,
    /// For the rejoin thread, which must not keep the engine alive.
    me: Weak<Engine>,
    /// Set once a progress thread runs (see [`Engine::start_progress`]).
    progressing: std::sync::atomic::AtomicBool,
}

impl Engine {
    pub fn new(router: Router, reactor: Reactor, queue_limit: usize) -> Arc<Engine> {
        let waker = reactor.waker();
        let peers = LinkPeers::new(router.neighbours());
        Arc::new_cyclic(|me| Engine {
            me: me.clone(),
            progressing: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(State {
                router,
                reactor: Some(reactor),
                outbox: Outbox::default(),
                events: Vec::new(),
                next_tick: Instant::now(),
                queue_limit,
                waiters: 0,
                peers,
                dump_on_close: None,
                adopter: None,
                rejoin: None,
                new_parent: None,
                asked: Arc::default(),
                notifiers: Vec::new(),
            }),
            cv: Condvar::new(),
            waker,
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` with the router and a place to send frames, flushing at once when the
    /// reactor is free and waking the poller otherwise.
    pub fn with_router<R>(&self, f: impl FnOnce(&mut Router, &mut dyn Out) -> R) -> R {
        let mut g = self.lock();
        let st = &mut *g;
        match st.reactor.as_mut() {
            Some(r) => {
                let mut traced = TracedOut {
                    inner: r,
                    peers: &st.peers,
                };
                let out = f(&mut st.router, &mut traced);
                r.flush_all();
                st.sync_notifiers();
                out
            }
            None => {
                let mut traced = TracedOut {
                    inner: &mut st.outbox,
                    peers: &st.peers,
                };
                let out = f(&mut st.router, &mut traced);
                st.sync_notifiers();
                drop(g);
                let _ = self.waker.wake();
                out
            }
        }
    }

    /// Ends deliveries (the network is gone): every thread waiting in a receive, or
    /// receiving later, gets `TbonError::Shutdown` once its queue is empty.
    pub fn close_deliveries(&self) {
        {
            let mut g = self.lock();
            g.router.close(crate::TbonError::Shutdown);
            g.sync_notifiers();
        }
        self.cv.notify_all();
        let _ = self.waker.wake();
    }

    /// Makes progress until `done` returns `Some` or `deadline` passes (then `None`).
    pub fn wait_for<T>(
        &self,
        deadline: Option<Instant>,
        mut done: impl FnMut(&mut State) -> Option<T>,
    ) -> Option<T> {
        let mut g = self.lock();
        loop {
            if let Some(v) = done(&mut g) {
                // `done` may have taken a delivery.
                g.sync_notifiers();
                return Some(v);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return None;
            }
            match g.reactor.take() {
                Some(reactor) => {
                    g = self.poll_once(g, reactor, deadline);
                }
                None => {
                    // Whoever holds the reactor notifies when it puts it back.
                    g.waiters += 1;
                    g = match deadline {
                        Some(d) => {
                            self.cv
                                .wait_timeout(g, d.saturating_duration_since(now))
                                .unwrap_or_else(|p| p.into_inner())
                                .0
                        }
                        None => self.cv.wait(g).unwrap_or_else(|p| p.into_inner()),
                    };
                    g.waiters -= 1;
                }
            }
        }
    }

    /// One progress step without blocking (the keeper thread's tick), if the reactor is free.
    pub fn try_tick(&self) {
        let mut g = self.lock();
        if let Some(reactor) = g.reactor.take() {
            g = self.poll_once(g, reactor, Some(Instant::now()));
            drop(g);
        }
    }

    fn poll_once<'a>(
        &'a self,
        mut g: MutexGuard<'a, State>,
        mut reactor: Reactor,
        deadline: Option<Instant>,
    ) -> MutexGuard<'a, State> {
        let now = Instant::now();
        let mut wake_at = g.next_tick;
        if let Some(t) = g.router.next_deadline() {
            wake_at = wake_at.min(t);
        }
        if let Some(d) = deadline {
            wake_at = wake_at.min(d);
        }
        let timeout = wake_at.saturating_duration_since(now);
        // Frames queued by senders while the reactor was out go first.
        for (link, lane, bytes) in g.outbox.0.drain(..) {
            reactor.send_on(link, lane, bytes);
        }
        reactor.flush_all();
        let mut events = std::mem::take(&mut g.events);
        drop(g);
        let poll_err = reactor.poll(Some(timeout), &mut events).err();
        let mut g = self.lock();
        let now = Instant::now();
        let st = &mut *g;
        {
            let mut out = TracedOut {
                inner: &mut reactor,
                peers: &st.peers,
            };
            for ev in events.drain(..) {
                match ev {
                    ReactorEvent::Frame(link, f) => st.router.on_frame(link, f, now, &mut out),
                    ReactorEvent::Closed(link, err) => {
                        let reason = err
                            .map(|e| e.to_string())
                            .unwrap_or_else(|| "connection closed".into());
                        st.router.on_closed(link, reason, now, &mut out);
                    }
                    ReactorEvent::Woken => {}
                }
            }
            if let Some(e) = poll_err {
                st.router.parent_lost(format!("poll failed: {e}"));
            }
            st.router.on_timer(now, &mut out);
        }
        st.router.apply_backpressure(&mut reactor, st.queue_limit);
        if now >= st.next_tick {
            let dead = st.router.on_tick(now, &mut reactor);
            for (link, reason) in dead {
                reactor.remove(link);
                let mut out = TracedOut {
                    inner: &mut reactor,
                    peers: &st.peers,
                };
                st.router.on_closed(link, reason, now, &mut out);
            }
            st.next_tick = now + st.router.tick_period();
        }
        accept_orphans(st, &mut reactor, now, &self.waker);
        if let Some((link, reply)) = st.new_parent.take() {
            install_parent(st, &mut reactor, link, reply);
        }
        self.start_rejoin(st);
        // Before the flush below, so the ShutdownDone queued on close leaves only once
        // the file is written.
        if st.router.is_closed() {
            if let Some(d) = st.dump_on_close.take() {
                d.write_or_log();
            }
        }
        for (link, lane, bytes) in st.outbox.0.drain(..) {
            reactor.send_on(link, lane, bytes);
        }
        reactor.flush_all();
        st.sync_notifiers();
        st.events = events;
        st.reactor = Some(reactor);
        if st.waiters > 0 {
            self.cv.notify_all();
        }
        g
    }

    /// Starts asking the ancestors for adoption if this node is a new orphan.
    fn start_rejoin(&self, st: &mut State) {
        let Some(rejoin) = st.rejoin.as_ref() else {
            return;
        };
        // The lost parent first: a refused connection costs nothing, and a parent that
        // only dropped us (a stopped process, a partition) takes us back.
        let Some((msg, ancestors)) = st.router.rejoin_request() else {
            return;
        };
        let (secret, max_frame) = (rejoin.secret.clone(), rejoin.max_frame);
        let weak = self.me.clone();
        let node = st.router.node();
        let spawned = std::thread::Builder::new()
            .name("vargr-rejoin".into())
            .spawn(move || {
                let r = recovery::rejoin(&secret, &ancestors, &msg, ADOPT_TIMEOUT);
                if let Some(e) = weak.upgrade() {
                    e.finish_rejoin(r, max_frame);
                }
            });
        if let Err(e) = spawned {
            st.router.give_up_rejoin(TbonError::Net(format!(
                "node {node}: starting the rejoin thread: {e}"
            )));
        }
    }

    /// Installs the new parent, or stops the orphan nobody adopted.
    fn finish_rejoin(
        &self,
        r: Result<(SecureConn, AdoptedMsg, proto::Ancestor), TbonError>,
        max_frame: usize,
    ) {
        let installed = r.and_then(|(conn, reply, who)| {
            let link = conn
                .into_link(
                    format!("node {} on {} (adopter)", who.node, who.host),
                    max_frame,
                )
                .map_err(|e| TbonError::Net(format!("adopted by node {}: {e}", who.node)))?;
            self.lock().new_parent = Some((link, reply));
            let _ = self.waker.wake();
            Ok(())
        });
        if let Err(e) = installed {
            let mut g = self.lock();
            tracing::debug!(node = g.router.node(), "{e}");
            g.router.give_up_rejoin(e);
            drop(g);
            self.cv.notify_all();
            let _ = self.waker.wake();
        }
    }

    /// A descriptor that is readable while a receive watched by `watch` would return at
    /// once (one per kind of watch: asking again returns the same one). The first call
    /// starts a progress thread, since nobody may be in the library to read the links
    /// while the program waits on the descriptor. The descriptor belongs to the engine:
    /// do not close or read it; it is closed when the engine is dropped.
    pub fn notification_fd(&self, watch: Watch) -> std::io::Result<RawFd> {
        let mut g = self.lock();
        if let Some(n) = g.notifiers.iter().find(|n| n.watch == watch) {
            return Ok(n.reader.as_raw_fd());
        }
        g.notifiers.push(Notifier::new(watch)?);
        g.sync_notifiers();
        let fd = g.notifiers.last().map(|n| n.reader.as_raw_fd());
        drop(g);
        self.start_progress()?;
        fd.ok_or_else(|| std::io::Error::other("notifier vanished"))
    }

    /// Polls on behalf of a program that waits outside the library (or that publishes
    /// observed values, which readers take from this node while the program does
    /// something else), until the router closes or the engine is dropped. Once per
    /// engine: later calls do nothing.
    pub fn start_progress(&self) -> std::io::Result<()> {
        if self
            .progressing
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return Ok(());
        }
        let weak = self.me.clone();
        std::thread::Builder::new()
            .name("vargr-progress".into())
            .spawn(move || loop {
                let Some(e) = weak.upgrade() else { return };
                let deadline = Instant::now() + PROGRESS_SLICE;
                if e.wait_for(Some(deadline), |st| st.router.is_closed().then_some(()))
                    .is_some()
                {
                    return;
                }
            })
            .map(drop)
    }

    /// Total bytes waiting to be written on the given link (backpressure checks).
    pub fn backlog(state: &State, link: vargr_net::LinkId) -> usize {
        state
            .reactor
            .as_ref()
            .and_then(|r| r.link(link))
            .map(|l| l.backlog())
            .unwrap_or(0)
    }

    /// Spawns the keeper: heartbeats and liveness while no user thread is in the library.
    pub fn start_keeper(self: &Arc<Self>, period: Duration, node: u32) {
        let weak = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("vargr-keeper".into())
            .spawn(move || {
                crate::trace::label_thread(node, "keeper");
                loop {
                    std::thread::sleep(period);
                    let Some(e) = weak.upgrade() else { return };
                    if e.lock().router.is_closed() {
                        return;
                    }
                    e.try_tick();
                }
            })
            .expect("spawning the keeper thread");
    }
}

/// Registers the link to the node that adopted this orphan.
fn install_parent(st: &mut State, reactor: &mut Reactor, link: vargr_net::Link, reply: AdoptedMsg) {
    match reactor.add(link) {
        Ok(id) => {
            st.peers.set(id, reply.parent);
            let mut out = TracedOut {
                inner: reactor,
                peers: &st.peers,
            };
            st.router.adopted(id, reply, &mut out);
        }
        Err(e) => {
            st.router.give_up_rejoin(TbonError::Net(format!(
                "registering the link to adopter node {}: {e}",
                reply.parent
            )));
        }
    }
}

/// Takes the orphans waiting at this node's gate: reads each one's request, checks it
/// is who it proved to be, and adopts it (or says why not).
fn accept_orphans(
    st: &mut State,
    reactor: &mut Reactor,
    now: Instant,
    waker: &Arc<vargr_net::Waker>,
) {
    let Some(ad) = st.adopter.as_ref() else {
        return;
    };
    let max_frame = ad.max_frame;
    // Each request is read on a thread of its own, so an orphan slow to ask (stopped
    // right after its handshake, say) holds up nothing here.
    while let Ok(a) = ad.gate.accept_timeout(Duration::ZERO) {
        let (asked, waker, me) = (st.asked.clone(), waker.clone(), st.router.node());
        let spawned = std::thread::Builder::new()
            .name("vargr-orphan".into())
            .spawn(move || {
                if let Some(r) = read_request(a, me) {
                    asked.lock().unwrap_or_else(|p| p.into_inner()).push(r);
                    let _ = waker.wake();
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(node = st.router.node(), "reading an orphan's request: {e}");
        }
    }
    let asked = std::mem::take(&mut *st.asked.lock().unwrap_or_else(|p| p.into_inner()));
    for (mut conn, msg) in asked {
        let proven = msg.node;
        let reply = match st.router.adoption_answer() {
            Ok(r) => r,
            Err(why) => {
                refuse(&mut conn, &why);
                continue;
            }
        };
        // A child still claiming the orphan's back-ends is on its dead path.
        let claiming = match st.router.children_claiming(&msg.backends) {
            Ok(c) => c,
            Err(why) => {
                refuse(&mut conn, &why);
                continue;
            }
        };
        for l in claiming {
            reactor.remove(l);
            let reason = format!(
                "node {} (orphaned by node {}) could not reach the tree through it",
                msg.node, msg.lost_parent
            );
            let mut out = TracedOut {
                inner: reactor,
                peers: &st.peers,
            };
            st.router.on_closed(l, reason, now, &mut out);
        }
        let f = Frame::new(FrameKind::Adopted, 0, 0, proto::to_json(&reply));
        if let Err(e) = conn.write_frame(&f) {
            tracing::warn!(
                node = st.router.node(),
                orphan = proven,
                "answering an orphan: {e}"
            );
            continue;
        }
        let link = match conn.into_link(
            format!("node {} on {} (adopted)", msg.node, msg.host),
            max_frame,
        ) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(
                    node = st.router.node(),
                    orphan = proven,
                    "adopting an orphan: {e}"
                );
                continue;
            }
        };
        match reactor.add(link) {
            Ok(id) => {
                st.peers.set(id, msg.node);
                let mut out = TracedOut {
                    inner: reactor,
                    peers: &st.peers,
                };
                st.router.adopt(id, msg, now, &mut out);
            }
            Err(e) => tracing::warn!(
                node = st.router.node(),
                orphan = proven,
                "registering an orphan: {e}"
            ),
        }
    }
}

/// Reads what an admitted orphan asks; `None` (said on stderr) if it is not a request
/// from the node it proved to be.
fn read_request(a: vargr_net::gate::Admitted, me: u32) -> Option<(SecureConn, AdoptMsg)> {
    let proven = a.node;
    let mut conn = a.conn;
    conn.set_timeout(Some(ADOPT_TIMEOUT));
    let request = conn
        .read_frame(64 << 20)
        .map_err(TbonError::from)
        .and_then(|f| match f.kind {
            FrameKind::Adopt => proto::from_json::<AdoptMsg>("Adopt", &f.payload),
            k => Err(TbonError::Net(format!(
                "expected an adoption request, got {}",
                k.name()
            ))),
        });
    match request {
        Ok(m) if m.node == proven => Some((conn, m)),
        Ok(m) => {
            refuse(
                &mut conn,
                &format!("node {proven} asked to adopt node {}", m.node),
            );
            None
        }
        Err(e) => {
            tracing::warn!(node = me, orphan = proven, "an orphan's request: {e}");
            None
        }
    }
}

fn refuse(conn: &mut SecureConn, why: &str) {
    let _ = conn.write_frame(&Frame::new(FrameKind::Refused, 0, 0, why.to_string()));
}
