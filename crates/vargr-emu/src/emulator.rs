//! One direction of an emulated link: a [`Shaper`] in front of a bounded delay line.
//!
//! [`crate::EmuLinkStage`] wraps it as the stage of vargr links that cross an emulated
//! WAN inside one process; tests and tools drive it directly. It is sans-IO like the shaper:
//! the node loop pushes frames with the current time, asks for the next deadline, and
//! polls out frames that are due. Frames are delivered whole and in order.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use thiserror::Error;

use crate::profile::LinkSpec;
use crate::shaper::Shaper;

/// A FIFO of chunks with non-decreasing due times, counting the bytes it holds.
#[derive(Debug, Default)]
pub(crate) struct DelayQueue {
    items: VecDeque<(Instant, Bytes)>,
    bytes: usize,
}

impl DelayQueue {
    pub(crate) fn push(&mut self, due: Instant, chunk: Bytes) {
        debug_assert!(self.items.back().is_none_or(|(last, _)| *last <= due));
        self.bytes += chunk.len();
        self.items.push_back((due, chunk));
    }

    /// The first chunk if it is due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Instant, Bytes)> {
        if self.items.front()?.0 > now {
            return None;
        }
        let (due, chunk) = self.items.pop_front()?;
        self.bytes -= chunk.len();
        Some((due, chunk))
    }

    /// Drops `n` bytes from the front after a partial write; a chunk is removed when all
    /// its bytes are gone, and its due time returned.
    pub(crate) fn consume(&mut self, mut n: usize, mut on_done: impl FnMut(Instant)) {
        while n > 0 {
            let Some((due, front)) = self.items.front_mut() else {
                return;
            };
            let take = n.min(front.len());
            let _ = front.split_to(take);
            self.bytes -= take;
            n -= take;
            if front.is_empty() {
                on_done(*due);
                self.items.pop_front();
            }
        }
    }

    /// Due chunks at the front, for a vectored write.
    pub(crate) fn due(&self, now: Instant) -> impl Iterator<Item = &Bytes> {
        self.items
            .iter()
            .take_while(move |(due, _)| *due <= now)
            .map(|(_, b)| b)
    }

    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.items.front().map(|(due, _)| *due)
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }
}

/// The queue is at its byte limit; the frame is handed back.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("emulated link is full: {queued} bytes queued, limit {limit}")]
pub struct EmulatorFull {
    /// The frame that did not fit.
    pub frame: Bytes,
    /// Bytes queued at the time.
    pub queued: usize,
    /// The configured limit.
    pub limit: usize,
}

/// An in-process emulated link direction: push frames in, poll them out when due.
///
/// ```
/// use std::time::{Duration, Instant};
/// use bytes::Bytes;
/// use vargr_emu::{LinkEmulator, WanProfile};
///
/// let mut stage = LinkEmulator::new(WanProfile::new(Duration::from_millis(10), None), 0);
/// let t0 = Instant::now();
/// stage.push(t0, Bytes::from_static(b"hello")).unwrap();
/// assert_eq!(stage.next_deadline(), Some(t0 + Duration::from_millis(10)));
/// assert_eq!(stage.poll_ready(t0 + Duration::from_millis(9)), None);
/// assert_eq!(stage.poll_ready(t0 + Duration::from_millis(10)).unwrap(), "hello");
/// ```
#[derive(Debug)]
pub struct LinkEmulator {
    shaper: Shaper,
    queue: DelayQueue,
    limit: usize,
}

impl LinkEmulator {
    /// Default byte limit of the delay line.
    pub const DEFAULT_LIMIT: usize = 64 << 20;

    /// A stage following `spec` with jitter seeded by `seed` and the default limit.
    pub fn new(spec: impl Into<LinkSpec>, seed: u64) -> LinkEmulator {
        LinkEmulator::with_shaper(Shaper::new(spec, seed))
    }

    /// A stage around an existing shaper (for example one with its epoch set).
    pub fn with_shaper(shaper: Shaper) -> LinkEmulator {
        LinkEmulator {
            shaper,
            queue: DelayQueue::default(),
            limit: Self::DEFAULT_LIMIT,
        }
    }

