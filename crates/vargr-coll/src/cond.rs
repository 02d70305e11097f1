//! Conditional allreduce (seed 000, ch. 7.3): an allreduce whose result is only used to
//! test a condition, decided without waiting for remote sites whenever the sites' own
//! values already settle it.
//!
//! Iterative solvers call allreduce once per iteration to test convergence ("is the sum
//! of all deltas still above epsilon?"). With contributions of one sign the answer is
//! often settled by one site's partial result, so the WAN round trip can be skipped:
//!
//! 1. Each site reduces its ranks' values to its root (a site-local allreduce tree).
//! 2. The root publishes `(sequence, value)` and checks the condition on it.
//! 3. If that does not settle it, the root reads the caches filled by one prefetch
//!    thread per remote site (each keeps only the newest tuple of its site), checking
//!    the condition after each read, until it holds or every site's value is in.
//! 4. The root broadcasts the outcome to its site.
//!
//! The sequence-number rule: a remote tuple newer than our iteration means that site
//! already finished our iteration without our value, so the condition held there and
//! holds for us. (To stay exact when an application keeps calling after a *false*
//! outcome, tuples also carry the last iteration their site found false.)
//!
//! Restrictions, as in the seed: the value may only be used for the test (a decision
//! taken early returns a partial value); the call is not a barrier; contributions must
//! all have the sign that makes partial results bounds of the total (non-negative for
//! `sum` with `>`/`>=`, non-positive for `sum` with `<`/`<=`); `max` only decides `>`/`>=`
//! and `min` only `<`/`<=` early. Inputs that break this are refused with
//! [`CollError::CondPrecondition`] on every rank of the site; remote sites that need such a
//! value get the same error.
//!
//! Partial and total values are combined in site order, so every site computes the same
//! bits for the same set of values and no two sites can decide differently at the
//! threshold because of rounding.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;

use crate::comm::Comm;
use crate::error::{CollError, Result};
use crate::op::Op;
use crate::select::Algorithm;
use crate::transport::Transport;

/// The comparison a conditional allreduce tests: `result <pred> threshold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Predicate {
    Greater,
    GreaterEq,
    Less,
    LessEq,
}

impl Predicate {
    fn holds(self, x: f64, t: f64) -> bool {
        match self {
            Predicate::Greater => x > t,
            Predicate::GreaterEq => x >= t,
            Predicate::Less => x < t,
            Predicate::LessEq => x <= t,
        }
    }

    fn upward(self) -> bool {
        matches!(self, Predicate::Greater | Predicate::GreaterEq)
    }
}

impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Predicate::Greater => ">",
            Predicate::GreaterEq => ">=",
            Predicate::Less => "<",
            Predicate::LessEq => "<=",
        })
    }
}

/// The reductions a conditional allreduce supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CondOp {
    Sum,
    Max,
    Min,
}

impl CondOp {
    fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            CondOp::Sum => a + b,
            CondOp::Max => a.max(b),
            CondOp::Min => a.min(b),
        }
    }
}

/// What one call returned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CondOutcome {
    /// Whether `result <pred> threshold` holds for the global result.
    pub holds: bool,
    /// The value the decision was made on: the global result when every site's value was
    /// used, otherwise a partial result (use it only for the test, and for logging).
    pub value: f64,
    /// Decided from this site's value alone, without any remote result.
    pub local: bool,
    /// Remote sites whose values were used (0 when decided locally or by the
    /// sequence-number rule alone).
    pub remote_used: u32,
}

/// How long the root waits between checks of the caches when nothing new arrived. Prefetch
/// threads wake it as soon as a tuple lands; this only bounds a missed wake-up.
const POLL: Duration = Duration::from_millis(50);

const TAG_REQUEST: u64 = 1;
const TAG_REPLY: u64 = 2;
const FLAG_CLOSED: u64 = 1;
const FLAG_BAD: u64 = 2;

