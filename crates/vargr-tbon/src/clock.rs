//! Tree-based clock-skew estimation (MRNet's): the messages and the per-edge state.
//!
//! Hosts do not share a clock, so trace files of different nodes need each node's
//! offset to the front-end's clock. Once the tree is up, the front-end (the root, with
//! [`Alignment::ROOT`]) measures each child with [`SkewProbe::ROUNDS`] ping-pongs, one at
//! a time per child, and sends the child its cumulative alignment (the parent's
//! alignment `.then(edge)`); the child adopts it and does the same for its own
//! children, so estimates flow down the tree level by level. Each parent also reports
//! the alignment it computed towards the front-end, which keeps a map of every node.
//!
//! Both sides read [`vargr_trace::clock::trace_ns`] (which honours the test knob
//! `VARGR_CLOCK_SKEW_NS`). The exchange is a few dozen small control frames at start-up
//! and does not hold back application frames, which flow alongside.
//!
//! Payloads are fixed-size little-endian records; decoding checks the exact length and
//! the ranges that later arithmetic relies on, so a malformed frame is a
//! [`ClockMsgError`], never a panic.

use std::collections::BTreeMap;

use vargr_trace::{Alignment, SkewProbe};
use vargr_wire::{Frame, FrameKind};

use crate::log::vlog;
use crate::router::{frame_bytes, Out, Router};
use crate::TbonError;

/// Largest hop count accepted in a message: deeper than any real tree, far from overflow.
pub const MAX_HOPS: u32 = 1 << 16;

/// A clock frame whose payload cannot be what its kind says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockMsgError {
    #[error("malformed {kind} frame: payload is {found} bytes, expected {expected}")]
    Length {
        kind: &'static str,
        expected: usize,
        found: usize,
    },
    #[error("malformed {kind} frame: {what} is {value}, out of range")]
    Range {
        kind: &'static str,
        what: &'static str,
        value: u64,
    },
}

fn exact<const N: usize>(kind: &'static str, b: &[u8]) -> Result<[u8; N], ClockMsgError> {
    b.try_into().map_err(|_| ClockMsgError::Length {
        kind,
        expected: N,
        found: b.len(),
    })
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(w)
}

fn put_alignment(a: Alignment, out: &mut Vec<u8>) {
    out.extend_from_slice(&a.offset_ns.to_le_bytes());
    out.extend_from_slice(&a.error_ns.to_le_bytes());
    out.extend_from_slice(&a.hops.to_le_bytes());
}

fn alignment_at(kind: &'static str, b: &[u8], i: usize) -> Result<Alignment, ClockMsgError> {
    let hops = u32_at(b, i + 16);
    if hops > MAX_HOPS {
        return Err(ClockMsgError::Range {
            kind,
            what: "the hop count",
            value: u64::from(hops),
        });
    }
    Ok(Alignment {
        offset_ns: u64_at(b, i) as i64,
        error_ns: u64_at(b, i + 8),
        hops,
        aligned: true,
    })
}

/// ClockPing carries nothing but its round (in the header's stream field).
pub fn check_ping(payload: &[u8]) -> Result<(), ClockMsgError> {
    exact::<0>("ClockPing", payload).map(|_| ())
}

/// ClockPong: the child's clock when it answered, and its process id (a child in the
/// parent's own process shares its clock: no measurement needed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pong {
    pub child_ns: u64,
    pub pid: u32,
}

impl Pong {
    pub const LEN: usize = 12;

    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(Self::LEN);
        b.extend_from_slice(&self.child_ns.to_le_bytes());
        b.extend_from_slice(&self.pid.to_le_bytes());
        b
    }

    pub fn decode(payload: &[u8]) -> Result<Pong, ClockMsgError> {
        let b = exact::<{ Pong::LEN }>("ClockPong", payload)?;
        let child_ns = u64_at(&b, 0);
        // Offsets are computed in i64 nanoseconds.
        if child_ns > i64::MAX as u64 {
            return Err(ClockMsgError::Range {
                kind: "ClockPong",
                what: "the child clock",
                value: child_ns,
            });
        }
        Ok(Pong {
            child_ns,
            pid: u32_at(&b, 8),
        })
    }
}

