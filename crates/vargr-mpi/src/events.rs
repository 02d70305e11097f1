//! The C ABI between the wrappers (`c/wrappers.c`) and the Rust core, and the
//! vargr-trace records it writes. Every record is on the calling thread's track,
//! labelled `rank R` with the process's world rank.
//!
//! | what | collector | op | seq | peer | bytes | start..end |
//! |---|---|---|---|---|---|---|
//! | a message sent or received | `CTX/p2p` | send / recv | tag | world rank of the other end | sent; received (from the status) | send or receive call's entry .. its completion (in `MPI_Wait`/`MPI_Test*` for non-blocking ones) |
//! | a point-to-point call, probe | `CTX/send`, `CTX/irecv`, `CTX/probe`, ... | user | tag (the matched one once known) | peer's world rank (the matched source once known) | as above (receives: the buffer's size) | call entry .. return |
//! | a wait or test | `mpi/wait`, `mpi/waitall`, ... | user | requests given | – | – | call entry .. return |
//! | unsuccessful tests or probes of one kind (nothing completed, nothing found) since the thread's last recorded call, one record per kind when the thread next records or finalizes | `mpi/test-polls`, `mpi/testany-polls`, ..., `CTX/iprobe-polls` | user | how many | probes: the source asked for | – | the first one's entry .. the entry of the thread's next recorded call (a test or probe that finds something after a run is timed from its return) |
//! | a collective | `CTX/allreduce`, ... | call | call number on the communicator | root's world rank (rooted ones) | the larger of what this rank's buffers send and receive | call entry .. return |
//!
//! `CTX` is `ctx0` for `MPI_COMM_WORLD` and `ctxG.L` for another communicator, G a hash
//! of its group and L its lowest world rank ([`comm`]), so that all its members name it
//! alike (the trace analysis groups by name). Message records pair up in the analysis
//! as vargr's own do: the k-th send from A to B with a tag is the k-th receive of B from
//! A with it, MPI's non-overtaking rule.
//!
//! In memory a blocking send, or a blocking receive whose message filled its buffer, is
//! one record: the message's, marked [`ALSO_CALL`]; the trace file gets both records.
//! What a rank writes to memory per small message is most of what tracing costs it.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use vargr_coll::open_plane::{AgentSpec, JoinedAgent};
use vargr_trace::scope::ScopeReducer;
use vargr_trace::{EventOp, ForeignRing, Held, Record, ThreadTrace, Tracer};

use crate::settings::Settings;

/// The calling thread's ring as the wrappers write it (`vargr_mpi_ring` in C): records
/// go straight from C into the ring, one thread-local read and five stores each, the
/// wrappers keeping collector ids in a table of their own.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct WriterRing {
    pub ring: ForeignRing,
    /// The writer calls `vargr_mpi_drain` when `head & drain_mask` becomes 0, that is
    /// each time the ring passes another half of itself: the reader comes before the
    /// ring overwrites what was not read.
    pub drain_mask: u64,
}

/// Calls on no communicator (waits and tests).
pub const NO_COMM: u32 = u32::MAX;

/// In a message record's status: the record stands for its blocking call too, whose
/// kind is in the low bits (`ALSO_CALL` in c/wrappers.c).
pub const ALSO_CALL: u8 = 0x80;

/// The last part of each collector's name, in the order of the C enum.
pub const KINDS: [&str; 41] = [
    "p2p",
    "send",
    "ssend",
    "isend",
    "recv",
    "irecv",
    "sendrecv",
    "wait",
    "waitall",
    "waitany",
    "test",
    "testall",
    "probe",
    "iprobe",
    "barrier",
    "bcast",
    "reduce",
    "allreduce",
    "gather",
    "allgather",
    "scatter",
    "alltoall",
    "alltoallv",
    "bsend",
    "rsend",
    "ibsend",
    "issend",
    "irsend",
    "sendrecv_replace",
    "waitsome",
    "testany",
    "testsome",
    "mprobe",
    "improbe",
    "mrecv",
    "imrecv",
    "test-polls",
    "testany-polls",
    "testall-polls",
    "testsome-polls",
    "iprobe-polls",
];

/// Communicators with collectors of their own; later ones share the last slot. The
/// wrappers' table of collector ids has as many (`COMM_SLOTS` in c/wrappers.c).
const COMM_SLOTS: usize = 1024;

