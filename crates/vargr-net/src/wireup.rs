//! Job wire-up: who am I, how many are we, and where does everyone listen.
//!
//! A parallel job's ranks are started by `vargr run`, `mpirun`, `srun` or a batch script.
//! Each finds its rank and the job size in the variables its launcher sets, binds a
//! listener, and meets the others at a rendezvous that collects every rank's address,
//! host and site and hands the whole table back (the part of PMI vargr needs). The
//! rendezvous is run by `vargr run` (its address in `VARGR_JOB`), or, when another
//! launcher started the job, by rank 0, which publishes it in a file (mode 0600, with
//! the job's secret) in the user's private runtime directory (see
//! [`crate::runtime_dir`]: a file anyone else could have written would let them pose as
//! rank 0) that the other ranks read. Every exchange is authenticated.
//!
//! After wire-up the rendezvous keeps each process's connection and sends heartbeats on
//! it ([`Liveness`]): a process that stops answering (stopped, hung) ends the job with
//! its rank named, instead of leaving the others waiting for it for ever.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vargr_wire::{Frame, FrameKind};

use crate::auth::{self, Secret};
use crate::gate::{Gate, GateConfig};
use crate::runtime_dir::{self, RuntimeDir};
use crate::{Addr, LinkSecurity, Listener, NetError, SecureConn};

/// Rank variables in the order they are tried: vargr's own, then Open MPI, PMIx, PMI
/// (MPICH, Intel MPI) and Slurm.
pub const RANK_VARIABLES: [&str; 5] = [
    "VARGR_RANK",
    "OMPI_COMM_WORLD_RANK",
    "PMIX_RANK",
    "PMI_RANK",
    "SLURM_PROCID",
];
/// Job-size variables, in the same order.
pub const SIZE_VARIABLES: [&str; 4] = [
    "VARGR_SIZE",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "SLURM_NTASKS",
];

/// This process's place in its job, as its launcher described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnv {
    pub rank: u32,
    pub size: u32,
    /// Ranks this process hosts as threads (`--ranks-per-process`): `rank..rank+local`.
    pub local: u32,
    pub host: String,
    /// Site label (a cluster, a data centre) from `VARGR_SITE`.
    pub site: Option<String>,
}

/// One rank as every other rank sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    pub rank: u32,
    pub addr: Addr,
    pub host: String,
    pub site: Option<String>,
    /// Cores of the rank's machine, as its process sees them: with the ranks per host
    /// this tells how oversubscribed the machine is, which changes the best algorithms.
    pub cores: u32,
}

