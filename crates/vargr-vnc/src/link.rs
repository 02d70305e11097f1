//! The link between the two proxies: Varg's deduplication of screen regions.
//!
//! The far side's messages cross as the two-level fingerprint protocol of
//! vargr-dedup, its output compressed piece by piece, a piece an update: a small one
//! as a zstd frame against what the link sent last, a large one in a zstd stream
//! ([`crate::squeeze`]). An update's regions are the protocol's segments, in
//! canonical RGB, three bytes a pixel: a region the near side has seen before, on this
//! screen or in an earlier session (the caches persist), costs a fingerprint or, when
//! it follows where the stream left off, one byte; a new one goes whole and zstd
//! compresses it against everything before it.
//!
//! The near side answers with the protocol's requests and acknowledgements, passes on
//! the viewers' input and area requests, and says how many bytes it has taken off the
//! link (credit): the far side sends a new update only while less than a window is in
//! flight, so a slow link holds a screenful at most and the next update shows the
//! screen as it is then, not as it was when the link fell behind.
//!
//! The seed's *eventual consistency* (show cache hits before the group's conservative
//! hash confirms them, repair later) is not needed here: every update closes its group,
//! so its hash arrives in the same flight as its fingerprints and costs no round trip.
//! Only a segment the near cache lacks waits for one, as in the seed.
//!
//! Frames, `[kind u8][len u32 LE][body]` as `vargr proxy`'s, either way:
//!
//! | kind | way | body |
//! |---|---|---|
//! | `DATA` | far → near | the next bytes of the zstd stream of the dedup sender's output |
//! | `SMALL` | far → near | the dedup sender's next output, a zstd frame against the link's history |
//! | `REPLY` | near → far | the dedup receiver's output (requests, acknowledgements) |
//! | `CONTROL` | near → far | the next bytes of the near side's [`ProxyMsg`]s (Input, Request) |
//! | `CREDIT` | near → far | u64 BE: `DATA` and `SMALL` body bytes taken off the link so far |
//! | `ABORT` | either | why the side gave up, UTF-8 |
//!
//! Inside the dedup stream, channel 0 holds a whole [`ProxyMsg`] (Init, Resize, Bell,
//! Copy, CutText): in the layout when it is small (a Copy is not worth a cache entry
//! and a group hash), else cut into segments. Channel 1 holds an update: the layout
//! lists the regions (x, y, width, height as u16 BE), one segment per region. Channel
//! 2 holds an update whose changed tiles cost less than its regions
//! ([`FarLink::send_outgoing`]), in the layout and no segments: a lesson byte, then
//! each area's header and [packed tiles](vargr_rfb::encoding::packed_tiles).
//!
//! A plain update still teaches both caches the Varg regions it touches, so a screen
//! first sent as tiles costs fingerprints when it comes back. The regions do not
//! cross: the lesson byte says how the far side's segmenter cut the screen (columns
//! or bands, the one choice that depends on earlier screens), and the near side cuts
//! its mirror, which then equals the far side's shadow, the same way
//! ([`Varg::regions_oriented`]).

use std::collections::{HashSet, VecDeque};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use vargr_dedup::cache::SegmentCache;
use vargr_dedup::protocol::{Config as DedupConfig, ProtocolError, Receiver, Sender, Stats};
use vargr_dedup::segment::{Varg, VargParams};
use vargr_dedup::Fingerprint;
use vargr_rfb::encoding::{packed_tiles, paint_packed_tiles};
use vargr_rfb::Framebuffer;
use vargr_sync::FRAME_HEAD_LEN;

use crate::far::Outgoing;
use crate::squeeze::{Piece, Squeezer, Tiers, Unsqueezer};
use crate::{ProxyLimits, ProxyMsg, Region, VncError};

/// Canonical pixels as they cross: three bytes each, red first.
fn rgb_bytes(pixels: &[u32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 * pixels.len());
    for &p in pixels {
        out.extend_from_slice(&p.to_be_bytes()[1..]);
    }
    out
}

/// A region as packed tiles: its header (x, y, width, height as u16 BE), then the
/// tiles.
fn put_packed(out: &mut BytesMut, x: u16, y: u16, w: u16, h: u16, pixels: &[u32]) {
    for v in [x, y, w, h] {
        out.put_u16(v);
    }
    packed_tiles(pixels, w, h, out);
}