/// Records kept in memory per process before the oldest go (128 MiB): rings are
/// drained into it as they fill, and it is written at `MPI_Finalize`.
const HELD: usize = 4 << 20;
/// How long the monitor's agent sleeps when no pull comes.
const AGENT_IDLE: Duration = Duration::from_secs(1);
/// Records kept for the monitor's agent between its drains.
const MONITOR_HELD: usize = 1 << 20;
/// How long `MPI_Finalize` waits for the monitor's last pull of this rank's records
/// (it pulls once every `monitor.period_ms`).
const MONITOR_LINGER: Duration = Duration::from_secs(5);

struct State {
    rank: u32,
    process: String,
    /// Where the trace file goes; `None`: records only feed the monitor.
    dir: Option<PathBuf>,
    /// Context names by communicator id.
    contexts: Mutex<Vec<Option<String>>>,
    /// The communicator of each message collector (`CTX/p2p`), for [`State::expand`].
    p2p_comms: Mutex<HashMap<u16, u32>>,
    held: Mutex<Reader>,
    /// Half a ring, less one (a power of two less one): a thread drains its ring each
    /// time its count of records passes another half of it.
    drain_mask: u64,
    /// The live monitor's agent, if the run has one.
    agent: Mutex<Option<JoinedAgent>>,
}

/// The rings' one reader, and what it read for each consumer.
struct Reader {
    tracer: Tracer,
    /// For the trace file (when there is one).
    trace: Held,
    /// For the monitor's agent, until it drains them (when there is one).
    monitor: Option<Held>,
}

static STATE: OnceLock<State> = OnceLock::new();

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl State {
    fn slot(comm: u32) -> usize {
        match comm {
            NO_COMM => 0,
            c => (c as usize + 1).min(COMM_SLOTS - 1),
        }
    }

    fn context(&self, comm: u32) -> String {
        if comm == NO_COMM {
            return "mpi".into();
        }
        if Self::slot(comm) == COMM_SLOTS - 1 {
            return "ctx-more".into();
        }
        lock(&self.contexts)
            .get(comm as usize)
            .cloned()
            .flatten()
            .unwrap_or_else(|| format!("ctx{comm}"))
    }

    /// The collector of calls of `kind` on communicator `comm`, registered on first
    /// use (the wrappers keep the ids).
    fn collector(&self, comm: u32, kind: u16) -> u16 {
        let kind = usize::from(kind).min(KINDS.len() - 1);
        let id = vargr_trace::collector(&format!("{}/{}", self.context(comm), KINDS[kind]));
        if kind == 0 {
            lock(&self.p2p_comms).insert(id, comm);
        }
        id
    }

    /// Writes out the records a message stands for: one that carries [`ALSO_CALL`] is
    /// also its blocking call's record (kind in the low bits), with the same fields.
    fn expand(&self, threads: &mut [ThreadTrace]) {
        let carries = |r: &Record| {
            r.status & ALSO_CALL != 0
                && (r.op == EventOp::Send as u8 || r.op == EventOp::Recv as u8)
        };
        let comms = lock(&self.p2p_comms).clone();
        for t in threads {
            let n = t.records.iter().filter(|r| carries(r)).count();
            if n == 0 {
                continue;
            }
            let mut out = Vec::with_capacity(t.records.len() + n);
            for r in t.records.drain(..) {
                if !carries(&r) {
                    out.push(r);
                    continue;
                }
                let kind = u16::from(r.status & !ALSO_CALL);
                let comm = comms.get(&r.collector).copied().unwrap_or(NO_COMM);
                out.push(Record { status: 0, ..r });
                out.push(Record {
                    collector: self.collector(comm, kind),
                    op: EventOp::User as u8,
                    status: 0,
                    ..r
                });
            }
            t.records = out;
        }
    }

    /// Moves what every thread's ring holds into memory, for the trace file and the
    /// monitor: one reader, so the recording threads' own drains (when a ring is half
    /// full) keep the monitor's records too.
    fn drain(&self) {
        let mut h = lock(&self.held);
        let threads = h.tracer.read();
        if let Some(m) = &mut h.monitor {
            // The monitor of an MPI run analyses collective calls (load balance and
            // latency statistics): the other records are not kept for it.
            m.add(
                threads
                    .iter()
                    .map(|t| ThreadTrace {
                        records: t
                            .records
                            .iter()
                            .filter(|r| r.op == EventOp::Call as u8)
                            .copied()
                            .collect(),
                        label: t.label.clone(),
                        ..*t
                    })
                    .collect(),
            );
        }
        if self.dir.is_some() {
            h.trace.add(threads);
        }
    }

    /// The agent's drain: what the rings held since its last one, into its reducer.
    /// Returns how long the agent may sleep before draining again: until the next pull,
    /// since the recording threads drain their rings themselves (`record`) and an agent
    /// that woke up more often would take a core from the ranks each time.
    fn feed(&self, red: &mut ScopeReducer) -> Duration {
        self.drain();
        let threads = lock(&self.held)
            .monitor
            .as_mut()
            .map(Held::take)
            .unwrap_or_default();
        red.add(&Tracer::file_of(&self.process, threads));
        AGENT_IDLE
    }
}

