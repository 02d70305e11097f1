//! The codec stage: compression as a link stage (PATHS' wrapper), so any link of a tree
//! or a job can compress without the protocol above it knowing.
//!
//! Outgoing application frames (Data, PointToPoint) whose payload the [`CodecMode`]
//! decides to compress get a codec frame as payload and [`FLAG_CODEC`] in the header's
//! flags; the receiving side's stage sees the flag, decodes (bounded by the link's
//! largest frame) and passes the original frame on. Control frames, small frames and
//! frames the codec cannot shrink pass untouched, so a link without a peer stage still
//! works as long as nothing is compressed.
//!
//! The element type of a payload comes from the frame's flags ([`elem_hint`]), set by
//! senders that know it (typed collectives); otherwise payloads count as bytes.
//!
//! Unlike the engine, the stage reads the clock: it is the driver that times the codecs
//! and reports to the engine what each compression cost and gained.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::Write as _;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use vargr_stage::Stage;
use vargr_wire::{elem_hint, encode_header, Frame, FrameKind, FLAG_CODEC, FLAG_RAW, HEADER_LEN};

use crate::guided::{encode_sample, trace_header, MessageKey, Plan, Sample, MAX_SAMPLE};
use crate::report::{decode_reports, encode_reports, DecodeReport, MAX_RECORDS};
use crate::{decode, encode_span, Codec, CodecError, CodecRun, ElemKind, Engine, EngineConfig};
use crate::{LinkKey, LinkModel, LinkOptions};

/// What a codec stage does: `off`, `fixed:CODEC` (e.g. `fixed:lz4`), `adaptive`, or
/// `guided:PLAN` (the rules `vargr codec plan` wrote; see [`crate::guided`]).
#[derive(Debug, Clone, PartialEq)]
pub enum CodecMode {
    Off,
    Fixed(Codec),
    Adaptive,
    Guided { path: String, plan: Arc<Plan> },
}

impl FromStr for CodecMode {
    type Err = CodecError;

    fn from_str(s: &str) -> Result<CodecMode, CodecError> {
        let s = s.trim();
        match s {
            "off" | "none" => Ok(CodecMode::Off),
            "adaptive" => Ok(CodecMode::Adaptive),
            _ => {
                if let Some(c) = s.strip_prefix("fixed:") {
                    return Ok(CodecMode::Fixed(c.parse()?));
                }
                if let Some(path) = s.strip_prefix("guided:") {
                    let plan = Plan::load(std::path::Path::new(path))?;
                    return Ok(CodecMode::Guided {
                        path: path.to_string(),
                        plan: Arc::new(plan),
                    });
                }
                Err(CodecError::InvalidParam(format!(
                    "codec mode {s:?}: expected off, fixed:CODEC, adaptive or guided:PLAN"
                )))
            }
        }
    }
}

impl fmt::Display for CodecMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecMode::Off => f.write_str("off"),
            CodecMode::Fixed(c) => write!(f, "fixed:{c}"),
            CodecMode::Adaptive => f.write_str("adaptive"),
            CodecMode::Guided { path, .. } => write!(f, "guided:{path}"),
        }
    }
}

/// A link model from a configured latency and bandwidth (`None`: unlimited, where no
/// codec pays).
pub fn link_model(latency: std::time::Duration, bits_per_s: Option<u64>) -> LinkModel {
    // Unlimited: loopback-like speed, where only the fastest codecs could ever pay.
    let bytes_per_s = bits_per_s.map_or(5e9, |b| b as f64 / 8.0);
    LinkModel::new(latency.as_secs_f64(), bytes_per_s)
}

/// What the codec stages of a process share, given by whoever builds the links (the
/// link policy): a stage reads no environment, opens no file it was not told of and
/// times no codec on its own.
#[derive(Debug, Clone, Default)]
pub struct StageSettings {
    /// The adaptive engine's settings.
    pub engine: EngineConfig,
    /// The codecs' speeds on this machine ([`Calibration::measure`]). Without them the
    /// adaptive engine judges the codecs it has not used yet by conservative priors,
    /// and on a fast link never tries them.
    pub calibration: Option<Arc<Calibration>>,
    /// Where to record what the links carry, for the guided strategy.
    pub samples: Option<SampleDir>,
}

/// A directory for the guided strategy's samples: each stage appends to a file of its
/// own there, named from `label` (e.g. the rank), the process and the stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleDir {
    pub dir: PathBuf,
    pub label: String,
}

/// Each candidate codec's speed and ratio on small samples of every data class, measured
/// once per process and given to every adaptive engine it starts.
#[derive(Debug, Clone, Default)]
pub struct Calibration {
    per_elem: Vec<(ElemKind, Vec<crate::CodecMeasure>)>,
}

impl Calibration {
    /// Time given to each codec on each data class's sample.
    pub const BUDGET: Duration = Duration::from_micros(400);

    /// Times the `candidates` on this machine, each within `BUDGET` per data class, so
    /// that start-up stays short whatever the candidates.
    pub fn measure(candidates: &crate::Candidates) -> Calibration {
        use crate::testdata as td;
        let n = 8192;
        // Half the elements zeroed at random places (the seed's 50 % redundancy): data
        // every codec has work on. On smooth fields alone LZ4 finds nothing and runs its
        // fast give-up path, and its speed there says nothing about data it compresses.
        let half_zero = |mut bytes: Vec<u8>, size: usize, seed: u64| {
            let mut rng = td::Rng::new(seed);
            for e in bytes.chunks_exact_mut(size) {
                if rng.below(2) == 0 {
                    e.fill(0);
                }
            }
            bytes
        };
        let samples = [
            (ElemKind::BYTES, td::text_like(8 * n, 1)),
            (
                ElemKind::I32,
                half_zero(td::i32_bytes(&td::small_deltas_i32(2 * n, 1000, 2)), 4, 2),
            ),
            (
                ElemKind::F32,
                half_zero(td::f32_bytes(&td::smooth_field_f32(2 * n, 1e-3, 3)), 4, 3),
            ),
            (
                ElemKind::F64,
                half_zero(td::f64_bytes(&td::smooth_field_f64(n, 1e-3, 4)), 8, 4),
            ),
        ];
        let per_elem = samples
            .into_iter()
            .map(|(elem, data)| {
                let measures = candidates
                    .for_class(crate::DataClass::of(elem))
                    .iter()
                    .filter_map(|&c| crate::measure(c, &data, elem, Self::BUDGET).ok())
                    .collect();
                (elem, measures)
            })
            .collect();
        Calibration { per_elem }
    }
}

/// What a codec stage has done, for tests, traces and `vargr top`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageCounters {
    pub frames_out: u64,
    pub compressed: u64,
    pub bytes_in: u64,
    pub bytes_on_wire: u64,
    pub frames_decoded: u64,
}

/// Records what a link carries for the guided strategy: the first few payloads of each
/// kind of message, appended to one file per stage in a [`SampleDir`].
struct SampleRecorder {
    path: PathBuf,
    seen: HashMap<MessageKey, u32>,
    written: usize,
    failed: bool,
}

impl SampleRecorder {
    /// Samples kept per kind of message, and bytes per file.
    const PER_KEY: u32 = 2;
    const MAX_FILE: usize = 64 << 20;

    fn new(to: &SampleDir) -> SampleRecorder {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("rank{}-{}-{n}.ctr", to.label, std::process::id());
        SampleRecorder {
            path: to.dir.join(name),
            seen: HashMap::new(),
            written: 0,
            failed: false,
        }
    }

