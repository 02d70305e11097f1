//! `vargr bench wan`: the seed's multi-cluster gsum (000 ch. 7.3) on one machine. Three
//! sites joined by an emulated WAN (Longcut stages on the links between sites) run
//! allreduce loops with the hierarchical tree, MagPIe's all-to-all between site roots,
//! and conditional allreduce, on the *best-case* input (every site settles the test
//! alone until the last iteration) and on *SOR-delta* input (each rank's per-iteration
//! change from a real red-black SOR run). The baseline is the same ranks in one site
//! with no WAN: on two cores, fewer ranks would not be a like-for-like comparison.
//!
//! Each configuration is one `vargr run` job; every rank times each iteration, rank 0
//! gathers the times and prints one JSON record, and the driver prints the table.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use crate::sor::{sor, ConvergenceTest, SorConfig};
use crate::Programs;
use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use vargr_coll::{Across, Algorithm, CondOp, Fabric, Hierarchy, Op, Predicate, World};

#[derive(Args, Clone)]
pub struct WanBenchArgs {
    /// Ranks (split evenly into the sites).
    #[arg(long, default_value_t = 12)]
    ranks: u32,
    /// Sites.
    #[arg(long, default_value_t = 3)]
    sites: u32,
    /// Ranks per process (threads); must divide ranks/sites.
    #[arg(long, default_value_t = 4)]
    ranks_per_process: u32,
    /// Round-trip time of the emulated WAN between every pair of sites.
    #[arg(long, default_value = "36ms")]
    rtt: String,
    /// Iterations of the loops that cross the WAN every time (tree, MagPIe).
    #[arg(long, default_value_t = 100)]
    wan_iters: u64,
    /// Iterations of gsum on one site and of conditional allreduce on best-case input
    /// (the seed's gsum is 20,000).
    #[arg(long, default_value_t = 20_000)]
    gsum_iters: u64,
    /// SOR grid side for the SOR-delta input.
    #[arg(long, default_value_t = 40)]
    sor_side: usize,
    /// SOR convergence threshold (sum of changes) for the SOR-delta input.
    #[arg(long, default_value_t = 40.0)]
    sor_epsilon: f64,
    /// Write the records here (default bench/results/coll-wan.json).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One rank job's measurement, printed by rank 0 as JSON.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct WanRecord {
    benchmark: String,
    op: String,
    input: String,
    bytes: usize,
    ranks: u32,
    ranks_per_process: u32,
    sites: u32,
    wan_rtt_ms: f64,
    algorithm: String,
    iterations: u64,
    median_us: f64,
    p90_us: f64,
    mean_us: f64,
    /// Iterations whose test rank 0's site settled without remote values.
    decided_locally: Option<u64>,
}

/// What one rank job runs.
#[derive(Args, Clone, Debug)]
pub struct WanRankArgs {
    /// tree | magpie | auto | cond
    #[arg(long)]
    mode: String,
    /// best | sor
    #[arg(long)]
    input: String,
    #[arg(long)]
    iters: u64,
    #[arg(long, default_value_t = 40)]
    sor_side: usize,
    #[arg(long, default_value_t = 40.0)]
    sor_epsilon: f64,
    #[arg(long, default_value_t = 0.0)]
    wan_rtt_ms: f64,
    #[arg(long, default_value_t = 1)]
    sites: u32,
}

/// Per-rank SOR deltas for `p` ranks in `sites` sites, from an in-process run.
fn sor_deltas(p: usize, sites: usize, side: usize, epsilon: f64) -> Result<Vec<Vec<f64>>> {
    let cfg = SorConfig {
        side,
        epsilon,
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
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("an SOR thread panicked"))?
        })
        .collect()
}

