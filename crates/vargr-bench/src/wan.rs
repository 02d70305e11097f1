//! `vargr bench wan`: the seed's multi-cluster gsum (000 ch. 7.3) on one machine. Three
//! sites joined by an emulated WAN (Longcut stages on the links between sites) run
//! allreduce loops with the hierarchical tree, MagPIe's all-to-all between site roots,
//! and conditional allreduce, on the seed's five inputs ([`crate::cond_inputs`]):
//! best-case, worst-case, and the SOR traces frosty, tridiagonal and random. The
//! baseline is the same ranks in one site with no WAN: on two cores, fewer ranks would
//! not be a like-for-like comparison.
//!
//! Each configuration is one `vargr run` job; every rank times each iteration, rank 0
//! gathers the times and each site's count of tests it settled alone, prints one JSON
//! record, and the driver prints the table. With `--sort-len` the ranks sort before
//! each call: that is the seed's noise-allreduce benchmark, driven by `vargr bench
//! noise` ([`crate::noise`]).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use crate::cond_inputs::{Input, TraceArgs, Workload};
use crate::noise::{NoiseStats, Sorter, Work};
use crate::Programs;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use vargr_coll::{Across, Algorithm, CondOp, Op, Predicate};

/// The loops a driver can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// The same ranks in one site, no WAN, the default allreduce.
    OneSite,
    /// Hierarchical allreduce with a tree between sites (the seed's sequential tree).
    Tree,
    /// Hierarchical allreduce with MagPIe's all-to-all between site roots.
    Magpie,
    /// Conditional allreduce, `sum >= epsilon`.
    Cond,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::OneSite, Mode::Tree, Mode::Magpie, Mode::Cond];

    /// The driver's label and the rank program's `--mode`.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Mode::OneSite => ("one site, no WAN", "auto"),
            Mode::Tree => ("WAN, hierarchical tree", "tree"),
            Mode::Magpie => ("WAN, MagPIe", "magpie"),
            Mode::Cond => ("WAN, cond_allreduce", "cond"),
        }
    }
}

#[derive(Args, Clone)]
pub struct WanBenchArgs {
    #[command(flatten)]
    job: JobArgs,
    /// Inputs to run (best, worst, frosty, tridiagonal, random; `sor` is frosty).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Input::ALL)]
    inputs: Vec<Input>,
    /// Loops to run (one-site runs once, on best-case input).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Mode::ALL)]
    modes: Vec<Mode>,
    /// Iterations of the loops that cross the WAN every time (tree, MagPIe, and
    /// conditional allreduce on worst-case input).
    #[arg(long, default_value_t = 100)]
    wan_iters: u64,
    /// Iterations of gsum on one site and of conditional allreduce on best-case input
    /// (the seed's gsum is 20,000).
    #[arg(long, default_value_t = 20_000)]
    gsum_iters: u64,
    /// Conditional allreduce on a traced input replays the trace whole, as many times as
    /// come closest to this many calls (the seed: about 15,000).
    #[arg(long, default_value_t = 15_000)]
    trace_iters: u64,
    /// Write the records here (default bench/results/coll-wan.json).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The job every configuration runs in, shared by `bench wan` and `bench noise`.
#[derive(Args, Clone, Debug)]
pub struct JobArgs {
    /// Ranks (split evenly into the sites).
    #[arg(long, default_value_t = 12)]
    pub ranks: u32,
    /// Sites.
    #[arg(long, default_value_t = 3)]
    pub sites: u32,
    /// Ranks per process (threads); must divide ranks/sites.
    #[arg(long, default_value_t = 4)]
    pub ranks_per_process: u32,
    /// Round-trip time of the emulated WAN between every pair of sites.
    #[arg(long, default_value = "36ms")]
    pub rtt: String,
    #[command(flatten)]
    pub trace: TraceArgs,
}

/// One rank job's measurement, printed by rank 0 as JSON.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct WanRecord {
    pub benchmark: String,
    pub op: String,
    pub input: String,
    pub bytes: usize,
    pub ranks: u32,
    pub ranks_per_process: u32,
    pub sites: u32,
    pub wan_rtt_ms: f64,
    pub algorithm: String,
    pub iterations: u64,
    pub median_us: f64,
    pub p90_us: f64,
    pub mean_us: f64,
    /// Iterations whose test rank 0's site settled without remote values.
    pub decided_locally: Option<u64>,
    /// The same count for every site, sites in order of their lowest rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_locally_by_site: Option<Vec<u64>>,
    /// Noise-allreduce runs: the sorting between calls and how often it was late.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<NoiseStats>,
}