    fn record(&mut self, key: MessageKey, payload: &[u8]) {
        let n = self.seen.entry(key).or_insert(0);
        if self.failed || *n >= Self::PER_KEY || self.written > Self::MAX_FILE {
            return;
        }
        *n += 1;
        let mut b = Vec::new();
        if self.written == 0 {
            b.extend_from_slice(trace_header());
        }
        encode_sample(
            &Sample {
                key,
                payload: payload[..payload.len().min(MAX_SAMPLE)].to_vec(),
            },
            &mut b,
        );
        let r = std::fs::create_dir_all(self.path.parent().unwrap_or(std::path::Path::new(".")))
            .and_then(|_| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)
            })
            .and_then(|mut f| f.write_all(&b));
        match r {
            Ok(()) => self.written += b.len(),
            Err(e) => {
                // Recording must not stop the application: say so once and carry on.
                tracing::warn!(path = %self.path.display(), "recording codec samples: {e}");
                self.failed = true;
            }
        }
    }
}

/// One side of a link's codec stage.
pub struct CodecStage {
    mode: CodecMode,
    engine: Option<Engine>,
    link: LinkKey,
    /// Smallest payload a fixed codec compresses (the engine has its own).
    min_size: usize,
    /// Largest payload a decoded frame may have.
    max_frame: usize,
    scratch: Vec<u8>,
    recorder: Option<SampleRecorder>,
    /// When the link will have sent everything this stage passed on so far, by the
    /// link's model (adaptive mode): what a new message queues behind.
    wire_free_at: Option<Instant>,
    /// Learn the link's model from the kernel's path readings (a link nobody
    /// configured); `None`: the model given is the truth (configured or emulated).
    learned: Option<LearnedPath>,
    /// Decompressions since the last report to the peer, per (codec, element kind).
    decoded: Vec<DecodeReport>,
    last_report: Option<Instant>,
    /// When the next report goes (while there is something to report): in front of a
    /// frame this stage sends anyway, or alone at this deadline, since on a connection
    /// that carries data one way only (a job's mesh dials one per direction) nothing
    /// else would ever take it back to the compressing side.
    report_at: Option<Instant>,
    /// Ping-pong calibration of the link (adaptive mode).
    prober: Option<Prober>,
    /// Echoes owed to the peer's probes, sent at the next release, and since when.
    echoes: Vec<Bytes>,
    echo_since: Option<Instant>,
    pub counters: StageCounters,
}

/// How often a stage that decompresses tells its peer how long that took, at most
/// (reports ride on frames the stage sends anyway).
const REPORT_EVERY: Duration = Duration::from_millis(50);

/// What a learning stage has seen of its path.
#[derive(Debug, Clone, Default)]
struct LearnedPath {
    /// The last rate samples, bytes/s, oldest first; the model takes their median,
    /// which one burst through a token bucket or one stall does not move.
    rates: VecDeque<f64>,
    /// A measurement under way: when bytes were last seen waiting in the socket, and
    /// how many had been acknowledged then.
    start: Option<(Instant, u64)>,
    /// The last reading of a measurement under way that found the path busy.
    last_busy: Option<Instant>,
    /// The model last given to the engine, as (latency s, bytes/s).
    applied: Option<(f64, f64)>,
}

/// Rate samples a learning stage keeps.
const PATH_SAMPLES: usize = 8;

impl LearnedPath {
    /// Takes one reading; returns the path's rate when a measurement completes.
    ///
    /// A measurement starts at a reading that finds bytes waiting in the socket (the
    /// path, not the application, sets the pace) and ends at the first later reading
    /// that finds more bytes acknowledged.
    ///
    /// If the path is still busy then, the bytes crossed by that reading. If it went
    /// idle, they crossed between the last busy reading and this one: on paths where
    /// acknowledgements queue behind the data (one bottleneck both ways, or a receiver
    /// that acknowledges a burst at once) that is the only way a burst is ever seen to
    /// end. The midpoint is taken when that gap is short beside the measurement; a
    /// longer one abandons it, so application pauses never count as a slow path.
    fn observe(&mut self, info: &vargr_stage::PathInfo) -> Option<f64> {
        let mut sample = None;
        if let Some((t0, acked0)) = self.start {
            if info.bytes_acked > acked0 {
                let end = if info.busy {
                    Some(info.at)
                } else {
                    self.last_busy.and_then(|b| {
                        let gap = info.at.saturating_duration_since(b);
                        (gap * 4 <= b.saturating_duration_since(t0)).then(|| b + gap / 2)
                    })
                };
                let dt = end.map_or(0.0, |e| e.saturating_duration_since(t0).as_secs_f64());
                if dt > 0.0 {
                    sample = Some((info.bytes_acked - acked0) as f64 / dt);
                }
                self.start = None;
            }
        }
        if !info.busy {
            self.start = None;
        }
        self.last_busy = info.busy.then_some(info.at);
        if self.start.is_none() && info.backlogged {
            self.start = Some((info.at, info.bytes_acked));
        }
        let rate = sample?;
        if self.rates.len() == PATH_SAMPLES {
            self.rates.pop_front();
        }
        self.rates.push_back(rate);
        let mut sorted: Vec<f64> = self.rates.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        Some(sorted[sorted.len() / 2])
    }
}

/// The two probe sizes (whole frames): one that measures the latency, one large enough
/// that the per-byte cost dominates its round trip. A round alternates them, and the
/// model comes from the fastest of each (see [`Prober::echo`]).
const PROBE_SMALL: usize = 64;
const PROBE_LARGE: usize = 64 << 10;
/// The large probe grows (4× at a time, up to this) while its round trip exceeds the
/// small one's by less than the small one's own or [`PROBE_MIN_EXCESS`]: on a fast link
/// a 64 KiB transfer is lost in the per-message overhead (and in when the peer's
/// threads happen to poll), and its per-byte figure would be noise. A link where even
/// the largest stays under is left to its configured or learned model.
const PROBE_LARGEST: usize = 1 << 20;
const PROBE_MIN_EXCESS: f64 = 1e-3;
/// How long a link too fast to measure goes without probes (on top of [`PROBE_EVERY`]).
const FAST_LINK_REST: Duration = Duration::from_secs(300);
/// Probes per calibration round, alternating small and large.
const PROBES_PER_ROUND: u32 = 8;
/// A link that keeps carrying traffic is calibrated again this often.
const PROBE_EVERY: Duration = Duration::from_secs(10);
/// A probe whose echo takes longer is forgotten; after [`PROBE_LOSSES`] such, the stage
/// stops probing (the peer does not answer).
const ECHO_TIMEOUT: Duration = Duration::from_secs(5);
const PROBE_LOSSES: u32 = 3;
/// Round trips kept per probe size.
const PROBE_SAMPLES: usize = 8;

/// Ping-pong calibration: what the link really costs per byte, measured
/// end to end through everything below the codec stage (an emulated WAN, the sockets,
/// the peer's reading), which a configured bandwidth does not include. Only links with
/// a configured model probe; links that learn from the kernel do not (see
/// [`CodecStage::learning_path`]). A round of probes starts only when application
/// frames go out, and each probe waits until the link is idle by the model and goes
/// only if it holds the link for less than half the application's usual pause, so it
/// neither keeps an idle link busy nor (mostly) queues ahead of data. On a link busy
/// with closely spaced frames the large probe never fits, and the link keeps its
/// configured or learned model.
#[derive(Debug)]
struct Prober {
    /// When the next probe goes (only while a round is under way and none is in flight).
    due: Option<Instant>,
    /// The probe awaiting its echo: (id, frame bytes, sent at).
    pending: Option<(u32, usize, Instant)>,
    next_id: u32,
    round_left: u32,
    last_round: Option<Instant>,
    lost: u32,
    small: VecDeque<f64>,
    /// Round trips of large probes of `large_size` bytes.
    large: VecDeque<f64>,
    large_size: usize,
    /// Bytes compression saved on this link and probes have not spent yet: a probe
    /// (and its echo) goes only when paid for, so calibration never makes the link
    /// carry more than it would without the codec stage.
    credit: u64,
    /// When the link (by its model) finished the last application frames, and the usual
    /// time it then stands idle before the next (moving average, seconds): a probe must
    /// fit well inside that pause, or the next frame would queue behind the probe. The
    /// pause, not the spacing of sends: a link busy 2.2 ms of every 2.9 ms has room for
    /// 0.7 ms, not 2.9.
    idle_since: Option<Instant>,
    gap_s: Option<f64>,
}

