//! Measures what an overdecomposed process's rank threads do with the CPU (seed 000
//! §7.4), so that `vargr bench sor` and trace reports can say *why* more ranks per core
//! helped or not: too little thread-level parallelism (TLP), more system time, more
//! context switches, or more cache misses.
//!
//! - Rank states change at the communication layer's own boundaries (a receive, a wait
//!   for a scheduler slot), so TLP is exact and cheap: each change takes one uncontended
//!   lock and accumulates the time spent at the previous counts (a time-weighted
//!   histogram, no sampling error). This is the seed's method: "TLP counters ... are
//!   updated before and after calling a blocking communication operation".
//! - What the kernel thinks is sampled: a thread reads every rank thread's
//!   `/proc/self/task/<tid>/stat` state now and then, so "wants a CPU but has none"
//!   (state `R` with fewer cores than runnable threads) is visible too.
//! - Per rank, user and system time, context switches and the time spent runnable but
//!   waiting for a CPU (`schedstat`'s run delay) come from `/proc` at the start
//!   and end of its window, and hardware counters (instructions, cycles, L1D and LLC read
//!   misses; user level only, like the seed's perfctr virtual counters) from
//!   `perf_event_open` where the kernel allows it. Where it does not, the reason is kept
//!   and reported instead.

use std::cell::RefCell;
use std::fs::File;
use std::io::Read;
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use vargr_trace::usage::{Counters, ProcessUsage, RankUsage, StateShare};

/// What a rank thread is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankState {
    /// In application code: running, or runnable and waiting for a CPU.
    Computing = 0,
    /// Blocked in a receive or wait of the communication layer.
    Communication = 1,
    /// Blocked elsewhere (waiting for a user-level scheduler slot).
    Other = 2,
}

/// One task's line of `/proc/<pid>/task/<tid>/stat` and `.../status`, as far as needed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskSample {
    /// The kernel's state letter (`R` running or runnable, `S` sleeping, ...).
    pub state: char,
    /// User and system time in clock ticks.
    pub utime: u64,
    pub stime: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    /// Nanoseconds spent runnable but waiting for a CPU (`schedstat`'s run delay);
    /// `None` where the kernel keeps no scheduler statistics.
    pub run_delay_ns: Option<u64>,
}

/// Why a `/proc` text could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct ProcError {
    pub what: String,
    pub reason: String,
}

fn proc_error(what: &str, reason: impl Into<String>) -> ProcError {
    ProcError {
        what: what.to_string(),
        reason: reason.into(),
    }
}

/// Parses `stat`'s state, utime and stime. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from its *last* closing parenthesis.
pub fn parse_stat(text: &str) -> Result<(char, u64, u64), ProcError> {
    let rest = text
        .rfind(')')
        .map(|at| &text[at + 1..])
        .ok_or_else(|| proc_error("stat", "no ')' closing the command name"))?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // After the name: state is field 3, utime 14, stime 15 (1-based, man 5 proc).
    let (Some(state), Some(utime), Some(stime)) = (fields.first(), fields.get(11), fields.get(12))
    else {
        return Err(proc_error(
            "stat",
            format!("{} fields after the command name, 13 needed", fields.len()),
        ));
    };
    let num = |name: &str, s: &str| {
        s.parse::<u64>()
            .map_err(|_| proc_error("stat", format!("{name} {s:?} is not a number")))
    };
    let mut letters = state.chars();
    let letter = match (letters.next(), letters.next()) {
        (Some(c), None) => c,
        _ => {
            return Err(proc_error(
                "stat",
                format!("state {state:?} is not one letter"),
            ))
        }
    };
    Ok((letter, num("utime", utime)?, num("stime", stime)?))
}

