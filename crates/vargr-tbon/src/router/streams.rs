//! Streams through one node: opening them, multicasts down, packets up through the
//! sync filter and the transformation filters, waves released (or timed out), and
//! point-to-point packets routed towards their back-end.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use rustc_hash::FxHashMap;
use vargr_filter::{
    apply_guarded, FilterContext, FilterError, SyncFilter, SyncMode, SyncPolicy, TransformFilter,
};
use vargr_net::LinkId;
use vargr_wire::{Frame, FrameKind, Packet};

use super::Router;
use crate::out::{frame_bytes, packet_bytes, Out};
use crate::proto::{self, FaultMsg, StreamOpenMsg, StreamProgress};
use crate::{trace, TbonError};

/// Latest-mode replacement key: one slot per stream and source.
fn latest_key(stream: u32, source: u32) -> u64 {
    (u64::from(stream) << 32) | u64::from(source)
}

/// The source rank at the front of a data payload (see vargr-wire), without decoding it.
fn payload_source(payload: &[u8]) -> u32 {
    match payload.get(..4) {
        Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        None => u32::MAX,
    }
}

pub(super) struct StreamState {
    pub(super) open: StreamOpenMsg,
    /// Indices into `children` of the children with members, and each one's input slot.
    pub(super) child_slots: Vec<(usize, usize)>,
    pub(super) sync: SyncFilter,
    pub(super) up: Option<Box<dyn TransformFilter>>,
    /// A back-end runs `up` on each packet it sends (a filter of its own was given).
    pub(super) up_at_leaf: bool,
    pub(super) down: Option<Box<dyn TransformFilter>>,
    /// Fast path: identity filter with don't-wait, forwarded without decoding.
    pub(super) passthrough: bool,
    /// Trace collectors of the sync filter and the up and down transformation filters.
    pub(super) sync_collector: u16,
    pub(super) up_collector: u16,
    pub(super) down_collector: u16,
    /// Multicasts this node received (or, at the root, sent) on the stream.
    pub(super) heard: u64,
    /// Packets a back-end sent up the stream.
    pub(super) sent: u64,
    /// Per child index: its wave `w` is wave `w + shift` here (non-zero for adopted
    /// children, which count from their own start).
    pub(super) shifts: FxHashMap<usize, i64>,
}

impl StreamState {
    pub(super) fn progress(&self, is_leaf: bool) -> StreamProgress {
        StreamProgress {
            stream: self.open.id,
            heard: self.heard,
            answered: if is_leaf {
                self.sent
            } else {
                self.sync.released()
            },
        }
    }

    pub(super) fn aligned(&self) -> bool {
        self.sync.aligned() && !self.passthrough
    }
}

/// Fast path: an identity up filter with don't-wait, forwarded without decoding.
fn passthrough(up: &str, sync: &str) -> bool {
    matches!(up, "null" | "identity") && sync.parse::<SyncMode>().ok() == Some(SyncMode::DontWait)
}

fn bad_stream(e: FilterError) -> TbonError {
    TbonError::BadStream(e.to_string())
}

