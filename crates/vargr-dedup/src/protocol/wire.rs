//! The two-level fingerprint protocol's messages, as bytes.
//!
//! Every message starts with a type byte; nothing else is framed, so the most frequent
//! message, a fingerprint, costs one byte plus the fingerprint. Sizes against the seed's
//! Table 18 (5-byte optimistic fingerprints):
//!
//! | message | here | seed | notes |
//! |---|---|---|---|
//! | optimistic fingerprint | 1 + F = 6 | 6 + M | layout metadata travels once per message, not per segment |
//! | pushed segment | 1 + v + S (3 + S under 16 KiB) | 3 + S ("no-fingerprint") | a segment the sender knows the receiver lacks; cached |
//! | deferred delta segment | 2 + B + L·F + v | (none) | a delta segment whose bytes come in the next batch |
//! | delta batch | 1 + v + Z | (none) | the deferred segments since the last batch, as one zstd frame over their bases (deduplicated, in order) as prefix |
//! | predicted segment | 1 | (none) | the cached segment that followed the stream's cursor last time ([`crate::stream`]) |
//! | delta segment | 2 + B + L·F + v + v + D | (none) | a new segment as a delta (D bytes) against B ≤ 4 cached segments, concatenated; L of them named by fingerprint, the rest by one byte: the cursor, the successor of the base before, or an index into the 16 fingerprints both sides named last |
//! | segment request | 5 | 5 | u32 sequence number |
//! | segment (answer) | 1 + 4 + v + S (7 + S) | 7 + S | |
//! | conservative fingerprint | 17 | 21 | BLAKE3 cut to 128 bits, not SHA-1's 160 |
//! | acknowledgement | 1 | 1 | in the order of the conservative fingerprints |
//! | message start | 1 + v + v + layout + v | 3 (multiplex) | channel, layout, segment count |
//! | hello | 3 + v + 8 + v | (none) | version, fingerprint bits, group size, the sender's stream model token |
//! | resync / reset | 1 / 9 | (none) | the receiver's stream model differs; the sender restarts both at a new epoch |
//!
//! `v` is a LEB128 varint. Decoding faces the peer's bytes: every length is checked
//! against a limit before anything is allocated, and a message cut short is "not yet",
//! never an error, so input may arrive in any pieces.

use crate::fp::{Fingerprint, FpBits, CONSERVATIVE_LEN};
use crate::stream::Token;

use super::ProtocolError;

/// Sender → receiver: protocol version and parameters; first on every session.
pub(crate) const T_HELLO: u8 = 0x01;
/// Sender → receiver: a message begins (channel, layout, segment count).
pub(crate) const T_MESSAGE: u8 = 0x02;
/// Sender → receiver: the next segment is the cached one with this fingerprint.
pub(crate) const T_FP: u8 = 0x03;
/// Sender → receiver: the next segment, inline.
pub(crate) const T_PUSH: u8 = 0x04;
/// Sender → receiver: the group just announced hashes to this.
pub(crate) const T_CFP: u8 = 0x05;
/// Sender → receiver: a requested segment.
pub(crate) const T_SEGMENT: u8 = 0x06;
/// Sender → receiver: the next segment, as a delta against cached segments.
pub(crate) const T_DELTA: u8 = 0x07;
/// Sender → receiver: the next segment is the successor of the stream's cursor.
pub(crate) const T_NEXT: u8 = 0x08;
/// Sender → receiver: both stream models restart empty here, at this epoch.
pub(crate) const T_RESET: u8 = 0x09;
/// Sender → receiver: the next segment is a delta whose bytes come in the next batch.
pub(crate) const T_DEFERRED: u8 = 0x0a;
/// Sender → receiver: the bytes of the deferred delta segments since the last batch.
pub(crate) const T_BATCH: u8 = 0x0b;
/// Receiver → sender: send segment `seq`.
pub(crate) const T_REQUEST: u8 = 0x10;
/// Receiver → sender: the oldest unacknowledged group checked out.
pub(crate) const T_ACK: u8 = 0x11;
/// Receiver → sender: my stream model is not yours; reset both.
pub(crate) const T_RESYNC: u8 = 0x12;

