//! The plan of a collective operation: file domains, their aggregators, the rounds, and
//! the access requests each aggregator receives.
//!
//! Why: these are the seed's "previous calculations" and request exchange (stages st1-st5
//! of ROMIO's two-phase I/O, plus LA-Two-Phase's aggregator pattern), kept apart from
//! the data movement in `file.rs` so that the choice of aggregators is one function.
//!
//! File domains are ROMIO's: the range from the lowest to the highest byte any rank
//! accesses, cut into equal parts, one per aggregator. Aggregators are by default the
//! lowest rank of each node (ROMIO's one per host), domain i going to the i-th. With
//! [`Aggregation::Locality`], every rank counts the bytes (or contiguous blocks) of each
//! domain it holds, the counts are summed per node, and the domains are assigned to the
//! aggregators' nodes by the linear assignment that keeps the most data in place; on
//! its node a domain goes to the rank that holds most of it.

use vargr_coll::Comm;

use crate::assign::{maximise, Solver};
use crate::error::{IoError, Result};
use crate::file::Hints;
use crate::view::{Run, View};

/// What locality is measured in, for LA-Two-Phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Count {
    /// Bytes of the domain a node holds (what crosses the network).
    #[default]
    Bytes,
    /// Contiguous blocks of the domain a node holds (the seed's measure: messages).
    Blocks,
}

/// How aggregators are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Aggregation {
    /// ROMIO's fixed pattern: domain i to the lowest rank of node i.
    #[default]
    TwoPhase,
    /// LA-Two-Phase: domains to the nodes that hold most of them.
    Locality { count: Count, solver: Solver },
}

/// The node of every rank: `given`, or ranks of one host of one site share one.
pub(crate) fn nodes(comm: &Comm, given: Option<&[usize]>) -> Result<Vec<usize>> {
    let p = comm.size();
    if let Some(g) = given {
        if g.len() != p {
            return Err(IoError::Refused {
                rank: comm.rank(),
                what: format!("{} node labels for {p} ranks", g.len()),
            });
        }
        return Ok(g.to_vec());
    }
    let Some(h) = comm.hierarchy() else {
        return Ok(vec![0; p]);
    };
    let mut seen: Vec<(u32, u32)> = Vec::new();
    Ok((0..p)
        .map(|r| {
            let key = (h.site[r], h.host[r]);
            seen.iter().position(|&k| k == key).unwrap_or_else(|| {
                seen.push(key);
                seen.len() - 1
            })
        })
        .collect())
}

/// Domains, aggregators and rounds of one collective operation (the same on every rank).
pub struct Plan {
    start: u64,
    end: u64,
    domain_size: u64,
    aggregators: Vec<usize>,
    mine: Option<usize>,
    rounds: u64,
    buffer: u64,
}

/// ROMIO's default aggregator list: the lowest rank of each node in rank order, then
/// (when more are asked for than there are nodes) the next rank of each node in turn.
fn default_aggregators(node: &[usize], wanted: Option<usize>) -> Vec<usize> {
    let mut by_node: Vec<Vec<usize>> = Vec::new();
    for (r, &n) in node.iter().enumerate() {
        if by_node.len() <= n {
            by_node.resize(n + 1, Vec::new());
        }
        by_node[n].push(r);
    }
    by_node.retain(|v| !v.is_empty());
    by_node.sort_by_key(|v| v[0]);
    let want = wanted.unwrap_or(by_node.len()).clamp(1, node.len());
    let mut out = Vec::with_capacity(want);
    let mut depth = 0;
    while out.len() < want {
        for ranks in &by_node {
            if let Some(&r) = ranks.get(depth) {
                if out.len() < want {
                    out.push(r);
                }
            }
        }
        depth += 1;
    }
    out
}

impl Plan {
    /// Computes the plan (collective: the ranks' extents, and with LA-Two-Phase their
    /// per-domain counts, are gathered).
    pub(crate) fn make(comm: &Comm, view: &View, node: &[usize], hints: &Hints) -> Result<Plan> {
        let p = comm.size();
        let me = comm.rank();
        let ext = view.extent().map_or([u64::MAX, 0], |e| [e.start, e.end]);
        let mut all = vec![0u64; 2 * p];
        comm.allgather(&ext, &mut all)?;
        let extents: Vec<(u64, u64)> = all.chunks(2).map(|e| (e[0], e[1])).collect();
        let mut plan = Plan::layout(&extents, node, hints)
            .map_err(|what| IoError::Refused { rank: me, what })?;
        if let (Aggregation::Locality { count, solver }, false) =
            (hints.aggregation, plan.aggregators.is_empty())
        {
            let a = plan.aggregators.len();
            let mine = plan.held(view, count);
            let mut held = vec![0u64; p * a];
            comm.allgather(&mine, &mut held)?;
            plan.aggregators = by_locality(&held, node, &plan.aggregators, solver)
                .map_err(|what| IoError::Refused { rank: me, what })?;
        }
        plan.mine = plan.aggregators.iter().position(|&a| a == me);
        Ok(plan)
    }

