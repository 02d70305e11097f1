//! `equivalence`: MRNet's equivalence-class binning, as Paradyn used it at start-up.
//!
//! Back-ends send a summary of some data (a checksum, a hostname, any format); the filter
//! groups back-ends whose packets are equal (same format, same encoded values: floats
//! compare by bits) and sends up one packet per wave describing the classes, so the
//! front-end learns "ranks 0-511 have checksum A, 512 has B" without 513 packets.
//!
//! Below the root a wave becomes one *partial* packet, [`PARTIAL_FORMAT`]
//! `"%s %b %aud %aud %aud"`:
//! the marker [`MARKER`]; the classes' values, each encoded as vargr-wire's payload without
//! its source (`u16 format length | format | values`), concatenated; the byte length of
//! each; the member count of each; and all members (back-end `source` ranks), class after
//! class. Upper levels merge classes with equal value bytes.
//!
//! At the root every class becomes one packet, `"%ud %ud %aud <original format>"`: class
//! index, number of classes, sorted member ranks, then the class's value as the back-ends
//! sent it. Classes are ordered by their lowest member; [`read_class`] parses one.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};
use vargr_wire::{Packet, Value};

use crate::arith::{self, output};
use crate::{FilterContext, FilterError, TransformFilter};

/// First value of every partial packet (the version travels with it).
pub const MARKER: &str = "vargr.equivalence/1";
/// Format of the partial packets sent below the root.
pub const PARTIAL_FORMAT: &str = "%s %b %aud %aud %aud";
const NAME: &str = "equivalence";

/// One class as the front-end receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct EquivClass {
    pub index: u32,
    pub total: u32,
    /// Back-end ranks, sorted.
    pub members: Vec<u32>,
    /// The value the members share (source: the lowest member).
    pub value: Packet,
}

/// Parses a root output packet of `equivalence`.
pub fn read_class(pkt: &Packet) -> Result<EquivClass, FilterError> {
    arith::check_values(NAME, 0, pkt)?;
    let (index, total, members) = match pkt.values.get(..3) {
        Some([Value::UInt(i), Value::UInt(t), Value::UIntArray(m)]) => (*i, *t, m.clone()),
        _ => {
            return Err(FilterError::format(
                NAME,
                format!("{:?} is not a class packet", pkt.format.as_str()),
            ))
        }
    };
    let rest: Vec<String> = pkt.format.fields()[3..]
        .iter()
        .map(|f| arith::field_text(*f))
        .collect();
    let value = Packet {
        stream: pkt.stream,
        tag: pkt.tag,
        source: members.first().copied().unwrap_or(u32::MAX),
        format: arith::parse_format(NAME, &rest.join(" "))?,
        values: pkt.values[3..].to_vec(),
    };
    Ok(EquivClass {
        index,
        total,
        members,
        value,
    })
}

/// Value bytes (encoded format + values) -> member ranks.
type Classes = BTreeMap<Bytes, Vec<u32>>;

pub(crate) struct Equivalence;

impl TransformFilter for Equivalence {
    fn apply(
        &mut self,
        ctx: &FilterContext,
        wave: Vec<Packet>,
    ) -> Result<Vec<Packet>, FilterError> {
        let Some(tag) = wave.first().map(|p| p.tag) else {
            return Ok(Vec::new());
        };
        let mut classes = Classes::new();
        for (n, p) in wave.iter().enumerate() {
            arith::check_values(NAME, n, p)?;
            if is_partial(p)? {
                merge_partial(&mut classes, p)?;
            } else {
                classes.entry(value_key(p)).or_default().push(p.source);
            }
        }
        let mut list: Vec<(Bytes, Vec<u32>)> = classes.into_iter().collect();
        for (_, m) in &mut list {
            m.sort_unstable();
            m.dedup();
        }
        if !ctx.is_root {
            return Ok(vec![partial(ctx.stream, tag, &list)?]);
        }
        list.sort_by_key(|(_, m)| m.first().copied());
        let total = list.len() as u32;
        let mut out = Vec::with_capacity(list.len());
        for (index, (key, members)) in list.into_iter().enumerate() {
            let value = decode_key(ctx.stream, tag, &key)?;
            let mut text = String::from("%ud %ud %aud");
            if !value.format.fields().is_empty() {
                text.push(' ');
                text.push_str(value.format.as_str());
            }
            let mut values = vec![
                Value::UInt(index as u32),
                Value::UInt(total),
                Value::UIntArray(members),
            ];
            values.extend(value.values);
            out.push(output(
                ctx.stream,
                tag,
                arith::parse_format(NAME, &text)?,
                values,
            ));
        }
        Ok(out)
    }
    fn name(&self) -> &str {
        NAME
    }
}

