//! Synchronization filters: which upstream packets travel together as one wave.
//!
//! [`SyncFilter`] is a sans-IO state machine per (stream, node), in the style of
//! quinn-proto: the runtime feeds it packets with the current time, sleeps until
//! [`SyncFilter::poll_timeout`], calls [`SyncFilter::on_timeout`], and hands every wave
//! it gets back to the transformation filter. It never reads a clock.
//!
//! It is split in two. The *queues* are the same for every filter: each child has a
//! FIFO queue, so a fast child can run several waves ahead of a slow one (pipelining),
//! and a wave takes the *head* of every queue, listing its packets in child-index order.
//! *When* a wave leaves is a [`SyncPolicy`]'s decision, asked after every change (a
//! packet, a hole, a lost child, a timer) through a read-only [`SyncView`] of the queues.
//! MRNet's three modes ([`SyncMode`]: wait-for-all, time-out, don't-wait) are policies
//! like any other; users write their own in Rust or in C (`vargr_filter.h`, loaded by
//! [`Registry::load_plugin`](crate::Registry::load_plugin)), e.g. "wait for k of n".
//!
//! Two guards keep a policy from stopping a stream. A stream may give a *wave deadline*
//! ([`SyncFilter::with_deadline`]): a packet that waited that long leaves with the heads
//! of the other queues whatever the policy says, and the first such release is reported
//! ([`SyncFilter::take_fault`]) naming the policy. A policy that fails (an error, or a
//! decision that does not fit the queues) is reported the same way and replaced by
//! wait-for-all for the rest of the stream at that node, so packets keep flowing.
//!
//! The queues are not bounded here: the runtime bounds them by not reading from a
//! child whose backlog ([`SyncFilter::queued_from`]) is too long, which pushes back on
//! that sub-tree.
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
//! numbers are how an adopting node lines its new child up. Policies whose waves do not
//! line up across children (don't-wait: [`SyncPolicy::lines_up`]) get no holes.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use vargr_wire::Packet;

use crate::FilterError;

/// MRNet's three synchronization policies, the built-in [`SyncPolicy`]s
/// ([`SyncMode::policy`]).
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

impl SyncMode {
    /// This mode as a policy for [`SyncFilter::with_policy`].
    pub fn policy(self) -> Box<dyn SyncPolicy> {
        match self {
            SyncMode::WaitForAll => Box::new(WaitForAll),
            SyncMode::TimeOut(d) => Box::new(TimeOut(d)),
            SyncMode::DontWait => Box::new(DontWait),
        }
    }
}

/// What the policy is being asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncEvent {
    /// A packet from this child was queued.
    Packet(usize),
    /// This child has nothing for its next wave (a hole was queued).
    Hole(usize),
    /// This child was lost: it is no longer live.
    ChildLost(usize),
    /// A timer the policy asked for ([`SyncDecision::WaitUntil`]) or the runtime's own
    /// came due, or the stream's filters changed.
    Timer,
    /// The previous decision released a wave; anything more?
    Released,
}

/// A policy's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncDecision {
    /// Nothing leaves until the next event.
    Wait,
    /// Nothing leaves now; ask again at this instant if nothing happens before.
    WaitUntil(Instant),
    /// One wave leaves: the head of every non-empty queue. The policy is asked again.
    ReleaseHeads,
    /// The head of this child's queue leaves alone, as a wave of one. The policy is
    /// asked again.
    ReleaseChild(usize),
}

