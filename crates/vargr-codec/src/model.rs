//! The cost model that tells whether compressing a message pays on a given link.
//!
//! Compression only helps when the time it saves on the wire exceeds the time spent
//! compressing and decompressing. The seed (CoMPI's runtime adaptive strategy) writes this
//! as Eq. 4.4, `Tc + Td < (size − csize) / BW`; here the wire time comes from a per-link
//! Hockney model, so the condition reads `Tc + Td < T(size) − T(csize)`, which is Eq. 4.4
//! whenever both sizes fall in the same bucket.
//!
//! - [`LinkModel`]: latency α plus a per-byte cost β for each power-of-two size bucket, like
//!   the seed's Table 4.1, seeded from a table or a ping-pong calibration and learned online
//!   from the link's own transfers.
//! - [`CodecStats`]: compression speed, decompression speed and ratio of one codec on one
//!   [`DataClass`], learned with exponential moving averages; before any decompression
//!   time is known, `Td = k · Tc` with `k` from the seed's Table 4.3
//!   ([`decompress_factor_prior`]).
//! - [`predict`] combines both into a [`Prediction`] (Eq. 4.2 and 4.5; its
//!   [`speedup`](Prediction::speedup) is Eq. 4.6).
//!
//! Nothing here reads a clock: callers measure and report seconds.

use crate::{Codec, CodecError, ElemKind};

/// What kind of data a message holds, as far as the choice of codec goes.
///
/// The seed distinguishes integers and floats, doubles, and everything else. FPC has a
/// 32-bit variant here, so single floats get a class of their own; integers of every
/// width behave alike for the codecs (deltas, shuffle, LZ) and share one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataClass {
    /// Opaque bytes, text, `u8`/`i8`.
    Bytes,
    /// Integers of 2, 4 or 8 bytes.
    Int,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

impl DataClass {
    /// Every class, in index order.
    pub const ALL: [DataClass; 4] = [
        DataClass::Bytes,
        DataClass::Int,
        DataClass::F32,
        DataClass::F64,
    ];

    /// The class of an element kind.
    pub fn of(elem: ElemKind) -> DataClass {
        match elem {
            ElemKind::U8 | ElemKind::I8 => DataClass::Bytes,
            ElemKind::F32 => DataClass::F32,
            ElemKind::F64 => DataClass::F64,
            _ => DataClass::Int,
        }
    }

    /// 0..4, for tables indexed by class.
    pub fn index(self) -> usize {
        self as usize
    }

    /// A representative element kind, for codecs that need one (FPC's width).
    pub fn elem(self) -> ElemKind {
        match self {
            DataClass::Bytes => ElemKind::U8,
            DataClass::Int => ElemKind::I32,
            DataClass::F32 => ElemKind::F32,
            DataClass::F64 => ElemKind::F64,
        }
    }

    /// Lower-case name, also the key in configuration files.
    pub fn name(self) -> &'static str {
        match self {
            DataClass::Bytes => "bytes",
            DataClass::Int => "int",
            DataClass::F32 => "f32",
            DataClass::F64 => "f64",
        }
    }
}

/// Buckets 0..=24: bucket `b` holds sizes in (2^(b−1), 2^b], the last one everything larger
/// than 8 MiB. The seed's Table 4.1 stops at 128 KiB; larger sizes fall back to the nearest
/// bucket that has data, as the seed's table does.
pub const LINK_BUCKETS: usize = 25;

/// Transfers of at most this many bytes teach the model the latency α, not a per-byte
/// cost: their time is almost all latency, and dividing it by a few bytes would give
/// absurd per-byte figures.
pub const LATENCY_PROBE_MAX: usize = 256;

/// Once a bucket has this many samples, a new sample may move its estimate by at most a
/// factor [`OUTLIER_CLAMP`] either way: one retransmission or a descheduled receiver must
/// not make the link look ten times slower, while a real change still shows after a few
/// transfers.
const OUTLIER_AFTER: u32 = 4;
const OUTLIER_CLAMP: f64 = 4.0;

/// The bucket of a message of `bytes` bytes.
pub fn link_bucket(bytes: usize) -> usize {
    if bytes <= 1 {
        return 0;
    }
    // ceil(log2(bytes)) for bytes >= 2.
    let b = (usize::BITS - (bytes - 1).leading_zeros()) as usize;
    b.min(LINK_BUCKETS - 1)
}