impl Router {
    /// Creates a stream here and forwards its creation to the children with members.
    pub fn open_stream(&mut self, msg: StreamOpenMsg, out: &mut dyn Out) -> Result<(), TbonError> {
        if msg.update {
            return self.update_stream(msg, Instant::now(), out);
        }
        let leaf = self.backend_rank.is_some();
        let (root, depth) = (self.is_root(), self.depth());
        if root {
            // Every node's filters are made here first, so that a bad spec for any node
            // fails the creation instead of one node's part of the stream.
            self.check_per_node(&msg)?;
        }
        let sync_spec = msg.sync_at(self.node, depth, leaf);
        let sync = self.registry.create_sync(sync_spec).map_err(bad_stream)?;
        let up_spec = msg.up_at(self.node, depth, root, leaf);
        let up = self.registry.create(up_spec).map_err(bad_stream)?;
        let up_collector = trace::filter_collector("up", up_spec);
        let up_at_leaf = leaf && msg.up_backend.is_some();
        let down = match &msg.down {
            Some(d) => Some(
                self.registry
                    .create(d)
                    .map_err(|e| TbonError::BadStream(e.to_string()))?,
            ),
            None => None,
        };
        let mut child_slots = Vec::new();
        for (i, c) in self.children.iter().enumerate() {
            if c.alive
                && c.backends
                    .iter()
                    .any(|b| msg.members.binary_search(b).is_ok())
            {
                child_slots.push((i, child_slots.len()));
            }
        }
        if self.is_root() && child_slots.is_empty() {
            return Err(TbonError::BadCommunicator(format!(
                "none of the stream's {} back-ends is reachable (all were lost)",
                msg.members.len()
            )));
        }
        let passthrough = passthrough(up_spec, sync_spec);
        let sync_collector = vargr_trace::collector(&format!("tbon/sync/{}", sync.name()));
        let down_collector = msg
            .down
            .as_deref()
            .map_or(0, |d| trace::filter_collector("down", d));
        let bytes = frame_bytes(FrameKind::StreamOpen, msg.id, 0, &proto::to_json(&msg));
        for &(ci, _) in &child_slots {
            out.send(self.children[ci].link, bytes.clone());
        }
        self.deliveries.streams.entry(msg.id).or_default();
        let deadline = msg.wave_deadline_ms.map(std::time::Duration::from_millis);
        let st = StreamState {
            sync: SyncFilter::with_policy(sync, child_slots.len())
                .at(self.node, msg.id)
                .with_deadline(deadline),
            child_slots,
            up: Some(up),
            up_at_leaf,
            down,
            passthrough,
            sync_collector,
            up_collector,
            down_collector,
            open: msg,
            heard: 0,
            sent: 0,
            shifts: FxHashMap::default(),
        };
        self.streams.insert(st.open.id, st);
        Ok(())
    }

    /// Changes the filters of an open stream here and forwards the change to the children
    /// with members. A transformation filter whose spec changed is made anew (its state,
    /// such as a filter's running totals, starts over); a changed sync mode keeps the
    /// packets queued and releases what the new mode makes due.
    fn update_stream(
        &mut self,
        mut msg: StreamOpenMsg,
        now: Instant,
        out: &mut dyn Out,
    ) -> Result<(), TbonError> {
        let (node, depth) = (self.node, self.depth());
        let st = self
            .streams
            .get_mut(&msg.id)
            .ok_or(TbonError::NoStream(msg.id))?;
        let bad = bad_stream;
        // Everything is checked before anything changes: a bad spec leaves the stream as
        // it was, at every node.
        let (root, leaf) = (
            self.parent.is_none() && self.orphan.is_none(),
            self.backend_rank.is_some(),
        );
        let sync_spec = msg.sync_at(node, depth, leaf).to_string();
        let sync: Option<Box<dyn SyncPolicy>> = (sync_spec != st.open.sync_at(node, depth, leaf))
            .then(|| self.registry.create_sync(&sync_spec))
            .transpose()
            .map_err(bad)?;
        let up_spec = msg.up_at(node, depth, root, leaf).to_string();
        let up = (up_spec != st.open.up_at(node, depth, root, leaf))
            .then(|| self.registry.create(&up_spec))
            .transpose()
            .map_err(bad)?;
        let down = match (&msg.down, msg.down != st.open.down) {
            (Some(d), true) => Some(Some(self.registry.create(d).map_err(bad)?)),
            (None, true) => Some(None),
            (_, false) => None,
        };
        if let Some(f) = up {
            st.up_collector = trace::filter_collector("up", &up_spec);
            st.up = Some(f);
        }
        if let Some(d) = down {
            st.down_collector = msg
                .down
                .as_deref()
                .map_or(0, |d| trace::filter_collector("down", d));
            st.down = d;
        }
        if let Some(p) = sync {
            st.sync.set_policy(p);
        }
        st.passthrough = passthrough(&up_spec, &sync_spec);
        // The members and the mode of delivery are the stream's own: only filters change.
        msg.members = std::mem::take(&mut st.open.members);
        msg.latest = st.open.latest;
        st.up_at_leaf = leaf && msg.up_backend.is_some();
        let bytes = frame_bytes(FrameKind::StreamOpen, msg.id, 0, &proto::to_json(&msg));
        for &(ci, _) in &st.child_slots {
            if self.children[ci].alive {
                out.send(self.children[ci].link, bytes.clone());
            }
        }
        msg.update = false;
        st.open = msg;
        let (id, ready) = (st.open.id, st.sync.take_ready(now));
        self.run_waves(id, ready, out);
        Ok(())
    }

