//! Event scopes (EventSpace, seed 004 §3.2): what a monitor asks a process's agent for,
//! and the reduction the agent applies *before* anything crosses the network.
//!
//! A [`Scope`] selects collectors by name pattern (`ctx0/*`, `tbon/link/*`) and says how
//! to reduce what matched:
//!
//! - [`Reduce::All`]: every matching record (a [`TraceFile`]).
//! - [`Reduce::LastArrival`]: one [`CallSummary`] per collective call instead of one
//!   record per rank: first and last arrival, who arrived last, last departure. The
//!   load-balance monitor needs nothing else, and a process hosting 16 ranks sends 1/16
//!   of the records.
//! - [`Reduce::Stats`]: the statistics monitor run on the node itself; only per-collector
//!   summaries travel (the seed's distributed analysis).
//! - [`Reduce::Counts`]: per collector and peer, how many events, bytes and busy time
//!   since the last pull: what a live view needs for rates, in a few hundred bytes.
//!
//! [`ScopeReducer`] is the agent side, sans-IO: it is fed the trace drained from the
//! rings and produces a [`Reply`]. Replies come from other processes, so
//! [`Reply::decode`] is bounded and fuzzed.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::analysis::{Stats, StatsMonitor};
use crate::file::{FileError, ThreadTrace, TraceFile};
use crate::record::EventOp;

/// How an agent reduces the records a scope selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reduce {
    All,
    LastArrival,
    Stats,
    Counts,
}

/// What a monitor pulls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scope {
    /// Collector name patterns (`*` matches any run of characters, `?` one); empty
    /// selects every collector.
    pub collectors: Vec<String>,
    pub reduce: Reduce,
    /// [`Reduce::Counts`] only: count per sequence number too (the tree's records carry
    /// the stream id there, so this gives per-stream rates).
    #[serde(default)]
    pub by_seq: bool,
    /// [`Reduce::LastArrival`] only: summarise only the calls whose sequence number is a
    /// multiple of this (0 and 1: every call). Every agent picks the same calls, so a
    /// monitor flooded with calls still sees whole calls, fewer of them.
    #[serde(default)]
    pub sample: u32,
}

impl Scope {
    pub fn new(collectors: &[&str], reduce: Reduce) -> Scope {
        Scope {
            collectors: collectors.iter().map(|c| c.to_string()).collect(),
            reduce,
            by_seq: false,
            sample: 0,
        }
    }

    pub fn matches(&self, collector: &str) -> bool {
        self.collectors.is_empty() || self.collectors.iter().any(|p| glob(p, collector))
    }
}

/// Whether `name` matches `pattern` (`*` = any run, `?` = one character).
pub fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Greedy with one backtrack point: linear for the patterns people write.
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// One collective call as one process saw it, on the root's time axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallSummary {
    /// Index into the reply's collector names.
    pub collector: u32,
    pub seq: u32,
    /// Ranks whose records are folded in.
    pub ranks: u32,
    pub first_arrival_ns: u64,
    pub last_arrival_ns: u64,
    pub last_rank: u32,
    pub last_departure_ns: u64,
}

impl CallSummary {
    /// Folds another part of the same call in (from another process, or another rank).
    pub fn merge(&mut self, o: &CallSummary) {
        self.ranks += o.ranks;
        self.first_arrival_ns = self.first_arrival_ns.min(o.first_arrival_ns);
        if o.last_arrival_ns > self.last_arrival_ns {
            self.last_arrival_ns = o.last_arrival_ns;
            self.last_rank = o.last_rank;
        }
        self.last_departure_ns = self.last_departure_ns.max(o.last_departure_ns);
    }
}

/// A collector's call durations (arrival to departure, µs) on one process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectorStats {
    pub collector: String,
    pub stats: Stats,
}

