//! One proxied connection, both directions, as a state machine without sockets or a
//! clock of its own: application bytes in, link frames out, and back. The driver reads
//! and writes the sockets, seals and opens the link's records and says what time it is;
//! the tests drive two pumps with byte buffers.
//!
//! Going out, application bytes are cut with [`Segmenter::boundaries`] as they arrive,
//! go through the two-level fingerprint protocol ([`Sender`]) and one zstd stream cut
//! into pieces, and leave as DATA frames. Coming in, DATA frames feed the [`Receiver`],
//! whose requests and acknowledgements go back as REPLY frames, and what it delivers
//! waits in [`Pump::app_output`] for the application.
//!
//! Credit flow control per direction: a side takes application bytes only while fewer
//! than [`WINDOW`] of them are not yet written to the far application (the far side
//! sends a CREDIT, the count it has written, every quarter window), so the link is
//! always read and neither side buffers more than about a window for a slow application.

use std::time::{Duration, Instant};

use vargr_dedup::cache::SegmentCache;
use vargr_dedup::protocol::Stats;
use vargr_dedup::similar::SimilarityIndex;
use vargr_dedup::stream::StreamModel;
use vargr_dedup::{Config, FpBits, Receiver, SegmentError, Segmenter, Sender};
use vargr_sync::zpieces::{max_piece, PieceDecoder, PieceEncoder};
use vargr_sync::{split_frame, FRAME_HEAD_LEN};

use crate::wire::{frame, CH_DATA, CH_EOF, F_ABORT, F_CREDIT, F_DATA, F_REPLY, MAX_FRAME, WINDOW};

/// Application bytes taken per turn of the driver's loop (and so the largest DATA
/// frame, roughly).
pub const READ_BUDGET: usize = 256 << 10;
/// Stop taking application bytes while this much waits to go out on the link.
const LINK_OUT_HIGH: usize = 1 << 20;
/// Uncut bytes that force a cut (a segmenter that finds no boundary).
const PENDING_CAP: usize = 1 << 20;

/// Why a connection ended early. When [`PumpError::tell_peer`], the link still works
/// and the other proxy should be told (it resets its application connection too).
#[derive(Debug, thiserror::Error)]
#[error("{msg}")]
pub struct PumpError {
    msg: String,
    tell_peer: bool,
}

impl PumpError {
    /// The application socket failed, or this side's cache, or the peer broke the
    /// protocol: tell the peer.
    pub(crate) fn local(msg: impl Into<String>) -> PumpError {
        PumpError {
            msg: msg.into(),
            tell_peer: true,
        }
    }

    /// The link failed or the peer gave up: nothing to tell it.
    pub(crate) fn link(msg: impl Into<String>) -> PumpError {
        PumpError {
            msg: msg.into(),
            tell_peer: false,
        }
    }

    pub fn tell_peer(&self) -> bool {
        self.tell_peer
    }
}

