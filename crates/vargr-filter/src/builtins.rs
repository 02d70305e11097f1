//! `sum`, `min`, `max`, `avg`, `concat` and `null`/`identity`.
//!
//! All work element-wise on every numeric field of the wave's shared format: scalars
//! combine with scalars, arrays element by element (arrays must have equal lengths).
//! `sum`, `min`, `max` and `concat` are associative on their own output, so every level
//! of the tree runs the same code on whatever mix of back-end packets and child results
//! it gets.
//!
//! `avg` is not: an average of averages is wrong when sub-trees are unequal. Below the
//! root it therefore sends a *partial* packet up, `"%s %uld" + one %lf/%alf per field`:
//! the marker `vargr.avg:<original format>`, the number of back-end packets folded in,
//! and the sums as doubles (so narrow integer types cannot overflow on the way up). The
//! root divides and converts back to the original format; integers truncate toward
//! zero, like C's division. A raw `avg` input never has a `%s` field (`avg` needs
//! numbers), so a leading `%s` unambiguously marks a partial. Sums of 64-bit integers
//! beyond 2^53 lose precision in the double.

use vargr_wire::{Field, Format, Packet, Value};

use crate::arith::{self, check_same_format, numeric_elem, output, with_num, zip_with, Num};
use crate::{FilterContext, FilterError, TransformFilter};

const AVG_MARKER: &str = "vargr.avg:";

/// The three associative element-wise reductions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Sum,
    Min,
    Max,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Min => "min",
            Op::Max => "max",
        }
    }
    fn combine<T: Num>(self, a: T, b: T) -> T {
        match self {
            Op::Sum => a.add(b),
            Op::Min => a.min_of(b),
            Op::Max => a.max_of(b),
        }
    }
}

fn mismatch(filter: &str, i: usize) -> FilterError {
    FilterError::format(
        filter,
        format!("field {i}: value does not match the wave's format"),
    )
}

/// `sum`, `min` or `max`.
pub(crate) struct Reduce(pub(crate) Op);

impl TransformFilter for Reduce {
    fn apply(
        &mut self,
        ctx: &FilterContext,
        wave: Vec<Packet>,
    ) -> Result<Vec<Packet>, FilterError> {
        let name = self.0.name();
        let Some(first) = wave.first() else {
            return Ok(Vec::new());
        };
        check_same_format(name, &wave)?;
        let mut values = Vec::with_capacity(first.values.len());
        for (i, field) in first.format.fields().iter().enumerate() {
            let elem = numeric_elem(name, i, *field)?;
            values.push(
                with_num!(elem, reduce_field(self.0, i, &wave))
                    .unwrap_or_else(|| Err(mismatch(name, i)))?,
            );
        }
        Ok(vec![output(
            ctx.stream,
            first.tag,
            first.format.clone(),
            values,
        )])
    }
    fn name(&self) -> &str {
        self.0.name()
    }
}

fn reduce_field<T: Num>(op: Op, i: usize, wave: &[Packet]) -> Result<Value, FilterError> {
    let name = op.name();
    let first = &wave[0].values[i];
    if let Some(mut acc) = T::scalar(first) {
        for p in &wave[1..] {
            acc = op.combine(
                acc,
                T::scalar(&p.values[i]).ok_or_else(|| mismatch(name, i))?,
            );
        }
        return Ok(acc.into_scalar());
    }
    let mut acc = T::array(first).ok_or_else(|| mismatch(name, i))?.to_vec();
    for p in &wave[1..] {
        let x = T::array(&p.values[i]).ok_or_else(|| mismatch(name, i))?;
        zip_with(name, i, &mut acc, x, |a, b| op.combine(a, b))?;
    }
    Ok(T::into_array(acc))
}

/// `null` / `identity`: every packet passes unchanged.
pub(crate) struct Identity;

impl TransformFilter for Identity {
    fn apply(
        &mut self,
        _ctx: &FilterContext,
        wave: Vec<Packet>,
    ) -> Result<Vec<Packet>, FilterError> {
        Ok(wave)
    }
    fn name(&self) -> &str {
        "identity"
    }
}

/// `concat`: per field, n scalars (or arrays) of one element type become one array, in
/// wave order. Scalars and arrays of the same type mix, so upper levels concatenate the
/// arrays built below. Works for strings too (`%s`/`%as` -> `%as`).
pub(crate) struct Concat;