/// Events of one collector with one peer since the last pull.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Count {
    pub collector: String,
    /// The peer (rank or node) the events involved, if any.
    pub peer: Option<u32>,
    /// The sequence number, when the scope counts by it.
    pub seq: Option<u32>,
    pub events: u64,
    pub bytes: u64,
    /// Sum of the events' durations.
    pub busy_ns: u64,
    /// Longest single event.
    pub max_ns: u64,
}

/// An agent's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Records(TraceFile),
    Calls(Reduced<Vec<CallSummary>>),
    Stats(Reduced<Vec<CollectorStats>>),
    Counts(Reduced<Vec<Count>>),
}

/// A reduced answer and what it was reduced from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reduced<T> {
    pub process: String,
    pub host: String,
    /// Records the agent read since its last answer, and records the rings overwrote
    /// before it could read them.
    pub records: u64,
    pub lost: u64,
    pub collectors: Vec<String>,
    pub clock_error_ns: u64,
    /// [`Reduce::LastArrival`]: the calls summarised are those whose sequence number is
    /// a multiple of this (the scope's sample, or more when the agent had more calls
    /// than one reply carries, [`REPLY_CALLS`]); 0 and 1: every call.
    #[serde(default)]
    pub sample: u32,
    pub body: T,
}

impl<T> Reduced<T> {
    /// Everything but the body.
    fn head(&self) -> Reduced<()> {
        Reduced {
            process: self.process.clone(),
            host: self.host.clone(),
            records: self.records,
            lost: self.lost,
            collectors: self.collectors.clone(),
            clock_error_ns: self.clock_error_ns,
            sample: self.sample,
            body: (),
        }
    }
}

impl Reduced<()> {
    fn with<T>(self, body: T) -> Reduced<T> {
        Reduced {
            process: self.process,
            host: self.host,
            records: self.records,
            lost: self.lost,
            collectors: self.collectors,
            clock_error_ns: self.clock_error_ns,
            sample: self.sample,
            body,
        }
    }
}

/// Most call summaries one reply carries: beyond, an agent keeps every K-th call
/// (K a power of two) and says so in [`Reduced::sample`], which the monitor then asks of
/// every agent. A monitor merging a reply's calls works for every one of them, on a
/// machine whose cores the ranks may need.
pub const REPLY_CALLS: usize = 10_000;
/// The sparsest sampling.
pub const MAX_SAMPLE: u32 = 1 << 20;

/// Bytes of one [`CallSummary`] on the wire.
const CALL_LEN: usize = 40;

/// A call-summary reply: the length of the head (little-endian u32), the head in JSON,
/// then the summaries at [`CALL_LEN`] bytes each. A busy agent sends hundreds of
/// thousands of them a second, which JSON made the monitor's and the agents' main work.
fn encode_calls(r: &Reduced<Vec<CallSummary>>) -> Vec<u8> {
    let head = serde_json::to_vec(&r.head()).expect("serializable");
    let mut out = Vec::with_capacity(4 + head.len() + r.body.len() * CALL_LEN);
    out.extend_from_slice(&(head.len() as u32).to_le_bytes());
    out.extend_from_slice(&head);
    for c in &r.body {
        out.extend_from_slice(&c.collector.to_le_bytes());
        out.extend_from_slice(&c.seq.to_le_bytes());
        out.extend_from_slice(&c.ranks.to_le_bytes());
        out.extend_from_slice(&c.last_rank.to_le_bytes());
        out.extend_from_slice(&c.first_arrival_ns.to_le_bytes());
        out.extend_from_slice(&c.last_arrival_ns.to_le_bytes());
        out.extend_from_slice(&c.last_departure_ns.to_le_bytes());
    }
    out
}

