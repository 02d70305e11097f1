//! The in-process transport: many ranks as threads of one process.
//!
//! Overdecomposition runs K ranks per process; they talk through this transport to each
//! other (and through sockets to other processes). On a 2-core machine with 64 ranks the
//! cost that matters is not copying but scheduling: a rank that waits must get off the CPU
//! so the rank it waits for can run, yet a wake-up through the kernel costs microseconds.
//! So a receive first spins briefly, then yields a bounded number of times, then parks on
//! a condition variable (futex). Senders only pay for a wake-up when the receiver is parked.
//!
//! Each endpoint has one mailbox: a queue of envelopes in arrival order, searched for the
//! first `(src, tag)` match, which gives per-`(src, tag)` FIFO order for free. The queue
//! keeps its capacity between calls, so steady-state traffic allocates only the payloads.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::arena::Arena;
use crate::error::{CollError, Result};
use crate::transport::{Match, Matched, Transport};

/// How a receive waits. The default suits heavily oversubscribed cores; measure with
/// `bench_allreduce` before changing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Busy polls (with a CPU spin hint) before yielding.
    pub spins: u32,
    /// `sched_yield` calls before parking.
    pub yields: u32,
    /// Give up with [`CollError::Timeout`] after this long; `None` waits forever.
    pub timeout: Option<Duration>,
}

impl Default for WaitPolicy {
    fn default() -> Self {
        // Measured with examples/wait_policy.rs on 2 cores with 4-64 ranks: spinning
        // only steals the core from the rank being waited for; a few dozen yields let
        // it run without paying for a futex wake-up.
        WaitPolicy {
            spins: 0,
            yields: 64,
            timeout: None,
        }
    }
}

struct Envelope {
    src: u32,
    tag: u64,
    data: Bytes,
}

#[derive(Default)]
struct Inbox {
    queue: VecDeque<Envelope>,
    /// Receivers parked on the condvar; a sender notifies only if this is non-zero.
    parked: u32,
}

impl Inbox {
    fn take(&mut self, src: usize, tag: u64) -> Option<Bytes> {
        let pos = self
            .queue
            .iter()
            .position(|e| e.tag == tag && e.src as usize == src)?;
        self.queue.remove(pos).map(|e| e.data)
    }

    /// The oldest envelope the first pattern able to take one accepts.
    fn take_match(&mut self, pats: &[Match]) -> Option<Matched> {
        pats.iter().enumerate().find_map(|(pattern, p)| {
            let pos = self
                .queue
                .iter()
                .position(|e| p.accepts(e.src as usize, e.tag))?;
            let e = self.queue.remove(pos)?;
            Some(Matched {
                pattern,
                src: e.src as usize,
                tag: e.tag,
                data: e.data,
            })
        })
    }
}

struct Mailbox {
    inbox: Mutex<Inbox>,
    cv: Condvar,
    /// Bumped on every delivery so spinning receivers can watch it without the lock.
    arrivals: AtomicU64,
}

struct Shared {
    boxes: Box<[Mailbox]>,
    policy: WaitPolicy,
    arena: Arena,
}

/// A set of `n` in-process endpoints that can all reach each other.
#[derive(Clone)]
pub struct Fabric {
    shared: Arc<Shared>,
}

impl Fabric {
    /// A fabric of `n` ranks with the default [`WaitPolicy`].
    pub fn new(n: usize) -> Fabric {
        Fabric::with_policy(n, WaitPolicy::default())
    }

    pub fn with_policy(n: usize, policy: WaitPolicy) -> Fabric {
        let boxes = (0..n)
            .map(|_| Mailbox {
                inbox: Mutex::new(Inbox::default()),
                cv: Condvar::new(),
                arrivals: AtomicU64::new(0),
            })
            .collect();
        Fabric {
            shared: Arc::new(Shared {
                boxes,
                policy,
                arena: Arena::new(n, 0..n, policy),
            }),
        }
    }

    pub fn size(&self) -> usize {
        self.shared.boxes.len()
    }

    /// The endpoint of `rank`; `None` if out of range. Endpoints are cheap handles: several
    /// handles of one rank share its mailbox.
    pub fn endpoint(&self, rank: usize) -> Option<InProcess> {
        (rank < self.size()).then(|| InProcess {
            rank,
            shared: self.shared.clone(),
        })
    }

    /// All endpoints, in rank order, ready to move into one thread each.
    pub fn endpoints(&self) -> Vec<InProcess> {
        (0..self.size())
            .map(|rank| InProcess {
                rank,
                shared: self.shared.clone(),
            })
            .collect()
    }
}

/// One rank's endpoint of a [`Fabric`].
#[derive(Clone)]
pub struct InProcess {
    rank: usize,
    shared: Arc<Shared>,
}

impl InProcess {
    fn lock(&self, rank: usize) -> MutexGuard<'_, Inbox> {
        // A panic while holding the lock leaves the queue consistent (push/remove are
        // atomic with respect to it), so a poisoned lock is safe to keep using.
        self.shared.boxes[rank]
            .inbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn check_peer(&self, peer: usize) -> Result<()> {
        if peer >= self.shared.boxes.len() {
            return Err(CollError::PeerLost {
                rank: self.rank,
                peer,
                reason: format!("no such rank in a fabric of {}", self.shared.boxes.len()),
            });
        }
        Ok(())
    }
}

impl InProcess {
    /// The oldest message from `src` with `tag`, if one is already here.
    pub fn try_recv(&self, src: usize, tag: u64) -> Result<Option<Bytes>> {
        self.check_peer(src)?;
        Ok(self.lock(self.rank).take(src, tag))
    }

