//! Fault recovery at one node (see [`crate::recovery`]): the orphan's side (what it
//! asks, what it does once adopted) and the adopter's (whether it adopts, and lining
//! the orphan's waves up with its own).

use std::time::Instant;

use rustc_hash::FxHashMap;
use vargr_net::LinkId;
use vargr_wire::FrameKind;

use super::Router;
use crate::node::ChildInfo;
use crate::out::{frame_bytes, Out};
use crate::proto::{self, AdoptMsg, AdoptedMsg, Ancestor, FaultMsg, StreamProgress};
use crate::TbonError;

/// Fault recovery: the orphan's side and the adopter's (see [`crate::recovery`]).
impl Router {
    /// A new orphan's request and whom to ask (its ancestors, nearest first), once:
    /// while that request is out, `None`. An orphan with nothing left to save stops
    /// instead (its children were adopted elsewhere, and claiming their back-ends would
    /// take them back).
    pub fn rejoin_request(&mut self) -> Option<(AdoptMsg, Vec<Ancestor>)> {
        let msg = self.adopt_request()?;
        let o = self.orphan.as_mut()?;
        if o.rejoining {
            return None;
        }
        if msg.backends.is_empty() {
            let why = format!("{} (and no child is left to save)", o.reason);
            self.give_up_rejoin(TbonError::ParentLost(why));
            return None;
        }
        o.rejoining = true;
        Some((msg, self.ancestors.clone()))
    }

    /// This orphan will not be adopted: it stops with `why`.
    pub fn give_up_rejoin(&mut self, why: TbonError) {
        self.orphan = None;
        self.close(why);
    }

    /// What this orphan asks an ancestor: who it is, what it lost, what it brings.
    pub fn adopt_request(&self) -> Option<AdoptMsg> {
        let o = self.orphan.as_ref()?;
        let mut backends: Vec<u32> = match self.backend_rank {
            Some(r) => vec![r],
            None => self
                .children
                .iter()
                .filter(|c| c.alive)
                .flat_map(|c| c.backends.iter().copied())
                .collect(),
        };
        backends.sort_unstable();
        // Held answers reach the adopter after all, as answers to waves gone by.
        let mut streams: Vec<StreamProgress> = self
            .streams
            .values()
            .map(|st| {
                let mut p = st.progress(self.backend_rank.is_some());
                let held = o.held.iter().filter(|(s, _)| *s == p.stream).count();
                p.answered = p.answered.saturating_sub(held as u64);
                p
            })
            .collect();
        streams.sort_unstable_by_key(|p| p.stream);
        Some(AdoptMsg {
            node: self.node,
            host: self.host.clone(),
            lost_parent: o.lost_parent,
            lost_host: self
                .ancestors
                .first()
                .map(|a| a.host.clone())
                .unwrap_or_default(),
            backends,
            streams,
        })
    }

    /// This orphan was adopted over `link`: faults held meanwhile go up now.
    pub fn adopted(&mut self, link: LinkId, msg: AdoptedMsg, out: &mut dyn Out) {
        let Some(o) = self.orphan.take() else {
            return;
        };
        tracing::debug!(
            node = self.node,
            "adopted by node {} (orphaned by node {})",
            msg.parent,
            o.lost_parent
        );
        self.parent = Some(link);
        self.parent_node = msg.parent;
        self.ancestors = msg.ancestors;
        for (_, bytes) in o.held {
            out.send(link, bytes);
        }
        for f in o.pending {
            self.report(f, out);
        }
        self.observe_reparented(out);
    }

    /// The answer to an orphan: adopted (with where this node sits), or why not.
    pub fn adoption_answer(&self) -> Result<AdoptedMsg, String> {
        if self.shutting_down {
            return Err(format!("node {} is shutting down", self.node));
        }
        if self.orphan.is_some() {
            return Err(format!("node {} is itself orphaned", self.node));
        }
        let Some(me) = &self.listen else {
            return Err(format!("node {} does not adopt orphans", self.node));
        };
        Ok(AdoptedMsg {
            parent: self.node,
            parent_host: self.host.clone(),
            ancestors: std::iter::once(me.clone())
                .chain(self.ancestors.iter().cloned())
                .collect(),
        })
    }

