//! `vargr bench codec`: does compressing messages on a slow link pay, and does the
//! adaptive engine pick what pays?
//!
//! Codec speed and ratio alone (`vargr codec bench`) only predict; this benchmark sends
//! real messages through the real link stages of a two-site job (`vargr run --sites 2
//! --wan … --codec …`), so the time includes everything a program would pay: the copy
//! into the transport, the codec stage, the emulated WAN, decompression and the answer.
//! Rank 0 sends each message of a data set to rank 1, which answers with a one-byte
//! ack; a message's time is that round trip, and a data set's figure the median after
//! a warm-up. Every (link, data set, codec mode) is its own job, so the adaptive engine
//! starts cold on each data set and its warm-up is reported separately. After the
//! warm-up every other message goes uncompressed (the sender asks the link for it), and
//! a codec's speedup is taken against those: jobs of the same build differ by 5-15 %
//! as a whole on this machine, more than many of the differences measured.
//!
//! Data: the seed's synthetic buffers (ints, floats and doubles with 0-100 % zeros,
//! doubles with and without a predictable pattern), a few of `vargr_codec::testdata`'s
//! shapes, real arrays nobody here wrote (`scripts/fetch-codec-data.sh`: matplotlib's
//! sample data and a system binary), and a NAS IS-like key exchange, timed per
//! iteration (all its bucket messages back to back, one ack). Messages go out as typed
//! slices, so the link knows floats from bytes as far as the transport passes the
//! element type on.
//!
//! The compression ratio is what crossed the WAN: the job is traced, rank 0 marks the
//! timed window with a record of its own, and the bytes the codec stage emitted in that
//! window (`link/stage/codec/out`) are compared with the bytes sent. For fixed codecs
//! the ratio the codec reaches on the data with its true element type is reported
//! beside it (`expected_ratio`): a gap means the link saw a different type.
//!
//! Then, in process, every codec's speed on a few sets and what a warm decision costs;
//! last, a bulk transfer of a large file at 100 Mbit/s: vargr (codec off and adaptive)
//! against `zstd --adapt` piped through `vargr emu` with the same latency and bandwidth.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use clap::Args;
use serde::{Deserialize, Serialize};
use vargr_codec::testdata::{self, Rng};
use vargr_codec::{Codec, ElemKind};
use vargr_coll::{Comm, Elem};
use vargr_trace::{EventOp, Record, TraceFile, NO_PEER};

use crate::tree::median;
use crate::Programs;

/// The collector rank 0 marks its timed window with (start, end, bytes sent, messages).
const WINDOW: &str = "bench/codec/window";
/// Bytes of the window's units that rank 0 sent uncompressed (`--pair-raw`).
const WINDOW_RAW: &str = "bench/codec/window-raw";
/// The codec stage's outbound boundary: one record per frame it emitted, wire size.
const CODEC_OUT: &str = "link/stage/codec/out";
const TAG_DATA: u64 = 1;
const TAG_ACK: u64 = 2;
/// Frame header bytes on the wire, not counted in ratios (the same for raw frames).
const FRAME_HEADER: u64 = vargr_wire::HEADER_LEN as u64;

#[derive(Args, Clone, Debug)]
pub struct CodecBenchArgs {
    /// A small grid (a few data sets, two links, few repetitions) for smoke tests.
    #[arg(long)]
    quick: bool,
    /// Real data: a directory with the manifest.tsv of scripts/fetch-codec-data.sh (run
    /// for you when the manifest is missing).
    #[arg(long, default_value = "target/codec-data")]
    data: PathBuf,
    /// Do not run the fetch script; use real data only if the manifest is there.
    #[arg(long)]
    no_fetch: bool,
    /// Write the records here (default bench/results/codec.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Message size in bytes: data sets are cut into messages of this size (a set
    /// smaller than this is one message).
    #[arg(long, default_value_t = 1 << 20)]
    message: usize,
    /// Bytes of a real data set used at most for the message test (the system binary is
    /// large; its first few messages are enough).
    #[arg(long, default_value_t = 4 << 20)]
    set_limit: usize,
    /// Timed messages per (link, data set, codec) and job (default 15; 4 with --quick),
    /// on shaped links up to 8× as many for small messages, unshaped 16×.
    #[arg(long)]
    reps: Option<u32>,
    /// Messages before timing starts; the adaptive engine's warm-up, reported apart
    /// (default 5; 2 with --quick).
    #[arg(long)]
    warmup: Option<u32>,
    /// Links: 100mbit (1 ms one way), 1gbit (0.1 ms), loopback (no emulation), or a
    /// WAN profile such as latency=20ms,bandwidth=10mbit.
    #[arg(long, value_delimiter = ',')]
    links: Option<Vec<String>>,
    /// Jobs per (link, data set, codec), taken in turns so that drift of a shared
    /// machine hits every codec alike; speedups are the median of the jobs' own ratios
    /// (default 3, 5 on links of 1 Gbit/s and faster; 1 with --quick).
    #[arg(long)]
    rounds: Option<u32>,
    /// Only data sets whose name contains this.
    #[arg(long)]
    only: Option<String>,
    /// MiB of the bulk-transfer file (default 64; 8 with --quick; 0 skips the test).
    #[arg(long)]
    bulk_mb: Option<usize>,
    /// Skip the in-process codec speeds and decision cost.
    #[arg(long)]
    skip_speed: bool,
    /// Seconds one job may take before it is stopped and reported as hung.
    #[arg(long, default_value_t = 300)]
    job_timeout: u64,
}

/// What one rank job runs: one data set, sent as messages from rank 0 to rank 1.
#[derive(Args, Clone, Debug)]
pub struct CodecRankArgs {
    /// A synthetic data set's name, or the label of --file.
    #[arg(long)]
    set: String,
    /// Read the data from this raw little-endian file instead.
    #[arg(long, requires = "dtype")]
    file: Option<PathBuf>,
    /// The file's element type (u8, i16, u16, i32, f32, f64, …).
    #[arg(long)]
    dtype: Option<String>,
    /// Use at most this many bytes of the data set.
    #[arg(long)]
    limit: Option<usize>,
    /// Message size in bytes.
    #[arg(long)]
    message: usize,
    #[arg(long, default_value_t = 0)]
    warmup: u32,
    #[arg(long, default_value_t = 1)]
    reps: u32,
    /// Each repetition sends every message of the set, back to back, with one ack at
    /// the end (a bulk transfer, or one iteration of an exchange).
    #[arg(long)]
    batch: bool,
    /// After the warm-up, every other unit is sent uncompressed (the sender asks the
    /// link for it), so that the codec is compared with no compression within one job:
    /// `reps` units of each.
    #[arg(long)]
    pair_raw: bool,
}

/// A data set as the driver knows it.
#[derive(Debug, Clone)]
struct SetSpec {
    name: String,
    elem: ElemKind,
    /// Raw little-endian file (real data); `None`: synthetic, made from the name.
    file: Option<PathBuf>,
    source: String,
}

/// One link the messages cross.
#[derive(Debug, Clone)]
struct Link {
    name: String,
    /// `vargr run --wan` profile; `None`: sites on loopback with no emulation.
    wan: Option<String>,
    /// One-way latency (s) and bandwidth (bit/s; `None`: unlimited) of the profile.
    model: Option<(f64, Option<u64>)>,
}

impl Link {
    /// What the emulated link alone should take for a message of `wire` payload bytes
    /// and its ack: a latency each way plus both frames' bits at the bandwidth.
    fn ideal_us(&self, wire: f64) -> Option<f64> {
        let (lat, bw) = self.model?;
        let bits = (wire + 2.0 * FRAME_HEADER as f64 + 1.0) * 8.0;
        Some((2.0 * lat + bw.map_or(0.0, |b| bits / b as f64)) * 1e6)
    }
}

#[derive(Serialize, Debug, Clone)]
struct CodecRecord {
    /// `message` (time per message) or `bulk` (one large transfer).
    test: &'static str,
    dataset: String,
    dtype: String,
    /// Bytes per message (an exchange: per iteration; bulk: of the file).
    bytes: usize,
    /// Distinct messages the set was cut into.
    messages: usize,
    source: String,
    link: String,
    /// `none`, a codec (`lz4`, `zstd:1`, `fpc:16`, …), `adaptive`, or `zstd --adapt`.
    codec: String,
    /// Bulk: what moved the bytes.
    tool: Option<String>,
    /// Original bytes / bytes that crossed the link (frame headers excluded).
    ratio: Option<f64>,
    /// Fixed codecs: the ratio of the codec on these messages with their true type.
    expected_ratio: Option<f64>,
    median_us: Option<f64>,
    p90_us: Option<f64>,
    /// What the emulated link alone should take for the wire bytes (2 × latency +
    /// bits / bandwidth): the floor the measured time is compared with.
    link_us: Option<f64>,
    /// Median of the warm-up messages (the adaptive engine's learning).
    first_median_us: Option<f64>,
    speedup_vs_none: Option<f64>,
    first_speedup_vs_none: Option<f64>,
    /// Each job's median (µs) and the median of its messages sent uncompressed.
    #[serde(skip)]
    pairs: Vec<(f64, f64)>,
    /// Bulk: seconds from the first byte sent to the last received.
    seconds: Option<f64>,
    /// Speed: the codec alone on this machine, MB/s of original data.
    compress_mb_s: Option<f64>,
    decompress_mb_s: Option<f64>,
    /// Decision: what `Engine::decide` costs per message once warm.
    decide_ns: Option<f64>,
    /// Why a measurement is missing.
    note: Option<String>,
}

