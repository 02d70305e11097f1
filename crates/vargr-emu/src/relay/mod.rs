//! A standalone TCP relay that puts an emulated WAN in front of any TCP program.
//!
//! `vargr emu --listen A --connect B --latency 18ms --bandwidth 100mbit` makes every
//! connection to `A` a connection to `B` that behaves as if it crossed a WAN: each
//! direction goes through a [`Shaper`], and bytes are written when they fall due.
//!
//! **One thread, one poll loop.** The seed's Longcut ran a thread per connection and lost
//! accuracy when many threads spun at once; it fixed that by letting only one thread spin.
//! This relay goes further: a single `mio` loop owns all sockets, sleeps on a
//! nanosecond `timerfd` until the earliest due time, then busy-polls only the last
//! [`RelayConfig::spin`] (so exactly one thread ever spins, and it still sees new data
//! while it does). On a 2-core machine this keeps context switches off the latency path
//! and makes 40 connections cost the same as 2.
//!
//! **Shared bottleneck.** By default all connections share one bottleneck per direction,
//! as all traffic between two sites shares their WAN ([`Sharing`]); each connection still
//! keeps its own byte order.
//!
//! **Backpressure.** A connection holds at most [`RelayConfig::max_in_flight`] bytes per
//! direction; beyond that the relay stops reading and TCP flow control slows the sender,
//! so memory stays bounded however fast a program writes.
//!
//! **Closing.** An end of stream is delayed like data and passed on as a half-close; a
//! read or write error, or a target that cannot be reached, resets the connection (both
//! sides see an error, not a clean end) and is reported as a [`RelayEvent`].
//!
//! A trace ([`LinkSpec::Trace`]) replays from the moment [`Relay::run`] starts, for all
//! connections alike.
//!
//! The TCP handshake itself is not delayed: `connect` to the relay returns at loopback
//! speed, and only the bytes (and end of stream) that follow are shaped.

mod conn;
mod rx;

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::error::EmuError;
use crate::profile::LinkSpec;
use crate::shaper::Shaper;
use conn::{Conn, Ctx, Failure};
use vargr_timer::{RealtimeGuard, SlackGuard, Timer};

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const TIMER: Token = Token(2);
const FIRST_CONN_TOKEN: usize = 3;
const READ_CHUNK: usize = 64 << 10;
/// The relay's `SCHED_FIFO` priority: above normal threads, below the kernel's own
/// real-time threads (which use 50 and up).
const RT_PRIORITY: i32 = 10;

/// Whether connections share the emulated link's bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sharing {
    /// All connections through the relay share one bottleneck per direction, like all
    /// traffic between two sites shares the WAN between them (the default).
    #[default]
    Shared,
    /// Each connection gets the full bandwidth to itself.
    PerConnection,
}

/// Called for each [`RelayEvent`]; the CLI prints them, tests collect them.
#[derive(Clone)]
pub struct EventSink(Arc<dyn Fn(&RelayEvent) + Send + Sync>);

impl EventSink {
    /// Wraps a callback.
    pub fn new(f: impl Fn(&RelayEvent) + Send + Sync + 'static) -> EventSink {
        EventSink(Arc::new(f))
    }
}

impl fmt::Debug for EventSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EventSink(..)")
    }
}

/// Something that happened to one relayed connection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RelayEvent {
    /// A client connected; the relay is connecting to the target for it.
    Accepted {
        /// Connection number, counting from 0.
        conn: u64,
        /// The client's address.
        peer: SocketAddr,
    },
    /// The target could not be reached; the client's connection was reset.
    ConnectFailed {
        /// Connection number.
        conn: u64,
        /// The target address.
        target: SocketAddr,
        /// Why.
        error: String,
    },
    /// Both directions ended cleanly.
    Closed {
        /// Connection number.
        conn: u64,
        /// Bytes delivered from client to target.
        forward_bytes: u64,
        /// Bytes delivered from target to client.
        backward_bytes: u64,
    },
    /// A read or write failed, or the relay stopped; both sides were reset.
    Reset {
        /// Connection number.
        conn: u64,
        /// Which side and what error.
        reason: String,
    },
    /// `accept` failed (for example out of file descriptors); the relay keeps going.
    AcceptFailed {
        /// Why.
        error: String,
    },
    /// [`RelayConfig::realtime`] asked for real-time scheduling and the system refused
    /// it; the relay runs at the normal priority, less exact on a loaded machine.
    NotRealtime {
        /// Why.
        error: String,
    },
}