    /// Sends a packet down a stream from this node (front-end multicast).
    pub fn send_down(&mut self, p: Packet, out: &mut dyn Out) -> Result<(), TbonError> {
        let st = self
            .streams
            .get_mut(&p.stream)
            .ok_or(TbonError::NoStream(p.stream))?;
        let latest = st.open.latest;
        let is_root = self.parent.is_none() && self.orphan.is_none();
        if is_root {
            st.heard += 1;
        }
        let ctx = FilterContext {
            node_id: self.node,
            stream: p.stream,
            is_root,
            num_inputs: 1,
        };
        let packets = match st.down.as_mut() {
            Some(f) => {
                let (t0, bytes) = (vargr_trace::now(), p.encoded_len());
                let r = apply_guarded(f.as_mut(), &ctx, vec![p]);
                trace::filter(
                    st.down_collector,
                    ctx.stream,
                    bytes,
                    self.node,
                    t0,
                    r.is_ok(),
                );
                r.map_err(|e| TbonError::Filter {
                    stream: ctx.stream,
                    node: self.node,
                    filter: e.to_string(),
                    reason: e.to_string(),
                })?
            }
            None => vec![p],
        };
        for p in packets {
            let bytes = packet_bytes(&p);
            let key = latest.then(|| latest_key(p.stream, p.source));
            for &(ci, _) in &st.child_slots {
                let c = &self.children[ci];
                if c.alive {
                    out.forward(c.link, key, bytes.clone());
                }
            }
        }
        Ok(())
    }

    /// Sends a packet up towards the front-end (back-end side).
    pub fn send_up(&mut self, p: &Packet, out: &mut dyn Out) -> Result<(), TbonError> {
        if self.is_root() {
            return Err(TbonError::Net(
                "the front-end has no parent to send to".into(),
            ));
        }
        let node = self.node;
        let mut filtered = None;
        if let Some(st) = self.streams.get_mut(&p.stream) {
            st.sent += 1;
            if let (true, Some(f)) = (st.up_at_leaf, st.up.as_mut()) {
                // The back-end's own filter (MRNet's filters assigned to back-ends): one
                // packet in, its outputs up, still as this back-end's.
                let ctx = FilterContext {
                    node_id: node,
                    stream: p.stream,
                    is_root: false,
                    num_inputs: 1,
                };
                let (t0, bytes) = (vargr_trace::now(), p.encoded_len());
                let r = apply_guarded(f.as_mut(), &ctx, vec![p.clone()]);
                trace::filter(st.up_collector, p.stream, bytes, node, t0, r.is_ok());
                let mut outs = r.map_err(|e| TbonError::Filter {
                    stream: p.stream,
                    node,
                    filter: e.to_string(),
                    reason: e.to_string(),
                })?;
                for q in &mut outs {
                    q.source = p.source;
                }
                filtered = Some(outs);
            }
        }
        let packets = filtered.as_deref().unwrap_or(std::slice::from_ref(p));
        let latest = self.streams.get(&p.stream).is_some_and(|st| st.open.latest);
        for q in packets {
            let Some(parent) = self.parent else {
                if let Some(o) = self.orphan.as_mut() {
                    o.held.push((q.stream, packet_bytes(q)));
                }
                continue;
            };
            out.forward(
                parent,
                latest.then(|| latest_key(q.stream, q.source)),
                packet_bytes(q),
            );
        }
        Ok(())
    }

    /// Routes a point-to-point packet to back-end `dest`.
    pub fn send_p2p(&mut self, dest: u32, p: &Packet, out: &mut dyn Out) -> Result<(), TbonError> {
        let mut payload = BytesMut::new();
        p.encode_payload(&mut payload);
        let bytes = frame_bytes(FrameKind::PointToPoint, dest, p.tag, &payload);
        self.route_p2p(dest, bytes, None, out)
    }

    pub(super) fn route_p2p(
        &mut self,
        dest: u32,
        bytes: Bytes,
        from: Option<LinkId>,
        out: &mut dyn Out,
    ) -> Result<(), TbonError> {
        if let Some(c) = self
            .children
            .iter()
            .find(|c| c.alive && c.backends.binary_search(&dest).is_ok())
        {
            out.send(c.link, bytes);
            return Ok(());
        }
        match self.parent {
            Some(p) if Some(p) != from => {
                out.send(p, bytes);
                Ok(())
            }
            None if self.orphan.is_some() => Ok(()),
            _ => Err(TbonError::BadCommunicator(format!(
                "no back-end with rank {dest} is reachable"
            ))),
        }
    }