/// Cores this process may run on.
pub fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// The first of `vars` that is set, with its value.
fn env_first(vars: &[&'static str]) -> Option<(&'static str, String)> {
    vars.iter()
        .find_map(|v| std::env::var(v).ok().map(|x| (*v, x)))
}

fn parse_var(var: &str, value: &str) -> Result<u32, NetError> {
    value.trim().parse().map_err(|_| NetError::Job {
        reason: format!("{var}={value:?} is not a whole number"),
    })
}

/// The rank variable alone (attach mode needs no size).
pub fn rank_from_env() -> Result<u32, NetError> {
    let (var, v) = env_first(&RANK_VARIABLES).ok_or_else(|| NetError::Job {
        reason: format!(
            "this process's rank is unknown: none of {} is set (start it with vargr run, mpirun or srun)",
            RANK_VARIABLES.join(", ")
        ),
    })?;
    parse_var(var, &v)
}

impl JobEnv {
    /// Reads rank, size, ranks per process, host and site from the environment.
    pub fn from_env() -> Result<JobEnv, NetError> {
        let rank = rank_from_env()?;
        let (var, v) = env_first(&SIZE_VARIABLES).ok_or_else(|| NetError::Job {
            reason: format!(
                "the job size is unknown: none of {} is set",
                SIZE_VARIABLES.join(", ")
            ),
        })?;
        let size = parse_var(var, &v)?;
        let local = match std::env::var("VARGR_RANKS_PER_PROCESS") {
            Ok(k) => parse_var("VARGR_RANKS_PER_PROCESS", &k)?.max(1),
            Err(_) => 1,
        };
        let env = JobEnv {
            rank,
            size,
            local,
            host: crate::launch::hostname(),
            site: std::env::var("VARGR_SITE").ok().filter(|s| !s.is_empty()),
        };
        env.check()?;
        Ok(env)
    }

    /// Whether every rank of the job runs on this host, as far as the launcher says:
    /// then ranks talk over Unix sockets instead of TCP.
    pub fn single_host(&self) -> bool {
        let var = |k: &str| std::env::var(k).ok();
        if let Some(job) = var("VARGR_JOB") {
            return job.starts_with("unix:")
                || job.starts_with("tcp:127.")
                || job.starts_with("tcp:localhost:");
        }
        if let Some(local) = var("OMPI_COMM_WORLD_LOCAL_SIZE") {
            return local.parse::<u32>().ok() == Some(self.size);
        }
        if let Some(nodes) = var("SLURM_NNODES").or_else(|| var("SLURM_JOB_NUM_NODES")) {
            return nodes == "1";
        }
        false
    }

    fn check(&self) -> Result<(), NetError> {
        if self.size == 0 || self.rank.saturating_add(self.local) > self.size {
            return Err(NetError::Job {
                reason: format!(
                    "ranks {}..{} do not fit a job of {} ranks",
                    self.rank,
                    self.rank.saturating_add(self.local),
                    self.size
                ),
            });
        }
        Ok(())
    }
}

/// Where the rendezvous is and the secret that opens it.
#[derive(Debug, Clone)]
pub struct RendezvousSpec {
    pub addr: Addr,
    pub secret: Secret,
}

/// Writes `addr` and `secret` to `path` (owner-only, replaced atomically), the form
/// [`read_rendezvous_file`] reads. The contents go to a new file beside it, created with
/// `O_EXCL | O_NOFOLLOW` (nothing planted there is written into), then renamed over
/// `path` (a rename replaces a link, it does not follow it).
pub fn write_rendezvous_file(path: &Path, addr: &Addr, secret: &Secret) -> Result<(), NetError> {
    use std::io::Write;
    let err = |e| NetError::io("writing the rendezvous file", path.display(), e);
    let mut r = [0u8; 6];
    getrandom::getrandom(&mut r).map_err(|e| NetError::Job {
        reason: format!("no randomness for a temporary file name: {e}"),
    })?;
    let suffix: String = r.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = path.with_extension(format!("tmp{}-{suffix}", std::process::id()));
    let mut f = runtime_dir::create_new_private(&tmp)?;
    let written = writeln!(f, "{addr}\n{}", secret.to_hex())
        .and_then(|()| f.sync_all())
        // Renamed into place so a reader never sees half a file.
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(err)
}

/// Reads a rendezvous file: the address on the first line, the secret on the second.
/// Only a regular file of this user's that nobody else can write is believed: the file
/// decides whom this process trusts.
pub fn read_rendezvous_file(path: &Path) -> Result<RendezvousSpec, NetError> {
    use std::io::Read;
    let mut text = String::new();
    runtime_dir::open_private(path)?
        .read_to_string(&mut text)
        .map_err(|e| NetError::io("reading the rendezvous file", path.display(), e))?;
    let mut lines = text.lines().map(str::trim);
    let bad = |reason: &str| NetError::Job {
        reason: format!("rendezvous file {}: {reason}", path.display()),
    };
    let addr = lines
        .next()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| bad("empty (expected an address, then the secret)"))?;
    let secret = lines
        .next()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| bad("no secret on its second line"))?;
    Ok(RendezvousSpec {
        addr: addr.parse()?,
        secret: Secret::from_hex(secret)?,
    })
}

/// Resolves a rendezvous given as an address (secret from `VARGR_SECRET`) or `file:PATH`.
pub fn resolve_rendezvous(spec: &str) -> Result<RendezvousSpec, NetError> {
    match spec.strip_prefix("file:") {
        Some(path) => read_rendezvous_file(Path::new(path)),
        None => Ok(RendezvousSpec {
            addr: spec.parse()?,
            secret: crate::launch::secret_from_env()?,
        }),
    }
}

/// Where rank 0 publishes the rendezvous when no `VARGR_JOB` is given: a file named
/// after the launcher's job id in the user's runtime directory `dir` (shared by the
/// ranks of one host, and by nobody else; set `VARGR_JOB=file:PATH` on a shared file
/// system for several hosts).
pub fn default_job_file(dir: &RuntimeDir) -> Result<PathBuf, NetError> {
    let id = [
        "OMPI_MCA_ess_base_jobid",
        "PMIX_NAMESPACE",
        "SLURM_JOB_ID",
        "PMI_KVSNAME",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok())
    .ok_or_else(|| NetError::Job {
        reason: "no rendezvous: set VARGR_JOB (vargr run does), or start under mpirun or srun"
            .into(),
    })?;
    let safe: String = id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let step = std::env::var("SLURM_STEP_ID").unwrap_or_default();
    Ok(dir.join(format!("job-{safe}{step}.rendezvous")))
}

/// How a job checks that its processes are alive.
///
/// Why: a stopped or hung process never closes its sockets, so the ranks waiting for it
/// would wait for ever. Trees send heartbeats on their links; a job's mesh has no thread
/// of its own to send them (the ranks drive its sockets), so the job's rendezvous keeps
/// each process's connection after wire-up and exchanges heartbeats on it from a thread
/// of its own on both sides. A process that stops answering ends the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// Pause between the rendezvous's heartbeats to each process.
    pub heartbeat: Duration,
    /// How long a process may leave a heartbeat unanswered before the job ends.
    pub timeout: Duration,
}

