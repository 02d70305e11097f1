//! Link stages, PATHS' wrappers: what sees each frame a link sends before the socket
//! does, and each frame it receives before the node's protocol does.
//!
//! Emulation (delay), compression and redundancy elimination are stages, so they
//! compose on any link of a tree or a job without the router knowing. This crate is
//! the layer they share and nothing more: the [`Stage`] trait, the [`StageChain`] that
//! runs a link's stages in order and times each, and [`PathInfo`], what a link tells
//! its stages about the connection's path. It does no I/O but load stage plugins, so
//! the crates that implement stages (`vargr-codec`, `vargr-dedup`, `vargr-emu`) need
//! no sockets; the links that run chains are in `vargr-net`, and which stages a link
//! gets is decided in one place, `vargr-links`.
//!
//! User stages (module [`user`]) are stages the user writes, in Rust or in C through
//! the plugin ABI of `include/vargr_stage.h`, registered by name so that a path
//! specification (vargr-paths) can put them on a link.

mod chain;
mod path;
mod plugin;
pub mod user;

pub use chain::{Stage, StageChain};
pub use path::PathInfo;
pub use plugin::STAGE_ABI_VERSION;

/// A stage refused an incoming frame: the link that carried it closes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stage {stage} on the link to {peer} rejected a frame: {reason}")]
pub struct StageError {
    /// The far end of the link, as the link names it.
    pub peer: String,
    /// The stage's [`Stage::name`].
    pub stage: String,
    pub reason: String,
}
