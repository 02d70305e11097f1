//! `vargr bench longcut`: the seed's trace-against-constant experiment (000 ch. 8.1,
//! figures 5 and 6 and table VI). The same workloads run over an emulated WAN that
//! replays a varying trace and over one held at the trace's mean latency and
//! bandwidth, to see how much the variation itself costs: PMB PingPong between two
//! sites, PMB Allreduce over four sites, and red-black SOR over four sites.
//!
//! The seed replayed traces of the Odense-Aalborg link measured by EventSpace (a mean
//! two-way latency of 9.85 ms, sd 4.02; 10.08 Mbit/s, sd 1.28, its tables IV and V)
//! and by NWS (7.03 ms, 6.27 Mbit/s, tables I and II). Those traces are gone, so the
//! default traces are synthetic with the same means and deviations (seeded, one row
//! every 10 ms for 2 s, looping: a run of a few seconds sees all of it, more than once); `--trace FILE` replays a recorded one instead (`vargr emu record`).
//! The constant WAN is the means of the varying trace, computed from its rows.
//!
//! Each run is one `vargr run` job with `--wan trace=FILE` and the codec off (the
//! seed's links did not compress); every job of a run starts its trace from the
//! beginning, at the moment `vargr run` made the job's shared gateways.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use rand::{RngExt, SeedableRng};
use serde::Serialize;
use vargr_coll::Op;
use vargr_emu::{Trace, TraceRow};

use crate::Programs;