/// Protocol version in the hello (2 added delta segments, 3 the stream model).
pub(crate) const VERSION: u8 = 3;

/// Most cached segments one delta may be taken against.
pub(crate) const MAX_BASES: usize = 4;

/// One decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Msg<'a> {
    Hello {
        version: u8,
        bits: u8,
        group: u32,
        token: Token,
    },
    Message {
        channel: u32,
        layout: &'a [u8],
        segments: u64,
    },
    Fp(Fingerprint),
    Next,
    Reset(u64),
    Resync,
    Push(&'a [u8]),
    Delta(Delta<'a>),
    Batch(&'a [u8]),
    Cfp([u8; CONSERVATIVE_LEN]),
    Segment {
        seq: u32,
        data: &'a [u8],
    },
    Request(u32),
    Ack,
}

/// A delta segment: `len` bytes rebuilt from `delta` and the concatenation of `n`
/// cached segments named in `refs`, each by one byte: an index into the table of recent
/// fingerprints both sides keep (below [`RECENT`]), [`REF_CURSOR`], [`REF_NEXT`], or
/// [`REF_LITERAL`] and the fingerprint itself. The stream's cursor moves to base
/// `anchor` (sent in the high bits of the count byte).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delta<'a> {
    pub n: usize,
    pub anchor: usize,
    pub refs: &'a [u8],
    pub fp_len: usize,
    pub len: usize,
    /// `None` for a deferred delta (its bytes come in a batch).
    pub delta: Option<&'a [u8]>,
}

/// Size of the table of recent fingerprints.
pub(crate) const RECENT: usize = 16;
/// A base reference followed by a fingerprint.
pub(crate) const REF_LITERAL: u8 = 0xff;
/// The successor of the base before (of the cursor, for the first base).
pub(crate) const REF_NEXT: u8 = 0xfe;
/// The stream's cursor.
pub(crate) const REF_CURSOR: u8 = 0xfd;

/// A base of a delta as the wire names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BaseRef {
    Recent(usize),
    Literal(Fingerprint),
    Next,
    Cursor,
}

impl Delta<'_> {
    pub fn bases(&self) -> impl Iterator<Item = BaseRef> + '_ {
        let mut at = 0;
        (0..self.n).map(move |_| {
            let tag = self.refs[at];
            at += 1;
            if tag == REF_LITERAL {
                let b = &self.refs[at..at + self.fp_len];
                at += self.fp_len;
                let mut v = [0u8; 8];
                v[..b.len()].copy_from_slice(b);
                BaseRef::Literal(Fingerprint(u64::from_le_bytes(v)))
            } else if tag == REF_NEXT {
                BaseRef::Next
            } else if tag == REF_CURSOR {
                BaseRef::Cursor
            } else {
                BaseRef::Recent(usize::from(tag))
            }
        })
    }
}

/// Limits on what a decoder accepts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub bits: FpBits,
    pub max_segment: usize,
    pub max_layout: usize,
    pub max_batch: usize,
}

pub(crate) fn put_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn put_fp(fp: Fingerprint, bits: FpBits, out: &mut Vec<u8>) {
    out.extend_from_slice(&fp.0.to_le_bytes()[..bits.wire_len()]);
}