/// ClockSet: the receiver's alignment to the front-end's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetMsg {
    pub align: Alignment,
    /// The receiver runs in its parent's process (thread launcher): the process already
    /// has its alignment and must keep it.
    pub same_process: bool,
}

impl SetMsg {
    pub const LEN: usize = 21;

    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(Self::LEN);
        put_alignment(self.align, &mut b);
        b.push(u8::from(self.same_process));
        b
    }

    pub fn decode(payload: &[u8]) -> Result<SetMsg, ClockMsgError> {
        let b = exact::<{ SetMsg::LEN }>("ClockSet", payload)?;
        Ok(SetMsg {
            align: alignment_at("ClockSet", &b, 0)?,
            same_process: b[20] & 1 == 1,
        })
    }
}

/// ClockReport: one node's alignment, travelling to the front-end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportMsg {
    pub node: u32,
    pub align: Alignment,
}

impl ReportMsg {
    pub const LEN: usize = 24;

    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(Self::LEN);
        b.extend_from_slice(&self.node.to_le_bytes());
        put_alignment(self.align, &mut b);
        b
    }

    pub fn decode(payload: &[u8]) -> Result<ReportMsg, ClockMsgError> {
        let b = exact::<{ ReportMsg::LEN }>("ClockReport", payload)?;
        Ok(ReportMsg {
            node: u32_at(&b, 0),
            align: alignment_at("ClockReport", &b, 4)?,
        })
    }
}

/// The parent's side of one edge: which round is outstanding and what it measured.
#[derive(Debug, Default, Clone)]
pub struct EdgeProbe {
    pub probe: SkewProbe,
    /// Round of the ping in flight and when it left (parent clock).
    pub in_flight: Option<(u32, u64)>,
    /// The edge estimate, once every round came back.
    pub done: Option<Alignment>,
}

/// What the parent does after a pong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PongStep {
    /// Not the pong we wait for (stale or unsolicited): ignored.
    Ignored,
    /// Send the ping of this round next.
    Ping(u32),
    /// The edge is measured.
    Done(Alignment),
}

impl EdgeProbe {
    /// Notes that the ping of `round` left at `now_ns`.
    pub fn sent(&mut self, round: u32, now_ns: u64) {
        self.in_flight = Some((round, now_ns));
    }

    /// Takes the pong of `round` that arrived at `now_ns`. `same_process` says the child
    /// shares this process's clock: the edge is exact, no more rounds needed.
    pub fn on_pong(&mut self, round: u32, pong: Pong, now_ns: u64, same_process: bool) -> PongStep {
        let Some((want, sent)) = self.in_flight else {
            return PongStep::Ignored;
        };
        if round != want || self.done.is_some() {
            return PongStep::Ignored;
        }
        self.in_flight = None;
        let edge = if same_process {
            Some(Alignment {
                offset_ns: 0,
                error_ns: 0,
                hops: 1,
                aligned: true,
            })
        } else {
            self.probe.sample(sent, pong.child_ns, now_ns);
            if self.probe.samples() < SkewProbe::ROUNDS {
                return PongStep::Ping(round + 1);
            }
            self.probe.estimate()
        };
        match edge {
            Some(e) => {
                self.done = Some(e);
                PongStep::Done(e)
            }
            None => PongStep::Ignored,
        }
    }
}

/// Most node alignments the front-end keeps (a guard against a misbehaving child).
const MAX_REPORTS: usize = 1 << 20;

/// One node's part in the exchange.
#[derive(Debug, Default)]
pub struct ClockState {
    /// This node's alignment to the front-end's clock, once known.
    pub own: Option<Alignment>,
    /// One probe per child (indices as in `Router::children`); empty until measuring.
    edges: Vec<EdgeProbe>,
    /// Front-end: the alignment of every node reported so far, its own included.
    pub reports: BTreeMap<u32, Alignment>,
}

impl Router {
    /// Front-end: starts estimation from the root's own clock.
    pub fn start_clock(&mut self, out: &mut dyn Out) {
        self.clock.own = Some(Alignment::ROOT);
        self.clock.reports.insert(self.node, Alignment::ROOT);
        self.ping_children(out);
    }

    /// This node's alignment, once its parent sent it (always, at the front-end).
    pub fn alignment(&self) -> Option<Alignment> {
        self.clock.own
    }