/// A probe's wire time may take at most this share of the application's usual pause.
const PROBE_GAP_SHARE: f64 = 0.5;

impl Prober {
    fn new() -> Prober {
        Prober {
            due: None,
            pending: None,
            next_id: 0,
            round_left: 0,
            last_round: None,
            lost: 0,
            small: VecDeque::new(),
            large: VecDeque::new(),
            large_size: PROBE_LARGE,
            credit: 0,
            idle_since: None,
            gap_s: None,
        }
    }

    /// Application traffic went out at `now`; the link is free again at `idle_at`.
    fn traffic(&mut self, now: Instant, idle_at: Instant) {
        if let Some(idle) = self.idle_since.replace(idle_at.max(now)) {
            // A frame sent while the link is still busy finds no pause at all.
            let gap = now.saturating_duration_since(idle).as_secs_f64();
            self.gap_s = Some(self.gap_s.map_or(gap, |g| g + 0.25 * (gap - g)));
        }
        if let Some((_, _, sent)) = self.pending {
            if now.saturating_duration_since(sent) < ECHO_TIMEOUT {
                return;
            }
            self.pending = None;
            self.lost += 1;
            self.round_left = 0;
            self.last_round = Some(sent);
        }
        if self.lost >= PROBE_LOSSES {
            return;
        }
        if self.round_left == 0
            && self
                .last_round
                .is_none_or(|t| now.saturating_duration_since(t) >= PROBE_EVERY)
        {
            self.round_left = PROBES_PER_ROUND;
        }
        if self.round_left > 0 && self.due.is_none() {
            self.due = Some(idle_at.max(now));
        }
    }

    /// The probe to send at `now` (its frame size and id), if one is due, the link is
    /// idle at `idle_at` and the credit pays for it; otherwise the probe waits for the
    /// link, or for the next application frame.
    fn take_due(
        &mut self,
        now: Instant,
        idle_at: Instant,
        wire_s: impl Fn(usize) -> f64,
    ) -> Option<(u32, usize)> {
        let due = self.due?;
        if due > now {
            return None;
        }
        if idle_at > now {
            self.due = Some(idle_at);
            return None;
        }
        self.due = None;
        let size = if self.round_left % 2 == 0 {
            PROBE_SMALL
        } else {
            self.large_size
        };
        // Frames that follow each other closely would wait behind it: the next frame
        // schedules it again, and a link too busy for it keeps its model.
        if self
            .gap_s
            .is_some_and(|gap| wire_s(size) > PROBE_GAP_SHARE * gap)
        {
            return None;
        }
        // Not paid for yet: the next application frame schedules it again.
        let cost = (size + HEADER_LEN) as u64;
        if self.credit < cost {
            return None;
        }
        self.credit -= cost;
        self.round_left = self.round_left.saturating_sub(1);
        self.next_id = self.next_id.wrapping_add(1);
        self.pending = Some((self.next_id, size, now));
        Some((self.next_id, size))
    }

    /// An echo arrived at `now`: returns the link's new model once both sizes have been
    /// timed. One-way times: a small probe's is half its round trip; a large one's, its
    /// round trip less the small probe's half (the echo is small too).
    fn echo(&mut self, id: u32, now: Instant) -> Option<LinkModel> {
        let (want, size, sent) = self.pending?;
        if id != want {
            return None;
        }
        self.pending = None;
        let rtt = now.saturating_duration_since(sent).as_secs_f64();
        let list = if size == PROBE_SMALL {
            &mut self.small
        } else if size == self.large_size {
            &mut self.large
        } else {
            return None;
        };
        if list.len() == PROBE_SAMPLES {
            list.pop_front();
        }
        list.push_back(rtt);
        if self.round_left > 0 {
            self.due = Some(now);
        } else {
            self.last_round = Some(now);
        }
        if size == PROBE_SMALL || self.small.is_empty() {
            return None;
        }
        // The fastest round trips: anything slower met a queue, a cold cache or a
        // descheduled peer, none of which is the link's own cost.
        let fastest = |v: &VecDeque<f64>| v.iter().copied().fold(f64::INFINITY, f64::min);
        let small = fastest(&self.small);
        if rtt - small < small.max(PROBE_MIN_EXCESS) {
            // Bytes cannot be told from overhead: measure a larger probe next, or, at
            // the largest, leave the model alone (the link is too fast to matter).
            if size < PROBE_LARGEST {
                self.large_size = (size * 4).min(PROBE_LARGEST);
                self.large.clear();
                if self.round_left == 0 {
                    self.round_left = 2;
                    self.due = Some(now);
                }
            } else {
                // Probing costs this link more than it can tell: rest for a long while.
                self.round_left = 0;
                self.due = None;
                self.last_round = Some(now + FAST_LINK_REST);
            }
            return None;
        }
        let samples = [
            (PROBE_SMALL, small / 2.0),
            (size, (fastest(&self.large) - small / 2.0).max(0.0)),
        ];
        LinkModel::from_calibration(&samples).ok()
    }
}

/// A probe or echo frame of `size` bytes in all.
fn probe_frame(kind: FrameKind, id: u32, tag: i32, size: usize) -> Bytes {
    let body = size.saturating_sub(HEADER_LEN);
    let mut b = BytesMut::with_capacity(HEADER_LEN + body);
    encode_header(kind, 0, id, tag, body, &mut b);
    b.resize(HEADER_LEN + body, 0);
    b.freeze()
}