/// The changed regions as [`put_packed`] sends them.
fn packed(regions: &[Region]) -> BytesMut {
    let mut out = BytesMut::new();
    for r in regions {
        put_packed(&mut out, r.x, r.y, r.width, r.height, &r.pixels);
    }
    out
}

pub const F_DATA: u8 = 1;
/// Far → near: a small piece as a zstd frame against the link's history
/// ([`crate::squeeze`]).
pub const F_SMALL: u8 = 8;
pub const F_REPLY: u8 = 2;
pub const F_CONTROL: u8 = 3;
pub const F_CREDIT: u8 = 4;
pub const F_ABORT: u8 = 5;
/// Set-up, before the frames above: near → far (JSON), far → near (JSON).
pub const F_HELLO: u8 = 6;
pub const F_WELCOME: u8 = 7;

const CH_MSG: u32 = 0;
const CH_UPDATE: u32 = 1;
/// An Update carried in the layout alone: no segments, so nothing enters the caches.
const CH_PLAIN: u32 = 2;
/// Bytes of a channel-0 message per segment.
const MSG_SEGMENT: usize = 64 << 10;
/// Largest channel-0 message carried in the layout instead of segments.
const MSG_INLINE: usize = 4 << 10;
/// A plain update's first layout byte: what it teaches.
const TEACH_NOTHING: u8 = 0;
const TEACH_COLUMNS: u8 = 1;
const TEACH_BANDS: u8 = 2;
/// Regions per dedup message: 8 bytes each stays within the default layout limit.
const REGIONS_PER_MESSAGE: usize = 4096;
/// Groups the near side lets the far side's sender hold unacknowledged before it
/// answers (a quarter of the sender's default window).
const ACK_GROUPS: u64 = 64;
/// Largest plain update in one message (the layout limit both sides set).
const PLAIN_MAX: usize = 4 << 20;
/// Most areas of one plain update the near side keeps to learn from (a screen of
/// 32-pixel tiles has fewer).
const MAX_TAUGHT: usize = 1 << 16;

/// What both ends of a link agree on, and what each enforces.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    pub dedup: DedupConfig,
    /// zstd level of the stream that carries large pieces.
    pub zstd_level: i32,
    /// Largest piece sent as a zstd frame of its own at `small_level`, against the
    /// link's history (0: every piece in the stream).
    pub small_piece: usize,
    pub small_level: i32,
    /// Largest frame either side accepts.
    pub max_frame: usize,
    /// `DATA` bytes the far side may have on the link before the near side's credit
    /// (the link's bandwidth × round trip is enough; more only queues).
    pub window: u64,
    pub limits: ProxyLimits,
    /// The far side's Varg parameters, which the near side learns from its welcome:
    /// it cuts its mirror with them to learn what plain updates teach. `None` at the
    /// far side, and at a near side whose far side sends no lessons.
    pub lessons: Option<VargParams>,
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig {
            dedup: DedupConfig {
                // Screens repeat whole regions; deltas against similar ones cost
                // more CPU than they save after zstd.
                delta_index: 0,
                session_bases: false,
                // Plain updates travel in the layout.
                max_layout: PLAIN_MAX,
                ..DedupConfig::default()
            },
            // Updates are small and links slow, so CPU spent on the ratio pays;
            // docs/benchmarks.md ("How Varg got here") has what each level saved.
            zstd_level: 9,
            // Small updates take a strong level against the history (squeeze.rs).
            small_piece: 64 << 10,
            small_level: 19,
            max_frame: 1 << 20,
            window: 64 << 10,
            limits: ProxyLimits::default(),
            lessons: None,
        }
    }
}

fn link_error(what: &'static str, detail: impl ToString) -> VncError {
    VncError::Link {
        what,
        detail: detail.to_string(),
    }
}

pub use vargr_sync::put_frame;