/// A link's transfer time model: `T(n) = α + β[bucket(n)] · n` (the seed's Eq. 4.5).
#[derive(Debug, Clone, PartialEq)]
pub struct LinkModel {
    latency_s: f64,
    /// Per-byte seconds of each bucket, learned or given; 0 samples means "no data".
    per_byte_s: [f64; LINK_BUCKETS],
    samples: [u32; LINK_BUCKETS],
    /// What a lookup uses: the bucket's own figure, or the nearest bucket that has one,
    /// or the prior. Refreshed on every change so that lookups stay one array read.
    effective: [f64; LINK_BUCKETS],
    prior_per_byte_s: f64,
}

impl LinkModel {
    /// A model that knows nothing yet: latency `latency_s` and a flat bandwidth.
    pub fn new(latency_s: f64, bytes_per_s: f64) -> LinkModel {
        let latency_s = if latency_s.is_finite() && latency_s >= 0.0 {
            latency_s
        } else {
            0.0
        };
        let prior = if bytes_per_s.is_finite() && bytes_per_s > 0.0 {
            1.0 / bytes_per_s
        } else {
            // An unusable bandwidth: assume 1 Gbit/s rather than divide by zero.
            8e-9
        };
        LinkModel {
            latency_s,
            per_byte_s: [prior; LINK_BUCKETS],
            samples: [0; LINK_BUCKETS],
            effective: [prior; LINK_BUCKETS],
            prior_per_byte_s: prior,
        }
    }

    /// A model from a Network-behavior table like the seed's Table 4.1: the latency and,
    /// for each measured size, the seconds per byte. A size that is not a power of two
    /// goes to the bucket it falls in.
    pub fn from_table(latency_s: f64, per_byte: &[(usize, f64)]) -> Result<LinkModel, CodecError> {
        check_seconds("latency", latency_s)?;
        if per_byte.is_empty() {
            return Err(invalid("link table", "has no rows".into()));
        }
        let mut m = LinkModel::new(latency_s, 125e6);
        for &(size, s) in per_byte {
            check_seconds("link table per-byte time", s)?;
            let b = link_bucket(size);
            m.per_byte_s[b] = s;
            m.samples[b] = m.samples[b].saturating_add(1);
        }
        m.refresh();
        Ok(m)
    }

    /// A model from ping-pong calibration samples of (message bytes, one-way seconds).
    ///
    /// α is the fastest transfer among the small ones (at most [`LATENCY_PROBE_MAX`]
    /// bytes), or, without small samples, the least-squares intercept over all samples
    /// (clamped at zero). Each bucket's β is the median of `(t − α) / n` over its samples:
    /// the median shrugs off the odd slow round trip.
    pub fn from_calibration(samples: &[(usize, f64)]) -> Result<LinkModel, CodecError> {
        if samples.is_empty() {
            return Err(invalid("link calibration", "has no samples".into()));
        }
        for &(_, t) in samples {
            check_seconds("link calibration time", t)?;
        }
        let small = samples
            .iter()
            .filter(|&&(n, _)| n <= LATENCY_PROBE_MAX)
            .map(|&(_, t)| t)
            .fold(f64::INFINITY, f64::min);
        let latency_s = if small.is_finite() {
            small
        } else {
            least_squares_intercept(samples).max(0.0)
        };
        let mut per_bucket: Vec<Vec<f64>> = vec![Vec::new(); LINK_BUCKETS];
        for &(n, t) in samples.iter().filter(|&&(n, _)| n > LATENCY_PROBE_MAX) {
            per_bucket[link_bucket(n)].push((t - latency_s).max(0.0) / n as f64);
        }
        let mut m = LinkModel::new(latency_s, 125e6);
        for (b, mut v) in per_bucket.into_iter().enumerate() {
            if v.is_empty() {
                continue;
            }
            v.sort_by(f64::total_cmp);
            m.per_byte_s[b] = v[v.len() / 2];
            m.samples[b] = u32::try_from(v.len()).unwrap_or(u32::MAX);
        }
        if m.samples.iter().all(|&s| s == 0) {
            // Only latency probes: keep the prior bandwidth, but learn nothing false.
            return Ok(m);
        }
        m.refresh();
        Ok(m)
    }

