//! The messages exchanged after the handshake (RFC 6143 §7.5 client to server, §7.6
//! server to client).
//!
//! A FramebufferUpdate is decoded into rectangles that keep their encoded bytes: a
//! proxy may pass them on as they are, and [`crate::Decoder`] paints them into a
//! [`crate::Framebuffer`] in order (ZRLE's zlib stream spans rectangles). Finding
//! where a rectangle ends needs the pixel format and, to bound it, the framebuffer's
//! size: [`UpdateContext`] carries both, and DesktopSize changes it.

use bytes::{BufMut, Bytes, BytesMut};

use crate::encoding;
use crate::wire::{decode_front, decode_front_want, Parse, Reader, Step};
use crate::{Limits, PixelFormat, RfbError};

/// A message from client to server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMsg {
    SetPixelFormat(PixelFormat),
    /// Encoding numbers, preferred first (signed: pseudo-encodings are negative).
    SetEncodings(Vec<i32>),
    FramebufferUpdateRequest {
        incremental: bool,
        x: u16,
        y: u16,
        width: u16,
        height: u16,
    },
    KeyEvent {
        down: bool,
        /// An X keysym.
        key: u32,
    },
    PointerEvent {
        buttons: u8,
        x: u16,
        y: u16,
    },
    /// Latin-1 text.
    ClientCutText(Vec<u8>),
}

impl ClientMsg {
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            ClientMsg::SetPixelFormat(pf) => {
                out.put_u8(0);
                out.put_bytes(0, 3);
                pf.encode(out);
            }
            ClientMsg::SetEncodings(list) => {
                out.put_u8(2);
                out.put_u8(0);
                out.put_u16(list.len() as u16);
                for &e in list {
                    out.put_i32(e);
                }
            }
            ClientMsg::FramebufferUpdateRequest {
                incremental,
                x,
                y,
                width,
                height,
            } => {
                out.put_u8(3);
                out.put_u8(*incremental as u8);
                for v in [x, y, width, height] {
                    out.put_u16(*v);
                }
            }
            ClientMsg::KeyEvent { down, key } => {
                out.put_u8(4);
                out.put_u8(*down as u8);
                out.put_u16(0);
                out.put_u32(*key);
            }
            ClientMsg::PointerEvent { buttons, x, y } => {
                out.put_u8(5);
                out.put_u8(*buttons);
                out.put_u16(*x);
                out.put_u16(*y);
            }
            ClientMsg::ClientCutText(text) => {
                out.put_u8(6);
                out.put_bytes(0, 3);
                out.put_u32(text.len() as u32);
                out.put_slice(text);
            }
        }
    }

    /// Decodes one whole message from the front of `buf`, or returns `None` and leaves
    /// `buf` alone while it is incomplete.
    pub fn decode(buf: &mut BytesMut, limits: &Limits) -> Result<Option<ClientMsg>, RfbError> {
        decode_front(buf, |r| ClientMsg::parse(r, limits))
    }

    pub(crate) fn parse(r: &mut Reader, limits: &Limits) -> Parse<ClientMsg> {
        Ok(match r.u8()? {
            0 => {
                r.skip(3)?;
                ClientMsg::SetPixelFormat(PixelFormat::read(&mut r.bytes(PixelFormat::LEN)?))
            }
            2 => {
                r.skip(1)?;
                let n = r.u16()?;
                if n > limits.max_encodings {
                    return Err(Step::Bad(RfbError::TooLong {
                        message: "SetEncodings",
                        field: "number-of-encodings",
                        len: n as u64,
                        max: limits.max_encodings as u64,
                    }));
                }
                let raw = r.bytes(n as usize * 4)?;
                ClientMsg::SetEncodings(
                    raw.chunks_exact(4)
                        .map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                )
            }
            3 => ClientMsg::FramebufferUpdateRequest {
                incremental: r.u8()? != 0,
                x: r.u16()?,
                y: r.u16()?,
                width: r.u16()?,
                height: r.u16()?,
            },
            4 => {
                let down = r.u8()? != 0;
                r.skip(2)?;
                ClientMsg::KeyEvent {
                    down,
                    key: r.u32()?,
                }
            }
            5 => ClientMsg::PointerEvent {
                buttons: r.u8()?,
                x: r.u16()?,
                y: r.u16()?,
            },
            6 => {
                r.skip(3)?;
                ClientMsg::ClientCutText(r.string(
                    "ClientCutText",
                    "length",
                    limits.max_cut_text,
                )?)
            }
            kind => {
                return Err(Step::Bad(RfbError::UnknownMessage {
                    direction: "client-to-server",
                    kind,
                }))
            }
        })
    }
}

