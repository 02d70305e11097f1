//! The RFB (VNC) protocol of RFC 6143 as sans-IO code: the first layer of Varg, the
//! proxy pair that sends a viewer only the screen regions it has not seen (issue 28).
//!
//! Nothing here touches a socket or a clock, so the proxy, the tests and fuzz targets
//! drive the same code:
//!
//! - [`ClientSide`] and [`ServerSide`] are the two ends of a connection as state
//!   machines: bytes in, [`ClientEvent`]s or [`ServerEvent`]s and bytes out. They
//!   negotiate versions 3.3, 3.7 and 3.8 with security None or VNC authentication
//!   ([`vnc_auth_response`]), and can hand the challenge to the caller, as a proxy
//!   relaying authentication needs.
//! - Every message has a type with `encode` and an incremental `decode` that consumes
//!   only whole messages: the handshake's ([`ProtocolVersion`], [`SecurityOffer`],
//!   [`SecurityResult`], [`ServerInit`], …), then [`ClientMsg`] and [`ServerMsg`].
//!   A FramebufferUpdate's [`Rect`]s keep their encoded bytes, so they can be passed
//!   on unchanged or painted.
//! - [`PixelFormat`] reads and writes any true-colour format; [`Framebuffer`] holds
//!   pixels in one canonical format (`0x00RRGGBB`).
//! - [`Decoder`] paints rectangles (Raw, CopyRect, RRE, Hextile, ZRLE, Tight without
//!   JPEG, DesktopSize) into a framebuffer and [`Encoder`] makes them (Raw, RRE,
//!   Hextile, ZRLE, Tight without JPEG) from one; both keep the connection's zlib
//!   streams.
//!
//! Every length read from the wire is checked against [`Limits`] before anything is
//! allocated or waited for, and errors ([`RfbError`]) name the message and field.
//!
//! ```
//! use vargr_rfb::{security, ClientConfig, ClientSide, PixelFormat, ProtocolVersion};
//! use vargr_rfb::{ServerConfig, ServerEvent, ServerInit, ServerSide};
//!
//! let mut viewer = ClientSide::new(ClientConfig::default());
//! let mut server = ServerSide::new(ServerConfig {
//!     max_version: ProtocolVersion::V3_8,
//!     security_types: vec![security::NONE],
//!     password: None,
//!     challenge: [7; 16], // random in real use
//!     limits: Default::default(),
//! });
//! let init = ServerInit { width: 64, height: 48, pixel_format: PixelFormat::RGB888, name: b"desk".to_vec() };
//! // Whatever carries the bytes (sockets, a proxy's links) sits between the two.
//! while !viewer.is_ready() {
//!     viewer.receive(&server.take_output());
//!     while let Some(_event) = viewer.poll_event()? {}
//!     server.receive(&viewer.take_output());
//!     while let Some(event) = server.poll_event()? {
//!         if let ServerEvent::ClientInit(_) = event {
//!             server.send_server_init(&init)?;
//!         }
//!     }
//! }
//! assert_eq!(viewer.context().map(|c| (c.width, c.height)), Some((64, 48)));
//! # Ok::<(), vargr_rfb::RfbError>(())
//! ```

mod auth;
mod client;
pub mod encoding;
mod error;
mod framebuffer;
mod handshake;
mod limits;
mod msg;
mod pixel;
mod server;
mod wire;

pub use auth::vnc_auth_response;
pub use client::{ClientConfig, ClientEvent, ClientSide};
pub use encoding::{Decoder, Encoder};
pub use error::RfbError;
pub use framebuffer::Framebuffer;
pub use handshake::{
    security, ClientInit, ProtocolVersion, SecurityChoice, SecurityOffer, SecurityResult,
    ServerInit, VncChallenge, VncResponse,
};
pub use limits::Limits;
pub use msg::{ClientMsg, Rect, ServerMsg, UpdateContext};
pub use pixel::{convert_pixel, convert_pixels, PixelFormat};
pub use server::{ServerConfig, ServerEvent, ServerSide};