/// The rank side: runs the loop and has rank 0 print the record.
pub fn rank(a: WanRankArgs) -> Result<()> {
    let job = vargr_config::join_job()?;
    let p = job.size();
    let deltas = match a.input.as_str() {
        "sor" => Some(Arc::new(sor_deltas(
            p,
            a.sites as usize,
            a.sor_side,
            a.sor_epsilon,
        )?)),
        "best" => None,
        other => bail!("unknown --input {other:?} (best or sor)"),
    };
    let epsilon = a.sor_epsilon;
    let results = job.run(|c| {
        let r = c.rank();
        // Best case: a site's own sum always settles `>= epsilon` (each rank gives
        // epsilon), except in the last iteration, when everyone gives 0.
        let input = |i: u64| -> f64 {
            match &deltas {
                Some(d) => d[r][(i as usize) % d[r].len()],
                None if i + 1 == a.iters => 0.0,
                None => epsilon,
            }
        };
        let alg = match a.mode.as_str() {
            "tree" => Some(Algorithm::Hierarchical(Across::Tree)),
            "magpie" => Some(Algorithm::Hierarchical(Across::Magpie)),
            _ => None,
        };
        let mut cond = if a.mode == "cond" {
            Some(c.conditional(CondOp::Sum, Predicate::GreaterEq, epsilon)?)
        } else {
            None
        };
        c.barrier()?;
        let mut times = Vec::with_capacity(a.iters as usize);
        let mut local = 0u64;
        let t0 = Instant::now();
        for i in 0..a.iters {
            let t = Instant::now();
            let v = input(i);
            match &mut cond {
                Some(cond) => local += u64::from(cond.cond_allreduce(v)?.local),
                None => {
                    let mut x = [v];
                    c.allreduce_with(&mut x, &Op::Sum, alg)?;
                }
            }
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let total = t0.elapsed().as_secs_f64() * 1e6;
        if let Some(cond) = cond {
            cond.close()?;
        }
        let algorithm = match (&cond_name(&a.mode), alg) {
            (Some(n), _) => n.to_string(),
            (None, Some(a)) => a.to_string(),
            (None, None) => c
                .algorithm_for(vargr_coll::CollKind::Allreduce, 8)
                .to_string(),
        };
        // Per iteration, the slowest rank's time.
        let mut all = vec![0.0f64; times.len() * c.size()];
        c.gather(&times, &mut all, 0)?;
        let mut totals = vec![0.0f64; c.size()];
        c.gather(&[total], &mut totals, 0)?;
        Ok((r == 0).then(|| {
            let n = times.len();
            let mut worst: Vec<f64> = (0..n)
                .map(|i| (0..c.size()).map(|q| all[q * n + i]).fold(0.0, f64::max))
                .collect();
            worst.sort_by(f64::total_cmp);
            let slowest_total = totals.iter().copied().fold(0.0, f64::max);
            WanRecord {
                benchmark: "gsum-wan".into(),
                op: "allreduce".into(),
                input: a.input.clone(),
                bytes: 8,
                ranks: c.size() as u32,
                ranks_per_process: 0,
                sites: a.sites,
                wan_rtt_ms: a.wan_rtt_ms,
                algorithm,
                iterations: a.iters,
                median_us: crate::tree::percentile(&worst, 50.0),
                p90_us: crate::tree::percentile(&worst, 90.0),
                mean_us: slowest_total / n.max(1) as f64,
                decided_locally: cond_name(&a.mode).map(|_| local),
            }
        }))
    })?;
    job.finish();
    if let Some(Some(rec)) = results.into_iter().next() {
        println!("{}", serde_json::to_string(&rec)?);
    }
    Ok(())
}

fn cond_name(mode: &str) -> Option<&'static str> {
    (mode == "cond").then_some("cond_allreduce")
}

