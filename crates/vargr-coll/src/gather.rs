//! Gathering the monitor's pulls through a tree of agents (issue 30; EventSpace's
//! spanning-tree gather, seed 004), so that monitoring a thousand processes does not
//! converge on one.
//!
//! Agents are numbered in a fixed order (a job's processes, an MPI run's ranks) and
//! arranged in a k-ary tree whose root is the monitor: the monitor talks to its `k`
//! children only, and an interior agent forwards each pull to its own children, reduces
//! its process's records, merges its sub-tree's answers with its own and sends one
//! answer up ([`Gathered`]). Call summaries of the same call merge on the way
//! ([`CallSummary::merge`]), so the monitor receives about one summary per call per
//! child instead of one per process; other replies are concatenated.
//!
//! A pull carries a time budget; each level gives its children three quarters of its
//! own, and a child that has not answered when the budget is spent is named in the
//! answer ([`Gathered::missing`]) instead of holding the pull. Its answer is not lost:
//! replies carry the pull they answer, and a late one is read (and merged) during the
//! next pull. A fan-out at least the number of agents is today's flat gather, on the
//! same code path: every agent is the monitor's child and answers with a plain
//! [`Reply`].

use std::collections::HashMap;
use std::ops::Range;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use vargr_net::gate::Gate;
use vargr_net::SecureConn;
use vargr_trace::scope::{CallSummary, Reduced, Reply, Scope, MAX_REPLY};
use vargr_wire::{Frame, FrameKind};

/// Children of one agent (or of the monitor) when the configuration does not say.
pub const DEFAULT_FANOUT: usize = 32;
/// Time the monitor gives a whole tree to answer a pull when the configuration does
/// not say.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(2);
/// Share of its own budget a node gives its children, so that their answers reach it
/// before its own is due.
const CHILD_SHARE: f64 = 0.75;
/// A reply that has started to arrive may take this long to finish, however little of
/// the budget is left: cutting it off would lose the connection, not just this pull.
const READ_GRACE: Duration = Duration::from_millis(500);

/// The parent of agent `agent` in a `fanout`-ary tree (`None`: the monitor).
pub fn parent(agent: usize, fanout: usize) -> Option<usize> {
    (agent / fanout.max(1)).checked_sub(1)
}

/// The children of `agent` (`None`: the monitor) among `n` agents.
pub fn children(agent: Option<usize>, fanout: usize, n: usize) -> Range<usize> {
    let k = fanout.max(1);
    let at = agent.map_or(0, |a| a + 1).saturating_mul(k).min(n);
    at..at.saturating_add(k).min(n)
}

/// What a monitor asks of an agent: a scope, and how long the agent's sub-tree has to
/// answer. Sent with the pull's id in the frame's stream field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Pull {
    pub(crate) scope: Scope,
    pub(crate) budget_ms: u64,
}

impl Pull {
    pub(crate) fn frame(&self, id: u32) -> Frame {
        let body = serde_json::to_vec(self).expect("a pull serializes");
        Frame::new(FrameKind::Data, id, 0, Bytes::from(body))
    }

    /// The same pull for the next level down.
    pub(crate) fn for_children(&self) -> Pull {
        Pull {
            scope: self.scope.clone(),
            budget_ms: (self.budget_ms as f64 * CHILD_SHARE) as u64,
        }
    }
}

/// The stop frame: the agent's sub-tree may go.
pub(crate) fn stop_frame() -> Frame {
    Frame::new(FrameKind::Data, 0, 0, Bytes::from_static(b"stop"))
}

/// One process's account of itself in a gathered answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub process: String,
    pub host: String,
    /// Records its agent read since its last answer, and records overwritten unread.
    pub records: u64,
    pub lost: u64,
    pub clock_error_ns: u64,
}

impl Head {
    fn of<T>(r: &Reduced<T>) -> Head {
        Head {
            process: r.process.clone(),
            host: r.host.clone(),
            records: r.records,
            lost: r.lost,
            clock_error_ns: r.clock_error_ns,
        }
    }
}

/// Call summaries of many processes, one per call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MergedCalls {
    pub collectors: Vec<String>,
    index: HashMap<String, u32>,
    /// (collector, seq) → position in `body`.
    slot: FxHashMap<(u32, u32), usize>,
    pub body: Vec<CallSummary>,
    /// The sparsest sampling any process applied.
    pub sample: u32,
}

