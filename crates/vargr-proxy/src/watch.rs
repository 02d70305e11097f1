//! Deadlines for peers that stop half-way.
//!
//! A VNC server, a viewer or a link peer that sends the start of a message and then
//! nothing, stops taking what it is sent, or never finishes its handshake would
//! otherwise hold its session, its memory and its socket for ever: TCP keepalive
//! only finds peers that are gone, not peers that are there and silent. A silent
//! peer *between* messages is normal (a still screen sends nothing for hours) and is
//! never timed out. Each connection of a poll loop has a [`Watch`]; after every turn
//! the loop tells it what moved, sleeps no longer than [`Watch::wake_at`], and ends
//! the connection when [`Watch::overdue`] names a reason.

use std::time::{Duration, Instant};

/// What one connection did up to now, as a poll loop sees it after a turn.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Progress {
    /// Whether the peer's handshake is done.
    pub ready: bool,
    /// Whether the peer's last bytes are the start of a message not complete yet.
    pub partial: bool,
    /// Bytes read from the peer, in all.
    pub read: u64,
    /// Whether bytes wait for the peer's socket to take them.
    pub unsent: bool,
    /// Bytes the peer's socket has taken, in all.
    pub written: u64,
}

/// The deadlines of one connection, against the time it has been stuck.
#[derive(Debug)]
pub(crate) struct Watch {
    started: Instant,
    ready: bool,
    read: u64,
    written: u64,
    /// Since when the peer has sent nothing in the middle of a message.
    stalled_in: Option<Instant>,
    /// Since when the peer's socket has taken nothing of what waits for it.
    stalled_out: Option<Instant>,
}

impl Watch {
    pub(crate) fn new(now: Instant) -> Watch {
        Watch {
            started: now,
            ready: false,
            read: 0,
            written: 0,
            stalled_in: None,
            stalled_out: None,
        }
    }

    pub(crate) fn observe(&mut self, now: Instant, p: Progress) {
        self.ready = p.ready;
        self.stalled_in = match (p.partial, p.read != self.read) {
            (false, _) | (true, true) => p.partial.then_some(now),
            (true, false) => self.stalled_in.or(Some(now)),
        };
        self.stalled_out = match (p.unsent, p.written != self.written) {
            (false, _) | (true, true) => p.unsent.then_some(now),
            (true, false) => self.stalled_out.or(Some(now)),
        };
        self.read = p.read;
        self.written = p.written;
    }

    /// Why the connection must end, if one of its deadlines has passed.
    pub(crate) fn overdue(&self, now: Instant, limit: Duration) -> Option<String> {
        let secs = limit.as_secs_f64();
        if !self.ready && now >= self.started + limit {
            return Some(format!("did not finish its handshake in {secs} s"));
        }
        if self.stalled_in.is_some_and(|t| now >= t + limit) {
            return Some(format!(
                "sent part of a message and nothing more for {secs} s"
            ));
        }
        if self.stalled_out.is_some_and(|t| now >= t + limit) {
            return Some(format!("took none of the bytes sent to it for {secs} s"));
        }
        None
    }

    /// When the next deadline falls, if any runs.
    pub(crate) fn wake_at(&self, limit: Duration) -> Option<Instant> {
        let handshake = (!self.ready).then_some(self.started);
        [handshake, self.stalled_in, self.stalled_out]
            .into_iter()
            .flatten()
            .min()
            .map(|t| t + limit)
    }
}

/// A poll timeout in milliseconds until the earliest of `deadlines` (-1: none).
pub(crate) fn poll_timeout(now: Instant, deadlines: impl Iterator<Item = Instant>) -> i32 {
    match deadlines.min() {
        None => -1,
        Some(t) => {
            // Rounded up, so the loop wakes after the deadline, not just before it.
            let ms = t.saturating_duration_since(now).as_micros().div_ceil(1000);
            ms.min(i32::MAX as u128) as i32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(10);

    fn at(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    fn progress(ready: bool, partial: bool, read: u64, unsent: bool, written: u64) -> Progress {
        Progress {
            ready,
            partial,
            read,
            unsent,
            written,
        }
    }

    #[test]
    fn a_handshake_has_a_deadline_from_the_start() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        // Bytes keep coming, but the handshake never ends.
        for s in 0..10 {
            w.observe(at(t0, s), progress(false, true, s, false, 0));
            assert_eq!(w.overdue(at(t0, s), LIMIT), None);
        }
        assert_eq!(w.wake_at(LIMIT), Some(at(t0, 10)));
        assert!(w.overdue(at(t0, 10), LIMIT).unwrap().contains("handshake"));
        w.observe(at(t0, 10), progress(true, false, 11, false, 0));
        assert_eq!(w.overdue(at(t0, 100), LIMIT), None);
        assert_eq!(w.wake_at(LIMIT), None);
    }

    #[test]
    fn half_a_message_times_out_only_without_new_bytes() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        w.observe(t0, progress(true, false, 10, false, 0));
        // Silent between messages: never overdue.
        assert_eq!(w.overdue(at(t0, 1000), LIMIT), None);
        // A large message arriving slowly: each new byte restarts the clock.
        for s in 1..30 {
            w.observe(at(t0, s), progress(true, true, 10 + s, false, 0));
            assert_eq!(w.overdue(at(t0, s), LIMIT), None);
        }
        w.observe(at(t0, 31), progress(true, true, 39, false, 0));
        assert_eq!(w.wake_at(LIMIT), Some(at(t0, 39)));
        assert_eq!(w.overdue(at(t0, 38), LIMIT), None);
        assert!(w
            .overdue(at(t0, 39), LIMIT)
            .unwrap()
            .contains("part of a message"));
        // It completes: nothing is due.
        w.observe(at(t0, 39), progress(true, false, 40, false, 0));
        assert_eq!(w.overdue(at(t0, 100), LIMIT), None);
    }

    #[test]
    fn output_the_peer_does_not_take_times_out() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        w.observe(t0, progress(true, false, 0, true, 0));
        // More queued, nothing taken: the clock keeps running.
        w.observe(at(t0, 5), progress(true, false, 0, true, 0));
        assert!(w.overdue(at(t0, 10), LIMIT).unwrap().contains("took none"));
        // Some taken: it restarts.
        w.observe(at(t0, 10), progress(true, false, 0, true, 100));
        assert_eq!(w.overdue(at(t0, 19), LIMIT), None);
        w.observe(at(t0, 19), progress(true, false, 0, false, 200));
        assert_eq!(w.wake_at(LIMIT), None);
    }

    #[test]
    fn the_poll_timeout_rounds_up_to_the_earliest_deadline() {
        let t0 = Instant::now();
        assert_eq!(poll_timeout(t0, std::iter::empty()), -1);
        let d = [
            t0 + Duration::from_micros(2500),
            t0 + Duration::from_secs(9),
        ];
        assert_eq!(poll_timeout(t0, d.into_iter()), 3);
        assert_eq!(poll_timeout(t0 + Duration::from_secs(1), d.into_iter()), 0);
    }
}
