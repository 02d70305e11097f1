//! The receiving side of the protocol: fills segments from its cache, asks for the ones
//! it lacks, checks each group against its conservative hash, and delivers messages in
//! order once every segment in them is checked.

use std::collections::VecDeque;

use bytes::Bytes;

use super::batch::{decompress_with_prefix, BatchPrefix};
use super::wire::{self, BaseRef, Msg};
use super::{check_bits, feed, take_into, widen, Config, ProtocolError, Recent, Stats};
use crate::cache::SegmentCache;
use crate::delta;
use crate::fp::{Fingerprint, GroupHasher, CONSERVATIVE_LEN};
use crate::stream::{Seen, StreamModel, Token};

/// The receiver's stand-in in its recent table for a base it could not name (above any
/// fingerprint narrower than 64 bits; a 64-bit one equal to it only costs a resend).
const UNKNOWN_BASE: u64 = u64::MAX;

/// One segment slot at the receiver.
struct Slot {
    data: Option<Bytes>,
    /// Filled from the cache (so suspect until the group's hash agrees).
    from_cache: bool,
}

struct RecvGroup {
    first: u64,
    slots: Vec<Slot>,
    cfp: Option<[u8; CONSERVATIVE_LEN]>,
    verified: bool,
    resent: bool,
    /// Slots still waiting for a segment from the sender.
    waiting: usize,
}

impl RecvGroup {
    fn open(first: u64) -> RecvGroup {
        RecvGroup {
            first,
            slots: Vec::new(),
            cfp: None,
            verified: false,
            resent: false,
            waiting: 0,
        }
    }
}

/// A delta segment whose bytes come in a batch.
struct DeferredDelta {
    seq: u64,
    len: usize,
    /// Its bases from the cache; `None` if one is missing here.
    bases: Option<Vec<(Fingerprint, Bytes)>>,
}

/// A message announced but not yet delivered.
struct PendingMessage {
    channel: u32,
    layout: Bytes,
    first: u64,
    segments: u64,
}

/// A message the receiver has checked and can hand to its segmenter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub channel: u32,
    pub layout: Bytes,
    pub segments: Vec<Bytes>,
}

