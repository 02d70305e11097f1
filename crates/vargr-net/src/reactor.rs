//! One poll loop over many links.
//!
//! The reactor owns the sockets of one process (or one in-process node). It is driven
//! by whoever holds it: a commnode's only thread, or a front-end/back-end thread that is
//! waiting for data. Frames and closed links come out as [`ReactorEvent`]s; the caller's
//! protocol logic decides what to send, and [`Reactor::flush_all`] batches the writes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::{Events, Interest, Poll, Token, Waker};
use vargr_wire::Frame;

use crate::{Link, NetError, ReadOutcome};

const WAKER: Token = Token(usize::MAX);
const TIMER: Token = Token(usize::MAX - 1);
/// Descriptors that only wake the poll (a shared-memory bell); their owner drains them.
const WATCHED: Token = Token(usize::MAX - 2);
/// Frames taken from one link before others get a turn.
const READ_BUDGET: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub usize);

#[derive(Debug)]
pub enum ReactorEvent {
    Frame(LinkId, Frame),
    /// The link is gone (peer closed, I/O error or malformed frame); it was removed.
    Closed(LinkId, Option<NetError>),
    /// Another thread called the waker.
    Woken,
}

pub struct Reactor {
    poll: Poll,
    events: Events,
    links: Vec<Option<Link>>,
    waker: Arc<Waker>,
    /// Links that may still hold unread data (budget used up, or paused).
    leftover: Vec<usize>,
    closed: Vec<(usize, Option<NetError>)>,
    frames: Vec<Frame>,
    /// Links with stages, whose held frames need timed releases.
    staged: Vec<usize>,
    /// Wakes the poll at a stage's deadline to the microsecond (`None` if it could not
    /// be made: deadlines then round up to milliseconds).
    timer: Option<vargr_timer::Timer>,
}

