//! `vargr bench sor`: red-black SOR to convergence with 1, 2 and 4 ranks per core
//! (overdecomposition, seed 000 §7.4 and §8.3), on one machine and across two emulated
//! sites, plain against conditional allreduce, under each user-level scheduler (none,
//! serialize, priority, coschedule).
//!
//! Each configuration is one `vargr run` job. Besides the time, every process measures
//! what its rank threads did with the CPU ([`vargr_coll::usage`]): the seed's TLP
//! (share of time with at least N ranks not blocked in communication), the share of time
//! the kernel saw N of them runnable, the time they were runnable without a CPU, user
//! and system time, context switches, and
//! hardware counters where the kernel allows them. Rank 0 gathers every process's
//! figures and the ranks' checksums and prints one JSON record; the driver checks that
//! every configuration with the same ranks computed the same grid in the same number
//! of iterations, prints the table and writes the records.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use vargr_coll::usage::ProcessUsage;
use vargr_coll::{Op, SchedPolicy};

use crate::sor::{sor, ConvergenceTest, SorConfig};
use crate::Programs;

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
    /// User-level schedulers to try with more than one rank per process.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,serialize,priority,coschedule"
    )]
    sched: Vec<String>,
    /// Networks: `lan` (one site) and `wan` (two sites, the emulated WAN between them).
    #[arg(long, value_delimiter = ',', default_value = "lan,wan")]
    net: Vec<String>,
    /// Convergence tests: `plain` (allreduce) and `cond` (conditional allreduce).
    #[arg(long, value_delimiter = ',', default_value = "plain,cond")]
    tests: Vec<String>,
    /// Runs of each configuration; the record is the run with the median time, and
    /// keeps every run's time.
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// How often each process samples its rank threads' kernel states, in ms.
    #[arg(long, default_value_t = 2)]
    sample_ms: u64,
    /// Write the records here (default bench/results/coll-sor.json).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One configuration's measurement.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct SorRecord {
    pub benchmark: String,
    pub op: String,
    pub bytes: usize,
    pub ranks: u32,
    pub ranks_per_process: u32,
    pub ranks_per_core: u32,
    pub sites: u32,
    pub wan_rtt_ms: f64,
    pub algorithm: String,
    pub sched: String,
    pub iterations: u64,
    pub total_s: f64,
    pub median_us: f64,
    pub p90_us: f64,
    /// FNV-1a over every rank's checksum in rank order: equal means the same grid.
    pub checksum: String,
    /// Means over the processes of the share of time with at least 1 and 2 ranks not
    /// blocked in communication (the seed's TLP_1, TLP_2).
    pub tlp_1: f64,
    pub tlp_2: f64,
    /// Mean share of a rank's time in application code, in communication, and waiting
    /// for a scheduler slot.
    pub computing_share: f64,
    pub communication_share: f64,
    pub slot_wait_share: f64,
    /// Mean share of `/proc` samples with at least 1 and 2 rank threads runnable.
    pub os_runnable_1: f64,
    pub os_runnable_2: f64,
    /// Sums over all ranks.
    pub user_s: f64,
    pub system_s: f64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    /// Time the ranks were runnable but had no CPU, seconds (summed), if measured.
    #[serde(default)]
    pub runqueue_wait_s: Option<f64>,
    /// Hardware counters summed over the ranks (user level), when every rank has them.
    pub instructions: Option<u64>,
    pub cycles: Option<u64>,
    pub l1d_misses: Option<u64>,
    pub llc_misses: Option<u64>,
    /// Why there are no counters (the kernel's refusal), if there are none.
    pub counters_unavailable: Option<String>,
    /// Every run's total time (the record's figures are the median run's).
    #[serde(default)]
    pub runs_s: Vec<f64>,
    /// Each process's figures (one per process, in rank order).
    pub processes: Vec<ProcessUsage>,
}

