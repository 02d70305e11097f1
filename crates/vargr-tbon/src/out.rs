//! Where a node's frames go: the seam between the sans-IO router and whatever carries
//! its frames (the reactor, an outbox while another thread polls, or the simulated tree
//! of the tests).
//!
//! Everything the router, the clock exchange and the monitor plane send passes an
//! [`Out`]; what the router reads and steers of its links beyond that (flow control,
//! liveness) passes [`Links`]. Both live here, apart from the router, so that the
//! router's parts can share them without importing one another.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use vargr_net::LinkId;
use vargr_wire::{encode_header, FrameKind, Packet};

/// Where frames leave a node.
pub trait Out {
    fn send(&mut self, link: LinkId, bytes: Bytes);
    /// Sends a latest-mode frame; a newer frame with the same `key` replaces it while
    /// the link is backed up.
    fn send_latest(&mut self, link: LinkId, key: u64, bytes: Bytes);

    /// Sends a monitor-plane frame: it leaves only when no other frame waits on the link.
    fn send_low(&mut self, link: LinkId, bytes: Bytes);

    /// Sends `bytes`, as a latest-mode frame when `latest` carries its key.
    fn forward(&mut self, link: LinkId, latest: Option<u64>, bytes: Bytes) {
        match latest {
            Some(key) => self.send_latest(link, key, bytes),
            None => self.send(link, bytes),
        }
    }

    /// Sends `bytes` on `lane`.
    fn send_on(&mut self, link: LinkId, lane: Lane, bytes: Bytes) {
        match lane {
            Lane::Normal => self.send(link, bytes),
            Lane::Latest(key) => self.send_latest(link, key, bytes),
            Lane::Low => self.send_low(link, bytes),
        }
    }
}

/// How a queued frame is to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Normal,
    /// Latest-mode, with its replacement key.
    Latest(u64),
    /// The monitor plane's low-priority lane.
    Low,
}

impl Out for vargr_net::Reactor {
    fn send(&mut self, link: LinkId, bytes: Bytes) {
        vargr_net::Reactor::send(self, link, bytes)
    }
    fn send_latest(&mut self, link: LinkId, key: u64, bytes: Bytes) {
        vargr_net::Reactor::send_latest(self, link, key, bytes)
    }
    fn send_low(&mut self, link: LinkId, bytes: Bytes) {
        vargr_net::Reactor::send_low(self, link, bytes)
    }
}

/// Frames waiting for the thread that holds the reactor.
#[derive(Default)]
pub struct Outbox(pub Vec<(LinkId, Lane, Bytes)>);

impl Out for Outbox {
    fn send(&mut self, link: LinkId, bytes: Bytes) {
        self.0.push((link, Lane::Normal, bytes));
    }
    fn send_latest(&mut self, link: LinkId, key: u64, bytes: Bytes) {
        self.0.push((link, Lane::Latest(key), bytes));
    }
    fn send_low(&mut self, link: LinkId, bytes: Bytes) {
        self.0.push((link, Lane::Low, bytes));
    }
}

/// What a link looks like to flow control and liveness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkActivity {
    /// Bytes queued and not yet written.
    pub backlog: usize,
    /// Reading is paused by backpressure.
    pub paused: bool,
    pub last_read: Instant,
    pub last_write: Instant,
}

/// A node's links beyond sending: how backed up and how lively each is, and the pause
/// that backpressure sets.
pub trait Links: Out {
    /// `None` once the link is gone.
    fn activity(&self, link: LinkId) -> Option<LinkActivity>;
    fn set_paused(&mut self, link: LinkId, paused: bool);
    /// Counts `link` as heard from at `now` (its silence proves nothing).
    fn restart_silence(&mut self, link: LinkId, now: Instant);
}

impl Links for vargr_net::Reactor {
    fn activity(&self, link: LinkId) -> Option<LinkActivity> {
        self.link(link).map(|l| LinkActivity {
            backlog: l.backlog(),
            paused: l.is_paused(),
            last_read: l.last_read,
            last_write: l.last_write,
        })
    }
    fn set_paused(&mut self, link: LinkId, paused: bool) {
        vargr_net::Reactor::set_paused(self, link, paused)
    }
    fn restart_silence(&mut self, link: LinkId, now: Instant) {
        if let Some(l) = self.link_mut(link) {
            l.last_read = now;
        }
    }
}

/// Encodes a frame into one shareable buffer.
pub fn frame_bytes(kind: FrameKind, stream: u32, tag: i32, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(vargr_wire::HEADER_LEN + payload.len());
    encode_header(kind, 0, stream, tag, payload.len(), &mut b);
    b.extend_from_slice(payload);
    b.freeze()
}

/// Encodes a data packet as a Data frame, in one buffer.
pub fn packet_bytes(p: &Packet) -> Bytes {
    let mut b = BytesMut::new();
    p.encode_frame(&mut b);
    b.freeze()
}
