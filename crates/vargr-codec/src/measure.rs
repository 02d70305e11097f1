//! Ratio and speed of each codec on given data: what `vargr bench codec` prints, and the
//! numbers an adaptive engine's cost model starts from.
//!
//! This is the one module that reads a clock; codecs themselves never do. Speeds are in
//! MB/s (10^6 bytes) of *original* data in both directions, and each figure is the best
//! of several timed runs, so a scheduler hiccup on a shared machine does not show.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::header::{Header, HEADER_MIN};
use crate::{decompress, Codec, CodecError, ElemKind};

/// One codec's result on one input.
#[derive(Debug, Clone, PartialEq)]
pub struct CodecMeasure {
    pub codec: Codec,
    pub original_len: usize,
    /// Frame header plus the codec's payload, before any raw fallback.
    pub compressed_len: usize,
    /// `original_len / compressed_len`; below 1 when the codec expands the data (a real
    /// frame would then be sent raw).
    pub ratio: f64,
    pub compress_mb_s: f64,
    pub decompress_mb_s: f64,
    /// Whether decoding gave back exactly the input.
    pub verified: bool,
}

/// How long each direction of each codec is timed, at least one run.
pub const DEFAULT_BUDGET: Duration = Duration::from_millis(40);

/// Measures every codec of [`Codec::CATALOG`] that supports `elem` on `data`.
pub fn measure_all(data: &[u8], elem: ElemKind) -> Vec<CodecMeasure> {
    Codec::CATALOG
        .iter()
        .filter(|c| c.supports(elem))
        .filter_map(|&c| measure(c, data, elem, DEFAULT_BUDGET).ok())
        .collect()
}

/// Measures one codec, timing each direction for about `budget`.
///
/// Fails only if the codec cannot compress this data (unsupported element kind, bad
/// parameter); a payload that does not decode back is reported as `verified: false`.
pub fn measure(
    codec: Codec,
    data: &[u8],
    elem: ElemKind,
    budget: Duration,
) -> Result<CodecMeasure, CodecError> {
    let mut payload = Vec::new();
    let compress_s = best_time(budget, || {
        payload.clear();
        codec.compress(data, elem, &mut payload)
    })?;
    let mut out = Vec::with_capacity(data.len());
    let mut ok = true;
    let decompress_s = best_time(budget, || {
        out.clear();
        ok = decompress(codec.id(), &payload, elem, data.len(), &mut out).is_ok();
        Ok(())
    })?;
    let header_len = {
        let mut h = Vec::with_capacity(HEADER_MIN);
        Header {
            codec: codec.id(),
            elem,
            original_len: data.len() as u64,
            span: None,
        }
        .write(&mut h);
        h.len()
    };
    let compressed_len = header_len + payload.len();
    let mb = data.len() as f64 / 1e6;
    Ok(CodecMeasure {
        codec,
        original_len: data.len(),
        compressed_len,
        ratio: data.len() as f64 / compressed_len as f64,
        compress_mb_s: mb / compress_s,
        decompress_mb_s: mb / decompress_s,
        verified: ok && out == data,
    })
}

/// The fastest of repeated runs of `f`, in seconds, repeating until `budget` is spent.
fn best_time(
    budget: Duration,
    mut f: impl FnMut() -> Result<(), CodecError>,
) -> Result<f64, CodecError> {
    let start = Instant::now();
    let mut best = f64::INFINITY;
    let mut runs = 0u32;
    while runs == 0 || (start.elapsed() < budget && runs < 10_000) {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
        runs += 1;
    }
    // A run below the clock's resolution would read as infinitely fast.
    Ok(best.max(1e-9))
}

/// A plain-text table of measures, one codec a line.
pub fn format_table(measures: &[CodecMeasure]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<16} {:>10} {:>8} {:>12} {:>12}",
        "codec", "bytes", "ratio", "comp MB/s", "decomp MB/s"
    );
    for m in measures {
        let _ = writeln!(
            s,
            "{:<16} {:>10} {:>8.2} {:>12.0} {:>12.0}{}",
            m.codec.to_string(),
            m.compressed_len,
            m.ratio,
            m.compress_mb_s,
            m.decompress_mb_s,
            if m.verified {
                ""
            } else {
                "  ROUND TRIP FAILED"
            }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    #[test]
    fn every_catalog_codec_verifies_on_standard_sets() {
        for set in testdata::standard_sets(8192) {
            let measures: Vec<_> = Codec::CATALOG
                .iter()
                .filter(|c| c.supports(set.elem))
                .map(|&c| measure(c, &set.bytes, set.elem, Duration::ZERO).unwrap())
                .collect();
            assert!(!measures.is_empty());
            for m in &measures {
                assert!(m.verified, "{} on {}", m.codec, set.name);
                assert!(m.ratio > 0.0 && m.compress_mb_s > 0.0);
            }
            assert!(format_table(&measures).lines().count() == measures.len() + 1);
        }
    }
}