/// What one rank job runs.
#[derive(Args, Clone, Debug)]
pub struct WanRankArgs {
    /// tree | magpie | auto | cond
    #[arg(long)]
    mode: String,
    #[arg(long, value_enum)]
    input: Input,
    #[arg(long)]
    iters: u64,
    #[command(flatten)]
    trace: TraceArgs,
    #[arg(long, default_value_t = 0.0)]
    wan_rtt_ms: f64,
    #[arg(long, default_value_t = 1)]
    sites: u32,
    /// Integers to sort before each call (noise-allreduce); 0: no work between calls.
    #[arg(long, default_value_t = 0)]
    sort_len: usize,
    /// The time the sort was tuned to (recorded).
    #[arg(long, default_value_t = 0.0)]
    compute_ms: f64,
}

/// The rank side: runs the loop and has rank 0 print the record.
pub fn rank(a: WanRankArgs) -> Result<()> {
    let job = vargr_config::join_job()?;
    let work = Workload::new(a.input, job.size(), a.sites as usize, &a.trace, a.iters)?;
    let compute = (a.sort_len > 0).then_some(Work {
        target_ms: a.compute_ms,
        sort_len: a.sort_len,
    });
    let results = job.run(|c| {
        let r = c.rank();
        let alg = match a.mode.as_str() {
            "tree" => Some(Algorithm::Hierarchical(Across::Tree)),
            "magpie" => Some(Algorithm::Hierarchical(Across::Magpie)),
            _ => None,
        };
        let mut cond = if a.mode == "cond" {
            Some(c.conditional(CondOp::Sum, Predicate::GreaterEq, work.epsilon())?)
        } else {
            None
        };
        let mut sorter = compute.map(|w| Sorter::new(w.sort_len, r as u64));
        c.barrier()?;
        let mut times = Vec::with_capacity(a.iters as usize);
        let mut computes = Vec::new();
        let mut local = 0u64;
        let t0 = Instant::now();
        for i in 0..a.iters {
            let t = Instant::now();
            if let Some(s) = &mut sorter {
                s.run();
                computes.push(t.elapsed().as_secs_f64() * 1e6);
            }
            let v = work.value(r, i);
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
        let size = c.size();
        // Per iteration, the slowest rank's time.
        let mut all = vec![0.0f64; times.len() * size];
        c.gather(&times, &mut all, 0)?;
        let mut totals = vec![0.0f64; size];
        c.gather(&[total], &mut totals, 0)?;
        let mut locals = vec![0u64; size];
        c.gather(&[local], &mut locals, 0)?;
        let mut all_computes = vec![0.0f64; computes.len() * size];
        if compute.is_some() {
            c.gather(&computes, &mut all_computes, 0)?;
        }
        let site_of = |q: usize| c.hierarchy().map_or(0, |h| h.site[q]);
        Ok((r == 0).then(|| {
            let n = times.len();
            let mut worst: Vec<f64> = (0..n)
                .map(|i| (0..size).map(|q| all[q * n + i]).fold(0.0, f64::max))
                .collect();
            worst.sort_by(f64::total_cmp);
            let slowest_total = totals.iter().copied().fold(0.0, f64::max);
            // One count per site: the first rank of each site (all of a site agree).
            let mut seen = Vec::new();
            let by_site: Vec<u64> = (0..size)
                .filter(|&q| {
                    let new = !seen.contains(&site_of(q));
                    seen.push(site_of(q));
                    new
                })
                .map(|q| locals[q])
                .collect();
            let is_cond = cond_name(&a.mode).is_some();
            WanRecord {
                benchmark: if compute.is_some() {
                    "noise-allreduce"
                } else {
                    "gsum-wan"
                }
                .into(),
                op: "allreduce".into(),
                input: a.input.name().into(),
                bytes: 8,
                ranks: size as u32,
                ranks_per_process: 0,
                sites: a.sites,
                wan_rtt_ms: a.wan_rtt_ms,
                algorithm,
                iterations: a.iters,
                median_us: crate::tree::percentile(&worst, 50.0),
                p90_us: crate::tree::percentile(&worst, 90.0),
                mean_us: slowest_total / n.max(1) as f64,
                decided_locally: is_cond.then_some(local),
                decided_locally_by_site: is_cond.then_some(by_site),
                noise: compute.map(|w| NoiseStats::new(w, &all_computes, n, slowest_total)),
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

/// One configuration of a driver: a `vargr run` job.
pub struct Config {
    pub mode: Mode,
    pub input: Input,
    pub iters: u64,
}

impl JobArgs {
    /// Checks the split, and returns the RTT in ms.
    pub fn check(&self) -> Result<f64> {
        let per_site = self.ranks / self.sites.max(1);
        if self.sites == 0
            || per_site * self.sites != self.ranks
            || per_site.checked_rem(self.ranks_per_process) != Some(0)
        {
            bail!(
                "--ranks {} must split into {} equal sites whose size --ranks-per-process {} divides",
                self.ranks,
                self.sites,
                self.ranks_per_process
            );
        }
        Ok(vargr_emu::parse_duration(&self.rtt)
            .map_err(|e| anyhow::anyhow!("--rtt: {e}"))?
            .as_secs_f64()
            * 1e3)
    }

    /// Calls conditional allreduce makes on `input`: traced inputs replay their trace
    /// whole, as many times as come closest to `target`.
    pub fn cond_iters(&self, input: Input, target: u64) -> Result<u64> {
        let w = Workload::new(
            input,
            self.ranks as usize,
            self.sites as usize,
            &self.trace,
            1,
        )?;
        Ok(w.replays(target).1)
    }

    /// Runs one configuration as a `vargr run` job and returns rank 0's record.
    pub fn run(&self, programs: &Programs, c: &Config, work: Option<Work>) -> Result<WanRecord> {
        let (vargr, bench) = (programs.vargr()?, programs.bench());
        let (label, mode) = c.mode.names();
        let sites = if c.mode == Mode::OneSite {
            1
        } else {
            self.sites
        };
        let rtt_ms = if sites > 1 { self.check()? } else { 0.0 };
        let mut cmd = Command::new(vargr);
        cmd.args(["run", "-n", &self.ranks.to_string()])
            .args(["--ranks-per-process", &self.ranks_per_process.to_string()]);
        if sites > 1 {
            cmd.args(["--sites", &sites.to_string()])
                .args(["--wan", &format!("rtt={}", self.rtt)]);
        }
        cmd.arg("--")
            .arg(bench)
            .args(["coll-wan-rank", "--mode", mode, "--input", c.input.name()])
            .args(["--iters", &c.iters.to_string()])
            .args(["--sor-side", &self.trace.sor_side.to_string()])
            .args(["--sor-epsilon", &self.trace.sor_epsilon.to_string()])
            .args(["--grid-seed", &self.trace.grid_seed.to_string()])
            .args(["--sites", &sites.to_string()])
            .args(["--wan-rtt-ms", &rtt_ms.to_string()])
            .args([
                "--compute-ms",
                &work.map_or(0.0, |w| w.target_ms).to_string(),
            ])
            .args(["--sort-len", &work.map_or(0, |w| w.sort_len).to_string()]);
        let input = c.input.name();
        eprintln!(
            "running: {label}, {input} input, {} iterations ...",
            c.iters
        );
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
        rec.ranks_per_process = self.ranks_per_process;
        eprintln!(
            "  {:.1} µs per iteration (median {:.1} µs){}",
            rec.mean_us,
            rec.median_us,
            rec.decided_locally_by_site
                .as_ref()
                .map_or(String::new(), |l| format!(", decided locally {l:?}"))
        );
        Ok(rec)
    }
}

impl JobArgs {
    /// Runs the configurations whose mode is in `modes`, each with its label.
    pub fn run_all(
        &self,
        programs: &Programs,
        modes: &[Mode],
        runs: &[Config],
        work: Option<Work>,
    ) -> Result<Vec<(&'static str, WanRecord)>> {
        runs.iter()
            .filter(|c| modes.contains(&c.mode))
            .map(|c| Ok((c.mode.names().0, self.run(programs, c, work)?)))
            .collect()
    }
}

pub fn run(a: WanBenchArgs, programs: &Programs) -> Result<()> {
    a.job.check()?;
    let mut runs = vec![Config {
        mode: Mode::OneSite,
        input: Input::Best,
        iters: a.gsum_iters,
    }];
    for &input in &a.inputs {
        let cond_iters = match input {
            Input::Best => a.gsum_iters,
            Input::Worst => a.wan_iters,
            _ => a.job.cond_iters(input, a.trace_iters)?,
        };
        for (mode, iters) in [
            (Mode::Tree, a.wan_iters),
            (Mode::Magpie, a.wan_iters),
            (Mode::Cond, cond_iters),
        ] {
            runs.push(Config { mode, input, iters });
        }
    }
    let records = a.job.run_all(programs, &a.modes, &runs, None)?;
    print_table(&records);
    let recs: Vec<&WanRecord> = records.iter().map(|(_, r)| r).collect();
    crate::tree::write_records(a.json.as_deref(), "coll-wan.json", &recs)?;
    Ok(())
}

/// Mean time per iteration of the tree on the same input (what the seed compares with).
pub fn tree_mean(records: &[(&str, WanRecord)], input: &str) -> Option<f64> {
    records
        .iter()
        .find(|(_, r)| r.input == input && r.algorithm == "hierarchical:tree")
        .map(|(_, r)| r.mean_us)
}

fn print_table(records: &[(&str, WanRecord)]) {
    let base = records
        .iter()
        .find(|(_, r)| r.sites == 1)
        .map(|(_, r)| r.mean_us);
    println!(
        "\n{:<24} {:>11} {:>6} {:>12} {:>11} {:>11} {:>20}  vs",
        "configuration", "input", "iters", "mean µs/it", "median µs", "p90 µs", "local per site"
    );
    for (label, r) in records {
        let mut rel = Vec::new();
        let vs_tree = r.sites > 1 && r.algorithm != "hierarchical:tree";
        if let Some(t) = tree_mean(records, &r.input).filter(|_| vs_tree) {
            rel.push(format!("{:.2}× faster than tree", t / r.mean_us));
        }
        if let Some(b) = base.filter(|_| r.input == "best" && r.algorithm == "cond_allreduce") {
            rel.push(format!("{:.2}× one site's time", r.mean_us / b));
        }
        println!(
            "{:<24} {:>11} {:>6} {:>12.1} {:>11.1} {:>11.1} {:>20}  {}",
            label,
            r.input,
            r.iterations,
            r.mean_us,
            r.median_us,
            r.p90_us,
            r.decided_locally_by_site
                .as_ref()
                .map_or("-".to_string(), |l| format!("{l:?}")),
            rel.join(", "),
        );
    }
}
