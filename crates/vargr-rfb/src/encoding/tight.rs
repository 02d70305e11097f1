//! Tight (encoding 7, from the RFB community's specification; not in RFC 6143), decoded
//! without JPEG: a fill colour, or pixels through a copy, palette or gradient filter,
//! compressed in one of four zlib streams that last as long as the connection. The
//! encoder is in `tight_encode.rs`.
//!
//! Servers send JPEG only to clients that ask for a quality level; a JPEG rectangle is
//! refused with a typed error.

use super::zlib::Inflater;
use crate::wire::{whole, Parse, Reader, Step};
use crate::{Framebuffer, Limits, PixelFormat, RfbError};

pub(super) const FILL: u8 = 8;
const JPEG: u8 = 9;
pub(super) const COPY_FILTER: u8 = 0;
pub(super) const PALETTE_FILTER: u8 = 1;
pub(super) const GRADIENT_FILTER: u8 = 2;
/// Data shorter than this is sent without zlib (and without a length).
pub(super) const MIN_TO_COMPRESS: u64 = 12;

fn bad(what: String) -> Step {
    Step::Bad(RfbError::Corrupt {
        encoding: "Tight",
        what,
    })
}

/// TPIXEL: three bytes, red, green, blue, when the format is 32 bits of depth 24 with
/// 8 bits a channel; otherwise a pixel as the format has it.
pub(super) fn tpixel_len(pf: &PixelFormat) -> usize {
    let rgb888 = pf.true_colour
        && pf.bits_per_pixel == 32
        && pf.depth == 24
        && pf.red_max == 255
        && pf.green_max == 255
        && pf.blue_max == 255;
    if rgb888 {
        3
    } else {
        pf.bytes_per_pixel()
    }
}

/// A TPIXEL's three channel values and their maxima.
fn channels(pf: &PixelFormat, tpx: &[u8]) -> [u32; 3] {
    if tpx.len() == 3 {
        [tpx[0] as u32, tpx[1] as u32, tpx[2] as u32]
    } else {
        let v = pf.read_value(tpx);
        let ch = |shift: u8, max: u16| v.checked_shr(shift as u32).unwrap_or(0) & max as u32;
        [
            ch(pf.red_shift, pf.red_max),
            ch(pf.green_shift, pf.green_max),
            ch(pf.blue_shift, pf.blue_max),
        ]
    }
}

fn maxima(pf: &PixelFormat, tpx_len: usize) -> [u32; 3] {
    if tpx_len == 3 {
        [255; 3]
    } else {
        [pf.red_max as u32, pf.green_max as u32, pf.blue_max as u32]
    }
}

fn channels_to_rgb(pf: &PixelFormat, tpx_len: usize, c: [u32; 3]) -> u32 {
    if tpx_len == 3 {
        c[0] << 16 | c[1] << 8 | c[2]
    } else {
        let at = |v: u32, s: u8| v.checked_shl(s as u32).unwrap_or(0);
        pf.to_rgb(at(c[0], pf.red_shift) | at(c[1], pf.green_shift) | at(c[2], pf.blue_shift))
    }
}

fn tpixel_rgb(pf: &PixelFormat, tpx: &[u8]) -> u32 {
    channels_to_rgb(pf, tpx.len(), channels(pf, tpx))
}

/// A length of 1 to 3 bytes, 7 bits each but the last, low bits first.
fn compact_len(r: &mut Reader) -> Parse<usize> {
    let b0 = r.u8()?;
    let mut n = (b0 & 0x7f) as usize;
    if b0 & 0x80 != 0 {
        let b1 = r.u8()?;
        n |= ((b1 & 0x7f) as usize) << 7;
        if b1 & 0x80 != 0 {
            n |= (r.u8()? as usize) << 14;
        }
    }
    Ok(n)
}

/// What a rectangle holds, with slices into its bytes.
enum Body<'a> {
    Fill(&'a [u8]),
    Jpeg,
    Basic {
        stream: usize,
        filter: u8,
        /// TPIXELs of the palette filter.
        palette: &'a [u8],
        /// The filtered data's size once inflated.
        size: u64,
        data: &'a [u8],
        compressed: bool,
    },
}

/// Reads one rectangle's data: the resets of the zlib streams and its body.
fn parse<'a>(
    r: &mut Reader<'a>,
    w: u16,
    h: u16,
    pf: &PixelFormat,
    limits: &Limits,
) -> Parse<(u8, Body<'a>)> {
    let tpx = tpixel_len(pf);
    let control = r.u8()?;
    let resets = control & 0x0f;
    let kind = control >> 4;
    let body = match kind {
        FILL => Body::Fill(r.bytes(tpx)?),
        JPEG => {
            let n = compact_len(r)?;
            r.skip(n)?;
            Body::Jpeg
        }
        0..=7 => {
            let stream = (kind & 3) as usize;
            let filter = if kind & 4 != 0 { r.u8()? } else { COPY_FILTER };
            let (palette, row) = match filter {
                COPY_FILTER | GRADIENT_FILTER => (&[][..], w as u64 * tpx as u64),
                PALETTE_FILTER => {
                    let n = r.u8()? as usize + 1;
                    let row = if n == 2 {
                        (w as u64).div_ceil(8)
                    } else {
                        w as u64
                    };
                    (r.bytes(n * tpx)?, row)
                }
                f => return Err(bad(format!("filter {f} is not defined"))),
            };
            let size = row * h as u64;
            limits.check_rect_bytes("Tight", "data", size)?;
            let compressed = size >= MIN_TO_COMPRESS;
            let len = if compressed {
                compact_len(r)? as u64
            } else {
                size
            };
            limits.check_rect_bytes("Tight", "compressed length", len)?;
            let data = r.bytes(len as usize)?;
            Body::Basic {
                stream,
                filter,
                palette,
                size,
                data,
                compressed,
            }
        }
        k => {
            return Err(bad(format!(
                "compression type {k} is not defined (PNG is TightPNG's)"
            )))
        }
    };
    Ok((resets, body))
}

