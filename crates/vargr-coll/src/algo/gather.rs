//! Gather, scatter, allgather and alltoall schedules, in bytes.
//!
//! Layouts are given as byte `counts` and `displs` per rank (the `*v` forms); the regular
//! forms are the special case of equal blocks packed back to back. `Input` is the caller's
//! send buffer and `Work` the receive buffer.

use super::lowbit;
use crate::schedule::{Buf, Mode, Schedule};

/// Byte layout of one rank's blocks: `(displacement, length)` per rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocks {
    pub displs: Vec<usize>,
    pub counts: Vec<usize>,
}

impl Blocks {
    /// `p` blocks of `b` bytes, back to back.
    pub fn regular(p: usize, b: usize) -> Blocks {
        Blocks {
            displs: (0..p).map(|i| i * b).collect(),
            counts: vec![b; p],
        }
    }

    pub fn range(&self, r: usize) -> std::ops::Range<usize> {
        self.displs[r]..self.displs[r] + self.counts[r]
    }
}

/// Flat gather(v): everyone sends its `Input` straight to the root, which places block `r`
/// at `recv.range(r)`. `mine` is this rank's send length.
pub fn gather_flat(me: usize, p: usize, root: usize, mine: usize, recv: &Blocks) -> Schedule {
    let mut s = Schedule::new();
    if me != root {
        s.send(root, 0, Buf::Input, 0..mine);
        return s;
    }
    for r in 0..p {
        if r == root {
            s.copy(Buf::Input, 0..mine, Buf::Work, recv.displs[r]);
        } else {
            s.recv(r, 0, Buf::Work, recv.range(r), Mode::Replace);
        }
    }
    s
}

/// Size of the binomial subtree of relative rank `rel`.
fn subtree(rel: usize, p: usize) -> usize {
    if rel == 0 {
        p
    } else {
        lowbit(rel).min(p - rel)
    }
}

/// Binomial gather of equal blocks of `b` bytes: subtrees collect their blocks (in order
/// of rank relative to the root) in scratch and forward them in one message; log p steps.
pub fn gather_binomial(me: usize, p: usize, root: usize, b: usize) -> Schedule {
    let mut s = Schedule::new();
    let rel = (me + p - root) % p;
    let abs = |r: usize| (r + root) % p;
    s.tmp_len = subtree(rel, p) * b;
    s.copy(Buf::Input, 0..b, Buf::Tmp, 0);
    let mut mask = 1;
    while mask < p {
        if rel & mask == 0 {
            let child = rel + mask;
            if child < p {
                let got = subtree(child, p);
                s.recv(
                    abs(child),
                    0,
                    Buf::Tmp,
                    mask * b..(mask + got) * b,
                    Mode::Replace,
                );
            }
        } else {
            s.send(abs(rel - mask), 0, Buf::Tmp, 0..subtree(rel, p) * b);
            return s;
        }
        mask <<= 1;
    }
    // Root: scratch holds blocks of ranks root, root+1, …, root-1.
    s.copy(Buf::Tmp, 0..(p - root) * b, Buf::Work, root * b);
    s.copy(Buf::Tmp, (p - root) * b..p * b, Buf::Work, 0);
    s
}

/// Flat scatter(v): the root sends `send.range(r)` of its `Input` to each rank `r`; `mine`
/// is this rank's receive length.
pub fn scatter_flat(me: usize, p: usize, root: usize, send: &Blocks, mine: usize) -> Schedule {
    let mut s = Schedule::new();
    if me != root {
        s.recv(root, 0, Buf::Work, 0..mine, Mode::Replace);
        return s;
    }
    for r in 0..p {
        if r == root {
            s.copy(Buf::Input, send.range(r), Buf::Work, 0);
        } else {
            s.send(r, 0, Buf::Input, send.range(r));
        }
    }
    s
}