    /// Whether a message that one of `pats` accepts is waiting (never blocks).
    pub(crate) fn has_match(&self, pats: &[Match]) -> bool {
        let inbox = self.lock(self.rank);
        pats.iter()
            .any(|p| inbox.queue.iter().any(|e| p.accepts(e.src as usize, e.tag)))
    }
}

impl Transport for InProcess {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.boxes.len()
    }

    fn arena(&self) -> Option<&Arena> {
        Some(&self.shared.arena)
    }

    fn send(&self, dest: usize, tag: u64, data: Bytes) -> Result<()> {
        self.check_peer(dest)?;
        let mb = &self.shared.boxes[dest];
        let wake = {
            let mut inbox = self.lock(dest);
            inbox.queue.push_back(Envelope {
                src: self.rank as u32,
                tag,
                data,
            });
            mb.arrivals.fetch_add(1, Ordering::Release);
            inbox.parked > 0
        };
        // Notify after unlocking so the woken receiver does not block on our lock. No
        // wake-up is lost: a parked receiver registered on the condvar before releasing
        // the lock we just held.
        if wake {
            mb.cv.notify_all();
        }
        Ok(())
    }

    fn recv(&self, src: usize, tag: u64) -> Result<Bytes> {
        self.check_peer(src)?;
        let got = self.recv_match(&[Match::exact(src, tag)], true)?;
        Ok(got.expect("a blocking receive returns a message").data)
    }

    fn recv_match(&self, pats: &[Match], wait: bool) -> Result<Option<Matched>> {
        for p in pats {
            if let Some(src) = p.src {
                self.check_peer(src)?;
            }
        }
        let mb = &self.shared.boxes[self.rank];
        let policy = self.shared.policy;
        let started = policy.timeout.map(|_| Instant::now());
        let mut spins = 0u32;
        let mut yields = 0u32;
        loop {
            let mut inbox = self.lock(self.rank);
            if let Some(m) = inbox.take_match(pats) {
                return Ok(Some(m));
            }
            if !wait {
                return Ok(None);
            }
            if spins < policy.spins || yields < policy.yields {
                let seen = mb.arrivals.load(Ordering::Acquire);
                drop(inbox);
                // Wait for *any* new arrival, then re-check under the lock.
                while mb.arrivals.load(Ordering::Acquire) == seen {
                    if spins < policy.spins {
                        spins += 1;
                        std::hint::spin_loop();
                    } else if yields < policy.yields {
                        yields += 1;
                        std::thread::yield_now();
                    } else {
                        break;
                    }
                }
                continue;
            }
            inbox.parked += 1;
            let inbox = match (policy.timeout, started) {
                (Some(limit), Some(t0)) => {
                    let left = limit.saturating_sub(t0.elapsed());
                    if left.is_zero() {
                        let mut inbox = inbox;
                        inbox.parked -= 1;
                        let first = pats.first();
                        return Err(CollError::Timeout {
                            rank: self.rank,
                            src: first.and_then(|p| p.src),
                            tag: first.map_or(0, |p| p.tag),
                            waited_ms: limit.as_millis() as u64,
                        });
                    }
                    mb.cv
                        .wait_timeout(inbox, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                _ => mb.cv.wait(inbox).unwrap_or_else(|e| e.into_inner()),
            };
            let mut inbox = inbox;
            inbox.parked -= 1;
            if let Some(m) = inbox.take_match(pats) {
                return Ok(Some(m));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_by_source_and_tag_in_fifo_order() {
        let f = Fabric::new(3);
        let e = f.endpoints();
        e[1].send(0, 7, Bytes::from_static(b"a")).unwrap();
        e[2].send(0, 7, Bytes::from_static(b"b")).unwrap();
        e[1].send(0, 8, Bytes::from_static(b"c")).unwrap();
        e[1].send(0, 7, Bytes::from_static(b"d")).unwrap();
        assert_eq!(&e[0].recv(1, 8).unwrap()[..], b"c");
        assert_eq!(&e[0].recv(2, 7).unwrap()[..], b"b");
        assert_eq!(&e[0].recv(1, 7).unwrap()[..], b"a");
        assert_eq!(&e[0].recv(1, 7).unwrap()[..], b"d");
    }

    #[test]
    fn blocking_recv_is_woken_by_another_thread() {
        let f = Fabric::with_policy(
            2,
            WaitPolicy {
                spins: 0,
                yields: 0,
                timeout: Some(Duration::from_secs(20)),
            },
        );
        let mut e = f.endpoints();
        let e1 = e.pop().unwrap();
        let e0 = e.pop().unwrap();
        let h = std::thread::spawn(move || e1.recv(0, 1).unwrap());
        std::thread::sleep(Duration::from_millis(20));
        e0.send(1, 1, Bytes::from_static(b"x")).unwrap();
        assert_eq!(&h.join().unwrap()[..], b"x");
    }

    #[test]
    fn timeout_and_bad_peer_are_typed_errors() {
        let f = Fabric::with_policy(
            2,
            WaitPolicy {
                spins: 0,
                yields: 0,
                timeout: Some(Duration::from_millis(10)),
            },
        );
        let e = f.endpoint(0).unwrap();
        assert!(matches!(
            e.recv(1, 3),
            Err(CollError::Timeout { src: Some(1), .. })
        ));
        assert!(matches!(
            e.send(5, 0, Bytes::new()),
            Err(CollError::PeerLost { peer: 5, .. })
        ));
        assert!(f.endpoint(2).is_none());
    }
}
