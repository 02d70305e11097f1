//! The order segments came in, which both peers remember the same way, so the sender
//! can name a segment as "what followed last time" in one byte.
//!
//! Versioned data keeps its order: the second release of a tree repeats the first one's
//! segments in the first one's order, with a few changed. The seed names every repeated
//! segment by its fingerprint (6 bytes); between two releases of a source tarball those
//! fingerprints were a tenth of vargr's bytes, and the fingerprints naming delta bases
//! another tenth. Here both sides keep a *successor* map (segment → the segment that
//! followed it) and a *cursor* (where in an earlier stream the current one is), and the
//! sender says "the successor of the cursor" instead of a fingerprint (as in
//! stream-informed delta compression, Shilane et al., FAST 2012).
//!
//! Both sides must update the model identically, from what the wire says:
//! - the cursor moves per segment (to a repeat's fingerprint, to a delta's anchor base,
//!   to a pushed segment's own fingerprint);
//! - successor links are made when a group's conservative hash is announced, in order,
//!   from the group's segments' optimistic fingerprints; a segment whose delta comes
//!   later in a batch holds the links after it until the batch arrives.
//!
//! A receiver that cannot tell a segment's fingerprint in time (a delta it could not
//! decode) breaks the chain there and marks its model dirty. A mismatch is never a wrong
//! byte, only a cost: a prediction the receiver cannot resolve is requested, and a wrong
//! one fails the group's conservative hash. Models are compared by [`Token`] at the
//! start of every session, and reset on both sides when they differ.

use std::collections::VecDeque;

use xxhash_rust::xxh3::xxh3_64;

use crate::aged::AgedMap;
use crate::fp::Fingerprint;

/// What identifies a model's state: both peers hold equal tokens iff they saw the same
/// streams since their last common reset (barring a dirty receiver, whose token never
/// matches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Token {
    /// Chosen by the sender at a reset; 0 for a model that was never reset.
    pub epoch: u64,
    /// Segments committed since.
    pub commits: u64,
}

/// Commit count of a dirty model: no sender's token equals it.
const DIRTY: u64 = u64::MAX;

/// One side's successor map and stream position.
#[derive(Debug, Clone)]
pub struct StreamModel {
    /// Segment → the segment that followed it most recently.
    next: AgedMap,
    epoch: u64,
    commits: u64,
    dirty: bool,
    cursor: Option<Fingerprint>,
    /// The last committed segment, which the next one will follow.
    last: Option<Fingerprint>,
    /// Segments not yet linked, in order.
    pending: VecDeque<Seen>,
}

/// What one side knows of a segment that passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Its fingerprint.
    Known(Fingerprint),
    /// Nothing (a delta this side could not decode): the chain breaks here.
    Unknown,
    /// A delta whose bytes come in a later batch (the sender knows the fingerprint).
    Deferred(Option<Fingerprint>),
}

const MAGIC: &[u8; 8] = b"VSTREAM1";