    /// Learns from one transfer of `bytes` bytes that took `seconds`, one way.
    ///
    /// `weight` (0..=1) is the moving average's weight of the new sample. Non-finite or
    /// negative times are ignored.
    pub fn observe(&mut self, bytes: usize, seconds: f64, weight: f64) {
        if !seconds.is_finite() || seconds < 0.0 || bytes == 0 {
            return;
        }
        let b = link_bucket(bytes);
        if bytes <= LATENCY_PROBE_MAX {
            let latency = (seconds - self.effective[b] * bytes as f64).max(0.0);
            self.latency_s += weight * (latency - self.latency_s);
            return;
        }
        let mut est = (seconds - self.latency_s).max(0.0) / bytes as f64;
        if self.samples[b] == 0 {
            self.per_byte_s[b] = est;
        } else {
            let cur = self.per_byte_s[b];
            if self.samples[b] >= OUTLIER_AFTER && cur > 0.0 {
                est = est.clamp(cur / OUTLIER_CLAMP, cur * OUTLIER_CLAMP);
            }
            self.per_byte_s[b] = cur + weight * (est - cur);
        }
        self.samples[b] = self.samples[b].saturating_add(1);
        self.refresh();
    }

    /// Predicted one-way time of a transfer of `bytes` bytes (Eq. 4.5).
    pub fn transfer_time(&self, bytes: f64) -> f64 {
        let bytes = bytes.max(0.0);
        // Saturating float-to-int cast: any size past the last bucket lands in it.
        let b = link_bucket(bytes.ceil() as usize);
        self.latency_s + self.effective[b] * bytes
    }

    /// Time `bytes` bytes occupy the link, without the latency: how long a frame holds
    /// up the frames queued behind it.
    pub fn wire_time(&self, bytes: f64) -> f64 {
        self.transfer_time(bytes) - self.latency_s
    }

    /// The latency α in seconds.
    pub fn latency_s(&self) -> f64 {
        self.latency_s
    }

    /// The per-byte cost β used for messages of `bytes` bytes.
    pub fn per_byte_s(&self, bytes: usize) -> f64 {
        self.effective[link_bucket(bytes)]
    }

    /// Recomputes the effective per-byte costs: each empty bucket borrows from the
    /// nearest bucket with data (the larger one on a tie, since large transfers are what
    /// compression is for), or keeps the prior when no bucket has data.
    fn refresh(&mut self) {
        if self.samples.iter().all(|&s| s == 0) {
            self.effective = [self.prior_per_byte_s; LINK_BUCKETS];
            return;
        }
        for b in 0..LINK_BUCKETS {
            let mut best: Option<(usize, usize)> = None; // (distance, bucket)
            for (o, &s) in self.samples.iter().enumerate() {
                if s == 0 {
                    continue;
                }
                let d = b.abs_diff(o);
                if best.is_none_or(|(bd, bo)| d < bd || (d == bd && o > bo)) {
                    best = Some((d, o));
                }
            }
            if let Some((_, o)) = best {
                self.effective[b] = self.per_byte_s[o];
            }
        }
    }
}

fn least_squares_intercept(samples: &[(usize, f64)]) -> f64 {
    let n = samples.len() as f64;
    let (sx, sy) = samples
        .iter()
        .fold((0.0, 0.0), |(sx, sy), &(x, y)| (sx + x as f64, sy + y));
    let (mx, my) = (sx / n, sy / n);
    let (sxx, sxy) = samples.iter().fold((0.0, 0.0), |(sxx, sxy), &(x, y)| {
        let dx = x as f64 - mx;
        (sxx + dx * dx, sxy + dx * (y - my))
    });
    if sxx > 0.0 {
        my - (sxy / sxx) * mx
    } else {
        0.0
    }
}

