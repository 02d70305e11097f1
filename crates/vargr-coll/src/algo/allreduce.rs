//! Allreduce schedules, and the reduce-scatter core that Rabenseifner's reduce shares.
//!
//! All schedules work in place on `Work` (`count` elements of `esize` bytes).

use super::{block_offsets, pof2_floor, tree};
use crate::hierarchy::Levels;
use crate::schedule::{Buf, Mode, Schedule};
use crate::select::Across;

fn reduce_from(partner: usize, me: usize) -> Mode {
    Mode::Reduce {
        incoming_left: partner < me,
    }
}

/// MPICH's folding of a non-power-of-two size: among the first `2·rem` ranks, each even
/// rank hands its data to the odd rank above it and sits out. Returns my rank among the
/// `pof2` survivors, if I am one.
fn fold_in(s: &mut Schedule, me: usize, p: usize, n: usize, phase: u16) -> Option<usize> {
    let pof2 = pof2_floor(p);
    let rem = p - pof2;
    if me < 2 * rem {
        if me % 2 == 0 {
            s.send(me + 1, phase, Buf::Work, 0..n);
            None
        } else {
            s.recv(me - 1, phase, Buf::Work, 0..n, reduce_from(me - 1, me));
            Some(me / 2)
        }
    } else {
        Some(me - rem)
    }
}

/// Real rank of survivor `nr` (inverse of [`fold_in`]).
fn survivor(nr: usize, p: usize) -> usize {
    let rem = p - pof2_floor(p);
    if nr < rem {
        2 * nr + 1
    } else {
        nr + rem
    }
}

/// Hands the result back to the ranks that sat out.
fn fold_out(s: &mut Schedule, me: usize, p: usize, n: usize, phase: u16) {
    let rem = p - pof2_floor(p);
    if me < 2 * rem {
        if me % 2 == 0 {
            s.recv(me + 1, phase, Buf::Work, 0..n, Mode::Replace);
        } else {
            s.send(me - 1, phase, Buf::Work, 0..n);
        }
    }
}

/// Recursive doubling: log2(p) exchanges of the whole buffer (plus fold in/out for other
/// sizes). Latency-optimal; the default for small messages. Order-preserving.
pub fn recursive_doubling(me: usize, p: usize, n: usize) -> Schedule {
    let mut s = Schedule::new();
    if p == 1 {
        return s;
    }
    let pof2 = pof2_floor(p);
    if let Some(nr) = fold_in(&mut s, me, p, n, 0) {
        let mut mask = 1;
        let mut phase = 1;
        while mask < pof2 {
            let partner = survivor(nr ^ mask, p);
            s.send(partner, phase, Buf::Work, 0..n);
            s.recv(partner, phase, Buf::Work, 0..n, reduce_from(partner, me));
            mask <<= 1;
            phase += 1;
        }
    }
    fold_out(&mut s, me, p, n, 63);
    s
}

/// Ring allreduce: reduce-scatter then allgather around the ring, 2(p−1) steps each
/// moving n/p bytes. Bandwidth-optimal; commutative operators only.
pub fn ring(me: usize, p: usize, count: usize, esize: usize) -> Schedule {
    let mut s = Schedule::new();
    if p == 1 || count == 0 {
        return s;
    }
    let off = block_offsets(count, esize, p);
    let blk = |b: usize| off[b]..off[b + 1];
    let right = (me + 1) % p;
    let left = (me + p - 1) % p;
    for step in 0..p - 1 {
        s.send(right, 0, Buf::Work, blk((me + p - step) % p));
        s.recv(
            left,
            0,
            Buf::Work,
            blk((me + 2 * p - step - 1) % p),
            Mode::Reduce {
                incoming_left: true,
            },
        );
    }
    for step in 0..p - 1 {
        s.send(right, 1, Buf::Work, blk((me + 1 + p - step) % p));
        s.recv(left, 1, Buf::Work, blk((me + p - step) % p), Mode::Replace);
    }
    s
}

/// Where a reduce-scatter left this rank.
struct Scattered {
    /// My rank among the `pof2` survivors.
    nr: usize,
    pof2: usize,
    /// Block range I own, fully reduced.
    lo: usize,
    hi: usize,
    /// Byte offsets of the `pof2` blocks.
    off: Vec<usize>,
}

/// Recursive-halving reduce-scatter among the `pof2` survivors (MPICH's index order: the
/// lower half goes to the lower partner, masks ascending); `None` if I sat out.
fn reduce_scatter_halving(
    s: &mut Schedule,
    me: usize,
    p: usize,
    count: usize,
    esize: usize,
) -> Option<Scattered> {
    let n = count * esize;
    let pof2 = pof2_floor(p);
    let nr = fold_in(s, me, p, n, 0)?;
    let off = block_offsets(count, esize, pof2);
    let (mut lo, mut hi) = (0, pof2);
    let mut mask = 1;
    let mut phase = 1;
    while mask < pof2 {
        let partner = survivor(nr ^ mask, p);
        let mid = (lo + hi) / 2;
        let (keep, give) = if nr & mask == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        s.send(partner, phase, Buf::Work, off[give.0]..off[give.1]);
        s.recv(
            partner,
            phase,
            Buf::Work,
            off[keep.0]..off[keep.1],
            reduce_from(partner, me),
        );
        (lo, hi) = keep;
        mask <<= 1;
        phase += 1;
    }
    Some(Scattered {
        nr,
        pof2,
        lo,
        hi,
        off,
    })
}