/// A segmenter spec that cannot cut a byte stream.
#[derive(Debug, thiserror::Error)]
pub enum StreamSegmenterError {
    #[error(transparent)]
    Spec(#[from] SegmentError),
    #[error("segmenter {0:?} needs whole messages; a TCP stream needs cdc, static or sw")]
    NeedsMessages(String),
}

/// The segmenter of `spec`, checked to cut a byte stream as it arrives.
pub fn stream_segmenter(spec: &str) -> Result<Box<dyn Segmenter>, StreamSegmenterError> {
    let s = vargr_dedup::by_name(spec)?;
    if s.boundaries(&[], true).is_none() {
        return Err(StreamSegmenterError::NeedsMessages(spec.to_string()));
    }
    Ok(s)
}

/// What both pumps of a link must agree on, and this side's own choices.
#[derive(Debug, Clone)]
pub struct PumpSettings {
    pub bits: FpBits,
    pub group: u32,
    pub zstd_level: i32,
    /// When the application pauses, how long to wait for more bytes before cutting
    /// the tail (zero: at once).
    pub hold: Duration,
}

impl PumpSettings {
    /// The dedup protocol's configuration for a proxy link.
    pub fn dedup_config(&self) -> Config {
        Config {
            bits: self.bits,
            group: self.group,
            // The credit window bounds what is in flight, not the group count.
            window_groups: 1 << 14,
            max_pending: 4 * WINDOW as usize,
            // Its output goes through the link's zstd stream.
            session_bases: false,
            ..Config::default()
        }
    }
}

/// What a cache keeps beside its segments that one connection at a time uses: the
/// sender's delta-base index and a stream model per direction.
pub struct Models {
    pub similarity: SimilarityIndex,
    pub sent: StreamModel,
    pub received: StreamModel,
}

/// How a turn of reading the application ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppRead {
    /// The turn's budget was used: more may be waiting.
    Budget,
    /// A read would block: the application paused.
    Paused,
    /// The application shut its write side.
    Ended,
}

/// Bytes delivered but not yet written to the application.
#[derive(Default)]
struct AppOut {
    data: Vec<u8>,
    at: usize,
}

impl AppOut {
    fn len(&self) -> usize {
        self.data.len() - self.at
    }

    fn consume(&mut self, n: usize) {
        self.at += n.min(self.len());
        if self.at == self.data.len() {
            self.data.clear();
            self.at = 0;
        } else if self.at > (1 << 20) && self.at * 2 > self.data.len() {
            self.data.drain(..self.at);
            self.at = 0;
        }
    }
}

pub struct Pump<C: SegmentCache> {
    segmenter: Box<dyn Segmenter>,
    segmenter_name: String,
    tx: Sender<C>,
    rx: Receiver<C>,
    zout: PieceEncoder,
    zin: PieceDecoder,
    max_segment: usize,
    // application → link
    /// Taken from the application, not yet cut.
    pending: Vec<u8>,
    /// Application bytes handed to the sender.
    given: u64,
    /// Application bytes the peer has written to its application (its last credit).
    credit: u64,
    /// The application shut its write side; the end of the stream is queued.
    app_eof: bool,
    hold: Duration,
    /// When to send the tail if no more bytes come.
    hold_until: Option<Instant>,
    /// Application bytes taken.
    app_in: u64,
    // link → application
    app_out: AppOut,
    /// Bytes written to the application.
    written: u64,
    credit_sent: u64,
    /// The peer's end of stream was delivered.
    peer_eof: bool,
    /// The application's write side is to be shut (or was).
    app_shut: bool,
    // the link
    /// Link bytes (opened) not yet cut into frames.
    link_in: Vec<u8>,
    /// Link bytes cut into frames so far.
    link_taken: u64,
    link_eof: bool,
    /// Frames for the link, in order.
    frames: Vec<Vec<u8>>,
    /// Their bytes.
    frames_len: usize,
}

impl<C: SegmentCache + Clone> Pump<C> {
    /// A pump cutting with `segmenter`, its dedup state in `cache` and `models`;
    /// `link_in` holds link bytes that arrived with the set-up.
    pub fn new(
        settings: &PumpSettings,
        segmenter: &str,
        cache: C,
        models: Models,
        link_in: Vec<u8>,
    ) -> Result<Pump<C>, PumpError> {
        let config = settings.dedup_config();
        let dedup = |e: vargr_dedup::ProtocolError| PumpError::local(format!("dedup: {e}"));
        let mut tx = Sender::new(config, cache.clone()).map_err(dedup)?;
        tx.set_similarity(models.similarity);
        tx.set_stream(models.sent);
        let mut rx = Receiver::new(config, cache).map_err(dedup)?;
        rx.set_stream(models.received);
        let zstd = |e: std::io::Error| PumpError::local(format!("zstd: {e}"));
        Ok(Pump {
            segmenter: stream_segmenter(segmenter).map_err(|e| PumpError::local(e.to_string()))?,
            segmenter_name: segmenter.to_string(),
            tx,
            rx,
            zout: PieceEncoder::new(settings.zstd_level).map_err(zstd)?,
            zin: PieceDecoder::new(MAX_FRAME).map_err(zstd)?,
            max_segment: config.max_segment,
            pending: Vec::new(),
            given: 0,
            credit: 0,
            app_eof: false,
            hold: settings.hold,
            hold_until: None,
            app_in: 0,
            app_out: AppOut::default(),
            written: 0,
            credit_sent: 0,
            peer_eof: false,
            app_shut: false,
            link_in,
            link_taken: 0,
            link_eof: false,
            frames: Vec::new(),
            frames_len: 0,
        })
    }
}

