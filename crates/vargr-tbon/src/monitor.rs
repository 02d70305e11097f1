//! The tree's monitor plane (EventSpace's event scopes over the TBON): a pull travels
//! down the tree and the answers come back up it, on the links' low-priority lane.
//!
//! The front-end sends a pull (an id, a [`Scope`], a time budget) to its children; every
//! node forwards it to its own children, reduces its process's records with the scope
//! ([`ScopeReducer`]: selection by pattern and reduction at the source), and once its
//! children have answered, or their time is up, sends its answer and theirs up as one
//! message. Commnodes thus gather their sub-trees in parallel, and a child that does not
//! answer in time is named in the answer instead of holding the pull up.
//!
//! Monitor frames use the links' low-priority lane ([`vargr_net::Link::queue_low`]) and
//! answers are cut into chunks of at most [`CHUNK`] bytes, so an application frame waits
//! at most for one chunk. Answers come from other nodes: [`decode_answers`] is bounded
//! and fuzzed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use vargr_trace::scope::{Reply, Scope, ScopeReducer};
use vargr_trace::Tracer;
use vargr_wire::{Frame, FrameKind};

use crate::node::Place;
use crate::out::{frame_bytes, Out};

/// Largest monitor frame payload: the longest an application frame can wait behind the
/// monitor plane on a link is the time to send one of these.
pub const CHUNK: usize = 16 << 10;
/// Largest answer a sub-tree may send for one pull.
pub const MAX_ANSWER: usize = 512 << 20;
/// Records a node holds per thread between pulls.
const HOLD: usize = 1 << 18;

/// A pull as it travels down the tree.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PullMsg {
    scope: Scope,
    /// Time this node's sub-tree has to answer.
    budget_ms: u64,
}

/// What one node answered, or why it did not.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Reply(Reply),
    /// The node (a child) did not answer within the pull's time, or was lost.
    Missing,
}

/// A finished pull, at the front-end.
#[derive(Debug, Clone, PartialEq)]
pub struct Pulled {
    /// Per node id; nodes sharing a process (threads of the front-end) answer once.
    pub answers: BTreeMap<u32, Answer>,
    /// The front-end's node id.
    pub root: Option<u32>,
}

impl Pulled {
    /// The replies that arrived, by node.
    pub fn replies(&self) -> impl Iterator<Item = (u32, &Reply)> {
        self.answers.iter().filter_map(|(&n, a)| match a {
            Answer::Reply(r) => Some((n, r)),
            Answer::Missing => None,
        })
    }

    /// Nodes that did not answer.
    pub fn missing(&self) -> Vec<u32> {
        self.answers
            .iter()
            .filter(|(_, a)| matches!(a, Answer::Missing))
            .map(|(&n, _)| n)
            .collect()
    }
}

/// Appends one node's entry: node id, length (`u32::MAX` = missing), reply bytes.
fn push_entry(out: &mut Vec<u8>, node: u32, reply: Option<&[u8]>) {
    out.extend_from_slice(&node.to_le_bytes());
    match reply {
        Some(b) => {
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
    }
}

/// Parses a sub-tree's answer (a sequence of entries); `from` names the sender.
pub fn decode_answers(b: &[u8], from: &str) -> Result<Vec<(u32, Answer)>, String> {
    if b.len() > MAX_ANSWER {
        return Err(format!(
            "{from}: monitor answer of {} bytes is too large",
            b.len()
        ));
    }
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let head = b
            .get(at..at + 8)
            .ok_or_else(|| format!("{from}: monitor answer cut inside an entry header"))?;
        let node = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
        let len = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        at += 8;
        if len == u32::MAX {
            out.push((node, Answer::Missing));
            continue;
        }
        let body = b
            .get(at..at + len as usize)
            .ok_or_else(|| format!("{from}: monitor answer of node {node} is cut short"))?;
        at += len as usize;
        let reply =
            Reply::decode(body, &format!("{from}, node {node}")).map_err(|e| e.to_string())?;
        out.push((node, Answer::Reply(reply)));
    }
    Ok(out)
}