/// Rabenseifner's allreduce: reduce-scatter by recursive halving, allgather by recursive
/// doubling. About 2n bytes per rank and 2·log p steps; the choice for large messages.
pub fn rabenseifner(me: usize, p: usize, count: usize, esize: usize) -> Schedule {
    let mut s = Schedule::new();
    if p == 1 || count == 0 {
        return s;
    }
    if let Some(Scattered {
        nr,
        pof2,
        mut lo,
        mut hi,
        off,
    }) = reduce_scatter_halving(&mut s, me, p, count, esize)
    {
        let mut mask = pof2 >> 1;
        let mut phase = 32;
        while mask > 0 {
            let partner = survivor(nr ^ mask, p);
            let width = hi - lo;
            let theirs = if nr & mask == 0 {
                (hi, hi + width)
            } else {
                (lo - width, lo)
            };
            s.send(partner, phase, Buf::Work, off[lo]..off[hi]);
            s.recv(
                partner,
                phase,
                Buf::Work,
                off[theirs.0]..off[theirs.1],
                Mode::Replace,
            );
            lo = lo.min(theirs.0);
            hi = hi.max(theirs.1);
            mask >>= 1;
            phase += 1;
        }
    }
    fold_out(&mut s, me, p, count * esize, 63);
    s
}

/// Rabenseifner's reduce: reduce-scatter by recursive halving, then a binomial gather of
/// the blocks to the first survivor, which hands the result to the root.
pub fn reduce_rabenseifner(
    me: usize,
    p: usize,
    root: usize,
    count: usize,
    esize: usize,
) -> Schedule {
    let mut s = Schedule::new();
    let n = count * esize;
    if p == 1 || count == 0 {
        return s;
    }
    if let Some(Scattered {
        nr,
        pof2,
        lo,
        mut hi,
        off,
    }) = reduce_scatter_halving(&mut s, me, p, count, esize)
    {
        let mut mask = pof2 >> 1;
        let mut phase = 32;
        while mask > 0 {
            let partner = survivor(nr ^ mask, p);
            let width = hi - lo;
            if nr & mask != 0 {
                s.send(partner, phase, Buf::Work, off[lo]..off[hi]);
                break;
            }
            s.recv(
                partner,
                phase,
                Buf::Work,
                off[hi]..off[hi + width],
                Mode::Replace,
            );
            hi += width;
            mask >>= 1;
            phase += 1;
        }
        debug_assert!(nr != 0 || (lo, hi) == (0, pof2));
    }
    let first = survivor(0, p);
    if first != root {
        if me == first {
            s.send(root, 63, Buf::Work, 0..n);
        } else if me == root {
            s.recv(first, 63, Buf::Work, 0..n, Mode::Replace);
        }
    }
    s
}

/// Binomial reduce to rank 0, then binomial bcast from rank 0. Order-preserving.
pub fn reduce_bcast(me: usize, p: usize, n: usize) -> Schedule {
    let mut s = tree::reduce_binomial(me, p, 0, n);
    s.append(tree::bcast_binomial(me, p, 0, n).shift_phases(1));
    s
}

/// Hierarchical allreduce: binomial reduce inside my host to its leader, binomial reduce
/// among the host leaders of my site to the site root, an allreduce across site roots
/// (tree or MagPIe all-to-all), then binomial bcasts back down. Each WAN link is crossed
/// at most once per direction with `Across::Magpie`.
pub fn hierarchical(me: usize, levels: &Levels, n: usize, across: Across) -> Schedule {
    let mut s = Schedule::new();
    let host = &levels.host_group;
    let site = &levels.site_group;
    let roots = &levels.site_roots;
    let idx = |g: &[usize]| g.iter().position(|&r| r == me);
    let h_me = idx(host).expect("a rank is in its own host group");
    s.append(tree::reduce_binomial(h_me, host.len(), 0, n).remap(host, 0));
    let leader = h_me == 0;
    if leader {
        let s_me = idx(site).expect("a host leader is in its site group");
        s.append(tree::reduce_binomial(s_me, site.len(), 0, n).remap(site, 64));
        if s_me == 0 {
            let r_me = idx(roots).expect("a site root is in the root list");
            let k = roots.len();
            let across_sched = match across {
                Across::Tree => reduce_bcast(r_me, k, n),
                Across::Magpie => magpie(r_me, k, n),
            };
            s.append(across_sched.remap(roots, 128));
        }
        s.append(tree::bcast_binomial(s_me, site.len(), 0, n).remap(site, 256));
    }
    s.append(tree::bcast_binomial(h_me, host.len(), 0, n).remap(host, 320));
    s
}

/// MagPIe's wide-area step: every site root sends its partial to every other one, then
/// all combine the partials in site order, so all get the same bits.
fn magpie(me: usize, k: usize, n: usize) -> Schedule {
    let mut s = Schedule::new();
    if k == 1 || n == 0 {
        return s;
    }
    s.tmp_len = k * n;
    for i in 1..k {
        s.send((me + i) % k, 0, Buf::Work, 0..n);
    }
    s.copy(Buf::Work, 0..n, Buf::Tmp, me * n);
    for i in 1..k {
        let from = (me + k - i) % k;
        s.recv(from, 0, Buf::Tmp, from * n..(from + 1) * n, Mode::Replace);
    }
    s.copy(Buf::Tmp, 0..n, Buf::Work, 0);
    for j in 1..k {
        s.combine(Buf::Tmp, j * n..(j + 1) * n, Buf::Work, 0, false);
    }
    s
}
