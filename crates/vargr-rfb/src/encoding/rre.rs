//! RRE (RFC 6143 §7.7.3): a background colour and one-colour subrectangles.

use bytes::{BufMut, BytesMut};

use super::subrects::{cover, most_common};
use super::{put_subrect, read_rgb};
use crate::wire::{Parse, Reader, Step};
use crate::{Framebuffer, PixelFormat, RfbError};

pub(super) fn decode(
    r: &mut Reader,
    x: u16,
    y: u16,
    w: u16,
    h: u16,
    pf: &PixelFormat,
    fb: &mut Framebuffer,
) -> Parse<()> {
    let n = r.u32()?;
    let bg = read_rgb(r, pf)?;
    fb.fill_rect(x, y, w, h, bg)?;
    for _ in 0..n {
        let colour = read_rgb(r, pf)?;
        let (sx, sy, sw, sh) = (r.u16()?, r.u16()?, r.u16()?, r.u16()?);
        if sx as u32 + sw as u32 > w as u32 || sy as u32 + sh as u32 > h as u32 {
            return Err(Step::Bad(RfbError::Corrupt {
                encoding: "RRE",
                what: format!("subrectangle {sx},{sy} {sw}x{sh} exceeds the rectangle {w}x{h}"),
            }));
        }
        fb.fill_rect(x + sx, y + sy, sw, sh, colour)?;
    }
    Ok(())
}

pub(super) fn encode(values: &[u32], w: u16, h: u16, pf: &PixelFormat, out: &mut BytesMut) {
    let bg = most_common(values);
    let subs = cover(values, w, h, bg, usize::MAX).expect("no maximum");
    out.put_u32(subs.len() as u32);
    pf.write_value(bg, out);
    for s in subs {
        pf.write_value(s.value, out);
        put_subrect(out, s.x, s.y, s.w, s.h);
    }
}
