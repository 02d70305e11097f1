//! Ranks of a real job: the socket transport over `vargr-net`'s mesh, and joining a job
//! started by `vargr run`, `mpirun` or `srun`.
//!
//! A process hosts one rank, or K ranks as threads (`vargr run --ranks-per-process K`).
//! Its ranks share one [`Mesh`]: messages between them go straight into mailboxes,
//! messages to other processes over authenticated sockets, and links between sites carry
//! the Longcut stage for the WAN that `VARGR_WAN` describes. Host and site of every rank
//! come from the job's table, so hierarchical algorithms know the shape of the job
//! without being told.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use vargr_codec::stage::{CodecMode, SampleDir};
use vargr_emu::WanMap;
use vargr_links::{LinkEnds, LinkPolicy, LinkSettings};
use vargr_net::mesh::{self, MailMatch, Mesh};

use crate::arena::{Arena, CrossProcess};
use crate::comm::{Comm, World};
use crate::elem::ElemKind;
use crate::error::{CollError, Result};
use crate::hierarchy::Hierarchy;
use crate::inproc::{Fabric, InProcess, WaitPolicy};
use crate::monitor::{self, MonitorConfig, MonitorHandle};
use crate::rank_scheduler::{self, SchedPolicy, Scheduler, LOW};
use crate::select::Selector;
use crate::transport::{Match, Matched, Transport};
use crate::usage::{self, RankState, ThreadUsage};

/// One rank's endpoint on a process's mesh.
pub struct MeshTransport {
    mesh: Arc<Mesh>,
    rank: usize,
    arena: Option<Arc<Arena>>,
    /// Ranks of this process (sends outside it raise this rank's scheduling priority).
    local: Range<usize>,
    sched: Option<Arc<Scheduler>>,
    /// Whether this rank's last send left the process.
    sent_remote: AtomicBool,
    /// This rank's mailbox among the ranks of its process (indexed from the first local
    /// rank): messages between threads skip the mesh's shared lock.
    here: Option<InProcess>,
    /// Per local rank, receives waiting in the mesh that also take mail from this
    /// process's ranks: a send to such a rank nudges the mesh so that it looks.
    wild: Arc<[AtomicU32]>,
}

impl MeshTransport {
    fn send_flags(&self, dest: usize, tag: u64, data: Bytes, flags: u8) -> Result<()> {
        let remote = !self.local.contains(&dest);
        self.sent_remote.store(remote, Ordering::Relaxed);
        if let (false, Some(ep)) = (remote, &self.here) {
            let i = dest - self.local.start;
            ep.send(i, tag, data)?;
            // Pairs with the waiter's increment: one of us sees the other.
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.wild[i].load(Ordering::SeqCst) > 0 {
                self.mesh.nudge(dest as u32);
            }
            return Ok(());
        }
        self.mesh
            .send_flags(self.rank as u32, dest as u32, tag, data, flags)
            .map_err(|e| self.lost(dest, e))
    }

    fn lost(&self, peer: usize, e: vargr_net::NetError) -> CollError {
        if let vargr_net::NetError::Interrupted { .. } = e {
            return CollError::Interrupted { rank: self.rank };
        }
        CollError::PeerLost {
            rank: self.rank,
            peer,
            reason: e.to_string(),
        }
    }
}

impl MeshTransport {
    /// A message from `src` with `tag` if one is already here; never waits and never
    /// polls the sockets (for monitor agents).
    pub(crate) fn try_recv(&self, src: usize, tag: u64) -> Result<Option<Bytes>> {
        match &self.here {
            Some(ep) if self.local.contains(&src) => ep.try_recv(src - self.local.start, tag),
            _ => self
                .mesh
                .try_recv(self.rank as u32, src as u32, tag)
                .map_err(|e| self.lost(src, e)),
        }
    }
}

