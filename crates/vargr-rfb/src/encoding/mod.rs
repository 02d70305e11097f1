//! Rectangle encodings (RFC 6143 §7.7, and Tight): finding where a rectangle's data ends,
//! painting it into a [`Framebuffer`] and making it from one.
//!
//! [`Decoder`] and [`Encoder`] live as long as a connection, because ZRLE's zlib
//! stream and Tight's four do: each rectangle continues the streams of the ones before.

mod hextile;
mod raw;
mod rre;
mod subrects;
mod tight;
mod tight_encode;
mod zlib;
mod zrle;

use bytes::{BufMut, BytesMut};

use crate::msg::{Rect, UpdateContext};
use crate::wire::{whole, Parse, Reader, Step};
use crate::{Framebuffer, Limits, PixelFormat, RfbError};

pub use tight_encode::MAX_WIDTH as TIGHT_MAX_WIDTH;
pub use tight_encode::{pieces as tight_pieces, TightOptions, MAX_PIXELS as TIGHT_MAX_PIXELS};
pub use zrle::{packed_tiles, paint_packed_tiles};

pub const RAW: i32 = 0;
pub const COPY_RECT: i32 = 1;
pub const RRE: i32 = 2;
pub const HEXTILE: i32 = 5;
/// Without JPEG.
pub const TIGHT: i32 = 7;
pub const ZRLE: i32 = 16;
/// Pseudo-encoding: the rectangle's size is the framebuffer's new size, no data.
pub const DESKTOP_SIZE: i32 = -223;

/// Moves `r` past one rectangle's data, checking each length against the limits
/// before waiting for the bytes.
pub(crate) fn skip_payload(
    r: &mut Reader,
    enc: i32,
    w: u16,
    h: u16,
    ctx: &UpdateContext,
    limits: &Limits,
) -> Parse<()> {
    let bpp = ctx.pixel_format.bytes_per_pixel() as u64;
    match enc {
        RAW => {
            let n = w as u64 * h as u64 * bpp;
            limits.check_rect_bytes("Raw", "pixels", n)?;
            r.skip(n as usize)
        }
        COPY_RECT => {
            let (sx, sy) = (r.u16()?, r.u16()?);
            if sx as u32 + w as u32 > ctx.width as u32 || sy as u32 + h as u32 > ctx.height as u32 {
                return Err(Step::Bad(RfbError::OutOfBounds {
                    message: "CopyRect source",
                    x: sx as u32,
                    y: sy as u32,
                    width: w as u32,
                    height: h as u32,
                    fb_width: ctx.width,
                    fb_height: ctx.height,
                }));
            }
            Ok(())
        }
        RRE => {
            let n = r.u32()? as u64;
            limits.check_rect_bytes("RRE", "number-of-subrectangles", bpp + n * (bpp + 8))?;
            r.skip((bpp + n * (bpp + 8)) as usize)
        }
        HEXTILE => hextile::skip(r, w, h, bpp as usize, limits),
        TIGHT => tight::skip(r, w, h, &ctx.pixel_format, limits),
        ZRLE => {
            let n = r.u32()?;
            limits.check_rect_bytes("ZRLE", "length", n as u64)?;
            r.skip(n as usize)
        }
        DESKTOP_SIZE => Ok(()),
        other => Err(Step::Bad(RfbError::UnsupportedEncoding(other))),
    }
}

/// Paints a connection's rectangles into a framebuffer, in the order they came.
pub struct Decoder {
    zrle: zrle::Inflater,
    tight: tight::Decoder,
    limits: Limits,
}

impl Decoder {
    pub fn new(limits: Limits) -> Decoder {
        Decoder {
            zrle: zrle::Inflater::new(),
            tight: tight::Decoder::new(),
            limits,
        }
    }

    /// Paints one rectangle whose data is in pixel format `pf`. DesktopSize resizes
    /// `fb`. A rectangle that does not fit, or data that is short, long or malformed,
    /// is an error; `fb` may then be partly painted.
    pub fn apply(
        &mut self,
        rect: &Rect,
        pf: &PixelFormat,
        fb: &mut Framebuffer,
    ) -> Result<(), RfbError> {
        if rect.encoding == DESKTOP_SIZE {
            self.limits
                .check_size("DesktopSize", rect.width, rect.height)?;
            fb.resize(rect.width, rect.height);
            return Ok(());
        }
        fb.check("FramebufferUpdate", rect.x, rect.y, rect.width, rect.height)?;
        if matches!(rect.encoding, RAW | RRE | HEXTILE | TIGHT | ZRLE) {
            pf.validate()?;
        }
        let (x, y, w, h) = (rect.x, rect.y, rect.width, rect.height);
        let mut r = Reader::new(&rect.data);
        let name = encoding_name(rect.encoding);
        match rect.encoding {
            RAW => whole(name, raw::decode(&mut r, x, y, w, h, pf, fb))?,
            COPY_RECT => {
                let (sx, sy) = whole(name, r.u16().and_then(|sx| Ok((sx, r.u16()?))))?;
                fb.copy_rect(sx, sy, x, y, w, h)?;
            }
            RRE => whole(name, rre::decode(&mut r, x, y, w, h, pf, fb))?,
            HEXTILE => whole(name, hextile::decode(&mut r, x, y, w, h, pf, fb))?,
            TIGHT => self
                .tight
                .decode(&mut r, x, y, w, h, pf, fb, &self.limits)?,
            ZRLE => {
                let n = whole(name, r.u32())?;
                let data = whole(name, r.bytes(n as usize))?;
                self.zrle.decode(data, x, y, w, h, pf, fb, &self.limits)?;
            }
            other => return Err(RfbError::UnsupportedEncoding(other)),
        }
        if r.remaining() != 0 {
            return Err(RfbError::Corrupt {
                encoding: name,
                what: format!("{} bytes after the rectangle's data", r.remaining()),
            });
        }
        Ok(())
    }
}

