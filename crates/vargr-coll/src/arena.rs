//! Shared-memory collectives for ranks that are threads of one process.
//!
//! Message passing between threads costs a wake-up per message, and with many ranks per
//! core the wake-ups dominate: a recursive-doubling allreduce on 64 threads wakes each
//! thread log2(64) times. The PATHS allreduce wrapper does better: every thread deposits
//! its value and blocks, the *last* to arrive combines all values and wakes everyone once.
//! A [`Group`] is that wrapper. It combines in rank order, left to right
//! (`((x0 ∘ x1) ∘ x2) ∘ …`, the flat order), so results do not depend on arrival order
//! and non-commutative operators work.
//!
//! An [`Arena`] hands out one `Group` per communicator (keyed by context id and lowest
//! member). Any transport whose ranks share a process can offer one through
//! [`Transport::arena`](crate::Transport::arena): the in-process fabric does, and a socket
//! transport running K ranks per process can for its local ranks.
//!
//! Processes of one host meet the same way in the job's collective area in shared memory
//! ([`vargr_shm::Area`], see [`CrossProcess`]): for communicators of the whole job in
//! rank order, a group deposits in the area's slots, the last process to arrive combines
//! (the same rank order), and the others wait on a futex instead of a condition variable.

use std::collections::HashMap;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use crate::elem::ElemKind;
use crate::error::{CollError, Result};
use crate::inproc::WaitPolicy;
use crate::op::Op;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its data consistent, so poisoning is harmless.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Shared-memory rendezvous for the ranks of one process.
pub struct Arena {
    /// Transport ranks that live in this process.
    local: Box<[bool]>,
    groups: Mutex<HashMap<(u32, usize), Arc<Group>>>,
    policy: WaitPolicy,
    /// The job's collective area, when its processes share one host.
    cross: Option<Arc<CrossProcess>>,
}

/// The job's collective area for processes of one host, how to learn that the job failed
/// (a process waiting in the area for one that died must not wait for ever), and how to
/// move this process's queued messages meanwhile (a rank may wait here for one that
/// waits for the rest of a message this one sent).
pub struct CrossProcess {
    pub area: Arc<vargr_shm::Area>,
    pub failure: Box<dyn Fn() -> Option<String> + Send + Sync>,
    /// Pushes queued messages without waiting; true while some remain queued.
    pub progress: Box<dyn Fn() -> bool + Send + Sync>,
}

/// How long a wait in the collective area blocks before it checks the job and its
/// deadline again; with messages still queued, before it pushes them again.
const CROSS_SLICE: Duration = Duration::from_millis(50);
const CROSS_SLICE_BACKLOG: Duration = Duration::from_millis(1);

impl Arena {
    /// An arena for a transport of `size` ranks of which `local` are in this process.
    pub fn new(size: usize, local: impl IntoIterator<Item = usize>, policy: WaitPolicy) -> Arena {
        let mut l = vec![false; size].into_boxed_slice();
        for r in local {
            if r < size {
                l[r] = true;
            }
        }
        Arena {
            local: l,
            groups: Mutex::new(HashMap::new()),
            policy,
            cross: None,
        }
    }

    /// Lets communicators of the whole job meet in `cross` (processes of one host).
    pub fn with_processes(mut self, cross: CrossProcess) -> Arena {
        self.cross = Some(Arc::new(cross));
        self
    }

    /// Whether `ranks` meet in this arena: all threads of this process, or the whole job
    /// in rank order through the collective area (whose slots are indexed by rank).
    pub fn shares(&self, ranks: &[usize]) -> bool {
        self.covers(ranks)
            || self.cross.as_ref().is_some_and(|c| {
                ranks.len() == c.area.ranks() && ranks.iter().enumerate().all(|(i, &r)| i == r)
            })
    }

    /// Whether every one of `ranks` (transport ranks) lives in this process.
    pub fn covers(&self, ranks: &[usize]) -> bool {
        ranks
            .iter()
            .all(|&r| self.local.get(r).copied().unwrap_or(false))
    }

    /// The group of the communicator with context `ctx` and members `ranks`; created by
    /// the first member that asks.
    pub fn group(&self, ctx: u32, ranks: &[usize]) -> Arc<Group> {
        let key = (ctx, ranks.iter().copied().min().unwrap_or(0));
        let cross = (!self.covers(ranks)).then(|| self.cross.clone()).flatten();
        lock(&self.groups)
            .entry(key)
            .or_insert_with(|| {
                let mut g = Group::new(ranks.len(), self.policy);
                g.cross = cross;
                Arc::new(g)
            })
            .clone()
    }
}