impl<C: SegmentCache> Pump<C> {
    /// Application bytes sent that the peer has not written to its application yet.
    fn in_flight(&self) -> u64 {
        self.given - self.credit.min(self.given)
    }

    /// Whether to read the application now, with `link_backlog` bytes not yet written
    /// to the link besides the frames this pump still holds.
    pub fn wants_app_bytes(&self, link_backlog: usize) -> bool {
        !self.app_eof
            && link_backlog + self.frames_len < LINK_OUT_HIGH
            && self.in_flight() < WINDOW
            && !self.tx.window_full()
    }

    /// How many application bytes to take in this turn.
    pub fn app_read_budget(&self) -> usize {
        let room = (WINDOW - self.in_flight().min(WINDOW)) as usize;
        READ_BUDGET.min(room).max(1)
    }

    /// Both directions ended, everything acknowledged, and written as far as this pump
    /// knows (`link_backlog`: link bytes the driver has not written yet).
    pub fn is_done(&self, link_backlog: usize) -> bool {
        self.app_eof
            && self.app_shut
            && self.tx.is_idle()
            && self.frames.is_empty()
            && link_backlog == 0
    }

    /// When [`Pump::on_time`] has a tail to send, if no application bytes come first.
    pub fn hold_until(&self) -> Option<Instant> {
        self.hold_until
    }

    /// Sends the held tail if its time has come.
    pub fn on_time(&mut self, now: Instant) -> Result<(), PumpError> {
        if self.hold_until.is_some_and(|t| now >= t) {
            self.hold_until = None;
            self.cut(true)?;
            self.tx.flush();
            self.sender_output()?;
        }
        Ok(())
    }

    /// While the application is not read (window or link full, or it ended), whatever
    /// was cut can still be checked and delivered.
    pub fn flush_waiting(&mut self) -> Result<(), PumpError> {
        self.tx.flush();
        self.sender_output()
    }

    /// One turn of reading the application: `data`, and how the turn ended.
    pub fn app_input(&mut self, data: &[u8], how: AppRead, now: Instant) -> Result<(), PumpError> {
        self.pending.extend_from_slice(data);
        self.app_in += data.len() as u64;
        let (pause, eof) = (how == AppRead::Paused, how == AppRead::Ended);
        if pause && !self.hold.is_zero() {
            // Send what no later byte can change; the tail waits a moment for more.
            if !data.is_empty() || self.hold_until.is_none() {
                self.hold_until = Some(now + self.hold);
            }
            self.cut(false)?;
            return self.sender_output();
        }
        self.hold_until = None;
        self.cut(pause || eof)?;
        if eof {
            self.app_eof = true;
            self.tx
                .send_message(CH_EOF, &[], &[])
                .map_err(|e| PumpError::local(format!("dedup: {e}")))?;
        }
        if pause || eof {
            // Nothing more now: let the other side check and deliver what it has.
            self.tx.flush();
        }
        self.sender_output()
    }

