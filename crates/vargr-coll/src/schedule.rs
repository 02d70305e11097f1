//! Collective algorithms as data: a [`Schedule`] is the list of sends, receives, copies
//! and combines one rank performs, built by a pure function of (rank, size, layout).
//!
//! Keeping schedules sans-IO means an algorithm can be inspected (how many messages, how
//! many bytes, to whom), checked (every send has a matching receive) and simulated on a
//! virtual clock by a cost model or monitor without a network; the [`execute`] driver runs
//! one over any [`Transport`]. A socket transport with its own progress engine can execute
//! the same steps without blocking a thread per rank.
//!
//! Peers in a schedule are communicator ranks; [`Schedule::remap`] rewrites them when a
//! schedule built for a sub-group (one host, one site) is spliced into a larger one.

use std::ops::Range;

use bytes::Bytes;

use crate::elem::ElemKind;
use crate::error::{CollError, Result};
use crate::op::Op;
use crate::transport::{Tag, Transport};

/// The buffers a schedule addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buf {
    /// The caller's read-only send buffer (gather, scatter root, alltoall).
    Input,
    /// The caller's result buffer; for in-place reductions also the input.
    Work,
    /// Scratch space of `Schedule::tmp_len` bytes, aligned for any element type.
    Tmp,
}

/// What a receive does with the incoming bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Overwrite the destination range.
    Replace,
    /// Combine into the destination range; `incoming_left` says whether the incoming data
    /// is the left operand (it comes from lower ranks).
    Reduce { incoming_left: bool },
}

/// One action of one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Send {
        to: usize,
        phase: u16,
        buf: Buf,
        range: Range<usize>,
    },
    Recv {
        from: usize,
        phase: u16,
        buf: Buf,
        range: Range<usize>,
        mode: Mode,
    },
    Copy {
        from: Buf,
        src: Range<usize>,
        to: Buf,
        dst: usize,
    },
    /// `to[dst..] = from[src] ∘ to[dst..]` if `from_left`, else `to ∘ from`.
    Combine {
        from: Buf,
        src: Range<usize>,
        to: Buf,
        dst: usize,
        from_left: bool,
    },
}

/// One rank's part of one collective call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schedule {
    pub steps: Vec<Step>,
    /// Bytes of scratch the executor must provide.
    pub tmp_len: usize,
}

impl Schedule {
    pub fn new() -> Schedule {
        Schedule::default()
    }

    pub fn send(&mut self, to: usize, phase: u16, buf: Buf, range: Range<usize>) {
        self.steps.push(Step::Send {
            to,
            phase,
            buf,
            range,
        });
    }

    pub fn recv(&mut self, from: usize, phase: u16, buf: Buf, range: Range<usize>, mode: Mode) {
        self.steps.push(Step::Recv {
            from,
            phase,
            buf,
            range,
            mode,
        });
    }

    pub fn copy(&mut self, from: Buf, src: Range<usize>, to: Buf, dst: usize) {
        if !src.is_empty() {
            self.steps.push(Step::Copy { from, src, to, dst });
        }
    }

    pub fn combine(&mut self, from: Buf, src: Range<usize>, to: Buf, dst: usize, from_left: bool) {
        if !src.is_empty() {
            self.steps.push(Step::Combine {
                from,
                src,
                to,
                dst,
                from_left,
            });
        }
    }

    /// Rewrites peers through `members` (sub-group rank → communicator rank) and offsets
    /// phases by `phase_base`, so sub-schedules of different stages never share a tag.
    pub fn remap(mut self, members: &[usize], phase_base: u16) -> Schedule {
        for s in &mut self.steps {
            match s {
                Step::Send { to, phase, .. } => {
                    *to = members[*to];
                    *phase = phase.wrapping_add(phase_base);
                }
                Step::Recv { from, phase, .. } => {
                    *from = members[*from];
                    *phase = phase.wrapping_add(phase_base);
                }
                _ => {}
            }
        }
        self
    }

    /// Offsets every phase by `base`, to splice two schedules that reuse phase numbers.
    pub fn shift_phases(mut self, base: u16) -> Schedule {
        for s in &mut self.steps {
            if let Step::Send { phase, .. } | Step::Recv { phase, .. } = s {
                *phase = phase.wrapping_add(base);
            }
        }
        self
    }

    /// Appends `other`'s steps; scratch is shared (the larger requirement wins).
    pub fn append(&mut self, other: Schedule) {
        self.tmp_len = self.tmp_len.max(other.tmp_len);
        self.steps.extend(other.steps);
    }

    /// Number of messages this rank sends.
    pub fn sends(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Send { .. }))
            .count()
    }

    /// Bytes this rank sends.
    pub fn bytes_sent(&self) -> usize {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Send { range, .. } => range.len(),
                _ => 0,
            })
            .sum()
    }
}

/// Everything the executor needs besides the schedule and the buffers.
pub struct ExecCtx<'a> {
    pub transport: &'a dyn Transport,
    /// Communicator rank → transport rank.
    pub ranks: &'a [usize],
    /// `Tag::collective(ctx, seq)` of this call.
    pub tag_base: u64,
    pub kind: ElemKind,
    /// Needed by `Reduce` receives and `Combine` steps.
    pub op: Option<&'a Op>,
    /// Trace collector and call sequence number that sends and receives are recorded
    /// under.
    pub collector: u16,
    pub seq: u32,
}

/// Records one send or receive of a schedule.
#[inline]
fn trace_step(ctx: &ExecCtx<'_>, op: vargr_trace::EventOp, start: u64, peer: usize, bytes: usize) {
    vargr_trace::record(&vargr_trace::Record {
        start,
        end: vargr_trace::now(),
        seq: ctx.seq,
        bytes: bytes.min(u32::MAX as usize) as u32,
        collector: ctx.collector,
        op: op as u8,
        status: 0,
        peer: peer as u32,
    });
}