/// What rank 0 of a SOR job prints.
#[derive(Serialize, Deserialize, Debug)]
struct RankOutput {
    iterations: u64,
    seconds: f64,
    checksum: u64,
    processes: Vec<ProcessUsage>,
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
    /// Period of the kernel-state sampler, ms (0: no sampling).
    #[arg(long, default_value_t = 0)]
    sample_ms: u64,
}

/// The rank side of `vargr bench sor`: rank 0 prints a [`RankOutput`] as JSON.
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
    if a.sample_ms > 0 {
        job.sample_threads(Duration::from_millis(a.sample_ms));
    }
    let leader = job.local_ranks().start;
    let job = &job;
    let out = job.run(|c| {
        c.barrier()?;
        let t0 = Instant::now();
        let r = sor(&c, &cfg, test)?;
        let mut t = [t0.elapsed().as_secs_f64()];
        c.allreduce(&mut t, &Op::Max)?;
        // Every rank has finished: the process's figures cover the whole solve.
        let mine = if c.rank() == leader {
            serde_json::to_vec(&job.usage().snapshot()).expect("usage serializes")
        } else {
            Vec::new()
        };
        let size = c.size();
        let mut sums = vec![0u64; size];
        c.gather(&[r.checksum], &mut sums, 0)?;
        let mut lens = vec![0u64; size];
        c.gather(&[mine.len() as u64], &mut lens, 0)?;
        let counts: Vec<usize> = lens.iter().map(|&n| n as usize).collect();
        let displs = vargr_coll::packed_displs(&counts);
        let mut all = vec![0u8; counts.iter().sum()];
        c.gatherv(&mine, &mut all, &counts, &displs, 0)?;
        if c.rank() != 0 {
            return Ok(None);
        }
        let processes = counts
            .iter()
            .zip(&displs)
            .filter(|(&n, _)| n > 0)
            .map(|(&n, &d)| serde_json::from_slice(&all[d..d + n]))
            .collect::<std::result::Result<Vec<ProcessUsage>, _>>()
            .map_err(|e| vargr_coll::CollError::Job {
                reason: format!("a process's usage record: {e}"),
            })?;
        Ok(Some(RankOutput {
            iterations: r.iterations,
            seconds: t[0],
            checksum: fnv(&sums),
            processes,
        }))
    })?;
    job.finish();
    if let Some(Some(o)) = out.into_iter().next() {
        println!("{}", serde_json::to_string(&o)?);
    }
    Ok(())
}