/// The seed's Table 4.3: decompression time as a multiple of compression time, by codec
/// and by how much the codec saved (`1 − csize/size`; the seed calls this percentage the
/// "compression ratio"). Rows: saved 0-25 %, 26-50 %, 51-75 %, 76-100 %.
///
/// Columns for codecs the seed did not have are chosen here, not measured by the seed:
/// LZ4 and shuffle+LZ4 take LZO's column (same family, same asymmetry); zstd decodes far
/// faster than it encodes, the more so at high levels (0.35 up to level 3, 0.1 above,
/// conservative against zstd's published figures); shuffle+zstd takes zstd's.
pub fn decompress_factor_prior(codec: Codec, saved: f64) -> f64 {
    const RLE: [f64; 4] = [0.29, 0.30, 0.25, 0.16];
    const HUFF: [f64; 4] = [1.33, 1.24, 1.04, 0.45];
    const RICE: [f64; 4] = [0.59, 0.57, 0.60, 0.48];
    const LZO: [f64; 4] = [0.19, 0.21, 0.23, 1.11];
    const FPC: [f64; 4] = [0.99, 0.95, 0.96, 0.93];
    // The seed's rows are whole percentages: 0-25, 26-50, 51-75, 76-100.
    let pct = (saved * 100.0).round();
    let row = if pct <= 25.0 {
        0
    } else if pct <= 50.0 {
        1
    } else if pct <= 75.0 {
        2
    } else {
        3
    };
    match codec {
        Codec::None => 0.0,
        Codec::Rle => RLE[row],
        Codec::Huffman => HUFF[row],
        Codec::Rice => RICE[row],
        Codec::Lz4 | Codec::ShuffleLz4 => LZO[row],
        Codec::Fpc { .. } => FPC[row],
        Codec::Zstd { level } | Codec::ShuffleZstd { level } => {
            if level <= 3 {
                0.35
            } else {
                0.1
            }
        }
    }
}

/// Compression speed (MB/s of original data, one core) assumed for a codec before
/// anything is measured. Chosen below what the codecs reach in release builds on the
/// development machine (`examples/codec_table.rs` on compressible 256 KiB sets: LZ4
/// 580+, shuffle+LZ4 1000+, RLE 590+, Rice 530+, Huffman 680+, FPC 360+, zstd:1 280+,
/// zstd:3 220+, zstd:9 31+), so that an unmeasured codec is not favoured on a slower
/// host; a caller that runs [`measure_all`](crate::measure_all) at start-up replaces
/// them ([`Engine::calibrate_codecs`](crate::Engine::calibrate_codecs)).
pub fn compress_mb_s_prior(codec: Codec) -> f64 {
    match codec {
        Codec::None => f64::INFINITY,
        Codec::Lz4 => 400.0,
        Codec::ShuffleLz4 => 500.0,
        Codec::Rle => 400.0,
        Codec::Rice => 300.0,
        Codec::Huffman => 250.0,
        Codec::Fpc { .. } => 250.0,
        Codec::Zstd { level } | Codec::ShuffleZstd { level } => match level {
            ..=1 => 200.0,
            2..=3 => 150.0,
            4..=6 => 60.0,
            _ => 20.0,
        },
    }
}

/// What one compression run gave: the caller measured it (or learned `decompress_s`
/// from the receiver). `decompress_s` is optional because the sender rarely knows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CodecRun {
    pub codec: Codec,
    pub elem: ElemKind,
    pub in_bytes: usize,
    /// Payload plus frame header, as it went (or would go) on the wire.
    pub out_bytes: usize,
    pub compress_s: f64,
    pub decompress_s: Option<f64>,
}

/// A codec's learned behaviour on one data class.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CodecStats {
    pub codec: Codec,
    /// Seconds per original byte to compress.
    pub compress_s_per_byte: f64,
    /// Seconds per original byte to decompress, once someone reported it.
    pub decompress_s_per_byte: Option<f64>,
    /// Moving average of `out_bytes / in_bytes`, once something was compressed.
    pub ratio: Option<f64>,
    /// How many runs taught these figures (0: still the prior).
    pub runs: u32,
}

impl CodecStats {
    /// The prior: [`compress_mb_s_prior`], no decompression speed, no ratio.
    pub fn prior(codec: Codec) -> CodecStats {
        CodecStats {
            codec,
            compress_s_per_byte: 1.0 / (compress_mb_s_prior(codec) * 1e6),
            decompress_s_per_byte: None,
            ratio: None,
            runs: 0,
        }
    }

