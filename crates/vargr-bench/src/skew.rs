//! `vargr bench skew`: how accurate the tree's clock-skew estimate is, against a direct
//! one (seed 003 §4.2.1: MRNet's cumulative-skew scheme against the front-end measuring
//! each daemon itself).
//!
//! Processes of one host share a clock, so every node is given a known offset
//! ([`NetworkOptions::clock_offsets_ns`], a typed test-only setting carried to each node
//! in its start-up configuration) that its skew exchange adds to its clock: the truth is
//! then known exactly. Each run draws offsets for every back-end and commnode, starts a
//! tree (`kary:F@N`: the estimate of a back-end is the sum of the edge estimates on its
//! path, MRNet's cumulative skew) and then a flat network of the same back-ends with the
//! same offsets (the direct estimate: the front-end measures each back-end over one
//! connection). Both measure an edge the same way (vargr-trace's `SkewProbe`: 16 round
//! trips, the offset of the fastest), so what differs is the path: one edge against
//! `depth` edges whose errors add up. The statistic of each is over every back-end of
//! every run: the error `estimate - truth`, its absolute value (mean, median, max) and
//! its standard deviation, the error relative to the back-end's true offset (the seed's
//! "average error" in %), and how often the truth lies within the bound the estimate
//! gives for itself (half the fastest round trip, summed along the path).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use vargr_tbon::{BackendSpec, Network, NetworkOptions};
use vargr_topo::Topology;

use crate::tree::{median, write_records};
use crate::Programs;

#[derive(Args, Clone)]
pub struct SkewArgs {
    /// Write the records as JSON here (default bench/results/skew.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Back-ends (the seed: 64 daemons).
    #[arg(long, default_value_t = 64)]
    backends: usize,
    /// Fan-out of the tree (the seed: four-way, three levels for 64).
    #[arg(long, default_value_t = 4)]
    fanout: usize,
    /// Runs, each with new offsets and new networks.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Injected offsets are uniform in ±[1 ms, this many ms].
    #[arg(long, default_value_t = 50.0)]
    max_offset_ms: f64,
    /// Seed of the offsets.
    #[arg(long, default_value_t = 3)]
    seed: u64,
}

/// One method's errors over every back-end of every run.
#[derive(Serialize, Debug, Clone)]
struct Record {
    method: String,
    topology: String,
    backends: usize,
    runs: usize,
    samples: usize,
    max_offset_ms: f64,
    /// Edges between the front-end and a back-end.
    depth: usize,
    mean_abs_error_us: f64,
    median_abs_error_us: f64,
    max_abs_error_us: f64,
    /// Signed error: a mean far from 0 is a bias (asymmetric paths).
    mean_error_us: f64,
    stddev_error_us: f64,
    /// |error| / |true offset|, in %: the seed's "average error".
    mean_rel_error_pct: f64,
    stddev_rel_error_pct: f64,
    /// The bound the estimate gives for itself (`Alignment::error_ns`).
    mean_bound_us: f64,
    within_bound_pct: f64,
    startup_s_mean: f64,
}

/// xorshift64*: reproducible offsets without a dependency.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in ±[1 ms, max ms], in ns.
    fn offset_ns(&mut self, max_ms: f64) -> i64 {
        let mag = 1.0 + (max_ms - 1.0).max(0.0) * self.next_f64();
        let sign = if self.next_f64() < 0.5 { -1.0 } else { 1.0 };
        (sign * mag * 1e6) as i64
    }
}

/// One back-end's estimate against the truth.
struct Sample {
    error_ns: f64,
    truth_ns: f64,
    bound_ns: f64,
}

/// Per back-end rank: the estimated offset and the bound it gives for itself, in ns.
type Estimates = BTreeMap<u32, (i64, u64)>;

/// Starts `topo` with `offsets` (by node id), waits for every node's alignment and
/// returns each back-end's estimate and the start-up time.
fn measure(
    programs: &Programs,
    topo: &Topology,
    offsets: BTreeMap<u32, i64>,
) -> Result<(Estimates, f64)> {
    let exe = programs.vargr()?;
    let mut opts = NetworkOptions {
        clock_offsets_ns: offsets,
        ..NetworkOptions::default()
    };
    vargr_config::from_process()?.tree_defaults(&mut opts);
    opts.commnode_program
        .get_or_insert_with(|| exe.display().to_string());
    let net = Network::new(
        topo.clone(),
        BackendSpec::command(exe.display().to_string(), &["backend", "echo"]),
        opts,
    )?;
    let startup = net.startup_time().as_secs_f64();
    let got = net.wait_clock_alignment(Duration::from_secs(60));
    let mut out = BTreeMap::new();
    for be in topo.backends() {
        let rank = be.backend_rank.expect("back-ends have ranks");
        let a = got
            .get(&be.id)
            .with_context(|| format!("no clock alignment from back-end {rank} (node {})", be.id))?;
        out.insert(rank, (a.offset_ns, a.error_ns));
    }
    net.shutdown()?;
    Ok((out, startup))
}