/// One rectangle of a FramebufferUpdate, its encoded bytes kept as they came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rect {
    pub x: u16,
    pub y: u16,
    pub width: u16,
    pub height: u16,
    /// The encoding number ([`crate::encoding`] names them).
    pub encoding: i32,
    /// The bytes after the 12-byte header, in the pixel format of the update.
    pub data: Bytes,
}

impl Rect {
    /// A CopyRect rectangle: copy `width × height` from (src_x, src_y) to (x, y).
    pub fn copy_rect(x: u16, y: u16, width: u16, height: u16, src_x: u16, src_y: u16) -> Rect {
        let mut data = BytesMut::with_capacity(4);
        data.put_u16(src_x);
        data.put_u16(src_y);
        Rect {
            x,
            y,
            width,
            height,
            encoding: encoding::COPY_RECT,
            data: data.freeze(),
        }
    }

    /// The DesktopSize pseudo-rectangle: the framebuffer is now `width × height`.
    pub fn desktop_size(width: u16, height: u16) -> Rect {
        Rect {
            x: 0,
            y: 0,
            width,
            height,
            encoding: encoding::DESKTOP_SIZE,
            data: Bytes::new(),
        }
    }

    pub fn encode(&self, out: &mut BytesMut) {
        for v in [self.x, self.y, self.width, self.height] {
            out.put_u16(v);
        }
        out.put_i32(self.encoding);
        out.put_slice(&self.data);
    }
}

/// What a server-to-client decoder needs to know: the pixel format the client set and
/// the framebuffer's size (which DesktopSize rectangles change as they are decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateContext {
    pub pixel_format: PixelFormat,
    pub width: u16,
    pub height: u16,
}

/// A message from server to client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerMsg {
    FramebufferUpdate(Vec<Rect>),
    SetColourMapEntries {
        first_colour: u16,
        /// Red, green, blue, each 0-65535.
        colours: Vec<[u16; 3]>,
    },
    Bell,
    /// Latin-1 text.
    ServerCutText(Vec<u8>),
}

