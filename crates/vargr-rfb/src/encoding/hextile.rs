//! Hextile (RFC 6143 §7.7.4): 16×16 tiles, each raw or a background with
//! subrectangles; background and foreground carry over from tile to tile.
//!
//! The RFC does not say what a tile of coloured subrectangles does to the foreground.
//! TigerVNC's and libvncserver's decoders read each subrectangle's colour into it, so
//! after such a tile the foreground is the last subrectangle's colour. The decoder
//! here does the same, and the encoder names the foreground again after such a tile,
//! which every decoder reads alike.

use bytes::{BufMut, BytesMut};

use super::read_rgb;
use super::subrects::{cover, most_common};
use crate::wire::{Parse, Reader, Step};
use crate::{Framebuffer, Limits, PixelFormat, RfbError};

pub(crate) const RAW: u8 = 1;
pub(crate) const BACKGROUND_SPECIFIED: u8 = 2;
pub(crate) const FOREGROUND_SPECIFIED: u8 = 4;
pub(crate) const ANY_SUBRECTS: u8 = 8;
pub(crate) const SUBRECTS_COLOURED: u8 = 16;

/// The tiles of a `w × h` rectangle in wire order: (x, y, width, height).
fn tiles(w: u16, h: u16) -> impl Iterator<Item = (u16, u16, u16, u16)> {
    (0..h).step_by(16).flat_map(move |ty| {
        (0..w)
            .step_by(16)
            .map(move |tx| (tx, ty, 16.min(w - tx), 16.min(h - ty)))
    })
}

fn bad(what: String) -> Step {
    Step::Bad(RfbError::Corrupt {
        encoding: "Hextile",
        what,
    })
}

fn subencoding(r: &mut Reader) -> Parse<u8> {
    let s = r.u8()?;
    if s > 31 {
        return Err(bad(format!("subencoding {s:#04x} has unknown bits")));
    }
    Ok(s)
}

pub(super) fn skip(r: &mut Reader, w: u16, h: u16, bpp: usize, limits: &Limits) -> Parse<()> {
    let start = r.pos();
    for (_, _, tw, th) in tiles(w, h) {
        let s = subencoding(r)?;
        if s & RAW != 0 {
            r.skip(tw as usize * th as usize * bpp)?;
        } else {
            let colours =
                (s & BACKGROUND_SPECIFIED != 0) as usize + (s & FOREGROUND_SPECIFIED != 0) as usize;
            r.skip(colours * bpp)?;
            if s & ANY_SUBRECTS != 0 {
                let n = r.u8()? as usize;
                let each = if s & SUBRECTS_COLOURED != 0 {
                    bpp + 2
                } else {
                    2
                };
                r.skip(n * each)?;
            }
        }
        limits.check_rect_bytes("Hextile", "tiles", (r.pos() - start) as u64)?;
    }
    Ok(())
}

pub(super) fn decode(
    r: &mut Reader,
    x: u16,
    y: u16,
    w: u16,
    h: u16,
    pf: &PixelFormat,
    fb: &mut Framebuffer,
) -> Parse<()> {
    // Undefined until a tile gives them. A raw tile leaves them as they were: the
    // specification only requires the first non-raw tile to give a background, so
    // the decoder accepts carrying over a raw tile (the encoder never relies on it).
    let (mut bg, mut fg): (Option<u32>, Option<u32>) = (None, None);
    for (tx, ty, tw, th) in tiles(w, h) {
        let (ax, ay) = (x + tx, y + ty);
        let s = subencoding(r)?;
        if s & RAW != 0 {
            let mut px = Vec::with_capacity(tw as usize * th as usize);
            for _ in 0..tw as usize * th as usize {
                px.push(read_rgb(r, pf)?);
            }
            fb.put_rect(ax, ay, tw, th, &px)?;
            continue;
        }
        if s & BACKGROUND_SPECIFIED != 0 {
            bg = Some(read_rgb(r, pf)?);
        }
        if s & FOREGROUND_SPECIFIED != 0 {
            fg = Some(read_rgb(r, pf)?);
        }
        let back = bg.ok_or_else(|| bad(format!("tile at {tx},{ty} has no background colour")))?;
        fb.fill_rect(ax, ay, tw, th, back)?;
        if s & ANY_SUBRECTS == 0 {
            continue;
        }
        for _ in 0..r.u8()? {
            let colour = if s & SUBRECTS_COLOURED != 0 {
                let c = read_rgb(r, pf)?;
                fg = Some(c);
                c
            } else {
                fg.ok_or_else(|| bad(format!("tile at {tx},{ty} has no foreground colour")))?
            };
            let (xy, wh) = (r.u8()?, r.u8()?);
            let (sx, sy) = ((xy >> 4) as u16, (xy & 15) as u16);
            let (sw, sh) = ((wh >> 4) as u16 + 1, (wh & 15) as u16 + 1);
            if sx + sw > tw || sy + sh > th {
                return Err(bad(format!(
                    "subrectangle {sx},{sy} {sw}x{sh} exceeds the tile at {tx},{ty} of {tw}x{th}"
                )));
            }
            fb.fill_rect(ax + sx, ay + sy, sw, sh, colour)?;
        }
    }
    Ok(())
}

