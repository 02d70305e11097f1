//! The sending side of the protocol: names segments, pushes or deltas the new ones,
//! closes groups with their conservative hash, and answers the receiver's requests.

use std::collections::VecDeque;

use super::batch::{compress_with_prefix, BatchPrefix};
use super::wire::{self, put_fp, put_varint, Msg};
use super::{check_bits, feed, take_into, widen, Config, ProtocolError, Recent, Stats};
use crate::cache::SegmentCache;
use crate::delta;
use crate::fp::{Fingerprint, GroupHasher, CONSERVATIVE_LEN};
use crate::similar::{self, SimilarityIndex};
use crate::stream::{Seen, StreamModel};

/// A batch also closes after this many groups, however small, so that the groups it
/// holds up (the receiver cannot check them before it) stay well inside the window.
const BATCH_GROUPS: u64 = 16;

/// Segments a sender remembers as sent this session.
const SESSION_NEW_MAX: usize = 1 << 22;

/// Deferred delta segments the sender gathers, and their bases.
struct DeltaBatch {
    prefix: BatchPrefix,
    targets: Vec<u8>,
    fps: Vec<Fingerprint>,
    /// Groups closed when the first delta came.
    first_group: u64,
}

/// How a new segment went.
#[derive(PartialEq)]
enum Sent {
    Whole,
    /// As a delta; the stream moves to this base.
    Delta(Fingerprint),
    /// As a delta whose bytes go in the next batch.
    Deferred(Fingerprint),
}

/// The bases of a delta for a new segment, the index of the one the stream moves to,
/// and where each ends in their concatenation.
struct DeltaPlan {
    bases: Vec<Fingerprint>,
    anchor: usize,
    ends: Vec<usize>,
}

impl DeltaPlan {
    /// Keeps only the bases `delta` copies from, and the anchor: a batch's prefix is all
    /// its bases, and zstd reads every byte of it.
    fn keep_copied_bases(&mut self, delta: &[u8]) {
        let mut used = vec![false; self.bases.len()];
        used[self.anchor] = true;
        for r in delta::copied(delta) {
            let first = self.ends.partition_point(|&e| e <= r.start);
            let last = self.ends.partition_point(|&e| e < r.end);
            for u in used.iter_mut().take(last + 1).skip(first) {
                *u = true;
            }
        }
        self.anchor = used[..self.anchor].iter().filter(|&&u| u).count();
        let mut keep = used.iter();
        self.bases
            .retain(|_| *keep.next().expect("one flag per base"));
    }
}

/// What the sender needs of a segment besides its bytes, computed where convenient
/// (another core) and handed to [`Sender::send_message_prepared`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prepared {
    pub full: Fingerprint,
    pub sketch: Option<similar::Sketch>,
}

impl Prepared {
    pub fn of(segment: &[u8]) -> Prepared {
        Prepared {
            full: Fingerprint::full(segment),
            sketch: similar::sketch(segment),
        }
    }
}

/// A group the sender has closed or is filling.
struct SentGroup {
    first: u64,
    /// The segments back to back (one allocation per group, hashed in one call), and
    /// where each ends.
    data: Vec<u8>,
    ends: Vec<u32>,
}