impl Transport for MeshTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.mesh.size() as usize
    }

    fn send(&self, dest: usize, tag: u64, data: Bytes) -> Result<()> {
        self.send_flags(dest, tag, data, 0)
    }

    fn send_typed(&self, dest: usize, tag: u64, data: Bytes, elem: ElemKind) -> Result<()> {
        self.send_flags(dest, tag, data, vargr_wire::elem_flags(elem))
    }

    fn send_uncompressed(&self, dest: usize, tag: u64, data: Bytes) -> Result<()> {
        self.send_flags(dest, tag, data, vargr_wire::FLAG_RAW)
    }

    fn recv(&self, src: usize, tag: u64) -> Result<Bytes> {
        self.waiting(|| match &self.here {
            Some(ep) if self.local.contains(&src) => ep.recv(src - self.local.start, tag),
            _ => self
                .mesh
                .recv(self.rank as u32, src as u32, tag)
                .map_err(|e| self.lost(src, e)),
        })
    }

    fn recv_match(&self, pats: &[Match], wait: bool) -> Result<Option<Matched>> {
        if let Some(m) = self.take_match(pats)? {
            return Ok(Some(m));
        }
        if !wait {
            return Ok(None);
        }
        let here = self.here.as_ref();
        let local = |p: &Match| p.src.is_some_and(|s| self.local.contains(&s));
        let to_here =
            |pats: &[Match]| -> Vec<Match> { pats.iter().map(|p| self.in_here(p)).collect() };
        self.waiting(|| loop {
            match here {
                // Only this process's ranks can send: its mailbox alone decides.
                Some(ep) if pats.iter().all(local) => {
                    let m = ep.recv_match(&to_here(pats), true)?;
                    return Ok(m.map(|m| Matched {
                        src: m.src + self.local.start,
                        ..m
                    }));
                }
                _ => {
                    let (idx, mesh_pats): (Vec<usize>, Vec<MailMatch>) = pats
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| here.is_none() || !local(p))
                        .map(|(i, p)| (i, mail_match(p)))
                        .unzip();
                    let mixed = here.is_some() && pats.iter().any(|p| p.src.is_none() || local(p));
                    let mine = &self.wild[self.rank - self.local.start];
                    if mixed {
                        mine.fetch_add(1, Ordering::SeqCst);
                    }
                    let local_pats = to_here(pats);
                    let elsewhere = || here.is_some_and(|ep| ep.has_match(&local_pats));
                    let r = self.mesh.recv_match(
                        self.rank as u32,
                        &mesh_pats,
                        true,
                        mixed.then_some(&elsewhere as &dyn Fn() -> bool),
                    );
                    if mixed {
                        mine.fetch_sub(1, Ordering::SeqCst);
                    }
                    let src = pats.first().and_then(|p| p.src).unwrap_or(usize::MAX);
                    if let Some(m) = r.map_err(|e| self.lost(src, e))? {
                        return Ok(Some(Matched {
                            pattern: idx[m.pattern],
                            src: m.src as usize,
                            tag: m.tag,
                            data: m.data,
                        }));
                    }
                    // Whatever arrived, take it in the patterns' order.
                    if let Some(m) = self.take_match(pats)? {
                        return Ok(Some(m));
                    }
                }
            }
        })
    }

    fn arena(&self) -> Option<&Arena> {
        self.arena.as_deref()
    }
}

impl MeshTransport {
    /// Runs a wait for mail: a waiting rank gives its core to a rank with work (only
    /// rank threads hold slots; helper threads, such as the conditional allreduce's
    /// prefetchers, pass through) and counts as blocked for the monitors.
    fn waiting<R>(&self, wait: impl FnOnce() -> R) -> R {
        let sched = self
            .sched
            .as_deref()
            .filter(|_| HOLDS_SLOT.with(|h| h.replace(false)));
        if let Some(s) = sched {
            s.release();
        }
        // A collective's helper thread waiting is one less to make room for.
        let helper = self.sched.as_ref().filter(|_| rank_scheduler::is_helper());
        if let Some(s) = helper {
            rank_scheduler::helper_attach(s);
            rank_scheduler::helper_set_busy(false);
        }
        let blocked = monitor::Blocked::enter();
        let in_comm = usage::enter(RankState::Communication);
        let r = wait();
        drop(in_comm);
        drop(blocked);
        if helper.is_some() {
            rank_scheduler::helper_set_busy(true);
        }
        if let Some(s) = sched {
            let remote = self.sent_remote.load(Ordering::Relaxed);
            let class = s.class_after_wait(remote, rank_scheduler::in_collective());
            let _slot_wait = usage::enter(RankState::Other);
            s.acquire(class);
            HOLDS_SLOT.with(|h| h.set(true));
        }
        r
    }

    /// `p` for this process's mailboxes, which number its ranks from the first (a
    /// source of another process matches none of them).
    fn in_here(&self, p: &Match) -> Match {
        Match {
            src: p.src.map(|s| s.wrapping_sub(self.local.start)),
            ..*p
        }
    }

