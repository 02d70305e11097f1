//! Synchronization filters: which upstream packets travel together as one wave.
//!
//! [`SyncFilter`] is a sans-IO state machine per (stream, node), in the style of
//! quinn-proto: the runtime feeds it packets with the current time, sleeps until
//! [`SyncFilter::poll_timeout`], calls [`SyncFilter::on_timeout`], and hands every wave
//! it gets back to the transformation filter. It never reads a clock.
//!
//! Each child has a FIFO queue, so a fast child can run several waves ahead of a slow
//! one (pipelining) and a wave takes the *head* of every queue. Waves list their packets
//! in child-index order. The queues are not bounded here: the runtime bounds them by
//! not reading from a child whose backlog ([`SyncFilter::queued_from`]) is too long,
//! which pushes back on that sub-tree.
//!
//! A lost child ([`SyncFilter::remove_child`]) is no longer waited for; packets it sent
//! before it was lost still travel in later waves, and packets it sends afterwards are
//! dropped and counted ([`SyncFilter::dropped`]).
//!
//! A child adopted after its parent died ([`SyncFilter::join_child`]) joins in the
//! middle of the stream: it still owes answers to waves already released here (they are
//! skipped on arrival) and will never answer waves it missed while orphaned (holes stand
//! in for them), so that its packets line up with the waves they belong to instead of
//! being summed into older ones. A child may also send a hole itself
//! ([`SyncFilter::push_hole`]): a wave its whole sub-tree missed. A wave made only of
//! holes comes out empty; it still counts ([`SyncFilter::released`]), because wave
//! numbers are how an adopting node lines its new child up.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use vargr_wire::Packet;

use crate::FilterError;

/// MRNet's three synchronization policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// A wave is one packet from every live child.
    WaitForAll,
    /// A wave is released when every live child contributed, or when this long has passed
    /// since its first packet arrived, with whatever arrived.
    TimeOut(Duration),
    /// Every packet is a wave of its own.
    DontWait,
}

impl FromStr for SyncMode {
    type Err = FilterError;

    /// Accepts `all` / `wait-for-all`, `timeout:250ms` / `timeout:250` (milliseconds) /
    /// `timeout:1.5s` / `timeout:100us`, and `dontwait` / `dont-wait` / `none`.
    fn from_str(input: &str) -> Result<SyncMode, FilterError> {
        let s = input.trim().to_ascii_lowercase();
        let err = |reason: &str| FilterError::BadSyncMode {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        match s.as_str() {
            "all" | "wait-for-all" | "waitforall" => return Ok(SyncMode::WaitForAll),
            "dontwait" | "dont-wait" | "none" => return Ok(SyncMode::DontWait),
            _ => {}
        }
        let Some(t) = s.strip_prefix("timeout:") else {
            return Err(err("unknown mode"));
        };
        let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
            (n, 1e-3)
        } else if let Some(n) = t.strip_suffix("us") {
            (n, 1e-6)
        } else if let Some(n) = t.strip_suffix('s') {
            (n, 1.0)
        } else {
            (t, 1e-3)
        };
        let x: f64 = num
            .trim()
            .parse()
            .map_err(|_| err("the time-out is not a number"))?;
        if !x.is_finite() || x < 0.0 || x * scale > 1e9 {
            return Err(err(
                "the time-out must be a non-negative number below 1e9 s",
            ));
        }
        Ok(SyncMode::TimeOut(Duration::from_secs_f64(x * scale)))
    }
}

impl fmt::Display for SyncMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncMode::WaitForAll => f.write_str("all"),
            SyncMode::DontWait => f.write_str("dontwait"),
            SyncMode::TimeOut(d) if d.subsec_nanos() % 1_000_000 == 0 => {
                write!(f, "timeout:{}ms", d.as_millis())
            }
            SyncMode::TimeOut(d) => write!(f, "timeout:{}us", d.as_micros()),
        }
    }
}

/// The synchronization state of one stream at one node. Children are numbered
/// `0..children`; see the module documentation.
#[derive(Debug)]
pub struct SyncFilter {
    mode: SyncMode,
    /// `None` is a hole: the child has nothing for that wave.
    queues: Vec<VecDeque<(Instant, Option<Packet>)>>,
    live: Vec<bool>,
    /// Packets still to drop per child: answers to waves released before it joined.
    skip: Vec<u64>,
    dropped: u64,
    released: u64,
    // Counters that make "is a wave complete?" O(1) instead of a scan of every child
    // per packet, which cost O(fan-out²) per wave at a wide node.
    live_count: usize,
    nonempty: usize,
    nonempty_live: usize,
}

impl SyncFilter {
    pub fn new(mode: SyncMode, children: usize) -> Self {
        SyncFilter {
            mode,
            queues: (0..children).map(|_| VecDeque::new()).collect(),
            live: vec![true; children],
            skip: vec![0; children],
            dropped: 0,
            released: 0,
            live_count: children,
            nonempty: 0,
            nonempty_live: 0,
        }
    }

    pub fn mode(&self) -> SyncMode {
        self.mode
    }

    /// Changes the mode of a running stream (MRNet's `set_FilterParameters` on the sync
    /// filter). Packets already queued stay; [`take_ready`](Self::take_ready) then
    /// releases the waves the new mode makes due. Leaving don't-wait starts from empty
    /// queues, since that mode queues nothing.
    pub fn set_mode(&mut self, mode: SyncMode) {
        self.mode = mode;
    }

    /// Adds a child that joined late; returns its index. Waves from now on wait for it.
    pub fn add_child(&mut self) -> usize {
        self.queues.push(VecDeque::new());
        self.live.push(true);
        self.skip.push(0);
        self.live_count += 1;
        self.queues.len() - 1
    }

