//! `vargr bench noise`: the seed's noise-allreduce microbenchmark (000 ch. 7.3 V-A). Every
//! rank sorts a list of integers, its length tuned so that one sort takes about the
//! WAN latency (the seed: 30 ms), then makes one 8-byte allreduce; the loop runs with
//! the hierarchical tree, MagPIe and conditional allreduce on each of the seed's inputs.
//! It measures two things: how much faster conditional allreduce makes a
//! medium-grained application (the seed: 2.4× the tree on best-case input), and the
//! system noise, as the number of iterations in which at least one rank's sort took more
//! than 1, 5, 10 or 30 ms longer than that rank's average (the seed's §VI-A counts).
//!
//! Readings of the seed: "tuned to take 30 ms" is done once, by the driver, with as many
//! threads tuning at once as the job has ranks (on shared cores the length then fits the
//! speed the ranks get), and every run sorts that many integers, so runs do the same
//! work; "compared to the average computation time" is each rank's own mean, which the
//! seed's footnote uses to leave out hosts that are slow throughout. The machine's load
//! changes between runs, so the configurations run in turn for `--rounds` rounds and the
//! table gives medians. The ranks run as `vargr bench wan`'s rank program with
//! `--sort-len`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::cond_inputs::Input;
use crate::wan::{Config, JobArgs, Mode, WanRecord};
use crate::Programs;

/// The delays the seed counts, in ms.
const DELAYS_MS: [f64; 4] = [1.0, 5.0, 10.0, 30.0];

/// One rank per site by default: the seed's sorting threads each had a CPU, and on two
/// cores more ranks would measure time slicing rather than noise.
#[derive(Args, Clone)]
#[command(mut_arg("ranks", |a| a.default_value("3")))]
#[command(mut_arg("ranks_per_process", |a| a.default_value("1")))]
pub struct NoiseBenchArgs {
    #[command(flatten)]
    job: JobArgs,
    /// Inputs of the conditional allreduce runs (the tree and MagPIe run once, on best).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Input::ALL)]
    inputs: Vec<Input>,
    /// Loops to run.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Mode::ALL)]
    modes: Vec<Mode>,
    /// Sorting per iteration, before each allreduce, in ms (the seed: 30).
    #[arg(long, default_value_t = 30.0)]
    compute_ms: f64,
    /// Iterations per loop (the seed: about 15,000); traced inputs replay their trace
    /// whole, as many times as come closest to it.
    #[arg(long, default_value_t = 500)]
    iters: u64,
    /// Rounds: every configuration runs once per round, in turn; the table gives medians.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Write the records here (default bench/results/coll-noise.json).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The work between calls: a sort of `sort_len` integers, tuned to take `target_ms`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Work {
    pub target_ms: f64,
    pub sort_len: usize,
}

/// What the sorting between calls did.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct NoiseStats {
    /// The time each sort was tuned to, and its length.
    pub compute_target_ms: f64,
    pub sort_len: usize,
    /// Which round of the driver's this run was.
    #[serde(default)]
    pub round: u32,
    /// Mean over ranks and iterations of one sort.
    pub compute_mean_ms: f64,
    /// Wall time of the slowest rank's loop.
    pub total_s: f64,
    /// Iterations in which at least one rank's sort took `over_ms` longer than that
    /// rank's mean.
    pub delayed: Vec<Delayed>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Delayed {
    pub over_ms: f64,
    pub iterations: u64,
}

impl NoiseStats {
    /// From every rank's sort times in µs (`n` per rank, rank after rank).
    pub fn new(work: Work, computes_us: &[f64], n: usize, total_us: f64) -> NoiseStats {
        let ranks = computes_us.len() / n.max(1);
        let rank = |q: usize| &computes_us[q * n..(q + 1) * n];
        let means: Vec<f64> = (0..ranks)
            .map(|q| rank(q).iter().sum::<f64>() / n.max(1) as f64)
            .collect();
        // Per iteration, the largest lateness of any rank.
        let late: Vec<f64> = (0..n)
            .map(|i| {
                (0..ranks)
                    .map(|q| rank(q)[i] - means[q])
                    .fold(f64::MIN, f64::max)
            })
            .collect();
        NoiseStats {
            compute_target_ms: work.target_ms,
            sort_len: work.sort_len,
            round: 0,
            compute_mean_ms: means.iter().sum::<f64>() / ranks.max(1) as f64 / 1e3,
            total_s: total_us / 1e6,
            delayed: DELAYS_MS
                .iter()
                .map(|&over_ms| Delayed {
                    over_ms,
                    iterations: late.iter().filter(|&&l| l > over_ms * 1e3).count() as u64,
                })
                .collect(),
        }
    }
}

