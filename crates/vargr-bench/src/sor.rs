//! Red-black successive over-relaxation, the seed's test application for conditional
//! allreduce (seed 000, ch. 7.3 V-A): each rank owns a band of rows, updates its red
//! then its black points, swaps border rows with its neighbours after each colour, and
//! ends each iteration with a convergence test on the sum of all ranks' changes.
//!
//! It is here, beside the benchmarks, so that they and the tests run a real iterative
//! solver, and so that the claim "conditional allreduce does not change the
//! application's result" is checked on the application, not on synthetic inputs.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use vargr_coll::{Comm, CondOp, Op, Predicate, Result};

/// The seed's three SOR data sets (000 ch. 7.3 V-B), as the grid's starting values. The
/// outermost rows and columns are the fixed boundary; SOR relaxes the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SorData {
    /// *frosty*: the top row `hot` (the surface of a blue star), the rest `cold`
    /// (absolute zero).
    Frosty,
    /// *tridiagonal* (the seed's name; its text says the main diagonal and three
    /// diagonals on either side): those seven diagonals random in [0, 10000), the rest 0.
    Tridiagonal { seed: u64 },
    /// *random*: every element random in [0, 10000).
    Random { seed: u64 },
}

/// The problem: a `side × side` grid started from `data` (frosty by default, the seed's
/// data sets shrunk), relaxed until the sum of changes drops below `epsilon`.
#[derive(Debug, Clone, PartialEq)]
pub struct SorConfig {
    pub side: usize,
    pub omega: f64,
    pub epsilon: f64,
    pub max_iterations: u64,
    pub hot: f64,
    pub cold: f64,
    pub data: SorData,
}

/// The whole starting grid, row-major, `side.max(3)` square. Random values come from a
/// seeded generator over the whole grid, so every rank count starts from the same grid.
pub fn initial_grid(cfg: &SorConfig) -> Vec<f64> {
    let n = cfg.side.max(3);
    match cfg.data {
        SorData::Frosty => {
            let mut g = vec![cfg.cold; n * n];
            g[..n].fill(cfg.hot);
            g
        }
        SorData::Tridiagonal { seed } | SorData::Random { seed } => {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            let band = matches!(cfg.data, SorData::Tridiagonal { .. });
            (0..n * n)
                .map(|at| {
                    let (i, j) = (at / n, at % n);
                    // Draw for every element so both sets share one sequence per seed.
                    let x = rng.random_range(0.0..10_000.0);
                    if band && i.abs_diff(j) > 3 {
                        0.0
                    } else {
                        x
                    }
                })
                .collect()
        }
    }
}

impl Default for SorConfig {
    fn default() -> Self {
        SorConfig {
            side: 64,
            omega: 1.5,
            epsilon: 1.0,
            max_iterations: 100_000,
            hot: 27_760.0,
            cold: -273.15,
            data: SorData::Frosty,
        }
    }
}

/// How the convergence test is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvergenceTest {
    /// `allreduce(delta, sum) < epsilon`.
    Allreduce,
    /// `cond_allreduce(delta, sum, >=, epsilon)` ends the loop when it does not hold.
    Conditional,
}

/// What one rank computed.
#[derive(Debug, Clone, PartialEq)]
pub struct SorResult {
    pub iterations: u64,
    /// FNV-1a over the bits of this rank's rows: equal checksums mean equal answers.
    pub checksum: u64,
    /// Iterations a conditional test decided from this site's values alone.
    pub decided_locally: u64,
    /// This rank's delta per iteration (the seed's "SOR-delta" input for benchmarks).
    pub deltas: Vec<f64>,
}

