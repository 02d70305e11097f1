//! Typed payloads described by MRNet-style format strings.
//!
//! A format string is a whitespace-separated list of fields: scalars `%c %uc %hd %uhd %d
//! %ud %ld %uld %f %lf %s`, arrays `%ac %auc %ahd %auhd %ad %aud %ald %auld %af %alf %as`
//! and raw bytes `%b`. Values are little-endian and packed; arrays and strings carry a
//! u32 LE element count (strings: byte length) before their elements.
//!
//! A data frame's payload is `u32 LE source rank | u16 LE format length | format bytes |
//! values`, so every node of the tree can decode, filter and re-encode packets without
//! knowing the stream.
//!
//! Design notes:
//!
//! - The format travels with every packet. That costs a few bytes but makes a payload
//!   self-describing, so a filter or a debugging tool never needs stream state to read it.
//! - [`Format`] keeps a canonical text (fields joined by one space). Two formats are equal
//!   exactly when their fields are, whatever whitespace the sender used.
//! - Formats are ASCII only and capped at [`Format::MAX_LEN`] bytes and
//!   [`Format::MAX_FIELDS`] fields, so a peer cannot make us parse or log megabytes.
//! - Decoding is the hot path and faces untrusted bytes: every count is checked against
//!   the bytes that remain *before* anything is allocated, all arithmetic is checked, and
//!   `%b` fields are zero-copy slices of the frame buffer.
//! - Numeric arrays are moved with one size check and one allocation each; the per-element
//!   little-endian loops compile to plain copies on little-endian targets.

use std::cell::RefCell;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use crate::frame::{encode_header, Frame, FrameKind, HEADER_LEN};
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

impl Elem {
    /// The element kind of this type's numbers (`None` for strings).
    pub fn kind(self) -> Option<crate::ElemKind> {
        use crate::ElemKind as K;
        Some(match self {
            Elem::Char => K::I8,
            Elem::UChar => K::U8,
            Elem::Short => K::I16,
            Elem::UShort => K::U16,
            Elem::Int => K::I32,
            Elem::UInt => K::U32,
            Elem::Long => K::I64,
            Elem::ULong => K::U64,
            Elem::Float => K::F32,
            Elem::Double => K::F64,
            Elem::Str => return None,
        })
    }
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
#[derive(Debug, Clone, Eq)]
pub struct Format {
    // Shared so that packets of one stream (and decoded formats, see `FORMAT_CACHE`)
    // reuse one parse instead of allocating per packet.
    text: Arc<str>,
    fields: Arc<[Field]>,
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

/// Little-endian fixed-size numbers, read and written without per-element allocation.
trait Le: Copy {
    const SIZE: usize;
    /// `src.len()` is exactly `SIZE` (callers use `chunks_exact`).
    fn read(src: &[u8]) -> Self;
    /// `dst.len()` is exactly `SIZE`.
    fn write(self, dst: &mut [u8]);
}

macro_rules! impl_le {
    ($($t:ty),*) => {$(
        impl Le for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn read(src: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(src);
                <$t>::from_le_bytes(a)
            }
            #[inline(always)]
            fn write(self, dst: &mut [u8]) {
                dst.copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
impl_le!(i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);

// One row per element type: variant, token suffix (as str and bytes), encoded size
// (0 = variable).
macro_rules! elem_table {
    ($($e:ident $suffix:literal $bytes:literal $size:literal;)*) => {
        impl Elem {
            /// Every element type, in format-language order.
            pub const ALL: [Elem; 11] = [$(Elem::$e),*];

            /// The scalar token, e.g. `"%uhd"`.
            pub const fn token(self) -> &'static str {
                match self { $(Elem::$e => concat!("%", $suffix),)* }
            }
            /// The array token, e.g. `"%auhd"`.
            pub const fn array_token(self) -> &'static str {
                match self { $(Elem::$e => concat!("%a", $suffix),)* }
            }
            /// Encoded bytes per element, or `None` for [`Elem::Str`], whose size varies.
            pub const fn size(self) -> Option<usize> {
                match self { $(Elem::$e => if $size == 0 { None } else { Some($size) },)* }
            }
            fn from_suffix(s: &[u8]) -> Option<Elem> {
                match s { $($bytes => Some(Elem::$e),)* _ => None }
            }
            // Static names for `WireError::Truncated::what`.
            const fn scalar_what(self) -> &'static str {
                match self { $(Elem::$e => concat!("%", $suffix, " value"),)* }
            }
            const fn count_what(self) -> &'static str {
                match self { $(Elem::$e => concat!("%a", $suffix, " count"),)* }
            }
            const fn elems_what(self) -> &'static str {
                match self { $(Elem::$e => concat!("%a", $suffix, " elements"),)* }
            }
        }
    };
}

elem_table! {
    Char "c" b"c" 1;
    UChar "uc" b"uc" 1;
    Short "hd" b"hd" 2;
    UShort "uhd" b"uhd" 2;
    Int "d" b"d" 4;
    UInt "ud" b"ud" 4;
    Long "ld" b"ld" 8;
    ULong "uld" b"uld" 8;
    Float "f" b"f" 4;
    Double "lf" b"lf" 8;
    Str "s" b"s" 0;
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.token())
    }
}

impl Field {
    /// The token of this field, e.g. `"%d"`, `"%alf"` or `"%b"`.
    pub const fn token(self) -> &'static str {
        match self {
            Field::Scalar(e) => e.token(),
            Field::Array(e) => e.array_token(),
            Field::Raw => "%b",
        }
    }

    /// The element type, or `None` for [`Field::Raw`].
    pub const fn elem(self) -> Option<Elem> {
        match self {
            Field::Scalar(e) | Field::Array(e) => Some(e),
            Field::Raw => None,
        }
    }

    /// Parses one token such as `"%ald"`.
    pub fn from_token(token: &str) -> Option<Field> {
        Field::from_token_bytes(token.as_bytes())
    }

    fn from_token_bytes(token: &[u8]) -> Option<Field> {
        let s = token.strip_prefix(b"%")?;
        if s == b"b" {
            return Some(Field::Raw);
        }
        // No scalar suffix starts with 'a', so the array prefix is unambiguous.
        match s.strip_prefix(b"a") {
            Some(e) => Elem::from_suffix(e).map(Field::Array),
            None => Elem::from_suffix(s).map(Field::Scalar),
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.token())
    }
}

