//! Offline analysis of a job's trace files: the questions of EventSpace's monitors (seed
//! 004 §3, §4.3) answered from the records `vargr run --trace` wrote, so that the
//! exporter, the HTML report and (later) the live monitors share one reading of them.
//!
//! - [`timeline`] puts every record of every process on one nanosecond axis: each file's
//!   calibration turns ticks into its host's monotonic clock, and hosts are aligned with
//!   each other from the messages they exchanged (NTP's minimum-delay estimate).
//! - [`instances`] gathers the `Call` records of one collective instance (collector,
//!   sequence number, communicator group) into arrivals, departures and their order.
//! - [`load_balance`] is the load-balance monitor: per collector, how often each rank
//!   arrived last and the longest wait it caused the others.
//! - [`StatsMonitor`] is the statistics monitor's accumulator (mean, min, max, standard
//!   deviation, sliding-window median of 100), fed one value at a time so that live
//!   monitors can reuse it; [`latency_stats`] applies it to per-instance latency.
//! - [`messages`] pairs each `Recv` with its `Send`; [`links`] turns them into per-link
//!   latency tables.
//!
//! Everything here is a pure function of the trace files: damaged or inconsistent records
//! are counted in [`Summary`] and skipped, never a panic.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use crate::{EventOp, TraceFile, NO_PEER};

/// Window of the sliding median, as in the seed (NWS's median with window 100).
pub const MEDIAN_WINDOW: usize = 100;

/// One record on the job's common time axis (nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub start: i64,
    pub end: i64,
    /// Index into [`Timeline::tracks`].
    pub track: usize,
    pub rank: Option<u32>,
    /// Index into [`Timeline::collectors`].
    pub collector: usize,
    pub op: EventOp,
    pub seq: u32,
    pub bytes: u32,
    pub peer: Option<u32>,
    pub status: u8,
}

/// One process (trace file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub process: String,
    pub host: String,
    pub pid: u32,
    /// The run-time clock alignment the file carried.
    pub align: crate::clock::Alignment,
}

/// One thread of one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Track {
    /// Index into [`Timeline::processes`].
    pub process: usize,
    pub label: String,
    pub rank: Option<u32>,
    pub records: usize,
    pub lost: u64,
}

/// How a host's clock was put on the common axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alignment {
    /// The axis is this host's monotonic clock.
    Reference,
    /// Shifted by an offset estimated from messages in both directions.
    Estimated { messages: usize },
    /// Aligned at run time by the tree's skew estimation (the files carry the offsets),
    /// to within `error_ns`.
    Probed { error_ns: u64 },
    /// No messages in both directions link it to the reference: left unshifted, so its
    /// times cannot be compared with other hosts'.
    Unaligned,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostClock {
    pub host: String,
    /// Subtracted from the host's monotonic ns.
    pub offset_ns: i64,
    pub alignment: Alignment,
}

/// Every record of a job, sorted by start time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    pub collectors: Vec<String>,
    pub processes: Vec<Process>,
    pub tracks: Vec<Track>,
    pub hosts: Vec<HostClock>,
    pub events: Vec<Event>,
    /// Records with an operation this reader does not know.
    pub unknown_ops: u64,
    /// Records that ended before they started (kept, with the end moved to the start).
    pub reversed: u64,
}

impl Timeline {
    pub fn collector(&self, e: &Event) -> &str {
        self.collectors.get(e.collector).map_or("?", String::as_str)
    }

    /// Start of the earliest event (0 for an empty timeline).
    pub fn origin(&self) -> i64 {
        self.events.first().map_or(0, |e| e.start)
    }

    /// End of the latest event.
    pub fn last(&self) -> i64 {
        self.events.iter().map(|e| e.end).max().unwrap_or(0)
    }

    /// The host a track ran on.
    pub fn host_of(&self, track: usize) -> &str {
        self.tracks
            .get(track)
            .and_then(|t| self.processes.get(t.process))
            .map_or("?", |p| p.host.as_str())
    }
}

/// `ctx3` of `ctx3/allreduce`: the communicator part of a collector name.
pub fn context_of(collector: &str) -> &str {
    collector.split_once('/').map_or(collector, |(c, _)| c)
}

/// `allreduce` of `ctx3/allreduce`.
pub fn collective_of(collector: &str) -> &str {
    collector.split_once('/').map_or(collector, |(_, k)| k)
}

/// All records of `files` on one time axis.
pub fn timeline(files: &[TraceFile]) -> Timeline {
    let mut tl = Timeline::default();
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut intern = |tl: &mut Timeline, name: &str| -> usize {
        if let Some(&i) = names.get(name) {
            return i;
        }
        tl.collectors.push(name.to_string());
        names.insert(name.to_string(), tl.collectors.len() - 1);
        tl.collectors.len() - 1
    };
    for (fi, f) in files.iter().enumerate() {
        tl.processes.push(Process {
            align: f.align,
            process: f.process.clone(),
            host: f.host.clone(),
            pid: f.pid,
        });
        let local: Vec<usize> = f.collectors.iter().map(|n| intern(&mut tl, n)).collect();
        for t in &f.threads {
            let track = tl.tracks.len();
            tl.tracks.push(Track {
                process: fi,
                label: t.label.clone(),
                rank: t.rank,
                records: t.records.len(),
                lost: t.lost,
            });
            for r in &t.records {
                let Some(op) = r.event_op() else {
                    tl.unknown_ops += 1;
                    continue;
                };
                let collector = match local.get(usize::from(r.collector)) {
                    Some(&c) => c,
                    None => intern(&mut tl, &format!("collector#{}", r.collector)),
                };
                let start = ns(f.to_ns(r.start));
                let mut end = ns(f.to_ns(r.end));
                if end < start {
                    tl.reversed += 1;
                    end = start;
                }
                tl.events.push(Event {
                    start,
                    end,
                    track,
                    rank: t.rank,
                    collector,
                    op,
                    seq: r.seq,
                    bytes: r.bytes,
                    peer: (r.peer != NO_PEER).then_some(r.peer),
                    status: r.status,
                });
            }
        }
    }
    align_hosts(&mut tl);
    tl.events
        .sort_by_key(|e| (e.start, std::cmp::Reverse(e.end), e.track, e.op as u8));
    tl
}