impl ServerMsg {
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            ServerMsg::FramebufferUpdate(rects) => {
                out.put_u8(0);
                out.put_u8(0);
                out.put_u16(rects.len() as u16);
                for r in rects {
                    r.encode(out);
                }
            }
            ServerMsg::SetColourMapEntries {
                first_colour,
                colours,
            } => {
                out.put_u8(1);
                out.put_u8(0);
                out.put_u16(*first_colour);
                out.put_u16(colours.len() as u16);
                for c in colours {
                    c.iter().for_each(|v| out.put_u16(*v));
                }
            }
            ServerMsg::Bell => out.put_u8(2),
            ServerMsg::ServerCutText(text) => {
                out.put_u8(3);
                out.put_bytes(0, 3);
                out.put_u32(text.len() as u32);
                out.put_slice(text);
            }
        }
    }

    /// Decodes one whole message from the front of `buf`, or returns `None` and leaves
    /// `buf` (and `ctx`) alone while it is incomplete. Every rectangle is checked
    /// against the framebuffer and its data against `limits` before it is waited for.
    pub fn decode(
        buf: &mut BytesMut,
        ctx: &mut UpdateContext,
        limits: &Limits,
    ) -> Result<Option<ServerMsg>, RfbError> {
        Ok(ServerMsg::decode_want(buf, ctx, limits)?.ok())
    }

    /// Like [`ServerMsg::decode`], but an incomplete message gives the number of bytes
    /// it needs at least, so that a caller receiving a large update in pieces can wait
    /// for them instead of parsing it again at every piece.
    pub fn decode_want(
        buf: &mut BytesMut,
        ctx: &mut UpdateContext,
        limits: &Limits,
    ) -> Result<Result<ServerMsg, usize>, RfbError> {
        let mut next = ctx.clone();
        let r = decode_front_want(buf, |r| ServerMsg::parse(r, &mut next, limits))?;
        if r.is_ok() {
            *ctx = next;
        }
        Ok(r)
    }

    pub(crate) fn parse(
        r: &mut Reader,
        ctx: &mut UpdateContext,
        limits: &Limits,
    ) -> Parse<ServerMsg> {
        Ok(match r.u8()? {
            0 => {
                r.skip(1)?;
                let n = r.u16()?;
                // Grows as rectangles arrive: a hostile count reserves nothing.
                let mut rects = Vec::new();
                for _ in 0..n {
                    if r.pos() as u64 > limits.max_update_bytes {
                        return Err(Step::Bad(RfbError::TooLong {
                            message: "FramebufferUpdate",
                            field: "rectangles",
                            len: r.pos() as u64,
                            max: limits.max_update_bytes,
                        }));
                    }
                    rects.push(parse_rect(r, ctx, limits)?);
                }
                ServerMsg::FramebufferUpdate(rects)
            }
            1 => {
                r.skip(1)?;
                let first_colour = r.u16()?;
                let n = r.u16()?;
                let raw = r.bytes(n as usize * 6)?;
                let colours = raw
                    .chunks_exact(6)
                    .map(|c| {
                        [
                            u16::from_be_bytes([c[0], c[1]]),
                            u16::from_be_bytes([c[2], c[3]]),
                            u16::from_be_bytes([c[4], c[5]]),
                        ]
                    })
                    .collect();
                ServerMsg::SetColourMapEntries {
                    first_colour,
                    colours,
                }
            }
            2 => ServerMsg::Bell,
            3 => {
                r.skip(3)?;
                ServerMsg::ServerCutText(r.string(
                    "ServerCutText",
                    "length",
                    limits.max_cut_text,
                )?)
            }
            kind => {
                return Err(Step::Bad(RfbError::UnknownMessage {
                    direction: "server-to-client",
                    kind,
                }))
            }
        })
    }
}