    /// Adds a child in the middle of the stream (an adopted orphan): its next `skip`
    /// packets answer waves released before it joined and are dropped; it contributes
    /// nothing to the next `holes` waves (those it never heard of). Returns its index.
    pub fn join_child(&mut self, skip: u64, holes: u64, now: Instant) -> usize {
        let c = self.add_child();
        self.skip[c] = skip;
        if self.mode != SyncMode::DontWait {
            for _ in 0..holes {
                self.enqueue(c, now, None);
            }
        }
        c
    }

    /// Releases the waves complete (or timed out) by now: after
    /// [`join_child`](Self::join_child), whose holes may complete waves nobody else will.
    pub fn take_ready(&mut self, now: Instant) -> Vec<Vec<Packet>> {
        let mut out = self.expire(now);
        out.extend(self.release_complete());
        out
    }

    /// `child` has nothing for its next wave (its own sub-tree missed it); returns the
    /// waves now complete.
    pub fn push_hole(&mut self, child: usize, now: Instant) -> Vec<Vec<Packet>> {
        if self.mode == SyncMode::DontWait || !self.live.get(child).copied().unwrap_or(false) {
            return Vec::new();
        }
        let mut out = self.expire(now);
        self.enqueue(child, now, None);
        out.extend(self.release_complete());
        out
    }

    /// Waves released so far (including empty ones made only of holes).
    pub fn released(&self) -> u64 {
        self.released
    }

    fn enqueue(&mut self, child: usize, now: Instant, p: Option<Packet>) {
        if self.queues[child].is_empty() {
            self.nonempty += 1;
            if self.live[child] {
                self.nonempty_live += 1;
            }
        }
        self.queues[child].push_back((now, p));
    }

    /// A packet from `child`; returns the waves now complete, oldest first. An index past
    /// the known children adds children up to it (a late joiner).
    pub fn push(&mut self, child: usize, pkt: Packet, now: Instant) -> Vec<Vec<Packet>> {
        while child >= self.queues.len() {
            self.add_child();
        }
        if !self.live[child] || self.skip[child] > 0 {
            self.skip[child] = self.skip[child].saturating_sub(1);
            self.dropped += 1;
            return Vec::new();
        }
        if self.mode == SyncMode::DontWait {
            self.released += 1;
            return vec![vec![pkt]];
        }
        // A wave whose time ran out before this packet arrived leaves without it.
        let mut out = self.expire(now);
        self.enqueue(child, now, Some(pkt));
        out.extend(self.release_complete());
        out
    }

    /// When [`on_timeout`](Self::on_timeout) must be called next (time-out mode with a
    /// wave waiting), or `None`.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.mode {
            SyncMode::TimeOut(d) => self.oldest_head().map(|t| t + d),
            _ => None,
        }
    }

    /// Releases the waves whose time ran out by `now`.
    pub fn on_timeout(&mut self, now: Instant) -> Vec<Vec<Packet>> {
        let mut out = self.expire(now);
        out.extend(self.release_complete());
        out
    }

    /// `child` is lost: waves that were waiting only for it are released.
    pub fn remove_child(&mut self, child: usize, now: Instant) -> Vec<Vec<Packet>> {
        if let Some(l) = self.live.get_mut(child) {
            if *l {
                *l = false;
                self.live_count -= 1;
                if !self.queues[child].is_empty() {
                    self.nonempty_live -= 1;
                }
            }
        }
        let mut out = self.expire(now);
        out.extend(self.release_complete());
        out
    }

    /// Releases everything still queued (stream closing), as waves of queue heads.
    pub fn flush(&mut self) -> Vec<Vec<Packet>> {
        let mut out = Vec::new();
        while self.nonempty > 0 {
            out.push(self.take_heads());
        }
        out
    }

    /// Packets waiting in all queues.
    pub fn queued(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    /// Packets waiting from one child (0 for an unknown child).
    pub fn queued_from(&self, child: usize) -> usize {
        self.queues.get(child).map_or(0, VecDeque::len)
    }

    /// Children not removed.
    pub fn live_children(&self) -> usize {
        self.live_count
    }

    /// Packets dropped because their child had been removed, or answered waves released
    /// before it joined.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    fn oldest_head(&self) -> Option<Instant> {
        self.queues
            .iter()
            .filter_map(|q| q.front().map(|(t, _)| *t))
            .min()
    }

    fn take_heads(&mut self) -> Vec<Packet> {
        self.released += 1;
        let mut wave = Vec::with_capacity(self.nonempty);
        for (q, live) in self.queues.iter_mut().zip(&self.live) {
            if let Some((_, p)) = q.pop_front() {
                wave.extend(p);
                if q.is_empty() {
                    self.nonempty -= 1;
                    if *live {
                        self.nonempty_live -= 1;
                    }
                }
            }
        }
        wave
    }

    /// Waves in which every live child has a packet (the queued leftovers of lost
    /// children ride along).
    fn release_complete(&mut self) -> Vec<Vec<Packet>> {
        let mut out = Vec::new();
        while self.nonempty > 0 && self.nonempty_live == self.live_count {
            out.push(self.take_heads());
        }
        out
    }

    fn expire(&mut self, now: Instant) -> Vec<Vec<Packet>> {
        let mut out = Vec::new();
        if let SyncMode::TimeOut(d) = self.mode {
            while self.oldest_head().is_some_and(|t| t + d <= now) {
                out.push(self.take_heads());
            }
        }
        out
    }
}