pub(super) fn encode(values: &[u32], w: u16, h: u16, pf: &PixelFormat, out: &mut BytesMut) {
    let bpp = pf.bytes_per_pixel();
    let (mut last_bg, mut last_fg): (Option<u32>, Option<u32>) = (None, None);
    let mut tile = Vec::with_capacity(256);
    for (tx, ty, tw, th) in tiles(w, h) {
        tile.clear();
        for row in ty..ty + th {
            let at = row as usize * w as usize + tx as usize;
            tile.extend_from_slice(&values[at..at + tw as usize]);
        }
        let raw_len = tile.len() * bpp;
        let bg = most_common(&tile);
        let subs = cover(&tile, tw, th, bg, 255);
        let two_colours = subs
            .as_ref()
            .is_some_and(|s| s.windows(2).all(|p| p[0].value == p[1].value));
        let fg = subs.as_ref().and_then(|s| s.first()).map(|s| s.value);
        let mut flags = 0u8;
        let mut body = BytesMut::new();
        if last_bg != Some(bg) {
            flags |= BACKGROUND_SPECIFIED;
            pf.write_value(bg, &mut body);
        }
        match &subs {
            Some(subs) if !subs.is_empty() => {
                flags |= ANY_SUBRECTS;
                let coloured = !two_colours;
                if coloured {
                    flags |= SUBRECTS_COLOURED;
                } else if last_fg != fg {
                    flags |= FOREGROUND_SPECIFIED;
                    pf.write_value(fg.expect("a subrectangle"), &mut body);
                }
                body.put_u8(subs.len() as u8);
                for s in subs {
                    if coloured {
                        pf.write_value(s.value, &mut body);
                    }
                    body.put_u8(((s.x as u8) << 4) | s.y as u8);
                    body.put_u8((((s.w - 1) as u8) << 4) | (s.h - 1) as u8);
                }
            }
            _ => {}
        }
        if subs.is_none() || body.len() > raw_len {
            out.put_u8(RAW);
            for &v in &tile {
                pf.write_value(v, out);
            }
            (last_bg, last_fg) = (None, None);
        } else {
            out.put_u8(flags);
            out.put_slice(&body);
            last_bg = Some(bg);
            if flags & FOREGROUND_SPECIFIED != 0 {
                last_fg = fg;
            } else if flags & SUBRECTS_COLOURED != 0 {
                // Decoders disagree on the foreground after this tile: name it again.
                last_fg = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::{Decoder, Encoder, HEXTILE};

    /// Three tiles: two colours (foreground A), four colours (coloured subrectangles,
    /// the last one B), two colours with foreground A again. A decoder that takes B as
    /// the foreground after the second tile (TigerVNC, libvncserver, this one) must
    /// still paint A in the third: the encoder names A again.
    #[test]
    fn the_foreground_is_named_again_after_coloured_subrectangles() {
        let (w, h) = (48u16, 16u16);
        let (bg, a, b, c) = (0xffffffu32, 0x000000, 0x9400d3, 0x00ff00);
        let mut px = vec![bg; w as usize * h as usize];
        let mut put = |x: usize, y: usize, v: u32| px[y * w as usize + x] = v;
        put(3, 3, a);
        put(20, 2, c);
        put(24, 5, a);
        put(28, 9, b);
        put(40, 7, a);
        let mut fb = Framebuffer::new(w, h);
        fb.put_rect(0, 0, w, h, &px).unwrap();
        let pf = PixelFormat::RGB888;
        let rect = Encoder::new()
            .encode(&fb, HEXTILE, 0, 0, w, h, &pf)
            .unwrap();
        let mut got = Framebuffer::new(w, h);
        Decoder::new(Limits::default())
            .apply(&rect, &pf, &mut got)
            .unwrap();
        assert_eq!(got, fb);
    }
}
