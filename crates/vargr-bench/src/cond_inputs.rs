//! The seed's five inputs for conditional allreduce (000 ch. 7.3 V-B), which decide how
//! often a site can settle the convergence test alone: *best-case* and *worst-case*, and
//! traces of the per-rank deltas of red-black SOR on the *frosty*, *tridiagonal* and
//! *random* grids. `vargr bench wan` and `vargr bench noise` feed them to every allreduce
//! mode; the test is always "sum of contributions `>=` epsilon" (SOR goes on while it
//! holds), with the SOR run's epsilon.
//!
//! Readings of the seed where it is terse:
//! - *best-case*: the seed says inter-cluster communication is only needed in the last
//!   iteration. Here every rank gives epsilon (any site's sum settles the test) and 0 in
//!   the last iteration, when the test fails and needs every site.
//! - *worst-case*: "the condition is never true", so every iteration needs every site's
//!   value. Here every rank gives epsilon / (2 × ranks): the total stays at epsilon / 2.
//! - The traces: the seed traced a 1380 × 1380 grid on 138 processes and replayed each
//!   trace whole until about 15,000 calls (frosty 3 times, tridiagonal 9, random 55).
//!   Here the SOR is run in-process on the job's rank count and site split, on a smaller
//!   grid (`--sor-side`), and replayed whole as many times as come closest to the
//!   requested calls (`Workload::replays`). Each replay ends with the converged call,
//!   which no site can settle alone.
//! - The old `sor` input of `vargr bench wan` was the frosty trace; `sor` still names it.

use std::sync::Arc;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use vargr_coll::{Fabric, Hierarchy, World};

use crate::sor::{sor, ConvergenceTest, SorConfig, SorData};

/// One of the seed's inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Input {
    /// Every site settles the test alone in every call but the last.
    Best,
    /// The test never holds: every call needs every site.
    Worst,
    /// SOR deltas on a grid with a hot top row (the former `sor` input).
    #[value(alias = "sor")]
    Frosty,
    /// SOR deltas on a grid with seven random diagonals.
    Tridiagonal,
    /// SOR deltas on a grid of random values.
    Random,
}

impl Input {
    pub const ALL: [Input; 5] = [
        Input::Best,
        Input::Worst,
        Input::Frosty,
        Input::Tridiagonal,
        Input::Random,
    ];

    /// The seed's name, used in the records.
    pub fn name(self) -> &'static str {
        match self {
            Input::Best => "best",
            Input::Worst => "worst",
            Input::Frosty => "frosty",
            Input::Tridiagonal => "tridiagonal",
            Input::Random => "random",
        }
    }

    /// Whether the input is a trace of SOR deltas.
    pub fn is_trace(self) -> bool {
        matches!(self, Input::Frosty | Input::Tridiagonal | Input::Random)
    }
}

/// The SOR run the traced inputs come from; its epsilon is every input's threshold.
#[derive(Args, Clone, Debug)]
pub struct TraceArgs {
    /// SOR grid side for the traced inputs.
    #[arg(long, default_value_t = 40)]
    pub sor_side: usize,
    /// SOR convergence threshold (sum of changes), the test's threshold for every input.
    #[arg(long, default_value_t = 40.0)]
    pub sor_epsilon: f64,
    /// Seed of the random grids (tridiagonal, random).
    #[arg(long, default_value_t = 1)]
    pub grid_seed: u64,
}

impl Default for TraceArgs {
    fn default() -> Self {
        TraceArgs {
            sor_side: 40,
            sor_epsilon: 40.0,
            grid_seed: 1,
        }
    }
}

/// Every rank's contribution to every call for one input. Each process builds it from
/// the same settings, so all ranks agree without exchanging it.
#[derive(Debug, Clone)]
pub struct Workload {
    input: Input,
    epsilon: f64,
    ranks: usize,
    sites: usize,
    iterations: u64,
    /// Per rank, one SOR run to convergence (traced inputs only).
    trace: Vec<Vec<f64>>,
}