fn decode_calls(b: &[u8]) -> Result<Reduced<Vec<CallSummary>>, String> {
    let (len, rest) = b
        .split_first_chunk::<4>()
        .ok_or("shorter than its head's length")?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > rest.len() {
        return Err(format!("a {len}-byte head in {} bytes", rest.len()));
    }
    let (head, calls) = rest.split_at(len);
    let head: Reduced<()> = serde_json::from_slice(head).map_err(|e| e.to_string())?;
    if calls.len() % CALL_LEN != 0 {
        return Err(format!(
            "{} bytes of summaries, not a multiple of {CALL_LEN}",
            calls.len()
        ));
    }
    let u32_at = |c: &[u8], i: usize| u32::from_le_bytes(c[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |c: &[u8], i: usize| u64::from_le_bytes(c[i..i + 8].try_into().expect("8 bytes"));
    let body = calls
        .chunks_exact(CALL_LEN)
        .map(|c| CallSummary {
            collector: u32_at(c, 0),
            seq: u32_at(c, 4),
            ranks: u32_at(c, 8),
            last_rank: u32_at(c, 12),
            first_arrival_ns: u64_at(c, 16),
            last_arrival_ns: u64_at(c, 24),
            last_departure_ns: u64_at(c, 32),
        })
        .collect();
    Ok(head.with(body))
}

/// Largest reply accepted.
pub const MAX_REPLY: usize = 256 << 20;

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        let (tag, mut body) = match self {
            Reply::Records(f) => (b'R', f.encode()),
            Reply::Calls(r) => (b'C', encode_calls(r)),
            Reply::Stats(r) => (b'S', serde_json::to_vec(r).expect("serializable")),
            Reply::Counts(r) => (b'N', serde_json::to_vec(r).expect("serializable")),
        };
        body.insert(0, tag);
        body
    }

    /// Parses a reply; `from` names the sender in errors.
    pub fn decode(b: &[u8], from: &str) -> Result<Reply, FileError> {
        let bad = |what: String| FileError::Format {
            path: from.into(),
            what,
        };
        if b.len() > MAX_REPLY {
            return Err(bad(format!("reply of {} bytes is too large", b.len())));
        }
        let (&tag, body) = b
            .split_first()
            .ok_or_else(|| bad("empty monitor reply".into()))?;
        Ok(match tag {
            b'R' => Reply::Records(TraceFile::decode(body, std::path::Path::new(from))?),
            b'C' => {
                Reply::Calls(decode_calls(body).map_err(|e| bad(format!("call summaries: {e}")))?)
            }
            b'S' => Reply::Stats(
                serde_json::from_slice(body).map_err(|e| bad(format!("statistics: {e}")))?,
            ),
            b'N' => Reply::Counts(
                serde_json::from_slice(body).map_err(|e| bad(format!("event counts: {e}")))?,
            ),
            t => return Err(bad(format!("unknown monitor reply kind {t:#04x}"))),
        })
    }

    /// Records read and lost at the source.
    pub fn counts(&self) -> (u64, u64) {
        match self {
            Reply::Records(f) => f
                .threads
                .iter()
                .fold((0, 0), |(r, l), t| (r + t.records.len() as u64, l + t.lost)),
            Reply::Calls(r) => (r.records, r.lost),
            Reply::Stats(r) => (r.records, r.lost),
            Reply::Counts(r) => (r.records, r.lost),
        }
    }
}

/// The agent side of a scope: fed what the rings held, answers pulls.
pub struct ScopeReducer {
    scope: Scope,
    /// Ranks of this process: a call is complete here when all have recorded it.
    local_ranks: u32,
    held: Vec<ThreadTrace>,
    /// Cap on records held per thread between pulls (beyond it the oldest go, counted).
    hold: usize,
    names: Vec<String>,
    index: HashMap<String, u32>,
    pending: HashMap<(u32, u32), CallSummary>,
    done: Vec<CallSummary>,
    stats: BTreeMap<String, StatsMonitor>,
    counts: BTreeMap<(String, Option<u32>, Option<u32>), Count>,
    records: u64,
    lost: u64,
}

