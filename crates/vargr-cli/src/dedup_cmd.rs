//! `vargr dedup`: the two-level fingerprint model, and what the segment caches hold.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use vargr_dedup::cache::{DiskCache, DiskConfig};
use vargr_dedup::model::{self, ModelParams};

#[derive(Debug, Subcommand)]
pub enum DedupCmd {
    /// Evaluate the seed's compression-ratio model (Eq. 2) and Bloom filter sizing.
    Model(ModelArgs),
    /// What each peer's segment cache holds, and its last session's hits, Bloom
    /// filter rate and hit ages.
    Stats(StatsArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum WireArg {
    /// Bytes as the seed counts them (fingerprints only).
    Seed,
    /// Bytes as vargr's messages carry them (type bytes, 128-bit group hash).
    Vargr,
}

#[derive(Debug, Args)]
pub struct ModelArgs {
    /// Data set size (e.g. 100g).
    #[arg(long, default_value = "100g")]
    data: String,
    /// Fraction of the data that is redundant.
    #[arg(long, default_value_t = 0.75)]
    redundancy: f64,
    /// Average segment size in bytes.
    #[arg(long, default_value_t = 32.0)]
    segment: f64,
    /// Optimistic fingerprint bits.
    #[arg(long, default_value_t = 40.0)]
    bits: f64,
    /// Segments per conservative fingerprint.
    #[arg(long, default_value_t = 20.0)]
    group: f64,
    /// One-level fingerprint size to compare with, bytes.
    #[arg(long, default_value_t = 20.0)]
    one_level: f64,
    #[arg(long, value_enum, default_value = "seed")]
    wire: WireArg,
    /// Bloom filter bits per entry.
    #[arg(long, default_value_t = 8.0)]
    bloom_bits: f64,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Only this peer's cache (a directory name under the cache root).
    peer: Option<String>,
    /// Cache root (default $VARGR_CACHE_DIR or ~/.cache/vargr/dedup).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

pub fn run(c: DedupCmd, config: &vargr_config::Config) -> Result<()> {
    match c {
        DedupCmd::Model(a) => model_cmd(a),
        DedupCmd::Stats(a) => stats_cmd(a, config),
    }
}

fn model_cmd(a: ModelArgs) -> Result<()> {
    let base = match a.wire {
        WireArg::Seed => ModelParams::default(),
        WireArg::Vargr => ModelParams::vargr(),
    };
    let p = ModelParams {
        data_bytes: crate::sync_cmd::parse_size(&a.data).context("--data")? as f64,
        redundancy: a.redundancy,
        segment_bytes: a.segment,
        optimistic_bits: a.bits,
        group: a.group,
        ..base
    };
    p.check()?;
    let two = model::evaluate(&p);
    let one = model::one_level(&p, a.one_level);
    let (best, at_best) = model::best_group(&p);
    let hashes = model::bloom_optimal_hashes(a.bloom_bits);
    let fp_rate = model::bloom_false_positive(a.bloom_bits, hashes);
    let bloom_bytes = model::bloom_memory_bytes(p.new_segments(), a.bloom_bits);
    if a.json {
        let v = serde_json::json!({
            "params": p, "two_level": two, "one_level": one,
            "best_group": best, "at_best_group": at_best,
            "bloom": {"bits_per_entry": a.bloom_bits, "hashes": hashes,
                      "false_positive_rate": fp_rate, "bytes": bloom_bytes},
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let gib = |b: f64| b / model::GIB;
    println!(
        "data {:.1} GiB, {:.0} % redundant, {} B segments, wire counted as {:?}\n",
        gib(p.data_bytes),
        p.redundancy * 100.0,
        p.segment_bytes,
        p.wire
    );
    println!(
        "{:<34} {:>10} {:>12} {:>12} {:>12} {:>7}",
        "scheme", "segments", "fingerprint", "collisions", "total", "ratio"
    );
    let row = |name: &str, r: &model::ModelResult| {
        println!(
            "{:<34} {:>7.2} GiB {:>8.2} GiB {:>8.3} GiB {:>8.2} GiB {:>7.2}",
            name,
            gib(r.segment_bytes_sent),
            gib(r.fingerprint_bytes),
            gib(r.collision_bytes),
            gib(r.total_bytes),
            r.ratio
        )
    };
    row(
        &format!("two-level {}-bit, groups of {}", p.optimistic_bits, p.group),
        &two,
    );
    row(&format!("two-level, best group ({best})"), &at_best);
    row(&format!("one-level {}-byte", a.one_level), &one);
    println!(
        "\nBloom filter: {} bits/entry, {hashes} hashes: {:.2} % false positives, {:.1} MiB for {:.0} segments",
        a.bloom_bits,
        fp_rate * 100.0,
        bloom_bytes / (1 << 20) as f64,
        p.new_segments()
    );
    Ok(())
}

fn stats_cmd(a: StatsArgs, config: &vargr_config::Config) -> Result<()> {
    let root = crate::sync_cmd::cache_root(a.cache_dir.as_ref(), config);
    let mut peers: Vec<String> = match &a.peer {
        Some(p) => vec![p.clone()],
        None => std::fs::read_dir(&root)
            .with_context(|| format!("listing the cache root {}", root.display()))?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect(),
    };
    peers.sort();
    if peers.is_empty() {
        bail!("no caches under {}", root.display());
    }
    let mut all = Vec::new();
    for peer in peers {
        let dir = root.join(&peer);
        // The width the containers were written with does not matter for what they hold.
        let held = DiskCache::open(&dir, DiskConfig::default())
            .map(|c| c.stats())
            .with_context(|| format!("opening the cache of {peer}"))?;
        let last: Option<serde_json::Value> = std::fs::read(dir.join(vargr_sync::SESSION_STATS))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        all.push((peer, held, last));
    }
    if a.json {
        let v: Vec<_> = all
            .iter()
            .map(|(p, h, l)| serde_json::json!({"peer": p, "holds": h, "last_session": l}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    for (peer, h, last) in &all {
        println!("{peer} ({})", root.join(peer).display());
        println!(
            "  holds {} segments, {} in {} containers, {} on disk; index {}",
            h.segments,
            indicatif::HumanBytes(h.bytes),
            h.containers,
            indicatif::HumanBytes(h.disk_bytes),
            indicatif::HumanBytes(h.index_bytes)
        );
        if h.damaged_records + h.damaged_containers > 0 {
            println!(
                "  dropped at open: {} damaged records, {} damaged containers",
                h.damaged_records, h.damaged_containers
            );
        }
        let Some(l) = last else {
            println!("  no session recorded yet");
            continue;
        };
        let n = |k: &str| l[k].as_u64().unwrap_or(0);
        println!(
            "  last session: {} inserts ({} repeats), {} hits, {} misses",
            n("inserts"),
            n("duplicates"),
            n("hits"),
            n("misses")
        );
        let b = &l["bloom"];
        if b.is_object() {
            println!(
                "  Bloom filter: {} lookups, {} false positives, measured {:.3} % (model {:.3} %)",
                b["lookups"],
                b["false_positives"],
                b["measured_rate"].as_f64().unwrap_or(0.0) * 100.0,
                b["model_rate"].as_f64().unwrap_or(0.0) * 100.0
            );
        }
        let ages: Vec<String> = l["hit_ages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| match b["below_bytes"].as_u64() {
                Some(x) => format!("<{}: {}", indicatif::HumanBytes(x), b["hits"]),
                None => format!("older: {}", b["hits"]),
            })
            .collect();
        println!("  hit ages (bytes written since): {}", ages.join(", "));
    }
    Ok(())
}