/// A cursor over input that tells "cut short" (`Ok(None)`) from "wrong" (`Err`).
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf[0]` in the whole stream, for errors.
    base: u64,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }

    /// A little-endian u64.
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn varint(&mut self, what: &'static str) -> Result<Option<u64>, ProtocolError> {
        let mut v = 0u64;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Ok(None);
            };
            self.pos += 1;
            let bits = u64::from(b & 0x7f);
            if i == 9 && bits > 1 {
                break;
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(Some(v));
            }
        }
        Err(ProtocolError::Malformed {
            what,
            offset: self.base + self.pos as u64,
        })
    }

    fn len(&mut self, what: &'static str, max: usize) -> Result<Option<usize>, ProtocolError> {
        let at = self.base + self.pos as u64;
        match self.varint(what)? {
            None => Ok(None),
            Some(n) if n <= max as u64 => Ok(Some(n as usize)),
            Some(n) => Err(ProtocolError::TooLarge {
                what,
                len: n,
                max: max as u64,
                offset: at,
            }),
        }
    }
}

macro_rules! need {
    ($e:expr) => {
        match $e {
            Some(v) => v,
            None => return Ok(None),
        }
    };
}

/// Decodes the message at the front of `buf` (whose first byte is at stream offset
/// `base`). `Ok(None)`: not all of it is here yet. Returns the message and its length.
pub(crate) fn decode<'a>(
    buf: &'a [u8],
    base: u64,
    limits: &Limits,
) -> Result<Option<(Msg<'a>, usize)>, ProtocolError> {
    let mut c = Cursor { buf, pos: 0, base };
    let ty = *need!(c.take(1)).first().expect("take(1) gives one byte");
    let msg = match ty {
        T_HELLO => {
            let b = need!(c.take(2));
            let group = need!(c.len("group size", u32::MAX as usize)?) as u32;
            let epoch = need!(c.u64());
            let commits = need!(c.varint("stream model commits")?);
            Msg::Hello {
                version: b[0],
                bits: b[1],
                group,
                token: Token { epoch, commits },
            }
        }
        T_NEXT => Msg::Next,
        T_RESET => Msg::Reset(need!(c.u64())),
        T_RESYNC => Msg::Resync,
        T_MESSAGE => {
            let channel = need!(c.len("channel", u32::MAX as usize)?) as u32;
            let n = need!(c.len("layout length", limits.max_layout)?);
            let layout = need!(c.take(n));
            let segments = need!(c.varint("segment count")?);
            Msg::Message {
                channel,
                layout,
                segments,
            }
        }
        T_FP => {
            let b = need!(c.take(limits.bits.wire_len()));
            let mut v = [0u8; 8];
            v[..b.len()].copy_from_slice(b);
            Msg::Fp(Fingerprint(u64::from_le_bytes(v)))
        }
        T_PUSH => {
            let n = need!(c.len("pushed segment length", limits.max_segment)?);
            Msg::Push(need!(c.take(n)))
        }
        T_DELTA | T_DEFERRED => {
            let at = base + c.pos as u64;
            let count = need!(c.take(1))[0];
            let (n, anchor) = (usize::from(count & 0x0f), usize::from(count >> 4));
            if !(1..=MAX_BASES).contains(&n) || anchor >= n {
                return Err(ProtocolError::Malformed {
                    what: "delta segment (base count not 1 to 4, or anchor past it)",
                    offset: at,
                });
            }
            let fp_len = limits.bits.wire_len();
            let refs_at = c.pos;
            for _ in 0..n {
                let tag = need!(c.take(1))[0];
                if tag == REF_LITERAL {
                    need!(c.take(fp_len));
                } else if tag != REF_NEXT && tag != REF_CURSOR && usize::from(tag) >= RECENT {
                    return Err(ProtocolError::Malformed {
                        what: "delta segment (base reference beyond the recent table)",
                        offset: base + c.pos as u64 - 1,
                    });
                }
            }
            let refs = &buf[refs_at..c.pos];
            let len = need!(c.len("delta segment length", limits.max_segment)?);
            let delta = if ty == T_DELTA {
                let d = need!(c.len("delta length", limits.max_segment)?);
                Some(need!(c.take(d)))
            } else {
                None
            };
            Msg::Delta(Delta {
                n,
                anchor,
                refs,
                fp_len,
                len,
                delta,
            })
        }
        T_BATCH => {
            let n = need!(c.len("delta batch length", limits.max_batch)?);
            Msg::Batch(need!(c.take(n)))
        }
        T_CFP => {
            let b = need!(c.take(CONSERVATIVE_LEN));
            Msg::Cfp(b.try_into().expect("CONSERVATIVE_LEN bytes"))
        }
        T_SEGMENT => {
            let seq = u32::from_le_bytes(need!(c.take(4)).try_into().expect("4 bytes"));
            let n = need!(c.len("segment length", limits.max_segment)?);
            Msg::Segment {
                seq,
                data: need!(c.take(n)),
            }
        }
        T_REQUEST => Msg::Request(u32::from_le_bytes(
            need!(c.take(4)).try_into().expect("4 bytes"),
        )),
        T_ACK => Msg::Ack,
        other => {
            return Err(ProtocolError::UnknownMessage {
                byte: other,
                offset: base,
            })
        }
    };
    Ok(Some((msg, c.pos)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            bits: FpBits::DEFAULT,
            max_segment: 1 << 16,
            max_layout: 1 << 10,
            max_batch: 1 << 20,
        }
    }

    #[test]
    fn sizes_match_the_table() {
        let mut b = Vec::new();
        b.push(T_FP);
        put_fp(Fingerprint(0x12_3456_789a), FpBits::DEFAULT, &mut b);
        assert_eq!(b.len(), 6);
        let (m, n) = decode(&b, 0, &limits()).unwrap().unwrap();
        assert_eq!((m, n), (Msg::Fp(Fingerprint(0x12_3456_789a)), 6));
        // Every prefix is "not yet", never an error.
        for cut in 0..b.len() {
            assert_eq!(decode(&b[..cut], 0, &limits()).unwrap(), None);
        }
    }

    #[test]
    fn oversized_lengths_are_refused_before_reading_them() {
        let mut b = vec![T_PUSH];
        put_varint(1 << 20, &mut b);
        let e = decode(&b, 100, &limits()).unwrap_err();
        assert!(
            matches!(
                e,
                ProtocolError::TooLarge {
                    what: "pushed segment length",
                    offset: 101,
                    ..
                }
            ),
            "{e}"
        );
        let e = decode(&[0x7f], 9, &limits()).unwrap_err();
        assert_eq!(e.to_string(), "unknown message type 0x7f at byte 9");
    }

    #[test]
    fn delta_bases_are_references_or_fingerprints() {
        let mut b = vec![T_DELTA, 0x13, 3, REF_LITERAL];
        put_fp(Fingerprint(0x77), FpBits::DEFAULT, &mut b);
        b.push(REF_NEXT);
        put_varint(100, &mut b);
        put_varint(2, &mut b);
        b.extend_from_slice(&[0, 0]);
        let (m, n) = decode(&b, 0, &limits()).unwrap().unwrap();
        assert_eq!(n, b.len());
        let Msg::Delta(d) = m else { panic!("{m:?}") };
        let bases: Vec<BaseRef> = d.bases().collect();
        assert_eq!(
            bases,
            vec![
                BaseRef::Recent(3),
                BaseRef::Literal(Fingerprint(0x77)),
                BaseRef::Next
            ]
        );
        assert_eq!(d.anchor, 1);
        assert_eq!((d.len, d.delta), (100, Some(&[0u8, 0][..])));
        for cut in 0..b.len() {
            assert_eq!(decode(&b[..cut], 0, &limits()).unwrap(), None);
        }
        // A reference past the table, and no bases at all.
        let e = decode(&[T_DELTA, 1, RECENT as u8], 0, &limits()).unwrap_err();
        assert!(e.to_string().contains("recent table"), "{e}");
        assert!(decode(&[T_DELTA, 0], 0, &limits()).is_err());
        // An anchor past the bases.
        assert!(decode(&[T_DELTA, 0x11, 0], 0, &limits()).is_err());
    }
}