/// Parses `status`'s voluntary and involuntary context switch counts.
pub fn parse_status(text: &str) -> Result<(u64, u64), ProcError> {
    let field = |key: &str| -> Result<u64, ProcError> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .ok_or_else(|| proc_error("status", format!("no {key} line")))?;
        line.trim()
            .parse()
            .map_err(|_| proc_error("status", format!("{key} {:?} is not a number", line.trim())))
    };
    Ok((
        field("voluntary_ctxt_switches")?,
        field("nonvoluntary_ctxt_switches")?,
    ))
}

/// Parses `schedstat`: time on the CPU, time waiting for one (both ns), timeslices.
pub fn parse_schedstat(text: &str) -> Result<(u64, u64), ProcError> {
    let mut it = text.split_ascii_whitespace().map(|s| {
        s.parse::<u64>()
            .map_err(|_| proc_error("schedstat", format!("{s:?} is not a number")))
    });
    match (it.next(), it.next()) {
        (Some(run), Some(wait)) => Ok((run?, wait?)),
        _ => Err(proc_error("schedstat", "fewer than two fields")),
    }
}

/// Reads a small `/proc` file (they are a few hundred bytes; bounded anyway).
fn read_small(path: &str) -> Result<String, ProcError> {
    let mut s = String::new();
    File::open(path)
        .and_then(|f| f.take(64 << 10).read_to_string(&mut s))
        .map_err(|e| proc_error(path, e.to_string()))?;
    Ok(s)
}

/// The state letter of this process's task `tid`.
pub fn task_state(tid: i32) -> Result<char, ProcError> {
    parse_stat(&read_small(&format!("/proc/self/task/{tid}/stat"))?).map(|(c, _, _)| c)
}

/// Times and switches of this process's task `tid`.
pub fn read_task(tid: i32) -> Result<TaskSample, ProcError> {
    let (state, utime, stime) = parse_stat(&read_small(&format!("/proc/self/task/{tid}/stat"))?)?;
    let (voluntary, involuntary) =
        parse_status(&read_small(&format!("/proc/self/task/{tid}/status"))?)?;
    let run_delay_ns = read_small(&format!("/proc/self/task/{tid}/schedstat"))
        .and_then(|t| parse_schedstat(&t))
        .ok()
        .map(|(_, wait)| wait);
    Ok(TaskSample {
        state,
        utime,
        stime,
        voluntary,
        involuntary,
        run_delay_ns,
    })
}

/// The calling thread's kernel id.
pub fn current_tid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// `struct perf_event_attr` up to `config1` (`PERF_ATTR_SIZE_VER0`, 64 bytes), which
/// every kernel since 2.6.31 accepts.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_TYPE_HW_CACHE: u32 = 3;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
/// Cache id | read op << 8 | miss << 16.
const L1D_READ_MISS: u64 = 1 << 16;
const LL_READ_MISS: u64 = 2 | (1 << 16);
const EXCLUDE_KERNEL: u64 = 1 << 5;
const EXCLUDE_HV: u64 = 1 << 6;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

/// The calling thread's hardware counters, counting from when they were opened.
pub struct HwCounters {
    /// instructions, cycles, L1D read misses, LLC read misses.
    files: [Option<File>; 4],
    /// Why the first counter that failed could not be opened.
    unavailable: Option<String>,
}

impl HwCounters {
    /// Opens the counters for the calling thread (user level only); any the kernel
    /// refuses are left out, with the reason kept.
    pub fn open() -> HwCounters {
        let wanted = [
            (PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS),
            (PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES),
            (PERF_TYPE_HW_CACHE, L1D_READ_MISS),
            (PERF_TYPE_HW_CACHE, LL_READ_MISS),
        ];
        let mut unavailable = None;
        let files = wanted.map(|(kind, config)| match open_counter(kind, config) {
            Ok(f) => Some(f),
            Err(e) => {
                unavailable.get_or_insert(format!("perf_event_open: {e}"));
                None
            }
        });
        HwCounters { files, unavailable }
    }