impl TransformFilter for Concat {
    fn apply(
        &mut self,
        ctx: &FilterContext,
        wave: Vec<Packet>,
    ) -> Result<Vec<Packet>, FilterError> {
        let Some(first) = wave.first() else {
            return Ok(Vec::new());
        };
        let mut elems = Vec::new();
        for (i, f) in first.format.fields().iter().enumerate() {
            match f {
                Field::Scalar(e) | Field::Array(e) => elems.push(*e),
                Field::Raw => {
                    return Err(FilterError::format(
                        "concat",
                        format!("field {i} is %b, concat needs typed values"),
                    ))
                }
            }
        }
        for (n, p) in wave.iter().enumerate() {
            arith::check_values("concat", n, p)?;
            let same = p.format.fields().len() == elems.len()
                && p.format
                    .fields()
                    .iter()
                    .zip(&elems)
                    .all(|(f, e)| matches!(f, Field::Scalar(x) | Field::Array(x) if x == e));
            if !same {
                return Err(FilterError::format(
                    "concat",
                    format!(
                        "packet {n} has format {:?}, not concatenable with {:?}",
                        p.format.as_str(),
                        first.format.as_str()
                    ),
                ));
            }
        }
        let mut values = Vec::with_capacity(elems.len());
        for (i, e) in elems.iter().enumerate() {
            let v = match with_num!(*e, concat_field(i, &wave)) {
                Some(v) => v,
                None => concat_strings(i, &wave),
            };
            values.push(v.ok_or_else(|| mismatch("concat", i))?);
        }
        let text: Vec<String> = elems
            .iter()
            .map(|e| arith::field_text(Field::Array(*e)))
            .collect();
        let format = arith::parse_format("concat", &text.join(" "))?;
        Ok(vec![output(ctx.stream, first.tag, format, values)])
    }
    fn name(&self) -> &str {
        "concat"
    }
}

fn concat_field<T: Num>(i: usize, wave: &[Packet]) -> Option<Value> {
    let mut out = Vec::new();
    for p in wave {
        match T::scalar(&p.values[i]) {
            Some(x) => out.push(x),
            None => out.extend_from_slice(T::array(&p.values[i])?),
        }
    }
    Some(T::into_array(out))
}

fn concat_strings(i: usize, wave: &[Packet]) -> Option<Value> {
    let mut out = Vec::new();
    for p in wave {
        match &p.values[i] {
            Value::Str(s) => out.push(s.clone()),
            Value::StrArray(a) => out.extend(a.iter().cloned()),
            _ => return None,
        }
    }
    Some(Value::StrArray(out))
}

/// `avg`: see the module documentation for the partial form sent up the tree.
pub(crate) struct Avg;

/// Running sums of one wave: the original format, the weight, one Double/DoubleArray per field.
struct AvgAcc {
    format: Format,
    count: u64,
    sums: Vec<Value>,
}

impl TransformFilter for Avg {
    fn apply(
        &mut self,
        ctx: &FilterContext,
        wave: Vec<Packet>,
    ) -> Result<Vec<Packet>, FilterError> {
        let Some(tag) = wave.first().map(|p| p.tag) else {
            return Ok(Vec::new());
        };
        let mut acc: Option<AvgAcc> = None;
        for (n, p) in wave.iter().enumerate() {
            arith::check_values("avg", n, p)?;
            let part = avg_part(p)?;
            match &mut acc {
                None => acc = Some(part),
                Some(a) => merge_avg(a, part)?,
            }
        }
        let acc = acc.expect("non-empty wave");
        if ctx.is_root {
            let mut values = Vec::with_capacity(acc.sums.len());
            for (i, (f, s)) in acc.format.fields().iter().zip(&acc.sums).enumerate() {
                let elem = numeric_elem("avg", i, *f)?;
                values.push(
                    with_num!(elem, from_sum(s, acc.count))
                        .flatten()
                        .ok_or_else(|| mismatch("avg", i))?,
                );
            }
            return Ok(vec![output(ctx.stream, tag, acc.format, values)]);
        }
        let mut text = String::from("%s %uld");
        for f in acc.format.fields() {
            text.push_str(if matches!(f, Field::Array(_)) {
                " %alf"
            } else {
                " %lf"
            });
        }
        let mut values = vec![
            Value::Str(format!("{AVG_MARKER}{}", acc.format.as_str())),
            Value::ULong(acc.count),
        ];
        values.extend(acc.sums);
        Ok(vec![output(
            ctx.stream,
            tag,
            arith::parse_format("avg", &text)?,
            values,
        )])
    }
    fn name(&self) -> &str {
        "avg"
    }
}

