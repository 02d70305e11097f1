//! The element types vargr knows, one vocabulary for every layer: the format language's
//! arrays (`%ad`, `%alf`, …), the codec frames' element nibble, typed collectives and
//! the bindings' dtypes all name their numbers with [`ElemKind`].

use std::fmt;

use serde::{Deserialize, Serialize};

/// A name that is not an element kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("element kind {0:?}: expected bytes, u8, i8, u16, i16, u32, i32, u64, i64, f32 or f64")]
pub struct ParseElemError(pub String);

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
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
    // Const and inline: kernels of other crates call these per element.
    #[inline]
    pub const fn size(self) -> usize {
        match self {
            ElemKind::U8 | ElemKind::I8 => 1,
            ElemKind::U16 | ElemKind::I16 => 2,
            ElemKind::U32 | ElemKind::I32 | ElemKind::F32 => 4,
            ElemKind::U64 | ElemKind::I64 | ElemKind::F64 => 8,
        }
    }

    /// Whether the elements are IEEE 754 floats.
    #[inline]
    pub const fn is_float(self) -> bool {
        matches!(self, ElemKind::F32 | ElemKind::F64)
    }

    /// The wire nibble.
    #[inline]
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// The kind for a wire nibble, if it names one.
    #[inline]
    pub fn from_u8(b: u8) -> Option<ElemKind> {
        ElemKind::ALL.get(usize::from(b)).copied()
    }

    /// The Rust type name (`"f64"`), also accepted by [`str::parse`].
    #[inline]
    pub const fn name(self) -> &'static str {
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
    type Err = ParseElemError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase();
        if s == "bytes" || s == "byte" {
            return Ok(ElemKind::BYTES);
        }
        ElemKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or(ParseElemError(s))
    }
}

/// Frame header flag (application frames): the payload is a codec frame, set and
/// removed by the links' codec stages.
pub const FLAG_CODEC: u8 = 0x80;
/// Frame header flag (application frames): the sender asks that the frame cross
/// uncompressed (data it knows will not shrink, or whose latency matters more than its
/// size).
pub const FLAG_RAW: u8 = 0x40;
/// Frame header flag bits 0–3 (application frames): the payload's element kind, as an
/// index into [`ElemKind::ALL`] plus one (0: unknown, treated as bytes).
pub const FLAG_ELEM_MASK: u8 = 0x0f;

/// The flag bits that announce `elem` (for senders of typed payloads).
#[inline]
pub fn elem_flags(elem: ElemKind) -> u8 {
    (elem.as_u8() + 1) & FLAG_ELEM_MASK
}

/// The element kind a frame's flags announce.
#[inline]
pub fn elem_hint(flags: u8) -> ElemKind {
    match flags & FLAG_ELEM_MASK {
        0 => ElemKind::BYTES,
        i => ElemKind::from_u8(i - 1).unwrap_or(ElemKind::BYTES),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_names_nibbles_and_flags() {
        for e in ElemKind::ALL {
            assert_eq!(e.name().parse::<ElemKind>(), Ok(e));
            assert_eq!(ElemKind::from_u8(e.as_u8()), Some(e));
            // The codec flag beside the element bits does not disturb them.
            assert_eq!(elem_hint(elem_flags(e) | FLAG_CODEC | FLAG_RAW), e);
        }
        assert_eq!(elem_hint(0), ElemKind::BYTES);
        assert_eq!(ElemKind::from_u8(10), None);
        assert_eq!("bytes".parse::<ElemKind>(), Ok(ElemKind::BYTES));
        let e = "complex".parse::<ElemKind>().unwrap_err().to_string();
        assert!(e.contains("\"complex\"") && e.contains("f64"), "{e}");
    }
}