    /// The message the first pattern able to take one accepts, from this process's
    /// ranks or another's, without waiting.
    fn take_match(&self, pats: &[Match]) -> Result<Option<Matched>> {
        for (i, p) in pats.iter().enumerate() {
            let local = p.src.map(|s| self.local.contains(&s));
            if let Some(ep) = self.here.as_ref().filter(|_| local != Some(false)) {
                if let Some(m) = ep.recv_match(&[self.in_here(p)], false)? {
                    return Ok(Some(Matched {
                        pattern: i,
                        src: m.src + self.local.start,
                        ..m
                    }));
                }
                if local == Some(true) {
                    continue;
                }
            }
            let q = [mail_match(p)];
            let got = self
                .mesh
                .recv_match(self.rank as u32, &q, false, None)
                .or_else(|e| match e {
                    // A lost peer matters only to a receive that waits for it.
                    vargr_net::NetError::Job { .. } => Ok(None),
                    e => Err(e),
                })
                .map_err(|e| self.lost(p.src.unwrap_or(usize::MAX), e))?;
            if let Some(m) = got {
                return Ok(Some(Matched {
                    pattern: i,
                    src: m.src as usize,
                    tag: m.tag,
                    data: m.data,
                }));
            }
        }
        Ok(None)
    }
}

/// `p` as the mesh takes it (the mesh numbers ranks with `u32`).
fn mail_match(p: &Match) -> MailMatch {
    MailMatch {
        src: p.src.map(|s| s as u32),
        tag: p.tag,
        mask: p.mask,
    }
}

/// How to join a job: every setting typed. Processes that `vargr run` (or `mpirun`)
/// starts get theirs from the launcher through `vargr_config`, which reads them; this
/// crate reads no settings of its own.
#[derive(Debug, Clone)]
pub struct JoinOptions {
    /// How long wire-up may take before it fails with an error naming what is missing.
    pub timeout: Duration,
    /// WAN emulated between sites.
    pub wan: WanMap,
    /// The shared bottlenecks of the emulated WAN on this host (`vargr run` makes the
    /// table): links between two sites, from every process here, compete for one.
    pub gateways: Option<Arc<vargr_emu::Gateways>>,
    /// Algorithm selection.
    pub selector: Selector,
    /// How ranks of one process share its cores.
    pub sched: SchedPolicy,
    /// Compression on links between sites, and the adaptive engine's settings.
    pub codec: CodecMode,
    pub codec_engine: vargr_codec::EngineConfig,
    /// Where links record samples of what they carry (the guided strategy's first run).
    pub codec_samples: Option<std::path::PathBuf>,
    /// Redundancy elimination on links between sites: a segmenter spec.
    pub dedup: Option<String>,
    /// This process's site.
    pub site: Option<String>,
    /// Where [`Job::finish`] writes this process's trace file.
    pub trace_dir: Option<std::path::PathBuf>,
    /// The monitors to run (an agent in every process, the monitor in rank 0's).
    pub monitor: Option<MonitorConfig>,
    /// Align the processes' clocks at start-up even when neither traced nor monitored.
    pub clock_sync: bool,
    /// Heartbeats of the job's rendezvous when this process hosts it (rank 0 under
    /// mpirun or srun; under `vargr run`, `vargr run --liveness-timeout` decides).
    pub liveness: vargr_net::wireup::Liveness,
    /// The user's private directory for Unix sockets and the rendezvous file (default
    /// [`vargr_net::runtime_dir::default_path`]).
    pub runtime_dir: std::path::PathBuf,
    /// Processes of a job all on one host exchange messages through shared memory.
    pub shm: bool,
}

impl Default for JoinOptions {
    fn default() -> Self {
        JoinOptions {
            timeout: Duration::from_secs(60),
            wan: WanMap::default(),
            gateways: None,
            selector: Selector::default(),
            sched: SchedPolicy::default(),
            codec: CodecMode::Adaptive,
            codec_engine: vargr_codec::EngineConfig::default(),
            codec_samples: None,
            dedup: None,
            site: None,
            trace_dir: None,
            monitor: None,
            clock_sync: false,
            liveness: vargr_net::wireup::Liveness::default(),
            runtime_dir: vargr_net::runtime_dir::default_path(),
            shm: true,
        }
    }
}