impl CodecRecord {
    fn new(test: &'static str, set: &SetSpec, bytes: usize, link: &str, codec: &str) -> Self {
        CodecRecord {
            test,
            dataset: set.name.clone(),
            dtype: set.elem.name().to_string(),
            bytes,
            messages: 1,
            source: set.source.clone(),
            link: link.to_string(),
            codec: codec.to_string(),
            tool: None,
            ratio: None,
            expected_ratio: None,
            median_us: None,
            p90_us: None,
            link_us: None,
            first_median_us: None,
            speedup_vs_none: None,
            first_speedup_vs_none: None,
            pairs: Vec::new(),
            seconds: None,
            compress_mb_s: None,
            decompress_mb_s: None,
            decide_ns: None,
            note: None,
        }
    }
}

/// What rank 0 prints for the driver.
#[derive(Serialize, Deserialize, Debug)]
struct RankOut {
    times_us: Vec<f64>,
    /// With `--pair-raw`: the timed units sent uncompressed.
    #[serde(default)]
    raw_us: Vec<f64>,
}

// ---------------------------------------------------------------------------------------
// Data

/// Synthetic sets of the full grid: the seed's (sizes 128 KiB and 1 MiB, 0/50/100 %
/// redundancy) and a few shapes of `testdata` at 1 MiB.
fn synthetic_names(quick: bool) -> Vec<String> {
    if quick {
        return [
            "i32-r50-128k",
            "f64-pattern-r0-128k",
            "f64-nopattern-r0-128k",
            "nas-is-2m",
        ]
        .map(String::from)
        .to_vec();
    }
    let mut v = Vec::new();
    for size in ["128k", "1m"] {
        for kind in ["i32", "f32", "f64-nopattern", "f64-pattern"] {
            for r in [0, 50, 100] {
                v.push(format!("{kind}-r{r}-{size}"));
            }
        }
    }
    for s in [
        "smooth-f64",
        "noisy-f64",
        "sparse-dense-f64",
        "deltas-i32",
        "text",
    ] {
        v.push(format!("{s}-1m"));
    }
    v.push("nas-is-2m".into());
    v
}

fn parse_size(s: &str) -> Option<usize> {
    usize::try_from(vargr_emu::parse_size(s).ok()?).ok()
}

/// The seed's synthetic buffers (its §4.5.1): `pct` % of the entries are zero, at random
/// places; the rest random numbers (ints below 2^16, floats in [0, 1), doubles below
/// 10^6), or for doubles "with a pattern" the easily predicted 50001.0, 50003.0, …
fn redundant(kind: &str, bytes: usize, pct: u64, seed: u64) -> Option<(ElemKind, Vec<u8>)> {
    let mut rng = Rng::new(seed);
    let zero = move |rng: &mut Rng| rng.below(100) < pct;
    Some(match kind {
        "i32" => {
            let v: Vec<i32> = (0..bytes / 4)
                .map(|_| {
                    if zero(&mut rng) {
                        0
                    } else {
                        rng.below(1 << 16) as i32
                    }
                })
                .collect();
            (ElemKind::I32, testdata::i32_bytes(&v))
        }
        "f32" => {
            let v: Vec<f32> = (0..bytes / 4)
                .map(|_| {
                    if zero(&mut rng) {
                        0.0
                    } else {
                        rng.next_f64() as f32
                    }
                })
                .collect();
            (ElemKind::F32, testdata::f32_bytes(&v))
        }
        "f64-nopattern" | "f64-pattern" => {
            let pattern = kind == "f64-pattern";
            let v: Vec<f64> = (0..bytes / 8)
                .map(|i| {
                    if zero(&mut rng) {
                        0.0
                    } else if pattern {
                        50001.0 + 2.0 * i as f64
                    } else {
                        rng.next_f64() * 1e6
                    }
                })
                .collect();
            (ElemKind::F64, testdata::f64_bytes(&v))
        }
        _ => return None,
    })
}

/// Makes a synthetic set from its name: `KIND-rPCT-SIZE` (the seed's grid) or
/// `STANDARD-SIZE` (a set of [`testdata::standard_sets`]).
fn synthetic(name: &str) -> Result<(ElemKind, Vec<u8>)> {
    let unknown = || {
        anyhow!(
            "unknown synthetic data set {name:?} (expected KIND-rPCT-SIZE, KIND one of i32, \
             f32, f64-pattern, f64-nopattern, or a testdata set name, then -SIZE like 128k)"
        )
    };
    let (base, size) = name.rsplit_once('-').ok_or_else(unknown)?;
    let bytes = parse_size(size).ok_or_else(unknown)?;
    if base == "nas-is" {
        return Ok((
            ElemKind::I32,
            testdata::i32_bytes(&nas_is_keys(bytes / 4, 314_159_265)),
        ));
    }
    if let Some((kind, r)) = base.rsplit_once("-r") {
        if let Ok(pct) = r.parse::<u64>() {
            if pct <= 100 {
                // One seed per set, so that the 50 % sets are not prefixes of each other.
                let seed = 1 + pct + bytes as u64;
                if let Some(v) = redundant(kind, bytes, pct, seed) {
                    return Ok(v);
                }
            }
        }
    }
    testdata::standard_sets(bytes)
        .into_iter()
        .find(|s| s.name == base)
        .map(|s| (s.elem, s.bytes))
        .ok_or_else(unknown)
}

/// NAS IS's key exchange, as one rank sends it: keys drawn like IS's (the sum of four
/// uniform numbers, so bell-shaped over `0..2^19`), grouped into 16 buckets of equal key
/// ranges, each bucket in generation order. Bucket `b` is the message to the rank that
/// sorts that range; the middle buckets are large, the tails small. Like the seed's IS
/// traffic, byte-oriented LZ codecs find almost nothing in such keys (random low bytes),
/// while the unused high bits are there for a typed codec.
fn nas_is_keys(n: usize, seed: u64) -> Vec<i32> {
    let mut rng = Rng::new(seed);
    let keys: Vec<i32> = (0..n)
        .map(|_| {
            let sum: f64 = (0..4).map(|_| rng.next_f64()).sum();
            ((sum / 4.0) * f64::from(NAS_IS_MAX_KEY)) as i32
        })
        .collect();
    let mut buckets = vec![Vec::new(); NAS_IS_BUCKETS];
    for k in keys {
        buckets[nas_is_bucket(k)].push(k);
    }
    buckets.concat()
}

/// IS's largest key (class A: 2^19) and the ranks its keys are spread over.
const NAS_IS_MAX_KEY: i32 = 1 << 19;
const NAS_IS_BUCKETS: usize = 16;

fn nas_is_bucket(key: i32) -> usize {
    (key as usize * NAS_IS_BUCKETS / NAS_IS_MAX_KEY as usize).min(NAS_IS_BUCKETS - 1)
}

/// Sets sent as one exchange per repetition (all their messages back to back).
fn is_exchange(name: &str) -> bool {
    name.starts_with("nas-is-")
}

/// The messages a set is cut into: equal pieces of `message` bytes, or for an exchange
/// one message per bucket (empty buckets send nothing).
fn messages(
    name: &str,
    bytes: &[u8],
    message: usize,
    elem: ElemKind,
) -> Vec<std::ops::Range<usize>> {
    if !is_exchange(name) {
        return cut(bytes.len(), message, elem.size());
    }
    let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
    let mut last = None;
    for (i, k) in bytes.chunks_exact(4).enumerate() {
        let b = nas_is_bucket(i32::from_le_bytes(k.try_into().expect("4 bytes")));
        if last == Some(b) {
            ranges.last_mut().expect("a bucket is open").end += 4;
        } else {
            ranges.push(i * 4..i * 4 + 4);
            last = Some(b);
        }
    }
    ranges
}

fn synthetic_source(name: &str) -> String {
    if is_exchange(name) {
        return "synthetic: NAS IS-like key exchange (16 buckets of bell-shaped 19-bit keys, \
                one message each, sent back to back per repetition)"
            .into();
    }
    let seed_grid = name
        .rsplit_once('-')
        .and_then(|(base, _)| base.rsplit_once("-r"))
        .is_some_and(|(_, r)| r.parse::<u64>().is_ok());
    if seed_grid {
        "synthetic: the seed's redundancy grid (zeros at random places)".into()
    } else {
        "synthetic: vargr_codec::testdata::standard_sets".into()
    }
}

