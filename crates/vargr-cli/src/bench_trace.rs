//! `vargr bench trace`: what always-on collectors cost.
//!
//! The cost of one collector call is timed in a tight loop. The overhead on real work is
//! measured like for like inside one run: each rank alternates blocks of gsum (the seed's
//! back-to-back 8-byte allreduces) or compute-gsum (half computation) with collectors on
//! and off (the run-time switch; all ranks switch at the same block), so the machine's
//! drift hits both equally, and the overhead is the ratio of the blocks' medians.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use vargr_coll::{Job, Op};
use vargr_trace::{EventOp, Record, NO_PEER};

#[derive(Args, Clone)]
pub struct TraceBenchArgs {
    /// Rank counts to run.
    #[arg(long, value_delimiter = ',', default_value = "4,16")]
    ranks: Vec<u32>,
    /// Allreduces per block.
    #[arg(long, default_value_t = 2000)]
    iters: u32,
    /// Blocks per run (half with collectors on, half off, alternating).
    #[arg(long, default_value_t = 20)]
    blocks: u32,
    /// Ranks of the extra run that measures the monitor's gather rate (gsum only).
    #[arg(long)]
    gather_ranks: Option<u32>,
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
    gather_rate: Option<f64>,
    records_lost: Option<u64>,
    collector_ns: Option<f64>,
}

/// What one rank job runs.
#[derive(Args, Clone, Debug)]
pub struct TraceRankArgs {
    #[arg(long)]
    iters: u32,
    #[arg(long)]
    blocks: u32,
    /// Spin-kernel steps before each allreduce (0 = gsum).
    #[arg(long, default_value_t = 0)]
    compute_steps: u64,
}

#[derive(Serialize, Deserialize, Debug)]
struct RankOut {
    on_us: Vec<f64>,
    off_us: Vec<f64>,
}

