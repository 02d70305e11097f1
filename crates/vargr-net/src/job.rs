//! Job wire-up: who am I, how many are we, and where does everyone listen.
//!
//! A parallel job's ranks are started by `vargr run`, `mpirun`, `srun` or a batch script.
//! Each finds its rank and the job size in the variables its launcher sets, binds a
//! listener, and meets the others at a rendezvous that collects every rank's address,
//! host and site and hands the whole table back (the part of PMI vargr needs). The
//! rendezvous is run by `vargr run` (its address in `VARGR_JOB`), or, when another
//! launcher started the job, by rank 0, which publishes it in a file (mode 0600, with
//! the job's secret) that the other ranks read. Every exchange is authenticated.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vargr_wire::{Frame, FrameKind};

use crate::auth::{self, Secret};
use crate::gate::{Gate, GateConfig};
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
/// [`read_rendezvous_file`] reads.
pub fn write_rendezvous_file(path: &Path, addr: &Addr, secret: &Secret) -> Result<(), NetError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |e| NetError::io("writing the rendezvous file", path.display(), e);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err)?;
    writeln!(f, "{addr}\n{}", secret.to_hex()).map_err(err)?;
    f.sync_all().map_err(err)?;
    // Renamed into place so a reader never sees half a file.
    std::fs::rename(&tmp, path).map_err(err)
}

/// Reads a rendezvous file: the address on the first line, the secret on the second.
pub fn read_rendezvous_file(path: &Path) -> Result<RendezvousSpec, NetError> {
    let text = std::fs::read_to_string(path)
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
/// after the launcher's job id in the temporary directory (shared by the ranks of one
/// host; set `VARGR_JOB=file:PATH` on a shared file system for several hosts).
pub fn default_job_file() -> Result<PathBuf, NetError> {
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
    Ok(std::env::temp_dir().join(format!("vargr-job-{safe}{step}.rendezvous")))
}

/// A rendezvous serving one job of `size` ranks: collects every rank's entry, then
/// answers each with the whole table. Runs on its own thread until all are served.
pub struct JobRendezvous {
    pub addr: Addr,
    thread: Option<JoinHandle<Result<(), NetError>>>,
    stop: mpsc::Sender<()>,
}

impl JobRendezvous {
    pub fn start(
        listener: Listener,
        advertised: Addr,
        size: u32,
        secret: Secret,
        timeout: Duration,
    ) -> JobRendezvous {
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("vargr-job-rendezvous".into())
            .spawn(move || serve_job(listener, size, secret, timeout, stopped))
            .expect("spawning the job rendezvous thread");
        JobRendezvous {
            addr: advertised,
            thread: Some(thread),
            stop,
        }
    }

    /// Waits until every rank got the table (or the rendezvous failed).
    pub fn join(mut self) -> Result<(), NetError> {
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(NetError::Job {
                reason: "the rendezvous thread panicked".into(),
            }),
            None => Ok(()),
        }
    }
}

impl Drop for JobRendezvous {
    fn drop(&mut self) {
        let _ = self.stop.send(());
    }
}

fn serve_job(
    listener: Listener,
    size: u32,
    secret: Secret,
    timeout: Duration,
    stopped: mpsc::Receiver<()>,
) -> Result<(), NetError> {
    let deadline = Instant::now() + timeout;
    let gate = Gate::open(
        listener,
        secret,
        GateConfig::default(),
        Box::new(|e| eprintln!("vargr: job rendezvous refused a connection: {e}")),
    );
    let mut entries: BTreeMap<u32, (PeerInfo, u32)> = BTreeMap::new();
    let mut seen = vec![false; size as usize];
    let mut waiting: Vec<SecureConn> = Vec::new();
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
            for mut c in waiting {
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
            Ok((info, _, claimed_size)) if claimed_size != size => refuse(
                conn,
                format!(
                    "rank {} thinks the job has {claimed_size} ranks, the rendezvous serves {size}",
                    info.rank
                ),
            ),
            Ok((info, local, _)) => {
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
                entries.insert(info.rank, (info, local));
                conn.set_timeout(Some(timeout));
                waiting.push(conn);
            }
            Err(e) => refuse(conn, e.to_string()),
        }
    }
    let table = encode_table(entries.values());
    for mut c in waiting {
        c.write_frame(&Frame::new(FrameKind::AttachReply, 0, 0, table.clone()))?;
    }
    Ok(())
}

