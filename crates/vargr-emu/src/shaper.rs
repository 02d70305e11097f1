//! The delay model, with no sockets and no clock: given bytes and the time they arrived,
//! when may they be delivered?
//!
//! This is the seed's delay wrapper (Longcut computes a message's delay "using latency and
//! bandwidth"), written as a state machine so that the relay, the in-process
//! [`LinkEmulator`](crate::LinkEmulator) and tests with a fake clock all share one model:
//!
//! 1. **Serialization** on one bottleneck per direction: a chunk of `N` bytes arriving at
//!    `t` starts when the bottleneck is free and occupies it for `N * 8 / bandwidth`:
//!    `done = max(t, next_free) + N*8/bw`, `next_free = done`. Back-to-back chunks
//!    therefore leave at exactly the configured rate (the sub-nanosecond remainder is
//!    carried, so the long-run rate has no rounding drift).
//! 2. **Propagation**: the chunk is due `latency` (one-way) after it left the bottleneck,
//!    plus a uniform `±jitter` drawn from a seeded RNG.
//! 3. **Order**: a stream's bytes never overtake each other; a chunk is never due before
//!    the previous chunk of the same stream ([`StreamOrder`]). Jitter and falling trace
//!    latencies thus delay, never reorder.
//!
//! Several streams may share one `Shaper` (the relay's default: all connections between
//! two sites queue at the same bottleneck), each keeping its own [`StreamOrder`]; and
//! several shapers, in several processes, may share one bottleneck
//! ([`Shaper::with_shared`]: a [`Gateways`](crate::Gateways) slot), so that all the
//! links between two sites compete for one WAN.
//! Only payload bytes are counted; TCP/IP header overhead is not modelled.

use std::time::{Duration, Instant};

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use crate::gateway::SharedBottleneck;
use crate::profile::LinkSpec;

/// Per-stream ordering state: the due time of the stream's previous chunk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamOrder {
    last_due: Option<Instant>,
}

impl StreamOrder {
    /// The due time of the last chunk scheduled on this stream.
    pub fn last_due(&self) -> Option<Instant> {
        self.last_due
    }
}

/// One direction of an emulated link: a bottleneck, a latency and a jitter source.
#[derive(Debug, Clone)]
pub struct Shaper {
    spec: LinkSpec,
    /// Time zero for trace replay; set explicitly or by the first chunk.
    epoch: Option<Instant>,
    /// Where chunks serialize.
    bottleneck: Bottleneck,
    /// `bits * 1e9 mod bandwidth` left over from the last serialization, in bit-nanoseconds.
    carry: u128,
    rng: Xoshiro256PlusPlus,
    /// Ordering for callers that use [`Shaper::schedule`] (one stream).
    own_order: StreamOrder,
}

impl Shaper {
    /// A shaper following `spec`, drawing jitter from an RNG seeded with `seed`.
    pub fn new(spec: impl Into<LinkSpec>, seed: u64) -> Shaper {
        Shaper {
            spec: spec.into(),
            epoch: None,
            bottleneck: Bottleneck::Own(None),
            carry: 0,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            own_order: StreamOrder::default(),
        }
    }

    /// The same shaper serializing on `shared`, a bottleneck other shapers (in this and
    /// other processes) share, and replaying traces from its table's epoch.
    pub fn with_shared(mut self, shared: SharedBottleneck) -> Shaper {
        self.epoch = Some(shared.epoch());
        self.bottleneck = Bottleneck::Shared(shared);
        self
    }

    /// Sets time zero of a trace replay (otherwise the first scheduled chunk's arrival).
    /// Shapers that must replay in step, such as the two directions of a link, share it.
    pub fn set_epoch(&mut self, epoch: Instant) {
        self.epoch = Some(epoch);
    }

    /// What this shaper follows.
    pub fn spec(&self) -> &LinkSpec {
        &self.spec
    }

    /// Schedules `len` bytes arriving at `now` on the shaper's own single stream and
    /// returns when they may be delivered.
    pub fn schedule(&mut self, now: Instant, len: usize) -> Instant {
        let mut order = self.own_order;
        let due = self.schedule_on(&mut order, now, len);
        self.own_order = order;
        due
    }

