//! Schedule builders: pure functions from (my rank, size, root, layout) to a
//! [`Schedule`](crate::Schedule). One module per family:
//!
//! - [`tree`]: barrier, bcast and reduce over flat, binomial and k-ary trees, and the
//!   large-message bcast (binomial scatter + ring allgather);
//! - [`allreduce`]: recursive doubling, ring, Rabenseifner, reduce+bcast, hierarchical;
//! - [`gather`]: gather(v), scatter(v), allgather(v) and alltoall(v).
//!
//! # Combine order (what floating-point results depend on)
//!
//! Every algorithm gives bitwise-identical results on all ranks (each block is combined
//! once, then copied). Between algorithms the bracketing differs:
//!
//! - flat reduce: `((x0 ∘ x1) ∘ x2) ∘ …`, strictly left to right;
//! - binomial reduce (root 0), and for power-of-two sizes also recursive doubling,
//!   Rabenseifner and reduce_bcast: the balanced bracketing
//!   `((x0 ∘ x1) ∘ (x2 ∘ x3)) ∘ ((x4 ∘ x5) ∘ (x6 ∘ x7))`, as in MPICH and Open MPI;
//!   for other sizes recursive doubling and Rabenseifner first fold `x(2i) ∘ x(2i+1)` for
//!   the first `2·(p − 2^⌊log p⌋)` ranks (MPICH's scheme), while the binomial tree lets the
//!   trailing ranks join late;
//! - binomial/k-ary reduce with another root: the same tree shapes over ranks relative to
//!   the root;
//! - ring: block `b` is accumulated around the ring starting at rank `b`:
//!   `(((xb ∘ xb+1) ∘ xb+2) ∘ … ∘ xb−1)`;
//! - shm (shared memory, not a schedule; see `arena`): the last rank to arrive folds all
//!   contributions left to right, like flat reduce;
//! - hierarchical: binomial inside each host, binomial across the hosts of a site, then
//!   binomial (tree) or site-order left fold (magpie) across sites.
//!
//! Integer results never depend on the order (wrapping arithmetic is associative); float
//! results from different algorithms agree to rounding.

pub mod allreduce;
pub mod gather;
pub mod tree;

/// Byte offsets of `nblocks` blocks of a buffer of `count` elements of `esize` bytes,
/// split on element boundaries with the first `count % nblocks` blocks one element larger
/// (MPICH's split). Returns `nblocks + 1` offsets.
pub(crate) fn block_offsets(count: usize, esize: usize, nblocks: usize) -> Vec<usize> {
    let base = count / nblocks;
    let extra = count % nblocks;
    let mut off = Vec::with_capacity(nblocks + 1);
    let mut at = 0;
    off.push(0);
    for i in 0..nblocks {
        at += (base + usize::from(i < extra)) * esize;
        off.push(at);
    }
    off
}

/// Lowest set bit of `x` (`x > 0`).
pub(crate) fn lowbit(x: usize) -> usize {
    x & x.wrapping_neg()
}

/// Largest power of two not above `p` (`p > 0`).
pub(crate) fn pof2_floor(p: usize) -> usize {
    1 << (usize::BITS - 1 - p.leading_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(block_offsets(10, 4, 4), vec![0, 12, 24, 32, 40]);
        assert_eq!(block_offsets(2, 8, 4), vec![0, 8, 16, 16, 16]);
        assert_eq!(lowbit(12), 4);
        assert_eq!(pof2_floor(13), 8);
        assert_eq!(pof2_floor(16), 16);
        assert_eq!(pof2_floor(1), 1);
    }
}