/// C `isspace`, so formats written for MRNet parse the same way.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

/// The format as shown in an error: lossy UTF-8, cut short if it is over-long.
fn shown(bytes: &[u8]) -> String {
    const SHOWN: usize = 64;
    if bytes.len() > Format::MAX_LEN {
        let mut s = String::from_utf8_lossy(&bytes[..SHOWN]).into_owned();
        s.push_str("...");
        s
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    }
}

/// Parses one whitespace-free token; the error offset is relative to the token.
fn parse_token(tok: &[u8]) -> Result<Field, (usize, &'static str)> {
    if let Some(f) = Field::from_token_bytes(tok) {
        return Ok(f);
    }
    // Slow path: explain what is wrong.
    if let Some(p) = tok.iter().position(|b| !b.is_ascii()) {
        return Err((p, "non-ASCII byte (formats are ASCII)"));
    }
    if tok.first() != Some(&b'%') {
        return Err((0, "expected '%' to start a field"));
    }
    if tok == b"%" {
        return Err((0, "'%' without a conversion"));
    }
    if tok == b"%ab" {
        return Err((0, "%b has no array form"));
    }
    if let Some(p) = tok.iter().skip(1).position(|&b| b == b'%') {
        if Field::from_token_bytes(&tok[..p + 1]).is_some() {
            return Err((p + 1, "missing whitespace between fields"));
        }
    }
    Err((
        0,
        "unknown conversion (expected %c %uc %hd %uhd %d %ud %ld %uld %f %lf %s, %a<type> or %b)",
    ))
}

impl Format {
    /// Longest accepted format string, in bytes.
    pub const MAX_LEN: usize = 1024;
    /// Most fields a format may have.
    pub const MAX_FIELDS: usize = 256;

    /// Parses a format string such as `"%d %alf %s"`.
    ///
    /// Fields are separated by any ASCII whitespace; leading and trailing whitespace is
    /// ignored and `""` is the empty format. The stored text is canonical (one space
    /// between fields), see [`Format::as_str`].
    pub fn parse(text: &str) -> Result<Format, WireError> {
        Format::parse_cached(text.as_bytes())
    }

    /// Parses format bytes as they arrive off the wire.
    fn parse_bytes(bytes: &[u8]) -> Result<Format, WireError> {
        let bad = |offset, reason| WireError::BadFormat {
            format: shown(bytes),
            offset,
            reason,
        };
        if bytes.len() > Format::MAX_LEN {
            return Err(bad(Format::MAX_LEN, "longer than 1024 bytes"));
        }
        let mut fields = Vec::new();
        // Canonical text is never longer than the input.
        let mut text = String::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if is_space(bytes[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < bytes.len() && !is_space(bytes[i]) {
                i += 1;
            }
            if fields.len() == Format::MAX_FIELDS {
                return Err(bad(start, "more than 256 fields"));
            }
            let field =
                parse_token(&bytes[start..i]).map_err(|(off, reason)| bad(start + off, reason))?;
            if !fields.is_empty() {
                text.push(' ');
            }
            text.push_str(field.token());
            fields.push(field);
        }
        Ok(Format {
            text: text.into(),
            fields: fields.into(),
        })
    }

    /// Parses wire format bytes through a small per-thread cache: a node sees the same few
    /// formats over and over, so most packets skip parsing and allocation entirely.
    fn parse_cached(bytes: &[u8]) -> Result<Format, WireError> {
        FORMAT_CACHE.with(|c| {
            let mut c = c.borrow_mut();
            if let Some((_, f)) = c.entries.iter().find(|(k, _)| &k[..] == bytes) {
                return Ok(f.clone());
            }
            let f = Format::parse_bytes(bytes)?;
            let entry = (Box::from(bytes), f.clone());
            if c.entries.len() < FORMAT_CACHE_SLOTS {
                c.entries.push(entry);
            } else {
                let slot = c.next;
                c.entries[slot] = entry;
                c.next = (slot + 1) % FORMAT_CACHE_SLOTS;
            }
            Ok(f)
        })
    }

    /// Builds a format from its fields, subject to the same limits as [`Format::parse`].
    pub fn from_fields(fields: &[Field]) -> Result<Format, WireError> {
        let mut text = String::new();
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                text.push(' ');
            }
            if i == Format::MAX_FIELDS {
                let offset = text.len();
                return Err(WireError::BadFormat {
                    format: shown(text.as_bytes()),
                    offset,
                    reason: "more than 256 fields",
                });
            }
            text.push_str(f.token());
        }
        if text.len() > Format::MAX_LEN {
            return Err(WireError::BadFormat {
                format: shown(text.as_bytes()),
                offset: Format::MAX_LEN,
                reason: "longer than 1024 bytes",
            });
        }
        Ok(Format {
            text: text.into(),
            fields: fields.into(),
        })
    }

    /// The canonical text: the fields' tokens separated by single spaces.
    pub fn as_str(&self) -> &str {
        &self.text
    }
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }
    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The field a value of this variant satisfies.
    pub fn field_of(value: &Value) -> Field {
        use Elem::*;
        match value {
            Value::Char(_) => Field::Scalar(Char),
            Value::UChar(_) => Field::Scalar(UChar),
            Value::Short(_) => Field::Scalar(Short),
            Value::UShort(_) => Field::Scalar(UShort),
            Value::Int(_) => Field::Scalar(Int),
            Value::UInt(_) => Field::Scalar(UInt),
            Value::Long(_) => Field::Scalar(Long),
            Value::ULong(_) => Field::Scalar(ULong),
            Value::Float(_) => Field::Scalar(Float),
            Value::Double(_) => Field::Scalar(Double),
            Value::Str(_) => Field::Scalar(Str),
            Value::CharArray(_) => Field::Array(Char),
            Value::UCharArray(_) => Field::Array(UChar),
            Value::ShortArray(_) => Field::Array(Short),
            Value::UShortArray(_) => Field::Array(UShort),
            Value::IntArray(_) => Field::Array(Int),
            Value::UIntArray(_) => Field::Array(UInt),
            Value::LongArray(_) => Field::Array(Long),
            Value::ULongArray(_) => Field::Array(ULong),
            Value::FloatArray(_) => Field::Array(Float),
            Value::DoubleArray(_) => Field::Array(Double),
            Value::StrArray(_) => Field::Array(Str),
            Value::Raw(_) => Field::Raw,
        }
    }

    /// Checks that `values` match this format field by field and that every count fits
    /// the wire's u32. This is what [`Packet::new`] runs.
    pub fn check(&self, values: &[Value]) -> Result<(), WireError> {
        let (nf, nv) = (self.fields.len(), values.len());
        if nv < nf {
            return Err(WireError::Mismatch {
                index: nv,
                field: self.fields[nv].to_string(),
                reason: format!("missing value: the format has {nf} fields, got {nv} values"),
            });
        }
        if nv > nf {
            return Err(WireError::Mismatch {
                index: nf,
                field: "none".to_string(),
                reason: format!("extra value: the format has {nf} fields, got {nv} values"),
            });
        }
        for (index, (&field, value)) in self.fields.iter().zip(values).enumerate() {
            let got = value.field();
            if got != field {
                return Err(WireError::Mismatch {
                    index,
                    field: field.to_string(),
                    reason: format!("expected a {field} value, got {got}"),
                });
            }
            if !value.counts_fit_u32() {
                return Err(WireError::Mismatch {
                    index,
                    field: field.to_string(),
                    reason: "a length does not fit the wire's u32 count".to_string(),
                });
            }
        }
        Ok(())
    }
}

