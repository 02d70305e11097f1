//! The messages between the far and the near side.
//!
//! Each is a type byte, a u32 body length and the body, so a decoder checks the
//! length against [`ProxyLimits`] before it waits for or holds the bytes. Pixels are
//! canonical (`0x00RRGGBB`, three bytes each on the link): the same picture gives
//! the same bytes whatever the server's encoding, which the dedup layer relies on.

use bytes::{Buf, BufMut, BytesMut};
use vargr_rfb::{ClientMsg, Framebuffer, Limits};

use crate::VncError;

const HEADER: usize = 5;

const INIT: u8 = 0;
const UPDATE: u8 = 1;
const RESIZE: u8 = 2;
const BELL: u8 = 3;
const CUT_TEXT: u8 = 4;
const INPUT: u8 = 5;
const REQUEST: u8 = 6;
const COPY: u8 = 7;

/// Bounds on what a peer may send on the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyLimits {
    /// One message's body. The far side splits updates to stay below it.
    pub max_message: u32,
    /// Bounds for the RFB parts (desktop name, cut text, framebuffer size).
    pub rfb: Limits,
}

impl Default for ProxyLimits {
    fn default() -> ProxyLimits {
        ProxyLimits {
            max_message: 64 << 20,
            rfb: Limits::default(),
        }
    }
}

/// A changed area and its pixels, row by row, in canonical `0x00RRGGBB`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub x: u16,
    pub y: u16,
    pub width: u16,
    pub height: u16,
    pub pixels: Vec<u32>,
}

