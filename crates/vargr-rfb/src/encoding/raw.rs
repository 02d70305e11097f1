//! Raw (RFC 6143 §7.7.1): every pixel, row by row.

use bytes::BytesMut;

use super::read_rgb;
use crate::wire::Parse;
use crate::wire::Reader;
use crate::{Framebuffer, PixelFormat};

pub(super) fn decode(
    r: &mut Reader,
    x: u16,
    y: u16,
    w: u16,
    h: u16,
    pf: &PixelFormat,
    fb: &mut Framebuffer,
) -> Parse<()> {
    let mut px = Vec::with_capacity(w as usize * h as usize);
    for _ in 0..w as usize * h as usize {
        px.push(read_rgb(r, pf)?);
    }
    Ok(fb.put_rect(x, y, w, h, &px)?)
}

pub(super) fn encode(values: &[u32], pf: &PixelFormat, out: &mut BytesMut) {
    for &v in values {
        pf.write_value(v, out);
    }
}
