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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
        let done = || self.generation.load(Ordering::Acquire) != gen;
        for _ in 0..self.policy.spins {
            if done() {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        for _ in 0..self.policy.yields {
            if done() {
                return Ok(());
            }
            std::thread::yield_now();
        }
        let started = Instant::now();
        let mut parked = lock(&self.park);
        while !done() {
            *parked += 1;
            parked = match self.policy.timeout {
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
    let area = &c.area;
    let broken = |why: String| CollError::Job {
        reason: format!("the job's collective area: {why}"),
    };
    let gen = area.generation();
    area.deposit(me, buf).map_err(|e| broken(e.to_string()))?;
    if area.arrive() {
        match cross_combine(area, buf.len(), kind, op) {
            Ok(v) => area.publish(gen, Ok(&v)),
            Err(why) => area.publish(gen, Err(&why)),
        }
    } else {
        let started = Instant::now();
        loop {
            let slice = if (c.progress)() {
                CROSS_SLICE_BACKLOG
            } else {
                CROSS_SLICE
            };
            if area.wait(gen, policy.yields, slice) {
                break;
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
    match area.result(buf).map_err(|e| broken(e.to_string()))? {
        vargr_shm::Outcome::Done => Ok(()),
        vargr_shm::Outcome::Failed(reason) => Err(CollError::UserOp { rank: me, reason }),
    }
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
