//! A `dedup` stage for vargr links: application frames cross as two-level fingerprints
//! of their segments, so data the link has carried before costs a few bytes per segment.
//!
//! Each side of a link has one stage doing both jobs: its [`Sender`] turns outgoing
//! frames into `Dedup` frames (tag 0), and its [`Receiver`] rebuilds the peer's frames and
//! answers with requests and acknowledgements (`Dedup`, tag 1), which leave through
//! [`Stage::release`] as soon as they exist, so a link carrying nothing the other way
//! still makes progress. Frames too small to gain, and frames sent while the sender's
//! window is full, pass unchanged; the receiver holds those behind any rebuilt frame
//! announced before them, so the link's order is kept. Caches live in memory, one per
//! link side; both see the same segments.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use vargr_stage::Stage;
use vargr_wire::{encode_header, Frame, FrameKind, HEADER_LEN};

use crate::cache::MemCache;
use crate::protocol::{Config, Receiver, Sender};
use crate::segment::{by_name, Segmenter};

const TAG_STREAM: i32 = 0;
const TAG_REPLIES: i32 = 1;

/// How a dedup stage cuts and what it keeps.
#[derive(Debug, Clone)]
pub struct DedupOptions {
    /// Segmenter spec of payloads (a 1-D one).
    pub segmenter: String,
    /// Payloads smaller than this pass unchanged.
    pub min_size: usize,
    /// Memory budget of each of the two caches.
    pub cache_bytes: u64,
}

impl Default for DedupOptions {
    fn default() -> Self {
        DedupOptions {
            segmenter: "cdc:256:1k:8k".into(),
            min_size: 2048,
            cache_bytes: 64 << 20,
        }
    }
}

pub struct DedupStage {
    tx: Sender<MemCache>,
    rx: Receiver<MemCache>,
    segmenter: Box<dyn Segmenter>,
    min_size: usize,
    max_frame: usize,
    /// Dedup bytes waiting to leave: the sender's answers to requests, the receiver's
    /// replies.
    stream_out: Vec<u8>,
    replies_out: Vec<u8>,
    due: Option<Instant>,
    /// Unchanged frames from the peer held until the rebuilt frames announced before
    /// them are delivered: (messages announced when it arrived, frame).
    held: VecDeque<(u64, Frame)>,
    delivered: u64,
}

impl DedupStage {
    /// `max_frame` is the link's largest frame: payloads whose dedup encoding could
    /// exceed it pass unchanged.
    pub fn new(opts: &DedupOptions, max_frame: usize) -> Result<DedupStage, String> {
        let segmenter = by_name(&opts.segmenter).map_err(|e| e.to_string())?;
        if segmenter.boundaries(&[], true).is_none() {
            return Err(format!(
                "dedup segmenter {}: a link needs a segmenter of byte streams",
                opts.segmenter
            ));
        }
        let config = Config::default();
        let cache = || MemCache::new(config.bits, opts.cache_bytes);
        let tx = Sender::new(config, cache()).map_err(|e| e.to_string())?;
        let rx = Receiver::new(config, cache()).map_err(|e| e.to_string())?;
        Ok(DedupStage {
            tx,
            rx,
            segmenter,
            min_size: opts.min_size,
            max_frame,
            stream_out: Vec::new(),
            replies_out: Vec::new(),
            due: None,
            held: VecDeque::new(),
            delivered: 0,
        })
    }

    fn frame(tag: i32, body: &[u8]) -> Bytes {
        let mut b = BytesMut::with_capacity(HEADER_LEN + body.len());
        encode_header(FrameKind::Dedup, 0, 0, tag, body.len(), &mut b);
        b.put_slice(body);
        b.freeze()
    }

    /// Everything waiting to leave, replies first.
    fn flush_pending(&mut self, out: &mut Vec<Bytes>) {
        self.tx.take_output(&mut self.stream_out);
        self.rx.take_output(&mut self.replies_out);
        for (tag, buf) in [
            (TAG_REPLIES, &mut self.replies_out),
            (TAG_STREAM, &mut self.stream_out),
        ] {
            // Keep every dedup frame within the link's limit.
            for chunk in buf.chunks(self.max_frame.max(1)) {
                out.push(Self::frame(tag, chunk));
            }
            buf.clear();
        }
        self.due = None;
    }

    fn deliver(&mut self, out: &mut Vec<Frame>) -> Result<(), String> {
        while let Some(d) = self.rx.poll_delivered() {
            let mut wire = BytesMut::with_capacity(d.layout.len() + d.len());
            wire.put_slice(&d.layout);
            for s in &d.segments {
                wire.put_slice(s);
            }
            let f = vargr_wire::decode_exact(&wire.freeze(), usize::MAX)
                .map_err(|e| format!("a rebuilt frame does not decode: {e}"))?;
            out.push(f);
            self.delivered += 1;
            while self
                .held
                .front()
                .is_some_and(|(after, _)| *after <= self.delivered)
            {
                out.push(self.held.pop_front().expect("front exists").1);
            }
        }
        Ok(())
    }
}

fn is_app(kind: u8) -> bool {
    kind == FrameKind::Data as u8 || kind == FrameKind::PointToPoint as u8
}

impl Stage for DedupStage {
    fn name(&self) -> &str {
        "dedup"
    }