/// Decides when a stream's packets at a node leave as a wave (see the module
/// documentation). One instance per stream per node, owning its state; it reads the
/// queues through [`SyncView`] and never sees a packet's contents (MRNet's sync filters
/// are independent of the packets' type).
pub trait SyncPolicy: Send {
    /// Called after every change to the queues, and again after each release it asked
    /// for, until it answers [`SyncDecision::Wait`] or [`SyncDecision::WaitUntil`].
    fn decide(&mut self, view: &SyncView<'_>) -> Result<SyncDecision, FilterError>;

    /// Name used in error messages and traces.
    fn name(&self) -> &str;

    /// False for policies whose waves do not line up across children (each packet a
    /// wave of its own): holes are then not queued for them.
    fn lines_up(&self) -> bool {
        true
    }

    /// True only if wave `w` here is always made of wave `w` of every live child (no
    /// partial waves): fault recovery then counts on wave numbers (wait-for-all).
    fn aligned(&self) -> bool {
        false
    }
}

/// The queues of one stream at one node, as a policy sees them. Children are numbered
/// `0..children()`; a queue holds packets and holes, oldest first.
pub struct SyncView<'a> {
    q: &'a Queues,
    now: Instant,
    event: SyncEvent,
    place: (u32, u32),
}

impl SyncView<'_> {
    /// The node the filter runs at (as given to [`SyncFilter::at`]).
    pub fn node_id(&self) -> u32 {
        self.place.0
    }
    pub fn stream(&self) -> u32 {
        self.place.1
    }
    pub fn now(&self) -> Instant {
        self.now
    }
    pub fn event(&self) -> SyncEvent {
        self.event
    }
    /// Children ever known, live or not.
    pub fn children(&self) -> usize {
        self.q.queues.len()
    }
    pub fn live_children(&self) -> usize {
        self.q.live_count
    }
    /// Live children with something queued: a wave released now would hold this many
    /// live contributions.
    pub fn ready_live(&self) -> usize {
        self.q.nonempty_live
    }
    /// Children (live or lost) with something queued.
    pub fn ready(&self) -> usize {
        self.q.nonempty
    }
    /// Packets and holes queued from `child` (0 for an unknown child).
    pub fn queued(&self, child: usize) -> usize {
        self.q.queues.get(child).map_or(0, VecDeque::len)
    }
    pub fn is_live(&self, child: usize) -> bool {
        self.q.live.get(child).copied().unwrap_or(false)
    }
    /// When the head of `child`'s queue arrived.
    pub fn head_since(&self, child: usize) -> Option<Instant> {
        self.q.queues.get(child)?.front().map(|(t, _)| *t)
    }
    /// When the oldest head of all queues arrived: when the wave now forming began.
    pub fn oldest_head(&self) -> Option<Instant> {
        self.q.oldest
    }
    /// Waves released so far.
    pub fn released(&self) -> u64 {
        self.q.released
    }
}

/// A wave is one packet from every live child.
struct WaitForAll;

impl SyncPolicy for WaitForAll {
    fn decide(&mut self, v: &SyncView<'_>) -> Result<SyncDecision, FilterError> {
        // The queued leftovers of lost children ride along with the live ones' packets.
        Ok(if v.ready() > 0 && v.ready_live() == v.live_children() {
            SyncDecision::ReleaseHeads
        } else {
            SyncDecision::Wait
        })
    }
    fn name(&self) -> &str {
        "all"
    }
    fn aligned(&self) -> bool {
        true
    }
}

/// Every live child's packet, or whatever arrived once the wave's first packet waited
/// this long.
struct TimeOut(Duration);

impl SyncPolicy for TimeOut {
    fn decide(&mut self, v: &SyncView<'_>) -> Result<SyncDecision, FilterError> {
        let Some(first) = v.oldest_head() else {
            return Ok(SyncDecision::Wait);
        };
        Ok(
            if v.ready_live() == v.live_children() || first + self.0 <= v.now() {
                SyncDecision::ReleaseHeads
            } else {
                SyncDecision::WaitUntil(first + self.0)
            },
        )
    }
    fn name(&self) -> &str {
        "timeout"
    }
}

/// Every packet is a wave of its own.
struct DontWait;

impl SyncPolicy for DontWait {
    fn decide(&mut self, v: &SyncView<'_>) -> Result<SyncDecision, FilterError> {
        Ok(match v.event() {
            SyncEvent::Packet(c) if v.queued(c) > 0 => SyncDecision::ReleaseChild(c),
            // Anything else queued (left over from another policy) leaves child by child.
            _ => match (0..v.children()).find(|&c| v.queued(c) > 0) {
                Some(c) => SyncDecision::ReleaseChild(c),
                None => SyncDecision::Wait,
            },
        })
    }
    fn name(&self) -> &str {
        "dontwait"
    }
    fn lines_up(&self) -> bool {
        false
    }
}