impl Workload {
    /// `ranks` in `sites` equal consecutive sites (as `vargr run --sites` splits them),
    /// making `iterations` calls. Traced inputs cycle through their trace.
    pub fn new(
        input: Input,
        ranks: usize,
        sites: usize,
        t: &TraceArgs,
        iterations: u64,
    ) -> Result<Workload> {
        if ranks == 0 || sites == 0 || !ranks.is_multiple_of(sites) {
            bail!("{ranks} ranks do not split into {sites} equal sites");
        }
        let data = match input {
            Input::Frosty => Some(SorData::Frosty),
            Input::Tridiagonal => Some(SorData::Tridiagonal { seed: t.grid_seed }),
            Input::Random => Some(SorData::Random { seed: t.grid_seed }),
            Input::Best | Input::Worst => None,
        };
        let trace = match data {
            Some(data) => sor_deltas(ranks, sites, t, data)?,
            None => Vec::new(),
        };
        Ok(Workload {
            input,
            epsilon: t.sor_epsilon,
            ranks,
            sites,
            iterations,
            trace,
        })
    }

    pub fn input(&self) -> Input {
        self.input
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    pub fn iterations(&self) -> u64 {
        self.iterations
    }

    /// Calls of one SOR run to convergence (traced inputs; 0 otherwise).
    pub fn trace_len(&self) -> u64 {
        self.trace.first().map_or(0, Vec::len) as u64
    }

    /// For a traced input, the whole replays nearest to `target` calls (at least one)
    /// and the calls they make; other inputs make `target` calls.
    pub fn replays(&self, target: u64) -> (u64, u64) {
        match self.trace_len() {
            0 => (1, target),
            len => {
                let n = ((target as f64 / len as f64).round() as u64).max(1);
                (n, n * len)
            }
        }
    }

    /// What `rank` contributes to call `i` (from 0).
    pub fn value(&self, rank: usize, i: u64) -> f64 {
        match self.input {
            Input::Best if i + 1 == self.iterations => 0.0,
            Input::Best => self.epsilon,
            Input::Worst => self.epsilon / (2 * self.ranks) as f64,
            _ => {
                let t = &self.trace[rank];
                t[(i % t.len() as u64) as usize]
            }
        }
    }

    /// Per site, in rank order: the calls whose site sum alone reaches epsilon (what a
    /// correct conditional allreduce decides locally), and how many of the site sums lie
    /// so close to epsilon that the order of summation could move them across it.
    pub fn decided_locally(&self) -> Vec<(u64, u64)> {
        let per = self.ranks / self.sites;
        (0..self.sites)
            .map(|s| {
                let (mut local, mut close) = (0, 0);
                for i in 0..self.iterations {
                    let sum: f64 = (s * per..(s + 1) * per).map(|r| self.value(r, i)).sum();
                    local += u64::from(sum >= self.epsilon);
                    close += u64::from((sum - self.epsilon).abs() <= 1e-9 * self.epsilon.abs());
                }
                (local, close)
            })
            .collect()
    }
}

/// Per-rank SOR deltas for `p` ranks in `sites` sites, from an in-process run.
fn sor_deltas(p: usize, sites: usize, t: &TraceArgs, data: SorData) -> Result<Vec<Vec<f64>>> {
    let cfg = SorConfig {
        side: t.sor_side,
        epsilon: t.sor_epsilon,
        data,
        ..SorConfig::default()
    };
    let fabric = Fabric::new(p);
    let site: Vec<u32> = (0..p).map(|r| (r * sites / p) as u32).collect();
    let h = Hierarchy::new(site.clone(), site)?;
    let handles: Vec<_> = fabric
        .endpoints()
        .into_iter()
        .map(|ep| {
            let (cfg, h) = (cfg.clone(), h.clone());
            std::thread::spawn(move || -> Result<Vec<f64>> {
                let c = World::new(Arc::new(ep)).with_hierarchy(h).comm()?;
                Ok(sor(&c, &cfg, ConvergenceTest::Allreduce)?.deltas)
            })
        })
        .collect();
    let deltas = handles
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("an SOR thread panicked"))?
        })
        .collect::<Result<Vec<_>>>()?;
    if deltas.first().is_none_or(Vec::is_empty) {
        bail!("the SOR run for {data:?} made no iterations");
    }
    Ok(deltas)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> TraceArgs {
        TraceArgs {
            sor_side: 24,
            sor_epsilon: 10.0,
            grid_seed: 7,
        }
    }

    #[test]
    fn best_and_worst_follow_their_definitions() {
        let t = small();
        let best = Workload::new(Input::Best, 6, 3, &t, 50).unwrap();
        assert_eq!(best.decided_locally(), vec![(49, 0); 3]);
        assert_eq!(best.value(5, 48), 10.0);
        assert_eq!(best.value(5, 49), 0.0);
        let worst = Workload::new(Input::Worst, 6, 3, &t, 50).unwrap();
        assert_eq!(worst.decided_locally(), vec![(0, 0); 3]);
        // Not even the total reaches epsilon.
        let total: f64 = (0..6).map(|r| worst.value(r, 3)).sum();
        assert!(total < t.sor_epsilon && total > 0.0, "{total}");
        assert_eq!(best.replays(50), (1, 50));
    }

    #[test]
    fn traces_converge_once_per_replay_and_are_the_same_every_time() {
        let t = small();
        for input in [Input::Frosty, Input::Tridiagonal, Input::Random] {
            let w = Workload::new(input, 6, 3, &t, 1).unwrap();
            let len = w.trace_len();
            assert!(len > 5, "{input:?}: {len} iterations");
            let (n, calls) = w.replays(len * 3 + len / 3);
            assert_eq!((n, calls), (3, 3 * len), "{input:?}");
            let w = Workload::new(input, 6, 3, &t, calls).unwrap();
            // Every value is a non-negative change; the total falls below epsilon exactly
            // at the end of each replay.
            let total = |i: u64| (0..6).map(|r| w.value(r, i)).sum::<f64>();
            for i in 0..calls {
                assert!((0..6).all(|r| w.value(r, i) >= 0.0));
                assert_eq!(
                    total(i) < t.sor_epsilon,
                    i % len == len - 1,
                    "{input:?} {i}"
                );
            }
            // The last call of a replay is never settled locally, so at most
            // calls - replays are; and some are.
            for (local, close) in w.decided_locally() {
                assert!(local + n <= calls && local > 0, "{input:?}: {local}");
                assert_eq!(close, 0);
            }
            // Deterministic: built again, the same values.
            let again = Workload::new(input, 6, 3, &t, calls).unwrap();
            assert!((0..calls).all(|i| (0..6).all(|r| again.value(r, i) == w.value(r, i))));
        }
    }

    #[test]
    fn the_grids_differ_by_seed_and_have_their_shape() {
        use crate::sor::initial_grid;
        let cfg = |data| SorConfig {
            side: 12,
            data,
            ..SorConfig::default()
        };
        let tri = initial_grid(&cfg(SorData::Tridiagonal { seed: 3 }));
        for (at, x) in tri.iter().enumerate() {
            let (i, j) = (at / 12, at % 12);
            assert_eq!(*x == 0.0, i.abs_diff(j) > 3, "({i}, {j}) = {x}");
            assert!((0.0..10_000.0).contains(x));
        }
        let rnd = initial_grid(&cfg(SorData::Random { seed: 3 }));
        assert!(rnd.iter().all(|x| (0.0..10_000.0).contains(x)));
        assert_eq!(rnd, initial_grid(&cfg(SorData::Random { seed: 3 })));
        assert_ne!(rnd, initial_grid(&cfg(SorData::Random { seed: 4 })));
        let frosty = initial_grid(&cfg(SorData::Frosty));
        assert!(frosty[..12].iter().all(|&x| x == 27_760.0));
        assert!(frosty[12..].iter().all(|&x| x == -273.15));
    }
}
