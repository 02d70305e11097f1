//! `timealign:interval_secs`: Paradyn's time-aligned aggregation of performance samples.
//!
//! Back-ends send samples `"%lf %lf %lf"` = (start, end, value) in seconds; samples from
//! different back-ends cover different, unaligned intervals. The filter keeps a queue per
//! input and an *output interval* `[k*interval, (k+1)*interval)` on a grid shared by the
//! whole tree (multiples of `interval` since the clock's epoch), so the samples an upper
//! level receives are already aligned and are never split again.
//!
//! A sample overlapping the end of the output interval is split: the share of its value
//! proportional to the overlapping time goes to this interval, the remainder stays queued
//! with its start moved to the interval's end. Nothing is lost to rounding: what is
//! attributed plus what remains is the original value. Data arriving for an interval
//! already sent is attributed to the current one. When `num_inputs` inputs have covered
//! the interval (sent samples reaching its end), the filter emits (start, end, sum of
//! the inputs' shares) and moves on; intervals nobody contributed to are skipped.
//!
//! Inputs are told apart by packet `source`: back-end ranks at the leaves' parents, and
//! the sending node's rank above, since outputs carry `source = node_id`.
//! [`TransformFilter::flush`] emits what is left when the stream closes.

use std::collections::{BTreeMap, VecDeque};

use vargr_wire::{Elem, Field, Packet, Value};

use crate::arith::{self, output};
use crate::{FilterContext, FilterError, TransformFilter};

const NAME: &str = "timealign";
/// Longest sample accepted, in output intervals (bounds the packets one sample can cause).
const MAX_SPAN: f64 = 65536.0;

#[derive(Debug, Clone, Copy)]
struct Sample {
    start: f64,
    end: f64,
    value: f64,
}

#[derive(Debug)]
struct Input {
    queue: VecDeque<Sample>,
    /// Share attributed to the current output interval.
    acc: f64,
    touched: bool,
    /// Latest sample end seen.
    covered: f64,
}

impl Input {
    fn new() -> Input {
        Input {
            queue: VecDeque::new(),
            acc: 0.0,
            touched: false,
            covered: f64::NEG_INFINITY,
        }
    }

    /// Moves this input's data overlapping `[.., b)` into `acc`.
    fn attribute(&mut self, b: f64) {
        while let Some(s) = self.queue.front_mut() {
            if s.start >= b {
                break;
            }
            self.touched = true;
            if s.end <= b {
                self.acc += s.value;
                self.queue.pop_front();
                continue;
            }
            let part = s.value * ((b - s.start) / (s.end - s.start));
            self.acc += part;
            s.value -= part;
            s.start = b;
            break;
        }
    }
}

pub(crate) struct TimeAlign {
    interval: f64,
    /// Index of the current output interval, once the first sample arrived.
    cur: Option<i64>,
    inputs: BTreeMap<u32, Input>,
    tag: i32,
}

impl TimeAlign {
    pub(crate) fn from_params(params: &str) -> Result<TimeAlign, FilterError> {
        let interval: f64 = params.trim().parse().map_err(|_| {
            FilterError::params(
                NAME,
                params,
                "expected the output interval in seconds, as in timealign:0.5",
            )
        })?;
        if !(interval.is_finite() && interval > 0.0) {
            return Err(FilterError::params(
                NAME,
                params,
                "the interval must be a positive number of seconds",
            ));
        }
        Ok(TimeAlign {
            interval,
            cur: None,
            inputs: BTreeMap::new(),
            tag: 0,
        })
    }

    fn sample(&self, p: &Packet) -> Result<Sample, FilterError> {
        let d = Field::Scalar(Elem::Double);
        let (Some([Value::Double(start), Value::Double(end), Value::Double(value)]), [a, b, c]) = (
            p.values.get(..3).filter(|_| p.values.len() == 3),
            p.format.fields(),
        ) else {
            return Err(FilterError::format(
                NAME,
                format!(
                    "got {:?}, timealign needs \"%lf %lf %lf\" (start, end, value)",
                    p.format.as_str()
                ),
            ));
        };
        if [*a, *b, *c] != [d, d, d] {
            return Err(FilterError::format(NAME, "values do not match the format"));
        }
        let ok = start.is_finite() && end.is_finite() && value.is_finite() && start <= end;
        if !ok || (end - start) / self.interval > MAX_SPAN {
            return Err(FilterError::format(
                NAME,
                format!("bad sample [{start}, {end}] = {value} from source {}: need finite start <= end spanning at most {MAX_SPAN} intervals", p.source),
            ));
        }
        Ok(Sample {
            start: *start,
            end: *end,
            value: *value,
        })
    }

    /// Emits every interval now complete (all intervals with data when `flush`).
    fn drain(&mut self, ctx: &FilterContext, flush: bool) -> Result<Vec<Packet>, FilterError> {
        let mut out = Vec::new();
        let need = ctx.num_inputs.max(1);
        while let Some(k) = self.cur {
            let (a, b) = (k as f64 * self.interval, (k + 1) as f64 * self.interval);
            for input in self.inputs.values_mut() {
                input.attribute(b);
            }
            let covering = self.inputs.values().filter(|i| i.covered >= b).count();
            let touched = self.inputs.values().any(|i| i.touched);
            if !flush && covering < need {
                break;
            }
            if touched {
                let sum: f64 = self.inputs.values().map(|i| i.acc).sum();
                let values = vec![Value::Double(a), Value::Double(b), Value::Double(sum)];
                let format = arith::parse_format(NAME, "%lf %lf %lf")?;
                let mut p = output(ctx.stream, self.tag, format, values);
                p.source = ctx.node_id;
                out.push(p);
                for i in self.inputs.values_mut() {
                    i.acc = 0.0;
                    i.touched = false;
                }
                self.cur = Some(k + 1);
                continue;
            }
            // Nothing in this interval: skip to the next queued sample, or wait.
            let next = self
                .inputs
                .values()
                .filter_map(|i| i.queue.front())
                .map(|s| s.start)
                .reduce(f64::min);
            match next {
                Some(t) => self.cur = Some((k + 1).max((t / self.interval).floor() as i64)),
                None => break,
            }
        }
        Ok(out)
    }
}

impl TransformFilter for TimeAlign {
    fn apply(
        &mut self,
        ctx: &FilterContext,
        wave: Vec<Packet>,
    ) -> Result<Vec<Packet>, FilterError> {
        let samples = wave
            .iter()
            .map(|p| self.sample(p))
            .collect::<Result<Vec<_>, _>>()?;
        for (p, s) in wave.iter().zip(samples) {
            self.tag = p.tag;
            self.cur
                .get_or_insert((s.start / self.interval).floor() as i64);
            let input = self.inputs.entry(p.source).or_insert_with(Input::new);
            input.covered = input.covered.max(s.end);
            input.queue.push_back(s);
        }
        self.drain(ctx, false)
    }
    fn flush(&mut self, ctx: &FilterContext) -> Result<Vec<Packet>, FilterError> {
        self.drain(ctx, true)
    }
    fn name(&self) -> &str {
        NAME
    }
}
