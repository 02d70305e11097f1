//! A mesh of ranks: tagged messages between the ranks of a job, over sockets between
//! processes and straight into mailboxes within one.
//!
//! This is what MPI-style collectives need from the network (vargr-coll's socket
//! transport is a thin layer over it): eager `send(src, dest, tag, bytes)` that never
//! waits for the receiver, and blocking `recv(dest, src, tag)` matched on source and tag,
//! in order per (source, tag). Connections open on first use, one per ordered pair of
//! processes (the sender dials), so two ranks dialling each other never race. A separate
//! thread accepts and authenticates incoming connections, off the latency path; whichever
//! rank thread waits in `recv` drives the sockets (no I/O thread on the hot path). Links
//! carry the configured stages, so a job split into sites runs over an emulated WAN.
//!
//! Ranks of one host listen on Unix sockets in the user's private runtime directory
//! (never the shared temporary directory), removed when the mesh goes. Liveness comes
//! from the job's rendezvous, not from the mesh's links (whose sockets only a waiting
//! rank drives): a thread answers its heartbeats, and when the job ends because a
//! process went silent, [`Mesh::abort`] makes every receive fail with the reason.
//!
//! When the whole job is on one host, messages between processes go through shared
//! memory instead of the sockets (`shm_link.rs`): the same mailboxes, filled by the
//! thread that polls, which also watches the shared-memory bell.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use vargr_wire::{encode_header, FrameKind, HEADER_LEN};

use crate::auth::{self, Secret};
use crate::gate::{Gate, GateConfig};
use crate::runtime_dir::{RemoveOnDrop, RuntimeDir};
use crate::shm_link::{self, ShmLink};
use crate::wireup::{JobEnv, JobSettings, JobWatch, PeerInfo, WatchGuard};
use crate::{
    Addr, Link, LinkId, LinkSecurity, Listener, NetError, Reactor, ReactorEvent, SecureConn,
};
use vargr_stage::StageChain;

/// Chooses the stages of the link from this process to the process of a peer.
pub type StagePicker = dyn Fn(&PeerInfo) -> StageChain + Send + Sync;

/// Largest message, in bytes.
pub const MAX_MESSAGE: usize = 1 << 30;

/// Which messages a receive takes: from `src` (any source if `None`) with a tag whose
/// bits under `mask` equal `tag`'s (MPI's `ANY_SOURCE` and `ANY_TAG` as patterns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MailMatch {
    pub src: Option<u32>,
    pub tag: u64,
    pub mask: u64,
}

impl MailMatch {
    /// Exactly `src` and `tag`.
    pub fn exact(src: u32, tag: u64) -> MailMatch {
        MailMatch {
            src: Some(src),
            tag,
            mask: u64::MAX,
        }
    }

    pub fn accepts(&self, src: u32, tag: u64) -> bool {
        self.src.is_none_or(|s| s == src) && (tag ^ self.tag) & self.mask == 0
    }

    /// The one (source, tag) this pattern takes, if it takes only one.
    fn single(&self) -> Option<(u32, u64)> {
        (self.mask == u64::MAX).then_some(())?;
        Some((self.src?, self.tag))
    }
}

/// A message a [`Mesh::recv_match`] took, and which of its patterns took it.
#[derive(Debug, Clone)]
pub struct Mail {
    pub pattern: usize,
    pub src: u32,
    pub tag: u64,
    pub data: Bytes,
}

struct State {
    reactor: Option<Reactor>,
    /// Outgoing link per destination process (by its first rank).
    out: HashMap<u32, LinkId>,
    /// Incoming links and the first rank of the process at the other end.
    inbound: HashMap<LinkId, u32>,
    /// Messages waiting for a `recv`, by (destination rank, source rank, tag), each with
    /// its arrival number (wildcard receives take the oldest of several queues).
    mail: HashMap<(u32, u32, u64), VecDeque<(u64, Bytes)>>,
    /// Messages that ever arrived: the next arrival number.
    arrivals: u64,
    /// Processes whose links failed, with the reason (a `recv` from them fails).
    lost: HashMap<u32, String>,
    events: Vec<ReactorEvent>,
    /// Threads waiting for mail, per local rank (index: rank minus the first local rank).
    waiting: Vec<u32>,
    /// Of those, the ones waiting for another process (only they need the reactor).
    wants_reactor: Vec<u32>,
    /// The local rank whose thread has the reactor out polling, if any.
    poller: Option<u32>,
    /// Work for the reactor queued while another thread had it out polling.
    outbox: Vec<(u32, Bytes)>,
    pending: Vec<(u32, Link)>,
    /// Whether the link to a process has stages (which must see whole frames).
    staged: HashMap<u32, bool>,
    /// Shared memory with the other processes of this host, when the job is all here.
    shm: Option<ShmLink>,
}

