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
//!
//! Each side has its file (`sender`, `receiver`); this one holds what they share: the
//! parameters, the errors, the counters, the recent-names table and the input loop.
//! The messages are in `wire`, the delta batch's frame in `batch`.

mod batch;
mod receiver;
mod sender;
mod wire;

use std::collections::VecDeque;

use serde::Serialize;

use crate::cache::{CacheError, SegmentCache};
use crate::fp::{Fingerprint, FpBits};
pub use receiver::{Delivered, Receiver};
pub use sender::{Prepared, Sender};
pub(crate) use wire::put_varint;
use wire::{Limits, Msg};

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
    ///
    /// [`SimilarityIndex`]: crate::similar::SimilarityIndex
    /// [`StreamModel`]: crate::stream::StreamModel
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

/// The sequence number nearest above `base` whose low 32 bits are `seq`.
fn widen(seq: u32, base: u64) -> u64 {
    base + u64::from(seq.wrapping_sub(base as u32))
}

#[cfg(test)]
mod tests;
