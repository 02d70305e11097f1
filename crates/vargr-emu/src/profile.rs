//! What an emulated WAN link looks like: latency, bandwidth and jitter, constant or from a
//! trace.
//!
//! Longcut computes each message's delay from a latency and a bandwidth, either constant
//! or replayed from measurements of a real link (seed 000, ch. 8.1). [`WanProfile`] is one
//! such setting; [`LinkSpec`] is what one direction of a link follows over time.
//!
//! **Latency is one-way.** A profile's `latency` is the propagation delay of one
//! direction, so a ping-pong round trip over a link with `latency=18ms` takes 36 ms plus
//! serialization. Measurement tables (NWS, the seed's tables I and III) usually give the
//! *two-way* time: write those as `rtt=36ms`, which sets `latency` to half.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::error::ParseError;
use crate::trace::Trace;
use crate::units::{fmt_bandwidth, fmt_duration, parse_bandwidth, parse_duration};

/// One direction's link conditions at one moment.
///
/// Text form (see [`FromStr`]): `latency=18ms,bandwidth=3mbit,jitter=1ms`, where `rtt=36ms`
/// may replace `latency`, and omitted keys mean zero latency, unlimited bandwidth, no
/// jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WanProfile {
    /// One-way propagation delay added to every byte.
    pub latency: Duration,
    /// Bottleneck rate in bits per second; `None` means unlimited.
    pub bandwidth_bits_per_s: Option<u64>,
    /// Each chunk's latency varies uniformly within `latency ± jitter` (never below zero,
    /// and never so that a stream's bytes overtake each other).
    pub jitter: Duration,
}

impl WanProfile {
    /// A profile with one-way `latency`, bandwidth in bits per second, and no jitter.
    pub fn new(latency: Duration, bandwidth_bits_per_s: Option<u64>) -> Self {
        WanProfile {
            latency,
            bandwidth_bits_per_s,
            jitter: Duration::ZERO,
        }
    }

    /// A profile from a round-trip time, as ping and NWS report it: latency is `rtt / 2`.
    pub fn from_rtt(rtt: Duration, bandwidth_bits_per_s: Option<u64>) -> Self {
        Self::new(rtt / 2, bandwidth_bits_per_s)
    }

    /// The same profile with `jitter`.
    pub fn with_jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    /// The time to push `bytes` through an idle bottleneck: `bytes * 8 / bandwidth`.
    pub fn serialization(&self, bytes: usize) -> Duration {
        match self.bandwidth_bits_per_s {
            Some(bw) => {
                Duration::from_nanos((bytes as u128 * 8 * 1_000_000_000 / bw as u128) as u64)
            }
            None => Duration::ZERO,
        }
    }

    /// The model's one-way time for a single `bytes`-long message on an idle link, without
    /// jitter: latency plus serialization. Accuracy measurements compare against this.
    pub fn one_way(&self, bytes: usize) -> Duration {
        self.latency + self.serialization(bytes)
    }
}

impl fmt::Display for WanProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "latency={},bandwidth={}",
            fmt_duration(self.latency),
            fmt_bandwidth(self.bandwidth_bits_per_s)
        )?;
        if !self.jitter.is_zero() {
            write!(f, ",jitter={}", fmt_duration(self.jitter))?;
        }
        Ok(())
    }
}

impl FromStr for WanProfile {
    type Err = ParseError;

    /// Parses `latency=18ms,bandwidth=3mbit[,jitter=1ms]` (or `rtt=` for `latency=`);
    /// pairs may also be separated by spaces. Inner errors keep their own message.
    fn from_str(text: &str) -> Result<Self, ParseError> {
        let err = |reason: String| ParseError::Profile {
            text: text.to_string(),
            reason,
        };
        let mut profile = WanProfile::default();
        let (mut seen_latency, mut seen_bw, mut seen_jitter) = (false, false, false);
        for pair in text
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|p| !p.is_empty())
        {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| err(format!("{pair:?} is not key=value")))?;
            let seen = match key {
                "latency" | "rtt" => &mut seen_latency,
                "bandwidth" | "bw" => &mut seen_bw,
                "jitter" => &mut seen_jitter,
                _ => return Err(err(format!("unknown key {key:?}"))),
            };
            if std::mem::replace(seen, true) {
                return Err(err(format!("{key:?} is given twice (or with its alias)")));
            }
            match key {
                "latency" => profile.latency = parse_duration(value)?,
                "rtt" => profile.latency = parse_duration(value)? / 2,
                "jitter" => profile.jitter = parse_duration(value)?,
                _ => profile.bandwidth_bits_per_s = parse_bandwidth(value)?,
            }
        }
        Ok(profile)
    }
}

