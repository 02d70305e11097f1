//! Faults at one node: reports travelling to the front-end (and what the front-end
//! makes of them), a child's link closing, the parent's link closing.

use std::time::Instant;

use vargr_net::LinkId;
use vargr_wire::FrameKind;

use super::{Router, OPEN};
use crate::out::{frame_bytes, Out};
use crate::proto::{self, FaultMsg};
use crate::recovery::{Orphan, Recovery, TreeEvent};
use crate::TbonError;

impl Router {
    /// Passes a fault towards the front-end, or records it there.
    pub fn report(&mut self, fault: FaultMsg, out: &mut dyn Out) {
        tracing::debug!(node = self.node, "fault: {fault:?}");
        if let Some(p) = self.parent {
            out.send(
                p,
                frame_bytes(FrameKind::Fault, 0, 0, &proto::to_json(&fault)),
            );
            return;
        }
        if let Some(o) = self.orphan.as_mut() {
            // Sent on once adopted.
            o.pending.push(fault);
            return;
        }
        let err = match fault {
            FaultMsg::NodeLost {
                node,
                host,
                reason,
                backends,
            } => {
                self.deliveries.events.push(TreeEvent::NodeLost {
                    node,
                    host: host.clone(),
                    backends: backends.clone(),
                });
                TbonError::NodeLost {
                    node,
                    host,
                    reason,
                    backends,
                }
            }
            FaultMsg::Filter {
                stream,
                node,
                filter,
                reason,
            } => TbonError::Filter {
                stream,
                node,
                filter,
                reason,
            },
            FaultMsg::Reparented {
                node,
                lost_parent,
                lost_host,
                new_parent,
                backends,
            } => {
                // A parent that died with its own parent (killed together) was seen to
                // die only by its orphans: report it for them.
                let known =
                    self.deliveries.events.iter().any(
                        |e| matches!(e, TreeEvent::NodeLost { node, .. } if *node == lost_parent),
                    );
                if !known {
                    self.report(
                        FaultMsg::NodeLost {
                            node: lost_parent,
                            host: lost_host,
                            reason: format!("its child node {node} saw it die"),
                            backends: backends.clone(),
                        },
                        out,
                    );
                }
                // Back: a loss still open for them ended before any wave went without them.
                self.open_losses.retain(|(_, b), _| !backends.contains(b));
                // Not a fault: the back-ends are reachable again.
                self.deliveries.events.push(TreeEvent::Reparented {
                    node,
                    lost_parent,
                    new_parent,
                    backends,
                });
                return;
            }
            FaultMsg::WavesLost {
                stream,
                first,
                end: OPEN,
                backends,
                lost,
            } => {
                // Reported when they come back, or never (then `NodeLost` says it all).
                for b in backends {
                    let e = self.open_losses.entry((stream, b)).or_insert((first, lost));
                    if first < e.0 {
                        *e = (first, lost);
                    }
                }
                return;
            }
            FaultMsg::WavesLost {
                stream,
                first,
                end,
                backends,
                lost,
            } => {
                // A back-end whose loss began above its adopter (two nodes died
                // together) went missing from the earlier wave the dead node reported.
                let mut by_first: Vec<(u64, Vec<u32>)> = Vec::new();
                for b in backends {
                    let f = match self.open_losses.remove(&(stream, b)) {
                        Some((f0, _)) => f0.min(first),
                        None => first,
                    };
                    match by_first.iter_mut().find(|(x, _)| *x == f) {
                        Some((_, v)) => v.push(b),
                        None => by_first.push((f, vec![b])),
                    }
                }
                for (first, backends) in by_first {
                    self.deliveries.events.push(TreeEvent::WavesLost {
                        stream,
                        first,
                        end,
                        backends: backends.clone(),
                        lost,
                    });
                    let err = TbonError::WavesLost {
                        stream,
                        first,
                        end,
                        backends,
                        lost,
                    };
                    self.deliveries
                        .streams
                        .entry(stream)
                        .or_default()
                        .push_back(Err(err.clone()));
                    self.deliveries.faults.push(err);
                }
                return;
            }
        };
        for (id, st) in &self.streams {
            let affected = match &err {
                TbonError::NodeLost { backends, .. } => backends
                    .iter()
                    .any(|b| st.open.members.binary_search(b).is_ok()),
                TbonError::Filter { stream, .. } => stream == id,
                _ => false,
            };
            if affected {
                self.deliveries
                    .streams
                    .entry(*id)
                    .or_default()
                    .push_back(Err(err.clone()));
            }
        }
        self.deliveries.faults.push(err);
    }