    /// Schedules `len` bytes of the stream `order` arriving at `now` and returns when they
    /// may be delivered: never before `now`, never before the stream's previous chunk.
    ///
    /// A zero-length chunk (an end-of-stream marker) takes no bottleneck time but waits
    /// behind the queue and the latency like data does.
    pub fn schedule_on(&mut self, order: &mut StreamOrder, now: Instant, len: usize) -> Instant {
        let epoch = *self.epoch.get_or_insert(now);
        let (spec, carry) = (&self.spec, self.carry);
        let mut new_carry = carry;
        let (start, done) = self.bottleneck.reserve(now, |start, idle| {
            // An idle bottleneck has nothing to carry over.
            let carry = if idle { 0 } else { carry };
            new_carry = carry;
            match spec
                .profile_at(start.saturating_duration_since(epoch))
                .bandwidth_bits_per_s
            {
                Some(bw) if len > 0 => {
                    let bit_nanos = len as u128 * 8 * 1_000_000_000 + carry;
                    let bw = u128::from(bw);
                    new_carry = bit_nanos % bw;
                    duration_from_nanos(bit_nanos / bw)
                }
                _ => Duration::ZERO,
            }
        });
        self.carry = new_carry;
        let profile = self.spec.profile_at(start.saturating_duration_since(epoch));

        let latency = self.jittered(profile.latency, profile.jitter);
        let mut due = done + latency;
        if let Some(last) = order.last_due {
            due = due.max(last);
        }
        order.last_due = Some(due);
        due
    }

    /// How long a chunk arriving at `now` would queue before the bottleneck is free.
    pub fn backlog(&self, now: Instant) -> Duration {
        self.bottleneck
            .next_free(now)
            .map_or(Duration::ZERO, |f| f.saturating_duration_since(now))
    }

    fn jittered(&mut self, latency: Duration, jitter: Duration) -> Duration {
        if jitter.is_zero() {
            return latency;
        }
        let j = jitter.as_nanos().min(i64::MAX as u128) as i64;
        let offset = self.rng.random_range(-j..=j);
        let nanos = (latency.as_nanos() as i128 + i128::from(offset)).max(0);
        duration_from_nanos(nanos as u128)
    }
}

/// Where a shaper's chunks serialize: a bottleneck of its own, or one it shares.
#[derive(Debug, Clone)]
enum Bottleneck {
    /// When this shaper's bottleneck finishes the chunks already scheduled.
    Own(Option<Instant>),
    Shared(SharedBottleneck),
}

impl Bottleneck {
    /// Occupies the bottleneck for a chunk arriving at `now` for the time `serialize`
    /// gives (from the start time, and whether the bottleneck was idle); returns when
    /// the chunk starts and when it is done.
    fn reserve(
        &mut self,
        now: Instant,
        mut serialize: impl FnMut(Instant, bool) -> Duration,
    ) -> (Instant, Instant) {
        match self {
            Bottleneck::Own(next_free) => {
                let (start, idle) = match *next_free {
                    Some(free) if free > now => (free, false),
                    _ => (now, true),
                };
                let done = start + serialize(start, idle);
                *next_free = Some(done);
                (start, done)
            }
            Bottleneck::Shared(shared) => shared.reserve(now, serialize),
        }
    }

    fn next_free(&self, now: Instant) -> Option<Instant> {
        match self {
            Bottleneck::Own(next_free) => *next_free,
            Bottleneck::Shared(shared) => Some(shared.next_free(now)),
        }
    }
}

