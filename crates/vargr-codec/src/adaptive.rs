//! The runtime adaptive strategy: per link and per data class, which codec (if any) to
//! compress the next message with.
//!
//! A fixed codec loses on data it cannot compress and on links fast enough that the
//! CPU time costs more than the bytes save. The seed's CoMPI answers with a runtime
//! strategy (its Figure 4.12), kept here step by step:
//!
//! 1. **Study.** For a (link, class) with nothing learned, every candidate codec is
//!    tried, and the one predicted fastest ([`model::predict`]) becomes the class's
//!    codec. Unlike the seed, which compressed the whole message with every candidate,
//!    only [`EngineConfig::study_slices`] slices spread over the message are compressed,
//!    each a share of the message between [`EngineConfig::sample_bytes`] and
//!    [`EngineConfig::max_sample_bytes`] (codecs with a long reach need long slices to
//!    show their ratio).
//! 2. **Thresholds.** `raw_below` (the seed's `length_no_compression`) and
//!    `compress_from` (`length_yes_compression`): a message that the model says does not
//!    pay raises `raw_below` to its size; one that pays lowers `compress_from`. Messages
//!    at or below `raw_below` go raw with no further thought — the fast path. A message
//!    above it is checked against the model (arithmetic only, tens of nanoseconds), so
//!    the engine never compresses where its model predicts a loss.
//! 3. **Mistakes.** The caller reports what each compression really gave
//!    ([`Engine::observe_sent`]); one that did not pay is a mistake, and
//!    [`EngineConfig::mistakes_to_restudy`] of them within
//!    [`EngineConfig::mistake_window`] messages start a new study.
//! 4. **Re-evaluation.** After [`EngineConfig::reevaluate_after`] raw messages (the
//!    seed's 1000) every candidate compresses small slices again; if the data changed
//!    the class is studied again, else only the thresholds start over.
//! 5. **Giving up.** Too many mistake-driven studies within
//!    [`EngineConfig::restudy_window`] switch compression off for the class on that
//!    link for [`EngineConfig::disable_for`] messages.
//! 6. **Samples** (not in the seed). Every [`EngineConfig::sample_every`] messages one
//!    candidate, in turn, compresses a small slice of the message, and the estimates
//!    follow. This is how a change of data shows while the engine sends raw and the wire
//!    teaches it nothing; a large change starts a new study.
//!
//! The engine is sans-IO: transfer times and codec times come in through
//! [`Engine::observe_transfer`], [`Engine::observe_sent`] and [`Engine::observe_codec`],
//! measured by the caller, and every interval is a count of messages. It reads a clock
//! only if given one ([`Engine::set_clock`]): then a study also times each candidate on
//! the message's own slices, because a codec's speed depends on the data as much as its
//! ratio does (for LZ4, ten times between zeros and half-random doubles; see
//! docs/benchmarks.md). Without a clock, the same observations give the same decisions.
//!
//! ```
//! use vargr_codec::{testdata, Codec, CodecRun, ElemKind, Engine, EngineConfig, LinkKey};
//!
//! let mut engine = Engine::new(EngineConfig::default())?;
//! let link = LinkKey(7);
//! // What the caller knows about the link: 100 Mbit/s, 300 µs one way.
//! engine.observe_transfer(link, 1 << 20, 300e-6 + (1 << 20) as f64 / 12.5e6);
//!
//! let field = testdata::f64_bytes(&testdata::smooth_field_f64(16_384, 0.0, 1));
//! let decision = engine.decide(link, ElemKind::F64, &field);
//! assert_ne!(decision.codec, Codec::None);
//!
//! let noise = testdata::random_bytes(128 * 1024, 2);
//! assert_eq!(engine.decide(link, ElemKind::BYTES, &noise).codec, Codec::None);
//! # Ok::<(), vargr_codec::CodecError>(())
//! ```

use std::collections::HashMap;

use crate::config::{EngineConfig, MAX_CANDIDATES};
use crate::model::{self, CodecRun, CodecStats, DataClass, LinkModel, Prediction};
use crate::{Codec, CodecError, CodecMeasure, ElemKind};

/// How far below paying (as a factor of the predicted speedup) a codec may be and still
/// be tried on a whole message now and then ([`Reason::Explored`]).
const EXPLORE_BAND: f64 = 1.2;

/// Frame header bytes added to a sampled payload's estimate (the header of a message
/// under 2 MiB); whole-message reports already include it.
const FRAME_ESTIMATE: f64 = 6.0;

/// A monotonic clock in nanoseconds, for [`Engine::set_clock`].
pub type Clock = fn() -> u64;

/// A link as the caller names it (a peer rank, a connection id): opaque to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkKey(pub u64);

/// What the engine needs to know about a link besides its speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkOptions {
    /// Both ends run on the same host (shared memory or loopback).
    pub same_host: bool,
    /// Compress even though both ends share a host. Off by default: local copies run at
    /// memory speed, where no codec pays. (The seed's intra-node bypass pseudocode has
    /// this test inverted; the intent, bypassing compression within a node, is kept.)
    pub compress_same_host: bool,
}

/// The engine's answer for one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The codec to compress with; [`Codec::None`] to send raw.
    pub codec: Codec,
    pub reason: Reason,
}

impl Decision {
    /// Whether the message is to be compressed.
    pub fn compress(&self) -> bool {
        self.codec != Codec::None
    }

    fn raw(reason: Reason) -> Decision {
        Decision {
            codec: Codec::None,
            reason,
        }
    }
}

/// Why the engine decided as it did: for traces (the seed's Figure 6.10 plots exactly
/// these: no compress, deciding, compress) and for tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Below [`EngineConfig::min_size`].
    TooSmall,
    /// A same-host link without `compress_same_host`.
    SameHost,
    /// The class has no candidate codecs.
    NoCandidates,
    /// Compression is switched off for a while after too many studies.
    Disabled,
    /// At or below the size under which this class was found not to pay.
    BelowRawThreshold,
    /// This message started a study of the candidates.
    Studied,
    /// Between the thresholds: the model was asked.
    Evaluated,
    /// At or above the size from which this class pays, and the model still agrees.
    AboveCompressThreshold,
    /// At or above that size, but the model no longer agrees (something was learned).
    ModelVeto,
    /// Behind frames still on their way: the candidate predicted fastest with its
    /// compression overlapping their transfer, or raw if none pays.
    Behind,
    /// The model says raw, but only just, for a codec that would save bytes: this
    /// message is compressed to time the codec on a whole message (a slice's time can
    /// be off, and sending raw would never tell).
    Explored,
}

/// What the engine currently thinks of one (link, class), for traces and tests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassSummary {
    /// The codec this class compresses with when it pays.
    pub codec: Option<Codec>,
    /// Messages of at most this size go raw without evaluation.
    pub raw_below: usize,
    /// Messages from this size on were found to pay (`usize::MAX`: none yet).
    pub compress_from: usize,
    /// Messages seen by the adaptive logic.
    pub messages: u64,
    /// Studies so far, of which some were forced by mistakes.
    pub studies: u64,
    pub forced_studies: u64,
    /// Compression is switched off for now.
    pub disabled: bool,
}

/// The runtime adaptive compression engine. See the module documentation.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
    /// Every codec the engine has figures for; indices into `stats`.
    codecs: Vec<Codec>,
    /// Per codec, per data class.
    stats: Vec<[CodecStats; 4]>,
    /// Per class: the candidates, as indices into `codecs`.
    candidates: [Vec<usize>; 4],
    links: HashMap<LinkKey, LinkEntry>,
    /// Where samples are compressed to, and decompressed to when timed; reused so that
    /// sampling rarely allocates.
    scratch: Vec<u8>,
    restored: Vec<u8>,
    clock: Option<Clock>,
}