impl Region {
    /// Bytes on the link.
    pub fn encoded_len(&self) -> usize {
        8 + 3 * self.pixels.len()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyMsg {
    /// Far to near, first: the server's screen.
    Init {
        width: u16,
        height: u16,
        name: Vec<u8>,
    },
    /// Far to near: areas that changed, applied in order.
    Update(Vec<Region>),
    /// Far to near: the screen's new size (pixels of the shared area stay).
    Resize {
        width: u16,
        height: u16,
    },
    Bell,
    /// Far to near: the server's cut text.
    CutText(Vec<u8>),
    /// Near to far: a viewer's KeyEvent, PointerEvent or ClientCutText, for the server.
    Input(ClientMsg),
    /// Far to near: the area at (`x`, `y`) becomes a copy of the one at (`src_x`,
    /// `src_y`) (the server's CopyRect, sent when the near side has the source as
    /// the shadow had it).
    Copy {
        src_x: u16,
        src_y: u16,
        x: u16,
        y: u16,
        width: u16,
        height: u16,
    },
    /// Near to far: send this area of the shadow (a near side that lost or never had it).
    Request {
        x: u16,
        y: u16,
        width: u16,
        height: u16,
    },
}

impl ProxyMsg {
    /// A name for errors.
    pub fn name(&self) -> &'static str {
        match self {
            ProxyMsg::Init { .. } => "Init",
            ProxyMsg::Update(_) => "Update",
            ProxyMsg::Resize { .. } => "Resize",
            ProxyMsg::Bell => "Bell",
            ProxyMsg::CutText(_) => "CutText",
            ProxyMsg::Input(_) => "Input",
            ProxyMsg::Request { .. } => "Request",
            ProxyMsg::Copy { .. } => "Copy",
        }
    }

    /// Paints a screen message (Init, Update, Copy, Resize) on `screen`, as a viewer of
    /// the stream would; the others leave it alone. For replays of recordings.
    pub fn paint_on(&self, screen: &mut Option<Framebuffer>) -> Result<(), VncError> {
        if let ProxyMsg::Init { width, height, .. } = self {
            *screen = Some(Framebuffer::new(*width, *height));
            return Ok(());
        }
        let Some(fb) = screen else {
            return Err(VncError::Unexpected {
                message: self.name(),
                when: "before Init",
            });
        };
        match self {
            ProxyMsg::Update(regions) => {
                for r in regions {
                    fb.put_rect(r.x, r.y, r.width, r.height, &r.pixels)?;
                }
            }
            ProxyMsg::Copy {
                src_x,
                src_y,
                x,
                y,
                width,
                height,
            } => fb.copy_rect(*src_x, *src_y, *x, *y, *width, *height)?,
            ProxyMsg::Resize { width, height } => fb.resize(*width, *height),
            _ => {}
        }
        Ok(())
    }

    /// Appends the message. An Input must be a KeyEvent, PointerEvent or
    /// ClientCutText: the far side refuses anything else.
    pub fn encode(&self, out: &mut BytesMut) {
        let start = out.len();
        out.put_u8(0);
        out.put_u32(0);
        let kind = match self {
            ProxyMsg::Init {
                width,
                height,
                name,
            } => {
                out.put_u16(*width);
                out.put_u16(*height);
                out.put_u32(name.len() as u32);
                out.put_slice(name);
                INIT
            }
            ProxyMsg::Update(regions) => {
                out.put_u32(regions.len() as u32);
                for r in regions {
                    for v in [r.x, r.y, r.width, r.height] {
                        out.put_u16(v);
                    }
                    out.reserve(3 * r.pixels.len());
                    for &p in &r.pixels {
                        out.put_slice(&p.to_be_bytes()[1..]);
                    }
                }
                UPDATE
            }
            ProxyMsg::Resize { width, height } => {
                out.put_u16(*width);
                out.put_u16(*height);
                RESIZE
            }
            ProxyMsg::Bell => BELL,
            ProxyMsg::CutText(text) => {
                out.put_slice(text);
                CUT_TEXT
            }
            ProxyMsg::Input(msg) => {
                msg.encode(out);
                INPUT
            }
            ProxyMsg::Request {
                x,
                y,
                width,
                height,
            } => {
                for v in [*x, *y, *width, *height] {
                    out.put_u16(v);
                }
                REQUEST
            }
            ProxyMsg::Copy {
                src_x,
                src_y,
                x,
                y,
                width,
                height,
            } => {
                for v in [*src_x, *src_y, *x, *y, *width, *height] {
                    out.put_u16(v);
                }
                COPY
            }
        };
        let len = (out.len() - start - HEADER) as u32;
        out[start] = kind;
        out[start + 1..start + HEADER].copy_from_slice(&len.to_be_bytes());
    }

    /// Decodes one whole message from the front of `buf`, or returns `None` and
    /// leaves `buf` alone while it is incomplete. The length is checked first.
    pub fn decode(buf: &mut BytesMut, limits: &ProxyLimits) -> Result<Option<ProxyMsg>, VncError> {
        if buf.len() < HEADER {
            return Ok(None);
        }
        let kind = buf[0];
        let name = match kind {
            INIT => "Init",
            UPDATE => "Update",
            RESIZE => "Resize",
            BELL => "Bell",
            CUT_TEXT => "CutText",
            INPUT => "Input",
            REQUEST => "Request",
            COPY => "Copy",
            k => return Err(VncError::UnknownMessage(k)),
        };
        let len = u32::from_be_bytes(buf[1..HEADER].try_into().expect("4 bytes"));
        if len > limits.max_message {
            return Err(VncError::TooLong {
                message: name,
                field: "length",
                len: len as u64,
                max: limits.max_message as u64,
            });
        }
        if buf.len() < HEADER + len as usize {
            return Ok(None);
        }
        buf.advance(HEADER);
        let body = buf.split_to(len as usize);
        let mut b = Body { name, rest: &body };
        let msg = match kind {
            INIT => {
                let (width, height) = (b.u16()?, b.u16()?);
                check_size(name, width, height, &limits.rfb)?;
                let n = b.u32()?;
                if n > limits.rfb.max_name {
                    return Err(too_long(name, "name", n, limits.rfb.max_name));
                }
                ProxyMsg::Init {
                    width,
                    height,
                    name: b.take(n as usize)?.to_vec(),
                }
            }
            UPDATE => {
                let n = b.u32()?;
                // Each region takes 8 bytes at least: a count the body cannot hold
                // is refused before anything is allocated for it.
                if n as usize > b.rest.len() / 8 {
                    return Err(b.corrupt(format!("{n} regions in {} bytes", b.rest.len())));
                }
                let mut regions = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let (x, y, width, height) = (b.u16()?, b.u16()?, b.u16()?, b.u16()?);
                    let px = b.take(3 * width as usize * height as usize)?;
                    let pixels = px
                        .chunks_exact(3)
                        .map(|c| (c[0] as u32) << 16 | (c[1] as u32) << 8 | c[2] as u32)
                        .collect();
                    regions.push(Region {
                        x,
                        y,
                        width,
                        height,
                        pixels,
                    });
                }
                ProxyMsg::Update(regions)
            }
            RESIZE => {
                let (width, height) = (b.u16()?, b.u16()?);
                check_size(name, width, height, &limits.rfb)?;
                ProxyMsg::Resize { width, height }
            }
            BELL => ProxyMsg::Bell,
            CUT_TEXT => {
                if len > limits.rfb.max_cut_text {
                    return Err(too_long(name, "text", len, limits.rfb.max_cut_text));
                }
                ProxyMsg::CutText(b.take(len as usize)?.to_vec())
            }
            INPUT => {
                let mut inner = BytesMut::from(b.rest);
                let msg = ClientMsg::decode(&mut inner, &limits.rfb)?
                    .ok_or_else(|| b.corrupt("the client message ends early".into()))?;
                if !matches!(
                    msg,
                    ClientMsg::KeyEvent { .. }
                        | ClientMsg::PointerEvent { .. }
                        | ClientMsg::ClientCutText(_)
                ) {
                    return Err(b.corrupt(format!("{msg:?} is not input")));
                }
                b.rest = &b.rest[b.rest.len() - inner.len()..];
                ProxyMsg::Input(msg)
            }
            REQUEST => ProxyMsg::Request {
                x: b.u16()?,
                y: b.u16()?,
                width: b.u16()?,
                height: b.u16()?,
            },
            COPY => ProxyMsg::Copy {
                src_x: b.u16()?,
                src_y: b.u16()?,
                x: b.u16()?,
                y: b.u16()?,
                width: b.u16()?,
                height: b.u16()?,
            },
            _ => unreachable!("checked above"),
        };
        if !b.rest.is_empty() {
            return Err(b.corrupt(format!("{} bytes after the message", b.rest.len())));
        }
        Ok(Some(msg))
    }
}

