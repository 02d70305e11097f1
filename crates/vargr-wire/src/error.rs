use thiserror::Error;

/// Everything that can be wrong with bytes read from a link.
///
/// Each variant names the field that was wrong so that the message logged on a closed
/// connection says where the stream went bad.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WireError {
    #[error(
        "bad magic byte {found:#04x} (expected {expected:#04x}): the peer does not speak vargr"
    )]
    BadMagic { found: u8, expected: u8 },
    #[error("unsupported wire version {found} (this build speaks {supported})")]
    BadVersion { found: u8, supported: u8 },
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("frame payload of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge { len: usize, max: usize },
    #[error("truncated {what}: needed {needed} bytes, {available} available")]
    Truncated {
        what: &'static str,
        needed: usize,
        available: usize,
    },
    #[error("bad format string {format:?} at byte {offset}: {reason}")]
    BadFormat {
        format: String,
        offset: usize,
        reason: &'static str,
    },
    #[error("payload does not match format field {index} ({field}): {reason}")]
    Mismatch {
        index: usize,
        field: String,
        reason: String,
    },
    #[error("{extra} trailing bytes after the last field of format {format:?}")]
    TrailingBytes { format: String, extra: usize },
    #[error("field {index} ({field}) holds invalid UTF-8")]
    BadUtf8 { index: usize, field: String },
}