impl State {
    /// The oldest message waiting under `key`, if any.
    fn take_mail(&mut self, key: &(u32, u32, u64)) -> Option<Bytes> {
        let q = self.mail.get_mut(key)?;
        let b = q.pop_front();
        if q.is_empty() {
            self.mail.remove(key);
        }
        b.map(|(_, b)| b)
    }

    fn put_mail(&mut self, key: (u32, u32, u64), data: Bytes) {
        let n = self.arrivals;
        self.arrivals += 1;
        self.mail.entry(key).or_default().push_back((n, data));
    }

    /// The oldest message for `dest` that the first pattern able to take one accepts:
    /// (pattern index, source, tag, data).
    fn take_match(&mut self, dest: u32, pats: &[MailMatch]) -> Option<(usize, u32, u64, Bytes)> {
        for (i, p) in pats.iter().enumerate() {
            let key = match p.single() {
                Some((src, tag)) => (dest, src, tag),
                None => {
                    let oldest = self
                        .mail
                        .iter()
                        .filter(|((d, s, t), _)| *d == dest && p.accepts(*s, *t))
                        .min_by_key(|(_, q)| q.front().map_or(u64::MAX, |(n, _)| *n));
                    match oldest {
                        Some((key, _)) => *key,
                        None => continue,
                    }
                }
            };
            if let Some(b) = self.take_mail(&key) {
                return Some((i, key.1, key.2, b));
            }
        }
        None
    }

    /// Hands queued links and frames to `reactor` and writes what the sockets take.
    fn apply(&mut self, reactor: &mut Reactor) {
        for (p, link) in self.pending.drain(..) {
            match reactor.add(link) {
                Ok(id) => {
                    self.out.insert(p, id);
                }
                Err(e) => {
                    self.lost.insert(p, format!("registering its link: {e}"));
                }
            }
        }
        for (p, b) in self.outbox.drain(..) {
            if let Some(&id) = self.out.get(&p) {
                reactor.send(id, b);
            }
        }
        reactor.flush_all();
    }
}

/// One process's endpoint in the mesh, shared by the ranks it hosts.
pub struct Mesh {
    env: JobEnv,
    table: Vec<PeerInfo>,
    /// The first rank of each rank's process, worked out once: comparing addresses (paths)
    /// on every message showed in profiles.
    firsts: Box<[u32]>,
    secret: Secret,
    state: Mutex<State>,
    /// One condition variable per local rank, so a message wakes only the threads
    /// waiting for that rank (one shared variable woke all 64 ranks for each message).
    cvs: Box<[Condvar]>,
    waker: Arc<mio::Waker>,
    accepted: Mutex<mpsc::Receiver<(u32, SecureConn)>>,
    dialing: Mutex<()>,
    stages: Box<StagePicker>,
    stop: Arc<AtomicBool>,
    timeout: Duration,
    /// The Unix socket this process listens on, removed with the mesh.
    _socket: Option<RemoveOnDrop>,
    runtime_dir: std::path::PathBuf,
    /// The job's heartbeats (and the rendezvous, if this process hosts it).
    watch: Mutex<Option<WatchGuard>>,
}

/// A listener bound before the job's wire-up, with the address to publish.
pub struct Bound {
    pub listener: Listener,
    pub addr: Addr,
    /// A Unix socket's file, removed when this is dropped.
    pub socket: Option<RemoveOnDrop>,
    /// The runtime directory it was given (for the job's later listeners).
    pub runtime_dir: std::path::PathBuf,
    /// The shared-memory inbox made beside the socket, if the job uses one.
    pub(crate) shm: Option<ShmLink>,
}

impl Mesh {
    /// Binds this process's listener before the job's wire-up; [`Mesh::start`] then
    /// takes the table. `local_only` listens on a Unix socket in the user's runtime
    /// directory `dir` (opened only then), else on TCP.
    pub fn bind(local_only: bool, dir: &std::path::Path) -> Result<Bound, NetError> {
        let (addr, socket) = if local_only {
            let dir = RuntimeDir::open(dir)?;
            let mut r = [0u8; 6];
            getrandom::getrandom(&mut r).map_err(|e| NetError::Job {
                reason: format!("no randomness for a socket name: {e}"),
            })?;
            let name: String = r.iter().map(|b| format!("{b:02x}")).collect();
            let path = dir.join(format!(
                "{}{name}.sock",
                crate::runtime_dir::mesh_socket_prefix(std::process::id())
            ));
            (Addr::Unix(path.clone()), Some(path))
        } else {
            (Addr::Tcp("0.0.0.0:0".into()), None)
        };
        // bind(2) fails if the name exists: a socket file is always new.
        let l = Listener::bind(&addr)?;
        let socket = socket.map(RemoveOnDrop::new);
        let advertised = l.local_addr()?.advertised();
        Ok(Bound {
            listener: l,
            addr: advertised,
            socket,
            runtime_dir: dir.to_path_buf(),
            shm: None,
        })
    }