/// Takes the next whole frame off `input`, checking its length first.
fn next_frame(input: &mut BytesMut, max: usize) -> Result<Option<(u8, Bytes)>, VncError> {
    let (kind, len) = match vargr_sync::split_frame(input, max) {
        Ok(Some((kind, body))) => (kind, body.len()),
        Ok(None) => return Ok(None),
        Err(len) => {
            return Err(VncError::TooLong {
                message: "link frame",
                field: "length",
                len: len as u64,
                max: max as u64,
            })
        }
    };
    input.advance(FRAME_HEAD_LEN);
    Ok(Some((kind, input.split_to(len).freeze())))
}

/// The far proxy's end: sends the far side's messages, takes the near side's.
pub struct FarLink<C: SegmentCache> {
    sender: Sender<C>,
    zstd: Squeezer,
    max_frame: usize,
    window: u64,
    input: BytesMut,
    out: Vec<u8>,
    /// The near side's messages (a stream of them) not taken yet.
    control: Vec<u8>,
    data_sent: u64,
    credited: u64,
    plains: u64,
    /// Scratch: a message's segments back to back.
    scratch: Vec<u8>,
}

impl<C: SegmentCache> FarLink<C> {
    pub fn new(config: &LinkConfig, cache: C) -> Result<FarLink<C>, VncError> {
        Ok(FarLink {
            sender: Sender::new(config.dedup, cache).map_err(|e| link_error("dedup sender", e))?,
            zstd: Squeezer::new(Tiers {
                stream_level: config.zstd_level,
                small: config.small_piece,
                small_level: config.small_level,
            })
            .map_err(|e| link_error("zstd", e))?,
            max_frame: config.max_frame,
            window: config.window,
            input: BytesMut::new(),
            out: Vec::new(),
            control: Vec::new(),
            data_sent: 0,
            credited: 0,
            plains: 0,
            scratch: Vec::new(),
        })
    }

    /// Whether the link can take another update: the near side has credited all but
    /// a window, and the dedup sender's window is open.
    pub fn ready(&self) -> bool {
        self.data_sent - self.credited < self.window && !self.sender.window_full()
    }

    /// Queues a message for the near side. Call [`FarLink::flush`] after the last
    /// message of an update.
    pub fn send(&mut self, msg: &ProxyMsg) -> Result<(), VncError> {
        let r = match msg {
            ProxyMsg::Update(regions) => self.send_update(regions),
            other => {
                let mut b = BytesMut::new();
                other.encode(&mut b);
                if b.len() <= MSG_INLINE {
                    self.sender.send_message(CH_MSG, &b, &[])
                } else {
                    let segs: Vec<&[u8]> = b.chunks(MSG_SEGMENT).collect();
                    self.sender.send_message(CH_MSG, &[], &segs)
                }
            }
        };
        r.map_err(|e| link_error("dedup sender", e))
    }

    /// Queues what the far side has: an update offered two ways goes as Varg's
    /// regions through the dedup protocol or as the changed tiles alone, whichever
    /// the estimate below finds cheaper.
    ///
    /// The estimate: a region whose fingerprint the sender's cache may hold costs a
    /// few bytes, and the rest what zstd makes of its pixels after what the link sent
    /// last ([`Squeezer::estimate`]); the changed tiles cost what zstd makes of theirs. Text drawn into a large flat
    /// region then goes as the few changed tiles, a picture seen before as
    /// fingerprints. Both teach the caches the same regions.
    pub fn send_outgoing(&mut self, out: &Outgoing) -> Result<(), VncError> {
        match out {
            Outgoing::Msg(m) => self.send(m),
            Outgoing::Choice {
                regions,
                changed,
                horizontal,
            } => {
                // Each region's bytes and fingerprint, once for the estimate, the
                // lessons and the sender alike.
                let bytes: Vec<Vec<u8>> = regions.iter().map(|r| rgb_bytes(&r.pixels)).collect();
                let full: Vec<Fingerprint> = bytes.iter().map(|b| Fingerprint::full(b)).collect();
                let unknown = self.unknown(&full);
                let tiles = packed(changed);
                if self.plain_is_cheaper(&bytes, &unknown, changed.len(), &tiles) {
                    self.plains += 1;
                    let teach = if *horizontal {
                        TEACH_BANDS
                    } else {
                        TEACH_COLUMNS
                    };
                    self.send_plain(changed, tiles, teach)?;
                    // What the near side stores as it learns (it stores the regions
                    // this cache may hold too, which changes nothing here).
                    for &k in &unknown {
                        self.sender
                            .cache()
                            .insert(full[k], &bytes[k])
                            .map_err(|e| link_error("segment cache", e))?;
                    }
                    Ok(())
                } else if bytes
                    .iter()
                    .all(|b| b.len() <= self.sender.config().max_segment)
                {
                    self.send_regions(regions, &bytes, &full)
                        .map_err(|e| link_error("dedup sender", e))
                } else {
                    self.send_update(regions)
                        .map_err(|e| link_error("dedup sender", e))
                }
            }
        }
    }

