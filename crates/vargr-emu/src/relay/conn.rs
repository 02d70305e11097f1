//! One relayed TCP connection: two sockets and a delay line per direction.
//!
//! Direction `d` reads from `sockets[d]` and writes to `sockets[1 - d]`: direction 0
//! ([`FORWARD`]) carries the accepted client's bytes to the target, direction 1
//! ([`BACKWARD`]) the target's replies. Bytes are stamped with their arrival time, split
//! into segments, scheduled by a [`Shaper`] and written when due. An end of stream is
//! scheduled like a zero-length segment and becomes `shutdown(Write)` on the other side,
//! so half-close passes through with the same delay as data.

use std::io::{self, IoSlice, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::event::Event;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::emulator::DelayQueue;
use crate::shaper::{Shaper, StreamOrder};

use super::{rx, RelayStats};

/// The accepted side, and the direction that reads from it.
pub(super) const FORWARD: usize = 0;
/// The target side, and the direction that reads from it.
pub(super) const BACKWARD: usize = 1;
const SIDE_NAMES: [&str; 2] = ["client", "target"];

/// Why a connection ended abnormally.
pub(super) enum Failure {
    /// The target could not be reached.
    Connect(io::Error),
    /// A read or write failed; the text says which side and why.
    Io(String),
}

/// Everything a connection borrows from the relay while it works.
pub(super) struct Ctx<'a> {
    /// The per-direction shapers shared by all connections (unless a connection has its
    /// own).
    pub shared: &'a mut [Shaper; 2],
    /// Per-direction bytes a connection may hold in its delay line before it stops
    /// reading (TCP then pushes back on the sender).
    pub cap: [usize; 2],
    /// Per-direction segment size: about 1 ms of serialization, so one large read does
    /// not arrive as a single late burst.
    pub segment: [usize; 2],
    pub scratch: &'a mut [u8],
    pub stats: &'a mut RelayStats,
}

#[derive(Default)]
struct Dir {
    queue: DelayQueue,
    order: StreamOrder,
    /// When the source's end of stream may be passed on; set once it is read.
    fin_due: Option<Instant>,
    fin_sent: bool,
    /// Reading stopped because the delay line is full.
    paused: bool,
    /// When reading last resumed after a pause. Bytes that waited in the kernel while
    /// the delay line was full count as arriving now, not when the kernel got them: on a
    /// real link TCP flow control would have held them at the sender.
    resumed: Option<Instant>,
    /// The destination socket returned `WouldBlock`; wait for it to be writable.
    blocked: bool,
    delivered: u64,
}

pub(super) struct Conn {
    sockets: [TcpStream; 2],
    connected: bool,
    dirs: [Dir; 2],
    /// Per-connection shapers when bandwidth is not shared.
    own: Option<Box<[Shaper; 2]>>,
}

impl Conn {
    pub(super) fn new(client: TcpStream, target: TcpStream, own: Option<Box<[Shaper; 2]>>) -> Conn {
        rx::enable(&client);
        rx::enable(&target);
        Conn {
            sockets: [client, target],
            connected: false,
            dirs: Default::default(),
            own,
        }
    }

    pub(super) fn register(&mut self, registry: &Registry, tokens: [Token; 2]) -> io::Result<()> {
        for (socket, token) in self.sockets.iter_mut().zip(tokens) {
            registry.register(socket, token, Interest::READABLE | Interest::WRITABLE)?;
        }
        Ok(())
    }

    pub(super) fn deregister(&mut self, registry: &Registry) {
        for socket in &mut self.sockets {
            let _ = registry.deregister(socket);
        }
    }

    /// Bytes delivered in each direction.
    pub(super) fn delivered(&self) -> [u64; 2] {
        [self.dirs[0].delivered, self.dirs[1].delivered]
    }

    /// Both ends of stream have been passed on: nothing is left to do.
    pub(super) fn is_done(&self) -> bool {
        self.dirs.iter().all(|d| d.fin_sent)
    }

    /// Aborts both sides with a reset, so each peer sees an error rather than a clean
    /// end of stream it might take for success.
    pub(super) fn reset(self) {
        for socket in &self.sockets {
            let _ = socket2::SockRef::from(socket).set_linger(Some(Duration::ZERO));
        }
    }