fn ns(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Puts every host on the first host's clock. Monotonic clocks of different hosts have
/// unrelated origins; a message from a to b observed as `recv.end - send.start` is the
/// delay plus the offset, and the same in the other direction minus it, so half the
/// difference of the two minima estimates the offset (assuming symmetric minimum delays).
fn align_hosts(tl: &mut Timeline) {
    let mut hosts: Vec<String> = Vec::new();
    let proc_host: Vec<usize> = tl
        .processes
        .iter()
        .map(|p| match hosts.iter().position(|h| *h == p.host) {
            Some(i) => i,
            None => {
                hosts.push(p.host.clone());
                hosts.len() - 1
            }
        })
        .collect();
    if !tl.processes.is_empty() && tl.processes.iter().all(|p| p.align.aligned) {
        tl.hosts = hosts
            .into_iter()
            .enumerate()
            .map(|(h, host)| HostClock {
                host,
                offset_ns: 0,
                alignment: Alignment::Probed {
                    error_ns: (0..tl.processes.len())
                        .filter(|&p| proc_host[p] == h)
                        .map(|p| tl.processes[p].align.error_ns)
                        .max()
                        .unwrap_or(0),
                },
            })
            .collect();
        return;
    }
    let host_of = |tl: &Timeline, track: usize| proc_host[tl.tracks[track].process];
    let mut offset: Vec<Option<(i64, Alignment)>> = vec![None; hosts.len()];
    if let Some(first) = offset.first_mut() {
        *first = Some((0, Alignment::Reference));
    }
    if hosts.len() > 1 {
        // Minimum observed delay and message count per directed host pair.
        let mut min: HashMap<(usize, usize), (i64, usize)> = HashMap::new();
        for m in &match_messages(&tl.events).matched {
            let a = host_of(tl, tl.events[m.send_event].track);
            let b = host_of(tl, tl.events[m.recv_event].track);
            if a != b {
                let e = min.entry((a, b)).or_insert((i64::MAX, 0));
                e.0 = e.0.min(m.latency());
                e.1 += 1;
            }
        }
        let mut todo = VecDeque::from([0usize]);
        while let Some(a) = todo.pop_front() {
            let base = offset[a].map_or(0, |o| o.0);
            for (b, slot) in offset.iter_mut().enumerate() {
                if slot.is_some() {
                    continue;
                }
                if let (Some(&(ab, n1)), Some(&(ba, n2))) = (min.get(&(a, b)), min.get(&(b, a))) {
                    let o = base.saturating_add(ab.saturating_sub(ba) / 2);
                    *slot = Some((o, Alignment::Estimated { messages: n1 + n2 }));
                    todo.push_back(b);
                }
            }
        }
    }
    tl.hosts = hosts
        .into_iter()
        .zip(&offset)
        .map(|(host, o)| {
            let (offset_ns, alignment) = o.unwrap_or((0, Alignment::Unaligned));
            HostClock {
                host,
                offset_ns,
                alignment,
            }
        })
        .collect();
    for e in &mut tl.events {
        let o = tl.hosts[proc_host[tl.tracks[e.track].process]].offset_ns;
        e.start = e.start.saturating_sub(o);
        e.end = e.end.saturating_sub(o);
    }
}

/// A send paired with the receive of the same message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    pub src: u32,
    pub dst: u32,
    pub collector: usize,
    pub seq: u32,
    pub bytes: u32,
    /// Indices into [`Timeline::events`].
    pub send_event: usize,
    pub recv_event: usize,
    pub send_start: i64,
    pub recv_start: i64,
    pub recv_end: i64,
}

impl Message {
    /// `recv.end - send.start`: the delay of the message, plus the receiver's lateness
    /// when it began waiting after the message had arrived (an upper bound; the minimum
    /// over many messages approaches the link's latency).
    pub fn latency(&self) -> i64 {
        self.recv_end.saturating_sub(self.send_start)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Messages {
    /// Sorted by send time.
    pub matched: Vec<Message>,
    pub unmatched_sends: u64,
    pub unmatched_recvs: u64,
}

/// Pairs every `Recv` of rank B from A with a `Send` of A to B of the same collector and
/// sequence number, the k-th send with the k-th receive (messages of one pair within one
/// call are received in the order they were sent).
pub fn messages(tl: &Timeline) -> Messages {
    match_messages(&tl.events)
}

fn match_messages(events: &[Event]) -> Messages {
    type Key = (usize, u32, u32, u32);
    let mut sends: HashMap<Key, Vec<usize>> = HashMap::new();
    let mut recvs: HashMap<Key, Vec<usize>> = HashMap::new();
    let mut out = Messages::default();
    for (i, e) in events.iter().enumerate() {
        match (e.op, e.rank, e.peer) {
            (EventOp::Send, Some(me), Some(p)) => sends
                .entry((e.collector, e.seq, me, p))
                .or_default()
                .push(i),
            (EventOp::Recv, Some(me), Some(p)) => recvs
                .entry((e.collector, e.seq, p, me))
                .or_default()
                .push(i),
            (EventOp::Send, ..) => out.unmatched_sends += 1,
            (EventOp::Recv, ..) => out.unmatched_recvs += 1,
            _ => {}
        }
    }
    for (key, mut s) in sends {
        let mut r = recvs.remove(&key).unwrap_or_default();
        s.sort_by_key(|&i| (events[i].start, i));
        r.sort_by_key(|&i| (events[i].start, i));
        out.unmatched_sends += s.len().saturating_sub(r.len()) as u64;
        out.unmatched_recvs += r.len().saturating_sub(s.len()) as u64;
        for (&si, &ri) in s.iter().zip(&r) {
            let (se, re) = (&events[si], &events[ri]);
            out.matched.push(Message {
                src: key.2,
                dst: key.3,
                collector: key.0,
                seq: key.1,
                bytes: re.bytes,
                send_event: si,
                recv_event: ri,
                send_start: se.start,
                recv_start: re.start,
                recv_end: re.end,
            });
        }
    }
    out.unmatched_recvs += recvs.values().map(|v| v.len() as u64).sum::<u64>();
    out.matched
        .sort_by_key(|m| (m.send_start, m.src, m.dst, m.collector, m.seq));
    out
}

/// One rank's part in a collective instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub rank: u32,
    pub arrival: i64,
    pub departure: i64,
    pub bytes: u32,
    pub status: u8,
    /// Index into [`Timeline::tracks`].
    pub track: usize,
}

impl Arrival {
    /// Time inside the call (departure − arrival).
    pub fn in_call(&self) -> i64 {
        self.departure.saturating_sub(self.arrival)
    }
}

/// One collective call as all ranks of its communicator saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// Index into [`Timeline::collectors`].
    pub collector: usize,
    pub seq: u32,
    /// Lowest rank of the communicator group (sub-communicators from one split share a
    /// context id; the group tells them apart).
    pub group: u32,
    /// Ranks the group has; fewer arrivals mean records are missing.
    pub group_size: usize,
    /// Sorted by rank.
    pub ranks: Vec<Arrival>,
    /// Ranks by arrival (ties by rank), and by departure.
    pub arrival_order: Vec<u32>,
    pub departure_order: Vec<u32>,
    pub first_arrival: i64,
    pub last_arrival: i64,
    pub first_departure: i64,
    pub last_departure: i64,
}

impl Instance {
    /// Every rank of the group recorded its call.
    pub fn complete(&self) -> bool {
        self.ranks.len() == self.group_size
    }

    /// The rank that arrived last.
    pub fn last_rank(&self) -> u32 {
        self.arrival_order.last().copied().unwrap_or(0)
    }

    /// Last departure − first arrival.
    pub fn latency(&self) -> i64 {
        self.last_departure.saturating_sub(self.first_arrival)
    }

