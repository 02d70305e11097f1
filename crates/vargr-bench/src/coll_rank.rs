//! `vargr-bench coll-bench-rank`: what each vargr rank runs for `vargr bench coll`.
//!
//! It exists so that vargr and Open MPI are timed by the same loop: this file and
//! `bench/mpi/coll_bench.c` are two spellings of one measurement (keep them in step).
//! Each rank runs untimed warm-up calls, one barrier so that all start together, then
//! timed calls with no barrier between them; afterwards the per-rank times are combined
//! with a max-reduce at rank 0 (the slowest rank per iteration), one more call is checked
//! for the right answer, and rank 0 prints one `RESULT {json}` line for the driver.

use std::hint::black_box;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use vargr_coll::{Algorithm, CollError, CollKind, Comm, Op};

/// The collectives the benchmark times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchOp {
    Allreduce,
    Bcast,
    /// The seed's Gsum: many allreduces of one f64, back to back.
    Gsum,
    /// Gsum with a fixed amount of computation before each allreduce.
    ComputeGsum,
}

impl BenchOp {
    pub const ALL: [BenchOp; 4] = [
        BenchOp::Allreduce,
        BenchOp::Bcast,
        BenchOp::Gsum,
        BenchOp::ComputeGsum,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BenchOp::Allreduce => "allreduce",
            BenchOp::Bcast => "bcast",
            BenchOp::Gsum => "gsum",
            BenchOp::ComputeGsum => "compute-gsum",
        }
    }

    pub fn parse(s: &str) -> Result<BenchOp> {
        match BenchOp::ALL.into_iter().find(|o| o.name() == s.trim()) {
            Some(o) => Ok(o),
            None => bail!("unknown op {s:?} (expected allreduce, bcast, gsum or compute-gsum)"),
        }
    }

    /// The collective whose algorithm choice the record reports.
    pub fn kind(self) -> CollKind {
        match self {
            BenchOp::Bcast => CollKind::Bcast,
            _ => CollKind::Allreduce,
        }
    }
}

/// What rank 0 prints after `RESULT ` (the C program prints the same fields, without
/// `algorithm`).
#[derive(Serialize, Deserialize, Debug)]
pub struct RankResult {
    pub iters: usize,
    /// The slowest rank's time for the whole timed loop.
    pub total_s: f64,
    /// Per iteration, the slowest rank's time for that call.
    pub times_us: Vec<f64>,
    #[serde(default)]
    pub algorithm: Option<String>,
}

#[derive(Args, Clone, Debug)]
pub struct CollRankArgs {
    /// allreduce | bcast | gsum | compute-gsum
    #[arg(long)]
    op: String,
    /// Bytes per call (a multiple of 8: the buffer holds f64s).
    #[arg(long)]
    bytes: usize,
    /// Timed calls.
    #[arg(long)]
    iters: usize,
    /// Untimed calls before timing.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Steps of the spin kernel before each call (compute-gsum).
    #[arg(long, default_value_t = 0)]
    compute_iters: u64,
    /// Gsum and compute-gsum only: sum as the seed's sum wrappers do, a reduce to rank 0
    /// then a bcast, both in this shape (`flat`: rank 0 adds every partial sum itself;
    /// `kary:K`: a tree of K-way sums), instead of the allreduce vargr picks.
    #[arg(long, value_name = "flat|kary:K")]
    shape: Option<String>,
}

/// A dependent chain of multiply-adds: fixed work that the compiler can neither vectorize
/// nor drop (the C side runs the same loop, built without FP contraction).
pub fn spin(k: u64, mut x: f64) -> f64 {
    for _ in 0..k {
        x = x * 1.000_000_001 + 1e-9;
    }
    x
}

