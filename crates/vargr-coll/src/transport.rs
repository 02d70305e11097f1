//! What the collective algorithms need from a network, and how tags are laid out.
//!
//! A [`Transport`] is one rank's endpoint: eager sends, blocking receives matched by
//! `(source, tag)`, per-`(source, tag)` FIFO order. The in-process transport
//! ([`crate::InProcess`]) and the socket transport (over `vargr-net`) both implement it,
//! so every algorithm, and `Comm`, runs unchanged over either or over a mix of both.
//!
//! Tags carry the communicator's context id, so traffic of different communicators never
//! matches, plus either a user tag (point-to-point) or a collective sequence number and
//! phase. See [`Tag`].

use bytes::Bytes;

use crate::arena::Arena;
use crate::elem::ElemKind;
use crate::error::Result;

/// One rank's view of a network of `size()` ranks.
///
/// Contract every implementation keeps:
/// - `send` is *eager*: it never waits for the matching `recv` (the algorithms send before
///   they receive in every exchange, so a rendezvous send would deadlock them).
/// - `recv(src, tag)` returns the oldest message from `src` with exactly `tag`, blocking
///   until one arrives; messages from one sender with one tag arrive in send order.
/// - A message to oneself is allowed and is delivered like any other.
/// - Blocking must not burn a core: ranks may outnumber cores many times over.
pub trait Transport: Send + Sync {
    /// This endpoint's rank in the transport (the world rank).
    fn rank(&self) -> usize;
    /// Number of ranks reachable through this transport.
    fn size(&self) -> usize;
    /// Queues `data` for `dest`; returns once the data is owned by the transport.
    fn send(&self, dest: usize, tag: u64, data: Bytes) -> Result<()>;
    /// Like `send`, knowing that `data` holds elements of `elem`: transports whose links
    /// compress pass it on, so that floats meet a float codec.
    fn send_typed(&self, dest: usize, tag: u64, data: Bytes, elem: ElemKind) -> Result<()> {
        let _ = elem;
        self.send(dest, tag, data)
    }
    /// Like `send`, asking links that compress to leave `data` as it is.
    fn send_uncompressed(&self, dest: usize, tag: u64, data: Bytes) -> Result<()> {
        self.send(dest, tag, data)
    }
    /// Blocks until a message from `src` with `tag` arrives and returns it.
    fn recv(&self, src: usize, tag: u64) -> Result<Bytes>;
    /// A message that one of `pats` accepts: the oldest one that the first pattern able
    /// to take a message accepts, so patterns in the order their receives were posted
    /// match as MPI matches posted receives. With `wait`, blocks until there is one;
    /// without, returns `None` at once.
    fn recv_match(&self, pats: &[Match], wait: bool) -> Result<Option<Matched>>;
    /// Sends to `dest`, then receives from `src`. Transports with a progress engine can
    /// override this to overlap the two.
    fn sendrecv(
        &self,
        dest: usize,
        send_tag: u64,
        data: Bytes,
        src: usize,
        recv_tag: u64,
    ) -> Result<Bytes> {
        self.send(dest, send_tag, data)?;
        self.recv(src, recv_tag)
    }
    /// Shared-memory collectives among the ranks of this process, if the transport
    /// runs several ranks in one process. Enables the `shm` algorithm.
    fn arena(&self) -> Option<&Arena> {
        None
    }
}

/// Which messages a receive takes: from `src` (any source if `None`) with a tag whose
/// bits under `mask` equal those of `tag`. MPI's `ANY_SOURCE` and `ANY_TAG` are patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Match {
    pub src: Option<usize>,
    pub tag: u64,
    pub mask: u64,
}

impl Match {
    /// Exactly `src` and `tag`.
    pub fn exact(src: usize, tag: u64) -> Match {
        Match {
            src: Some(src),
            tag,
            mask: u64::MAX,
        }
    }

    pub fn accepts(&self, src: usize, tag: u64) -> bool {
        self.src.is_none_or(|s| s == src) && (tag ^ self.tag) & self.mask == 0
    }
}

/// A message taken by [`Transport::recv_match`]: the index of the pattern that took it,
/// its transport source and full tag.
#[derive(Debug, Clone)]
pub struct Matched {
    pub pattern: usize,
    pub src: usize,
    pub tag: u64,
    pub data: Bytes,
}

/// Tag layout, 64 bits:
///
/// ```text
///  63            32  31  30                 12 11        0
/// [ context id    ][c ][ sequence (19 bits)  ][phase (12)]   c = 1: collective
/// [ context id    ][0 ][ user tag (31 bits)               ]  c = 0: point-to-point
/// ```
///
/// The sequence number wraps; that is safe because every collective on a communicator is
/// called in the same order on all its ranks and the transport keeps per-`(src, tag)`
/// FIFO order, so a wrapped tag can only ever match the message it was meant for. The
/// sequence and phase mostly make traces and error messages readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tag;

impl Tag {
    /// Largest user tag (like `MPI_TAG_UB`).
    pub const USER_MAX: u64 = (1 << 31) - 1;
    const COLL_BIT: u64 = 1 << 31;
    const SEQ_MASK: u64 = (1 << 19) - 1;
    const PHASE_MASK: u64 = (1 << 12) - 1;

    /// Tag of a point-to-point message.
    pub fn user(ctx: u32, tag: u64) -> u64 {
        debug_assert!(tag <= Self::USER_MAX);
        ((ctx as u64) << 32) | tag
    }

    /// The point-to-point messages of context `ctx` with user tag `tag`, or with any
    /// user tag if `None`.
    pub fn user_match(ctx: u32, src: Option<usize>, tag: Option<u64>) -> Match {
        let any_user = !(Self::USER_MAX);
        Match {
            src,
            tag: Self::user(ctx, tag.unwrap_or(0)),
            mask: if tag.is_some() { u64::MAX } else { any_user },
        }
    }

    /// Base tag of one collective call; schedules add their phase to it.
    pub fn collective(ctx: u32, seq: u32) -> u64 {
        ((ctx as u64) << 32) | Self::COLL_BIT | (((seq as u64) & Self::SEQ_MASK) << 12)
    }

    /// A collective base tag plus a schedule phase.
    pub fn with_phase(base: u64, phase: u16) -> u64 {
        base | (phase as u64 & Self::PHASE_MASK)
    }

    /// Splits a tag into (context, is_collective, sequence or user tag, phase).
    pub fn decode(tag: u64) -> (u32, bool, u64, u16) {
        let ctx = (tag >> 32) as u32;
        if tag & Self::COLL_BIT != 0 {
            (
                ctx,
                true,
                (tag >> 12) & Self::SEQ_MASK,
                (tag & Self::PHASE_MASK) as u16,
            )
        } else {
            (ctx, false, tag & Self::USER_MAX, 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_of_different_contexts_and_kinds_never_collide() {
        let a = Tag::with_phase(Tag::collective(1, 5), 3);
        let b = Tag::with_phase(Tag::collective(2, 5), 3);
        let c = Tag::user(1, a & Tag::USER_MAX);
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!(Tag::decode(a), (1, true, 5, 3));
        assert_eq!(Tag::decode(Tag::user(7, 42)), (7, false, 42, 0));
        // The sequence wraps instead of spilling into the context.
        assert_eq!(Tag::decode(Tag::collective(9, 1 << 19)).0, 9);
    }
}
