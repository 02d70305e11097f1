//! The two-level fingerprint protocol (sans-IO): a [`Sender`] and a [`Receiver`].
//!
//! The sender names each segment by a short optimistic fingerprint and closes every
//! group of `group` segments with a conservative hash over the group's bytes in order.
//! The receiver fills segments from its cache, asks for the ones it lacks, and checks the
//! group against the hash before it delivers anything: a fingerprint collision costs a
//! resend of the group's cache-read segments, never a wrong byte.
//!
//! Differences from the seed, and why:
//! - The sender pushes a segment inline, instead of its fingerprint, when its own cache
//!   (which sees the same segments as the receiver's) surely lacks it: a new segment
//!   then costs no round trip. A receiver that lacks a fingerprinted segment anyway
//!   (evicted, or a Bloom false positive at the sender) asks for it, as in the seed.
//! - Messages carry their segmenter's layout once, not per segment.
//! - Pushed and requested segments enter the receiver's cache when they arrive (they came
//!   over the link, not from a cache); cache-read ones are already there.
//! - A new segment like cached ones goes as a delta against them ([`crate::delta`],
//!   bases found by [`crate::similar`] and [`crate::stream`]). The receiver treats its
//!   result like a cache read: a wrong base (a fingerprint collision) fails the group
//!   hash, and the segment is requested whole; a delta that does not decode is
//!   requested at once.
//! - Both sides remember the order of the stream ([`crate::stream`]): a repeated
//!   segment that follows where the stream stands costs one byte, not a fingerprint,
//!   and so does a delta base there. The hello compares the two models; when they
//!   differ the receiver says so and the sender restarts both.
//! - For bulk transfers ([`Config::delta_batch`]) delta segments on bases from earlier
//!   sessions go without their bytes, which follow in a batch: one zstd frame of all
//!   their bytes with all their bases as prefix, which codes a change repeated in many
//!   segments (a version string, an owner in every tar header) once. Between two Django
//!   releases this and the stream model brought `vargr sync` from 2.0× to 1.13× the
//!   bytes of `zstd --patch-from` (level 3).
//!
//! Both sides are state machines fed with bytes ([`Sender::handle_input`],
//! [`Receiver::handle_input`]) that append what to send to an output buffer
//! ([`Sender::take_output`], [`Receiver::take_output`]). The sender keeps the segments of
//! every group not yet acknowledged, to answer requests; [`Sender::window_full`] says
//! when to stop feeding it until acknowledgements come back.

mod wire;

use std::collections::VecDeque;

use bytes::Bytes;
use serde::Serialize;

use crate::cache::{CacheError, SegmentCache};
use crate::delta;
use crate::fp::{Fingerprint, FpBits, GroupHasher, CONSERVATIVE_LEN};
use crate::similar::{self, SimilarityIndex};
use crate::stream::{Seen, StreamModel};
pub(crate) use wire::put_varint;
use wire::{put_fp, BaseRef, Limits, Msg};

/// Parameters both sides must agree on (the sender announces them in its hello), and
/// limits each side enforces on the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Optimistic fingerprint width (default 40 bits, the seed's).
    pub bits: FpBits,
    /// Segments per conservative hash (default 20, the seed's model optimum is 20-25).
    pub group: u32,
    /// Largest segment either side accepts (default 1 MiB).
    pub max_segment: usize,
    /// Largest layout of one message (default 64 KiB).
    pub max_layout: usize,
    /// Groups the sender may have unacknowledged (default 256).
    pub window_groups: usize,
    /// Bytes the receiver holds in unchecked or undelivered groups before it refuses
    /// more (default 256 MiB).
    pub max_pending: usize,
    /// Target bytes of deferred delta segments the sender gathers into one batch,
    /// compressed by zstd with their bases as prefix (0, the default: each delta goes
    /// inline, at once). Batches cost latency and win bytes: between two releases of a
    /// source tarball they halve what the deltas cost. For bulk transfers.
    pub delta_batch: usize,
    /// zstd level of delta batches (default 3).
    pub batch_level: i32,
    /// Entries of the sender's [`SimilarityIndex`] (super-features, which find bases
    /// for delta segments) and of both sides' [`StreamModel`] (successor links)
    /// (default 2^20 each: 60-120 MiB when full, 34 + 16 MiB saved; 0 sends new
    /// segments whole and predicts nothing; both sides must agree).
    pub delta_index: usize,
    /// Whether a segment sent whole earlier in this session may be a delta base
    /// (default true). A sender whose output goes through a stream compressor turns
    /// this off: the compressor does better on the new segment whole. A Django release
    /// tar, the first through zstd 3, made 9.6 MB with it off, 10.6 MB with it on (with
    /// it on only for bases sent more than 8 MiB before, still 9.8 MB), and the
    /// sender ran 1.2-1.8× as fast; without a compressor, on, it made 42.9 MB of 60.4.
    pub session_bases: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bits: FpBits::DEFAULT,
            group: 20,
            max_segment: 1 << 20,
            max_layout: 64 << 10,
            window_groups: 256,
            max_pending: 256 << 20,
            delta_batch: 0,
            batch_level: 3,
            delta_index: 1 << 20,
            session_bases: true,
        }
    }
}