    /// Which regions, by their fingerprints, the sender's cache surely lacks (each
    /// content once).
    fn unknown(&mut self, full: &[Fingerprint]) -> Vec<usize> {
        let bits = self.sender.config().bits;
        let mut seen = HashSet::new();
        let mut unknown = Vec::new();
        for (k, f) in full.iter().enumerate() {
            let fp = f.truncate(bits);
            if seen.insert(fp) && !self.sender.cache().may_contain(fp) {
                unknown.push(k);
            }
        }
        unknown
    }

    /// `tiles`: the changed areas as [`packed`] makes them.
    fn plain_is_cheaper(
        &mut self,
        bytes: &[Vec<u8>],
        unknown: &[usize],
        changed: usize,
        tiles: &[u8],
    ) -> bool {
        let new: Vec<u8> = unknown
            .iter()
            .flat_map(|&k| bytes[k].iter().copied())
            .collect();
        // A region's layout entry costs about 2 bytes after zstd, a fingerprint or a
        // prediction 1 to 5, the group's hash 17.
        let known = bytes.len() - unknown.len();
        let varg = 17 + 2 * bytes.len() + 3 * known + self.zstd.estimate(&new);
        let plain = 2 * changed + self.zstd.estimate(tiles);
        plain < varg
    }

    /// An update as packed tiles (ZRLE's, without zlib: the link's zstd stream
    /// follows) in the layouts of segment-less messages, each below the limit. The
    /// last carries `teach`: how the near side cuts its mirror, once it holds the
    /// update, into the regions the update touches, which it stores as if they had
    /// crossed (the caller stores them here).
    /// `tiles`: the changed areas packed already (for the estimate), sent as they are
    /// when they fit one message.
    fn send_plain(
        &mut self,
        changed: &[Region],
        tiles: BytesMut,
        teach: u8,
    ) -> Result<(), VncError> {
        if tiles.len() < PLAIN_MAX / 2 {
            let mut layout = BytesMut::with_capacity(1 + tiles.len());
            layout.put_u8(teach);
            layout.extend_from_slice(&tiles);
            return self
                .sender
                .send_message(CH_PLAIN, &layout, &[])
                .map_err(|e| link_error("dedup sender", e));
        }
        let mut start = 0;
        let mut first = true;
        while start < changed.len() || first {
            first = false;
            // The lesson byte, set below on the last message.
            let mut layout = BytesMut::new();
            layout.put_u8(TEACH_NOTHING);
            // Regions until half the layout limit (a region alone may be larger: it
            // is cut in bands of rows, each packed below the limit).
            let mut end = start;
            while end < changed.len() {
                let r = &changed[end];
                let w = r.width.max(1) as usize;
                let band = ((PLAIN_MAX / 2) / (4 * w)).clamp(1, u16::MAX as usize);
                let mut piece = BytesMut::new();
                for (k, rows) in r.pixels.chunks(band * w).enumerate() {
                    let h = (rows.len() / w) as u16;
                    put_packed(&mut piece, r.x, r.y + (k * band) as u16, r.width, h, rows);
                }
                if end > start && layout.len() + piece.len() > PLAIN_MAX / 2 {
                    break;
                }
                layout.extend_from_slice(&piece);
                end += 1;
            }
            if end == changed.len() {
                layout[0] = teach;
            }
            self.sender
                .send_message(CH_PLAIN, &layout, &[])
                .map_err(|e| link_error("dedup sender", e))?;
            start = end;
        }
        Ok(())
    }

    /// Updates sent as changed tiles rather than regions, so far.
    pub fn plain_updates(&self) -> u64 {
        self.plains
    }

