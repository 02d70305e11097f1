//! Delta encoding of a segment against a similar one both peers hold.
//!
//! Fingerprints only pay for segments repeated exactly. Between two releases of a source
//! tree most changed segments differ from an old one in a few bytes (a version string, a
//! timestamp), and sending them whole cost vargr 8-16× the bytes of
//! `zstd --patch-from`. A segment sent as a delta against a similar cached one (found by
//! [`crate::similar`]) costs only its differences.
//!
//! The format is a list of operations, each a LEB128 varint `x`:
//! - `x` even: insert the next `x / 2` bytes, which follow inline;
//! - `x` odd: copy `x / 2 + MIN_COPY` bytes of the base from an offset given by a
//!   zigzag varint relative to where the previous copy ended plus the bytes inserted
//!   since (an edit that replaces bytes one for one then costs a zero offset).
//!
//! Inserted bytes are left raw: the link's compressor (the sync stream's zstd, the codec
//! stage) sees them together with everything else it has seen, which beats compressing
//! each small delta alone.
//!
//! The encoder is greedy, in the manner of xdelta: an 8-byte hash index of the base, each
//! match extended both ways, and the "same place, after the edit" offset tried first.

use thiserror::Error;

use crate::protocol::put_varint;

/// Shortest copy; shorter matches cost more as a copy than as an insert.
const MIN_COPY: usize = 8;
/// Bytes hashed to find a match.
const KEY: usize = 8;

/// Why a delta did not decode. A faithful peer's delta fails only when the receiver's
/// base is another segment than the sender's (a fingerprint collision).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DeltaError {
    #[error("delta: malformed {what} at byte {at}")]
    Malformed { what: &'static str, at: usize },
    #[error("delta: copy of {len} bytes from offset {offset} lies outside the {base}-byte base")]
    CopyOutside {
        offset: i64,
        len: usize,
        base: usize,
    },
    #[error("delta: output of {got} bytes, {want} announced")]
    Length { got: usize, want: usize },
}

/// Appends to `out` the delta that rebuilds `target` from `base` (a convenience over
/// [`Encoder`], which keeps its index table between calls).
pub fn encode(base: &[u8], target: &[u8], out: &mut Vec<u8>) {
    Encoder::default().encode(base, target, 0, out);
}

/// A delta encoder; reusing one saves allocating its index for every segment.
#[derive(Default)]
pub struct Encoder {
    slots: Vec<u32>,
}

/// Literal bytes in a row before the encoder indexes the base: edits that replace bytes
/// one for one (a version string, a timestamp) are found without an index, at the same
/// place after the edit. A tar header's size, mtime and checksum lie side by side (32
/// bytes); at 16 nearly every segment of a release tar paid for an index of its base
/// (most of the encoder's time) and its deltas took 344 KB, at 64 they took 338 KB,
/// and at 256 (longer runs of new text sent whole) 381 KB.
const LAZY: usize = 64;