/// A pull this node forwarded and waits on.
struct Pending {
    /// Children (indices) still to answer.
    waiting: BTreeSet<usize>,
    /// Entries so far: this node's, then every answered sub-tree's.
    entries: Vec<u8>,
    deadline: Instant,
}

/// Per-node state of the monitor plane. The router owns it and hands it each monitor
/// frame, timer and lost child with the node's [`Place`].
#[derive(Default)]
pub struct MonitorState {
    tracer: Option<Tracer>,
    reducer: Option<ScopeReducer>,
    pending: BTreeMap<u32, Pending>,
    /// Chunks of answers being reassembled, per (child index, pull id).
    partial: HashMap<(usize, u32), Vec<u8>>,
    /// Front-end: finished pulls, by id.
    done: BTreeMap<u32, Pulled>,
    next_id: u32,
}

/// Sends `body` as MonitorData chunks on the low-priority lane.
fn send_chunks(out: &mut dyn Out, link: vargr_net::LinkId, id: u32, body: &[u8]) {
    let chunks: Vec<&[u8]> = if body.is_empty() {
        vec![&[][..]]
    } else {
        body.chunks(CHUNK).collect()
    };
    let n = chunks.len();
    for (i, c) in chunks.into_iter().enumerate() {
        let left = i32::try_from(n - 1 - i).unwrap_or(i32::MAX);
        out.send_low(link, frame_bytes(FrameKind::MonitorData, id, left, c));
    }
}

impl MonitorState {
    /// Front-end: starts a pull of `scope` with `budget` for the whole tree; the result
    /// is [`MonitorState::take_done`] under the returned id.
    pub fn start_pull(
        &mut self,
        scope: Scope,
        budget: Duration,
        now: Instant,
        at: Place<'_>,
        out: &mut dyn Out,
    ) -> u32 {
        let id = self.next_id;
        self.next_id = id.wrapping_add(1);
        self.begin_pull(id, scope, budget, now, at, out);
        id
    }

    /// A finished pull, once.
    pub fn take_done(&mut self, id: u32) -> Option<Pulled> {
        self.done.remove(&id)
    }

    /// A pull from the parent.
    pub fn on_pull(&mut self, f: &Frame, now: Instant, at: Place<'_>, out: &mut dyn Out) {
        match crate::proto::from_json::<PullMsg>("MonitorPull", &f.payload) {
            Ok(m) => {
                let budget = Duration::from_millis(m.budget_ms);
                self.begin_pull(f.stream, m.scope, budget, now, at, out)
            }
            Err(e) => {
                tracing::debug!(node = at.node, "bad monitor pull: {e}");
                // Answer anyway (with nothing), so the parent is not left waiting.
                if let Some(p) = at.parent {
                    send_chunks(out, p, f.stream, &[]);
                }
            }
        }
    }

    fn begin_pull(
        &mut self,
        id: u32,
        scope: Scope,
        budget: Duration,
        now: Instant,
        at: Place<'_>,
        out: &mut dyn Out,
    ) {
        // Children get most of the budget, so their answers reach us before ours is due.
        let child_budget = budget.mul_f64(0.75);
        let msg = crate::proto::to_json(&PullMsg {
            scope: scope.clone(),
            budget_ms: child_budget.as_millis() as u64,
        });
        let mut waiting = BTreeSet::new();
        for (ci, c) in at.children.iter().enumerate() {
            if c.alive {
                out.send_low(c.link, frame_bytes(FrameKind::MonitorPull, id, 0, &msg));
                waiting.insert(ci);
            }
        }
        let mut entries = Vec::new();
        for c in at.children.iter().filter(|c| !c.alive) {
            push_entry(&mut entries, c.node, None);
        }
        if owns_rings(at) {
            let reply = self.local_reply(at.node, scope);
            push_entry(&mut entries, at.node, Some(&reply.encode()));
        }
        self.pending.insert(
            id,
            Pending {
                waiting,
                entries,
                deadline: now + budget,
            },
        );
        self.finish_pull_if_ready(id, false, at, out);
    }