    /// The plan every rank computes from all ranks' views, without communicating: what
    /// the benchmark uses to count the bytes ROMIO's pattern moves between nodes.
    pub fn offline(
        views: &[View],
        node: &[usize],
        hints: &Hints,
    ) -> std::result::Result<Plan, String> {
        let extents: Vec<(u64, u64)> = views
            .iter()
            .map(|v| v.extent().map_or((u64::MAX, 0), |e| (e.start, e.end)))
            .collect();
        let mut plan = Plan::layout(&extents, node, hints)?;
        if let (Aggregation::Locality { count, solver }, false) =
            (hints.aggregation, plan.aggregators.is_empty())
        {
            let held: Vec<u64> = views.iter().flat_map(|v| plan.held(v, count)).collect();
            plan.aggregators = by_locality(&held, node, &plan.aggregators, solver)?;
        }
        Ok(plan)
    }

    /// Data bytes of `views` that lie in a domain whose aggregator is on another node.
    pub fn bytes_between_nodes(&self, views: &[View], node: &[usize]) -> u64 {
        let mut n = 0;
        for (r, v) in views.iter().enumerate() {
            for (d, &agg) in self.aggregators.iter().enumerate() {
                if node[agg] != node[r] {
                    let (lo, hi) = self.domain(d);
                    n += v.clip(lo, hi).map(|(run, _)| run.len).sum::<u64>();
                }
            }
        }
        n
    }

    /// Domains and ROMIO's aggregators from every rank's extent (`(u64::MAX, 0)` for a
    /// rank without data).
    fn layout(
        extents: &[(u64, u64)],
        node: &[usize],
        hints: &Hints,
    ) -> std::result::Result<Plan, String> {
        if hints.cb_buffer_size == 0 {
            return Err("a collective buffer of 0 bytes".into());
        }
        if node.len() != extents.len() {
            return Err(format!(
                "{} node labels for {} ranks",
                node.len(),
                extents.len()
            ));
        }
        let start = extents.iter().map(|e| e.0).min().unwrap_or(u64::MAX);
        let end = extents.iter().map(|e| e.1).max().unwrap_or(0);
        if start >= end {
            return Ok(Plan {
                start: 0,
                end: 0,
                domain_size: 0,
                mine: None,
                aggregators: Vec::new(),
                rounds: 0,
                buffer: hints.cb_buffer_size,
            });
        }
        let aggregators = default_aggregators(node, hints.cb_nodes);
        let domain_size = (end - start).div_ceil(aggregators.len() as u64);
        Ok(Plan {
            start,
            end,
            domain_size,
            aggregators,
            mine: None,
            rounds: domain_size.div_ceil(hints.cb_buffer_size),
            buffer: hints.cb_buffer_size,
        })
    }

    /// What `view` holds of each domain: bytes or contiguous blocks.
    fn held(&self, view: &View, count: Count) -> Vec<u64> {
        (0..self.aggregators.len())
            .map(|d| {
                let (lo, hi) = self.domain(d);
                let pieces = view.clip(lo, hi);
                match count {
                    Count::Bytes => pieces.map(|(r, _)| r.len).sum(),
                    Count::Blocks => pieces.count() as u64,
                }
            })
            .collect()
    }

    /// File range of domain `d`.
    pub fn domain(&self, d: usize) -> (u64, u64) {
        let lo = self
            .start
            .saturating_add(self.domain_size.saturating_mul(d as u64))
            .min(self.end);
        (lo, lo.saturating_add(self.domain_size).min(self.end))
    }

    /// File range of domain `d` in round `k`.
    pub(crate) fn window(&self, d: usize, k: u64) -> (u64, u64) {
        let (lo, hi) = self.domain(d);
        let a = lo.saturating_add(self.buffer.saturating_mul(k)).min(hi);
        (a, a.saturating_add(self.buffer).min(hi))
    }

    /// The rank that aggregates each domain.
    pub fn aggregators(&self) -> &[usize] {
        &self.aggregators
    }