pub fn run(a: WanBenchArgs, programs: &Programs) -> Result<()> {
    let (vargr, bench) = (programs.vargr()?, programs.bench());
    let rtt_ms = vargr_emu::parse_duration(&a.rtt)
        .map_err(|e| anyhow::anyhow!("--rtt: {e}"))?
        .as_secs_f64()
        * 1e3;
    let per_site = a.ranks / a.sites.max(1);
    if a.sites == 0
        || per_site * a.sites != a.ranks
        || per_site.checked_rem(a.ranks_per_process) != Some(0)
    {
        bail!(
            "--ranks {} must split into {} equal sites whose size --ranks-per-process {} divides",
            a.ranks,
            a.sites,
            a.ranks_per_process
        );
    }
    // (label, sites, mode, input, iterations)
    let runs: Vec<(&str, u32, &str, &str, u64)> = vec![
        ("one site, no WAN", 1, "auto", "best", a.gsum_iters),
        (
            "WAN, hierarchical tree",
            a.sites,
            "tree",
            "best",
            a.wan_iters,
        ),
        ("WAN, MagPIe", a.sites, "magpie", "best", a.wan_iters),
        ("WAN, cond_allreduce", a.sites, "cond", "best", a.gsum_iters),
        ("WAN, hierarchical tree", a.sites, "tree", "sor", u64::MAX),
        ("WAN, MagPIe", a.sites, "magpie", "sor", u64::MAX),
        ("WAN, cond_allreduce", a.sites, "cond", "sor", u64::MAX),
    ];
    let sor_len = sor_deltas(
        a.ranks as usize,
        a.sites as usize,
        a.sor_side,
        a.sor_epsilon,
    )?
    .first()
    .map_or(0, Vec::len) as u64;
    let mut records = Vec::new();
    for (label, sites, mode, input, iters) in runs {
        let iters = if iters == u64::MAX { sor_len } else { iters };
        let mut cmd = Command::new(vargr);
        cmd.args(["run", "-n", &a.ranks.to_string()])
            .args(["--ranks-per-process", &a.ranks_per_process.to_string()]);
        if sites > 1 {
            cmd.args(["--sites", &sites.to_string()])
                .args(["--wan", &format!("rtt={}", a.rtt)]);
        }
        cmd.arg("--")
            .arg(bench)
            .args(["coll-wan-rank", "--mode", mode, "--input", input])
            .args(["--iters", &iters.to_string()])
            .args(["--sor-side", &a.sor_side.to_string()])
            .args(["--sor-epsilon", &a.sor_epsilon.to_string()])
            .args(["--sites", &sites.to_string()])
            .args([
                "--wan-rtt-ms",
                &(if sites > 1 { rtt_ms } else { 0.0 }).to_string(),
            ]);
        eprintln!("running: {label}, {input} input, {iters} iterations ...");
        let out = cmd.output().context("starting vargr run")?;
        if !out.status.success() {
            bail!(
                "{label} ({input}) failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.starts_with('{'))
            .with_context(|| format!("{label}: no record in the output: {text}"))?;
        let mut rec: WanRecord = serde_json::from_str(line)?;
        rec.ranks_per_process = a.ranks_per_process;
        eprintln!(
            "  {:.1} µs per iteration (median {:.1} µs)",
            rec.mean_us, rec.median_us
        );
        records.push((label, rec));
    }
    print_table(&records);
    let recs: Vec<&WanRecord> = records.iter().map(|(_, r)| r).collect();
    crate::tree::write_records(a.json.as_deref(), "coll-wan.json", &recs)?;
    Ok(())
}

fn print_table(records: &[(&str, WanRecord)]) {
    let base = records
        .iter()
        .find(|(_, r)| r.sites == 1)
        .map(|(_, r)| r.mean_us);
    let tree_sor = records
        .iter()
        .find(|(_, r)| r.input == "sor" && r.algorithm == "hierarchical:tree")
        .map(|(_, r)| r.mean_us);
    println!(
        "\n{:<26} {:>6} {:>7} {:>12} {:>12} {:>12} {:>9}  vs",
        "configuration", "input", "iters", "mean µs/it", "median µs", "p90 µs", "local"
    );
    for (label, r) in records {
        let rel = match (r.input.as_str(), base, tree_sor) {
            ("best", Some(b), _) => format!("{:.2}× one site", r.mean_us / b),
            ("sor", _, Some(t)) => format!("{:.2}× faster than tree", t / r.mean_us),
            _ => String::new(),
        };
        println!(
            "{:<26} {:>6} {:>7} {:>12.1} {:>12.1} {:>12.1} {:>9}  {rel}",
            label,
            r.input,
            r.iterations,
            r.mean_us,
            r.median_us,
            r.p90_us,
            r.decided_locally.map_or("-".to_string(), |l| l.to_string()),
        );
    }
}

/// `vargr bench sor`: red-black SOR to convergence across two emulated sites with 1, 2
/// and 4 ranks per core (overdecomposition, seed 000 §8.3), with and without the
/// priority scheduler, plain allreduce against conditional allreduce.
#[derive(Args, Clone)]
pub struct SorBenchArgs {
    /// Round-trip time of the emulated WAN between the two sites.
    #[arg(long, default_value = "1ms")]
    rtt: String,
    /// Grid side (384: computation per iteration comparable to the WAN latency here).
    #[arg(long, default_value_t = 384)]
    side: usize,
    /// Convergence threshold (sum of changes; 300000 converges in about 440 iterations).
    #[arg(long, default_value_t = 300_000.0)]
    epsilon: f64,
    /// Ranks per core to try.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    per_core: Vec<u32>,
    /// Write the records here (default bench/results/coll-sor.json).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct SorRecord {
    benchmark: String,
    op: String,
    bytes: usize,
    ranks: u32,
    ranks_per_process: u32,
    ranks_per_core: u32,
    sites: u32,
    wan_rtt_ms: f64,
    algorithm: String,
    sched: String,
    iterations: u64,
    total_s: f64,
    median_us: f64,
    p90_us: f64,
}

/// What one SOR rank job runs.
#[derive(Args, Clone, Debug)]
pub struct SorRankArgs {
    /// plain | cond
    #[arg(long)]
    test: String,
    #[arg(long)]
    side: usize,
    #[arg(long)]
    epsilon: f64,
}

/// The rank side of `vargr bench sor`: rank 0 prints `iterations seconds`.
pub fn sor_rank(a: SorRankArgs) -> Result<()> {
    let job = vargr_config::join_job()?;
    let cfg = SorConfig {
        side: a.side,
        epsilon: a.epsilon,
        ..SorConfig::default()
    };
    let test = match a.test.as_str() {
        "plain" => ConvergenceTest::Allreduce,
        "cond" => ConvergenceTest::Conditional,
        other => bail!("unknown --test {other:?} (plain or cond)"),
    };
    let out = job.run(|c| {
        c.barrier()?;
        let t0 = Instant::now();
        let r = sor(&c, &cfg, test)?;
        let mut t = [t0.elapsed().as_secs_f64()];
        c.allreduce(&mut t, &Op::Max)?;
        Ok((c.rank() == 0).then(|| format!("{} {}", r.iterations, t[0])))
    })?;
    job.finish();
    if let Some(Some(line)) = out.into_iter().next() {
        println!("{line}");
    }
    Ok(())
}

pub fn sor_bench(a: SorBenchArgs, programs: &Programs) -> Result<()> {
    let (vargr, bench) = (programs.vargr()?, programs.bench());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let rtt_ms = vargr_emu::parse_duration(&a.rtt)
        .map_err(|e| anyhow::anyhow!("--rtt: {e}"))?
        .as_secs_f64()
        * 1e3;
    // Two sites, one process per core, each process on one site.
    let procs = cores.max(2);
    let mut records = Vec::new();
    for &k in &a.per_core {
        let ranks = procs * k.max(1);
        for (test, sched) in [
            ("plain", "none"),
            ("plain", "priority"),
            ("cond", "none"),
            ("cond", "priority"),
        ] {
            if k == 1 && sched != "none" {
                continue; // one rank per process: nothing to schedule
            }
            let out = Command::new(vargr)
                .args(["run", "-n", &ranks.to_string()])
                .args(["--ranks-per-process", &k.to_string()])
                .args(["--sites", "2", "--wan", &format!("rtt={}", a.rtt)])
                .args(["--sched", sched, "--"])
                .arg(bench)
                .args(["coll-sor-rank", "--test", test])
                .args(["--side", &a.side.to_string()])
                .args(["--epsilon", &a.epsilon.to_string()])
                .output()
                .context("starting vargr run")?;
            if !out.status.success() {
                bail!(
                    "SOR with {ranks} ranks ({test}, {sched}) failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let text = String::from_utf8_lossy(&out.stdout);
            let mut it = text.split_whitespace();
            let (Some(iters), Some(secs)) = (it.next(), it.next()) else {
                bail!("SOR with {ranks} ranks: no result in {text:?}");
            };
            let (iters, secs): (u64, f64) = (iters.parse()?, secs.parse()?);
            let per_it = secs * 1e6 / iters.max(1) as f64;
            eprintln!(
                "SOR {ranks} ranks ({k}/core), {test}, sched {sched}: {iters} iterations in {secs:.2} s"
            );
            records.push(SorRecord {
                benchmark: "sor-wan".into(),
                op: "allreduce".into(),
                bytes: 8,
                ranks,
                ranks_per_process: k,
                ranks_per_core: k,
                sites: 2,
                wan_rtt_ms: rtt_ms,
                algorithm: if test == "cond" {
                    "cond_allreduce".into()
                } else {
                    "auto".into()
                },
                sched: sched.into(),
                iterations: iters,
                total_s: secs,
                median_us: per_it,
                p90_us: per_it,
            });
        }
    }
    println!(
        "\n{:>6} {:>9} {:>16} {:>9} {:>7} {:>10} {:>12}",
        "ranks", "per core", "test", "sched", "iters", "total s", "µs/iteration"
    );
    for r in &records {
        println!(
            "{:>6} {:>9} {:>16} {:>9} {:>7} {:>10.2} {:>12.1}",
            r.ranks, r.ranks_per_core, r.algorithm, r.sched, r.iterations, r.total_s, r.median_us
        );
    }
    crate::tree::write_records(a.json.as_deref(), "coll-sor.json", &records)?;
    Ok(())
}