fn is_partial(p: &Packet) -> Result<bool, FilterError> {
    if p.format.as_str() != PARTIAL_FORMAT {
        return Ok(false);
    }
    match p.values.first() {
        Some(Value::Str(m)) if m == MARKER => Ok(true),
        Some(Value::Str(m)) if m.starts_with("vargr.equivalence/") => Err(FilterError::format(
            NAME,
            format!("a child sent classes in version {m:?}; this node speaks {MARKER:?}"),
        )),
        _ => Ok(false),
    }
}

/// The packet's encoded format and values, without its source.
fn value_key(p: &Packet) -> Bytes {
    let mut buf = BytesMut::new();
    p.encode_payload(&mut buf);
    buf.freeze().slice(4..)
}

fn decode_key(stream: u32, tag: i32, key: &Bytes) -> Result<Packet, FilterError> {
    let mut buf = BytesMut::with_capacity(4 + key.len());
    buf.put_u32_le(u32::MAX);
    buf.put_slice(key);
    Packet::decode_payload(stream, tag, &buf.freeze()).map_err(|e| FilterError::wire(NAME, e))
}

fn merge_partial(classes: &mut Classes, p: &Packet) -> Result<(), FilterError> {
    let bad =
        |why: &str| FilterError::format(NAME, format!("malformed partial from a child: {why}"));
    let [_, Value::Raw(blob), Value::UIntArray(lens), Value::UIntArray(counts), Value::UIntArray(members)] =
        p.values.as_slice()
    else {
        return Err(bad("wrong fields"));
    };
    if lens.len() != counts.len() {
        return Err(bad("length and count lists differ"));
    }
    if lens.iter().map(|l| *l as u64).sum::<u64>() != blob.len() as u64 {
        return Err(bad("value lengths do not add up to the value bytes"));
    }
    if counts.iter().map(|c| *c as u64).sum::<u64>() != members.len() as u64 {
        return Err(bad("member counts do not add up to the members"));
    }
    let (mut off, mut moff) = (0usize, 0usize);
    for (len, count) in lens.iter().zip(counts) {
        let (len, count) = (*len as usize, *count as usize);
        let key = blob.slice(off..off + len);
        classes
            .entry(key)
            .or_default()
            .extend_from_slice(&members[moff..moff + count]);
        off += len;
        moff += count;
    }
    Ok(())
}

fn partial(stream: u32, tag: i32, list: &[(Bytes, Vec<u32>)]) -> Result<Packet, FilterError> {
    let mut blob = BytesMut::new();
    let (mut lens, mut counts, mut members) = (Vec::new(), Vec::new(), Vec::new());
    for (key, m) in list {
        blob.put_slice(key);
        lens.push(key.len() as u32);
        counts.push(m.len() as u32);
        members.extend_from_slice(m);
    }
    let values = vec![
        Value::Str(MARKER.to_string()),
        Value::Raw(blob.freeze()),
        Value::UIntArray(lens),
        Value::UIntArray(counts),
        Value::UIntArray(members),
    ];
    Ok(output(
        stream,
        tag,
        arith::parse_format(NAME, PARTIAL_FORMAT)?,
        values,
    ))
}