/// A site's newest result, as published by its root and cached by the others.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Tuple {
    seq: u64,
    value: f64,
    /// Last iteration this site found the condition false (0: never), and the global
    /// value it found then.
    last_false: u64,
    false_value: f64,
    flags: u64,
}

impl Tuple {
    const LEN: usize = 40;

    fn encode(&self) -> Bytes {
        let mut b = Vec::with_capacity(Self::LEN);
        b.extend_from_slice(&self.seq.to_le_bytes());
        b.extend_from_slice(&self.value.to_le_bytes());
        b.extend_from_slice(&self.last_false.to_le_bytes());
        b.extend_from_slice(&self.false_value.to_le_bytes());
        b.extend_from_slice(&self.flags.to_le_bytes());
        b.into()
    }

    fn decode(b: &[u8]) -> Option<Tuple> {
        if b.len() != Self::LEN {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        Some(Tuple {
            seq: w(0),
            value: f64::from_bits(w(1)),
            last_false: w(2),
            false_value: f64::from_bits(w(3)),
            flags: w(4),
        })
    }
}

/// What the root knows about one remote site.
#[derive(Debug, Clone, Default)]
struct Slot {
    newest: Option<Tuple>,
    error: Option<String>,
}

struct Shared<T> {
    state: Mutex<T>,
    cv: Condvar,
}

impl<T> Shared<T> {
    fn new(t: T) -> Arc<Shared<T>> {
        Arc::new(Shared {
            state: Mutex::new(t),
            cv: Condvar::new(),
        })
    }
    fn lock(&self) -> MutexGuard<'_, T> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The root's side: its published tuple, the caches, and the threads serving both.
struct Root {
    /// Index of this site among the sites (site order = order of lowest rank).
    me: usize,
    published: Arc<Shared<Tuple>>,
    cache: Arc<Shared<Vec<Slot>>>,
    threads: Vec<JoinHandle<()>>,
    /// Number of sites.
    sites: usize,
}

/// A conditional allreduce bound to one communicator, operator, predicate and
/// threshold. Created collectively by [`Comm::conditional`]; call
/// [`CondAllreduce::cond_allreduce`] once per iteration on every rank; [`close`]
/// (or drop) is collective too: it returns once every site has closed.
///
/// [`close`]: CondAllreduce::close
pub struct CondAllreduce {
    op: CondOp,
    pred: Predicate,
    threshold: f64,
    site: Comm,
    root: Option<Root>,
    seq: u64,
    last_false: u64,
    false_value: f64,
    closed: bool,
}

impl Comm {
    /// Sets up a conditional allreduce over this communicator (collective). Sites come
    /// from the communicator's hierarchy; without one, everything is one site and every
    /// call is an ordinary allreduce followed by the test.
    pub fn conditional(
        &self,
        op: CondOp,
        pred: Predicate,
        threshold: f64,
    ) -> Result<CondAllreduce> {
        let early = match op {
            CondOp::Sum => true,
            CondOp::Max => pred.upward(),
            CondOp::Min => !pred.upward(),
        };
        if !early || threshold.is_nan() {
            return Err(CollError::CondPrecondition {
                rank: self.rank(),
                reason: format!(
                    "{op:?} with {pred} {threshold} cannot be decided from partial results \
                     (use max with > or >=, min with < or <=, or sum)"
                ),
            });
        }
        let me = self.rank();
        let site_of = |r: usize| self.hierarchy().map_or(0, |h| h.site[r]);
        // Sites in order of their lowest rank.
        let mut order: Vec<u32> = Vec::new();
        for r in 0..self.size() {
            if !order.contains(&site_of(r)) {
                order.push(site_of(r));
            }
        }
        let my_site = order
            .iter()
            .position(|&s| s == site_of(me))
            .expect("my site is among the sites");
        let site = self
            .split(Some(my_site as u32), me as i32)?
            .expect("a rank with a color gets a communicator");
        let is_root = site.rank() == 0;
        let roots = self.split(is_root.then_some(0), my_site as i32)?;
        let root = match roots {
            Some(roots) if order.len() > 1 => Some(Root::start(&roots, my_site)),
            _ => None,
        };
        Ok(CondAllreduce {
            op,
            pred,
            threshold,
            site,
            root,
            seq: 0,
            last_false: 0,
            false_value: 0.0,
            closed: false,
        })
    }
}

impl Root {
    fn start(roots: &Comm, me: usize) -> Root {
        let n = roots.size();
        let published = Shared::new(Tuple::default());
        let cache = Shared::new(vec![Slot::default(); n]);
        let transport = roots.transport_handle();
        let mut threads = Vec::new();
        for s in (0..n).filter(|&s| s != me) {
            let peer = roots.transport_rank(s).expect("site root in range");
            let (req, rep) = (roots.user_tag(TAG_REQUEST), roots.user_tag(TAG_REPLY));
            let (t, c) = (transport.clone(), cache.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("cond-prefetch-{s}"))
                    .spawn(move || {
                        let _helper = crate::rank_scheduler::collective_helper();
                        prefetch(&*t, peer, req, rep, s, &c)
                    })
                    .expect("spawning a prefetch thread"),
            );
            let (t, p) = (transport.clone(), published.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("cond-serve-{s}"))
                    .spawn(move || {
                        let _helper = crate::rank_scheduler::collective_helper();
                        serve(&*t, peer, req, rep, &p)
                    })
                    .expect("spawning a serving thread"),
            );
        }
        Root {
            me,
            published,
            cache,
            threads,
            sites: n,
        }
    }
}

