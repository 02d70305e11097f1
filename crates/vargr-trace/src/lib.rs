//! Always-on event collectors (EventSpace, seed 004): every stage boundary, filter call
//! and collective phase writes one 32-byte [`Record`] into a ring owned by the calling
//! thread, at a cost of tens of nanoseconds, so tracing never has to be switched on to
//! find out where time went. Monitors and exporters read the rings; when a ring is full
//! the oldest records go and readers are told how many they missed.
//!
//! - [`collector`] registers a named collector (e.g. `"coll/allreduce"`) and returns its
//!   id; [`record`] writes one event; [`now`] is the cheap clock to time it with.
//! - [`set_thread_label`] names the calling thread's track (e.g. its rank).
//! - [`Tracer::read`] pulls everything new from every ring of the process, and [`Held`]
//!   keeps what was pulled until it is written;
//!   [`TraceFile`] writes and reads the per-process trace files of `vargr run --trace`.
//! - [`set_enabled`] turns collectors off at run time (`VARGR_TRACE=off`, read by the
//!   front ends); the `off` feature compiles them out. [`set_ring_capacity`] sets
//!   records per thread (default 16384, 512 KiB; `VARGR_TRACE_RING`).

pub mod analysis;
pub mod clock;
pub mod diff;
pub mod export;
mod file;
mod held;
mod record;
pub mod report;
mod ring;
pub mod scope;
pub mod stages;
pub mod tree;
pub mod usage;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

pub use clock::{now, Alignment, Calibration, ClockPoint, SkewProbe};
pub use file::{write_atomic, FileError, ThreadTrace, TraceFile};
pub use held::Held;
pub use record::{EventOp, Record, NO_PEER};
pub use ring::{Batch, ForeignRing, Ring};

/// Records per thread ring unless `VARGR_TRACE_RING` says otherwise.
pub const DEFAULT_RING: usize = 16 * 1024;

/// One thread's ring and what it is.
pub struct ThreadRing {
    pub ring: Ring,
    pub label: Mutex<String>,
    /// Rank of the thread, when it runs one.
    pub rank: Mutex<Option<u32>>,
    /// The rank the track is labelled with (`u32::MAX`: none), read without the lock.
    labeled: std::sync::atomic::AtomicU32,
}

struct Registry {
    collectors: Mutex<(Vec<String>, HashMap<String, u16>)>,
    threads: Mutex<Vec<Arc<ThreadRing>>>,
    ring_size: usize,
    origin: ClockPoint,
    align: Mutex<Alignment>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| Registry {
        collectors: Mutex::new((Vec::new(), HashMap::new())),
        threads: Mutex::new(Vec::new()),
        ring_size: RING_CAPACITY.load(Ordering::Relaxed),
        origin: ClockPoint::now(),
        align: Mutex::new(Alignment::ROOT),
    })
}

/// Records per thread ring for rings made from now on ([`set_ring_capacity`]).
static RING_CAPACITY: AtomicUsize = AtomicUsize::new(DEFAULT_RING);

/// Sets how many records each thread's ring keeps. Takes effect only before the first
/// collector or ring exists (the front end calls it at start-up, from the
/// configuration); returns whether it did.
pub fn set_ring_capacity(records: usize) -> bool {
    let records = records.max(1);
    RING_CAPACITY.store(records, Ordering::Relaxed);
    // Made now if not yet, with this capacity; else it keeps the one it was made with.
    registry().ring_size == records
}

const ON: u8 = 1;
const OFF: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(ON);

/// Whether collectors record (on unless [`set_enabled`] turned them off, or the `off`
/// feature compiled them out).
#[inline(always)]
pub fn enabled() -> bool {
    if cfg!(feature = "off") {
        return false;
    }
    STATE.load(Ordering::Relaxed) == ON
}

/// Turns collectors on or off for the whole process (the configuration's
/// `trace.enabled`, `VARGR_TRACE=off`).
pub fn set_enabled(on: bool) {
    STATE.store(if on { ON } else { OFF }, Ordering::Relaxed);
}

/// The id of the collector named `name`, registering it on first use. Ids are small
/// and dense; call this once and keep the id (it takes a lock).
pub fn collector(name: &str) -> u16 {
    let mut c = lock(&registry().collectors);
    if let Some(&id) = c.1.get(name) {
        return id;
    }
    let id = u16::try_from(c.0.len()).unwrap_or(u16::MAX);
    if id == u16::MAX {
        // Out of ids: everything else shares the last one, named for what it is.
        return id;
    }
    c.0.push(name.to_string());
    c.1.insert(name.to_string(), id);
    id
}

/// Names of all collectors, by id.
pub fn collector_names() -> Vec<String> {
    lock(&registry().collectors).0.clone()
}

thread_local! {
    static MINE: std::cell::OnceCell<Arc<ThreadRing>> = const { std::cell::OnceCell::new() };
}

fn with_ring<R>(f: impl FnOnce(&ThreadRing) -> R) -> R {
    MINE.with(|m| {
        let t = m.get_or_init(|| {
            let reg = registry();
            let name = std::thread::current()
                .name()
                .map(String::from)
                .unwrap_or_else(|| format!("thread {:?}", std::thread::current().id()));
            let t = Arc::new(ThreadRing {
                ring: Ring::new(reg.ring_size),
                label: Mutex::new(name),
                rank: Mutex::new(None),
                labeled: std::sync::atomic::AtomicU32::new(u32::MAX),
            });
            lock(&reg.threads).push(t.clone());
            t
        });
        f(t)
    })
}