/// One communicator's shared-memory rendezvous (a PATHS "gred" wrapper).
pub struct Group {
    n: usize,
    policy: WaitPolicy,
    /// Each rank's contribution for the current round.
    slots: Box<[Mutex<Vec<u8>>]>,
    /// The combined value of the last round, or why it failed. A read-write lock so that
    /// the woken ranks copy it out concurrently.
    result: RwLock<std::result::Result<Vec<u8>, String>>,
    arrived: AtomicUsize,
    /// Completed rounds; waiters watch it change.
    generation: AtomicU64,
    park: Mutex<u32>,
    cv: Condvar,
    /// Set for a group of processes: it meets in the job's collective area instead.
    cross: Option<Arc<CrossProcess>>,
    /// Where each rank's buffer is for a split round (see [`Group::allreduce_split`]).
    shared: Box<[Shared]>,
    /// Why the current split round failed, if it did.
    failure: Mutex<Option<String>>,
}

/// One rank's buffer, offered to the others for a split round.
struct Shared {
    ptr: AtomicPtr<u8>,
    len: AtomicUsize,
    /// The generation the buffer was offered for: a rank that left (or took the combining
    /// path) is never mistaken for one that offered its buffer this round.
    gen: AtomicU64,
}

/// Buffers of at least this many bytes are combined block by block by all ranks at once
/// instead of by the last to arrive (docs/benchmarks.md, "Large buffers").
const SPLIT_FROM: usize = 64 << 10;

/// Processes combine large buffers a piece at a time, so that the slots of all ranks
/// (ranks × piece) stay in the cache; smaller pieces pay more meetings than they save
/// (docs/benchmarks.md, "Large buffers").
const SPLIT_WORKING_SET: usize = 8 << 20;
const SPLIT_PIECE_MIN: usize = 256 << 10;

/// Bytes combined at a time: the accumulator and one operand stay in the L1 cache.
const CHUNK: usize = 8 << 10;

/// Rank `b`'s block of a `len`-byte buffer split `n` ways, in whole cache lines (64 is a
/// multiple of every element size) so that no two ranks write one line; the last block
/// takes the tail.
fn split_block(len: usize, n: usize, b: usize) -> Range<usize> {
    let lines = len / 64;
    let start = b * lines / n * 64;
    let end = if b + 1 == n {
        len
    } else {
        (b + 1) * lines / n * 64
    };
    start..end
}

impl Group {
    fn new(n: usize, policy: WaitPolicy) -> Group {
        Group {
            n,
            policy,
            slots: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
            result: RwLock::new(Ok(Vec::new())),
            arrived: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            park: Mutex::new(0),
            cv: Condvar::new(),
            cross: None,
            shared: (0..n)
                .map(|_| Shared {
                    ptr: AtomicPtr::new(std::ptr::null_mut()),
                    len: AtomicUsize::new(0),
                    gen: AtomicU64::new(u64::MAX),
                })
                .collect(),
            failure: Mutex::new(None),
        }
    }

