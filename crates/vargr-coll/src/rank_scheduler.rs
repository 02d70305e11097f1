//! A user-level scheduler for overdecomposition (seed 000, §8.3.4): when a process runs
//! more ranks than it has cores, the ranks that have work should run, and among them the
//! ones whose messages cross to other processes (and maybe a WAN) should run first, so
//! their messages are on the way while the others compute.
//!
//! Each rank holds a *slot* while it computes and gives it up while it waits in a receive;
//! on return from the receive it queues for a slot again. With `Serialize` there is one
//! slot (one rank computes at a time: fewer context switches, warmer caches); with
//! `Priority` there is a slot per core and ranks whose last send went to another process
//! are let back first. Fairness is not needed: a favoured rank soon blocks again waiting
//! for the others.

use std::str::FromStr;
use std::sync::{Condvar, Mutex, MutexGuard};

/// How ranks of one process share its cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchedPolicy {
    /// Leave it to the operating system.
    #[default]
    None,
    /// One rank computes at a time.
    Serialize,
    /// A slot per core; ranks talking to other processes go first.
    Priority,
}

impl FromStr for SchedPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" | "" => Ok(SchedPolicy::None),
            "serialize" => Ok(SchedPolicy::Serialize),
            "priority" => Ok(SchedPolicy::Priority),
            other => Err(format!(
                "unknown scheduling policy {other:?} (none, serialize or priority)"
            )),
        }
    }
}

/// Priority classes: ranks that last sent to another process, and the rest.
pub(crate) const HIGH: usize = 0;
pub(crate) const LOW: usize = 1;

struct State {
    free: usize,
    waiting: [usize; 2],
}

/// The slots of one process.
pub struct Scheduler {
    state: Mutex<State>,
    cv: [Condvar; 2],
}

impl Scheduler {
    /// A scheduler with `slots` ranks computing at once.
    pub fn new(slots: usize) -> Scheduler {
        Scheduler {
            state: Mutex::new(State {
                free: slots.max(1),
                waiting: [0; 2],
            }),
            cv: [Condvar::new(), Condvar::new()],
        }
    }

    /// The scheduler for `policy` on this machine, or none.
    pub fn for_policy(policy: SchedPolicy) -> Option<Scheduler> {
        match policy {
            SchedPolicy::None => None,
            SchedPolicy::Serialize => Some(Scheduler::new(1)),
            SchedPolicy::Priority => Some(Scheduler::new(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            )),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a slot; a `HIGH` rank goes before any waiting `LOW` one.
    pub(crate) fn acquire(&self, class: usize) {
        let mut s = self.lock();
        while s.free == 0 || (class == LOW && s.waiting[HIGH] > 0) {
            s.waiting[class] += 1;
            s = self.cv[class].wait(s).unwrap_or_else(|p| p.into_inner());
            s.waiting[class] -= 1;
        }
        s.free -= 1;
    }

    /// Gives a slot back and lets the most deserving waiter have it.
    pub(crate) fn release(&self) {
        let mut s = self.lock();
        s.free += 1;
        if s.waiting[HIGH] > 0 {
            self.cv[HIGH].notify_one();
        } else if s.waiting[LOW] > 0 {
            self.cv[LOW].notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn never_more_ranks_than_slots_and_high_goes_first() {
        let s = Arc::new(Scheduler::new(2));
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (s, running, peak) = (s.clone(), running.clone(), peak.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        s.acquire(i % 2);
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        std::hint::spin_loop();
                        running.fetch_sub(1, Ordering::SeqCst);
                        s.release();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= 2);
    }

    #[test]
    fn a_waiting_high_rank_is_admitted_before_a_low_one() {
        let s = Arc::new(Scheduler::new(1));
        s.acquire(LOW);
        let order = Arc::new(Mutex::new(Vec::new()));
        let spawn = |class: usize| {
            let (s, order) = (s.clone(), order.clone());
            std::thread::spawn(move || {
                s.acquire(class);
                order.lock().unwrap().push(class);
                s.release();
            })
        };
        let wait_for = |class: usize| {
            while s.lock().waiting[class] == 0 {
                std::thread::yield_now();
            }
        };
        let low = spawn(LOW);
        wait_for(LOW);
        let high = spawn(HIGH);
        wait_for(HIGH);
        s.release();
        low.join().unwrap();
        high.join().unwrap();
        assert_eq!(*order.lock().unwrap(), vec![HIGH, LOW]);
    }

    #[test]
    fn policies_parse() {
        assert_eq!("priority".parse(), Ok(SchedPolicy::Priority));
        assert!("fifo".parse::<SchedPolicy>().unwrap_err().contains("fifo"));
    }
}