    /// The same stage holding at most `limit` bytes (one frame is always accepted into an
    /// empty stage, however large, so a big frame cannot block the link forever).
    pub fn with_limit(mut self, limit: usize) -> LinkEmulator {
        self.limit = limit;
        self
    }

    /// Queues `frame`, arrived at `now`, and returns when it will be ready; when the stage
    /// is full the frame comes back in the error and the caller applies backpressure.
    pub fn push(&mut self, now: Instant, frame: Bytes) -> Result<Instant, EmulatorFull> {
        let queued = self.queue.bytes();
        if queued > 0 && queued + frame.len() > self.limit {
            return Err(EmulatorFull {
                frame,
                queued,
                limit: self.limit,
            });
        }
        let due = self.shaper.schedule(now, frame.len());
        self.queue.push(due, frame);
        Ok(due)
    }

    /// The next frame if it is due at `now`.
    pub fn poll_ready(&mut self, now: Instant) -> Option<Bytes> {
        self.queue.pop_due(now).map(|(_, b)| b)
    }

    /// When the next frame will be ready; `None` if the stage is empty.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.queue.next_due()
    }

    /// Bytes waiting in the stage.
    pub fn queued_bytes(&self) -> usize {
        self.queue.bytes()
    }

    /// Frames waiting in the stage.
    pub fn queued_frames(&self) -> usize {
        self.queue.len()
    }

    /// The shaper, for its settings and backlog.
    pub fn shaper(&self) -> &Shaper {
        &self.shaper
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::WanProfile;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use std::time::Duration;

    #[test]
    fn bounded_with_backpressure() {
        let t0 = Instant::now();
        let mut s =
            LinkEmulator::new(WanProfile::new(Duration::from_millis(1), None), 0).with_limit(10);
        s.push(t0, Bytes::from(vec![0; 100])).unwrap(); // an empty stage takes anything
        let full = s.push(t0, Bytes::from_static(b"x")).unwrap_err();
        assert_eq!(
            (full.frame.as_ref(), full.queued, full.limit),
            (&b"x"[..], 100, 10)
        );
        assert_eq!(
            s.poll_ready(t0 + Duration::from_millis(1)).unwrap().len(),
            100
        );
        s.push(t0, Bytes::from_static(b"x")).unwrap();
    }

    #[test]
    fn partial_consume_keeps_order() {
        let t0 = Instant::now();
        let mut q = DelayQueue::default();
        q.push(t0, Bytes::from_static(b"abc"));
        q.push(t0, Bytes::from_static(b"de"));
        let mut done = 0;
        q.consume(4, |_| done += 1);
        assert_eq!(done, 1);
        assert_eq!(q.bytes(), 1);
        assert_eq!(q.due(t0).next().unwrap().as_ref(), b"e");
    }

    proptest! {
        #[test]
        fn bytes_are_conserved_in_order(
            frames in vec((0u64..3_000, vec(any::<u8>(), 0..300)), 0..100),
            bw in proptest::option::of(10_000u64..1_000_000_000),
            lat in 0u64..10_000,
            jit in 0u64..10_000,
            seed in any::<u64>(),
        ) {
            let p = WanProfile::new(Duration::from_micros(lat), bw)
                .with_jitter(Duration::from_micros(jit));
            let mut stage = LinkEmulator::new(p, seed);
            let mut now = Instant::now();
            let (mut sent, mut got) = (Vec::new(), Vec::new());
            let mut last_ready = None;
            for (gap, frame) in frames {
                now += Duration::from_micros(gap);
                sent.extend_from_slice(&frame);
                stage.push(now, Bytes::from(frame)).unwrap();
                while let Some(b) = stage.poll_ready(now) {
                    got.extend_from_slice(&b);
                }
            }
            // Drain by stepping the fake clock from deadline to deadline.
            while let Some(deadline) = stage.next_deadline() {
                if let Some(prev) = last_ready {
                    prop_assert!(deadline >= prev);
                }
                last_ready = Some(deadline);
                prop_assert!(stage.poll_ready(deadline - Duration::from_nanos(1)).is_none());
                got.extend_from_slice(&stage.poll_ready(deadline).unwrap());
            }
            prop_assert_eq!(stage.queued_bytes(), 0);
            prop_assert_eq!(got, sent);
        }
    }
}