impl MergedCalls {
    fn add(&mut self, names: &[String], calls: &[CallSummary], sample: u32) {
        self.sample = self.sample.max(sample);
        let ids: Vec<u32> = names.iter().map(|n| self.intern(n)).collect();
        for c in calls {
            let Some(&collector) = ids.get(c.collector as usize) else {
                continue; // an index the sender never named: nothing to file it under
            };
            let key = (collector, c.seq);
            match self.slot.get(&key) {
                Some(&i) => self.body[i].merge(c),
                None => {
                    self.slot.insert(key, self.body.len());
                    self.body.push(CallSummary { collector, ..*c });
                }
            }
        }
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.collectors.len() as u32;
        self.collectors.push(name.to_string());
        self.index.insert(name.to_string(), i);
        i
    }

    fn reply(&self) -> Reply {
        Reply::Calls(Reduced {
            process: String::new(),
            host: String::new(),
            records: 0,
            lost: 0,
            collectors: self.collectors.clone(),
            clock_error_ns: 0,
            sample: self.sample,
            body: self.body.clone(),
        })
    }
}

/// A sub-tree's answer to one pull: every process's head, the call summaries merged,
/// the other replies as they came, and who did not answer in time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gathered {
    pub processes: Vec<Head>,
    /// Agents (by name) that did not answer within their sub-tree's budget, or left.
    pub missing: Vec<String>,
    pub calls: Option<MergedCalls>,
    /// Statistics, counts and records: they do not merge, so they are concatenated.
    pub others: Vec<Reply>,
}

/// The JSON part of an encoded [`Gathered`].
#[derive(Serialize, Deserialize)]
struct GatheredHead {
    processes: Vec<Head>,
    missing: Vec<String>,
}

/// First byte of an encoded [`Gathered`] (a plain [`Reply`] starts with another).
const GATHERED: u8 = b'G';

impl Gathered {
    /// One process's reply.
    pub fn of(reply: Reply) -> Gathered {
        let mut g = Gathered::default();
        g.add_reply(reply);
        g
    }

    fn add_reply(&mut self, reply: Reply) {
        match reply {
            Reply::Calls(r) => {
                self.processes.push(Head::of(&r));
                self.calls.get_or_insert_with(MergedCalls::default).add(
                    &r.collectors,
                    &r.body,
                    r.sample,
                );
            }
            Reply::Stats(ref r) => {
                self.processes.push(Head::of(r));
                self.others.push(reply);
            }
            Reply::Counts(ref r) => {
                self.processes.push(Head::of(r));
                self.others.push(reply);
            }
            Reply::Records(ref f) => {
                let (records, lost) = reply.counts();
                self.processes.push(Head {
                    process: f.process.clone(),
                    host: f.host.clone(),
                    records,
                    lost,
                    clock_error_ns: f.align.error_ns,
                });
                self.others.push(reply);
            }
        }
    }

    /// Folds another sub-tree's answer in.
    pub fn merge(&mut self, o: Gathered) {
        self.processes.extend(o.processes);
        self.missing.extend(o.missing);
        if let Some(c) = o.calls {
            self.calls.get_or_insert_with(MergedCalls::default).add(
                &c.collectors,
                &c.body,
                c.sample,
            );
        }
        self.others.extend(o.others);
    }

    /// `G`, the head's length (u32, little-endian), the head in JSON, then entries of a
    /// length (u32) and a [`Reply`]'s bytes: the merged calls first, if any.
    pub fn encode(&self) -> Vec<u8> {
        let head = serde_json::to_vec(&GatheredHead {
            processes: self.processes.clone(),
            missing: self.missing.clone(),
        })
        .expect("serializable");
        let mut out = vec![GATHERED];
        out.extend_from_slice(&(head.len() as u32).to_le_bytes());
        out.extend_from_slice(&head);
        let calls = self.calls.as_ref().map(MergedCalls::reply);
        for r in calls.iter().chain(&self.others) {
            let b = r.encode();
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(&b);
        }
        out
    }