    /// The accepted side only (the target never answered).
    pub(super) fn reset_client(client: TcpStream) {
        let _ = socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO));
    }

    /// Handles readiness of `side`.
    pub(super) fn on_event(
        &mut self,
        side: usize,
        event: &Event,
        ctx: &mut Ctx,
    ) -> Result<(), Failure> {
        if side == BACKWARD && !self.connected {
            if !self.check_connected()? {
                return Ok(());
            }
            // Client bytes that arrived while connecting can go now.
            self.flush(FORWARD, Instant::now(), ctx)?;
        }
        if event.is_readable() || event.is_read_closed() || event.is_error() {
            self.pump(side, ctx)?;
        }
        if event.is_writable() || event.is_error() {
            // `side` is the destination of the other direction.
            let d = 1 - side;
            self.dirs[d].blocked = false;
            self.flush(d, Instant::now(), ctx)?;
        }
        Ok(())
    }

    /// Writes everything due at `now` in both directions.
    pub(super) fn deliver(&mut self, now: Instant, ctx: &mut Ctx) -> Result<(), Failure> {
        self.flush(FORWARD, now, ctx)?;
        self.flush(BACKWARD, now, ctx)
    }

    /// The earliest time this connection has something to write, ignoring directions
    /// that wait for their destination to become writable (or connected).
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        (0..2)
            .filter(|&d| !self.dirs[d].blocked && (d == BACKWARD || self.connected))
            .filter_map(|d| {
                let dir = &self.dirs[d];
                match dir.queue.next_due() {
                    Some(due) => Some(due),
                    None if !dir.fin_sent => dir.fin_due,
                    None => None,
                }
            })
            .min()
    }

    fn check_connected(&mut self) -> Result<bool, Failure> {
        let target = &self.sockets[BACKWARD];
        if let Some(e) = target.take_error().map_err(Failure::Connect)? {
            return Err(Failure::Connect(e));
        }
        match target.peer_addr() {
            Ok(_) => {
                // Nagle would hold small messages back and add its own latency.
                let _ = target.set_nodelay(true);
                self.connected = true;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(false),
            Err(e) => Err(Failure::Connect(e)),
        }
    }

    /// Reads what the source of direction `d` has, until it would block, ends, or the
    /// delay line is full.
    fn pump(&mut self, d: usize, ctx: &mut Ctx) -> Result<(), Failure> {
        if d == BACKWARD && !self.connected {
            return Ok(());
        }
        let shaper = match self.own.as_deref_mut() {
            Some(own) => &mut own[d],
            None => &mut ctx.shared[d],
        };
        let dir = &mut self.dirs[d];
        if dir.paused {
            dir.resumed = Some(Instant::now());
        }
        loop {
            if dir.fin_due.is_some() {
                return Ok(());
            }
            if dir.queue.bytes() >= ctx.cap[d] {
                dir.paused = true;
                return Ok(());
            }
            let read = rx::read_stamped(&mut self.sockets[d], ctx.scratch)
                .map(|(n, arrival)| (n, arrival.max(dir.resumed.unwrap_or(arrival))));
            match read {
                Ok((0, now)) => {
                    dir.fin_due = Some(shaper.schedule_on(&mut dir.order, now, 0));
                    dir.paused = false;
                }
                Ok((n, now)) => {
                    let mut data = Bytes::copy_from_slice(&ctx.scratch[..n]);
                    while !data.is_empty() {
                        let segment = data.split_to(data.len().min(ctx.segment[d]));
                        let due = shaper.schedule_on(&mut dir.order, now, segment.len());
                        dir.queue.push(due, segment);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    dir.paused = false;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Failure::Io(format!("reading from {}: {e}", SIDE_NAMES[d]))),
            }
        }
    }

    /// Writes the due segments of direction `d`, then its end of stream when that is due.
    fn flush(&mut self, d: usize, now: Instant, ctx: &mut Ctx) -> Result<(), Failure> {
        if d == FORWARD && !self.connected {
            return Ok(());
        }
        let dest = 1 - d;
        let dir = &mut self.dirs[d];
        while !dir.blocked {
            // Everything due goes out in one vectored write: fewer syscalls when the loop
            // woke late or many small segments fall due together.
            let mut iov = [IoSlice::new(&[]); 32];
            let mut count = 0;
            for (slot, chunk) in iov.iter_mut().zip(dir.queue.due(now)) {
                *slot = IoSlice::new(chunk);
                count += 1;
            }
            if count == 0 {
                break;
            }
            match self.sockets[dest].write_vectored(&iov[..count]) {
                Ok(0) => {
                    return Err(Failure::Io(format!(
                        "writing to {}: wrote 0 bytes",
                        SIDE_NAMES[dest]
                    )))
                }
                Ok(n) => {
                    let written = Instant::now();
                    let stats = &mut *ctx.stats;
                    dir.queue.consume(n, |due| {
                        stats.record_delivery(written.saturating_duration_since(due))
                    });
                    dir.delivered += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => dir.blocked = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Failure::Io(format!("writing to {}: {e}", SIDE_NAMES[dest]))),
            }
        }
        if !dir.fin_sent && dir.queue.len() == 0 && dir.fin_due.is_some_and(|due| due <= now) {
            dir.fin_sent = true;
            if let Err(e) = self.sockets[dest].shutdown(Shutdown::Write) {
                // The peer may already be gone; that is the other direction's news to tell.
                if e.kind() != io::ErrorKind::NotConnected {
                    return Err(Failure::Io(format!(
                        "shutting down {}: {e}",
                        SIDE_NAMES[dest]
                    )));
                }
            }
        }
        if dir.paused && dir.queue.bytes() < ctx.cap[d] {
            self.pump(d, ctx)?;
        }
        Ok(())
    }
}