impl Default for Liveness {
    /// A heartbeat a second, four seconds of silence: like a tree's detection (about
    /// 3.7 s), and long enough for a process that is descheduled on a busy machine.
    fn default() -> Self {
        Liveness {
            heartbeat: Duration::from_secs(1),
            timeout: Duration::from_secs(4),
        }
    }
}

/// A process that stopped answering the rendezvous's heartbeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Silent {
    /// Its first rank, and how many it hosts.
    pub first: u32,
    pub count: u32,
    pub pid: u32,
    pub host: String,
    pub silent_for: Duration,
}

impl std::fmt::Display for Silent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.count == 1 {
            write!(f, "rank {}", self.first)?;
        } else {
            write!(f, "ranks {}..{}", self.first, self.first + self.count)?;
        }
        write!(
            f,
            " (pid {} on {}) sent nothing for {:.1} s",
            self.pid,
            self.host,
            self.silent_for.as_secs_f64()
        )
    }
}

/// What the rendezvous's watchers learned, shared with its owner.
#[derive(Default)]
struct WatchState {
    stop: std::sync::atomic::AtomicBool,
    /// Why the job ends, once a process went silent: told to every other process.
    abort: std::sync::Mutex<Option<String>>,
    /// The first process that went silent.
    silent: std::sync::Mutex<Option<Silent>>,
    /// When each process's connection closed, by its first rank: the order in which
    /// processes died (a killed rank closes before the ranks that notice it).
    closed: std::sync::Mutex<BTreeMap<u32, Instant>>,
}

/// A rendezvous serving one job of `size` ranks: collects every rank's entry, then
/// answers each with the whole table. Runs on its own thread until all are served;
/// with a [`Liveness`], then watches every process until dropped.
pub struct JobRendezvous {
    pub addr: Addr,
    thread: Option<JoinHandle<Result<(), NetError>>>,
    stop: mpsc::Sender<()>,
    watch: std::sync::Arc<WatchState>,
}

impl JobRendezvous {
    pub fn start(
        listener: Listener,
        advertised: Addr,
        size: u32,
        secret: Secret,
        timeout: Duration,
        liveness: Option<Liveness>,
    ) -> JobRendezvous {
        let (stop, stopped) = mpsc::channel();
        let watch = std::sync::Arc::new(WatchState::default());
        let w = watch.clone();
        let thread = std::thread::Builder::new()
            .name("vargr-job-rendezvous".into())
            .spawn(move || serve_job(listener, size, secret, timeout, stopped, liveness, w))
            .expect("spawning the job rendezvous thread");
        JobRendezvous {
            addr: advertised,
            thread: Some(thread),
            stop,
            watch,
        }
    }

