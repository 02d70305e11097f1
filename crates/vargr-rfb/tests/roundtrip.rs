//! Every encoding, in every kind of pixel format, on varied images: encoded, sent as a
//! FramebufferUpdate through the message decoder, painted, and compared with the
//! image as the pixel format can hold it.

use vargr_rfb::encoding::{HEXTILE, RAW, RRE, TIGHT, ZRLE};
use vargr_rfb::{Decoder, Encoder, Framebuffer, Limits, PixelFormat};

const W: u16 = 150;
const H: u16 = 83;

mod pictures;

use pictures::{transmit, Lcg};

fn image(kind: &str) -> Framebuffer {
    let mut fb = Framebuffer::new(W, H);
    let mut rng = Lcg(7);
    let mut px = Vec::new();
    for y in 0..H as u32 {
        for x in 0..W as u32 {
            px.push(match kind {
                "solid" => 0x3366cc,
                "gradient" => {
                    (x * 255 / W as u32) << 16 | (y * 255 / H as u32) << 8 | ((x + y) & 0xff)
                }
                "random" => rng.next() & 0xffffff,
                // Dark strokes on white, like a terminal: few colours, short runs.
                "text" => {
                    if (x % 7 < 2 && y % 11 < 8) || (y % 11 == 3 && x % 7 < 5) {
                        0x101010
                    } else if y > 70 && x % 3 == 0 {
                        0xcc0000
                    } else {
                        0xffffff
                    }
                }
                // Up to 100 colours in blocks: palette RLE territory.
                "blocks" => ((x / 5 + y / 9 * 10) % 100) * 0x020301,
                _ => unreachable!(),
            });
        }
    }
    fb.put_rect(0, 0, W, H, &px).unwrap();
    fb
}

fn formats() -> Vec<(&'static str, PixelFormat)> {
    let mut be = PixelFormat::RGB888;
    be.big_endian = true;
    // Colour in the high three bytes: ZRLE's CPIXEL keeps those.
    let high = PixelFormat {
        red_shift: 24,
        green_shift: 16,
        blue_shift: 8,
        ..PixelFormat::RGB888
    };
    let mut high_be = high;
    high_be.big_endian = true;
    let mut full32 = PixelFormat::RGB888;
    full32.depth = 32;
    full32.red_max = 1023; // 10-bit red reaching bit 26: CPIXEL is the whole pixel
    vec![
        ("rgb888", PixelFormat::RGB888),
        ("rgb888-be", be),
        ("high", high),
        ("high-be", high_be),
        ("10-bit red", full32),
        ("rgb565", PixelFormat::RGB565),
        ("bgr233", PixelFormat::BGR233),
    ]
}

#[test]
fn every_encoding_round_trips_every_image_in_every_format() {
    for kind in ["solid", "gradient", "random", "text", "blocks"] {
        let src = image(kind);
        for (pf_name, pf) in formats() {
            let want = src.as_seen_in(&pf);
            for enc in [RAW, RRE, HEXTILE, ZRLE, TIGHT] {
                let mut encoder = Encoder::new();
                let mut decoder = Decoder::new(Limits::default());
                let mut got = Framebuffer::new(W, H);
                // The whole screen, then overlapping odd-sized parts over a blank
                // screen: partial tiles, and ZRLE's stream continued across rectangles.
                transmit(
                    &[encoder.encode(&src, enc, 0, 0, W, H, &pf).unwrap()],
                    &pf,
                    &mut decoder,
                    &mut got,
                );
                assert!(got == want, "{kind} {pf_name} encoding {enc}: whole screen");
                got = Framebuffer::new(W, H);
                let parts = [
                    (0, 0, 70, 40),
                    (65, 3, 85, 80),
                    (60, 0, 90, 5),
                    (0, 40, 66, 43),
                    (1, 1, 0, 0),
                ];
                let rects: Vec<_> = parts
                    .iter()
                    .map(|&(x, y, w, h)| encoder.encode(&src, enc, x, y, w, h, &pf).unwrap())
                    .collect();
                transmit(&rects, &pf, &mut decoder, &mut got);
                assert!(got == want, "{kind} {pf_name} encoding {enc}: in parts");
            }
        }
    }
}

#[test]
fn compressing_encodings_beat_raw_where_they_should() {
    let pf = PixelFormat::RGB888;
    let raw = W as usize * H as usize * 4;
    for kind in ["solid", "text", "blocks"] {
        let src = image(kind);
        for enc in [HEXTILE, ZRLE, TIGHT] {
            let r = Encoder::new().encode(&src, enc, 0, 0, W, H, &pf).unwrap();
            assert!(
                r.data.len() * 4 < raw,
                "{kind} in {enc}: {} bytes",
                r.data.len()
            );
        }
    }
}
