//! The one error type of the crate.
//!
//! Every way a frame can be wrong has its own variant, and each names the field or the
//! codec stream part that broke, so that a link can log "frame from node-3: rice block
//! parameter out of range" rather than "decode failed".

use crate::{CodecId, ElemKind};

/// What went wrong while compressing or decoding a codec frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The frame ended inside a header field.
    #[error("codec frame truncated in {field}: needs {needed} more bytes, {available} left")]
    Truncated {
        field: &'static str,
        needed: usize,
        available: usize,
    },
    /// The first byte is not this format's magic and version.
    #[error(
        "codec frame header byte is {found:#04x}, expected {expected:#04x} (magic 0xC, version 1)"
    )]
    BadMagic { found: u8, expected: u8 },
    /// The codec id byte names no codec this build knows.
    #[error("unknown codec id {0} in codec frame header")]
    UnknownCodec(u8),
    /// The element kind nibble names no element kind.
    #[error("unknown element kind {0} in codec frame header")]
    UnknownElem(u8),
    /// Flag bits that this version reserves are set.
    #[error("reserved flag bits {0:#04x} set in codec frame header")]
    ReservedFlags(u8),
    /// The span a codec ran over does not fit the message.
    #[error("codec frame header: span of {len} bytes at {start} does not fit a message of {original_len} bytes")]
    BadSpan {
        start: u64,
        len: u64,
        original_len: u64,
    },
    /// A varint is longer than ten bytes or overflows 64 bits.
    #[error("malformed varint in {field}")]
    BadVarint { field: &'static str },
    /// The header announces more bytes than the receiver accepts; nothing was allocated.
    #[error("original length {len} exceeds the limit of {max} bytes")]
    TooLarge { len: u64, max: usize },
    /// The compressed stream is malformed; `what` names the part of the stream.
    #[error("{codec} stream corrupt: {what}")]
    Corrupt { codec: CodecId, what: &'static str },
    /// The stream decoded, but not to the length the header announced.
    #[error("{codec} stream decoded to {got} bytes, header says {expected}")]
    LengthMismatch {
        codec: CodecId,
        expected: usize,
        got: usize,
    },
    /// The codec cannot handle elements of this kind (FPC needs 4- or 8-byte elements).
    #[error("{codec} does not handle {elem} elements")]
    Unsupported { codec: CodecId, elem: ElemKind },
    /// A codec parameter is out of its documented range.
    #[error("invalid codec parameter: {0}")]
    InvalidParam(String),
    /// A decompression report from the peer's codec stage is malformed.
    #[error("codec report malformed: {0}")]
    BadReport(String),
    /// A cost-model input or an adaptive engine setting is unusable; `field` names it.
    #[error("invalid {field}: {reason}")]
    InvalidConfig { field: &'static str, reason: String },
    /// The engine's settings file could not be read or parsed, or a setting in it is
    /// unusable.
    #[error("adaptive codec settings {path}: {reason}")]
    ConfigFile { path: String, reason: String },
}

impl CodecError {
    pub(crate) fn corrupt(codec: CodecId, what: &'static str) -> Self {
        CodecError::Corrupt { codec, what }
    }
}

impl From<vargr_wire::ParseElemError> for CodecError {
    fn from(e: vargr_wire::ParseElemError) -> CodecError {
        CodecError::InvalidParam(e.to_string())
    }
}
