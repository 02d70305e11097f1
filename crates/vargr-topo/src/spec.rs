//! Topology specs: short strings resolved by builders into a tree.
//!
//! Following flux-core's "topology URI + builder table", a spec names a
//! shape and its size; [`Spec::parse`] checks it once into a typed value and
//! [`Spec::build`] generates the tree. Forms (case-insensitive, surrounding
//! whitespace ignored):
//!
//! * `flat:N` — the front-end with N back-end children.
//! * `kary:K@N` — exactly N back-ends under a K-ary tree of minimal depth
//!   `D = ceil(log_K N)` (at least 1). All back-ends are at depth D. Built
//!   bottom-up: the level above N nodes has `ceil(N/K)` nodes, and so on up
//!   to the root; each level's nodes are spread over the level above as
//!   evenly as possible (counts differ by at most one, larger first). This
//!   uses the fewest commnodes that any tree with fan-out ≤ K and all
//!   back-ends at depth D can have.
//! * `kary:K^D` — the full K-ary tree of depth D: K^D back-ends.
//! * `AxBxC…` — a level list as produced by `mrnet_topgen -b`: level i has
//!   that many nodes, the first is 1 (the front-end), each count is a
//!   multiple of the previous one, and each node of a level has the same
//!   number of children. `1x4x16` is a front-end, 4 commnodes, 16 back-ends.
//! * `knomial:K@N` — a k-nomial tree with N back-ends; `binomial@N` is
//!   `knomial:2@N`. The k-nomial tree is built over positions `0..=N`
//!   (position 0 is the front-end, position p ≥ 1 is back-end p-1): position
//!   r's children are `r + j·K^i` for `j = 1..K-1` and every i such that
//!   `K^(i+1)` divides r (every i for the root), smaller first; i.e. a
//!   position's parent is obtained by clearing its lowest non-zero base-K
//!   digit, and every sub-tree covers a contiguous range of positions. A
//!   position that has children in that
//!   tree becomes a commnode, and its own back-end is attached to it as an
//!   extra, first leaf child. Leaves are therefore exactly the N back-ends,
//!   back-end rank p-1 belongs to position p (depth-first order follows
//!   positions), depth is at most `ceil(log_K (N+1)) + 1`, the front-end has
//!   at most `(K-1)·ceil(log_K (N+1))` children and a commnode at most one
//!   more than that. This is the low-latency, unbalanced shape the MRNet
//!   paper contrasts with balanced trees.
//!
//! Every generated node is on host `localhost` with rank = its global id.
//! N = 0, K < 2, D = 0 and trees of more than [`crate::MAX_NODES`] nodes are
//! rejected.

use std::fmt;
use std::str::FromStr;

use crate::error::TopoError;
use crate::numbering::build;
use crate::tree::{Topology, MAX_NODES};

/// A parsed, checked topology spec. See the module docs for the shapes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Spec {
    /// `flat:N`.
    Flat {
        /// Back-ends.
        n: u32,
    },
    /// `kary:K@N`.
    KaryBackends {
        /// Maximum fan-out.
        k: u32,
        /// Back-ends.
        n: u32,
    },
    /// `kary:K^D`.
    KaryDepth {
        /// Fan-out.
        k: u32,
        /// Depth.
        d: u32,
    },
    /// `1x4x16`: nodes per level.
    Levels(Vec<u32>),
    /// `knomial:K@N` / `binomial@N`.
    Knomial {
        /// Radix.
        k: u32,
        /// Back-ends.
        n: u32,
    },
}