/// This process's part of a parallel job.
pub struct Job {
    mesh: Arc<Mesh>,
    arena: Option<Arc<Arena>>,
    hierarchy: Hierarchy,
    selector: Selector,
    sched: Option<Arc<Scheduler>>,
    ranks_per_core: usize,
    /// Mailboxes of this process's ranks, when it has several.
    fabric: Option<Fabric>,
    /// Shared by the ranks' transports (see [`MeshTransport`]'s field).
    wild: Arc<[AtomicU32]>,
    /// The load-balance monitor, in rank 0's process when monitors run.
    monitor: std::sync::Mutex<Option<MonitorHandle>>,
    /// This process's monitor agent, when monitors run.
    agent: std::sync::Mutex<Option<monitor::AgentHandle>>,
    /// The options' trace directory, monitors and clock alignment.
    trace_dir: Option<std::path::PathBuf>,
    monitor_config: Option<MonitorConfig>,
    clock_sync: bool,
    /// What this process's rank threads do with the CPU (TLP, system time, counters).
    usage: Arc<ThreadUsage>,
}

/// How often a traced job samples its rank threads' kernel states.
const TRACE_SAMPLE_PERIOD: Duration = Duration::from_millis(5);

fn job_error(e: impl std::fmt::Display) -> CollError {
    CollError::Job {
        reason: e.to_string(),
    }
}

impl Job {
    /// Joins the job this process was started in (`vargr_config::join_job` joins it
    /// with the settings the launcher gave).
    pub fn join_with(opts: JoinOptions) -> Result<Job> {
        let JoinOptions {
            wan,
            selector,
            sched: policy,
            codec,
            ..
        } = opts.clone();
        let links = LinkPolicy::new(LinkSettings {
            wan,
            codec,
            engine: opts.codec_engine.clone(),
            samples: opts.codec_samples.clone().map(|dir| SampleDir {
                dir,
                label: vargr_net::wireup::rank_from_env()
                    .map_or_else(|_| "x".into(), |r| r.to_string()),
            }),
            dedup: opts.dedup.clone(),
            max_frame: mesh::MAX_MESSAGE + 64,
            gateways: opts.gateways.clone(),
        })
        .map_err(job_error)?;
        let my_site = opts.site.clone().filter(|s| !s.is_empty());
        let my_host = vargr_net::launch::hostname();
        let picker = Box::new(move |peer: &vargr_net::wireup::PeerInfo| {
            links.chain(&LinkEnds {
                local_host: &my_host,
                peer_host: &peer.host,
                local_site: my_site.as_deref(),
                peer_site: peer.site.as_deref(),
                seed: u64::from(peer.rank),
                same_machine: peer.host == my_host,
            })
        });
        let settings = vargr_net::wireup::JobSettings {
            timeout: opts.timeout,
            liveness: opts.liveness,
            runtime_dir: opts.runtime_dir.clone(),
            shm: opts.shm,
        };
        let mesh = mesh::join(picker, &settings).map_err(job_error)?;
        let env = mesh.env();
        let hierarchy = hierarchy_of(mesh.table());
        let (first, local) = (env.rank as usize, env.local as usize);
        let sched = if local > 1 {
            Scheduler::for_policy(policy).map(Arc::new)
        } else {
            None
        };
        // Shared-memory waits happen outside `recv`, where the scheduler cannot see them.
        // Processes of one host meet in the job's collective area too.
        // Decided by settings every process shares, not by this process's rank count:
        // every process must agree on whether collectives meet there. A traced run keeps
        // its collectives on messages: `vargr trace report` finds a communicator spanning
        // processes, and the rank that held it up, from the messages between them.
        let area = match policy {
            SchedPolicy::None if opts.trace_dir.is_none() => mesh.shm_area().map_err(job_error)?,
            _ => None,
        };
        let cross = area.map(|area| {
            let (m, p) = (Arc::downgrade(&mesh), Arc::downgrade(&mesh));
            CrossProcess {
                area,
                failure: Box::new(move || m.upgrade().and_then(|m| m.failure())),
                progress: Box::new(move || p.upgrade().is_some_and(|m| m.progress())),
            }
        });
        let arena = ((local > 1 && sched.is_none()) || cross.is_some()).then(|| {
            let a = Arena::new(
                env.size as usize,
                first..first + local,
                WaitPolicy::default(),
            );
            Arc::new(match cross {
                Some(c) => a.with_processes(c),
                None => a,
            })
        });
        let fabric = (local > 1).then(|| Fabric::new(local));
        let ranks_per_core = ranks_per_core(mesh.table());
        let monitor = std::sync::Mutex::new(None);
        let job = Job {
            monitor,
            agent: std::sync::Mutex::new(None),
            ranks_per_core,
            mesh,
            fabric,
            wild: (0..local).map(|_| AtomicU32::new(0)).collect(),
            arena,
            hierarchy,
            selector,
            sched,
            trace_dir: opts.trace_dir,
            monitor_config: opts.monitor,
            clock_sync: opts.clock_sync,
            usage: ThreadUsage::new(),
        };
        job.align_clocks()?;
        job.start_monitor()?;
        Ok(job)
    }

