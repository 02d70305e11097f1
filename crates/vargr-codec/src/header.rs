//! The frame every compressed message travels in: a small header, then the payload.
//!
//! ```text
//! byte 0     0xC1: magic nibble 0xC, format version 1
//! byte 1     codec id (CodecId)
//! byte 2     low nibble: element kind (ElemKind); high nibble: flags (0x10: span;
//!            the others reserved, zero)
//! 1-10 bytes original length, LEB128 varint
//! with span: span start and span length, LEB128 varints; then the bytes outside the
//!            span, raw (those before it, then those after it)
//! rest       payload, as the codec wrote it (of the span only, when there is one)
//! ```
//!
//! A span lets a typed codec compress the array inside a message whose header (a tree
//! packet's source, format and count) would otherwise put the elements out of line.
//!
//! Four bytes for any message under 128 bytes, six under 2 MiB. [`encode`] sends the
//! input raw (codec `none`) when the codec's payload would not be smaller than the input,
//! or when the codec cannot handle the data, so a frame is never more than the header
//! larger than the message. [`decode`] checks the announced length against the caller's
//! limit before it allocates anything, and hands each decoder an output of exactly that
//! length: no frame can make the receiver allocate more than `max_len` bytes of output.

use crate::{decompress, Codec, CodecError, CodecId, ElemKind};

/// Byte 0 of every frame: magic nibble `0xC`, version 1.
pub const MAGIC_VERSION: u8 = 0xC1;

/// The shortest header (an original length below 128).
pub const HEADER_MIN: usize = 4;

/// The longest header (three ten-byte varints).
pub const HEADER_MAX: usize = 33;

/// Byte 2's flag: the codec ran over a span of the message, the rest travels raw.
const FLAG_SPAN: u8 = 0x10;

/// The part of a message a codec compressed (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: u64,
    pub len: u64,
}

/// What a frame header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The codec that produced the payload (`None` for a raw payload).
    pub codec: CodecId,
    /// What the original bytes hold.
    pub elem: ElemKind,
    /// Length of the original message in bytes.
    pub original_len: u64,
    /// The bytes the codec ran over, when not all of them.
    pub span: Option<Span>,
}

impl Header {
    /// Appends the header bytes to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(MAGIC_VERSION);
        out.push(self.codec.as_u8());
        let flags = if self.span.is_some() { FLAG_SPAN } else { 0 };
        out.push(self.elem.as_u8() | flags);
        write_varint(self.original_len, out);
        if let Some(span) = self.span {
            write_varint(span.start, out);
            write_varint(span.len, out);
        }
    }

    /// Reads a header from the front of `frame`; returns it and the payload after it.
    /// The length is not checked against any limit here: [`decode`] does that.
    pub fn parse(frame: &[u8]) -> Result<(Header, &[u8]), CodecError> {
        let Some((fixed, mut rest)) = frame.split_first_chunk::<3>() else {
            return Err(CodecError::Truncated {
                field: "header",
                needed: 3 - frame.len(),
                available: frame.len(),
            });
        };
        let [magic, codec, kind] = *fixed;
        if magic != MAGIC_VERSION {
            return Err(CodecError::BadMagic {
                found: magic,
                expected: MAGIC_VERSION,
            });
        }
        let codec = CodecId::from_u8(codec)?;
        if kind & 0xf0 & !FLAG_SPAN != 0 {
            return Err(CodecError::ReservedFlags(kind & 0xf0 & !FLAG_SPAN));
        }
        let elem = ElemKind::from_u8(kind & 0x0f).ok_or(CodecError::UnknownElem(kind & 0x0f))?;
        let original_len = read_varint(&mut rest, "original length")?;
        let span = if kind & FLAG_SPAN != 0 {
            let start = read_varint(&mut rest, "span start")?;
            let len = read_varint(&mut rest, "span length")?;
            match start.checked_add(len) {
                Some(end) if end <= original_len => Some(Span { start, len }),
                _ => {
                    return Err(CodecError::BadSpan {
                        start,
                        len,
                        original_len,
                    })
                }
            }
        } else {
            None
        };
        Ok((
            Header {
                codec,
                elem,
                original_len,
                span,
            },
            rest,
        ))
    }

    /// The original length, if it is within `max_len`.
    pub fn checked_len(&self, max_len: usize) -> Result<usize, CodecError> {
        match usize::try_from(self.original_len) {
            Ok(n) if n <= max_len => Ok(n),
            _ => Err(CodecError::TooLarge {
                len: self.original_len,
                max: max_len,
            }),
        }
    }
}