    /// The domain this rank aggregates, if any.
    pub(crate) fn my_domain(&self) -> Option<usize> {
        self.mine
    }

    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// Sends every aggregator the file runs this rank has in its domain (collective).
    pub(crate) fn exchange_requests(&self, comm: &Comm, view: &View) -> Result<Requests> {
        let p = comm.size();
        let me = comm.rank();
        let mine: Vec<Vec<(Run, u64)>> = (0..self.aggregators.len())
            .map(|d| {
                let (lo, hi) = self.domain(d);
                view.clip(lo, hi).collect()
            })
            .collect();
        let mut counts = vec![0u64; p];
        for (d, &agg) in self.aggregators.iter().enumerate() {
            counts[agg] = 2 * mine[d].len() as u64;
        }
        let mut incoming = vec![0u64; p];
        comm.alltoall(&counts, &mut incoming)?;
        let mut send = Vec::new();
        let mut send_counts = vec![0usize; p];
        let mut send_displs = vec![0usize; p];
        // Destinations in rank order, each with the runs of its domain.
        let mut by_dest: Vec<Option<usize>> = vec![None; p];
        for (d, &agg) in self.aggregators.iter().enumerate() {
            by_dest[agg] = Some(d);
        }
        for (dest, d) in by_dest.iter().enumerate() {
            send_displs[dest] = send.len();
            if let Some(d) = d {
                for (r, _) in &mine[*d] {
                    send.extend_from_slice(&[r.offset, r.len]);
                }
            }
            send_counts[dest] = send.len() - send_displs[dest];
        }
        let recv_counts: Vec<usize> = incoming.iter().map(|&c| c as usize).collect();
        let mut recv_displs = vec![0usize; p];
        let mut total = 0usize;
        for (i, &c) in recv_counts.iter().enumerate() {
            recv_displs[i] = total;
            total = total.checked_add(c).ok_or_else(|| IoError::Refused {
                rank: me,
                what: "access requests too large to count".into(),
            })?;
        }
        let mut recv = vec![0u64; total];
        comm.alltoallv(
            &send,
            &send_counts,
            &send_displs,
            &mut recv,
            &recv_counts,
            &recv_displs,
        )?;
        let mut from = vec![Vec::new(); p];
        if let Some(d) = self.mine {
            let (lo, hi) = self.domain(d);
            for src in 0..p {
                let words = &recv[recv_displs[src]..recv_displs[src] + recv_counts[src]];
                let runs: Vec<Run> = words
                    .chunks_exact(2)
                    .map(|w| Run::new(w[0], w[1]))
                    .collect();
                // A rank's runs come from its checked view: in order, inside the domain.
                let sound = runs.windows(2).all(|w| w[0].end() <= w[1].offset)
                    && runs.iter().all(|r| {
                        r.offset >= lo && r.offset.checked_add(r.len).is_some_and(|e| e <= hi)
                    });
                if !sound {
                    return Err(IoError::Refused {
                        rank: me,
                        what: format!("rank {src} sent access requests outside its domain {lo}..{hi} or out of order"),
                    });
                }
                from[src] = runs;
            }
        }
        Ok(Requests { mine, from })
    }
}

/// The part of `run` inside `lo..hi`, as (start, end).
fn clip(run: Run, lo: u64, hi: u64) -> Option<(u64, u64)> {
    let a = run.offset.max(lo);
    let b = run.end().min(hi);
    (a < b).then_some((a, b))
}

/// LA-Two-Phase's pattern: which of the default aggregators' nodes (`slots`) takes which
/// domain, and the rank of that node holding most of it (the default rank on a tie). `held[r * a + d]` is what rank
/// r holds of domain d.
fn by_locality(
    held: &[u64],
    node: &[usize],
    slots: &[usize],
    solver: Solver,
) -> std::result::Result<Vec<usize>, String> {
    let p = node.len();
    let a = slots.len();
    let held = |r: usize, d: usize| held[r * a + d];
    let weights: Vec<Vec<u64>> = (0..a)
        .map(|d| {
            slots
                .iter()
                .map(|&s| {
                    (0..p)
                        .filter(|&r| node[r] == node[s])
                        .map(|r| held(r, d))
                        .sum()
                })
                .collect()
        })
        .collect();
    let slot_of = maximise(&weights, solver)
        .map_err(|why| format!("assigning file domains to aggregators: {why}"))?;
    // Where ROMIO's pattern keeps as much in place, keep it: moving aggregators gains
    // nothing then (regular workloads), and every rank ends with ROMIO's plan.
    let romio: u64 = (0..a).map(|d| weights[d][d]).sum();
    if crate::assign::total(&weights, &slot_of) <= romio {
        return Ok(slots.to_vec());
    }
    let mut taken = vec![false; p];
    let mut out = vec![0usize; a];
    // Domains in order of their slot, so that the result does not depend on the order
    // ties are met in.
    let mut order: Vec<usize> = (0..a).collect();
    order.sort_by_key(|&d| slot_of[d]);
    for d in order {
        let s = slots[slot_of[d]];
        let best = (0..p)
            .filter(|&r| node[r] == node[s] && !taken[r])
            .max_by_key(|&r| (held(r, d), r == s, std::cmp::Reverse(r)))
            .unwrap_or(s);
        taken[best] = true;
        out[d] = best;
    }
    Ok(out)
}

