//! Typed payloads described by MRNet-style format strings.
//!
//! A format string is a whitespace-separated list of fields: scalars `%c %uc %hd %uhd %d
//! %ud %ld %uld %f %lf %s`, arrays `%ac %auc %ahd %auhd %ad %aud %ald %auld %af %alf %as`
//! and raw bytes `%b`. Values are little-endian and packed; arrays and strings carry a
//! u32 LE element count (strings: byte length) before their elements.
//!
//! A data frame's payload is `u32 LE source rank | u16 LE format length | format bytes |
//! values`, so every
//! node of the tree can decode, filter and re-encode packets without knowing the stream.

use bytes::{Bytes, BytesMut};

use crate::WireError;

/// Scalar element types of the format language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Elem {
    /// `%c`: i8
    Char,
    /// `%uc`: u8
    UChar,
    /// `%hd`: i16
    Short,
    /// `%uhd`: u16
    UShort,
    /// `%d`: i32
    Int,
    /// `%ud`: u32
    UInt,
    /// `%ld`: i64
    Long,
    /// `%uld`: u64
    ULong,
    /// `%f`: f32
    Float,
    /// `%lf`: f64
    Double,
    /// `%s`: UTF-8 string
    Str,
}

/// One field of a format string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    Scalar(Elem),
    Array(Elem),
    /// `%b`: raw bytes (u32 LE length + bytes), passed through without copying.
    Raw,
}

/// A parsed format string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Format {
    text: String,
    fields: Vec<Field>,
}

/// One typed value. Arrays hold their elements; `Raw` shares the frame's buffer.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Char(i8),
    UChar(u8),
    Short(i16),
    UShort(u16),
    Int(i32),
    UInt(u32),
    Long(i64),
    ULong(u64),
    Float(f32),
    Double(f64),
    Str(String),
    CharArray(Vec<i8>),
    UCharArray(Vec<u8>),
    ShortArray(Vec<i16>),
    UShortArray(Vec<u16>),
    IntArray(Vec<i32>),
    UIntArray(Vec<u32>),
    LongArray(Vec<i64>),
    ULongArray(Vec<u64>),
    FloatArray(Vec<f32>),
    DoubleArray(Vec<f64>),
    StrArray(Vec<String>),
    Raw(Bytes),
}

/// A typed message on a stream: what filters consume and produce and what users send.
#[derive(Debug, Clone, PartialEq)]
pub struct Packet {
    pub stream: u32,
    pub tag: i32,
    /// Rank of the back-end that produced it, or `u32::MAX` for the front-end or a filter.
    pub source: u32,
    pub format: Format,
    pub values: Vec<Value>,
}

impl Format {
    /// Parses a format string such as `"%d %alf %s"`.
    pub fn parse(text: &str) -> Result<Format, WireError> {
        let _ = text;
        todo!("vargr-wire helper implements")
    }
    pub fn as_str(&self) -> &str {
        &self.text
    }
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }
    /// The field a value of this variant satisfies.
    pub fn field_of(value: &Value) -> Field {
        let _ = value;
        todo!("vargr-wire helper implements")
    }
}

impl Packet {
    /// Builds a packet (source `u32::MAX`), checking that `values` match `format`.
    pub fn new(stream: u32, tag: i32, format: &str, values: Vec<Value>) -> Result<Packet, WireError> {
        let _ = (stream, tag, format, values);
        todo!("vargr-wire helper implements")
    }

    /// Appends the data-frame payload (format + values) to `out`.
    pub fn encode_payload(&self, out: &mut BytesMut) {
        let _ = out;
        todo!("vargr-wire helper implements")
    }

    /// Decodes a data-frame payload. `payload` is the frame's shared buffer, so `%b` fields
    /// are slices of it. Never allocates more than `payload.len()` justifies.
    pub fn decode_payload(stream: u32, tag: i32, payload: &Bytes) -> Result<Packet, WireError> {
        let _ = (stream, tag, payload);
        todo!("vargr-wire helper implements")
    }
}