fn parse_rect(r: &mut Reader, ctx: &mut UpdateContext, limits: &Limits) -> Parse<Rect> {
    let (x, y, width, height) = (r.u16()?, r.u16()?, r.u16()?, r.u16()?);
    let enc = r.i32()?;
    if enc == encoding::DESKTOP_SIZE {
        limits.check_size("DesktopSize", width, height)?;
        ctx.width = width;
        ctx.height = height;
    } else if x as u32 + width as u32 > ctx.width as u32
        || y as u32 + height as u32 > ctx.height as u32
    {
        return Err(Step::Bad(RfbError::OutOfBounds {
            message: "FramebufferUpdate",
            x: x as u32,
            y: y as u32,
            width: width as u32,
            height: height as u32,
            fb_width: ctx.width,
            fb_height: ctx.height,
        }));
    }
    let start = r.pos();
    encoding::skip_payload(r, enc, width, height, ctx, limits)?;
    let data = Bytes::copy_from_slice(r.since(start));
    Ok(Rect {
        x,
        y,
        width,
        height,
        encoding: enc,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> UpdateContext {
        UpdateContext {
            pixel_format: PixelFormat::RGB888,
            width: 8,
            height: 4,
        }
    }

    #[test]
    fn client_messages_from_hand_made_bytes() {
        let l = Limits::default();
        // FramebufferUpdateRequest: type 3, incremental 1, x 1, y 2, w 3, h 4.
        let mut b = BytesMut::from(&[3, 1, 0, 1, 0, 2, 0, 3, 0, 4][..]);
        assert_eq!(
            ClientMsg::decode(&mut b, &l).unwrap(),
            Some(ClientMsg::FramebufferUpdateRequest {
                incremental: true,
                x: 1,
                y: 2,
                width: 3,
                height: 4
            })
        );
        // SetEncodings: type 2, pad, count 2, then 16 (ZRLE) and -223 (DesktopSize).
        let mut b = BytesMut::from(&[2, 0, 0, 2, 0, 0, 0, 16, 0xff, 0xff, 0xff, 0x21][..]);
        assert_eq!(
            ClientMsg::decode(&mut b, &l).unwrap(),
            Some(ClientMsg::SetEncodings(vec![16, -223]))
        );
        // ClientCutText longer than the limit is refused from its header alone.
        let mut b = BytesMut::from(&[6, 0, 0, 0, 0x10, 0, 0, 0][..]);
        assert!(matches!(
            ClientMsg::decode(&mut b, &l),
            Err(RfbError::TooLong {
                message: "ClientCutText",
                ..
            })
        ));
        let mut b = BytesMut::from(&[9u8][..]);
        assert!(matches!(
            ClientMsg::decode(&mut b, &l),
            Err(RfbError::UnknownMessage { kind: 9, .. })
        ));
    }

    #[test]
    fn rectangles_are_bounded_by_the_framebuffer() {
        let l = Limits::default();
        // FramebufferUpdate with one Raw rectangle at 7,0 of 2x1: past the 8-pixel width.
        let mut b = BytesMut::from(&[0, 0, 0, 1, 0, 7, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0][..]);
        assert!(matches!(
            ServerMsg::decode(&mut b, &mut ctx(), &l),
            Err(RfbError::OutOfBounds { .. })
        ));
        // DesktopSize to 16x4 then the same rectangle fits; its 8 bytes are missing.
        let mut b = BytesMut::from(
            &[
                0, 0, 0, 2, 0, 0, 0, 0, 0, 16, 0, 4, 0xff, 0xff, 0xff, 0x21, 0, 7, 0, 0, 0, 2, 0,
                1, 0, 0, 0, 0,
            ][..],
        );
        let mut c = ctx();
        assert_eq!(
            ServerMsg::decode_want(&mut b, &mut c, &l).unwrap(),
            Err(28 + 8)
        );
        assert_eq!(c.width, 8, "an incomplete update leaves the context alone");
        b.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let m = ServerMsg::decode(&mut b, &mut c, &l).unwrap().unwrap();
        assert_eq!(c.width, 16);
        let ServerMsg::FramebufferUpdate(rects) = m else {
            panic!()
        };
        assert_eq!(rects[1].data.as_ref(), &[1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn an_update_is_bounded_as_a_whole() {
        let l = Limits {
            max_update_bytes: 40,
            ..Limits::default()
        };
        // 4 Raw rectangles of 1x1 (16 bytes each with the header): the third starts
        // at byte 36, the fourth would start at 52, past 40.
        let mut b = BytesMut::from(&[0u8, 0, 0, 4][..]);
        for _ in 0..4 {
            b.extend_from_slice(&[0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 9, 9, 9, 0]);
        }
        assert!(matches!(
            ServerMsg::decode(&mut b.clone(), &mut ctx(), &l),
            Err(RfbError::TooLong {
                message: "FramebufferUpdate",
                ..
            })
        ));
        b[3] = 3;
        assert!(ServerMsg::decode(&mut b, &mut ctx(), &l).unwrap().is_some());
    }
}
