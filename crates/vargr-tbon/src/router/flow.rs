//! Liveness, flow control and shutdown: heartbeats on idle links, silent links
//! declared dead, reading paused where the next hop is backed up, and the orderly
//! shutdown of a sub-tree.

use std::time::Instant;

use vargr_net::LinkId;
use vargr_wire::FrameKind;

use super::Router;
use crate::out::{frame_bytes, Links, Out};
use crate::{trace, TbonError};

/// Liveness.
impl Router {
    /// Sends heartbeats on idle links and declares silent links dead. Returns the links
    /// to close.
    pub fn on_tick(&mut self, now: Instant, links: &mut dyn Links) -> Vec<(LinkId, String)> {
        let (at, _, monitor) = self.parts();
        monitor.drain(at);
        let mut dead = Vec::new();
        let live: Vec<(LinkId, u32)> = self
            .parent
            .map(|p| (p, self.parent_node))
            .into_iter()
            .chain(
                self.children
                    .iter()
                    .filter(|c| c.alive)
                    .map(|c| (c.link, c.node)),
            )
            .collect();
        for (id, peer) in live {
            let Some(mut l) = links.activity(id) else {
                continue;
            };
            // Silence is evidence of death only on a link that flows freely: when we pause
            // it, or the peer does not take our writes, the peer is held back by flow
            // control and cannot send heartbeats; a peer that really dies closes the socket
            // (or TCP keepalive notices). The silence clock restarts once the link flows.
            if l.paused || l.backlog > 0 {
                links.restart_silence(id, now);
                l.last_read = now;
            }
            if now.saturating_duration_since(l.last_read) > self.heartbeat_timeout {
                dead.push((
                    id,
                    format!("no heartbeat for {} ms", self.heartbeat_timeout.as_millis()),
                ));
                continue;
            }
            if now.saturating_duration_since(l.last_write) >= self.heartbeat && l.backlog == 0 {
                let t0 = vargr_trace::now();
                let hb = frame_bytes(FrameKind::Heartbeat, 0, 0, &[]);
                let h = trace::header_of(&hb);
                links.send(id, hb);
                trace::link_out(h, peer, t0);
            }
        }
        dead
    }
}

/// Flow control.
impl Router {
    /// Pauses reading where the next hop is backed up, so memory stays bounded and a slow
    /// consumer slows its producers instead. Latest-mode streams never back up (they
    /// replace), so they do not count.
    pub fn apply_backpressure(&mut self, links: &mut dyn Links, limit: usize) {
        let over =
            |l: LinkId, links: &dyn Links| links.activity(l).is_some_and(|a| a.backlog > limit);
        // Upward: parent link, or the front-end's own result queues.
        let up_blocked = match self.parent {
            Some(p) => over(p, links),
            None => self.results_backed_up(limit),
        };
        for c in &self.children {
            links.set_paused(c.link, up_blocked);
        }
        // Downward: any child backed up stops reading from the parent.
        if let Some(p) = self.parent {
            let inbox_full = self.deliveries.inbox.len() > limit / 1024;
            let down_blocked = inbox_full || self.children.iter().any(|c| over(c.link, links));
            links.set_paused(p, down_blocked);
        }
    }

    /// Whether more than `limit` bytes wait on the link to the parent (`backlog` says
    /// how many wait on a link): a back-end's sender waits while it is.
    pub fn up_backed_up(&self, backlog: impl Fn(LinkId) -> usize, limit: usize) -> bool {
        self.parent.is_some_and(|p| backlog(p) > limit)
    }

    /// Whether more than `limit` bytes wait on a link to some child: the front-end's
    /// sender waits while it is.
    pub fn down_backed_up(&self, backlog: impl Fn(LinkId) -> usize, limit: usize) -> bool {
        self.children.iter().any(|c| backlog(c.link) > limit)
    }

    /// Front-end: whether some stream holds more unread results than a queue `limit`
    /// allows (one result per KiB of it).
    pub fn results_backed_up(&self, limit: usize) -> bool {
        self.deliveries
            .streams
            .values()
            .any(|q| q.len() > limit / 1024)
    }
}

/// Shutdown.
impl Router {
    /// Starts an orderly shutdown of the sub-tree below this node.
    pub fn begin_shutdown(&mut self, out: &mut dyn Out) {
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        for c in &self.children {
            if c.alive {
                out.send(c.link, frame_bytes(FrameKind::Shutdown, 0, 0, &[]));
            }
        }
        if self.children.is_empty() {
            if let Some(p) = self.parent {
                out.send(p, frame_bytes(FrameKind::ShutdownDone, 0, 0, &[]));
            }
            self.deliveries.closed.get_or_insert(TbonError::Shutdown);
        }
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// True once every child confirmed shutdown or is gone.
    pub fn children_done(&self) -> bool {
        self.children.iter().all(|c| c.shutdown_done || !c.alive)
    }

    /// A commnode that has stopped serving: if it was told to shut down, it confirms to
    /// its parent; if it lost its parent instead, it takes its sub-tree down with it.
    /// Returns true in the second case (the children are still to confirm).
    pub fn leave(&mut self, out: &mut dyn Out) -> bool {
        if self.deliveries.closed.is_some() && !self.shutting_down {
            self.begin_shutdown(out);
            return true;
        }
        if let Some(p) = self.parent {
            out.send(p, frame_bytes(FrameKind::ShutdownDone, 0, 0, &[]));
        }
        false
    }

    /// Children lost without confirming a shutdown (with recovery, they may live on
    /// under another parent).
    pub fn lost_children(&self) -> Vec<u32> {
        self.children
            .iter()
            .filter(|c| !c.alive && !c.shutdown_done)
            .map(|c| c.node)
            .collect()
    }
}
