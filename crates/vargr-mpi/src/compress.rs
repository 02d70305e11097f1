//! CoMPI (seed 002) for programs that were not written for vargr: messages between
//! ranks of different sites are compressed by vargr-codec behind a small frame, sent
//! with the real MPI and decoded before the program sees them.
//!
//! # Which messages are framed
//! Both ends must agree, message by message, without asking each other, and MPI's
//! matching (source, tag, communicator, order) must stay the program's. So the rule
//! depends only on what each end knows, and the frame travels in the message itself
//! with the program's own source, tag and communicator:
//!
//! - a send of `n` bytes to a rank of another site is framed when `n >= floor`, where
//!   `floor` is the smaller of the compression threshold `min` and [`FRAME_FLOOR`] (the
//!   same on every rank); frames of fewer than `min` bytes go stored (not compressed);
//! - a framed message is never shorter than `floor` bytes on the wire (a frame that
//!   compressed below it is padded up to it), and an unframed one between sites always
//!   is (it has fewer than `floor` bytes);
//! - so a receiver that got `w` bytes from a rank of another site knows: `w >= floor`
//!   means a frame.
//!
//! The padding bounds a message's ratio at `n / floor`: the floor is small so that
//! compressible messages of tens of KiB are not held to a few times smaller, and not
//! smaller still because every message between sites above it is copied once more and
//! its receive probed first. Every rank checks at `MPI_Init` that all ranks run with
//! the same settings and sites, and refuses to start otherwise.
//!
//! # The frame
//! ```text
//! u32 LE     L: length of the codec frame
//! L bytes    a vargr-codec frame (its header names the codec, element kind and the
//!            original length; codec `none` when compression did not pay)
//! u64 LE     xxh3 of the original bytes
//! zeros      up to `floor` bytes in all
//! ```
//! A frame that does not parse, decode, or match its checksum is an MPI error on the
//! receiver (`MPI_ERR_OTHER` through the communicator's error handler), never wrong
//! data. One whose original length exceeds the receive buffer is `MPI_ERR_TRUNCATE`,
//! as the unframed message would have been.
//!
//! # Deciding
//! `fixed:CODEC` compresses every framed message with one codec; `adaptive` asks
//! vargr-codec's engine per message (the seed's runtime strategy), per link to the
//! other site, with the link's model from `VARGR_MPI_LINK` (the emulated or known WAN)
//! or learned from the sends themselves; `guided:PLAN` (the seed's guided strategy) looks
//! each message up in a plan that `vargr codec plan` made from the samples an earlier run
//! recorded (`VARGR_MPI_CODEC_SAMPLES`), by the [`Message`]'s kind, communicator, tag,
//! element type and size, and pays no study.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr};
use std::str::FromStr;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use std::collections::HashMap;

use vargr_codec::guided::{encode_sample, trace_header, MessageKey, Sample, MAX_SAMPLE};
use vargr_codec::stage::CodecMode;
use vargr_codec::{
    decode, encode, Codec, CodecId, ElemKind, Engine, EngineConfig, Header, LinkKey, LinkModel,
};
use xxhash_rust::xxh3::xxh3_64;

/// The largest size below which messages between sites travel as they are (see the
/// module's docs); a lower compression threshold lowers it.
pub const FRAME_FLOOR: usize = 4096;

/// Bytes a frame adds to its codec frame: the length before it, the checksum after.
pub const FRAME_EXTRA: usize = 4 + 8;

/// The most a frame of `len` original bytes takes before padding: a codec frame is
/// never more than its header larger than the input.
pub fn frame_bound(len: usize) -> usize {
    len + vargr_codec::HEADER_MAX + FRAME_EXTRA
}

/// How ranks are grouped into sites: messages between sites are the ones compressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SiteRule {
    /// A site per host (the processor name MPI gives).
    Hosts,
    /// `blocks:N`: the world in N equal blocks of consecutive ranks (emulated sites on
    /// one machine).
    Blocks(u32),
    /// `list:A,A,B,B`: each world rank's site by name, in rank order.
    List(Vec<String>),
}

impl FromStr for SiteRule {
    type Err = String;