    /// True once every live child's edge is measured (and its alignment sent).
    pub fn clock_edges_done(&self) -> bool {
        self.clock.own.is_some()
            && self
                .children
                .iter()
                .enumerate()
                .all(|(i, c)| !c.alive || self.clock.edges.get(i).is_some_and(|e| e.done.is_some()))
    }

    fn ping_children(&mut self, out: &mut dyn Out) {
        self.clock.edges = vec![EdgeProbe::default(); self.children.len()];
        for (i, c) in self.children.iter().enumerate() {
            if c.alive {
                self.clock.edges[i].sent(0, (self.clock_ns)());
                out.send(c.link, frame_bytes(FrameKind::ClockPing, 0, 0, &[]));
            }
        }
    }

    /// Child side: answer at once with our clock.
    pub(crate) fn on_clock_ping(&mut self, f: &Frame, out: &mut dyn Out) {
        if let Err(e) = check_ping(&f.payload) {
            return self.clock_fault(e);
        }
        let Some(parent) = self.parent else { return };
        let pong = Pong {
            child_ns: (self.clock_ns)(),
            pid: self.pid,
        };
        out.send(
            parent,
            frame_bytes(FrameKind::ClockPong, f.stream, 0, &pong.encode()),
        );
    }

    /// Parent side: one round trip of child `ci` is back.
    pub(crate) fn on_clock_pong(&mut self, ci: usize, f: &Frame, out: &mut dyn Out) {
        let now = (self.clock_ns)();
        let pong = match Pong::decode(&f.payload) {
            Ok(p) => p,
            Err(e) => return self.clock_fault(e),
        };
        let (Some(own), Some(edge)) = (self.clock.own, self.clock.edges.get_mut(ci)) else {
            return;
        };
        let c = &self.children[ci];
        // Pids are per host: the same pid on the same host is this very process.
        let same_process = pong.pid == self.pid && c.host == self.host;
        match edge.on_pong(f.stream, pong, now, same_process) {
            PongStep::Ignored => {}
            PongStep::Ping(round) => {
                edge.sent(round, (self.clock_ns)());
                out.send(c.link, frame_bytes(FrameKind::ClockPing, round, 0, &[]));
            }
            PongStep::Done(e) => {
                let align = own.then(e);
                let set = SetMsg {
                    align,
                    same_process,
                };
                out.send(
                    c.link,
                    frame_bytes(FrameKind::ClockSet, 0, 0, &set.encode()),
                );
                let report = ReportMsg {
                    node: c.node,
                    align,
                };
                vlog!(self.node, "clock of node {}: {align:?}", c.node);
                self.clock_report(report, out);
            }
        }
    }

    /// Child side: our alignment arrived; adopt it, then measure our own children.
    pub(crate) fn on_clock_set(&mut self, f: &Frame, out: &mut dyn Out) {
        let set = match SetMsg::decode(&f.payload) {
            Ok(s) => s,
            Err(e) => return self.clock_fault(e),
        };
        self.clock.own = Some(set.align);
        if self.adopt_alignment && !set.same_process {
            vargr_trace::set_alignment(set.align);
        }
        if !self.children.is_empty() {
            self.ping_children(out);
        }
    }

    /// A descendant's alignment on its way to the front-end.
    pub(crate) fn on_clock_report(&mut self, f: &Frame, out: &mut dyn Out) {
        match ReportMsg::decode(&f.payload) {
            Ok(r) => self.clock_report(r, out),
            Err(e) => self.clock_fault(e),
        }
    }

    fn clock_report(&mut self, r: ReportMsg, out: &mut dyn Out) {
        match self.parent {
            Some(p) => out.send(p, frame_bytes(FrameKind::ClockReport, 0, 0, &r.encode())),
            None => {
                if self.clock.reports.len() < MAX_REPORTS {
                    self.clock.reports.insert(r.node, r.align);
                }
            }
        }
    }

