//! The adaptive engine's settings: every number the seed leaves open, with the value
//! chosen here and the reason, so that a deployment can change them from a TOML or JSON
//! file without touching code.
//!
//! Intervals are counted in messages of one (link, data class), not in seconds: the
//! engine reads no clock, and a message count means the same thing on every machine,
//! which keeps decisions reproducible from the observations alone.

use serde::{Deserialize, Deserializer};

use crate::model::DataClass;
use crate::{Codec, CodecError};

/// At most this many candidate codecs per data class; the engine keeps their estimates
/// in fixed arrays so that a decision never allocates.
pub const MAX_CANDIDATES: usize = 8;

/// Settings of the runtime adaptive strategy ([`Engine`](crate::Engine)).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Messages smaller than this go raw without any thought (the seed's 2 KB: below it
    /// compression never paid on its cluster, and the header and call overhead dominate).
    pub min_size: usize,
    /// Compress only when the model predicts at least this speedup (Eq. 4.6). 1.0 is
    /// Eq. 4.4 exactly; 1.05 keeps a margin for model error, so that a marginal gain
    /// that the model overestimates does not turn into a loss (the target is "never
    /// worse than no compression").
    pub min_speedup: f64,
    /// Once compressing messages of a size, go on while the model predicts at least
    /// this speedup (at most `min_speedup`): a gap between starting and stopping, so
    /// that a prediction near `min_speedup` does not flip at the first whole message
    /// timed colder than the study's slices. At 1 Gbit/s, 128 KiB integers predicted
    /// at 1.07 went raw after one message for the rest of the job, where compressing
    /// them measured 1.25. 1.0 is Eq. 4.4: stop when compression no longer pays.
    pub keep_speedup: f64,
    /// Bytes of a message compressed to estimate a codec's ratio, instead of the seed's
    /// trial of the whole message. 4 KiB is long enough for LZ4/FPC/Huffman to reach
    /// their typical ratio on regular data and short enough (a few µs) to do often.
    pub sample_bytes: usize,
    /// A study's slices grow with the message, `size / study_slices`, from
    /// `sample_bytes` up to this. Small slices understate what a codec with a long
    /// reach gets from a whole message (on 1 MiB of patterned doubles, 4 KiB slices
    /// gave shuffle+LZ4 13 and FPC 14, the whole message 29 and 16; on 1 MiB of zeros
    /// zstd went from 216 to 20 560), so the engine chose the wrong codec. A study
    /// happens once per (link, class) and per change of data, so 4 slices of 32 KiB
    /// (a few hundred µs per study) are cheap; periodic samples stay at `sample_bytes`.
    pub max_sample_bytes: usize,
    /// A study compresses up to this many slices per candidate, spread over the
    /// message, and judges the candidate by their total. One slice can land in a
    /// region unlike the rest (a run of zeros, a table in a binary) and make the whole
    /// class go raw until the next study; four slices cost a few tens of µs per
    /// candidate, once per study.
    pub study_slices: usize,
    /// Sample one candidate every this many messages (candidates in turn), so that a
    /// change of data shows within `sample_every × candidates` messages even while the
    /// engine sends raw and learns nothing from the wire. A sample is one slice of
    /// `sample_bytes`, compared with slices of that size taken at the last study; a
    /// change beyond `change_tolerance` starts a new study. 0 disables periodic samples.
    /// 32 keeps the amortised cost of samples, re-evaluations and decisions well under a
    /// microsecond per 64 KiB message (`examples/decide_cost.rs`) and notices a change
    /// within about 200 messages (6 candidates).
    pub sample_every: u32,
    /// A sample whose ratio differs from the study's by more than this (absolute, in
    /// `csize/size`) means the data changed: the class is studied again, and such
    /// studies count towards `max_restudies` like those forced by mistakes. 0.15 is well
    /// above the slice-to-slice spread of regular data and well below the difference
    /// between compressible and random data.
    pub change_tolerance: f64,
    /// Switch the class's codec only when another candidate is predicted faster by this
    /// fraction, so that two near-equal codecs do not alternate on sampling noise.
    pub switch_margin: f64,
    /// Start a new study after this many messages sent raw since the last one (the
    /// seed's reevaluation threshold, 1000): a raw threshold set on old data must not
    /// keep compression off forever.
    pub reevaluate_after: u64,
    /// A compressed message that turned out not to pay (measured times and size) is a
    /// mistake; this many mistakes within `mistake_window` messages start a new study.
    /// The seed counts mistakes and their interval but gives no numbers: 3 in 50 means
    /// a systematic error (the data changed), not one slow compression.
    pub mistakes_to_restudy: u32,
    /// See `mistakes_to_restudy`.
    pub mistake_window: u64,
    /// This many mistake-driven studies within `restudy_window` messages switch
    /// compression off for the class on that link for `disable_for` messages (the
    /// seed's Figure 4.14(c)): 5 in 500 means the data changes faster than the engine
    /// can follow, and every study costs.
    pub max_restudies: u32,
    /// See `max_restudies`.
    pub restudy_window: u64,
    /// How long compression stays off after too many studies; afterwards the engine
    /// studies again, in case the program's phase changed. 10 000 messages.
    pub disable_for: u64,
    /// Moving-average weight of a new ratio figure (sample or whole message): a quarter,
    /// so that a real change shows within a few messages.
    pub ratio_weight: f64,
    /// Moving-average weight of a new codec speed figure: speeds depend on the machine,
    /// not on the data, so they move slowly (0.1) and ignore the odd hiccup.
    pub speed_weight: f64,
    /// Moving-average weight of a new transfer time in the link model (0.1).
    pub link_weight: f64,
    /// The latency assumed for a link nothing is known about (100 µs: a LAN round trip
    /// through TCP). Calibrate links that matter.
    pub prior_latency_s: f64,
    /// The bandwidth assumed for a link nothing is known about, in Mbit/s (1000: the
    /// pessimistic guess for compression, which pays less the faster the link).
    pub prior_bandwidth_mbit_s: f64,
    /// The codecs tried per data class.
    pub candidates: Candidates,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            min_size: 2048,
            min_speedup: 1.05,
            keep_speedup: 1.0,
            sample_bytes: 4096,
            max_sample_bytes: 32 << 10,
            study_slices: 4,
            sample_every: 32,
            change_tolerance: 0.15,
            switch_margin: 0.05,
            reevaluate_after: 1000,
            mistakes_to_restudy: 3,
            mistake_window: 50,
            max_restudies: 5,
            restudy_window: 500,
            disable_for: 10_000,
            ratio_weight: 0.25,
            speed_weight: 0.1,
            link_weight: 0.1,
            prior_latency_s: 100e-6,
            prior_bandwidth_mbit_s: 1000.0,
            candidates: Candidates::default(),
        }
    }
}