/// Appends a frame for `input` to `out`: compressed by `codec` if that makes it smaller,
/// raw otherwise. Returns the header written, whose `codec` says which happened.
pub fn encode(codec: Codec, elem: ElemKind, input: &[u8], out: &mut Vec<u8>) -> Header {
    let start = out.len();
    let mut header = Header {
        codec: codec.id(),
        elem,
        original_len: input.len() as u64,
        span: None,
    };
    header.write(out);
    let body = out.len();
    let compressed = codec != Codec::None
        && !input.is_empty()
        && codec.compress(input, elem, out).is_ok()
        && out.len() - body < input.len();
    if !compressed {
        out.truncate(body);
        header.codec = CodecId::None;
        out[start + 1] = CodecId::None.as_u8();
        out.extend_from_slice(input);
    }
    header
}

/// Like [`encode`], with `codec` run over `input[span]` only; the bytes around the span
/// travel raw. Falls back to a raw frame as [`encode`] does.
pub fn encode_span(
    codec: Codec,
    elem: ElemKind,
    input: &[u8],
    span: std::ops::Range<usize>,
    out: &mut Vec<u8>,
) -> Header {
    if span == (0..input.len()) || span.start > span.end || span.end > input.len() {
        let elem = if span == (0..input.len()) {
            elem
        } else {
            ElemKind::BYTES
        };
        return encode(codec, elem, input, out);
    }
    let start = out.len();
    let header = Header {
        codec: codec.id(),
        elem,
        original_len: input.len() as u64,
        span: Some(Span {
            start: span.start as u64,
            len: span.len() as u64,
        }),
    };
    header.write(out);
    out.extend_from_slice(&input[..span.start]);
    out.extend_from_slice(&input[span.end..]);
    let body = out.len();
    let compressed = codec != Codec::None
        && !span.is_empty()
        && codec.compress(&input[span.clone()], elem, out).is_ok()
        && out.len() - body < span.len();
    if compressed {
        return header;
    }
    out.truncate(start);
    encode(Codec::None, elem, input, out)
}

/// [`encode`] into a new vector.
pub fn encode_to_vec(codec: Codec, elem: ElemKind, input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_MAX + input.len() / 2);
    encode(codec, elem, input, &mut out);
    out
}

/// Decodes one frame, appending the original bytes to `out`.
///
/// A frame announcing more than `max_len` bytes is refused before anything is allocated.
/// On error `out` is left as it was.
pub fn decode(frame: &[u8], max_len: usize, out: &mut Vec<u8>) -> Result<Header, CodecError> {
    let (header, payload) = Header::parse(frame)?;
    let len = header.checked_len(max_len)?;
    let Some(span) = header.span else {
        decompress(header.codec, payload, header.elem, len, out)?;
        return Ok(header);
    };
    // Parse checked start + len <= original_len <= max_len: these fit in usize.
    let (at, span_len) = (span.start as usize, span.len as usize);
    let raw_len = len - span_len;
    let Some((raw, packed)) = payload.split_at_checked(raw_len) else {
        return Err(CodecError::Truncated {
            field: "bytes outside the span",
            needed: raw_len - payload.len(),
            available: payload.len(),
        });
    };
    let base = out.len();
    out.reserve(len);
    out.extend_from_slice(&raw[..at]);
    if let Err(e) = decompress(header.codec, packed, header.elem, span_len, out) {
        out.truncate(base);
        return Err(e);
    }
    out.extend_from_slice(&raw[at..]);
    Ok(header)
}

/// [`decode`] into a new vector.
pub fn decode_to_vec(frame: &[u8], max_len: usize) -> Result<(Header, Vec<u8>), CodecError> {
    let mut out = Vec::new();
    let header = decode(frame, max_len, &mut out)?;
    Ok((header, out))
}

