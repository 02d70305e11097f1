//! A micro-benchmark of allreduce on the in-process transport, shared by the example and
//! by `vargr bench`. It measures; it asserts nothing.

use std::sync::{Arc, Barrier};
use std::time::Instant;

use crate::comm::World;
use crate::error::Result;
use crate::inproc::{Fabric, WaitPolicy};
use crate::op::Op;
use crate::select::Algorithm;

/// Runs `iters` allreduces (sum) of `bytes` bytes on `ranks` threads over one
/// [`Fabric`], after a short warm-up, and returns the (median, 90th percentile) latency in
/// microseconds. Per iteration the latency is the slowest rank's time for that call.
/// `bytes` is rounded down to whole `f64`s when it is a multiple of 8, else summed as `u8`.
/// `algorithm = None` uses the built-in selection table.
pub fn bench_allreduce(
    ranks: usize,
    bytes: usize,
    iters: usize,
    algorithm: Option<Algorithm>,
) -> Result<(f64, f64)> {
    bench_allreduce_with(ranks, bytes, iters, algorithm, WaitPolicy::default())
}

/// [`bench_allreduce`] with an explicit wait policy, to tune the in-process transport.
pub fn bench_allreduce_with(
    ranks: usize,
    bytes: usize,
    iters: usize,
    algorithm: Option<Algorithm>,
    policy: WaitPolicy,
) -> Result<(f64, f64)> {
    let ranks = ranks.max(1);
    let iters = iters.max(1);
    let warmup = (iters / 10).clamp(2, 100);
    let fabric = Fabric::with_policy(ranks, policy);
    let start = Arc::new(Barrier::new(ranks));
    let handles: Vec<_> = fabric
        .endpoints()
        .into_iter()
        .map(|ep| {
            let start = start.clone();
            std::thread::spawn(move || -> Result<Vec<f64>> {
                let comm = World::new(Arc::new(ep)).comm()?;
                let mut times = Vec::with_capacity(iters);
                let mut f = vec![comm.rank() as f64; bytes / 8];
                let mut b = vec![comm.rank() as u8; bytes];
                let mut one = |comm: &crate::Comm| {
                    if bytes % 8 == 0 {
                        comm.allreduce_with(&mut f, &Op::Sum, algorithm)
                    } else {
                        comm.allreduce_with(&mut b, &Op::Sum, algorithm)
                    }
                };
                for _ in 0..warmup {
                    one(&comm)?;
                }
                start.wait();
                comm.barrier()?;
                for _ in 0..iters {
                    let t0 = Instant::now();
                    one(&comm)?;
                    times.push(t0.elapsed().as_secs_f64() * 1e6);
                }
                Ok(times)
            })
        })
        .collect();
    let mut per_rank = Vec::with_capacity(ranks);
    for h in handles {
        per_rank.push(h.join().expect("benchmark rank panicked")?);
    }
    let mut worst: Vec<f64> = (0..iters)
        .map(|i| per_rank.iter().map(|t| t[i]).fold(0.0, f64::max))
        .collect();
    worst.sort_by(f64::total_cmp);
    let at = |q: f64| worst[((worst.len() - 1) as f64 * q).round() as usize];
    Ok((at(0.5), at(0.9)))
}