    /// Last arrival − first arrival: how long the earliest rank waited for the latest.
    pub fn spread(&self) -> i64 {
        self.last_arrival.saturating_sub(self.first_arrival)
    }

    /// The seed's arrival wait of `a`: how long it waited for the last rank to arrive.
    pub fn arrival_wait(&self, a: &Arrival) -> i64 {
        self.last_arrival.saturating_sub(a.arrival).max(0)
    }

    /// The seed's departure wait of `a`: how long after the first departure it left.
    pub fn departure_wait(&self, a: &Arrival) -> i64 {
        a.departure.saturating_sub(self.first_departure).max(0)
    }
}

/// Collective instances and what did not fit them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instances {
    /// Sorted by first arrival.
    pub list: Vec<Instance>,
    /// `Call` records repeating a (collector, seq, rank) already seen.
    pub duplicate_calls: u64,
}

/// Union-find over (context, rank) nodes, with the process each was seen in and
/// whether it exchanged any message.
#[derive(Default)]
struct Ranks {
    index: HashMap<(usize, u32), usize>,
    key: Vec<(usize, u32)>,
    process: Vec<Option<usize>>,
    linked: Vec<bool>,
    parent: Vec<usize>,
}

impl Ranks {
    fn node(&mut self, k: (usize, u32)) -> usize {
        if let Some(&i) = self.index.get(&k) {
            return i;
        }
        let i = self.key.len();
        self.index.insert(k, i);
        self.key.push(k);
        self.process.push(None);
        self.linked.push(false);
        self.parent.push(i);
        i
    }

    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }
}

/// Groups ranks into communicators per context id. `split` gives every sub-communicator
/// of one call the same context id, so (collector, seq) alone would merge disjoint groups.
/// Ranks that exchanged messages on a context are in one group; ranks that never did
/// (shared-memory collectives) join the one group of their process, or form a group per
/// process when that is ambiguous. Returns (context, rank) → (lowest rank, size).
fn comm_groups(tl: &Timeline, ctx_of: &[usize]) -> HashMap<(usize, u32), (u32, usize)> {
    let mut g = Ranks::default();
    for e in &tl.events {
        let (Some(rank), Some(&ctx)) = (e.rank, ctx_of.get(e.collector)) else {
            continue;
        };
        if !matches!(e.op, EventOp::Call | EventOp::Send | EventOp::Recv) {
            continue;
        }
        let a = g.node((ctx, rank));
        g.process[a].get_or_insert(tl.tracks[e.track].process);
        if let (EventOp::Send | EventOp::Recv, Some(peer)) = (e.op, e.peer) {
            let b = g.node((ctx, peer));
            g.linked[a] = true;
            g.linked[b] = true;
            let (ra, rb) = (g.find(a), g.find(b));
            g.parent[ra] = rb;
        }
    }
    // Which linked components have members in each (context, process).
    let mut comps_in: HashMap<(usize, usize), HashSet<usize>> = HashMap::new();
    for n in 0..g.key.len() {
        if let (true, Some(p)) = (g.linked[n], g.process[n]) {
            let r = g.find(n);
            comps_in.entry((g.key[n].0, p)).or_default().insert(r);
        }
    }
    #[derive(Hash, PartialEq, Eq)]
    enum G {
        Linked(usize),
        Process(usize, usize),
    }
    let mut groups: HashMap<G, Vec<usize>> = HashMap::new();
    for n in 0..g.key.len() {
        let which = if g.linked[n] {
            G::Linked(g.find(n))
        } else {
            let p = g.process[n].unwrap_or(usize::MAX);
            match comps_in.get(&(g.key[n].0, p)) {
                Some(c) if c.len() == 1 => G::Linked(*c.iter().next().expect("one")),
                _ => G::Process(g.key[n].0, p),
            }
        };
        groups.entry(which).or_default().push(n);
    }
    let mut out = HashMap::new();
    for members in groups.values() {
        let low = members.iter().map(|&n| g.key[n].1).min().unwrap_or(0);
        for &n in members {
            out.insert(g.key[n], (low, members.len()));
        }
    }
    out
}

/// Every collective instance: the `Call` records of one (collector, seq, group).
pub fn instances(tl: &Timeline) -> Instances {
    let mut ctx_names: HashMap<&str, usize> = HashMap::new();
    let ctx_of: Vec<usize> = tl
        .collectors
        .iter()
        .map(|c| {
            let n = ctx_names.len();
            *ctx_names.entry(context_of(c)).or_insert(n)
        })
        .collect();
    let groups = comm_groups(tl, &ctx_of);
    let mut calls: HashMap<(usize, u32, u32), (usize, Vec<Arrival>)> = HashMap::new();
    let mut seen: HashSet<(usize, u32, u32)> = HashSet::new();
    let mut out = Instances::default();
    for e in tl.events.iter().filter(|e| e.op == EventOp::Call) {
        let Some(rank) = e.rank else { continue };
        if !seen.insert((e.collector, e.seq, rank)) {
            out.duplicate_calls += 1;
            continue;
        }
        let (group, size) = groups
            .get(&(ctx_of[e.collector], rank))
            .copied()
            .unwrap_or((rank, 1));
        calls
            .entry((e.collector, e.seq, group))
            .or_insert_with(|| (size, Vec::new()))
            .1
            .push(Arrival {
                rank,
                arrival: e.start,
                departure: e.end,
                bytes: e.bytes,
                status: e.status,
                track: e.track,
            });
    }
    for ((collector, seq, group), (size, mut ranks)) in calls {
        ranks.sort_by_key(|a| a.rank);
        let mut by_arrival: Vec<&Arrival> = ranks.iter().collect();
        by_arrival.sort_by_key(|a| (a.arrival, a.rank));
        let mut by_departure: Vec<&Arrival> = ranks.iter().collect();
        by_departure.sort_by_key(|a| (a.departure, a.rank));
        let inst = Instance {
            collector,
            seq,
            group,
            group_size: size.max(ranks.len()),
            arrival_order: by_arrival.iter().map(|a| a.rank).collect(),
            departure_order: by_departure.iter().map(|a| a.rank).collect(),
            first_arrival: by_arrival.first().map_or(0, |a| a.arrival),
            last_arrival: by_arrival.last().map_or(0, |a| a.arrival),
            first_departure: by_departure.first().map_or(0, |a| a.departure),
            last_departure: by_departure.last().map_or(0, |a| a.departure),
            ranks,
        };
        out.list.push(inst);
    }
    out.list
        .sort_by_key(|i| (i.first_arrival, i.collector, i.seq, i.group));
    out
}

/// One rank's record in the load-balance monitor of one collector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankBalance {
    pub rank: u32,
    /// Complete instances it took part in.
    pub instances: u64,
    /// How often it arrived last.
    pub last: u64,
    /// Longest and total wait it caused (spread of the instances it arrived last in).
    pub longest_wait_caused: i64,
    pub total_wait_caused: i64,
    /// Its own arrival waits, summed (for the mean).
    pub total_arrival_wait: i64,
    /// `arrival_hist[k]`: how often it arrived (k+1)-th; the same for departures.
    pub arrival_hist: Vec<u64>,
    pub departure_hist: Vec<u64>,
}