    pub fn size(&self) -> usize {
        self.mesh.size() as usize
    }

    /// The first rank of every process, from the table (processes share an address).
    fn leaders(&self) -> Vec<usize> {
        let table = self.mesh.table();
        (0..table.len())
            .filter(|&i| i == 0 || table[i].addr != table[i - 1].addr)
            .collect()
    }

    /// Aligns this process's clock with rank 0's (see [`crate::clocksync`]) when the run
    /// is traced, monitored or asks for it: every process of the job must take part,
    /// and these settings come from the launcher, so all processes agree.
    fn align_clocks(&self) -> Result<()> {
        let wanted = self.trace_dir.is_some() || self.monitor_config.is_some() || self.clock_sync;
        if !wanted {
            return Ok(());
        }
        let t = self.transport(self.local_ranks().start);
        let a = crate::clocksync::align(&t, &self.leaders())?;
        vargr_trace::set_alignment(a);
        Ok(())
    }

    /// Starts the monitor plane when monitors run (`vargr run --monitor`): an agent in
    /// every process, and the monitor in rank 0's (see [`MonitorConfig`]).
    fn start_monitor(&self) -> Result<()> {
        let Some(cfg) = self.monitor_config.clone() else {
            return Ok(());
        };
        let first = self.local_ranks().start;
        let r = self.local_ranks();
        let agent = monitor::spawn_agent(
            Arc::new(self.transport(first)),
            self.mesh.clone(),
            0,
            format!("ranks {}..{} of {}", r.start, r.end, self.size()),
            r.len() as u32,
        );
        *self.agent.lock().unwrap_or_else(|p| p.into_inner()) = Some(agent);
        if first == 0 {
            *self.monitor.lock().unwrap_or_else(|p| p.into_inner()) = Some(MonitorHandle::start(
                Arc::new(self.transport(first)),
                self.mesh.clone(),
                self.leaders(),
                self.size(),
                cfg,
            ));
        }
        Ok(())
    }

    /// What this process's rank threads have done with the CPU so far (see
    /// [`crate::usage`]): measured for every [`Job::run`] (a second run adds its ranks
    /// again), with kernel states sampled once [`Job::sample_threads`] asked for it
    /// (traced jobs always sample).
    pub fn usage(&self) -> &Arc<ThreadUsage> {
        &self.usage
    }

    /// Samples the rank threads' kernel states (`/proc`) every `period` from now on.
    pub fn sample_threads(&self, period: Duration) {
        self.usage.start_sampler(period);
    }

    /// The ranks this process hosts.
    pub fn local_ranks(&self) -> Range<usize> {
        let env = self.mesh.env();
        env.rank as usize..(env.rank + env.local) as usize
    }