    /// Hands the segments of `pending` to the sender: those no later byte can change,
    /// or all of them when `last` (the application paused or ended).
    fn cut(&mut self, last: bool) -> Result<(), PumpError> {
        let force = last || self.pending.len() >= PENDING_CAP;
        let ends = self
            .segmenter
            .boundaries(&self.pending, force)
            .unwrap_or_default();
        let Some(&used) = ends.last() else {
            return Ok(());
        };
        let mut segs: Vec<&[u8]> = Vec::with_capacity(ends.len());
        let mut at = 0;
        for &end in &ends {
            // No segment beyond what the protocol and the caches accept.
            while end - at > self.max_segment {
                segs.push(&self.pending[at..at + self.max_segment]);
                at += self.max_segment;
            }
            segs.push(&self.pending[at..end]);
            at = end;
        }
        self.tx
            .send_message(CH_DATA, &[], &segs)
            .map_err(|e| PumpError::local(format!("dedup: {e}")))?;
        self.given += used as u64;
        self.pending.drain(..used);
        Ok(())
    }

    /// Moves the sender's output into DATA frames.
    fn sender_output(&mut self) -> Result<(), PumpError> {
        let mut raw = Vec::new();
        self.tx.take_output(&mut raw);
        for chunk in raw.chunks(MAX_FRAME) {
            let piece = self
                .zout
                .piece(chunk)
                .map_err(|e| PumpError::local(format!("compressing: {e}")))?;
            self.put_frame(F_DATA, &piece);
        }
        Ok(())
    }

    fn put_frame(&mut self, kind: u8, body: &[u8]) {
        let f = frame(kind, body);
        self.frames_len += f.len();
        self.frames.push(f);
    }

    /// The frames for the link, in order; each is one record of the link.
    pub fn take_frames(&mut self) -> Vec<Vec<u8>> {
        self.frames_len = 0;
        std::mem::take(&mut self.frames)
    }

    /// Bytes for the application.
    pub fn app_output(&self) -> &[u8] {
        &self.app_out.data[self.app_out.at..]
    }

    /// `n` bytes of a non-empty [`Pump::app_output`] were written to the application;
    /// every quarter window, the peer hears how many so far (its credit).
    pub fn app_written(&mut self, n: usize) {
        self.app_out.consume(n);
        self.written += n as u64;
        if !self.link_eof && self.written - self.credit_sent >= WINDOW / 4 {
            self.credit_sent = self.written;
            let body = self.written.to_le_bytes();
            self.put_frame(F_CREDIT, &body);
        }
    }

    /// True once: the peer's stream has ended and all of it is written, so the
    /// application's write side is to be shut.
    pub fn take_app_shutdown(&mut self) -> bool {
        if self.peer_eof && !self.app_shut && self.app_out.len() == 0 {
            self.app_shut = true;
            return true;
        }
        false
    }

    pub fn link_ended(&self) -> bool {
        self.link_eof
    }

    /// The other proxy closes the link once both streams ended and all of this side's
    /// data was acknowledged; a link closed before that is an error.
    pub fn check_link_end(&self) -> Result<(), PumpError> {
        if self.link_eof && !(self.peer_eof && self.app_eof && self.tx.is_idle()) {
            return Err(PumpError::link(
                "the other proxy closed the link before the connection ended",
            ));
        }
        Ok(())
    }

