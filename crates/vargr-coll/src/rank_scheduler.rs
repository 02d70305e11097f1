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
//!
//! `Coschedule` is the seed's third scheduler, "computation and communication
//! coscheduling": application threads may not return to user level while collective
//! communication threads are to be unblocked. PastSet ran collectives in threads of
//! their own; here two kinds of work play that part:
//!
//! - the helper threads of collectives (the conditional allreduce's prefetch and serve
//!   threads, one pair per remote site at each site root). They hold no slot; while one
//!   has been woken and has not blocked again (a reply to send, a tuple to cache, a
//!   request to answer), ranks coming back from communication wait, so a core stays free
//!   for it instead of going to computation;
//! - a rank's own steps inside a collective (the receives of `execute`'s schedules):
//!   a rank whose receive completed inside a collective will forward or combine, not
//!   compute, so it queues in the high class and goes before every rank returning to
//!   computation. Point-to-point receives stay in the low class: as in the seed, they
//!   are "served immediately, since run in the context of an application thread" and
//!   blocked only on their way back to computation.
//!
//! The seed's helper threads were known to the scheduler when *signalled*; ours are seen
//! once they run after the wake-up, so the gate keeps a core free while collective work
//! is in progress rather than before it starts. A gate never holds a rank longer than
//! [`COSCHEDULE_GATE`]: helpers are not ranks, and a helper stuck on something else must
//! not stop the application.

use std::cell::{Cell, RefCell};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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
    /// A slot per core; collective communication (helper threads, ranks inside a
    /// collective) goes before computation.
    Coschedule,
}

impl FromStr for SchedPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" | "" => Ok(SchedPolicy::None),
            "serialize" => Ok(SchedPolicy::Serialize),
            "priority" => Ok(SchedPolicy::Priority),
            "coschedule" => Ok(SchedPolicy::Coschedule),
            other => Err(format!(
                "unknown scheduling policy {other:?} (none, serialize, priority or coschedule)"
            )),
        }
    }
}

impl SchedPolicy {
    /// The name `FromStr` takes.
    pub fn name(self) -> &'static str {
        match self {
            SchedPolicy::None => "none",
            SchedPolicy::Serialize => "serialize",
            SchedPolicy::Priority => "priority",
            SchedPolicy::Coschedule => "coschedule",
        }
    }

    pub const ALL: [SchedPolicy; 4] = [
        SchedPolicy::None,
        SchedPolicy::Serialize,
        SchedPolicy::Priority,
        SchedPolicy::Coschedule,
    ];
}

/// Priority classes: with `Priority`, ranks that last sent to another process, and the
/// rest; with `Coschedule`, ranks inside a collective, and ranks going back to compute.
pub(crate) const HIGH: usize = 0;
pub(crate) const LOW: usize = 1;

/// Longest a coscheduling gate holds a rank back for helper threads.
pub const COSCHEDULE_GATE: Duration = Duration::from_millis(2);

struct State {
    free: usize,
    waiting: [usize; 2],
    /// Collective helper threads woken and not yet blocked again.
    helpers_busy: usize,
}

/// The slots of one process.
pub struct Scheduler {
    state: Mutex<State>,
    cv: [Condvar; 2],
    /// Low-class ranks wait for busy helpers (`Coschedule`).
    gate: bool,
    /// Longest such a wait.
    gate_limit: Duration,
}

impl Scheduler {
    /// A scheduler with `slots` ranks computing at once.
    pub fn new(slots: usize) -> Scheduler {
        Scheduler {
            state: Mutex::new(State {
                free: slots.max(1),
                waiting: [0; 2],
                helpers_busy: 0,
            }),
            cv: [Condvar::new(), Condvar::new()],
            gate: false,
            gate_limit: COSCHEDULE_GATE,
        }
    }

    /// A coscheduling scheduler with `slots` ranks computing at once.
    pub fn coscheduling(slots: usize) -> Scheduler {
        Scheduler::coscheduling_with_gate(slots, COSCHEDULE_GATE)
    }

    /// The same, holding ranks back for busy helpers for at most `limit`.
    pub fn coscheduling_with_gate(slots: usize, limit: Duration) -> Scheduler {
        Scheduler {
            gate: true,
            gate_limit: limit,
            ..Scheduler::new(slots)
        }
    }