    /// Starts the mesh for this process's ranks, given the job table from wire-up.
    pub fn start(
        env: JobEnv,
        table: Vec<PeerInfo>,
        bound: Bound,
        secret: Secret,
        stages: Box<StagePicker>,
    ) -> Result<Arc<Mesh>, NetError> {
        let Bound {
            listener,
            socket,
            runtime_dir,
            shm,
            ..
        } = bound;
        let local = env.local.max(1) as usize;
        let mut reactor = Reactor::new().map_err(|e| NetError::io("creating", "the poller", e))?;
        // Links with stages (an emulated WAN between sites, compression, dedup) must
        // carry every message through them: such a job stays on its sockets. Every
        // process decides alike, from the same table and settings. (Asked only when
        // this process could use shared memory; `all` stops at the first staged link.)
        let shm = shm
            .filter(|_| table.iter().all(|peer| stages(peer).is_empty()))
            .and_then(|s| shm_link::start(s, &table, &mut reactor));
        let waker = reactor.waker();
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let timeout = Duration::from_secs(30);
        spawn_acceptor(
            listener,
            secret.clone(),
            tx,
            waker.clone(),
            stop.clone(),
            timeout,
        );
        Ok(Arc::new(Mesh {
            env,
            firsts: first_ranks(&table),
            table,
            secret,
            state: Mutex::new(State {
                reactor: Some(reactor),
                out: HashMap::new(),
                inbound: HashMap::new(),
                mail: HashMap::new(),
                arrivals: 0,
                lost: HashMap::new(),
                events: Vec::new(),
                waiting: vec![0; local],
                wants_reactor: vec![0; local],
                poller: None,
                outbox: Vec::new(),
                pending: Vec::new(),
                staged: HashMap::new(),
                shm,
            }),
            cvs: (0..local).map(|_| Condvar::new()).collect(),
            waker,
            accepted: Mutex::new(rx),
            dialing: Mutex::new(()),
            stages,
            stop,
            timeout,
            _socket: socket,
            runtime_dir,
            watch: Mutex::new(None),
        }))
    }

    /// Answers the job's heartbeats from now on; if the job ends (a process went
    /// silent), every receive fails with the reason instead of waiting for ever.
    pub fn watch(self: &Arc<Mesh>, watch: JobWatch) {
        let me = Arc::downgrade(self);
        let guard = watch.start(Box::new(move |why| {
            if let Some(m) = me.upgrade() {
                m.abort(&why);
            }
        }));
        *self.watch.lock().unwrap_or_else(|p| p.into_inner()) = Some(guard);
    }

    /// Ends the job for this process: every process counts as lost with `why`, so
    /// receives waiting now, and any later, fail with it.
    pub fn abort(&self, why: &str) {
        let mut g = self.lock();
        for r in self.processes() {
            g.lost.entry(r).or_insert_with(|| why.to_string());
        }
        for cv in self.cvs.iter() {
            cv.notify_all();
        }
        // The thread polling the sockets checks too.
        let _ = self.waker.wake();
    }

    pub fn size(&self) -> u32 {
        self.env.size
    }

    pub fn env(&self) -> &JobEnv {
        &self.env
    }

    pub fn table(&self) -> &[PeerInfo] {
        &self.table
    }

    /// The user's runtime directory the job was given, for side listeners (the monitor
    /// plane) that must keep their sockets there too.
    pub fn runtime_dir(&self) -> &std::path::Path {
        &self.runtime_dir
    }

    /// The job's shared secret, for side connections (the monitor plane) that must
    /// authenticate like the mesh's own.
    pub fn secret(&self) -> &Secret {
        &self.secret
    }

    fn is_local(&self, rank: u32) -> bool {
        rank >= self.env.rank && rank < self.env.rank + self.env.local
    }

    /// The first rank of the process hosting `rank` (processes share one address).
    fn process_of(&self, rank: u32) -> u32 {
        self.firsts[rank as usize]
    }

    /// Index of local rank `rank` into the per-rank waiting state.
    fn slot(&self, rank: u32) -> usize {
        (rank - self.env.rank) as usize
    }

    /// Wakes the threads waiting for local rank `rank`, if any.
    fn notify_rank(&self, g: &State, rank: u32) {
        let i = self.slot(rank);
        if g.waiting[i] > 0 {
            self.cvs[i].notify_all();
        }
    }