    /// Opened link bytes, and whether the link ended after them.
    pub fn link_input(&mut self, plain: &[u8], ended: bool) -> Result<(), PumpError> {
        self.link_in.extend_from_slice(plain);
        self.link_eof |= ended;
        let buf = std::mem::take(&mut self.link_in);
        let mut at = 0;
        loop {
            let (kind, body) = match split_frame(&buf[at..], max_piece(MAX_FRAME)) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(len) => {
                    return Err(self.bad(format!(
                        "frame of {len} bytes at link byte {} exceeds {MAX_FRAME}",
                        self.link_taken + at as u64
                    )))
                }
            };
            at += FRAME_HEAD_LEN + body.len();
            self.on_frame(kind, body)?;
        }
        self.link_taken += at as u64;
        self.link_in = buf;
        self.link_in.drain(..at);
        if self.link_eof && !self.link_in.is_empty() {
            return Err(self.ended_inside_a_frame());
        }
        let mut reply = Vec::new();
        self.rx.take_output(&mut reply);
        if !reply.is_empty() {
            self.put_frame(F_REPLY, &reply);
        }
        self.sender_output()
    }

    /// The link ended with bytes that make no whole frame.
    pub(crate) fn ended_inside_a_frame(&self) -> PumpError {
        PumpError::link(format!(
            "the other proxy's stream ended inside a frame ({} bytes unread)",
            self.link_in.len()
        ))
    }

    /// Queues an ABORT saying why this side gives up, after what the link holds.
    pub fn abort(&mut self, why: &str) {
        self.put_frame(F_ABORT, why.as_bytes());
    }

    /// A protocol violation by the other proxy: tell it why, and stop.
    fn bad(&self, what: String) -> PumpError {
        PumpError::local(format!("from the other proxy: {what}"))
    }

    fn on_frame(&mut self, kind: u8, body: &[u8]) -> Result<(), PumpError> {
        match kind {
            F_DATA => {
                let raw = self
                    .zin
                    .piece(body)
                    .map_err(|e| self.bad(format!("data frame: {e}")))?;
                self.rx
                    .handle_input(&raw)
                    .map_err(|e| self.bad(format!("dedup: {e}")))?;
                while let Some(d) = self.rx.poll_delivered() {
                    match d.channel {
                        CH_DATA if !self.peer_eof => {
                            let segs: Vec<&[u8]> = d.segments.iter().map(|s| &s[..]).collect();
                            self.segmenter
                                .reassemble(&d.layout, &segs, &mut self.app_out.data)
                                .map_err(|e| self.bad(e.to_string()))?;
                        }
                        CH_EOF if !self.peer_eof && d.is_empty() => self.peer_eof = true,
                        ch => {
                            return Err(self.bad(format!(
                                "message on channel {ch} (after the end of the stream: {})",
                                self.peer_eof
                            )))
                        }
                    }
                }
                if self.app_out.len() as u64 > 2 * WINDOW {
                    return Err(self.bad(format!(
                        "{} bytes for the application beyond its window of {WINDOW}",
                        self.app_out.len()
                    )));
                }
            }
            F_REPLY => self
                .tx
                .handle_input(body)
                .map_err(|e| self.bad(format!("dedup replies: {e}")))?,
            F_CREDIT => {
                let v = body
                    .try_into()
                    .map(u64::from_le_bytes)
                    .map_err(|_| self.bad(format!("credit of {} bytes", body.len())))?;
                if v > self.given {
                    return Err(self.bad(format!(
                        "credit for {v} bytes, only {} were sent",
                        self.given
                    )));
                }
                self.credit = self.credit.max(v);
            }
            F_ABORT => {
                return Err(PumpError::link(format!(
                    "the other proxy gave up: {}",
                    String::from_utf8_lossy(body)
                )))
            }
            k => return Err(self.bad(format!("unknown frame type {k}"))),
        }
        Ok(())
    }

    /// Application bytes taken, and written to the application.
    pub fn app_bytes(&self) -> (u64, u64) {
        (self.app_in, self.written)
    }

    /// What the sender did.
    pub fn sender_stats(&self) -> &Stats {
        self.tx.stats()
    }

    pub fn segmenter_name(&self) -> &str {
        &self.segmenter_name
    }

    /// The models, to be handed to the cache's next connection.
    pub fn take_models(&mut self) -> Models {
        Models {
            sent: self.tx.take_stream(),
            received: self.rx.take_stream(),
            similarity: self.tx.take_similarity(),
        }
    }
}

#[cfg(test)]
mod tests;
