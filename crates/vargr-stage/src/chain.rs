//! The chain of a link's stages: runs frames through them in order and records, at every
//! stage boundary, how long each frame was inside.
//!
//! Stages are sans-IO: they get the time as an argument and may hold frames back
//! until a deadline ([`Stage::next_deadline`], [`Stage::release`]), which the reactor
//! honours. A link without stages pays nothing for this.
//!
//! Order: stage 0 is nearest the application. Outgoing frames go 0 → n−1 → socket;
//! incoming frames go socket → n−1 → 0.
//!
//! Every stage boundary is an event collector (`link/stage/<name>/out` and `…/in`, see
//! vargr-trace): a record per frame leaving a stage, from when the frame entered it, so
//! the time a WAN emulator or a compressor held each frame shows in traces. Stages emit
//! frames in the order they took them; a stage that splits or merges frames is timed
//! from the oldest frame still inside it.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use vargr_wire::Frame;

use crate::StageError;

/// The stream field of an encoded frame's header, for records (0 if cut short).
fn stream_of(f: &[u8]) -> u32 {
    f.get(8..12)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// One wrapper on a link.
pub trait Stage: Send {
    /// Short name for errors and traces (`emu`, `codec`, …).
    fn name(&self) -> &str;

    /// An outgoing encoded frame. Push what should continue towards the socket (the
    /// frame, a transformed one, or nothing if it is held for later) onto `out`.
    fn outbound(&mut self, now: Instant, frame: Bytes, out: &mut Vec<Bytes>);

    /// An incoming frame. Push what should continue towards the node onto `out`; an error
    /// closes the link, naming this stage.
    fn inbound(&mut self, _now: Instant, frame: Frame, out: &mut Vec<Frame>) -> Result<(), String> {
        out.push(frame);
        Ok(())
    }

    /// When a held outgoing frame falls due, if any is held.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }

    /// Moves outgoing frames due by `now` onto `out`.
    fn release(&mut self, _now: Instant, _out: &mut Vec<Bytes>) {}

    /// Bytes held back, counted as the link's backlog so that backpressure sees them.
    fn held_bytes(&self) -> usize {
        0
    }

    /// What the kernel measured about the connection's path, read every so often
    /// while the link sends (TCP links on Linux only).
    fn path_info(&mut self, _info: &crate::PathInfo) {}

    /// Whether this stage wants path readings at all; while the connection is busy the
    /// link then also reads every few milliseconds, not only when it writes.
    fn wants_path(&self) -> bool {
        false
    }

    /// A failure met while sending, taken once. Sending has no error path (a frame is
    /// queued, not answered), so a stage that fails there (a user stage's error or
    /// panic) keeps the reason here and the link closes with it, naming this stage, as
    /// it does for an inbound error.
    fn take_failure(&mut self) -> Option<String> {
        None
    }
}

/// The stages of one link, in order.
#[derive(Default)]
pub struct StageChain {
    stages: Vec<Box<dyn Stage>>,
    /// Per stage: collector ids (out, in), and when each frame inside it entered.
    collectors: Vec<(u16, u16)>,
    entered: Vec<VecDeque<u64>>,
    // Scratch buffers, kept to avoid allocating per frame.
    a: Vec<Bytes>,
    b: Vec<Bytes>,
    fa: Vec<Frame>,
    fb: Vec<Frame>,
}

impl StageChain {
    pub fn new(stages: Vec<Box<dyn Stage>>) -> StageChain {
        let collectors = stages
            .iter()
            .map(|s| {
                (
                    vargr_trace::collector(&format!("link/stage/{}/out", s.name())),
                    vargr_trace::collector(&format!("link/stage/{}/in", s.name())),
                )
            })
            .collect();
        StageChain {
            entered: vec![VecDeque::new(); stages.len()],
            collectors,
            stages,
            ..Default::default()
        }
    }

    /// Whether any stage wants path readings.
    pub fn wants_path(&self) -> bool {
        self.stages.iter().any(|s| s.wants_path())
    }

    /// Gives every stage a reading of the connection's path.
    pub fn path_info(&mut self, info: &crate::PathInfo) {
        for s in &mut self.stages {
            s.path_info(info);
        }
    }

    /// Records the frames stage `k` just emitted, each from the oldest entry.
    fn record_out(&mut self, k: usize, emitted: &[Bytes]) {
        let now = vargr_trace::now();
        for f in emitted {
            let start = self.entered[k].pop_front().unwrap_or(now);
            vargr_trace::record(&vargr_trace::Record {
                start,
                end: now,
                seq: stream_of(f),
                bytes: u32::try_from(f.len()).unwrap_or(u32::MAX),
                collector: self.collectors[k].0,
                op: vargr_trace::EventOp::LinkOut as u8,
                status: 0,
                peer: vargr_trace::NO_PEER,
            });
        }
        // A stage that merges frames leaves entries behind; keep the queue bounded by
        // what the stage holds.
        if self.entered[k].len() > 1 << 16 {
            self.entered[k].clear();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    pub fn names(&self) -> Vec<&str> {
        self.stages.iter().map(|s| s.name()).collect()
    }

    /// Runs an outgoing frame through every stage; what comes out is appended to `out`.
    pub fn outbound(&mut self, now: Instant, frame: Bytes, out: &mut Vec<Bytes>) {
        self.a.clear();
        self.a.push(frame);
        self.run_outbound_from(0, now, out);
    }

    fn run_outbound_from(&mut self, first: usize, mut now: Instant, out: &mut Vec<Bytes>) {
        for k in first..self.stages.len() {
            self.b.clear();
            let t = vargr_trace::now();
            self.entered[k].extend(std::iter::repeat_n(t, self.a.len()));
            let took = Instant::now();
            for f in self.a.drain(..) {
                self.stages[k].outbound(now, f, &mut self.b);
            }
            // Frames reach the next stage when this one is done with them: an emulated
            // WAN behind a compressor must not start a transfer when compression began.
            now += took.elapsed();
            std::mem::swap(&mut self.a, &mut self.b);
            let emitted = std::mem::take(&mut self.a);
            self.record_out(k, &emitted);
            self.a = emitted;
            if self.a.is_empty() {
                return;
            }
        }
        out.append(&mut self.a);
    }

    /// Runs an incoming frame through the stages in reverse order.
    pub fn inbound(
        &mut self,
        peer: &str,
        now: Instant,
        frame: Frame,
        out: &mut Vec<Frame>,
    ) -> Result<(), StageError> {
        self.fa.clear();
        self.fa.push(frame);
        for (s, &(_, id)) in self.stages.iter_mut().zip(&self.collectors).rev() {
            self.fb.clear();
            let t = vargr_trace::now();
            for f in self.fa.drain(..) {
                s.inbound(now, f, &mut self.fb)
                    .map_err(|reason| StageError {
                        peer: peer.to_string(),
                        stage: s.name().to_string(),
                        reason,
                    })?;
            }
            let end = vargr_trace::now();
            for f in &self.fb {
                vargr_trace::record(&vargr_trace::Record {
                    start: t,
                    end,
                    seq: f.stream,
                    bytes: u32::try_from(f.payload.len()).unwrap_or(u32::MAX),
                    collector: id,
                    op: vargr_trace::EventOp::LinkIn as u8,
                    status: 0,
                    peer: vargr_trace::NO_PEER,
                });
            }
            std::mem::swap(&mut self.fa, &mut self.fb);
        }
        out.append(&mut self.fa);
        Ok(())
    }

    /// The first failure a stage met while sending, as the error that closes the link to
    /// `peer` (see [`Stage::take_failure`]).
    pub fn take_failure(&mut self, peer: &str) -> Option<StageError> {
        self.stages.iter_mut().find_map(|s| {
            s.take_failure().map(|reason| StageError {
                peer: peer.to_string(),
                stage: s.name().to_string(),
                reason,
            })
        })
    }

    /// Bytes the stages hold back.
    pub fn held_bytes(&self) -> usize {
        self.stages.iter().map(|s| s.held_bytes()).sum()
    }

    /// The earliest deadline of any stage.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.stages.iter().filter_map(|s| s.next_deadline()).min()
    }

    /// Releases every frame due by `now`, passing each through the stages after the one
    /// that held it.
    pub fn release(&mut self, now: Instant, out: &mut Vec<Bytes>) {
        for i in 0..self.stages.len() {
            if self.stages[i].next_deadline().is_some_and(|d| d <= now) {
                self.a.clear();
                let mut due = std::mem::take(&mut self.a);
                self.stages[i].release(now, &mut due);
                self.record_out(i, &due);
                self.a = due;
                if !self.a.is_empty() {
                    self.run_outbound_from(i + 1, now, out);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::time::Duration;

    use vargr_wire::FrameKind;

    use super::*;

    /// Appends its mark to outgoing bytes; checks and strips it from incoming payloads.
    struct Mark(u8, &'static str);

    impl Stage for Mark {
        fn name(&self) -> &str {
            self.1
        }
        fn outbound(&mut self, _now: Instant, frame: Bytes, out: &mut Vec<Bytes>) {
            let mut v = frame.to_vec();
            v.push(self.0);
            out.push(v.into());
        }
        fn inbound(&mut self, _now: Instant, f: Frame, out: &mut Vec<Frame>) -> Result<(), String> {
            match f.payload.last() {
                Some(&m) if m == self.0 => {
                    let p = f.payload.slice(..f.payload.len() - 1);
                    out.push(Frame::new(f.kind, f.stream, f.tag, p));
                    Ok(())
                }
                other => Err(format!("expected mark {}, found {other:?}", self.0)),
            }
        }
    }

    /// Holds every frame for a fixed delay.
    struct Delay(Duration, VecDeque<(Instant, Bytes)>);

    impl Stage for Delay {
        fn name(&self) -> &str {
            "delay"
        }
        fn outbound(&mut self, now: Instant, frame: Bytes, _out: &mut Vec<Bytes>) {
            self.1.push_back((now + self.0, frame));
        }
        fn next_deadline(&self) -> Option<Instant> {
            self.1.front().map(|(t, _)| *t)
        }
        fn release(&mut self, now: Instant, out: &mut Vec<Bytes>) {
            while self.1.front().is_some_and(|(t, _)| *t <= now) {
                out.push(self.1.pop_front().unwrap().1);
            }
        }
        fn held_bytes(&self) -> usize {
            self.1.iter().map(|(_, b)| b.len()).sum()
        }
    }

    #[test]
    fn outbound_runs_first_to_last_and_inbound_last_to_first() {
        let mut c = StageChain::new(vec![Box::new(Mark(1, "a")), Box::new(Mark(2, "b"))]);
        let now = Instant::now();
        let mut out = Vec::new();
        c.outbound(now, Bytes::from_static(b"x"), &mut out);
        assert_eq!(out, vec![Bytes::from_static(&[b'x', 1, 2])]);
        // The far side undoes b before a.
        let f = Frame::new(FrameKind::Data, 1, 2, vec![b'y', 1, 2]);
        let mut got = Vec::new();
        c.inbound("peer", now, f, &mut got).unwrap();
        assert_eq!(&got[0].payload[..], b"y");
        assert_eq!(c.names(), vec!["a", "b"]);
    }

    #[test]
    fn an_inbound_error_names_the_stage_and_the_peer() {
        let mut c = StageChain::new(vec![Box::new(Mark(1, "a")), Box::new(Mark(2, "b"))]);
        let f = Frame::new(FrameKind::Data, 1, 2, vec![b'y', 2, 1]);
        let e = c
            .inbound("node 3", Instant::now(), f, &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("stage b") && e.contains("node 3"), "{e}");
    }

    /// Takes real time over each frame, as a compressor does.
    struct Slow(Duration);

    impl Stage for Slow {
        fn name(&self) -> &str {
            "slow"
        }
        fn outbound(&mut self, _now: Instant, frame: Bytes, out: &mut Vec<Bytes>) {
            std::thread::sleep(self.0);
            out.push(frame);
        }
    }

    #[test]
    fn a_frame_reaches_the_next_stage_when_the_stage_before_is_done_with_it() {
        let (work, d) = (Duration::from_millis(20), Duration::from_millis(5));
        let mut c = StageChain::new(vec![
            Box::new(Slow(work)),
            Box::new(Delay(d, VecDeque::new())),
        ]);
        let t0 = Instant::now();
        c.outbound(t0, Bytes::from_static(b"p"), &mut Vec::new());
        assert!(c.next_deadline().is_some_and(|t| t >= t0 + work + d));
    }

    #[test]
    fn held_frames_continue_through_later_stages_when_due() {
        let d = Duration::from_millis(5);
        let mut c = StageChain::new(vec![
            Box::new(Mark(1, "a")),
            Box::new(Delay(d, VecDeque::new())),
            Box::new(Mark(2, "b")),
        ]);
        let t0 = Instant::now();
        let mut out = Vec::new();
        c.outbound(t0, Bytes::from_static(b"p"), &mut out);
        // The chain adds the real time stage "a" took (microseconds) to the frame's
        // arrival at the delay, so deadlines are compared with a margin.
        let gap = Duration::from_millis(40);
        c.outbound(t0 + gap, Bytes::from_static(b"q"), &mut out);
        assert!(out.is_empty());
        assert_eq!(c.held_bytes(), 4);
        assert!(c
            .next_deadline()
            .is_some_and(|t| t >= t0 + d && t < t0 + d + gap / 2));
        c.release(t0 + Duration::from_millis(4), &mut out);
        assert!(out.is_empty(), "nothing is due yet");
        c.release(t0 + d + gap / 2, &mut out);
        assert_eq!(out, vec![Bytes::from_static(&[b'p', 1, 2])]);
        c.release(t0 + d + 2 * gap, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1], Bytes::from_static(&[b'q', 1, 2]));
        assert_eq!(c.next_deadline(), None);
        assert_eq!(c.held_bytes(), 0);
    }

    #[test]
    fn each_stage_boundary_records_how_long_a_frame_was_inside() {
        let first = vargr_trace::ClockPoint::now();
        let mut c = StageChain::new(vec![
            Box::new(Mark(1, "traced-a")),
            Box::new(Delay(Duration::from_millis(3), VecDeque::new())),
        ]);
        let mut tracer = vargr_trace::Tracer::new();
        let t0 = Instant::now();
        let mut out = Vec::new();
        // A length no other test uses, to tell this frame's records apart.
        c.outbound(t0, Bytes::from_static(b"0123456789abcdefxyz"), &mut out);
        std::thread::sleep(Duration::from_millis(3));
        // The delay's deadline is 3 ms after stage a was done, a little after t0.
        let due = c.next_deadline().unwrap();
        assert!(due >= t0 + Duration::from_millis(3));
        c.release(due, &mut out);
        assert_eq!(out.len(), 1);
        let names = vargr_trace::collector_names();
        let mine: Vec<(String, vargr_trace::Record)> = tracer
            .read()
            .into_iter()
            .flat_map(|t| t.records)
            .filter(|r| r.bytes == 20)
            .map(|r| (names[usize::from(r.collector)].clone(), r))
            .collect();
        let cal = vargr_trace::Calibration {
            first,
            last: vargr_trace::ClockPoint::now(),
        };
        let held = |stage: &str| {
            let (_, r) = mine
                .iter()
                .find(|(n, _)| n == &format!("link/stage/{stage}/out"))
                .unwrap_or_else(|| panic!("no record of stage {stage}: {mine:?}"));
            assert_eq!(r.op, vargr_trace::EventOp::LinkOut as u8);
            cal.to_ns(r.end) - cal.to_ns(r.start)
        };
        assert!(held("traced-a") < 2_000_000);
        assert!(held("delay") >= 2_500_000, "{mine:?}");
    }
}