    /// The reactor is free again: if anyone waits for another process, wake that rank's
    /// threads so one of them polls it.
    fn hand_off(&self, g: &State) {
        if let Some(i) = g.wants_reactor.iter().position(|&w| w > 0) {
            self.cvs[i].notify_all();
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check_rank(&self, what: &str, r: u32) -> Result<(), NetError> {
        if r >= self.env.size {
            return Err(NetError::Job {
                reason: format!(
                    "{what} rank {r} is outside the job (size {})",
                    self.env.size
                ),
            });
        }
        Ok(())
    }

    /// Sends `data` from local rank `src` to rank `dest`; returns without waiting for
    /// the receiver (what the socket does not take now is queued).
    pub fn send(&self, src: u32, dest: u32, tag: u64, data: Bytes) -> Result<(), NetError> {
        self.send_flags(src, dest, tag, data, 0)
    }

    /// Like [`Mesh::send`], with header `flags` for the link's stages (e.g. the element
    /// type of `data`, which a compressing stage uses to pick a codec).
    pub fn send_flags(
        &self,
        src: u32,
        dest: u32,
        tag: u64,
        data: Bytes,
        flags: u8,
    ) -> Result<(), NetError> {
        self.check_rank("destination", dest)?;
        if data.len() > MAX_MESSAGE {
            return Err(NetError::Job {
                reason: format!(
                    "a message of {} bytes exceeds the {MAX_MESSAGE}-byte limit",
                    data.len()
                ),
            });
        }
        if self.is_local(dest) {
            let mut g = self.lock();
            g.put_mail((dest, src, tag), data);
            self.notify_rank(&g, dest);
            if g.reactor.is_none() && g.poller == Some(dest) {
                // The thread polling is the one this message is for.
                let _ = self.waker.wake();
            }
            return Ok(());
        }
        let proc_ = self.process_of(dest);
        let Some(data) = self.send_shm(proc_, src, dest, tag, data)? else {
            return Ok(());
        };
        let mut head = BytesMut::with_capacity(HEADER_LEN + 12);
        encode_header(
            FrameKind::PointToPoint,
            flags,
            dest,
            src as i32,
            8 + data.len(),
            &mut head,
        );
        head.put_u64_le(tag);
        let mut g = self.lock();
        if let Some(why) = g.lost.get(&proc_) {
            return Err(NetError::Job {
                reason: format!("rank {dest} is unreachable: {why}"),
            });
        }
        let known =
            |g: &State| g.out.contains_key(&proc_) || g.pending.iter().any(|(p, _)| *p == proc_);
        if !known(&g) {
            // Dial without the state lock (the other side's acceptor answers on its own
            // thread), but one dial at a time: a second connection to the same process
            // would be closed, and the peer would take that for this process dying.
            drop(g);
            let dialing = self.dialing.lock().unwrap_or_else(|p| p.into_inner());
            if !known(&self.lock()) {
                let link = self.dial(proc_)?;
                let mut g = self.lock();
                g.staged.insert(proc_, !link.stages().is_empty());
                g.pending.push((proc_, link));
            }
            drop(dialing);
            g = self.lock();
        }
        if g.staged.get(&proc_).copied().unwrap_or(false) {
            // A stage must see whole frames.
            let mut whole = head;
            whole.extend_from_slice(&data);
            g.outbox.push((proc_, whole.freeze()));
        } else {
            g.outbox.push((proc_, head.freeze()));
            g.outbox.push((proc_, data));
        }
        let st = &mut *g;
        match st.reactor.take() {
            Some(mut r) => {
                st.apply(&mut r);
                st.reactor = Some(r);
            }
            // The polling thread sends it as soon as it wakes.
            None => {
                let _ = self.waker.wake();
            }
        }
        Ok(())
    }

    /// Sends through shared memory if the process of `dest` (first rank `proc_`) is
    /// reached that way; gives `data` back if it is reached over its socket.
    fn send_shm(
        &self,
        proc_: u32,
        src: u32,
        dest: u32,
        tag: u64,
        data: Bytes,
    ) -> Result<Option<Bytes>, NetError> {
        let mut g = self.lock();
        if g.shm.is_none() {
            return Ok(Some(data));
        }
        if let Some(why) = g.lost.get(&proc_) {
            return Err(NetError::Job {
                reason: format!("rank {dest} is unreachable: {why}"),
            });
        }
        let shm = g.shm.as_mut().expect("checked");
        match shm.send(proc_, vargr_shm::MsgHead { dest, src, tag }, data) {
            Ok(r) => r.map(|()| None),
            Err(data) => Ok(Some(data)),
        }
    }

    /// The job's collective area in shared memory, when the whole job is on this host
    /// and uses it (see `vargr_shm::Area`); an error if it exists but cannot be opened.
    pub fn shm_area(&self) -> Result<Option<Arc<vargr_shm::Area>>, NetError> {
        match self.lock().shm.as_mut() {
            Some(s) => s.area(),
            None => Ok(None),
        }
    }

    /// Moves what this process has queued for others (shared-memory backlogs, socket
    /// writes) and delivers shared-memory arrivals, without waiting; returns whether
    /// anything is still queued. For waits outside `recv` (the collective area's): a rank
    /// blocked there must not hold back a message another rank waits for.
    pub fn progress(&self) -> bool {
        let mut g = self.lock();
        let _ = self.progress_shm(&mut g);
        let st = &mut *g;
        let mut backlog = st.shm.as_ref().is_some_and(ShmLink::backlog);
        if let Some(mut r) = st.reactor.take() {
            st.apply(&mut r);
            backlog |= r.ids().filter_map(|i| r.link(i)).any(|l| l.backlog() > 0);
            st.reactor = Some(r);
        }
        backlog
    }

    /// Why the job cannot go on, if a process of it was lost (for waits outside
    /// `recv`, such as the collective area's, which must not outlive the job).
    pub fn failure(&self) -> Option<String> {
        self.lock().lost.values().next().cloned()
    }

    /// What went through shared memory so far (`None` if this mesh does not use it).
    pub fn shm_stats(&self) -> Option<vargr_shm::Stats> {
        self.lock().shm.as_ref().map(ShmLink::stats)
    }

    /// Moves shared-memory traffic: pushes queued messages, delivers arrivals into the
    /// mailboxes; returns whether anything moved. A peer that broke the protocol counts
    /// as lost.
    fn progress_shm(&self, g: &mut State) -> bool {
        let Some(shm) = g.shm.as_mut() else {
            return false;
        };
        let mut arrived = Vec::new();
        let r = shm.progress(
            |r| self.is_local(r),
            |dest, src, tag, data| arrived.push(((dest, src, tag), data)),
        );
        let delivered = !arrived.is_empty();
        for (key, data) in arrived {
            g.put_mail(key, data);
            self.notify_rank(g, key.0);
        }
        match r {
            Ok(moved) => moved || delivered,
            Err(e) => {
                self.shm_failed(g, e);
                true
            }
        }
    }

    fn shm_failed(&self, g: &mut State, (proc_, why): (u32, String)) {
        tracing::warn!("rank {proc_}'s process: {why}");
        g.lost.insert(proc_, why);
        for cv in self.cvs.iter() {
            cv.notify_all();
        }
    }

    /// Connects and authenticates to the process whose first rank is `proc_`.
    fn dial(&self, proc_: u32) -> Result<Link, NetError> {
        let peer = &self.table[proc_ as usize];
        let name = format!("rank {} on {}", proc_, peer.host);
        let conn = crate::connect(&peer.addr, self.timeout)?;
        let conn = auth::connect(
            conn,
            &self.secret,
            self.env.rank,
            LinkSecurity::Auto,
            self.timeout,
            &name,
        )?;
        let stages = (self.stages)(peer);
        let link = conn
            .into_link(name.clone(), MAX_MESSAGE + 64)
            .map_err(|e| NetError::io("configuring", &name, e))?;
        Ok(link.with_stages(stages))
    }

    /// The oldest message for local rank `dest` from `src` with `tag`, if one is already
    /// here. Never polls the sockets: for helper threads (monitor agents) that must not
    /// stand between the sockets and the ranks.
    pub fn try_recv(&self, dest: u32, src: u32, tag: u64) -> Result<Option<Bytes>, NetError> {
        self.check_rank("source", src)?;
        let key = (dest, src, tag);
        let mut g = self.lock();
        // Shared memory costs no system call to look at: ranks busy in the collective area
        // may never come to poll it.
        let _ = self.progress_shm(&mut g);
        if let Some(b) = g.take_mail(&key) {
            return Ok(Some(b));
        }
        if let Some(why) = g.lost.get(&self.process_of(src)) {
            return Err(NetError::Job {
                reason: format!("rank {src} was lost: {why}"),
            });
        }
        Ok(None)
    }

    /// Receives, for local rank `dest`, the oldest message from `src` with `tag`.
    ///
    /// With an interrupt check installed ([`set_interrupt_check`]) the wait runs in
    /// slices of [`INTERRUPT_SLICE`]; once it has lasted one, the check is asked after
    /// each, and the receive ends with [`NetError::Interrupted`] when it says so.
    pub fn recv(&self, dest: u32, src: u32, tag: u64) -> Result<Bytes, NetError> {
        self.check_rank("source", src)?;
        let pats = [MailMatch::exact(src, tag)];
        let got = self.recv_match(dest, &pats, true, None)?;
        Ok(got.expect("a blocking receive returns a message").data)
    }

    /// Receives, for local rank `dest`, a message that one of `pats` accepts: the oldest
    /// that the first pattern able to take one accepts (so patterns listed in the order
    /// their receives were posted match as MPI's posted receives do).
    ///
    /// Without `wait`, returns `None` at once if nothing matches. With it, blocks until a
    /// message matches, or until `elsewhere` (checked under the mesh's lock, after a
    /// [`Mesh::nudge`] for `dest`) says mail waits in another mailbox, then returns `None`.
    /// A wildcard source fails only when every other process is lost.
    pub fn recv_match(
        &self,
        dest: u32,
        pats: &[MailMatch],
        wait: bool,
        elsewhere: Option<&dyn Fn() -> bool>,
    ) -> Result<Option<Mail>, NetError> {
        if !self.is_local(dest) {
            return Err(NetError::Job {
                reason: format!("rank {dest} does not live in this process"),
            });
        }
        for p in pats {
            if let Some(src) = p.src {
                self.check_rank("source", src)?;
            }
        }
        // Mail from a rank of this process arrives by `send` alone: no need to poll.
        let from_here = pats.iter().all(|p| p.src.is_some_and(|s| self.is_local(s)));
        let started = Instant::now();
        let mut g = self.lock();
        // Without `wait`, still drive the sockets once (if no other thread is), as MPI's
        // test and probe make progress: a loop of them must see messages arrive.
        let mut polled = wait || from_here;
        loop {
            if let Some((pattern, src, tag, data)) = g.take_match(dest, pats) {
                if g.reactor.is_some() {
                    self.hand_off(&g);
                }
                return Ok(Some(Mail {
                    pattern,
                    src,
                    tag,
                    data,
                }));
            }
            if !polled {
                polled = true;
                if let Some(reactor) = g.reactor.take() {
                    g.poller = Some(dest);
                    g = self.poll_once(g, reactor, Some(Duration::ZERO));
                    g.poller = None;
                    continue;
                }
            }
            let lost = self.lost_for(&g, pats);
            if lost.is_some() || !wait || elsewhere.is_some_and(|f| f()) {
                if g.reactor.is_some() {
                    self.hand_off(&g);
                }
                return match lost {
                    Some(reason) => Err(NetError::Job { reason }),
                    None => Ok(None),
                };
            }
            // Only waits longer than a slice ask: a quick receive pays nothing for it.
            let check = INTERRUPT_CHECK
                .get()
                .filter(|_| started.elapsed() >= INTERRUPT_SLICE);
            if let Some(check) = check {
                // Outside the lock: the check may wait for a lock of its own (Python's)
                // that a thread waiting for this one holds.
                drop(g);
                let stop = check();
                g = self.lock();
                if stop {
                    if g.reactor.is_some() {
                        self.hand_off(&g);
                    }
                    let src = pats.first().and_then(|p| p.src).unwrap_or(u32::MAX);
                    return Err(NetError::Interrupted { src });
                }
            }
            match g.reactor.take_if(|_| !from_here) {
                Some(reactor) => {
                    g.poller = Some(dest);
                    g = self.poll_once(g, reactor, None);
                    g.poller = None;
                }
                None => {
                    let i = self.slot(dest);
                    let remote = u32::from(!from_here);
                    g.waiting[i] += 1;
                    g.wants_reactor[i] += remote;
                    g = if INTERRUPT_CHECK.get().is_some() {
                        self.cvs[i]
                            .wait_timeout(g, INTERRUPT_SLICE)
                            .unwrap_or_else(|p| p.into_inner())
                            .0
                    } else {
                        self.cvs[i].wait(g).unwrap_or_else(|p| p.into_inner())
                    };
                    g.waiting[i] -= 1;
                    g.wants_reactor[i] -= remote;
                }
            }
        }
    }

    /// Why no message can come for any of `pats` any more, if none can: a named source's
    /// process is lost, or for a wildcard every other process is.
    fn lost_for(&self, g: &State, pats: &[MailMatch]) -> Option<String> {
        let mut why = None;
        for p in pats {
            match p.src {
                Some(src) => match g.lost.get(&self.process_of(src)) {
                    Some(w) => {
                        why = Some(format!(
                            "rank {src} was lost before it sent the message: {w}"
                        ))
                    }
                    None => return None,
                },
                None => {
                    if self.env.local > 1 {
                        // Ranks of this process can still send.
                        return None;
                    }
                    why = Some("no other rank can send to this one".into());
                    for p in self.processes().filter(|&p| !self.is_local(p)) {
                        match g.lost.get(&p) {
                            Some(w) => why = Some(format!("every other process was lost ({w})")),
                            None => return None,
                        }
                    }
                }
            }
        }
        why
    }

    /// The first rank of every process.
    fn processes(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.env.size)
            .filter(|&r| r == 0 || self.table[r as usize - 1].addr != self.table[r as usize].addr)
    }

    /// Wakes local rank `dest` if it waits in [`Mesh::recv_match`], so that it checks its
    /// `elsewhere` again (mail for it arrived in a mailbox the mesh does not keep).
    pub fn nudge(&self, dest: u32) {
        let g = self.lock();
        if self.is_local(dest) {
            self.notify_rank(&g, dest);
            if g.poller == Some(dest) {
                let _ = self.waker.wake();
            }
        }
    }

    /// Drives the sockets once, waiting up to `wait` (default: a slice) for events.
    fn poll_once<'a>(
        &'a self,
        mut g: MutexGuard<'a, State>,
        mut reactor: Reactor,
        wait: Option<Duration>,
    ) -> MutexGuard<'a, State> {
        g.apply(&mut reactor);
        // Shared memory brought or took something: the mail may be what this thread
        // waits for, so look before polling the sockets (a later round does).
        let moved = self.progress_shm(&mut g);
        if moved && g.shm.as_mut().is_some_and(ShmLink::may_skip_sockets) {
            g.reactor = Some(reactor);
            return g;
        }
        // Whether to block in the poll: not if shared memory has news, nor when the
        // caller asked not to wait.
        let mut idle = !moved && wait != Some(Duration::ZERO);
        if let Some(watch) = g.shm.as_ref().map(ShmLink::watch).filter(|_| idle) {
            drop(g);
            idle = shm_link::yield_for(&watch);
            g = self.lock();
            if !idle && g.shm.as_mut().is_some_and(ShmLink::may_skip_sockets) {
                let _ = self.progress_shm(&mut g);
                g.reactor = Some(reactor);
                return g;
            }
            if idle {
                match g.shm.as_mut().map(ShmLink::prepare_sleep) {
                    Some(Ok(sleep)) => idle = sleep,
                    Some(Err(e)) => {
                        self.shm_failed(&mut g, e);
                        idle = false;
                    }
                    None => {}
                }
            }
        }
        let mut events = std::mem::take(&mut g.events);
        drop(g);
        // New incoming connections from the acceptor thread.
        let mut fresh = Vec::new();
        {
            let rx = self.accepted.lock().unwrap_or_else(|p| p.into_inner());
            while let Ok((rank, conn)) = rx.try_recv() {
                fresh.push((rank, conn));
            }
        }
        let mut added = Vec::new();
        for (rank, conn) in fresh {
            let name = format!("rank {rank}");
            // Incoming links carry the same stages as outgoing ones to that peer: a
            // stage that transforms frames (compression) must undo it on arrival.
            let stages = match self.table.get(rank as usize) {
                Some(peer) => (self.stages)(peer),
                None => StageChain::default(),
            };
            if let Ok(link) = conn.into_link(name, MAX_MESSAGE + 64) {
                if let Ok(id) = reactor.add(link.with_stages(stages)) {
                    added.push((id, rank));
                }
            }
        }
        let wait = if !idle {
            Duration::ZERO
        } else {
            wait.unwrap_or(if INTERRUPT_CHECK.get().is_some() {
                INTERRUPT_SLICE
            } else {
                Duration::from_millis(500)
            })
        };
        let r = reactor.poll(Some(wait), &mut events);
        let mut g = self.lock();
        if let Some(s) = g.shm.as_ref().filter(|_| idle) {
            s.woke();
        }
        let _ = self.progress_shm(&mut g);
        for (id, rank) in added {
            g.inbound.insert(id, rank);
        }
        if let Err(e) = r {
            tracing::warn!("mesh poll failed: {e}");
        }
        for ev in events.drain(..) {
            match ev {
                ReactorEvent::Frame(_, f) if f.kind == FrameKind::PointToPoint => {
                    if f.payload.len() < 8 {
                        continue;
                    }
                    let tag = u64::from_le_bytes(f.payload[..8].try_into().expect("8 bytes"));
                    if !self.is_local(f.stream) {
                        continue;
                    }
                    let key = (f.stream, f.tag as u32, tag);
                    g.put_mail(key, f.payload.slice(8..));
                    self.notify_rank(&g, f.stream);
                }
                ReactorEvent::Frame(..) | ReactorEvent::Woken => {}
                ReactorEvent::Closed(id, err) => {
                    let who = g
                        .inbound
                        .get(&id)
                        .copied()
                        .or_else(|| g.out.iter().find(|(_, l)| **l == id).map(|(p, _)| *p));
                    let was_inbound = g.inbound.contains_key(&id);
                    g.inbound.remove(&id);
                    g.out.retain(|_, l| *l != id);
                    // Only a link that brings messages makes a rank lost for `recv`;
                    // what it sent before closing stays in the mailboxes.
                    if let (Some(p), true) = (who, was_inbound) {
                        let why = err
                            .map(|e| e.to_string())
                            .unwrap_or_else(|| "it closed its connection".into());
                        g.lost.insert(p, why);
                        // Anyone may be waiting for that process.
                        for cv in self.cvs.iter() {
                            cv.notify_all();
                        }
                    }
                }
            }
        }
        g.apply(&mut reactor);
        g.events = events;
        g.reactor = Some(reactor);
        g
    }

    /// Writes everything queued (call before the process exits).
    pub fn flush(&self, within: Duration) {
        let deadline = Instant::now() + within;
        let mut g = self.lock();
        loop {
            match g.reactor.take() {
                Some(mut r) => {
                    g.apply(&mut r);
                    let backlog: usize =
                        r.ids().filter_map(|i| r.link(i)).map(|l| l.backlog()).sum();
                    // Once a process is lost the job is ending: what it would have read
                    // by single copy no longer matters.
                    let shm_backlog =
                        g.lost.is_empty() && g.shm.as_ref().is_some_and(ShmLink::backlog);
                    if (backlog == 0 && !shm_backlog) || Instant::now() >= deadline {
                        g.reactor = Some(r);
                        self.hand_off(&g);
                        return;
                    }
                    g = self.poll_once(g, r, None);
                }
                None => {
                    g.waiting[0] += 1;
                    g = self.cvs[0]
                        .wait_timeout(g, Duration::from_millis(50))
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                    g.waiting[0] -= 1;
                }
            }
        }
    }
}