/// Writes a line on stderr in one write: the ranks of a job share the stream, and a
/// line written in pieces interleaves with theirs.
pub(crate) fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// Starts recording for world rank `rank` of `size` into `settings.trace_dir`; returns
/// whether records are kept. `kinds` is the C side's count of [`KINDS`]: a library whose
/// two halves disagree records nothing rather than mislabel.
pub fn start(settings: &Settings, rank: u32, size: u32, kinds: usize, runs_on: &str) -> bool {
    if kinds != KINDS.len() {
        say(&format!(
            "vargr-mpi: the wrappers know {kinds} kinds of call, the Rust core {}: \
             rebuild libvargr_mpi.so; not tracing",
            KINDS.len()
        ));
        return false;
    }
    let monitor = match &settings.monitor {
        Ok(m) => m.clone(),
        Err(e) => {
            say(&format!("vargr-mpi: rank {rank}: {e}; not monitoring"));
            None
        }
    };
    let mut dir = settings.trace_dir.clone();
    if let Some(d) = &dir {
        if let Err(e) = std::fs::create_dir_all(d) {
            say(&format!(
                "vargr-mpi: rank {rank}: cannot make the trace directory {}: {e}; not tracing",
                d.display()
            ));
            dir = None;
        }
    }
    if dir.is_none() && monitor.is_none() {
        vargr_trace::set_enabled(false);
        return false;
    }
    let process = format!("rank {rank} of {size} ({runs_on})");
    let state = State {
        rank,
        process: process.clone(),
        dir,
        contexts: Mutex::new(vec![Some("ctx0".into())]),
        p2p_comms: Mutex::new(HashMap::new()),
        held: Mutex::new(Reader {
            tracer: Tracer::new(),
            trace: Held::new(HELD),
            monitor: monitor.as_ref().map(|_| Held::new(MONITOR_HELD)),
        }),
        drain_mask: (vargr_trace::ring_capacity().max(2).next_power_of_two() as u64 / 2) - 1,
        agent: Mutex::new(None),
    };
    if STATE.set(state).is_err() {
        // MPI is initialised once per process; a second start keeps the first.
        return STATE.get().is_some_and(|s| s.rank == rank);
    }
    vargr_trace::set_enabled(true);
    vargr_trace::set_thread_label(&format!("rank {rank}"), Some(rank));
    if let (Some(address), Some(st)) = (monitor, STATE.get()) {
        let agent = JoinedAgent::spawn(
            AgentSpec {
                address,
                rank,
                size,
                process,
            },
            Box::new(move |red| st.feed(red)),
        );
        *lock(&st.agent) = Some(agent);
    }
    true
}

/// Names communicator `id` (not the world's), the process's own index of it.
///
/// Its name is `ctxG.L`: G six hex digits of a hash of its group (the members' world
/// ranks; for an intercommunicator both groups), L its lowest world rank, and `-N` after
/// G for the N-th communicator over one group this process made (the wrappers name a
/// communicator as it is made; one made by a call they do not wrap, as it is first
/// used). Every member names it alike, so the analysis pairs its messages and joins its
/// collective calls.
pub fn comm(id: u32, low: u32, group: u32, nth: u32) {
    if let Some(st) = STATE.get() {
        let mut c = lock(&st.contexts);
        let i = id as usize;
        if i < COMM_SLOTS {
            if c.len() <= i {
                c.resize(i + 1, None);
            }
            let place = if nth == 0 {
                String::new()
            } else {
                format!("-{}", nth + 1)
            };
            c[i] = Some(format!("ctx{:06x}{place}.{low}", group & 0xff_ffff));
        }
    }
}