    fn from_str(s: &str) -> Result<SiteRule, String> {
        let s = s.trim();
        if s.is_empty() || s == "hosts" {
            return Ok(SiteRule::Hosts);
        }
        if let Some(n) = s.strip_prefix("blocks:") {
            return match n.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(SiteRule::Blocks(n)),
                _ => Err(format!("blocks:{n}: expected a number of sites, 1 or more")),
            };
        }
        if let Some(list) = s.strip_prefix("list:") {
            let names: Vec<String> = list.split(',').map(|n| n.trim().to_string()).collect();
            if names.iter().any(String::is_empty) {
                return Err(format!("{s}: an empty site name"));
            }
            return Ok(SiteRule::List(names));
        }
        Err(format!(
            "{s:?}: expected hosts, blocks:N or list:SITE,SITE,... (one per world rank)"
        ))
    }
}

impl SiteRule {
    /// The site of world rank `rank` of `size`, as a key every rank computes alike
    /// (`host`: the rank's processor name).
    pub fn key(&self, rank: u32, size: u32, host: &str) -> Result<u64, String> {
        match self {
            SiteRule::Hosts => Ok(xxh3_64(host.as_bytes())),
            SiteRule::Blocks(n) => {
                let n = u64::from(*n).min(u64::from(size.max(1)));
                Ok(u64::from(rank) * n / u64::from(size.max(1)))
            }
            SiteRule::List(names) => match names.get(rank as usize) {
                Some(name) if names.len() == size as usize => Ok(xxh3_64(name.as_bytes())),
                _ => Err(format!(
                    "VARGR_MPI_SITES lists {} sites for a world of {size} ranks",
                    names.len()
                )),
            },
        }
    }
}

/// What compression does in this process (from `VARGR_MPI_CODEC`, `VARGR_MPI_CODEC_MIN`,
/// `VARGR_MPI_SITES`, `VARGR_MPI_LINK`: [`crate::settings`]).
#[derive(Debug, Clone)]
pub struct CodecSettings {
    pub mode: CodecMode,
    /// The threshold: messages between sites of at least this many bytes are framed.
    pub min: usize,
    pub sites: SiteRule,
    /// The WAN between sites, if known: one-way latency (s) and bytes per second.
    pub link: Option<(f64, f64)>,
    /// Where this rank records samples of its messages between sites for `vargr codec
    /// plan` (the guided strategy's first run).
    pub samples: Option<std::path::PathBuf>,
}

impl CodecSettings {
    /// What every rank must agree on, as one number.
    pub fn agreement(&self, site_keys: &[u64]) -> u64 {
        let mut text = format!("{:?}|{}|{:?}", mode_name(&self.mode), self.min, self.sites);
        for k in site_keys {
            text.push_str(&format!(",{k:x}"));
        }
        xxh3_64(text.as_bytes())
    }
}

fn mode_name(m: &CodecMode) -> String {
    match m {
        CodecMode::Off => "off".into(),
        CodecMode::Adaptive => "adaptive".into(),
        CodecMode::Fixed(c) => format!("fixed:{c}"),
        CodecMode::Guided { path, .. } => format!("guided:{path}"),
    }
}

/// Why a frame was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The original message is longer than the receive buffer.
    Truncated { original: u64 },
    /// Not a frame this library wrote, or damaged.
    Corrupt(String),
}

thread_local! {
    /// Decoded bytes before they reach the receive buffer.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Appends the frame of `data` (elements of `elem`) to `out`, compressed with `codec`
/// when that makes it smaller; returns the codec used (`None`: sent stored).
pub fn write_frame(codec: Codec, elem: ElemKind, data: &[u8], out: &mut Vec<u8>) -> CodecId {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    let header = encode(codec, elem, data, out);
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&xxh3_64(data).to_le_bytes());
    header.codec
}

/// Decodes the frame at the front of `wire` into `out` (at most `out.len()` bytes);
/// returns the original length. Padding after the frame is ignored.
pub fn read_frame(wire: &[u8], out: &mut [u8]) -> Result<usize, FrameError> {
    let corrupt = |what: String| FrameError::Corrupt(what);
    let Some((len, rest)) = wire.split_first_chunk::<4>() else {
        return Err(corrupt(format!(
            "{} bytes, shorter than a frame",
            wire.len()
        )));
    };
    let len = u32::from_le_bytes(*len) as usize;
    let Some((frame, rest)) = rest.split_at_checked(len) else {
        return Err(corrupt(format!(
            "a codec frame of {len} bytes in {} bytes",
            wire.len()
        )));
    };
    let Some((sum, _padding)) = rest.split_first_chunk::<8>() else {
        return Err(corrupt("no checksum after the codec frame".into()));
    };
    let (header, _) = Header::parse(frame).map_err(|e| corrupt(e.to_string()))?;
    if header.original_len > out.len() as u64 {
        return Err(FrameError::Truncated {
            original: header.original_len,
        });
    }
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        s.clear();
        decode(frame, out.len(), &mut s).map_err(|e| corrupt(e.to_string()))?;
        if xxh3_64(&s) != u64::from_le_bytes(*sum) {
            return Err(corrupt("the checksum of the decoded bytes differs".into()));
        }
        out[..s.len()].copy_from_slice(&s);
        let n = s.len();
        // Large scratch buffers are not kept between messages.
        if s.capacity() > 4 << 20 {
            *s = Vec::new();
        }
        Ok(n)
    })
}