    /// A malformed clock frame: the front-end lists it among its faults; elsewhere it
    /// is logged (a back-end's application should not see it as a receive error).
    fn clock_fault(&mut self, e: ClockMsgError) {
        vlog!(self.node, "{e}");
        if self.is_root() {
            self.deliveries.faults.push(TbonError::Clock(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let p = Pong {
            child_ns: 123,
            pid: 9,
        };
        assert_eq!(Pong::decode(&p.encode()), Ok(p));
        let s = SetMsg {
            align: Alignment {
                offset_ns: -5,
                error_ns: 7,
                hops: 2,
                aligned: true,
            },
            same_process: true,
        };
        assert_eq!(SetMsg::decode(&s.encode()), Ok(s));
        let r = ReportMsg {
            node: 4,
            align: s.align,
        };
        assert_eq!(ReportMsg::decode(&r.encode()), Ok(r));
        assert_eq!(check_ping(&[]), Ok(()));
    }

    #[test]
    fn malformed_payloads_are_errors_that_say_what() {
        assert_eq!(
            Pong::decode(&[0; 11]),
            Err(ClockMsgError::Length {
                kind: "ClockPong",
                expected: 12,
                found: 11
            })
        );
        let e = check_ping(&[1]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "malformed ClockPing frame: payload is 1 bytes, expected 0"
        );
        let mut huge = Pong {
            child_ns: 0,
            pid: 0,
        }
        .encode();
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            Pong::decode(&huge),
            Err(ClockMsgError::Range {
                what: "the child clock",
                ..
            })
        ));
        let mut deep = SetMsg {
            align: Alignment::ROOT,
            same_process: false,
        }
        .encode();
        deep[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            SetMsg::decode(&deep),
            Err(ClockMsgError::Range {
                what: "the hop count",
                ..
            })
        ));
        assert!(ReportMsg::decode(&[0; 100]).is_err());
    }

    use std::cell::Cell;
    use std::time::Instant;

    use vargr_net::LinkId;

    use crate::router::{ChildInfo, Outbox};

    thread_local! {
        /// The true time of the fake world, in ns; every clock read moves it on.
        static TRUE_NS: Cell<u64> = const { Cell::new(1_000_000_000) };
    }

    fn tick() -> u64 {
        TRUE_NS.with(|t| {
            let v = t.get() + 700;
            t.set(v);
            v
        })
    }
    fn root_clock() -> u64 {
        tick()
    }
    /// Node 1 runs 50 µs ahead of the root.
    fn ahead_clock() -> u64 {
        tick() + 50_000
    }
    /// Node 2 runs 20 µs behind the root.
    fn behind_clock() -> u64 {
        tick() - 20_000
    }

    const UP: LinkId = LinkId(0);
    const DOWN: LinkId = LinkId(1);

    fn node(id: u32, host: &str, pid: u32, clock: fn() -> u64, child: Option<u32>) -> Router {
        let reg = std::sync::Arc::new(vargr_filter::Registry::with_builtins());
        let mut r = Router::new(id, host.into(), None, reg);
        r.clock_ns = clock;
        r.pid = pid;
        r.adopt_alignment = false;
        if id != 0 {
            r.parent = Some(UP);
            r.parent_node = id - 1;
        }
        if let Some(c) = child {
            r.children
                .push(ChildInfo::new(DOWN, c, format!("host{c}"), vec![0]));
        }
        r
    }

    /// Delivers frames along the chain 0 - 1 - 2 until nobody sends any more.
    fn pump(chain: &mut [Router], outs: &mut [Outbox]) {
        for _ in 0..10_000 {
            let mut moved = false;
            for i in 0..chain.len() {
                for (link, _, bytes) in std::mem::take(&mut outs[i].0) {
                    moved = true;
                    let to = if link == UP { i - 1 } else { i + 1 };
                    let from = if link == UP { DOWN } else { UP };
                    let f = vargr_wire::decode_exact(&bytes, 1 << 20).unwrap();
                    chain[to].on_frame(from, f, Instant::now(), &mut outs[to]);
                }
            }
            if !moved {
                return;
            }
        }
        panic!("the clock exchange never settled");
    }