impl Encoder {
    /// Appends to `out` the delta that rebuilds `target` from `base`, where `target`
    /// probably starts at `start` in `base` (a hint; any value is correct).
    pub fn encode(&mut self, base: &[u8], target: &[u8], start: usize, out: &mut Vec<u8>) {
        let mut index: Option<BaseIndex> = None;
        let n = target.len();
        let (mut p, mut lit) = (0usize, 0usize);
        // Where the last copy ended: the reference of the next offset on the wire, and
        // (from the hint at first) where the next match is expected.
        let (mut base_end, mut expect) = (0usize, start);
        while p + KEY <= n {
            let mut found = match_at(base, target, p, expect + (p - lit), MIN_COPY);
            if found.is_none() && (index.is_some() || p - lit >= LAZY) {
                // The whole base: a window around the hint missed text that moved
                // within a run of large segments (between two Django release tars cut
                // at 32 KiB: 1.44 MB of deltas instead of 1.24, 0.94 MB of it
                // inserted bytes instead of 0.78).
                let ix = index.get_or_insert_with(|| {
                    BaseIndex::new(base, 0..base.len(), std::mem::take(&mut self.slots))
                });
                found = ix
                    .lookup(target, p)
                    .and_then(|q| match_at(base, target, p, q, MIN_COPY));
            }
            let Some((q, len)) = found else {
                // Through new bytes, look less and less often (as LZ4 does).
                p += 1 + ((p - lit) >> 6);
                continue;
            };
            // Extend backwards over literals that match too.
            let back = (1..=(p - lit).min(q))
                .take_while(|&k| base[q - k] == target[p - k])
                .last()
                .unwrap_or(0);
            let (p0, q0, len) = (p - back, q - back, len + back);
            if p0 > lit {
                put_insert(&target[lit..p0], out);
            }
            put_varint((((len - MIN_COPY) as u64) << 1) | 1, out);
            // Relative to where a one-for-one replacement of the insert would put it.
            let expected = base_end + (p0 - lit);
            put_varint(zigzag(q0 as i64 - expected as i64), out);
            base_end = q0 + len;
            expect = base_end;
            p = p0 + len;
            lit = p;
        }
        if lit < n {
            put_insert(&target[lit..], out);
        }
        if let Some(ix) = index {
            self.slots = ix.slots;
        }
    }
}

/// One operation of a delta.
enum Op<'a> {
    Insert(&'a [u8]),
    /// `len` bytes of the base from `offset` (not yet checked against the base).
    Copy {
        offset: i64,
        len: usize,
    },
}

/// The operations of `delta` in order, with copy offsets made absolute.
fn ops(delta: &[u8]) -> impl Iterator<Item = Result<Op<'_>, DeltaError>> + '_ {
    let mut at = 0usize;
    let mut base_end = 0i64;
    // Bytes inserted since the last copy.
    let mut inserted = 0i64;
    let mut failed = false;
    std::iter::from_fn(move || {
        if at >= delta.len() || failed {
            return None;
        }
        let op = (|| {
            let x = varint(delta, &mut at, "operation")?;
            if x & 1 == 0 {
                let k = usize::try_from(x >> 1).unwrap_or(usize::MAX);
                let bytes = delta
                    .get(at..at.saturating_add(k))
                    .ok_or(DeltaError::Malformed {
                        what: "insert (runs past the end)",
                        at,
                    })?;
                at += k;
                inserted += k as i64;
                return Ok(Op::Insert(bytes));
            }
            let len = usize::try_from(x >> 1)
                .ok()
                .and_then(|k| k.checked_add(MIN_COPY))
                .ok_or(DeltaError::Malformed {
                    what: "copy length",
                    at,
                })?;
            let rel = unzigzag(varint(delta, &mut at, "copy offset")?);
            let offset = (base_end + inserted)
                .checked_add(rel)
                .and_then(|o| o.checked_add(len as i64).map(|end| (o, end)))
                .ok_or(DeltaError::Malformed {
                    what: "copy offset",
                    at,
                })?;
            base_end = offset.1;
            inserted = 0;
            Ok(Op::Copy {
                offset: offset.0,
                len,
            })
        })();
        failed = op.is_err();
        Some(op)
    })
}

/// Rebuilds a segment of `len` bytes from `base` and `delta`; refuses anything longer.
pub fn decode(base: &[u8], delta: &[u8], len: usize) -> Result<Vec<u8>, DeltaError> {
    let mut out = Vec::with_capacity(len);
    for op in ops(delta) {
        let bytes = match op? {
            Op::Insert(bytes) => bytes,
            Op::Copy { offset, len: k } => usize::try_from(offset)
                .ok()
                .and_then(|o| base.get(o..o.checked_add(k)?))
                .ok_or(DeltaError::CopyOutside {
                    offset,
                    len: k,
                    base: base.len(),
                })?,
        };
        check_len(out.len(), bytes.len(), len)?;
        out.extend_from_slice(bytes);
    }
    if out.len() != len {
        return Err(DeltaError::Length {
            got: out.len(),
            want: len,
        });
    }
    Ok(out)
}