/// The process's compression state, once `MPI_Init` has set it up.
struct Shim {
    settings: CodecSettings,
    /// Site key of each world rank.
    sites: Vec<u64>,
    engine: Option<Mutex<Engine>>,
    samples: Option<Mutex<Samples>>,
}

/// A message as the guided strategy tells messages apart: what it is (a point-to-point
/// message, or a block of an all-to-all), its element type, communicator, tag and size.
/// Communicators are numbered in each process's order of first use, which a program that
/// runs the same way twice repeats.
#[derive(Debug, Clone, Copy)]
pub struct Message {
    pub kind: u8,
    pub comm: u32,
    pub tag: i32,
}

/// Kinds of [`Message`].
pub const KIND_P2P: u8 = 1;
pub const KIND_ALLTOALL: u8 = 2;

fn key_of(m: Message, elem: ElemKind, len: usize) -> MessageKey {
    MessageKey {
        kind: m.kind,
        elem,
        stream: m.comm,
        tag: m.tag,
        len: len.min(u32::MAX as usize) as u32,
    }
}

/// The first few payloads of each kind of message, kept for the rank's samples file.
struct Samples {
    seen: HashMap<MessageKey, u32>,
    file: Vec<u8>,
}

impl Samples {
    /// As `vargr run --codec-samples` keeps them: two per kind, up to 64 MiB a rank.
    const PER_KEY: u32 = 2;
    const MAX_FILE: usize = 64 << 20;

    fn record(&mut self, key: MessageKey, payload: &[u8]) {
        let n = self.seen.entry(key).or_insert(0);
        if *n >= Self::PER_KEY || self.file.len() > Self::MAX_FILE {
            return;
        }
        *n += 1;
        encode_sample(
            &Sample {
                key,
                payload: payload[..payload.len().min(MAX_SAMPLE)].to_vec(),
            },
            &mut self.file,
        );
    }
}

static SHIM: OnceLock<Shim> = OnceLock::new();

impl Shim {
    fn link(&self, peer: u32) -> LinkKey {
        LinkKey(self.sites.get(peer as usize).copied().unwrap_or(0))
    }