    /// The counts so far (readable from any thread).
    pub fn read(&self) -> Counters {
        let mut unavailable = self.unavailable.clone();
        let [ins, cyc, l1, llc] = [0, 1, 2, 3].map(|i| {
            let f = self.files[i].as_ref()?;
            let mut b = [0u8; 8];
            match (&*f).read_exact(&mut b) {
                Ok(()) => Some(u64::from_ne_bytes(b)),
                Err(e) => {
                    unavailable.get_or_insert(format!("reading a counter: {e}"));
                    None
                }
            }
        });
        Counters {
            instructions: ins,
            cycles: cyc,
            l1d_misses: l1,
            llc_misses: llc,
            unavailable,
        }
    }
}

fn open_counter(kind: u32, config: u64) -> std::io::Result<File> {
    let attr = PerfEventAttr {
        kind,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config,
        flags: EXCLUDE_KERNEL | EXCLUDE_HV,
        ..Default::default()
    };
    // SAFETY: `attr` is a valid, fully initialised VER0 attribute that outlives the call;
    // pid 0 and cpu -1 count the calling thread on any CPU; no group.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            0 as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us this descriptor and nothing else owns it.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

/// One rank thread's window: where its times started, and its counters.
struct RankEntry {
    rank: u32,
    tid: i32,
    start: Option<TaskSample>,
    counters: HwCounters,
    /// Set when the thread has ended; its figures are final then.
    done: Mutex<Option<RankUsage>>,
}

impl RankEntry {
    fn usage_now(&self) -> RankUsage {
        let tick = clock_ticks_per_second();
        let end = read_task(self.tid).ok();
        let (user_s, system_s, v, i, wait) = match (self.start, end) {
            (Some(a), Some(b)) => (
                b.utime.saturating_sub(a.utime) as f64 / tick,
                b.stime.saturating_sub(a.stime) as f64 / tick,
                b.voluntary.saturating_sub(a.voluntary),
                b.involuntary.saturating_sub(a.involuntary),
                a.run_delay_ns
                    .zip(b.run_delay_ns)
                    .map(|(x, y)| y.saturating_sub(x) as f64 / 1e9),
            ),
            _ => (0.0, 0.0, 0, 0, None),
        };
        RankUsage {
            rank: self.rank,
            user_s,
            system_s,
            voluntary_switches: v,
            involuntary_switches: i,
            runqueue_wait_s: wait,
            counters: self.counters.read(),
        }
    }
}

/// Time accumulated at each count of ranks per state.
#[derive(Default)]
struct Acc {
    last: Option<Instant>,
    counts: [usize; 3],
    window_ns: u64,
    tlp_ns: Vec<u64>,
    computing_ns: Vec<u64>,
    state_ns: [u128; 3],
}

impl Acc {
    fn advance(&mut self, now: Instant) {
        let ranks: usize = self.counts.iter().sum();
        if let Some(last) = self.last.filter(|_| ranks > 0) {
            let el = now.saturating_duration_since(last).as_nanos() as u64;
            let c = self.counts;
            let add = |v: &mut Vec<u64>, at: usize| {
                if v.len() <= at {
                    v.resize(at + 1, 0);
                }
                v[at] += el;
            };
            add(&mut self.tlp_ns, c[0] + c[2]);
            add(&mut self.computing_ns, c[0]);
            for (s, n) in self.state_ns.iter_mut().zip(c) {
                *s += u128::from(el) * n as u128;
            }
            self.window_ns += el;
        }
        self.last = Some(now);
    }
}

/// The thread usage of one process's ranks (one per [`crate::Job`]).
#[derive(Default)]
pub struct ThreadUsage {
    acc: Mutex<Acc>,
    transitions: AtomicU64,
    ranks: Mutex<Vec<Arc<RankEntry>>>,
    /// `os[i]`: samples with `i` rank threads in state `R`.
    os: Mutex<Vec<u64>>,
    sampler: Mutex<Option<(Arc<AtomicBool>, JoinHandle<()>)>>,
}

thread_local! {
    /// The usage the calling rank thread reports to, and its state.
    static CURRENT: RefCell<Option<(Arc<ThreadUsage>, RankState)>> = const { RefCell::new(None) };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ThreadUsage {
    pub fn new() -> Arc<ThreadUsage> {
        Arc::new(ThreadUsage::default())
    }

    fn change(&self, from: Option<RankState>, to: Option<RankState>) {
        let mut a = lock(&self.acc);
        a.advance(Instant::now());
        if let Some(f) = from {
            a.counts[f as usize] = a.counts[f as usize].saturating_sub(1);
        }
        if let Some(t) = to {
            a.counts[t as usize] += 1;
        }
        drop(a);
        self.transitions.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts the calling thread as rank `rank`, computing, until the guard drops;
    /// opens its counters and notes its start times.
    pub fn register_rank(self: &Arc<Self>, rank: u32) -> RankGuard {
        let tid = current_tid();
        let entry = Arc::new(RankEntry {
            rank,
            tid,
            start: read_task(tid).ok(),
            counters: HwCounters::open(),
            done: Mutex::new(None),
        });
        lock(&self.ranks).push(entry.clone());
        self.change(None, Some(RankState::Computing));
        CURRENT.with(|c| *c.borrow_mut() = Some((self.clone(), RankState::Computing)));
        RankGuard { entry }
    }

    /// Samples the rank threads' kernel states every `period` until [`stop_sampler`]
    /// (or drop). A second call changes nothing.
    ///
    /// [`stop_sampler`]: ThreadUsage::stop_sampler
    pub fn start_sampler(self: &Arc<Self>, period: Duration) {
        let mut s = lock(&self.sampler);
        if s.is_some() {
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (me, flag) = (Arc::downgrade(self), stop.clone());
        let spawned = std::thread::Builder::new()
            .name("tlp-sampler".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    let Some(me) = me.upgrade() else { return };
                    me.sample_once();
                    drop(me);
                    std::thread::sleep(period);
                }
            });
        if let Ok(h) = spawned {
            *s = Some((stop, h));
        }
    }

    /// Stops the sampler thread, if one runs.
    pub fn stop_sampler(&self) {
        let s = lock(&self.sampler).take();
        if let Some((stop, h)) = s {
            stop.store(true, Ordering::Relaxed);
            let _ = h.join();
        }
    }

    /// Reads every live rank thread's kernel state once.
    pub fn sample_once(&self) {
        let live: Vec<i32> = lock(&self.ranks)
            .iter()
            .filter(|e| lock(&e.done).is_none())
            .map(|e| e.tid)
            .collect();
        if live.is_empty() {
            return;
        }
        let running = live
            .iter()
            .filter(|&&tid| task_state(tid).is_ok_and(|c| c == 'R'))
            .count();
        let mut os = lock(&self.os);
        if os.len() <= running {
            os.resize(running + 1, 0);
        }
        os[running] += 1;
    }

    /// Everything so far: histograms over the time rank threads existed, each rank's
    /// figures up to its end (or now, while it runs).
    pub fn snapshot(&self) -> ProcessUsage {
        let mut a = lock(&self.acc);
        a.advance(Instant::now());
        let w = a.window_ns.max(1) as f64;
        let share = |v: &[u64]| v.iter().map(|&x| x as f64 / w).collect::<Vec<f64>>();
        let (tlp, computing) = (share(&a.tlp_ns), share(&a.computing_ns));
        let rank_time: u128 = a.state_ns.iter().sum();
        let part = |i: usize| a.state_ns[i] as f64 / rank_time.max(1) as f64;
        let state = StateShare {
            computing: part(0),
            communication: part(1),
            other: part(2),
        };
        let seconds = a.window_ns as f64 / 1e9;
        drop(a);
        let os = lock(&self.os).clone();
        let os_samples: u64 = os.iter().sum();
        let ranks = lock(&self.ranks).clone();
        let mut per_rank: Vec<RankUsage> = ranks
            .iter()
            .map(|e| lock(&e.done).clone().unwrap_or_else(|| e.usage_now()))
            .collect();
        per_rank.sort_by_key(|r| r.rank);
        ProcessUsage {
            seconds,
            ranks: per_rank.len() as u32,
            tlp,
            computing,
            os_runnable: os
                .iter()
                .map(|&n| n as f64 / os_samples.max(1) as f64)
                .collect(),
            os_samples,
            share: state,
            transitions: self.transitions.load(Ordering::Relaxed),
            per_rank,
        }
    }
}

impl Drop for ThreadUsage {
    fn drop(&mut self) {
        self.stop_sampler();
    }
}

/// A rank thread's registration; dropping it ends the rank's window.
pub struct RankGuard {
    entry: Arc<RankEntry>,
}

impl Drop for RankGuard {
    fn drop(&mut self) {
        let usage = self.entry.usage_now();
        *lock(&self.entry.done) = Some(usage);
        if let Some((u, s)) = CURRENT.with(|c| c.borrow_mut().take()) {
            u.change(Some(s), None);
        }
    }
}

/// Puts the calling rank thread in `state` until the guard drops (nothing for threads
/// that are not registered ranks).
pub(crate) fn enter(state: RankState) -> StateGuard {
    let prev = CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        let (u, s) = c.as_mut()?;
        let prev = *s;
        if prev != state {
            u.change(Some(prev), Some(state));
            *s = state;
        }
        Some(prev)
    });
    StateGuard(prev)
}