impl fmt::Display for RelayEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RelayEvent::Accepted { conn, peer } => {
                write!(f, "connection {conn}: accepted from {peer}")
            }
            RelayEvent::ConnectFailed {
                conn,
                target,
                error,
            } => write!(
                f,
                "connection {conn}: cannot connect to target {target}: {error}; \
                 closing the client side"
            ),
            RelayEvent::Closed {
                conn,
                forward_bytes,
                backward_bytes,
            } => write!(
                f,
                "connection {conn}: closed \
                 ({forward_bytes} bytes to target, {backward_bytes} bytes back)"
            ),
            RelayEvent::Reset { conn, reason } => {
                write!(f, "connection {conn}: reset: {reason}")
            }
            RelayEvent::AcceptFailed { error } => write!(f, "accept failed: {error}"),
            RelayEvent::NotRealtime { error } => write!(
                f,
                "real-time scheduling refused ({error}): running at normal priority, \
                 delays may be late on a loaded machine"
            ),
        }
    }
}

/// How to run a relay. Build with [`RelayConfig::new`], then adjust fields.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Where clients connect (port 0 picks a free port; see [`Relay::local_addr`]).
    pub listen: SocketAddr,
    /// The real server each accepted connection is relayed to.
    pub connect: SocketAddr,
    /// The link from clients to the target.
    pub forward: LinkSpec,
    /// The link from the target back to clients.
    pub backward: LinkSpec,
    /// Shared bottleneck (default) or full bandwidth per connection.
    pub sharing: Sharing,
    /// Seed for jitter; the same seed and the same arrivals give the same delays.
    pub seed: u64,
    /// Bytes one connection may hold per direction before the relay stops reading from
    /// it. `None` (the default) picks twice the bandwidth-delay product plus 256 KiB,
    /// between 256 KiB and 64 MiB (4 MiB for unlimited bandwidth): enough to keep the
    /// emulated link full.
    pub max_in_flight: Option<usize>,
    /// How long before a due time the loop stops sleeping and busy-polls instead
    /// (default 50 µs). Larger is more precise under load and burns more CPU; zero never
    /// spins.
    pub spin: Duration,
    /// Whether the relay's thread asks for real-time scheduling (`SCHED_FIFO`, the
    /// default): on a machine busy with the programs it serves, a thread at the normal
    /// priority waits whole scheduler slices (milliseconds) past a due time. Without
    /// the privilege it runs at the normal priority and says so
    /// ([`RelayEvent::NotRealtime`], [`RelayStats::realtime`]).
    pub realtime: bool,
    /// Where connection events go; `None` drops them (they are still counted).
    pub events: Option<EventSink>,
}

impl RelayConfig {
    /// The default [`spin`](Self::spin) margin: about one wake-up's worth of scheduling
    /// delay on a loaded machine.
    pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

    /// A relay from `listen` to `connect` with the same `spec` in both directions.
    pub fn new(listen: SocketAddr, connect: SocketAddr, spec: impl Into<LinkSpec>) -> RelayConfig {
        let spec = spec.into();
        RelayConfig {
            listen,
            connect,
            forward: spec.clone(),
            backward: spec,
            sharing: Sharing::Shared,
            seed: 0,
            max_in_flight: None,
            spin: Self::DEFAULT_SPIN,
            realtime: true,
            events: None,
        }
    }

    /// The same configuration with a different link from the target back to clients
    /// (traces often show different bandwidth in the two directions).
    pub fn with_backward(mut self, spec: impl Into<LinkSpec>) -> RelayConfig {
        self.backward = spec.into();
        self
    }

    fn cap(&self, spec: &LinkSpec) -> usize {
        if let Some(cap) = self.max_in_flight {
            return cap.max(1);
        }
        const MIN: u128 = 256 << 10;
        match spec.max_bandwidth() {
            Some(bw) => {
                let bdp = u128::from(bw) * spec.max_latency().as_nanos() / 8_000_000_000;
                (2 * bdp + MIN).clamp(MIN, 64 << 20) as usize
            }
            None => 4 << 20,
        }
    }
}

/// About one millisecond of serialization, between an Ethernet frame and one read.
fn segment_size(spec: &LinkSpec) -> usize {
    match spec.max_bandwidth() {
        Some(bw) => ((bw / 8_000) as usize).clamp(1500, READ_CHUNK),
        None => READ_CHUNK,
    }
}