/// The access requests of one operation: this rank's pieces per domain, and (on an
/// aggregator) every rank's runs in its domain.
pub(crate) struct Requests {
    mine: Vec<Vec<(Run, u64)>>,
    from: Vec<Vec<Run>>,
}

impl Requests {
    /// This rank's pieces of domain `d` inside `lo..hi`, as (file start, file end, where
    /// the bytes start in the data).
    pub(crate) fn mine_within(
        &self,
        d: usize,
        lo: u64,
        hi: u64,
    ) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.mine[d].iter().filter_map(move |&(run, at)| {
            clip(run, lo, hi).map(|(a, b)| (a, b, at + (a - run.offset)))
        })
    }

    /// Rank `src`'s pieces of this aggregator's domain inside `lo..hi`, as (start, end).
    pub(crate) fn sent_by(&self, src: usize, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        self.from[src]
            .iter()
            .filter_map(|&r| clip(r, lo, hi))
            .collect()
    }

    /// Refuses runs of two ranks that share bytes (for writes).
    pub(crate) fn check_overlap(&self) -> Result<()> {
        let mut all: Vec<(Run, usize)> = self
            .from
            .iter()
            .enumerate()
            .flat_map(|(src, runs)| runs.iter().map(move |&r| (r, src)))
            .collect();
        all.sort_unstable_by_key(|&(r, src)| (r.offset, src));
        for w in all.windows(2) {
            let ((a, ra), (b, rb)) = (w[0], w[1]);
            if b.offset < a.end() {
                return Err(IoError::Overlap {
                    first: ra.min(rb),
                    second: ra.max(rb),
                    offset: b.offset,
                    end: a.end().min(b.end()),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn romios_default_pattern_is_one_aggregator_per_node() {
        // Two ranks per node, nodes in rank order.
        assert_eq!(default_aggregators(&[0, 0, 1, 1, 2, 2], None), [0, 2, 4]);
        assert_eq!(default_aggregators(&[0, 0, 1, 1, 2, 2], Some(2)), [0, 2]);
        assert_eq!(
            default_aggregators(&[0, 0, 1, 1, 2, 2], Some(5)),
            [0, 2, 4, 1, 3]
        );
        assert_eq!(default_aggregators(&[1, 0, 1, 0], None), [0, 1]);
        assert_eq!(default_aggregators(&[0, 0], Some(9)), [0, 1]);
    }

    #[test]
    fn la_two_phase_keeps_romios_pattern_when_moving_gains_nothing() {
        let la = Hints {
            aggregation: Aggregation::Locality {
                count: Count::Bytes,
                solver: Solver::JonkerVolgenant,
            },
            ..Hints::default()
        };
        let romio = Hints::default();
        // Regular blocks: every host already holds its domain.
        let w = crate::workload::sized(crate::workload::Kind::Stem2, 8, 1 << 20).unwrap();
        let node = crate::workload::host_layout(8, 4).unwrap();
        let a = Plan::offline(&w.views, &node, &la).unwrap();
        let b = Plan::offline(&w.views, &node, &romio).unwrap();
        assert_eq!(a.aggregators(), b.aggregators());
        // The irregular workload: LA-Two-Phase moves some domains, and fewer bytes.
        let w = crate::workload::sized(crate::workload::Kind::Bips3d, 8, 1 << 20).unwrap();
        let a = Plan::offline(&w.views, &node, &la).unwrap();
        let b = Plan::offline(&w.views, &node, &romio).unwrap();
        assert_ne!(a.aggregators(), b.aggregators());
        assert!(a.bytes_between_nodes(&w.views, &node) < b.bytes_between_nodes(&w.views, &node));
    }
}
