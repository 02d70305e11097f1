//! Frame header layout and the streaming frame decoder.
//!
//! ```text
//! offset  size  field
//!      0     1  magic    (0xA5)
//!      1     1  version  (1)
//!      2     1  kind     (FrameKind)
//!      3     1  flags    (kind-specific)
//!      4     4  length   payload bytes, u32 LE
//!      8     4  stream   stream id, u32 LE
//!     12     4  tag      i32 LE
//!     16     -  payload
//! ```

use bytes::{Bytes, BytesMut};

use crate::WireError;

pub const MAGIC: u8 = 0xA5;
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 16;
/// Default largest payload accepted from a peer (64 MiB).
pub const DEFAULT_MAX_FRAME: usize = 64 << 20;

macro_rules! frame_kinds {
    ($( $(#[$doc:meta])* $name:ident = $val:expr, )*) => {
        /// Every message type of the vargr protocol, in one place.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum FrameKind { $( $(#[$doc])* $name = $val, )* }

        impl FrameKind {
            pub fn from_u8(v: u8) -> Result<Self, WireError> {
                match v {
                    $( $val => Ok(FrameKind::$name), )*
                    other => Err(WireError::UnknownKind(other)),
                }
            }
            pub fn name(self) -> &'static str {
                match self { $( FrameKind::$name => stringify!($name), )* }
            }
        }
    };
}

frame_kinds! {
    /// Acceptor → connector: a random nonce to prove knowledge of the network secret.
    Challenge = 1,
    /// Connector → acceptor: identity, own nonce and HMAC over both nonces.
    Proof = 2,
    /// Acceptor → connector: HMAC proving the acceptor knows the secret too.
    Welcome = 3,
    /// Either side: authentication or admission refused; payload is a UTF-8 reason.
    Refused = 4,
    /// Parent → child: the child's sub-tree and run configuration.
    Subtree = 5,
    /// Child → parent: the sub-tree is up; payload lists its reachable back-ends.
    Ready = 6,
    /// Typed or raw application data on a stream.
    Data = 16,
    /// Front-end → down: create a stream (communicator members, filters, mode).
    StreamOpen = 17,
    /// Front-end → down: close a stream.
    StreamClose = 18,
    /// Liveness on an otherwise idle link.
    Heartbeat = 19,
    /// Orderly shutdown of the receiving sub-tree.
    Shutdown = 20,
    /// A failure report travelling towards the front-end (lost node, filter error).
    Fault = 21,
    /// Back-end to back-end data, routed through the tree by destination rank.
    PointToPoint = 22,
    /// Acknowledges a Shutdown: the sub-tree below has exited.
    ShutdownDone = 23,
    /// To the rendezvous (attach mode): a leaf parent's address, or a back-end's rank.
    Attach = 24,
    /// From the rendezvous: where an attaching back-end finds its parent.
    AttachReply = 25,
    /// Parent → child: one round of clock-skew measurement (stream = round number).
    ClockPing = 26,
    /// Child → parent: the answer to a ClockPing, carrying the child's clock.
    ClockPong = 27,
    /// Parent → child: the child's cumulative clock alignment to the front-end.
    ClockSet = 28,
    /// Towards the front-end: one node's clock alignment, for the front-end's map.
    ClockReport = 29,
    /// Parent → children (low priority): a monitor pull; stream = pull id, payload = the
    /// scope as JSON.
    MonitorPull = 30,
    /// Child → parent (low priority): one chunk of a sub-tree's answers to a pull;
    /// stream = pull id, tag = chunks still to come (0 on the last).
    MonitorData = 31,
    /// Between the two codec stages of one link: decompression times the receiver
    /// measured, for the sender's cost model; consumed by the stage, never routed.
    CodecReport = 32,
    /// Between the two dedup stages of one link: the two-level fingerprint protocol's
    /// bytes (tag 0: the sender's stream; tag 1: the receiver's requests and
    /// acknowledgements); consumed by the stages, never routed.
    Dedup = 33,
    /// Between the two codec stages of one link: a ping-pong probe of the link's speed
    /// (stream = probe id; the payload is padding); consumed by the stage, never routed.
    CodecProbe = 34,
    /// The answer to a CodecProbe (stream = its id, tag = the probe's size); consumed by
    /// the stage that sent the probe.
    CodecEcho = 35,
    /// Orphan → ancestor, right after the handshake: "I am node N, orphaned by node M";
    /// the payload (JSON) lists its back-ends and how far it got on each stream.
    Adopt = 36,
    /// Ancestor → orphan: adopted; the payload (JSON) names the new parent and its own
    /// ancestors.
    Adopted = 37,
    /// Child → parent on a stream: the child's whole sub-tree missed one wave (it was
    /// orphaned when it was multicast), so the wave must not wait for it.
    WaveHole = 38,
    /// Child → parent: "a value of element `stream` newer than mine"; tag 1 with the
    /// version held as 8 bytes LE in the payload, tag 0 (empty payload) for none yet.
    ObserveReq = 39,
    /// Parent → child: the newest value of element `stream` the parent holds; payload =
    /// version (8 bytes LE) then the value.
    ObserveVal = 40,
    /// Towards the front-end: a back-end publishes a value of element `stream`; payload
    /// as ObserveVal.
    ObservePublish = 41,
}

/// One protocol message. The payload is a reference-counted slice of the read buffer.
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: FrameKind,
    pub flags: u8,
    pub stream: u32,
    pub tag: i32,
    pub payload: Bytes,
    /// The whole frame as it was read (header and payload), so that a node forwarding it
    /// unchanged sends the same buffer instead of copying; empty for frames built here.
    wire: Bytes,
}

