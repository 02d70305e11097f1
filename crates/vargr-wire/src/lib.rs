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
//!
//! ```
//! use bytes::BytesMut;
//! use vargr_wire::{decode_frame, FrameKind, Packet, Value, DEFAULT_MAX_FRAME};
//!
//! // A back-end reports its rank, a histogram and a host name on stream 3, tag 100.
//! let packet = Packet::new(3, 100, "%d %alf %s", vec![
//!     Value::Int(42),
//!     Value::DoubleArray(vec![0.5, 1.5, f64::NAN]),
//!     Value::from("node-17"),
//! ])?;
//!
//! let mut link = BytesMut::new();
//! packet.encode_frame(&mut link);
//!
//! // The receiving side: frames off the byte stream, then the typed payload.
//! let frame = decode_frame(&mut link, DEFAULT_MAX_FRAME)?.expect("a whole frame");
//! assert_eq!(frame.kind, FrameKind::Data);
//! let got = Packet::decode_payload(frame.stream, frame.tag, &frame.payload)?;
//! assert!(got.bitwise_eq(&packet)); // bitwise: NaN survives the trip
//! assert_eq!(got.values[0].as_i64(), Some(42));
//! assert_eq!(got.format.as_str(), "%d %alf %s");
//! # Ok::<(), vargr_wire::WireError>(())
//! ```

mod elem;
mod error;
mod frame;
mod payload;

pub use elem::{
    elem_flags, elem_hint, ElemKind, ParseElemError, FLAG_CODEC, FLAG_ELEM_MASK, FLAG_RAW,
};
pub use error::WireError;
pub use frame::{
    decode_exact, decode_frame, encode_frame, encode_header, frame_len, Frame, FrameKind,
    DEFAULT_MAX_FRAME, HEADER_LEN, MAGIC, VERSION,
};
pub use payload::{array_span, Elem, Field, Format, Packet, Value};
