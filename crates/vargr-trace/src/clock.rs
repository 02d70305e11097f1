//! Timestamps cheap enough for always-on collectors.
//!
//! `clock_gettime` costs about 35 ns here, more than the whole budget of a collector
//! call (25 ns). On x86-64 a collector reads the time-stamp counter instead (about
//! 12 ns); trace files carry two (ticks, monotonic ns) pairs taken far apart, from which
//! readers convert ticks to the host's `CLOCK_MONOTONIC` nanoseconds, so records of all
//! processes of one host share one time axis. Elsewhere ticks are monotonic nanoseconds.

use serde::{Deserialize, Serialize};

/// The current tick.
#[inline(always)]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions; it only reads a counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_ns()
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A (tick, nanosecond) pair taken as close together as possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockPoint {
    pub tick: u64,
    pub ns: u64,
}

impl ClockPoint {
    /// Reads both clocks; the tick is the midpoint of two reads around the nanoseconds.
    pub fn now() -> ClockPoint {
        let a = now();
        let ns = monotonic_ns();
        let b = now();
        ClockPoint {
            tick: a / 2 + b / 2 + (a % 2 + b % 2) / 2,
            ns,
        }
    }
}

/// Converts ticks to monotonic nanoseconds from two points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub first: ClockPoint,
    pub last: ClockPoint,
}

impl Calibration {
    pub fn ns_per_tick(&self) -> f64 {
        let dt = self.last.tick.saturating_sub(self.first.tick);
        let dn = self.last.ns.saturating_sub(self.first.ns);
        if dt == 0 || dn == 0 {
            1.0
        } else {
            dn as f64 / dt as f64
        }
    }

    pub fn to_ns(&self, tick: u64) -> u64 {
        let k = self.ns_per_tick();
        let off = (tick as f64 - self.first.tick as f64) * k;
        (self.first.ns as f64 + off).max(0.0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_convert_to_monotonic_nanoseconds() {
        let first = ClockPoint::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mid_tick = now();
        let mid_ns = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let cal = Calibration {
            first,
            last: ClockPoint::now(),
        };
        let err = cal.to_ns(mid_tick) as i64 - mid_ns as i64;
        // Loose: a preemption between the two reads above is the only error source.
        assert!(err.abs() < 5_000_000, "conversion off by {err} ns");
        assert!(now() >= first.tick);
    }
}