impl SentGroup {
    fn new(first: u64) -> SentGroup {
        SentGroup {
            first,
            data: Vec::new(),
            ends: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn segment(&self, k: usize) -> &[u8] {
        let start = if k == 0 { 0 } else { self.ends[k - 1] as usize };
        &self.data[start..self.ends[k] as usize]
    }
}

/// The sending side of one session.
pub struct Sender<C: SegmentCache> {
    config: Config,
    cache: C,
    out: Vec<u8>,
    next_seq: u64,
    /// Unacknowledged groups, oldest first; the last one is open.
    groups: VecDeque<SentGroup>,
    /// The byte buffer of the last acknowledged group, kept for the next one: a group's
    /// buffer is large, and a fresh one costs its page faults and a few regrowths.
    spare_group: Vec<u8>,
    input: Vec<u8>,
    input_offset: u64,
    stats: Stats,
    similar: SimilarityIndex,
    stream: StreamModel,
    /// The hello goes out with the first output, once the stream model is known.
    hello_sent: bool,
    /// The receiver's model was not ours and both were reset this session.
    resynced: bool,
    batch: Option<DeltaBatch>,
    /// Kept from batch to batch: a fresh context would allocate and clear its tables
    /// (megabytes at the window a batch needs) every time.
    batch_cctx: Option<zstd::zstd_safe::CCtx<'static>>,
    /// Segments first sent this session (up to a bound), each with whether it went
    /// whole. A delta on them goes inline: the link's compressor has them in its window
    /// and finds more than a batch would.
    session_new: rustc_hash::FxHashMap<u64, bool>,
    recent: Recent,
    /// Scratch for delta bases and deltas.
    encoder: delta::Encoder,
    base_buf: Vec<u8>,
    delta_buf: Vec<u8>,
    best_delta: Vec<u8>,
}

impl<C: SegmentCache> Sender<C> {
    /// A sender whose cache must be keyed by `config.bits`.
    pub fn new(config: Config, cache: C) -> Result<Sender<C>, ProtocolError> {
        check_bits(&config, &cache)?;
        Ok(Sender {
            config,
            cache,
            out: Vec::new(),
            next_seq: 0,
            groups: VecDeque::from([SentGroup::new(0)]),
            spare_group: Vec::new(),
            input: Vec::new(),
            input_offset: 0,
            stats: Stats::default(),
            similar: SimilarityIndex::new(config.delta_index),
            stream: StreamModel::new(config.delta_index),
            hello_sent: false,
            resynced: false,
            batch: None,
            batch_cctx: None,
            session_new: Default::default(),
            recent: Recent::default(),
            encoder: delta::Encoder::default(),
            base_buf: Vec::new(),
            delta_buf: Vec::new(),
            best_delta: Vec::new(),
        })
    }

    /// Replaces the index that finds delta bases (one kept from an earlier session
    /// with the same peer, see [`SimilarityIndex::from_bytes`]).
    pub fn set_similarity(&mut self, index: SimilarityIndex) {
        self.similar = index;
    }

    pub fn similarity(&self) -> &SimilarityIndex {
        &self.similar
    }

    /// Takes the index out (to hand to a later session); this sender sends no more
    /// deltas.
    pub fn take_similarity(&mut self) -> SimilarityIndex {
        std::mem::replace(&mut self.similar, SimilarityIndex::new(0))
    }

    /// Replaces the stream model (one kept from an earlier session with the same
    /// receiver, which kept its own). Call before anything is sent.
    pub fn set_stream(&mut self, mut model: StreamModel) {
        model.restart();
        self.stream = model;
    }

    /// The stream model, to keep for the next session once this one has ended.
    pub fn stream(&self) -> &StreamModel {
        &self.stream
    }

    /// Takes the stream model out (to hand to a later session); this sender predicts
    /// nothing more.
    pub fn take_stream(&mut self) -> StreamModel {
        std::mem::replace(&mut self.stream, StreamModel::new(0))
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Ends the session, handing back what the next one with the same peer starts from.
    pub fn into_parts(self) -> (C, SimilarityIndex, StreamModel) {
        (self.cache, self.similar, self.stream)
    }

    fn ensure_hello(&mut self) {
        if !self.hello_sent {
            self.hello_sent = true;
            let mut hello = vec![wire::T_HELLO, wire::VERSION, self.config.bits.get()];
            put_varint(u64::from(self.config.group), &mut hello);
            let token = self.stream.token();
            hello.extend_from_slice(&token.epoch.to_le_bytes());
            put_varint(token.commits, &mut hello);
            self.out.splice(0..0, hello);
        }
    }

    /// Queues one message: `layout` for the receiver's segmenter and the segments in
    /// order. Segments larger than [`Config::max_segment`] are refused.
    pub fn send_message(
        &mut self,
        channel: u32,
        layout: &[u8],
        segments: &[&[u8]],
    ) -> Result<(), ProtocolError> {
        let full: Vec<Fingerprint> = segments.iter().map(|s| Fingerprint::full(s)).collect();
        self.send_message_hashed(channel, layout, segments, &full)
    }

    /// [`Sender::send_message`] with each segment's [`Fingerprint::full`] already
    /// computed (`full[i]` of `segments[i]`), so that hashing can run on another core.
    ///
    /// # Panics
    ///
    /// If the two slices differ in length.
    pub fn send_message_hashed(
        &mut self,
        channel: u32,
        layout: &[u8],
        segments: &[&[u8]],
        full: &[Fingerprint],
    ) -> Result<(), ProtocolError> {
        assert_eq!(segments.len(), full.len(), "one fingerprint per segment");
        self.send_message_with(channel, layout, segments, |i| (full[i], None))
    }

    /// [`Sender::send_message`] with each segment's fingerprint and sketch computed
    /// beforehand ([`Prepared::of`]), on another core: all the per-byte work but the
    /// protocol's own.
    ///
    /// # Panics
    ///
    /// If the two slices differ in length.
    pub fn send_message_prepared(
        &mut self,
        channel: u32,
        layout: &[u8],
        segments: &[&[u8]],
        prepared: &[Prepared],
    ) -> Result<(), ProtocolError> {
        assert_eq!(
            segments.len(),
            prepared.len(),
            "one preparation per segment"
        );
        self.send_message_with(channel, layout, segments, |i| {
            (prepared[i].full, Some(prepared[i].sketch))
        })
    }

    fn send_message_with(
        &mut self,
        channel: u32,
        layout: &[u8],
        segments: &[&[u8]],
        info: impl Fn(usize) -> (Fingerprint, Option<Option<similar::Sketch>>),
    ) -> Result<(), ProtocolError> {
        if layout.len() > self.config.max_layout {
            return Err(ProtocolError::TooLarge {
                what: "layout",
                len: layout.len() as u64,
                max: self.config.max_layout as u64,
                offset: self.stats.bytes_out + self.out.len() as u64,
            });
        }
        if let Some(s) = segments.iter().find(|s| s.len() > self.config.max_segment) {
            return Err(ProtocolError::TooLarge {
                what: "segment",
                len: s.len() as u64,
                max: self.config.max_segment as u64,
                offset: self.stats.bytes_out + self.out.len() as u64,
            });
        }
        self.ensure_hello();
        let start = self.out.len();
        self.out.push(wire::T_MESSAGE);
        put_varint(u64::from(channel), &mut self.out);
        put_varint(layout.len() as u64, &mut self.out);
        self.out.extend_from_slice(layout);
        put_varint(segments.len() as u64, &mut self.out);
        self.stats.overhead_bytes += (self.out.len() - start) as u64;
        self.stats.messages += 1;
        for (i, s) in segments.iter().enumerate() {
            let (full, sketch) = info(i);
            self.add_segment(s, full, sketch)?;
        }
        Ok(())
    }

    /// `sketch`: the segment's, if computed already (`Some(None)`: it has none).
    fn add_segment(
        &mut self,
        s: &[u8],
        full: Fingerprint,
        sketch: Option<Option<similar::Sketch>>,
    ) -> Result<(), ProtocolError> {
        debug_assert_eq!(full, Fingerprint::full(s));
        let fp = full.truncate(self.config.bits);
        if self.groups.back().expect("an open group").data.len() + s.len() > u32::MAX as usize {
            self.close_group(); // offsets within a group are u32
        }
        self.stats.segments += 1;
        self.stats.bytes_in += s.len() as u64;
        if !s.is_empty() && self.cache.may_contain(fp) && !self.batched(fp) {
            if self.stream.predicted() == Some(fp) {
                self.out.push(wire::T_NEXT);
                self.stats.predicted += 1;
                self.stats.fingerprinted += 1;
                self.stats.overhead_bytes += 1;
            } else {
                self.out.push(wire::T_FP);
                put_fp(fp, self.config.bits, &mut self.out);
                self.stats.fingerprinted += 1;
                self.stats.overhead_bytes += 1 + self.config.bits.wire_len() as u64;
                self.recent.touch(fp);
            }
            self.stream.advance(Some(fp), Seen::Known(fp));
        } else {
            let sketch = match sketch {
                _ if self.config.delta_index == 0 => None,
                Some(k) => k,
                None => similar::sketch(s),
            };
            let sent = self.push_or_delta(s, fp, sketch.as_ref())?;
            self.cache.insert(full, s)?;
            if self.session_new.len() < SESSION_NEW_MAX {
                self.session_new.insert(fp.0, sent == Sent::Whole);
            }
            if let Some(k) = &sketch {
                self.similar.record(fp, k);
            }
            match sent {
                Sent::Whole => self.stream.advance(Some(fp), Seen::Known(fp)),
                Sent::Delta(a) => self.stream.advance(Some(a), Seen::Known(fp)),
                Sent::Deferred(a) => self.stream.advance(Some(a), Seen::Deferred(Some(fp))),
            }
        }
        self.next_seq += 1;
        let open = self.groups.back_mut().expect("an open group");
        open.data.extend_from_slice(s);
        open.ends.push(open.data.len() as u32);
        if open.len() >= self.config.group as usize {
            self.close_group();
        }
        Ok(())
    }

    /// Candidate bases for a new segment, best first: the segments around the
    /// successor of the stream's cursor (the new one may start a little before or end a
    /// little after it), then the segment sharing the most super-features with it and
    /// its successor. Each with the index of the base the stream moves to.
    fn base_choices(&self, sketch: Option<&similar::Sketch>) -> Vec<(Vec<Fingerprint>, usize)> {
        let mut out = Vec::with_capacity(2);
        if let Some(c) = self.stream.cursor() {
            // Without a successor the run is the segment just sent, whose likeness
            // the link's compressor finds by itself.
            let run = self.stream.run_from(c, 3);
            if run.len() > 1 {
                out.push((run, 1));
            }
        }
        if let Some(f) = sketch.and_then(|k| self.similar.most_similar(k)) {
            let f = f.truncate(self.config.bits);
            if !out.iter().any(|(run, _)| run.contains(&f)) {
                out.push((self.stream.run_from(f, 2), 0));
            }
        }
        out
    }

    /// How the wire names each base: `None` for a literal fingerprint, else the byte.
    fn base_refs(&self, bases: &[Fingerprint]) -> Vec<Option<u8>> {
        let cursor = self.stream.cursor();
        let mut prev = cursor;
        bases
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                let r = if i == 0 && cursor == Some(b) {
                    Some(wire::REF_CURSOR)
                } else if prev.and_then(|p| self.stream.successor(p)) == Some(b) {
                    Some(wire::REF_NEXT)
                } else {
                    self.recent.position(b).map(|k| k as u8)
                };
                prev = Some(b);
                r
            })
            .collect()
    }

    /// Sends a new segment as a delta against cached ones if that is shorter, else
    /// whole.
    fn push_or_delta(
        &mut self,
        s: &[u8],
        fp: Fingerprint,
        sketch: Option<&similar::Sketch>,
    ) -> Result<Sent, ProtocolError> {
        let mut best = self.best_delta_for(s, sketch)?;
        let deferred = self.config.delta_batch > 0
            && best.as_ref().is_some_and(|plan| {
                !plan
                    .bases
                    .iter()
                    .all(|b| self.session_new.contains_key(&b.0))
            });
        if deferred {
            if let Some(plan) = best.as_mut() {
                plan.keep_copied_bases(&self.best_delta);
            }
        }
        if let Some(plan) = best {
            let refs = self.base_refs(&plan.bases);
            let whole = 1 + varint_len(s.len()) + s.len();
            if self.delta_wire_len(&refs, s.len()) < whole {
                return self.send_delta(plan, &refs, s, fp, deferred);
            }
        }
        self.send_whole(s, fp);
        Ok(Sent::Whole)
    }

    /// The shortest delta of `s` against each candidate run of bases
    /// ([`Sender::base_choices`]), left in `best_delta`; `None` if no run is usable.
    fn best_delta_for(
        &mut self,
        s: &[u8],
        sketch: Option<&similar::Sketch>,
    ) -> Result<Option<DeltaPlan>, ProtocolError> {
        let mut best: Option<DeltaPlan> = None;
        if self.config.delta_index == 0 || s.len() < similar::MIN_SEGMENT {
            return Ok(best);
        }
        for (run, anchor) in self.base_choices(sketch) {
            self.base_buf.clear();
            let mut have = Vec::with_capacity(run.len());
            let mut ends = Vec::with_capacity(run.len());
            let (mut start, mut at) = (0, 0);
            for (i, &f) in run.iter().enumerate() {
                if self.batched(f) {
                    continue; // not at the receiver before the batch
                }
                if let Some(b) = self.cache.lookup(f)? {
                    if i == anchor {
                        (start, at) = (self.base_buf.len(), have.len());
                    }
                    self.base_buf.extend_from_slice(&b);
                    have.push(f);
                    ends.push(self.base_buf.len());
                }
            }
            if have.is_empty() {
                continue;
            }
            if !self.config.session_bases
                && have
                    .iter()
                    .all(|b| self.session_new.get(&b.0) == Some(&true))
            {
                continue; // the stream's compressor does better
            }
            self.delta_buf.clear();
            self.encoder
                .encode(&self.base_buf, s, start, &mut self.delta_buf);
            if best.is_none() || self.delta_buf.len() < self.best_delta.len() {
                std::mem::swap(&mut self.delta_buf, &mut self.best_delta);
                best = Some(DeltaPlan {
                    bases: have,
                    anchor: at,
                    ends,
                });
            }
            if self.best_delta.len() < s.len() / 16 {
                break; // good enough: skip the other candidate
            }
        }
        Ok(best)
    }

    /// Bytes a delta message takes with the bases named by `refs` and the delta in
    /// `best_delta` (counted for a deferred one too, whose bytes go in the batch).
    fn delta_wire_len(&self, refs: &[Option<u8>], len: usize) -> usize {
        let names: usize = refs
            .iter()
            .map(|r| {
                if r.is_some() {
                    1
                } else {
                    1 + self.config.bits.wire_len()
                }
            })
            .sum();
        2 + names + varint_len(len) + varint_len(self.best_delta.len()) + self.best_delta.len()
    }

    /// Sends `s` as the delta in `best_delta` against `plan`'s bases named by `refs`:
    /// inline, or `deferred` with its bytes to go in the next batch.
    fn send_delta(
        &mut self,
        plan: DeltaPlan,
        refs: &[Option<u8>],
        s: &[u8],
        fp: Fingerprint,
        deferred: bool,
    ) -> Result<Sent, ProtocolError> {
        let DeltaPlan { bases, anchor, .. } = plan;
        let start = self.out.len();
        self.out.push(if deferred {
            wire::T_DEFERRED
        } else {
            wire::T_DELTA
        });
        self.out.push(bases.len() as u8 | (anchor as u8) << 4);
        for (&b, r) in bases.iter().zip(refs) {
            match r {
                Some(byte) => self.out.push(*byte),
                None => {
                    self.out.push(wire::REF_LITERAL);
                    put_fp(b, self.config.bits, &mut self.out);
                }
            }
        }
        for &b in &bases {
            self.recent.touch(b);
        }
        put_varint(s.len() as u64, &mut self.out);
        self.stats.deltas += 1;
        self.stats.delta_segment_bytes += s.len() as u64;
        if deferred {
            self.stats.batched += 1;
            self.stats.overhead_bytes += (self.out.len() - start) as u64;
            self.defer(&bases, s, fp)?;
            return Ok(Sent::Deferred(bases[anchor]));
        }
        put_varint(self.best_delta.len() as u64, &mut self.out);
        self.stats.overhead_bytes += (self.out.len() - start) as u64;
        self.out.extend_from_slice(&self.best_delta);
        self.stats.delta_bytes += self.best_delta.len() as u64;
        Ok(Sent::Delta(bases[anchor]))
    }

    /// Sends `s` whole.
    fn send_whole(&mut self, s: &[u8], fp: Fingerprint) {
        self.out.push(wire::T_PUSH);
        put_varint(s.len() as u64, &mut self.out);
        self.out.extend_from_slice(s);
        self.stats.pushed += 1;
        self.recent.touch(fp);
    }

    /// Whether `fp` is a deferred segment whose batch has not gone yet.
    fn batched(&self, fp: Fingerprint) -> bool {
        self.batch.as_ref().is_some_and(|b| b.fps.contains(&fp))
    }

    /// Adds a delta segment to the batch: its bytes, and its bases to the prefix.
    fn defer(
        &mut self,
        bases: &[Fingerprint],
        s: &[u8],
        fp: Fingerprint,
    ) -> Result<(), ProtocolError> {
        let groups = self.stats.groups;
        let batch = self.batch.get_or_insert_with(|| DeltaBatch {
            prefix: BatchPrefix::new(),
            targets: Vec::new(),
            fps: Vec::new(),
            first_group: groups,
        });
        for &b in bases {
            if !batch.prefix.has(b) {
                // Looked up a moment ago to make the delta: present.
                let bytes = self.cache.lookup(b)?.ok_or(ProtocolError::Unexpected {
                    what: "delta base gone from the sender's cache",
                    offset: self.stats.bytes_out,
                })?;
                batch.prefix.add(b, &bytes);
            }
        }
        batch.targets.extend_from_slice(s);
        batch.fps.push(fp);
        Ok(())
    }

    /// Sends the batch of deferred deltas: one zstd frame of their bytes, with their
    /// bases as prefix, so a change repeated across segments (a version string in every
    /// file header) costs little after the first.
    fn send_batch(&mut self) {
        let Some(b) = self.batch.take() else { return };
        let cctx = self
            .batch_cctx
            .get_or_insert_with(zstd::zstd_safe::CCtx::create);
        let frame =
            compress_with_prefix(cctx, &b.prefix.bytes, &b.targets, self.config.batch_level);
        self.out.push(wire::T_BATCH);
        put_varint(frame.len() as u64, &mut self.out);
        self.out.extend_from_slice(&frame);
        self.stats.delta_bytes += frame.len() as u64;
        self.stream.resolve(b.fps.into_iter().map(Some));
    }

    /// Closes the open group now (end of input, or before going idle), so the receiver
    /// can check and deliver what it has.
    pub fn flush(&mut self) {
        if !self.groups.back().expect("an open group").ends.is_empty() {
            self.close_group();
        }
        self.send_batch();
    }

    fn close_group(&mut self) {
        let open = self.groups.back().expect("an open group");
        let mut hasher = GroupHasher::new();
        hasher.add_run(&open.data, &open.ends);
        if self.batch.as_ref().is_some_and(|b| {
            b.targets.len() >= self.config.delta_batch
                || self.stats.groups - b.first_group >= BATCH_GROUPS
        }) {
            self.send_batch();
        }
        self.out.push(wire::T_CFP);
        self.out.extend_from_slice(&hasher.finish());
        self.stats.overhead_bytes += 1 + CONSERVATIVE_LEN as u64;
        self.stats.groups += 1;
        self.stream.commit();
        let mut next = SentGroup::new(self.next_seq);
        next.data = std::mem::take(&mut self.spare_group);
        self.groups.push_back(next);
    }

    /// True when so many groups await acknowledgement that the caller should wait for
    /// input before sending more.
    pub fn window_full(&self) -> bool {
        self.groups.len() > self.config.window_groups
    }

    /// True when everything sent has been acknowledged.
    pub fn is_idle(&self) -> bool {
        self.groups.len() == 1 && self.groups[0].ends.is_empty()
    }

    /// Feeds bytes from the receiver (requests, acknowledgements).
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

    /// Acts on one message from the receiver (at byte `offset` of its stream).
    fn on_message(&mut self, msg: Msg<'_>, offset: u64) -> Result<(), ProtocolError> {
        match msg {
            Msg::Request(seq) => self.on_request(seq, offset),
            Msg::Resync => {
                self.on_resync();
                Ok(())
            }
            Msg::Ack => self.on_ack(offset),
            _ => Err(ProtocolError::Unexpected {
                what: "sender-side message from the receiver",
                offset,
            }),
        }
    }

    /// Sends segment `seq` again, whole: the receiver lacks it or its group failed.
    fn on_request(&mut self, seq: u32, offset: u64) -> Result<(), ProtocolError> {
        let oldest = self.groups.front().expect("an open group").first;
        let seq64 = widen(seq, oldest);
        let g = self
            .groups
            .iter()
            .find(|g| seq64 >= g.first && seq64 < g.first + g.len() as u64)
            .ok_or(ProtocolError::UnknownSegment { seq, offset })?;
        let data = g.segment((seq64 - g.first) as usize);
        let start = self.out.len();
        self.out.push(wire::T_SEGMENT);
        self.out.extend_from_slice(&seq.to_le_bytes());
        put_varint(data.len() as u64, &mut self.out);
        self.stats.overhead_bytes += (self.out.len() - start) as u64;
        self.out.extend_from_slice(data);
        self.stats.requested += 1;
        Ok(())
    }

    /// The receiver's stream model is not ours: both restart from a new epoch (once a
    /// session).
    fn on_resync(&mut self) {
        if self.resynced {
            return;
        }
        // An epoch neither side had: the session's start and this sender.
        let epoch = xxhash_rust::xxh3::xxh3_64(
            &[
                self.stream.token().epoch.to_le_bytes(),
                self.stats.bytes_in.to_le_bytes(),
                now_nanos().to_le_bytes(),
                u64::from(std::process::id()).to_le_bytes(),
            ]
            .concat(),
        ) | 1;
        self.resynced = true;
        self.stream.reset(epoch);
        self.out.push(wire::T_RESET);
        self.out.extend_from_slice(&epoch.to_le_bytes());
        self.stats.overhead_bytes += 9;
    }

    /// The oldest unacknowledged group is checked: its segments are no longer needed.
    fn on_ack(&mut self, offset: u64) -> Result<(), ProtocolError> {
        if self.groups.len() < 2 {
            return Err(ProtocolError::Unexpected {
                what: "acknowledgement (no group awaits one)",
                offset,
            });
        }
        let mut done = self.groups.pop_front().expect("two groups or more");
        done.data.clear();
        if done.data.capacity() > self.spare_group.capacity() {
            self.spare_group = done.data;
        }
        Ok(())
    }

    /// Moves what to send to the receiver into `out` (appending).
    pub fn take_output(&mut self, out: &mut Vec<u8>) {
        self.ensure_hello();
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

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn varint_len(v: usize) -> usize {
    (64 - (v as u64 | 1).leading_zeros() as usize).div_ceil(7)
}