/// The seed's work between calls: sorting a list of integers.
pub struct Sorter {
    data: Vec<u32>,
    buf: Vec<u32>,
}

impl Sorter {
    pub fn new(len: usize, seed: u64) -> Sorter {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let data: Vec<u32> = (0..len).map(|_| rng.random()).collect();
        Sorter {
            buf: data.clone(),
            data,
        }
    }

    /// A list whose sort takes about `target` here and now: the length is scaled by
    /// the median of three timed sorts until one lands within 5 % (at most 12 rounds).
    fn calibrated(target: Duration, seed: u64) -> Sorter {
        let mut s = Sorter::new(1 << 12, seed);
        for _ in 0..12 {
            let mut t: Vec<f64> = (0..3).map(|_| s.timed().as_secs_f64()).collect();
            t.sort_by(f64::total_cmp);
            let ratio = target.as_secs_f64() / t[1].max(1e-9);
            if (0.95..=1.05).contains(&ratio) {
                break;
            }
            let len = (s.data.len() as f64 * ratio.clamp(0.125, 8.0)) as usize;
            s = Sorter::new(len.max(64), seed);
        }
        s
    }

    fn timed(&mut self) -> Duration {
        let t = Instant::now();
        self.run();
        t.elapsed()
    }

    /// One sort of the unsorted list.
    pub fn run(&mut self) {
        self.buf.copy_from_slice(&self.data);
        self.buf.sort_unstable();
        std::hint::black_box(&self.buf);
    }
}

/// The sort length for all runs: `threads` tune at once, as the ranks will sort at once;
/// the median of their lengths.
fn calibrate(target: Duration, threads: usize) -> usize {
    let mut lens: Vec<usize> = std::thread::scope(|s| {
        let tuning: Vec<_> = (0..threads.max(1))
            .map(|t| s.spawn(move || Sorter::calibrated(target, t as u64).data.len()))
            .collect();
        tuning
            .into_iter()
            .map(|h| h.join().expect("a tuning thread panicked"))
            .collect()
    });
    lens.sort_unstable();
    lens[lens.len() / 2]
}

pub fn run(a: NoiseBenchArgs, programs: &Programs) -> Result<()> {
    a.job.check()?;
    let mut runs: Vec<Config> = [Mode::OneSite, Mode::Tree, Mode::Magpie]
        .into_iter()
        .map(|mode| Config {
            mode,
            input: Input::Best,
            iters: a.iters,
        })
        .collect();
    for &input in &a.inputs {
        let iters = a.job.cond_iters(input, a.iters)?;
        runs.push(Config {
            mode: Mode::Cond,
            input,
            iters,
        });
    }
    let target = Duration::from_secs_f64(a.compute_ms / 1e3);
    let work = Work {
        target_ms: a.compute_ms,
        sort_len: calibrate(target, a.job.ranks as usize),
    };
    eprintln!(
        "sorting {} integers per iteration (tuned to {} ms)",
        work.sort_len, a.compute_ms
    );
    let mut records = Vec::new();
    for round in 0..a.rounds.max(1) {
        eprintln!("round {} of {}", round + 1, a.rounds.max(1));
        for (label, mut r) in a.job.run_all(programs, &a.modes, &runs, Some(work))? {
            if let Some(n) = &mut r.noise {
                n.round = round;
            }
            records.push((label, r));
        }
    }
    print_table(&records);
    let recs: Vec<&WanRecord> = records.iter().map(|(_, r)| r).collect();
    crate::tree::write_records(a.json.as_deref(), "coll-noise.json", &recs)?;
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    crate::tree::percentile(&v, 50.0)
}