/// Nanoseconds since the first call: the adaptive engine's clock.
fn monotonic_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl CodecStage {
    /// A stage in `mode` on a link whose speed is `model` (latency and bandwidth, from
    /// the link's configuration or a calibration); `max_frame` bounds decoded payloads.
    pub fn new(
        mode: CodecMode,
        model: LinkModel,
        options: LinkOptions,
        max_frame: usize,
        settings: &StageSettings,
    ) -> Result<CodecStage, CodecError> {
        let config = settings.engine.clone();
        let min_size = config.min_size;
        let link = LinkKey(0);
        let engine = match mode {
            CodecMode::Adaptive => {
                let mut e = Engine::new(config)?;
                e.set_clock(monotonic_ns);
                for (elem, measures) in settings.calibration.iter().flat_map(|c| &c.per_elem) {
                    e.calibrate_codecs(*elem, measures);
                }
                e.set_link_model(link, model);
                e.set_link_options(link, options);
                Some(e)
            }
            _ => None,
        };
        let prober = engine.is_some().then(Prober::new);
        Ok(CodecStage {
            mode,
            engine,
            link,
            min_size,
            max_frame,
            scratch: Vec::new(),
            recorder: settings.samples.as_ref().map(SampleRecorder::new),
            wire_free_at: None,
            learned: None,
            decoded: Vec::new(),
            last_report: None,
            report_at: None,
            prober,
            echoes: Vec::new(),
            echo_since: None,
            counters: StageCounters::default(),
        })
    }

    /// Learns the link's latency and bandwidth from the connection's path readings
    /// (`Stage::path_info`) instead of keeping the model it was made with: for links
    /// between sites that no configuration describes. Until a reading shows the path
    /// busy, the given model stands.
    pub fn learning_path(mut self) -> CodecStage {
        self.learned = Some(LearnedPath::default());
        // Probes would time the peer's and this process's threads as much as the link:
        // a round trip ends only when a thread next polls, which on a fast link takes
        // longer than the transfer. The kernel's readings are free of that.
        self.prober = None;
        self
    }

    /// The link model the adaptive engine uses now, if adaptive.
    pub fn link_model(&self) -> Option<&LinkModel> {
        self.engine.as_ref()?.link_model(self.link)
    }

    pub fn mode(&self) -> &CodecMode {
        &self.mode
    }

    /// Seconds of frames still queued ahead on the link at `now`, by the link's model.
    fn backlog_at(&self, now: Instant) -> f64 {
        self.wire_free_at
            .map_or(0.0, |t| t.saturating_duration_since(now).as_secs_f64())
    }

    /// Passes `frame` on and advances the link's clock: it leaves once compressed
    /// (`ready`) and after the frames ahead of it, and holds the link for its wire time.
    fn emit(&mut self, ready: Instant, frame: Bytes, out: &mut Vec<Bytes>) {
        self.counters.bytes_on_wire += frame.len() as u64;
        if let Some(model) = self.engine.as_ref().and_then(|e| e.link_model(self.link)) {
            let start = self.wire_free_at.map_or(ready, |t| t.max(ready));
            let hold = model.wire_time(frame.len() as f64);
            self.wire_free_at = Some(start + Duration::from_secs_f64(hold.clamp(0.0, 3600.0)));
        }
        out.push(frame);
    }

    /// Adds one decompression to what the next report says.
    fn note_decoded(
        &mut self,
        codec: crate::CodecId,
        elem: ElemKind,
        bytes: usize,
        took: Duration,
    ) {
        if codec == crate::CodecId::None {
            return;
        }
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        if let Some(r) = self
            .decoded
            .iter_mut()
            .find(|r| r.codec == codec && r.elem == elem)
        {
            r.bytes = r.bytes.saturating_add(bytes as u64);
            r.nanos = r.nanos.saturating_add(nanos);
        } else if self.decoded.len() < MAX_RECORDS {
            self.decoded.push(DecodeReport {
                codec,
                elem,
                bytes: bytes as u64,
                nanos,
            });
        }
    }

    /// Sends a report of the decompressions since the last one if it is due (at most
    /// every [`REPORT_EVERY`]). Only a stage that has decoded frames reports, so a peer
    /// gets reports only if its own stage compresses (and reads them).
    fn report_due(&mut self, now: Instant, out: &mut Vec<Bytes>) {
        if self.decoded.is_empty() || self.report_at.is_none_or(|t| now < t) {
            return;
        }
        self.last_report = Some(now);
        self.report_at = None;
        let mut body = Vec::with_capacity(self.decoded.len() * crate::report::RECORD_LEN);
        encode_reports(&self.decoded, &mut body);
        self.decoded.clear();
        let mut b = BytesMut::with_capacity(HEADER_LEN + body.len());
        encode_header(FrameKind::CodecReport, 0, 0, 0, body.len(), &mut b);
        b.put_slice(&body);
        self.counters.bytes_on_wire += b.len() as u64;
        out.push(b.freeze());
    }

    /// An outgoing frame: compressed if the mode says so, passed on either way.
    fn send(&mut self, now: Instant, frame: Bytes, out: &mut Vec<Bytes>) {
        self.report_due(now, out);
        self.counters.frames_out += 1;
        self.counters.bytes_in += frame.len() as u64;
        let pass = frame.len() <= HEADER_LEN
            || !is_app(frame[2])
            || frame[3] & (FLAG_CODEC | FLAG_RAW) != 0;
        if pass {
            return self.emit(now, frame, out);
        }
        let (flags, payload) = (frame[3], &frame[HEADER_LEN..]);
        let (elem, span) = typed_span(frame[2], flags, payload);
        let body = &payload[span.clone()];
        let key = MessageKey {
            kind: frame[2],
            elem,
            stream: u32::from_le_bytes([frame[8], frame[9], frame[10], frame[11]]),
            tag: i32::from_le_bytes([frame[12], frame[13], frame[14], frame[15]]),
            len: u32::try_from(payload.len()).unwrap_or(u32::MAX),
        };
        if let Some(r) = self.recorder.as_mut() {
            r.record(key, body);
        }
        let backlog_s = self.backlog_at(now);
        let codec = self.choose(&key, body, backlog_s);
        if codec == Codec::None {
            return self.emit(now, frame, out);
        }
        self.scratch.clear();
        let t0 = Instant::now();
        let header = encode_span(codec, elem, payload, span, &mut self.scratch);
        let compress = t0.elapsed();
        let compressed = header.codec != crate::CodecId::None;
        if let Some(e) = self.engine.as_mut() {
            let run = CodecRun {
                codec,
                elem,
                in_bytes: body.len(),
                out_bytes: if compressed {
                    self.scratch.len() - (payload.len() - body.len())
                } else {
                    body.len()
                },
                compress_s: compress.as_secs_f64(),
                decompress_s: None,
            };
            e.observe_sent_behind(self.link, &run, backlog_s);
        }
        let ready = now + compress;
        if !compressed {
            // The codec did not shrink it: the original frame, unflagged, costs less.
            return self.emit(ready, frame, out);
        }
        let kind = FrameKind::from_u8(frame[2]).expect("checked by is_app");
        let stream = u32::from_le_bytes([frame[8], frame[9], frame[10], frame[11]]);
        let tag = i32::from_le_bytes([frame[12], frame[13], frame[14], frame[15]]);
        let mut b = BytesMut::with_capacity(HEADER_LEN + self.scratch.len());
        encode_header(
            kind,
            flags | FLAG_CODEC,
            stream,
            tag,
            self.scratch.len(),
            &mut b,
        );
        b.put_slice(&self.scratch);
        self.counters.compressed += 1;
        if let Some(p) = self.prober.as_mut() {
            p.credit += (frame.len() - b.len()) as u64;
        }
        self.emit(ready, b.freeze(), out);
    }

    fn choose(&mut self, key: &MessageKey, payload: &[u8], backlog_s: f64) -> Codec {
        let elem = key.elem;
        match &self.mode {
            CodecMode::Off => Codec::None,
            CodecMode::Guided { plan, .. } => match plan.codec_for(key) {
                c if c.supports(elem) => c,
                _ => Codec::None,
            },
            CodecMode::Fixed(c) if payload.len() >= self.min_size && c.supports(elem) => *c,
            CodecMode::Fixed(_) => Codec::None,
            CodecMode::Adaptive => match self.engine.as_mut() {
                Some(e) => e.decide_behind(self.link, elem, payload, backlog_s).codec,
                None => Codec::None,
            },
        }
    }
}

/// The element type of an application frame's payload and the bytes it covers: the
/// sender's hint from the flags, or, for a tree packet without one, its dominant array.
fn typed_span(kind: u8, flags: u8, payload: &[u8]) -> (ElemKind, std::ops::Range<usize>) {
    let hint = elem_hint(flags);
    if hint != ElemKind::BYTES || kind != FrameKind::Data as u8 {
        return (hint, 0..payload.len());
    }
    vargr_wire::array_span(payload)
        .and_then(|(e, r)| Some((e.kind()?, r)))
        .unwrap_or((ElemKind::BYTES, 0..payload.len()))
}

/// Frames the codec may compress: application data, and a dedup stage's stream (new
/// segments cross inside it).
fn is_app(kind: u8) -> bool {
    kind == FrameKind::Data as u8
        || kind == FrameKind::PointToPoint as u8
        || kind == FrameKind::Dedup as u8
}

impl Stage for CodecStage {
    fn name(&self) -> &str {
        "codec"
    }