/// Hello: `rank size local addr host site cores` on one line (site `-` when none).
fn encode_hello(env: &JobEnv, addr: &Addr) -> String {
    format!(
        "{} {} {} {} {} {} {}",
        env.rank,
        env.size,
        env.local,
        addr,
        env.host,
        env.site.as_deref().unwrap_or("-"),
        cores()
    )
}

fn parse_hello(f: &Frame) -> Result<(PeerInfo, u32, u32), NetError> {
    let bad = |why: &str| NetError::Job {
        reason: format!("malformed hello: {why}"),
    };
    if f.kind != FrameKind::Attach {
        return Err(bad("wrong frame kind"));
    }
    let text = std::str::from_utf8(&f.payload).map_err(|_| bad("not UTF-8"))?;
    let w: Vec<&str> = text.split_whitespace().collect();
    if w.len() != 7 {
        return Err(bad("expected 7 fields"));
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
/// in rank order, once all have registered.
pub fn wire_up(
    env: &JobEnv,
    addr: &Addr,
    rv: &RendezvousSpec,
    timeout: Duration,
) -> Result<Vec<PeerInfo>, NetError> {
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
        FrameKind::AttachReply => parse_table(&f.payload, env.size),
        FrameKind::Refused => Err(NetError::Refused {
            peer,
            reason: String::from_utf8_lossy(&f.payload).into_owned(),
        }),
        k => Err(NetError::Job {
            reason: format!("{peer} answered with {}", k.name()),
        }),
    }
}

/// Joins the job this process belongs to: through `VARGR_JOB` (set by `vargr run`, or
/// `file:PATH`), or else through a rendezvous that the process hosting rank 0 starts and
/// publishes in [`default_job_file`]. Returns every rank's entry in rank order, and the
/// job's secret (which the ranks' own connections prove too).
pub fn join_job(
    env: &JobEnv,
    addr: &Addr,
    timeout: Duration,
) -> Result<(Vec<PeerInfo>, Secret), NetError> {
    if let Ok(spec) = std::env::var("VARGR_JOB") {
        let deadline = Instant::now() + timeout;
        return match spec.strip_prefix("file:") {
            Some(path) => join_through_file(env, addr, Path::new(path), deadline),
            None => {
                let rv = resolve_rendezvous(&spec)?;
                Ok((wire_up(env, addr, &rv, timeout)?, rv.secret))
            }
        };
    }
    let file = default_job_file()?;
    if env.rank == 0 {
        host_and_join(env, addr, &file, timeout)
    } else {
        join_through_file(env, addr, &file, Instant::now() + timeout)
    }
}

/// Rank 0's side without `vargr run`: serve the rendezvous, publish it, join it.
fn host_and_join(
    env: &JobEnv,
    addr: &Addr,
    file: &Path,
    timeout: Duration,
) -> Result<(Vec<PeerInfo>, Secret), NetError> {
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
    let rv = JobRendezvous::start(
        listener,
        advertised.clone(),
        env.size,
        secret.clone(),
        timeout,
    );
    write_rendezvous_file(file, &advertised, &secret)?;
    let spec = RendezvousSpec {
        addr: advertised,
        secret,
    };
    let table = wire_up(env, addr, &spec, timeout);
    let served = rv.join();
    // Everyone has the table (or the job failed): the file must not mislead a later job.
    let _ = std::fs::remove_file(file);
    served?;
    Ok((table?, spec.secret))
}

/// Other ranks: read the file rank 0 writes, retrying while it is missing or stale (a
/// crashed earlier job may have left one behind).
fn join_through_file(
    env: &JobEnv,
    addr: &Addr,
    file: &Path,
    deadline: Instant,
) -> Result<(Vec<PeerInfo>, Secret), NetError> {
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
                .map(|t| (t, secret))
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