    /// This node's own answer: its process's records since the last pull, reduced.
    fn local_reply(&mut self, node: u32, scope: Scope) -> Reply {
        let tracer = self.tracer.get_or_insert_with(Tracer::new);
        let reducer = self
            .reducer
            .get_or_insert_with(|| ScopeReducer::new(scope.clone(), 1, HOLD));
        reducer.set_scope(scope);
        let process = format!("node {node}");
        reducer.add(&Tracer::file_of(&process, tracer.read()));
        reducer.reply(Tracer::file_of(&process, Vec::new()))
    }

    /// Drains the rings into the reducer between pulls (from the periodic tick), so
    /// rings overflow less often when pulls are rare.
    pub fn drain(&mut self, at: Place<'_>) {
        if !owns_rings(at) {
            return;
        }
        let process = format!("node {}", at.node);
        if let (Some(tracer), Some(reducer)) = (self.tracer.as_mut(), self.reducer.as_mut()) {
            reducer.add(&Tracer::file_of(&process, tracer.read()));
        }
    }

    /// A chunk of child `ci`'s answer.
    pub fn on_data(&mut self, ci: usize, f: &Frame, at: Place<'_>, out: &mut dyn Out) {
        let id = f.stream;
        let Some(p) = self.pending.get(&id) else {
            return; // a late answer to a pull already given up on
        };
        if !p.waiting.contains(&ci) {
            return;
        }
        let key = (ci, id);
        let buf = self.partial.entry(key).or_default();
        if buf.len() + f.payload.len() > MAX_ANSWER {
            self.partial.remove(&key);
            self.child_missing(id, ci, at);
            return self.finish_pull_if_ready(id, false, at, out);
        }
        buf.extend_from_slice(&f.payload);
        if f.tag != 0 {
            return;
        }
        let body = self.partial.remove(&key).unwrap_or_default();
        let child = at.children[ci].node;
        // Check before passing on, so one bad node cannot spoil its parent's answer.
        match decode_answers(&body, &format!("node {child}")) {
            Ok(_) => {
                if let Some(p) = self.pending.get_mut(&id) {
                    p.waiting.remove(&ci);
                    p.entries.extend_from_slice(&body);
                }
            }
            Err(e) => {
                tracing::debug!(node = at.node, "monitor answer refused: {e}");
                self.child_missing(id, ci, at);
            }
        }
        self.finish_pull_if_ready(id, false, at, out);
    }

    fn child_missing(&mut self, id: u32, ci: usize, at: Place<'_>) {
        let node = at.children[ci].node;
        if let Some(p) = self.pending.get_mut(&id) {
            if p.waiting.remove(&ci) {
                push_entry(&mut p.entries, node, None);
            }
        }
    }

    /// Child `ci` was lost: pulls waiting on it go on without it.
    pub fn child_lost(&mut self, ci: usize, at: Place<'_>, out: &mut dyn Out) {
        let ids: Vec<u32> = self.pending.keys().copied().collect();
        for id in ids {
            self.child_missing(id, ci, at);
            self.partial.remove(&(ci, id));
            self.finish_pull_if_ready(id, false, at, out);
        }
    }

    /// Pulls whose time is up go on without the children that have not answered.
    pub fn on_timer(&mut self, now: Instant, at: Place<'_>, out: &mut dyn Out) {
        let due: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            self.finish_pull_if_ready(id, true, at, out);
        }
    }

    /// The earliest pull deadline.
    pub fn deadline(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.deadline).min()
    }

    fn finish_pull_if_ready(&mut self, id: u32, expired: bool, at: Place<'_>, out: &mut dyn Out) {
        let Some(p) = self.pending.get(&id) else {
            return;
        };
        if !p.waiting.is_empty() && !expired {
            return;
        }
        let waiting: Vec<usize> = p.waiting.iter().copied().collect();
        for ci in waiting {
            self.child_missing(id, ci, at);
            self.partial.remove(&(ci, id));
        }
        let p = self.pending.remove(&id).expect("present");
        match at.parent {
            Some(link) => send_chunks(out, link, id, &p.entries),
            None => {
                let answers = decode_answers(&p.entries, "this front-end")
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                self.done.insert(
                    id,
                    Pulled {
                        answers,
                        root: Some(at.node),
                    },
                );
            }
        }
    }
}