/// The load-balance monitor's answer for one collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalance {
    pub collector: usize,
    pub name: String,
    /// Complete instances of two or more ranks (the ones with a last arrival).
    pub instances: u64,
    /// Instances left out because records of some rank are missing.
    pub partial: u64,
    /// Sorted by rank.
    pub ranks: Vec<RankBalance>,
    /// Last arrivals per host, most first.
    pub hosts: Vec<(String, u64)>,
    /// The rank most often last (ties: the one that caused more waiting).
    pub culprit: Option<u32>,
}

/// One collector's running counts: complete instances, partial ones, per rank, per host.
type Tally = (u64, u64, BTreeMap<u32, RankBalance>, BTreeMap<String, u64>);

/// Which rank or host arrives last, how often, and the longest wait it caused — per
/// collector, from complete instances of two or more ranks.
pub fn load_balance(tl: &Timeline, inst: &Instances) -> Vec<LoadBalance> {
    let mut per: BTreeMap<usize, Tally> = BTreeMap::new();
    for i in &inst.list {
        let entry = per.entry(i.collector).or_default();
        if !i.complete() {
            entry.1 += 1;
            continue;
        }
        if i.ranks.len() < 2 {
            continue;
        }
        entry.0 += 1;
        let n = i.ranks.len();
        let rank_of = |r: u32| -> &Arrival {
            let k = i.ranks.binary_search_by_key(&r, |a| a.rank).unwrap_or(0);
            &i.ranks[k]
        };
        for (pos, &r) in i.arrival_order.iter().enumerate() {
            let b = entry.2.entry(r).or_insert_with(|| RankBalance {
                rank: r,
                ..Default::default()
            });
            b.instances += 1;
            bump(&mut b.arrival_hist, pos, n);
            b.total_arrival_wait = b
                .total_arrival_wait
                .saturating_add(i.arrival_wait(rank_of(r)));
        }
        for (pos, &r) in i.departure_order.iter().enumerate() {
            if let Some(b) = entry.2.get_mut(&r) {
                bump(&mut b.departure_hist, pos, n);
            }
        }
        let last = i.last_rank();
        if let Some(b) = entry.2.get_mut(&last) {
            b.last += 1;
            b.longest_wait_caused = b.longest_wait_caused.max(i.spread());
            b.total_wait_caused = b.total_wait_caused.saturating_add(i.spread());
        }
        let host = tl.host_of(rank_of(last).track).to_string();
        *entry.3.entry(host).or_default() += 1;
    }
    per.into_iter()
        .map(|(collector, (instances, partial, ranks, hosts))| {
            let ranks: Vec<RankBalance> = ranks.into_values().collect();
            let culprit = culprit_of(ranks.iter().map(|b| (b.rank, b.last, b.total_wait_caused)));
            let mut hosts: Vec<(String, u64)> = hosts.into_iter().collect();
            hosts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            LoadBalance {
                collector,
                name: tl.collectors.get(collector).cloned().unwrap_or_default(),
                instances,
                partial,
                ranks,
                hosts,
                culprit,
            }
        })
        .collect()
}

fn bump(hist: &mut Vec<u64>, pos: usize, len: usize) {
    if hist.len() < len {
        hist.resize(len, 0);
    }
    hist[pos] += 1;
}

/// The rank arrived last most often; ties go to the one that caused more waiting, then
/// the lower rank. None when no rank was ever last.
fn culprit_of(it: impl Iterator<Item = (u32, u64, i64)>) -> Option<u32> {
    it.filter(|x| x.1 > 0)
        .max_by(|a, b| a.1.cmp(&b.1).then(a.2.cmp(&b.2)).then(b.0.cmp(&a.0)))
        .map(|x| x.0)
}

/// The rank most often last over all collectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Culprit {
    pub rank: u32,
    /// Instances it arrived last in, of those it took part in.
    pub last: u64,
    pub of: u64,
    pub longest_wait_caused: i64,
}

/// Sums the per-collector monitors into one culprit.
pub fn culprit(lb: &[LoadBalance]) -> Option<Culprit> {
    let mut sum: BTreeMap<u32, Culprit> = BTreeMap::new();
    let mut waited: BTreeMap<u32, i64> = BTreeMap::new();
    for b in lb.iter().flat_map(|l| &l.ranks) {
        let c = sum.entry(b.rank).or_insert(Culprit {
            rank: b.rank,
            last: 0,
            of: 0,
            longest_wait_caused: 0,
        });
        c.last += b.last;
        c.of += b.instances;
        c.longest_wait_caused = c.longest_wait_caused.max(b.longest_wait_caused);
        let w = waited.entry(b.rank).or_default();
        *w = w.saturating_add(b.total_wait_caused);
    }
    let r = culprit_of(
        sum.values()
            .map(|c| (c.rank, c.last, waited.get(&c.rank).copied().unwrap_or(0))),
    )?;
    sum.get(&r).copied()
}

/// Summary statistics of a series.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    pub count: u64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// Population standard deviation.
    pub sd: f64,
    /// Median of the last [`MEDIAN_WINDOW`] values.
    pub median: f64,
}

/// The distribution of a set of durations (ns): what the stage, tree and diff tables show.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Dist {
    pub count: u64,
    pub mean: f64,
    /// Mean of the two middle values when the count is even.
    pub median: f64,
    /// Nearest-rank 90th percentile: the smallest value at least 90 % of the values do
    /// not exceed.
    pub p90: f64,
    pub min: i64,
    pub max: i64,
    pub total: i64,
}

impl Dist {
    /// The distribution of `values` (any order); None when there are none.
    pub fn of(mut values: Vec<i64>) -> Option<Dist> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let n = values.len();
        let total = values.iter().fold(0i64, |a, &v| a.saturating_add(v));
        let median = if n % 2 == 1 {
            values[n / 2] as f64
        } else {
            (values[n / 2 - 1] as f64 + values[n / 2] as f64) / 2.0
        };
        // Nearest rank: ceil(0.9 n), counted from 1.
        let p90 = values[(n * 9).div_ceil(10).max(1) - 1] as f64;
        Some(Dist {
            count: n as u64,
            mean: values.iter().map(|&v| v as f64).sum::<f64>() / n as f64,
            median,
            p90,
            min: values[0],
            max: values[n - 1],
            total,
        })
    }
}

/// Median of the last `window` values, O(window) per value (binary search in a sorted
/// copy of the window, then one shift to insert and one to evict).
#[derive(Debug, Clone)]
pub struct SlidingMedian {
    window: usize,
    fifo: VecDeque<f64>,
    sorted: Vec<f64>,
}

impl SlidingMedian {
    pub fn new(window: usize) -> SlidingMedian {
        let window = window.max(1);
        SlidingMedian {
            window,
            fifo: VecDeque::with_capacity(window),
            sorted: Vec::with_capacity(window),
        }
    }