/// One row per configuration: medians over the rounds; "vs tree" is the median of each
/// round's ratio, so a change of load between rounds cancels out.
fn print_table(records: &[(&str, WanRecord)]) {
    let round = |r: &WanRecord| r.noise.as_ref().map_or(0, |n| n.round);
    let tree = |k: u32| {
        records
            .iter()
            .find(|(_, r)| r.algorithm == "hierarchical:tree" && round(r) == k)
            .map(|(_, r)| r.mean_us)
    };
    let head: Vec<String> = DELAYS_MS.iter().map(|d| format!(">{d}ms")).collect();
    println!(
        "\n{:<24} {:>11} {:>6} {:>9} {:>10} {:>7} {:>7} {:>7} {:>7} {:>16}  vs tree",
        "configuration",
        "input",
        "iters",
        "ms/it",
        "sort ms",
        head[0],
        head[1],
        head[2],
        head[3],
        "local per site",
    );
    let first: Vec<&(&str, WanRecord)> = records.iter().filter(|(_, r)| round(r) == 0).collect();
    for (label, r0) in first {
        let same: Vec<&WanRecord> = records
            .iter()
            .map(|(_, r)| r)
            .filter(|r| r.algorithm == r0.algorithm && r.input == r0.input && r.sites == r0.sites)
            .collect();
        let stat = |f: &dyn Fn(&WanRecord) -> Option<f64>| {
            median(same.iter().filter_map(|r| f(r)).collect())
        };
        let delayed: Vec<f64> = (0..DELAYS_MS.len())
            .map(|i| stat(&|r| r.noise.as_ref().map(|n| n.delayed[i].iterations as f64)))
            .collect();
        let vs_tree = (r0.sites > 1 && r0.algorithm != "hierarchical:tree")
            .then(|| stat(&|r| tree(round(r)).map(|t| t / r.mean_us)))
            .filter(|x| x.is_finite());
        println!(
            "{:<24} {:>11} {:>6} {:>9.2} {:>10.2} {:>7} {:>7} {:>7} {:>7} {:>16}  {}",
            label,
            r0.input,
            r0.iterations,
            stat(&|r| Some(r.mean_us / 1e3)),
            stat(&|r| r.noise.as_ref().map(|n| n.compute_mean_ms)),
            delayed[0],
            delayed[1],
            delayed[2],
            delayed[3],
            r0.decided_locally_by_site
                .as_ref()
                .map_or("-".to_string(), |l| format!("{l:?}")),
            vs_tree.map_or(String::new(), |x| format!("{x:.2}× faster")),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_count_iterations_where_any_rank_was_late_against_its_own_mean() {
        // Two ranks, five iterations (µs). Rank 1 is slow throughout, which its own
        // mean absorbs; each rank has one slow sort.
        let computes = [
            30_000.0, 36_000.0, 30_000.0, 30_000.0, 30_000.0, //
            40_000.0, 40_000.0, 52_000.0, 40_000.0, 40_000.0,
        ];
        let work = Work {
            target_ms: 30.0,
            sort_len: 1000,
        };
        let s = NoiseStats::new(work, &computes, 5, 400_000.0);
        let counts: Vec<(f64, u64)> = s
            .delayed
            .iter()
            .map(|d| (d.over_ms, d.iterations))
            .collect();
        // Rank 0's mean is 31.2 ms (late by 4.8 ms once), rank 1's 42.4 ms (by 9.6 ms once),
        // and every other iteration is early.
        assert_eq!(counts, vec![(1.0, 2), (5.0, 1), (10.0, 0), (30.0, 0)]);
        assert!(
            (s.compute_mean_ms - 36.8).abs() < 1e-9,
            "{}",
            s.compute_mean_ms
        );
        assert_eq!((s.total_s, s.compute_target_ms), (0.4, 30.0));
    }

    #[test]
    fn every_run_sorts_the_same_unsorted_list() {
        let mut s = Sorter::new(1000, 5);
        let before = s.data.clone();
        assert!(!before.is_sorted());
        s.run();
        s.run();
        assert!(s.buf.is_sorted() && s.data == before);
        let mut want = before;
        want.sort_unstable();
        assert_eq!(s.buf, want);
    }
}