/// Candidate codecs per data class, as codec names (`"lz4"`, `"zstd:1"`, `"fpc:16"`).
///
/// The seed preselects LZO for integers and floats, LZO and FPC for doubles, and LZO,
/// RLE, Rice and Huffman for other data. Here LZ4 plays LZO (and catches the seed's
/// "redundant" data, repeated zeros); typed data also gets the byte shuffle (Blosc's
/// trick, often the best on numeric arrays) and a fast zstd, plain and shuffled, for
/// slow links (plain zstd wins on real arrays whose values repeat, such as prices or
/// images, and on mostly-zero buffers, where it reaches ratios LZ4 cannot). Rice moves
/// from bytes, where it rarely helps, to integers and floats, where deltas of smooth
/// fields are small (on this crate's test fields it beats FPC). Bytes get zstd:1, and
/// zstd:6 for streams on slow links, where compression hides behind the frames queued
/// ahead (`Engine::decide_behind`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Candidates {
    pub bytes: Vec<Codec>,
    pub int: Vec<Codec>,
    pub f32: Vec<Codec>,
    pub f64: Vec<Codec>,
}

impl Default for Candidates {
    fn default() -> Self {
        let fpc = Codec::Fpc { table_bits: 16 };
        let szstd = Codec::ShuffleZstd { level: 1 };
        let zstd = Codec::Zstd { level: 1 };
        Candidates {
            bytes: vec![
                Codec::Lz4,
                zstd,
                Codec::Zstd { level: 6 },
                Codec::Rle,
                Codec::Huffman,
            ],
            int: vec![Codec::Lz4, Codec::ShuffleLz4, Codec::Rice, szstd, zstd],
            f32: vec![Codec::Lz4, Codec::ShuffleLz4, fpc, szstd, Codec::Rice, zstd],
            f64: vec![Codec::Lz4, fpc, Codec::ShuffleLz4, szstd, Codec::Rice, zstd],
        }
    }
}