    /// Live children that still claim some of `backends`: an orphan holding them could
    /// not reach us through them, so their path is dead even if their link is not. A
    /// child that holds only some of them is no such path: the orphan is stale (its
    /// children were adopted already), and the answer is why it must be refused.
    pub fn children_claiming(&self, backends: &[u32]) -> Result<Vec<LinkId>, String> {
        let mut out = Vec::new();
        for c in self.children.iter().filter(|c| c.alive) {
            let held = backends
                .iter()
                .filter(|b| c.backends.binary_search(b).is_ok())
                .count();
            if held == backends.len() {
                out.push(c.link);
            } else if held > 0 {
                return Err(format!(
                    "back-ends {} are node {}'s already",
                    crate::fmt_ranks(&c.backends),
                    c.node
                ));
            }
        }
        Ok(out)
    }

    /// Adopts the orphan of `msg` over `link`: it becomes a child of every stream it
    /// has members in, lined up with this node's waves, and the front-end hears who
    /// moved and which waves went without it.
    pub fn adopt(&mut self, link: LinkId, msg: AdoptMsg, now: Instant, out: &mut dyn Out) {
        let mut backends = msg.backends.clone();
        backends.sort_unstable();
        // The dead child that had them: from which wave on it was missing, per stream.
        let mut lost_from: FxHashMap<u32, u64> = FxHashMap::default();
        for c in self.children.iter_mut().filter(|c| !c.alive) {
            if c.backends.iter().any(|b| backends.binary_search(b).is_ok()) {
                for (&s, &w) in &c.lost_from {
                    let e = lost_from.entry(s).or_insert(w);
                    *e = (*e).min(w);
                }
                c.backends.retain(|b| backends.binary_search(b).is_err());
            }
        }
        self.children.push(ChildInfo::new(
            link,
            msg.node,
            msg.host.clone(),
            backends.clone(),
        ));
        let ci = self.children.len() - 1;
        let progress: FxHashMap<u32, StreamProgress> =
            msg.streams.iter().map(|p| (p.stream, *p)).collect();
        let mut ids: Vec<u32> = self.streams.keys().copied().collect();
        ids.sort_unstable();
        let mut lost = Vec::new();
        let mut ready = Vec::new();
        for id in ids {
            let st = self.streams.get_mut(&id).expect("id taken from the map");
            let members: Vec<u32> = backends
                .iter()
                .copied()
                .filter(|b| st.open.members.binary_search(b).is_ok())
                .collect();
            if members.is_empty() {
                continue;
            }
            let p = progress.get(&id).copied();
            if p.is_none() {
                // Opened while it was unreachable.
                let open = frame_bytes(FrameKind::StreamOpen, id, 0, &proto::to_json(&st.open));
                out.send(link, open);
            }
            let (heard, answered) = p.map_or((0, 0), |p| (p.heard, p.answered));
            let (here, released) = (st.heard, st.sync.released());
            let slot = if st.aligned() {
                // Its late answers to what it heard are for waves gone by; it never
                // heard the multicasts since, so it has nothing for waves up to `here`.
                let skip = heard.saturating_sub(answered);
                st.sync.join_child(skip, here.saturating_sub(released), now)
            } else {
                st.sync.join_child(0, 0, now)
            };
            st.child_slots.push((ci, slot));
            st.shifts.insert(ci, here as i64 - heard as i64);
            // Its holes may be all a wave was waiting for (every other child is gone).
            ready.push((id, st.sync.take_ready(now)));
            let first = lost_from.get(&id).copied().unwrap_or(0);
            if st.aligned() && here > first {
                lost.push(FaultMsg::WavesLost {
                    stream: id,
                    first,
                    end: here,
                    backends: members,
                    lost: msg.lost_parent,
                });
            }
        }
        for p in &msg.streams {
            if !self.streams.contains_key(&p.stream) {
                out.send(link, frame_bytes(FrameKind::StreamClose, p.stream, 0, &[]));
            }
        }
        // The waves first: the front-end closes a loss still open for these back-ends
        // with them, and forgets whatever is left open at the adoption.
        for f in lost {
            self.report(f, out);
        }
        self.report(
            FaultMsg::Reparented {
                node: msg.node,
                lost_parent: msg.lost_parent,
                lost_host: msg.lost_host.clone(),
                new_parent: self.node,
                backends,
            },
            out,
        );
        for (id, waves) in ready {
            self.run_waves(id, waves, out);
        }
    }
}