impl StreamModel {
    /// An empty model of at most `capacity` successor links (0: none kept, nothing
    /// predicted).
    pub fn new(capacity: usize) -> StreamModel {
        StreamModel {
            next: AgedMap::new(capacity),
            epoch: 0,
            commits: 0,
            dirty: false,
            cursor: None,
            last: None,
            pending: VecDeque::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.next.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn token(&self) -> Token {
        Token {
            epoch: self.epoch,
            commits: if self.dirty { DIRTY } else { self.commits },
        }
    }

    /// Forgets everything and starts over at `epoch` (both sides, at the same point of
    /// the stream).
    pub fn reset(&mut self, epoch: u64) {
        *self = StreamModel {
            epoch,
            ..StreamModel::new(self.next.capacity())
        };
    }

    /// Forgets the stream position only (a new session): the links stay.
    pub fn restart(&mut self) {
        self.cursor = None;
        self.last = None;
        self.pending.clear();
    }

    /// Marks the model as possibly unlike the peer's, so the next session resets it.
    pub fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    pub fn cursor(&self) -> Option<Fingerprint> {
        self.cursor
    }

    /// The segment that followed `f` last time.
    pub fn successor(&self, f: Fingerprint) -> Option<Fingerprint> {
        self.next.get(f.0)
    }

    /// What the next segment is expected to be: the successor of the cursor.
    pub fn predicted(&self) -> Option<Fingerprint> {
        self.cursor.and_then(|c| self.successor(c))
    }

    /// `first` and up to `n - 1` of its successors (stopping at a loop).
    pub fn run_from(&self, first: Fingerprint, n: usize) -> Vec<Fingerprint> {
        let mut run = vec![first];
        while run.len() < n {
            match self.successor(run[run.len() - 1]) {
                Some(s) if !run.contains(&s) => run.push(s),
                _ => break,
            }
        }
        run
    }

    /// One segment passed: the stream is now at `cursor`, and the segment was `seen`.
    pub fn advance(&mut self, cursor: Option<Fingerprint>, seen: Seen) {
        self.cursor = cursor;
        if self.next.capacity() > 0 {
            self.pending.push_back(seen);
        }
    }

    /// A group closed: links its segments in order, up to the first deferred one.
    pub fn commit(&mut self) {
        while let Some(&seen) = self.pending.front() {
            let fp = match seen {
                Seen::Known(f) => Some(f),
                Seen::Unknown => None,
                Seen::Deferred(_) => break,
            };
            self.pending.pop_front();
            match (self.last, fp) {
                (Some(prev), Some(f)) => self.link(prev, f),
                (_, None) => self.dirty = true,
                _ => {}
            }
            self.last = fp;
            self.commits = self.commits.wrapping_add(1);
        }
        self.next.evict();
    }

    /// A batch of deferred deltas arrived: the deferred segments were `fps`, in order
    /// (`None`: not decoded here); then links what can be.
    pub fn resolve(&mut self, fps: impl IntoIterator<Item = Option<Fingerprint>>) {
        let mut fps = fps.into_iter();
        for seen in self.pending.iter_mut() {
            if let Seen::Deferred(_) = seen {
                *seen = match fps.next().flatten() {
                    Some(f) => Seen::Known(f),
                    None => Seen::Unknown,
                };
            }
        }
        self.commit();
    }

    fn link(&mut self, prev: Fingerprint, f: Fingerprint) {
        self.next.insert(prev.0, f);
    }

    /// The model as bytes (token, then links oldest first), with a checksum. The stream
    /// position is not kept: a session starts with none.
    pub fn to_bytes(&self) -> Vec<u8> {
        let live: Vec<(u64, Fingerprint)> = self.next.live().collect();
        let token = self.token();
        let mut out = Vec::with_capacity(40 + live.len() * 16);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&token.epoch.to_le_bytes());
        out.extend_from_slice(&token.commits.to_le_bytes());
        out.extend_from_slice(&(live.len() as u64).to_le_bytes());
        for (k, f) in live {
            out.extend_from_slice(&k.to_le_bytes());
            out.extend_from_slice(&f.0.to_le_bytes());
        }
        let sum = xxh3_64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// A model read back from [`StreamModel::to_bytes`]; `None` if the bytes are
    /// damaged (start with an empty one: the tokens then differ and both sides reset).
    pub fn from_bytes(bytes: &[u8], capacity: usize) -> Option<StreamModel> {
        let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
        if xxh3_64(body).to_le_bytes() != sum || body.get(..8)? != MAGIC {
            return None;
        }
        let word = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?))
        };
        let (epoch, commits, n) = (word(8)?, word(16)?, word(24)?);
        let links = body.get(32..)?;
        if links.len() as u64 != n.checked_mul(16)? {
            return None;
        }
        let mut m = StreamModel::new(capacity);
        m.epoch = epoch;
        m.dirty = commits == DIRTY;
        m.commits = if m.dirty { 0 } else { commits };
        for e in links.chunks_exact(16) {
            let k = u64::from_le_bytes(e[..8].try_into().ok()?);
            let f = u64::from_le_bytes(e[8..].try_into().ok()?);
            m.link(Fingerprint(k), Fingerprint(f));
        }
        m.next.evict();
        Some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(i: u64) -> Option<Fingerprint> {
        Some(Fingerprint(i))
    }