    /// Host and site of every rank, from the job's table.
    pub fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }

    /// Site label of `rank`, if the job has sites.
    pub fn site_of(&self, rank: usize) -> Option<&str> {
        self.mesh.table().get(rank)?.site.as_deref()
    }

    /// The world of local rank `rank` (create one per rank, on the thread that runs it).
    pub fn world(&self, rank: usize) -> Result<World> {
        if !self.local_ranks().contains(&rank) {
            return Err(CollError::BadRank {
                what: "local",
                rank,
                size: self.size(),
                ctx: 0,
            });
        }
        Ok(World::new(Arc::new(self.transport(rank)))
            .with_selector(self.selector.clone())
            .with_hierarchy(self.hierarchy.clone())
            .with_ranks_per_core(self.ranks_per_core))
    }

    /// The transport endpoint of local rank `rank`.
    fn transport(&self, rank: usize) -> MeshTransport {
        MeshTransport {
            mesh: self.mesh.clone(),
            rank,
            arena: self.arena.clone(),
            local: self.local_ranks(),
            sched: self.sched.clone(),
            sent_remote: AtomicBool::new(false),
            here: self
                .fabric
                .as_ref()
                .and_then(|f| f.endpoint(rank - self.local_ranks().start)),
            wild: self.wild.clone(),
        }
    }

    /// Runs `f` once per local rank, each on its own thread with its world communicator,
    /// and returns the results in rank order. The first error wins.
    pub fn run<R, F>(&self, f: F) -> Result<Vec<R>>
    where
        R: Send,
        F: Fn(Comm) -> Result<R> + Sync,
    {
        let f = &f;
        if self.trace_dir.is_some() {
            self.sample_threads(TRACE_SAMPLE_PERIOD);
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = self
                .local_ranks()
                .map(|r| {
                    let world = self.world(r);
                    std::thread::Builder::new()
                        .name(format!("rank-{r}"))
                        .spawn_scoped(s, move || {
                            vargr_trace::set_thread_label(&format!("rank {r}"), Some(r as u32));
                            let _usage = self.usage.register_rank(r as u32);
                            let _slot = self.sched.as_deref().map(Slot::take);
                            f(world?.comm()?)
                        })
                        .map_err(job_error)
                })
                .collect::<Result<_>>()?;
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(job_error("a rank thread panicked (see its message above)"))
                    })
                })
                .collect()
        })
    }

    /// Writes everything still queued for other processes, and the trace file when the
    /// options name a trace directory (`vargr run --trace DIR`); call before exiting.
    pub fn finish(&self) {
        let monitor = self
            .monitor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(lb) = monitor.and_then(MonitorHandle::stop) {
            lb.log_final();
        }
        let agent = self.agent.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(agent) = agent {
            agent.linger();
        }
        self.mesh.flush(Duration::from_secs(30));
        self.usage.stop_sampler();
        if let Some(dir) = &self.trace_dir {
            if let Err(e) = self.write_trace(dir) {
                tracing::warn!("could not write the trace: {e}");
            }
        }
    }

    /// Writes this process's collector records to `DIR/<host>-<first rank>.vtr`.
    pub fn write_trace(&self, dir: &std::path::Path) -> Result<std::path::PathBuf> {
        let r = self.local_ranks();
        let mut file = vargr_trace::Tracer::new().snapshot(&format!(
            "ranks {}..{} of {}",
            r.start,
            r.end,
            self.size()
        ));
        let usage = self.usage.snapshot();
        file.usage = (usage.ranks > 0).then(|| Box::new(usage));
        std::fs::create_dir_all(dir).map_err(|e| job_error(format!("{}: {e}", dir.display())))?;
        let path = dir.join(format!("{}-{:05}.vtr", file.host, r.start));
        file.write(&path).map_err(job_error)?;
        Ok(path)
    }
}

thread_local! {
    /// Whether this thread is a rank holding a scheduler slot.
    static HOLDS_SLOT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A rank's scheduler slot while it runs, given back when it ends (or panics).
struct Slot<'a>(&'a Scheduler);

impl Slot<'_> {
    fn take(s: &Scheduler) -> Slot<'_> {
        let _slot_wait = usage::enter(RankState::Other);
        s.acquire(LOW);
        HOLDS_SLOT.with(|h| h.set(true));
        Slot(s)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if HOLDS_SLOT.with(|h| h.replace(false)) {
            self.0.release();
        }
    }
}

/// Ranks per core on the most crowded host, from the job table (equal on every rank).
fn ranks_per_core(table: &[vargr_net::wireup::PeerInfo]) -> usize {
    // By machine, not by site: emulated sites on one machine share its cores.
    let mut hosts: HashMap<&str, (usize, usize)> = HashMap::new();
    for p in table {
        let e = hosts
            .entry(p.host.as_str())
            .or_insert((0, p.cores.max(1) as usize));
        e.0 += 1;
    }
    hosts
        .values()
        .map(|&(ranks, cores)| ranks.div_ceil(cores))
        .max()
        .unwrap_or(1)
}

/// Dense host and site ids from the job table's labels. Ranks without a site share one.
fn hierarchy_of(table: &[vargr_net::wireup::PeerInfo]) -> Hierarchy {
    let mut hosts: HashMap<(&str, &str), u32> = HashMap::new();
    let mut sites: HashMap<&str, u32> = HashMap::new();
    let mut h = Vec::with_capacity(table.len());
    let mut s = Vec::with_capacity(table.len());
    for p in table {
        let site = p.site.as_deref().unwrap_or("");
        let n = sites.len() as u32;
        s.push(*sites.entry(site).or_insert(n));
        let n = hosts.len() as u32;
        h.push(*hosts.entry((site, p.host.as_str())).or_insert(n));
    }
    Hierarchy { host: h, site: s }
}