/// Runs `sched` on this rank. `input` and `work` are the caller's buffers; scratch is
/// allocated here. Received messages are length-checked against the schedule.
pub fn execute(ctx: &ExecCtx<'_>, sched: &Schedule, input: &[u8], work: &mut [u8]) -> Result<()> {
    // u64 backing keeps scratch aligned for every element type.
    let mut tmp_words = vec![0u64; sched.tmp_len.div_ceil(8)];
    let tmp = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut tmp_words)[..sched.tmp_len];
    let me = ctx.transport.rank();
    for step in &sched.steps {
        match step {
            Step::Send {
                to,
                phase,
                buf,
                range,
            } => {
                let src: &[u8] = match buf {
                    Buf::Input => input,
                    Buf::Work => work,
                    Buf::Tmp => tmp,
                };
                let t0 = vargr_trace::now();
                let data = Bytes::copy_from_slice(&src[range.clone()]);
                let dest = ctx.ranks[*to];
                ctx.transport.send_typed(
                    dest,
                    Tag::with_phase(ctx.tag_base, *phase),
                    data,
                    ctx.kind,
                )?;
                trace_step(ctx, vargr_trace::EventOp::Send, t0, dest, range.len());
            }
            Step::Recv {
                from,
                phase,
                buf,
                range,
                mode,
            } => {
                let tag = Tag::with_phase(ctx.tag_base, *phase);
                let src = ctx.ranks[*from];
                let t0 = vargr_trace::now();
                let data = ctx.transport.recv(src, tag)?;
                trace_step(ctx, vargr_trace::EventOp::Recv, t0, src, data.len());
                if data.len() != range.len() {
                    return Err(CollError::MessageLength {
                        rank: me,
                        src,
                        tag,
                        expected: range.len(),
                        got: data.len(),
                    });
                }
                let dst: &mut [u8] = match buf {
                    Buf::Input => unreachable!("schedules never write the input buffer"),
                    Buf::Work => &mut work[range.clone()],
                    Buf::Tmp => &mut tmp[range.clone()],
                };
                match mode {
                    Mode::Replace => dst.copy_from_slice(&data),
                    Mode::Reduce { incoming_left } => {
                        op_of(ctx)?.apply(ctx.kind, dst, &data, *incoming_left)?
                    }
                }
            }
            Step::Copy { from, src, to, dst } => {
                let dst = *dst..*dst + src.len();
                match (from, to) {
                    (Buf::Input, Buf::Work) => work[dst].copy_from_slice(&input[src.clone()]),
                    (Buf::Input, Buf::Tmp) => tmp[dst].copy_from_slice(&input[src.clone()]),
                    (Buf::Work, Buf::Tmp) => tmp[dst].copy_from_slice(&work[src.clone()]),
                    (Buf::Tmp, Buf::Work) => work[dst].copy_from_slice(&tmp[src.clone()]),
                    (Buf::Work, Buf::Work) => work.copy_within(src.clone(), dst.start),
                    (Buf::Tmp, Buf::Tmp) => tmp.copy_within(src.clone(), dst.start),
                    (_, Buf::Input) => unreachable!("schedules never write the input buffer"),
                }
            }
            Step::Combine {
                from,
                src,
                to,
                dst,
                from_left,
            } => {
                let op = op_of(ctx)?;
                let dst = *dst..*dst + src.len();
                match (from, to) {
                    (Buf::Input, Buf::Work) => {
                        op.apply(ctx.kind, &mut work[dst], &input[src.clone()], *from_left)?
                    }
                    (Buf::Input, Buf::Tmp) => {
                        op.apply(ctx.kind, &mut tmp[dst], &input[src.clone()], *from_left)?
                    }
                    (Buf::Work, Buf::Tmp) => {
                        op.apply(ctx.kind, &mut tmp[dst], &work[src.clone()], *from_left)?
                    }
                    (Buf::Tmp, Buf::Work) => {
                        op.apply(ctx.kind, &mut work[dst], &tmp[src.clone()], *from_left)?
                    }
                    (Buf::Work, Buf::Work) => {
                        let (a, b) = disjoint(work, src.clone(), dst);
                        op.apply(ctx.kind, b, a, *from_left)?
                    }
                    (Buf::Tmp, Buf::Tmp) => {
                        let (a, b) = disjoint(tmp, src.clone(), dst);
                        op.apply(ctx.kind, b, a, *from_left)?
                    }
                    (_, Buf::Input) => unreachable!("schedules never write the input buffer"),
                }
            }
        }
    }
    Ok(())
}

fn op_of<'a>(ctx: &ExecCtx<'a>) -> Result<&'a Op> {
    ctx.op.ok_or_else(|| CollError::Unsupported {
        coll: crate::select::CollKind::Reduce,
        algorithm: "schedule".into(),
        reason: "a reducing step ran without an operator".into(),
    })
}

/// Borrows two non-overlapping ranges of one buffer: (`src` shared, `dst` mutable).
fn disjoint(buf: &mut [u8], src: Range<usize>, dst: Range<usize>) -> (&[u8], &mut [u8]) {
    debug_assert!(src.end <= dst.start || dst.end <= src.start);
    if src.end <= dst.start {
        let (lo, hi) = buf.split_at_mut(dst.start);
        (&lo[src], &mut hi[..dst.len()])
    } else {
        let (lo, hi) = buf.split_at_mut(src.start);
        (&hi[..src.len()], &mut lo[dst])
    }
}