    /// An update of regions that each fit a segment, whose bytes and fingerprints are
    /// already known.
    fn send_regions(
        &mut self,
        regions: &[Region],
        bytes: &[Vec<u8>],
        full: &[Fingerprint],
    ) -> Result<(), ProtocolError> {
        for start in (0..regions.len()).step_by(REGIONS_PER_MESSAGE) {
            let end = (start + REGIONS_PER_MESSAGE).min(regions.len());
            let mut layout = Vec::with_capacity(8 * (end - start));
            for r in &regions[start..end] {
                for v in [r.x, r.y, r.width, r.height] {
                    layout.extend_from_slice(&v.to_be_bytes());
                }
            }
            let segs: Vec<&[u8]> = bytes[start..end].iter().map(Vec::as_slice).collect();
            self.sender
                .send_message_hashed(CH_UPDATE, &layout, &segs, &full[start..end])?;
        }
        Ok(())
    }

    fn send_update(&mut self, regions: &[Region]) -> Result<(), ProtocolError> {
        let max_segment = self.sender.config().max_segment;
        // Regions larger than a segment go in bands of whole rows.
        let mut pieces: Vec<(u16, u16, u16, u16, &[u32])> = Vec::new();
        for r in regions {
            let row_bytes = 3 * r.width as usize;
            let band = (max_segment / row_bytes.max(1)).clamp(1, u16::MAX as usize);
            for (k, rows) in r.pixels.chunks(band * r.width.max(1) as usize).enumerate() {
                let h = (rows.len() / r.width.max(1) as usize) as u16;
                pieces.push((r.x, r.y + (k * band) as u16, r.width, h, rows));
            }
        }
        for chunk in pieces.chunks(REGIONS_PER_MESSAGE) {
            let mut layout = Vec::with_capacity(8 * chunk.len());
            self.scratch.clear();
            let mut ends = Vec::with_capacity(chunk.len());
            for &(x, y, w, h, px) in chunk {
                for v in [x, y, w, h] {
                    layout.extend_from_slice(&v.to_be_bytes());
                }
                for &p in px {
                    self.scratch.extend_from_slice(&p.to_be_bytes()[1..]);
                }
                ends.push(self.scratch.len());
            }
            let mut start = 0;
            let segs: Vec<&[u8]> = ends
                .iter()
                .map(|&e| {
                    let s = &self.scratch[start..e];
                    start = e;
                    s
                })
                .collect();
            self.sender.send_message(CH_UPDATE, &layout, &segs)?;
        }
        Ok(())
    }

    /// Closes the sender's group and puts everything it has into `DATA` frames.
    pub fn flush(&mut self) -> Result<(), VncError> {
        self.sender.flush();
        self.drain_sender()
    }

    fn drain_sender(&mut self) -> Result<(), VncError> {
        let mut plain = Vec::new();
        self.sender.take_output(&mut plain);
        if plain.is_empty() {
            return Ok(());
        }
        let (kind, piece) = match self.zstd.piece(&plain).map_err(|e| link_error("zstd", e))? {
            Piece::Stream(p) => (F_DATA, p),
            Piece::Frame(f) => (F_SMALL, f),
        };
        if kind == F_SMALL && piece.len() > self.max_frame {
            return Err(link_error("zstd", "a small piece that grew beyond a frame"));
        }
        for body in piece.chunks(self.max_frame) {
            put_frame(&mut self.out, kind, body);
            self.data_sent += body.len() as u64;
        }
        Ok(())
    }

    /// Bytes from the near proxy.
    pub fn receive(&mut self, bytes: &[u8]) -> Result<(), VncError> {
        self.input.extend_from_slice(bytes);
        while let Some((kind, body)) = next_frame(&mut self.input, self.max_frame)? {
            match kind {
                F_REPLY => self
                    .sender
                    .handle_input(&body)
                    .map_err(|e| link_error("dedup sender", e))?,
                F_CONTROL => self.control.extend_from_slice(&body),
                F_CREDIT => {
                    let c = read_credit(&body)?;
                    if c < self.credited || c > self.data_sent {
                        return Err(VncError::Corrupt {
                            message: "CREDIT frame",
                            what: format!(
                                "credit {c} outside {}..={} (sent)",
                                self.credited, self.data_sent
                            ),
                        });
                    }
                    self.credited = c;
                }
                F_ABORT => return Err(aborted(&body)),
                k => return Err(VncError::UnknownMessage(k)),
            }
        }
        // Answers to the near side's requests.
        self.drain_sender()
    }