    fn codec_for(&self, peer: u32, msg: Message, elem: ElemKind, data: &[u8]) -> Codec {
        if data.len() < self.settings.min {
            return Codec::None;
        }
        let key = key_of(msg, elem, data.len());
        if let Some(s) = &self.samples {
            lock(s).record(key, data);
        }
        match &self.settings.mode {
            CodecMode::Guided { plan, .. } => match plan.codec_for(&key) {
                c if c.supports(elem) => c,
                _ => Codec::None,
            },
            CodecMode::Fixed(c) if c.supports(elem) => *c,
            CodecMode::Adaptive => match &self.engine {
                Some(e) => {
                    let link = self.link(peer);
                    lock(e).decide(link, elem, data).codec
                }
                None => Codec::None,
            },
            _ => Codec::None,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sets compression up with the sites of every world rank (in rank order); returns
/// the size from which messages between sites are framed, or 0 when compression is off.
pub fn setup(settings: CodecSettings, sites: Vec<u64>) -> Result<usize, String> {
    let engine = match &settings.mode {
        CodecMode::Off => return Ok(0),
        CodecMode::Fixed(_) | CodecMode::Guided { .. } => None,
        CodecMode::Adaptive => {
            let mut e = Engine::new(EngineConfig {
                min_size: settings.min,
                ..EngineConfig::default()
            })
            .map_err(|e| e.to_string())?;
            if let Some((latency, rate)) = settings.link {
                let mut keys = sites.clone();
                keys.sort_unstable();
                keys.dedup();
                for k in keys {
                    e.set_link_model(LinkKey(k), LinkModel::new(latency, rate));
                }
            }
            Some(Mutex::new(e))
        }
    };
    let floor = settings.min.min(FRAME_FLOOR);
    let samples = settings.samples.as_ref().map(|_| {
        Mutex::new(Samples {
            seen: HashMap::new(),
            file: trace_header().to_vec(),
        })
    });
    let _ = SHIM.set(Shim {
        settings,
        sites,
        engine,
        samples,
    });
    Ok(floor)
}

// ---- the C ABI (c/compress.c) ------------------------------------------------------

/// Writes the frame of `len` bytes at `data` for world rank `peer` into `out`, which
/// holds [`frame_bound`]`(len)` bytes; `stored` forbids compression (a persistent
/// send, whose size on the wire is fixed). Returns the frame's length.
///
/// # Safety
/// `data` must hold `len` readable bytes and `out` `frame_bound(len)` writable ones.
#[no_mangle]
pub unsafe extern "C" fn vargr_mpi_cx_encode(
    peer: u32,
    kind: u8,
    comm: u32,
    tag: i32,
    elem: u8,
    data: *const u8,
    len: u64,
    stored: c_int,
    out: *mut u8,
) -> u64 {
    let len = len as usize;
    // SAFETY: the caller's contract.
    let data = unsafe { slice_or_empty(data, len) };
    let elem = ElemKind::from_u8(elem).unwrap_or(ElemKind::BYTES);
    let codec = match SHIM.get() {
        Some(s) if stored == 0 => s.codec_for(peer, Message { kind, comm, tag }, elem, data),
        _ => Codec::None,
    };
    let t0 = Instant::now();
    let mut frame = Vec::with_capacity(frame_bound(len));
    let used = write_frame(codec, elem, data, &mut frame);
    if let (Some(s), true) = (SHIM.get(), used != CodecId::None) {
        if let Some(e) = &s.engine {
            lock(e).observe_codec(&vargr_codec::CodecRun {
                codec,
                elem,
                in_bytes: len,
                out_bytes: frame.len() - FRAME_EXTRA,
                compress_s: t0.elapsed().as_secs_f64(),
                decompress_s: None,
            });
        }
    }
    let n = frame.len().min(frame_bound(len));
    // SAFETY: the caller's contract: `out` holds frame_bound(len) bytes.
    unsafe { std::ptr::copy_nonoverlapping(frame.as_ptr(), out, n) };
    n as u64
}

/// The most [`vargr_mpi_cx_encode`] writes for `len` bytes.
#[no_mangle]
pub extern "C" fn vargr_mpi_cx_bound(len: u64) -> u64 {
    frame_bound(len as usize) as u64
}

/// Decodes the frame of `wire_len` bytes at `wire` into `out` (`cap` bytes). Returns
/// 0 with `*original` the message's length; 1 when it does not fit (`*original` set);
/// -1 when the frame is damaged (the reason printed on stderr with `what`).
///
/// # Safety
/// `wire` must hold `wire_len` readable bytes, `out` `cap` writable ones, `original`
/// be writable and `what` a C string.
#[no_mangle]
pub unsafe extern "C" fn vargr_mpi_cx_decode(
    wire: *const u8,
    wire_len: u64,
    out: *mut u8,
    cap: u64,
    original: *mut u64,
    what: *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    let (wire, out) = unsafe {
        (
            slice_or_empty(wire, wire_len as usize),
            slice_mut_or_empty(out, cap as usize),
        )
    };
    match read_frame(wire, out) {
        Ok(n) => {
            // SAFETY: the caller's contract.
            unsafe { *original = n as u64 };
            0
        }
        Err(FrameError::Truncated { original: n }) => {
            // SAFETY: the caller's contract.
            unsafe { *original = n };
            1
        }
        Err(FrameError::Corrupt(why)) => {
            // SAFETY: the caller's contract: a C string.
            let what = unsafe { CStr::from_ptr(what) }.to_string_lossy();
            crate::events::say(&format!(
                "vargr-mpi: a compressed message {what} is damaged ({why}): reported as \
                 an MPI error"
            ));
            -1
        }
    }
}

/// The original length a frame of `wire_len` bytes at `wire` announces, or -1.
///
/// # Safety
/// `wire` must hold `wire_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn vargr_mpi_cx_original(wire: *const u8, wire_len: u64) -> i64 {
    // SAFETY: the caller's contract.
    let wire = unsafe { slice_or_empty(wire, wire_len as usize) };
    original_len(wire).map_or(-1, |n| n.min(i64::MAX as u64) as i64)
}

/// What the frame at the front of `wire` says the original length is.
pub fn original_len(wire: &[u8]) -> Option<u64> {
    let (len, rest) = wire.split_first_chunk::<4>()?;
    let frame = rest.get(..u32::from_le_bytes(*len) as usize)?;
    Header::parse(frame).ok().map(|(h, _)| h.original_len)
}

/// Learns from a framed send to world rank `peer`: `wire` bytes took `seconds`.
#[no_mangle]
pub extern "C" fn vargr_mpi_cx_sent(peer: u32, wire: u64, seconds: f64) {
    if let Some(s) = SHIM.get() {
        if let (Some(e), true) = (&s.engine, seconds > 0.0) {
            lock(e).observe_transfer(s.link(peer), wire as usize, seconds);
        }
    }
}

/// Writes this rank's samples file (`<host>-<rank>.ctr` in the samples directory), if
/// it records them; at `MPI_Finalize`.
///
/// # Safety
/// `host` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn vargr_mpi_cx_samples(rank: c_int, host: *const c_char) {
    let Some(shim) = SHIM.get() else { return };
    let (Some(dir), Some(samples)) = (&shim.settings.samples, &shim.samples) else {
        return;
    };
    // SAFETY: the caller's contract.
    let host = unsafe { CStr::from_ptr(host) }.to_string_lossy();
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = dir.join(format!("{host}-{rank:05}.ctr"));
    let file = std::mem::take(&mut lock(samples).file);
    let written =
        std::fs::create_dir_all(dir).and_then(|_| vargr_trace::write_atomic(&path, &file));
    if let Err(e) = written {
        crate::events::say(&format!(
            "vargr-mpi: rank {rank}: cannot write codec samples to {}: {e}",
            path.display()
        ));
    }
}

/// Prints the job's compression at `MPI_Finalize` (world rank 0): frames sent between
/// sites, their original bytes and their bytes on the wire.
///
/// # Safety
/// `totals` must hold three values.
#[no_mangle]
pub unsafe extern "C" fn vargr_mpi_cx_summary(totals: *const u64) {
    // SAFETY: the caller's contract.
    let t = unsafe { std::slice::from_raw_parts(totals, 3) };
    let mode = SHIM
        .get()
        .map_or("off".into(), |s| mode_name(&s.settings.mode));
    crate::events::say(&summary(&mode, t[0], t[1], t[2]));
}

/// The line [`vargr_mpi_cx_summary`] prints.
pub fn summary(mode: &str, frames: u64, original: u64, wire: u64) -> String {
    let ratio = if wire == 0 {
        1.0
    } else {
        original as f64 / wire as f64
    };
    format!(
        "vargr-mpi: compression {mode}: {frames} messages between sites, {} on the wire \
         for {} (x{ratio:.2})",
        human(wire),
        human(original)
    )
}

fn human(b: u64) -> String {
    match b {
        b if b >= 10 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 10 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// Compression's first step in `MPI_Init`: returns 1 and sets `*key` (this rank's
/// site, from its processor name `host` where sites are hosts) when compression is on,
/// 0 when off, -1 on a setting error (printed).
///
/// # Safety
/// `host` must be a C string; `key` writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_mpi_cx_site(
    rank: c_int,
    size: c_int,
    host: *const c_char,
    key: *mut u64,
) -> c_int {
    let settings = match &crate::settings::Settings::process().codec {
        Ok(Some(s)) => s,
        Ok(None) => return 0,
        Err(e) => {
            crate::events::say(&format!("vargr-mpi: rank {rank}: {e}"));
            return -1;
        }
    };
    // SAFETY: the caller's contract.
    let host = unsafe { CStr::from_ptr(host) }.to_string_lossy();
    match settings.sites.key(rank as u32, size as u32, &host) {
        Ok(k) => {
            // SAFETY: the caller's contract.
            unsafe { *key = k };
            1
        }
        Err(e) => {
            crate::events::say(&format!("vargr-mpi: rank {rank}: {e}"));
            -1
        }
    }
}

/// Compression's setup, once every rank's site key is known (`keys`, `size` of them in
/// world rank order): returns the threshold (0: off), and the agreement every rank
/// must share in `*agreement`.
///
/// # Safety
/// `keys` must hold `size` values; `agreement` writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_mpi_cx_setup(
    keys: *const u64,
    size: c_int,
    agreement: *mut u64,
) -> u64 {
    // SAFETY: the caller's contract.
    let keys = unsafe { std::slice::from_raw_parts(keys, size.max(0) as usize) }.to_vec();
    let Ok(Some(settings)) = &crate::settings::Settings::process().codec else {
        return 0;
    };
    let settings = settings.clone();
    // SAFETY: the caller's contract.
    unsafe { *agreement = settings.agreement(&keys) };
    match setup(settings, keys) {
        Ok(min) => min as u64,
        Err(e) => {
            crate::events::say(&format!("vargr-mpi: {e}; not compressing"));
            0
        }
    }
}

unsafe fn slice_or_empty<'a>(p: *const u8, len: usize) -> &'a [u8] {
    if p.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(p, len) }
    }
}