impl Spec {
    /// Parses and checks a spec string, including the size limit.
    pub fn parse(spec: &str) -> Result<Spec, TopoError> {
        let err = |reason: String| TopoError::Spec {
            spec: spec.to_string(),
            reason,
        };
        let lower = spec.trim().to_ascii_lowercase();
        let parsed = if let Some(rest) = lower.strip_prefix("flat:") {
            Spec::Flat {
                n: number(rest, "N").map_err(err)?,
            }
        } else if let Some(rest) = lower.strip_prefix("kary:") {
            if let Some((k, n)) = rest.split_once('@') {
                Spec::KaryBackends {
                    k: number(k, "K").map_err(err)?,
                    n: number(n, "N").map_err(err)?,
                }
            } else if let Some((k, d)) = rest.split_once('^') {
                Spec::KaryDepth {
                    k: number(k, "K").map_err(err)?,
                    d: number(d, "D").map_err(err)?,
                }
            } else {
                return Err(err(
                    "kary needs a size: kary:K@N (N back-ends) or kary:K^D (depth D)".into(),
                ));
            }
        } else if let Some(rest) = lower.strip_prefix("knomial:") {
            let Some((k, n)) = rest.split_once('@') else {
                return Err(err("knomial needs a size: knomial:K@N".into()));
            };
            Spec::Knomial {
                k: number(k, "K").map_err(err)?,
                n: number(n, "N").map_err(err)?,
            }
        } else if let Some(rest) = lower.strip_prefix("binomial") {
            let Some(n) = rest.strip_prefix('@') else {
                return Err(err("binomial needs a size: binomial@N".into()));
            };
            Spec::Knomial {
                k: 2,
                n: number(n, "N").map_err(err)?,
            }
        } else if lower.contains('x') && lower.chars().all(|c| c.is_ascii_digit() || c == 'x') {
            let levels = lower
                .split('x')
                .map(|l| number(l, "a level count"))
                .collect::<Result<Vec<u32>, String>>()
                .map_err(err)?;
            Spec::Levels(levels)
        } else {
            return Err(err("unknown form".into()));
        };
        parsed.check().map_err(err)?;
        let nodes = parsed.node_count();
        if nodes > MAX_NODES as u64 {
            return Err(TopoError::TooLarge {
                what: spec.to_string(),
                nodes,
                limit: MAX_NODES,
            });
        }
        Ok(parsed)
    }