    fn outbound(&mut self, now: Instant, frame: Bytes, out: &mut Vec<Bytes>) {
        let app = frame.len() > HEADER_LEN && is_app(frame[2]);
        self.send(now, frame, out);
        if let (true, Some(p)) = (app, self.prober.as_mut()) {
            p.traffic(now, self.wire_free_at.unwrap_or(now));
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let probe = self.prober.as_ref().and_then(|p| p.due);
        [self.echo_since, probe, self.report_at]
            .into_iter()
            .flatten()
            .min()
    }

    fn release(&mut self, now: Instant, out: &mut Vec<Bytes>) {
        self.report_due(now, out);
        self.echo_since = None;
        for echo in std::mem::take(&mut self.echoes) {
            self.emit(now, echo, out);
        }
        let idle_at = self.wire_free_at.unwrap_or(now);
        let model = self.engine.as_ref().and_then(|e| e.link_model(self.link));
        let wire_s = |size: usize| model.map_or(0.0, |m| m.wire_time(size as f64));
        if let Some((id, size)) = self
            .prober
            .as_mut()
            .and_then(|p| p.take_due(now, idle_at, wire_s))
        {
            self.emit(now, probe_frame(FrameKind::CodecProbe, id, 0, size), out);
        }
    }

    fn wants_path(&self) -> bool {
        self.learned.is_some() && self.engine.is_some()
    }

    fn path_info(&mut self, info: &vargr_stage::PathInfo) {
        let (Some(learned), Some(engine)) = (self.learned.as_mut(), self.engine.as_mut()) else {
            return;
        };
        let Some(rate) = learned.observe(info) else {
            return;
        };
        let latency = info.min_rtt.as_secs_f64() / 2.0;
        let model = (latency, rate);
        // Rebuilding the model forgets nothing learned elsewhere (nothing else feeds
        // it), but skip readings that change it by less than 5 %.
        let close = |a: f64, b: f64| (a - b).abs() <= 0.05 * b.max(1e-9);
        if learned
            .applied
            .is_some_and(|(l, r)| close(l, latency) && close(r, rate))
        {
            return;
        }
        learned.applied = Some(model);
        engine.set_link_model(self.link, LinkModel::new(latency, rate));
    }

    fn inbound(&mut self, now: Instant, frame: Frame, out: &mut Vec<Frame>) -> Result<(), String> {
        match frame.kind {
            FrameKind::CodecProbe => {
                let size = i32::try_from(frame.payload.len() + HEADER_LEN).unwrap_or(i32::MAX);
                let echo = probe_frame(FrameKind::CodecEcho, frame.stream, size, HEADER_LEN);
                self.echoes.push(echo);
                self.echo_since.get_or_insert(now);
                return Ok(());
            }
            FrameKind::CodecEcho => {
                let model = self.prober.as_mut().and_then(|p| p.echo(frame.stream, now));
                if let (Some(m), Some(e)) = (model, self.engine.as_mut()) {
                    e.set_link_model(self.link, m);
                }
                return Ok(());
            }
            _ => {}
        }
        if frame.kind == FrameKind::CodecReport {
            let records = decode_reports(&frame.payload)
                .map_err(|e| format!("CodecReport frame from the peer's codec stage: {e}"))?;
            if let Some(e) = self.engine.as_mut() {
                for r in records {
                    let secs = r.nanos as f64 * 1e-9;
                    let bytes = usize::try_from(r.bytes).unwrap_or(usize::MAX);
                    e.observe_decompress_id(self.link, r.codec, r.elem, bytes, secs);
                }
            }
            return Ok(());
        }
        if frame.flags & FLAG_CODEC == 0 {
            out.push(frame);
            return Ok(());
        }
        let mut payload = Vec::new();
        let t0 = Instant::now();
        let header = decode(&frame.payload, self.max_frame, &mut payload).map_err(|e| {
            format!(
                "{} frame on stream {}: {e}",
                frame.kind.name(),
                frame.stream
            )
        })?;
        self.counters.frames_decoded += 1;
        self.note_decoded(header.codec, header.elem, payload.len(), t0.elapsed());
        if !self.decoded.is_empty() && self.report_at.is_none() {
            let next = self.last_report.map_or(now, |t| t + REPORT_EVERY);
            self.report_at = Some(next.max(now));
        }
        let mut f = Frame::new(frame.kind, frame.stream, frame.tag, payload);
        f.flags = frame.flags & !FLAG_CODEC;
        out.push(f);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode, testdata};
    use vargr_wire::elem_flags;

    /// What a link policy gives the stages of a process: defaults, and this machine's
    /// codec speeds (measured once for all tests).
    fn test_stage(
        mode: CodecMode,
        model: LinkModel,
        options: LinkOptions,
        max_frame: usize,
    ) -> Result<CodecStage, CodecError> {
        static CALIBRATION: OnceLock<Arc<Calibration>> = OnceLock::new();
        let calibration = CALIBRATION
            .get_or_init(|| Arc::new(Calibration::measure(&EngineConfig::default().candidates)));
        let settings = StageSettings {
            calibration: Some(calibration.clone()),
            ..StageSettings::default()
        };
        CodecStage::new(mode, model, options, max_frame, &settings)
    }

    fn frame(kind: FrameKind, flags: u8, payload: &[u8]) -> Bytes {
        let mut b = BytesMut::new();
        encode_header(kind, flags, 7, -3, payload.len(), &mut b);
        b.put_slice(payload);
        b.freeze()
    }

    /// Sends `f` through `tx`, then what came out through `rx`'s inbound side.
    fn round_trip(tx: &mut CodecStage, rx: &mut CodecStage, f: Bytes) -> (Vec<Bytes>, Vec<Frame>) {
        let now = Instant::now();
        let mut wire = Vec::new();
        tx.outbound(now, f, &mut wire);
        let mut got = Vec::new();
        for w in &wire {
            let fr = vargr_wire::decode_exact(w, 1 << 26).unwrap();
            rx.inbound(now, fr, &mut got).unwrap();
        }
        (wire, got)
    }

    fn slow_link() -> LinkModel {
        LinkModel::new(1e-3, 12.5e6)
    }

    #[test]
    fn modes_parse_and_print() {
        for m in [
            "off",
            "adaptive",
            "fixed:lz4",
            "fixed:zstd:3",
            "fixed:fpc:16",
        ] {
            assert_eq!(m.parse::<CodecMode>().unwrap().to_string(), m);
        }
        assert!("fixed:nope".parse::<CodecMode>().is_err());
        assert!("sometimes".parse::<CodecMode>().is_err());
    }

    #[test]
    fn compressible_frames_shrink_on_the_wire_and_come_back_whole() {
        // A piecewise-constant field: runs for LZ4, predictable values for FPC.
        let values: Vec<f64> = (0..32_768).map(|i| f64::from(i / 64) * 0.125).collect();
        let field = testdata::f64_bytes(&values);
        let f = frame(FrameKind::PointToPoint, elem_flags(ElemKind::F64), &field);
        for mode in ["fixed:lz4", "fixed:fpc:16", "adaptive"] {
            let mode: CodecMode = mode.parse().unwrap();
            let mut tx =
                test_stage(mode.clone(), slow_link(), LinkOptions::default(), 1 << 26).unwrap();
            let mut rx =
                test_stage(mode.clone(), slow_link(), LinkOptions::default(), 1 << 26).unwrap();
            let (wire, got) = round_trip(&mut tx, &mut rx, f.clone());
            assert!(
                wire[0].len() < f.len() / 2,
                "{mode}: {} bytes",
                wire[0].len()
            );
            assert_eq!(wire[0][3] & FLAG_CODEC, FLAG_CODEC);
            assert_eq!(got.len(), 1);
            assert_eq!(&got[0].payload[..], &field[..], "{mode}");
            assert_eq!((got[0].stream, got[0].tag), (7, -3));
            assert_eq!(elem_hint(got[0].flags), ElemKind::F64);
            assert_eq!(got[0].flags & FLAG_CODEC, 0);
            assert_eq!(tx.counters.compressed, 1);
        }
    }

    #[test]
    fn a_tree_packets_array_is_compressed_as_its_own_type() {
        use vargr_wire::{Packet, Value};
        // FPC predicts a smooth series; the packet's header puts it 18 bytes in.
        let values: Vec<f64> = (0..16_384).map(|i| f64::from(i).sqrt()).collect();
        let p = Packet::new(
            7,
            -3,
            "%d %alf",
            vec![Value::Int(5), Value::DoubleArray(values)],
        )
        .unwrap();
        let payload = p.to_frame().payload;
        let f = frame(FrameKind::Data, 0, &payload);
        let mode: CodecMode = "fixed:fpc:16".parse().unwrap();
        let mut tx =
            test_stage(mode.clone(), slow_link(), LinkOptions::default(), 1 << 26).unwrap();
        let mut rx = test_stage(mode, slow_link(), LinkOptions::default(), 1 << 26).unwrap();
        let (wire, got) = round_trip(&mut tx, &mut rx, f.clone());
        let (header, _) = crate::Header::parse(&wire[0][HEADER_LEN..]).unwrap();
        assert_eq!(header.elem, ElemKind::F64);
        assert_eq!(header.span.map(|s| s.start), Some(4 + 2 + 7 + 4 + 4));
        assert!(wire[0].len() < f.len() * 3 / 4, "{} bytes", wire[0].len());
        assert_eq!(&got[0].payload[..], &payload[..]);
        assert_eq!(got[0].flags, 0);
    }

    #[test]
    fn the_stage_tracks_what_its_link_still_has_to_send() {
        let mut tx = test_stage(
            CodecMode::Adaptive,
            LinkModel::new(1e-3, 1e6),
            LinkOptions::default(),
            1 << 24,
        )
        .unwrap();
        let now = Instant::now();
        assert_eq!(tx.backlog_at(now), 0.0);
        let mut wire = Vec::new();
        for seed in 0..3 {
            let data = testdata::text_like(1 << 18, seed);
            tx.outbound(now, frame(FrameKind::PointToPoint, 0, &data), &mut wire);
        }
        // At 1 MB/s the frames hold the link for their length in µs, one after another.
        let sent: usize = wire.iter().map(|w| w.len()).sum();
        let backlog = tx.backlog_at(now);
        assert!(
            backlog >= sent as f64 / 1e6 && backlog < sent as f64 / 1e6 + 1.0,
            "{backlog} s for {sent} bytes"
        );
        assert!(tx.backlog_at(now + Duration::from_secs(60)) == 0.0);
    }

    /// Sends `probe` (a frame `tx` released) over a link that takes `one_way` for a frame
    /// of n bytes, through `rx`, and the echo back; returns when the echo arrived.
    fn probe_round_trip(
        tx: &mut CodecStage,
        rx: &mut CodecStage,
        sent: Instant,
        probe: &Bytes,
        one_way: impl Fn(usize) -> Duration,
    ) -> Instant {
        let arrive = sent + one_way(probe.len());
        let mut up = Vec::new();
        let f = vargr_wire::decode_exact(probe, 1 << 20).unwrap();
        assert_eq!(f.kind, FrameKind::CodecProbe);
        rx.inbound(arrive, f, &mut up).unwrap();
        assert!(up.is_empty(), "a probe is not passed to the node");
        assert!(rx.next_deadline().is_some_and(|d| d <= arrive));
        let mut back = Vec::new();
        rx.release(arrive, &mut back);
        assert_eq!(back.len(), 1);
        assert_eq!(rx.next_deadline(), None);
        let echo = vargr_wire::decode_exact(&back[0], 1 << 20).unwrap();
        assert_eq!(echo.kind, FrameKind::CodecEcho);
        let home = arrive + one_way(back[0].len());
        tx.inbound(home, echo, &mut up).unwrap();
        assert!(up.is_empty(), "an echo is not passed to the node");
        home
    }

    /// Runs the probes `tx` sends until it has none due; returns their sizes and the
    /// time the last echo came back.
    fn calibrate(
        tx: &mut CodecStage,
        rx: &mut CodecStage,
        t0: Instant,
        one_way: impl Fn(usize) -> Duration + Copy,
    ) -> (Vec<usize>, Instant) {
        let mut now = t0;
        let mut sizes = Vec::new();
        while let Some(due) = tx.next_deadline() {
            now = now.max(due);
            let mut out = Vec::new();
            tx.release(now, &mut out);
            assert_eq!(out.len(), 1);
            sizes.push(out[0].len());
            now = probe_round_trip(tx, rx, now, &out[0], one_way);
        }
        (sizes, now)
    }

    /// A stage whose compression has already saved more than any test's probes cost.
    fn paid(mut s: CodecStage) -> CodecStage {
        s.prober.as_mut().expect("an adaptive stage").credit = 1 << 40;
        s
    }

    /// A prober whose probes are paid for, and when it was made.
    fn paid_prober() -> (Prober, Instant) {
        let mut p = Prober::new();
        p.credit = 1 << 40;
        (p, Instant::now())
    }

    /// A probe's wire time at 100 Mbit/s: a 64 KiB one holds the link for 5.2 ms.
    fn wire_100mbit(n: usize) -> f64 {
        n as f64 / 12.5e6
    }

    #[test]
    fn a_probe_goes_only_where_it_fits_between_application_frames() {
        let (mut p, t0) = paid_prober();
        let (wire, ms) = (wire_100mbit, |k: u64| t0 + Duration::from_millis(k));
        // Frames every 2 ms: the small probe fits, the large one would delay the next.
        for k in 0..6 {
            p.traffic(ms(2 * k), ms(2 * k));
        }
        let (id, size) = p.take_due(ms(10), ms(10), wire).expect("the small probe");
        assert_eq!(size, PROBE_SMALL);
        p.echo(id, ms(11));
        assert_eq!(p.take_due(ms(11), ms(11), wire), None);
        // Frames 50 ms apart: once the usual pause has grown, the large one goes.
        let mut sent = None;
        for k in 1..20 {
            let t = ms(11 + 50 * k);
            p.traffic(t, t);
            if let Some(probe) = p.take_due(t, t, wire) {
                sent = Some(probe);
                break;
            }
        }
        assert_eq!(sent.map(|(_, size)| size), Some(PROBE_LARGE));
    }

    #[test]
    fn a_link_busy_between_sparse_frames_has_no_room_for_the_large_probe() {
        // Frames 50 ms apart that each hold the 100 Mbit/s link for 47 ms leave 3 ms of
        // pause, too little for a 5.2 ms probe: only the small ones go.
        let (mut p, t0) = paid_prober();
        let (wire, ms) = (wire_100mbit, |k: u64| t0 + Duration::from_millis(k));
        let mut sizes = Vec::new();
        for k in 0..40 {
            let (sent, idle) = (ms(50 * k), ms(50 * k + 47));
            p.traffic(sent, idle);
            if let Some((id, size)) = p.take_due(idle, idle, wire) {
                sizes.push(size);
                p.echo(id, idle + Duration::from_millis(1));
            }
        }
        assert!(sizes.contains(&PROBE_SMALL), "{sizes:?}");
        assert!(!sizes.contains(&PROBE_LARGE), "{sizes:?}");
    }

    #[test]
    fn probes_go_only_once_compression_has_saved_what_they_cost() {
        let mut tx = test_stage(
            CodecMode::Fixed(Codec::Lz4),
            slow_link(),
            LinkOptions::default(),
            1 << 20,
        )
        .unwrap();
        // A fixed stage has no prober; give this one an adaptive stage's.
        tx.prober = Some(Prober::new());
        let t0 = Instant::now();
        let mut wire = Vec::new();
        // Nothing saved yet: the probe falls due but does not go.
        tx.outbound(t0, frame(FrameKind::Data, 0, &[7u8; 100]), &mut wire);
        let due = tx.next_deadline().expect("a probe is due");
        let mut out = Vec::new();
        tx.release(due, &mut out);
        assert!(out.is_empty(), "an unpaid probe went out");
        assert_eq!(tx.next_deadline(), None);
        // A compressed frame that saves more than a small probe and its echo.
        tx.outbound(due, frame(FrameKind::Data, 0, &[7u8; 4096]), &mut wire);
        assert!(tx.counters.compressed > 0);
        let due = tx.next_deadline().expect("a probe is due");
        tx.release(due, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].len(), PROBE_SMALL);
    }