/// The first rank of the process hosting each rank (processes share one address).
fn first_ranks(table: &[PeerInfo]) -> Box<[u32]> {
    let mut firsts: Vec<u32> = Vec::with_capacity(table.len());
    for (r, p) in table.iter().enumerate() {
        let first = match r {
            0 => 0,
            _ if table[r - 1].addr == p.addr => firsts[r - 1],
            _ => r as u32,
        };
        firsts.push(first);
    }
    firsts.into_boxed_slice()
}

/// How often a blocking receive asks the interrupt check, once one is installed.
pub const INTERRUPT_SLICE: Duration = Duration::from_millis(50);

static INTERRUPT_CHECK: std::sync::OnceLock<fn() -> bool> = std::sync::OnceLock::new();

/// Installs, once per process, a check that blocking receives call every
/// [`INTERRUPT_SLICE`] while they wait; when it returns true the receive ends with
/// [`NetError::Interrupted`]. Language bindings install one so that Ctrl-C reaches a
/// program blocked in a collective (Python runs signal handlers only when the waiting
/// thread returns to it). Returns false if a check was already installed.
pub fn set_interrupt_check(check: fn() -> bool) -> bool {
    INTERRUPT_CHECK.set(check).is_ok()
}

/// Asks the installed interrupt check (false without one), for blocking waits outside
/// [`Mesh::recv`] that must end the same way.
pub fn interrupted() -> bool {
    INTERRUPT_CHECK.get().is_some_and(|check| check())
}