/// One per remote site: asks for that site's next tuple, keeps only the newest, until
/// the site closes.
fn prefetch(
    t: &dyn Transport,
    peer: usize,
    req: u64,
    rep: u64,
    slot: usize,
    cache: &Shared<Vec<Slot>>,
) {
    let mut after = 0u64;
    loop {
        let got = t
            .send(peer, req, Bytes::copy_from_slice(&after.to_le_bytes()))
            .and_then(|_| t.recv(peer, rep));
        let mut c = cache.lock();
        match got.map(|b| Tuple::decode(&b)) {
            Ok(Some(tuple)) => {
                after = after.max(tuple.seq);
                let newer = c[slot].newest.is_none_or(|old| tuple.seq >= old.seq);
                if newer {
                    c[slot].newest = Some(tuple);
                }
                cache.cv.notify_all();
                if tuple.flags & FLAG_CLOSED != 0 {
                    return;
                }
            }
            Ok(None) => {
                c[slot].error = Some("a malformed result tuple arrived".into());
                cache.cv.notify_all();
                return;
            }
            Err(e) => {
                c[slot].error = Some(e.to_string());
                cache.cv.notify_all();
                return;
            }
        }
    }
}

/// One per remote site: answers its prefetch thread with our newest tuple once it is
/// newer than what that thread has, and stops after sending a closed tuple.
fn serve(t: &dyn Transport, peer: usize, req: u64, rep: u64, published: &Shared<Tuple>) {
    loop {
        let after = match t.recv(peer, req) {
            Ok(b) if b.len() == 8 => u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            _ => return,
        };
        let mut p = published.lock();
        while p.seq <= after && p.flags & FLAG_CLOSED == 0 {
            // Idle until our root publishes: no core to keep free for this thread.
            crate::rank_scheduler::helper_set_busy(false);
            p = published.cv.wait(p).unwrap_or_else(|e| e.into_inner());
        }
        crate::rank_scheduler::helper_set_busy(true);
        let tuple = *p;
        drop(p);
        if t.send(peer, rep, tuple.encode()).is_err() || tuple.flags & FLAG_CLOSED != 0 {
            return;
        }
    }
}