impl PartialEq for Format {
    fn eq(&self, other: &Format) -> bool {
        // Packets of one stream share one parse, so this is usually a pointer compare.
        Arc::ptr_eq(&self.fields, &other.fields) || self.fields == other.fields
    }
}

impl std::hash::Hash for Format {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.fields.hash(state);
    }
}

impl Default for Format {
    /// The empty format `""`.
    fn default() -> Self {
        Format {
            text: "".into(),
            fields: Arc::new([]),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Format {
    type Err = WireError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Format::parse(s)
    }
}

/// Formats kept per thread by [`Format::parse_cached`] (replaced round-robin).
const FORMAT_CACHE_SLOTS: usize = 16;

#[derive(Default)]
struct FormatCache {
    entries: Vec<(Box<[u8]>, Format)>,
    next: usize,
}

thread_local! {
    static FORMAT_CACHE: RefCell<FormatCache> = RefCell::default();
}

fn fits_u32(n: usize) -> bool {
    u32::try_from(n).is_ok()
}

impl Value {
    /// The format field this value satisfies (same as [`Format::field_of`]).
    pub fn field(&self) -> Field {
        Format::field_of(self)
    }

    /// The element type, or `None` for [`Value::Raw`].
    pub fn elem(&self) -> Option<Elem> {
        self.field().elem()
    }

    /// Element count of an array, byte length of a `Str` or `Raw`, and 1 for a number.
    pub fn len(&self) -> usize {
        match self {
            Value::Str(s) => s.len(),
            Value::CharArray(v) => v.len(),
            Value::UCharArray(v) => v.len(),
            Value::ShortArray(v) => v.len(),
            Value::UShortArray(v) => v.len(),
            Value::IntArray(v) => v.len(),
            Value::UIntArray(v) => v.len(),
            Value::LongArray(v) => v.len(),
            Value::ULongArray(v) => v.len(),
            Value::FloatArray(v) => v.len(),
            Value::DoubleArray(v) => v.len(),
            Value::StrArray(v) => v.len(),
            Value::Raw(b) => b.len(),
            _ => 1,
        }
    }

    /// True for an empty array, string or raw value; numbers are never empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An integer scalar as i64 (`None` for other variants and for a `ULong` above
    /// `i64::MAX`).
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Char(v) => Some(v.into()),
            Value::UChar(v) => Some(v.into()),
            Value::Short(v) => Some(v.into()),
            Value::UShort(v) => Some(v.into()),
            Value::Int(v) => Some(v.into()),
            Value::UInt(v) => Some(v.into()),
            Value::Long(v) => Some(v),
            Value::ULong(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// A non-negative integer scalar as u64.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::ULong(v) => Some(v),
            _ => self.as_i64().and_then(|v| u64::try_from(v).ok()),
        }
    }

    /// A numeric scalar as f64 (integers beyond 2^53 are rounded).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Float(v) => Some(v.into()),
            Value::Double(v) => Some(v),
            Value::ULong(v) => Some(v as f64),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// The text of a `Str`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The bytes of a `Raw` or a `UCharArray`.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Raw(b) => Some(b),
            Value::UCharArray(v) => Some(v),
            _ => None,
        }
    }

    /// Equality that compares floats by bit pattern, so NaN equals the same NaN and
    /// `0.0 != -0.0`: what "survives a round trip unchanged" means.
    pub fn bitwise_eq(&self, other: &Value) -> bool {
        fn f32s(a: &[f32], b: &[f32]) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
        }
        fn f64s(a: &[f64], b: &[f64]) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
        }
        match (self, other) {
            (Value::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits(),
            (Value::Double(a), Value::Double(b)) => a.to_bits() == b.to_bits(),
            (Value::FloatArray(a), Value::FloatArray(b)) => f32s(a, b),
            (Value::DoubleArray(a), Value::DoubleArray(b)) => f64s(a, b),
            _ => self == other,
        }
    }

    fn counts_fit_u32(&self) -> bool {
        match self {
            Value::StrArray(v) => fits_u32(v.len()) && v.iter().all(|s| fits_u32(s.len())),
            _ => fits_u32(self.len()),
        }
    }

    /// Bytes this value occupies in a payload.
    fn encoded_len(&self) -> usize {
        let field = self.field();
        match (self, field) {
            (Value::StrArray(v), _) => 4 + v.iter().map(|s| 4 + s.len()).sum::<usize>(),
            (_, Field::Scalar(e)) => e.size().unwrap_or(4 + self.len()),
            (_, Field::Array(e)) => 4 + self.len() * e.size().unwrap_or(0),
            (_, Field::Raw) => 4 + self.len(),
        }
    }

    fn encode(&self, out: &mut BytesMut) {
        match self {
            Value::Char(v) => out.put_i8(*v),
            Value::UChar(v) => out.put_u8(*v),
            Value::Short(v) => out.put_i16_le(*v),
            Value::UShort(v) => out.put_u16_le(*v),
            Value::Int(v) => out.put_i32_le(*v),
            Value::UInt(v) => out.put_u32_le(*v),
            Value::Long(v) => out.put_i64_le(*v),
            Value::ULong(v) => out.put_u64_le(*v),
            Value::Float(v) => out.put_u32_le(v.to_bits()),
            Value::Double(v) => out.put_u64_le(v.to_bits()),
            Value::Str(s) => put_bytes(out, s.as_bytes()),
            Value::CharArray(v) => put_array(out, v),
            Value::UCharArray(v) => put_bytes(out, v),
            Value::ShortArray(v) => put_array(out, v),
            Value::UShortArray(v) => put_array(out, v),
            Value::IntArray(v) => put_array(out, v),
            Value::UIntArray(v) => put_array(out, v),
            Value::LongArray(v) => put_array(out, v),
            Value::ULongArray(v) => put_array(out, v),
            Value::FloatArray(v) => put_array(out, v),
            Value::DoubleArray(v) => put_array(out, v),
            Value::StrArray(v) => {
                put_len(out, v.len());
                for s in v {
                    put_bytes(out, s.as_bytes());
                }
            }
            Value::Raw(b) => put_bytes(out, b),
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl From<$t> for Value {
            fn from(x: $t) -> Value {
                Value::$v(x)
            }
        }
    )*};
}
value_from! {
    i8 => Char, u8 => UChar, i16 => Short, u16 => UShort, i32 => Int, u32 => UInt,
    i64 => Long, u64 => ULong, f32 => Float, f64 => Double, String => Str,
    Vec<i8> => CharArray, Vec<u8> => UCharArray, Vec<i16> => ShortArray,
    Vec<u16> => UShortArray, Vec<i32> => IntArray, Vec<u32> => UIntArray,
    Vec<i64> => LongArray, Vec<u64> => ULongArray, Vec<f32> => FloatArray,
    Vec<f64> => DoubleArray, Vec<String> => StrArray, Bytes => Raw,
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_owned())
    }
}