impl Drop for Mesh {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn spawn_acceptor(
    listener: Listener,
    secret: Secret,
    tx: mpsc::Sender<(u32, SecureConn)>,
    waker: Arc<mio::Waker>,
    stop: Arc<AtomicBool>,
    timeout: Duration,
) {
    let _ = std::thread::Builder::new()
        .name("vargr-mesh-accept".into())
        .spawn(move || {
            let gate = Gate::open(
                listener,
                secret,
                GateConfig {
                    deadline: timeout,
                    ..GateConfig::default()
                },
                Box::new(|e| tracing::warn!("mesh refused a connection: {e}")),
            );
            while !stop.load(Ordering::Relaxed) {
                match gate.accept_timeout(Duration::from_millis(200)) {
                    Ok(a) => {
                        if tx.send((a.node, a.conn)).is_err() {
                            return;
                        }
                        let _ = waker.wake();
                    }
                    Err(NetError::Timeout { .. }) => continue,
                    Err(_) => return,
                }
            }
        });
}

/// Joins the job this process was started in (see [`crate::wireup::join_job`]) and opens its
/// mesh, with `stages` choosing each outgoing link's stages; the mesh answers the job's
/// heartbeats.
pub fn join(stages: Box<StagePicker>, settings: &JobSettings) -> Result<Arc<Mesh>, NetError> {
    let env = JobEnv::from_env()?;
    let mut bound = Mesh::bind(env.single_host(), &settings.runtime_dir)?;
    if settings.shm {
        bound.shm = shm_link::bind(&bound.addr, &env);
    }
    let joined = crate::wireup::join_job(&env, &bound.addr, settings)?;
    let mesh = Mesh::start(env, joined.table, bound, joined.secret, stages)?;
    mesh.watch(joined.watch);
    Ok(mesh)
}