    /// Allreduce of `buf` (in place) among the group; `me` is the communicator rank.
    /// `op = None` makes it a barrier.
    pub fn allreduce(
        &self,
        me: usize,
        buf: &mut [u8],
        kind: ElemKind,
        op: Option<&Op>,
    ) -> Result<()> {
        if self.n == 1 {
            return Ok(());
        }
        if let Some(c) = &self.cross {
            return cross_allreduce(c, self.policy, me, buf, kind, op);
        }
        if buf.len() >= SPLIT_FROM {
            if let Some(op) = op {
                return self.allreduce_split(me, buf, kind, op);
            }
        }
        let gen = self.generation.load(Ordering::Acquire);
        {
            let mut slot = lock(&self.slots[me]);
            slot.clear();
            slot.extend_from_slice(buf);
        }
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            // Last to arrive: everyone else has deposited and is waiting.
            let combined = self.combine(kind, op);
            *self.result.write().unwrap_or_else(|e| e.into_inner()) = combined;
            self.arrived.store(0, Ordering::Release);
            let parked = {
                let p = lock(&self.park);
                self.generation.store(gen + 1, Ordering::Release);
                *p
            };
            if parked > 0 {
                self.cv.notify_all();
            }
        } else {
            self.wait(me, gen)?;
        }
        match &*self.result.read().unwrap_or_else(|e| e.into_inner()) {
            Ok(v) if v.len() == buf.len() => {
                buf.copy_from_slice(v);
                Ok(())
            }
            Ok(v) => Err(CollError::MessageLength {
                rank: me,
                src: 0,
                tag: 0,
                expected: buf.len(),
                got: v.len(),
            }),
            Err(reason) => Err(CollError::UserOp {
                rank: me,
                reason: reason.clone(),
            }),
        }
    }

    /// Allreduce of a large buffer: every rank offers its buffer, then rank `b` combines
    /// block `b` of all buffers in rank order and writes the result into block `b` of
    /// every buffer. Each block is read and written by one rank only, so the buffers are
    /// read once and written once in all (the combining path copies each in, combines
    /// them on one core, and copies the result out to each), and every core works.
    fn allreduce_split(&self, me: usize, buf: &mut [u8], kind: ElemKind, op: &Op) -> Result<()> {
        let gen = self.generation.load(Ordering::Acquire);
        let mine = &self.shared[me];
        mine.ptr.store(buf.as_mut_ptr(), Ordering::Relaxed);
        mine.len.store(buf.len(), Ordering::Relaxed);
        mine.gen.store(gen, Ordering::Release);
        // From here until the second meeting ends, other ranks write into `buf`: it is
        // only touched through the pointers offered.
        self.meet(me, gen, true, || {
            let differ = self.offers_differ(gen).err();
            if let Some(why) = &differ {
                // Ranks that took the combining path read the result.
                *self.result.write().unwrap_or_else(|e| e.into_inner()) = Err(why.clone());
            }
            *lock(&self.failure) = differ;
        })?;
        if let Err(why) = self.offers_differ(gen) {
            return Err(CollError::UserOp {
                rank: me,
                reason: why,
            });
        }
        let len = buf.len();
        let work = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: every rank offered a live buffer of `len` bytes for this generation
            // (checked just above) and touches it only through these pointers until the
            // second meeting; block `me` of each is read and written by this rank alone.
            unsafe { self.combine_block(me, len, kind, op) }
        }))
        .unwrap_or_else(|_| Err("the operator panicked".to_string()));
        if let Err(why) = work {
            lock(&self.failure).get_or_insert(why);
        }
        // No deadline here: every rank is past the first meeting and has only its own
        // block left to combine, and leaving early would let them write into a buffer
        // this rank has given back.
        self.meet(me, gen + 1, false, || {})?;
        match &*lock(&self.failure) {
            None => Ok(()),
            Some(reason) => Err(CollError::UserOp {
                rank: me,
                reason: reason.clone(),
            }),
        }
    }

    /// Whether every rank offered a buffer of one length for round `gen`.
    fn offers_differ(&self, gen: u64) -> std::result::Result<(), String> {
        let len0 = self.shared[0].len.load(Ordering::Relaxed);
        for (r, s) in self.shared.iter().enumerate() {
            if s.gen.load(Ordering::Acquire) != gen {
                return Err(format!(
                    "rank {r} offered no buffer this round (allreduce called with different lengths?)"
                ));
            }
            let l = s.len.load(Ordering::Relaxed);
            if l != len0 {
                return Err(format!("rank {r} contributed {l} bytes, rank 0 {len0}"));
            }
        }
        Ok(())
    }

    /// Combines block `me` of every offered buffer, in rank order, into each of them.
    ///
    /// # Safety
    /// Every rank's offer must point to a live `len`-byte buffer nobody else touches
    /// except through offers, and no other rank may access block `me` meanwhile.
    unsafe fn combine_block(
        &self,
        me: usize,
        len: usize,
        kind: ElemKind,
        op: &Op,
    ) -> std::result::Result<(), String> {
        let block = split_block(len, self.n, me);
        let ptrs: Vec<*mut u8> = self
            .shared
            .iter()
            .map(|s| s.ptr.load(Ordering::Relaxed))
            .collect();
        let mut words = vec![0u64; CHUNK / 8];
        let mut at = block.start;
        while at < block.end {
            let n = CHUNK.min(block.end - at);
            let acc = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..n];
            acc.copy_from_slice(std::slice::from_raw_parts(ptrs[0].add(at), n));
            for &p in &ptrs[1..] {
                op.apply(kind, acc, std::slice::from_raw_parts(p.add(at), n), false)
                    .map_err(|e| e.to_string())?;
            }
            for &p in &ptrs {
                std::ptr::copy_nonoverlapping(acc.as_ptr(), p.add(at), n);
            }
            at += n;
        }
        Ok(())
    }

    /// A barrier for round `gen`: the last to arrive runs `at_last` and wakes the others.
    /// With `deadline`, a rank whose wait times out withdraws its arrival (under the lock
    /// the last arrival takes, so the round never completes counting a rank that left).
    fn meet(&self, me: usize, gen: u64, deadline: bool, at_last: impl FnOnce()) -> Result<()> {
        {
            let p = lock(&self.park);
            if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
                self.arrived.store(0, Ordering::Release);
                at_last();
                self.generation.store(gen + 1, Ordering::Release);
                if *p > 0 {
                    self.cv.notify_all();
                }
                return Ok(());
            }
        }
        let policy = WaitPolicy {
            timeout: self.policy.timeout.filter(|_| deadline),
            ..self.policy
        };
        match self.wait_with(me, gen, policy) {
            Err(e) => {
                let _p = lock(&self.park);
                if self.generation.load(Ordering::Acquire) != gen {
                    return Ok(());
                }
                self.arrived.fetch_sub(1, Ordering::AcqRel);
                self.shared[me].gen.store(u64::MAX, Ordering::Release);
                Err(e)
            }
            ok => ok,
        }
    }

    fn combine(&self, kind: ElemKind, op: Option<&Op>) -> std::result::Result<Vec<u8>, String> {
        let mut acc = lock(&self.slots[0]).clone();
        let Some(op) = op else {
            return Ok(acc);
        };
        // Keep the accumulator aligned for the element type.
        let mut words = vec![0u64; acc.len().div_ceil(8)];
        let a = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..acc.len()];
        a.copy_from_slice(&acc);
        for (r, slot) in self.slots.iter().enumerate().skip(1) {
            let s = lock(slot);
            if s.len() != a.len() {
                return Err(format!(
                    "rank {r} contributed {} bytes, rank 0 {}",
                    s.len(),
                    a.len()
                ));
            }
            op.apply(kind, a, &s, false).map_err(|e| e.to_string())?;
        }
        acc.copy_from_slice(a);
        Ok(acc)
    }

    fn wait(&self, me: usize, gen: u64) -> Result<()> {
        self.wait_with(me, gen, self.policy)
    }

    fn wait_with(&self, me: usize, gen: u64, policy: WaitPolicy) -> Result<()> {
        let done = || self.generation.load(Ordering::Acquire) != gen;
        for _ in 0..policy.spins {
            if done() {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        for _ in 0..policy.yields {
            if done() {
                return Ok(());
            }
            std::thread::yield_now();
        }
        let started = Instant::now();
        let mut parked = lock(&self.park);
        while !done() {
            *parked += 1;
            parked = match policy.timeout {
                Some(limit) => {
                    let left = limit.saturating_sub(started.elapsed());
                    if left.is_zero() {
                        *parked -= 1;
                        return Err(CollError::Timeout {
                            rank: me,
                            src: None,
                            tag: 0,
                            waited_ms: limit.as_millis() as u64,
                        });
                    }
                    self.cv
                        .wait_timeout(parked, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self.cv.wait(parked).unwrap_or_else(|e| e.into_inner()),
            };
            *parked -= 1;
        }
        Ok(())
    }
}

/// [`Group::allreduce`] for processes: deposit, the last combines in rank order and
/// publishes, the others wait on the area's futex (checking the job and the policy's
/// deadline every [`CROSS_SLICE`]).
fn cross_allreduce(
    c: &CrossProcess,
    policy: WaitPolicy,
    me: usize,
    buf: &mut [u8],
    kind: ElemKind,
    op: Option<&Op>,
) -> Result<()> {
    if buf.len() >= SPLIT_FROM {
        if let Some(op) = op {
            return cross_allreduce_split(c, policy, me, buf, kind, op);
        }
    }
    let area = &c.area;
    let gen = area.generation();
    area.deposit(me, buf)
        .map_err(|e| area_broken(e.to_string()))?;
    if area.arrive() {
        match cross_combine(area, buf.len(), kind, op) {
            Ok(v) => area.publish(gen, Ok(&v)),
            Err(why) => area.publish(gen, Err(&why)),
        }
    } else {
        cross_wait(c, policy, me, gen)?;
    }
    match area.result(buf).map_err(|e| area_broken(e.to_string()))? {
        vargr_shm::Outcome::Done => Ok(()),
        vargr_shm::Outcome::Failed(reason) => Err(CollError::UserOp { rank: me, reason }),
    }
}

fn area_broken(why: String) -> CollError {
    CollError::Job {
        reason: format!("the job's collective area: {why}"),
    }
}

/// Waits in the collective area for round `gen` to end, checking the job and the
/// policy's deadline every [`CROSS_SLICE`].
fn cross_wait(c: &CrossProcess, policy: WaitPolicy, me: usize, gen: u32) -> Result<()> {
    let started = Instant::now();
    loop {
        let slice = if (c.progress)() {
            CROSS_SLICE_BACKLOG
        } else {
            CROSS_SLICE
        };
        if c.area.wait(gen, policy.yields, slice) {
            return Ok(());
        }
        if let Some(reason) = (c.failure)() {
            return Err(CollError::Job { reason });
        }
        // Like a receive: a binding's check (Python's signals) may end the wait.
        if vargr_net::mesh::interrupted() {
            return Err(CollError::Interrupted { rank: me });
        }
        if let Some(limit) = policy.timeout.filter(|l| started.elapsed() >= *l) {
            return Err(CollError::Timeout {
                rank: me,
                src: None,
                tag: 0,
                waited_ms: limit.as_millis() as u64,
            });
        }
    }
}

/// [`Group::allreduce_split`] for processes, a slot's worth at a time: deposit, meet,
/// combine this rank's block of every slot into the result area, meet again, copy the
/// result out. The buffers cross shared memory three times (in, combined, out) instead
/// of the combining path's N+2 times on one core.
fn cross_allreduce_split(
    c: &CrossProcess,
    policy: WaitPolicy,
    me: usize,
    buf: &mut [u8],
    kind: ElemKind,
    op: &Op,
) -> Result<()> {
    let area = &c.area;
    let piece =
        (SPLIT_WORKING_SET / area.ranks()).clamp(SPLIT_PIECE_MIN, area.slot_bytes()) / 64 * 64;
    for part in buf.chunks_mut(piece) {
        let gen = area.generation();
        area.deposit(me, part)
            .map_err(|e| area_broken(e.to_string()))?;
        if area.arrive() {
            area.clear_failure();
            match area.common_length() {
                Ok(_) => area.release(gen),
                // Ranks that took the combining path read the result.
                Err(why) => area.publish(gen, Err(&why)),
            }
        } else {
            cross_wait(c, policy, me, gen)?;
        }
        // Every rank sees the same lengths, so all leave here or none does.
        area.common_length()
            .map_err(|reason| CollError::UserOp { rank: me, reason })?;
        if let Err(why) = cross_combine_block(area, me, part.len(), kind, op) {
            area.fail(&why);
        }
        let gen = gen.wrapping_add(1);
        if area.arrive() {
            area.release(gen);
        } else {
            cross_wait(c, policy, me, gen)?;
        }
        if let Some(reason) = area.failure() {
            return Err(CollError::UserOp { rank: me, reason });
        }
        area.read_result_part(part)
            .map_err(|e| area_broken(e.to_string()))?;
    }
    Ok(())
}

/// Combines block `me` of every rank's deposit, in rank order, into the result area.
fn cross_combine_block(
    area: &vargr_shm::Area,
    me: usize,
    len: usize,
    kind: ElemKind,
    op: &Op,
) -> std::result::Result<(), String> {
    let block = split_block(len, area.ranks(), me);
    let mut acc_words = vec![0u64; CHUNK / 8];
    let mut operand = vec![0u8; CHUNK];
    let mut at = block.start;
    while at < block.end {
        let n = CHUNK.min(block.end - at);
        let acc = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut acc_words)[..n];
        area.read_slot_part(0, at, acc).map_err(|e| e.to_string())?;
        for r in 1..area.ranks() {
            area.read_slot_part(r, at, &mut operand[..n])
                .map_err(|e| e.to_string())?;
            op.apply(kind, acc, &operand[..n], false)
                .map_err(|e| e.to_string())?;
        }
        area.write_result_part(at, acc).map_err(|e| e.to_string())?;
        at += n;
    }
    Ok(())
}

/// Combines every rank's deposit in rank order (`((x0 ∘ x1) ∘ x2) ∘ …`).
fn cross_combine(
    area: &vargr_shm::Area,
    len: usize,
    kind: ElemKind,
    op: Option<&Op>,
) -> std::result::Result<Vec<u8>, String> {
    let mut slot = Vec::with_capacity(len);
    area.read_slot(0, &mut slot).map_err(|e| e.to_string())?;
    let Some(op) = op else {
        return Ok(slot);
    };
    if slot.len() != len {
        return Err(format!(
            "rank 0 contributed {} bytes, the last rank {len}",
            slot.len()
        ));
    }
    // Keep the accumulator aligned for the element type.
    let mut words = vec![0u64; len.div_ceil(8)];
    let acc = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..len];
    acc.copy_from_slice(&slot);
    for r in 1..area.ranks() {
        area.read_slot(r, &mut slot).map_err(|e| e.to_string())?;
        if slot.len() != len {
            return Err(format!(
                "rank {r} contributed {} bytes, rank 0 {len}",
                slot.len()
            ));
        }
        op.apply(kind, acc, &slot, false)
            .map_err(|e| e.to_string())?;
    }
    Ok(acc.to_vec())
}
