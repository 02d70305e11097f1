//! `vargr codec`: what each codec does to a file, and what would pay on a given link.
//!
//! `vargr codec bench FILE --type f64 --bandwidth 100mbit --latency 1ms` measures every
//! codec that fits the element type (ratio, compression and decompression speed on this
//! machine) and prices one message of the file's size on the link: compression time +
//! transfer of the compressed bytes + decompression time, against sending it raw (the
//! seed's Eq. 4.4). Messages are cut from the file (`--message`) because links carry
//! messages, not files.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use vargr_codec::{measure_all, ElemKind};

#[derive(Debug, Subcommand)]
pub enum CodecCmd {
    /// Ratio and speed of every codec on a file, and what pays on a link.
    Bench(CodecBenchArgs),
    /// The guided strategy's offline step: price every codec on the samples a
    /// `vargr run --codec-samples DIR` recorded, and write one rule per kind of message
    /// (use it with `vargr run --codec guided:PLAN`).
    Plan(CodecPlanArgs),
}

#[derive(Debug, Args)]
pub struct CodecPlanArgs {
    /// The directory `--codec-samples` wrote.
    dir: PathBuf,
    /// Link bandwidth the plan is for.
    #[arg(long, default_value = "100mbit")]
    bandwidth: String,
    /// One-way link latency the plan is for.
    #[arg(long, default_value = "0ms")]
    latency: String,
    /// Where to write the plan (default DIR/plan.json).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CodecBenchArgs {
    file: PathBuf,
    /// What the file holds: u8 (bytes), i8…i64, u16…u64, f32, f64.
    #[arg(long = "type", default_value = "u8")]
    elem: String,
    /// Link bandwidth (`100mbit`, `1gbit`, `50MB/s`).
    #[arg(long, default_value = "100mbit")]
    bandwidth: String,
    /// One-way link latency (`1ms`, `150us`).
    #[arg(long, default_value = "0ms")]
    latency: String,
    /// Message size in bytes (a multiple of the element size): the first this many
    /// bytes of the file are measured. Default: the whole file, at most 4 MiB.
    #[arg(long)]
    message: Option<usize>,
}

pub fn run(c: CodecCmd) -> Result<()> {
    match c {
        CodecCmd::Bench(a) => bench(a),
        CodecCmd::Plan(a) => plan(a),
    }
}

fn plan(a: CodecPlanArgs) -> Result<()> {
    use vargr_codec::guided::{decode_trace, MessageKey, Plan, Rule};
    let bps = vargr_emu::parse_bandwidth(&a.bandwidth)
        .with_context(|| format!("--bandwidth {:?}", a.bandwidth))?;
    let latency = vargr_emu::parse_duration(&a.latency)
        .with_context(|| format!("--latency {:?}", a.latency))?;
    let model = vargr_codec::stage::link_model(latency, bps);
    let wire = |bytes: usize| model.transfer_time(bytes as f64);
    // Every sample of every trace file, grouped by kind of message.
    let mut by_key: std::collections::BTreeMap<MessageKey, Vec<Vec<u8>>> = Default::default();
    let mut files = 0;
    let rd = std::fs::read_dir(&a.dir).with_context(|| format!("reading {}", a.dir.display()))?;
    for e in rd {
        let p = e?.path();
        if p.extension().is_none_or(|x| x != "ctr") {
            continue;
        }
        let bytes = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
        for s in decode_trace(&bytes, &p.display().to_string())? {
            by_key.entry(s.key).or_default().push(s.payload);
        }
        files += 1;
    }
    if by_key.is_empty() {
        bail!(
            "{}: no codec samples (record some with `vargr run --codec-samples {}`)",
            a.dir.display(),
            a.dir.display()
        );
    }
    let mut plan = Plan {
        latency_s: latency.as_secs_f64(),
        bytes_per_s: bps.map_or(f64::INFINITY, |b| b as f64 / 8.0),
        rules: Default::default(),
    };
    println!(
        "{} kinds of message from {files} trace files, priced for {} + {}\n",
        by_key.len(),
        vargr_emu::fmt_bandwidth(bps),
        vargr_emu::fmt_duration(latency)
    );
    println!(
        "{:<18} {:<5} {:>10} {:>8} {:<16} {:>8}",
        "key", "type", "bytes", "samples", "rule", "speedup"
    );
    for (key, samples) in &by_key {
        // The codec with the best mean time over the samples.
        let mut best = (vargr_codec::Codec::None, 1.0f64);
        let raw: f64 = samples.iter().map(|s| wire(s.len())).sum();
        for &codec in vargr_codec::Codec::CATALOG.iter().skip(1) {
            if !codec.supports(key.elem) {
                continue;
            }
            let mut t = 0.0;
            let mut ok = true;
            for s in samples {
                match vargr_codec::measure(codec, s, key.elem, Duration::from_millis(5)) {
                    Ok(m) if m.verified => {
                        let mb = s.len() as f64 / 1e6;
                        t += mb / m.compress_mb_s
                            + mb / m.decompress_mb_s
                            + wire(m.compressed_len.min(s.len() + 16));
                    }
                    _ => ok = false,
                }
            }
            if ok && raw / t > best.1 {
                best = (codec, raw / t);
            }
        }
        let id = format!("{:016x}", key.id());
        println!(
            "{:<18} {:<5} {:>10} {:>8} {:<16} {:>8.2}",
            id,
            key.elem.to_string(),
            key.len,
            samples.len(),
            best.0.to_string(),
            best.1
        );
        plan.rules.insert(
            id,
            Rule {
                codec: best.0.to_string(),
                speedup: best.1,
                elem: key.elem.to_string(),
                len: key.len,
            },
        );
    }
    let out = a.out.unwrap_or_else(|| a.dir.join("plan.json"));
    std::fs::write(&out, serde_json::to_vec_pretty(&plan)?)
        .with_context(|| format!("writing {}", out.display()))?;
    println!(
        "\nwrote {} (use it with `vargr run --codec guided:{}`)",
        out.display(),
        out.display()
    );
    Ok(())
}