    /// The policy's class for a rank coming back from a receive: `remote` says its last
    /// send left the process, `in_collective` that the receive was a collective's step.
    pub(crate) fn class_after_wait(&self, remote: bool, in_collective: bool) -> usize {
        let high = if self.gate { in_collective } else { remote };
        if high {
            HIGH
        } else {
            LOW
        }
    }

    /// The scheduler for `policy` on this machine, or none.
    pub fn for_policy(policy: SchedPolicy) -> Option<Scheduler> {
        match policy {
            SchedPolicy::None => None,
            SchedPolicy::Serialize => Some(Scheduler::new(1)),
            SchedPolicy::Priority => Some(Scheduler::new(cores())),
            SchedPolicy::Coschedule => Some(Scheduler::coscheduling(cores())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a slot; a `HIGH` rank goes before any waiting `LOW` one, and when
    /// coscheduling a `LOW` one also lets busy helper threads finish first (for at most
    /// [`COSCHEDULE_GATE`]).
    pub(crate) fn acquire(&self, class: usize) {
        let mut s = self.lock();
        let gate_until = Instant::now() + self.gate_limit;
        loop {
            let gated = self.gate && class == LOW && s.helpers_busy > 0;
            let now = Instant::now();
            let gated = gated && now < gate_until;
            if s.free > 0 && !(class == LOW && s.waiting[HIGH] > 0) && !gated {
                break;
            }
            s.waiting[class] += 1;
            s = if gated {
                self.cv[class]
                    .wait_timeout(s, gate_until - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            } else {
                self.cv[class].wait(s).unwrap_or_else(|p| p.into_inner())
            };
            s.waiting[class] -= 1;
        }
        s.free -= 1;
    }

    /// A collective helper thread was woken (`true`) or is about to block (`false`).
    fn helper_busy(&self, busy: bool) {
        let mut s = self.lock();
        if busy {
            s.helpers_busy += 1;
        } else {
            s.helpers_busy = s.helpers_busy.saturating_sub(1);
            if s.helpers_busy == 0 && s.free > 0 && s.waiting[LOW] > 0 {
                self.cv[LOW].notify_all();
            }
        }
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

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

thread_local! {
    /// Collective schedules the calling thread is running (nested: hierarchical ones).
    static IN_COLLECTIVE: Cell<u32> = const { Cell::new(0) };
    /// Set on collective helper threads: the scheduler they report to once known, and
    /// whether they count as busy now.
    static HELPER: RefCell<Option<(Option<Arc<Scheduler>>, bool)>> = const { RefCell::new(None) };
}

/// Marks the calling thread as running a collective's steps until the guard drops.
pub(crate) fn collective_scope() -> CollectiveScope {
    IN_COLLECTIVE.with(|c| c.set(c.get() + 1));
    CollectiveScope(())
}

pub(crate) struct CollectiveScope(());

impl Drop for CollectiveScope {
    fn drop(&mut self) {
        IN_COLLECTIVE.with(|c| c.set(c.get().saturating_sub(1)));
    }
}

/// Whether the calling thread is inside a collective.
pub(crate) fn in_collective() -> bool {
    IN_COLLECTIVE.with(|c| c.get() > 0)
}

/// Marks the calling thread as a collective helper for its lifetime (the guard).
pub(crate) fn collective_helper() -> HelperGuard {
    HELPER.with(|h| *h.borrow_mut() = Some((None, true)));
    HelperGuard(())
}

pub(crate) struct HelperGuard(());

impl Drop for HelperGuard {
    fn drop(&mut self) {
        helper_set_busy(false);
        HELPER.with(|h| h.borrow_mut().take());
    }
}

/// Whether the calling thread is a collective helper.
pub(crate) fn is_helper() -> bool {
    HELPER.with(|h| h.borrow().is_some())
}

/// A helper thread learns which scheduler to report to (on its first wait).
pub(crate) fn helper_attach(sched: &Arc<Scheduler>) {
    HELPER.with(|h| {
        if let Some((s @ None, busy)) = h.borrow_mut().as_mut() {
            *s = Some(sched.clone());
            if *busy {
                sched.helper_busy(true);
            }
        }
    });
}

/// A helper thread blocks (`false`) or has been woken (`true`); nothing on other threads.
pub(crate) fn helper_set_busy(busy: bool) {
    HELPER.with(|h| {
        if let Some((sched, was)) = h.borrow_mut().as_mut() {
            if *was != busy {
                *was = busy;
                if let Some(s) = sched {
                    s.helper_busy(busy);
                }
            }
        }
    });
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

    /// Waits until `cond` holds on the scheduler's state (no timing: it must happen).
    fn until(s: &Scheduler, cond: impl Fn(&State) -> bool) {
        while !cond(&s.lock()) {
            std::thread::yield_now();
        }
    }

    #[test]
    fn coscheduling_lets_collective_work_go_before_computation() {
        // A gate far longer than the test: only the helper going idle can open it.
        let s = Arc::new(Scheduler::coscheduling_with_gate(
            1,
            Duration::from_secs(600),
        ));
        s.acquire(LOW);
        s.helper_busy(true);
        let order = Arc::new(Mutex::new(Vec::new()));
        let spawn = |class: usize, name: &'static str| {
            let (s, order) = (s.clone(), order.clone());
            std::thread::spawn(move || {
                s.acquire(class);
                order.lock().unwrap().push(name);
                s.release();
            })
        };
        let compute = spawn(LOW, "back to computing");
        until(&s, |st| st.waiting[LOW] == 1);
        let step = spawn(HIGH, "collective step");
        until(&s, |st| st.waiting[HIGH] == 1);
        s.release();
        step.join().unwrap();
        // The slot is free, and still the rank going back to compute waits.
        until(&s, |st| {
            st.free == 1 && st.waiting[LOW] == 1 && st.waiting[HIGH] == 0
        });
        order.lock().unwrap().push("helper blocks");
        s.helper_busy(false);
        compute.join().unwrap();
        assert_eq!(
            *order.lock().unwrap(),
            ["collective step", "helper blocks", "back to computing"]
        );
    }

    #[test]
    fn the_coscheduling_gate_gives_up_after_its_limit() {
        let s = Scheduler::coscheduling_with_gate(1, Duration::from_millis(1));
        s.helper_busy(true);
        // A helper that never blocks again does not stop the ranks.
        s.acquire(LOW);
        s.release();
        assert_eq!(s.lock().free, 1);
    }

    #[test]
    fn classes_follow_the_policy() {
        let co = Scheduler::coscheduling(2);
        assert_eq!(co.class_after_wait(true, false), LOW);
        assert_eq!(co.class_after_wait(false, true), HIGH);
        let pri = Scheduler::new(2);
        assert_eq!(pri.class_after_wait(true, false), HIGH);
        assert_eq!(pri.class_after_wait(false, true), LOW);
    }

    #[test]
    fn a_helper_thread_counts_as_busy_only_between_its_waits() {
        let s = Arc::new(Scheduler::coscheduling(1));
        let t = s.clone();
        std::thread::spawn(move || {
            let _h = collective_helper();
            assert!(is_helper());
            helper_attach(&t);
            assert_eq!(t.lock().helpers_busy, 1);
            helper_set_busy(false);
            helper_set_busy(false);
            assert_eq!(t.lock().helpers_busy, 0);
            helper_set_busy(true);
            assert_eq!(t.lock().helpers_busy, 1);
        })
        .join()
        .unwrap();
        // The guard's drop: the ended helper is no longer busy.
        assert_eq!(s.lock().helpers_busy, 0);
        assert!(!is_helper());
        helper_set_busy(true);
        assert_eq!(s.lock().helpers_busy, 0);
        let scope = collective_scope();
        assert!(in_collective());
        drop(scope);
        assert!(!in_collective());
    }

    #[test]
    fn policies_parse() {
        assert_eq!("priority".parse(), Ok(SchedPolicy::Priority));
        for p in SchedPolicy::ALL {
            assert_eq!(p.name().parse(), Ok(p));
        }
        assert!("fifo".parse::<SchedPolicy>().unwrap_err().contains("fifo"));
    }
}