    /// The near side's messages received so far, in their framing, for
    /// [`FarSide::receive_near`](crate::FarSide::receive_near).
    pub fn take_control(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.control)
    }

    /// Frames to write to the link.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    pub fn pending_output(&self) -> usize {
        self.out.len()
    }

    /// `DATA` bytes put on the link so far (after zstd, before framing).
    pub fn data_sent(&self) -> u64 {
        self.data_sent
    }

    pub fn stats(&self) -> &Stats {
        self.sender.stats()
    }

    pub fn cache(&mut self) -> &mut C {
        self.sender.cache()
    }
}

fn read_credit(body: &[u8]) -> Result<u64, VncError> {
    let b: [u8; 8] = body.try_into().map_err(|_| VncError::Corrupt {
        message: "CREDIT frame",
        what: format!("{} bytes, expected 8", body.len()),
    })?;
    Ok(u64::from_be_bytes(b))
}

fn aborted(body: &[u8]) -> VncError {
    VncError::PeerAborted(String::from_utf8_lossy(&body[..body.len().min(4096)]).into_owned())
}

/// The near proxy's end: takes the far side's messages, sends the near side's.
pub struct NearLink<C: SegmentCache> {
    receiver: Receiver<C>,
    zstd: Unsqueezer,
    max_frame: usize,
    limits: ProxyLimits,
    input: BytesMut,
    out: Vec<u8>,
    msgs: VecDeque<ProxyMsg>,
    data_received: u64,
    credited: u64,
    window: u64,
    /// The receiver's output not sent yet, and its counters when it last was.
    reply: Vec<u8>,
    requested: u64,
    acked_groups: u64,
    /// Cuts the mirror as the far side cut its shadow (with [`LinkConfig::lessons`]).
    cutter: Option<Varg>,
    /// The areas of the plain update arriving, and of those complete whose regions
    /// are still to be stored (with the orientation of their cut).
    taught: Vec<Area>,
    lessons: Vec<(bool, Vec<Area>)>,
    /// The mirror as the cutter reads it (kept to reuse its memory).
    image: Vec<u8>,
}

/// x, y, width, height.
type Area = (u16, u16, u16, u16);

impl<C: SegmentCache> NearLink<C> {
    pub fn new(config: &LinkConfig, cache: C) -> Result<NearLink<C>, VncError> {
        Ok(NearLink {
            receiver: Receiver::new(config.dedup, cache)
                .map_err(|e| link_error("dedup receiver", e))?,
            // A piece expands to at most what the receiver would hold anyway.
            zstd: Unsqueezer::new(config.dedup.max_pending).map_err(|e| link_error("zstd", e))?,
            max_frame: config.max_frame,
            limits: config.limits.clone(),
            input: BytesMut::new(),
            out: Vec::new(),
            msgs: VecDeque::new(),
            data_received: 0,
            credited: 0,
            window: config.window,
            reply: Vec::new(),
            requested: 0,
            acked_groups: 0,
            cutter: config
                .lessons
                .clone()
                .map(Varg::new)
                .transpose()
                .map_err(|e| link_error("Varg parameters", e))?,
            taught: Vec::new(),
            lessons: Vec::new(),
            image: Vec::new(),
        })
    }