    pub(super) fn on_data_down(&mut self, f: Frame, out: &mut dyn Out) {
        if self.backend_rank.is_some() {
            if let Some(st) = self.streams.get_mut(&f.stream) {
                st.heard += 1;
            }
            match Packet::decode_payload(f.stream, f.tag, &f.payload) {
                Ok(p) => self.deliveries.inbox.push_back(p),
                Err(e) => self.deliveries.faults.push(e.into()),
            }
            return;
        }
        let Some(st) = self.streams.get_mut(&f.stream) else {
            return;
        };
        st.heard += 1;
        if st.down.is_some() {
            match Packet::decode_payload(f.stream, f.tag, &f.payload) {
                Ok(p) => {
                    if let Err(e) = self.send_down(p, out) {
                        self.deliveries.faults.push(e);
                    }
                }
                Err(e) => self.deliveries.faults.push(e.into()),
            }
            return;
        }
        let bytes = f.to_wire();
        let key = st
            .open
            .latest
            .then(|| latest_key(f.stream, payload_source(&f.payload)));
        for &(ci, _) in &st.child_slots {
            let c = &self.children[ci];
            if c.alive {
                out.forward(c.link, key, bytes.clone());
            }
        }
    }

    pub(super) fn on_data_up(&mut self, ci: usize, f: Frame, now: Instant, out: &mut dyn Out) {
        let Some(st) = self.streams.get_mut(&f.stream) else {
            return;
        };
        let Some(&(_, slot)) = st.child_slots.iter().find(|(c, _)| *c == ci) else {
            return;
        };
        if st.passthrough {
            let root = self.parent.is_none() && self.orphan.is_none();
            match self.parent {
                None if !root => {}
                Some(p) => {
                    let bytes = f.to_wire();
                    let key = st
                        .open
                        .latest
                        .then(|| latest_key(f.stream, payload_source(&f.payload)));
                    out.forward(p, key, bytes);
                }
                None => {
                    let r = Packet::decode_payload(f.stream, f.tag, &f.payload)
                        .map_err(TbonError::from);
                    let q = self.deliveries.streams.entry(f.stream).or_default();
                    if st.open.latest {
                        // Keep only the newest packet of each source.
                        let src = payload_source(&f.payload);
                        q.retain(|r| !matches!(r, Ok(p) if p.source == src));
                    }
                    q.push_back(r);
                }
            }
            return;
        }
        match Packet::decode_payload(f.stream, f.tag, &f.payload) {
            Ok(p) => {
                let t0 = vargr_trace::now();
                let waves = st.sync.push(slot, p, now);
                let child = self.children[ci].node;
                trace::filter(
                    st.sync_collector,
                    f.stream,
                    f.payload.len(),
                    child,
                    t0,
                    true,
                );
                if !waves.is_empty() && st.child_slots.len() > 1 {
                    trace::last_arrival(f.stream, child);
                }
                self.run_waves(f.stream, waves, out);
            }
            Err(e) => {
                let fault = FaultMsg::Filter {
                    stream: f.stream,
                    node: self.node,
                    filter: "decode".into(),
                    reason: e.to_string(),
                };
                self.report(fault, out);
            }
        }
    }

    pub(super) fn on_hole(&mut self, ci: usize, stream: u32, now: Instant, out: &mut dyn Out) {
        let Some(st) = self.streams.get_mut(&stream) else {
            return;
        };
        let Some(&(_, slot)) = st.child_slots.iter().find(|(c, _)| *c == ci) else {
            return;
        };
        if st.passthrough {
            return;
        }
        let waves = st.sync.push_hole(slot, now);
        self.run_waves(stream, waves, out);
    }