/// One packet as running sums: a back-end packet has weight 1, a partial its carried weight.
fn avg_part(p: &Packet) -> Result<AvgAcc, FilterError> {
    if let Some(Value::Str(marker)) = p.values.first() {
        let Some(orig) = marker.strip_prefix(AVG_MARKER) else {
            return Err(FilterError::format(
                "avg",
                "field 0 is %s, avg needs numbers",
            ));
        };
        let format = arith::parse_format("avg", orig)?;
        let count = match p.values.get(1) {
            Some(Value::ULong(c)) => *c,
            _ => return Err(FilterError::format("avg", "partial lacks its %uld weight")),
        };
        let sums = p.values[2..].to_vec();
        let ok = sums.len() == format.fields().len()
            && sums.iter().zip(format.fields()).all(|(s, f)| {
                matches!(
                    (s, f),
                    (Value::Double(_), Field::Scalar(_)) | (Value::DoubleArray(_), Field::Array(_))
                )
            });
        if !ok {
            return Err(FilterError::format(
                "avg",
                format!("partial for {orig:?} has inconsistent sums"),
            ));
        }
        return Ok(AvgAcc {
            format,
            count,
            sums,
        });
    }
    let mut sums = Vec::with_capacity(p.values.len());
    for (i, (f, v)) in p.format.fields().iter().zip(&p.values).enumerate() {
        let elem = numeric_elem("avg", i, *f)?;
        sums.push(
            with_num!(elem, to_f64_value(v))
                .flatten()
                .ok_or_else(|| mismatch("avg", i))?,
        );
    }
    Ok(AvgAcc {
        format: p.format.clone(),
        count: 1,
        sums,
    })
}

fn merge_avg(acc: &mut AvgAcc, part: AvgAcc) -> Result<(), FilterError> {
    if acc.format != part.format {
        return Err(FilterError::format(
            "avg",
            format!(
                "a wave mixes formats {:?} and {:?}",
                acc.format.as_str(),
                part.format.as_str()
            ),
        ));
    }
    acc.count += part.count;
    for (i, (a, b)) in acc.sums.iter_mut().zip(part.sums).enumerate() {
        match (a, b) {
            (Value::Double(a), Value::Double(b)) => *a += b,
            (Value::DoubleArray(a), Value::DoubleArray(b)) => {
                zip_with("avg", i, a, &b, |x, y| x + y)?
            }
            _ => return Err(mismatch("avg", i)),
        }
    }
    Ok(())
}

fn to_f64_value<T: Num>(v: &Value) -> Option<Value> {
    match T::scalar(v) {
        Some(x) => Some(Value::Double(x.to_f64())),
        None => Some(Value::DoubleArray(
            T::array(v)?.iter().map(|x| x.to_f64()).collect(),
        )),
    }
}

fn from_sum<T: Num>(sum: &Value, count: u64) -> Option<Value> {
    let n = count as f64;
    match sum {
        Value::Double(s) => Some(T::from_f64(s / n).into_scalar()),
        Value::DoubleArray(s) => Some(T::into_array(
            s.iter().map(|x| T::from_f64(x / n)).collect(),
        )),
        _ => None,
    }
}

/// `spin:US`: a sum that first burns US microseconds of CPU per input packet. It stands
/// for an expensive analysis filter in the figure-9 benchmark (MRNet's offered-load
/// experiment), where the cost of the filter, not the network, limits throughput.
pub(crate) struct Spin {
    pub(crate) per_packet: std::time::Duration,
}

impl Spin {
    pub(crate) fn from_params(params: &str) -> Result<Spin, FilterError> {
        let us: u64 = params.trim().parse().map_err(|_| {
            FilterError::params(
                "spin",
                params,
                "expected the CPU cost per packet in microseconds, e.g. spin:20",
            )
        })?;
        Ok(Spin {
            per_packet: std::time::Duration::from_micros(us),
        })
    }
}

impl TransformFilter for Spin {
    fn apply(
        &mut self,
        ctx: &FilterContext,
        wave: Vec<Packet>,
    ) -> Result<Vec<Packet>, FilterError> {
        let until = std::time::Instant::now() + self.per_packet * wave.len() as u32;
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        Reduce(Op::Sum).apply(ctx, wave)
    }

    fn name(&self) -> &str {
        "spin"
    }
}

#[cfg(test)]
mod spin_tests {
    use super::*;

    #[test]
    fn spin_sums_and_costs_time() {
        let mut f = Spin::from_params("200").unwrap();
        let ctx = FilterContext {
            node_id: 0,
            stream: 1,
            is_root: true,
            num_inputs: 2,
        };
        let wave = vec![
            Packet::new(1, 0, "%d", vec![vargr_wire::Value::Int(2)]).unwrap(),
            Packet::new(1, 0, "%d", vec![vargr_wire::Value::Int(3)]).unwrap(),
        ];
        let t = std::time::Instant::now();
        let out = f.apply(&ctx, wave).unwrap();
        assert!(t.elapsed() >= std::time::Duration::from_micros(400));
        assert_eq!(out[0].values[0], vargr_wire::Value::Int(5));
        assert!(Spin::from_params("x").is_err());
    }
}
