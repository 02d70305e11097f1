//! Aligning the clocks of a job's processes (MRNet's tree-based skew estimation), so
//! that records from different hosts land on one time axis with a known error.
//!
//! The first rank of each process takes part. They form a binomial tree over process
//! indices rooted at rank 0's process; each parent measures each child's clock with
//! [`SkewProbe::ROUNDS`] ping-pongs and sends the child its cumulative alignment (the
//! parent's plus the edge's), and the child then does the same for its own children, so
//! subtrees proceed in parallel and the whole job takes O(log P) rounds of probing.

use bytes::Bytes;
use vargr_trace::clock::trace_ns;
use vargr_trace::{Alignment, SkewProbe};

use crate::error::{CollError, Result};
use crate::transport::{Tag, Transport};

const PING: u8 = b'P';
const SET: u8 = b'S';
const TAG_CLOCK: u64 = 3;

/// Parent of process index `p` in the binomial tree (highest set bit cleared).
fn parent(p: usize) -> Option<usize> {
    (p > 0).then(|| p & !(1 << (usize::BITS - 1 - p.leading_zeros())))
}

/// Children of `p` among `n` processes, biggest subtree first.
fn children(p: usize, n: usize) -> Vec<usize> {
    let start = if p == 0 {
        0
    } else {
        usize::BITS - p.leading_zeros()
    };
    let mut c: Vec<usize> = (start..usize::BITS)
        .map(|k| p + (1usize << k))
        .take_while(|&c| c < n)
        .collect();
    c.reverse();
    c
}

fn bad(from: usize, what: &str) -> CollError {
    CollError::Job {
        reason: format!("clock alignment: malformed message from rank {from}: {what}"),
    }
}

/// Bytes of an encoded alignment.
pub(crate) const ENCODED_LEN: usize = 21;

pub(crate) fn encode(a: Alignment) -> Bytes {
    let mut b = Vec::with_capacity(ENCODED_LEN);
    b.push(SET);
    b.extend_from_slice(&a.offset_ns.to_le_bytes());
    b.extend_from_slice(&a.error_ns.to_le_bytes());
    b.extend_from_slice(&a.hops.to_le_bytes());
    Bytes::from(b)
}

pub(crate) fn decode(b: &[u8], from: usize) -> Result<Alignment> {
    if b.len() != ENCODED_LEN {
        return Err(bad(from, &format!("{}-byte alignment", b.len())));
    }
    let word = |i: usize| <[u8; 8]>::try_from(&b[i..i + 8]).expect("8 bytes");
    Ok(Alignment {
        offset_ns: i64::from_le_bytes(word(1)),
        error_ns: u64::from_le_bytes(word(9)),
        hops: u32::from_le_bytes(b[17..21].try_into().expect("4 bytes")),
        aligned: true,
    })
}

/// Runs this process's part of the alignment; `leaders` are the first ranks of all
/// processes in order, and `t` is this process's first rank's endpoint. Returns the
/// process's alignment to rank 0's clock.
pub(crate) fn align(t: &dyn Transport, leaders: &[usize]) -> Result<Alignment> {
    let tag = Tag::user(crate::monitor::MONITOR_CTX, TAG_CLOCK);
    let me = leaders
        .iter()
        .position(|&r| r == t.rank())
        .ok_or_else(|| CollError::Job {
            reason: format!("clock alignment: rank {} leads no process", t.rank()),
        })?;
    let mine = match parent(me) {
        None => Alignment::ROOT,
        Some(p) => {
            let from = leaders[p];
            loop {
                let m = t.recv(from, tag)?;
                match m.first() {
                    Some(&PING) => {
                        t.send(from, tag, Bytes::from(trace_ns().to_le_bytes().to_vec()))?
                    }
                    Some(&SET) => break decode(&m, from)?,
                    _ => return Err(bad(from, "unknown kind")),
                }
            }
        }
    };
    for c in children(me, leaders.len()) {
        let to = leaders[c];
        let mut probe = SkewProbe::new();
        for _ in 0..SkewProbe::ROUNDS {
            let sent = trace_ns();
            t.send(to, tag, Bytes::from_static(&[PING]))?;
            let m = t.recv(to, tag)?;
            let got = trace_ns();
            let clock: [u8; 8] = m
                .as_ref()
                .try_into()
                .map_err(|_| bad(to, &format!("{}-byte clock reading", m.len())))?;
            probe.sample(sent, u64::from_le_bytes(clock), got);
        }
        let edge = probe.estimate().expect("sampled");
        t.send(to, tag, encode(mine.then(edge)))?;
    }
    Ok(mine)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binomial_tree_covers_every_process_once() {
        for n in 1..40 {
            let mut seen = vec![0; n];
            seen[0] += 1;
            let mut todo = vec![0];
            while let Some(p) = todo.pop() {
                for c in children(p, n) {
                    assert_eq!(parent(c), Some(p), "n={n} c={c}");
                    seen[c] += 1;
                    todo.push(c);
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "n={n}: {seen:?}");
        }
        assert_eq!(children(0, 8), vec![4, 2, 1]);
        assert_eq!(children(2, 8), vec![6]);
    }

    #[test]
    fn alignments_round_trip_and_garbage_is_refused() {
        let a = Alignment {
            offset_ns: -123_456,
            error_ns: 789,
            hops: 3,
            aligned: true,
        };
        assert_eq!(decode(&encode(a), 1).unwrap(), a);
        assert!(decode(b"S123", 1).is_err());
    }

    #[test]
    fn threads_of_one_process_align_to_zero_within_the_error() {
        let fabric = crate::inproc::Fabric::new(5);
        let leaders: Vec<usize> = (0..5).collect();
        let got: Vec<Alignment> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..5)
                .map(|r| {
                    let ep = fabric.endpoint(r).unwrap();
                    let leaders = &leaders;
                    s.spawn(move || align(&ep, leaders).unwrap())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(got[0], Alignment::ROOT);
        for a in &got[1..] {
            // One clock: the true offset is 0.
            assert!(a.offset_ns.unsigned_abs() <= a.error_ns + 1_000, "{a:?}");
            assert!(a.hops >= 1);
        }
    }
}