    /// Adds a value (NaN is ignored), evicting the oldest when the window is full.
    pub fn push(&mut self, v: f64) {
        if v.is_nan() {
            return;
        }
        if self.fifo.len() == self.window {
            if let Some(old) = self.fifo.pop_front() {
                let i = self.sorted.partition_point(|x| x.total_cmp(&old).is_lt());
                if i < self.sorted.len() {
                    self.sorted.remove(i);
                }
            }
        }
        let i = self.sorted.partition_point(|x| x.total_cmp(&v).is_le());
        self.sorted.insert(i, v);
        self.fifo.push_back(v);
    }

    /// The median of the window (mean of the two middle values when even).
    pub fn median(&self) -> Option<f64> {
        let n = self.sorted.len();
        match n {
            0 => None,
            _ if n % 2 == 1 => Some(self.sorted[n / 2]),
            _ => Some((self.sorted[n / 2 - 1] + self.sorted[n / 2]) / 2.0),
        }
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }
}

/// The statistics monitor's accumulator: mean, min, max and standard deviation of every
/// value seen (Welford's update, O(1)), and the median of the last [`MEDIAN_WINDOW`].
#[derive(Debug, Clone)]
pub struct StatsMonitor {
    count: u64,
    mean: f64,
    m2: f64,
    min: f64,
    max: f64,
    median: SlidingMedian,
}

impl Default for StatsMonitor {
    fn default() -> Self {
        StatsMonitor::new()
    }
}

impl StatsMonitor {
    pub fn new() -> StatsMonitor {
        StatsMonitor::with_window(MEDIAN_WINDOW)
    }

    pub fn with_window(window: usize) -> StatsMonitor {
        StatsMonitor {
            count: 0,
            mean: 0.0,
            m2: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            median: SlidingMedian::new(window),
        }
    }

    /// Adds one value; NaN and infinities are ignored.
    pub fn push(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        self.count += 1;
        let d = v - self.mean;
        self.mean += d / self.count as f64;
        self.m2 += d * (v - self.mean);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.median.push(v);
    }

    /// None until a value was pushed.
    pub fn summary(&self) -> Option<Stats> {
        let median = self.median.median()?;
        Some(Stats {
            count: self.count,
            mean: self.mean,
            min: self.min,
            max: self.max,
            sd: (self.m2 / self.count as f64).max(0.0).sqrt(),
            median,
        })
    }
}

/// Latency and arrival spread of one collector's complete instances.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectorStats {
    pub collector: usize,
    pub name: String,
    /// Last departure − first arrival, ns.
    pub latency: Stats,
    /// Last arrival − first arrival, ns.
    pub spread: Stats,
}

/// The statistics monitor over per-instance latency, per collector, fed in time order.
pub fn latency_stats(tl: &Timeline, inst: &Instances) -> Vec<CollectorStats> {
    let mut per: BTreeMap<usize, (StatsMonitor, StatsMonitor)> = BTreeMap::new();
    for i in inst.list.iter().filter(|i| i.complete()) {
        let m = per.entry(i.collector).or_default();
        m.0.push(i.latency() as f64);
        m.1.push(i.spread() as f64);
    }
    per.into_iter()
        .filter_map(|(collector, (l, s))| {
            Some(CollectorStats {
                collector,
                name: tl.collectors.get(collector).cloned().unwrap_or_default(),
                latency: l.summary()?,
                spread: s.summary()?,
            })
        })
        .collect()
}

/// Latency of one directed link, from its messages.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkStats {
    pub src: u32,
    pub dst: u32,
    pub count: u64,
    pub mean: f64,
    /// Median over all messages (not windowed).
    pub median: f64,
    pub min: i64,
    pub max: i64,
    /// Minimum this way plus minimum the other way: a two-way latency estimate free of
    /// clock offsets between the hosts. None when no message went back.
    pub round_trip: Option<i64>,
}

/// Per (src, dst) latency table from matched messages.
pub fn links(m: &Messages) -> Vec<LinkStats> {
    let mut per: BTreeMap<(u32, u32), Vec<i64>> = BTreeMap::new();
    for msg in &m.matched {
        per.entry((msg.src, msg.dst))
            .or_default()
            .push(msg.latency());
    }
    let mins: HashMap<(u32, u32), i64> = per
        .iter()
        .map(|(&k, v)| (k, v.iter().copied().min().unwrap_or(0)))
        .collect();
    per.into_iter()
        .map(|((src, dst), mut v)| {
            v.sort_unstable();
            let n = v.len();
            let median = if n % 2 == 1 {
                v[n / 2] as f64
            } else {
                (v[n / 2 - 1] as f64 + v[n / 2] as f64) / 2.0
            };
            LinkStats {
                src,
                dst,
                count: n as u64,
                mean: v.iter().map(|&x| x as f64).sum::<f64>() / n as f64,
                median,
                min: v[0],
                max: v[n - 1],
                round_trip: mins.get(&(dst, src)).map(|back| back.saturating_add(v[0])),
            }
        })
        .collect()
}

/// Counts for a report's first table, and what looked wrong in the records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub ranks: usize,
    pub processes: usize,
    pub hosts: usize,
    pub unaligned_hosts: usize,
    pub tracks: usize,
    /// Collectors with at least one `Call` record.
    pub collectives: usize,
    pub instances: usize,
    pub partial_instances: usize,
    pub records: u64,
    pub lost: u64,
    pub unknown_ops: u64,
    pub reversed: u64,
    pub duplicate_calls: u64,
    pub messages: usize,
    pub unmatched_sends: u64,
    pub unmatched_recvs: u64,
    /// Sends and receives not inside their rank's `Call` of the same collector and seq.
    pub steps_outside_call: u64,
    /// Failed calls (status ≠ 0).
    pub failed: u64,
    pub span_ns: i64,
    pub culprit: Option<Culprit>,
}

impl Summary {
    /// One line for the terminal.
    pub fn line(&self) -> String {
        let mut s = format!(
            "{} on {} in {}",
            count(
                self.instances,
                "collective instance",
                "collective instances"
            ),
            count(self.ranks, "rank", "ranks"),
            count(self.processes, "process", "processes")
        );
        if self.partial_instances > 0 {
            s += &format!(" ({} partial)", self.partial_instances);
        }
        match self.culprit {
            Some(c) => {
                s += &format!(
                    "; culprit: rank {} (last in {} of {}, longest wait it caused {})",
                    c.rank,
                    c.last,
                    c.of,
                    format_ns(c.longest_wait_caused as f64)
                )
            }
            None => s += "; no culprit (no complete collective of two or more ranks)",
        }
        s
    }