/// Whether this node answers for its process's collectors: nodes started as threads
/// of the front-end's process leave that to the front-end.
fn owns_rings(at: Place<'_>) -> bool {
    at.is_root || !crate::trace::in_process()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vargr_trace::scope::Reduce;

    #[test]
    fn answers_round_trip_and_damage_is_named() {
        let mut b = Vec::new();
        let mut r = ScopeReducer::new(Scope::new(&["*"], Reduce::Counts), 1, 10);
        let reply = r.reply(Tracer::file_of("p", Vec::new()));
        push_entry(&mut b, 3, Some(&reply.encode()));
        push_entry(&mut b, 4, None);
        let got = decode_answers(&b, "child").unwrap();
        assert_eq!(got, vec![(3, Answer::Reply(reply)), (4, Answer::Missing)]);
        let e = decode_answers(&b[..b.len() - 3], "child").unwrap_err();
        assert!(e.contains("child"), "{e}");
        let e = decode_answers(&b[..10], "child").unwrap_err();
        assert!(e.contains("node 3"), "{e}");
        assert!(decode_answers(&[], "x").unwrap().is_empty());
    }
}

/// What `vargr top` shows for a network: the front-end's view after its latest pull.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NetworkStatus {
    /// Always `"network"` (a job's status has none), so `vargr top` can tell them apart.
    pub kind: String,
    pub uptime_s: f64,
    pub period_ms: u64,
    pub pulls: u64,
    pub last_pull_ms: f64,
    pub nodes: Vec<NodeRates>,
    pub streams: Vec<StreamRates>,
    /// Nodes that did not answer the last pull.
    pub missing: Vec<u32>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeRates {
    pub node: u32,
    pub process: String,
    pub host: String,
    pub frames_in_per_s: f64,
    pub frames_out_per_s: f64,
    pub bytes_in_per_s: f64,
    pub bytes_out_per_s: f64,
    /// Filter time per second (µs/s: 1e6 means one core busy filtering).
    pub filter_us_per_s: f64,
    pub records: u64,
    pub lost: u64,
    pub clock_offset_ns: i64,
    pub clock_error_ns: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StreamRates {
    pub stream: u32,
    /// Application packets per second crossing links, over all nodes.
    pub packets_per_s: f64,
    /// Waves reduced by the front-end's filter per second.
    pub waves_per_s: f64,
    /// Mean time of one filter call, over all nodes.
    pub filter_mean_us: f64,
    /// The load-balance view: from the front-end down, the child that most often
    /// completed its parent's waves (arrived last), then that child's own latest, down
    /// to where it ends: the path to the culprit, whose last entry is the culprit.
    pub last_path: Vec<u32>,
    /// How often the culprit was last at its parent, as a share of the parent's waves.
    pub last_share: f64,
}

impl NetworkStatus {
    /// The status from one pull of [`NetworkStatus::scope`] covering `dt` seconds.
    pub fn of(
        pulled: &Pulled,
        dt: f64,
        clocks: &BTreeMap<u32, vargr_trace::Alignment>,
    ) -> NetworkStatus {
        use vargr_trace::scope::Count;
        let dt = dt.max(1e-9);
        let mut nodes = Vec::new();
        let mut streams: BTreeMap<u32, StreamRates> = BTreeMap::new();
        // (stream, parent) → waves completed there; (stream, parent, child) → last.
        let mut waves_at: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        let mut last: BTreeMap<(u32, u32, u32), u64> = BTreeMap::new();
        let mut filter_calls: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for (node, reply) in pulled.replies() {
            let Reply::Counts(r) = reply else { continue };
            let sum = |pred: &dyn Fn(&Count) -> bool, f: &dyn Fn(&Count) -> u64| -> f64 {
                r.body.iter().filter(|c| pred(c)).map(f).sum::<u64>() as f64 / dt
            };
            let is_in = |c: &Count| c.collector.starts_with("tbon/link/in");
            let is_out = |c: &Count| c.collector.starts_with("tbon/link/out");
            let is_filter = |c: &Count| c.collector.starts_with("tbon/filter/");
            let a = clocks.get(&node).copied().unwrap_or_default();
            nodes.push(NodeRates {
                node,
                process: r.process.clone(),
                host: r.host.clone(),
                frames_in_per_s: sum(&is_in, &|c| c.events),
                frames_out_per_s: sum(&is_out, &|c| c.events),
                bytes_in_per_s: sum(&is_in, &|c| c.bytes),
                bytes_out_per_s: sum(&is_out, &|c| c.bytes),
                filter_us_per_s: sum(&is_filter, &|c| c.busy_ns) / 1e3,
                records: r.records,
                lost: r.lost,
                clock_offset_ns: a.offset_ns,
                clock_error_ns: a.error_ns,
            });
            for c in &r.body {
                let Some(stream) = c.seq else { continue };
                if stream < crate::FIRST_USER_STREAM {
                    continue;
                }
                let s = streams.entry(stream).or_insert_with(|| StreamRates {
                    stream,
                    ..StreamRates::default()
                });
                if c.collector == "tbon/link/in" {
                    s.packets_per_s += c.events as f64 / dt;
                } else if c.collector.starts_with("tbon/filter/up/") {
                    let fc = filter_calls.entry(stream).or_default();
                    fc.0 += c.events;
                    fc.1 += c.busy_ns;
                    *waves_at.entry((stream, node)).or_default() += c.events;
                    if Some(node) == pulled.root {
                        s.waves_per_s += c.events as f64 / dt;
                    }
                } else if c.collector == "tbon/wave/last" {
                    if let Some(child) = c.peer {
                        *last.entry((stream, node, child)).or_default() += c.events;
                    }
                }
            }
        }
        for (stream, s) in &mut streams {
            if let Some(&(n, busy)) = filter_calls.get(stream) {
                s.filter_mean_us = busy as f64 / n.max(1) as f64 / 1e3;
            }
            // The child most often last at `parent`, with how often.
            let worst = |parent: u32| {
                last.range((*stream, parent, 0)..=(*stream, parent, u32::MAX))
                    .max_by_key(|(_, &n)| n)
                    .map(|(&(_, _, child), &n)| (child, n))
            };
            let Some(mut at) = pulled.root else { continue };
            s.last_path.push(at);
            while let Some((child, n)) = worst(at) {
                if s.last_path.contains(&child) {
                    break; // records from an unrelated tree; never loop
                }
                let waves = waves_at.get(&(*stream, at)).copied().unwrap_or(n);
                s.last_share = n as f64 / waves.max(1) as f64;
                s.last_path.push(child);
                at = child;
            }
            if s.last_path.len() < 2 {
                s.last_path.clear();
            }
        }
        NetworkStatus {
            kind: "network".into(),
            nodes,
            streams: streams.into_values().collect(),
            missing: pulled.missing(),
            ..NetworkStatus::default()
        }
    }

    /// What the status pulls: event counts of the tree's collectors, per stream.
    pub fn scope() -> Scope {
        Scope {
            collectors: vec!["tbon/*".into()],
            reduce: vargr_trace::scope::Reduce::Counts,
            by_seq: true,
            sample: 0,
        }
    }

    /// Replaces `path` atomically, so `vargr top` never reads half a file.
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        vargr_trace::write_atomic(path, &serde_json::to_vec_pretty(self)?)
    }
}