    /// Waits until every rank got the table (or the rendezvous failed). The watchers
    /// go on until the rendezvous is dropped.
    pub fn join(&mut self) -> Result<(), NetError> {
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(NetError::Job {
                reason: "the rendezvous thread panicked".into(),
            }),
            None => Ok(()),
        }
    }

    /// The first process that stopped answering heartbeats, if any did.
    pub fn silent(&self) -> Option<Silent> {
        lock(&self.watch.silent).clone()
    }

    /// When the connection of the process whose first rank is `first` closed, if it has.
    pub fn closed_at(&self, first: u32) -> Option<Instant> {
        lock(&self.watch.closed).get(&first).copied()
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for JobRendezvous {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        self.watch
            .stop
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A process's connection to the rendezvous, kept for heartbeats.
struct Watched {
    conn: SecureConn,
    first: u32,
    count: u32,
    pid: u32,
    host: String,
}

/// The rendezvous's side of one process's heartbeats: ask, wait for the answer, pause.
/// Silence past the timeout ends the job: recorded for the owner, told to the others.
fn watch_process(mut w: Watched, liveness: Liveness, state: std::sync::Arc<WatchState>) {
    use std::sync::atomic::Ordering;
    let ask = format!(
        "{} {}",
        liveness.heartbeat.as_millis(),
        liveness.timeout.as_millis()
    );
    loop {
        w.conn.set_timeout(Some(liveness.timeout));
        if state.stop.load(Ordering::Relaxed) {
            return;
        }
        if let Some(reason) = lock(&state.abort).clone() {
            let _ = w
                .conn
                .write_frame(&Frame::new(FrameKind::Refused, 0, 0, reason));
            return;
        }
        let asked = Instant::now();
        let sent = w
            .conn
            .write_frame(&Frame::new(FrameKind::Heartbeat, 0, 0, ask.clone()));
        let answer = sent.and_then(|()| w.conn.read_frame(4096));
        match answer {
            Ok(_) => {}
            Err(NetError::Timeout { .. }) if !state.stop.load(Ordering::Relaxed) => {
                let silent = Silent {
                    first: w.first,
                    count: w.count,
                    pid: w.pid,
                    host: w.host.clone(),
                    silent_for: asked.elapsed(),
                };
                let mut first = lock(&state.silent);
                if first.is_none() {
                    lock(&state.abort).get_or_insert_with(|| silent.to_string());
                    *first = Some(silent);
                }
                return;
            }
            // Closed: the process ended, and its launcher tells how.
            Err(_) => {
                lock(&state.closed).insert(w.first, Instant::now());
                return;
            }
        }
        // The pause is spent reading, in short slices: the process sends nothing
        // unasked, so what ends a read early is its connection closing, which is then
        // timed when it happens (the owner orders failures by it); and between slices
        // an abort reaches this process promptly.
        let next = asked + liveness.heartbeat;
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() || state.stop.load(Ordering::Relaxed) || lock(&state.abort).is_some()
            {
                break;
            }
            w.conn
                .set_timeout(Some(left.min(Duration::from_millis(50))));
            match w.conn.read_frame(4096) {
                Ok(_) | Err(NetError::Timeout { .. }) => {}
                Err(_) => {
                    lock(&state.closed).insert(w.first, Instant::now());
                    return;
                }
            }
        }
    }
}

fn serve_job(
    listener: Listener,
    size: u32,
    secret: Secret,
    timeout: Duration,
    stopped: mpsc::Receiver<()>,
    liveness: Option<Liveness>,
    watch: std::sync::Arc<WatchState>,
) -> Result<(), NetError> {
    let deadline = Instant::now() + timeout;
    let gate = Gate::open(
        listener,
        secret,
        GateConfig::default(),
        Box::new(|e| tracing::warn!("job rendezvous refused a connection: {e}")),
    );
    let mut entries: BTreeMap<u32, (PeerInfo, u32)> = BTreeMap::new();
    let mut seen = vec![false; size as usize];
    let mut waiting: Vec<(SecureConn, u32)> = Vec::new();
    // Who is at the other end of each waiting connection, by its first rank.
    let mut pids: BTreeMap<u32, u32> = BTreeMap::new();
    let mut covered = 0u32;
    while covered < size {
        if stopped.try_recv().is_ok() {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            let missing: Vec<u32> = (0..size).filter(|&r| !seen[r as usize]).collect();
            let reason = format!(
                "ranks {missing:?} of {size} never reached the rendezvous within {} s",
                timeout.as_secs()
            );
            for (mut c, _) in waiting {
                let _ = c.write_frame(&Frame::new(FrameKind::Refused, 0, 0, reason.clone()));
            }
            return Err(NetError::Job { reason });
        }
        let mut conn = match gate.accept_timeout((deadline - now).min(Duration::from_millis(100))) {
            Ok(a) => a.conn,
            Err(NetError::Timeout { .. }) => continue,
            Err(e) => return Err(e),
        };
        conn.set_timeout(Some(Duration::from_secs(10)));
        let hello = conn.read_frame(64 << 10).and_then(|f| parse_hello(&f));
        let refuse = |mut c: SecureConn, why: String| {
            let _ = c.write_frame(&Frame::new(FrameKind::Refused, 0, 0, why));
        };
        match hello {
            Ok((info, _, claimed_size, _)) if claimed_size != size => refuse(
                conn,
                format!(
                    "rank {} thinks the job has {claimed_size} ranks, the rendezvous serves {size}",
                    info.rank
                ),
            ),
            Ok((info, local, _, pid)) => {
                let clash = (info.rank..info.rank + local).find(|&r| seen[r as usize]);
                if let Some(r) = clash {
                    refuse(
                        conn,
                        format!("rank {r} joined twice: check the launcher's rank variables"),
                    );
                    continue;
                }
                covered += local;
                for r in info.rank..info.rank + local {
                    seen[r as usize] = true;
                }
                pids.insert(info.rank, pid);
                let first = info.rank;
                entries.insert(info.rank, (info, local));
                conn.set_timeout(Some(timeout));
                waiting.push((conn, first));
            }
            Err(e) => refuse(conn, e.to_string()),
        }
    }
    let table = encode_table(entries.values());
    let mut served = Vec::with_capacity(waiting.len());
    for (mut c, first) in waiting {
        c.write_frame(&Frame::new(FrameKind::AttachReply, 0, 0, table.clone()))?;
        served.push((c, first));
    }
    // Without heartbeats the connections close here, which the processes take for
    // "nothing to watch".
    if let Some(liveness) = liveness {
        for (conn, first) in served {
            let (info, count) = &entries[&first];
            let w = Watched {
                conn,
                first,
                count: *count,
                pid: pids.get(&first).copied().unwrap_or(0),
                host: info.host.clone(),
            };
            let state = watch.clone();
            std::thread::Builder::new()
                .name("vargr-job-watch".into())
                .spawn(move || watch_process(w, liveness, state))
                .map_err(|e| NetError::io("spawning", "a heartbeat thread", e))?;
        }
    }
    Ok(())
}

/// Hello: `rank size local addr host site cores pid` on one line (site `-` when none).
fn encode_hello(env: &JobEnv, addr: &Addr) -> String {
    format!(
        "{} {} {} {} {} {} {} {}",
        env.rank,
        env.size,
        env.local,
        addr,
        env.host,
        env.site.as_deref().unwrap_or("-"),
        cores(),
        std::process::id()
    )
}

/// The hello's entry, ranks hosted, claimed job size and process id.
fn parse_hello(f: &Frame) -> Result<(PeerInfo, u32, u32, u32), NetError> {
    let bad = |why: &str| NetError::Job {
        reason: format!("malformed hello: {why}"),
    };
    if f.kind != FrameKind::Attach {
        return Err(bad("wrong frame kind"));
    }
    let text = std::str::from_utf8(&f.payload).map_err(|_| bad("not UTF-8"))?;
    let w: Vec<&str> = text.split_whitespace().collect();
    if w.len() != 8 {
        return Err(bad("expected 8 fields"));
    }
    let num = |s: &str| {
        s.parse::<u32>()
            .map_err(|_| bad("a number is not a number"))
    };
    let (rank, size, local) = (num(w[0])?, num(w[1])?, num(w[2])?.max(1));
    if rank.saturating_add(local) > size {
        return Err(bad("ranks beyond the job size"));
    }
    Ok((
        PeerInfo {
            rank,
            addr: w[3].parse()?,
            host: w[4].into(),
            site: (w[5] != "-").then(|| w[5].to_string()),
            cores: num(w[6])?.max(1),
        },
        local,
        size,
        num(w[7])?,
    ))
}

/// The table: one line per rank, `rank addr host site cores`; ranks hosted by one
/// process share its address.
fn encode_table<'a>(entries: impl Iterator<Item = &'a (PeerInfo, u32)>) -> String {
    let mut out = String::new();
    for (p, local) in entries {
        for r in p.rank..p.rank + local {
            out.push_str(&format!(
                "{r} {} {} {} {}\n",
                p.addr,
                p.host,
                p.site.as_deref().unwrap_or("-"),
                p.cores
            ));
        }
    }
    out
}

