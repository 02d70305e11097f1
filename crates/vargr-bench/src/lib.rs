//! The benchmarks of vargr and the ranks its tests start, kept out of the product
//! binary: `vargr bench …` runs the `vargr-bench` program beside it, whose commands are
//! the benchmarks and, hidden, the roles that benchmarks and tests start as ranks.
//!
//! Benchmarks start trees, jobs, relays and syncs with the product `vargr` and their
//! ranks with `vargr-bench`; [`Programs`] names both.

mod codec;
mod coll;
mod coll_check;
mod coll_rank;
pub mod cond_inputs;
mod dedup;
mod emu;
mod ffi;
mod io;
mod job_check;
mod link;
mod longcut;
mod mpi_shim;
mod noise;
mod procs;
mod skew;
mod sor;
mod sor_bench;
mod trace;
mod tree;
mod video;
mod vnc;
mod wan;

use std::path::{Path, PathBuf};

use anyhow::{ensure, Result};
use clap::{Parser, Subcommand};

/// Tags the built-in back-end (`vargr backend`, crates/vargr-cli/src/roles.rs) answers.
const TAG_ECHO: i32 = 1;
const TAG_BURN: i32 = 7;
/// A viewer of an observed element (see roles.rs).
const TAG_VIEW: i32 = 9;

/// The two programs benchmarks start.
#[derive(Debug, Clone)]
pub struct Programs {
    vargr: PathBuf,
    bench: PathBuf,
}

impl Programs {
    /// `bench` is the program whose roles the ranks run; `vargr` the product binary that
    /// starts trees, jobs (`vargr run`), relays (`vargr emu`) and syncs.
    pub fn new(vargr: PathBuf, bench: PathBuf) -> Programs {
        Programs { vargr, bench }
    }

    /// The product binary, which must exist.
    pub fn vargr(&self) -> Result<&Path> {
        ensure!(
            self.vargr.is_file(),
            "{} not found: the benchmarks start trees, jobs and relays with the vargr \
             binary beside vargr-bench",
            self.vargr.display()
        );
        Ok(&self.vargr)
    }

    /// The program with the rank roles.
    pub fn bench(&self) -> &Path {
        &self.bench
    }
}

#[derive(Parser)]
#[command(
    name = "vargr-bench",
    version,
    about = "vargr's benchmarks (JSON under bench/results/), and the ranks its tests start"
)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start-up, round-trip latency and pipelined throughput of trees (MRNet figure 7).
    Tree(tree::TreeArgs),
    /// Accuracy of the tree's clock-skew estimate against a direct one, on known
    /// injected clock offsets (MRNet §4.2.1).
    Skew(skew::SkewArgs),
    /// Accuracy of the Longcut WAN emulator relay (latency with 2 and 40 connections, bandwidth).
    Emu(emu::EmuBenchArgs),
    /// Longcut's trace-against-constant experiment: PingPong, Allreduce and SOR over a
    /// WAN replaying a varying trace and over one at the trace's means.
    Longcut(longcut::LongcutArgs),
    /// Collective latency, vargr (processes, threads) against Open MPI (TCP, shared memory).
    Coll(coll::CollBenchArgs),
    /// Collective I/O: the seed's workloads by two-phase, LA-Two-Phase (with and without
    /// compression) on emulated hosts, against Open MPI's ROMIO and OMPIO.
    Io(io::BenchIoArgs),
    /// Multi-site gsum over an emulated WAN: hierarchical tree, MagPIe and cond_allreduce
    /// on the seed's inputs (best, worst, frosty, tridiagonal, random).
    Wan(wan::WanBenchArgs),
    /// The seed's noise-allreduce benchmark: sorting between WAN allreduces, system noise
    /// counted, with the tree, MagPIe and cond_allreduce on the seed's inputs.
    Noise(noise::NoiseBenchArgs),
    /// Red-black SOR with 1, 2 and 4 ranks per core, on one site and over two emulated
    /// sites, under each user-level scheduler, with thread-level parallelism, system time,
    /// context switches and hardware counters per run.
    Sor(sor_bench::SorBenchArgs),
    /// Cost of the always-on collectors: per call, and on gsum and compute-gsum.
    Trace(trace::TraceBenchArgs),
    /// Message compression over emulated links: each codec and the adaptive engine on
    /// synthetic and real data, and a bulk transfer against zstd --adapt.
    Codec(codec::CodecBenchArgs),
    /// Redundancy elimination: segmenter throughput, syncs of consecutive releases
    /// against rsync and zstd --patch-from, and two- against one-level fingerprints.
    Dedup(dedup::BenchDedupArgs),
    /// Cost of reaching vargr from C: one call across the C boundary.
    Ffi(ffi::FfiBenchArgs),
    /// Cost of protecting a frame after the handshake: seal and open, per frame size,
    /// under MACs and under encryption.
    Link(link::LinkBenchArgs),
    /// Varg against direct VNC (Raw, Hextile, ZRLE, Tight) over the seed's slow links:
    /// bytes on the wire and update latency of recorded screen sessions.
    Vnc(vnc::VncBenchArgs),
    /// The seed's video distribution: one producer at 12.5 Hz, viewers of different
    /// speeds across an emulated WAN taking the newest frame (last-observe), with a
    /// caching commnode per site and without.
    Video(video::VideoArgs),
    /// libvargr_mpi.so on unmodified MPI programs (NetPIPE, an IS exchange, HPCC): what
    /// tracing costs and what compression between two emulated sites gains.
    MpiShim(mpi_shim::MpiShimArgs),
    /// Joins the job it was started in and prints what it learned (tests of `vargr run`).
    #[command(hide = true)]
    RankInfo,
    /// Joins the job's mesh and checks every pair and a ring (tests of `vargr run`).
    #[command(hide = true)]
    MeshCheck {
        /// Also print, per process, what went through shared memory.
        #[arg(long)]
        shm_stats: bool,
    },
    /// Runs every collective on fixed inputs and prints the results (compared with Open MPI).
    #[command(hide = true)]
    CollCheck,
    /// Concurrent flows between two sites, timed (tests of the shared gateways).
    #[command(hide = true)]
    StreamCheck {
        /// Pairs of ranks that stream at once.
        #[arg(long, default_value_t = 1)]
        pairs: usize,
        /// Bytes each pair sends.
        #[arg(long, default_value_t = 1 << 20)]
        bytes: usize,
        /// Bytes per message.
        #[arg(long, default_value_t = 64 << 10)]
        chunk: usize,
    },
    /// Checks wildcard, non-blocking and probed point-to-point messages (tests of `vargr run`).
    #[command(hide = true)]
    P2pCheck,
    /// Red-black SOR with plain and conditional allreduce; fails if they disagree.
    #[command(hide = true)]
    SorCheck {
        #[arg(long, default_value_t = 48)]
        side: usize,
        #[arg(long, default_value_t = 20.0)]
        epsilon: f64,
    },
    /// One rank of `vargr bench coll`: times a collective, rank 0 prints the result.
    #[command(hide = true)]
    CollBenchRank(coll_rank::CollRankArgs),
    /// One rank of `vargr bench wan`.
    #[command(hide = true)]
    CollWanRank(wan::WanRankArgs),
    /// Allreduce loops with one slow rank (load-balance monitor tests).
    #[command(hide = true)]
    SlowRank {
        #[arg(long)]
        rank: usize,
        #[arg(long, default_value_t = 2000)]
        iters: u32,
        #[arg(long, default_value_t = 1000)]
        sleep_us: u64,
    },
    /// Large compressible bcast and allreduce, checked exactly (codec stage tests).
    #[command(hide = true)]
    CodecCheck {
        #[arg(long, default_value_t = 65536)]
        elements: usize,
        /// Broadcasts of the same field (repeats are what a dedup stage removes).
        #[arg(long, default_value_t = 1)]
        rounds: usize,
    },
    /// One rank of `vargr bench trace`.
    #[command(hide = true)]
    TraceBenchRank(trace::TraceRankArgs),
    /// One rank of `vargr bench codec`.
    #[command(hide = true)]
    CodecBenchRank(codec::CodecRankArgs),
    /// One rank of `vargr bench sor`.
    #[command(hide = true)]
    CollSorRank(sor_bench::SorRankArgs),
    /// One rank of `vargr bench longcut`.
    #[command(hide = true)]
    LongcutRank(longcut::LongcutRankArgs),
    /// One rank of collective I/O: writes and reads a workload's views with vargr-io.
    #[command(hide = true)]
    IoRank(io::IoRankArgs),
}