impl Candidates {
    /// The list for one class.
    pub fn for_class(&self, class: DataClass) -> &[Codec] {
        match class {
            DataClass::Bytes => &self.bytes,
            DataClass::Int => &self.int,
            DataClass::F32 => &self.f32,
            DataClass::F64 => &self.f64,
        }
    }
}

impl EngineConfig {
    /// Reads settings from a TOML file (any setting left out keeps its default) and
    /// checks them; the error names the file and the setting.
    pub fn from_toml_file(path: &std::path::Path) -> Result<EngineConfig, CodecError> {
        let err = |reason: String| CodecError::ConfigFile {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let config: EngineConfig = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        config.validate().map_err(|e| err(e.to_string()))?;
        Ok(config)
    }

    /// Checks every setting; the error names the field and what was expected.
    pub fn validate(&self) -> Result<(), CodecError> {
        let bad =
            |field: &'static str, reason: String| Err(CodecError::InvalidConfig { field, reason });
        let fraction = |field: &'static str, v: f64, zero_ok: bool| {
            let ok = v.is_finite() && v <= 1.0 && (v > 0.0 || (zero_ok && v == 0.0));
            if ok {
                Ok(())
            } else {
                let range = if zero_ok {
                    "0 to 1"
                } else {
                    "above 0, at most 1"
                };
                bad(field, format!("{v} is not a fraction {range}"))
            }
        };
        if !(self.min_speedup.is_finite() && self.min_speedup >= 1.0) {
            return bad(
                "min_speedup",
                format!(
                    "{} must be at least 1.0 (compress only when it pays)",
                    self.min_speedup
                ),
            );
        }
        if !(self.keep_speedup.is_finite()
            && self.keep_speedup >= 1.0
            && self.keep_speedup <= self.min_speedup)
        {
            return bad(
                "keep_speedup",
                format!(
                    "{} must be from 1.0 to min_speedup ({})",
                    self.keep_speedup, self.min_speedup
                ),
            );
        }
        if self.sample_bytes < 256 {
            return bad(
                "sample_bytes",
                format!(
                    "{} is below 256, too short to estimate a ratio",
                    self.sample_bytes
                ),
            );
        }
        if self.max_sample_bytes < self.sample_bytes {
            return bad(
                "max_sample_bytes",
                format!(
                    "{} is below sample_bytes ({})",
                    self.max_sample_bytes, self.sample_bytes
                ),
            );
        }
        if !(1..=64).contains(&self.study_slices) {
            return bad(
                "study_slices",
                format!("{} is not between 1 and 64", self.study_slices),
            );
        }
        fraction("change_tolerance", self.change_tolerance, false)?;
        fraction("switch_margin", self.switch_margin, true)?;
        fraction("ratio_weight", self.ratio_weight, false)?;
        fraction("speed_weight", self.speed_weight, false)?;
        fraction("link_weight", self.link_weight, false)?;
        for (field, v) in [
            ("reevaluate_after", self.reevaluate_after),
            ("mistake_window", self.mistake_window),
            ("restudy_window", self.restudy_window),
            ("mistakes_to_restudy", u64::from(self.mistakes_to_restudy)),
            ("max_restudies", u64::from(self.max_restudies)),
        ] {
            if v == 0 {
                return bad(field, "must be at least 1".into());
            }
        }
        if !(self.prior_latency_s.is_finite() && self.prior_latency_s >= 0.0) {
            return bad(
                "prior_latency_s",
                format!(
                    "{} is not a finite, non-negative time",
                    self.prior_latency_s
                ),
            );
        }
        if !(self.prior_bandwidth_mbit_s.is_finite() && self.prior_bandwidth_mbit_s > 0.0) {
            return bad(
                "prior_bandwidth_mbit_s",
                format!(
                    "{} is not a positive bandwidth",
                    self.prior_bandwidth_mbit_s
                ),
            );
        }
        for class in DataClass::ALL {
            let list = self.candidates.for_class(class);
            if list.len() > MAX_CANDIDATES {
                return bad(
                    "candidates",
                    format!(
                        "{}: {} codecs, at most {MAX_CANDIDATES}",
                        class.name(),
                        list.len()
                    ),
                );
            }
            for (i, &c) in list.iter().enumerate() {
                if list[..i].contains(&c) {
                    return bad(
                        "candidates",
                        format!("{}: {c} is listed twice", class.name()),
                    );
                }
                if c == Codec::None {
                    return bad(
                        "candidates",
                        format!(
                            "{}: `none` is always a choice, do not list it",
                            class.name()
                        ),
                    );
                }
                // Every element kind of a class has the same size, so one kind stands
                // for the class.
                if !c.supports(class.elem()) {
                    return bad(
                        "candidates",
                        format!(
                            "{}: {c} cannot compress {} data",
                            class.name(),
                            class.name()
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Codec {
    /// A codec by name, as [`Codec`]'s `FromStr` reads it (`"zstd:3"`).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        EngineConfig::default().validate().unwrap();
    }

    #[test]
    fn reads_toml_with_codec_names() {
        let cfg: EngineConfig = toml::from_str(
            r#"
            min_size = 4096
            reevaluate_after = 500
            [candidates]
            f64 = ["fpc:12", "zstd:3"]
            "#,
        )
        .unwrap();
        assert_eq!(cfg.min_size, 4096);
        assert_eq!(cfg.reevaluate_after, 500);
        assert_eq!(
            cfg.candidates.f64,
            vec![Codec::Fpc { table_bits: 12 }, Codec::Zstd { level: 3 }]
        );
        assert_eq!(cfg.candidates.bytes, Candidates::default().bytes);
        cfg.validate().unwrap();
        assert!(toml::from_str::<EngineConfig>("[candidates]\nint = [\"gzip\"]").is_err());
        assert!(toml::from_str::<EngineConfig>("min_sise = 1").is_err());
    }

    #[test]
    fn rejects_bad_settings() {
        let with = |f: fn(&mut EngineConfig)| {
            let mut c = EngineConfig::default();
            f(&mut c);
            c.validate()
        };
        assert!(with(|c| c.min_speedup = 0.9).is_err());
        assert!(with(|c| c.keep_speedup = 1.2).is_err());
        assert!(with(|c| c.keep_speedup = 0.99).is_err());
        assert!(with(|c| c.ratio_weight = 0.0).is_err());
        assert!(with(|c| c.ratio_weight = f64::NAN).is_err());
        assert!(with(|c| c.reevaluate_after = 0).is_err());
        assert!(with(|c| c.prior_bandwidth_mbit_s = 0.0).is_err());
        assert!(with(|c| c.candidates.bytes.push(Codec::Fpc { table_bits: 16 })).is_err());
        assert!(with(|c| c.candidates.int.push(Codec::None)).is_err());
        assert!(with(|c| c.candidates.int = vec![Codec::Lz4; 9]).is_err());
        assert!(with(|c| c.candidates.int = vec![Codec::Lz4, Codec::Lz4]).is_err());
        assert!(with(|c| c.max_sample_bytes = 1024).is_err());
        let err = with(|c| c.sample_bytes = 10).unwrap_err();
        assert!(err.to_string().contains("sample_bytes"), "{err}");
    }
}