    /// Bytes from the far proxy.
    pub fn receive(&mut self, bytes: &[u8]) -> Result<(), VncError> {
        self.input.extend_from_slice(bytes);
        while let Some((kind, body)) = next_frame(&mut self.input, self.max_frame)? {
            match kind {
                F_DATA | F_SMALL => {
                    self.data_received += body.len() as u64;
                    let plain = if kind == F_DATA {
                        self.zstd.stream(&body)
                    } else {
                        self.zstd.frame(&body)
                    }
                    .map_err(|e| link_error("zstd", e))?;
                    self.receiver
                        .handle_input(&plain)
                        .map_err(|e| link_error("dedup receiver", e))?;
                    while let Some(d) = self.receiver.poll_delivered() {
                        let msg = self.message(d.channel, &d.layout, &d.segments)?;
                        self.msgs.push_back(msg);
                    }
                }
                F_ABORT => return Err(aborted(&body)),
                k => return Err(VncError::UnknownMessage(k)),
            }
        }
        self.receiver.take_output(&mut self.reply);
        let stats = self.receiver.stats();
        // Acknowledgements and credit wait for a reason to cross: a request for a
        // segment (the far side waits for it), a quarter of the window, a quarter of
        // the sender's groups, or a record going back anyway. One small update then
        // costs one record, not two.
        let urgent = stats.requested != self.requested
            || self.data_received - self.credited >= self.window / 4
            || stats.groups - self.acked_groups >= ACK_GROUPS
            || self.reply.len() >= 4096;
        if urgent {
            self.flush_replies();
        }
        Ok(())
    }

    /// Queues what the receiver has to say and the credit.
    fn flush_replies(&mut self) {
        if !self.reply.is_empty() {
            put_frame(&mut self.out, F_REPLY, &self.reply);
            self.reply.clear();
        }
        if self.data_received != self.credited {
            self.credited = self.data_received;
            put_frame(&mut self.out, F_CREDIT, &self.credited.to_be_bytes());
        }
        self.requested = self.receiver.stats().requested;
        self.acked_groups = self.receiver.stats().groups;
    }

    fn message(
        &mut self,
        channel: u32,
        layout: &[u8],
        segments: &[Bytes],
    ) -> Result<ProxyMsg, VncError> {
        let corrupt = |what: String| VncError::Corrupt {
            message: "link update",
            what,
        };
        match channel {
            CH_MSG => {
                let mut b = BytesMut::new();
                if segments.is_empty() {
                    b.put_slice(layout);
                } else if layout.is_empty() {
                    segments.iter().for_each(|s| b.put_slice(s));
                } else {
                    return Err(corrupt("a control message in layout and segments".into()));
                }
                match ProxyMsg::decode(&mut b, &self.limits)? {
                    Some(ProxyMsg::Update(_)) | None => Err(VncError::Corrupt {
                        message: "link message",
                        what: "not a whole control message".into(),
                    }),
                    Some(m) if b.is_empty() => Ok(m),
                    Some(_) => Err(VncError::Corrupt {
                        message: "link message",
                        what: "bytes after the message".into(),
                    }),
                }
            }
            CH_UPDATE => {
                if layout.len() != 8 * segments.len() {
                    return Err(corrupt(format!(
                        "layout of {} bytes for {} regions",
                        layout.len(),
                        segments.len()
                    )));
                }
                let mut regions = Vec::with_capacity(segments.len());
                for (l, seg) in layout.chunks_exact(8).zip(segments) {
                    let f = |k: usize| u16::from_be_bytes([l[2 * k], l[2 * k + 1]]);
                    let (x, y, w, h) = (f(0), f(1), f(2), f(3));
                    if seg.len() != 3 * w as usize * h as usize {
                        return Err(corrupt(format!(
                            "region {w}x{h} at {x},{y} with {} bytes of pixels",
                            seg.len()
                        )));
                    }
                    let pixels = seg
                        .chunks_exact(3)
                        .map(|p| u32::from_be_bytes([0, p[0], p[1], p[2]]))
                        .collect();
                    regions.push(Region {
                        x,
                        y,
                        width: w,
                        height: h,
                        pixels,
                    });
                }
                Ok(ProxyMsg::Update(regions))
            }
            CH_PLAIN if segments.is_empty() => {
                let corrupt_plain = |what: String| VncError::Corrupt {
                    message: "plain update",
                    what,
                };
                let Some((&teach, mut rest)) = layout.split_first() else {
                    return Err(corrupt_plain("no lesson byte".into()));
                };
                let horizontal = match teach {
                    TEACH_NOTHING => None,
                    TEACH_COLUMNS => Some(false),
                    TEACH_BANDS => Some(true),
                    t => return Err(corrupt_plain(format!("lesson byte {t}"))),
                };
                if horizontal.is_some() && self.cutter.is_none() {
                    return Err(corrupt_plain(
                        "a lesson, but the far side named no Varg parameters".into(),
                    ));
                }
                let mut regions = Vec::new();
                while !rest.is_empty() {
                    if rest.len() < 8 {
                        return Err(corrupt_plain(format!(
                            "{} bytes of a region header",
                            rest.len()
                        )));
                    }
                    let f = |k: usize| u16::from_be_bytes([rest[2 * k], rest[2 * k + 1]]);
                    let (x, y, w, h) = (f(0), f(1), f(2), f(3));
                    if w > self.limits.rfb.max_width || h > self.limits.rfb.max_height {
                        return Err(corrupt_plain(format!("a region of {w}x{h}")));
                    }
                    let mut fb = Framebuffer::new(w, h);
                    let used = paint_packed_tiles(&rest[8..], 0, 0, w, h, &mut fb)?;
                    regions.push(Region {
                        x,
                        y,
                        width: w,
                        height: h,
                        pixels: fb.pixels().to_vec(),
                    });
                    rest = &rest[8 + used..];
                }
                if self.taught.len() + regions.len() > MAX_TAUGHT {
                    return Err(corrupt_plain(format!(
                        "more than {MAX_TAUGHT} areas in one update"
                    )));
                }
                self.taught
                    .extend(regions.iter().map(|r| (r.x, r.y, r.width, r.height)));
                if let Some(h) = horizontal {
                    self.lessons.push((h, std::mem::take(&mut self.taught)));
                }
                Ok(ProxyMsg::Update(regions))
            }
            c => Err(corrupt(format!(
                "unknown channel {c}, or segments where none belong"
            ))),
        }
    }