fn parse_table(text: &[u8], size: u32) -> Result<Vec<PeerInfo>, NetError> {
    let bad = |why: String| NetError::Job {
        reason: format!("malformed rank table from the rendezvous: {why}"),
    };
    let text = std::str::from_utf8(text).map_err(|_| bad("not UTF-8".into()))?;
    let mut peers = Vec::with_capacity(size as usize);
    for (i, line) in text.lines().enumerate() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let cores = w.get(4).and_then(|c| c.parse::<u32>().ok());
        if w.len() != 5 || w[0].parse::<u32>().ok() != Some(i as u32) || cores.is_none() {
            return Err(bad(format!("line {}: {line:?}", i + 1)));
        }
        peers.push(PeerInfo {
            rank: i as u32,
            addr: w[1].parse()?,
            host: w[2].into(),
            site: (w[3] != "-").then(|| w[3].to_string()),
            cores: cores.unwrap_or(1).max(1),
        });
    }
    if peers.len() != size as usize {
        return Err(bad(format!(
            "{} ranks listed, expected {size}",
            peers.len()
        )));
    }
    Ok(peers)
}

/// Registers this process's ranks (listening at `addr`) and returns every rank's entry,
/// in rank order, once all have registered, with the connection to the rendezvous (kept
/// for heartbeats; see [`JobWatch`]).
pub fn wire_up(
    env: &JobEnv,
    addr: &Addr,
    rv: &RendezvousSpec,
    timeout: Duration,
) -> Result<(Vec<PeerInfo>, JobWatch), NetError> {
    let peer = format!("the job rendezvous at {}", rv.addr);
    let conn = crate::connect(&rv.addr, timeout)?;
    let mut conn = auth::connect(
        conn,
        &rv.secret,
        env.rank,
        LinkSecurity::Auto,
        timeout,
        &peer,
    )?;
    conn.set_timeout(Some(timeout));
    let hello = Frame::new(FrameKind::Attach, 0, 0, encode_hello(env, addr));
    conn.write_frame(&hello)?;
    let f = conn.read_frame(64 << 20)?;
    match f.kind {
        FrameKind::AttachReply => Ok((
            parse_table(&f.payload, env.size)?,
            JobWatch {
                conn: Some(conn),
                // Generous: the first heartbeat follows the table at once, unless the
                // machine is very busy; a rendezvous without heartbeats closes instead.
                first_wait: timeout.max(Duration::from_secs(10)),
                hosted: None,
            },
        )),
        FrameKind::Refused => Err(NetError::Refused {
            peer,
            reason: String::from_utf8_lossy(&f.payload).into_owned(),
        }),
        k => Err(NetError::Job {
            reason: format!("{peer} answered with {}", k.name()),
        }),
    }
}