impl Delivered {
    /// Total bytes of the segments.
    pub fn len(&self) -> usize {
        self.segments.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The receiving side of one session.
pub struct Receiver<C: SegmentCache> {
    config: Config,
    cache: C,
    hello: bool,
    input: Vec<u8>,
    input_offset: u64,
    out: Vec<u8>,
    next_seq: u64,
    /// Groups not yet acknowledged or still holding undelivered segments; the last is
    /// open (no conservative hash yet).
    groups: VecDeque<RecvGroup>,
    /// Index in `groups` of the oldest group not yet acknowledged.
    acked: usize,
    messages: VecDeque<PendingMessage>,
    /// Segments of announced messages still to come.
    announced: u64,
    pending_bytes: usize,
    stats: Stats,
    recent: Recent,
    stream: StreamModel,
    /// Deferred delta segments awaiting their batch, in order, and their bytes.
    deferred: Vec<DeferredDelta>,
    deferred_bytes: usize,
    /// False from a hello whose stream model was not ours until the sender's reset:
    /// predictions then resolve to nothing (and are requested).
    stream_agreed: bool,
}

impl<C: SegmentCache> Receiver<C> {
    /// A receiver; `config` gives its limits, and its `bits` must match the cache's and
    /// the sender's hello.
    pub fn new(config: Config, cache: C) -> Result<Receiver<C>, ProtocolError> {
        check_bits(&config, &cache)?;
        Ok(Receiver {
            config,
            cache,
            hello: false,
            input: Vec::new(),
            input_offset: 0,
            out: Vec::new(),
            next_seq: 0,
            groups: VecDeque::from([RecvGroup::open(0)]),
            acked: 0,
            messages: VecDeque::new(),
            announced: 0,
            pending_bytes: 0,
            stats: Stats::default(),
            recent: Recent::default(),
            stream: StreamModel::new(config.delta_index),
            deferred: Vec::new(),
            deferred_bytes: 0,
            stream_agreed: true,
        })
    }

    /// Replaces the stream model (the one kept from the last session with this sender).
    /// Call before feeding any input.
    pub fn set_stream(&mut self, mut model: StreamModel) {
        model.restart();
        self.stream = model;
    }

    /// The stream model, to keep for the next session once this one has ended.
    pub fn stream(&self) -> &StreamModel {
        &self.stream
    }

    /// Takes the stream model out (to hand to a later session); this receiver resolves
    /// no more predictions.
    pub fn take_stream(&mut self) -> StreamModel {
        self.stream_agreed = false;
        std::mem::replace(&mut self.stream, StreamModel::new(0))
    }

    /// The stream model to read predictions and base names from: only while this side
    /// agrees with the sender's (until a reset, every guess from it would be another
    /// model's). Every lookup goes through here; updates do not.
    fn agreed_model(&self) -> Option<&StreamModel> {
        self.stream_agreed.then_some(&self.stream)
    }

    /// Where the stream goes next by the model, if this side agrees with the sender's.
    fn predicted(&self) -> Option<Fingerprint> {
        self.agreed_model()?.predicted()
    }

    /// Feeds bytes from the sender, in any pieces.
    pub fn handle_input(&mut self, bytes: &[u8]) -> Result<(), ProtocolError> {
        let limits = self.config.limits();
        let (mut input, offset) = (std::mem::take(&mut self.input), self.input_offset);
        let r = feed(&mut input, offset, bytes, &limits, |m, at| {
            self.on_message(m, at)
        });
        self.input_offset += r.1;
        self.input = input;
        r.0
    }

    /// Call when the sender's stream has ended: an error if it stopped mid-message.
    pub fn finish(&self) -> Result<(), ProtocolError> {
        if !self.input.is_empty() {
            return Err(ProtocolError::Truncated {
                left: self.input.len(),
            });
        }
        if !self.deferred.is_empty() {
            return Err(ProtocolError::Unexpected {
                what: "end of stream before the batch of deferred delta segments",
                offset: self.input_offset,
            });
        }
        Ok(())
    }

    /// Acts on one message from the sender (at byte `offset` of its stream).
    fn on_message(&mut self, msg: Msg<'_>, offset: u64) -> Result<(), ProtocolError> {
        if !self.hello && !matches!(msg, Msg::Hello { .. }) {
            return Err(ProtocolError::Unexpected {
                what: "message before the hello",
                offset,
            });
        }
        match msg {
            Msg::Hello {
                version,
                bits,
                group,
                token,
            } => self.on_hello(version, bits, group, token, offset)?,
            Msg::Reset(epoch) => {
                self.stream.reset(epoch);
                self.stream_agreed = true;
            }
            Msg::Message {
                channel,
                layout,
                segments,
            } => self.on_message_start(channel, layout, segments, offset)?,
            Msg::Next => self.on_next(offset)?,
            Msg::Fp(fp) => self.on_fp(fp, offset)?,
            Msg::Push(data) => self.on_push(data, offset)?,
            Msg::Delta(d) => self.on_delta(&d, offset)?,
            Msg::Batch(frame) => self.on_batch(frame, offset)?,
            Msg::Cfp(hash) => self.on_cfp(hash, offset)?,
            Msg::Segment { seq, data } => self.on_segment(seq, data, offset)?,
            Msg::Request(_) | Msg::Ack | Msg::Resync => {
                return Err(ProtocolError::Unexpected {
                    what: "receiver-side message from the sender",
                    offset,
                })
            }
        }
        if self.pending_bytes > self.config.max_pending {
            return Err(ProtocolError::Overrun {
                pending: self.pending_bytes,
                max: self.config.max_pending,
            });
        }
        Ok(())
    }

    /// Takes the sender's parameters, and asks for a reset if its stream model is not
    /// this side's.
    fn on_hello(
        &mut self,
        version: u8,
        bits: u8,
        group: u32,
        token: Token,
        offset: u64,
    ) -> Result<(), ProtocolError> {
        if self.hello {
            return Err(ProtocolError::Unexpected {
                what: "second hello",
                offset,
            });
        }
        if version != wire::VERSION {
            return Err(ProtocolError::Version {
                found: version,
                expected: wire::VERSION,
            });
        }
        if bits != self.config.bits.get() || group == 0 {
            return Err(ProtocolError::Parameters {
                found: bits,
                group,
                expected: self.config.bits.get(),
            });
        }
        self.config.group = group;
        self.hello = true;
        if token != self.stream.token() {
            self.stream_agreed = false;
            self.out.push(wire::T_RESYNC);
            self.stats.overhead_bytes += 1;
        }
        Ok(())
    }

    /// A message begins: its segments follow.
    fn on_message_start(
        &mut self,
        channel: u32,
        layout: &[u8],
        segments: u64,
        offset: u64,
    ) -> Result<(), ProtocolError> {
        if self.announced != 0 {
            return Err(ProtocolError::Unexpected {
                what: "message start inside a message",
                offset,
            });
        }
        self.messages.push_back(PendingMessage {
            channel,
            layout: Bytes::copy_from_slice(layout),
            first: self.next_seq,
            segments,
        });
        self.announced = segments;
        self.stats.messages += 1;
        self.drop_finished_groups();
        Ok(())
    }

    /// A segment named as the successor of the stream's cursor.
    fn on_next(&mut self, offset: u64) -> Result<(), ProtocolError> {
        self.expect_segment(offset)?;
        let fp = self.predicted();
        let slot = self.cache_slot(fp)?;
        self.stream
            .advance(fp, fp.map_or(Seen::Unknown, Seen::Known));
        self.stats.predicted += 1;
        self.stats.fingerprinted += 1;
        self.push_slot(slot)
    }

    /// A segment named by its fingerprint.
    fn on_fp(&mut self, fp: Fingerprint, offset: u64) -> Result<(), ProtocolError> {
        self.expect_segment(offset)?;
        self.recent.touch(fp);
        let slot = self.cache_slot(Some(fp))?;
        self.stream.advance(Some(fp), Seen::Known(fp));
        self.stats.fingerprinted += 1;
        self.push_slot(slot)
    }

    /// A segment sent whole, unasked.
    fn on_push(&mut self, data: &[u8], offset: u64) -> Result<(), ProtocolError> {
        self.expect_segment(offset)?;
        let full = Fingerprint::full(data);
        self.cache.insert(full, data)?;
        let fp = full.truncate(self.config.bits);
        self.recent.touch(fp);
        self.stream.advance(Some(fp), Seen::Known(fp));
        self.pending_bytes += data.len();
        self.stats.pushed += 1;
        self.push_slot(Slot {
            data: Some(Bytes::copy_from_slice(data)),
            from_cache: false,
        })
    }

    /// A segment sent as a delta against cached ones, with its bytes or (deferred)
    /// with them to come in the next batch.
    fn on_delta(&mut self, d: &wire::Delta<'_>, offset: u64) -> Result<(), ProtocolError> {
        self.expect_segment(offset)?;
        let bases = self.delta_bases(d, offset)?;
        let anchor = bases.get(d.anchor).copied().flatten();
        self.stats.deltas += 1;
        let found = self.lookup_bases(&bases)?;
        match d.delta {
            None => self.defer_delta(d.len, found, anchor),
            Some(body) => {
                let slot = self.rebuild_delta(body, d.len, found.as_deref(), anchor)?;
                self.push_slot(slot)
            }
        }
    }

    /// The fingerprints a delta names as its bases, in order; `None` for one the
    /// stream model cannot name here (the segment is then requested whole). Each takes
    /// its place in the recent table, named or not.
    fn delta_bases(
        &mut self,
        d: &wire::Delta<'_>,
        offset: u64,
    ) -> Result<Vec<Option<Fingerprint>>, ProtocolError> {
        let mut bases: Vec<Option<Fingerprint>> = Vec::with_capacity(d.n);
        let cursor = self.agreed_model().and_then(StreamModel::cursor);
        let mut prev = cursor;
        for r in d.bases() {
            let b = match r {
                BaseRef::Literal(fp) => Some(fp),
                BaseRef::Recent(k) => Some(self.recent.get(k).ok_or(ProtocolError::Malformed {
                    what: "delta segment (base reference to an empty slot)",
                    offset,
                })?),
                BaseRef::Cursor => cursor,
                BaseRef::Next => {
                    prev.and_then(|p| self.agreed_model().and_then(|m| m.successor(p)))
                }
            };
            bases.push(b);
            prev = b;
        }
        for &b in &bases {
            self.recent.touch(b.unwrap_or(Fingerprint(UNKNOWN_BASE)));
        }
        Ok(bases)
    }

    /// Every base's bytes from the cache; `None` if one is unnamed or missing.
    fn lookup_bases(
        &mut self,
        bases: &[Option<Fingerprint>],
    ) -> Result<Option<Vec<(Fingerprint, Bytes)>>, ProtocolError> {
        let mut found = Vec::with_capacity(bases.len());
        for &fp in bases {
            match fp.map(|fp| self.cache.lookup(fp)).transpose()?.flatten() {
                Some(b) => found.push((fp.expect("looked up"), b)),
                None => break,
            }
        }
        Ok((found.len() == bases.len()).then_some(found))
    }

    /// Holds a slot for a deferred delta segment of `len` bytes until its batch comes.
    fn defer_delta(
        &mut self,
        len: usize,
        bases: Option<Vec<(Fingerprint, Bytes)>>,
        anchor: Option<Fingerprint>,
    ) -> Result<(), ProtocolError> {
        self.deferred_bytes += len;
        if self.deferred_bytes > self.config.max_pending {
            return Err(ProtocolError::Overrun {
                pending: self.deferred_bytes,
                max: self.config.max_pending,
            });
        }
        self.deferred.push(DeferredDelta {
            seq: self.next_seq,
            len,
            bases,
        });
        self.stream.advance(anchor, Seen::Deferred(None));
        self.push_slot(Slot {
            data: None,
            from_cache: false,
        })
    }

    /// The slot of an inline delta segment: rebuilt from `body` and its bases, else
    /// (a base missing, or a delta that does not decode) requested.
    fn rebuild_delta(
        &mut self,
        body: &[u8],
        len: usize,
        bases: Option<&[(Fingerprint, Bytes)]>,
        anchor: Option<Fingerprint>,
    ) -> Result<Slot, ProtocolError> {
        let rebuilt = bases.and_then(|found| {
            let base = found
                .iter()
                .map(|(_, b)| &b[..])
                .collect::<Vec<_>>()
                .concat();
            delta::decode(&base, body, len).ok()
        });
        self.stats.delta_bytes += body.len() as u64;
        match rebuilt {
            Some(data) => {
                let full = Fingerprint::full(&data);
                self.stream
                    .advance(anchor, Seen::Known(full.truncate(self.config.bits)));
                self.cache.insert(full, &data)?;
                self.pending_bytes += data.len();
                self.stats.delta_segment_bytes += data.len() as u64;
                Ok(Slot {
                    data: Some(Bytes::from(data)),
                    // Built on cache reads: suspect until the group's hash agrees.
                    from_cache: true,
                })
            }
            None => {
                self.stream.advance(anchor, Seen::Unknown);
                self.cache_slot(None)
            }
        }
    }

    /// The open group's conservative hash: the group closes, and is checked once
    /// complete.
    fn on_cfp(&mut self, hash: [u8; CONSERVATIVE_LEN], offset: u64) -> Result<(), ProtocolError> {
        self.stream.commit();
        let open = self.groups.back_mut().expect("an open group");
        if open.slots.is_empty() {
            return Err(ProtocolError::Unexpected {
                what: "conservative fingerprint of an empty group",
                offset,
            });
        }
        open.cfp = Some(hash);
        let i = self.groups.len() - 1;
        self.groups.push_back(RecvGroup::open(self.next_seq));
        self.try_verify(i)
    }

    /// A segment this side asked for.
    fn on_segment(&mut self, seq: u32, data: &[u8], offset: u64) -> Result<(), ProtocolError> {
        let base = self.groups.front().expect("an open group").first;
        let seq64 = widen(seq, base);
        if !self.fill_slot(seq64, data, false)? {
            return Err(ProtocolError::UnknownSegment { seq, offset });
        }
        self.cache.insert(Fingerprint::full(data), data)?;
        Ok(())
    }

    /// Puts the bytes of segment `seq` in its slot (`suspect`: built from cache reads,
    /// so resent if the group's hash fails) and checks its group. False if no slot
    /// awaits them.
    fn fill_slot(&mut self, seq: u64, data: &[u8], suspect: bool) -> Result<bool, ProtocolError> {
        let Some(gi) = self
            .groups
            .iter()
            .position(|g| seq >= g.first && seq < g.first + g.slots.len() as u64)
        else {
            return Ok(false);
        };
        let g = &mut self.groups[gi];
        let slot = &mut g.slots[(seq - g.first) as usize];
        if slot.data.is_some() {
            return Ok(false);
        }
        slot.data = Some(Bytes::copy_from_slice(data));
        slot.from_cache = suspect;
        g.waiting -= 1;
        self.pending_bytes += data.len();
        self.try_verify(gi)?;
        Ok(true)
    }

    /// The bytes of the deferred delta segments since the last batch.
    fn on_batch(&mut self, frame: &[u8], offset: u64) -> Result<(), ProtocolError> {
        if self.deferred.is_empty() {
            return Err(ProtocolError::Unexpected {
                what: "delta batch with no deferred delta before it",
                offset,
            });
        }
        let deferred = std::mem::take(&mut self.deferred);
        let total = std::mem::take(&mut self.deferred_bytes);
        let mut prefix = BatchPrefix::new();
        let mut complete = true;
        for d in &deferred {
            let Some(bases) = &d.bases else {
                complete = false;
                break;
            };
            for (fp, b) in bases {
                prefix.add(*fp, b);
            }
        }
        let all = complete
            .then(|| decompress_with_prefix(&prefix.bytes, frame, total))
            .flatten();
        self.stats.delta_bytes += frame.len() as u64;
        let mut fps = Vec::with_capacity(deferred.len());
        let mut at = 0;
        for d in &deferred {
            match &all {
                Some(all) => {
                    let seg = &all[at..at + d.len];
                    at += d.len;
                    let full = Fingerprint::full(seg);
                    self.cache.insert(full, seg)?;
                    fps.push(Some(full.truncate(self.config.bits)));
                    self.stats.delta_segment_bytes += d.len as u64;
                    self.fill_slot(d.seq, seg, true)?;
                }
                None => {
                    // Some base is gone here, or is another segment than the sender's:
                    // every segment of the batch comes whole.
                    fps.push(None);
                    self.request(d.seq);
                }
            }
        }
        self.stream.resolve(fps);
        Ok(())
    }

    /// The slot of a segment named `fp`: filled from the cache, else requested (so is
    /// one this side cannot name).
    fn cache_slot(&mut self, fp: Option<Fingerprint>) -> Result<Slot, ProtocolError> {
        let data = fp.map(|fp| self.cache.lookup(fp)).transpose()?.flatten();
        match &data {
            Some(d) => self.pending_bytes += d.len(),
            None => self.request(self.next_seq),
        }
        Ok(Slot {
            from_cache: data.is_some(),
            data,
        })
    }

    fn expect_segment(&mut self, offset: u64) -> Result<(), ProtocolError> {
        if self.announced == 0 {
            return Err(ProtocolError::Unexpected {
                what: "segment outside a message",
                offset,
            });
        }
        self.announced -= 1;
        Ok(())
    }

    fn push_slot(&mut self, slot: Slot) -> Result<(), ProtocolError> {
        let open = self.groups.back_mut().expect("an open group");
        if slot.data.is_none() {
            open.waiting += 1;
        }
        open.slots.push(slot);
        self.next_seq += 1;
        self.stats.segments += 1;
        if open.slots.len() > self.config.group as usize {
            return Err(ProtocolError::Unexpected {
                what: "more segments in a group than the hello announced",
                offset: self.input_offset,
            });
        }
        Ok(())
    }

    fn request(&mut self, seq: u64) {
        self.out.push(wire::T_REQUEST);
        self.out.extend_from_slice(&(seq as u32).to_le_bytes());
        self.stats.requested += 1;
        self.stats.overhead_bytes += 5;
    }

    /// Checks group `i` if it is closed and complete; acknowledges in order.
    fn try_verify(&mut self, i: usize) -> Result<(), ProtocolError> {
        let g = &mut self.groups[i];
        let Some(cfp) = g.cfp else { return Ok(()) };
        if g.verified || g.waiting > 0 {
            return Ok(());
        }
        let mut h = GroupHasher::new();
        for s in &g.slots {
            h.add(s.data.as_ref().expect("complete group"));
        }
        if h.finish() != cfp {
            if g.resent {
                return Err(ProtocolError::GroupMismatch {
                    first: g.first,
                    end: g.first + g.slots.len() as u64,
                });
            }
            // Some cache-read segment was another with the same short fingerprint.
            g.resent = true;
            self.stream.mark_dirty();
            self.stats.collisions += 1;
            let first = g.first;
            let mut asks = Vec::new();
            for (k, s) in g.slots.iter_mut().enumerate() {
                if s.from_cache {
                    let d = s.data.take().expect("complete group");
                    self.pending_bytes -= d.len();
                    s.from_cache = false;
                    asks.push(first + k as u64);
                }
            }
            g.waiting = asks.len();
            for seq in asks {
                self.request(seq);
            }
            if self.groups[i].waiting == 0 {
                // Nothing came from the cache, yet the hash differs: the sender is wrong.
                return Err(ProtocolError::GroupMismatch {
                    first,
                    end: first + self.groups[i].slots.len() as u64,
                });
            }
            return Ok(());
        }
        g.verified = true;
        self.stats.groups += 1;
        while self.acked < self.groups.len() && self.groups[self.acked].verified {
            self.out.push(wire::T_ACK);
            self.stats.overhead_bytes += 1;
            self.acked += 1;
        }
        self.drop_finished_groups();
        Ok(())
    }

    /// Drops groups that are acknowledged and no longer hold undelivered segments.
    fn drop_finished_groups(&mut self) {
        let keep_from = self.messages.front().map_or(self.next_seq, |m| m.first);
        while self.acked > 0 {
            let g = &self.groups[0];
            if g.first + g.slots.len() as u64 > keep_from {
                break;
            }
            self.groups.pop_front();
            self.acked -= 1;
        }
    }

    /// The verified prefix of the stream: segments below this sequence number are
    /// checked.
    fn verified_upto(&self) -> u64 {
        match self.groups.get(self.acked) {
            Some(g) => g.first,
            None => self.next_seq,
        }
    }

    /// The next message whose segments have all been checked, in sending order.
    pub fn poll_delivered(&mut self) -> Option<Delivered> {
        let m = self.messages.front()?;
        let end = m.first + m.segments;
        if end > self.verified_upto() || (m.segments > 0 && end > self.next_seq) {
            return None;
        }
        let m = self.messages.pop_front().expect("front exists");
        let mut segments = Vec::with_capacity(m.segments as usize);
        let mut seq = m.first;
        for g in &self.groups {
            while seq < end && seq >= g.first && seq < g.first + g.slots.len() as u64 {
                let d = g.slots[(seq - g.first) as usize]
                    .data
                    .clone()
                    .expect("verified segments are present");
                segments.push(d);
                seq += 1;
            }
        }
        debug_assert_eq!(seq, end);
        let bytes: usize = segments.iter().map(Bytes::len).sum();
        self.pending_bytes = self.pending_bytes.saturating_sub(bytes);
        self.stats.bytes_in += bytes as u64;
        self.drop_finished_groups();
        Some(Delivered {
            channel: m.channel,
            layout: m.layout,
            segments,
        })
    }

    /// Moves what to send back to the sender into `out` (appending).
    pub fn take_output(&mut self, out: &mut Vec<u8>) {
        self.stats.bytes_out += self.out.len() as u64;
        take_into(&mut self.out, out);
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn cache(&mut self) -> &mut C {
        &mut self.cache
    }
}
