//! What several tests of vargr-rfb share: a reproducible random number generator,
//! pictures of the kinds screens hold, and sending rectangles through the message
//! layer before painting them. Included with `mod pictures;`.

#![allow(dead_code)]

use bytes::BytesMut;
use vargr_rfb::{Decoder, Framebuffer, Limits, PixelFormat, Rect, ServerMsg, UpdateContext};

pub struct Lcg(pub u64);
impl Lcg {
    pub fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
}

/// An image of one kind, `w × h`.
pub fn image(kind: &str, w: u16, h: u16) -> Framebuffer {
    let mut rng = Lcg(w as u64 * 31 + h as u64);
    let mut px = Vec::with_capacity(w as usize * h as usize);
    for y in 0..h as u32 {
        for x in 0..w as u32 {
            px.push(match kind {
                "solid" => 0x3366cc,
                // Dark strokes on white: two colours.
                "text" => {
                    if (x % 7 < 2 && y % 11 < 8) || (y % 11 == 3 && x % 7 < 5) {
                        0x101010
                    } else {
                        0xf0f0f0
                    }
                }
                // 120 colours in blocks: the one-byte palette.
                "blocks" => ((x / 5 + y / 9 * 13) % 120) * 0x020301,
                // A smooth picture with a little noise, like a photograph.
                "photo" => {
                    let (fx, fy) = (x as f64 / 23.0, y as f64 / 17.0);
                    let mut ch = |phase: f64| {
                        let v = 128.0 + 90.0 * (fx + phase).sin() * (fy - phase).cos();
                        (v as i32 + (rng.next() % 5) as i32 - 2).clamp(0, 255) as u32
                    };
                    ch(0.0) << 16 | ch(1.0) << 8 | ch(2.0)
                }
                "noise" => rng.next() & 0xffffff,
                // Text over a photograph's gradient: many colours and sharp edges.
                "mixed" => {
                    if x % 9 < 2 && y % 13 < 9 {
                        0x000000
                    } else {
                        (x * 255 / w as u32) << 16 | (y * 255 / h as u32) << 8 | 0x40
                    }
                }
                _ => unreachable!("{kind}"),
            });
        }
    }
    let mut fb = Framebuffer::new(w, h);
    fb.put_rect(0, 0, w, h, &px).unwrap();
    fb
}

/// Sends rectangles through the message layer, then paints them.
pub fn transmit(rects: &[Rect], pf: &PixelFormat, dec: &mut Decoder, fb: &mut Framebuffer) {
    let mut wire = BytesMut::new();
    ServerMsg::FramebufferUpdate(rects.to_vec()).encode(&mut wire);
    let mut ctx = UpdateContext {
        pixel_format: *pf,
        width: fb.width(),
        height: fb.height(),
    };
    let msg = ServerMsg::decode(&mut wire, &mut ctx, &Limits::default())
        .unwrap()
        .unwrap();
    assert!(wire.is_empty());
    assert_eq!(msg, ServerMsg::FramebufferUpdate(rects.to_vec()));
    for r in rects {
        dec.apply(r, pf, fb).unwrap();
    }
}
