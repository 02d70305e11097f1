//! Delta batches, the same on both sides: the prefix of bases a batch's zstd frame is
//! compressed against, and the frame itself.

use crate::fp::Fingerprint;

/// A batch's zstd prefix, built the same way on both sides: every base once, in the
/// order the deltas first named them.
pub(super) struct BatchPrefix {
    pub(super) bytes: Vec<u8>,
    named: Vec<Fingerprint>,
}

impl BatchPrefix {
    pub(super) fn new() -> BatchPrefix {
        BatchPrefix {
            // zstd reads a dictionary that begins with its magic number as a trained
            // one; a prefix must always read as raw content.
            bytes: vec![0],
            named: Vec::new(),
        }
    }

    pub(super) fn has(&self, fp: Fingerprint) -> bool {
        self.named.contains(&fp)
    }

    /// Appends base `fp` unless it is there already.
    pub(super) fn add(&mut self, fp: Fingerprint, base: &[u8]) {
        if !self.has(fp) {
            self.named.push(fp);
            self.bytes.extend_from_slice(base);
        }
    }
}

/// Largest zstd window a batch frame may need (its prefix and its content): 128 MiB.
const BATCH_WINDOW_LOG: u32 = 27;

/// One zstd frame of `data` that needs `prefix` to decode (as raw content before it; a
/// raw-content dictionary, which `cctx` keeps until the next).
pub(super) fn compress_with_prefix(
    cctx: &mut zstd::zstd_safe::CCtx<'static>,
    prefix: &[u8],
    data: &[u8],
    level: i32,
) -> Vec<u8> {
    use zstd::zstd_safe::CParameter;
    let window = (prefix.len() + data.len()).max(1 << 10).next_power_of_two();
    let log = window.trailing_zeros().min(BATCH_WINDOW_LOG);
    let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
    let r = cctx
        .set_parameter(CParameter::CompressionLevel(level))
        .and_then(|_| cctx.set_parameter(CParameter::WindowLog(log)))
        .and_then(|_| cctx.load_dictionary(prefix))
        .and_then(|_| cctx.compress2(&mut out, data));
    // Only a bad level or an allocation failure makes zstd fail here.
    r.expect("zstd compresses into a buffer of its bound");
    out
}

/// What [`compress_with_prefix`] made, back; `None` if it is not `len` bytes of it.
pub(super) fn decompress_with_prefix(prefix: &[u8], frame: &[u8], len: usize) -> Option<Vec<u8>> {
    use zstd::zstd_safe::{DCtx, DParameter};
    let mut dctx = DCtx::create();
    let mut out = Vec::with_capacity(len);
    dctx.set_parameter(DParameter::WindowLogMax(BATCH_WINDOW_LOG))
        .and_then(|_| dctx.ref_prefix(prefix))
        .and_then(|_| dctx.decompress(&mut out, frame))
        .ok()
        .filter(|&n| n == len)?;
    Some(out)
}