fn fnv(words: &[u64]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in words {
        for b in w.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// One configuration.
struct Run<'a> {
    ranks_per_process: u32,
    ranks: u32,
    test: &'a str,
    sched: SchedPolicy,
    wan: bool,
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    s / n.max(1) as f64
}

fn record(run: &Run, rtt_ms: f64, o: RankOutput) -> SorRecord {
    let ps = &o.processes;
    let sum_counter = |pick: fn(&vargr_coll::usage::Counters) -> Option<u64>| {
        ps.iter()
            .map(|p| p.counter(pick))
            .sum::<Option<u64>>()
            .filter(|_| !ps.is_empty())
    };
    let (vol, invol) = ps.iter().fold((0, 0), |(v, i), p| {
        let (a, b) = p.switches();
        (v + a, i + b)
    });
    let per_it = o.seconds * 1e6 / o.iterations.max(1) as f64;
    SorRecord {
        benchmark: if run.wan { "sor-wan" } else { "sor-lan" }.into(),
        op: "allreduce".into(),
        bytes: 8,
        ranks: run.ranks,
        ranks_per_process: run.ranks_per_process,
        ranks_per_core: run.ranks_per_process,
        sites: if run.wan { 2 } else { 1 },
        wan_rtt_ms: if run.wan { rtt_ms } else { 0.0 },
        algorithm: if run.test == "cond" {
            "cond_allreduce"
        } else {
            "auto"
        }
        .into(),
        sched: run.sched.name().into(),
        iterations: o.iterations,
        total_s: o.seconds,
        median_us: per_it,
        p90_us: per_it,
        checksum: format!("{:016x}", o.checksum),
        tlp_1: mean(ps.iter().map(|p| p.tlp_at_least(1))),
        tlp_2: mean(ps.iter().map(|p| p.tlp_at_least(2))),
        computing_share: mean(ps.iter().map(|p| p.share.computing)),
        communication_share: mean(ps.iter().map(|p| p.share.communication)),
        slot_wait_share: mean(ps.iter().map(|p| p.share.other)),
        os_runnable_1: mean(ps.iter().map(|p| p.os_runnable_at_least(1))),
        os_runnable_2: mean(ps.iter().map(|p| p.os_runnable_at_least(2))),
        user_s: ps.iter().map(ProcessUsage::user_s).sum(),
        system_s: ps.iter().map(ProcessUsage::system_s).sum(),
        voluntary_switches: vol,
        involuntary_switches: invol,
        runqueue_wait_s: ps.iter().map(ProcessUsage::runqueue_wait_s).sum(),
        instructions: sum_counter(|c| c.instructions),
        cycles: sum_counter(|c| c.cycles),
        l1d_misses: sum_counter(|c| c.l1d_misses),
        llc_misses: sum_counter(|c| c.llc_misses),
        counters_unavailable: ps
            .iter()
            .find_map(|p| p.counters_unavailable().map(str::to_string)),
        runs_s: vec![o.seconds],
        processes: o.processes,
    }
}

/// One `vargr run` job of `run`; rank 0's output.
fn run_once(
    vargr: &std::path::Path,
    bench: &std::path::Path,
    a: &SorBenchArgs,
    run: &Run,
    what: &str,
) -> Result<RankOutput> {
    let mut cmd = Command::new(vargr);
    cmd.args(["run", "-n", &run.ranks.to_string()])
        .args(["--ranks-per-process", &run.ranks_per_process.to_string()]);
    if run.wan {
        cmd.args(["--sites", "2", "--wan", &format!("rtt={}", a.rtt)]);
    }
    let out = cmd
        .args(["--sched", run.sched.name(), "--"])
        .arg(bench)
        .args(["coll-sor-rank", "--test", run.test])
        .args(["--side", &a.side.to_string()])
        .args(["--epsilon", &a.epsilon.to_string()])
        .args(["--sample-ms", &a.sample_ms.to_string()])
        .output()
        .context("starting vargr run")?;
    if !out.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("{what}: no record in {text:?}"))?;
    serde_json::from_str(line).with_context(|| format!("{what}: {line}"))
}