/// Binomial scatter of equal blocks: the mirror image of [`gather_binomial`].
pub fn scatter_binomial(me: usize, p: usize, root: usize, b: usize) -> Schedule {
    let mut s = Schedule::new();
    let rel = (me + p - root) % p;
    let abs = |r: usize| (r + root) % p;
    let mine = subtree(rel, p);
    s.tmp_len = mine * b;
    let top = if rel == 0 {
        s.copy(Buf::Input, root * b..p * b, Buf::Tmp, 0);
        s.copy(Buf::Input, 0..root * b, Buf::Tmp, (p - root) * b);
        p.next_power_of_two()
    } else {
        let low = lowbit(rel);
        s.recv(abs(rel - low), 0, Buf::Tmp, 0..mine * b, Mode::Replace);
        low
    };
    let mut mask = top >> 1;
    while mask > 0 {
        let child = rel + mask;
        if child < p {
            s.send(
                abs(child),
                0,
                Buf::Tmp,
                mask * b..(mask + subtree(child, p)) * b,
            );
        }
        mask >>= 1;
    }
    s.copy(Buf::Tmp, 0..b, Buf::Work, 0);
    s
}

/// Ring allgather(v): p−1 steps, each forwarding the block received in the step before.
pub fn allgather_ring(me: usize, p: usize, blocks: &Blocks) -> Schedule {
    let mut s = Schedule::new();
    s.copy(
        Buf::Input,
        0..blocks.counts[me],
        Buf::Work,
        blocks.displs[me],
    );
    let right = (me + 1) % p;
    let left = (me + p - 1) % p;
    for step in 0..p.saturating_sub(1) {
        s.send(right, 0, Buf::Work, blocks.range((me + p - step) % p));
        s.recv(
            left,
            0,
            Buf::Work,
            blocks.range((me + 2 * p - step - 1) % p),
            Mode::Replace,
        );
    }
    s
}

/// Recursive-doubling allgather of equal blocks (power-of-two sizes; others use
/// [`allgather_bruck`]): log p exchanges of doubling, aligned groups of blocks.
pub fn allgather_recursive_doubling(me: usize, p: usize, b: usize) -> Schedule {
    if !p.is_power_of_two() {
        return allgather_bruck(me, p, b);
    }
    let mut s = Schedule::new();
    s.copy(Buf::Input, 0..b, Buf::Work, me * b);
    let mut mask = 1;
    let mut phase = 0;
    while mask < p {
        let partner = me ^ mask;
        let mine = me & !(mask - 1);
        let theirs = partner & !(mask - 1);
        s.send(partner, phase, Buf::Work, mine * b..(mine + mask) * b);
        s.recv(
            partner,
            phase,
            Buf::Work,
            theirs * b..(theirs + mask) * b,
            Mode::Replace,
        );
        mask <<= 1;
        phase += 1;
    }
    s
}

/// Bruck's allgather: in step k, send the first min(2^k, p−2^k) collected blocks to
/// `me − 2^k` and append those of `me + 2^k`; ⌈log p⌉ steps for any p, then one rotation.
pub fn allgather_bruck(me: usize, p: usize, b: usize) -> Schedule {
    let mut s = Schedule::new();
    s.tmp_len = p * b;
    s.copy(Buf::Input, 0..b, Buf::Tmp, 0);
    let mut d = 1;
    let mut phase = 0;
    while d < p {
        let cnt = d.min(p - d);
        s.send((me + p - d) % p, phase, Buf::Tmp, 0..cnt * b);
        s.recv(
            (me + d) % p,
            phase,
            Buf::Tmp,
            d * b..(d + cnt) * b,
            Mode::Replace,
        );
        d *= 2;
        phase += 1;
    }
    // Scratch block i belongs to rank me+i.
    s.copy(Buf::Tmp, 0..(p - me) * b, Buf::Work, me * b);
    s.copy(Buf::Tmp, (p - me) * b..p * b, Buf::Work, 0);
    s
}

/// Pairwise alltoall(v): in round i send to `me + i` and receive from `me − i`.
pub fn alltoall_pairwise(me: usize, p: usize, send: &Blocks, recv: &Blocks) -> Schedule {
    let mut s = Schedule::new();
    s.copy(Buf::Input, send.range(me), Buf::Work, recv.displs[me]);
    for i in 1..p {
        let to = (me + i) % p;
        let from = (me + p - i) % p;
        s.send(to, 0, Buf::Input, send.range(to));
        s.recv(from, 0, Buf::Work, recv.range(from), Mode::Replace);
    }
    s
}
