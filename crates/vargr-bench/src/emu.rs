//! `vargr bench emu`: how closely the Longcut relay follows its profile (seed 000,
//! figure 7 of the Longcut chapter: the same latency with 2 and with 40 connections).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use vargr_emu::measure::{measure, MeasureConfig};
use vargr_emu::WanProfile;

#[derive(Args, Clone)]
pub struct EmuBenchArgs {
    /// Write the reports as JSON here (default bench/results/emu.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Profiles to measure (default: 1, 5 and 18 ms one way, 10 and 100 mbit).
    #[arg(long = "profile")]
    profiles: Vec<String>,
}

const DEFAULT_PROFILES: [&str; 6] = [
    "latency=1ms,bandwidth=10mbit",
    "latency=1ms,bandwidth=100mbit",
    "latency=5ms,bandwidth=10mbit",
    "latency=5ms,bandwidth=100mbit",
    "rtt=36ms,bandwidth=10mbit",
    "rtt=36ms,bandwidth=100mbit",
];

pub fn run(a: EmuBenchArgs) -> Result<()> {
    let profiles: Vec<String> = if a.profiles.is_empty() {
        DEFAULT_PROFILES.iter().map(|s| s.to_string()).collect()
    } else {
        a.profiles.clone()
    };
    println!(
        "{:<34} {:>5} {:>11} {:>11} {:>8} {:>10} {:>9}",
        "profile", "conns", "expect µs", "median µs", "err %", "host µs", "bw err %"
    );
    let mut reports = Vec::new();
    for text in &profiles {
        let profile: WanProfile = text.parse().with_context(|| format!("profile {text:?}"))?;
        eprintln!("measuring {text} …");
        let r =
            measure(&MeasureConfig::new(profile)).with_context(|| format!("measuring {text}"))?;
        let bw = r
            .throughput
            .as_ref()
            .map(|t| format!("{:.3}", t.error_pct))
            .unwrap_or_else(|| "-".into());
        for l in &r.latency {
            println!(
                "{:<34} {:>5} {:>11.0} {:>11.0} {:>8.2} {:>10.0} {:>9}",
                text,
                l.connections,
                l.expected.as_secs_f64() * 1e6,
                l.median.as_secs_f64() * 1e6,
                l.error_pct,
                l.host_overhead.as_secs_f64() * 1e6,
                bw
            );
        }
        reports.push(r.to_json());
    }
    let path = a
        .json
        .clone()
        .unwrap_or_else(|| crate::results_dir().join("emu.json"));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&path, format!("[\n{}\n]\n", reports.join(",\n")))
        .with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {} reports to {}", reports.len(), path.display());
    Ok(())
}