    /// A link went away. Children: every stream stops waiting for it and the loss is
    /// reported up. Parent: this node must stop.
    pub fn on_closed(&mut self, link: LinkId, reason: String, now: Instant, out: &mut dyn Out) {
        tracing::debug!(node = self.node, "link {link:?} closed: {reason}");
        if Some(link) == self.parent {
            self.parent_lost(reason);
            return;
        }
        let Some(ci) = self.child_index(link) else {
            return;
        };
        if !self.children[ci].alive {
            return;
        }
        self.children[ci].alive = false;
        let (at, _, monitor) = self.parts();
        monitor.child_lost(ci, at, out);
        if self.shutting_down && self.children[ci].shutdown_done {
            return;
        }
        // The loss is reported first, so a receiver sees why the next wave is partial.
        if !self.shutting_down {
            let c = &self.children[ci];
            let fault = FaultMsg::NodeLost {
                node: c.node,
                host: c.host.clone(),
                reason,
                backends: c.backends.clone(),
            };
            self.report(fault, out);
        }
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        let mut open = Vec::new();
        for id in ids {
            let waves = {
                let st = self.streams.get_mut(&id).expect("id taken from the map");
                match st.child_slots.iter().find(|(c, _)| *c == ci) {
                    Some(&(_, slot)) => {
                        // Its queued packets ride along; the waves after them go without it.
                        let from = st.sync.released() + st.sync.queued_from(slot) as u64;
                        self.children[ci].lost_from.insert(id, from);
                        let members: Vec<u32> = self.children[ci]
                            .backends
                            .iter()
                            .copied()
                            .filter(|b| st.open.members.binary_search(b).is_ok())
                            .collect();
                        if st.aligned() && !members.is_empty() && !self.shutting_down {
                            // Open-ended: whoever adopts them (maybe not us: we may die
                            // first) closes it; the front-end joins the two.
                            open.push(FaultMsg::WavesLost {
                                stream: id,
                                first: from,
                                end: OPEN,
                                backends: members,
                                lost: self.children[ci].node,
                            });
                        }
                        st.sync.remove_child(slot, now)
                    }
                    None => Vec::new(),
                }
            };
            for f in open.drain(..) {
                self.report(f, out);
            }
            self.run_waves(id, waves, out);
        }
    }

    /// The parent is gone. With recovery on, a node that has something to save (a
    /// back-end, or children still alive) and an ancestor to ask becomes an orphan;
    /// otherwise it must stop.
    pub fn parent_lost(&mut self, reason: String) {
        tracing::debug!(node = self.node, "parent lost: {reason}");
        let worth_saving = self.backend_rank.is_some() || self.children.iter().any(|c| c.alive);
        if self.recovery == Recovery::Ancestor
            && !self.shutting_down
            && self.deliveries.closed.is_none()
            && self.orphan.is_none()
            && self.ancestors.len() > 1
            && worth_saving
        {
            self.parent = None;
            self.orphan = Some(Orphan {
                lost_parent: self.parent_node,
                reason,
                rejoining: false,
                pending: Vec::new(),
                held: Vec::new(),
            });
            return;
        }
        if self.deliveries.closed.is_none() {
            self.deliveries.closed = Some(if self.shutting_down {
                TbonError::Shutdown
            } else {
                TbonError::ParentLost(reason)
            });
        }
    }
}