    pub(super) fn run_waves(&mut self, stream: u32, waves: Vec<Vec<Packet>>, out: &mut dyn Out) {
        // Every change to a sync filter ends here: report what went wrong in it first,
        // so a receiver sees why the next wave is early or partial.
        let (node, depth) = (self.node, self.depth());
        let fault = self.streams.get_mut(&stream).and_then(|st| {
            let e = st.sync.take_fault()?;
            Some(FaultMsg::Filter {
                stream,
                node,
                filter: st.open.sync_at(node, depth, false).to_string(),
                reason: e.to_string(),
            })
        });
        if let Some(f) = fault {
            self.report(f, out);
        }
        if waves.is_empty() {
            return;
        }
        let is_root = self.is_root();
        let Some(st) = self.streams.get_mut(&stream) else {
            return;
        };
        let ctx = FilterContext {
            node_id: self.node,
            stream,
            is_root,
            num_inputs: st.sync.live_children(),
        };
        let mut faults = Vec::new();
        // In wave order: a result, or the number of a wave made only of holes (it still
        // counts, so it travels on as a hole instead of vanishing).
        let mut results: Vec<Result<Packet, u64>> = Vec::new();
        let first_wave = st.sync.released().saturating_sub(waves.len() as u64);
        for (i, wave) in waves.into_iter().enumerate() {
            if wave.is_empty() {
                results.push(Err(first_wave + i as u64));
                continue;
            }
            let Some(f) = st.up.as_mut() else { break };
            let t0 = vargr_trace::now();
            let bytes: usize = wave.iter().map(Packet::encoded_len).sum();
            let r = apply_guarded(f.as_mut(), &ctx, wave);
            trace::filter(st.up_collector, stream, bytes, self.node, t0, r.is_ok());
            match r {
                Ok(ps) => results.extend(ps.into_iter().map(Ok)),
                Err(e) => {
                    // A failed instance may hold broken state: stop using it.
                    st.up = None;
                    faults.push(FaultMsg::Filter {
                        stream,
                        node: self.node,
                        filter: st.open.up_at(node, depth, is_root, false).to_string(),
                        reason: e.to_string(),
                    });
                }
            }
        }
        let latest = st.open.latest;
        for r in results {
            match (r, self.parent) {
                (Ok(mut p), Some(parent)) => {
                    p.stream = stream;
                    let bytes = packet_bytes(&p);
                    out.forward(parent, latest.then(|| latest_key(stream, p.source)), bytes);
                }
                (Err(_), Some(parent)) => {
                    out.send(parent, frame_bytes(FrameKind::WaveHole, stream, 0, &[]))
                }
                // Held until adopted: the adopter counts on them (see `adopt_request`).
                (r, None) if !is_root => {
                    let bytes = match r {
                        Ok(mut p) => {
                            p.stream = stream;
                            packet_bytes(&p)
                        }
                        Err(_) => frame_bytes(FrameKind::WaveHole, stream, 0, &[]),
                    };
                    if let Some(o) = self.orphan.as_mut() {
                        o.held.push((stream, bytes));
                    }
                }
                (Ok(mut p), None) => {
                    p.stream = stream;
                    let q = self.deliveries.streams.entry(stream).or_default();
                    if latest {
                        q.retain(|r| !matches!(r, Ok(old) if old.source == p.source));
                    }
                    q.push_back(Ok(p));
                }
                (Err(wave), None) => self
                    .deliveries
                    .streams
                    .entry(stream)
                    .or_default()
                    .push_back(Err(TbonError::WaveEmpty { stream, wave })),
            }
        }
        for f in faults {
            self.report(f, out);
        }
    }

    /// Releases the waves of sync filters whose time-out expired.
    pub(super) fn streams_timer(&mut self, now: Instant, out: &mut dyn Out) {
        let due: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| s.sync.poll_timeout().is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let waves = self
                .streams
                .get_mut(&id)
                .map(|s| s.sync.on_timeout(now))
                .unwrap_or_default();
            self.run_waves(id, waves, out);
        }
    }

    /// The earliest sync filter time-out.
    pub(super) fn streams_deadline(&self) -> Option<Instant> {
        self.streams
            .values()
            .filter_map(|s| s.sync.poll_timeout())
            .min()
    }

    /// This node's depth: the front-end is 0, its children 1, ...
    pub(super) fn depth(&self) -> u32 {
        u32::try_from(self.ancestors.len()).unwrap_or(u32::MAX)
    }

    /// Makes (and drops) every filter the stream's per-node rules name, so that a bad
    /// spec fails at the front-end, naming the rule.
    fn check_per_node(&self, msg: &StreamOpenMsg) -> Result<(), TbonError> {
        for r in &msg.per_node {
            let fail =
                |e: FilterError| TbonError::BadStream(format!("the filters for {:?}: {e}", r.at));
            if let Some(u) = &r.up {
                self.registry.create(u).map_err(fail)?;
            }
            if let Some(s) = &r.sync {
                self.registry.create_sync(s).map_err(fail)?;
            }
        }
        Ok(())
    }

    pub fn stream_members(&self, id: u32) -> Option<&[u32]> {
        self.streams.get(&id).map(|s| s.open.members.as_slice())
    }

    pub fn has_stream(&self, id: u32) -> bool {
        self.streams.contains_key(&id)
    }
}