/// Settings of a job's wire-up, handed down from the program (nothing here is read
/// from the environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSettings {
    /// How long the ranks have to reach the rendezvous.
    pub timeout: Duration,
    /// Heartbeats of the rendezvous this process hosts (rank 0 under mpirun or srun);
    /// under `vargr run` the rendezvous is `vargr run`'s, with its own settings.
    pub liveness: Liveness,
    /// The user's private directory for the rendezvous file and Unix sockets, opened
    /// (created 0700 and checked) when first needed.
    pub runtime_dir: PathBuf,
    /// Messages between processes of one host go through shared memory (when the whole
    /// job is on one host); false keeps them on the sockets.
    pub shm: bool,
}

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            timeout: Duration::from_secs(60),
            liveness: Liveness::default(),
            runtime_dir: runtime_dir::default_path(),
            shm: true,
        }
    }
}

/// This process's end of the job's heartbeats: the connection to the rendezvous, and
/// the rendezvous itself when this process hosts it. Dropping it leaves the job's
/// watch (the rendezvous sees the connection close, as when the process exits).
pub struct JobWatch {
    conn: Option<SecureConn>,
    /// How long to wait for the rendezvous's first heartbeat.
    first_wait: Duration,
    hosted: Option<JobRendezvous>,
}

/// Keeps a started [`JobWatch`] going; dropping it stops the hosted rendezvous's
/// watchers (the heartbeat thread itself ends with the connection).
pub struct WatchGuard {
    _hosted: Option<JobRendezvous>,
}

impl JobWatch {
    /// Answers the rendezvous's heartbeats on a thread of its own, and calls `on_lost`
    /// with the reason if the job ends: the rendezvous said so (another process went
    /// silent) or went silent itself. A rendezvous that closes the connection has
    /// finished (`vargr run` ended, or the process hosting it exited): no call.
    pub fn start(mut self, on_lost: Box<dyn FnOnce(String) + Send>) -> WatchGuard {
        if let Some(conn) = self.conn.take() {
            let first_wait = self.first_wait;
            let _ = std::thread::Builder::new()
                .name("vargr-job-heartbeat".into())
                .spawn(move || answer_heartbeats(conn, first_wait, on_lost));
        }
        WatchGuard {
            _hosted: self.hosted.take(),
        }
    }
}

fn answer_heartbeats(
    mut conn: SecureConn,
    first_wait: Duration,
    on_lost: Box<dyn FnOnce(String) + Send>,
) {
    let peer = conn.peer().to_string();
    let mut wait = first_wait;
    loop {
        conn.set_timeout(Some(wait));
        let since = Instant::now();
        match conn.read_frame(64 << 10) {
            Ok(f) if f.kind == FrameKind::Heartbeat => {
                // `heartbeat_ms timeout_ms`: the next one comes after the pause plus
                // the time the rendezvous allows any process to answer.
                let text = String::from_utf8_lossy(&f.payload);
                let ms: Vec<u64> = text
                    .split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect();
                if let [hb, to] = ms[..] {
                    wait = Duration::from_millis(hb + to).max(Duration::from_secs(1));
                }
                let echo = Frame::new(FrameKind::Heartbeat, 0, 0, &b"ok"[..]);
                if conn.write_frame(&echo).is_err() {
                    return;
                }
            }
            Ok(f) if f.kind == FrameKind::Refused => {
                on_lost(format!(
                    "the job was ended: {}",
                    String::from_utf8_lossy(&f.payload)
                ));
                return;
            }
            Ok(_) => {}
            Err(NetError::Timeout { .. }) => {
                on_lost(format!(
                    "{peer} sent nothing for {:.1} s",
                    since.elapsed().as_secs_f64()
                ));
                return;
            }
            Err(_) => return,
        }
    }
}

/// What joining a job gives: every rank's entry in rank order, the job's secret (which
/// the ranks' own connections prove too), and this process's end of the heartbeats.
pub struct Joined {
    pub table: Vec<PeerInfo>,
    pub secret: Secret,
    pub watch: JobWatch,
}