fn too_long(message: &'static str, field: &'static str, len: u32, max: u32) -> VncError {
    VncError::TooLong {
        message,
        field,
        len: len as u64,
        max: max as u64,
    }
}

fn check_size(message: &'static str, w: u16, h: u16, limits: &Limits) -> Result<(), VncError> {
    if w > limits.max_width {
        return Err(too_long(
            message,
            "width",
            w as u32,
            limits.max_width as u32,
        ));
    }
    if h > limits.max_height {
        return Err(too_long(
            message,
            "height",
            h as u32,
            limits.max_height as u32,
        ));
    }
    Ok(())
}

/// A message body being read; running out is corruption, since the length said
/// the body was whole.
struct Body<'a> {
    name: &'static str,
    rest: &'a [u8],
}

impl<'a> Body<'a> {
    fn corrupt(&self, what: String) -> VncError {
        VncError::Corrupt {
            message: self.name,
            what,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], VncError> {
        if self.rest.len() < n {
            return Err(self.corrupt(format!(
                "{n} bytes needed, {} left in the body",
                self.rest.len()
            )));
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    fn u16(&mut self) -> Result<u16, VncError> {
        Ok(u16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32, VncError> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<ProxyMsg> {
        vec![
            ProxyMsg::Init {
                width: 640,
                height: 480,
                name: b"desk".to_vec(),
            },
            ProxyMsg::Update(vec![
                Region {
                    x: 1,
                    y: 2,
                    width: 2,
                    height: 1,
                    pixels: vec![0x123456, 0xfedcba],
                },
                Region {
                    x: 0,
                    y: 0,
                    width: 0,
                    height: 0,
                    pixels: vec![],
                },
            ]),
            ProxyMsg::Resize {
                width: 800,
                height: 600,
            },
            ProxyMsg::Bell,
            ProxyMsg::CutText(b"hello".to_vec()),
            ProxyMsg::Input(ClientMsg::KeyEvent {
                down: true,
                key: 0xff0d,
            }),
            ProxyMsg::Input(ClientMsg::PointerEvent {
                buttons: 1,
                x: 5,
                y: 6,
            }),
            ProxyMsg::Input(ClientMsg::ClientCutText(b"x".to_vec())),
            ProxyMsg::Request {
                x: 1,
                y: 2,
                width: 3,
                height: 4,
            },
            ProxyMsg::Copy {
                src_x: 9,
                src_y: 8,
                x: 7,
                y: 6,
                width: 5,
                height: 4,
            },
        ]
    }

    #[test]
    fn every_message_round_trips_whole_and_byte_by_byte() {
        let limits = ProxyLimits::default();
        let mut wire = BytesMut::new();
        for m in all() {
            m.encode(&mut wire);
        }
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &byte in wire.iter() {
            buf.put_u8(byte);
            while let Some(m) = ProxyMsg::decode(&mut buf, &limits).unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, all());
        assert!(buf.is_empty());
    }

    #[test]
    fn bad_bodies_are_refused_with_their_reason() {
        let limits = ProxyLimits {
            max_message: 100,
            ..ProxyLimits::default()
        };
        let mut buf = BytesMut::from(&[19u8, 0, 0, 0, 0][..]);
        assert_eq!(
            ProxyMsg::decode(&mut buf, &limits),
            Err(VncError::UnknownMessage(19))
        );
        // Too long: refused from the header alone.
        let mut buf = BytesMut::from(&[UPDATE, 0, 0, 0, 101][..]);
        assert!(matches!(
            ProxyMsg::decode(&mut buf, &limits),
            Err(VncError::TooLong { len: 101, .. })
        ));
        // A region count the body cannot hold.
        let mut buf = BytesMut::from(&[UPDATE, 0, 0, 0, 4, 0, 0, 0, 9][..]);
        assert!(matches!(
            ProxyMsg::decode(&mut buf, &limits),
            Err(VncError::Corrupt { .. })
        ));
        // Pixels short of the region's size.
        let mut buf = BytesMut::new();
        ProxyMsg::Update(vec![Region {
            x: 0,
            y: 0,
            width: 2,
            height: 2,
            pixels: vec![1, 2, 3, 4],
        }])
        .encode(&mut buf);
        let short = buf.len() - 3;
        buf[4] -= 3;
        buf.truncate(short);
        assert!(matches!(
            ProxyMsg::decode(&mut buf, &limits),
            Err(VncError::Corrupt { .. })
        ));
        // Trailing bytes, and an Input that is not input.
        let mut buf = BytesMut::from(&[BELL, 0, 0, 0, 1, 7][..]);
        assert!(matches!(
            ProxyMsg::decode(&mut buf, &limits),
            Err(VncError::Corrupt { .. })
        ));
        let mut inner = BytesMut::new();
        ClientMsg::SetEncodings(vec![0]).encode(&mut inner);
        let mut buf = BytesMut::from(&[INPUT, 0, 0, 0, inner.len() as u8][..]);
        buf.extend_from_slice(&inner);
        assert!(matches!(
            ProxyMsg::decode(&mut buf, &limits),
            Err(VncError::Corrupt { .. })
        ));
        // A screen larger than the RFB limits.
        let mut buf = BytesMut::new();
        ProxyMsg::Resize {
            width: 20000,
            height: 1,
        }
        .encode(&mut buf);
        assert!(matches!(
            ProxyMsg::decode(&mut buf, &limits),
            Err(VncError::TooLong { field: "width", .. })
        ));
    }
}