fn bench(a: CodecBenchArgs) -> Result<()> {
    let elem: ElemKind = a
        .elem
        .parse()
        .map_err(|e| anyhow::anyhow!("--type {:?}: {e}", a.elem))?;
    let bps = vargr_emu::parse_bandwidth(&a.bandwidth)
        .with_context(|| format!("--bandwidth {:?}", a.bandwidth))?;
    let latency = vargr_emu::parse_duration(&a.latency)
        .with_context(|| format!("--latency {:?}", a.latency))?;
    let data = std::fs::read(&a.file).with_context(|| format!("reading {}", a.file.display()))?;
    let want = a.message.unwrap_or(4 << 20).min(data.len());
    let size = want - want % elem.size();
    if size == 0 {
        bail!(
            "{}: needs at least one {}-byte element",
            a.file.display(),
            elem.size()
        );
    }
    let msg = &data[..size];
    let model = vargr_codec::stage::link_model(latency, bps);
    let wire = |bytes: usize| Duration::from_secs_f64(model.transfer_time(bytes as f64));
    let raw = wire(size);
    let measures = measure_all(msg, elem);
    // What the adaptive engine would do with these measurements on this link.
    let engine_choice = {
        let mut e = vargr_codec::Engine::new(vargr_codec::EngineConfig::default())?;
        let link = vargr_codec::LinkKey(0);
        e.set_link_model(link, vargr_codec::stage::link_model(latency, bps));
        e.calibrate_codecs(elem, &measures);
        e.decide(link, elem, msg)
    };
    let mut rows: Vec<(String, f64, f64, f64, Duration)> = measures
        .into_iter()
        .filter(|m| m.verified)
        .map(|m| {
            let mb = size as f64 / 1e6;
            let t = Duration::from_secs_f64(mb / m.compress_mb_s + mb / m.decompress_mb_s)
                + wire(m.compressed_len.min(size + 16));
            (
                m.codec.to_string(),
                m.ratio,
                m.compress_mb_s,
                m.decompress_mb_s,
                t,
            )
        })
        .collect();
    rows.sort_by_key(|r| r.4);
    println!(
        "{}: {} bytes as {elem} ({} per message), link {} + {}: raw {:.3} ms\n",
        a.file.display(),
        data.len(),
        size,
        vargr_emu::fmt_bandwidth(bps),
        vargr_emu::fmt_duration(latency),
        raw.as_secs_f64() * 1e3
    );
    println!(
        "{:<16} {:>8} {:>12} {:>12} {:>12} {:>9}",
        "codec", "ratio", "comp MB/s", "decomp MB/s", "message ms", "speedup"
    );
    for (name, ratio, c, d, t) in &rows {
        println!(
            "{:<16} {:>8.3} {:>12.0} {:>12.0} {:>12.3} {:>9.2}",
            name,
            ratio,
            c,
            d,
            t.as_secs_f64() * 1e3,
            raw.as_secs_f64() / t.as_secs_f64()
        );
    }
    if let Some((best, .., t)) = rows.first() {
        if *t < raw {
            println!("\npays on this link: {best}");
        } else {
            println!("\nnothing pays on this link: send it raw");
        }
    }
    println!(
        "the adaptive engine would send it {} ({:?})",
        match engine_choice.codec {
            vargr_codec::Codec::None => "raw".to_string(),
            c => format!("with {c}"),
        },
        engine_choice.reason
    );
    Ok(())
}
