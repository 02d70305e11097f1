//! `vargr bench trace`: what always-on collectors cost.
//!
//! The cost of one collector call is timed in a tight loop. The overhead on real work is
//! measured like for like inside one run: each rank alternates blocks of gsum (the seed's
//! back-to-back 8-byte allreduces) or compute-gsum (half computation) with collectors on
//! and off (the run-time switch; all ranks switch at the same block), so the machine's
//! drift hits both equally. The overhead is the median of the ratios of adjacent on/off
//! pairs, with a 95 % interval for it: on two shared cores single blocks vary by a few
//! percent, and only many pairs pin down an effect below one percent. A model beside it
//! (events per call × cost of one collector call ÷ time per call) says what the
//! collectors alone can cost.
//!
//! With `--compiled-out BIN` (a vargr-bench built with `--features trace-off`), whole
//! runs with this program's ranks and with BIN's alternate, and the overhead is the
//! median of the runs' ratios.
//! A last run injects a slow rank and times how long the load-balance monitor takes to
//! name it. With `--wan PROFILE` the monitors also run on a job of several sites joined
//! by an emulated WAN: the seed's WAN multi-cluster rows (004, Tables 1 and 2).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use crate::tree::median;
use crate::Programs;
use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use vargr_coll::Op;
use vargr_trace::{EventOp, Record, NO_PEER};

