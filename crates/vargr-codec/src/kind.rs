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

/// What the original bytes hold, four bits in a codec frame's header: vargr's one
/// element vocabulary (see `vargr_wire::ElemKind`).
pub use vargr_wire::ElemKind;