/// What a relay did, returned when it stops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections whose target could not be reached.
    pub connect_failures: u64,
    /// Connections that ended cleanly in both directions.
    pub closed: u64,
    /// Connections reset after an error, or by stopping the relay.
    pub resets: u64,
    /// Bytes delivered from clients to the target.
    pub forward_bytes: u64,
    /// Bytes delivered from the target to clients.
    pub backward_bytes: u64,
    /// Segments delivered.
    pub deliveries: u64,
    /// Sum of how late segments were written after their due time.
    pub lateness_total: Duration,
    /// Whether the relay ran under real-time scheduling ([`RelayConfig::realtime`]).
    pub realtime: bool,
    /// The latest a segment was written after its due time.
    pub lateness_max: Duration,
    /// Lateness histogram: bucket `i` counts segments written less than `2^i` µs late
    /// (and not in a lower bucket); the last bucket takes the rest.
    pub lateness_buckets: [u64; LATENESS_BUCKETS],
}

/// Number of buckets in [`RelayStats::lateness_buckets`]: up to about 33 ms.
pub const LATENESS_BUCKETS: usize = 16;

impl RelayStats {
    /// Mean time segments were written after they fell due: the relay's own error.
    pub fn lateness_mean(&self) -> Duration {
        if self.deliveries == 0 {
            return Duration::ZERO;
        }
        let mean = self.lateness_total.as_nanos() / u128::from(self.deliveries);
        Duration::from_nanos(mean as u64)
    }

    /// An upper bound on the `q`-quantile (0..=1) of lateness, from the histogram.
    pub fn lateness_quantile(&self, q: f64) -> Duration {
        let want = (q.clamp(0.0, 1.0) * self.deliveries as f64).ceil() as u64;
        let mut seen = 0;
        for (i, count) in self.lateness_buckets.iter().enumerate() {
            seen += count;
            if seen >= want.max(1) {
                return if i == LATENESS_BUCKETS - 1 {
                    self.lateness_max
                } else {
                    Duration::from_micros(1 << i)
                };
            }
        }
        self.lateness_max
    }

    fn record_delivery(&mut self, late: Duration) {
        self.deliveries += 1;
        self.lateness_total += late;
        self.lateness_max = self.lateness_max.max(late);
        let micros = late.as_micros() as u64;
        let bucket = (u64::BITS - micros.leading_zeros()) as usize;
        self.lateness_buckets[bucket.min(LATENESS_BUCKETS - 1)] += 1;
    }
}

/// Stops one or more relays from any thread.
#[derive(Debug, Clone, Default)]
pub struct StopHandle {
    inner: Arc<StopInner>,
}

#[derive(Debug, Default)]
struct StopInner {
    stopped: AtomicBool,
    wakers: Mutex<Vec<Arc<Waker>>>,
}

impl StopHandle {
    /// A handle not yet stopped.
    pub fn new() -> StopHandle {
        StopHandle::default()
    }

    /// Asks every relay using this handle to reset its connections and return.
    pub fn stop(&self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        for waker in self.wakers().iter() {
            let _ = waker.wake();
        }
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.inner.stopped.load(Ordering::SeqCst)
    }