/// The ranges of the base that `delta` copies from, in its order (a delta this module
/// made; a malformed one yields what came before the fault).
pub fn copied(delta: &[u8]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    ops(delta)
        .map_while(|op| match op {
            Ok(Op::Copy { offset, len }) => {
                let start = usize::try_from(offset).ok()?;
                Some(start..start + len)
            }
            Ok(Op::Insert(_)) => Some(0..0),
            Err(_) => None,
        })
        .filter(|r| !r.is_empty())
}

fn check_len(have: usize, add: usize, want: usize) -> Result<(), DeltaError> {
    if have.saturating_add(add) > want {
        return Err(DeltaError::Length {
            got: have.saturating_add(add),
            want,
        });
    }
    Ok(())
}

fn put_insert(bytes: &[u8], out: &mut Vec<u8>) {
    put_varint((bytes.len() as u64) << 1, out);
    out.extend_from_slice(bytes);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn varint(buf: &[u8], at: &mut usize, what: &'static str) -> Result<u64, DeltaError> {
    let start = *at;
    let mut v = 0u64;
    for i in 0..10 {
        let &b = buf
            .get(*at)
            .ok_or(DeltaError::Malformed { what, at: start })?;
        *at += 1;
        if i == 9 && b > 1 {
            break;
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(DeltaError::Malformed { what, at: start })
}

/// Where `target[p..]` matches `base[q..]`, and for how long, if at least `min` bytes.
fn match_at(base: &[u8], target: &[u8], p: usize, q: usize, min: usize) -> Option<(usize, usize)> {
    let len = common_prefix(base.get(q..)?, &target[p..]);
    (len >= min).then_some((q, len))
}

/// Length of the common prefix of `a` and `b`, eight bytes at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().expect("8 bytes"))
            ^ u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if x != 0 {
            return i + (x.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// Positions in the base of the 8-byte keys at every `STEP`-th offset (the last one
/// wins), in an open table without collision handling: a miss costs a literal, never a
/// wrong copy, because every candidate is checked. A match of `KEY + STEP - 1` bytes or
/// more covers an indexed offset and is found there, then extended backwards.
struct BaseIndex {
    slots: Vec<u32>,
    shift: u32,
}

/// Every eighth offset: between two Django release tars, against every fourth, the
/// sender pipeline ran 10-15 % faster and the deltas took 328 KB instead of 338 (fewer
/// keys, fewer of them overwritten in the table).
const STEP: usize = 8;

impl BaseIndex {
    /// Indexes the keys starting in `range` of `base`.
    fn new(base: &[u8], range: std::ops::Range<usize>, mut slots: Vec<u32>) -> BaseIndex {
        let keys = range.len() / STEP + 1;
        let bits = (keys.next_power_of_two().trailing_zeros() + 1).clamp(4, 22);
        slots.clear();
        slots.resize(1 << bits, 0);
        let shift = 64 - bits;
        let last = range.end.min(base.len().saturating_sub(KEY - 1));
        if range.start < last {
            for q in (range.start..last).step_by(STEP) {
                slots[hash(&base[q..], shift)] = q as u32 + 1;
            }
        }
        BaseIndex { slots, shift }
    }

    fn lookup(&self, target: &[u8], p: usize) -> Option<usize> {
        let q = self.slots[hash(&target[p..], self.shift)];
        (q != 0).then(|| q as usize - 1)
    }
}

fn hash(at: &[u8], shift: u32) -> usize {
    let k = u64::from_le_bytes(at[..KEY].try_into().expect("8 bytes"));
    (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> shift) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn copied_names_the_base_ranges_a_delta_reads() {
        let base = crate::testdata::random(4000, 3);
        // The target takes 1000..1600 of the base, then new bytes, then 1700..2000.
        let mut target = base[1000..1600].to_vec();
        target.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        target.extend_from_slice(&base[1700..2000]);
        let mut d = Vec::new();
        encode(&base, &target, &mut d);
        let got: Vec<_> = copied(&d).collect();
        assert_eq!(got, vec![1000..1600, 1700..2000]);
        // A malformed delta yields what came before the fault.
        assert_eq!(copied(&[0x81]).count(), 0);
    }

    fn round(base: &[u8], target: &[u8]) -> usize {
        let mut d = Vec::new();
        encode(base, target, &mut d);
        assert_eq!(decode(base, &d, target.len()).unwrap(), target);
        d.len()
    }

    #[test]
    fn a_small_edit_costs_a_few_bytes() {
        let base = crate::testdata::random(4096, 0x1234_5678_9abc_def1);
        let mut t = base.clone();
        t[1000..1005].copy_from_slice(b"5.0.2");
        t.splice(3000..3000, b"inserted".iter().copied());
        assert!(round(&base, &t) < 40, "{}", round(&base, &t));
        assert_eq!(round(&base, &base), 3);
        assert_eq!(round(b"", b"abc"), 4);
        assert_eq!(round(b"abc", b""), 0);
    }

    #[test]
    fn text_from_far_off_in_a_long_base_is_copied_not_inserted() {
        // A run of three 64 KiB segments; the target, hinted at the second one, holds
        // 4 KiB from the end of the third (a file that moved between releases).
        let base = crate::testdata::random(3 << 16, 0x5eed);
        let mut t = base[1 << 16..(1 << 16) + 8192].to_vec();
        t.extend_from_slice(&base[base.len() - 4096..]);
        let mut d = Vec::new();
        Encoder::default().encode(&base, &t, 1 << 16, &mut d);
        assert_eq!(decode(&base, &d, t.len()).unwrap(), t);
        assert!(d.len() < 16, "{} bytes of delta", d.len());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let base = b"0123456789abcdef";
        // A copy past the base.
        let mut d = Vec::new();
        put_varint(((20 - MIN_COPY as u64) << 1) | 1, &mut d);
        put_varint(0, &mut d);
        assert!(matches!(
            decode(base, &d, 20),
            Err(DeltaError::CopyOutside { .. })
        ));
        // An insert longer than the announced length.
        assert!(matches!(
            decode(base, &[8, 1, 2, 3, 4], 2),
            Err(DeltaError::Length { .. })
        ));
        // Cut short, and a varint that never ends.
        assert!(matches!(
            decode(base, &[8, 1], 4),
            Err(DeltaError::Malformed { .. })
        ));
        assert!(decode(base, &[0xff; 12], 4).is_err());
        // Too short an output.
        assert!(matches!(
            decode(base, &[2, 1], 4),
            Err(DeltaError::Length { .. })
        ));
    }

    proptest! {
        #[test]
        fn edits_round_trip(
            base in proptest::collection::vec(any::<u8>(), 0..3000),
            edits in proptest::collection::vec((any::<u16>(), 0usize..40, proptest::collection::vec(any::<u8>(), 0..40)), 0..8),
        ) {
            let mut t = base.clone();
            for (at, del, ins) in edits {
                let at = usize::from(at) % (t.len() + 1);
                let end = (at + del).min(t.len());
                t.splice(at..end, ins);
            }
            round(&base, &t);
        }

        #[test]
        fn decoding_anything_never_panics(
            base in proptest::collection::vec(any::<u8>(), 0..64),
            delta in proptest::collection::vec(any::<u8>(), 0..64),
            len in 0usize..200,
        ) {
            if let Ok(v) = decode(&base, &delta, len) {
                prop_assert_eq!(v.len(), len);
            }
        }
    }
}