impl CondAllreduce {
    /// Whether `result <pred> threshold` holds, where `result` reduces every rank's
    /// `value`. Call on every rank of the communicator, once per iteration.
    pub fn cond_allreduce(&mut self, value: f64) -> Result<CondOutcome> {
        if self.closed {
            return Err(CollError::CondPrecondition {
                rank: self.site.rank(),
                reason: "the conditional allreduce was closed".into(),
            });
        }
        self.seq += 1;
        let bad_sign = match (self.op, self.pred.upward()) {
            (CondOp::Sum, true) => value < 0.0,
            (CondOp::Sum, false) => value > 0.0,
            _ => false,
        };
        let bad = value.is_nan() || bad_sign;
        // Site-local reduction of [value, violations]; binomial keeps the pair whole.
        let op = self.op;
        let pair = Op::user("cond-pair", move |acc: &mut [u8], other: &[u8]| {
            let a: &mut [f64] = bytemuck::cast_slice_mut(acc);
            let b: &[f64] = bytemuck::cast_slice(other);
            a[0] = op.apply(a[0], b[0]);
            a[1] = a[1].max(b[1]);
        });
        let send = [value, f64::from(u8::from(bad))];
        let mut site_result = [0.0f64; 2];
        self.site
            .reduce_with(&send, &mut site_result, &pair, 0, Some(Algorithm::Binomial))?;
        // [holds, value, local, remote_used, error]
        let mut outcome = [0.0f64; 5];
        if let Some(root) = &self.root {
            let r = self.decide_at_root(root, site_result);
            let (holds, v, local, used, err) = match r {
                Ok(o) => (o.holds, o.value, o.local, o.remote_used, 0.0),
                Err(Failure::Bad) => (false, f64::NAN, false, 0, 1.0),
                Err(Failure::Remote(site)) => (false, f64::NAN, false, site as u32, 2.0),
            };
            outcome = [
                f64::from(u8::from(holds)),
                v,
                f64::from(u8::from(local)),
                f64::from(used),
                err,
            ];
            if !holds && err == 0.0 {
                self.last_false = self.seq;
                self.false_value = v;
            }
        } else if self.site.rank() == 0 {
            let v = site_result[0];
            let holds = self.pred.holds(v, self.threshold);
            let err = if site_result[1] > 0.0 { 1.0 } else { 0.0 };
            outcome = [f64::from(u8::from(holds)), v, 1.0, 0.0, err];
        }
        self.site
            .bcast_with(&mut outcome, 0, Some(Algorithm::Binomial))?;
        match outcome[4] as u8 {
            1 => Err(CollError::CondPrecondition {
                rank: self.site.rank(),
                reason: format!(
                    "a rank of this site contributed a value that is NaN or has the wrong sign \
                     for {:?} with {} (iteration {}; my value {value})",
                    self.op, self.pred, self.seq
                ),
            }),
            2 => Err(CollError::CondPrecondition {
                rank: self.site.rank(),
                reason: format!(
                    "site {} failed at iteration {} (a bad value, or its root was lost)",
                    outcome[3], self.seq
                ),
            }),
            _ => Ok(CondOutcome {
                holds: outcome[0] == 1.0,
                value: outcome[1],
                local: outcome[2] == 1.0,
                remote_used: outcome[3] as u32,
            }),
        }
    }