/// The per-child queues and their counters, shared by every policy.
#[derive(Debug)]
struct Queues {
    /// `None` is a hole: the child has nothing for that wave.
    queues: Vec<VecDeque<(Instant, Option<Packet>)>>,
    live: Vec<bool>,
    released: u64,
    // Counters that make "is a wave complete?" O(1) instead of a scan of every child
    // per packet, which cost O(fan-out²) per wave at a wide node.
    live_count: usize,
    nonempty: usize,
    nonempty_live: usize,
    /// The oldest head's arrival, kept so that deadlines cost O(1) per packet.
    oldest: Option<Instant>,
}

impl Queues {
    fn add_child(&mut self) -> usize {
        self.queues.push(VecDeque::new());
        self.live.push(true);
        self.live_count += 1;
        self.queues.len() - 1
    }

    fn enqueue(&mut self, child: usize, now: Instant, p: Option<Packet>) {
        if self.queues[child].is_empty() {
            self.nonempty += 1;
            if self.live[child] {
                self.nonempty_live += 1;
            }
            self.oldest = Some(self.oldest.map_or(now, |t| t.min(now)));
        }
        self.queues[child].push_back((now, p));
    }

    fn pop(&mut self, child: usize) -> Option<Option<Packet>> {
        let q = &mut self.queues[child];
        let (t, p) = q.pop_front()?;
        if q.is_empty() {
            self.nonempty -= 1;
            if self.live[child] {
                self.nonempty_live -= 1;
            }
        }
        if self.oldest == Some(t) {
            self.oldest = self
                .queues
                .iter()
                .filter_map(|q| q.front().map(|(t, _)| *t))
                .min();
        }
        Some(p)
    }

    fn take_heads(&mut self) -> Vec<Packet> {
        self.released += 1;
        let mut wave = Vec::with_capacity(self.nonempty);
        let mut oldest = None::<Instant>;
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
            if let Some((t, _)) = q.front() {
                oldest = Some(oldest.map_or(*t, |o| o.min(*t)));
            }
        }
        self.oldest = oldest;
        wave
    }

    fn take_one(&mut self, child: usize) -> Option<Vec<Packet>> {
        let p = self.pop(child)?;
        self.released += 1;
        Some(p.into_iter().collect())
    }
}

/// The synchronization state of one stream at one node: the queues and the policy
/// that empties them. Children are numbered `0..children`; see the module documentation.
pub struct SyncFilter {
    q: Queues,
    policy: Box<dyn SyncPolicy>,
    /// Packets still to drop per child: answers to waves released before it joined.
    skip: Vec<u64>,
    dropped: u64,
    /// When the policy asked to be asked again.
    wake: Option<Instant>,
    deadline: Option<Duration>,
    /// Waves released by the deadline against the policy's will.
    overdue: u64,
    fault: Option<FilterError>,
    /// (node, stream), for the policy's view.
    place: (u32, u32),
}

