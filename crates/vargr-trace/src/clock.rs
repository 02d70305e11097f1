//! Timestamps cheap enough for always-on collectors.
//!
//! `clock_gettime` costs about 35 ns here, more than the whole budget of a collector
//! call (25 ns). On x86-64 a collector reads the time-stamp counter instead (about
//! 12 ns); trace files carry two (ticks, monotonic ns) pairs taken far apart, from which
//! readers convert ticks to the host's `CLOCK_MONOTONIC` nanoseconds, so records of all
//! processes of one host share one time axis. Elsewhere ticks are monotonic nanoseconds.
//!
//! Hosts do not share a monotonic clock. [`SkewProbe`] and [`Alignment`] implement
//! MRNet's tree-based skew estimation: each parent measures each child's offset by
//! ping-pong (the round trip with the smallest delay wins, its half is the error bound),
//! and a node's offset to the root is the sum of the offsets on its path, with the
//! errors summed too. Trace files carry the result, so readers place every host's
//! events on the root's time axis and know how far to trust it.

use serde::{Deserialize, Serialize};

/// The current tick (0 when collectors are compiled out, so that call sites that take
/// a start time cost nothing either).
#[inline(always)]
pub fn now() -> u64 {
    if cfg!(feature = "off") {
        0
    } else {
        ticks()
    }
}

/// The tick counter itself, even when collectors are compiled out (calibration).
#[inline(always)]
fn ticks() -> u64 {
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
        let a = ticks();
        let ns = trace_ns();
        let b = ticks();
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

/// This process's clock as trace files see it, in nanoseconds: `CLOCK_MONOTONIC`, plus
/// the test skew `VARGR_CLOCK_SKEW_NS` (which makes processes of one host look like
/// hosts with different clocks, so alignment can be tested on one machine). The skew is
/// either one number for the process, or `RANK=NS,...` picking by `VARGR_RANK` (so one
/// launcher environment can skew some ranks' processes and not others).
pub fn trace_ns() -> u64 {
    monotonic_ns().saturating_add_signed(test_skew())
}

/// The artificial skew from `VARGR_CLOCK_SKEW_NS` (0 unless set).
pub fn test_skew() -> i64 {
    static SKEW: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *SKEW.get_or_init(|| {
        let Ok(v) = std::env::var("VARGR_CLOCK_SKEW_NS") else {
            return 0;
        };
        if let Ok(n) = v.trim().parse() {
            return n;
        }
        let rank = std::env::var("VARGR_RANK").unwrap_or_default();
        v.split(',')
            .filter_map(|kv| kv.split_once('='))
            .find(|(r, _)| r.trim() == rank.trim())
            .and_then(|(_, n)| n.trim().parse().ok())
            .unwrap_or(0)
    })
}

/// How a node's clock relates to the root's: `local = root + offset_ns`, known to
/// within `error_ns`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alignment {
    pub offset_ns: i64,
    pub error_ns: u64,
    /// Tree edges summed into this estimate (0 at the root).
    pub hops: u32,
    /// Whether skew estimation ran; the default (false) means nobody measured, which is
    /// only right for processes of the root's host.
    #[serde(default)]
    pub aligned: bool,
}

impl Alignment {
    /// The root's own alignment.
    pub const ROOT: Alignment = Alignment {
        offset_ns: 0,
        error_ns: 0,
        hops: 0,
        aligned: true,
    };

    /// A child's alignment from its parent's and the parent-child edge estimate: offsets
    /// and errors add up along the path (MRNet's cumulative skew).
    pub fn then(self, edge: Alignment) -> Alignment {
        Alignment {
            offset_ns: self.offset_ns.saturating_add(edge.offset_ns),
            error_ns: self.error_ns.saturating_add(edge.error_ns),
            hops: self.hops + edge.hops.max(1),
            aligned: true,
        }
    }

    /// A local time in nanoseconds on the root's axis.
    pub fn to_root(&self, local_ns: u64) -> u64 {
        local_ns.saturating_add_signed(self.offset_ns.saturating_neg())
    }
}

/// The parent's side of skew estimation over one edge, sans-IO: the parent notes when it
/// sent each ping and when the pong came back, the child answers with its own clock.
#[derive(Debug, Default, Clone)]
pub struct SkewProbe {
    best: Option<(u64, i64)>,
    samples: u32,
}

impl SkewProbe {
    /// Round trips worth doing per edge: the minimum delay of a few is close to the
    /// true one even on a busy host.
    pub const ROUNDS: u32 = 16;

    pub fn new() -> SkewProbe {
        SkewProbe::default()
    }

    /// One round trip: parent clock at send and at receipt, child clock in between.
    pub fn sample(&mut self, parent_sent: u64, child_clock: u64, parent_received: u64) {
        let rtt = parent_received.saturating_sub(parent_sent);
        let mid = parent_sent + rtt / 2;
        let offset = child_clock as i64 - mid as i64;
        self.samples += 1;
        if self.best.is_none_or(|(r, _)| rtt < r) {
            self.best = Some((rtt, offset));
        }
    }

    pub fn samples(&self) -> u32 {
        self.samples
    }

    /// The edge estimate: the offset seen on the fastest round trip; the child's clock
    /// was read somewhere within it, so half of it bounds the error.
    pub fn estimate(&self) -> Option<Alignment> {
        let (rtt, offset) = self.best?;
        Some(Alignment {
            offset_ns: offset,
            error_ns: rtt.div_ceil(2),
            hops: 1,
            aligned: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fastest_round_trip_gives_the_offset_and_bounds_the_error() {
        let mut p = SkewProbe::new();
        // Child clock runs 5,000 ns ahead; the slow round trip is asymmetric.
        p.sample(1_000, 1_000 + 900 + 5_000, 2_000);
        p.sample(10_000, 10_000 + 100 + 5_000, 10_200);
        let e = p.estimate().unwrap();
        assert_eq!(
            e,
            Alignment {
                offset_ns: 5_000,
                error_ns: 100,
                hops: 1,
                aligned: true
            }
        );
        assert_eq!(p.samples(), 2);
        // Cumulative along a path of two edges.
        let grandchild = Alignment::ROOT.then(e).then(Alignment {
            offset_ns: -2_000,
            error_ns: 50,
            hops: 1,
            aligned: true,
        });
        assert_eq!(grandchild.offset_ns, 3_000);
        assert_eq!(grandchild.error_ns, 150);
        assert_eq!(grandchild.hops, 2);
        assert_eq!(grandchild.to_root(10_000), 7_000);
        assert!(SkewProbe::new().estimate().is_none());
    }

    #[test]
    fn ticks_convert_to_monotonic_nanoseconds() {
        let first = ClockPoint::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mid_tick = now();
        let mid_ns = trace_ns();
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