/// Writes a u32 LE count. Lengths were checked by [`Format::check`]; only a hand-built
/// packet holding 4 GiB in one value gets here with a larger one.
fn put_len(out: &mut BytesMut, n: usize) {
    out.put_u32_le(
        u32::try_from(n).expect("value length exceeds u32::MAX; build packets with Packet::new"),
    );
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    put_len(out, b.len());
    out.put_slice(b);
}

/// Count, then the elements, converted through a small stack block: one pass, no
/// zero-fill, and plain copies on little-endian targets.
fn put_array<T: Le>(out: &mut BytesMut, v: &[T]) {
    const BLOCK: usize = 2048;
    put_len(out, v.len());
    let mut buf = [0u8; BLOCK];
    for chunk in v.chunks(BLOCK / T::SIZE) {
        let n = chunk.len() * T::SIZE;
        for (dst, x) in buf[..n].chunks_exact_mut(T::SIZE).zip(chunk) {
            x.write(dst);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Bounds-checked cursor over a payload. Invariant: `pos <= buf.len()`.
struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take_range(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Result<std::ops::Range<usize>, WireError> {
        let available = self.remaining();
        if n > available {
            return Err(WireError::Truncated {
                what,
                needed: n,
                available,
            });
        }
        let start = self.pos;
        self.pos += n;
        Ok(start..self.pos)
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        let range = self.take_range(n, what)?;
        let buf: &'a Bytes = self.buf;
        Ok(&buf[range])
    }

    /// `count` items of `size` bytes, checked before the caller allocates anything.
    fn take_n(
        &mut self,
        count: usize,
        size: usize,
        what: &'static str,
    ) -> Result<&'a [u8], WireError> {
        match count.checked_mul(size) {
            Some(n) => self.take(n, what),
            None => Err(WireError::Truncated {
                what,
                needed: usize::MAX,
                available: self.remaining(),
            }),
        }
    }

    fn scalar<T: Le>(&mut self, what: &'static str) -> Result<T, WireError> {
        self.take(T::SIZE, what).map(T::read)
    }

    fn count(&mut self, what: &'static str) -> Result<usize, WireError> {
        // usize is at least 32 bits on every target `bytes` supports.
        self.scalar::<u32>(what).map(|n| n as usize)
    }

    fn array<T: Le>(&mut self, e: Elem) -> Result<Vec<T>, WireError> {
        let n = self.count(e.count_what())?;
        let bytes = self.take_n(n, T::SIZE, e.elems_what())?;
        Ok(bytes.chunks_exact(T::SIZE).map(T::read).collect())
    }

    fn string(
        &mut self,
        index: usize,
        field: Field,
        len_what: &'static str,
        what: &'static str,
    ) -> Result<String, WireError> {
        let n = self.count(len_what)?;
        let bytes = self.take(n, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(WireError::BadUtf8 {
                index,
                field: field.to_string(),
            }),
        }
    }

    fn strings(&mut self, index: usize) -> Result<Vec<String>, WireError> {
        let n = self.count("%as count")?;
        // Each string needs at least its 4-byte length: check before reserving n slots.
        let available = self.remaining();
        match n.checked_mul(4) {
            Some(min) if min <= available => {}
            min => {
                return Err(WireError::Truncated {
                    what: "%as strings",
                    needed: min.unwrap_or(usize::MAX),
                    available,
                })
            }
        }
        let field = Field::Array(Elem::Str);
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(self.string(index, field, "%as string length", "%as string bytes")?);
        }
        Ok(v)
    }

    fn value(&mut self, index: usize, field: Field) -> Result<Value, WireError> {
        Ok(match field {
            Field::Scalar(e) => {
                let w = e.scalar_what();
                match e {
                    Elem::Char => Value::Char(self.scalar(w)?),
                    Elem::UChar => Value::UChar(self.scalar(w)?),
                    Elem::Short => Value::Short(self.scalar(w)?),
                    Elem::UShort => Value::UShort(self.scalar(w)?),
                    Elem::Int => Value::Int(self.scalar(w)?),
                    Elem::UInt => Value::UInt(self.scalar(w)?),
                    Elem::Long => Value::Long(self.scalar(w)?),
                    Elem::ULong => Value::ULong(self.scalar(w)?),
                    Elem::Float => Value::Float(self.scalar(w)?),
                    Elem::Double => Value::Double(self.scalar(w)?),
                    Elem::Str => Value::Str(self.string(index, field, "%s length", "%s bytes")?),
                }
            }
            Field::Array(e) => match e {
                Elem::Char => Value::CharArray(self.array(e)?),
                Elem::UChar => {
                    let n = self.count(e.count_what())?;
                    Value::UCharArray(self.take(n, e.elems_what())?.to_vec())
                }
                Elem::Short => Value::ShortArray(self.array(e)?),
                Elem::UShort => Value::UShortArray(self.array(e)?),
                Elem::Int => Value::IntArray(self.array(e)?),
                Elem::UInt => Value::UIntArray(self.array(e)?),
                Elem::Long => Value::LongArray(self.array(e)?),
                Elem::ULong => Value::ULongArray(self.array(e)?),
                Elem::Float => Value::FloatArray(self.array(e)?),
                Elem::Double => Value::DoubleArray(self.array(e)?),
                Elem::Str => Value::StrArray(self.strings(index)?),
            },
            Field::Raw => {
                let n = self.count("%b length")?;
                let range = self.take_range(n, "%b bytes")?;
                Value::Raw(self.buf.slice(range))
            }
        })
    }
}

impl Packet {
    /// Builds a packet (source `u32::MAX`), checking that `values` match `format`.
    pub fn new(
        stream: u32,
        tag: i32,
        format: &str,
        values: Vec<Value>,
    ) -> Result<Packet, WireError> {
        Packet::with_format(stream, tag, Format::parse(format)?, values)
    }

    /// Like [`Packet::new`] with an already parsed format (no re-parsing per packet).
    pub fn with_format(
        stream: u32,
        tag: i32,
        format: Format,
        values: Vec<Value>,
    ) -> Result<Packet, WireError> {
        format.check(&values)?;
        let packet = Packet {
            stream,
            tag,
            source: u32::MAX,
            format,
            values,
        };
        let len = packet.encoded_len();
        let max = u32::MAX as usize;
        if len > max {
            return Err(WireError::FrameTooLarge { len, max });
        }
        Ok(packet)
    }

    /// Length of the payload [`Packet::encode_payload`] writes.
    pub fn encoded_len(&self) -> usize {
        4 + 2 + self.format.text.len() + self.values.iter().map(Value::encoded_len).sum::<usize>()
    }

    /// Appends the data-frame payload (format + values) to `out`.
    ///
    /// Values are written as they are: a packet assembled by hand whose values do not
    /// match its format (caught by a debug assertion) will fail to decode at the peer.
    ///
    /// # Panics
    ///
    /// If one value holds more than `u32::MAX` elements or bytes (rejected by
    /// [`Packet::new`]).
    pub fn encode_payload(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        self.write_payload(out);
    }

    /// Appends a complete Data frame (header and payload) to `out`, with one reservation
    /// and no intermediate buffer.
    ///
    /// # Panics
    ///
    /// As [`Packet::encode_payload`], and if the payload exceeds `u32::MAX` bytes.
    pub fn encode_frame(&self, out: &mut BytesMut) {
        let len = self.encoded_len();
        out.reserve(HEADER_LEN + len);
        encode_header(FrameKind::Data, 0, self.stream, self.tag, len, out);
        self.write_payload(out);
    }

    /// The packet as a Data [`Frame`].
    pub fn to_frame(&self) -> Frame {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        self.write_payload(&mut out);
        Frame::new(FrameKind::Data, self.stream, self.tag, out.freeze())
    }

    fn write_payload(&self, out: &mut BytesMut) {
        debug_assert!(
            self.format.check(&self.values).is_ok(),
            "packet values do not match format {:?}",
            self.format.text
        );
        out.put_u32_le(self.source);
        // Format texts are at most MAX_LEN (1024) bytes by construction.
        out.put_u16_le(self.format.text.len() as u16);
        out.put_slice(self.format.text.as_bytes());
        for v in &self.values {
            v.encode(out);
        }
    }

    /// Decodes a data-frame payload. `payload` is the frame's shared buffer, so `%b` fields
    /// are slices of it. Never allocates more than `payload.len()` justifies.
    pub fn decode_payload(stream: u32, tag: i32, payload: &Bytes) -> Result<Packet, WireError> {
        let mut r = Reader {
            buf: payload,
            pos: 0,
        };
        let source = r.scalar::<u32>("source rank")?;
        let format_len = usize::from(r.scalar::<u16>("format length")?);
        let format = Format::parse_cached(r.take(format_len, "format string")?)?;
        let mut values = Vec::with_capacity(format.fields.len());
        for (index, &field) in format.fields.iter().enumerate() {
            values.push(r.value(index, field)?);
        }
        let extra = r.remaining();
        if extra != 0 {
            return Err(WireError::TrailingBytes {
                format: format.text.to_string(),
                extra,
            });
        }
        Ok(Packet {
            stream,
            tag,
            source,
            format,
            values,
        })
    }

    /// Equality with floats compared by bit pattern (see [`Value::bitwise_eq`]).
    pub fn bitwise_eq(&self, other: &Packet) -> bool {
        self.stream == other.stream
            && self.tag == other.tag
            && self.source == other.source
            && self.format == other.format
            && self.values.len() == other.values.len()
            && self
                .values
                .iter()
                .zip(&other.values)
                .all(|(a, b)| a.bitwise_eq(b))
    }
}

/// The largest numeric array of a data-frame payload, if it holds at least half the
/// payload's bytes: its element type and where its elements lie.
///
/// A link's codec stage uses this to compress a tree packet's array as typed data even
/// though the packet's header puts it at an arbitrary offset. Reads only the format
/// string and the counts, with every offset checked; a payload that does not parse
/// has no span.
pub fn array_span(payload: &[u8]) -> Option<(Elem, std::ops::Range<usize>)> {
    let format_len = usize::from(u16::from_le_bytes(payload.get(4..6)?.try_into().ok()?));
    let format = Format::parse_cached(payload.get(6..6 + format_len)?).ok()?;
    let count_at = |pos: usize| -> Option<usize> {
        let b: [u8; 4] = payload.get(pos..pos + 4)?.try_into().ok()?;
        Some(u32::from_le_bytes(b) as usize)
    };
    let mut pos = 6 + format_len;
    let mut best: Option<(Elem, std::ops::Range<usize>)> = None;
    for &field in format.fields() {
        match field {
            Field::Scalar(Elem::Str) | Field::Raw => pos = pos.checked_add(4 + count_at(pos)?)?,
            Field::Scalar(e) => pos = pos.checked_add(e.size()?)?,
            Field::Array(Elem::Str) => {
                let n = count_at(pos)?;
                pos += 4;
                for _ in 0..n.min(payload.len()) {
                    pos = pos.checked_add(4 + count_at(pos)?)?;
                }
            }
            Field::Array(e) => {
                let bytes = count_at(pos)?.checked_mul(e.size()?)?;
                let start = pos + 4;
                pos = start.checked_add(bytes)?;
                if best.as_ref().is_none_or(|(_, r)| r.len() < bytes) {
                    best = Some((e, start..pos));
                }
            }
        }
        if pos > payload.len() {
            return None;
        }
    }
    best.filter(|(_, r)| r.len() * 2 >= payload.len())
}

#[cfg(test)]
mod tests {
    #[test]
    fn array_span_finds_the_dominant_array() {
        let p = Packet::new(
            1,
            2,
            "%d %alf %s %af",
            vec![
                Value::Int(7),
                Value::DoubleArray(vec![1.5; 100]),
                Value::Str("x".into()),
                Value::FloatArray(vec![2.0; 10]),
            ],
        )
        .unwrap();
        let f = p.to_frame();
        let (elem, r) = array_span(&f.payload).unwrap();
        assert_eq!(elem, Elem::Double);
        assert_eq!(r.len(), 800);
        assert_eq!(&f.payload[r.start..r.start + 8], &1.5f64.to_le_bytes());
        // Small arrays, or none, give no span; neither do truncated payloads.
        let small = Packet::new(
            1,
            2,
            "%s %ad",
            vec![Value::Str("x".repeat(100)), Value::IntArray(vec![1; 5])],
        )
        .unwrap();
        assert_eq!(array_span(&small.to_frame().payload), None);
        for cut in 0..f.payload.len() - 1 {
            if let Some((_, r)) = array_span(&f.payload[..cut]) {
                assert!(r.end <= cut);
            }
        }
    }

    use super::*;

    fn enc(p: &Packet) -> Bytes {
        let mut out = BytesMut::new();
        p.encode_payload(&mut out);
        assert_eq!(out.len(), p.encoded_len());
        out.freeze()
    }

    fn round_trip(p: &Packet) -> Packet {
        let back = Packet::decode_payload(p.stream, p.tag, &enc(p)).expect("decodes");
        assert!(back.bitwise_eq(p), "{back:?} != {p:?}");
        back
    }

    fn bad_format(text: &str) -> (usize, &'static str) {
        match Format::parse(text) {
            Err(WireError::BadFormat { offset, reason, .. }) => (offset, reason),
            other => panic!("{text:?}: expected BadFormat, got {other:?}"),
        }
    }

    /// A payload with the given format text followed by `values` bytes.
    fn raw_payload(format: &str, values: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        out.put_u32_le(7);
        out.put_u16_le(format.len() as u16);
        out.put_slice(format.as_bytes());
        out.put_slice(values);
        out.freeze()
    }

    fn decode(b: &Bytes) -> Result<Packet, WireError> {
        Packet::decode_payload(1, 2, b)
    }

    #[test]
    fn every_token_parses_and_round_trips() {
        let cases: Vec<(&str, Field, Value)> = vec![
            ("%c", Field::Scalar(Elem::Char), Value::Char(-5)),
            ("%uc", Field::Scalar(Elem::UChar), Value::UChar(250)),
            ("%hd", Field::Scalar(Elem::Short), Value::Short(-30000)),
            ("%uhd", Field::Scalar(Elem::UShort), Value::UShort(65000)),
            ("%d", Field::Scalar(Elem::Int), Value::Int(i32::MIN)),
            ("%ud", Field::Scalar(Elem::UInt), Value::UInt(u32::MAX)),
            ("%ld", Field::Scalar(Elem::Long), Value::Long(i64::MIN)),
            ("%uld", Field::Scalar(Elem::ULong), Value::ULong(u64::MAX)),
            ("%f", Field::Scalar(Elem::Float), Value::Float(f32::NAN)),
            ("%lf", Field::Scalar(Elem::Double), Value::Double(-0.0)),
            ("%s", Field::Scalar(Elem::Str), Value::from("héllo")),
            (
                "%ac",
                Field::Array(Elem::Char),
                Value::CharArray(vec![-1, 0, 1]),
            ),
            (
                "%auc",
                Field::Array(Elem::UChar),
                Value::UCharArray(vec![0, 255]),
            ),
            (
                "%ahd",
                Field::Array(Elem::Short),
                Value::ShortArray(vec![-2, 3]),
            ),
            (
                "%auhd",
                Field::Array(Elem::UShort),
                Value::UShortArray(vec![9]),
            ),
            (
                "%ad",
                Field::Array(Elem::Int),
                Value::IntArray(vec![1, -2, 3]),
            ),
            ("%aud", Field::Array(Elem::UInt), Value::UIntArray(vec![])),
            (
                "%ald",
                Field::Array(Elem::Long),
                Value::LongArray(vec![i64::MAX]),
            ),
            (
                "%auld",
                Field::Array(Elem::ULong),
                Value::ULongArray(vec![1, 2]),
            ),
            (
                "%af",
                Field::Array(Elem::Float),
                Value::FloatArray(vec![1.5, f32::INFINITY]),
            ),
            (
                "%alf",
                Field::Array(Elem::Double),
                Value::DoubleArray(vec![f64::NAN, -0.0]),
            ),
            (
                "%as",
                Field::Array(Elem::Str),
                Value::StrArray(vec!["a".into(), String::new()]),
            ),
            (
                "%b",
                Field::Raw,
                Value::Raw(Bytes::from_static(b"\x00\xff")),
            ),
        ];
        for (tok, field, value) in cases {
            let f = Format::parse(tok).unwrap();
            assert_eq!(f.fields(), &[field], "{tok}");
            assert_eq!(field.token(), tok);
            assert_eq!(Field::from_token(tok), Some(field));
            assert_eq!(value.field(), field);
            let p = Packet::new(3, -4, tok, vec![value.clone()]).unwrap();
            let back = round_trip(&p);
            assert_eq!(back.source, u32::MAX);
            // Header + format + value, nothing else.
            assert_eq!(p.encoded_len(), 6 + tok.len() + value.encoded_len());
        }
    }

    #[test]
    fn exact_byte_layout() {
        let p = Packet::new(
            0,
            0,
            "%d %ahd %s %as %b",
            vec![
                Value::Int(-2),
                Value::ShortArray(vec![1, -1]),
                Value::from("hi"),
                Value::StrArray(vec!["x".into()]),
                Value::Raw(Bytes::from_static(b"zz")),
            ],
        )
        .unwrap();
        let mut want = Vec::new();
        want.extend_from_slice(&u32::MAX.to_le_bytes());
        want.extend_from_slice(&17u16.to_le_bytes());
        want.extend_from_slice(b"%d %ahd %s %as %b");
        want.extend_from_slice(&(-2i32).to_le_bytes());
        want.extend_from_slice(&[2, 0, 0, 0, 1, 0, 0xff, 0xff]);
        want.extend_from_slice(&[2, 0, 0, 0, b'h', b'i']);
        want.extend_from_slice(&[1, 0, 0, 0, 1, 0, 0, 0, b'x']);
        want.extend_from_slice(&[2, 0, 0, 0, b'z', b'z']);
        assert_eq!(&enc(&p)[..], &want[..]);
    }

    #[test]
    fn whitespace_and_empty_formats() {
        let f = Format::parse(" \t%d\n\n%alf\r\x0b\x0c%s ").unwrap();
        assert_eq!(f.as_str(), "%d %alf %s");
        assert_eq!(f, Format::parse("%d %alf %s").unwrap());
        for empty in ["", "   ", "\n"] {
            let f = Format::parse(empty).unwrap();
            assert!(f.is_empty());
            assert_eq!(f, Format::default());
        }
        let p = round_trip(&Packet::new(1, 1, "", vec![]).unwrap());
        assert!(p.values.is_empty());
        assert_eq!("%b %uc".parse::<Format>().unwrap().to_string(), "%b %uc");
    }

    #[test]
    fn bad_formats_name_offset_and_reason() {
        assert_eq!(bad_format("%d x"), (3, "expected '%' to start a field"));
        assert_eq!(bad_format("%d %q"), (3, bad_format("%q").1));
        assert!(bad_format("%q").1.starts_with("unknown conversion"));
        assert!(bad_format("%D").1.starts_with("unknown conversion"));
        assert!(bad_format("%aa").1.starts_with("unknown conversion"));
        assert_eq!(bad_format("%"), (0, "'%' without a conversion"));
        assert_eq!(bad_format(" %ab"), (1, "%b has no array form"));
        assert_eq!(bad_format("%d%s"), (2, "missing whitespace between fields"));
        assert_eq!(bad_format("%d,%s").1, bad_format("%q").1);
        assert_eq!(
            bad_format("%d %dé"),
            (5, "non-ASCII byte (formats are ASCII)")
        );
        // Non-ASCII whitespace is not a separator.
        assert_eq!(bad_format("%d\u{a0}%d").0, 2);
        assert_eq!(bad_format("%d\0").0, 0);

        let long = "%d ".repeat(400);
        assert_eq!(bad_format(&long), (1024, "longer than 1024 bytes"));
        match Format::parse(&long) {
            Err(WireError::BadFormat { format, .. }) => assert!(format.len() < 100),
            other => panic!("{other:?}"),
        }
        let ok = vec!["%d"; 256].join(" ");
        assert_eq!(Format::parse(&ok).unwrap().len(), 256);
        let many = vec!["%d"; 257].join(" ");
        assert_eq!(bad_format(&many), (256 * 3, "more than 256 fields"));
        // The error message carries all three.
        let msg = Format::parse("%d x").unwrap_err().to_string();
        assert!(msg.contains("\"%d x\"") && msg.contains("byte 3"), "{msg}");
    }

    #[test]
    fn from_fields_applies_the_same_limits() {
        let f = Format::from_fields(&[Field::Raw, Field::Array(Elem::ULong)]).unwrap();
        assert_eq!(f, Format::parse("%b %auld").unwrap());
        assert_eq!(f.as_str(), "%b %auld");
        let too_many = vec![Field::Scalar(Elem::Int); 257];
        assert!(matches!(
            Format::from_fields(&too_many),
            Err(WireError::BadFormat {
                reason: "more than 256 fields",
                ..
            })
        ));
        let too_long = vec![Field::Array(Elem::ULong); 200];
        assert!(matches!(
            Format::from_fields(&too_long),
            Err(WireError::BadFormat {
                offset: 1024,
                reason: "longer than 1024 bytes",
                ..
            })
        ));
    }

    #[test]
    fn packet_new_reports_mismatches() {
        let err = Packet::new(0, 0, "%d %s", vec![Value::Int(1)]).unwrap_err();
        assert!(
            matches!(err, WireError::Mismatch { index: 1, ref field, .. } if field == "%s"),
            "{err}"
        );
        let err = Packet::new(0, 0, "%d", vec![Value::Int(1), Value::Int(2)]).unwrap_err();
        assert!(matches!(err, WireError::Mismatch { index: 1, .. }), "{err}");
        let err = Packet::new(
            0,
            0,
            "%d %ald",
            vec![Value::Int(1), Value::IntArray(vec![])],
        )
        .unwrap_err();
        match err {
            WireError::Mismatch {
                index,
                field,
                reason,
            } => {
                assert_eq!((index, field.as_str()), (1, "%ald"));
                assert!(reason.contains("%ad"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Packet::new(0, 0, "%x", vec![]),
            Err(WireError::BadFormat { .. })
        ));
    }

    #[test]
    fn truncation_names_the_field() {
        let cases: &[(&str, &[u8], &str)] = &[
            ("%d", &[1, 2, 3], "%d value"),
            ("%lf", &[], "%lf value"),
            ("%s", &[5, 0, 0], "%s length"),
            ("%s", &[5, 0, 0, 0, b'a'], "%s bytes"),
            ("%ad", &[2, 0, 0, 0, 1, 0, 0, 0], "%ad elements"),
            ("%auc", &[1, 0], "%auc count"),
            ("%auc", &[3, 0, 0, 0, 1], "%auc elements"),
            ("%as", &[2, 0, 0, 0, 0, 0, 0, 0], "%as strings"),
            ("%as", &[1, 0, 0, 0, 1, 0, 0, 0], "%as string bytes"),
            ("%b", &[9, 0, 0, 0, 1, 2], "%b bytes"),
            ("%b", &[], "%b length"),
        ];
        for &(format, values, what) in cases {
            match decode(&raw_payload(format, values)) {
                Err(WireError::Truncated { what: w, .. }) => assert_eq!(w, what, "{format}"),
                other => panic!("{format}: {other:?}"),
            }
        }
        for (len, what) in [
            (0, "source rank"),
            (5, "format length"),
            (6, "format string"),
        ] {
            let b = raw_payload("%d", &[0; 4]).slice(..len);
            assert!(
                matches!(decode(&b), Err(WireError::Truncated { what: w, .. }) if w == what),
                "{len}"
            );
        }
    }

    #[test]
    fn huge_counts_fail_before_allocating() {
        for format in ["%auld", "%as", "%s", "%b", "%auc"] {
            let err = decode(&raw_payload(format, &[0xff; 4])).unwrap_err();
            match err {
                WireError::Truncated {
                    needed,
                    available: 0,
                    ..
                } => assert!(needed >= u32::MAX as usize),
                other => panic!("{format}: {other:?}"),
            }
        }
    }

    #[test]
    fn trailing_bytes_bad_utf8_and_bad_wire_format() {
        let err = decode(&raw_payload("%uc", &[1, 2, 3])).unwrap_err();
        assert_eq!(
            err,
            WireError::TrailingBytes {
                format: "%uc".into(),
                extra: 2
            }
        );
        let err = decode(&raw_payload("%d %s", &[0, 0, 0, 0, 1, 0, 0, 0, 0xff])).unwrap_err();
        assert_eq!(
            err,
            WireError::BadUtf8 {
                index: 1,
                field: "%s".into()
            }
        );
        let err = decode(&raw_payload(
            "%as",
            &[2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0xc3],
        ))
        .unwrap_err();
        assert_eq!(
            err,
            WireError::BadUtf8 {
                index: 0,
                field: "%as".into()
            }
        );
        assert!(matches!(
            decode(&raw_payload("%z", &[])),
            Err(WireError::BadFormat { offset: 0, .. })
        ));
        let mut b = BytesMut::new();
        b.put_u32_le(0);
        b.put_u16_le(2);
        b.put_slice(&[b'%', 0xff]);
        assert!(matches!(
            decode(&b.freeze()),
            Err(WireError::BadFormat { offset: 1, .. })
        ));
        // A wire format longer than the cap is refused even if the bytes are there.
        let long = "%c ".repeat(400);
        let b = raw_payload(&long, &[0; 400]);
        assert!(matches!(
            decode(&b),
            Err(WireError::BadFormat { offset: 1024, .. })
        ));
    }

    #[test]
    fn non_canonical_wire_format_decodes() {
        let b = raw_payload("  %d\t%uc ", &[1, 0, 0, 0, 9]);
        let p = decode(&b).unwrap();
        assert_eq!(p.source, 7);
        assert_eq!(p.format.as_str(), "%d %uc");
        assert_eq!(p.values, vec![Value::Int(1), Value::UChar(9)]);
    }

    #[test]
    fn raw_is_zero_copy() {
        let p = Packet::new(
            0,
            0,
            "%d %b",
            vec![Value::Int(0), Value::Raw(Bytes::from(vec![7u8; 100]))],
        )
        .unwrap();
        let wire = enc(&p);
        let back = decode(&wire).unwrap();
        let Value::Raw(raw) = &back.values[1] else {
            panic!()
        };
        let range = wire.as_ptr_range();
        assert!(range.contains(&raw.as_ptr()));
        assert_eq!(&raw[..], &[7u8; 100][..]);
    }

    #[test]
    fn frames_carry_packets() {
        let p = Packet::new(5, -1, "%alf %s", vec![vec![1.0f64, 2.0].into(), "x".into()]).unwrap();
        let mut out = BytesMut::new();
        p.encode_frame(&mut out);
        let frame = crate::decode_frame(&mut out, 1 << 20).unwrap().unwrap();
        assert!(out.is_empty());
        assert_eq!(frame, p.to_frame());
        assert_eq!(frame.kind, FrameKind::Data);
        let back = Packet::decode_payload(frame.stream, frame.tag, &frame.payload).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn accessors() {
        assert_eq!(Value::UChar(200).as_i64(), Some(200));
        assert_eq!(Value::Char(-1).as_u64(), None);
        assert_eq!(Value::ULong(u64::MAX).as_i64(), None);
        assert_eq!(Value::ULong(u64::MAX).as_u64(), Some(u64::MAX));
        assert_eq!(Value::Float(0.5).as_f64(), Some(0.5));
        assert_eq!(Value::Int(-3).as_f64(), Some(-3.0));
        assert_eq!(Value::from("s").as_str(), Some("s"));
        assert_eq!(Value::Int(1).as_str(), None);
        assert_eq!(
            Value::Raw(Bytes::from_static(b"ab")).as_bytes(),
            Some(&b"ab"[..])
        );
        assert_eq!(Value::from(vec![1i32, 2]).len(), 2);
        assert!(Value::from(Vec::<String>::new()).is_empty());
        assert_eq!(Value::Double(1.0).len(), 1);
        assert_eq!(Value::LongArray(vec![]).elem(), Some(Elem::Long));
        assert_eq!(Value::Raw(Bytes::new()).elem(), None);
        assert_eq!(Elem::Str.size(), None);
        assert_eq!(Elem::ULong.size(), Some(8));
        assert!(Value::Float(f32::NAN).bitwise_eq(&Value::Float(f32::NAN)));
        assert!(!Value::Double(0.0).bitwise_eq(&Value::Double(-0.0)));
        assert!(!Value::Int(1).bitwise_eq(&Value::UInt(1)));
    }
}