    fn seen(f: Option<Fingerprint>) -> Seen {
        f.map_or(Seen::Unknown, Seen::Known)
    }

    #[test]
    fn a_stream_seen_once_is_predicted_the_second_time() {
        let mut m = StreamModel::new(100);
        for i in 1..=5 {
            m.advance(fp(i), seen(fp(i)));
        }
        // Nothing is linked before the group closes.
        assert_eq!(m.successor(Fingerprint(1)), None);
        m.commit();
        assert_eq!(
            m.run_from(Fingerprint(2), 3),
            vec![Fingerprint(2), Fingerprint(3), Fingerprint(4)]
        );
        m.restart();
        assert_eq!(m.predicted(), None);
        m.advance(fp(1), seen(fp(1)));
        assert_eq!(m.predicted(), Some(Fingerprint(2)));
        // A changed segment that went as a delta on 2 keeps the stream at 2.
        m.advance(fp(2), seen(fp(99)));
        assert_eq!(m.predicted(), Some(Fingerprint(3)));
        assert_eq!(
            m.token(),
            Token {
                epoch: 0,
                commits: 5
            }
        );
    }

    #[test]
    fn an_unknown_segment_breaks_the_chain_and_dirties_the_model() {
        let mut m = StreamModel::new(100);
        for f in [fp(1), None, fp(3)] {
            m.advance(f, seen(f));
        }
        m.commit();
        assert_eq!(m.successor(Fingerprint(1)), None);
        assert_eq!(m.successor(Fingerprint(3)), None);
        assert_eq!(m.token().commits, DIRTY);
        m.reset(7);
        assert_eq!(
            m.token(),
            Token {
                epoch: 7,
                commits: 0
            }
        );
    }

    #[test]
    fn links_after_a_deferred_delta_wait_for_its_batch() {
        let mut m = StreamModel::new(100);
        m.advance(fp(1), seen(fp(1)));
        m.advance(fp(7), Seen::Deferred(None));
        m.advance(fp(3), seen(fp(3)));
        m.commit();
        assert_eq!(m.token().commits, 1);
        assert_eq!(m.successor(Fingerprint(1)), None);
        m.resolve([fp(2)]);
        assert_eq!(m.successor(Fingerprint(1)), Some(Fingerprint(2)));
        assert_eq!(m.successor(Fingerprint(2)), Some(Fingerprint(3)));
        assert_eq!(
            m.token(),
            Token {
                epoch: 0,
                commits: 3
            }
        );
    }

    #[test]
    fn the_model_is_bounded_and_survives_a_round_trip_but_not_damage() {
        let mut m = StreamModel::new(30);
        for i in 0..50 {
            m.advance(fp(i), seen(fp(i)));
        }
        m.commit();
        assert!(m.len() <= 30);
        assert_eq!(m.successor(Fingerprint(48)), Some(Fingerprint(49)));
        let bytes = m.to_bytes();
        let back = StreamModel::from_bytes(&bytes, 30).unwrap();
        assert_eq!(back.len(), m.len());
        assert_eq!(back.token(), m.token());
        assert_eq!(back.successor(Fingerprint(48)), Some(Fingerprint(49)));
        let mut bad = bytes.clone();
        bad[40] ^= 1;
        assert!(StreamModel::from_bytes(&bad, 30).is_none());
        assert!(StreamModel::from_bytes(&bytes[..10], 30).is_none());
        assert!(StreamModel::from_bytes(&bytes, 6).unwrap().len() <= 6);
    }
}