/// The calling thread's ring, its track labelled with the process's rank, if recording
/// started.
pub fn writer_ring() -> Option<WriterRing> {
    let st = STATE.get()?;
    Some(WriterRing {
        ring: vargr_trace::foreign_writer(st.rank),
        drain_mask: st.drain_mask,
    })
}

/// The collector id of calls of `kind` (an index into [`KINDS`]) on communicator `comm`
/// (or [`NO_COMM`]).
pub fn collector(comm: u32, kind: u16) -> u16 {
    match STATE.get() {
        Some(st) => st.collector(comm, kind),
        None => u16::MAX,
    }
}

/// Moves what the rings hold into memory (a writer's ring passed another half).
pub fn drain() {
    if let Some(st) = STATE.get() {
        st.drain();
    }
}

/// Lets the monitor pull this rank's last records, and writes its trace file (if
/// traced); returns the file's path.
pub fn finish() -> Result<Option<PathBuf>, vargr_trace::FileError> {
    let Some(st) = STATE.get() else {
        return Err(vargr_trace::FileError::Format {
            path: PathBuf::new(),
            what: "tracing never started".into(),
        });
    };
    if let Some(agent) = lock(&st.agent).take() {
        agent.finish(MONITOR_LINGER);
    }
    let Some(dir) = &st.dir else { return Ok(None) };
    st.drain();
    let mut threads = lock(&st.held).trace.take();
    st.expand(&mut threads);
    let file = Tracer::file_of(&st.process, threads);
    let path = dir.join(format!("{}-{:05}.vtr", file.host, st.rank));
    file.write(&path)?;
    Ok(Some(path))
}

// ---- the C ABI -------------------------------------------------------------------------

/// The trace clock (`vargr_trace::now`).
#[no_mangle]
pub extern "C" fn vargr_mpi_now() -> u64 {
    vargr_trace::now()
}

/// Called by `MPI_Init` once MPI runs: 1 if the wrappers should record.
///
/// # Safety
/// `built_for` and `runs_on` are NUL-terminated strings or NULL.
#[no_mangle]
pub unsafe extern "C" fn vargr_mpi_start(
    rank: c_int,
    size: c_int,
    kinds: c_int,
    built_for: *const c_char,
    runs_on: *const c_char,
) -> c_int {
    let text = |p: *const c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: the caller passes a NUL-terminated string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    let (_built_for, runs_on) = (text(built_for), text(runs_on));
    c_int::from(start(
        Settings::process(),
        u32::try_from(rank).unwrap_or(0),
        u32::try_from(size).unwrap_or(0),
        usize::try_from(kinds).unwrap_or(0),
        &runs_on,
    ))
}

/// A communicator seen for the first time.
#[no_mangle]
pub extern "C" fn vargr_mpi_comm(id: u32, low: u32, group: u32, nth: u32) {
    comm(id, low, group, nth);
}

/// The calling thread's ring into `out`: 1, or 0 (nothing written) if recording did not
/// start.
///
/// # Safety
/// `out` is NULL or points to a `WriterRing` the caller may write.
#[no_mangle]
pub unsafe extern "C" fn vargr_mpi_ring(out: *mut WriterRing) -> c_int {
    match (writer_ring(), out.is_null()) {
        (Some(r), false) => {
            // SAFETY: the caller passes a writable WriterRing.
            unsafe { out.write(r) };
            1
        }
        _ => 0,
    }
}

/// The collector id of calls of `kind` on communicator `comm` (`UINT32_MAX`: none).
#[no_mangle]
pub extern "C" fn vargr_mpi_collector(comm: u32, kind: u16) -> u16 {
    collector(comm, kind)
}

/// A writer's ring passed another half of itself.
#[no_mangle]
pub extern "C" fn vargr_mpi_drain() {
    drain();
}

