//! The monitor plane (EventSpace's event scopes, seed 004): monitors *pull* records from
//! every process's collectors through the job's own mesh, so a monitor may run slower
//! than the events it reads and the application never waits for it.
//!
//! Each process runs one agent thread (at the lowest CPU priority, so it takes cycles
//! only when ranks wait) that answers a pull with the records written since its last
//! answer. The monitor, a thread in the process of rank 0, pulls from all agents in
//! parallel (every request goes out before any answer is awaited), merges the records
//! and runs the load-balance monitor on the world communicator's collectives: which rank
//! arrives last, how often, and how long the others waited for it.
//!
//! Records carry ticks of each process's clock; all processes of one host share the
//! monotonic clock, so merged times are exact on one host. Across hosts the clocks must
//! be aligned first (not done yet).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use vargr_trace::analysis::{StatsMonitor, MEDIAN_WINDOW};
use vargr_trace::{EventOp, TraceFile, Tracer};

use crate::job::MeshTransport;
use crate::transport::{Tag, Transport};

/// Whether monitors pull and analyse (benchmarks pause them to compare like with like).
static ACTIVE: AtomicBool = AtomicBool::new(true);
/// Whether monitors analyse only while a rank of their process waits in a receive (the
/// seed's coscheduling: analysis uses cycles the application is not using).
static COSCHEDULE: AtomicBool = AtomicBool::new(false);
/// Ranks of this process waiting in a receive right now (counted only when coscheduling).
static BLOCKED: AtomicUsize = AtomicUsize::new(0);

/// Pauses or resumes this process's monitor.
pub fn set_active(on: bool) {
    ACTIVE.store(on, Ordering::Relaxed);
}

/// Counts a rank as blocked for as long as the guard lives (only when coscheduling).
pub(crate) struct Blocked(bool);