#[derive(Args, Clone)]
pub struct LongcutArgs {
    /// Replay this recorded trace as the varying one instead of the synthetic
    /// EventSpace-like trace (and leave out the NWS-like one).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// PingPong round trips per message size.
    #[arg(long, default_value_t = 100)]
    pingpong_iters: u64,
    /// PingPong message sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "8,32768")]
    sizes: Vec<usize>,
    /// Allreduce calls (8 bytes, four sites).
    #[arg(long, default_value_t = 200)]
    allreduce_iters: u64,
    /// SOR grid side (0 skips SOR).
    #[arg(long, default_value_t = 96)]
    sor_side: usize,
    /// SOR convergence threshold (larger stops sooner; the default: 145 iterations).
    #[arg(long, default_value_t = 100_000.0)]
    sor_epsilon: f64,
    /// Seed of the synthetic traces.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the records here (default bench/results/longcut-traces.json).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One workload under one WAN.
#[derive(Debug, Clone, Serialize)]
struct Record {
    benchmark: String,
    /// pingpong, allreduce or sor.
    workload: String,
    /// constant, eventspace, nws or the recorded file's name.
    trace: String,
    /// The WAN's mean one-way latency (ms) and bandwidth (Mbit/s), from its rows.
    mean_latency_ms: f64,
    mean_bandwidth_mbit: f64,
    ranks: usize,
    sites: usize,
    bytes: usize,
    iterations: u64,
    /// PingPong and Allreduce: the mean time of one call (PingPong: half a round trip,
    /// as PMB reports it). SOR: the whole run.
    mean_us: f64,
    /// PingPong only: bytes over the one-way time, in MB/s (10^6), as PMB.
    mb_per_s: Option<f64>,
    /// This mean over the same workload's under the constant WAN.
    slowdown: f64,
}

/// Rows every 10 ms for 2 s around `rtt_ms` and `mbit` with standard deviations
/// `rtt_sd` and `mbit_sd` (sums of uniforms: near-normal, bounded), seeded.
fn synthetic(rtt_ms: f64, rtt_sd: f64, mbit: f64, mbit_sd: f64, seed: u64) -> Vec<TraceRow> {
    let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut normal = || (0..12).map(|_| rng.random::<f64>()).sum::<f64>() - 6.0;
    (0..200u64)
        .map(|i| {
            let rtt = (rtt_ms + rtt_sd * normal()).max(0.2);
            let bw = (mbit + mbit_sd * normal()).max(0.5);
            TraceRow {
                at: Duration::from_millis(10 * i),
                latency: Duration::from_secs_f64(rtt / 2e3),
                bandwidth_bits_per_s: Some((bw * 1e6) as u64),
            }
        })
        .collect()
}

/// Mean one-way latency and bandwidth (bits/s) of rows, each weighted by how long it
/// holds (the last by the gap before it, as the replay's loop does).
fn means(t: &Trace) -> (Duration, u64) {
    let rows = t.rows();
    let hold = |i: usize| match (rows.get(i + 1), i) {
        (Some(next), _) => (next.at - rows[i].at).as_secs_f64(),
        (None, 0) => 1.0,
        (None, _) => (rows[i].at - rows[i - 1].at).as_secs_f64(),
    };
    let total: f64 = (0..rows.len()).map(hold).sum();
    let lat: f64 = (0..rows.len())
        .map(|i| rows[i].latency.as_secs_f64() * hold(i))
        .sum::<f64>()
        / total;
    let bw: f64 = (0..rows.len())
        .map(|i| rows[i].bandwidth_bits_per_s.map_or(1e12, |b| b as f64) * hold(i))
        .sum::<f64>()
        / total;
    (Duration::from_secs_f64(lat), bw as u64)
}

pub fn run(a: LongcutArgs, programs: &Programs) -> Result<()> {
    let dir = tempfile::tempdir().context("a directory for the traces")?;
    let varying = match &a.trace {
        Some(p) => Trace::load(p)?,
        None => Trace::from_rows(synthetic(9.85, 4.02, 10.08, 1.28, a.seed), "eventspace")?,
    };
    let (lat, bw) = means(&varying);
    let constant = Trace::from_rows(
        vec![TraceRow {
            at: Duration::ZERO,
            latency: lat,
            bandwidth_bits_per_s: Some(bw),
        }],
        "constant",
    )?;
    let mut traces = vec![
        ("constant".to_string(), constant),
        (
            a.trace
                .as_ref()
                .map_or("eventspace".into(), |p| p.display().to_string()),
            varying,
        ),
    ];
    if a.trace.is_none() {
        // NWS measured the same link lower and slower; its deviations are not given.
        let nws = synthetic(7.03, 0.70, 6.27, 0.63, a.seed + 1);
        traces.push(("nws".into(), Trace::from_rows(nws, "nws")?));
    }
    let mut records: Vec<Record> = Vec::new();
    for (name, trace) in &traces {
        let file = dir.path().join(format!("{}.trace", records.len()));
        std::fs::write(&file, trace.to_text())?;
        let (lat, bw) = means(trace);
        let base = Record {
            benchmark: "longcut-traces".into(),
            workload: String::new(),
            trace: name.clone(),
            mean_latency_ms: lat.as_secs_f64() * 1e3,
            mean_bandwidth_mbit: bw as f64 / 1e6,
            ranks: 0,
            sites: 0,
            bytes: 0,
            iterations: 0,
            mean_us: 0.0,
            mb_per_s: None,
            slowdown: 1.0,
        };
        eprintln!(
            "WAN {name}: mean {:.2} ms one way, {:.2} Mbit/s",
            base.mean_latency_ms, base.mean_bandwidth_mbit
        );
        let wan = format!("trace={}", file.display());
        let sizes: Vec<String> = a.sizes.iter().map(|s| s.to_string()).collect();
        let out = job(
            programs,
            2,
            &wan,
            &[
                "longcut-rank",
                "--workload",
                "pingpong",
                "--iters",
                &a.pingpong_iters.to_string(),
                "--sizes",
                &sizes.join(","),
            ],
        )?;
        for (size, mean_us) in results(&out)? {
            records.push(Record {
                workload: "pingpong".into(),
                ranks: 2,
                sites: 2,
                bytes: size,
                iterations: a.pingpong_iters,
                mean_us,
                mb_per_s: Some(size as f64 / mean_us),
                ..base.clone()
            });
        }
        let out = job(
            programs,
            4,
            &wan,
            &[
                "longcut-rank",
                "--workload",
                "allreduce",
                "--iters",
                &a.allreduce_iters.to_string(),
                "--sizes",
                "8",
            ],
        )?;
        for (size, mean_us) in results(&out)? {
            records.push(Record {
                workload: "allreduce".into(),
                ranks: 4,
                sites: 4,
                bytes: size,
                iterations: a.allreduce_iters,
                mean_us,
                ..base.clone()
            });
        }
        if a.sor_side > 0 {
            let out = job(
                programs,
                4,
                &wan,
                &[
                    "coll-sor-rank",
                    "--test",
                    "plain",
                    "--side",
                    &a.sor_side.to_string(),
                    "--epsilon",
                    &a.sor_epsilon.to_string(),
                ],
            )?;
            // Rank 0 prints one JSON object (crate::sor_bench's RankOutput).
            let result: serde_json::Value = serde_json::from_str(out.trim())
                .with_context(|| format!("SOR under {name}: no result in {out:?}"))?;
            let (Some(iterations), Some(secs)) =
                (result["iterations"].as_u64(), result["seconds"].as_f64())
            else {
                bail!("SOR under {name}: no iterations and seconds in {out:?}");
            };
            records.push(Record {
                workload: "sor".into(),
                ranks: 4,
                sites: 4,
                bytes: a.sor_side * 8,
                iterations,
                mean_us: secs * 1e6,
                ..base.clone()
            });
        }
    }
    // Slowdown against the constant WAN, workload by workload.
    let constant: Vec<Record> = records
        .iter()
        .filter(|r| r.trace == "constant")
        .cloned()
        .collect();
    for r in &mut records {
        if let Some(c) = constant
            .iter()
            .find(|c| c.workload == r.workload && c.bytes == r.bytes)
        {
            r.slowdown = r.mean_us / c.mean_us;
        }
    }
    println!(
        "\n{:<10} {:>7} {:<12} {:>9} {:>10} {:>14} {:>9}",
        "workload", "bytes", "WAN", "lat ms", "Mbit/s", "mean µs", "slowdown"
    );
    for r in &records {
        println!(
            "{:<10} {:>7} {:<12} {:>9.2} {:>10.2} {:>14.1} {:>9.3}",
            r.workload,
            r.bytes,
            r.trace.chars().take(12).collect::<String>(),
            r.mean_latency_ms,
            r.mean_bandwidth_mbit,
            r.mean_us,
            r.slowdown
        );
    }
    crate::tree::write_records(a.json.as_deref(), "longcut-traces.json", &records)
}

/// Runs `vargr run -n RANKS --sites RANKS` (one rank per site) over `wan` with the
/// codec off; returns the ranks' standard output.
fn job(programs: &Programs, ranks: usize, wan: &str, role: &[&str]) -> Result<String> {
    let n = ranks.to_string();
    let out = Command::new(programs.vargr()?)
        .args([
            "run", "-n", &n, "--sites", &n, "--wan", wan, "--codec", "off",
        ])
        .arg("--")
        .arg(programs.bench())
        .args(role)
        .output()
        .context("starting vargr run")?;
    if !out.status.success() {
        bail!(
            "{} over {wan} failed: {}",
            role[0],
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `RESULT size S mean_us X` lines.
fn results(out: &str) -> Result<Vec<(usize, f64)>> {
    let r: Vec<(usize, f64)> = out
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                ["RESULT", "size", s, "mean_us", m] => Some((s.parse().ok()?, m.parse().ok()?)),
                _ => None,
            }
        })
        .collect();
    ensure!(!r.is_empty(), "no RESULT lines in {out:?}");
    Ok(r)
}

#[derive(Args, Clone)]
pub struct LongcutRankArgs {
    /// pingpong (ranks 0 and 1) or allreduce (all ranks).
    #[arg(long)]
    workload: String,
    #[arg(long)]
    iters: u64,
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
}

/// One rank of `vargr bench longcut`: PMB's PingPong (rank 0 sends, rank 1 returns,
/// half the round trip is the time) or Allreduce of `size` bytes of f64, after a
/// warm-up; rank 0 prints `RESULT size S mean_us X` per size.
pub fn rank(a: LongcutRankArgs) -> Result<()> {
    let job = vargr_config::join_job()?;
    let out = job.run(|c| {
        let mut lines = Vec::new();
        for &size in &a.sizes {
            c.barrier()?;
            let mean = match a.workload.as_str() {
                "pingpong" => pingpong(&c, size, a.iters)?,
                _ => {
                    let mut buf = vec![1.0f64; size.div_ceil(8).max(1)];
                    for _ in 0..3 {
                        c.allreduce(&mut buf, &Op::Sum)?;
                    }
                    c.barrier()?;
                    let t = Instant::now();
                    for _ in 0..a.iters {
                        c.allreduce(&mut buf, &Op::Sum)?;
                    }
                    t.elapsed() / a.iters.max(1) as u32
                }
            };
            lines.push(format!(
                "RESULT size {size} mean_us {:.3}",
                mean.as_secs_f64() * 1e6
            ));
        }
        Ok((c.rank() == 0).then_some(lines))
    })?;
    job.finish();
    for l in out.into_iter().flatten().flatten() {
        println!("{l}");
    }
    Ok(())
}

/// Half the mean round trip of `iters` ping-pongs of `size` bytes between ranks 0 and
/// 1 (after 2 untimed); other ranks wait.
fn pingpong(c: &vargr_coll::Comm, size: usize, iters: u64) -> vargr_coll::Result<Duration> {
    let msg = bytes::Bytes::from(vec![0x5au8; size]);
    let mut t = Instant::now();
    for i in 0..iters + 2 {
        if i == 2 {
            t = Instant::now();
        }
        match c.rank() {
            0 => {
                c.send_bytes(1, 40, msg.clone())?;
                c.recv_bytes(1, 41)?;
            }
            1 => {
                let m = c.recv_bytes(0, 40)?;
                c.send_bytes(0, 41, m)?;
            }
            _ => {}
        }
    }
    Ok(t.elapsed() / (2 * iters.max(1)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_traces_have_the_seed_s_means_and_the_constant_matches_them() {
        let t = Trace::from_rows(synthetic(9.85, 4.02, 10.08, 1.28, 1), "es").unwrap();
        let (lat, bw) = means(&t);
        // One-way: half the two-way 9.85 ms, within what 200 draws leave.
        assert!((lat.as_secs_f64() * 1e3 - 4.925).abs() < 0.4, "{lat:?}");
        assert!((bw as f64 / 1e6 - 10.08).abs() < 0.3, "{bw}");
        let sd = {
            let m = lat.as_secs_f64();
            let v: f64 = t
                .rows()
                .iter()
                .map(|r| (r.latency.as_secs_f64() - m).powi(2))
                .sum::<f64>()
                / t.rows().len() as f64;
            v.sqrt() * 2e3
        };
        assert!((sd - 4.02).abs() < 1.0, "two-way sd {sd} ms");
        // A one-row trace's means are its row.
        let one = Trace::from_rows(
            vec![TraceRow {
                at: Duration::ZERO,
                latency: lat,
                bandwidth_bits_per_s: Some(bw),
            }],
            "c",
        )
        .unwrap();
        assert_eq!(means(&one), (lat, bw));
    }

    #[test]
    fn result_lines_are_parsed_and_their_absence_is_an_error() {
        let out = "noise\nRESULT size 8 mean_us 12.5\nRESULT size 32768 mean_us 900\n";
        assert_eq!(results(out).unwrap(), vec![(8, 12.5), (32768, 900.0)]);
        assert!(results("nothing").is_err());
    }
}