/// Called by `MPI_Finalize`: writes the trace file, or says why it could not.
#[no_mangle]
pub extern "C" fn vargr_mpi_finish() {
    if let Err(e) = finish() {
        say(&format!("vargr-mpi: could not write the trace: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use vargr_trace::{EventOp, Record, TraceFile, NO_PEER};

    // One test: the state is per process, as MPI's is.
    #[test]
    fn events_become_named_records_in_the_ranks_trace_file() {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings {
            trace_dir: Some(dir.path().join("t")),
            codec: Ok(None),
            monitor: Ok(None),
        };
        assert!(!start(&settings, 2, 4, KINDS.len() - 1, "MPI"));
        assert!(start(&settings, 2, 4, KINDS.len(), "Some MPI v1"));
        comm(1, 2, 0xabc_def12, 0);
        comm(2, 2, 0xabc_def12, 1);
        // What the wrappers do for one record (c/wrappers.c, put()).
        let ring = writer_ring().expect("recording started");
        let put_as = |comm, kind: usize, op: EventOp, seq: u32, peer: u32, bytes: u64, status| {
            let words = Record {
                start: vargr_mpi_now(),
                end: vargr_mpi_now(),
                seq,
                bytes: bytes.min(u64::from(u32::MAX)) as u32,
                collector: vargr_mpi_collector(comm, kind as u16),
                op: op as u8,
                status,
                peer,
            }
            .to_words();
            let r = ring.ring;
            // SAFETY: this thread's ring, valid for the process's life; one writer.
            let h = unsafe {
                let h = (*r.head).load(Ordering::Relaxed);
                let slot = r.slots.add(((h & r.mask) * 4) as usize);
                for (k, w) in words.into_iter().enumerate() {
                    (*slot.add(k)).store(w, Ordering::Relaxed);
                }
                (*r.head).store(h + 1, Ordering::Release);
                h + 1
            };
            if h & ring.drain_mask == 0 {
                vargr_mpi_drain();
            }
        };
        let put = |comm, kind, op, seq, peer, bytes| put_as(comm, kind, op, seq, peer, bytes, 0);
        // A blocking send: one record for the message and the call (kind 1, send).
        put_as(0, 0, EventOp::Send, 7, 3, 4000, ALSO_CALL | 1);
        put(NO_COMM, 7, EventOp::User, 1, NO_PEER, 0);
        put(1, 17, EventOp::Call, 0, NO_PEER, 1 << 40);
        // More than a ring holds: draining keeps them all.
        let many = vargr_trace::ring_capacity() * 2;
        for i in 0..many {
            put(0, 14, EventOp::Call, i as u32, NO_PEER, 0);
        }
        let path = finish().unwrap().unwrap();
        assert_eq!(
            path.file_name().unwrap().to_str().unwrap(),
            format!("{}-00002.vtr", TraceFile::read(&path).unwrap().host)
        );
        let f = TraceFile::read(&path).unwrap();
        assert_eq!(f.process, "rank 2 of 4 (Some MPI v1)");
        let t: Vec<_> = f.threads.iter().filter(|t| t.rank == Some(2)).collect();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].label, "rank 2");
        assert_eq!(t[0].lost, 0);
        let recs = &t[0].records;
        assert_eq!(recs.len(), 4 + many);
        let name = |r: &Record| f.collectors[usize::from(r.collector)].as_str();
        assert_eq!(name(&recs[0]), "ctx0/p2p");
        assert_eq!((recs[0].seq, recs[0].peer, recs[0].bytes), (7, 3, 4000));
        assert_eq!(name(&recs[1]), "ctx0/send");
        assert_eq!(recs[1].op, EventOp::User as u8);
        assert_eq!((recs[1].seq, recs[1].peer, recs[1].bytes), (7, 3, 4000));
        assert_eq!((recs[0].status, recs[1].status), (0, 0));
        assert_eq!((recs[0].start, recs[0].end), (recs[1].start, recs[1].end));
        assert_eq!(name(&recs[2]), "mpi/wait");
        assert_eq!(name(&recs[3]), "ctxcdef12.2/allreduce");
        assert_eq!(STATE.get().unwrap().context(2), "ctxcdef12-2.2");
        assert_eq!(recs[3].bytes, u32::MAX, "bytes saturate");
        assert!(recs[4..].iter().all(|r| name(r) == "ctx0/barrier"));
        assert!(recs[4..].iter().enumerate().all(|(i, r)| r.seq == i as u32));
    }
}