/// What one direction of an emulated link follows: a constant profile, or a trace.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkSpec {
    /// The same latency, bandwidth and jitter all the time.
    Constant(WanProfile),
    /// Latency and bandwidth replayed from a trace; `jitter` is added on top.
    Trace {
        /// The recorded rows.
        trace: Arc<Trace>,
        /// Uniform `±jitter` added to each chunk's latency.
        jitter: Duration,
    },
}

impl LinkSpec {
    /// A spec that replays `trace` without extra jitter.
    pub fn trace(trace: Trace) -> Self {
        LinkSpec::Trace {
            trace: Arc::new(trace),
            jitter: Duration::ZERO,
        }
    }

    /// The conditions `elapsed` after the emulation started.
    pub fn profile_at(&self, elapsed: Duration) -> WanProfile {
        match self {
            LinkSpec::Constant(p) => *p,
            LinkSpec::Trace { trace, jitter } => {
                let row = trace.at(elapsed);
                WanProfile {
                    latency: row.latency,
                    bandwidth_bits_per_s: row.bandwidth_bits_per_s,
                    jitter: *jitter,
                }
            }
        }
    }

    /// The largest latency plus jitter this spec ever imposes.
    pub fn max_latency(&self) -> Duration {
        match self {
            LinkSpec::Constant(p) => p.latency + p.jitter,
            LinkSpec::Trace { trace, jitter } => {
                trace
                    .rows()
                    .iter()
                    .map(|r| r.latency)
                    .max()
                    .unwrap_or_default()
                    + *jitter
            }
        }
    }

    /// The largest bandwidth this spec ever allows; `None` if it is ever unlimited.
    pub fn max_bandwidth(&self) -> Option<u64> {
        match self {
            LinkSpec::Constant(p) => p.bandwidth_bits_per_s,
            LinkSpec::Trace { trace, .. } => trace
                .rows()
                .iter()
                .map(|r| r.bandwidth_bits_per_s)
                .try_fold(0, |max, bw| bw.map(|b| b.max(max))),
        }
    }
}

impl From<WanProfile> for LinkSpec {
    fn from(p: WanProfile) -> Self {
        LinkSpec::Constant(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_profiles() {
        let p: WanProfile = "latency=18ms,bandwidth=3mbit,jitter=1ms".parse().unwrap();
        assert_eq!(p.latency, Duration::from_millis(18));
        assert_eq!(p.bandwidth_bits_per_s, Some(3_000_000));
        assert_eq!(p.jitter, Duration::from_millis(1));

        let p: WanProfile = "rtt=36.7ms bw=2.58mbit".parse().unwrap();
        assert_eq!(p.latency, Duration::from_micros(18_350));
        assert_eq!(
            p,
            WanProfile::from_rtt(Duration::from_micros(36_700), Some(2_580_000))
        );

        assert_eq!("".parse::<WanProfile>().unwrap(), WanProfile::default());
    }

    #[test]
    fn bad_profiles_say_why() {
        for (text, why) in [
            ("latency=18", "unit is missing"),
            ("latency=1ms,rtt=2ms", "twice"),
            ("delay=1ms", "unknown key"),
            ("18ms", "not key=value"),
        ] {
            let e = text.parse::<WanProfile>().unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn model_times() {
        let p = WanProfile::new(Duration::from_millis(5), Some(8_000_000));
        // 1000 bytes at 8 Mbit/s take 1 ms.
        assert_eq!(p.serialization(1000), Duration::from_millis(1));
        assert_eq!(p.one_way(1000), Duration::from_millis(6));
        assert_eq!(WanProfile::default().one_way(1 << 30), Duration::ZERO);
    }

    proptest! {
        #[test]
        fn profiles_round_trip(
            lat in 0u64..10_000_000_000,
            bw in proptest::option::of(1u64..100_000_000_000),
            jit in 0u64..1_000_000_000,
        ) {
            let p = WanProfile::new(Duration::from_nanos(lat), bw)
                .with_jitter(Duration::from_nanos(jit));
            prop_assert_eq!(p.to_string().parse::<WanProfile>().unwrap(), p);
        }
    }
}