    #[test]
    fn on_fast_links_the_large_probe_grows_until_bytes_show_above_the_overhead() {
        let configured = link_model(Duration::ZERO, None);
        let stage = |mode| test_stage(mode, configured.clone(), LinkOptions::default(), 1 << 20);
        // 2 ns per byte: 64 and 256 KiB stay under a millisecond; 1 MiB does not.
        let (mut tx, mut rx) = (
            paid(stage(CodecMode::Adaptive).unwrap()),
            stage(CodecMode::Off).unwrap(),
        );
        let t0 = Instant::now();
        tx.outbound(t0, frame(FrameKind::Data, 0, &[1u8; 100]), &mut Vec::new());
        let one_way = |n: usize| Duration::from_micros(10) + Duration::from_nanos(2 * n as u64);
        let (sizes, _) = calibrate(&mut tx, &mut rx, t0, one_way);
        assert!(
            sizes.contains(&(256 << 10)) && sizes.contains(&PROBE_LARGEST),
            "{sizes:?}"
        );
        let beta = tx.link_model().unwrap().per_byte_s(1 << 20);
        assert!((beta - 2e-9).abs() < 2e-10, "{beta}");
        // 0.2 ns per byte: even the largest probe shows nothing; the model stays.
        let (mut tx, mut rx) = (
            paid(stage(CodecMode::Adaptive).unwrap()),
            stage(CodecMode::Off).unwrap(),
        );
        tx.outbound(t0, frame(FrameKind::Data, 0, &[1u8; 100]), &mut Vec::new());
        let one_way = |n: usize| Duration::from_micros(10) + Duration::from_nanos(n as u64 / 5);
        let (sizes, end) = calibrate(&mut tx, &mut rx, t0, one_way);
        assert_eq!(
            sizes.iter().filter(|&&n| n == PROBE_LARGEST).count(),
            1,
            "{sizes:?}"
        );
        assert_eq!(tx.link_model(), Some(&configured));
        // Such a link is left alone for longer than a busy link's usual interval.
        let later = end + 2 * PROBE_EVERY;
        tx.outbound(
            later,
            frame(FrameKind::Data, 0, &[1u8; 100]),
            &mut Vec::new(),
        );
        assert_eq!(tx.next_deadline(), None);
    }

