//! Measures how closely the relay follows its profile and prints one JSON line per
//! profile: ping-pong latency error with 2 and 40 connections, and bulk throughput error.
//!
//! ```text
//! cargo run --release -p vargr-emu --example accuracy                 # default profiles
//! cargo run --release -p vargr-emu --example accuracy -- latency=20ms,bandwidth=100mbit
//! cargo run --release -p vargr-emu --example accuracy -- --spin=200us --connections=2 latency=5ms
//! ```

use std::process::ExitCode;

use vargr_emu::measure::{measure, MeasureConfig};
use vargr_emu::{parse_duration, RelayConfig, WanProfile};

const DEFAULT_PROFILES: [&str; 4] = [
    "latency=5ms,bandwidth=10mbit",
    "latency=5ms,bandwidth=100mbit",
    "latency=20ms,bandwidth=10mbit",
    "latency=20ms,bandwidth=100mbit",
];

fn main() -> ExitCode {
    let mut spin = RelayConfig::DEFAULT_SPIN;
    let mut connections = vec![2, 40];
    let mut args = Vec::new();
    for arg in std::env::args().skip(1) {
        if let Some(value) = arg.strip_prefix("--spin=") {
            match parse_duration(value) {
                Ok(d) => spin = d,
                Err(e) => {
                    eprintln!("accuracy: --spin: {e}");
                    return ExitCode::FAILURE;
                }
            }
        } else if let Some(value) = arg.strip_prefix("--connections=") {
            match value.split(',').map(str::parse).collect() {
                Ok(list) => connections = list,
                Err(e) => {
                    eprintln!("accuracy: --connections={value:?}: {e} (expected e.g. 2,40)");
                    return ExitCode::FAILURE;
                }
            }
        } else {
            args.push(arg);
        }
    }
    let profiles: Vec<String> = if args.is_empty() {
        DEFAULT_PROFILES.iter().map(|s| s.to_string()).collect()
    } else {
        args
    };
    for text in profiles {
        let profile: WanProfile = match text.parse() {
            Ok(p) => p,
            Err(e) => {
                eprintln!("accuracy: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mut cfg = MeasureConfig::new(profile);
        cfg.spin = spin;
        cfg.connections = connections.clone();
        match measure(&cfg) {
            Ok(report) => println!("{}", report.to_json()),
            Err(e) => {
                eprintln!("accuracy: {text}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
