//! The crate's one error type: every refusal names the message and the field that broke
//! the rule, so that a proxy can end one session with a clear reason.

use thiserror::Error;

/// Why RFB bytes or a request were refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RfbError {
    /// The 12-byte version string is not `RFB xxx.yyy\n`.
    #[error("ProtocolVersion: {0:?} is not of the form \"RFB xxx.yyy\\n\"")]
    BadVersionString(Vec<u8>),
    /// A well-formed version that this crate does not speak (only 3.3, 3.7, 3.8).
    #[error("ProtocolVersion: RFB {major}.{minor} is not supported (3.3, 3.7 and 3.8 are)")]
    UnsupportedVersion { major: u16, minor: u16 },
    /// A length read from the wire exceeds the configured limit.
    #[error("{message}.{field}: length {len} exceeds the limit of {max}")]
    TooLong {
        message: &'static str,
        field: &'static str,
        len: u64,
        max: u64,
    },
    /// A field holds a value the protocol does not allow.
    #[error("{message}.{field}: invalid value {value}")]
    BadValue {
        message: &'static str,
        field: &'static str,
        value: i64,
    },
    /// A message type byte that does not exist in this direction.
    #[error("unknown {direction} message type {kind}")]
    UnknownMessage { direction: &'static str, kind: u8 },
    /// A rectangle in an encoding this crate cannot decode (its length is unknown).
    #[error("FramebufferUpdate: encoding {0} is not supported")]
    UnsupportedEncoding(i32),
    /// A rectangle (or a part of one) that lies outside the framebuffer.
    #[error("{message}: rectangle {x},{y} {width}x{height} exceeds the framebuffer {fb_width}x{fb_height}")]
    OutOfBounds {
        message: &'static str,
        x: u32,
        y: u32,
        width: u32,
        height: u32,
        fb_width: u16,
        fb_height: u16,
    },
    /// Encoded rectangle data that ends early or holds bytes past its end.
    #[error("{encoding}: {what}")]
    Corrupt {
        encoding: &'static str,
        what: String,
    },
    /// The pixel format cannot be used (colour maps, odd sizes).
    #[error("PixelFormat: {0}")]
    BadPixelFormat(String),
    /// The peer refused the connection or the authentication, with its reason.
    #[error("{stage} failed: {reason}")]
    Refused { stage: &'static str, reason: String },
    /// No security type both sides accept.
    #[error("security: none of the offered types {offered:?} is acceptable")]
    NoCommonSecurity { offered: Vec<u8> },
    /// A call that the handshake's current state does not allow.
    #[error("{0} is not allowed in the current state")]
    WrongState(&'static str),
}