/// Appends `v` as a LEB128 varint (seven bits a byte, low bits first).
pub(crate) fn write_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 varint from the front of `input`, advancing it.
pub(crate) fn read_varint(input: &mut &[u8], field: &'static str) -> Result<u64, CodecError> {
    let mut v = 0u64;
    for i in 0..10 {
        let Some((&b, rest)) = input.split_first() else {
            return Err(CodecError::Truncated {
                field,
                needed: 1,
                available: 0,
            });
        };
        *input = rest;
        let bits = u64::from(b & 0x7f);
        // The tenth byte may only hold the top bit of a u64.
        if i == 9 && bits > 1 {
            return Err(CodecError::BadVarint { field });
        }
        v |= bits << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(CodecError::BadVarint { field })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout_is_as_documented() {
        let frame = encode_to_vec(Codec::None, ElemKind::F64, &[1, 2, 3]);
        assert_eq!(frame, [0xC1, 0, 9, 3, 1, 2, 3]);
        let mut out = vec![0xAA];
        let h = decode(&frame, 3, &mut out).unwrap();
        assert_eq!(out, [0xAA, 1, 2, 3]);
        assert_eq!(h.codec, CodecId::None);
        assert_eq!(h.elem, ElemKind::F64);
    }

    #[test]
    fn spans_compress_the_array_inside_a_message() {
        // A 10-byte header, 8 KiB of smooth doubles, a 3-byte trailer.
        let mut msg = vec![7u8; 10];
        for i in 0..1024 {
            msg.extend_from_slice(&(i as f64 * 0.5).to_le_bytes());
        }
        msg.extend_from_slice(b"end");
        let span = 10..10 + 8192;
        let mut frame = Vec::new();
        let h = encode_span(
            Codec::Fpc { table_bits: 16 },
            ElemKind::F64,
            &msg,
            span.clone(),
            &mut frame,
        );
        assert_eq!(
            h.span,
            Some(Span {
                start: 10,
                len: 8192
            })
        );
        assert!(frame.len() < msg.len() / 2, "{} bytes", frame.len());
        let (back, out) = decode_to_vec(&frame, msg.len()).unwrap();
        assert_eq!(back, h);
        assert_eq!(out, msg);
        // Every truncation is an error, never a panic, and leaves `out` as it was.
        for cut in 0..frame.len() {
            let mut out = vec![1];
            assert!(decode(&frame[..cut], msg.len(), &mut out).is_err());
            assert_eq!(out, [1]);
        }
        // Incompressible spans, and spans that are the whole message, fall back.
        let h = encode_span(
            Codec::Lz4,
            ElemKind::U8,
            &[1, 2, 3, 4],
            1..3,
            &mut Vec::new(),
        );
        assert_eq!((h.codec, h.span), (CodecId::None, None));
        let h = encode_span(
            Codec::Lz4,
            ElemKind::U8,
            &[0; 4096],
            0..4096,
            &mut Vec::new(),
        );
        assert_eq!(h.span, None);
    }

    #[test]
    fn varints_round_trip_and_refuse_overflow() {
        for v in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            write_varint(v, &mut b);
            let mut s = &b[..];
            assert_eq!(read_varint(&mut s, "x").unwrap(), v);
            assert!(s.is_empty());
        }
        let mut s: &[u8] = &[0xff; 10];
        assert_eq!(
            read_varint(&mut s, "x"),
            Err(CodecError::BadVarint { field: "x" })
        );
        let mut s: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(read_varint(&mut s, "x").is_err());
    }

    #[test]
    fn too_large_is_refused_before_decoding() {
        let frame = [0xC1, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert_eq!(
            decode(&frame, 1 << 20, &mut Vec::new()),
            Err(CodecError::TooLarge {
                len: u32::MAX as u64,
                max: 1 << 20
            })
        );
    }

    #[test]
    fn header_errors_name_the_field() {
        assert!(matches!(
            decode(&[0xC1, 0], 10, &mut Vec::new()),
            Err(CodecError::Truncated {
                field: "header",
                ..
            })
        ));
        assert_eq!(
            decode(&[0xC2, 0, 0, 0], 10, &mut Vec::new()),
            Err(CodecError::BadMagic {
                found: 0xC2,
                expected: 0xC1
            })
        );
        assert_eq!(
            decode(&[0xC1, 200, 0, 0], 10, &mut Vec::new()),
            Err(CodecError::UnknownCodec(200))
        );
        assert_eq!(
            decode(&[0xC1, 0, 0x20, 0], 10, &mut Vec::new()),
            Err(CodecError::ReservedFlags(0x20))
        );
        assert_eq!(
            decode(&[0xC1, 0, 0x10, 4, 3, 2], 10, &mut Vec::new()),
            Err(CodecError::BadSpan {
                start: 3,
                len: 2,
                original_len: 4
            })
        );
        assert_eq!(
            decode(&[0xC1, 0, 0x0c, 0], 10, &mut Vec::new()),
            Err(CodecError::UnknownElem(12))
        );
        assert!(matches!(
            decode(&[0xC1, 0, 0, 0x80], 10, &mut Vec::new()),
            Err(CodecError::Truncated {
                field: "original length",
                ..
            })
        ));
        assert_eq!(
            decode(&[0xC1, 0, 0, 2, 1], 10, &mut Vec::new()),
            Err(CodecError::LengthMismatch {
                codec: CodecId::None,
                expected: 2,
                got: 1
            })
        );
    }
}