impl PartialEq for Frame {
    fn eq(&self, other: &Frame) -> bool {
        self.kind == other.kind
            && self.flags == other.flags
            && self.stream == other.stream
            && self.tag == other.tag
            && self.payload == other.payload
    }
}

impl Eq for Frame {}

impl Frame {
    pub fn new(kind: FrameKind, stream: u32, tag: i32, payload: impl Into<Bytes>) -> Self {
        Frame {
            kind,
            flags: 0,
            stream,
            tag,
            payload: payload.into(),
            wire: Bytes::new(),
        }
    }

    /// The encoded frame: the received buffer itself when the frame was decoded (no copy),
    /// a fresh encoding otherwise.
    pub fn to_wire(&self) -> Bytes {
        if !self.wire.is_empty() {
            return self.wire.clone();
        }
        let mut out = BytesMut::with_capacity(self.wire_len());
        encode_frame(self, &mut out);
        out.freeze()
    }

    /// Bytes this frame occupies on the wire.
    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }
}

/// Appends the header of a frame whose payload is `payload_len` bytes.
pub fn encode_header(
    kind: FrameKind,
    flags: u8,
    stream: u32,
    tag: i32,
    payload_len: usize,
    out: &mut BytesMut,
) {
    let len = u32::try_from(payload_len).expect("payload length checked by caller");
    // Built on the stack and appended at once: one capacity check instead of seven.
    let mut h = [0u8; HEADER_LEN];
    h[0] = MAGIC;
    h[1] = VERSION;
    h[2] = kind as u8;
    h[3] = flags;
    h[4..8].copy_from_slice(&len.to_le_bytes());
    h[8..12].copy_from_slice(&stream.to_le_bytes());
    h[12..16].copy_from_slice(&tag.to_le_bytes());
    out.extend_from_slice(&h);
}

/// Appends `frame` to `out`.
pub fn encode_frame(frame: &Frame, out: &mut BytesMut) {
    encode_header(
        frame.kind,
        frame.flags,
        frame.stream,
        frame.tag,
        frame.payload.len(),
        out,
    );
    out.extend_from_slice(&frame.payload);
}

/// The whole length (header and payload) of the frame at the front of `buf`, once its
/// header is complete: `Ok(None)` while fewer than [`HEADER_LEN`] bytes are there, and
/// an error as soon as the bytes present are known to be no valid header, without
/// waiting for a payload that would exceed `max_payload`.
pub fn frame_len(buf: &[u8], max_payload: usize) -> Result<Option<usize>, WireError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != MAGIC {
        return Err(WireError::BadMagic {
            found: buf[0],
            expected: MAGIC,
        });
    }
    if buf.len() >= 2 && buf[1] != VERSION {
        return Err(WireError::BadVersion {
            found: buf[1],
            supported: VERSION,
        });
    }
    if buf.len() >= 3 {
        FrameKind::from_u8(buf[2])?;
    }
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let len = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
    if len > max_payload {
        return Err(WireError::FrameTooLarge {
            len,
            max: max_payload,
        });
    }
    Ok(Some(HEADER_LEN + len))
}