pub(super) fn skip(r: &mut Reader, w: u16, h: u16, pf: &PixelFormat, limits: &Limits) -> Parse<()> {
    parse(r, w, h, pf, limits).map(|_| ())
}

/// A connection's four Tight zlib streams.
pub(super) struct Decoder {
    streams: [Inflater; 4],
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder {
            streams: core::array::from_fn(|_| Inflater::new()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn decode(
        &mut self,
        r: &mut Reader,
        x: u16,
        y: u16,
        w: u16,
        h: u16,
        pf: &PixelFormat,
        fb: &mut Framebuffer,
        limits: &Limits,
    ) -> Result<(), RfbError> {
        let (resets, body) = whole("Tight", parse(r, w, h, pf, limits))?;
        for (i, s) in self.streams.iter_mut().enumerate() {
            if resets & (1 << i) != 0 {
                s.reset();
            }
        }
        let (stream, filter, palette, size, data, compressed) = match body {
            Body::Fill(tpx) => return fb.fill_rect(x, y, w, h, tpixel_rgb(pf, tpx)),
            Body::Jpeg => {
                return Err(RfbError::Corrupt {
                    encoding: "Tight",
                    what: "JPEG rectangles are not supported (ask for no JPEG quality level)"
                        .into(),
                })
            }
            Body::Basic {
                stream,
                filter,
                palette,
                size,
                data,
                compressed,
            } => (stream, filter, palette, size, data, compressed),
        };
        let plain = if compressed {
            self.streams[stream].inflate("Tight", data, size)?
        } else {
            data.to_vec()
        };
        if plain.len() as u64 != size {
            return Err(RfbError::Corrupt {
                encoding: "Tight",
                what: format!(
                    "{} bytes of data where the filter needs {size}",
                    plain.len()
                ),
            });
        }
        let tpx = tpixel_len(pf);
        let n = w as usize * h as usize;
        if n == 0 {
            return Ok(());
        }
        let px: Vec<u32> = match filter {
            COPY_FILTER => plain.chunks_exact(tpx).map(|p| tpixel_rgb(pf, p)).collect(),
            PALETTE_FILTER => {
                let colours: Vec<u32> = palette
                    .chunks_exact(tpx)
                    .map(|p| tpixel_rgb(pf, p))
                    .collect();
                let mut px = Vec::with_capacity(n);
                if colours.len() == 2 {
                    for row in plain.chunks_exact((w as usize).div_ceil(8)) {
                        px.extend(
                            (0..w as usize)
                                .map(|i| colours[((row[i / 8] >> (7 - i % 8)) & 1) as usize]),
                        );
                    }
                } else {
                    for &i in &plain {
                        px.push(*colours.get(i as usize).ok_or_else(|| RfbError::Corrupt {
                            encoding: "Tight",
                            what: format!("palette index {i} of {} colours", colours.len()),
                        })?);
                    }
                }
                px
            }
            _ => gradient(&plain, w, pf, tpx),
        };
        fb.put_rect(x, y, w, h, &px)
    }
}

/// The gradient filter: each channel is sent as its difference from the prediction
/// left + above - above-left (clamped to the channel's range), modulo the range.
fn gradient(plain: &[u8], w: u16, pf: &PixelFormat, tpx: usize) -> Vec<u32> {
    let max = maxima(pf, tpx);
    let w = w as usize;
    let mut above = vec![[0u32; 3]; w];
    let mut row = vec![[0u32; 3]; w];
    let mut px = Vec::with_capacity(plain.len() / tpx);
    for line in plain.chunks_exact(w * tpx) {
        for (x, p) in line.chunks_exact(tpx).enumerate() {
            let diff = channels(pf, p);
            let left = if x > 0 { row[x - 1] } else { [0; 3] };
            let above_left = if x > 0 { above[x - 1] } else { [0; 3] };
            for c in 0..3 {
                let est = (left[c] as i64 + above[x][c] as i64 - above_left[c] as i64)
                    .clamp(0, max[c] as i64) as u32;
                row[x][c] = diff[c].wrapping_add(est) & max[c];
            }
            px.push(channels_to_rgb(pf, tpx, row[x]));
        }
        std::mem::swap(&mut above, &mut row);
    }
    px
}
