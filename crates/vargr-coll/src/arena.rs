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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::Instant;

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
}

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
        }
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
        lock(&self.groups)
            .entry(key)
            .or_insert_with(|| Arc::new(Group::new(ranks.len(), self.policy)))
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
