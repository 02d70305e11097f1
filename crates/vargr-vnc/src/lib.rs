//! Varg's VNC proxy pair (issue 28) as sans-IO code.
//!
//! A VNC server and its viewers talk RFB; between them sit two proxies joined by a
//! (slow) link that carries [`ProxyMsg`]s:
//!
//! - [`FarSide`], beside the server, is one RFB client. It asks for RGB888 and for
//!   the encodings vargr-rfb decodes, keeps one incremental update request
//!   outstanding so its shadow framebuffer is always current, and forwards every
//!   changed rectangle as canonical pixels ([`Region`]).
//! - [`NearSide`], beside the viewers, is an RFB server to each of them. It paints
//!   the regions into a mirror framebuffer, remembers per viewer which areas it has
//!   not received, and answers each viewer's update requests in the best encoding
//!   that viewer accepts, in its own pixel format. Input goes back unchanged.
//!
//! Canonical pixels on the link are what makes the later steps possible: the 2-D
//! segmenter and the fingerprint cache need the same bytes for the same picture,
//! whatever encoding the server chose. Nothing here touches a socket or a clock;
//! callers move bytes between `take_*_output` and `receive_*`.
//!
//! Between the sides, [`FarLink`] and [`NearLink`] carry the messages through the
//! dedup protocol (module [`link`]): Varg proper.
//!
//! Authentication is not relayed: several viewers share one connection to the server,
//! whose challenge answers one client. The far side answers the server's VNC
//! authentication with its password, and the near side asks its viewers for one
//! ([`NearConfig::password`]), or offers None where the viewers are trusted.

mod dirty;
mod error;
mod far;
pub mod link;
mod near;
mod proto;
pub mod record;
mod squeeze;

pub use error::VncError;
pub use far::{FarConfig, FarSide, Outgoing, RegionCut};
pub use link::{FarLink, LinkConfig, NearLink};
pub use near::{NearConfig, NearSide, ViewerId};
pub use proto::{ProxyLimits, ProxyMsg, Region};
pub use record::{RecordError, RecordReader, RecordWriter};