    #[test]
    fn alignments_add_up_down_the_tree_and_reach_the_front_end() {
        let mut chain = [
            node(0, "host0", 1, root_clock, Some(1)),
            node(1, "host1", 2, ahead_clock, Some(2)),
            node(2, "host2", 3, behind_clock, None),
        ];
        let mut outs: Vec<Outbox> = (0..3).map(|_| Outbox::default()).collect();
        chain[0].start_clock(&mut outs[0]);
        pump(&mut chain, &mut outs);
        assert!(chain.iter().all(Router::clock_edges_done));
        let got = chain[0].clock.reports.clone();
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[&0], Alignment::ROOT);
        for (node, truth, hops) in [(1, 50_000i64, 1), (2, -20_000, 2)] {
            let a = got[&node];
            assert!(
                (a.offset_ns - truth).unsigned_abs() <= a.error_ns,
                "node {node}: {a:?}, true offset {truth}"
            );
            assert!(a.error_ns < 5_000, "node {node}: {a:?}");
            assert_eq!(a.hops, hops);
            assert_eq!(chain[node as usize].alignment(), Some(a));
        }
        assert!(chain[0].deliveries.faults.is_empty());
    }

    #[test]
    fn a_child_in_the_same_process_gets_an_exact_edge_in_one_round() {
        let mut chain = [
            node(0, "host", 7, root_clock, Some(1)),
            node(1, "host", 7, root_clock, None),
        ];
        chain[0].children[0].host = "host".into();
        let mut outs: Vec<Outbox> = (0..2).map(|_| Outbox::default()).collect();
        chain[0].start_clock(&mut outs[0]);
        assert_eq!(outs[0].0.len(), 1);
        pump(&mut chain, &mut outs);
        let a = chain[1].alignment().unwrap();
        assert_eq!((a.offset_ns, a.error_ns, a.hops), (0, 0, 1));
    }

    #[test]
    fn malformed_clock_frames_are_faults_at_the_front_end_and_change_nothing() {
        let mut root = node(0, "host0", 1, root_clock, Some(1));
        let mut out = Outbox::default();
        root.start_clock(&mut out);
        let bad = Frame::new(FrameKind::ClockPong, 0, 0, vec![1u8; 3]);
        root.on_frame(DOWN, bad, Instant::now(), &mut out);
        assert!(matches!(
            root.deliveries.faults.as_slice(),
            [TbonError::Clock(ClockMsgError::Length {
                expected: 12,
                found: 3,
                ..
            })]
        ));
        assert!(!root.clock_edges_done());
        // A child ignores a ClockSet that does not decode.
        let mut child = node(1, "host1", 2, ahead_clock, None);
        let bad = Frame::new(FrameKind::ClockSet, 0, 0, vec![0u8; 2]);
        child.on_frame(UP, bad, Instant::now(), &mut out);
        assert_eq!(child.alignment(), None);
        assert!(child.deliveries.faults.is_empty());
    }

    #[test]
    fn arbitrary_payloads_never_panic_and_good_ones_re_encode() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for i in 0..20_000usize {
            let b: Vec<u8> = (0..i % 30)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = check_ping(&b);
            if let Ok(p) = Pong::decode(&b) {
                assert_eq!(p.encode(), b);
            }
            if let Ok(m) = SetMsg::decode(&b) {
                assert_eq!(SetMsg::decode(&m.encode()), Ok(m));
            }
            if let Ok(m) = ReportMsg::decode(&b) {
                assert_eq!(m.encode(), b);
            }
        }
    }

    #[test]
    fn an_edge_takes_every_round_then_estimates() {
        let mut e = EdgeProbe::default();
        let mut round = 0;
        let mut t = 1_000u64;
        loop {
            e.sent(round, t);
            // Child 7 µs ahead, 2 µs each way.
            let pong = Pong {
                child_ns: t + 2_000 + 7_000,
                pid: 1,
            };
            // A stale pong changes nothing.
            assert_eq!(
                e.on_pong(round + 5, pong, t + 4_000, false),
                PongStep::Ignored
            );
            match e.on_pong(round, pong, t + 4_000, false) {
                PongStep::Ping(r) => round = r,
                PongStep::Done(a) => {
                    assert_eq!(a.offset_ns, 7_000);
                    assert_eq!(a.error_ns, 2_000);
                    break;
                }
                PongStep::Ignored => panic!("a good pong was ignored"),
            }
            t += 10_000;
        }
        assert_eq!(round + 1, SkewProbe::ROUNDS);
        assert_eq!(e.probe.samples(), SkewProbe::ROUNDS);
    }
}