    /// The same answer without its bodies, for when it would be larger than a parent
    /// accepts: the processes are still counted, and the parent told why.
    fn heads_only(&self, why: String) -> Gathered {
        Gathered {
            processes: self.processes.clone(),
            missing: self.missing.iter().cloned().chain([why]).collect(),
            calls: None,
            others: Vec::new(),
        }
    }

    /// Parses an answer: a [`Gathered`] or one agent's plain [`Reply`]. `from` names
    /// the sender in errors.
    pub fn decode(b: &[u8], from: &str) -> Result<Gathered, String> {
        if b.len() > MAX_REPLY {
            return Err(format!("{from}: answer of {} bytes is too large", b.len()));
        }
        if b.first() != Some(&GATHERED) {
            return Reply::decode(b, from)
                .map(Gathered::of)
                .map_err(|e| e.to_string());
        }
        let mut at = 1;
        // The next length-prefixed part, within `b`.
        let next = |at: &mut usize, what: &str| -> Result<&[u8], String> {
            let len = b
                .get(*at..*at + 4)
                .ok_or_else(|| format!("{from}: gathered answer cut before {what}"))?;
            let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
            let body = b.get(*at + 4..*at + 4 + len).ok_or_else(|| {
                format!("{from}: gathered answer: {what} of {len} bytes cut short")
            })?;
            *at += 4 + len;
            Ok(body)
        };
        let head: GatheredHead = serde_json::from_slice(next(&mut at, "its head")?)
            .map_err(|e| format!("{from}: gathered answer's head: {e}"))?;
        let mut g = Gathered {
            processes: head.processes,
            missing: head.missing,
            ..Gathered::default()
        };
        while at < b.len() {
            let r = Reply::decode(next(&mut at, "a reply")?, from).map_err(|e| e.to_string())?;
            match r {
                Reply::Calls(c) => g.calls.get_or_insert_with(MergedCalls::default).add(
                    &c.collectors,
                    &c.body,
                    c.sample,
                ),
                other => g.others.push(other),
            }
        }
        Ok(g)
    }

    /// What an agent sends up: its own reply as it is when it has no sub-tree to speak
    /// for (the flat gather's wire), else the gathered answer, cut to its heads if it
    /// would be larger than a parent accepts.
    pub(crate) fn answer(own: Reply, below: Option<Gathered>) -> Vec<u8> {
        let Some(below) = below else {
            return own.encode();
        };
        let mut g = Gathered::of(own);
        g.merge(below);
        let b = g.encode();
        if b.len() <= MAX_REPLY {
            return b;
        }
        let why = format!(
            "{} (its sub-tree's answer of {} bytes was too large; only its counts came)",
            g.processes
                .first()
                .map_or("an agent", |h| h.process.as_str()),
            b.len()
        );
        g.heads_only(why).encode()
    }
}

/// In an answer's frame flags: the agent's last answer. It leaves after it, and its
/// parent lets it go instead of asking it again and naming it missing.
pub(crate) const LAST_ANSWER: u8 = 1;

/// One connection down the tree.
pub(crate) struct Child {
    pub(crate) conn: SecureConn,
    pub(crate) name: String,
}

/// The connections of a node of the gather tree (an interior agent, or the monitor) to
/// its children, and the gate late children come through.
#[derive(Default)]
pub(crate) struct Children {
    pub(crate) list: Vec<Child>,
    /// Children not yet connected are accepted here at each pull.
    pub(crate) gates: Vec<Gate>,
    /// The gates' Unix socket files, removed when the node ends.
    pub(crate) sockets: Vec<vargr_net::runtime_dir::RemoveOnDrop>,
    /// Answer bytes received, over the node's life.
    pub(crate) bytes: u64,
    /// Children that could not be sent this pull's request.
    unasked: Vec<String>,
}

impl Children {
    pub(crate) fn is_leaf(&self) -> bool {
        self.list.is_empty() && self.gates.is_empty()
    }

    /// Takes in the children waiting at the gate.
    pub(crate) fn accept(&mut self) {
        for gate in &self.gates {
            while let Ok(a) = gate.accept_timeout(Duration::ZERO) {
                let conn = a.conn;
                conn.conn().set_low_priority();
                self.list.push(Child {
                    conn,
                    name: format!("agent of rank {}", a.node),
                });
            }
        }
    }

