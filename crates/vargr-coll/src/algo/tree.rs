//! Barrier, bcast and reduce over trees.
//!
//! Bcast schedules expect the root's data in `Work` and leave it in `Work` everywhere.
//! Reduce schedules expect every rank's contribution in `Work` (a scratch copy on
//! non-roots) and leave the result in the root's `Work`.

use super::{block_offsets, lowbit};
use crate::schedule::{Buf, Mode, Schedule};

const RIGHT: Mode = Mode::Reduce {
    incoming_left: false,
};

fn abs(rel: usize, root: usize, p: usize) -> usize {
    (rel + root) % p
}

/// Dissemination barrier: in round `k` signal `me + 2^k`, wait for `me − 2^k`.
pub fn barrier_dissemination(me: usize, p: usize) -> Schedule {
    let mut s = Schedule::new();
    let (mut d, mut k) = (1, 0u16);
    while d < p {
        s.send((me + d) % p, k, Buf::Work, 0..0);
        s.recv((me + p - d) % p, k, Buf::Work, 0..0, Mode::Replace);
        d *= 2;
        k += 1;
    }
    s
}

/// Flat barrier: everyone signals rank 0, rank 0 releases everyone.
pub fn barrier_flat(me: usize, p: usize) -> Schedule {
    let mut s = Schedule::new();
    if me == 0 {
        for r in 1..p {
            s.recv(r, 0, Buf::Work, 0..0, Mode::Replace);
        }
        for r in 1..p {
            s.send(r, 1, Buf::Work, 0..0);
        }
    } else {
        s.send(0, 0, Buf::Work, 0..0);
        s.recv(0, 1, Buf::Work, 0..0, Mode::Replace);
    }
    s
}

pub fn bcast_flat(me: usize, p: usize, root: usize, n: usize) -> Schedule {
    let mut s = Schedule::new();
    if n == 0 {
        return s;
    }
    if me == root {
        for r in (0..p).filter(|&r| r != root) {
            s.send(r, 0, Buf::Work, 0..n);
        }
    } else {
        s.recv(root, 0, Buf::Work, 0..n, Mode::Replace);
    }
    s
}

pub fn bcast_binomial(me: usize, p: usize, root: usize, n: usize) -> Schedule {
    let mut s = Schedule::new();
    if n == 0 {
        return s;
    }
    let rel = (me + p - root) % p;
    let mut mask = 1;
    while mask < p {
        if rel & mask != 0 {
            s.recv(abs(rel - mask, root, p), 0, Buf::Work, 0..n, Mode::Replace);
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < p {
            s.send(abs(rel + mask, root, p), 0, Buf::Work, 0..n);
        }
        mask >>= 1;
    }
    s
}

pub fn bcast_kary(me: usize, p: usize, root: usize, n: usize, k: usize) -> Schedule {
    let mut s = Schedule::new();
    if n == 0 {
        return s;
    }
    let k = k.max(1);
    let rel = (me + p - root) % p;
    if rel != 0 {
        s.recv(
            abs((rel - 1) / k, root, p),
            0,
            Buf::Work,
            0..n,
            Mode::Replace,
        );
    }
    for c in (k * rel + 1..=k * rel + k).filter(|&c| c < p) {
        s.send(abs(c, root, p), 0, Buf::Work, 0..n);
    }
    s
}

/// Van de Geijn's bcast: binomial scatter of `p` blocks (indexed by rank relative to the
/// root), then a ring allgather. Moves about 2n bytes per rank instead of n·log p.
pub fn bcast_scatter_allgather(
    me: usize,
    p: usize,
    root: usize,
    count: usize,
    esize: usize,
) -> Schedule {
    let mut s = Schedule::new();
    if count == 0 || p == 1 {
        return s;
    }
    let off = block_offsets(count, esize, p);
    let span = |a: usize, b: usize| off[a]..off[b.min(p)];
    let rel = (me + p - root) % p;
    let top = if rel == 0 {
        p.next_power_of_two()
    } else {
        let low = lowbit(rel);
        s.recv(
            abs(rel - low, root, p),
            0,
            Buf::Work,
            span(rel, rel + low),
            Mode::Replace,
        );
        low
    };
    let mut mask = top >> 1;
    while mask > 0 {
        let child = rel + mask;
        if child < p {
            s.send(abs(child, root, p), 0, Buf::Work, span(child, child + mask));
        }
        mask >>= 1;
    }
    let right = abs((rel + 1) % p, root, p);
    let left = abs((rel + p - 1) % p, root, p);
    for step in 0..p - 1 {
        let send_b = (rel + p - step) % p;
        let recv_b = (rel + 2 * p - step - 1) % p;
        s.send(right, 1, Buf::Work, span(send_b, send_b + 1));
        s.recv(left, 1, Buf::Work, span(recv_b, recv_b + 1), Mode::Replace);
    }
    s
}

/// Flat reduce in strict rank order: `((x0 ∘ x1) ∘ x2) ∘ …`, valid for non-commutative
/// operators with any root.
pub fn reduce_flat(me: usize, p: usize, root: usize, n: usize) -> Schedule {
    let mut s = Schedule::new();
    if p == 1 {
        return s;
    }
    if me != root {
        s.send(root, 0, Buf::Work, 0..n);
        return s;
    }
    if root != 0 {
        // Keep our own contribution aside; rank 0's goes first.
        s.tmp_len = n;
        s.copy(Buf::Work, 0..n, Buf::Tmp, 0);
        s.recv(0, 0, Buf::Work, 0..n, Mode::Replace);
    }
    for r in 1..p {
        if r == root {
            s.combine(Buf::Tmp, 0..n, Buf::Work, 0, false);
        } else {
            s.recv(r, 0, Buf::Work, 0..n, RIGHT);
        }
    }
    s
}

/// Binomial reduce (MPICH's shape): children are combined as right operands, so with
/// root 0 the result is in rank order.
pub fn reduce_binomial(me: usize, p: usize, root: usize, n: usize) -> Schedule {
    let mut s = Schedule::new();
    let rel = (me + p - root) % p;
    let mut mask = 1;
    while mask < p {
        if rel & mask == 0 {
            let child = rel | mask;
            if child < p {
                s.recv(abs(child, root, p), 0, Buf::Work, 0..n, RIGHT);
            }
        } else {
            s.send(abs(rel ^ mask, root, p), 0, Buf::Work, 0..n);
            break;
        }
        mask <<= 1;
    }
    s
}

pub fn reduce_kary(me: usize, p: usize, root: usize, n: usize, k: usize) -> Schedule {
    let mut s = Schedule::new();
    let k = k.max(1);
    let rel = (me + p - root) % p;
    for c in (k * rel + 1..=k * rel + k).filter(|&c| c < p) {
        s.recv(abs(c, root, p), 0, Buf::Work, 0..n, RIGHT);
    }
    if rel != 0 {
        s.send(abs((rel - 1) / k, root, p), 0, Buf::Work, 0..n);
    }
    s
}