impl Config {
    fn limits(&self) -> Limits {
        Limits {
            bits: self.bits,
            max_segment: self.max_segment,
            max_layout: self.max_layout,
            max_batch: self.max_pending,
        }
    }
}

/// A batch also closes after this many groups, however small, so that the groups it
/// holds up (the receiver cannot check them before it) stay well inside the window.
const BATCH_GROUPS: u64 = 16;

/// A batch's zstd prefix, built the same way on both sides: every base once, in the
/// order the deltas first named them.
struct BatchPrefix {
    bytes: Vec<u8>,
    named: Vec<Fingerprint>,
}

impl BatchPrefix {
    fn new() -> BatchPrefix {
        BatchPrefix {
            // zstd reads a dictionary that begins with its magic number as a trained
            // one; a prefix must always read as raw content.
            bytes: vec![0],
            named: Vec::new(),
        }
    }

    fn has(&self, fp: Fingerprint) -> bool {
        self.named.contains(&fp)
    }

    /// Appends base `fp` unless it is there already.
    fn add(&mut self, fp: Fingerprint, base: &[u8]) {
        if !self.has(fp) {
            self.named.push(fp);
            self.bytes.extend_from_slice(base);
        }
    }
}

/// Segments a sender remembers as sent this session.
const SESSION_NEW_MAX: usize = 1 << 22;

/// Largest zstd window a batch frame may need (its prefix and its content): 128 MiB.
const BATCH_WINDOW_LOG: u32 = 27;

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