    /// Learns from one run. The first run replaces the prior; later ones move the moving
    /// averages by `weight`. Runs with no input or with non-finite times are ignored.
    pub fn observe(&mut self, run: &CodecRun, weight: f64) {
        if run.in_bytes == 0 || !run.compress_s.is_finite() || run.compress_s < 0.0 {
            return;
        }
        let n = run.in_bytes as f64;
        let spb = run.compress_s / n;
        self.compress_s_per_byte = if self.runs == 0 {
            spb
        } else {
            self.compress_s_per_byte + weight * (spb - self.compress_s_per_byte)
        };
        let ratio = run.out_bytes as f64 / n;
        self.ratio = Some(self.ratio.map_or(ratio, |r| r + weight * (ratio - r)));
        if let Some(d) = run.decompress_s.filter(|d| d.is_finite() && *d >= 0.0) {
            let d = d / n;
            self.decompress_s_per_byte = Some(
                self.decompress_s_per_byte
                    .map_or(d, |old| old + weight * (d - old)),
            );
        }
        self.runs = self.runs.saturating_add(1);
    }

    /// Learns a decompression time alone (the receiver measured it and reported it
    /// back): `seconds` to restore `bytes` original bytes.
    pub fn observe_decompress(&mut self, bytes: usize, seconds: f64, weight: f64) {
        if bytes == 0 || !seconds.is_finite() || seconds < 0.0 {
            return;
        }
        let d = seconds / bytes as f64;
        self.decompress_s_per_byte = Some(
            self.decompress_s_per_byte
                .map_or(d, |old| old + weight * (d - old)),
        );
    }

    /// Predicted compression time of `bytes` bytes.
    pub fn compress_time(&self, bytes: f64) -> f64 {
        self.compress_s_per_byte * bytes
    }

    /// Predicted decompression time of `bytes` bytes compressed to `csize`: measured if
    /// known, otherwise Table 4.3's `k · Tc` (Eq. 4.7).
    pub fn decompress_time(&self, bytes: f64, csize: f64) -> f64 {
        match self.decompress_s_per_byte {
            Some(d) => d * bytes,
            None => {
                let saved = if bytes > 0.0 {
                    1.0 - csize / bytes
                } else {
                    0.0
                };
                decompress_factor_prior(self.codec, saved) * self.compress_time(bytes)
            }
        }
    }
}

/// Predicted one-way times of a message sent raw and sent compressed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// `T(size)`, Eq. 4.1/4.5.
    pub raw_s: f64,
    /// `Tc + T(csize) + Td`, Eq. 4.2.
    pub compressed_s: f64,
}

impl Prediction {
    /// Eq. 4.6: raw time over compressed time; above 1 when compression pays.
    pub fn speedup(&self) -> f64 {
        if self.compressed_s > 0.0 {
            self.raw_s / self.compressed_s
        } else {
            f64::INFINITY
        }
    }

    /// Whether compression pays by at least a factor `min_speedup` (1.0 is Eq. 4.4).
    pub fn pays(&self, min_speedup: f64) -> bool {
        self.raw_s > self.compressed_s * min_speedup
    }
}

/// Predicts sending `bytes` bytes over `link`, raw or compressed to `csize` bytes by the
/// codec whose behaviour `stats` describes.
pub fn predict(link: &LinkModel, stats: &CodecStats, bytes: usize, csize: f64) -> Prediction {
    predict_behind(link, stats, bytes, csize, 0.0)
}

/// Like [`predict`], for a message that queues behind `backlog_s` seconds of frames
/// already on their way over the link (a stream of messages). Its compression then
/// overlaps their transfer, and its decompression the transfer of the message after
/// it, so only the part of `Tc` longer than the backlog and the longer of `T(csize)` and
/// `Td` count — the reason `zstd --adapt` raises its level while its output is blocked.
/// The seed's Eq. 4.2 is the case of no backlog.
pub fn predict_behind(
    link: &LinkModel,
    stats: &CodecStats,
    bytes: usize,
    csize: f64,
    backlog_s: f64,
) -> Prediction {
    let n = bytes as f64;
    if stats.codec == Codec::None {
        let raw_s = link.transfer_time(n);
        return Prediction {
            raw_s,
            compressed_s: raw_s,
        };
    }
    let tc = stats.compress_time(n);
    let td = stats.decompress_time(n, csize);
    timed(link, n, tc, csize, td, backlog_s)
}