    /// Checks the numbers (not the size limit).
    fn check(&self) -> Result<(), String> {
        let k_ok = |k: u32| {
            if k < 2 {
                Err(format!("K must be at least 2, found {k}"))
            } else {
                Ok(())
            }
        };
        let n_ok = |n: u32| {
            if n == 0 {
                Err("N must be at least 1: a topology needs a back-end".to_string())
            } else {
                Ok(())
            }
        };
        match self {
            Spec::Flat { n } => n_ok(*n),
            Spec::KaryBackends { k, n } | Spec::Knomial { k, n } => k_ok(*k).and(n_ok(*n)),
            Spec::KaryDepth { k, d } => {
                k_ok(*k)?;
                if *d == 0 {
                    return Err("D must be at least 1: a topology needs a back-end".into());
                }
                Ok(())
            }
            Spec::Levels(levels) => {
                if levels.len() < 2 {
                    return Err("a level list needs at least two levels".into());
                }
                if levels[0] != 1 {
                    return Err(format!(
                        "the first level is the front-end and must be 1, found {}",
                        levels[0]
                    ));
                }
                for (i, w) in levels.windows(2).enumerate() {
                    if w[1] == 0 || w[1] % w[0] != 0 {
                        return Err(format!(
                            "level {} has {} nodes, which is not a positive multiple of level {}'s {}",
                            i + 2,
                            w[1],
                            i + 1,
                            w[0]
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    /// How many nodes the tree has (saturating at `u64::MAX`).
    pub fn node_count(&self) -> u64 {
        match self {
            Spec::Flat { n } => u64::from(*n) + 1,
            Spec::KaryBackends { k, n } => kary_levels(*k, *n).iter().sum(),
            Spec::KaryDepth { k, d } => {
                let (mut total, mut level) = (1u64, 1u64);
                for _ in 0..*d {
                    level = level.saturating_mul(u64::from(*k));
                    total = total.saturating_add(level);
                    if total > MAX_NODES as u64 {
                        break;
                    }
                }
                total
            }
            Spec::Levels(levels) => levels.iter().map(|&l| u64::from(l)).sum(),
            Spec::Knomial { k, n } => {
                let positions = u64::from(*n) + 1;
                if positions > MAX_NODES as u64 {
                    return positions;
                }
                positions
                    + (1..positions)
                        .filter(|&p| knomial_has_children(p, positions, *k))
                        .count() as u64
            }
        }
    }

    /// How many back-ends the tree has.
    pub fn num_backends(&self) -> u64 {
        match self {
            Spec::Flat { n } | Spec::KaryBackends { n, .. } | Spec::Knomial { n, .. } => {
                u64::from(*n)
            }
            Spec::KaryDepth { k, d } => u64::from(*k).saturating_pow(*d),
            Spec::Levels(levels) => u64::from(*levels.last().unwrap_or(&0)),
        }
    }

    /// Generates the tree.
    pub fn build(&self) -> Topology {
        match self {
            Spec::Flat { n } => levels_tree(&[1, u64::from(*n)]),
            Spec::KaryBackends { k, n } => levels_tree(&kary_levels(*k, *n)),
            Spec::KaryDepth { k, d } => {
                let levels: Vec<u64> = (0..=*d).map(|i| u64::from(*k).pow(i)).collect();
                levels_tree(&levels)
            }
            Spec::Levels(levels) => {
                levels_tree(&levels.iter().map(|&l| u64::from(l)).collect::<Vec<_>>())
            }
            Spec::Knomial { k, n } => knomial_tree(*k, *n),
        }
    }

    /// True if `s` has the shape of a spec (used by [`Topology::load`] to tell
    /// specs from file names); it may still be an invalid spec.
    pub fn looks_like_spec(s: &str) -> bool {
        let l = s.trim().to_ascii_lowercase();
        ["flat:", "kary:", "knomial:", "binomial@"]
            .iter()
            .any(|p| l.starts_with(p))
            || (l.starts_with(|c: char| c.is_ascii_digit())
                && l.contains('x')
                && l.chars().all(|c| c.is_ascii_digit() || c == 'x'))
    }
}

impl FromStr for Spec {
    type Err = TopoError;
    fn from_str(s: &str) -> Result<Spec, TopoError> {
        Spec::parse(s)
    }
}

impl fmt::Display for Spec {
    /// The canonical (lower-case) form, which parses back to the same spec.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spec::Flat { n } => write!(f, "flat:{n}"),
            Spec::KaryBackends { k, n } => write!(f, "kary:{k}@{n}"),
            Spec::KaryDepth { k, d } => write!(f, "kary:{k}^{d}"),
            Spec::Levels(levels) => {
                let s: Vec<String> = levels.iter().map(u32::to_string).collect();
                f.write_str(&s.join("x"))
            }
            Spec::Knomial { k: 2, n } => write!(f, "binomial@{n}"),
            Spec::Knomial { k, n } => write!(f, "knomial:{k}@{n}"),
        }
    }
}

/// Parses a positive decimal number (digits only), naming it in errors.
fn number(s: &str, what: &str) -> Result<u32, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{what} must be a non-negative integer, found {s:?}"
        ));
    }
    s.parse::<u32>()
        .map_err(|_| format!("{what} is too large: {s} (limit {MAX_NODES} nodes)"))
}

/// Level sizes, root first, of the `kary:K@N` tree (see module docs).
fn kary_levels(k: u32, n: u32) -> Vec<u64> {
    let (k, n) = (u64::from(k), u64::from(n));
    let mut levels = vec![n];
    let mut m = n;
    while m > 1 {
        m = m.div_ceil(k);
        levels.push(m);
    }
    if levels.len() == 1 {
        levels.push(1); // a single back-end still needs a front-end
    }
    levels.reverse();
    levels
}

/// A tree given by nodes per level: level i+1's nodes are spread over level
/// i's in order, as evenly as possible, larger shares first.
fn levels_tree(levels: &[u64]) -> Topology {
    let total: u64 = levels.iter().sum();
    let mut children: Vec<Vec<u32>> = Vec::with_capacity(total as usize);
    let mut next_id = 1u64; // id of the next node to hand out
    for w in levels.windows(2) {
        let (c, m) = (w[0], w[1]);
        let (q, r) = (m / c, m % c);
        for j in 0..c {
            let share = q + u64::from(j < r);
            children.push((next_id..next_id + share).map(|i| i as u32).collect());
            next_id += share;
        }
    }
    children.resize(total as usize, Vec::new());
    build(children, 0, None)
}

/// True if position `p` has children in the k-nomial tree over `positions`.
fn knomial_has_children(p: u64, positions: u64, k: u32) -> bool {
    p % u64::from(k) == 0 && p + 1 < positions
}

/// Children of position `r` in the k-nomial tree over `positions`.
fn knomial_children(r: u64, positions: u64, k: u32) -> Vec<u32> {
    let k = u64::from(k);
    let mut kids = Vec::new();
    let mut pow = 1u64; // K^i
    while r.saturating_add(pow) < positions {
        let next = pow.saturating_mul(k); // K^(i+1), which must divide r
        if r % next != 0 {
            break;
        }
        for j in 1..k {
            let c = r.saturating_add(j.saturating_mul(pow));
            if c >= positions {
                break;
            }
            kids.push(c as u32);
        }
        pow = next;
    }
    kids
}

/// The k-nomial tree with n back-ends (see module docs).
fn knomial_tree(k: u32, n: u32) -> Topology {
    let positions = u64::from(n) + 1;
    let mut children: Vec<Vec<u32>> = Vec::with_capacity(2 * positions as usize);
    for r in 0..positions {
        children.push(knomial_children(r, positions, k));
    }
    for r in 1..positions as usize {
        if !children[r].is_empty() {
            // A commnode: its own back-end becomes its first leaf child.
            let be = children.len() as u32;
            children.push(Vec::new());
            children[r].insert(0, be);
        }
    }
    build(children, 0, None)
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