/// Runs one command of `vargr-bench`.
pub fn run(cli: Cli, programs: &Programs) -> Result<()> {
    match cli.cmd {
        Cmd::Tree(a) => tree::run(a, programs),
        Cmd::Skew(a) => skew::run(a, programs),
        Cmd::Emu(a) => emu::run(a),
        Cmd::Longcut(a) => longcut::run(a, programs),
        Cmd::Coll(a) => coll::run(a, programs),
        Cmd::Io(a) => io::bench(a, programs),
        Cmd::Wan(a) => wan::run(a, programs),
        Cmd::Noise(a) => noise::run(a, programs),
        Cmd::Sor(a) => sor_bench::sor_bench(a, programs),
        Cmd::Trace(a) => trace::run(a, programs),
        Cmd::Codec(a) => codec::run(a, programs),
        Cmd::Dedup(a) => dedup::run(a, programs),
        Cmd::Ffi(a) => ffi::run(a, programs),
        Cmd::Link(a) => link::run(a),
        Cmd::Vnc(a) => vnc::run(a, programs),
        Cmd::Video(a) => video::run(a, programs),
        Cmd::MpiShim(a) => mpi_shim::run(a, programs),
        Cmd::RankInfo => job_check::rank_info(),
        Cmd::MeshCheck { shm_stats } => job_check::mesh_check(shm_stats),
        Cmd::CollCheck => coll_check::run(),
        Cmd::StreamCheck {
            pairs,
            bytes,
            chunk,
        } => job_check::stream_check(pairs, bytes, chunk),
        Cmd::P2pCheck => job_check::p2p_check(),
        Cmd::SorCheck { side, epsilon } => coll_check::sor_check(side, epsilon),
        Cmd::CollBenchRank(a) => coll_rank::run(a),
        Cmd::CollWanRank(a) => wan::rank(a),
        Cmd::CollSorRank(a) => sor_bench::sor_rank(a),
        Cmd::LongcutRank(a) => longcut::rank(a),
        Cmd::TraceBenchRank(a) => trace::rank(a),
        Cmd::CodecBenchRank(a) => codec::rank(a),
        Cmd::IoRank(a) => io::run_rank(a),
        Cmd::SlowRank {
            rank,
            iters,
            sleep_us,
        } => coll_check::slow_rank(rank, iters, sleep_us),
        Cmd::CodecCheck { elements, rounds } => coll_check::codec_check(elements, rounds),
    }
}

/// Where benchmark JSON goes by default.
fn results_dir() -> PathBuf {
    PathBuf::from("bench/results")
}