impl Blocked {
    #[inline]
    pub(crate) fn enter() -> Blocked {
        let on = COSCHEDULE.load(Ordering::Relaxed);
        if on {
            BLOCKED.fetch_add(1, Ordering::Relaxed);
        }
        Blocked(on)
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        if self.0 {
            BLOCKED.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Context id reserved for monitor traffic: no communicator ever gets it.
pub(crate) const MONITOR_CTX: u32 = u32::MAX;
const TAG_PULL: u64 = 1;
const TAG_DATA: u64 = 2;

/// How often an agent looks for a pull request and drains the rings.
const AGENT_POLL: Duration = Duration::from_millis(5);
/// Records an agent holds per thread between pulls (32 MiB at most per thread).
const AGENT_HOLD: usize = 1 << 20;

/// Answers pulls from the monitor at `monitor` (a world rank) until the process ends.
/// The agent never waits in a receive: a thread blocked there could end up polling the
/// sockets for the ranks and put itself between them and their messages. It looks for
/// requests the ranks' own polling has delivered.
pub(crate) fn spawn_agent(t: Arc<MeshTransport>, monitor: usize, process: String) {
    let _ = std::thread::Builder::new()
        .name("vargr-monitor-agent".into())
        .spawn(move || {
            lowest_priority();
            vargr_trace::set_thread_label("monitor agent", None);
            let mut tracer = Tracer::new();
            // Records drained from the rings between pulls, so rings never overflow
            // while the monitor is slow.
            let mut held = Vec::new();
            let (pull, data) = (
                Tag::user(MONITOR_CTX, TAG_PULL),
                Tag::user(MONITOR_CTX, TAG_DATA),
            );
            loop {
                let req = match t.try_recv(monitor, pull) {
                    Ok(Some(req)) => req,
                    Ok(None) => {
                        tracer.drain_into(&mut held, AGENT_HOLD);
                        std::thread::sleep(AGENT_POLL);
                        continue;
                    }
                    Err(_) => return,
                };
                if req.as_ref() == b"stop" {
                    return;
                }
                tracer.drain_into(&mut held, AGENT_HOLD);
                let snap = Tracer::file_of(&process, std::mem::take(&mut held));
                if t.send(monitor, data, Bytes::from(snap.encode())).is_err() {
                    return;
                }
            }
        });
}

fn lowest_priority() {
    // SAFETY: setpriority on the calling thread (who = 0 with PRIO_PROCESS names the
    // calling thread on Linux) only changes its scheduling niceness.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 19);
    }
}

/// The load-balance monitor's view of one collector.
#[derive(Debug, Clone, Default)]
pub struct Culprits {
    /// Complete calls seen.
    pub calls: u64,
    /// How often each world rank arrived last.
    pub last: BTreeMap<u32, u64>,
    /// Longest time the first rank waited for the last (ns).
    pub longest_wait_ns: u64,
    /// Latency of each call (first arrival to last departure), in µs.
    pub latency_us: StatsMonitor,
}

impl Culprits {
    /// The rank most often last, with its share of the calls.
    pub fn culprit(&self) -> Option<(u32, f64)> {
        let (&r, &n) = self.last.iter().max_by_key(|(_, &n)| n)?;
        Some((r, n as f64 / self.calls.max(1) as f64))
    }
}

/// One rank's part of one call: (rank, arrival ns, departure ns).
type Arrival = (u32, u64, u64);

/// Merges pulled records and finds who arrives last in the world's collectives.
#[derive(Debug, Default)]
pub struct LoadBalance {
    size: usize,
    /// (collector, seq) → (rank, arrival, departure) in ns, until every rank's record is
    /// in.
    pending: HashMap<(String, u32), Vec<Arrival>>,
    pub by_collector: BTreeMap<String, Culprits>,
    pub records_lost: u64,
    pub records: u64,
}

impl LoadBalance {
    pub fn new(size: usize) -> LoadBalance {
        LoadBalance {
            size,
            ..LoadBalance::default()
        }
    }

    /// Adds one pull's worth of records.
    pub fn add(&mut self, file: &TraceFile) {
        for t in &file.threads {
            self.records_lost += t.lost;
            self.records += t.records.len() as u64;
            let Some(rank) = t.rank else { continue };
            for r in &t.records {
                if r.event_op() != Some(EventOp::Call) {
                    continue;
                }
                let name = file.collector_name(r.collector);
                // The world communicator is context 0; others have other members.
                if !name.starts_with("ctx0/") {
                    continue;
                }
                let key = (name.to_string(), r.seq);
                let v = self.pending.entry(key.clone()).or_default();
                v.push((rank, file.to_ns(r.start), file.to_ns(r.end)));
                if v.len() == self.size {
                    let v = self.pending.remove(&key).expect("just filled");
                    let first = v.iter().map(|x| x.1).min().unwrap_or(0);
                    let last = *v.iter().max_by_key(|x| x.1).expect("non-empty");
                    let gone = v.iter().map(|x| x.2).max().unwrap_or(0);
                    let c = self.by_collector.entry(key.0).or_default();
                    c.calls += 1;
                    *c.last.entry(last.0).or_default() += 1;
                    c.longest_wait_ns = c.longest_wait_ns.max(last.1 - first);
                    c.latency_us.push(gone.saturating_sub(first) as f64 / 1e3);
                }
            }
        }
        // Calls whose records were lost never complete; keep the map bounded.
        if self.pending.len() > 100_000 {
            self.pending.clear();
        }
    }

    /// One line per collector with the latency statistics (the statistics monitor).
    pub fn stats_summary(&self) -> Vec<String> {
        self.by_collector
            .iter()
            .filter_map(|(name, c)| {
                let s = c.latency_us.summary()?;
                Some(format!(
                    "{} latency µs: mean {:.1} min {:.1} max {:.1} sd {:.1} median(last {}) {:.1}",
                    name.trim_start_matches("ctx0/"),
                    s.mean,
                    s.min,
                    s.max,
                    s.sd,
                    MEDIAN_WINDOW,
                    s.median
                ))
            })
            .collect()
    }

    /// Fraction of the records written that reached the monitor.
    pub fn gather_rate(&self) -> f64 {
        let all = self.records + self.records_lost;
        if all == 0 {
            1.0
        } else {
            self.records as f64 / all as f64
        }
    }

    /// One line per collector: the culprit, how often, the longest wait.
    pub fn summary(&self) -> Vec<String> {
        self.by_collector
            .iter()
            .filter_map(|(name, c)| {
                let (r, share) = c.culprit()?;
                Some(format!(
                    "{}: rank {r} arrived last in {:.0} % of {} calls (longest wait {:.2} ms)",
                    name.trim_start_matches("ctx0/"),
                    share * 100.0,
                    c.calls,
                    c.longest_wait_ns as f64 / 1e6
                ))
            })
            .collect()
    }
}

/// The monitor thread of rank 0's process.
pub(crate) struct MonitorHandle {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<LoadBalance>>,
}

impl MonitorHandle {
    /// Pulls from the agents of `processes` (their first ranks) every `period`, printing
    /// the culprits to stderr when they change.
    pub(crate) fn start(
        t: Arc<dyn Transport>,
        processes: Vec<usize>,
        size: usize,
        period: Duration,
        stats: bool,
        coschedule: bool,
    ) -> MonitorHandle {
        COSCHEDULE.store(coschedule, Ordering::Relaxed);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("vargr-monitor".into())
            .spawn(move || {
                let mut lb = LoadBalance::new(size);
                let mut alive = processes;
                let t0 = Instant::now();
                let mut last_culprits = Vec::new();
                let mut last_print = Instant::now();
                let (pull, data) = (
                    Tag::user(MONITOR_CTX, TAG_PULL),
                    Tag::user(MONITOR_CTX, TAG_DATA),
                );
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(period);
                    if !ACTIVE.load(Ordering::Relaxed) {
                        continue;
                    }
                    if coschedule {
                        // Wait (a period at most) for a moment when a rank here is blocked.
                        let until = Instant::now() + period;
                        while BLOCKED.load(Ordering::Relaxed) == 0 && Instant::now() < until {
                            std::thread::sleep(Duration::from_micros(50));
                        }
                    }
                    // Parallel gather: all requests first, then the answers.
                    alive.retain(|&p| t.send(p, pull, Bytes::from_static(b"pull")).is_ok());
                    alive.retain(|&p| match t.recv(p, data) {
                        Ok(b) => {
                            if let Ok(f) = TraceFile::decode(&b, std::path::Path::new("pull")) {
                                lb.add(&f);
                            }
                            true
                        }
                        Err(_) => false,
                    });
                    // Speak when a culprit changes, and otherwise every few seconds.
                    let culprits: Vec<(String, Option<u32>)> = lb
                        .by_collector
                        .iter()
                        .map(|(n, c)| (n.clone(), c.culprit().map(|x| x.0)))
                        .collect();
                    if culprits != last_culprits || last_print.elapsed() >= Duration::from_secs(5) {
                        let lines = if stats {
                            lb.stats_summary()
                        } else {
                            lb.summary()
                        };
                        for l in lines {
                            eprintln!("vargr monitor {:.1} s: {l}", t0.elapsed().as_secs_f64());
                        }
                        last_culprits = culprits;
                        last_print = Instant::now();
                    }
                    if alive.is_empty() {
                        break;
                    }
                }
                lb
            })
            .ok();
        MonitorHandle { stop, thread }
    }

    /// Stops the monitor and returns what it saw.
    pub(crate) fn stop(mut self) -> Option<LoadBalance> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take()?.join().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vargr_trace::{Calibration, ClockPoint, Record, ThreadTrace};

    fn file(rank: u32, arrivals: &[u64]) -> TraceFile {
        TraceFile {
            process: String::new(),
            host: "h".into(),
            pid: 1,
            clock: Calibration {
                first: ClockPoint { tick: 0, ns: 0 },
                last: ClockPoint { tick: 1, ns: 1 },
            },
            align: Default::default(),
            collectors: vec!["ctx0/allreduce".into()],
            threads: vec![ThreadTrace {
                label: format!("rank {rank}"),
                rank: Some(rank),
                lost: 0,
                records: arrivals
                    .iter()
                    .enumerate()
                    .map(|(seq, &a)| Record {
                        start: a,
                        end: a + 10,
                        seq: seq as u32,
                        bytes: 8,
                        collector: 0,
                        op: EventOp::Call as u8,
                        status: 0,
                        peer: vargr_trace::NO_PEER,
                    })
                    .collect(),
            }],
        }
    }

    #[test]
    fn the_rank_that_arrives_last_is_named() {
        let mut lb = LoadBalance::new(3);
        lb.add(&file(0, &[100, 200, 300]));
        lb.add(&file(1, &[600, 900, 310]));
        // Rank 2's third call has not been pulled yet: only two calls are complete.
        lb.add(&file(2, &[500, 210]));
        let c = &lb.by_collector["ctx0/allreduce"];
        assert_eq!(c.calls, 2);
        assert_eq!(c.culprit(), Some((1, 1.0)));
        assert_eq!(c.longest_wait_ns, 700);
        assert!(lb.summary()[0].contains("of 2 calls"));
        // Latencies: first arrival to last departure (records end 10 after they start).
        let st = lb.by_collector["ctx0/allreduce"]
            .latency_us
            .summary()
            .unwrap();
        assert_eq!((st.count, st.min * 1e3, st.max * 1e3), (2, 510.0, 710.0));
        assert_eq!(lb.gather_rate(), 1.0);
    }
}
