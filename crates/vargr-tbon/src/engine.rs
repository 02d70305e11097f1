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

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use vargr_net::{Reactor, ReactorEvent};

use crate::router::{Out, Outbox, Router};
use crate::trace::{LinkPeers, TraceDump, TracedOut};

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
}

pub struct Engine {
    state: Mutex<State>,
    cv: Condvar,
    waker: Arc<vargr_net::Waker>,
}

impl Engine {
    pub fn new(router: Router, reactor: Reactor, queue_limit: usize) -> Arc<Engine> {
        let waker = reactor.waker();
        let peers = LinkPeers::new(
            router
                .parent
                .map(|p| (p, router.parent_node))
                .into_iter()
                .chain(router.children.iter().map(|c| (c.link, c.node))),
        );
        Arc::new(Engine {
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
                out
            }
            None => {
                let mut traced = TracedOut {
                    inner: &mut st.outbox,
                    peers: &st.peers,
                };
                let out = f(&mut st.router, &mut traced);
                drop(g);
                let _ = self.waker.wake();
                out
            }
        }
    }

    /// Ends deliveries (the network is gone): every thread waiting in a receive, or
    /// receiving later, gets `TbonError::Shutdown` once its queue is empty.
    pub fn close_deliveries(&self) {
        self.lock()
            .router
            .deliveries
            .closed
            .get_or_insert(crate::TbonError::Shutdown);
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
            st.next_tick = now + st.router.heartbeat / 2;
        }
        // Before the flush below, so the ShutdownDone queued on close leaves only once
        // the file is written.
        if st.router.deliveries.closed.is_some() {
            if let Some(d) = st.dump_on_close.take() {
                d.write_or_log();
            }
        }
        for (link, lane, bytes) in st.outbox.0.drain(..) {
            reactor.send_on(link, lane, bytes);
        }
        reactor.flush_all();
        st.events = events;
        st.reactor = Some(reactor);
        if st.waiters > 0 {
            self.cv.notify_all();
        }
        g
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
                    if e.lock().router.deliveries.closed.is_some() {
                        return;
                    }
                    e.try_tick();
                }
            })
            .expect("spawning the keeper thread");
    }
}