#[derive(Debug, Clone)]
struct LinkEntry {
    options: LinkOptions,
    model: LinkModel,
    classes: [ClassState; 4],
}

#[derive(Debug, Clone, Copy, Default)]
struct Estimate {
    /// `payload / slice` over the last study's slices (no header).
    studied: Option<f64>,
    /// `payload / slice` over slices of `sample_bytes` at the last study: the yardstick
    /// of periodic samples, which are that size.
    probe_base: Option<f64>,
    /// Moving average of periodic samples since the last study.
    probe: Option<f64>,
    /// Moving average of `frame / message` over whole messages sent since the data last
    /// changed.
    full: Option<f64>,
    /// Seconds per byte to compress and to decompress this data, timed on the last
    /// study's slices (only with a clock), then moved by whole messages.
    compress_spb: Option<f64>,
    decompress_spb: Option<f64>,
}

impl Estimate {
    /// The expected `payload / size` from samples: the study's figure, moved by as much
    /// as periodic samples moved since.
    fn sampled(&self) -> Option<f64> {
        let r = self.studied?;
        Some(match (self.probe, self.probe_base) {
            (Some(p), Some(b)) if b > 0.0 => r * p / b,
            _ => r,
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct ClassState {
    messages: u64,
    needs_study: bool,
    /// `reevaluate_after` raw messages went by since the last study.
    needs_recheck: bool,
    /// Candidate slot of the class's codec.
    best: Option<usize>,
    /// The link's model changed since `best` was picked: the codec that wins on one
    /// link speed can lose on another, so it is picked again from the estimates.
    repick: bool,
    raw_below: usize,
    compress_from: usize,
    raw_since_study: u64,
    /// `messages` at the last study, and at the last message compressed to explore.
    studied_at: u64,
    explored_at: u64,
    next_sample: usize,
    mistakes: u32,
    mistake_window_start: u64,
    restudies: u32,
    restudy_window_start: u64,
    disabled_until: Option<u64>,
    studies: u64,
    forced_studies: u64,
    estimates: [Estimate; MAX_CANDIDATES],
}

impl Default for ClassState {
    fn default() -> Self {
        ClassState {
            messages: 0,
            needs_study: true,
            needs_recheck: false,
            best: None,
            repick: false,
            raw_below: 0,
            compress_from: usize::MAX,
            raw_since_study: 0,
            studied_at: 0,
            explored_at: 0,
            next_sample: 0,
            mistakes: 0,
            mistake_window_start: 0,
            restudies: 0,
            restudy_window_start: 0,
            disabled_until: None,
            studies: 0,
            forced_studies: 0,
            estimates: [Estimate::default(); MAX_CANDIDATES],
        }
    }
}

impl Engine {
    /// An engine with `config`, after checking it.
    pub fn new(config: EngineConfig) -> Result<Engine, CodecError> {
        config.validate()?;
        let mut engine = Engine {
            codecs: Vec::new(),
            stats: Vec::new(),
            candidates: Default::default(),
            links: HashMap::new(),
            scratch: Vec::with_capacity(2 * config.max_sample_bytes + 64),
            restored: Vec::with_capacity(config.max_sample_bytes),
            clock: None,
            config,
        };
        for class in DataClass::ALL {
            let list = engine.config.candidates.for_class(class).to_vec();
            let slots = list.into_iter().map(|c| engine.codec_index(c)).collect();
            engine.candidates[class.index()] = slots;
        }
        Ok(engine)
    }

    /// Lets studies time the candidates on the data itself (see the module
    /// documentation). `clock` must be monotonic; its readings are nanoseconds.
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = Some(clock);
    }

    /// The settings in use.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Forgets everything learned about a link (it closed; its peer may come back as
    /// another process on another host).
    pub fn remove_link(&mut self, link: LinkKey) {
        self.links.remove(&link);
    }

    /// Sets what the engine knows about a link besides its speed.
    pub fn set_link_options(&mut self, link: LinkKey, options: LinkOptions) {
        self.link_entry(link).options = options;
    }

    /// Replaces a link's transfer model, e.g. with one from a ping-pong calibration
    /// ([`LinkModel::from_calibration`]) or from an emulator's settings.
    ///
    /// The size thresholds learned on the link are forgotten: they were prices under
    /// the old model (a link found slower than assumed must not keep sending raw every
    /// size it once judged). The ratio estimates stay, and each class's codec is picked
    /// again from them at its next message.
    pub fn set_link_model(&mut self, link: LinkKey, model: LinkModel) {
        let entry = self.link_entry(link);
        entry.model = model;
        for st in &mut entry.classes {
            st.raw_below = 0;
            st.compress_from = usize::MAX;
            st.repick = true;
        }
    }

    /// The link's transfer model, if the engine has met the link.
    pub fn link_model(&self, link: LinkKey) -> Option<&LinkModel> {
        self.links.get(&link).map(|e| &e.model)
    }

    /// A codec's learned figures on a class, if the engine knows the codec.
    pub fn codec_stats(&self, codec: Codec, class: DataClass) -> Option<&CodecStats> {
        let i = self.codecs.iter().position(|&c| c == codec)?;
        Some(&self.stats[i][class.index()])
    }

    /// Learns from one transfer on `link`: `bytes_on_wire` took `seconds` one way.
    pub fn observe_transfer(&mut self, link: LinkKey, bytes_on_wire: usize, seconds: f64) {
        let weight = self.config.link_weight;
        self.link_entry(link)
            .model
            .observe(bytes_on_wire, seconds, weight);
    }

    /// Learns a codec's speed and ratio from a run that belongs to no link: a
    /// calibration, or a decompression time the receiver reported back.
    pub fn observe_codec(&mut self, run: &CodecRun) {
        let i = self.codec_index(run.codec);
        let weight = self.config.speed_weight;
        self.stats[i][DataClass::of(run.elem).index()].observe(run, weight);
    }

    /// Learns a decompression time the receiver measured and reported back: `seconds`
    /// to restore `original_bytes` bytes of `elem` compressed by `codec`. Until such
    /// reports arrive, decompression time is estimated from Table 4.3.
    pub fn observe_decompress(
        &mut self,
        codec: Codec,
        elem: ElemKind,
        original_bytes: usize,
        seconds: f64,
    ) {
        let i = self.codec_index(codec);
        let weight = self.config.speed_weight;
        self.stats[i][DataClass::of(elem).index()].observe_decompress(
            original_bytes,
            seconds,
            weight,
        );
    }

    /// [`observe_decompress`](Engine::observe_decompress) for a receiver's report, which
    /// names the codec by its wire id: every codec with that id learns it (zstd's levels
    /// decompress alike).
    /// The report also moves `link`'s estimate of the codecs' decompression speed on
    /// the data it carries now.
    pub fn observe_decompress_id(
        &mut self,
        link: LinkKey,
        id: crate::CodecId,
        elem: ElemKind,
        original_bytes: usize,
        seconds: f64,
    ) {
        let weight = self.config.speed_weight;
        let class = DataClass::of(elem).index();
        for (i, c) in self.codecs.iter().enumerate() {
            if c.id() == id {
                self.stats[i][class].observe_decompress(original_bytes, seconds, weight);
            }
        }
        if original_bytes == 0 || !seconds.is_finite() || seconds < 0.0 {
            return;
        }
        let Some(entry) = self.links.get_mut(&link) else {
            return;
        };
        let spb = seconds / original_bytes as f64;
        let st = &mut entry.classes[class];
        for (slot, &ci) in self.candidates[class].iter().enumerate() {
            let e = &mut st.estimates[slot];
            if self.codecs[ci].id() == id {
                if let Some(d) = e.decompress_spb.as_mut() {
                    *d += self.config.ratio_weight * (spb - *d);
                }
            }
        }
    }

    /// Seeds the codec figures for `elem`'s class from [`measure_all`](crate::measure_all)
    /// results (what a stage does at start-up, on a sample of typical data).
    pub fn calibrate_codecs(&mut self, elem: ElemKind, measures: &[CodecMeasure]) {
        for m in measures {
            let mb = m.original_len as f64 / 1e6;
            if m.compress_mb_s <= 0.0 || m.decompress_mb_s <= 0.0 || !m.verified {
                continue;
            }
            self.observe_codec(&CodecRun {
                codec: m.codec,
                elem,
                in_bytes: m.original_len,
                out_bytes: m.compressed_len,
                compress_s: mb / m.compress_mb_s,
                decompress_s: Some(mb / m.decompress_mb_s),
            });
        }
    }

    /// Learns from a message that [`decide`](Engine::decide) told to compress and the
    /// caller compressed: its speed, its ratio, and whether it was a mistake (it did not
    /// pay, by the measured times and size). `run.out_bytes` is what went on the wire,
    /// header included (the input size if the frame fell back to raw).
    pub fn observe_sent(&mut self, link: LinkKey, run: &CodecRun) {
        self.observe_sent_behind(link, run, 0.0);
    }

    /// [`observe_sent`](Engine::observe_sent) for a message that
    /// [`decide_behind`](Engine::decide_behind) judged behind `backlog_s` seconds of
    /// queued frames: whether it paid is judged the same way.
    pub fn observe_sent_behind(&mut self, link: LinkKey, run: &CodecRun, backlog_s: f64) {
        self.observe_codec(run);
        if run.in_bytes == 0 || run.codec == Codec::None {
            return;
        }
        let class = DataClass::of(run.elem);
        let Some(ci) = self.codecs.iter().position(|&c| c == run.codec) else {
            return;
        };
        let stats = self.stats[ci][class.index()];
        let slot = self.candidates[class.index()].iter().position(|&c| c == ci);
        let config = &self.config;
        let Some(entry) = self.links.get_mut(&link) else {
            return;
        };
        let st = &mut entry.classes[class.index()];
        let n = run.in_bytes as f64;
        let out = run.out_bytes as f64;
        // The figures the decision used: the codec's speeds on this data where a study
        // timed them. (Judged with the class-wide prior alone, a codec decompressing
        // faster here than on the calibration data made every message a mistake, and
        // five studies in a row switched compression off.)
        let stats = slot.map_or(stats, |s| on_this_data(&stats, &st.estimates[s]));
        if let Some(slot) = slot {
            let e = &mut st.estimates[slot];
            let ratio = out / n;
            e.full = Some(
                e.full
                    .map_or(ratio, |r| r + config.ratio_weight * (ratio - r)),
            );
            // A slice's time understates a whole message's (zstd sizes its tables to
            // the input; a slice is warm in the cache): the truth moves the estimate.
            if let Some(c) = e.compress_spb.as_mut() {
                if run.compress_s.is_finite() && run.compress_s >= 0.0 {
                    *c += config.ratio_weight * (run.compress_s / n - *c);
                }
            }
        }
        let td = match run.decompress_s.filter(|d| d.is_finite() && *d >= 0.0) {
            Some(d) => d,
            None => stats.decompress_time(n, out),
        };
        let actual = model::timed(
            &entry.model,
            n,
            run.compress_s.max(0.0),
            out,
            td,
            backlog(backlog_s),
        );
        if actual.pays(1.0) {
            return;
        }
        if st.messages.saturating_sub(st.mistake_window_start) > config.mistake_window {
            st.mistake_window_start = st.messages;
            st.mistakes = 0;
        }
        st.mistakes += 1;
        if st.mistakes >= config.mistakes_to_restudy {
            st.mistakes = 0;
            st.mistake_window_start = st.messages;
            force_restudy(st, config);
        }
    }

    /// What the model predicts for sending `bytes` bytes of `elem` over `link` with
    /// `codec`, using the ratio the engine currently expects there (from samples and
    /// reports on that link, else the codec's average). `None` if nothing is known
    /// about the ratio yet.
    pub fn predict(
        &self,
        link: LinkKey,
        elem: ElemKind,
        codec: Codec,
        bytes: usize,
    ) -> Option<Prediction> {
        let class = DataClass::of(elem);
        let ci = self.codecs.iter().position(|&c| c == codec)?;
        let stats = &self.stats[ci][class.index()];
        let entry = self.links.get(&link);
        let prior;
        let model = match entry {
            Some(e) => &e.model,
            None => {
                prior = self.prior_link();
                &prior
            }
        };
        let slot = self.candidates[class.index()].iter().position(|&c| c == ci);
        let estimate = match (entry, slot) {
            (Some(e), Some(s)) => Some(&e.classes[class.index()].estimates[s]),
            _ => None,
        };
        let from_link = estimate.and_then(|e| csize(e, bytes));
        let csize = from_link.or_else(|| stats.ratio.map(|r| r * bytes as f64))?;
        let stats = estimate.map_or(*stats, |e| on_this_data(stats, e));
        Some(model::predict(model, &stats, bytes, csize))
    }

    /// The engine's view of one (link, class).
    pub fn summary(&self, link: LinkKey, elem: ElemKind) -> Option<ClassSummary> {
        let class = DataClass::of(elem);
        let st = &self.links.get(&link)?.classes[class.index()];
        Some(ClassSummary {
            codec: st
                .best
                .map(|s| self.codecs[self.candidates[class.index()][s]]),
            raw_below: st.raw_below,
            compress_from: st.compress_from,
            messages: st.messages,
            studies: st.studies,
            forced_studies: st.forced_studies,
            disabled: st.disabled_until.is_some(),
        })
    }

    /// Decides how to send `data` (elements of `elem`) over `link`.
    ///
    /// Cheap once warmed up, and then allocation-free: a hash lookup, a few comparisons
    /// and, above the raw threshold, a few floating-point operations. Every
    /// `sample_every` messages, and when a study is due, it also compresses slices of
    /// `data`, a cost the default settings amortise over many messages
    /// (`examples/decide_cost.rs` measures it; figures in docs/benchmarks.md).
    pub fn decide(&mut self, link: LinkKey, elem: ElemKind, data: &[u8]) -> Decision {
        self.decide_behind(link, elem, data, 0.0)
    }

    /// [`decide`](Engine::decide) for a message that will queue behind `backlog_s`
    /// seconds of frames already on their way over the link (the caller tracks its
    /// output against the link's speed). With a backlog, compression overlaps their
    /// transfer ([`model::predict_behind`]), so slower codecs with better ratios can pay
    /// where they would not for a lone message; each such message gets the candidate
    /// predicted fastest, and the size thresholds, which belong to lone messages, are
    /// neither used nor changed.
    pub fn decide_behind(
        &mut self,
        link: LinkKey,
        elem: ElemKind,
        data: &[u8],
        backlog_s: f64,
    ) -> Decision {
        let n = data.len();
        if n < self.config.min_size || n == 0 {
            return Decision::raw(Reason::TooSmall);
        }
        if !self.links.contains_key(&link) {
            self.link_entry(link);
        }
        let Engine {
            config,
            codecs,
            stats,
            candidates,
            links,
            scratch,
            restored,
            clock,
        } = self;
        let Some(entry) = links.get_mut(&link) else {
            return Decision::raw(Reason::NoCandidates);
        };
        if entry.options.same_host && !entry.options.compress_same_host {
            return Decision::raw(Reason::SameHost);
        }
        let class = DataClass::of(elem);
        let slots = &candidates[class.index()];
        if slots.is_empty() {
            return Decision::raw(Reason::NoCandidates);
        }
        let ctx = Ctx {
            config,
            model: &entry.model,
            codecs,
            all_stats: stats.as_slice(),
            slots,
            class,
            elem,
            data,
            backlog_s: backlog(backlog_s),
            clock: *clock,
        };
        let st = &mut entry.classes[class.index()];
        st.messages += 1;
        if let Some(until) = st.disabled_until {
            if st.messages < until {
                return Decision::raw(Reason::Disabled);
            }
            st.disabled_until = None;
            st.needs_study = true;
        }
        let mut studied = st.needs_study;
        if !studied && st.needs_recheck {
            studied = ctx.recheck(st, scratch);
        } else if !studied
            && config.sample_every > 0
            && st.messages % u64::from(config.sample_every) == 0
            && ctx.sample_next(st, scratch)
        {
            // Not before a round of samples since the last study: data that alternates
            // between kinds would otherwise be studied again and again.
            let round = u64::from(config.sample_every) * slots.len() as u64;
            studied = st.messages.saturating_sub(st.studied_at) >= round;
        }
        if studied {
            ctx.study(st, scratch, restored);
        } else if st.repick {
            ctx.pick_best(st);
        }
        st.repick = false;
        let Some(best) = st.best else {
            return ctx.send_raw(st, Reason::NoCandidates);
        };
        if !studied && ctx.backlog_s > 0.0 {
            let slot = ctx
                .fastest(st, n, ctx.backlog_s)
                .map_or(best, |(slot, _)| slot);
            let pays = ctx
                .prediction(st, slot, n, ctx.backlog_s)
                .is_some_and(|p| p.pays(config.min_speedup));
            return if pays {
                Decision {
                    codec: ctx.codec(slot),
                    reason: Reason::Behind,
                }
            } else {
                ctx.send_raw(st, Reason::Behind)
            };
        }
        if !studied && ctx.explore(st, best, n) {
            return Decision {
                codec: ctx.codec(best),
                reason: Reason::Explored,
            };
        }
        if !studied && n <= st.raw_below {
            return ctx.send_raw(st, Reason::BelowRawThreshold);
        }
        let above = n >= st.compress_from;
        // Sizes already compressed go on down to keep_speedup; others start at min_speedup.
        let threshold = if above && !studied {
            config.keep_speedup
        } else {
            config.min_speedup
        };
        let pays = ctx
            .prediction(st, best, n, 0.0)
            .is_some_and(|p| p.pays(threshold));
        let reason = match (studied, above, pays) {
            (true, _, _) => Reason::Studied,
            (false, true, true) => Reason::AboveCompressThreshold,
            (false, true, false) => Reason::ModelVeto,
            (false, false, _) => Reason::Evaluated,
        };
        if pays {
            st.compress_from = st.compress_from.min(n);
            Decision {
                codec: ctx.codec(best),
                reason,
            }
        } else {
            if above {
                st.compress_from = usize::MAX;
            }
            st.raw_below = st.raw_below.max(n);
            ctx.send_raw(st, reason)
        }
    }

    fn codec_index(&mut self, codec: Codec) -> usize {
        if let Some(i) = self.codecs.iter().position(|&c| c == codec) {
            return i;
        }
        self.codecs.push(codec);
        self.stats
            .push(DataClass::ALL.map(|_| CodecStats::prior(codec)));
        self.codecs.len() - 1
    }

    fn prior_link(&self) -> LinkModel {
        LinkModel::new(
            self.config.prior_latency_s,
            self.config.prior_bandwidth_mbit_s * 1e6 / 8.0,
        )
    }

    fn link_entry(&mut self, link: LinkKey) -> &mut LinkEntry {
        let prior = self.prior_link();
        self.links.entry(link).or_insert_with(|| LinkEntry {
            options: LinkOptions::default(),
            model: prior,
            classes: [ClassState::default(); 4],
        })
    }
}

/// Counts a study forced by mistakes; too many too close together switch compression
/// off for a while instead.
fn force_restudy(st: &mut ClassState, config: &EngineConfig) {
    st.forced_studies += 1;
    if st.messages.saturating_sub(st.restudy_window_start) > config.restudy_window {
        st.restudy_window_start = st.messages;
        st.restudies = 0;
    }
    st.restudies += 1;
    if st.restudies >= config.max_restudies {
        st.restudies = 0;
        st.restudy_window_start = st.messages;
        st.disabled_until = Some(st.messages.saturating_add(config.disable_for));
    }
    st.needs_study = true;
}

/// The expected compressed size of `bytes` bytes: from whole-message reports if any
/// arrived since the data last changed, else from samples.
fn csize(e: &Estimate, bytes: usize) -> Option<f64> {
    let n = bytes as f64;
    e.full
        .map(|r| r * n)
        .or_else(|| e.sampled().map(|r| r * n + FRAME_ESTIMATE))
}

/// A codec's figures with the speeds timed on the current data, where there are some.
fn on_this_data(stats: &CodecStats, e: &Estimate) -> CodecStats {
    let mut s = *stats;
    if let Some(c) = e.compress_spb {
        s.compress_s_per_byte = c;
    }
    if let Some(d) = e.decompress_spb {
        s.decompress_s_per_byte = Some(d);
    }
    s
}

/// What compressing a message's slices gave.
#[derive(Debug, Clone, Copy)]
struct SliceRun {
    out: usize,
    len: usize,
    /// Median seconds per byte over the slices, when timed.
    compress_spb: Option<f64>,
    decompress_spb: Option<f64>,
}

impl SliceRun {
    fn ratio(&self) -> f64 {
        self.out as f64 / self.len as f64
    }
}

/// The median of `v` (the mean of the middle two for an even count):
/// one slice slowed by a preempted thread must not stand for the codec's speed.
fn median_of(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// A backlog as the model uses it: finite and not negative, else none.
fn backlog(seconds: f64) -> f64 {
    if seconds.is_finite() && seconds > 0.0 {
        seconds
    } else {
        0.0
    }
}

/// Everything one decision reads, borrowed apart from the class state it updates.
struct Ctx<'a> {
    config: &'a EngineConfig,
    model: &'a LinkModel,
    codecs: &'a [Codec],
    all_stats: &'a [[CodecStats; 4]],
    slots: &'a [usize],
    class: DataClass,
    elem: ElemKind,
    data: &'a [u8],
    /// Seconds of frames queued ahead of this message on the link.
    backlog_s: f64,
    clock: Option<Clock>,
}

impl Ctx<'_> {
    fn codec(&self, slot: usize) -> Codec {
        self.codecs[self.slots[slot]]
    }

    /// The candidate's figures, with its speeds on this data if a study timed them.
    fn stats(&self, st: &ClassState, slot: usize) -> CodecStats {
        on_this_data(
            &self.all_stats[self.slots[slot]][self.class.index()],
            &st.estimates[slot],
        )
    }

    /// Predicted times of this message with the candidate in `slot`, behind `backlog_s`
    /// seconds of queued frames (0: a lone message, the seed's model).
    fn prediction(
        &self,
        st: &ClassState,
        slot: usize,
        n: usize,
        backlog_s: f64,
    ) -> Option<Prediction> {
        let c = csize(&st.estimates[slot], n)?;
        Some(model::predict_behind(
            self.model,
            &self.stats(st, slot),
            n,
            c,
            backlog_s,
        ))
    }

    /// Predicted compressed time from samples alone: the same yardstick for every
    /// candidate, since only the class's own codec has whole-message reports.
    fn sampled_time(&self, st: &ClassState, slot: usize, n: usize, backlog_s: f64) -> Option<f64> {
        let r = st.estimates[slot].sampled()?;
        let p = model::predict_behind(
            self.model,
            &self.stats(st, slot),
            n,
            r * n as f64 + FRAME_ESTIMATE,
            backlog_s,
        );
        Some(p.compressed_s)
    }

    /// The candidate with the shortest predicted time from samples, and that time.
    fn fastest(&self, st: &ClassState, n: usize, backlog_s: f64) -> Option<(usize, f64)> {
        let mut fastest: Option<(usize, f64)> = None;
        for slot in 0..self.slots.len() {
            if let Some(t) = self.sampled_time(st, slot, n, backlog_s) {
                if fastest.is_none_or(|(_, bt)| t < bt) {
                    fastest = Some((slot, t));
                }
            }
        }
        fastest
    }

    /// Whether to compress this message with the class's codec although the model says
    /// raw: once per round of samples, when the model says raw only just (a predicted
    /// speedup within [`EXPLORE_BAND`] of paying) and the codec saves at least a tenth
    /// of the bytes. Slices are timed cold and in pieces, so a codec can look slower
    /// than it is; a class sent raw would never learn otherwise. (Text at 1 Gbit/s: LZ4
    /// predicted at 0.92, measured at 1.10-1.14.) A wrong guess costs one message in
    /// `sample_every × candidates` a few per cent.
    fn explore(&self, st: &mut ClassState, best: usize, n: usize) -> bool {
        let round = u64::from(self.config.sample_every) * self.slots.len() as u64;
        if round == 0 || st.messages < st.explored_at + round {
            return false;
        }
        let Some(p) = self.prediction(st, best, n, 0.0) else {
            return false;
        };
        let saves = csize(&st.estimates[best], n).is_some_and(|c| c <= 0.9 * n as f64);
        let close = p.speedup() * EXPLORE_BAND >= self.config.min_speedup;
        if p.pays(self.config.min_speedup) || !saves || !close {
            return false;
        }
        st.explored_at = st.messages;
        true
    }

    fn send_raw(&self, st: &mut ClassState, reason: Reason) -> Decision {
        st.raw_since_study += 1;
        if st.raw_since_study >= self.config.reevaluate_after {
            st.needs_recheck = true;
        }
        Decision::raw(reason)
    }

    /// The seed's re-evaluation, made cheap: every candidate compresses slices of
    /// `sample_bytes` at new places, and only if they show new data is the class studied
    /// again (returns true). Otherwise the estimates stand and the size thresholds start
    /// over, since they were prices under what the link and codecs were then. Without
    /// this, a class sent raw would pay a whole study every `reevaluate_after` messages.
    fn recheck(&self, st: &mut ClassState, scratch: &mut Vec<u8>) -> bool {
        st.needs_recheck = false;
        st.raw_since_study = 0;
        let mut changed = false;
        for slot in 0..self.slots.len() {
            let e = &st.estimates[slot];
            let was = e.probe.or(e.probe_base);
            changed |= match self.probe(slot, st.messages, self.config.study_slices, scratch) {
                Some(r) => self.changed(r, was),
                None => was.is_some(),
            };
        }
        if !changed {
            st.raw_below = 0;
            st.compress_from = usize::MAX;
        }
        changed
    }

    /// Samples every candidate afresh and starts the thresholds over.
    fn study(&self, st: &mut ClassState, scratch: &mut Vec<u8>, restored: &mut Vec<u8>) {
        let slices = self.config.study_slices;
        let len = self.study_slice_len();
        for slot in 0..self.slots.len() {
            let run = self.compress_slices(slot, st.messages, slices, len, scratch, Some(restored));
            let studied = run.map(|r| r.ratio());
            let probe_base = if len > self.config.sample_bytes {
                self.probe(slot, st.messages, slices, scratch)
            } else {
                studied
            };
            st.estimates[slot] = Estimate {
                studied,
                probe_base,
                probe: None,
                full: None,
                compress_spb: run.and_then(|r| r.compress_spb),
                decompress_spb: run.and_then(|r| r.decompress_spb),
            };
        }
        st.best = None;
        self.pick_best(st);
        st.raw_below = 0;
        st.compress_from = usize::MAX;
        st.raw_since_study = 0;
        st.studied_at = st.messages;
        st.explored_at = st.messages;
        st.mistakes = 0;
        st.mistake_window_start = st.messages;
        st.needs_study = false;
        st.needs_recheck = false;
        st.studies += 1;
    }

    /// Slices of a study: `study_slices` of them cover up to the whole message, each
    /// from `sample_bytes` to `max_sample_bytes`.
    fn study_slice_len(&self) -> usize {
        let c = self.config;
        (self.data.len() / c.study_slices).clamp(c.sample_bytes, c.max_sample_bytes)
    }

    /// Samples the next candidate in turn and lets the result move the estimates, the
    /// class's codec and, if the data changed under them, the thresholds. Returns
    /// whether the sample says the data changed (a new study is due).
    fn sample_next(&self, st: &mut ClassState, scratch: &mut Vec<u8>) -> bool {
        let slot = st.next_sample % self.slots.len();
        st.next_sample = (slot + 1) % self.slots.len();
        let Some(r) = self.probe(slot, st.messages, 1, scratch) else {
            return false;
        };
        let changed = self.changed(r, st.estimates[slot].probe_base);
        let e = &mut st.estimates[slot];
        e.probe = Some(match e.probe {
            Some(old) if !changed => old + self.config.ratio_weight * (r - old),
            _ => r,
        });
        if changed {
            // Reports on the old data say nothing about the new.
            e.full = None;
        }
        self.pick_best(st);
        // Thresholds learned on other data must not hold this message's decision.
        let n = self.data.len();
        if let Some(best) = st.best {
            let pays = self
                .prediction(st, best, n, 0.0)
                .is_some_and(|p| p.pays(self.config.min_speedup));
            if pays && n <= st.raw_below {
                st.raw_below = 0;
            } else if !pays && n >= st.compress_from {
                st.compress_from = usize::MAX;
            }
        }
        changed
    }

    /// Makes the fastest sampled candidate the class's codec, unless the current one is
    /// within the switch margin of it.
    fn pick_best(&self, st: &mut ClassState) {
        let n = self.data.len();
        // The class's codec is chosen for lone messages; a backlog is judged per message.
        let Some((slot, t)) = self.fastest(st, n, 0.0) else {
            return;
        };
        let keep = st
            .best
            .and_then(|b| self.sampled_time(st, b, n, 0.0))
            .is_some_and(|cur| cur <= t * (1.0 + self.config.switch_margin));
        if !keep {
            if st.best != Some(slot) {
                // A new codec: the thresholds were the old codec's.
                st.raw_below = 0;
                st.compress_from = usize::MAX;
            }
            st.best = Some(slot);
        }
    }

    /// `payload / slice` over `slices` slices of `sample_bytes`: what periodic samples
    /// and re-evaluations compare with the study's figure of that size.
    fn probe(&self, slot: usize, salt: u64, slices: usize, scratch: &mut Vec<u8>) -> Option<f64> {
        let small = self.config.sample_bytes;
        self.compress_slices(slot, salt, slices, small, scratch, None)
            .map(|r| r.ratio())
    }

    /// Whether a probe's ratio `r` says the data changed since `was` (none: unknown,
    /// so changed).
    fn changed(&self, r: f64, was: Option<f64>) -> bool {
        was.is_none_or(|w| (r - w).abs() > self.config.change_tolerance)
    }

    /// Compresses `slices` slices of `len` bytes (fewer if the message is short), one
    /// at a salted place in each of as many equal regions, so that a header or a
    /// constant prefix does not stand for the whole and successive samples look at
    /// different places. With a clock and `restored`, each slice is also timed, and
    /// decompressed and timed.
    fn compress_slices(
        &self,
        slot: usize,
        salt: u64,
        slices: usize,
        len: usize,
        scratch: &mut Vec<u8>,
        mut restored: Option<&mut Vec<u8>>,
    ) -> Option<SliceRun> {
        let data = self.data;
        let len = len.min(data.len());
        if len == 0 {
            return None;
        }
        let codec = self.codec(slot);
        let clock = self.clock.filter(|_| restored.is_some());
        let elem_size = self.elem.size();
        let regions = slices.clamp(1, (data.len() / len).max(1));
        let region = data.len() / regions;
        let (mut out, mut total) = (0, 0);
        // study_slices is at most 64 (checked by the config).
        let (mut tc, mut td) = ([0.0; 64], [0.0; 64]);
        let (mut ntc, mut ntd) = (0, 0);
        let per_byte = |from: u64, to: u64| to.saturating_sub(from) as f64 * 1e-9 / len as f64;
        if clock.is_some() {
            // Untimed, so that the timed runs do not pay for first use (buffers that
            // grow, code and tables not yet in cache): they priced shuffle-lz4 at twice
            // what it then took on whole messages.
            scratch.clear();
            let _ = codec.compress(&data[..len], self.elem, scratch);
        }
        for r in 0..regions {
            let span = region.saturating_sub(len);
            let mixed = (salt ^ ((r as u64) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16;
            let off = r * region + (mixed % (span as u64 + 1)) as usize;
            let off = (off - off % elem_size).min(data.len() - len);
            let slice = &data[off..off + len];
            scratch.clear();
            let t0 = clock.map(|c| c());
            let ok = codec.compress(slice, self.elem, scratch).is_ok();
            out += if ok { scratch.len() } else { len };
            total += len;
            let (Some(c), Some(t0), true) = (clock, t0, ok) else {
                continue;
            };
            let t1 = c();
            if ntc < tc.len() {
                tc[ntc] = per_byte(t0, t1);
                ntc += 1;
            }
            let Some(restored) = restored.as_deref_mut() else {
                continue;
            };
            restored.clear();
            if crate::decompress(codec.id(), scratch, self.elem, len, restored).is_ok()
                && ntd < td.len()
            {
                td[ntd] = per_byte(t1, c());
                ntd += 1;
            }
        }
        Some(SliceRun {
            out,
            len: total,
            compress_spb: median_of(&mut tc[..ntc]),
            decompress_spb: median_of(&mut td[..ntd]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    fn slow_engine(config: EngineConfig) -> Engine {
        let mut e = Engine::new(config).unwrap();
        for link in [LinkKey(0), LinkKey(1)] {
            e.set_link_model(link, LinkModel::new(1e-3, 1e6));
        }
        e
    }

    /// Encodes `data` with `codec` as the stage would and reports it sent, with the
    /// given times.
    fn send_observed(
        e: &mut Engine,
        link: LinkKey,
        (codec, elem): (Codec, ElemKind),
        data: &[u8],
        compress_s: f64,
        decompress_s: Option<f64>,
    ) {
        let mut frame = Vec::new();
        crate::encode(codec, elem, data, &mut frame);
        e.observe_sent(
            link,
            &CodecRun {
                codec,
                elem,
                in_bytes: data.len(),
                out_bytes: frame.len(),
                compress_s,
                decompress_s,
            },
        );
    }

    #[test]
    fn a_backlog_hides_compression_and_favours_ratio() {
        // 100 Mbit/s: zstd:6 costs more CPU than zstd:1 for the bytes it saves on a lone
        // message, but behind a queue its compression time is hidden.
        let mut e = Engine::new(EngineConfig::default()).unwrap();
        for link in [LinkKey(0), LinkKey(1)] {
            e.set_link_model(link, LinkModel::new(1e-3, 12.5e6));
        }
        let text = testdata::text_like(1 << 20, 5);
        let lone = e.decide(LinkKey(0), ElemKind::BYTES, &text);
        assert_eq!(lone.reason, Reason::Studied);
        assert!(lone.compress());
        let behind = e.decide_behind(LinkKey(0), ElemKind::BYTES, &text, 0.5);
        assert_eq!(behind.reason, Reason::Behind);
        assert_eq!(behind.codec, Codec::Zstd { level: 6 });
        assert_ne!(lone.codec, behind.codec);
        // A backlog too short to hide it: the per-message choice falls back.
        let short = e.decide_behind(LinkKey(0), ElemKind::BYTES, &text, 1e-6);
        assert_ne!(short.codec, Codec::Zstd { level: 6 });
        // Noise never pays, queue or not; nonsense backlogs count as none.
        let noise = testdata::random_bytes(1 << 20, 6);
        assert!(!e
            .decide_behind(LinkKey(1), ElemKind::BYTES, &noise, 0.5)
            .compress());
        assert!(!e
            .decide_behind(LinkKey(1), ElemKind::BYTES, &noise, 0.5)
            .compress());
        let d = e.decide_behind(LinkKey(0), ElemKind::BYTES, &text, f64::NAN);
        assert_ne!(d.reason, Reason::Behind);
    }

    #[test]
    fn a_new_link_model_reprices_sizes_judged_under_the_old_one() {
        let mut e = Engine::new(EngineConfig::default()).unwrap();
        let link = LinkKey(0);
        e.set_link_model(link, LinkModel::new(0.0, 5e9));
        let text = testdata::text_like(1 << 18, 3);
        assert!(!e.decide(link, ElemKind::BYTES, &text).compress());
        let d = e.decide(link, ElemKind::BYTES, &text);
        assert_eq!((d.compress(), d.reason), (false, Reason::BelowRawThreshold));
        // The path turns out to be slow (e.g. learned from TCP_INFO).
        e.set_link_model(link, LinkModel::new(1e-3, 6e6));
        let d = e.decide(link, ElemKind::BYTES, &text);
        assert!(d.compress(), "{d:?}");
    }

    #[test]
    fn a_new_link_model_picks_the_codec_again() {
        // Doubles of a smooth field, studied on a very fast link, where the cheapest
        // codec (or none) wins; then the path turns out to run at 20 Mbit/s, where a
        // stronger codec does. The class must not stay with the fast link's choice.
        let data = testdata::f64_bytes(&testdata::smooth_field_f64(1 << 15, 1e-3, 4));
        let link = LinkKey(0);
        let slow = LinkModel::new(1e-3, 2.5e6);
        let mut fresh = Engine::new(EngineConfig::default()).unwrap();
        fresh.set_link_model(link, slow.clone());
        let want = fresh.decide(link, ElemKind::F64, &data);
        assert!(want.compress(), "{want:?}");
        let mut e = Engine::new(EngineConfig::default()).unwrap();
        e.set_link_model(link, LinkModel::new(0.0, 5e9));
        let first = e.decide(link, ElemKind::F64, &data);
        assert_ne!(first.codec, want.codec, "the test data does not tell");
        e.set_link_model(link, slow);
        let d = e.decide(link, ElemKind::F64, &data);
        assert_eq!(d.codec, want.codec, "{d:?}");
    }

    #[test]
    fn a_study_looks_at_more_than_one_place_in_the_message() {
        // Three quarters zeros, one quarter noise, the noise in each quarter in turn:
        // every layout pays on a slow link. One slice per study lands in the noise for
        // some layout and sends the class raw; slices spread over the message do not.
        let decisions = |study_slices: usize| -> Vec<bool> {
            (0..4)
                .map(|noisy| {
                    let q = 1 << 18;
                    let mut data = vec![0u8; 4 * q];
                    data[noisy * q..(noisy + 1) * q].copy_from_slice(&testdata::random_bytes(q, 9));
                    let mut e = slow_engine(EngineConfig {
                        study_slices,
                        ..EngineConfig::default()
                    });
                    e.decide(LinkKey(0), ElemKind::BYTES, &data).compress()
                })
                .collect()
        };
        assert_eq!(decisions(4), vec![true; 4]);
        assert!(decisions(1).contains(&false), "the test data does not tell");
    }

    /// Doubles counting up by two: the byte planes of a shuffle repeat over far longer
    /// stretches than 4 KiB.
    fn counting_f64(n: usize) -> Vec<u8> {
        testdata::f64_bytes(&(0..n).map(|i| 50001.0 + 2.0 * i as f64).collect::<Vec<_>>())
    }

    #[test]
    fn a_study_sees_what_a_codec_reaches_on_the_whole_message() {
        // On 4 KiB slices FPC looks better (ratio 14 against 10); on the 128 KiB message
        // shuffle+LZ4 reaches 49 against FPC's 16.
        let data = counting_f64(16_384);
        let chosen = |max_sample_bytes: usize| {
            let mut e = slow_engine(EngineConfig {
                max_sample_bytes,
                candidates: crate::Candidates {
                    f64: vec![Codec::Lz4, Codec::Fpc { table_bits: 16 }, Codec::ShuffleLz4],
                    ..crate::Candidates::default()
                },
                ..EngineConfig::default()
            });
            e.decide(LinkKey(0), ElemKind::F64, &data).codec
        };
        assert_eq!(
            chosen(4096),
            Codec::Fpc { table_bits: 16 },
            "the data does not tell"
        );
        assert_eq!(chosen(32 << 10), Codec::ShuffleLz4);
    }

    #[test]
    fn with_a_clock_a_study_prices_each_codec_by_its_time_on_the_data() {
        // A clock on which every compression and decompression of a slice takes a
        // second: no codec can pay, however well it compresses.
        use std::sync::atomic::{AtomicU64, Ordering};
        static NOW: AtomicU64 = AtomicU64::new(0);
        fn slow() -> u64 {
            NOW.fetch_add(1_000_000_000, Ordering::Relaxed)
        }
        let zeros = vec![0u8; 1 << 20];
        let mut e = slow_engine(EngineConfig::default());
        assert!(e.decide(LinkKey(0), ElemKind::F64, &zeros).compress());
        e.set_clock(slow);
        let d = e.decide(LinkKey(1), ElemKind::F64, &zeros);
        assert_eq!((d.codec, d.reason), (Codec::None, Reason::Studied));
        let p = e
            .predict(LinkKey(1), ElemKind::F64, Codec::Lz4, 1 << 20)
            .unwrap();
        assert!(p.compressed_s > 1.0, "{p:?}");
    }

    #[test]
    fn a_message_sent_is_judged_by_the_speeds_its_decision_used() {
        // The class's prior says every codec decompresses at 1 MB/s; a study with a
        // clock finds them fast on this data, so compression pays. The messages sent
        // are then judged with the study's speeds too: no mistakes, no more studies.
        // (Judged with the prior, every message was a mistake: a study every three
        // messages, and after five, compression off.)
        use std::sync::atomic::{AtomicU64, Ordering};
        static NOW: AtomicU64 = AtomicU64::new(0);
        fn fast() -> u64 {
            NOW.fetch_add(1_000, Ordering::Relaxed)
        }
        let zeros = vec![0u8; 1 << 20];
        let mut e = slow_engine(EngineConfig::default());
        let prior: Vec<CodecMeasure> = EngineConfig::default()
            .candidates
            .f64
            .iter()
            .map(|&codec| CodecMeasure {
                codec,
                original_len: 1 << 20,
                compressed_len: 1 << 10,
                ratio: 1024.0,
                compress_mb_s: 1000.0,
                decompress_mb_s: 1.0,
                verified: true,
            })
            .collect();
        e.calibrate_codecs(ElemKind::F64, &prior);
        e.set_clock(fast);
        let link = LinkKey(0);
        for i in 0..40 {
            let d = e.decide(link, ElemKind::F64, &zeros);
            assert!(d.compress(), "message {i}: {d:?}");
            send_observed(&mut e, link, (d.codec, ElemKind::F64), &zeros, 1e-4, None);
        }
        let s = e.summary(link, ElemKind::F64).unwrap();
        assert_eq!((s.studies, s.forced_studies), (1, 0), "{s:?}");
    }

    #[test]
    fn a_size_already_compressed_goes_on_until_compression_stops_paying() {
        // A link where the study predicts a speedup just above min_speedup: compressed.
        // The first whole message then compresses more slowly than predicted, and the
        // prediction falls between keep_speedup and min_speedup: the size stays
        // compressed. With one threshold for starting and stopping it goes raw.
        let text = testdata::text_like(1 << 16, 3);
        let (link, n) = (LinkKey(0), text.len());
        let engine_at = |rate: f64, config: &EngineConfig| {
            let mut e = Engine::new(config.clone()).unwrap();
            e.set_link_model(link, LinkModel::new(0.0, rate));
            e
        };
        let config = EngineConfig::default();
        let rate = (0..400)
            .map(|s| 1e10 / 1.03f64.powi(s))
            .find(|&rate| {
                let mut e = engine_at(rate, &config);
                let d = e.decide(link, ElemKind::BYTES, &text);
                d.compress()
                    && e.predict(link, ElemKind::BYTES, d.codec, n)
                        .unwrap()
                        .speedup()
                        < 1.08
            })
            .expect("a link where compression only just pays");
        let after = |config: &EngineConfig, compress_s: f64| {
            let mut e = engine_at(rate, config);
            let d = e.decide(link, ElemKind::BYTES, &text);
            send_observed(
                &mut e,
                link,
                (d.codec, ElemKind::BYTES),
                &text,
                compress_s,
                None,
            );
            let p = e.predict(link, ElemKind::BYTES, d.codec, n).unwrap();
            (p.speedup(), e.decide(link, ElemKind::BYTES, &text))
        };
        let slower = (0..200)
            .map(|k| 1e-6 * 1.1f64.powi(k))
            .find(|&c| (1.0..config.min_speedup).contains(&after(&config, c).0))
            .expect("a compression time that leaves the prediction just under min_speedup");
        let (speedup, d) = after(&config, slower);
        assert!(d.compress(), "{speedup}: {d:?}");
        let strict = EngineConfig {
            keep_speedup: config.min_speedup,
            ..config.clone()
        };
        let (speedup, d) = after(&strict, slower);
        assert!(!d.compress(), "{speedup}: {d:?}");
    }

    #[test]
    fn a_codec_that_only_just_loses_is_tried_on_a_whole_message() {
        // Links from fast to slow: somewhere the model says raw, but only just. There
        // the class's codec is tried on a whole message once per round of samples; it
        // turns out to run much faster than its prior, and from then on it pays.
        let text = testdata::text_like(1 << 16, 7);
        let noise = testdata::random_bytes(1 << 16, 7);
        let round = 32 * EngineConfig::default().candidates.bytes.len();
        let mut won = 0;
        for step in 0..60 {
            let rate = 1e10 / 1.15f64.powi(step);
            let mut e = Engine::new(EngineConfig::default()).unwrap();
            let link = LinkKey(0);
            e.set_link_model(link, LinkModel::new(0.0, rate));
            e.set_link_model(LinkKey(1), LinkModel::new(0.0, rate));
            let first = e.decide(link, ElemKind::BYTES, &text);
            let mut explored = None;
            let mut last = first;
            for i in 0..2 * round {
                let d = e.decide(link, ElemKind::BYTES, &text);
                if d.compress() {
                    // A whole message compressed in a microsecond, restored in one.
                    let c = (d.codec, ElemKind::BYTES);
                    send_observed(&mut e, link, c, &text, 1e-6, Some(1e-6));
                }
                if d.reason == Reason::Explored {
                    assert!(!first.compress(), "{rate}: explored although it paid");
                    explored.get_or_insert(i);
                }
                last = d;
            }
            if let Some(i) = explored {
                assert!(i + 1 >= round, "{rate}: explored after {i} messages");
                assert!(last.compress(), "{rate}: {last:?}");
                won += 1;
            }
            // Random bytes save nothing: never explored.
            for _ in 0..2 * round {
                let d = e.decide(LinkKey(1), ElemKind::BYTES, &noise);
                assert_ne!(d.reason, Reason::Explored, "{rate}");
            }
        }
        assert!(won > 0, "no link where the model only just said raw");
    }

    #[test]
    fn a_change_of_data_seen_by_a_sample_starts_a_study() {
        let mut e = slow_engine(EngineConfig {
            sample_every: 1,
            ..EngineConfig::default()
        });
        let link = LinkKey(0);
        let noise = testdata::random_bytes(1 << 16, 4);
        let text = testdata::text_like(1 << 16, 4);
        assert!(!e.decide(link, ElemKind::BYTES, &noise).compress());
        let candidates = EngineConfig::default().candidates.bytes.len();
        // Within a round of samples after the study, no new study, but the estimates
        // follow the samples.
        let d = e.decide(link, ElemKind::BYTES, &text);
        assert_ne!(d.reason, Reason::Studied);
        assert_eq!(e.summary(link, ElemKind::BYTES).unwrap().studies, 1);
        let mut studied_at = None;
        for i in 0..2 * candidates {
            if e.decide(link, ElemKind::BYTES, &text).reason == Reason::Studied {
                studied_at.get_or_insert(i);
            }
        }
        assert!(
            studied_at.is_some_and(|i| i + 2 >= candidates),
            "{studied_at:?}"
        );
        assert!(e.decide(link, ElemKind::BYTES, &text).compress());
        assert_eq!(e.summary(link, ElemKind::BYTES).unwrap().studies, 2);
    }

    #[test]
    fn thresholds_narrow_like_the_seeds_figure_4_13() {
        let mut e = slow_engine(EngineConfig::default());
        let noise = testdata::random_bytes(1 << 16, 1);
        let raw = |e: &mut Engine, n: usize| e.decide(LinkKey(0), ElemKind::BYTES, &noise[..n]);
        assert_eq!(raw(&mut e, 8192).reason, Reason::Studied);
        assert_eq!(raw(&mut e, 4096).reason, Reason::BelowRawThreshold);
        let d = raw(&mut e, 16384);
        assert_eq!((d.codec, d.reason), (Codec::None, Reason::Evaluated));
        let s = e.summary(LinkKey(0), ElemKind::BYTES).unwrap();
        assert_eq!((s.raw_below, s.compress_from), (16384, usize::MAX));

        let zeros = vec![0u8; 1 << 16];
        let zip = |e: &mut Engine, n: usize| e.decide(LinkKey(1), ElemKind::BYTES, &zeros[..n]);
        assert_eq!(zip(&mut e, 16384).reason, Reason::Studied);
        assert_eq!(zip(&mut e, 32768).reason, Reason::AboveCompressThreshold);
        let d = zip(&mut e, 8192);
        assert!(d.compress());
        assert_eq!(d.reason, Reason::Evaluated);
        let s = e.summary(LinkKey(1), ElemKind::BYTES).unwrap();
        assert_eq!((s.raw_below, s.compress_from), (0, 8192));
    }

    #[test]
    fn reevaluates_after_reevaluate_after_raw_messages() {
        let mut e = slow_engine(EngineConfig {
            reevaluate_after: 10,
            sample_every: 0,
            ..EngineConfig::default()
        });
        let noise = testdata::random_bytes(8192, 1);
        let reasons: Vec<Reason> = (0..12)
            .map(|_| e.decide(LinkKey(0), ElemKind::BYTES, &noise).reason)
            .collect();
        assert_eq!(reasons[0], Reason::Studied);
        assert!(reasons[1..10]
            .iter()
            .all(|&r| r == Reason::BelowRawThreshold));
        // Still noise: no new study, but the model is asked again.
        assert_eq!(reasons[10], Reason::Evaluated);
        assert_eq!(reasons[11], Reason::BelowRawThreshold);
        assert_eq!(e.summary(LinkKey(0), ElemKind::BYTES).unwrap().studies, 1);
        // The data became compressible: the re-evaluation studies it.
        let text = testdata::text_like(8192, 1);
        // (Two raw messages since the last re-evaluation, so eight to go.)
        let reasons: Vec<Reason> = (0..8)
            .map(|_| e.decide(LinkKey(0), ElemKind::BYTES, &text).reason)
            .collect();
        assert!(!reasons.contains(&Reason::Studied), "{reasons:?}");
        let d = e.decide(LinkKey(0), ElemKind::BYTES, &text);
        assert_eq!(d.reason, Reason::Studied);
        assert!(d.compress());
    }

    #[test]
    fn unknown_links_and_empty_classes_are_harmless() {
        let mut e = Engine::new(EngineConfig {
            candidates: crate::Candidates {
                int: Vec::new(),
                ..crate::Candidates::default()
            },
            min_size: 0,
            ..EngineConfig::default()
        })
        .unwrap();
        let d = e.decide(LinkKey(9), ElemKind::I32, &[0u8; 4096]);
        assert_eq!(d.reason, Reason::NoCandidates);
        assert_eq!(
            e.decide(LinkKey(9), ElemKind::U8, &[]).reason,
            Reason::TooSmall
        );
        // Reports about links or codecs never seen are absorbed.
        let run = CodecRun {
            codec: Codec::Zstd { level: 19 },
            elem: ElemKind::F64,
            in_bytes: 100,
            out_bytes: 10,
            compress_s: 1e-3,
            decompress_s: None,
        };
        e.observe_sent(LinkKey(42), &run);
        assert!(e
            .codec_stats(Codec::Zstd { level: 19 }, DataClass::F64)
            .is_some());
        assert!(e
            .predict(LinkKey(43), ElemKind::F64, run.codec, 1000)
            .is_some());
        e.observe_decompress(Codec::Lz4, ElemKind::F64, 1000, 1e-6);
        e.observe_decompress(Codec::Lz4, ElemKind::F64, 0, f64::NAN);
        let lz4 = e.codec_stats(Codec::Lz4, DataClass::F64).unwrap();
        let d = lz4.decompress_s_per_byte.unwrap();
        assert!((d - 1e-9).abs() < 1e-18, "{d}");
        assert_eq!(lz4.runs, 0);
        e.remove_link(LinkKey(9));
        assert!(e.summary(LinkKey(9), ElemKind::U8).is_none());
    }
}