fn duration_from_nanos(nanos: u128) -> Duration {
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::WanProfile;
    use crate::trace::Trace;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }
    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// 8 Mbit/s: one byte per microsecond, which makes expected times easy to read.
    fn link(latency: Duration) -> Shaper {
        Shaper::new(WanProfile::new(latency, Some(8_000_000)), 1)
    }

    #[test]
    fn exact_delivery_times() {
        let t0 = Instant::now();
        let mut s = link(ms(10));
        // Idle link: serialization then latency.
        assert_eq!(s.schedule(t0, 1000), t0 + ms(1) + ms(10));
        // Arrives while the first is still serializing: queues behind it.
        assert_eq!(s.schedule(t0 + us(500), 1000), t0 + ms(2) + ms(10));
        assert_eq!(s.backlog(t0 + us(500)), us(1500));
        // Arrives after the bottleneck went idle: starts at once.
        assert_eq!(s.schedule(t0 + ms(5), 10), t0 + ms(5) + us(10) + ms(10));
        assert_eq!(s.backlog(t0 + ms(6)), Duration::ZERO);
        // An end-of-stream marker takes no bottleneck time.
        assert_eq!(s.schedule(t0 + ms(7), 0), t0 + ms(17));
    }

    #[test]
    fn unlimited_bandwidth_is_pure_latency() {
        let t0 = Instant::now();
        let mut s = Shaper::new(WanProfile::new(ms(3), None), 1);
        assert_eq!(s.schedule(t0, 1 << 30), t0 + ms(3));
        assert_eq!(s.schedule(t0, 1 << 30), t0 + ms(3));
    }

    #[test]
    fn shared_bottleneck_separate_order() {
        let t0 = Instant::now();
        let mut s = link(ms(1));
        let (mut a, mut b) = (StreamOrder::default(), StreamOrder::default());
        assert_eq!(s.schedule_on(&mut a, t0, 2000), t0 + ms(2) + ms(1));
        // Stream b's small message queues behind a's bulk at the shared bottleneck.
        assert_eq!(s.schedule_on(&mut b, t0, 100), t0 + us(2100) + ms(1));
        assert_eq!(b.last_due(), Some(t0 + us(3100)));
    }

    #[test]
    fn shapers_of_one_gateway_share_its_bandwidth() {
        let g = std::sync::Arc::new(crate::Gateways::create().unwrap());
        let shared = || link(ms(10)).with_shared(g.bottleneck("a", "b").unwrap());
        let (mut one, mut two) = (shared(), shared());
        let mut alone = link(ms(10)).with_shared(g.bottleneck("b", "a").unwrap());
        let t0 = Instant::now();
        // Two links' 1000-byte chunks at the same moment serialize one after the other.
        assert_eq!(one.schedule(t0, 1000), t0 + ms(1) + ms(10));
        assert_eq!(two.schedule(t0, 1000), t0 + ms(2) + ms(10));
        assert_eq!(one.backlog(t0), ms(2));
        // The other direction is a bottleneck of its own.
        assert_eq!(alone.schedule(t0, 1000), t0 + ms(1) + ms(10));
    }

    #[test]
    fn rate_has_no_rounding_drift() {
        // 3 bytes at 7 bit/s is not a whole number of nanoseconds; a million of them is.
        let t0 = Instant::now();
        let mut s = Shaper::new(WanProfile::new(Duration::ZERO, Some(7)), 1);
        let mut due = t0;
        for _ in 0..7 {
            due = s.schedule(t0, 3);
        }
        assert_eq!(due, t0 + Duration::from_secs(24));
    }

    #[test]
    fn jitter_never_reorders_a_stream() {
        let t0 = Instant::now();
        let p = WanProfile::new(ms(10), None).with_jitter(ms(5));
        let mut s = Shaper::new(p, 7);
        let dues: Vec<Instant> = (0..1000).map(|i| s.schedule(t0 + us(i * 10), 1)).collect();
        assert!(dues.windows(2).all(|w| w[0] <= w[1]));
        assert!(dues.iter().all(|&d| d >= t0 + ms(5) && d <= t0 + ms(25)));
        // Seeded: the same seed draws the same delays.
        let mut again = Shaper::new(p, 7);
        let dues2: Vec<Instant> = (0..1000)
            .map(|i| again.schedule(t0 + us(i * 10), 1))
            .collect();
        assert_eq!(dues, dues2);
    }

    #[test]
    fn follows_a_trace() {
        let trace = Trace::parse("0 10ms 8mbit\n1s 2ms 16mbit\n", "t").unwrap();
        let t0 = Instant::now();
        let mut s = Shaper::new(LinkSpec::trace(trace), 1);
        s.set_epoch(t0);
        assert_eq!(s.schedule(t0, 1000), t0 + ms(1) + ms(10));
        // After 1 s: lower latency, double bandwidth.
        let t1 = t0 + ms(1000);
        assert_eq!(s.schedule(t1, 1000), t1 + us(500) + ms(2));
        // Latency dropping by 8 ms does not let a later chunk overtake an earlier one.
        let mut s = Shaper::new(
            LinkSpec::trace(Trace::parse("0 10ms 8mbit\n1ms 0ms 8mbit\n", "t").unwrap()),
            1,
        );
        s.set_epoch(t0);
        let first = s.schedule(t0, 10);
        let second = s.schedule(t0 + ms(1), 10);
        assert_eq!(first, t0 + us(10) + ms(10));
        assert_eq!(second, first);
    }

    proptest! {
        #[test]
        fn delivery_is_monotonic_and_causal(
            chunks in proptest::collection::vec((0u64..5_000, 0usize..20_000, 0usize..3), 1..200),
            bw in proptest::option::of(1_000u64..10_000_000_000),
            lat in 0u64..50_000_000,
            jit in 0u64..20_000_000,
            seed in any::<u64>(),
        ) {
            let p = WanProfile::new(Duration::from_nanos(lat), bw)
                .with_jitter(Duration::from_nanos(jit));
            let mut s = Shaper::new(p, seed);
            let mut orders = [StreamOrder::default(); 3];
            let mut last = [None::<Instant>; 3];
            let mut now = Instant::now();
            let t0 = now;
            let mut bytes = 0u128;
            for (n, (gap, len, stream)) in chunks.into_iter().enumerate() {
                now += Duration::from_micros(gap);
                bytes += len as u128;
                let due = s.schedule_on(&mut orders[stream], now, len);
                prop_assert!(due >= now);
                if let Some(prev) = last[stream] {
                    prop_assert!(due >= prev);
                }
                last[stream] = Some(due);
                // The bottleneck never carries more than bw allows (each chunk may round
                // its serialization down by under a nanosecond).
                if let Some(bw) = bw {
                    let busy = s.bottleneck.next_free(now).unwrap().duration_since(t0).as_nanos() + n as u128 + 1;
                    prop_assert!(busy * u128::from(bw) >= bytes * 8 * 1_000_000_000);
                }
            }
        }
    }
}