impl ScopeReducer {
    pub fn new(scope: Scope, local_ranks: u32, hold: usize) -> ScopeReducer {
        ScopeReducer {
            scope,
            local_ranks: local_ranks.max(1),
            held: Vec::new(),
            hold,
            names: Vec::new(),
            index: HashMap::new(),
            pending: HashMap::new(),
            done: Vec::new(),
            stats: BTreeMap::new(),
            counts: BTreeMap::new(),
            records: 0,
            lost: 0,
        }
    }

    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Changes the scope; what was held under the old one is dropped (unless only the
    /// sampling changed).
    pub fn set_scope(&mut self, scope: Scope) {
        if scope == self.scope {
            return;
        }
        let resampled = Scope {
            sample: self.scope.sample,
            ..scope.clone()
        } == self.scope;
        if resampled {
            self.scope.sample = scope.sample;
            return;
        }
        *self = ScopeReducer::new(scope, self.local_ranks, self.hold);
    }

    /// Takes in records drained from the rings (a [`TraceFile`] of this process).
    pub fn add(&mut self, f: &TraceFile) {
        let selected: Vec<bool> = f.collectors.iter().map(|n| self.scope.matches(n)).collect();
        let picked = |c: u16| selected.get(usize::from(c)).copied().unwrap_or(false);
        // The reply's index of each selected collector, interned once per drain rather
        // than once per record.
        let ids: Vec<Option<u32>> = if self.scope.reduce == Reduce::LastArrival {
            f.collectors
                .iter()
                .zip(&selected)
                .map(|(n, &on)| on.then(|| self.intern(n)))
                .collect()
        } else {
            Vec::new()
        };
        for (i, t) in f.threads.iter().enumerate() {
            self.records += t.records.len() as u64;
            self.lost += t.lost;
            match self.scope.reduce {
                Reduce::All => {
                    if self.held.len() <= i {
                        self.held.push(ThreadTrace {
                            label: t.label.clone(),
                            rank: t.rank,
                            lost: 0,
                            records: Vec::new(),
                        });
                    }
                    let h = &mut self.held[i];
                    h.label.clone_from(&t.label);
                    h.rank = t.rank;
                    h.lost += t.lost;
                    h.records
                        .extend(t.records.iter().filter(|r| picked(r.collector)));
                    if h.records.len() > self.hold {
                        let over = h.records.len() - self.hold;
                        h.records.drain(..over);
                        h.lost += over as u64;
                    }
                }
                Reduce::LastArrival => {
                    let Some(rank) = t.rank else { continue };
                    let sample = self.scope.sample.max(1);
                    for r in &t.records {
                        if r.event_op() != Some(EventOp::Call) || r.seq % sample != 0 {
                            continue;
                        }
                        let Some(&Some(c)) = ids.get(usize::from(r.collector)) else {
                            continue;
                        };
                        let (a, d) = (f.to_ns(r.start), f.to_ns(r.end));
                        let part = CallSummary {
                            collector: c,
                            seq: r.seq,
                            ranks: 1,
                            first_arrival_ns: a,
                            last_arrival_ns: a,
                            last_rank: rank,
                            last_departure_ns: d,
                        };
                        if self.local_ranks == 1 {
                            // The call is whole here: one rank's part is all there is.
                            self.done.push(part);
                            continue;
                        }
                        let key = (c, r.seq);
                        let full = match self.pending.get_mut(&key) {
                            Some(p) => {
                                p.merge(&part);
                                p.ranks >= self.local_ranks
                            }
                            None => {
                                self.pending.insert(key, part);
                                self.local_ranks == 1
                            }
                        };
                        if full {
                            let p = self.pending.remove(&key).expect("present");
                            self.done.push(p);
                        }
                    }
                }
                Reduce::Counts => {
                    for r in t.records.iter().filter(|r| picked(r.collector)) {
                        let name = f.collector_name(r.collector);
                        let peer = (r.peer != crate::record::NO_PEER).then_some(r.peer);
                        let seq = self.scope.by_seq.then_some(r.seq);
                        let key = (name.to_string(), peer, seq);
                        let c = self.counts.entry(key).or_insert_with(|| Count {
                            collector: name.to_string(),
                            peer,
                            seq,
                            ..Count::default()
                        });
                        let ns = f.to_ns(r.end).saturating_sub(f.to_ns(r.start));
                        c.events += 1;
                        c.bytes += u64::from(r.bytes);
                        c.busy_ns += ns;
                        c.max_ns = c.max_ns.max(ns);
                    }
                }
                Reduce::Stats => {
                    for r in &t.records {
                        if r.event_op() != Some(EventOp::Call) || !picked(r.collector) {
                            continue;
                        }
                        let name = f.collector_name(r.collector);
                        let us = f.to_ns(r.end).saturating_sub(f.to_ns(r.start)) as f64 / 1e3;
                        match self.stats.get_mut(name) {
                            Some(s) => s.push(us),
                            None => {
                                let mut s = StatsMonitor::new();
                                s.push(us);
                                self.stats.insert(name.to_string(), s);
                            }
                        }
                    }
                }
            }
        }
        // Calls a rank never finished (it died, or records were lost) stay partial;
        // keep the map bounded.
        if self.pending.len() > 100_000 {
            self.lost += self.pending.len() as u64;
            self.pending.clear();
        }
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), i);
        i
    }

    /// The answer to a pull: everything reduced since the last one. `file` supplies the
    /// process's identity and clock (its threads are ignored).
    pub fn reply(&mut self, file: TraceFile) -> Reply {
        let (records, lost) = (
            std::mem::take(&mut self.records),
            std::mem::take(&mut self.lost),
        );
        let head = Reduced {
            process: file.process.clone(),
            host: file.host.clone(),
            records,
            lost,
            collectors: self.names.clone(),
            clock_error_ns: file.align.error_ns,
            sample: self.scope.sample,
            body: (),
        };
        match self.scope.reduce {
            Reduce::All => Reply::Records(TraceFile {
                threads: std::mem::take(&mut self.held),
                ..file
            }),
            Reduce::LastArrival => {
                let mut done = std::mem::take(&mut self.done);
                let mut sample = self.scope.sample.max(1);
                // More calls than a reply carries: every agent drops the same ones (the
                // ranks of a collective make the same calls), and says how many it kept.
                while done.len() > REPLY_CALLS && sample < MAX_SAMPLE {
                    sample *= 2;
                    done.retain(|c| c.seq % sample == 0);
                }
                Reply::Calls(Reduced { sample, ..head }.with(done))
            }
            Reduce::Counts => {
                Reply::Counts(head.with(std::mem::take(&mut self.counts).into_values().collect()))
            }
            Reduce::Stats => Reply::Stats(
                head.with(
                    self.stats
                        .iter()
                        .filter_map(|(n, s)| {
                            Some(CollectorStats {
                                collector: n.clone(),
                                stats: s.summary()?,
                            })
                        })
                        .collect(),
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Alignment, Calibration, ClockPoint};
    use crate::record::{Record, NO_PEER};

    fn file(ranks: &[(u32, &[u64])]) -> TraceFile {
        TraceFile {
            process: "p".into(),
            host: "h".into(),
            pid: 1,
            clock: Calibration {
                first: ClockPoint { tick: 0, ns: 0 },
                last: ClockPoint { tick: 1, ns: 1 },
            },
            align: Alignment::default(),
            collectors: vec!["ctx0/allreduce".into(), "tbon/link/in".into()],
            threads: ranks
                .iter()
                .map(|&(rank, arrivals)| ThreadTrace {
                    label: format!("rank {rank}"),
                    rank: Some(rank),
                    lost: 1,
                    records: arrivals
                        .iter()
                        .enumerate()
                        .flat_map(|(seq, &a)| {
                            [0u16, 1].map(|c| Record {
                                start: a,
                                end: a + 100,
                                seq: seq as u32,
                                bytes: 8,
                                collector: c,
                                op: EventOp::Call as u8,
                                status: 0,
                                peer: NO_PEER,
                            })
                        })
                        .collect(),
                })
                .collect(),
            usage: None,
        }
    }

    #[test]
    fn patterns_select_collectors() {
        assert!(glob("ctx0/*", "ctx0/allreduce"));
        assert!(glob("*/link/*", "tbon/link/in"));
        assert!(glob("ctx?/a*e", "ctx7/allreduce"));
        assert!(!glob("ctx0/*", "ctx1/allreduce"));
        assert!(!glob("a", "ab"));
        assert!(glob("*", ""));
        assert!(glob("a**b", "axxb"));
    }

    /// Rank 0's allreduce calls numbered `seqs`.
    fn calls_of(seqs: std::ops::Range<u32>) -> TraceFile {
        TraceFile {
            threads: vec![ThreadTrace {
                label: "rank 0".into(),
                rank: Some(0),
                lost: 0,
                records: seqs
                    .map(|seq| Record {
                        start: 100,
                        end: 110,
                        seq,
                        bytes: 8,
                        collector: 0,
                        op: EventOp::Call as u8,
                        status: 0,
                        peer: NO_PEER,
                    })
                    .collect(),
            }],
            ..file(&[])
        }
    }

    #[test]
    fn a_sampled_scope_summarises_every_kth_call_and_resampling_keeps_what_is_held() {
        let scope = |sample| Scope {
            sample,
            ..Scope::new(&["ctx0/*"], Reduce::LastArrival)
        };
        let mut r = ScopeReducer::new(scope(4), 1, 100);
        r.add(&file(&[(0, &[10, 20, 30, 40, 50, 60, 70, 80, 90])]));
        // Only the sample changes: what was summarised stays.
        r.set_scope(scope(2));
        r.add(&calls_of(9..13));
        let Reply::Calls(c) = r.reply(file(&[])) else {
            panic!("not calls")
        };
        let seqs: Vec<u32> = c.body.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, vec![0, 4, 8, 10, 12]);
        assert_eq!(c.sample, 2);
        // More calls than a reply carries: the agent keeps every K-th and says K.
        let many = REPLY_CALLS as u32 * 3;
        r.add(&calls_of(0..many));
        let Reply::Calls(c) = r.reply(file(&[])) else {
            panic!("not calls")
        };
        // 30,000 calls, every 2nd in scope: 15,000; every 4th: 7,500.
        assert_eq!((c.sample, c.body.len()), (4, 7_500));
        assert!(c.body.iter().all(|c| c.seq % 4 == 0));
        let back = Reply::decode(&Reply::Calls(c.clone()).encode(), "agent").unwrap();
        assert_eq!(back, Reply::Calls(c));
        // Another scope starts afresh.
        r.add(&file(&[(0, &[10])]));
        r.set_scope(Scope::new(&["tbon/*"], Reduce::LastArrival));
        let Reply::Calls(c) = r.reply(file(&[])) else {
            panic!("not calls")
        };
        assert!(c.body.is_empty());
    }

    #[test]
    fn last_arrival_sends_one_summary_per_complete_call() {
        let scope = Scope {
            collectors: vec!["ctx0/*".into()],
            reduce: Reduce::LastArrival,
            by_seq: false,
            sample: 0,
        };
        let mut r = ScopeReducer::new(scope, 2, 1000);
        // Rank 5 has recorded two calls, rank 4 only the first so far.
        r.add(&file(&[(4, &[100]), (5, &[300, 400])]));
        let Reply::Calls(c) = r.reply(file(&[])) else {
            panic!("not calls")
        };
        assert_eq!(c.body.len(), 1);
        let s = c.body[0];
        assert_eq!(
            (s.ranks, s.first_arrival_ns, s.last_arrival_ns, s.last_rank),
            (2, 100, 300, 5)
        );
        assert_eq!(s.last_departure_ns, 400);
        assert_eq!(c.collectors, vec!["ctx0/allreduce".to_string()]);
        assert_eq!((c.records, c.lost), (6, 2));
        // The second call completes when rank 4's record arrives in a later drain.
        r.add(&file(&[(4, &[])]));
        r.add(&TraceFile {
            threads: vec![ThreadTrace {
                label: "rank 4".into(),
                rank: Some(4),
                lost: 0,
                records: vec![Record {
                    start: 900,
                    end: 950,
                    seq: 1,
                    bytes: 8,
                    collector: 0,
                    op: EventOp::Call as u8,
                    status: 0,
                    peer: NO_PEER,
                }],
            }],
            ..file(&[])
        });
        let Reply::Calls(c) = r.reply(file(&[])) else {
            panic!("not calls")
        };
        assert_eq!(c.body.len(), 1);
        assert_eq!((c.body[0].last_rank, c.body[0].last_arrival_ns), (4, 900));
        // Round trip through bytes; a cut or padded body is refused, naming the sender.
        let bytes = Reply::Calls(c.clone()).encode();
        let back = Reply::decode(&bytes, "agent").unwrap();
        assert_eq!(back, Reply::Calls(c));
        for bad in [&bytes[..bytes.len() - 1], &bytes[..3]] {
            let e = Reply::decode(bad, "agent 7").unwrap_err().to_string();
            assert!(e.contains("agent 7") && e.contains("call summaries"), "{e}");
        }
        let mut long_head = bytes.clone();
        long_head[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Reply::decode(&long_head, "agent").is_err());
    }

    #[test]
    fn stats_and_records_scopes() {
        let mut r = ScopeReducer::new(
            Scope {
                collectors: vec!["ctx0/*".into()],
                reduce: Reduce::Stats,
                by_seq: false,
                sample: 0,
            },
            1,
            1000,
        );
        r.add(&file(&[(0, &[0, 10, 20])]));
        let Reply::Stats(s) = r.reply(file(&[])) else {
            panic!("not stats")
        };
        assert_eq!(s.body.len(), 1);
        assert_eq!(s.body[0].stats.count, 3);
        assert!((s.body[0].stats.mean - 0.1).abs() < 1e-9);

        let mut r = ScopeReducer::new(
            Scope {
                collectors: vec!["tbon/*".into()],
                reduce: Reduce::All,
                by_seq: false,
                sample: 0,
            },
            1,
            2,
        );
        r.add(&file(&[(0, &[0, 10, 20])]));
        let Reply::Records(f) = r.reply(file(&[])) else {
            panic!("not records")
        };
        // Three tbon records matched; the hold of 2 dropped the oldest.
        assert_eq!(f.threads[0].records.len(), 2);
        assert!(f.threads[0].records.iter().all(|x| x.collector == 1));
        assert_eq!(f.threads[0].lost, 2);
        let mut r = ScopeReducer::new(
            Scope {
                collectors: vec!["tbon/*".into()],
                reduce: Reduce::Counts,
                by_seq: false,
                sample: 0,
            },
            1,
            100,
        );
        r.add(&file(&[(0, &[0, 10, 20])]));
        let Reply::Counts(c) = r.reply(file(&[])) else {
            panic!("not counts")
        };
        assert_eq!(c.body.len(), 1);
        assert_eq!(
            (
                c.body[0].events,
                c.body[0].bytes,
                c.body[0].busy_ns,
                c.body[0].peer
            ),
            (3, 24, 300, None)
        );
        let back = Reply::decode(&Reply::Counts(c.clone()).encode(), "x").unwrap();
        assert_eq!(back, Reply::Counts(c));
        assert!(Reply::decode(b"", "x").is_err());
        assert!(Reply::decode(b"Zxx", "x").is_err());
        assert!(Reply::decode(b"C{}", "x").is_err());
    }
}
