//! `vargr-bench io-rank`: what each vargr rank runs for collective I/O, in tests and in
//! `vargr bench io`.
//!
//! It is the twin of `bench/mpi/io_check.c`: the same workload views (computed by every
//! rank from `vargr_io::workload`), the same data (a pure function of the file offset,
//! so every writer makes the same file), the same timing (a barrier, the operation, the
//! slowest rank's time). Rank 0 prints one `RESULT {json}` line per operation and
//! iteration; reads are checked byte for byte.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use vargr_coll::{Comm, ElemKind, Op};
use vargr_io::workload::{self, Kind};
use vargr_io::{Aggregation, Count, File, Hints, Mode, Solver};

/// Arguments of one rank.
#[derive(Debug, Clone, Args)]
pub struct IoRankArgs {
    /// bips3d, stem2 or ior.
    #[arg(long)]
    pub workload: String,
    /// File size the workload is scaled to (bytes; the workload rounds it).
    #[arg(long)]
    pub bytes: u64,
    #[arg(long)]
    pub file: PathBuf,
    /// two-phase, la-two-phase or la-two-phase+codec.
    #[arg(long, default_value = "la-two-phase")]
    pub method: String,
    /// write, read or both.
    #[arg(long, default_value = "both")]
    pub op: String,
    #[arg(long, default_value_t = 1)]
    pub iters: u32,
    #[arg(long)]
    pub cb_nodes: Option<usize>,
    #[arg(long, default_value_t = 4 << 20)]
    pub cb_buffer: u64,
    /// What LA-Two-Phase counts: bytes or blocks.
    #[arg(long, default_value = "bytes")]
    pub count: String,
    #[arg(long, default_value = "jonker-volgenant")]
    pub solver: String,
}

/// One operation's figures, as rank 0 prints them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IoRankResult {
    pub op: String,
    pub iter: u32,
    /// The slowest rank's time for the operation.
    pub seconds: f64,
    pub bytes: u64,
    pub ranks: usize,
    /// Data bytes sent between nodes, summed over ranks.
    pub bytes_between_nodes: u64,
    pub aggregators: Vec<usize>,
}

/// The hints a method name stands for.
pub fn hints_for(method: &str, count: &str, solver: &str) -> Result<Hints> {
    let locality = || -> Result<Aggregation> {
        Ok(Aggregation::Locality {
            count: match count {
                "bytes" => Count::Bytes,
                "blocks" => Count::Blocks,
                _ => bail!("count {count:?}: bytes or blocks"),
            },
            solver: solver.parse::<Solver>().map_err(anyhow::Error::msg)?,
        })
    };
    let (aggregation, compress) = match method {
        "two-phase" => (Aggregation::TwoPhase, false),
        "la-two-phase" => (locality()?, false),
        "la-two-phase+codec" => (locality()?, true),
        _ => bail!("method {method:?}: two-phase, la-two-phase or la-two-phase+codec"),
    };
    Ok(Hints {
        aggregation,
        compress,
        elem: ElemKind::F64,
        ..Hints::default()
    })
}

fn timed(comm: &Comm, f: impl FnOnce() -> vargr_io::Result<()>) -> Result<f64> {
    comm.barrier()?;
    let t = Instant::now();
    f()?;
    let mut s = [t.elapsed().as_secs_f64()];
    comm.allreduce(&mut s, &Op::Max)?;
    Ok(s[0])
}

fn report(comm: &Comm, file: &File, op: &str, iter: u32, seconds: f64, bytes: u64) -> Result<()> {
    let mut between = [file.stats().bytes_between_nodes];
    comm.allreduce(&mut between, &Op::Sum)?;
    if comm.rank() == 0 {
        let r = IoRankResult {
            op: op.into(),
            iter,
            seconds,
            bytes,
            ranks: comm.size(),
            bytes_between_nodes: between[0],
            aggregators: file.stats().aggregators.clone(),
        };
        println!("RESULT {}", serde_json::to_string(&r)?);
    }
    Ok(())
}

fn rank(comm: &Comm, a: &IoRankArgs) -> Result<()> {
    let kind = Kind::parse(&a.workload)
        .with_context(|| format!("workload {:?}: bips3d, stem2 or ior", a.workload))?;
    let w = workload::sized(kind, comm.size(), a.bytes)?;
    let view = w.views[comm.rank()].clone();
    let data = workload::fill_pattern(view.runs(), 8);
    let mut hints = hints_for(&a.method, &a.count, &a.solver)?;
    hints.cb_nodes = a.cb_nodes;
    hints.cb_buffer_size = a.cb_buffer;
    let (write, read) = match a.op.as_str() {
        "write" => (true, false),
        "read" => (false, true),
        "both" => (true, true),
        o => bail!("op {o:?}: write, read or both"),
    };
    let mode = if write { Mode::create() } else { Mode::READ };
    let mut f = File::open(comm, &a.file, mode, hints)?;
    f.set_view(view.clone());
    for iter in 0..a.iters {
        if write {
            let s = timed(comm, || f.write_all(&data))?;
            report(comm, &f, "write", iter, s, w.file_len)?;
        }
        if read {
            let mut back = vec![0u8; data.len()];
            let s = timed(comm, || f.read_all(&mut back))?;
            if let Some(i) = back.iter().zip(&data).position(|(x, y)| x != y) {
                bail!(
                    "rank {}: read_all gave a wrong byte at data offset {i} of {}",
                    comm.rank(),
                    data.len()
                );
            }
            report(comm, &f, "read", iter, s, w.file_len)?;
        }
    }
    f.close()?;
    Ok(())
}

pub fn run_rank(a: IoRankArgs) -> Result<()> {
    let job = vargr_config::join_job()?;
    job.run(|c| {
        rank(&c, &a).map_err(|e| vargr_coll::CollError::Job {
            reason: format!("{e:#}"),
        })
    })?;
    job.finish();
    Ok(())
}