/// Writes one event to the calling thread's ring.
#[inline]
pub fn record(r: &Record) {
    if enabled() {
        with_ring(|t| t.ring.push(r));
    }
}

/// The calling thread's ring for a writer in another language (the C wrappers of
/// crates/vargr-mpi, whose every call would otherwise pay a call into Rust and a
/// dynamic thread-local lookup per record), its track labelled as rank `rank` first
/// unless it is.
///
/// The ring stays valid for the life of the process (the registry never drops one), so
/// the writer may keep it in its own thread-local storage. Only the calling thread may
/// write it, as [`Ring::push`] does: the record's four words ([`Record::to_words`]) into
/// slot `head & mask` with relaxed stores, then `head + 1` with a release store.
pub fn foreign_writer(rank: u32) -> ForeignRing {
    with_ring(|t| {
        if t.labeled.load(Ordering::Relaxed) != rank {
            label(t, &format!("rank {rank}"), Some(rank));
            LABELED.with(|l| l.set(rank));
        }
        t.ring.foreign()
    })
}

/// Records the calling thread has written so far (benchmarks count events per call).
pub fn thread_records() -> u64 {
    with_ring(|t| t.ring.written())
}

/// Names the calling thread's track and the rank it runs.
pub fn set_thread_label(name: &str, rank: Option<u32>) {
    LABELED.with(|l| l.set(rank.unwrap_or(u32::MAX)));
    with_ring(|t| label(t, name, rank));
}

fn label(t: &ThreadRing, name: &str, rank: Option<u32>) {
    *lock(&t.label) = name.to_string();
    *lock(&t.rank) = rank;
    t.labeled.store(rank.unwrap_or(u32::MAX), Ordering::Relaxed);
}

thread_local! {
    /// The rank the calling thread's track is labelled with (`u32::MAX`: none).
    static LABELED: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
}

/// Labels the calling thread's track as rank `rank` unless it already is: called by
/// every collective, so that ranks whose threads no launcher labelled (a Python or C
/// program's main thread) appear in traces and monitors as what they are. Costs a
/// thread-local read once labelled.
pub fn ensure_rank_label(rank: u32) {
    if LABELED.with(|l| l.get()) != rank {
        set_thread_label(&format!("rank {rank}"), Some(rank));
    }
}

/// Records how this process's clock relates to the root's (see [`clock`]); trace files
/// written from now on carry it.
pub fn set_alignment(a: Alignment) {
    *lock(&registry().align) = a;
}

/// This process's clock alignment ([`Alignment::ROOT`] until one is set).
pub fn alignment() -> Alignment {
    *lock(&registry().align)
}

/// Reads every thread ring of this process, remembering where each reader stopped.
#[derive(Default)]
pub struct Tracer {
    cursors: HashMap<usize, u64>,
}

impl Tracer {
    pub fn new() -> Tracer {
        Tracer::default()
    }

    /// Everything new since the last call, per thread.
    pub fn read(&mut self) -> Vec<ThreadTrace> {
        let threads: Vec<Arc<ThreadRing>> = lock(&registry().threads).clone();
        threads
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let cur = self.cursors.entry(i).or_insert(0);
                let b = t.ring.read_from(*cur);
                *cur = b.next;
                ThreadTrace {
                    label: lock(&t.label).clone(),
                    rank: *lock(&t.rank),
                    lost: b.lost,
                    records: b.records,
                }
            })
            .collect()
    }

    /// A trace file of everything new, with the clock calibration and collector names.
    pub fn snapshot(&mut self, process: &str) -> TraceFile {
        let threads = self.read();
        Tracer::file_of(process, threads)
    }

    /// A trace file of `threads` with this process's calibration and collector names.
    pub fn file_of(process: &str, threads: Vec<ThreadTrace>) -> TraceFile {
        TraceFile {
            process: process.to_string(),
            host: hostname(),
            pid: std::process::id(),
            clock: Calibration {
                first: registry().origin,
                last: ClockPoint::now(),
            },
            align: alignment(),
            collectors: collector_names(),
            threads,
            usage: None,
        }
    }
}

/// Records each thread's ring holds.
pub fn ring_capacity() -> usize {
    registry().ring_size
}

fn hostname() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| gethostname::gethostname().to_string_lossy().into_owned())
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_of_every_thread_reach_the_tracer() {
        let id = collector("test/records");
        assert_eq!(collector("test/records"), id);
        let mut tracer = Tracer::new();
        let _ = tracer.read();
        let t = std::thread::Builder::new()
            .name("worker".into())
            .spawn(move || {
                set_thread_label("rank 3", Some(3));
                for i in 0..10 {
                    let s = now();
                    record(&Record {
                        start: s,
                        end: now(),
                        seq: i,
                        bytes: 8,
                        collector: id,
                        op: EventOp::Call as u8,
                        status: 0,
                        peer: NO_PEER,
                    });
                }
            })
            .unwrap();
        t.join().unwrap();
        let got = tracer.read();
        let mine: Vec<_> = got.iter().filter(|t| t.rank == Some(3)).collect();
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].label, "rank 3");
        assert_eq!(mine[0].records.len(), 10);
        assert!(mine[0].records.iter().all(|r| r.end >= r.start));
        // A second read sees nothing new.
        assert!(tracer
            .read()
            .iter()
            .all(|t| t.rank != Some(3) || t.records.is_empty()));
    }
}