#[derive(Args, Clone)]
pub struct TraceBenchArgs {
    /// Rank counts to run.
    #[arg(long, value_delimiter = ',', default_value = "4,16")]
    ranks: Vec<u32>,
    /// Allreduces in the first warm-up block, which sizes the others.
    #[arg(long, default_value_t = 200)]
    iters: u32,
    /// Target length of one block (ms): every configuration gets as many pairs in the
    /// same time, whatever one call costs.
    #[arg(long, default_value_t = 40)]
    block_ms: u32,
    /// Blocks per run (half with collectors on, half off, alternating).
    #[arg(long, default_value_t = 120)]
    blocks: u32,
    /// Ranks of the extra run that measures the monitor's gather rate (gsum only).
    #[arg(long)]
    gather_ranks: Option<u32>,
    /// A vargr-bench built with `--features trace-off`: its ranks compare with the
    /// collectors compiled out (the jobs are started by the vargr beside this program).
    #[arg(long)]
    compiled_out: Option<PathBuf>,
    /// Runs of each binary for the compiled-out comparison (each a quarter of
    /// `--blocks` long).
    #[arg(long, default_value_t = 8)]
    runs: u32,
    /// Ranks of the slow-rank detection run (0 skips it).
    #[arg(long, default_value_t = 16)]
    slow_ranks: u32,
    /// The seed's WAN rows: also run the monitors on a multi-site job whose sites are
    /// joined by this emulated WAN (`vargr run --wan`, e.g. `rtt=36ms`).
    #[arg(long)]
    wan: Option<String>,
    /// Sites of the WAN runs (`vargr run --sites`).
    #[arg(long, default_value_t = 3)]
    wan_sites: u32,
    /// Ranks of the WAN runs, one per process.
    #[arg(long, default_value_t = 12)]
    wan_ranks: u32,
    /// Blocks per WAN run: an allreduce crosses the WAN, so a block holds at least 20 of
    /// them and takes seconds.
    #[arg(long, default_value_t = 16)]
    wan_blocks: u32,
    /// Only the WAN runs (with --wan): no collector cost, no local runs, no detection.
    #[arg(long)]
    wan_only: bool,
    /// Only the gather-tree comparison: a slow-rank job of `--gather-ranks` processes
    /// (64 unless given) monitored with each of these gather fan-outs (one at least the
    /// processes is the flat gather); the monitor's pull time, answer bytes and
    /// connections. Written to bench/results/trace-gather.json unless `--json`.
    #[arg(long, value_delimiter = ',')]
    gather_fanouts: Vec<usize>,
    /// Allreduces of each gather-tree run.
    #[arg(long, default_value_t = 1500)]
    gather_iters: u32,
    /// Runs of each fan-out, alternating.
    #[arg(long, default_value_t = 3)]
    gather_runs: u32,
    /// Write the records here (default bench/results/trace.json).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize, Debug, Clone)]
struct BenchRecord {
    benchmark: String,
    config: String,
    ranks: u32,
    ranks_per_process: u32,
    median_us: f64,
    median_off_us: Option<f64>,
    overhead_pct: Option<f64>,
    /// Half-width of the 95 % interval of `overhead_pct`.
    overhead_ci_pct: Option<f64>,
    /// Events recorded per allreduce per rank, and what they cost by the model.
    records_per_call: Option<f64>,
    model_overhead_pct: Option<f64>,
    gather_rate: Option<f64>,
    records_lost: Option<u64>,
    collector_ns: Option<f64>,
    /// Seconds until the load-balance monitor named an injected slow rank.
    detect_s: Option<f64>,
    /// Gather-tree runs: the fan-out, and at the monitor the pulls, their mean and
    /// longest time, answer bytes per pull and connections (medians over the runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    fanout: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pulls: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pull_ms_mean: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pull_ms_max: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    root_bytes_per_pull: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    root_connections: Option<u64>,
}

impl BenchRecord {
    fn new(benchmark: &str, config: String, ranks: u32, ranks_per_process: u32) -> BenchRecord {
        BenchRecord {
            benchmark: benchmark.into(),
            config,
            ranks,
            ranks_per_process,
            median_us: f64::NAN,
            median_off_us: None,
            overhead_pct: None,
            overhead_ci_pct: None,
            records_per_call: None,
            model_overhead_pct: None,
            gather_rate: None,
            records_lost: None,
            collector_ns: None,
            detect_s: None,
            fanout: None,
            pulls: None,
            pull_ms_mean: None,
            pull_ms_max: None,
            root_bytes_per_pull: None,
            root_connections: None,
        }
    }
}

/// What one rank job runs.
#[derive(Args, Clone, Debug)]
pub struct TraceRankArgs {
    /// Allreduces in the first warm-up block.
    #[arg(long)]
    iters: u32,
    /// Target block length (ms), from which the first block sizes the others.
    #[arg(long, default_value_t = 40)]
    block_ms: u32,
    #[arg(long)]
    blocks: u32,
    /// Spin-kernel steps before each allreduce (0 = gsum).
    #[arg(long, default_value_t = 0)]
    compute_steps: u64,
    /// Keep collectors as built in every block (no on/off alternation).
    #[arg(long)]
    fixed: bool,
}

#[derive(Serialize, Deserialize, Debug)]
struct RankOut {
    on_us: Vec<f64>,
    off_us: Vec<f64>,
    /// Events recorded per allreduce, averaged over ranks (collector blocks only).
    records_per_call: f64,
}

/// The rank side: blocks of allreduces, collectors switched per block; rank 0 prints the
/// per-call time of each block.
pub fn rank(a: TraceRankArgs) -> Result<()> {
    let job = vargr_config::join_job()?;
    let outs = job.run(|c| {
        let mut on = Vec::new();
        let mut off = Vec::new();
        let mut x = 0.5f64;
        let (mut events, mut calls) = (0u64, 0u64);
        let mut iters = a.iters.max(1);
        for b in 0..a.blocks + 2 {
            let tracing = a.fixed || b % 2 == 0;
            vargr_trace::set_enabled(tracing);
            vargr_coll::monitor::set_active(tracing);
            c.barrier()?;
            let before = vargr_trace::thread_records();
            let t = Instant::now();
            for _ in 0..iters {
                if a.compute_steps > 0 {
                    x = crate::coll_rank::spin(std::hint::black_box(a.compute_steps), x);
                }
                let mut v = [x];
                c.allreduce(&mut v, &Op::Sum)?;
                x = v[0] * 1e-9;
            }
            let mut us = [t.elapsed().as_secs_f64() * 1e6 / f64::from(iters)];
            if tracing {
                events += vargr_trace::thread_records() - before;
                calls += u64::from(iters);
            }
            c.allreduce(&mut us, &Op::Max)?;
            // The first two blocks warm up; the first also sizes the rest (the same on
            // every rank: `us` is the maximum over ranks).
            if b == 0 {
                iters = (f64::from(a.block_ms) * 1e3 / us[0]).clamp(20.0, 1e6) as u32;
            }
            if b >= 2 {
                if tracing { &mut on } else { &mut off }.push(us[0]);
            }
        }
        vargr_trace::set_enabled(true);
        std::hint::black_box(x);
        let mut per_call = [events as f64 / calls.max(1) as f64];
        c.allreduce(&mut per_call, &Op::Sum)?;
        Ok((c.rank() == 0).then_some(RankOut {
            on_us: on,
            off_us: off,
            records_per_call: per_call[0] / c.size() as f64,
        }))
    })?;
    job.finish();
    if let Some(Some(o)) = outs.into_iter().next() {
        println!("{}", serde_json::to_string(&o)?);
    }
    Ok(())
}

/// The monitor's final gather rate and lost records, from the line it prints.
fn monitor_totals(stderr: &str) -> (Option<f64>, Option<u64>) {
    // The log line may carry a level prefix (` INFO vargr monitor: ...`).
    let Some(line) = stderr
        .lines()
        .find_map(|l| l.find("vargr monitor: gathered").map(|i| &l[i..]))
    else {
        return (None, None);
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    let lost = words
        .iter()
        .position(|w| *w == "overwritten")
        .and_then(|i| words.get(i.wrapping_sub(1)))
        .and_then(|w| w.parse().ok());
    let rate = line
        .rsplit("gather rate ")
        .next()
        .and_then(|r| r.trim_end_matches(')').parse().ok());
    (rate, lost)
}

/// Overhead in percent of `on` over `off` from paired samples (adjacent blocks, or
/// runs): the median of the pairs' ratios, and the half-width of its 95 % interval
/// (normal approximation of the median's standard error, 1.2533·sd/√n).
fn paired_overhead(on: &[f64], off: &[f64]) -> (f64, f64) {
    let r: Vec<f64> = on
        .iter()
        .zip(off)
        .map(|(a, b)| (a / b - 1.0) * 100.0)
        .collect();
    let n = r.len() as f64;
    if r.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mean = r.iter().sum::<f64>() / n;
    let sd = (r.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt();
    (median(&r), 1.96 * 1.2533 * sd / n.sqrt())
}

/// One `vargr run` of the rank benchmark, its ranks being `programs.bench()`; returns
/// what rank 0 printed and the job's stderr.
#[allow(clippy::too_many_arguments)]
fn rank_job(
    programs: &Programs,
    n: u32,
    k: u32,
    a: &TraceBenchArgs,
    steps: u64,
    fixed: bool,
    env: &[(&str, &str)],
    sites: &[String],
) -> Result<(RankOut, String)> {
    // Whole runs are compared by their medians: fewer blocks do.
    let blocks = if fixed {
        (a.blocks / 4).max(4)
    } else if !sites.is_empty() {
        a.wan_blocks
    } else {
        a.blocks
    };
    let (vargr, ranks) = (programs.vargr()?, programs.bench());
    let out = Command::new(vargr)
        .args(["run", "-n", &n.to_string()])
        .args(["--ranks-per-process", &k.to_string()])
        .args(sites)
        .arg("--")
        .arg(ranks)
        .args(["trace-bench-rank", "--iters", &a.iters.to_string()])
        .args(["--block-ms", &a.block_ms.to_string()])
        .args(["--blocks", &blocks.to_string()])
        .args(["--compute-steps", &steps.to_string()])
        .args(fixed.then_some("--fixed"))
        .envs(env.iter().copied())
        .output()
        .with_context(|| format!("starting {} run", vargr.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!("{} ranks with {}: {stderr}", n, ranks.display());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("no result from the ranks: {text}"))?;
    Ok((serde_json::from_str(line)?, stderr))
}

/// Seconds from the monitor's start until it first names `slow` as the last to arrive.
fn detection_time(programs: &Programs, n: u32, slow: u32) -> Result<Option<f64>> {
    let out = Command::new(programs.vargr()?)
        .args(["run", "-n", &n.to_string(), "--monitor", "--"])
        .arg(programs.bench())
        .args(["slow-rank", "--rank", &slow.to_string(), "--iters", "3000"])
        .env("VARGR_MONITOR_PERIOD_MS", "100")
        .output()
        .context("starting the slow-rank run")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("slow-rank run failed: {stderr}");
    }
    let needle = format!("allreduce: rank {slow} arrived last");
    Ok(stderr
        .lines()
        .filter(|l| l.contains(&needle))
        .filter_map(|l| {
            l.strip_prefix("vargr monitor ")?
                .split(" s:")
                .next()?
                .parse()
                .ok()
        })
        .next())
}

/// Nanoseconds per collector call: one timestamp plus one record, as the collectives
/// write them; and with two timestamps (start and end taken by the collector itself).
fn collector_cost() -> (f64, f64) {
    let id = vargr_trace::collector("bench/collector");
    let n = 5_000_000u32;
    let call = |two: bool| {
        let t = Instant::now();
        for i in 0..n {
            let start = if two { vargr_trace::now() } else { 0 };
            vargr_trace::record(std::hint::black_box(&Record {
                start,
                end: vargr_trace::now(),
                seq: i,
                bytes: 8,
                collector: id,
                op: EventOp::User as u8,
                status: 0,
                peer: NO_PEER,
            }));
        }
        t.elapsed().as_nanos() as f64 / f64::from(n)
    };
    let _ = call(false);
    let one = (0..3).map(|_| call(false)).fold(f64::INFINITY, f64::min);
    let two = (0..3).map(|_| call(true)).fold(f64::INFINITY, f64::min);
    (one, two)
}

/// What the monitor's gathers cost it, from its final line.
#[derive(Debug, Clone, Copy, PartialEq)]
struct GatherCost {
    pulls: u64,
    mean_ms: f64,
    max_ms: f64,
    bytes: u64,
    connections: u64,
}

/// Parses `vargr monitor: P pulls, mean M ms, longest X ms; B answer bytes over C
/// connections at the monitor`.
fn gather_cost(stderr: &str) -> Option<GatherCost> {
    let line = stderr
        .lines()
        .filter(|l| l.contains(" pulls, mean "))
        .find_map(|l| l.find("vargr monitor: ").map(|i| &l[i..]))?;
    let w: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| w.get(i).map(|x| x.trim_end_matches([',', ';']));
    Some(GatherCost {
        pulls: num(2)?.parse().ok()?,
        mean_ms: num(5)?.parse().ok()?,
        max_ms: num(8)?.parse().ok()?,
        bytes: num(10)?.parse().ok()?,
        connections: num(14)?.parse().ok()?,
    })
}

/// The gather-tree comparison (`--gather-fanouts`): see [`TraceBenchArgs`].
fn gather_tree_runs(a: &TraceBenchArgs, programs: &Programs) -> Result<Vec<BenchRecord>> {
    let n = a.gather_ranks.unwrap_or(64);
    let mut costs: Vec<Vec<GatherCost>> = vec![Vec::new(); a.gather_fanouts.len()];
    // The lowest gather rate and the most records lost over each fan-out's runs.
    let mut totals: Vec<(f64, u64)> = vec![(1.0, 0); a.gather_fanouts.len()];
    for round in 0..a.gather_runs.max(1) {
        for (i, &k) in a.gather_fanouts.iter().enumerate() {
            let out = Command::new(programs.vargr()?)
                .args([
                    "run",
                    "-n",
                    &n.to_string(),
                    "--monitor",
                    "load-balance",
                    "--",
                ])
                .arg(programs.bench())
                .args(["slow-rank", "--rank", "1", "--sleep-us", "1000"])
                .args(["--iters", &a.gather_iters.to_string()])
                .env("VARGR_MONITOR_FANOUT", k.to_string())
                .output()
                .context("starting a gather-tree run")?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() {
                bail!("gather-tree run of {n} processes, fan-out {k}: {stderr}");
            }
            let c = gather_cost(&stderr)
                .with_context(|| format!("no gather cost from the monitor: {stderr}"))?;
            if let (Some(rate), Some(lost)) = monitor_totals(&stderr) {
                totals[i] = (totals[i].0.min(rate), totals[i].1.max(lost));
            }
            eprintln!(
                "gather {n} processes, fan-out {k} (run {round}): {} pulls, mean {:.2} ms, \
                 longest {:.2} ms, {:.0} bytes per pull over {} connections",
                c.pulls,
                c.mean_ms,
                c.max_ms,
                c.bytes as f64 / c.pulls.max(1) as f64,
                c.connections
            );
            costs[i].push(c);
        }
    }
    Ok(a.gather_fanouts
        .iter()
        .zip(costs)
        .zip(totals)
        .map(|((&k, c), (rate, lost))| {
            let m = |f: &dyn Fn(&GatherCost) -> f64| median(&c.iter().map(f).collect::<Vec<f64>>());
            let mean = m(&|c| c.mean_ms);
            let shape = if k as u32 >= n { "flat" } else { "tree" };
            BenchRecord {
                median_us: mean * 1e3,
                fanout: Some(k),
                pulls: Some(m(&|c| c.pulls as f64) as u64),
                pull_ms_mean: Some(mean),
                pull_ms_max: Some(m(&|c| c.max_ms)),
                root_bytes_per_pull: Some(m(&|c| c.bytes as f64 / c.pulls.max(1) as f64)),
                root_connections: Some(m(&|c| c.connections as f64) as u64),
                gather_rate: Some(rate),
                records_lost: Some(lost),
                ..BenchRecord::new(
                    "gather",
                    format!("load-balance monitor's pull, fan-out {k} ({shape})"),
                    n,
                    1,
                )
            }
        })
        .collect())
}

pub fn run(a: TraceBenchArgs, programs: &Programs) -> Result<()> {
    if !a.gather_fanouts.is_empty() {
        let records = gather_tree_runs(&a, programs)?;
        return crate::tree::write_records(a.json.as_deref(), "trace-gather.json", &records);
    }
    let mut records = Vec::new();
    vargr_trace::set_enabled(true);
    let (one, two) = collector_cost();
    eprintln!("collector call: {one:.1} ns (one timestamp), {two:.1} ns (two)");
    if a.wan.is_some() && a.wan_only {
        // Only the WAN runs below.
    } else {
        for (config, ns) in [
            ("collector call, one timestamp", one),
            ("collector call, two timestamps", two),
        ] {
            records.push(BenchRecord {
                median_us: ns / 1000.0,
                collector_ns: Some(ns),
                ..BenchRecord::new("collector", config.into(), 1, 1)
            });
        }
    }
    // (what runs besides the collectors, environment of the ranks)
    let monitors: [(&str, &[(&str, &str)]); 4] = [
        ("collectors", &[]),
        ("load-balance monitor", &[("VARGR_MONITOR", "load-balance")]),
        ("statistics monitor", &[("VARGR_MONITOR", "stats")]),
        (
            "statistics monitor, coscheduled",
            &[
                ("VARGR_MONITOR", "stats"),
                ("VARGR_MONITOR_COSCHEDULE", "1"),
            ],
        ),
    ];
    // (ranks, transport, ranks per process, monitors label, their environment)
    type Run<'a> = (u32, &'a str, u32, &'a str, &'a [(&'a str, &'a str)]);
    let mut runs: Vec<Run> = Vec::new();
    let local = !(a.wan.is_some() && a.wan_only);
    for &n in a.ranks.iter().filter(|_| local) {
        runs.push((n, "threads", n, monitors[0].0, monitors[0].1));
        for (label, env) in monitors {
            runs.push((n, "processes", 1, label, env));
        }
    }
    if let (Some(&n), true) = (a.gather_ranks.as_ref(), local) {
        runs.push((n, "processes", 1, monitors[1].0, monitors[1].1));
    }
    // The seed's WAN rows: the same monitors on a job of several sites.
    let wan_transport = a
        .wan
        .as_ref()
        .map(|w| format!("processes, {} sites, WAN {w}", a.wan_sites));
    if let Some(t) = &wan_transport {
        for (label, env) in monitors {
            runs.push((a.wan_ranks, t.as_str(), 1, label, env));
        }
    }
    let wan_args: Vec<String> = match &a.wan {
        Some(w) => vec![
            "--sites".into(),
            a.wan_sites.to_string(),
            "--wan".into(),
            w.clone(),
        ],
        None => Vec::new(),
    };
    let cost_ns = two;
    let mut gsum_us: std::collections::HashMap<(u32, &str), f64> = Default::default();
    for (n, transport, k, label, env) in runs {
        for workload in ["gsum", "compute-gsum"] {
            if n > 16 && workload == "compute-gsum" {
                continue; // the large run is there for the gather rate
            }
            let steps = match (workload, gsum_us.get(&(n, transport))) {
                ("gsum", _) => 0,
                // Half computation: as long as one gsum allreduce took.
                (_, Some(&us)) => crate::coll::calibrate_spin(us).0,
                _ => bail!("compute-gsum needs the gsum time first"),
            };
            let sites: &[String] = if Some(transport) == wan_transport.as_deref() {
                &wan_args
            } else {
                &[]
            };
            let (r, stderr) = rank_job(programs, n, k, &a, steps, false, env, sites)?;
            let (on, off) = (median(&r.on_us), median(&r.off_us));
            if workload == "gsum" && label == "collectors" {
                gsum_us.insert((n, transport), off);
            }
            let (pct, ci) = paired_overhead(&r.on_us, &r.off_us);
            let model = r.records_per_call * cost_ns / 1e3 / off * 100.0;
            let (gather_rate, records_lost) = monitor_totals(&stderr);
            eprintln!(
                "{workload} {n} ranks ({transport}, {label}): {on:.2} µs/call on, {off:.2} off \
                 ({pct:+.2} ± {ci:.2} %; model {model:.3} % for {:.1} events/call)",
                r.records_per_call
            );
            records.push(BenchRecord {
                median_us: on,
                median_off_us: Some(off),
                overhead_pct: Some(pct),
                overhead_ci_pct: Some(ci),
                records_per_call: Some(r.records_per_call),
                model_overhead_pct: Some(model),
                gather_rate,
                records_lost,
                ..BenchRecord::new(
                    workload,
                    format!("{label} on vs off at run time ({transport})"),
                    n,
                    k,
                )
            });
            if let (Some(off_exe), true) = (&a.compiled_out, label == "collectors") {
                let compiled_out = Programs::new(programs.vargr()?.to_path_buf(), off_exe.clone());
                // Whole runs of each binary, alternating; collectors as built.
                let (mut ons, mut offs) = (Vec::new(), Vec::new());
                for _ in 0..a.runs {
                    ons.push(median(
                        &rank_job(programs, n, k, &a, steps, true, &[], &[])?.0.on_us,
                    ));
                    offs.push(median(
                        &rank_job(&compiled_out, n, k, &a, steps, true, &[], &[])?
                            .0
                            .on_us,
                    ));
                }
                let (pct, ci) = paired_overhead(&ons, &offs);
                let (on, off) = (median(&ons), median(&offs));
                eprintln!(
                    "{workload} {n} ranks ({transport}): {on:.2} µs/call with collectors, \
                     {off:.2} compiled out ({pct:+.2} ± {ci:.2} % over {} run pairs)",
                    a.runs
                );
                records.push(BenchRecord {
                    median_us: on,
                    median_off_us: Some(off),
                    overhead_pct: Some(pct),
                    overhead_ci_pct: Some(ci),
                    ..BenchRecord::new(
                        workload,
                        format!("collectors on vs compiled out ({transport})"),
                        n,
                        k,
                    )
                });
            }
        }
    }
    if a.slow_ranks > 1 && local {
        let slow = a.slow_ranks / 2 + 1;
        let t = detection_time(programs, a.slow_ranks, slow.min(a.slow_ranks - 1))?;
        eprintln!(
            "slow rank among {}: named after {}",
            a.slow_ranks,
            t.map_or("never".into(), |t| format!("{t:.1} s"))
        );
        records.push(BenchRecord {
            detect_s: t,
            ..BenchRecord::new(
                "slow-rank detection",
                "load-balance monitor, 1 ms sleep per iteration".into(),
                a.slow_ranks,
                1,
            )
        });
    }
    println!(
        "\n{:<20} {:<66} {:>5} {:>9} {:>9} {:>16} {:>8} {:>8} {:>6}",
        "benchmark",
        "config",
        "ranks",
        "µs (on)",
        "µs (off)",
        "overhead (95 %)",
        "model",
        "gather",
        "lost"
    );
    for r in &records {
        if let Some(ns) = r.collector_ns {
            println!(
                "{:<20} {:<66} {:>5} {:>7.1} ns",
                r.benchmark, r.config, r.ranks, ns
            );
        } else if r.benchmark == "slow-rank detection" {
            println!(
                "{:<20} {:<66} {:>5} named after {}",
                r.benchmark,
                r.config,
                r.ranks,
                r.detect_s.map_or("never".into(), |t| format!("{t:.1} s"))
            );
        } else {
            println!(
                "{:<20} {:<66} {:>5} {:>9.2} {:>9.2} {:>16} {:>8} {:>8} {:>6}",
                r.benchmark,
                r.config,
                r.ranks,
                r.median_us,
                r.median_off_us.unwrap_or(f64::NAN),
                format!(
                    "{:+.2} ± {:.2} %",
                    r.overhead_pct.unwrap_or(f64::NAN),
                    r.overhead_ci_pct.unwrap_or(f64::NAN)
                ),
                r.model_overhead_pct
                    .map_or("-".into(), |m| format!("{m:.3} %")),
                r.gather_rate.map_or("-".into(), |g| format!("{g:.4}")),
                r.records_lost.map_or("-".into(), |l| l.to_string()),
            );
        }
    }
    crate::tree::write_records(a.json.as_deref(), "trace.json", &records)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monitors_last_line_is_read_with_or_without_a_level() {
        for prefix in ["", " INFO "] {
            let err = format!(
                "other\n{prefix}vargr monitor: gathered 2094 records, 7 overwritten before a pull \
                 (gather rate 0.9967)\n"
            );
            assert_eq!(monitor_totals(&err), (Some(0.9967), Some(7)), "{prefix:?}");
        }
        assert_eq!(monitor_totals("nothing"), (None, None));
    }

    #[test]
    fn the_monitors_gather_cost_is_read_from_its_line() {
        let err = " INFO vargr monitor: gathered 2000 records, 0 overwritten before a pull (gather rate 1.0000)\n \
                   INFO vargr monitor: 4 pulls, mean 4.68 ms, longest 8.41 ms; 20906 answer bytes over 2 connections at the monitor\n";
        assert_eq!(
            gather_cost(err),
            Some(GatherCost {
                pulls: 4,
                mean_ms: 4.68,
                max_ms: 8.41,
                bytes: 20906,
                connections: 2
            })
        );
        assert_eq!(gather_cost("vargr monitor: gathered 1 records"), None);
    }
}