pub fn sor_bench(a: SorBenchArgs, programs: &Programs) -> Result<()> {
    let (vargr, bench) = (programs.vargr()?, programs.bench());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let rtt_ms = vargr_emu::parse_duration(&a.rtt)
        .map_err(|e| anyhow::anyhow!("--rtt: {e}"))?
        .as_secs_f64()
        * 1e3;
    let policies: Vec<SchedPolicy> = a
        .sched
        .iter()
        .map(|s| s.parse::<SchedPolicy>().map_err(anyhow::Error::msg))
        .collect::<Result<_>>()?;
    for n in &a.net {
        ensure!(n == "lan" || n == "wan", "--net {n:?}: lan or wan");
    }
    for t in &a.tests {
        ensure!(t == "plain" || t == "cond", "--tests {t:?}: plain or cond");
    }
    // One process per core (two sites need two), each process on one site.
    let procs = cores.max(2);
    let mut runs = Vec::new();
    for &k in &a.per_core {
        let k = k.max(1);
        for net in &a.net {
            for test in &a.tests {
                for &sched in &policies {
                    // One rank per process: nothing to schedule.
                    if k == 1 && sched != SchedPolicy::None {
                        continue;
                    }
                    runs.push(Run {
                        ranks_per_process: k,
                        ranks: procs * k,
                        test,
                        sched,
                        wan: net == "wan",
                    });
                }
            }
        }
    }
    let mut records: Vec<SorRecord> = Vec::new();
    for run in &runs {
        let what = format!(
            "SOR with {} ranks ({}/process, {}, {}, sched {})",
            run.ranks,
            run.ranks_per_process,
            if run.wan { "WAN" } else { "one site" },
            run.test,
            run.sched.name()
        );
        let mut outs = (0..a.repeat.max(1))
            .map(|_| run_once(vargr, bench, &a, run, &what))
            .collect::<Result<Vec<RankOutput>>>()?;
        let runs_s: Vec<f64> = outs.iter().map(|o| o.seconds).collect();
        for o in &outs[1..] {
            ensure!(
                (o.iterations, o.checksum) == (outs[0].iterations, outs[0].checksum),
                "{what}: two runs computed different grids"
            );
        }
        outs.sort_by(|x, y| x.seconds.total_cmp(&y.seconds));
        let o = outs.swap_remove(outs.len() / 2);
        let mut rec = record(run, rtt_ms, o);
        rec.runs_s = runs_s;
        eprintln!(
            "{what}: {} iterations in {:.2} s; {}",
            rec.iterations,
            rec.total_s,
            rec.processes
                .first()
                .map_or(String::new(), ProcessUsage::summary_line)
        );
        // Same ranks, same bands: every scheduler and test must compute the same grid.
        if let Some(first) = records.iter().find(|r| r.ranks == rec.ranks) {
            ensure!(
                (first.iterations, &first.checksum) == (rec.iterations, &rec.checksum),
                "{what} computed {} iterations with checksum {}, but {} ({}, sched {}) \
                 computed {} with {}",
                rec.iterations,
                rec.checksum,
                first.benchmark,
                first.algorithm,
                first.sched,
                first.iterations,
                first.checksum
            );
        }
        records.push(rec);
    }
    print_table(&records);
    crate::tree::write_records(a.json.as_deref(), "coll-sor.json", &records)?;
    Ok(())
}

fn print_table(records: &[SorRecord]) {
    println!(
        "\n{:>5} {:>4} {:>4} {:>14} {:>10} {:>5} {:>8} {:>9} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7} {:>7} {:>9} {:>5}",
        "ranks",
        "/prc",
        "net",
        "test",
        "sched",
        "iters",
        "total s",
        "µs/iter",
        "TLP_1",
        "TLP_2",
        "comp",
        "R>=2",
        "user s",
        "sys s",
        "rq s",
        "switches",
        "IPC"
    );
    for r in records {
        let ipc = match (r.instructions, r.cycles) {
            (Some(i), Some(c)) if c > 0 => format!("{:.2}", i as f64 / c as f64),
            _ => "-".into(),
        };
        println!(
            "{:>5} {:>4} {:>4} {:>14} {:>10} {:>5} {:>8.2} {:>9.1} {:>5.0}% {:>5.0}% {:>5.0}% {:>5.0}% {:>7.2} {:>7.2} {:>7} {:>9} {:>5}",
            r.ranks,
            r.ranks_per_process,
            if r.sites > 1 { "wan" } else { "lan" },
            r.algorithm,
            r.sched,
            r.iterations,
            r.total_s,
            r.median_us,
            100.0 * r.tlp_1,
            100.0 * r.tlp_2,
            100.0 * r.computing_share,
            100.0 * r.os_runnable_2,
            r.user_s,
            r.system_s,
            r.runqueue_wait_s.map_or("-".into(), |w| format!("{w:.2}")),
            r.voluntary_switches + r.involuntary_switches,
            ipc
        );
    }
    if let Some(why) = records
        .iter()
        .find_map(|r| r.counters_unavailable.as_deref())
    {
        println!("hardware counters: unavailable: {why}");
    }
}
