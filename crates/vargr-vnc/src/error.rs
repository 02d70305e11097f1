//! The crate's error type: a far side's error ends the proxy session, a viewer's
//! ends that viewer only, and each names what broke.

use thiserror::Error;
use vargr_rfb::RfbError;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VncError {
    /// The RFB peer (server or viewer) broke the protocol or refused us.
    #[error(transparent)]
    Rfb(#[from] RfbError),
    /// A length on the proxy link exceeds the configured limit.
    #[error("proxy {message}.{field}: length {len} exceeds the limit of {max}")]
    TooLong {
        message: &'static str,
        field: &'static str,
        len: u64,
        max: u64,
    },
    #[error("unknown proxy message type {0}")]
    UnknownMessage(u8),
    /// A proxy message whose body is short, long or malformed.
    #[error("proxy {message}: {what}")]
    Corrupt { message: &'static str, what: String },
    /// A proxy message the receiving side does not take, or not yet.
    #[error("proxy {message} is not allowed {when}")]
    Unexpected {
        message: &'static str,
        when: &'static str,
    },
    /// The server wants VNC authentication and the far side has no password.
    #[error("the VNC server asks for a password and none is configured")]
    PasswordNeeded,
    /// The screen changed size and the viewer did not list DesktopSize.
    #[error(
        "the framebuffer became {width}x{height} and the viewer cannot be told (no DesktopSize)"
    )]
    ResizeUnsupported { width: u16, height: u16 },
    /// The dedup protocol or the compression of the link failed (bad bytes from the
    /// peer, or a cache that cannot be read).
    #[error("proxy link, {what}: {detail}")]
    Link { what: &'static str, detail: String },
    /// The other proxy gave up, and said why.
    #[error("the other proxy ended the session: {0}")]
    PeerAborted(String),
    /// A setting the proxy cannot work with.
    #[error("configuration: {0}")]
    Config(String),
    #[error("no viewer {0}")]
    NoViewer(u64),
}