fn summarise(
    method: &str,
    topo: &Topology,
    a: &SkewArgs,
    samples: &[Sample],
    startups: &[f64],
) -> Record {
    let n = samples.len().max(1) as f64;
    let errs: Vec<f64> = samples.iter().map(|s| s.error_ns / 1e3).collect();
    let abs: Vec<f64> = errs.iter().map(|e| e.abs()).collect();
    let rel: Vec<f64> = samples
        .iter()
        .map(|s| 100.0 * s.error_ns.abs() / s.truth_ns.abs())
        .collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / n;
    let sd = |v: &[f64]| {
        let m = mean(v);
        (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n).sqrt()
    };
    let depth = topo.backends().first().map_or(0, |b| path_len(topo, b.id));
    Record {
        method: method.into(),
        topology: topo_spec(method, a),
        backends: a.backends,
        runs: a.runs,
        samples: samples.len(),
        max_offset_ms: a.max_offset_ms,
        depth,
        mean_abs_error_us: mean(&abs),
        median_abs_error_us: median(&abs),
        max_abs_error_us: abs.iter().copied().fold(0.0, f64::max),
        mean_error_us: mean(&errs),
        stddev_error_us: sd(&errs),
        mean_rel_error_pct: mean(&rel),
        stddev_rel_error_pct: sd(&rel),
        mean_bound_us: samples.iter().map(|s| s.bound_ns / 1e3).sum::<f64>() / n,
        within_bound_pct: 100.0
            * samples
                .iter()
                .filter(|s| s.error_ns.abs() <= s.bound_ns)
                .count() as f64
            / n,
        startup_s_mean: startups.iter().sum::<f64>() / startups.len().max(1) as f64,
    }
}

/// Edges from the root to node `id`.
fn path_len(topo: &Topology, id: u32) -> usize {
    let mut n = 0;
    let mut at = id;
    while let Some(p) = topo.nodes().find(|n| n.id == at).and_then(|n| n.parent) {
        n += 1;
        at = p;
    }
    n
}

fn topo_spec(method: &str, a: &SkewArgs) -> String {
    match method {
        "tree" => format!("kary:{}@{}", a.fanout, a.backends),
        _ => format!("flat:{}", a.backends),
    }
}

pub fn run(a: SkewArgs, programs: &Programs) -> Result<()> {
    ensure!(
        a.backends > 0 && a.runs > 0,
        "--backends and --runs must be positive"
    );
    ensure!(a.max_offset_ms >= 1.0, "--max-offset-ms must be at least 1");
    let tree = Topology::generate(&topo_spec("tree", &a))?;
    let flat = Topology::generate(&topo_spec("flat", &a))?;
    let mut rng = Rng(a.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let (mut tree_s, mut flat_s) = (Vec::new(), Vec::new());
    let (mut tree_t, mut flat_t) = (Vec::new(), Vec::new());
    for run in 0..a.runs {
        // Every node but the front-end gets a clock of its own; a back-end's offset is
        // the same in both networks.
        let tree_off: BTreeMap<u32, i64> = tree
            .nodes()
            .filter(|n| n.id != 0)
            .map(|n| (n.id, rng.offset_ns(a.max_offset_ms)))
            .collect();
        let by_rank: BTreeMap<u32, i64> = tree
            .backends()
            .iter()
            .map(|b| (b.backend_rank.expect("rank"), tree_off[&b.id]))
            .collect();
        let flat_off: BTreeMap<u32, i64> = flat
            .backends()
            .iter()
            .map(|b| (b.id, by_rank[&b.backend_rank.expect("rank")]))
            .collect();
        for (topo, off, samples, startups) in [
            (&tree, tree_off, &mut tree_s, &mut tree_t),
            (&flat, flat_off, &mut flat_s, &mut flat_t),
        ] {
            let (est, startup) = measure(programs, topo, off)
                .with_context(|| format!("run {run}: measuring skew"))?;
            startups.push(startup);
            for (rank, (offset, bound)) in est {
                let truth = by_rank[&rank] as f64;
                samples.push(Sample {
                    error_ns: offset as f64 - truth,
                    truth_ns: truth,
                    bound_ns: bound as f64,
                });
            }
        }
        println!("run {}/{} done", run + 1, a.runs);
    }
    let records = vec![
        summarise("tree", &tree, &a, &tree_s, &tree_t),
        summarise("direct", &flat, &a, &flat_s, &flat_t),
    ];
    println!(
        "{:<8} {:<12} {:>5} {:>8} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9}",
        "method",
        "topology",
        "depth",
        "samples",
        "|err| us",
        "med us",
        "max us",
        "sd us",
        "rel %",
        "sd %",
        "in bound"
    );
    for r in &records {
        println!(
            "{:<8} {:<12} {:>5} {:>8} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.4} {:>8.4} {:>8.0}%",
            r.method,
            r.topology,
            r.depth,
            r.samples,
            r.mean_abs_error_us,
            r.median_abs_error_us,
            r.max_abs_error_us,
            r.stddev_error_us,
            r.mean_rel_error_pct,
            r.stddev_rel_error_pct,
            r.within_bound_pct
        );
    }
    write_records(a.json.as_deref(), "skew.json", &records)
}
