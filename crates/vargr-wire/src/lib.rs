//! The bytes vargr puts on a link, and nothing else.
//!
//! Every message between two vargr processes is a [`Frame`]: a fixed 16-byte header
//! (magic, version, kind, flags, payload length, stream id, tag) followed by the payload.
//! Data frames carry a typed payload described by an MRNet-style format string
//! (`"%d %alf %s"`), see [`Format`], [`Value`] and [`Packet`].
//!
//! The crate is sans-IO: it turns bytes into frames and values and back, and never
//! touches a socket or a clock. Decoding is bounded: a frame larger than the configured
//! maximum, a truncated frame, an unknown kind or a payload that does not match its
//! format is a typed [`WireError`] naming the field, never a panic, and no decoder
//! allocates more than the bytes it was given justify.

mod error;
mod frame;
mod payload;

pub use error::WireError;
pub use frame::{decode_exact, decode_frame, encode_frame, encode_header, Frame, FrameKind, DEFAULT_MAX_FRAME, HEADER_LEN, MAGIC, VERSION};
pub use payload::{Elem, Field, Format, Packet, Value};
