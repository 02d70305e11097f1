//! `histogram:lo,hi,bins`: counts of numeric values in `bins` equal-width bins.
//!
//! Every numeric element of every field of the back-ends' packets (scalars and arrays,
//! any numeric type) is counted. The result is `%auld` with `bins + 2` counts:
//! `[underflow (< lo), bin 0, .., bin bins-1, overflow (>= hi or NaN)]`.
//!
//! Below the root the counts travel as a partial `"%s %auld"` whose marker
//! `vargr.histogram:lo,hi,bins` names the parameters, so a node whose children were
//! configured differently reports it instead of adding unrelated bins. Upper levels add
//! counts; the root sends the bare `%auld`. Raw input has no `%s` field (the histogram
//! needs numbers), so a leading `%s` marks a partial unambiguously.

use vargr_wire::{Packet, Value};

use crate::arith::{self, numeric_elem, output, with_num, Num};
use crate::{FilterContext, FilterError, TransformFilter};

const NAME: &str = "histogram";
const MAX_BINS: usize = 1 << 20;

pub(crate) struct Histogram {
    lo: f64,
    hi: f64,
    bins: usize,
    marker: String,
}

impl Histogram {
    pub(crate) fn from_params(params: &str) -> Result<Histogram, FilterError> {
        let bad = |why: &str| {
            FilterError::params(
                NAME,
                params,
                format!("{why}; expected lo,hi,bins as in histogram:0,100,10"),
            )
        };
        let parts: Vec<&str> = params.split(',').map(str::trim).collect();
        let [lo, hi, bins] = parts.as_slice() else {
            return Err(bad("need three values"));
        };
        let lo: f64 = lo.parse().map_err(|_| bad("lo is not a number"))?;
        let hi: f64 = hi.parse().map_err(|_| bad("hi is not a number"))?;
        let bins: usize = bins
            .parse()
            .map_err(|_| bad("bins is not a positive integer"))?;
        if !(lo.is_finite() && hi.is_finite() && lo < hi) {
            return Err(bad("lo and hi must be finite with lo < hi"));
        }
        if bins == 0 || bins > MAX_BINS {
            return Err(bad("bins must be between 1 and 1048576"));
        }
        Ok(Histogram {
            lo,
            hi,
            bins,
            marker: format!("vargr.histogram:{lo},{hi},{bins}"),
        })
    }

    fn bin(&self, x: f64) -> usize {
        if x < self.lo {
            0
        } else if x >= self.hi || x.is_nan() {
            self.bins + 1
        } else {
            let b = ((x - self.lo) / (self.hi - self.lo) * self.bins as f64) as usize;
            1 + b.min(self.bins - 1)
        }
    }

    fn count_packet(&self, p: &Packet, counts: &mut [u64]) -> Result<(), FilterError> {
        if let Some(Value::Str(m)) = p.values.first() {
            if m != &self.marker {
                return Err(FilterError::format(
                    NAME,
                    if m.starts_with("vargr.histogram:") {
                        format!(
                            "a child counted with {m:?} but this node uses {:?}",
                            self.marker
                        )
                    } else {
                        "field 0 is %s, histogram needs numbers".to_string()
                    },
                ));
            }
            let Some(Value::ULongArray(c)) = p.values.get(1).filter(|_| p.values.len() == 2) else {
                return Err(FilterError::format(NAME, "malformed partial from a child"));
            };
            return arith::zip_with(NAME, 1, counts, c, u64::wrapping_add);
        }
        for (i, (f, v)) in p.format.fields().iter().zip(&p.values).enumerate() {
            let elem = numeric_elem(NAME, i, *f)?;
            with_num!(elem, count_value(self, v, counts));
        }
        Ok(())
    }
}

fn count_value<T: Num>(h: &Histogram, v: &Value, counts: &mut [u64]) {
    let one = |x: T, counts: &mut [u64]| counts[h.bin(x.to_f64())] += 1;
    match T::scalar(v) {
        Some(x) => one(x, counts),
        None => T::array(v)
            .unwrap_or_default()
            .iter()
            .for_each(|x| one(*x, counts)),
    }
}

impl TransformFilter for Histogram {
    fn apply(
        &mut self,
        ctx: &FilterContext,
        wave: Vec<Packet>,
    ) -> Result<Vec<Packet>, FilterError> {
        let Some(tag) = wave.first().map(|p| p.tag) else {
            return Ok(Vec::new());
        };
        let mut counts = vec![0u64; self.bins + 2];
        for (n, p) in wave.iter().enumerate() {
            arith::check_values(NAME, n, p)?;
            self.count_packet(p, &mut counts)?;
        }
        let pkt = if ctx.is_root {
            output(
                ctx.stream,
                tag,
                arith::parse_format(NAME, "%auld")?,
                vec![Value::ULongArray(counts)],
            )
        } else {
            let values = vec![Value::Str(self.marker.clone()), Value::ULongArray(counts)];
            output(
                ctx.stream,
                tag,
                arith::parse_format(NAME, "%s %auld")?,
                values,
            )
        };
        Ok(vec![pkt])
    }
    fn name(&self) -> &str {
        NAME
    }
}