/// Makes a connection's rectangles from a framebuffer.
pub struct Encoder {
    zrle: zrle::Deflater,
    tight_streams: tight_encode::Encoder,
    /// How Tight rectangles are made (zlib level, gradient filter); may be changed
    /// between rectangles.
    pub tight: TightOptions,
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder::new()
    }
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder {
            zrle: zrle::Deflater::new(),
            tight_streams: tight_encode::Encoder::new(),
            tight: TightOptions::default(),
        }
    }

    /// Encodes the area at (x, y) of `w × h` in `encoding` and pixel format `pf`,
    /// appending its rectangles to `out`: one, except that Tight cuts an area wider
    /// than [`TIGHT_MAX_WIDTH`] or larger than [`TIGHT_MAX_PIXELS`] into several
    /// ([`tight_pieces`]). Callers that encode any area (a proxy's dirty regions, a
    /// replay) use this; nothing is appended when an error is returned.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_into(
        &mut self,
        fb: &Framebuffer,
        encoding: i32,
        x: u16,
        y: u16,
        w: u16,
        h: u16,
        pf: &PixelFormat,
        out: &mut Vec<Rect>,
    ) -> Result<(), RfbError> {
        if encoding != TIGHT {
            out.push(self.encode(fb, encoding, x, y, w, h, pf)?);
            return Ok(());
        }
        fb.check("Encoder::encode_into", x, y, w, h)?;
        pf.validate()?;
        for (px, py, pw, ph) in tight_pieces(x, y, w, h) {
            out.push(self.encode(fb, encoding, px, py, pw, ph, pf)?);
        }
        Ok(())
    }

    /// Encodes the area at (x, y) of `w × h` as one rectangle in `encoding` (Raw, RRE,
    /// Hextile, Tight or ZRLE) and pixel format `pf`. A Tight area must fit one Tight
    /// rectangle; [`Encoder::encode_into`] takes any. CopyRect and DesktopSize carry
    /// no pixels: make them with [`Rect::copy_rect`] and [`Rect::desktop_size`].
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &mut self,
        fb: &Framebuffer,
        encoding: i32,
        x: u16,
        y: u16,
        w: u16,
        h: u16,
        pf: &PixelFormat,
    ) -> Result<Rect, RfbError> {
        pf.validate()?;
        if encoding == TIGHT && !tight_encode::fits(w, h) {
            let (field, len, max) = if w > TIGHT_MAX_WIDTH {
                ("width", w as u64, TIGHT_MAX_WIDTH as u64)
            } else {
                ("pixels", w as u64 * h as u64, TIGHT_MAX_PIXELS as u64)
            };
            return Err(RfbError::TooLong {
                message: "Tight rectangle (Encoder::encode_into splits areas)",
                field,
                len,
                max,
            });
        }
        let pixels = fb.get_rect(x, y, w, h)?;
        // Encoders compare pixel values, not colours: two colours that the format
        // cannot tell apart are one.
        let values: Vec<u32> = pixels.iter().map(|&c| pf.from_rgb(c)).collect();
        let mut out = BytesMut::new();
        match encoding {
            RAW => raw::encode(&values, pf, &mut out),
            RRE => rre::encode(&values, w, h, pf, &mut out),
            HEXTILE => hextile::encode(&values, w, h, pf, &mut out),
            TIGHT => {
                let opts = self.tight;
                self.tight_streams
                    .encode(&values, w, h, pf, &opts, &mut out)
            }
            ZRLE => self.zrle.encode(&values, w, h, pf, &mut out),
            other => return Err(RfbError::UnsupportedEncoding(other)),
        }
        Ok(Rect {
            x,
            y,
            width: w,
            height: h,
            encoding,
            data: out.freeze(),
        })
    }
}

/// A name for errors.
pub fn encoding_name(encoding: i32) -> &'static str {
    match encoding {
        RAW => "Raw",
        COPY_RECT => "CopyRect",
        RRE => "RRE",
        HEXTILE => "Hextile",
        TIGHT => "Tight",
        ZRLE => "ZRLE",
        DESKTOP_SIZE => "DesktopSize",
        _ => "unknown encoding",
    }
}

/// Reads one pixel of `pf` as canonical colour.
fn read_rgb(r: &mut Reader, pf: &PixelFormat) -> Parse<u32> {
    Ok(pf.read_rgb(r.bytes(pf.bytes_per_pixel())?))
}

fn put_subrect(out: &mut BytesMut, x: u16, y: u16, w: u16, h: u16) {
    for v in [x, y, w, h] {
        out.put_u16(v);
    }
}