    /// The next message from the far side.
    pub fn poll_msg(&mut self) -> Option<ProxyMsg> {
        self.msgs.pop_front()
    }

    /// Whether a plain update polled last taught regions: [`NearLink::learn`] them
    /// once the mirror holds that update and nothing after it.
    pub fn lesson_pending(&self) -> bool {
        !self.lessons.is_empty()
    }

    /// Stores the regions that plain updates taught, cut from `mirror` (the near
    /// side's, holding the update that taught them and nothing after it: it then
    /// equals the far side's shadow when it sent the update). Cut from a later mirror,
    /// a region's fingerprint may differ from the far side's, which costs a request
    /// later, never a wrong pixel.
    pub fn learn(&mut self, mirror: Option<&Framebuffer>) -> Result<(), VncError> {
        let lessons = std::mem::take(&mut self.lessons);
        let (Some(mirror), Some(cutter)) = (mirror, &self.cutter) else {
            return Ok(());
        };
        if lessons.is_empty() {
            return Ok(());
        }
        let (w, h) = (mirror.width(), mirror.height());
        crate::far::segmenter_image(mirror, &mut self.image);
        for (horizontal, areas) in lessons {
            let cut = cutter
                .regions_oriented(&self.image, h as usize, w as usize, 4, horizontal)
                .map_err(|e| link_error("Varg", e))?;
            for b in cut.boxes {
                let (bx, by, bw, bh) =
                    (b.col as u16, b.row as u16, b.width as u16, b.height as u16);
                let touches = areas.iter().any(|&(x, y, aw, ah)| {
                    bx < x.saturating_add(aw)
                        && x < bx + bw
                        && by < y.saturating_add(ah)
                        && y < by + bh
                });
                if !touches {
                    continue;
                }
                let pixels = mirror
                    .get_rect(bx, by, bw, bh)
                    .expect("a region of the mirror");
                let bytes = rgb_bytes(&pixels);
                self.receiver
                    .cache()
                    .insert(Fingerprint::full(&bytes), &bytes)
                    .map_err(|e| link_error("segment cache", e))?;
            }
        }
        Ok(())
    }

    /// Queues the near side's messages for the far side, in their framing (from
    /// [`NearSide::take_far_output`](crate::NearSide::take_far_output)), with the
    /// acknowledgements and credit that were waiting.
    pub fn send_control(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.flush_replies();
        for body in bytes.chunks(self.max_frame) {
            put_frame(&mut self.out, F_CONTROL, body);
        }
    }

    /// Frames to write to the link.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    pub fn stats(&self) -> &Stats {
        self.receiver.stats()
    }

    pub fn cache(&mut self) -> &mut C {
        self.receiver.cache()
    }
}