    /// What looked wrong in the records, one line each.
    pub fn warnings(&self) -> Vec<String> {
        [
            (
                self.lost,
                "records lost to ring overwrites before they were written out",
            ),
            (
                self.partial_instances as u64,
                "collective instances missing the call record of some rank (left out of the \
                 load-balance and statistics monitors)",
            ),
            (
                self.unknown_ops,
                "records with an unknown operation (skipped)",
            ),
            (self.reversed, "records that end before they start"),
            (
                self.duplicate_calls,
                "call records repeating a (collector, seq, rank) already seen",
            ),
            (self.unmatched_sends, "sends without a matching receive"),
            (self.unmatched_recvs, "receives without a matching send"),
            (
                self.steps_outside_call,
                "sends or receives outside their rank's call record",
            ),
            (self.failed, "failed calls (status other than 0)"),
            (
                self.unaligned_hosts as u64,
                "hosts not aligned to the first host's clock (no messages both ways)",
            ),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{what}: {n}"))
        .collect()
    }
}

/// `1 rank`, `3 ranks`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Everything the exporter and the report need, computed once.
#[derive(Debug, Clone)]
pub struct Analysis {
    pub timeline: Timeline,
    pub messages: Messages,
    pub instances: Instances,
    pub load_balance: Vec<LoadBalance>,
    pub stats: Vec<CollectorStats>,
    pub links: Vec<LinkStats>,
    /// Time per path stage (`link/stage/NAME/...` records).
    pub stages: crate::stages::StageTimes,
    /// Latencies per tree node (node files of a traced tree).
    pub tree: crate::tree::TreeTimes,
    /// What each process's rank threads did with the CPU, for files that carry it.
    pub threads: Vec<ProcessThreads>,
    pub summary: Summary,
}

/// One process's thread usage, named as its trace file names it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProcessThreads {
    pub process: String,
    pub host: String,
    pub pid: u32,
    pub usage: crate::usage::ProcessUsage,
}

/// Runs every analysis of this module over `files`.
pub fn analyze(files: &[TraceFile]) -> Analysis {
    let tl = timeline(files);
    let msgs = messages(&tl);
    let inst = instances(&tl);
    let lb = load_balance(&tl, &inst);
    let stats = latency_stats(&tl, &inst);
    let links = links(&msgs);
    let stages = crate::stages::stage_times(&tl);
    let tree = crate::tree::tree_times(&tl);
    let ranks: HashSet<u32> = tl.tracks.iter().filter_map(|t| t.rank).collect();
    let calls: HashSet<usize> = inst.list.iter().map(|i| i.collector).collect();
    let summary = Summary {
        ranks: ranks.len(),
        processes: tl.processes.len(),
        hosts: tl.hosts.len(),
        unaligned_hosts: tl
            .hosts
            .iter()
            .filter(|h| h.alignment == Alignment::Unaligned)
            .count(),
        tracks: tl.tracks.len(),
        collectives: calls.len(),
        instances: inst.list.len(),
        partial_instances: inst.list.iter().filter(|i| !i.complete()).count(),
        records: tl.tracks.iter().map(|t| t.records as u64).sum(),
        lost: tl.tracks.iter().map(|t| t.lost).sum(),
        unknown_ops: tl.unknown_ops,
        reversed: tl.reversed,
        duplicate_calls: inst.duplicate_calls,
        messages: msgs.matched.len(),
        unmatched_sends: msgs.unmatched_sends,
        unmatched_recvs: msgs.unmatched_recvs,
        steps_outside_call: steps_outside_call(&tl),
        failed: tl
            .events
            .iter()
            .filter(|e| e.op == EventOp::Call && e.status != 0)
            .count() as u64,
        span_ns: tl.last().saturating_sub(tl.origin()),
        culprit: culprit(&lb),
    };
    let threads = files
        .iter()
        .filter_map(|f| {
            Some(ProcessThreads {
                process: f.process.clone(),
                host: f.host.clone(),
                pid: f.pid,
                usage: f.usage.as_deref()?.clone(),
            })
        })
        .collect();
    Analysis {
        timeline: tl,
        messages: msgs,
        instances: inst,
        load_balance: lb,
        stats,
        links,
        stages,
        tree,
        threads,
        summary,
    }
}

/// Sends and receives of a collective's schedule that lie outside their rank's call
/// record. Collectors without any call record carry point-to-point messages (an MPI
/// program's, under libvargr_mpi.so), which belong to no call.
fn steps_outside_call(tl: &Timeline) -> u64 {
    let calls: HashMap<(u32, usize, u32), (i64, i64)> = tl
        .events
        .iter()
        .filter(|e| e.op == EventOp::Call)
        .filter_map(|e| Some(((e.rank?, e.collector, e.seq), (e.start, e.end))))
        .collect();
    let collectives: HashSet<usize> = tl
        .events
        .iter()
        .filter(|e| e.op == EventOp::Call)
        .map(|e| e.collector)
        .collect();
    tl.events
        .iter()
        .filter(|e| matches!(e.op, EventOp::Send | EventOp::Recv))
        .filter(|e| collectives.contains(&e.collector))
        .filter(|e| {
            let Some(rank) = e.rank else { return true };
            match calls.get(&(rank, e.collector, e.seq)) {
                Some(&(s, t)) => e.start < s || e.end > t,
                None => true,
            }
        })
        .count() as u64
}