/// Joins the job this process belongs to: through `VARGR_JOB` (set by `vargr run`, or
/// `file:PATH`), or else through a rendezvous that the process hosting rank 0 starts and
/// publishes in [`default_job_file`] in the runtime directory.
pub fn join_job(env: &JobEnv, addr: &Addr, settings: &JobSettings) -> Result<Joined, NetError> {
    let timeout = settings.timeout;
    if let Ok(spec) = std::env::var("VARGR_JOB") {
        let deadline = Instant::now() + timeout;
        return match spec.strip_prefix("file:") {
            Some(path) => join_through_file(env, addr, Path::new(path), deadline),
            None => {
                let rv = resolve_rendezvous(&spec)?;
                let (table, watch) = wire_up(env, addr, &rv, timeout)?;
                Ok(Joined {
                    table,
                    secret: rv.secret,
                    watch,
                })
            }
        };
    }
    let dir = RuntimeDir::open(&settings.runtime_dir)?;
    let file = default_job_file(&dir)?;
    let mut joined = if env.rank == 0 {
        host_and_join(env, addr, &file, settings)?
    } else {
        join_through_file(env, addr, &file, Instant::now() + timeout)?
    };
    // Named for what it is, should it go silent.
    if let Some(conn) = &mut joined.watch.conn {
        let named = format!("rank 0's process ({})", conn.peer());
        conn.set_peer(named);
    }
    Ok(joined)
}

/// Rank 0's side without `vargr run`: serve the rendezvous, publish it, join it.
fn host_and_join(
    env: &JobEnv,
    addr: &Addr,
    file: &Path,
    settings: &JobSettings,
) -> Result<Joined, NetError> {
    let timeout = settings.timeout;
    let listener = Listener::bind(&Addr::Tcp("0.0.0.0:0".into()))?;
    let port = match listener.local_addr()? {
        Addr::Tcp(a) => a
            .rsplit_once(':')
            .map(|(_, p)| p.to_string())
            .unwrap_or_default(),
        a => a.to_string(),
    };
    let advertised = Addr::Tcp(format!("{}:{port}", env.host));
    let secret = Secret::random();
    let mut rv = JobRendezvous::start(
        listener,
        advertised.clone(),
        env.size,
        secret.clone(),
        timeout,
        Some(settings.liveness),
    );
    write_rendezvous_file(file, &advertised, &secret)?;
    let spec = RendezvousSpec {
        addr: advertised,
        secret,
    };
    let joined = wire_up(env, addr, &spec, timeout);
    let served = rv.join();
    // Everyone has the table (or the job failed): the file must not mislead a later job.
    let _ = std::fs::remove_file(file);
    served?;
    let (table, mut watch) = joined?;
    // The rendezvous lives as long as this process's watch: it watches the others.
    watch.hosted = Some(rv);
    Ok(Joined {
        table,
        secret: spec.secret,
        watch,
    })
}