/// What went wrong in a session; offsets are bytes into the stream from the peer.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("malformed {what} at byte {offset}")]
    Malformed { what: &'static str, offset: u64 },
    #[error("{what} of {len} at byte {offset} exceeds the limit of {max}")]
    TooLarge {
        what: &'static str,
        len: u64,
        max: u64,
        offset: u64,
    },
    #[error("unknown message type {byte:#04x} at byte {offset}")]
    UnknownMessage { byte: u8, offset: u64 },
    #[error("unexpected {what} at byte {offset}")]
    Unexpected { what: &'static str, offset: u64 },
    #[error("the peer speaks protocol version {found}, this side {expected}")]
    Version { found: u8, expected: u8 },
    #[error("the peer uses {found}-bit fingerprints and groups of {group}; this side's cache is keyed by {expected} bits")]
    Parameters { found: u8, group: u32, expected: u8 },
    #[error("segment {seq} at byte {offset} is not in any group awaiting it")]
    UnknownSegment { seq: u32, offset: u64 },
    #[error("group of segments {first}..{end} still fails its conservative hash after a resend: the peer's data is inconsistent")]
    GroupMismatch { first: u64, end: u64 },
    #[error("the peer has {pending} bytes in flight, more than the limit of {max}")]
    Overrun { pending: usize, max: usize },
    #[error("the peer's stream ended inside a message ({left} bytes unread)")]
    Truncated { left: usize },
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// Counters of one side of a session.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Message bytes the sender was given / the receiver delivered (segments only).
    pub bytes_in: u64,
    /// Protocol bytes this side sent.
    pub bytes_out: u64,
    pub messages: u64,
    pub segments: u64,
    /// Segments named rather than sent: by fingerprint, or by prediction.
    pub fingerprinted: u64,
    /// Of those, the ones named as the successor of the stream's cursor (one byte).
    pub predicted: u64,
    /// Segments sent inline because the sender's cache lacked them.
    pub pushed: u64,
    /// Segments sent as deltas against cached ones (counted apart from `pushed`).
    pub deltas: u64,
    /// Of those, the ones whose bytes went in a batch.
    pub batched: u64,
    /// Bytes of the segments sent as deltas, and of the deltas themselves.
    pub delta_segment_bytes: u64,
    pub delta_bytes: u64,
    /// Segments requested (receiver) or answered (sender).
    pub requested: u64,
    /// Groups closed (sender) or checked (receiver).
    pub groups: u64,
    /// Groups whose conservative hash failed the first time (fingerprint collisions).
    pub collisions: u64,
    /// Bytes of fingerprint, hash and request messages (the price of the protocol).
    pub overhead_bytes: u64,
}

/// Fingerprints named on the wire lately (by fingerprint, pushed or as delta bases),
/// most recent first. Both sides keep the same table, so a delta names a base it shares
/// with the one before (the common case: consecutive segments of a changed file) in one
/// byte instead of a fingerprint. Every name takes a place, repeated or not: a receiver
/// that cannot tell what a name was (a base its stream model cannot resolve) keeps a
/// stand-in there, and the positions the sender refers to stay the same on both sides.
#[derive(Debug, Default)]
struct Recent(VecDeque<Fingerprint>);

impl Recent {
    fn position(&self, fp: Fingerprint) -> Option<usize> {
        self.0.iter().position(|&f| f == fp)
    }

    fn get(&self, k: usize) -> Option<Fingerprint> {
        self.0.get(k).copied()
    }

    fn touch(&mut self, fp: Fingerprint) {
        self.0.push_front(fp);
        self.0.truncate(wire::RECENT);
    }
}

/// Moves `from`'s bytes to the end of `to`. A caller that reuses an empty buffer as
/// large as the output gets the bytes by a swap of buffers, not a copy (whole segments
/// are most of a sender's output), and `from` keeps that buffer's room.
fn take_into(from: &mut Vec<u8>, to: &mut Vec<u8>) {
    if to.is_empty() && to.capacity() >= from.len() {
        std::mem::swap(from, to);
    } else {
        to.append(from);
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
        let bits = self.config.bits;
        // The bases, the anchor's index, and where each base ends in their concatenation.
        let mut best: Option<(Vec<Fingerprint>, usize, Vec<usize>)> = None;
        if self.config.delta_index > 0 && s.len() >= similar::MIN_SEGMENT {
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
                    best = Some((have, at, ends));
                }
                if self.best_delta.len() < s.len() / 16 {
                    break; // good enough: skip the other candidate
                }
            }
        }
        let whole = 1 + varint_len(s.len()) + s.len();
        let deferred = self.config.delta_batch > 0
            && best.as_ref().is_some_and(|(bases, _, _)| {
                !bases.iter().all(|b| self.session_new.contains_key(&b.0))
            });
        if deferred {
            // A batch's prefix is all its bases, and zstd reads every byte of it: keep
            // the bases the delta copies from (and the anchor).
            if let Some((bases, anchor, ends)) = best.as_mut() {
                let mut used = vec![false; bases.len()];
                used[*anchor] = true;
                for r in delta::copied(&self.best_delta) {
                    let first = ends.partition_point(|&e| e <= r.start);
                    let last = ends.partition_point(|&e| e < r.end);
                    for u in used.iter_mut().take(last + 1).skip(first) {
                        *u = true;
                    }
                }
                *anchor = used[..*anchor].iter().filter(|&&u| u).count();
                let mut keep = used.iter();
                bases.retain(|_| *keep.next().expect("one flag per base"));
            }
        }
        let refs = best.as_ref().map(|(bases, _, _)| self.base_refs(bases));
        match (best, refs) {
            (Some((bases, anchor, _)), Some(refs))
                if 2 + refs
                    .iter()
                    .map(|r| if r.is_some() { 1 } else { 1 + bits.wire_len() })
                    .sum::<usize>()
                    + varint_len(s.len())
                    + varint_len(self.best_delta.len())
                    + self.best_delta.len()
                    < whole =>
            {
                let start = self.out.len();
                self.out.push(if deferred {
                    wire::T_DEFERRED
                } else {
                    wire::T_DELTA
                });
                self.out.push(bases.len() as u8 | (anchor as u8) << 4);
                for (&b, r) in bases.iter().zip(&refs) {
                    match r {
                        Some(byte) => self.out.push(*byte),
                        None => {
                            self.out.push(wire::REF_LITERAL);
                            put_fp(b, bits, &mut self.out);
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
            _ => {
                self.out.push(wire::T_PUSH);
                put_varint(s.len() as u64, &mut self.out);
                self.out.extend_from_slice(s);
                self.stats.pushed += 1;
                self.recent.touch(fp);
                Ok(Sent::Whole)
            }
        }
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

    fn on_message(&mut self, msg: Msg<'_>, offset: u64) -> Result<(), ProtocolError> {
        match msg {
            Msg::Request(seq) => {
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
            Msg::Resync => {
                if !self.resynced {
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
                Ok(())
            }
            Msg::Ack => {
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
            _ => Err(ProtocolError::Unexpected {
                what: "sender-side message from the receiver",
                offset,
            }),
        }
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

/// Appends `bytes` to `input` and hands every complete message in it to `on`; keeps
/// the incomplete tail. Returns the result and the bytes consumed.
fn feed(
    input: &mut Vec<u8>,
    offset: u64,
    bytes: &[u8],
    limits: &Limits,
    mut on: impl FnMut(Msg<'_>, u64) -> Result<(), ProtocolError>,
) -> (Result<(), ProtocolError>, u64) {
    input.extend_from_slice(bytes);
    let mut used = 0;
    let result = loop {
        let at = offset + used as u64;
        match wire::decode(&input[used..], at, limits) {
            Ok(Some((msg, n))) => {
                used += n;
                if let Err(e) = on(msg, at) {
                    break Err(e);
                }
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    input.drain(..used);
    (result, used as u64)
}

fn check_bits<C: SegmentCache>(config: &Config, cache: &C) -> Result<(), ProtocolError> {
    if cache.bits() != config.bits {
        return Err(ProtocolError::Parameters {
            found: config.bits.get(),
            group: config.group,
            expected: cache.bits().get(),
        });
    }
    Ok(())
}

/// One zstd frame of `data` that needs `prefix` to decode (as raw content before it; a
/// raw-content dictionary, which `cctx` keeps until the next).
fn compress_with_prefix(
    cctx: &mut zstd::zstd_safe::CCtx<'static>,
    prefix: &[u8],
    data: &[u8],
    level: i32,
) -> Vec<u8> {
    use zstd::zstd_safe::CParameter;
    let window = (prefix.len() + data.len()).max(1 << 10).next_power_of_two();
    let log = window.trailing_zeros().min(BATCH_WINDOW_LOG);
    let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
    let r = cctx
        .set_parameter(CParameter::CompressionLevel(level))
        .and_then(|_| cctx.set_parameter(CParameter::WindowLog(log)))
        .and_then(|_| cctx.load_dictionary(prefix))
        .and_then(|_| cctx.compress2(&mut out, data));
    // Only a bad level or an allocation failure makes zstd fail here.
    r.expect("zstd compresses into a buffer of its bound");
    out
}

/// What [`compress_with_prefix`] made, back; `None` if it is not `len` bytes of it.
fn decompress_with_prefix(prefix: &[u8], frame: &[u8], len: usize) -> Option<Vec<u8>> {
    use zstd::zstd_safe::{DCtx, DParameter};
    let mut dctx = DCtx::create();
    let mut out = Vec::with_capacity(len);
    dctx.set_parameter(DParameter::WindowLogMax(BATCH_WINDOW_LOG))
        .and_then(|_| dctx.ref_prefix(prefix))
        .and_then(|_| dctx.decompress(&mut out, frame))
        .ok()
        .filter(|&n| n == len)?;
    Some(out)
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn varint_len(v: usize) -> usize {
    (64 - (v as u64 | 1).leading_zeros() as usize).div_ceil(7)
}

/// The sequence number nearest above `base` whose low 32 bits are `seq`.
fn widen(seq: u32, base: u64) -> u64 {
    base + u64::from(seq.wrapping_sub(base as u32))
}

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
            } => {
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
            }
            Msg::Reset(epoch) => {
                self.stream.reset(epoch);
                self.stream_agreed = true;
            }
            Msg::Next => {
                self.expect_segment(offset)?;
                let fp = self.predicted();
                let slot = self.cache_slot(fp)?;
                self.stream
                    .advance(fp, fp.map_or(Seen::Unknown, Seen::Known));
                self.stats.predicted += 1;
                self.stats.fingerprinted += 1;
                self.push_slot(slot)?;
            }
            Msg::Message {
                channel,
                layout,
                segments,
            } => {
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
            }
            Msg::Fp(fp) => {
                self.expect_segment(offset)?;
                self.recent.touch(fp);
                let slot = self.cache_slot(Some(fp))?;
                self.stream.advance(Some(fp), Seen::Known(fp));
                self.stats.fingerprinted += 1;
                self.push_slot(slot)?;
            }
            Msg::Push(data) => {
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
                })?;
            }
            Msg::Delta(d) => {
                self.expect_segment(offset)?;
                // A base the stream model cannot name here is `None`: the segment is
                // then requested whole.
                let mut bases: Vec<Option<Fingerprint>> = Vec::with_capacity(d.n);
                let cursor = self.agreed_model().and_then(StreamModel::cursor);
                let mut prev = cursor;
                for r in d.bases() {
                    let b = match r {
                        BaseRef::Literal(fp) => Some(fp),
                        BaseRef::Recent(k) => {
                            Some(self.recent.get(k).ok_or(ProtocolError::Malformed {
                                what: "delta segment (base reference to an empty slot)",
                                offset,
                            })?)
                        }
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
                let anchor = bases.get(d.anchor).copied().flatten();
                self.stats.deltas += 1;
                let mut found = Vec::with_capacity(bases.len());
                for &fp in &bases {
                    match fp.map(|fp| self.cache.lookup(fp)).transpose()?.flatten() {
                        Some(b) => found.push((fp.expect("looked up"), b)),
                        None => break,
                    }
                }
                let complete = found.len() == bases.len();
                let Some(body) = d.delta else {
                    self.deferred_bytes += d.len;
                    if self.deferred_bytes > self.config.max_pending {
                        return Err(ProtocolError::Overrun {
                            pending: self.deferred_bytes,
                            max: self.config.max_pending,
                        });
                    }
                    self.deferred.push(DeferredDelta {
                        seq: self.next_seq,
                        len: d.len,
                        bases: complete.then_some(found),
                    });
                    self.stream.advance(anchor, Seen::Deferred(None));
                    return self.push_slot(Slot {
                        data: None,
                        from_cache: false,
                    });
                };
                let rebuilt = if complete {
                    let base = found
                        .iter()
                        .map(|(_, b)| &b[..])
                        .collect::<Vec<_>>()
                        .concat();
                    delta::decode(&base, body, d.len).ok()
                } else {
                    None
                };
                self.stats.delta_bytes += body.len() as u64;
                let slot = match rebuilt {
                    Some(data) => {
                        let full = Fingerprint::full(&data);
                        self.stream
                            .advance(anchor, Seen::Known(full.truncate(self.config.bits)));
                        self.cache.insert(full, &data)?;
                        self.pending_bytes += data.len();
                        self.stats.delta_segment_bytes += data.len() as u64;
                        Slot {
                            data: Some(Bytes::from(data)),
                            // Built on cache reads: suspect until the group's hash agrees.
                            from_cache: true,
                        }
                    }
                    None => {
                        self.stream.advance(anchor, Seen::Unknown);
                        self.cache_slot(None)?
                    }
                };
                self.push_slot(slot)?;
            }
            Msg::Batch(frame) => self.on_batch(frame, offset)?,
            Msg::Cfp(hash) => {
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
                self.try_verify(i)?;
            }
            Msg::Segment { seq, data } => {
                let base = self.groups.front().expect("an open group").first;
                let seq64 = widen(seq, base);
                if !self.fill_slot(seq64, data, false)? {
                    return Err(ProtocolError::UnknownSegment { seq, offset });
                }
                self.cache.insert(Fingerprint::full(data), data)?;
            }
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

#[cfg(test)]
mod tests;