/// Raw and compressed times of a message of `n` bytes behind `backlog_s` seconds of
/// queued frames, given the compression and decompression times (predicted or measured).
pub(crate) fn timed(
    link: &LinkModel,
    n: f64,
    tc: f64,
    csize: f64,
    td: f64,
    backlog_s: f64,
) -> Prediction {
    let raw_s = link.transfer_time(n);
    let wire = link.transfer_time(csize);
    let compressed_s = if backlog_s > 0.0 {
        (tc - backlog_s).max(0.0) + wire.max(td)
    } else {
        tc + wire + td
    };
    Prediction {
        raw_s,
        compressed_s,
    }
}

fn check_seconds(what: &'static str, s: f64) -> Result<(), CodecError> {
    if s.is_finite() && s >= 0.0 {
        Ok(())
    } else {
        Err(invalid(
            what,
            format!("{s} is not a finite, non-negative time"),
        ))
    }
}

fn invalid(field: &'static str, reason: String) -> CodecError {
    CodecError::InvalidConfig { field, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's Table 4.1 (Network-behavior, cluster D's Ethernet): µs per byte by
    /// message size, and T_Latency = 86.34 µs.
    const TABLE_4_1_US_PER_BYTE: [(usize, f64); 17] = [
        (2, 6.463),
        (4, 4.269),
        (8, 1.347),
        (16, 0.719),
        (32, 0.446),
        (64, 0.328),
        (128, 0.280),
        (256, 0.230),
        (512, 0.242),
        (1024, 0.203),
        (2048, 0.162),
        (4096, 0.123),
        (8192, 0.105),
        (16384, 0.096),
        (32768, 0.091),
        (65536, 0.088),
        (131072, 0.088),
    ];
    const TABLE_4_1_LATENCY_US: f64 = 86.34;

    fn seed_link() -> LinkModel {
        let rows: Vec<(usize, f64)> = TABLE_4_1_US_PER_BYTE
            .iter()
            .map(|&(n, us)| (n, us * 1e-6))
            .collect();
        LinkModel::from_table(TABLE_4_1_LATENCY_US * 1e-6, &rows).unwrap()
    }

    /// Reproduces the speedups of the seed's Table 6.2 (a 300 KB message of doubles from
    /// NAS CG) from Table 4.1's network figures and Table 6.2's codec figures.
    ///
    /// - Message: 300 KB = 307,200 bytes. It is above Table 4.1's largest row (131072),
    ///   so β is that row's 0.088 µs/B, as the seed's table lookup saturates; α = 86.34 µs.
    /// - Table 6.2 columns used: "Compression_Ratio(%)" (the share of bytes *saved*: csize =
    ///   307200 · (1 − pct/100)), "Compression_Time(µs)" and "Decompression_Time(µs)" (the
    ///   seed prints 21292,6 and 8146,3 with decimal commas). Its "SpeedUp" column is the
    ///   expected value. LZO is played by LZ4 here.
    /// - Speedup is Eq. 4.6/6.4: `(α + β·size) / (α + β·csize + Tc + Td)`.
    ///
    /// Computed: FPC 0.366, LZO 0.759, RLE 0.880, Huffman 0.453, Rice 0.285, all within
    /// 0.006 of the seed's two-decimal figures, so ±0.02 holds without any slack.
    #[test]
    fn reproduces_seed_table_6_2_speedups() {
        let link = seed_link();
        let size = 307_200usize;
        // (codec, % saved, Tc µs, Td µs, seed's speedup)
        let rows = [
            (Codec::Fpc { table_bits: 16 }, 6.3, 24717.8, 23874.6, 0.37),
            (Codec::Lz4, 0.0, 8191.0, 414.9, 0.76),
            (Codec::Rle, 0.0, 2537.4, 1146.1, 0.88),
            (Codec::Huffman, 6.05, 13033.9, 21292.6, 0.45),
            (Codec::Rice, 0.0, 59993.3, 8146.3, 0.28),
        ];
        for (codec, saved_pct, tc_us, td_us, seed) in rows {
            let csize = (size as f64 * (1.0 - saved_pct / 100.0)).round() as usize;
            let mut stats = CodecStats::prior(codec);
            stats.observe(
                &CodecRun {
                    codec,
                    elem: ElemKind::F64,
                    in_bytes: size,
                    out_bytes: csize,
                    compress_s: tc_us * 1e-6,
                    decompress_s: Some(td_us * 1e-6),
                },
                0.2,
            );
            let p = predict(&link, &stats, size, csize as f64);
            let s = p.speedup();
            assert!((s - seed).abs() <= 0.02, "{codec}: got {s:.3}, seed {seed}");
            // None of them pays, which is why the seed switched compression off for CG.
            assert!(!p.pays(1.0), "{codec}");
        }
    }

    #[test]
    fn seed_link_reads_table_4_1() {
        let link = seed_link();
        let t = link.transfer_time(307_200.0);
        assert!((t * 1e6 - (86.34 + 307_200.0 * 0.088)).abs() < 1e-6);
        // A size between rows takes the next row up (2049..=4096 → 4096's 0.123).
        assert!((link.per_byte_s(3000) - 0.123e-6).abs() < 1e-15);
        assert!((link.per_byte_s(4096) - 0.123e-6).abs() < 1e-15);
    }

    #[test]
    fn table_4_3_prior() {
        // The seed's own example: RLE at 10 % saved decompresses in 0.29 · Tc.
        assert_eq!(decompress_factor_prior(Codec::Rle, 0.10), 0.29);
        assert_eq!(decompress_factor_prior(Codec::Huffman, 0.30), 1.24);
        assert_eq!(decompress_factor_prior(Codec::Lz4, 0.99), 1.11);
        assert_eq!(
            decompress_factor_prior(Codec::Fpc { table_bits: 16 }, 0.6),
            0.96
        );
        // Expansion counts as the lowest row.
        assert_eq!(decompress_factor_prior(Codec::Rice, -0.2), 0.59);
        let stats = CodecStats::prior(Codec::Rle);
        let tc = stats.compress_time(1e6);
        assert!((stats.decompress_time(1e6, 9e5) - 0.29 * tc).abs() < 1e-12);
    }

    #[test]
    fn link_learns_bandwidth_and_latency() {
        // A 100 Mbit/s link with 200 µs latency, prior says 1 Gbit/s and 50 µs.
        let mut m = LinkModel::new(50e-6, 125e6);
        let truth = |n: usize| 200e-6 + n as f64 / 12.5e6;
        for _ in 0..50 {
            m.observe(64, truth(64), 0.2);
        }
        for _ in 0..50 {
            for n in [4096, 65536, 1 << 20] {
                m.observe(n, truth(n), 0.2);
            }
        }
        for n in [4096usize, 65536, 1 << 20, 300_000] {
            let rel = (m.transfer_time(n as f64) - truth(n)).abs() / truth(n);
            assert!(rel < 0.02, "{n}: {rel}");
        }
        // A single 100× outlier moves a warmed bucket by at most 4×, weighted.
        let before = m.per_byte_s(65536);
        m.observe(65536, truth(65536) * 100.0, 0.2);
        assert!(m.per_byte_s(65536) < before * 1.7);
        // Garbage is ignored.
        m.observe(1000, f64::NAN, 0.2);
        m.observe(1000, -1.0, 0.2);
        assert!(m.transfer_time(1000.0).is_finite());
    }

    #[test]
    fn calibration_fits_hockney() {
        let truth = |n: usize| 80e-6 + n as f64 * 8e-9;
        let mut samples = vec![(2, truth(2) * 1.5), (2, truth(2)), (8, truth(8))];
        for n in [1024, 4096, 65536, 1 << 20] {
            samples.extend([(n, truth(n)), (n, truth(n) * 1.01), (n, truth(n) * 3.0)]);
        }
        let m = LinkModel::from_calibration(&samples).unwrap();
        assert!((m.latency_s() - truth(2)).abs() < 1e-9);
        for n in [4096usize, 1 << 20, 1 << 23] {
            let rel = (m.transfer_time(n as f64) - truth(n)).abs() / truth(n);
            assert!(rel < 0.02, "{n}: {rel}");
        }
        assert!(LinkModel::from_calibration(&[]).is_err());
        assert!(LinkModel::from_calibration(&[(10, f64::INFINITY)]).is_err());
        assert!(LinkModel::from_table(-1.0, &[(2, 1.0)]).is_err());
    }

    #[test]
    fn buckets() {
        assert_eq!(link_bucket(0), 0);
        assert_eq!(link_bucket(2), 1);
        assert_eq!(link_bucket(3), 2);
        assert_eq!(link_bucket(4), 2);
        assert_eq!(link_bucket(131_072), 17);
        assert_eq!(link_bucket(131_073), 18);
        assert_eq!(link_bucket(usize::MAX), LINK_BUCKETS - 1);
    }
}
