//! Sub-millisecond wake-ups for poll loops (the reactor's stage deadlines, the WAN
//! emulator's relay).
//!
//! `epoll_wait` (and so `mio::Poll`) takes its timeout in whole milliseconds, rounded up:
//! sleeping on it alone would make a 5 ms link up to 1 ms late, and an emulated link
//! with 100 µs of latency one with a millisecond. On Linux the loop instead
//! arms a `timerfd` (nanosecond resolution) registered in the same poll, and lowers the
//! thread's timer slack from the default 50 µs so the kernel does not batch the wake-up
//! late. Elsewhere it falls back to the poll timeout.

use std::io;
use std::time::Duration;

use mio::{Interest, Registry, Token};

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use mio::unix::SourceFd;

    /// A non-blocking, monotonic `timerfd`.
    pub struct Timer {
        fd: OwnedFd,
    }

    impl Timer {
        pub fn new(registry: &Registry, token: Token) -> io::Result<Timer> {
            // SAFETY: plain syscall; the result is checked before use.
            let fd = unsafe {
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `fd` is a fresh descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            registry.register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE)?;
            Ok(Timer { fd })
        }

        /// Wakes the poll after `after`; returns the poll timeout to use (none needed).
        pub fn arm(&mut self, after: Duration) -> io::Result<Option<Duration>> {
            // A zero it_value would disarm the timer.
            let after = after.max(Duration::from_nanos(1));
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: after.as_secs() as libc::time_t,
                    tv_nsec: after.subsec_nanos() as libc::c_long,
                },
            };
            // SAFETY: valid descriptor and a fully initialised itimerspec.
            let rc = unsafe {
                libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut())
            };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(None)
        }

        /// Clears the expiry count so the (edge-triggered) descriptor can fire again.
        pub fn drain(&mut self) {
            let mut buf = [0u8; 8];
            // SAFETY: reads at most 8 bytes into a local buffer; EAGAIN is fine.
            unsafe {
                libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len());
            }
        }
    }

    /// Lowers the calling thread's timer slack for its lifetime, restoring it on drop.
    pub struct SlackGuard {
        previous: libc::c_int,
    }

    impl SlackGuard {
        pub fn minimal() -> SlackGuard {
            // SAFETY: PR_GET/SET_TIMERSLACK only touch the calling thread's slack value.
            let previous = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
            SlackGuard { previous }
        }
    }

    impl Drop for SlackGuard {
        fn drop(&mut self) {
            if self.previous > 0 {
                // SAFETY: as above.
                unsafe {
                    libc::prctl(
                        libc::PR_SET_TIMERSLACK,
                        self.previous as libc::c_ulong,
                        0,
                        0,
                        0,
                    )
                };
            }
        }
    }

    /// Runs the calling thread under `SCHED_FIFO` for its lifetime, restoring its
    /// policy on drop. A timing loop on a loaded machine is otherwise preempted for
    /// whole scheduler slices (milliseconds) by the very programs it serves; at a
    /// real-time priority it runs when its timer fires, as the seed's emulator did
    /// on a gateway node of its own. The kernel's real-time throttling still leaves
    /// other threads 5 % of each CPU, so a loop that never sleeps cannot lock a
    /// machine up.
    pub struct RealtimeGuard {
        previous: Option<(libc::c_int, libc::sched_param)>,
    }

    impl RealtimeGuard {
        /// Tries `SCHED_FIFO` at `priority` (1..=99); an error (`EPERM` without
        /// `CAP_SYS_NICE` or a real-time limit) leaves the thread as it was.
        pub fn try_fifo(priority: i32) -> io::Result<RealtimeGuard> {
            // SAFETY: reads the calling thread's own policy and parameters.
            let policy = unsafe { libc::sched_getscheduler(0) };
            let mut param = libc::sched_param { sched_priority: 0 };
            // SAFETY: `param` is a valid sched_param to fill.
            if policy < 0 || unsafe { libc::sched_getparam(0, &mut param) } < 0 {
                return Err(io::Error::last_os_error());
            }
            let fifo = libc::sched_param {
                sched_priority: priority.clamp(1, 99),
            };
            // SAFETY: pid 0 is the calling thread; `fifo` is a valid sched_param.
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &fifo) } < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(RealtimeGuard {
                previous: Some((policy, param)),
            })
        }
    }

    impl Drop for RealtimeGuard {
        fn drop(&mut self) {
            if let Some((policy, param)) = self.previous.take() {
                // SAFETY: as above; restores what try_fifo read.
                unsafe { libc::sched_setscheduler(0, policy, &param) };
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;

    /// Fallback: no timer descriptor, the poll timeout does the waiting (ms resolution).
    pub struct Timer;

    impl Timer {
        pub fn new(_registry: &Registry, _token: Token) -> io::Result<Timer> {
            let _ = Interest::READABLE;
            Ok(Timer)
        }

        pub fn arm(&mut self, after: Duration) -> io::Result<Option<Duration>> {
            Ok(Some(after))
        }

        pub fn drain(&mut self) {}
    }

    pub struct SlackGuard;

    impl SlackGuard {
        pub fn minimal() -> SlackGuard {
            SlackGuard
        }
    }

    pub struct RealtimeGuard;

    impl RealtimeGuard {
        pub fn try_fifo(_priority: i32) -> io::Result<RealtimeGuard> {
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "real-time scheduling is only tried on Linux",
            ))
        }
    }
}

pub use imp::{RealtimeGuard, SlackGuard, Timer};

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Timer")
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::time::Instant;

    use mio::{Events, Poll};

    use super::*;

    #[test]
    fn a_poll_wakes_at_the_timer_and_a_drained_timer_stays_quiet() {
        let mut poll = Poll::new().unwrap();
        let mut timer = Timer::new(poll.registry(), Token(7)).unwrap();
        let mut events = Events::with_capacity(4);
        let wait = Duration::from_micros(300);
        let t0 = Instant::now();
        assert_eq!(timer.arm(wait).unwrap(), None);
        poll.poll(&mut events, Some(Duration::from_secs(5)))
            .unwrap();
        assert!(events.iter().any(|e| e.token() == Token(7)));
        let took = t0.elapsed();
        assert!(took >= wait, "woke after {took:?}, before the timer");
        timer.drain();
        events.clear();
        poll.poll(&mut events, Some(Duration::from_millis(5)))
            .unwrap();
        assert!(events.is_empty());
    }

    #[test]
    fn a_realtime_guard_restores_the_policy_it_found() {
        // SAFETY: reads the calling thread's policy.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        let before = policy();
        match RealtimeGuard::try_fifo(10) {
            Ok(guard) => {
                assert_eq!(policy(), libc::SCHED_FIFO);
                drop(guard);
            }
            // Without the privilege: refused, and nothing changed.
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}"),
        }
        assert_eq!(policy(), before);
    }
}