pub(crate) struct StateGuard(Option<RankState>);

impl Drop for StateGuard {
    fn drop(&mut self) {
        if let Some(back) = self.0 {
            CURRENT.with(|c| {
                if let Some((u, s)) = c.borrow_mut().as_mut() {
                    if *s != back {
                        u.change(Some(*s), Some(back));
                        *s = back;
                    }
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (rank 3) x) S 1 4242 4242 0 -1 4194560 120 0 0 0 \
                        57 13 0 0 20 0 9 0 1000 1000000 300 18446744073709551615";
    const STATUS: &str = "Name:\trank-3\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t150\n\
                          nonvoluntary_ctxt_switches:\t7\n";

    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        assert_eq!(parse_stat(STAT), Ok(('S', 57, 13)));
        assert_eq!(parse_status(STATUS), Ok((150, 7)));
        assert_eq!(parse_schedstat("123456 7890 12\n"), Ok((123456, 7890)));
        assert!(parse_schedstat("123456").is_err());
        assert!(parse_schedstat("1 -2 3").unwrap_err().reason.contains("-2"));
    }

    #[test]
    fn malformed_proc_text_names_what_is_wrong() {
        assert!(parse_stat("12 no paren S 1")
            .unwrap_err()
            .reason
            .contains(')'));
        let short = parse_stat("1 (x) R 1 2 3").unwrap_err();
        assert!(short.reason.contains("13 needed"), "{short}");
        let bad = STAT.replace(" 57 ", " 5x7 ");
        assert!(parse_stat(&bad).unwrap_err().reason.contains("utime"));
        assert!(parse_stat(&STAT.replace(") S ", ") SS ")).is_err());
        let e = parse_status("voluntary_ctxt_switches:\t3\n").unwrap_err();
        assert!(e.reason.contains("nonvoluntary"), "{e}");
        assert!(
            parse_status("voluntary_ctxt_switches: many\nnonvoluntary_ctxt_switches: 1").is_err()
        );
    }

    /// Waits until `tid` shows `want`, up to a generous deadline; the state it last saw.
    fn state_becomes(tid: i32, want: char) -> char {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let s = task_state(tid).unwrap();
            if s == want || Instant::now() > until {
                return s;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_sleeping_thread_reads_as_sleeping_and_a_spinning_one_as_runnable() {
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let spinner = std::thread::spawn(move || {
            tx.send(current_tid()).unwrap();
            while !flag.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let spin_tid = rx.recv().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ttx, trx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            ttx.send(current_tid()).unwrap();
            let _ = rx.recv();
        });
        let sleep_tid = trx.recv().unwrap();
        assert_eq!(state_becomes(sleep_tid, 'S'), 'S');
        assert_eq!(state_becomes(spin_tid, 'R'), 'R');
        stop.store(true, Ordering::Relaxed);
        drop(tx);
        spinner.join().unwrap();
        sleeper.join().unwrap();
    }

    #[test]
    fn states_are_time_weighted_per_count_of_ranks() {
        let u = ThreadUsage::new();
        let (u1, u2) = (u.clone(), u.clone());
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (in_tx, in_rx) = std::sync::mpsc::channel::<()>();
        // Rank 0 blocks "in communication" until told; rank 1 computes meanwhile.
        let r0 = std::thread::spawn(move || {
            let _g = u1.register_rank(0);
            let _c = enter(RankState::Communication);
            in_tx.send(()).unwrap();
            let _ = go_rx.recv();
        });
        in_rx.recv().unwrap();
        let r1 = std::thread::spawn(move || {
            let _g = u2.register_rank(1);
            std::thread::sleep(Duration::from_millis(20));
        });
        r1.join().unwrap();
        go_tx.send(()).unwrap();
        r0.join().unwrap();
        let s = u.snapshot();
        assert_eq!(s.ranks, 2);
        assert!(s.transitions >= 6, "{}", s.transitions);
        // Never both ranks ready: rank 0 was in communication while rank 1 lived.
        assert_eq!(s.tlp_at_least(2), 0.0);
        assert!(
            s.tlp_at_least(1) > 0.0 && s.tlp_at_least(1) < 1.0,
            "{:?}",
            s.tlp
        );
        let t = s.share.computing + s.share.communication + s.share.other;
        assert!((t - 1.0).abs() < 1e-9, "{:?}", s.share);
        assert!(s.share.communication > 0.0);
        let total: f64 = s.tlp.iter().sum();
        assert!((total - 1.0).abs() < 1e-9, "{:?}", s.tlp);
        // Rank 1 used some CPU or was at least accounted (both ranks have entries).
        assert_eq!(
            s.per_rank.iter().map(|r| r.rank).collect::<Vec<_>>(),
            [0, 1]
        );
        // An unregistered thread changes nothing.
        let before = u.snapshot().transitions;
        drop(enter(RankState::Other));
        assert_eq!(u.snapshot().transitions, before);
    }

    #[test]
    fn the_sampler_sees_a_spinning_rank_as_runnable() {
        let u = ThreadUsage::new();
        let stop = Arc::new(AtomicBool::new(false));
        let (u1, flag) = (u.clone(), stop.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let rank = std::thread::spawn(move || {
            let _g = u1.register_rank(0);
            tx.send(current_tid()).unwrap();
            while !flag.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let tid = rx.recv().unwrap();
        state_becomes(tid, 'R');
        // A few explicit samples: the spinner is runnable in (nearly) all of them.
        for _ in 0..20 {
            u.sample_once();
        }
        stop.store(true, Ordering::Relaxed);
        rank.join().unwrap();
        let s = u.snapshot();
        assert_eq!(s.os_samples, 20);
        assert!(s.os_runnable_at_least(1) > 0.5, "{:?}", s.os_runnable);
    }

    #[test]
    fn counters_are_read_or_say_why_not() {
        let c = HwCounters::open();
        let mut x = 0u64;
        for i in 0..100_000u64 {
            x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        let r = c.read();
        match r.instructions {
            Some(n) => assert!(n > 100_000, "{n} instructions for a 100k-step loop"),
            None => assert!(
                r.unavailable.as_deref().is_some_and(|u| !u.is_empty()),
                "{r:?}"
            ),
        }
    }
}