/// `850 ns`, `12.3 µs`, `4.56 ms`, `1.23 s`.
pub fn format_ns(ns: f64) -> String {
    let a = ns.abs();
    if !a.is_finite() {
        "–".into()
    } else if a < 1e3 {
        format!("{ns:.0} ns")
    } else if a < 1e6 {
        format!("{:.3} µs", ns / 1e3).replace(".000 ", " ")
    } else if a < 1e9 {
        format!("{:.3} ms", ns / 1e6)
    } else {
        format!("{:.3} s", ns / 1e9)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{Calibration, ClockPoint, Record, ThreadTrace};

    /// A calibration where one tick is one nanosecond, offset by `base` ns.
    pub(crate) fn clock(base: u64) -> Calibration {
        Calibration {
            first: ClockPoint { tick: 0, ns: base },
            last: ClockPoint {
                tick: 1_000_000_000,
                ns: base + 1_000_000_000,
            },
        }
    }

    pub(crate) fn rec(op: EventOp, coll: u16, seq: u32, start: u64, end: u64, peer: u32) -> Record {
        Record {
            start,
            end,
            seq,
            bytes: 8,
            collector: coll,
            op: op as u8,
            status: 0,
            peer,
        }
    }

    pub(crate) fn file(host: &str, base: u64, threads: Vec<(u32, Vec<Record>)>) -> TraceFile {
        TraceFile {
            process: format!(
                "ranks {}..{}",
                threads.first().map_or(0, |t| t.0),
                threads.last().map_or(0, |t| t.0 + 1)
            ),
            host: host.into(),
            pid: 1,
            clock: clock(base),
            align: Default::default(),
            collectors: vec!["ctx0/allreduce".into(), "ctx0/bcast".into()],
            threads: threads
                .into_iter()
                .map(|(r, records)| ThreadTrace {
                    label: format!("rank {r}"),
                    rank: Some(r),
                    lost: 0,
                    records,
                })
                .collect(),
            usage: None,
        }
    }

    /// Four ranks in two processes calling allreduce `n` times; rank `slow` arrives
    /// `delay` ns after the others in every call, and each call ends 100 ns after the
    /// last arrival. Ranks 1 and 3 exchange one message per call.
    pub(crate) fn slow_rank_job(n: u32, slow: u32, delay: u64) -> Vec<TraceFile> {
        let mut threads: Vec<(u32, Vec<Record>)> = (0..4).map(|r| (r, Vec::new())).collect();
        for seq in 0..n {
            let t0 = 10_000 + u64::from(seq) * 10_000;
            let last = t0 + delay;
            for (r, recs) in threads.iter_mut() {
                let arrive = if *r == slow {
                    last
                } else {
                    t0 + u64::from(*r) * 10
                };
                let leave = last + 100 + u64::from(*r);
                if *r == 1 {
                    recs.push(rec(EventOp::Send, 0, seq, arrive + 1, arrive + 2, 3));
                }
                if *r == 3 {
                    recs.push(rec(EventOp::Recv, 0, seq, arrive + 1, last + 50, 1));
                }
                recs.push(rec(EventOp::Call, 0, seq, arrive, leave, NO_PEER));
            }
        }
        let second = threads.split_off(2);
        vec![file("h", 0, threads), file("h", 0, second)]
    }

    #[test]
    fn a_slow_rank_is_named_the_culprit() {
        let a = analyze(&slow_rank_job(50, 2, 5_000));
        assert_eq!(a.summary.instances, 50);
        assert_eq!(a.summary.partial_instances, 0);
        let c = a.summary.culprit.expect("a culprit");
        assert_eq!((c.rank, c.last, c.of), (2, 50, 50));
        assert_eq!(c.longest_wait_caused, 5_000);
        let lb = &a.load_balance[0];
        assert_eq!(lb.name, "ctx0/allreduce");
        assert_eq!(lb.culprit, Some(2));
        assert_eq!(lb.hosts, vec![("h".to_string(), 50)]);
        let r2 = &lb.ranks[2];
        assert_eq!(r2.arrival_hist, vec![0, 0, 0, 50]);
        // Rank 0 arrives first every time and waits the whole spread.
        assert_eq!(lb.ranks[0].arrival_hist, vec![50, 0, 0, 0]);
        assert_eq!(lb.ranks[0].total_arrival_wait, 50 * 5_000);
        assert!(a
            .summary
            .line()
            .contains("culprit: rank 2 (last in 50 of 50"));
    }

    #[test]
    fn instances_know_their_order_waits_and_latency() {
        let a = analyze(&slow_rank_job(1, 3, 1_000));
        let i = &a.instances.list[0];
        assert_eq!(i.arrival_order, vec![0, 1, 2, 3]);
        assert_eq!(i.departure_order, vec![0, 1, 2, 3]);
        assert_eq!(i.last_rank(), 3);
        assert_eq!((i.first_arrival, i.last_arrival), (10_000, 11_000));
        assert_eq!(i.latency(), 11_000 + 103 - 10_000);
        assert_eq!(i.spread(), 1_000);
        assert_eq!(i.arrival_wait(&i.ranks[1]), 990);
        assert_eq!(i.departure_wait(&i.ranks[3]), 3);
        assert_eq!(i.ranks[0].in_call(), 1_100);
        assert!(i.complete());
        assert_eq!(a.summary.steps_outside_call, 0);
        assert!(
            a.summary.warnings().is_empty(),
            "{:?}",
            a.summary.warnings()
        );
    }

    #[test]
    fn the_timeline_uses_each_files_clock_and_sorts() {
        let f1 = file(
            "h",
            1_000,
            vec![(0, vec![rec(EventOp::Call, 0, 0, 500, 600, NO_PEER)])],
        );
        let mut f2 = file(
            "h",
            0,
            vec![(1, vec![rec(EventOp::Call, 1, 0, 100, 50, NO_PEER)])],
        );
        // File 2 knows the collectors in another order.
        f2.collectors.reverse();
        let mut bad = rec(EventOp::Call, 0, 1, 1, 2, NO_PEER);
        bad.op = 99;
        f2.threads[0].records.push(bad);
        let tl = timeline(&[f1, f2]);
        let got: Vec<(i64, i64, Option<u32>, &str)> = tl
            .events
            .iter()
            .map(|e| (e.start, e.end, e.rank, tl.collector(e)))
            .collect();
        assert_eq!(
            got,
            vec![
                (100, 100, Some(1), "ctx0/allreduce"),
                (1_500, 1_600, Some(0), "ctx0/allreduce")
            ]
        );
        assert_eq!((tl.unknown_ops, tl.reversed), (1, 1));
        assert_eq!(tl.hosts[0].alignment, Alignment::Reference);
    }

    #[test]
    fn hosts_are_aligned_from_messages_both_ways() {
        // Host b's clock reads 1 ms more than a's; every message takes 300 ns.
        let off = 1_000_000;
        let a = file(
            "a",
            0,
            vec![(
                0,
                vec![
                    rec(EventOp::Send, 0, 0, 1_000, 1_010, 1),
                    rec(EventOp::Recv, 0, 0, 1_020, 2_300, 1),
                    rec(EventOp::Call, 0, 0, 1_000, 2_400, NO_PEER),
                ],
            )],
        );
        let b = file(
            "b",
            off,
            vec![(
                1,
                vec![
                    rec(EventOp::Recv, 0, 0, 900, 1_300, 0),
                    rec(EventOp::Send, 0, 0, 2_000, 2_010, 0),
                    rec(EventOp::Call, 0, 0, 900, 2_100, NO_PEER),
                ],
            )],
        );
        let an = analyze(&[a, b]);
        let tl = &an.timeline;
        assert_eq!(tl.hosts[1].offset_ns, off as i64);
        assert_eq!(tl.hosts[1].alignment, Alignment::Estimated { messages: 2 });
        let lat: Vec<i64> = an.messages.matched.iter().map(|m| m.latency()).collect();
        assert_eq!(lat, vec![300, 300]);
        let i = &an.instances.list[0];
        assert_eq!((i.first_arrival, i.last_rank()), (900, 0));
        assert_eq!(an.links[0].round_trip, Some(600));
        assert_eq!(an.summary.unaligned_hosts, 0);
    }

    #[test]
    fn links_pair_the_kth_send_with_the_kth_receive() {
        let a = analyze(&[file(
            "h",
            0,
            vec![
                (
                    0,
                    vec![
                        rec(EventOp::Send, 0, 7, 100, 110, 1),
                        rec(EventOp::Send, 0, 7, 200, 210, 1),
                        rec(EventOp::Send, 0, 8, 300, 310, 1),
                        rec(EventOp::Call, 0, 99, 400, 500, NO_PEER),
                    ],
                ),
                (
                    1,
                    vec![
                        rec(EventOp::Recv, 0, 7, 90, 150, 0),
                        rec(EventOp::Recv, 0, 7, 160, 400, 0),
                        rec(EventOp::Recv, 0, 9, 160, 400, 0),
                    ],
                ),
            ],
        )]);
        let m = &a.messages;
        assert_eq!(m.matched.len(), 2);
        assert_eq!((m.unmatched_sends, m.unmatched_recvs), (1, 1));
        let l = &a.links[0];
        assert_eq!((l.src, l.dst, l.count, l.min, l.max), (0, 1, 2, 50, 200));
        assert_eq!((l.mean, l.median), (125.0, 125.0));
        assert_eq!(l.round_trip, None);
        // Collector 0 is a collective's (rank 0 has a call of it), and no call of theirs
        // is around them.
        assert_eq!(a.summary.steps_outside_call, 6);
    }

    #[test]
    fn messages_of_a_collector_without_calls_are_point_to_point() {
        let a = analyze(&[file(
            "h",
            0,
            vec![
                (0, vec![rec(EventOp::Send, 1, 7, 100, 110, 1)]),
                (1, vec![rec(EventOp::Recv, 1, 7, 90, 150, 0)]),
            ],
        )]);
        assert_eq!(a.messages.matched.len(), 1);
        assert_eq!(a.summary.steps_outside_call, 0);
        assert!(
            a.summary.warnings().is_empty(),
            "{:?}",
            a.summary.warnings()
        );
    }

    #[test]
    fn split_communicators_sharing_a_context_are_told_apart() {
        // Evens and odds of four ranks in two processes: both groups call seq 0 of ctx1.
        let f = |ranks: [u32; 2]| -> TraceFile {
            let mut tf = file(
                "h",
                0,
                ranks
                    .iter()
                    .map(|&r| {
                        let peer = r ^ 2;
                        let op = if r < 2 { EventOp::Send } else { EventOp::Recv };
                        (
                            r,
                            vec![
                                rec(op, 0, 0, 1_000 + u64::from(r), 1_500, peer),
                                rec(EventOp::Call, 0, 0, 1_000 + u64::from(r), 2_000, NO_PEER),
                            ],
                        )
                    })
                    .collect(),
            );
            tf.collectors = vec!["ctx1/allreduce".into()];
            tf
        };
        let a = analyze(&[f([0, 1]), f([2, 3])]);
        let groups: Vec<(u32, Vec<u32>)> = a
            .instances
            .list
            .iter()
            .map(|i| (i.group, i.ranks.iter().map(|r| r.rank).collect()))
            .collect();
        assert_eq!(groups, vec![(0, vec![0, 2]), (1, vec![1, 3])]);
        assert!(a.instances.list.iter().all(Instance::complete));
    }

    #[test]
    fn shared_memory_ranks_without_messages_form_their_process_group() {
        let calls = |r: u32, seqs: &[u32]| -> (u32, Vec<Record>) {
            let recs = seqs
                .iter()
                .map(|&s| {
                    rec(
                        EventOp::Call,
                        0,
                        s,
                        100 * u64::from(s) + u64::from(r),
                        100 * u64::from(s) + 50,
                        NO_PEER,
                    )
                })
                .collect();
            (r, recs)
        };
        // Rank 1 lost its record of seq 1.
        let a = analyze(&[file("h", 0, vec![calls(0, &[0, 1]), calls(1, &[0])])]);
        assert_eq!(a.summary.instances, 2);
        assert_eq!(a.summary.partial_instances, 1);
        assert_eq!(a.load_balance[0].partial, 1);
        assert_eq!(a.load_balance[0].instances, 1);
        assert_eq!(a.summary.culprit.map(|c| c.rank), Some(1));
        assert!(a.summary.warnings()[0].starts_with("collective instances missing"));
        assert!(a.summary.warnings()[0].ends_with(": 1"));
    }

    #[test]
    fn duplicate_calls_are_counted_once() {
        let r = rec(EventOp::Call, 0, 0, 10, 20, NO_PEER);
        let a = analyze(&[file("h", 0, vec![(0, vec![r, r])])]);
        assert_eq!(a.summary.duplicate_calls, 1);
        assert_eq!(a.instances.list.len(), 1);
        assert_eq!(a.summary.culprit, None);
        assert!(a.summary.line().contains("no culprit"));
    }

    #[test]
    fn the_sliding_median_follows_the_last_window() {
        let mut m = SlidingMedian::new(3);
        assert_eq!(m.median(), None);
        for (v, want) in [
            (5.0, 5.0),
            (1.0, 3.0),
            (3.0, 3.0),
            (10.0, 3.0),
            (11.0, 10.0),
            (0.0, 10.0),
        ] {
            m.push(v);
            assert_eq!(m.median(), Some(want), "after {v}");
        }
        assert_eq!(m.len(), 3);
        m.push(f64::NAN);
        assert_eq!(m.len(), 3);
        // Equal values are evicted one at a time.
        let mut e = SlidingMedian::new(2);
        for v in [2.0, 2.0, 7.0, 7.0] {
            e.push(v);
        }
        assert_eq!(e.median(), Some(7.0));
    }

    #[test]
    fn the_statistics_monitor_matches_the_textbook() {
        let mut s = StatsMonitor::new();
        assert_eq!(s.summary(), None);
        for v in [
            2.0,
            4.0,
            4.0,
            4.0,
            5.0,
            5.0,
            7.0,
            9.0,
            f64::NAN,
            f64::INFINITY,
        ] {
            s.push(v);
        }
        let st = s.summary().unwrap();
        assert_eq!((st.count, st.mean, st.min, st.max), (8, 5.0, 2.0, 9.0));
        assert!((st.sd - 2.0).abs() < 1e-12);
        assert_eq!(st.median, 4.5);
        // The median looks at the last 100 values only; the rest at all of them.
        let mut w = StatsMonitor::new();
        for i in 0..1000 {
            w.push(f64::from(i));
        }
        let st = w.summary().unwrap();
        assert_eq!(
            (st.count, st.min, st.max, st.mean),
            (1000, 0.0, 999.0, 499.5)
        );
        assert_eq!(st.median, 949.5);
    }

    #[test]
    fn latency_stats_cover_complete_instances() {
        let a = analyze(&slow_rank_job(10, 1, 2_000));
        let s = &a.stats[0];
        assert_eq!(s.name, "ctx0/allreduce");
        assert_eq!(s.latency.count, 10);
        // Latency: last departure (last + 103) − first arrival (t0).
        assert_eq!((s.latency.min, s.latency.max), (2_103.0, 2_103.0));
        assert_eq!(s.spread.median, 2_000.0);
        assert_eq!(s.latency.sd, 0.0);
    }

    #[test]
    fn times_read_well() {
        assert_eq!(format_ns(850.0), "850 ns");
        assert_eq!(format_ns(12_300.0), "12.300 µs");
        assert_eq!(format_ns(12_000.0), "12 µs");
        assert_eq!(format_ns(4_560_000.0), "4.560 ms");
        assert_eq!(format_ns(1.5e9), "1.500 s");
    }

    #[test]
    fn nothing_to_analyze_is_fine() {
        let a = analyze(&[]);
        assert_eq!(a.summary, Summary::default());
        assert!(a.timeline.events.is_empty());
    }
}