    #[test]
    fn probes_measure_what_the_link_really_costs_and_only_after_traffic() {
        // Configured as 1 Gbit/s with 100 µs; really 1 ms and 100 ns per byte.
        let configured = link_model(Duration::from_micros(100), Some(1_000_000_000));
        let one_way = |n: usize| Duration::from_micros(1000) + Duration::from_nanos(100 * n as u64);
        let stage = |mode| test_stage(mode, configured.clone(), LinkOptions::default(), 1 << 20);
        let mut tx = paid(stage(CodecMode::Adaptive).unwrap());
        // The peer answers probes whatever its own mode.
        let mut rx = stage(CodecMode::Off).unwrap();
        let t0 = Instant::now();
        assert_eq!(tx.next_deadline(), None, "an idle link is not probed");
        let mut wire = Vec::new();
        tx.outbound(t0, frame(FrameKind::Data, 0, &[1u8; 100]), &mut wire);
        assert_eq!(wire.len(), 1);
        let (sizes, now) = calibrate(&mut tx, &mut rx, t0, one_way);
        assert_eq!(sizes.len(), PROBES_PER_ROUND as usize);
        assert!(
            sizes.chunks(2).all(|p| p == [PROBE_SMALL, PROBE_LARGE]),
            "{sizes:?}"
        );
        let m = tx.link_model().unwrap();
        let beta = m.per_byte_s(1 << 20);
        assert!((beta - 100e-9).abs() < 5e-9, "{m:?}");
        assert!((m.latency_s() - 1e-3).abs() < 5e-5, "{m:?}");
        // More traffic soon after starts no new round; traffic after a while does.
        tx.outbound(now, frame(FrameKind::Data, 0, &[1u8; 100]), &mut wire);
        assert_eq!(tx.next_deadline(), None);
        let later = now + PROBE_EVERY;
        tx.outbound(later, frame(FrameKind::Data, 0, &[1u8; 100]), &mut wire);
        assert!(tx.next_deadline().is_some());
        // Stages that do not adapt never probe.
        let mut fixed = stage(CodecMode::Fixed(Codec::Lz4)).unwrap();
        fixed.outbound(t0, frame(FrameKind::Data, 0, &[1u8; 100]), &mut wire);
        assert_eq!(fixed.next_deadline(), None);
    }

    #[test]
    fn a_peer_that_never_echoes_is_probed_a_few_times_then_left_alone() {
        let mut tx = paid(
            test_stage(
                CodecMode::Adaptive,
                slow_link(),
                LinkOptions::default(),
                1 << 20,
            )
            .unwrap(),
        );
        let mut now = Instant::now();
        let mut wire = Vec::new();
        for _ in 0..PROBE_LOSSES {
            tx.outbound(now, frame(FrameKind::Data, 0, &[1u8; 100]), &mut wire);
            let due = tx.next_deadline().expect("a probe is due");
            let mut out = Vec::new();
            tx.release(due, &mut out);
            assert_eq!(out.len(), 1);
            now = due + PROBE_EVERY + ECHO_TIMEOUT;
        }
        tx.outbound(now, frame(FrameKind::Data, 0, &[1u8; 100]), &mut wire);
        assert_eq!(tx.next_deadline(), None);
        assert_eq!(tx.link_model(), Some(&slow_link()));
    }

    #[test]
    fn a_learning_stage_measures_what_its_busy_path_carried() {
        let fast = link_model(Duration::ZERO, None);
        let stage = || {
            test_stage(
                CodecMode::Adaptive,
                fast.clone(),
                LinkOptions::default(),
                1 << 20,
            )
            .unwrap()
        };
        let t0 = Instant::now();
        let reading = |ms: u64, acked: u64, busy: bool, backlogged: bool| vargr_stage::PathInfo {
            min_rtt: Duration::from_millis(2),
            busy,
            backlogged,
            bytes_acked: acked,
            at: t0 + Duration::from_millis(ms),
        };
        let mut learner = stage().learning_path();
        assert!(learner.wants_path() && !stage().wants_path());
        // Bytes wait in the socket at 0 ms; 100 kB are acknowledged by 100 ms: 1 MB/s.
        learner.path_info(&reading(0, 0, true, true));
        assert_eq!(learner.link_model(), Some(&fast));
        learner.path_info(&reading(50, 0, true, false));
        learner.path_info(&reading(100, 100_000, true, false));
        let m = learner.link_model().unwrap().clone();
        assert!((m.latency_s() - 1e-3).abs() < 1e-9, "{m:?}");
        assert!((m.transfer_time(1e6) - 1.001).abs() < 0.01, "{m:?}");
        // An idle reading abandons a measurement: an application pause is not a slow path.
        learner.path_info(&reading(200, 100_000, true, true));
        learner.path_info(&reading(300, 100_000, false, false));
        learner.path_info(&reading(5000, 110_000, true, false));
        assert_eq!(learner.link_model(), Some(&m));
        // Without bytes waiting in the socket nothing starts either.
        learner.path_info(&reading(6000, 110_000, true, false));
        learner.path_info(&reading(9000, 120_000, true, false));
        assert_eq!(learner.link_model(), Some(&m));
        // A burst whose acknowledgements all arrive at its end (they queued behind the
        // data): it ended between the last busy reading and the idle one, 95 ms in.
        let mut lumped = stage().learning_path();
        lumped.path_info(&reading(0, 0, true, true));
        lumped.path_info(&reading(50, 0, true, false));
        lumped.path_info(&reading(90, 0, true, false));
        lumped.path_info(&reading(100, 95_000, false, false));
        let m = lumped.link_model().unwrap().clone();
        assert!((m.transfer_time(1e6) - 1.001).abs() < 0.01, "{m:?}");
        // Not when the idle reading is long after the last busy one: the burst may have
        // ended anywhere in between.
        let mut late = stage().learning_path();
        late.path_info(&reading(0, 0, true, true));
        late.path_info(&reading(20, 0, true, false));
        late.path_info(&reading(100, 95_000, false, false));
        assert_eq!(late.link_model(), Some(&fast));
        // It learns from the kernel alone: no probes.
        learner.outbound(t0, frame(FrameKind::Data, 0, &[1u8; 100]), &mut Vec::new());
        assert_eq!(learner.next_deadline(), None);
        // A stage whose model was given keeps it.
        let mut told = stage();
        told.path_info(&reading(0, 0, true, true));
        told.path_info(&reading(100, 100_000, true, false));
        assert_eq!(told.link_model(), Some(&fast));
    }