/// Takes one complete frame off the front of `buf`.
///
/// Returns `Ok(None)` when `buf` holds only part of a frame (read more and call again),
/// and an error as soon as the header is known to be bad, without waiting for a payload
/// that would exceed `max_payload`.
pub fn decode_frame(buf: &mut BytesMut, max_payload: usize) -> Result<Option<Frame>, WireError> {
    let Some(total) = frame_len(buf, max_payload)? else {
        return Ok(None);
    };
    let len = total - HEADER_LEN;
    if buf.len() < HEADER_LEN + len {
        buf.reserve(HEADER_LEN + len - buf.len());
        return Ok(None);
    }
    let wire = buf.split_to(HEADER_LEN + len).freeze();
    let h = &wire[..HEADER_LEN];
    let kind = FrameKind::from_u8(h[2])?;
    let flags = h[3];
    let stream = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    let tag = i32::from_le_bytes([h[12], h[13], h[14], h[15]]);
    Ok(Some(Frame {
        kind,
        flags,
        stream,
        tag,
        payload: wire.slice(HEADER_LEN..),
        wire,
    }))
}

/// Decodes exactly one frame that must fill `bytes` completely (datagram-style use).
pub fn decode_exact(bytes: &[u8], max_payload: usize) -> Result<Frame, WireError> {
    let mut buf = BytesMut::from(bytes);
    match decode_frame(&mut buf, max_payload)? {
        Some(f) if buf.is_empty() => Ok(f),
        Some(f) => Err(WireError::TrailingBytes {
            format: f.kind.name().to_string(),
            extra: buf.len(),
        }),
        None => {
            let needed = if bytes.len() < HEADER_LEN {
                HEADER_LEN
            } else {
                HEADER_LEN + u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize
            };
            Err(WireError::Truncated {
                what: "frame",
                needed,
                available: bytes.len(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    #[test]
    fn round_trip_and_split_reads() {
        let f = Frame::new(FrameKind::Data, 7, -3, &b"hello"[..]);
        let mut out = BytesMut::new();
        encode_frame(&f, &mut out);
        encode_frame(&f, &mut out);
        let all = out.freeze();
        // Feed one byte at a time: the decoder must wait, then yield both frames.
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in all.iter() {
            buf.put_u8(*b);
            while let Some(fr) = decode_frame(&mut buf, 1024).unwrap() {
                got.push(fr);
            }
        }
        assert_eq!(got, vec![f.clone(), f]);
    }

    #[test]
    fn rejects_bad_header_fields_early() {
        let mut b = BytesMut::from(&[0x00u8][..]);
        assert!(matches!(
            decode_frame(&mut b, 10),
            Err(WireError::BadMagic { .. })
        ));
        let mut b = BytesMut::from(&[MAGIC, 9][..]);
        assert!(matches!(
            decode_frame(&mut b, 10),
            Err(WireError::BadVersion { found: 9, .. })
        ));
        let mut b = BytesMut::from(&[MAGIC, VERSION, 200][..]);
        assert_eq!(decode_frame(&mut b, 10), Err(WireError::UnknownKind(200)));
        let mut out = BytesMut::new();
        encode_header(FrameKind::Data, 0, 0, 0, 11, &mut out);
        assert_eq!(
            decode_frame(&mut out, 10),
            Err(WireError::FrameTooLarge { len: 11, max: 10 })
        );
    }

    #[test]
    fn decode_exact_reports_truncation() {
        let f = Frame::new(FrameKind::Heartbeat, 0, 0, &b"abc"[..]);
        let mut out = BytesMut::new();
        encode_frame(&f, &mut out);
        let err = decode_exact(&out[..out.len() - 1], 100).unwrap_err();
        assert_eq!(
            err,
            WireError::Truncated {
                what: "frame",
                needed: 19,
                available: 18
            }
        );
    }
}