/// The bytes of a set, at most `limit`, cut to whole elements.
fn load(
    name: &str,
    file: Option<&Path>,
    elem: Option<ElemKind>,
    limit: Option<usize>,
) -> Result<(ElemKind, Vec<u8>)> {
    let (elem, mut bytes) = match file {
        Some(f) => {
            let elem = elem.context("a data file needs its element type")?;
            let mut data = Vec::new();
            std::fs::File::open(f)
                .with_context(|| format!("opening {}", f.display()))?
                .take(limit.unwrap_or(usize::MAX) as u64)
                .read_to_end(&mut data)
                .with_context(|| format!("reading {}", f.display()))?;
            (elem, data)
        }
        None => synthetic(name)?,
    };
    bytes.truncate(limit.unwrap_or(usize::MAX));
    bytes.truncate(bytes.len() - bytes.len() % elem.size());
    if bytes.is_empty() {
        bail!("data set {name}: no whole {elem} element");
    }
    Ok((elem, bytes))
}

/// Byte ranges of the messages a set of `len` bytes is cut into: `message` bytes each
/// (rounded down to whole elements), the whole set if it is smaller; a short tail is
/// dropped so that all messages of a set have one size.
fn cut(len: usize, message: usize, elem_size: usize) -> Vec<std::ops::Range<usize>> {
    let m = (message - message % elem_size).max(elem_size).min(len);
    (0..len / m).map(|i| i * m..(i + 1) * m).collect()
}

/// Real data sets from the fetch script's manifest, running the script if needed.
/// `Err` says why there are none.
fn real_sets(dir: &Path, fetch: bool) -> std::result::Result<Vec<SetSpec>, String> {
    let (manifest, text) = crate::tree::fetched_manifest(
        dir,
        Path::new("scripts/fetch-codec-data.sh"),
        fetch,
        "real data",
    )?;
    let mut sets = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let f: Vec<&str> = line.split('\t').collect();
        let bad = |why: &str| format!("{} line {}: {why}", manifest.display(), i + 1);
        if f.len() < 5 {
            return Err(bad("expected name, dtype, file, bytes, source"));
        }
        let elem: ElemKind = f[1].parse().map_err(|e| bad(&format!("dtype: {e}")))?;
        let file = dir.join(f[2]);
        if !file.is_file() {
            return Err(bad(&format!("{} is missing", file.display())));
        }
        sets.push(SetSpec {
            name: f[0].to_string(),
            elem,
            file: Some(file),
            source: f[4].to_string(),
        });
    }
    if sets.is_empty() {
        return Err(format!("{} lists no data set", manifest.display()));
    }
    Ok(sets)
}

/// The largest ELF file in /usr/bin: the bulk file when the fetch script did not run.
fn largest_elf() -> Option<PathBuf> {
    let mut best: Option<(u64, PathBuf)> = None;
    for e in std::fs::read_dir("/usr/bin").ok()?.flatten() {
        let Ok(md) = e.metadata() else { continue };
        if !md.is_file() || best.as_ref().is_some_and(|(s, _)| *s >= md.len()) {
            continue;
        }
        let mut magic = [0u8; 4];
        let elf = std::fs::File::open(e.path())
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok()
            && magic == *b"\x7fELF";
        if elf {
            best = Some((md.len(), e.path()));
        }
    }
    best.map(|(_, p)| p)
}

// ---------------------------------------------------------------------------------------
// The rank side

enum Side {
    /// Rank 0: microseconds per message (bulk: one figure for the whole transfer), and
    /// per message sent uncompressed (`--pair-raw`).
    Sender(Vec<f64>, Vec<f64>),
    /// Rank 1: the messages kept for checking, by index.
    Receiver(Vec<(usize, Bytes)>),
}

fn typed<T, const N: usize>(bytes: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|c| from(c.try_into().expect("chunks of N bytes")))
        .collect()
}

/// The exchange itself, on typed slices so that the link learns the element type. One
/// timed unit is a message and its ack, or with `--batch` every message of the set sent
/// back to back and one ack.
fn exchange<T: Elem>(
    c: &Comm,
    data: &[T],
    msgs: &[std::ops::Range<usize>],
    a: &CodecRankArgs,
) -> vargr_coll::Result<Side> {
    let size = std::mem::size_of::<T>();
    let msg = |i: usize| {
        let r = &msgs[i % msgs.len()];
        &data[r.start / size..r.end / size]
    };
    let pairs = if a.pair_raw { 2 } else { 1 };
    let units = (a.warmup + a.reps * pairs) as usize;
    let warmup = a.warmup as usize;
    // Timed units alternate codec and raw, the codec first.
    let raw = |u: usize| a.pair_raw && u >= warmup && (u - warmup) % 2 == 1;
    // Message indices of unit `u`.
    let unit = |u: usize| {
        if a.batch {
            0..msgs.len()
        } else {
            u..u + 1
        }
    };
    c.barrier()?;
    if c.rank() == 0 {
        let marker = vargr_trace::collector(WINDOW);
        let raw_marker = vargr_trace::collector(WINDOW_RAW);
        let mut ack = [0u8; 1];
        let (mut times, mut raw_times) = (Vec::with_capacity(units), Vec::new());
        let (mut tick0, mut sent, mut sent_raw) = (vargr_trace::now(), 0usize, 0usize);
        for u in 0..units {
            if u == warmup {
                tick0 = vargr_trace::now();
            }
            let t = Instant::now();
            for i in unit(u) {
                if raw(u) {
                    c.send_uncompressed(1, TAG_DATA, msg(i))?;
                    sent_raw += std::mem::size_of_val(msg(i));
                } else {
                    c.send(1, TAG_DATA, msg(i))?;
                    if u >= warmup {
                        sent += std::mem::size_of_val(msg(i));
                    }
                }
            }
            c.recv(1, TAG_ACK, &mut ack)?;
            let us = t.elapsed().as_secs_f64() * 1e6;
            if raw(u) {
                raw_times.push(us);
            } else {
                times.push(us);
            }
        }
        // The window the driver counts wire bytes in, and what of it crossed raw.
        let end = vargr_trace::now();
        for (collector, bytes) in [(marker, sent), (raw_marker, sent_raw)] {
            vargr_trace::record(&Record {
                start: tick0,
                end,
                seq: units as u32,
                bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
                collector,
                op: EventOp::User as u8,
                status: 0,
                peer: NO_PEER,
            });
        }
        Ok(Side::Sender(times, raw_times))
    } else {
        let mut kept = Vec::new();
        for u in 0..units {
            for i in unit(u) {
                let got = c.recv_bytes(0, TAG_DATA)?;
                // Checked after the run, so that checking adds to no message's time.
                if u < warmup.max(1) || (raw(u) && u == warmup + 1) {
                    kept.push((i, got));
                }
            }
            c.send(0, TAG_ACK, &[1u8])?;
        }
        Ok(Side::Receiver(kept))
    }
}