impl fmt::Debug for SyncFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncFilter")
            .field("policy", &self.policy.name())
            .field("queues", &self.q)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl SyncFilter {
    /// A filter with a built-in policy and no wave deadline.
    pub fn new(mode: SyncMode, children: usize) -> Self {
        SyncFilter::with_policy(mode.policy(), children)
    }

    /// A filter with any policy (a built-in's, a user's, a plugin's) and no deadline.
    pub fn with_policy(policy: Box<dyn SyncPolicy>, children: usize) -> Self {
        SyncFilter {
            q: Queues {
                queues: (0..children).map(|_| VecDeque::new()).collect(),
                live: vec![true; children],
                released: 0,
                live_count: children,
                nonempty: 0,
                nonempty_live: 0,
                oldest: None,
            },
            policy,
            skip: vec![0; children],
            dropped: 0,
            wake: None,
            deadline: None,
            overdue: 0,
            fault: None,
            place: (0, 0),
        }
    }

    /// Where the filter runs: the node and stream its policy sees in [`SyncView`].
    pub fn at(mut self, node_id: u32, stream: u32) -> Self {
        self.place = (node_id, stream);
        self
    }

    /// The stream's wave deadline: no packet waits here longer than this, whatever the
    /// policy decides. `None`: the policy alone decides.
    pub fn with_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.deadline = deadline;
        self
    }

    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// The policy's name (`all`, `timeout`, `dontwait`, or a user filter's).
    pub fn policy_name(&self) -> &str {
        self.policy.name()
    }

    /// See [`SyncPolicy::aligned`].
    pub fn aligned(&self) -> bool {
        self.policy.aligned()
    }

    /// Changes the policy of a running stream (MRNet's `set_FilterParameters` on the
    /// sync filter). Packets already queued stay; [`take_ready`](Self::take_ready) then
    /// releases the waves the new policy makes due.
    pub fn set_policy(&mut self, policy: Box<dyn SyncPolicy>) {
        self.policy = policy;
        self.wake = None;
    }

    /// [`set_policy`](Self::set_policy) with a built-in mode.
    pub fn set_mode(&mut self, mode: SyncMode) {
        self.set_policy(mode.policy());
    }

    /// A policy failure or the first release forced by the deadline, once: the runtime
    /// reports it, naming the stream and node.
    pub fn take_fault(&mut self) -> Option<FilterError> {
        self.fault.take()
    }

    /// Waves the deadline released against the policy's will.
    pub fn overdue(&self) -> u64 {
        self.overdue
    }

    /// Adds a child that joined late; returns its index. Waves from now on wait for it.
    pub fn add_child(&mut self) -> usize {
        self.skip.push(0);
        self.q.add_child()
    }

    /// Adds a child in the middle of the stream (an adopted orphan): its next `skip`
    /// packets answer waves released before it joined and are dropped; it contributes
    /// nothing to the next `holes` waves (those it never heard of). Returns its index.
    pub fn join_child(&mut self, skip: u64, holes: u64, now: Instant) -> usize {
        let c = self.add_child();
        self.skip[c] = skip;
        if self.policy.lines_up() {
            for _ in 0..holes {
                self.q.enqueue(c, now, None);
            }
        }
        c
    }

    /// Releases the waves due by now: after [`join_child`](Self::join_child), whose
    /// holes may complete waves nobody else will, or a change of policy.
    pub fn take_ready(&mut self, now: Instant) -> Vec<Vec<Packet>> {
        self.settle(now, SyncEvent::Timer)
    }

    /// `child` has nothing for its next wave (its own sub-tree missed it); returns the
    /// waves now complete.
    pub fn push_hole(&mut self, child: usize, now: Instant) -> Vec<Vec<Packet>> {
        if !self.policy.lines_up() || !self.q.live.get(child).copied().unwrap_or(false) {
            return Vec::new();
        }
        let mut out = self.due(now);
        self.q.enqueue(child, now, None);
        out.extend(self.settle(now, SyncEvent::Hole(child)));
        out
    }

    /// Waves released so far (including empty ones made only of holes).
    pub fn released(&self) -> u64 {
        self.q.released
    }

    /// A packet from `child`; returns the waves now complete, oldest first. An index past
    /// the known children adds children up to it (a late joiner).
    pub fn push(&mut self, child: usize, pkt: Packet, now: Instant) -> Vec<Vec<Packet>> {
        while child >= self.q.queues.len() {
            self.add_child();
        }
        if !self.q.live[child] || self.skip[child] > 0 {
            self.skip[child] = self.skip[child].saturating_sub(1);
            self.dropped += 1;
            return Vec::new();
        }
        // A wave whose time ran out before this packet arrived leaves without it.
        let mut out = self.due(now);
        self.q.enqueue(child, now, Some(pkt));
        out.extend(self.settle(now, SyncEvent::Packet(child)));
        out
    }

    /// When [`on_timeout`](Self::on_timeout) must be called next (the policy asked to
    /// be, or a queued packet meets the deadline), or `None`.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let by_deadline = self.deadline.zip(self.q.oldest).map(|(d, t)| t + d);
        match (self.wake, by_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Releases the waves whose time ran out by `now`.
    pub fn on_timeout(&mut self, now: Instant) -> Vec<Vec<Packet>> {
        self.settle(now, SyncEvent::Timer)
    }

    /// `child` is lost: waves that were waiting only for it are released.
    pub fn remove_child(&mut self, child: usize, now: Instant) -> Vec<Vec<Packet>> {
        if let Some(l) = self.q.live.get_mut(child) {
            if *l {
                *l = false;
                self.q.live_count -= 1;
                if !self.q.queues[child].is_empty() {
                    self.q.nonempty_live -= 1;
                }
            }
        }
        self.settle(now, SyncEvent::ChildLost(child))
    }

    /// Releases everything still queued (stream closing), as waves of queue heads.
    pub fn flush(&mut self) -> Vec<Vec<Packet>> {
        let mut out = Vec::new();
        while self.q.nonempty > 0 {
            out.push(self.q.take_heads());
        }
        out
    }

    /// Packets waiting in all queues.
    pub fn queued(&self) -> usize {
        self.q.queues.iter().map(VecDeque::len).sum()
    }

    /// Packets waiting from one child (0 for an unknown child).
    pub fn queued_from(&self, child: usize) -> usize {
        self.q.queues.get(child).map_or(0, VecDeque::len)
    }

    /// Children not removed.
    pub fn live_children(&self) -> usize {
        self.q.live_count
    }

    /// Packets dropped because their child had been removed, or answered waves released
    /// before it joined.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The waves a timer due by `now` releases, before anything new is queued.
    fn due(&mut self, now: Instant) -> Vec<Vec<Packet>> {
        match self.poll_timeout() {
            Some(t) if t <= now => self.settle(now, SyncEvent::Timer),
            _ => Vec::new(),
        }
    }

    /// Asks the policy until it waits, then applies the deadline. Each release takes at
    /// least one entry off the queues, so this ends.
    fn settle(&mut self, now: Instant, event: SyncEvent) -> Vec<Vec<Packet>> {
        let mut out = Vec::new();
        let mut event = event;
        self.wake = None;
        while self.q.nonempty > 0 {
            let view = SyncView {
                q: &self.q,
                now,
                event,
                place: self.place,
            };
            let decision = match self.policy.decide(&view) {
                Ok(d) => d,
                Err(e) => {
                    self.fail(e);
                    continue;
                }
            };
            match decision {
                SyncDecision::Wait => break,
                SyncDecision::WaitUntil(t) => {
                    // A time already past would spin the runtime's timer: soon instead.
                    self.wake = Some(t.max(now + Duration::from_millis(1)));
                    break;
                }
                SyncDecision::ReleaseHeads => out.push(self.q.take_heads()),
                SyncDecision::ReleaseChild(c) => match self.q.queues.get(c) {
                    Some(q) if !q.is_empty() => out.extend(self.q.take_one(c)),
                    _ => {
                        let e = FilterError::BadDecision {
                            filter: self.policy.name().to_string(),
                            reason: format!(
                                "asked to release the head of child {c}, which has nothing queued ({} children)",
                                self.q.queues.len()
                            ),
                        };
                        self.fail(e);
                    }
                },
            }
            event = SyncEvent::Released;
        }
        if let Some(d) = self.deadline {
            while self.q.oldest.is_some_and(|t| t + d <= now) {
                if self.overdue == 0 && self.fault.is_none() {
                    self.fault = Some(FilterError::WaveDeadline {
                        filter: self.policy.name().to_string(),
                        deadline: d,
                    });
                }
                self.overdue += 1;
                out.push(self.q.take_heads());
            }
        }
        out
    }

    /// A failed policy is reported and replaced by wait-for-all, which cannot fail.
    fn fail(&mut self, e: FilterError) {
        self.fault.get_or_insert(FilterError::SyncFailed {
            filter: self.policy.name().to_string(),
            reason: e.to_string(),
        });
        self.policy = SyncMode::WaitForAll.policy();
    }
}