/// Other ranks: read the file rank 0 writes, retrying while it is missing or stale (a
/// crashed earlier job may have left one behind).
fn join_through_file(
    env: &JobEnv,
    addr: &Addr,
    file: &Path,
    deadline: Instant,
) -> Result<Joined, NetError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = if file.exists() {
            read_rendezvous_file(file).and_then(|rv| {
                let secret = rv.secret.clone();
                wire_up(
                    env,
                    addr,
                    &rv,
                    left.min(Duration::from_secs(2))
                        .max(Duration::from_millis(100)),
                )
                .map_err(|e| match e {
                    // Reached and refused: a real answer, not staleness.
                    NetError::Refused { .. } => e,
                    // A stale file (nobody listening) may be replaced in a moment.
                    _ if Instant::now() < deadline => NetError::Timeout {
                        what: "the job rendezvous",
                        peer: rv.addr.to_string(),
                        after_ms: 0,
                    },
                    _ => e,
                })
                .map(|(table, watch)| Joined {
                    table,
                    secret,
                    watch,
                })
            })
        } else {
            Err(NetError::Timeout {
                what: "the rendezvous file",
                peer: file.display().to_string(),
                after_ms: 0,
            })
        };
        match attempt {
            Ok(t) => return Ok(t),
            Err(NetError::Timeout { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(NetError::Timeout { what, peer, .. }) => {
                return Err(NetError::Job {
                    reason: format!("gave up waiting for {what} ({peer})"),
                })
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime_dir::Problem;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::{Arc, Mutex};

    fn spec() -> (Addr, Secret) {
        (Addr::Tcp("127.0.0.1:9".into()), Secret::random())
    }

    #[test]
    fn a_rendezvous_file_others_could_write_or_a_link_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let (addr, secret) = spec();
        let f = t.path().join("job.rendezvous");
        write_rendezvous_file(&f, &addr, &secret).unwrap();
        assert_eq!(read_rendezvous_file(&f).unwrap().addr, addr);
        // Planted, or left open to others: whoever could write it picks rank 0.
        for mode in [0o666, 0o620] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = read_rendezvous_file(&f).unwrap_err();
            assert!(
                matches!(&e, NetError::RuntimeDir(r) if matches!(r.problem, Problem::Writable { .. })),
                "{e}"
            );
            assert!(e.to_string().contains(&f.display().to_string()), "{e}");
        }
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = t.path().join("link.rendezvous");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        let e = read_rendezvous_file(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }

    #[test]
    fn writing_a_rendezvous_file_never_writes_through_a_planted_link() {
        let t = tempfile::tempdir().unwrap();
        let (addr, secret) = spec();
        let f = t.path().join("job.rendezvous");
        let victim = t.path().join("victim");
        // Links at the final name and at the temporary name the writer once used.
        std::os::unix::fs::symlink(&victim, &f).unwrap();
        let old_tmp = f.with_extension(format!("tmp{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &old_tmp).unwrap();
        write_rendezvous_file(&f, &addr, &secret).unwrap();
        assert!(!victim.exists(), "written through a planted link");
        let m = std::fs::symlink_metadata(&f).unwrap();
        assert!(m.is_file() && m.permissions().mode() & 0o777 == 0o600);
        assert_eq!(read_rendezvous_file(&f).unwrap().addr, addr);
    }

    fn env(rank: u32) -> JobEnv {
        JobEnv {
            rank,
            size: 2,
            local: 1,
            host: "here".into(),
            site: None,
        }
    }

    /// Waits up to `guard` (a hang guard, not a speed test) for `f` to give something.
    fn within<T>(guard: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
        let end = Instant::now() + guard;
        loop {
            if let Some(x) = f() {
                return Some(x);
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Two processes join; one answers heartbeats, the other stops answering (as a
    /// stopped process would): the rendezvous names it, and the one still answering is
    /// told the job ended and why.
    #[test]
    fn a_process_that_stops_answering_heartbeats_ends_the_job_and_is_named() {
        let listener = Listener::bind(&Addr::Tcp("127.0.0.1:0".into())).unwrap();
        let addr = listener.local_addr().unwrap();
        let secret = Secret::random();
        let liveness = Liveness {
            heartbeat: Duration::from_millis(100),
            timeout: Duration::from_millis(600),
        };
        let mut rv = JobRendezvous::start(
            listener,
            addr.clone(),
            2,
            secret.clone(),
            Duration::from_secs(20),
            Some(liveness),
        );
        let rvs = RendezvousSpec { addr, secret };
        let joins: Vec<_> = (0..2)
            .map(|r| {
                let rvs = rvs.clone();
                std::thread::spawn(move || {
                    wire_up(
                        &env(r),
                        &Addr::Tcp(format!("127.0.0.1:{}", 100 + r)),
                        &rvs,
                        Duration::from_secs(20),
                    )
                })
            })
            .collect();
        let mut watches: Vec<_> = joins
            .into_iter()
            .map(|j| j.join().unwrap().unwrap().1)
            .collect();
        rv.join().unwrap();
        let silent_one = watches.pop().unwrap();
        let lost = Arc::new(Mutex::new(None));
        let l2 = lost.clone();
        let _guard = watches
            .pop()
            .unwrap()
            .start(Box::new(move |why| *l2.lock().unwrap() = Some(why)));
        let s = within(Duration::from_secs(20), || rv.silent()).expect("nobody named");
        assert_eq!((s.first, s.count, s.pid), (1, 1, std::process::id()));
        assert!(s.silent_for >= liveness.timeout, "{s}");
        let text = s.to_string();
        assert!(
            text.starts_with("rank 1 (pid ") && text.contains("sent nothing for"),
            "{text}"
        );
        let why = within(Duration::from_secs(20), || lost.lock().unwrap().clone())
            .expect("the answering process was never told");
        assert!(
            why.contains("the job was ended") && why.contains("rank 1 (pid"),
            "{why}"
        );
        drop(silent_one);
    }

    /// A process whose connection closes is timed when it closes (not at the next
    /// heartbeat), and is not taken for silent.
    #[test]
    fn a_closed_connection_is_timed_and_not_silence() {
        let listener = Listener::bind(&Addr::Tcp("127.0.0.1:0".into())).unwrap();
        let addr = listener.local_addr().unwrap();
        let secret = Secret::random();
        // A heartbeat far away: only the pause's reads can see the close in time.
        let liveness = Liveness {
            heartbeat: Duration::from_secs(60),
            timeout: Duration::from_secs(120),
        };
        let mut rv = JobRendezvous::start(
            listener,
            addr.clone(),
            1,
            secret.clone(),
            Duration::from_secs(20),
            Some(liveness),
        );
        let mut e = env(0);
        e.size = 1;
        let (_, watch) = wire_up(
            &e,
            &Addr::Tcp("127.0.0.1:100".into()),
            &RendezvousSpec { addr, secret },
            Duration::from_secs(20),
        )
        .unwrap();
        rv.join().unwrap();
        // Let the watcher ask once and enter its pause, then the process goes away.
        std::thread::sleep(Duration::from_millis(300));
        drop(watch);
        // Well before the next heartbeat (a minute away).
        within(Duration::from_secs(20), || rv.closed_at(0)).expect("the close was not seen");
        assert!(rv.silent().is_none());
    }
}