    /// An adaptive stage on a slow link and the plain stage that decodes for it.
    fn compressing_pair() -> (CodecStage, CodecStage) {
        let tx = test_stage(
            CodecMode::Adaptive,
            slow_link(),
            LinkOptions::default(),
            1 << 24,
        )
        .unwrap();
        let rx = test_stage(CodecMode::Off, slow_link(), LinkOptions::default(), 1 << 24).unwrap();
        (tx, rx)
    }

    /// 512 KiB of a step function in f64: every codec compresses it.
    fn steps_f64() -> Vec<u8> {
        let values: Vec<f64> = (0..65_536).map(|i| f64::from(i / 64) * 0.125).collect();
        testdata::f64_bytes(&values)
    }

    #[test]
    fn the_receiver_reports_decompression_times_to_the_sender() {
        let (mut tx, mut rx) = compressing_pair();
        let data = steps_f64();
        let (wire, got) = round_trip(
            &mut tx,
            &mut rx,
            frame(FrameKind::Data, elem_flags(ElemKind::F64), &data),
        );
        assert!(wire[0][3] & FLAG_CODEC != 0, "not compressed");
        assert_eq!(got[0].payload, data);
        let codec = tx
            .engine
            .as_ref()
            .unwrap()
            .summary(tx.link, ElemKind::F64)
            .unwrap();
        let codec = codec.codec.unwrap();
        let td = |s: &CodecStage| {
            s.engine
                .as_ref()
                .unwrap()
                .codec_stats(codec, crate::DataClass::F64)
                .unwrap()
                .decompress_s_per_byte
        };
        let before = td(&tx);
        // The receiver's next frame carries a report first; the sender consumes it.
        let (back, delivered) = round_trip(&mut rx, &mut tx, frame(FrameKind::Data, 0, b"ack"));
        assert_eq!(back.len(), 2);
        assert_eq!(back[0][2], FrameKind::CodecReport as u8);
        assert_eq!(delivered.len(), 1);
        assert_eq!(&delivered[0].payload[..], b"ack");
        assert_ne!(td(&tx), before);
        // Reported once: the next frame goes alone.
        let (back, _) = round_trip(&mut rx, &mut tx, frame(FrameKind::Data, 0, b"ack"));
        assert_eq!(back.len(), 1);
        // A damaged report is an error naming it.
        let mut bad = BytesMut::new();
        encode_header(FrameKind::CodecReport, 0, 0, 0, 5, &mut bad);
        bad.put_slice(b"12345");
        let f = vargr_wire::decode_exact(&bad, 1 << 20).unwrap();
        let err = tx.inbound(Instant::now(), f, &mut Vec::new()).unwrap_err();
        assert!(err.contains("CodecReport"), "{err}");
    }

    #[test]
    fn a_receiver_that_sends_nothing_reports_at_its_own_deadline() {
        // A job's mesh dials one connection per direction: the side that decodes may
        // never send a frame on it, yet the compressing side must learn decode times.
        let (mut tx, mut rx) = compressing_pair();
        assert_eq!(
            rx.next_deadline(),
            None,
            "nothing decoded, nothing to report"
        );
        let data = steps_f64();
        let (wire, _) = round_trip(
            &mut tx,
            &mut rx,
            frame(FrameKind::Data, elem_flags(ElemKind::F64), &data),
        );
        assert!(wire[0][3] & FLAG_CODEC != 0, "not compressed");
        let due = rx.next_deadline().expect("a report is due");
        let mut out = Vec::new();
        rx.release(due, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0][2], FrameKind::CodecReport as u8);
        assert_eq!(rx.next_deadline(), None, "reported once");
        // The next report waits for REPORT_EVERY after this one.
        round_trip(
            &mut tx,
            &mut rx,
            frame(FrameKind::Data, elem_flags(ElemKind::F64), &data),
        );
        assert_eq!(rx.next_deadline(), Some(due + REPORT_EVERY));
        let f = vargr_wire::decode_exact(&out[0], 1 << 20).unwrap();
        let mut delivered = Vec::new();
        tx.inbound(Instant::now(), f, &mut delivered).unwrap();
        assert!(delivered.is_empty(), "a report is the stage's own");
    }

    #[test]
    fn control_small_incompressible_and_raw_flagged_frames_pass_untouched() {
        let mut tx = test_stage(
            "fixed:lz4".parse().unwrap(),
            slow_link(),
            LinkOptions::default(),
            1 << 26,
        )
        .unwrap();
        let mut rx =
            test_stage(CodecMode::Off, slow_link(), LinkOptions::default(), 1 << 26).unwrap();
        let big = vec![0u8; 100_000];
        let noise = testdata::random_bytes(100_000, 3);
        for f in [
            frame(FrameKind::Heartbeat, 0, &big),
            frame(FrameKind::Data, 0, b"small"),
            frame(FrameKind::Data, 0, &noise),
            // Compressible, but the sender asked for it raw.
            frame(FrameKind::Data, FLAG_RAW, &big),
        ] {
            let (wire, got) = round_trip(&mut tx, &mut rx, f.clone());
            assert_eq!(wire, vec![f.clone()]);
            assert_eq!(got[0].to_wire(), f);
        }
        assert_eq!(tx.counters.compressed, 0);
    }

    #[test]
    fn a_damaged_codec_frame_is_an_error_naming_the_frame() {
        let mut rx =
            test_stage(CodecMode::Off, slow_link(), LinkOptions::default(), 1 << 20).unwrap();
        let f = frame(FrameKind::Data, FLAG_CODEC, b"\xff\xff\xff garbage");
        let fr = vargr_wire::decode_exact(&f, 1 << 20).unwrap();
        let e = rx.inbound(Instant::now(), fr, &mut Vec::new()).unwrap_err();
        assert!(e.contains("Data frame on stream 7"), "{e}");
        // A frame claiming more than the link's largest frame is refused before decoding.
        let field = vec![0u8; 2 << 20];
        let mut big = Vec::new();
        encode(Codec::Lz4, ElemKind::BYTES, &field, &mut big);
        let f = frame(FrameKind::Data, FLAG_CODEC, &big);
        let fr = vargr_wire::decode_exact(&f, 1 << 22).unwrap();
        assert!(rx.inbound(Instant::now(), fr, &mut Vec::new()).is_err());
    }
}
