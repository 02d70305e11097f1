//! The two small enums that travel in every frame header: which codec made the payload
//! and what kind of elements the original bytes hold.
//!
//! Both are numbered for the wire. The numbers are stable: a number, once given, is
//! never reused for something else, so that old and new processes can talk.

use std::fmt;

use crate::CodecError;

/// Which decoder a payload needs, one byte on the wire.
///
/// | id | codec | payload |
/// |---:|---|---|
/// | 0 | `none` | the original bytes |
/// | 1 | `lz4` | one LZ4 block (no LZ4 frame header) |
/// | 2 | `zstd` | one zstd frame; the level is the sender's business |
/// | 3 | `rle` | byte run-length tokens, see the `rle` module |
/// | 4 | `rice` | Rice codes of zigzag deltas per element, see the `rice` module |
/// | 5 | `huffman` | canonical Huffman over bytes, see the `huffman` module |
/// | 6 | `fpc` | FPC (FCM/DFCM predictors) over 4- or 8-byte elements |
/// | 7 | `shuffle-lz4` | bytes transposed by element size, then one LZ4 block |
/// | 8 | `shuffle-zstd` | bytes transposed by element size, then one zstd frame |
///
/// Ids 9 to 255 are unassigned; a decoder meeting one returns
/// [`CodecError::UnknownCodec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum CodecId {
    None = 0,
    Lz4 = 1,
    Zstd = 2,
    Rle = 3,
    Rice = 4,
    Huffman = 5,
    Fpc = 6,
    ShuffleLz4 = 7,
    ShuffleZstd = 8,
}

impl CodecId {
    /// Every assigned id, in wire order.
    pub const ALL: [CodecId; 9] = [
        CodecId::None,
        CodecId::Lz4,
        CodecId::Zstd,
        CodecId::Rle,
        CodecId::Rice,
        CodecId::Huffman,
        CodecId::Fpc,
        CodecId::ShuffleLz4,
        CodecId::ShuffleZstd,
    ];

    /// The wire byte.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// The id for a wire byte.
    pub fn from_u8(b: u8) -> Result<CodecId, CodecError> {
        CodecId::ALL
            .get(usize::from(b))
            .copied()
            .ok_or(CodecError::UnknownCodec(b))
    }

    /// The short lower-case name used in logs, benchmarks and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CodecId::None => "none",
            CodecId::Lz4 => "lz4",
            CodecId::Zstd => "zstd",
            CodecId::Rle => "rle",
            CodecId::Rice => "rice",
            CodecId::Huffman => "huffman",
            CodecId::Fpc => "fpc",
            CodecId::ShuffleLz4 => "shuffle-lz4",
            CodecId::ShuffleZstd => "shuffle-zstd",
        }
    }
}

impl fmt::Display for CodecId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the original bytes hold, four bits on the wire.
///
/// Codecs only use the element *size* (the byte width that shuffle transposes by, that
/// Rice takes deltas over, that selects 32- or 64-bit FPC); the kind travels so that the
/// receiver and the adaptive engine know the datatype. Elements are little-endian, as
/// in `vargr-wire` payloads. The input need not be a whole number of elements: the
/// typed codecs carry a trailing partial element verbatim.
///
/// | code | kind | size |
/// |---:|---|---:|
/// | 0 | `u8` (also: opaque bytes) | 1 |
/// | 1 | `i8` | 1 |
/// | 2 | `u16` | 2 |
/// | 3 | `i16` | 2 |
/// | 4 | `u32` | 4 |
/// | 5 | `i32` | 4 |
/// | 6 | `u64` | 8 |
/// | 7 | `i64` | 8 |
/// | 8 | `f32` | 4 |
/// | 9 | `f64` | 8 |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ElemKind {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    U64 = 6,
    I64 = 7,
    F32 = 8,
    F64 = 9,
}

impl ElemKind {
    /// Every kind, in wire order.
    pub const ALL: [ElemKind; 10] = [
        ElemKind::U8,
        ElemKind::I8,
        ElemKind::U16,
        ElemKind::I16,
        ElemKind::U32,
        ElemKind::I32,
        ElemKind::U64,
        ElemKind::I64,
        ElemKind::F32,
        ElemKind::F64,
    ];

    /// Opaque bytes: the kind to use when the datatype is unknown.
    pub const BYTES: ElemKind = ElemKind::U8;

    /// Bytes per element: 1, 2, 4 or 8.
    pub fn size(self) -> usize {
        match self {
            ElemKind::U8 | ElemKind::I8 => 1,
            ElemKind::U16 | ElemKind::I16 => 2,
            ElemKind::U32 | ElemKind::I32 | ElemKind::F32 => 4,
            ElemKind::U64 | ElemKind::I64 | ElemKind::F64 => 8,
        }
    }

    /// Whether the elements are IEEE 754 floats.
    pub fn is_float(self) -> bool {
        matches!(self, ElemKind::F32 | ElemKind::F64)
    }

    /// The wire nibble.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// The kind for a wire nibble.
    pub fn from_u8(b: u8) -> Result<ElemKind, CodecError> {
        ElemKind::ALL
            .get(usize::from(b))
            .copied()
            .ok_or(CodecError::UnknownElem(b))
    }

    /// The Rust type name (`"f64"`), also accepted by [`str::parse`].
    pub fn name(self) -> &'static str {
        match self {
            ElemKind::U8 => "u8",
            ElemKind::I8 => "i8",
            ElemKind::U16 => "u16",
            ElemKind::I16 => "i16",
            ElemKind::U32 => "u32",
            ElemKind::I32 => "i32",
            ElemKind::U64 => "u64",
            ElemKind::I64 => "i64",
            ElemKind::F32 => "f32",
            ElemKind::F64 => "f64",
        }
    }
}

impl fmt::Display for ElemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ElemKind {
    type Err = CodecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase();
        if s == "bytes" || s == "byte" {
            return Ok(ElemKind::BYTES);
        }
        ElemKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                CodecError::InvalidParam(format!(
                    "element kind {s:?}: expected bytes, u8, i8, u16, i16, u32, i32, u64, i64, f32 or f64"
                ))
            })
    }
}