    fn wakers(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Waker>>> {
        // A panic elsewhere while holding the lock leaves a plain Vec: still usable.
        self.inner.wakers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn attach(&self, waker: Arc<Waker>) {
        self.wakers().push(waker);
    }

    fn detach(&self, waker: &Arc<Waker>) {
        self.wakers().retain(|w| !Arc::ptr_eq(w, waker));
    }
}

/// A bound relay, ready to [`run`](Relay::run) on the current thread.
#[derive(Debug)]
pub struct Relay {
    cfg: RelayConfig,
    poll: Poll,
    listener: TcpListener,
    local_addr: SocketAddr,
    stop: StopHandle,
    waker: Arc<Waker>,
    timer: Timer,
}

impl Drop for Relay {
    fn drop(&mut self) {
        // A stop handle outliving the relay should not keep waking a dead poll.
        self.stop.detach(&self.waker);
    }
}

/// Binds `cfg.listen` and runs the relay on this thread until `stop` is triggered.
pub fn run_relay(cfg: RelayConfig, stop: StopHandle) -> Result<RelayStats, EmuError> {
    Relay::bind_with_stop(cfg, stop)?.run()
}

impl Relay {
    /// Binds the listening socket, with a fresh [`StopHandle`].
    pub fn bind(cfg: RelayConfig) -> Result<Relay, EmuError> {
        Relay::bind_with_stop(cfg, StopHandle::new())
    }

    /// Binds the listening socket; `stop` ends [`run`](Relay::run).
    pub fn bind_with_stop(cfg: RelayConfig, stop: StopHandle) -> Result<Relay, EmuError> {
        let listen_err = |source| EmuError::Listen {
            addr: cfg.listen,
            source,
        };
        let poll = Poll::new()?;
        let mut listener = TcpListener::bind(cfg.listen).map_err(listen_err)?;
        let local_addr = listener.local_addr().map_err(listen_err)?;
        rx::enable(&listener);
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let timer = Timer::new(poll.registry(), TIMER)?;
        stop.attach(waker.clone());
        Ok(Relay {
            cfg,
            poll,
            listener,
            local_addr,
            stop,
            waker,
            timer,
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A handle that stops this relay.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Relays connections until stopped, then resets those still open and returns what
    /// it did. Only a failure of the loop itself is an error; connection failures are
    /// [`RelayEvent`]s.
    pub fn run(mut self) -> Result<RelayStats, EmuError> {
        let _slack = SlackGuard::minimal();
        let realtime = match self
            .cfg
            .realtime
            .then(|| RealtimeGuard::try_fifo(RT_PRIORITY))
        {
            Some(Ok(guard)) => Some(guard),
            Some(Err(e)) => {
                self.emit(RelayEvent::NotRealtime {
                    error: e.to_string(),
                });
                None
            }
            None => None,
        };
        let mut stats = self.event_loop()?;
        stats.realtime = realtime.is_some();
        Ok(stats)
    }

    fn event_loop(&mut self) -> Result<RelayStats, EmuError> {
        let start = Instant::now();
        let mut loop_state = LoopState {
            shared: [
                self.new_shaper(&self.cfg.forward, 0, start),
                self.new_shaper(&self.cfg.backward, 1, start),
            ],
            cap: [
                self.cfg.cap(&self.cfg.forward),
                self.cfg.cap(&self.cfg.backward),
            ],
            segment: [
                segment_size(&self.cfg.forward),
                segment_size(&self.cfg.backward),
            ],
            scratch: vec![0; READ_CHUNK],
            stats: RelayStats::default(),
            conns: HashMap::new(),
            next_id: 0,
            start,
        };
        let mut events = Events::with_capacity(1024);
        while !self.stop.is_stopped() {
            loop_state.deliver_due(self, Instant::now());
            let timeout = match loop_state.next_deadline() {
                None => None,
                Some(due) => {
                    let left = due.saturating_duration_since(Instant::now());
                    if left <= self.cfg.spin {
                        Some(Duration::ZERO)
                    } else {
                        self.timer.arm(left - self.cfg.spin)?
                    }
                }
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e.into());
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => loop_state.accept_all(self),
                    WAKER => {}
                    TIMER => self.timer.drain(),
                    Token(t) => {
                        let id = ((t - FIRST_CONN_TOKEN) / 2) as u64;
                        let side = (t - FIRST_CONN_TOKEN) % 2;
                        loop_state.on_conn_event(self, id, side, event);
                    }
                }
            }
        }
        let ids: Vec<u64> = loop_state.conns.keys().copied().collect();
        for id in ids {
            loop_state.finish(self, id, Some(Failure::Io("the relay was stopped".into())));
        }
        Ok(loop_state.stats)
    }

    fn new_shaper(&self, spec: &LinkSpec, direction: u64, epoch: Instant) -> Shaper {
        // Distinct, reproducible jitter streams per direction.
        let mut s = Shaper::new(
            spec.clone(),
            self.cfg.seed ^ direction.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        s.set_epoch(epoch);
        s
    }

    fn emit(&self, event: RelayEvent) {
        if let Some(sink) = &self.cfg.events {
            (sink.0)(&event);
        }
    }
}

/// The event loop's mutable state, apart from the poll itself.
struct LoopState {
    shared: [Shaper; 2],
    cap: [usize; 2],
    segment: [usize; 2],
    scratch: Vec<u8>,
    stats: RelayStats,
    conns: HashMap<u64, Conn>,
    next_id: u64,
    start: Instant,
}

impl LoopState {
    fn ctx(&mut self) -> (Ctx<'_>, &mut HashMap<u64, Conn>) {
        (
            Ctx {
                shared: &mut self.shared,
                cap: self.cap,
                segment: self.segment,
                scratch: &mut self.scratch,
                stats: &mut self.stats,
            },
            &mut self.conns,
        )
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.conns.values().filter_map(Conn::next_deadline).min()
    }

    fn deliver_due(&mut self, relay: &Relay, now: Instant) {
        let mut ended = Vec::new();
        let (mut ctx, conns) = self.ctx();
        for (&id, conn) in conns.iter_mut() {
            match conn.deliver(now, &mut ctx) {
                Ok(()) if conn.is_done() => ended.push((id, None)),
                Ok(()) => {}
                Err(f) => ended.push((id, Some(f))),
            }
        }
        for (id, failure) in ended {
            self.finish(relay, id, failure);
        }
    }

    fn on_conn_event(&mut self, relay: &Relay, id: u64, side: usize, event: &mio::event::Event) {
        let (mut ctx, conns) = self.ctx();
        let Some(conn) = conns.get_mut(&id) else {
            return; // an event for a connection closed earlier in this batch
        };
        match conn.on_event(side, event, &mut ctx) {
            Ok(()) if conn.is_done() => self.finish(relay, id, None),
            Ok(()) => {}
            Err(f) => self.finish(relay, id, Some(f)),
        }
    }

    fn accept_all(&mut self, relay: &Relay) {
        loop {
            let (client, peer) = match relay.listener.accept() {
                Ok(pair) => pair,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    relay.emit(RelayEvent::AcceptFailed {
                        error: e.to_string(),
                    });
                    return;
                }
            };
            let id = self.next_id;
            self.next_id += 1;
            self.stats.accepted += 1;
            relay.emit(RelayEvent::Accepted { conn: id, peer });
            let _ = client.set_nodelay(true);
            let target = match TcpStream::connect(relay.cfg.connect) {
                Ok(t) => t,
                Err(e) => {
                    self.connect_failed(relay, id, e);
                    Conn::reset_client(client);
                    continue;
                }
            };
            let own = (relay.cfg.sharing == Sharing::PerConnection).then(|| {
                let seed_shift = id.wrapping_add(1).wrapping_mul(0xD1B5_4A32_D192_ED03);
                Box::new([
                    relay.new_shaper(&relay.cfg.forward, seed_shift, self.start),
                    relay.new_shaper(&relay.cfg.backward, seed_shift ^ 1, self.start),
                ])
            });
            let mut conn = Conn::new(client, target, own);
            let base = FIRST_CONN_TOKEN + 2 * id as usize;
            if let Err(e) = conn.register(relay.poll.registry(), [Token(base), Token(base + 1)]) {
                conn.deregister(relay.poll.registry());
                self.stats.resets += 1;
                relay.emit(RelayEvent::Reset {
                    conn: id,
                    reason: format!("cannot register with the poll: {e}"),
                });
                conn.reset();
                continue;
            }
            self.conns.insert(id, conn);
        }
    }

    fn connect_failed(&mut self, relay: &Relay, id: u64, e: io::Error) {
        self.stats.connect_failures += 1;
        relay.emit(RelayEvent::ConnectFailed {
            conn: id,
            target: relay.cfg.connect,
            error: e.to_string(),
        });
    }

    /// Removes connection `id`: closed cleanly without a failure, reset with one.
    fn finish(&mut self, relay: &Relay, id: u64, failure: Option<Failure>) {
        let Some(mut conn) = self.conns.remove(&id) else {
            return;
        };
        conn.deregister(relay.poll.registry());
        let [forward_bytes, backward_bytes] = conn.delivered();
        self.stats.forward_bytes += forward_bytes;
        self.stats.backward_bytes += backward_bytes;
        match failure {
            None => {
                self.stats.closed += 1;
                relay.emit(RelayEvent::Closed {
                    conn: id,
                    forward_bytes,
                    backward_bytes,
                });
            }
            Some(Failure::Connect(e)) => {
                self.connect_failed(relay, id, e);
                conn.reset();
            }
            Some(Failure::Io(reason)) => {
                self.stats.resets += 1;
                relay.emit(RelayEvent::Reset { conn: id, reason });
                conn.reset();
            }
        }
    }
}
