//! What two proxies say to each other on a link: frame types, the hello and the
//! welcome, and the limits both sides hold to. Frames are `vargr-sync`'s
//! `[kind u8][len u32 LE][body]`.

use serde::{Deserialize, Serialize};

/// Bumped when either side's bytes change meaning.
pub const PROXY_VERSION: u32 = 2;

pub(crate) const F_DATA: u8 = 1;
pub(crate) const F_REPLY: u8 = 2;
pub(crate) const F_CREDIT: u8 = 3;
pub(crate) const F_ABORT: u8 = 4;
pub(crate) const F_HELLO: u8 = 5;
pub(crate) const F_WELCOME: u8 = 6;

/// Dedup channels: application bytes, and the end of the stream.
pub(crate) const CH_DATA: u32 = 0;
pub(crate) const CH_EOF: u32 = 1;

/// Application bytes a side may have sent that the other has not yet written to its
/// application.
pub const WINDOW: u64 = 8 << 20;
/// Largest link frame body, and the largest decompressed DATA frame.
pub const MAX_FRAME: usize = 8 << 20;

/// Near → far, first frame after authentication.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub version: u32,
    /// The near proxy's name (the far proxy's cache of it).
    pub name: String,
    /// The port the application connected to (chooses the far proxy's --forward).
    pub port: u16,
    pub segmenter: String,
    pub fp_bits: u8,
    pub group: u32,
}

/// Far → near: the server is connected.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Welcome {
    pub name: String,
}

/// One frame, framed.
pub(crate) fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    vargr_sync::put_frame(&mut f, kind, body);
    f
}