/// The rank side: blocks of allreduces, collectors switched per block; rank 0 prints the
/// per-call time of each block.
pub fn rank(a: TraceRankArgs) -> Result<()> {
    let job = Job::join()?;
    let outs = job.run(|c| {
        let mut on = Vec::new();
        let mut off = Vec::new();
        let mut x = 0.5f64;
        for b in 0..a.blocks + 2 {
            let tracing = b % 2 == 0;
            vargr_trace::set_enabled(tracing);
            vargr_coll::monitor::set_active(tracing);
            c.barrier()?;
            let t = Instant::now();
            for _ in 0..a.iters {
                if a.compute_steps > 0 {
                    x = crate::coll_bench_role::spin(std::hint::black_box(a.compute_steps), x);
                }
                let mut v = [x];
                c.allreduce(&mut v, &Op::Sum)?;
                x = v[0] * 1e-9;
            }
            let mut us = [t.elapsed().as_secs_f64() * 1e6 / f64::from(a.iters)];
            c.allreduce(&mut us, &Op::Max)?;
            // The first two blocks warm up.
            if b >= 2 {
                if tracing { &mut on } else { &mut off }.push(us[0]);
            }
        }
        vargr_trace::set_enabled(true);
        std::hint::black_box(x);
        Ok((c.rank() == 0).then_some(RankOut {
            on_us: on,
            off_us: off,
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
    let Some(line) = stderr
        .lines()
        .find(|l| l.starts_with("vargr monitor: gathered"))
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

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    crate::bench::percentile(v, 50.0)
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

pub fn run(a: TraceBenchArgs) -> Result<()> {
    let exe = std::env::current_exe().context("finding the vargr binary")?;
    let mut records = Vec::new();
    vargr_trace::set_enabled(true);
    let (one, two) = collector_cost();
    eprintln!("collector call: {one:.1} ns (one timestamp), {two:.1} ns (two)");
    for (config, ns) in [
        ("collector call, one timestamp", one),
        ("collector call, two timestamps", two),
    ] {
        records.push(BenchRecord {
            benchmark: "collector".into(),
            config: config.into(),
            ranks: 1,
            ranks_per_process: 1,
            median_us: ns / 1000.0,
            median_off_us: None,
            overhead_pct: None,
            gather_rate: None,
            records_lost: None,
            collector_ns: Some(ns),
        });
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
    for &n in &a.ranks {
        runs.push((n, "threads", n, monitors[0].0, monitors[0].1));
        for (label, env) in monitors {
            runs.push((n, "processes", 1, label, env));
        }
    }
    if let Some(&n) = a.gather_ranks.as_ref() {
        runs.push((n, "processes", 1, monitors[1].0, monitors[1].1));
    }
    let mut gsum_us: std::collections::HashMap<(u32, &str), f64> = Default::default();
    for (n, transport, k, label, env) in runs {
        for workload in ["gsum", "compute-gsum"] {
            if n > 16 && workload == "compute-gsum" {
                continue; // the large run is there for the gather rate
            }
            let steps = match (workload, gsum_us.get(&(n, transport))) {
                ("gsum", _) => 0,
                // Half computation: as long as one gsum allreduce took.
                (_, Some(&us)) => crate::bench_coll::calibrate_spin(us).0,
                _ => bail!("compute-gsum needs the gsum time first"),
            };
            let out = Command::new(&exe)
                .args(["run", "-n", &n.to_string()])
                .args(["--ranks-per-process", &k.to_string(), "--"])
                .arg(&exe)
                .args(["trace-bench-rank", "--iters", &a.iters.to_string()])
                .args(["--blocks", &a.blocks.to_string()])
                .args(["--compute-steps", &steps.to_string()])
                .envs(env.iter().copied())
                .output()
                .context("starting vargr run")?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() {
                bail!("{workload} with {n} ranks ({transport}, {label}) failed: {stderr}");
            }
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text
                .lines()
                .find(|l| l.starts_with('{'))
                .with_context(|| format!("no result from the ranks: {text}"))?;
            let mut r: RankOut = serde_json::from_str(line)?;
            let (on, off) = (median(&mut r.on_us), median(&mut r.off_us));
            if workload == "gsum" && label == "collectors" {
                gsum_us.insert((n, transport), off);
            }
            let pct = (on / off - 1.0) * 100.0;
            let (gather_rate, records_lost) = monitor_totals(&stderr);
            eprintln!(
                "{workload} {n} ranks ({transport}, {label}): {on:.2} µs/call on, {off:.2} off ({pct:+.2} %)"
            );
            records.push(BenchRecord {
                benchmark: workload.into(),
                config: format!("{label} on vs off ({transport})"),
                ranks: n,
                ranks_per_process: k,
                median_us: on,
                median_off_us: Some(off),
                overhead_pct: Some(pct),
                gather_rate,
                records_lost,
                collector_ns: None,
            });
        }
    }
    println!(
        "\n{:<14} {:<54} {:>6} {:>10} {:>10} {:>9} {:>8} {:>6}",
        "benchmark", "config", "ranks", "µs (on)", "µs (off)", "overhead", "gather", "lost"
    );
    for r in &records {
        match r.collector_ns {
            Some(ns) => println!(
                "{:<14} {:<54} {:>6} {:>8.1} ns",
                r.benchmark, r.config, r.ranks, ns
            ),
            None => println!(
                "{:<14} {:<54} {:>6} {:>10.2} {:>10.2} {:>7.2} % {:>8} {:>6}",
                r.benchmark,
                r.config,
                r.ranks,
                r.median_us,
                r.median_off_us.unwrap_or(f64::NAN),
                r.overhead_pct.unwrap_or(f64::NAN),
                r.gather_rate.map_or("-".into(), |g| format!("{g:.4}")),
                r.records_lost.map_or("-".into(), |l| l.to_string()),
            ),
        }
    }
    crate::bench::write_records(a.json.as_deref(), "trace.json", &records)?;
    Ok(())
}