/// Runs SOR on `comm` to convergence (or `max_iterations`).
pub fn sor(comm: &Comm, cfg: &SorConfig, test: ConvergenceTest) -> Result<SorResult> {
    let (r, p) = (comm.rank(), comm.size());
    let n = cfg.side.max(3);
    let interior = n - 2;
    // Rows 1..n-1 are split into bands; row 0 is hot, row n-1 cold, both fixed.
    let lo = 1 + interior * r / p;
    let hi = 1 + interior * (r + 1) / p;
    let rows = hi - lo;
    // Local rows plus one ghost row above and below.
    let mut g = initial_grid(cfg)[(lo - 1) * n..(hi + 1) * n].to_vec();
    let mut cond = match test {
        ConvergenceTest::Conditional => {
            Some(comm.conditional(CondOp::Sum, Predicate::GreaterEq, cfg.epsilon)?)
        }
        ConvergenceTest::Allreduce => None,
    };
    let mut out = SorResult {
        iterations: 0,
        checksum: 0,
        decided_locally: 0,
        deltas: Vec::new(),
    };
    let up = (r > 0).then(|| r - 1);
    let down = (r + 1 < p).then_some(r + 1);
    while out.iterations < cfg.max_iterations {
        out.iterations += 1;
        let mut delta = 0.0;
        for colour in 0..2 {
            for li in 1..=rows {
                let i = lo + li - 1;
                let start = 1 + (i + colour + 1) % 2;
                for j in (start..n - 1).step_by(2) {
                    let at = li * n + j;
                    let old = g[at];
                    let avg = 0.25 * (g[at - n] + g[at + n] + g[at - 1] + g[at + 1]);
                    let new = old + cfg.omega * (avg - old);
                    g[at] = new;
                    delta += (new - old).abs();
                }
            }
            exchange(comm, &mut g, n, rows, up, down, colour as u64)?;
        }
        out.deltas.push(delta);
        let converged = match &mut cond {
            None => {
                let mut d = [delta];
                comm.allreduce(&mut d, &Op::Sum)?;
                d[0] < cfg.epsilon
            }
            Some(c) => {
                let o = c.cond_allreduce(delta)?;
                out.decided_locally += u64::from(o.local);
                !o.holds
            }
        };
        if converged {
            break;
        }
    }
    if let Some(c) = cond {
        c.close()?;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in &g[n..(rows + 1) * n] {
        for b in x.to_bits().to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    out.checksum = h;
    Ok(out)
}

/// Swaps border rows with the neighbours: my first row up, my last row down.
fn exchange(
    comm: &Comm,
    g: &mut [f64],
    n: usize,
    rows: usize,
    up: Option<usize>,
    down: Option<usize>,
    tag: u64,
) -> Result<()> {
    if let Some(u) = up {
        comm.send(u, tag, &g[n..2 * n])?;
    }
    if let Some(d) = down {
        comm.send(d, tag, &g[rows * n..(rows + 1) * n])?;
    }
    if let Some(u) = up {
        comm.recv(u, tag, &mut g[..n])?;
    }
    if let Some(d) = down {
        comm.recv(d, tag, &mut g[(rows + 1) * n..(rows + 2) * n])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use vargr_coll::{Fabric, Hierarchy, WaitPolicy, World};

    use super::*;

    /// `p` ranks as threads in `sites` contiguous sites, one host per site; `f` runs on
    /// each rank's world communicator.
    fn run_in_sites(p: usize, sites: usize, f: impl Fn(Comm) + Send + Sync + 'static) {
        let site: Vec<u32> = (0..p).map(|r| (r * sites / p) as u32).collect();
        let hierarchy = Hierarchy::new(site.clone(), site).unwrap();
        let wait = WaitPolicy {
            spins: 0,
            yields: 64,
            timeout: Some(Duration::from_secs(30)),
        };
        let f = Arc::new(f);
        let handles: Vec<_> = Fabric::with_policy(p, wait)
            .endpoints()
            .into_iter()
            .map(|ep| {
                let (f, h) = (f.clone(), hierarchy.clone());
                std::thread::spawn(move || {
                    f(World::new(Arc::new(ep)).with_hierarchy(h).comm().unwrap())
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a rank panicked");
        }
    }

    #[test]
    fn sor_converges_identically_with_plain_and_conditional_allreduce() {
        let cfg = SorConfig {
            side: 48,
            epsilon: 20.0,
            ..SorConfig::default()
        };
        for (p, s) in [(6, 3), (4, 2), (5, 1)] {
            let out = Arc::new(Mutex::new(Vec::new()));
            let (o, cfg2) = (out.clone(), cfg.clone());
            run_in_sites(p, s, move |c| {
                let plain = sor(&c, &cfg2, ConvergenceTest::Allreduce).unwrap();
                let cond = sor(&c, &cfg2, ConvergenceTest::Conditional).unwrap();
                o.lock().unwrap().push((c.rank(), plain, cond));
            });
            let out = out.lock().unwrap();
            let mut local = 0;
            for (rank, plain, cond) in out.iter() {
                assert!(plain.iterations > 50, "{}", plain.iterations);
                assert!(plain.iterations < cfg.max_iterations);
                assert_eq!(plain.iterations, cond.iterations, "rank {rank}, {p} ranks");
                assert_eq!(plain.checksum, cond.checksum, "rank {rank}, {p} ranks");
                local += cond.decided_locally;
            }
            // The point of it: most tests are settled without remote sites.
            assert!(local > 0, "{p} ranks in {s} sites: nothing decided locally");
        }
    }
}