    fn outbound(&mut self, _now: Instant, frame: Bytes, out: &mut Vec<Bytes>) {
        let payload_len = frame.len().saturating_sub(HEADER_LEN);
        let fits = payload_len + payload_len / 8 + 4096 < self.max_frame;
        if frame.len() <= HEADER_LEN
            || !is_app(frame[2])
            || payload_len < self.min_size
            || !fits
            || self.tx.window_full()
        {
            self.flush_pending(out);
            out.push(frame);
            return;
        }
        let payload = &frame[HEADER_LEN..];
        let ends = self
            .segmenter
            .boundaries(payload, true)
            .unwrap_or_else(|| vec![payload.len()]);
        let mut segs = Vec::with_capacity(ends.len());
        let mut at = 0;
        for end in ends {
            segs.push(&payload[at..end]);
            at = end;
        }
        match self.tx.send_message(0, &frame[..HEADER_LEN], &segs) {
            Ok(()) => {
                // One group per frame, so the peer can deliver it at once.
                self.tx.flush();
                self.flush_pending(out);
            }
            Err(_) => {
                self.flush_pending(out);
                out.push(frame);
            }
        }
    }

    fn inbound(&mut self, now: Instant, frame: Frame, out: &mut Vec<Frame>) -> Result<(), String> {
        if frame.kind == FrameKind::Dedup {
            match frame.tag {
                TAG_REPLIES => self
                    .tx
                    .handle_input(&frame.payload)
                    .map_err(|e| format!("dedup replies from the peer: {e}"))?,
                TAG_STREAM => {
                    self.rx
                        .handle_input(&frame.payload)
                        .map_err(|e| format!("dedup stream from the peer: {e}"))?;
                    self.deliver(out)?;
                }
                t => return Err(format!("Dedup frame with unknown tag {t}")),
            }
            self.due = Some(now);
            return Ok(());
        }
        let announced = self.rx.stats().messages;
        if self.held.is_empty() && announced <= self.delivered {
            out.push(frame);
        } else {
            self.held.push_back((announced, frame));
        }
        Ok(())
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.due
    }

    fn release(&mut self, _now: Instant, out: &mut Vec<Bytes>) {
        self.flush_pending(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vargr_wire::Frame;

    fn data_frame(payload: &[u8]) -> Bytes {
        Frame::new(FrameKind::PointToPoint, 3, 9, payload.to_vec()).to_wire()
    }

    /// Moves frames between two stages until both are quiet; returns the frames `b`
    /// delivered and the bytes that crossed from `a` to `b`.
    fn exchange(a: &mut DedupStage, b: &mut DedupStage, frames: &[Bytes]) -> (Vec<Frame>, usize) {
        let now = Instant::now();
        let (mut delivered, mut crossed) = (Vec::new(), 0);
        let mut a_out = Vec::new();
        for f in frames {
            a.outbound(now, f.clone(), &mut a_out);
        }
        for _ in 0..100 {
            for w in a_out.drain(..) {
                crossed += w.len();
                let f = vargr_wire::decode_exact(&w, usize::MAX).unwrap();
                b.inbound(now, f, &mut delivered).unwrap();
            }
            let mut back = Vec::new();
            if b.next_deadline().is_some() {
                b.release(now, &mut back);
            }
            if back.is_empty() {
                break;
            }
            let mut sink = Vec::new();
            for w in back {
                let f = vargr_wire::decode_exact(&w, usize::MAX).unwrap();
                a.inbound(now, f, &mut sink).unwrap();
            }
            assert!(sink.is_empty());
            if a.next_deadline().is_some() {
                a.release(now, &mut a_out);
            }
        }
        (delivered, crossed)
    }

    #[test]
    fn repeated_payloads_cross_as_fingerprints_in_order() {
        let opts = DedupOptions::default();
        let (mut a, mut b) = (
            DedupStage::new(&opts, 1 << 26).unwrap(),
            DedupStage::new(&opts, 1 << 26).unwrap(),
        );
        let big = crate::testdata::random(256 << 10, 7);
        let frames = vec![
            data_frame(&big),
            data_frame(b"small, passes unchanged"),
            data_frame(&big),
            Frame::new(FrameKind::Data, 1, 2, &b"tree"[..]).to_wire(),
        ];
        let (got, crossed) = exchange(&mut a, &mut b, &frames);
        let want: Vec<Frame> = frames
            .iter()
            .map(|f| vargr_wire::decode_exact(f, usize::MAX).unwrap())
            .collect();
        assert_eq!(got, want);
        // The second copy costs ~6 bytes per ~1 KiB segment.
        assert!(
            crossed < big.len() + big.len() / 8,
            "{crossed} bytes crossed"
        );
    }

    #[test]
    fn garbage_from_the_peer_is_an_error_naming_the_stage_input() {
        let mut s = DedupStage::new(&DedupOptions::default(), 1 << 20).unwrap();
        let f = Frame::new(FrameKind::Dedup, 0, 0, &b"\xff\xff"[..]);
        let e = s.inbound(Instant::now(), f, &mut Vec::new()).unwrap_err();
        assert!(e.contains("dedup stream from the peer"), "{e}");
        assert!(DedupStage::new(
            &DedupOptions {
                segmenter: "tiles".into(),
                ..DedupOptions::default()
            },
            1 << 20
        )
        .is_err());
    }
}