impl Reactor {
    pub fn new() -> std::io::Result<Reactor> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let timer = vargr_timer::Timer::new(poll.registry(), TIMER).ok();
        Ok(Reactor {
            poll,
            events: Events::with_capacity(256),
            links: Vec::new(),
            waker,
            leftover: Vec::new(),
            closed: Vec::new(),
            frames: Vec::new(),
            staged: Vec::new(),
            timer,
        })
    }

    pub fn waker(&self) -> Arc<Waker> {
        self.waker.clone()
    }

    /// Makes `fd` becoming readable end a poll; the caller drains it (and keeps it open
    /// as long as the reactor).
    pub fn watch_fd(&mut self, fd: std::os::fd::RawFd) -> std::io::Result<()> {
        self.poll
            .registry()
            .register(&mut mio::unix::SourceFd(&fd), WATCHED, Interest::READABLE)
    }

    pub fn add(&mut self, mut link: Link) -> std::io::Result<LinkId> {
        let idx = self
            .links
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.links.len());
        // Writable events only while a write is blocked (see `flush_all`): a socket
        // registered for them wakes its process each time the peer drains it.
        link.write_interest = false;
        self.poll
            .registry()
            .register(link.conn().source(), Token(idx), Interest::READABLE)?;
        self.staged.retain(|&i| i != idx);
        if !link.stages().is_empty() {
            self.staged.push(idx);
        }
        if idx == self.links.len() {
            self.links.push(Some(link));
        } else {
            self.links[idx] = Some(link);
        }
        self.leftover.push(idx);
        Ok(LinkId(idx))
    }

    pub fn remove(&mut self, id: LinkId) -> Option<Link> {
        let mut link = self.links.get_mut(id.0)?.take()?;
        let _ = self.poll.registry().deregister(link.conn().source());
        Some(link)
    }

    pub fn link(&self, id: LinkId) -> Option<&Link> {
        self.links.get(id.0)?.as_ref()
    }

    pub fn link_mut(&mut self, id: LinkId) -> Option<&mut Link> {
        self.links.get_mut(id.0)?.as_mut()
    }

    pub fn ids(&self) -> impl Iterator<Item = LinkId> + '_ {
        self.links
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_some())
            .map(|(i, _)| LinkId(i))
    }

    /// Queues an encoded frame on a link (dropped silently if the link is gone: its
    /// loss is reported once, as a `Closed` event).
    pub fn send(&mut self, id: LinkId, bytes: Bytes) {
        if let Some(l) = self.link_mut(id) {
            l.queue(bytes);
        }
    }

    /// Queues a low-priority frame; see [`Link::queue_low`].
    pub fn send_low(&mut self, id: LinkId, bytes: Bytes) {
        if let Some(l) = self.link_mut(id) {
            l.queue_low(bytes);
        }
    }

    /// Queues a latest-mode frame; see [`Link::queue_latest`] for `key`.
    pub fn send_latest(&mut self, id: LinkId, key: u64, bytes: Bytes) {
        if let Some(l) = self.link_mut(id) {
            l.queue_latest(key, bytes);
        }
    }

    /// Stops or resumes reading from a link (backpressure).
    pub fn set_paused(&mut self, id: LinkId, paused: bool) {
        let Some(l) = self.links.get_mut(id.0).and_then(Option::as_mut) else {
            return;
        };
        let resumed = l.paused && !paused;
        l.paused = paused;
        if resumed {
            // The peer could not be heard while paused: its silence starts now.
            l.last_read = std::time::Instant::now();
        }
        if resumed {
            self.leftover.push(id.0);
        }
    }

    /// Writes every queued frame the sockets accept now.
    pub fn flush_all(&mut self) {
        for (i, slot) in self.links.iter_mut().enumerate() {
            let Some(l) = slot else { continue };
            if l.wants_write() && l.writable {
                if let Err(e) = l.flush() {
                    self.closed.push((i, Some(e)));
                    continue;
                }
            }
            // Ask for writable events only while a write is blocked.
            let want = l.wants_write();
            if want != l.write_interest {
                let interest = if want {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                if let Err(e) =
                    self.poll
                        .registry()
                        .reregister(l.conn().source(), Token(i), interest)
                {
                    self.closed
                        .push((i, Some(NetError::io("re-registering", l.peer(), e))));
                    continue;
                }
                // Re-registering reports a socket that drained meanwhile, so no wake-up is lost.
                l.write_interest = want;
            }
        }
        self.reap();
    }

    fn reap(&mut self) {
        for (i, _) in &self.closed {
            if let Some(mut l) = self.links[*i].take() {
                let _ = self.poll.registry().deregister(l.conn().source());
            }
        }
    }

    /// The earliest time a link's stages release a held frame.
    pub fn stage_deadline(&self) -> Option<Instant> {
        self.staged
            .iter()
            .filter_map(|&i| {
                let l = self.links.get(i)?.as_ref()?;
                match (l.stage_deadline(), l.path_deadline()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            })
            .min()
    }

    /// Queues held frames that are due.
    fn release_stages(&mut self) {
        if self.staged.is_empty() {
            return;
        }
        let now = Instant::now();
        for &i in &self.staged {
            if let Some(Some(l)) = self.links.get_mut(i) {
                if l.stage_deadline().is_some_and(|d| d <= now) {
                    l.release_stages(now);
                }
                if l.path_deadline().is_some_and(|d| d <= now) {
                    l.poll_path();
                }
            }
        }
    }

    /// Waits up to `timeout` (None: forever) for I/O, then reads what arrived.
    pub fn poll(
        &mut self,
        timeout: Option<Duration>,
        out: &mut Vec<ReactorEvent>,
    ) -> std::io::Result<()> {
        for (i, e) in self.closed.drain(..) {
            out.push(ReactorEvent::Closed(LinkId(i), e));
        }
        let mut leftover = std::mem::take(&mut self.leftover);
        leftover.retain(|&i| matches!(&self.links[i], Some(l) if l.readable));
        let runnable = leftover
            .iter()
            .any(|&i| matches!(&self.links[i], Some(l) if !l.paused));
        let timeout = if runnable || !out.is_empty() {
            Some(Duration::ZERO)
        } else {
            match self.stage_deadline() {
                Some(d) => {
                    let until = d.saturating_duration_since(std::time::Instant::now());
                    if timeout.is_none_or(|t| until < t) && !until.is_zero() {
                        // The poll's own timeout stays, as a safety net.
                        if let Some(t) = self.timer.as_mut() {
                            if t.arm(until).is_err() {
                                self.timer = None;
                            }
                        }
                    }
                    Some(timeout.map_or(until, |t| t.min(until)))
                }
                None => timeout,
            }
        };
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        let mut woken = false;
        for ev in self.events.iter() {
            if ev.token() == WAKER {
                woken = true;
                continue;
            }
            if ev.token() == WATCHED {
                continue;
            }
            if ev.token() == TIMER {
                if let Some(t) = self.timer.as_mut() {
                    t.drain();
                }
                continue;
            }
            if let Some(Some(l)) = self.links.get_mut(ev.token().0) {
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    l.readable = true;
                    leftover.push(ev.token().0);
                }
                if ev.is_writable() || ev.is_write_closed() {
                    l.writable = true;
                }
            }
        }
        leftover.sort_unstable();
        leftover.dedup();
        for i in leftover {
            let Some(l) = self.links[i].as_mut() else {
                continue;
            };
            if !l.readable {
                continue;
            }
            if l.paused {
                self.leftover.push(i);
                continue;
            }
            match l.read_frames(&mut self.frames, READ_BUDGET) {
                Ok(ReadOutcome::Drained) => {}
                Ok(ReadOutcome::Budget) => self.leftover.push(i),
                Ok(ReadOutcome::Closed) => self.closed.push((i, None)),
                Err(e) => self.closed.push((i, Some(e))),
            }
            out.extend(
                self.frames
                    .drain(..)
                    .map(|f| ReactorEvent::Frame(LinkId(i), f)),
            );
        }
        self.release_stages();
        // Links found dead are reported after the frames they delivered.
        self.reap();
        for (i, e) in self.closed.drain(..) {
            out.push(ReactorEvent::Closed(LinkId(i), e));
        }
        if woken {
            out.push(ReactorEvent::Woken);
        }
        self.flush_all();
        Ok(())
    }
}