/// `vargr-bench codec-bench-rank`: one data set from rank 0 to rank 1; rank 0 prints the
/// times as JSON, rank 1 checks that what arrived is what was sent.
pub fn rank(a: CodecRankArgs) -> Result<()> {
    let elem = match &a.dtype {
        Some(d) => Some(
            d.parse::<ElemKind>()
                .map_err(|e| anyhow!("--dtype {d:?}: {e}"))?,
        ),
        None => None,
    };
    let (elem, bytes) = load(&a.set, a.file.as_deref(), elem, a.limit)?;
    let msgs = messages(&a.set, &bytes, a.message, elem);
    let job = vargr_config::join_job()?;
    let sides = job.run(|c| {
        macro_rules! go {
            ($t:ty) => {
                exchange::<$t>(&c, &typed(&bytes, <$t>::from_le_bytes), &msgs, &a)
            };
        }
        match elem {
            ElemKind::U8 => exchange::<u8>(&c, &bytes, &msgs, &a),
            ElemKind::I8 => go!(i8),
            ElemKind::U16 => go!(u16),
            ElemKind::I16 => go!(i16),
            ElemKind::U32 => go!(u32),
            ElemKind::I32 => go!(i32),
            ElemKind::U64 => go!(u64),
            ElemKind::I64 => go!(i64),
            ElemKind::F32 => go!(f32),
            ElemKind::F64 => go!(f64),
        }
    })?;
    job.finish();
    for side in sides {
        match side {
            Side::Sender(times_us, raw_us) => {
                println!("{}", serde_json::to_string(&RankOut { times_us, raw_us })?);
            }
            Side::Receiver(kept) => {
                for (i, got) in kept {
                    let want = &bytes[msgs[i % msgs.len()].clone()];
                    if got[..] != want[..] {
                        bail!(
                            "{}: message {i} arrived changed ({} bytes, {} expected)",
                            a.set,
                            got.len(),
                            want.len()
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The driver

/// A scratch directory of this process.
fn scratch_dir(what: &str) -> Result<PathBuf> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "vargr-bench-codec-{}-{what}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}

/// Bytes rank 0's process sent through the codec in the marked window and the bytes its
/// codec stage put on the link for them (frame headers and the units sent raw
/// excluded), from a job's trace files.
fn window_bytes(dir: &Path) -> Result<Option<(u64, u64)>> {
    let files = TraceFile::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for f in &files {
        let id = |name: &str| f.collectors.iter().position(|c| c == name);
        let (Some(marker), Some(out)) = (id(WINDOW), id(CODEC_OUT)) else {
            continue;
        };
        let records = || f.threads.iter().flat_map(|t| t.records.iter());
        let Some(w) = records().find(|r| usize::from(r.collector) == marker) else {
            continue;
        };
        let raw = id(WINDOW_RAW)
            .and_then(|raw| records().find(|r| usize::from(r.collector) == raw))
            .map_or(0, |r| u64::from(r.bytes));
        let wire: u64 = records()
            // Within the window rank 0's process sends nothing but the data frames (the
            // acks leave from rank 1's).
            .filter(|r| usize::from(r.collector) == out && r.end >= w.start && r.end <= w.end)
            .map(|r| u64::from(r.bytes).saturating_sub(FRAME_HEADER))
            .sum();
        return Ok(Some((u64::from(w.bytes), wire.saturating_sub(raw))));
    }
    Ok(None)
}

/// Runs `cmd` and its children on one CPU (the first this process may use). A message
/// and its ack wake three or four threads in turn; on this two-vCPU machine a wake-up
/// across CPUs costs about 50 µs and one on the same CPU almost nothing, and where a
/// job's threads land is decided when it starts. Unshaped, the same raw sends of 43 KB
/// took 15 µs in some jobs and 65-100 µs in others (on one CPU, 15-16 µs in every job);
/// at 1 Gbit/s two runs of the same build differed by three data sets in the count
/// within 5 % of the best codec (on one CPU, 34 and 33 of 38).
fn one_cpu(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: a zeroed cpu_set_t is a valid empty set, and sched_getaffinity only
    // writes into the set it is given.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return;
    }
    let Some(cpu) = (0..libc::CPU_SETSIZE as usize).find(|&c| unsafe { libc::CPU_ISSET(c, &set) })
    else {
        return;
    };
    // SAFETY: the closure runs in the child between fork and exec and only calls
    // sched_setaffinity, which is async-signal-safe, on a set built on its stack.
    unsafe {
        cmd.pre_exec(move || {
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut one);
            if libc::sched_setaffinity(0, size, &one) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

struct Measured {
    /// The warm-up's units first (`warmup` of them), then the timed ones.
    times_us: Vec<f64>,
    warmup: usize,
    /// Message jobs: the units sent uncompressed between the timed ones.
    raw_us: Vec<f64>,
    ratio: Option<f64>,
}

/// Common settings of one benchmark run.
struct Plan {
    /// Starts the jobs and the relay.
    vargr: PathBuf,
    /// Runs the ranks (`codec-bench-rank`).
    bench: PathBuf,
    message: usize,
    set_limit: usize,
    warmup: u32,
    reps: u32,
    timeout: Duration,
}

impl Plan {
    /// Bytes of a set used: an exchange is used whole (it is one iteration).
    fn limit_for(&self, set: &str) -> usize {
        if is_exchange(set) {
            usize::MAX
        } else {
            self.set_limit
        }
    }
}

/// Timed units of a shaped link's message job per [`Plan::reps`]: more for small units
/// (up to 8× for 128 KiB and less), whose times vary more from one to the next. With
/// 15 of 48 KB at 1 Gbit/s, Rice came out 1.11× faster than raw; with 150 it was 0.85×
/// in two jobs, as the model predicts.
fn reps_scale(unit_bytes: usize) -> u32 {
    ((1usize << 20) / unit_bytes.max(1)).clamp(1, 8) as u32
}

/// One job: `set` over `link` with codec `mode`, traced for the ratio; a message job
/// (`bulk` none) sends units of `unit_bytes`.
fn measure(
    plan: &Plan,
    link: &Link,
    set: &SetSpec,
    mode: &str,
    bulk: Option<usize>,
    unit_bytes: usize,
) -> Result<Measured> {
    let trace = scratch_dir("trace")?;
    let codec = match mode {
        "none" => "off".to_string(),
        "adaptive" => "adaptive".to_string(),
        c => format!("fixed:{c}"),
    };
    let mut cmd = Command::new(&plan.vargr);
    cmd.args(["run", "-n", "2", "--sites", "2", "--codec", &codec])
        .arg("--trace")
        .arg(&trace);
    if let Some(w) = &link.wan {
        cmd.args(["--wan", w]);
    }
    if bulk.is_none() {
        one_cpu(&mut cmd);
    }
    cmd.arg("--")
        .arg(&plan.bench)
        .args(["codec-bench-rank", "--set", &set.name]);
    if let Some(f) = &set.file {
        cmd.arg("--file").arg(f).args(["--dtype", set.elem.name()]);
    }
    let limit = bulk.unwrap_or(plan.limit_for(&set.name));
    let (warmup, reps) = match (bulk, &link.wan) {
        (Some(_), _) => (0, 1),
        // Unshaped messages take tens to hundreds of µs: many more of them, so that a
        // few slow ones do not move the median.
        (None, None) => (plan.warmup * 16, plan.reps * 16),
        (None, Some(_)) => (plan.warmup, plan.reps * reps_scale(unit_bytes)),
    };
    cmd.args(["--limit", &limit.to_string()])
        .args(["--message", &plan.message.to_string()])
        .args(["--warmup", &warmup.to_string()])
        .args(["--reps", &reps.to_string()]);
    if bulk.is_some() || is_exchange(&set.name) {
        cmd.arg("--batch");
    }
    if bulk.is_none() {
        cmd.arg("--pair-raw");
    }
    // Room for every record of the run in the trace rings.
    cmd.env("VARGR_TRACE_RING", "65536");
    let what = format!(
        "the {} job ({} over {}, codec {mode})",
        if bulk.is_some() { "bulk" } else { "message" },
        set.name,
        link.name
    );
    let out = crate::tree::output_within(cmd, plan.timeout, &what);
    let result = out.and_then(|out| {
        if !out.status.success() {
            bail!(
                "{what} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.starts_with('{'))
            .with_context(|| format!("{what}: rank 0 printed no result: {text}"))?;
        let r: RankOut =
            serde_json::from_str(line).with_context(|| format!("{what}: parsing {line}"))?;
        let ratio = window_bytes(&trace)?
            .filter(|&(_, wire)| wire > 0)
            .map(|(sent, wire)| sent as f64 / wire as f64);
        Ok(Measured {
            times_us: r.times_us,
            warmup: warmup as usize,
            raw_us: r.raw_us,
            ratio,
        })
    });
    let _ = std::fs::remove_dir_all(&trace);
    result
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// The codec modes measured on a data set of element type `elem`: none, the general
/// codecs, the codec made for the type, a second typed one, and the engine.
fn modes_for(set: &str, elem: ElemKind, quick: bool) -> Vec<&'static str> {
    if is_exchange(set) {
        // The seed ran CoMPI with one codec picked by hand (LZO); every hand pick here.
        return if quick {
            vec!["none", "lz4", "rle", "rice", "adaptive"]
        } else {
            vec![
                "none",
                "lz4",
                "rle",
                "huffman",
                "rice",
                "zstd:1",
                "shuffle-lz4",
                "adaptive",
            ]
        };
    }
    let typed = if elem.is_float() {
        "fpc:16"
    } else if elem.size() == 1 {
        "huffman"
    } else {
        "rice"
    };
    // Shuffling bytes by a one-byte element does nothing: RLE instead.
    let second = if elem.size() == 1 {
        "rle"
    } else {
        "shuffle-lz4"
    };
    if quick {
        vec!["none", "lz4", typed, "adaptive"]
    } else {
        vec!["none", "lz4", "zstd:1", typed, second, "adaptive"]
    }
}

/// What a fixed codec makes of the set's messages with their true element type (the
/// stage's rules: whole message, raw when it does not shrink).
fn expected_ratio(
    codec: &str,
    elem: ElemKind,
    bytes: &[u8],
    msgs: &[std::ops::Range<usize>],
) -> Option<f64> {
    let codec: Codec = codec.parse().ok()?;
    if !codec.supports(elem) {
        return Some(1.0);
    }
    let (mut orig, mut wire) = (0usize, 0usize);
    let mut frame = Vec::new();
    for r in msgs {
        frame.clear();
        let h = vargr_codec::encode(codec, elem, &bytes[r.clone()], &mut frame);
        orig += r.len();
        wire += if h.codec == vargr_codec::CodecId::None {
            r.len()
        } else {
            frame.len()
        };
    }
    Some(orig as f64 / wire as f64)
}

fn links(names: &[String]) -> Result<Vec<Link>> {
    names
        .iter()
        .map(|n| {
            let (name, wan) = match n.trim() {
                "100mbit" => ("100mbit-1ms", Some("latency=1ms,bandwidth=100mbit")),
                "1gbit" => ("1gbit-0.1ms", Some("latency=100us,bandwidth=1gbit")),
                "loopback" => ("loopback", None),
                p if p.contains('=') => (p, Some(p)),
                other => bail!(
                    "--links: unknown link {other:?} (100mbit, 1gbit, loopback, or a WAN \
                     profile like latency=20ms,bandwidth=10mbit)"
                ),
            };
            let model = match wan {
                Some(w) => {
                    let p: vargr_emu::WanProfile = w
                        .parse()
                        .with_context(|| format!("--links: WAN profile {w:?}"))?;
                    Some((p.latency.as_secs_f64(), p.bandwidth_bits_per_s))
                }
                None => None,
            };
            Ok(Link {
                name: name.to_string(),
                wan: wan.map(String::from),
                model,
            })
        })
        .collect()
}

pub fn run(a: CodecBenchArgs, programs: &Programs) -> Result<()> {
    let plan = Plan {
        vargr: programs.vargr()?.to_path_buf(),
        bench: programs.bench().to_path_buf(),
        message: a.message.max(8),
        set_limit: if a.quick {
            a.set_limit.min(1 << 20)
        } else {
            a.set_limit
        },
        warmup: a.warmup.unwrap_or(if a.quick { 2 } else { 5 }),
        reps: a.reps.unwrap_or(if a.quick { 4 } else { 15 }).max(1),
        timeout: Duration::from_secs(a.job_timeout),
    };
    let link_names = a.links.clone().unwrap_or_else(|| {
        if a.quick {
            vec!["100mbit".into(), "loopback".into()]
        } else {
            vec!["100mbit".into(), "1gbit".into(), "loopback".into()]
        }
    });
    let links = links(&link_names)?;

    let mut sets = synthetic_specs(synthetic_names(a.quick))?;
    let mut bulk_file: Option<(PathBuf, String)> = None;
    let mut real = Vec::new();
    let real_note = match real_sets(&a.data, !a.no_fetch) {
        Ok(found) => {
            real = found.clone();
            for s in found {
                if s.name == "system-binary" {
                    bulk_file = s.file.clone().map(|f| (f, s.source.clone()));
                }
                let keep = !a.quick || ["eeg", "mri-s1045"].contains(&s.name.as_str());
                if keep {
                    sets.push(s);
                }
            }
            None
        }
        Err(why) => {
            eprintln!("real data skipped: {why}");
            Some(why)
        }
    };
    if let Some(o) = &a.only {
        sets.retain(|s| s.name.contains(o.as_str()));
    }

    // Every job, so that progress can say how far along the run is. Rounds go round
    // all modes of a data set before the next round, so that drift on a shared machine
    // hits every mode alike. No job of its own for `none`: every job sends every other
    // message uncompressed, and those are `none`'s figures.
    // Pairing cancels what moves a job's times as a whole, not what moves its codec
    // work alone: the same fixed codec on 128 KiB at 1 Gbit/s compressed in 130-220 µs
    // from one job to the next, and its speedup went from 1.08 to 1.26. Jobs on fast
    // links take a fraction of a second: five rounds there.
    let rounds_for = |l: &Link| {
        let fast = l
            .model
            .is_none_or(|(_, bw)| bw.is_none_or(|b| b >= 1_000_000_000));
        match (a.rounds, a.quick, fast) {
            (Some(r), ..) => r.max(1),
            (None, true, _) => 1,
            (None, false, true) => 5,
            (None, false, false) => 3,
        }
    };
    let jobs: Vec<(&Link, &SetSpec, u32, &str)> = links
        .iter()
        .flat_map(|l| {
            let rounds = rounds_for(l);
            sets.iter().flat_map(move |s| {
                (0..rounds).flat_map(move |r| {
                    // Each round runs the modes in another order (reproducibly), so that
                    // no mode always follows the same other: a job can leave the machine
                    // slower for the next one (a mere rotation kept adaptive right after
                    // shuffle-lz4 in every round).
                    let mut modes = modes_for(&s.name, s.elem, a.quick);
                    modes.retain(|&m| m != "none");
                    let mut rng = Rng::new(u64::from(r) << 32 ^ name_seed(&s.name));
                    for i in (1..modes.len()).rev() {
                        modes.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
                    }
                    modes.into_iter().map(move |m| (l, s, r, m))
                })
            })
        })
        .collect();
    eprintln!(
        "bench codec: {} data sets, {} links, {} jobs of {} + {} messages",
        sets.len(),
        links.len(),
        jobs.len(),
        plan.warmup,
        plan.reps
    );
    let started = Instant::now();
    let mut loaded: BTreeMap<String, (Vec<u8>, Vec<std::ops::Range<usize>>)> = BTreeMap::new();
    // Per (link, data set, mode), in job order: the record, its timed and warm-up times.
    let mut acc: Vec<(CodecRecord, Vec<f64>, Vec<f64>)> = Vec::new();
    for (k, &(link, set, round, mode)) in jobs.iter().enumerate() {
        if !loaded.contains_key(&set.name) {
            let (_, bytes) = load(
                &set.name,
                set.file.as_deref(),
                Some(set.elem),
                Some(plan.limit_for(&set.name)),
            )?;
            let msgs = messages(&set.name, &bytes, plan.message, set.elem);
            loaded.insert(set.name.clone(), (bytes, msgs));
        }
        let (bytes, msgs) = &loaded[&set.name];
        let unit_bytes = if is_exchange(&set.name) {
            msgs.iter().map(|r| r.len()).sum()
        } else {
            msgs[0].len()
        };
        let mut slot = |mode: &str| match acc
            .iter()
            .position(|(r, ..)| r.link == link.name && r.dataset == set.name && r.codec == mode)
        {
            Some(i) => i,
            None => {
                let mut rec = CodecRecord::new("message", set, unit_bytes, &link.name, mode);
                rec.messages = msgs.len();
                if mode == "none" {
                    // Its units are sent flagged raw, which the codec stage passes as
                    // they are (the codec_links tests hold it to that).
                    rec.ratio = Some(1.0);
                }
                if !matches!(mode, "none" | "adaptive") {
                    rec.expected_ratio = expected_ratio(mode, set.elem, bytes, msgs);
                }
                acc.push((rec, Vec::new(), Vec::new()));
                acc.len() - 1
            }
        };
        let (none, i) = (slot("none"), slot(mode));
        let mut line = String::new();
        match measure(&plan, link, set, mode, None, unit_bytes) {
            Ok(m) => {
                let (rec, timed, first) = &mut acc[i];
                // The job's own warm-up: unshaped jobs have 16 times the plan's (taking
                // the plan's put 75 warm-up messages, the engine's study among them,
                // into the timed median on loopback).
                let w = m.warmup.min(m.times_us.len());
                first.extend_from_slice(&m.times_us[..w]);
                timed.extend_from_slice(&m.times_us[w..]);
                let med = median(&m.times_us[w..]);
                let raw = median(&m.raw_us);
                rec.pairs.push((med, raw));
                // The same bytes every round; keep the first figure.
                rec.ratio = rec.ratio.or(m.ratio);
                line = format!(
                    "{med:.0} µs, raw {raw:.0} µs, ratio {}",
                    m.ratio.map_or("-".into(), |v| format!("{v:.2}"))
                );
                acc[none].1.extend_from_slice(&m.raw_us);
            }
            Err(e) => {
                eprintln!("  {e:#}");
                acc[i].0.note = Some(format!("{e:#}"));
            }
        }
        eprintln!(
            "[{}/{} {:.0}s] {} {} {}{}: {line}",
            k + 1,
            jobs.len(),
            started.elapsed().as_secs_f64(),
            link.name,
            set.name,
            mode,
            if rounds_for(link) > 1 {
                format!(" (round {})", round + 1)
            } else {
                String::new()
            },
        );
    }
    let mut records: Vec<CodecRecord> = acc
        .into_iter()
        .map(|(mut rec, timed, first)| {
            let (timed, first) = (sorted(&timed), sorted(&first));
            if !timed.is_empty() {
                rec.median_us = Some(crate::tree::percentile(&timed, 50.0));
                rec.p90_us = Some(crate::tree::percentile(&timed, 90.0));
            }
            if !first.is_empty() {
                rec.first_median_us = Some(crate::tree::percentile(&first, 50.0));
            }
            let link = links.iter().find(|l| l.name == rec.link);
            rec.link_us =
                link.and_then(|l| l.ideal_us(rec.bytes as f64 / rec.ratio.unwrap_or(1.0)));
            rec
        })
        .collect();
    speedups(&mut records);

    if !a.skip_speed {
        eprintln!("codec speeds and decision cost (in process) ...");
        let mut speed_sets = synthetic_specs(speed_set_names(a.quick))?;
        speed_sets.extend(real.iter().filter(|s| !a.quick || s.name == "eeg").cloned());
        records.append(&mut speeds(&speed_sets, a.quick)?);
        records.append(&mut decision_cost(a.quick));
    }

    let bulk_mb = a.bulk_mb.unwrap_or(if a.quick { 8 } else { 64 });
    if bulk_mb > 0 {
        match bulk(&plan, bulk_file, bulk_mb) {
            Ok(mut r) => records.append(&mut r),
            Err(e) => eprintln!("bulk transfer skipped: {e:#}"),
        }
    }

    print_tables(&records, &links);
    if let Some(why) = real_note {
        println!("\nreal data skipped: {why}");
    }
    crate::tree::write_records(a.json.as_deref(), "codec.json", &records)?;
    Ok(())
}

/// A seed from a data set's name (FNV-1a), for reproducible job orders.
fn name_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The specs of synthetic sets, by name.
fn synthetic_specs(names: Vec<String>) -> Result<Vec<SetSpec>> {
    names
        .into_iter()
        .map(|name| {
            let (elem, _) = synthetic(&name)?;
            Ok(SetSpec {
                source: synthetic_source(&name),
                name,
                elem,
                file: None,
            })
        })
        .collect()
}

/// Synthetic sets the codec speeds are measured on.
fn speed_set_names(quick: bool) -> Vec<String> {
    let names: &[&str] = if quick {
        &["smooth-f64-1m", "text-1m"]
    } else {
        &[
            "smooth-f64-1m",
            "noisy-f64-1m",
            "smooth-f32-1m",
            "deltas-i32-1m",
            "text-1m",
            "random-1m",
        ]
    };
    names.iter().map(|s| s.to_string()).collect()
}

/// Every codec of the catalog, and the engine's zstd:6, alone on each set (at most
/// 1 MiB of it): ratio and speed in both directions, best of repeated runs.
fn speeds(sets: &[SetSpec], quick: bool) -> Result<Vec<CodecRecord>> {
    let budget = if quick {
        Duration::from_millis(10)
    } else {
        vargr_codec::DEFAULT_BUDGET
    };
    let mut codecs = Codec::CATALOG.to_vec();
    codecs.push(Codec::Zstd { level: 6 });
    codecs.retain(|&c| c != Codec::None);
    let mut out = Vec::new();
    for set in sets {
        let (elem, bytes) = load(
            &set.name,
            set.file.as_deref(),
            Some(set.elem),
            Some(1 << 20),
        )?;
        for &codec in codecs.iter().filter(|c| c.supports(elem)) {
            let m = vargr_codec::measure(codec, &bytes, elem, budget)
                .with_context(|| format!("measuring {codec} on {}", set.name))?;
            if !m.verified {
                bail!("{codec} did not give {} back", set.name);
            }
            let mut rec = CodecRecord::new("speed", set, bytes.len(), "none", &codec.to_string());
            rec.ratio = Some(m.ratio);
            rec.compress_mb_s = Some(m.compress_mb_s);
            rec.decompress_mb_s = Some(m.decompress_mb_s);
            out.push(rec);
        }
    }
    Ok(out)
}

/// What [`vargr_codec::Engine::decide`] costs once warm, default settings (periodic
/// samples included, amortised), on a 100 Mbit/s link: a message that goes raw and one
/// that is compressed.
fn decision_cost(quick: bool) -> Vec<CodecRecord> {
    use std::hint::black_box;
    use vargr_codec::{Engine, EngineConfig, LinkKey, LinkModel};
    let cases = [
        (
            "random-bytes-64k (raw)",
            ElemKind::BYTES,
            testdata::random_bytes(64 << 10, 1),
        ),
        (
            "smooth-f64-64k (compressed)",
            ElemKind::F64,
            testdata::f64_bytes(&testdata::smooth_field_f64(8192, 0.0, 2)),
        ),
    ];
    let n: u32 = if quick { 20_000 } else { 500_000 };
    let mut out = Vec::new();
    for (name, elem, data) in &cases {
        let mut engine = Engine::new(EngineConfig::default()).expect("the default config is valid");
        let link = LinkKey(1);
        engine.set_link_model(link, LinkModel::new(1e-3, 12.5e6));
        for _ in 0..1000 {
            engine.decide(link, *elem, data);
        }
        let start = Instant::now();
        for _ in 0..n {
            black_box(engine.decide(link, *elem, black_box(data)));
        }
        let set = SetSpec {
            name: name.to_string(),
            elem: *elem,
            file: None,
            source: "synthetic: vargr_codec::testdata".into(),
        };
        let mut rec = CodecRecord::new("decision", &set, data.len(), "100mbit-1ms", "adaptive");
        rec.decide_ns = Some(start.elapsed().as_secs_f64() / f64::from(n) * 1e9);
        rec.messages = n as usize;
        out.push(rec);
    }
    out
}

/// `speedup_vs_none` of every message record: within each job, the median of the
/// messages sent uncompressed over the median of the codec's, and the median of the
/// jobs' ratios. Both sides of a ratio share the job's processes, sockets and CPU, so
/// what moves a job's times as a whole (where its threads landed, the machine's other
/// work) cancels. `none` is 1 by definition. The warm-up's speedup compares with
/// `none`'s overall median.
fn speedups(records: &mut [CodecRecord]) {
    let none: BTreeMap<(String, String), f64> = records
        .iter()
        .filter(|r| r.codec == "none" && r.test == "message")
        .filter_map(|r| Some(((r.link.clone(), r.dataset.clone()), r.median_us?)))
        .collect();
    for r in records.iter_mut().filter(|r| r.test == "message") {
        if r.codec == "none" {
            r.speedup_vs_none = r.median_us.map(|_| 1.0);
            continue;
        }
        let ratios: Vec<f64> = r
            .pairs
            .iter()
            .filter(|&&(med, raw)| med > 0.0 && raw.is_finite())
            .map(|&(med, raw)| raw / med)
            .collect();
        r.speedup_vs_none = (!ratios.is_empty()).then(|| median(&ratios));
        let base = none.get(&(r.link.clone(), r.dataset.clone()));
        r.first_speedup_vs_none = r.first_median_us.zip(base).map(|(m, b)| b / m);
    }
}

// ---------------------------------------------------------------------------------------
// Bulk transfer

/// The bulk file, capped at `mb` MiB: a copy in a scratch directory when the file is
/// longer (zstd reads the file itself).
fn bulk_input(
    found: Option<(PathBuf, String)>,
    mb: usize,
) -> Result<(PathBuf, String, Option<PathBuf>)> {
    let (path, source) = match found {
        Some(f) => f,
        None => {
            let p = largest_elf()
                .context("no real data and no ELF file in /usr/bin for the bulk test")?;
            let s = format!("{} (largest ELF in /usr/bin)", p.display());
            (p, s)
        }
    };
    let cap = (mb as u64) << 20;
    let len = std::fs::metadata(&path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    if len <= cap {
        return Ok((path, source, None));
    }
    let dir = scratch_dir("bulk")?;
    let copy = dir.join("bulk.u8");
    let mut data = Vec::new();
    std::fs::File::open(&path)
        .with_context(|| format!("opening {}", path.display()))?
        .take(cap)
        .read_to_end(&mut data)
        .with_context(|| format!("reading {}", path.display()))?;
    std::fs::write(&copy, &data).with_context(|| format!("writing {}", copy.display()))?;
    Ok((copy, format!("{source}, first {mb} MiB"), Some(dir)))
}

fn bulk(plan: &Plan, found: Option<(PathBuf, String)>, mb: usize) -> Result<Vec<CodecRecord>> {
    let (file, source, scratch) = bulk_input(found, mb)?;
    let r = bulk_runs(plan, "system-binary", &file, &source);
    if let Some(d) = scratch {
        let _ = std::fs::remove_dir_all(d);
    }
    r
}

fn bulk_runs(plan: &Plan, name: &str, file: &Path, source: &str) -> Result<Vec<CodecRecord>> {
    let len = std::fs::metadata(file)
        .with_context(|| format!("reading {}", file.display()))?
        .len() as usize;
    let set = SetSpec {
        name: name.to_string(),
        elem: ElemKind::BYTES,
        file: Some(file.to_path_buf()),
        source: source.to_string(),
    };
    let link = links(&["100mbit".into()])?.remove(0);
    let mut out = Vec::new();
    for mode in ["none", "adaptive"] {
        eprintln!("bulk: {} MiB through vargr, codec {mode} ...", len >> 20);
        let mut rec = CodecRecord::new("bulk", &set, len, &link.name, mode);
        rec.tool = Some(format!(
            "vargr run --codec {}",
            if mode == "none" { "off" } else { mode }
        ));
        rec.messages = cut(len, plan.message, 1).len();
        match measure(plan, &link, &set, mode, Some(len), len) {
            Ok(m) => {
                rec.seconds = m.times_us.first().map(|us| us / 1e6);
                rec.ratio = m.ratio;
            }
            Err(e) => rec.note = Some(format!("{e:#}")),
        }
        out.push(rec);
    }
    let relay = Relay::start(&plan.vargr)?;
    for (tool, codec) in [
        ("raw bytes via vargr emu", "none"),
        ("zstd --adapt via vargr emu", "zstd --adapt"),
    ] {
        eprintln!("bulk: {} MiB, {tool} ...", len >> 20);
        let mut rec = CodecRecord::new("bulk", &set, len, &link.name, codec);
        rec.tool = Some(tool.into());
        rec.messages = 1;
        match relay.transfer(file, codec != "none") {
            Ok((secs, wire)) => {
                rec.seconds = Some(secs);
                rec.ratio = Some(len as f64 / wire.max(1) as f64);
            }
            Err(e) => {
                eprintln!("  {e:#}");
                rec.note = Some(format!("{e:#}"));
            }
        }
        out.push(rec);
    }
    drop(relay);
    Ok(out)
}

/// `vargr emu` in front of a byte counter of this process: the same emulated link as
/// the job's, for programs that only speak TCP.
struct Relay {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    sink: TcpListener,
}

impl Relay {
    fn start(exe: &Path) -> Result<Relay> {
        let sink = TcpListener::bind("127.0.0.1:0").context("binding the bulk receiver")?;
        let target = sink.local_addr()?;
        // A free port for the relay (it prints no port it picked itself).
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port for vargr emu")?;
        // The profile of `links(["100mbit"])`, the one the vargr jobs of the test cross.
        let (lat, bw) = ("1ms", "100mbit");
        let mut child = Command::new(exe)
            .args(["emu", "--listen", &addr.to_string()])
            .args(["--connect", &target.to_string()])
            .args(["--latency", lat, "--bandwidth", bw])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} emu", exe.display()))?;
        // It says so on stderr once it listens.
        let mut err = BufReader::new(child.stderr.take().context("vargr emu stderr")?);
        let mut line = String::new();
        loop {
            line.clear();
            if err.read_line(&mut line)? == 0 {
                let _ = child.wait();
                bail!("vargr emu --listen {addr} ended before listening");
            }
            if line.contains("Ctrl-C stops") {
                break;
            }
        }
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        Ok(Relay { child, addr, sink })
    }

    /// Sends `file` through the relay (raw, or as `zstd --adapt -c FILE` writes it);
    /// returns seconds until the receiver saw the end and the bytes that crossed,
    /// after checking that they give back the file.
    fn transfer(&self, file: &Path, zstd: bool) -> Result<(f64, usize)> {
        let sink = self.sink.try_clone()?;
        let receiver = std::thread::spawn(move || -> std::io::Result<(Vec<u8>, Instant)> {
            let (mut s, _) = sink.accept()?;
            let mut got = Vec::new();
            s.read_to_end(&mut got)?;
            Ok((got, Instant::now()))
        });
        let original =
            std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        let stream = TcpStream::connect(self.addr)
            .with_context(|| format!("connecting to vargr emu at {}", self.addr))?;
        let t0 = Instant::now();
        if zstd {
            // zstd writes straight into the connection; the end of its output closes it.
            let mut z = Command::new("zstd")
                .args(["--adapt", "-c", "-q"])
                .arg(file)
                .stdout(Stdio::from(OwnedFd::from(stream)))
                .spawn()
                .context("starting zstd --adapt (is zstd installed?)")?;
            let st = z.wait().context("waiting for zstd")?;
            if !st.success() {
                bail!("zstd --adapt -c {} failed: {st}", file.display());
            }
        } else {
            let mut s = stream;
            s.write_all(&original).context("writing to vargr emu")?;
            s.shutdown(Shutdown::Write)?;
        }
        let (got, end) = receiver
            .join()
            .map_err(|_| anyhow!("the bulk receiver panicked"))?
            .context("receiving through vargr emu")?;
        let secs = end.duration_since(t0).as_secs_f64();
        let back = if zstd { unzstd(&got)? } else { got.clone() };
        if back != original {
            bail!(
                "{} came through vargr emu changed ({} bytes back, {} sent)",
                file.display(),
                back.len(),
                original.len()
            );
        }
        Ok((secs, got.len()))
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child, not yet reaped; SIGINT lets it end cleanly.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let _ = self.child.wait();
    }
}

/// Decompresses a zstd stream with the zstd command (the same tool that made it).
fn unzstd(data: &[u8]) -> Result<Vec<u8>> {
    let mut z = Command::new("zstd")
        .args(["-d", "-c", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting zstd -d")?;
    let mut stdin = z.stdin.take().context("zstd -d stdin")?;
    let input = data.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let out = z.wait_with_output().context("running zstd -d")?;
    feeder
        .join()
        .map_err(|_| anyhow!("feeding zstd -d panicked"))?
        .context("writing to zstd -d")?;
    if !out.status.success() {
        bail!("zstd -d failed on what crossed the relay: {}", out.status);
    }
    Ok(out.stdout)
}

// ---------------------------------------------------------------------------------------
// Output

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// The class a data set's codec columns belong to (its modes differ by type).
fn class_of(r: &CodecRecord) -> &'static str {
    if is_exchange(&r.dataset) {
        return "exchange (time per iteration)";
    }
    match r.dtype.as_str() {
        "f32" | "f64" => "floats",
        "u8" | "i8" => "bytes",
        _ => "integers",
    }
}

fn print_tables(records: &[CodecRecord], links: &[Link]) {
    let msgs: Vec<&CodecRecord> = records.iter().filter(|r| r.test == "message").collect();
    println!(
        "\ntime per message: speedup over no compression (ratio on the wire); 'link µs' is \
         what the emulated link alone should take uncompressed; 'warm-up' is adaptive's \
         speedup over its first messages"
    );
    for link in links {
        for class in [
            "floats",
            "integers",
            "bytes",
            "exchange (time per iteration)",
        ] {
            let mut sets: Vec<(&str, &str, usize)> = Vec::new();
            for r in msgs
                .iter()
                .filter(|r| r.link == link.name && class_of(r) == class)
            {
                if !sets.iter().any(|s| s.0 == r.dataset) {
                    sets.push((&r.dataset, &r.dtype, r.bytes));
                }
            }
            if sets.is_empty() {
                continue;
            }
            let get = |set: &str, codec: &str| {
                msgs.iter()
                    .find(|r| r.link == link.name && r.dataset == set && r.codec == codec)
                    .copied()
            };
            // Columns: the modes of the class's first set (one list per class).
            let modes: Vec<&str> = msgs
                .iter()
                .filter(|r| r.dataset == sets[0].0 && r.link == link.name && r.codec != "none")
                .map(|r| r.codec.as_str())
                .collect();
            println!("\n{} — {class}", link.name);
            print!(
                "{:<22} {:>5} {:>8} {:>10} {:>8}",
                "dataset", "dtype", "bytes", "none µs", "link µs"
            );
            for m in &modes {
                print!(" {:>14}", m);
            }
            println!(" {:>8} {:>12}", "warm-up", "best fixed");
            for (set, dtype, bytes) in sets {
                let none = get(set, "none");
                print!(
                    "{:<22} {:>5} {:>8} {:>10} {:>8}",
                    set,
                    dtype,
                    bytes,
                    fmt_opt(none.and_then(|r| r.median_us), 0),
                    fmt_opt(none.and_then(|r| r.link_us), 0)
                );
                let mut best: Option<(&str, f64)> = None;
                for &m in &modes {
                    let r = get(set, m);
                    let s = r.and_then(|r| r.speedup_vs_none);
                    let cell = match (s, r.and_then(|r| r.ratio)) {
                        (Some(s), Some(q)) => format!("{s:.2} ({q:.1})"),
                        (Some(s), None) => format!("{s:.2}"),
                        _ => "-".into(),
                    };
                    print!(" {cell:>14}");
                    if let (Some(s), false) = (s, m == "adaptive") {
                        if best.is_none_or(|b| s > b.1) {
                            best = Some((m, s));
                        }
                    }
                }
                let warm = get(set, "adaptive").and_then(|r| r.first_speedup_vs_none);
                println!(
                    " {:>8} {:>12}",
                    fmt_opt(warm, 2),
                    best.map_or("-".into(), |b| if b.1 < 1.0 {
                        "none".to_string()
                    } else {
                        b.0.to_string()
                    })
                );
            }
        }
        summary(&msgs, &link.name);
    }
    print_speeds(records);
    let bulk: Vec<&CodecRecord> = records.iter().filter(|r| r.test == "bulk").collect();
    if let Some(first) = bulk.first() {
        println!(
            "\nbulk transfer: {} ({} MiB, {}) over {}",
            first.dataset,
            first.bytes >> 20,
            first.source,
            first.link
        );
        println!("{:<30} {:>9} {:>7}", "tool", "seconds", "ratio");
        for r in &bulk {
            println!(
                "{:<30} {:>9} {:>7}  {}",
                r.tool.as_deref().unwrap_or("-"),
                fmt_opt(r.seconds, 2),
                fmt_opt(r.ratio, 2),
                r.note.as_deref().unwrap_or("")
            );
        }
    }
}

/// Codec speeds as a table (rows codecs, columns data sets, cells compress/decompress
/// MB/s), the decision cost, and the issue's speed targets.
fn print_speeds(records: &[CodecRecord]) {
    let speed: Vec<&CodecRecord> = records.iter().filter(|r| r.test == "speed").collect();
    if !speed.is_empty() {
        let mut sets: Vec<&str> = Vec::new();
        let mut codecs: Vec<&str> = Vec::new();
        for r in &speed {
            if !sets.contains(&r.dataset.as_str()) {
                sets.push(&r.dataset);
            }
            if !codecs.contains(&r.codec.as_str()) {
                codecs.push(&r.codec);
            }
        }
        println!("\ncodec speeds on this machine, MB/s compress/decompress (ratio)");
        print!("{:<16}", "codec");
        for s in &sets {
            print!(" {:>22}", s);
        }
        println!();
        for c in &codecs {
            print!("{c:<16}");
            for s in &sets {
                let cell = speed
                    .iter()
                    .find(|r| r.codec == *c && r.dataset == *s)
                    .map_or("-".to_string(), |r| {
                        format!(
                            "{}/{} ({})",
                            fmt_opt(r.compress_mb_s, 0),
                            fmt_opt(r.decompress_mb_s, 0),
                            fmt_opt(r.ratio, 2)
                        )
                    });
                print!(" {cell:>22}");
            }
            println!();
        }
        let range = |codec: &str, floats_only: bool, pick: fn(&CodecRecord) -> Option<f64>| {
            let v: Vec<f64> = speed
                .iter()
                .filter(|r| r.codec == codec && (!floats_only || r.dtype == "f64"))
                .filter_map(|r| pick(r))
                .collect();
            let min = v.iter().copied().fold(f64::INFINITY, f64::min);
            let max = v.iter().copied().fold(0.0, f64::max);
            if v.is_empty() {
                "-".to_string()
            } else {
                format!("{min:.0}-{max:.0} MB/s")
            }
        };
        println!(
            "targets: lz4 compress {} (≥ 400); fpc:16 on f64 compress {}, decompress {} (≥ 250)",
            range("lz4", false, |r| r.compress_mb_s),
            range("fpc:16", true, |r| r.compress_mb_s),
            range("fpc:16", true, |r| r.decompress_mb_s),
        );
    }
    for r in records.iter().filter(|r| r.test == "decision") {
        println!(
            "decision cost, warm, default settings: {:.0} ns per message on {} (target ≤ 1000)",
            r.decide_ns.unwrap_or(f64::NAN),
            r.dataset
        );
    }
}

/// The issue's targets for one link: adaptive never below 0.97 of no compression, and
/// within 5 % of the best fixed codec; and fixed codecs that the link did not apply.
fn summary(msgs: &[&CodecRecord], link: &str) {
    let on: Vec<&&CodecRecord> = msgs.iter().filter(|r| r.link == link).collect();
    let (mut worst, mut behind, mut n) = (None::<(&str, f64)>, Vec::new(), 0);
    for r in on.iter().filter(|r| r.codec == "adaptive") {
        let Some(s) = r.speedup_vs_none else { continue };
        n += 1;
        if worst.is_none_or(|w| s < w.1) {
            worst = Some((&r.dataset, s));
        }
        let best = on
            .iter()
            .filter(|f| f.dataset == r.dataset && !matches!(f.codec.as_str(), "adaptive"))
            .filter_map(|f| f.speedup_vs_none)
            .fold(f64::NAN, f64::max);
        if s < 0.95 * best {
            behind.push(format!("{} ({s:.2} vs {best:.2})", r.dataset));
        }
    }
    if let Some((set, s)) = worst {
        println!(
            "{link}: adaptive's lowest speedup {s:.2} ({set}); within 5 % of the best choice on \
             {} of {n} data sets{}{}",
            n - behind.len(),
            if behind.is_empty() {
                ""
            } else {
                "; behind on: "
            },
            behind.join(", ")
        );
    }
    let unapplied: Vec<String> = on
        .iter()
        .filter(
            |r| matches!((r.ratio, r.expected_ratio), (Some(q), Some(e)) if e > 1.2 && q < 1.05),
        )
        .map(|r| format!("{} on {}", r.codec, r.dataset))
        .collect();
    if !unapplied.is_empty() {
        println!(
            "{link}: compressible but sent raw by the link (element type not passed on?): {}",
            unapplied.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_sets_have_their_size_type_and_redundancy() {
        for name in synthetic_names(false) {
            let (elem, bytes) = synthetic(&name).unwrap();
            let want = parse_size(name.rsplit_once('-').unwrap().1).unwrap();
            assert!(bytes.len() <= want && bytes.len() > want / 2, "{name}");
            assert_eq!(bytes.len() % elem.size(), 0, "{name}");
            assert_eq!(
                synthetic(&name).unwrap().1,
                bytes,
                "{name} is not deterministic"
            );
        }
        let zeros = |name: &str| {
            let (elem, b) = synthetic(name).unwrap();
            let n = b.len() / elem.size();
            b.chunks_exact(elem.size())
                .filter(|c| c.iter().all(|&x| x == 0))
                .count() as f64
                / n as f64
        };
        assert_eq!(zeros("f64-pattern-r100-128k"), 1.0);
        assert!((zeros("i32-r50-1m") - 0.5).abs() < 0.02);
        assert!(zeros("f32-r0-128k") < 0.01);
        assert!(synthetic("f64-r50-3q").is_err());
        assert!(synthetic("nonsense-1m").is_err());
    }

    #[test]
    fn the_is_exchange_is_one_message_per_bucket_largest_in_the_middle() {
        let (elem, bytes) = synthetic("nas-is-2m").unwrap();
        assert_eq!((elem, bytes.len()), (ElemKind::I32, 2 << 20));
        let msgs = messages("nas-is-2m", &bytes, 1 << 20, elem);
        assert_eq!(msgs.len(), NAS_IS_BUCKETS);
        assert_eq!(msgs.first().unwrap().start, 0);
        assert_eq!(msgs.last().unwrap().end, bytes.len());
        for (b, r) in msgs.iter().enumerate() {
            for k in bytes[r.clone()].chunks_exact(4) {
                assert_eq!(nas_is_bucket(i32::from_le_bytes(k.try_into().unwrap())), b);
            }
        }
        let len = |b: usize| msgs[b].len();
        assert!(len(7) > 10 * len(0) && len(8) > 10 * len(15), "{msgs:?}");
    }

    #[test]
    fn speedups_pair_each_job_with_its_own_raw_messages() {
        let set = SetSpec {
            name: "s".into(),
            elem: ElemKind::U8,
            file: None,
            source: String::new(),
        };
        let rec = |codec: &str, pairs: &[(f64, f64)]| {
            let mut r = CodecRecord::new("message", &set, 1, "l", codec);
            r.pairs = pairs.to_vec();
            r.median_us = Some(median(&pairs.iter().map(|&(m, _)| m).collect::<Vec<_>>()));
            r
        };
        // The second and third jobs ran at half speed: both sides of their ratios moved.
        let mut rs = vec![
            rec("none", &[]),
            rec("lz4", &[(50.0, 100.0), (100.0, 200.0), (100.0, 200.0)]),
            rec("zstd:1", &[(90.0, 100.0), (300.0, 200.0), (100.0, 100.0)]),
        ];
        rs[0].median_us = Some(150.0);
        rs[1].first_median_us = Some(300.0);
        speedups(&mut rs);
        assert_eq!(rs[0].speedup_vs_none, Some(1.0));
        assert_eq!(rs[1].speedup_vs_none, Some(2.0));
        assert_eq!(rs[2].speedup_vs_none, Some(1.0));
        assert_eq!(rs[1].first_speedup_vs_none, Some(0.5));
        assert_eq!(median(&[1.0, 3.0]), 2.0);
        // A job that failed gave no pair: no speedup rather than a made-up one.
        let mut rs = vec![rec("none", &[]), rec("rle", &[])];
        speedups(&mut rs);
        assert_eq!(rs[1].speedup_vs_none, None);
    }

    #[test]
    fn sets_are_cut_into_equal_whole_element_messages() {
        assert_eq!(cut(100, 1 << 20, 8), vec![0..100]);
        assert_eq!(cut(4 << 20, 1 << 20, 8).len(), 4);
        // A tail shorter than a message is left out; messages hold whole elements.
        assert_eq!(cut(25, 10, 4), vec![0..8, 8..16, 16..24]);
        assert_eq!(cut(3, 1, 2), vec![0..2]);
    }

    #[test]
    fn links_and_modes_parse() {
        let l = links(&["100mbit".into(), "loopback".into(), "latency=5ms".into()]).unwrap();
        assert_eq!(l[0].wan.as_deref(), Some("latency=1ms,bandwidth=100mbit"));
        assert!(l[1].wan.is_none());
        assert_eq!(l[2].name, "latency=5ms");
        assert!(links(&["10gbit".into()]).is_err());
        for elem in [ElemKind::F64, ElemKind::I16, ElemKind::U8] {
            for m in modes_for("", elem, false) {
                if !matches!(m, "none" | "adaptive") {
                    let c: Codec = m.parse().unwrap();
                    assert!(c.supports(elem), "{m} for {elem}");
                }
            }
        }
    }

    #[test]
    fn expected_ratio_follows_the_stage_rules() {
        let zeros = vec![0u8; 64 << 10];
        let noise = testdata::random_bytes(64 << 10, 3);
        let all = cut(zeros.len(), 1 << 20, 8);
        assert!(expected_ratio("lz4", ElemKind::F64, &zeros, &all).unwrap() > 50.0);
        // Incompressible data goes raw: ratio exactly 1.
        assert_eq!(expected_ratio("lz4", ElemKind::U8, &noise, &all), Some(1.0));
    }
}