pub fn run(a: CollRankArgs) -> Result<()> {
    let op = BenchOp::parse(&a.op)?;
    if a.bytes < 8 || !a.bytes.is_multiple_of(8) {
        bail!(
            "--bytes {} is not a positive multiple of 8 (the buffer holds f64s)",
            a.bytes
        );
    }
    if a.iters == 0 {
        bail!("--iters must be at least 1");
    }
    let job = vargr_config::join_job()?;
    let outs = job.run(|c| {
        measure(&c, op, &a).map_err(|e| CollError::Job {
            reason: format!("{e:#}"),
        })
    })?;
    for r in outs.into_iter().flatten() {
        println!("RESULT {}", serde_json::to_string(&r)?);
    }
    job.finish();
    Ok(())
}

/// One rank's part; returns the result at rank 0.
fn measure(c: &Comm, op: BenchOp, a: &CollRankArgs) -> Result<Option<RankResult>> {
    let bcast = op == BenchOp::Bcast;
    let compute = if op == BenchOp::ComputeGsum {
        a.compute_iters
    } else {
        0
    };
    let shape: Option<Algorithm> = match &a.shape {
        Some(s) if matches!(op, BenchOp::Gsum | BenchOp::ComputeGsum) => {
            let alg: Algorithm = s.parse()?;
            if !(alg.supports(CollKind::Reduce) && alg.supports(CollKind::Bcast)) {
                bail!("--shape {s}: not a shape of both reduce and bcast (flat, kary:K)");
            }
            Some(alg)
        }
        Some(s) => bail!(
            "--shape {s} is for gsum and compute-gsum, not {}",
            op.name()
        ),
        None => None,
    };
    let mut partial = vec![0f64; a.bytes / 8];
    let mut call = |buf: &mut [f64]| -> vargr_coll::Result<()> {
        match (bcast, shape) {
            (true, _) => c.bcast(buf, 0),
            (false, None) => c.allreduce(buf, &Op::Sum),
            (false, Some(alg)) => {
                partial.copy_from_slice(buf);
                c.reduce_with(&partial, buf, &Op::Sum, 0, Some(alg))?;
                c.bcast_with(buf, 0, Some(alg))
            }
        }
    };
    // Zeros sum to zeros: every call sees the same numbers (no growth, no denormals).
    let mut buf = vec![0f64; a.bytes / 8];
    for _ in 0..a.warmup {
        call(&mut buf)?;
    }
    let mut times = Vec::with_capacity(a.iters);
    let mut x = 0.5;
    c.barrier()?;
    let start = Instant::now();
    for _ in 0..a.iters {
        let t0 = Instant::now();
        if compute > 0 {
            x = spin(black_box(compute), x);
        }
        call(&mut buf)?;
        times.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let total = start.elapsed().as_secs_f64();
    black_box(x);

    let mut worst = vec![0f64; a.iters];
    c.reduce(&times, &mut worst, &Op::Max, 0)?;
    let mut total_max = [0f64];
    c.reduce(&[total], &mut total_max, &Op::Max, 0)?;

    // One checked call: the timed calls must have been real collectives.
    let (r, p) = (c.rank(), c.size());
    let ok = if bcast {
        for (i, v) in buf.iter_mut().enumerate() {
            *v = if r == 0 { (i % 1000) as f64 } else { -1.0 };
        }
        call(&mut buf)?;
        buf.iter().enumerate().all(|(i, v)| *v == (i % 1000) as f64)
    } else {
        buf.fill((r + 1) as f64);
        call(&mut buf)?;
        let want = (p * (p + 1) / 2) as f64;
        buf.iter().all(|v| *v == want)
    };
    let mut bad = [0i32];
    c.reduce(&[i32::from(!ok)], &mut bad, &Op::Lor, 0)?;
    if r != 0 {
        return Ok(None);
    }
    if bad[0] != 0 {
        bail!("{} of {} bytes gave a wrong result", op.name(), a.bytes);
    }
    Ok(Some(RankResult {
        iters: a.iters,
        total_s: total_max[0],
        times_us: worst,
        algorithm: Some(match shape {
            Some(alg) => format!("reduce+bcast {alg}"),
            None => c.algorithm_for(op.kind(), a.bytes).to_string(),
        }),
    }))
}
