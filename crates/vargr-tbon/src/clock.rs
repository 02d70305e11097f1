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
//! `VARGR_CLOCK_SKEW_NS`), or the [`ClockFn`] the router was given (the simulated
//! tree's skewed fake clocks). The per-node state, [`ClockState`], is owned by the
//! router, which hands it each clock frame with the node's [`Place`]. The exchange is a
//! few dozen small control frames at start-up and does not hold back application
//! frames, which flow alongside.
//!
//! Payloads are fixed-size little-endian records; decoding checks the exact length and
//! the ranges that later arithmetic relies on, so a malformed frame is a
//! [`ClockMsgError`], never a panic.

use std::collections::BTreeMap;
use std::sync::Arc;

use vargr_trace::{Alignment, SkewProbe};
use vargr_wire::{Frame, FrameKind};

use crate::node::{ChildInfo, Place};
use crate::out::{frame_bytes, Out};

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

/// The clock the exchange reads, in nanoseconds: [`vargr_trace::clock::trace_ns`] in a
/// real tree, a skewed fake one in the simulated tree.
pub type ClockFn = Arc<dyn Fn() -> u64 + Send + Sync>;

/// One node's part in the exchange. The router owns it and hands it each clock frame
/// with the node's [`Place`].
pub struct ClockState {
    /// This node's alignment to the front-end's clock, once known.
    own: Option<Alignment>,
    /// One probe per child (indices as in the place's children); empty until measuring.
    edges: Vec<EdgeProbe>,
    /// Front-end: the alignment of every node reported so far, its own included.
    reports: BTreeMap<u32, Alignment>,
    read_ns: ClockFn,
    /// This process's id: a child answering with the same one (and on the same host)
    /// shares our clock.
    pid: u32,
    /// Whether an alignment received makes this process's trace alignment (not for
    /// nodes running as threads of another node's process).
    adopt_alignment: bool,
}

impl Default for ClockState {
    fn default() -> ClockState {
        ClockState::new(
            Arc::new(vargr_trace::clock::trace_ns),
            std::process::id(),
            !crate::trace::in_process(),
        )
    }
}

impl ClockState {
    pub fn new(read_ns: ClockFn, pid: u32, adopt_alignment: bool) -> ClockState {
        ClockState {
            own: None,
            edges: Vec::new(),
            reports: BTreeMap::new(),
            read_ns,
            pid,
            adopt_alignment,
        }
    }

    /// This node's alignment, once its parent sent it (always, at the front-end).
    pub fn own(&self) -> Option<Alignment> {
        self.own
    }

    /// Front-end: every node's alignment reported so far.
    pub fn reports(&self) -> &BTreeMap<u32, Alignment> {
        &self.reports
    }

    /// Front-end: starts estimation from the root's own clock.
    pub fn start(&mut self, at: Place<'_>, out: &mut dyn Out) {
        self.own = Some(Alignment::ROOT);
        self.reports.insert(at.node, Alignment::ROOT);
        self.ping_children(at, out);
    }

    /// True once every live child's edge is measured (and its alignment sent).
    pub fn edges_done(&self, children: &[ChildInfo]) -> bool {
        self.own.is_some()
            && children
                .iter()
                .enumerate()
                .all(|(i, c)| !c.alive || self.edges.get(i).is_some_and(|e| e.done.is_some()))
    }

    fn ping_children(&mut self, at: Place<'_>, out: &mut dyn Out) {
        self.edges = vec![EdgeProbe::default(); at.children.len()];
        for (i, c) in at.children.iter().enumerate() {
            if c.alive {
                self.edges[i].sent(0, (self.read_ns)());
                out.send(c.link, frame_bytes(FrameKind::ClockPing, 0, 0, &[]));
            }
        }
    }

    /// Child side: answer at once with our clock.
    pub fn on_ping(
        &self,
        f: &Frame,
        at: Place<'_>,
        out: &mut dyn Out,
    ) -> Result<(), ClockMsgError> {
        check_ping(&f.payload)?;
        let Some(parent) = at.parent else {
            return Ok(());
        };
        let pong = Pong {
            child_ns: (self.read_ns)(),
            pid: self.pid,
        };
        out.send(
            parent,
            frame_bytes(FrameKind::ClockPong, f.stream, 0, &pong.encode()),
        );
        Ok(())
    }

    /// Parent side: one round trip of child `ci` is back.
    pub fn on_pong(
        &mut self,
        ci: usize,
        f: &Frame,
        at: Place<'_>,
        out: &mut dyn Out,
    ) -> Result<(), ClockMsgError> {
        let now = (self.read_ns)();
        let pong = Pong::decode(&f.payload)?;
        let (Some(own), Some(edge)) = (self.own, self.edges.get_mut(ci)) else {
            return Ok(());
        };
        let c = &at.children[ci];
        // Pids are per host: the same pid on the same host is this very process.
        let same_process = pong.pid == self.pid && c.host == at.host;
        match edge.on_pong(f.stream, pong, now, same_process) {
            PongStep::Ignored => {}
            PongStep::Ping(round) => {
                edge.sent(round, (self.read_ns)());
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
                tracing::debug!(node = at.node, "clock of node {}: {align:?}", c.node);
                let report = ReportMsg {
                    node: c.node,
                    align,
                };
                self.report(report, at, out);
            }
        }
        Ok(())
    }

    /// Child side: our alignment arrived; adopt it, then measure our own children.
    pub fn on_set(
        &mut self,
        f: &Frame,
        at: Place<'_>,
        out: &mut dyn Out,
    ) -> Result<(), ClockMsgError> {
        let set = SetMsg::decode(&f.payload)?;
        self.own = Some(set.align);
        if self.adopt_alignment && !set.same_process {
            vargr_trace::set_alignment(set.align);
        }
        if !at.children.is_empty() {
            self.ping_children(at, out);
        }
        Ok(())
    }

    /// A descendant's alignment on its way to the front-end.
    pub fn on_report(
        &mut self,
        f: &Frame,
        at: Place<'_>,
        out: &mut dyn Out,
    ) -> Result<(), ClockMsgError> {
        let r = ReportMsg::decode(&f.payload)?;
        self.report(r, at, out);
        Ok(())
    }

    fn report(&mut self, r: ReportMsg, at: Place<'_>, out: &mut dyn Out) {
        match at.parent {
            Some(p) => out.send(p, frame_bytes(FrameKind::ClockReport, 0, 0, &r.encode())),
            None => {
                if self.reports.len() < MAX_REPORTS {
                    self.reports.insert(r.node, r.align);
                }
            }
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