unsafe fn slice_mut_or_empty<'a>(p: *mut u8, len: usize) -> &'a mut [u8] {
    if p.is_null() || len == 0 {
        &mut []
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(p, len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: usize) -> Vec<u8> {
        (0..n / 8)
            .flat_map(|i| ((i % 100) as f64 * 0.5).to_le_bytes())
            .collect()
    }

    #[test]
    fn a_frame_round_trips_compressed_or_stored() {
        let data = field(80_000);
        for codec in [Codec::Lz4, Codec::None, Codec::Fpc { table_bits: 16 }] {
            let mut wire = Vec::new();
            let used = write_frame(codec, ElemKind::F64, &data, &mut wire);
            assert_eq!(used == CodecId::None, codec == Codec::None);
            assert!(wire.len() <= frame_bound(data.len()));
            // Padding after the frame is ignored.
            wire.resize(wire.len() + 100, 0);
            let mut out = vec![0u8; data.len() + 10];
            assert_eq!(read_frame(&wire, &mut out), Ok(data.len()));
            assert_eq!(&out[..data.len()], &data[..]);
        }
    }

    #[test]
    fn a_small_buffer_is_truncation_and_damage_is_refused() {
        let data = field(8_000);
        let mut wire = Vec::new();
        write_frame(Codec::Lz4, ElemKind::F64, &data, &mut wire);
        let mut small = vec![0u8; 100];
        assert_eq!(
            read_frame(&wire, &mut small),
            Err(FrameError::Truncated { original: 8_000 })
        );
        let mut out = vec![0u8; 8_000];
        // A flipped byte is refused, or decodes to the very same bytes (an LZ4 offset
        // into a repeating pattern): never wrong data.
        let mut refused = 0;
        for k in 0..wire.len() {
            let mut bad = wire.clone();
            bad[k] ^= 0x20;
            out.fill(0);
            match read_frame(&bad, &mut out) {
                Ok(n) => assert_eq!(&out[..n], &data[..], "byte {k} flipped"),
                Err(FrameError::Truncated { .. } | FrameError::Corrupt(_)) => refused += 1,
            }
        }
        assert!(refused > wire.len() * 9 / 10, "{refused} of {}", wire.len());
        assert!(matches!(
            read_frame(&wire[..3], &mut out),
            Err(FrameError::Corrupt(_))
        ));
    }

    #[test]
    fn sites_are_keyed_alike_on_every_rank() {
        let blocks: SiteRule = "blocks:2".parse().unwrap();
        let keys: Vec<u64> = (0..6).map(|r| blocks.key(r, 6, "h").unwrap()).collect();
        assert_eq!(keys, vec![0, 0, 0, 1, 1, 1]);
        let list: SiteRule = "list:a,b,a".parse().unwrap();
        let k: Vec<u64> = (0..3).map(|r| list.key(r, 3, "h").unwrap()).collect();
        assert!(k[0] == k[2] && k[0] != k[1]);
        assert!(list.key(0, 4, "h").is_err());
        assert_eq!("hosts".parse::<SiteRule>(), Ok(SiteRule::Hosts));
        assert!("blocks:0".parse::<SiteRule>().is_err());
        assert!("rings".parse::<SiteRule>().is_err());
        let hosts = SiteRule::Hosts;
        assert_ne!(hosts.key(0, 2, "a").unwrap(), hosts.key(1, 2, "b").unwrap());
    }
}