    fn decide_at_root(
        &self,
        root: &Root,
        site_result: [f64; 2],
    ) -> std::result::Result<CondOutcome, Failure> {
        let k = self.seq;
        let mine = site_result[0];
        let bad = site_result[1] > 0.0;
        {
            let mut p = root.published.lock();
            *p = Tuple {
                seq: k,
                value: mine,
                last_false: self.last_false,
                false_value: self.false_value,
                flags: if bad { FLAG_BAD } else { 0 },
            };
            root.published.cv.notify_all();
        }
        if bad {
            return Err(Failure::Bad);
        }
        let n = root.sites;
        let mut values: Vec<Option<f64>> = vec![None; n];
        values[root.me] = Some(mine);
        if self.pred.holds(mine, self.threshold) {
            return Ok(CondOutcome {
                holds: true,
                value: mine,
                local: true,
                remote_used: 0,
            });
        }
        let fold = |values: &[Option<f64>]| {
            values
                .iter()
                .flatten()
                .copied()
                .reduce(|a, b| self.op.apply(a, b))
                .expect("my own value is present")
        };
        let mut cache = root.cache.lock();
        loop {
            let mut progress = false;
            for s in 0..n {
                if values[s].is_some() {
                    continue;
                }
                let slot = &cache[s];
                if let Some(t) = slot.newest {
                    if t.flags & FLAG_BAD != 0 && t.seq == k {
                        return Err(Failure::Remote(s));
                    }
                    if t.seq == k {
                        values[s] = Some(t.value);
                        progress = true;
                        let v = fold(&values);
                        if self.pred.holds(v, self.threshold) {
                            return Ok(self.partial(true, v, &values));
                        }
                    } else if t.seq > k {
                        // Site s finished iteration k: without our value only if the
                        // condition held; with it, it recorded a false outcome.
                        if t.last_false == k {
                            return Ok(CondOutcome {
                                holds: false,
                                value: t.false_value,
                                local: false,
                                remote_used: (n - 1) as u32,
                            });
                        }
                        return Ok(self.partial(true, fold(&values), &values));
                    } else if t.flags & FLAG_CLOSED != 0 {
                        return Err(Failure::Remote(s));
                    }
                }
                if slot.error.is_some() {
                    return Err(Failure::Remote(s));
                }
            }
            if values.iter().all(Option::is_some) {
                let v = fold(&values);
                return Ok(self.partial(self.pred.holds(v, self.threshold), v, &values));
            }
            if !progress {
                cache = root
                    .cache
                    .cv
                    .wait_timeout(cache, POLL)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    }

    fn partial(&self, holds: bool, value: f64, values: &[Option<f64>]) -> CondOutcome {
        CondOutcome {
            holds,
            value,
            local: false,
            remote_used: values.iter().flatten().count().saturating_sub(1) as u32,
        }
    }

    /// Ends the conditional allreduce: stops the prefetch threads once every site has
    /// closed (collective across sites, like freeing an MPI communicator).
    pub fn close(mut self) -> Result<()> {
        self.shutdown();
        Ok(())
    }

    fn shutdown(&mut self) {
        if std::mem::replace(&mut self.closed, true) {
            return;
        }
        if let Some(root) = &mut self.root {
            {
                let mut p = root.published.lock();
                p.flags |= FLAG_CLOSED;
                root.published.cv.notify_all();
            }
            for t in root.threads.drain(..) {
                let _ = t.join();
            }
        }
    }
}

impl Drop for CondAllreduce {
    fn drop(&mut self) {
        self.shutdown();
    }
}

enum Failure {
    /// A rank of this site broke the precondition.
    Bad,
    /// The remote site (by index) broke it, closed early, or was lost.
    Remote(usize),
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn tuples_round_trip_and_garbage_is_refused(
            seq: u64, value: f64, last_false: u64, fv: f64, flags: u64,
            junk in proptest::collection::vec(any::<u8>(), 0..100),
        ) {
            let t = Tuple { seq, value, last_false, false_value: fv, flags };
            let back = Tuple::decode(&t.encode()).unwrap();
            prop_assert_eq!(back.seq, seq);
            prop_assert_eq!(back.value.to_bits(), value.to_bits());
            prop_assert_eq!(back.false_value.to_bits(), fv.to_bits());
            prop_assert_eq!((back.last_false, back.flags), (last_false, flags));
            prop_assert_eq!(Tuple::decode(&junk).is_some(), junk.len() == Tuple::LEN);
        }
    }

    #[test]
    fn predicates_and_ops() {
        assert!(Predicate::GreaterEq.holds(1.0, 1.0) && !Predicate::Greater.holds(1.0, 1.0));
        assert!(Predicate::Less.holds(0.5, 1.0) && Predicate::LessEq.holds(1.0, 1.0));
        assert_eq!(CondOp::Max.apply(1.0, 3.0), 3.0);
        assert_eq!(CondOp::Min.apply(1.0, 3.0), 1.0);
        assert_eq!(Predicate::GreaterEq.to_string(), ">=");
    }
}