    /// Sends pull `id` to every child (before any answer is awaited: sub-trees gather
    /// in parallel); a child that cannot take it is dropped and named in the answer.
    pub(crate) fn ask(&mut self, id: u32, pull: &Pull, timeout: Duration) {
        self.accept();
        let f = pull.frame(id);
        let unasked = &mut self.unasked;
        self.list.retain_mut(|c| {
            c.conn.set_timeout(Some(timeout.max(READ_GRACE)));
            match c.conn.write_frame(&f) {
                Ok(()) => true,
                Err(e) => {
                    unasked.push(format!("{} (gone: {e})", c.name));
                    false
                }
            }
        });
    }

    /// Reads every child's answer to pull `id` until `deadline` (and answers to earlier
    /// pulls that came late, which are merged too). A child that has not answered by
    /// then is named missing and kept; one whose connection fails or that sends what
    /// does not decode is named and dropped; one whose answer was its last is dropped.
    pub(crate) fn collect(&mut self, id: u32, deadline: Instant) -> Gathered {
        let mut out = Gathered {
            missing: std::mem::take(&mut self.unasked),
            ..Gathered::default()
        };
        let bytes = &mut self.bytes;
        self.list.retain_mut(|c| loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match c.conn.conn().wait_readable(left) {
                Ok(true) => {}
                Ok(false) => {
                    out.missing.push(c.name.clone());
                    return true;
                }
                Err(e) => {
                    out.missing.push(format!("{} (gone: {e})", c.name));
                    return false;
                }
            }
            c.conn.set_timeout(Some(left.max(READ_GRACE)));
            let f = match c.conn.read_frame(MAX_REPLY) {
                Ok(f) => f,
                Err(e) => {
                    out.missing.push(format!("{} (gone: {e})", c.name));
                    return false;
                }
            };
            *bytes += f.payload.len() as u64;
            match Gathered::decode(&f.payload, &c.name) {
                Ok(g) => out.merge(g),
                Err(e) => {
                    tracing::warn!("monitor plane: {e}");
                    out.missing.push(format!("{} (bad answer: {e})", c.name));
                    return false;
                }
            }
            if f.flags & LAST_ANSWER != 0 {
                return false;
            }
            if f.stream == id {
                return true;
            }
        });
        out
    }

    /// Lets every child go (after the final pull).
    pub(crate) fn release(&mut self) {
        self.accept();
        let stop = stop_frame();
        for c in &mut self.list {
            c.conn.set_timeout(Some(READ_GRACE));
            let _ = c.conn.write_frame(&stop);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vargr_trace::analysis::StatsMonitor;
    use vargr_trace::scope::CollectorStats;

    #[test]
    fn the_tree_has_every_agent_once_with_at_most_fanout_children() {
        for n in [1, 2, 5, 12, 64, 100] {
            for k in [1, 2, 3, 16, 200] {
                let mut seen = vec![0; n];
                let mut stack = vec![None];
                while let Some(node) = stack.pop() {
                    let kids = children(node, k, n);
                    assert!(kids.len() <= k);
                    for c in kids {
                        assert_eq!(parent(c, k), node, "n {n} k {k} child {c}");
                        seen[c] += 1;
                        stack.push(Some(c));
                    }
                }
                assert!(seen.iter().all(|&s| s == 1), "n {n} k {k}: {seen:?}");
            }
        }
        // Fan-out 3 over 12 agents: the monitor has 3 children, agents 0..3 are interior.
        assert_eq!(children(None, 3, 12), 0..3);
        assert_eq!(children(Some(0), 3, 12), 3..6);
        assert_eq!(children(Some(2), 3, 12), 9..12);
        assert!(children(Some(3), 3, 12).is_empty());
        assert_eq!(parent(11, 3), Some(2));
        // A fan-out of at least the agents is the flat gather.
        assert_eq!(children(None, 64, 12), 0..12);
        assert!((0..12).all(|a| parent(a, 64).is_none()));
    }

    fn calls(process: &str, names: &[&str], body: &[(u32, u32, u32, u64)]) -> Reply {
        Reply::Calls(Reduced {
            process: process.into(),
            host: "h".into(),
            records: body.len() as u64,
            lost: 1,
            collectors: names.iter().map(|n| n.to_string()).collect(),
            clock_error_ns: 5,
            sample: 1,
            body: body
                .iter()
                .map(|&(collector, seq, rank, at)| CallSummary {
                    collector,
                    seq,
                    ranks: 1,
                    first_arrival_ns: at,
                    last_arrival_ns: at,
                    last_rank: rank,
                    last_departure_ns: at + 10,
                })
                .collect(),
        })
    }

    #[test]
    fn summaries_of_the_same_call_merge_across_processes_and_collector_lists() {
        // Two processes name their collectors in different orders.
        let a = calls(
            "p0",
            &["ctx0/bcast", "ctx0/allreduce"],
            &[(1, 7, 0, 100), (0, 1, 0, 5)],
        );
        let b = calls("p1", &["ctx0/allreduce"], &[(0, 7, 1, 300), (0, 8, 1, 50)]);
        let mut g = Gathered::of(a);
        g.merge(Gathered::decode(&b.encode(), "agent of rank 1").unwrap());
        let c = g.calls.clone().unwrap();
        let find = |name: &str, seq| {
            let id = c.collectors.iter().position(|n| n == name).unwrap() as u32;
            *c.body
                .iter()
                .find(|s| s.collector == id && s.seq == seq)
                .unwrap()
        };
        let s = find("ctx0/allreduce", 7);
        assert_eq!((s.ranks, s.first_arrival_ns, s.last_rank), (2, 100, 1));
        assert_eq!(find("ctx0/allreduce", 8).ranks, 1);
        assert_eq!(find("ctx0/bcast", 1).ranks, 1);
        assert_eq!(c.body.len(), 3);
        assert_eq!(g.processes.len(), 2);
        assert_eq!(g.processes[1].process, "p1");
        // Statistics do not merge: each process's stay its own.
        let stats = Reply::Stats(Reduced {
            process: "p2".into(),
            host: "h".into(),
            records: 3,
            lost: 0,
            collectors: Vec::new(),
            clock_error_ns: 0,
            sample: 0,
            body: vec![CollectorStats {
                collector: "ctx0/allreduce".into(),
                stats: {
                    let mut m = StatsMonitor::new();
                    m.push(3.0);
                    m.summary().unwrap()
                },
            }],
        });
        g.merge(Gathered::of(stats.clone()));
        g.missing.push("agent of rank 9".into());
        let back = Gathered::decode(&g.encode(), "agent of rank 0").unwrap();
        assert_eq!(back.processes, g.processes);
        assert_eq!(back.missing, vec!["agent of rank 9".to_string()]);
        assert_eq!(back.others, vec![stats]);
        let (mut want, mut got) = (c.body.clone(), back.calls.unwrap().body);
        want.sort_by_key(|s| (s.collector, s.seq));
        got.sort_by_key(|s| (s.collector, s.seq));
        assert_eq!(got, want);
    }

    #[test]
    fn a_leaf_answers_with_its_plain_reply_and_bad_answers_name_the_sender() {
        let own = calls("p0", &["ctx0/allreduce"], &[(0, 1, 0, 1)]);
        assert_eq!(Gathered::answer(own.clone(), None), own.encode());
        let g = Gathered::answer(own, Some(Gathered::default()));
        assert_eq!(g[0], GATHERED);
        for cut in [1, 3, 5, 20, g.len() - 1] {
            let e = Gathered::decode(&g[..cut], "agent of rank 4").unwrap_err();
            assert!(e.contains("agent of rank 4"), "{cut}: {e}");
        }
        let mut long = g.clone();
        long[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Gathered::decode(&long, "x").is_err());
        let e = Gathered::decode(b"Zzz", "agent of rank 2").unwrap_err();
        assert!(e.contains("agent of rank 2"), "{e}");
        assert!(Gathered::decode(b"", "agent of rank 2").is_err());
    }

    #[test]
    fn children_get_three_quarters_of_the_budget() {
        let p = Pull {
            scope: Scope::new(&["ctx0/*"], vargr_trace::scope::Reduce::LastArrival),
            budget_ms: 2000,
        };
        assert_eq!(p.for_children().budget_ms, 1500);
        let f = p.frame(7);
        assert_eq!(f.stream, 7);
        assert_eq!(serde_json::from_slice::<Pull>(&f.payload).unwrap(), p);
    }
}
