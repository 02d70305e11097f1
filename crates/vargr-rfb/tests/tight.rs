//! The Tight encoder against the crate's Tight decoder: varied images in several pixel
//! formats over one connection's streams, what it chooses for each kind of image,
//! areas that must be split, level changes, hand-checked bytes, and its sizes beside
//! ZRLE's.

use vargr_rfb::encoding::{TIGHT, TIGHT_MAX_PIXELS, TIGHT_MAX_WIDTH, ZRLE};
use vargr_rfb::{Decoder, Encoder, Framebuffer, Limits, PixelFormat, Rect, RfbError};

mod pictures;

use pictures::{image, transmit};

const KINDS: [&str; 6] = ["solid", "text", "blocks", "photo", "noise", "mixed"];

fn formats() -> Vec<(&'static str, PixelFormat)> {
    let mut be = PixelFormat::RGB888;
    be.big_endian = true;
    // Colour in the high three bytes: still three-byte TPIXELs (32 bits, depth 24, 8-bit
    // channels), read from other bits.
    let high = PixelFormat {
        red_shift: 24,
        green_shift: 16,
        blue_shift: 8,
        ..PixelFormat::RGB888
    };
    let mut be565 = PixelFormat::RGB565;
    be565.big_endian = true;
    let mut full32 = PixelFormat::RGB888;
    full32.depth = 32;
    full32.red_max = 1023; // not 8-bit channels: four-byte TPIXELs
    vec![
        ("rgb888", PixelFormat::RGB888),
        ("rgb888-be", be),
        ("high", high),
        ("rgb565", PixelFormat::RGB565),
        ("rgb565-be", be565),
        ("bgr233", PixelFormat::BGR233),
        ("10-bit red", full32),
    ]
}

/// The compression type of a Tight rectangle: 8 fill, else stream | 4 when a filter id
/// follows; and that filter id.
fn kind(r: &Rect) -> (u8, Option<u8>) {
    let t = r.data[0] >> 4;
    (t, (t < 8 && t & 4 != 0).then(|| r.data[1]))
}

#[test]
fn every_image_round_trips_in_every_format_over_one_connection() {
    let (w, h) = (150u16, 83u16);
    // One encoder and one decoder for everything: the four streams run through every
    // image, format and part, as they would on one connection.
    let mut enc = Encoder::new();
    let mut dec = Decoder::new(Limits::default());
    let mut rects_sent = 0;
    for (pf_name, pf) in formats() {
        for kind_name in KINDS {
            let src = image(kind_name, w, h);
            let want = src.as_seen_in(&pf);
            let mut got = Framebuffer::new(w, h);
            let whole = enc.encode(&src, TIGHT, 0, 0, w, h, &pf).unwrap();
            transmit(&[whole], &pf, &mut dec, &mut got);
            assert!(got == want, "{kind_name} {pf_name}: whole");
            // Overlapping odd parts, a 1x1 and an empty one, over a blank screen.
            let mut got = Framebuffer::new(w, h);
            let mut rects = Vec::new();
            for (x, y, pw, ph) in [
                (0, 0, 70, 40),
                (65, 3, 85, 80),
                (60, 0, 90, 5),
                (0, 40, 66, 43),
                (149, 82, 1, 1),
                (3, 1, 2, 1),
                (1, 1, 0, 0),
            ] {
                enc.encode_into(&src, TIGHT, x, y, pw, ph, &pf, &mut rects)
                    .unwrap();
            }
            rects_sent += rects.len() + 1;
            transmit(&rects, &pf, &mut dec, &mut got);
            assert!(got == want, "{kind_name} {pf_name}: in parts");
        }
    }
    assert!(rects_sent > 300);
}

#[test]
fn each_kind_of_image_gets_its_compression() {
    let mut be = PixelFormat::RGB888;
    be.big_endian = true;
    for pf in [PixelFormat::RGB888, be, PixelFormat::RGB565] {
        let mut enc = Encoder::new();
        let mut check = |kind_name: &str, want: (u8, Option<u8>)| {
            let r = enc
                .encode(&image(kind_name, 120, 90), TIGHT, 0, 0, 120, 90, &pf)
                .unwrap();
            assert_eq!(kind(&r), want, "{kind_name} in {pf:?}");
        };
        check("solid", (8, None)); // fill
        check("text", (1 | 4, Some(1))); // stream 1, palette filter
        check("blocks", (2 | 4, Some(1))); // stream 2, palette filter
        check("photo", (3 | 4, Some(2))); // stream 3, gradient filter
        check("noise", (0, None)); // stream 0, copy filter
    }
    // One byte a pixel: a palette index saves nothing, and the specification allows the
    // gradient filter only at 16 and 32 bits.
    let mut enc = Encoder::new();
    let pf = PixelFormat::BGR233;
    for (kind_name, want) in [
        ("text", (5, Some(1))),
        ("blocks", (0, None)),
        ("photo", (0, None)),
    ] {
        let r = enc
            .encode(&image(kind_name, 120, 90), TIGHT, 0, 0, 120, 90, &pf)
            .unwrap();
        assert_eq!(kind(&r), want, "{kind_name} in BGR233");
    }
    // Without the gradient filter, the photograph is copied.
    let mut enc = Encoder::new();
    enc.tight.gradient = false;
    let r = enc
        .encode(
            &image("photo", 120, 90),
            TIGHT,
            0,
            0,
            120,
            90,
            &PixelFormat::RGB888,
        )
        .unwrap();
    assert_eq!(kind(&r), (0, None));
}

#[test]
fn wide_and_large_areas_are_split_into_legal_rectangles() {
    let (w, h) = (3000u16, 45u16);
    for (pf_name, pf) in formats() {
        for kind_name in ["mixed", "text", "photo"] {
            let src = image(kind_name, w, h);
            let mut enc = Encoder::new();
            let mut rects = Vec::new();
            enc.encode_into(&src, TIGHT, 0, 0, w, h, &pf, &mut rects)
                .unwrap();
            assert!(rects.len() >= 4, "{} rectangles", rects.len());
            for r in &rects {
                assert!(r.width <= TIGHT_MAX_WIDTH, "{}", r.width);
                assert!(r.width as u32 * r.height as u32 <= TIGHT_MAX_PIXELS);
            }
            let mut got = Framebuffer::new(w, h);
            transmit(&rects, &pf, &mut Decoder::new(Limits::default()), &mut got);
            assert!(got == src.as_seen_in(&pf), "{kind_name} {pf_name}");
        }
    }
    // One rectangle cannot hold it; nothing is appended when the area is outside.
    let src = image("text", w, h);
    let mut enc = Encoder::new();
    let pf = PixelFormat::RGB888;
    assert!(matches!(
        enc.encode(&src, TIGHT, 0, 0, w, h, &pf),
        Err(RfbError::TooLong {
            field: "width",
            len: 3000,
            max: 2048,
            ..
        })
    ));
    assert!(matches!(
        enc.encode(&src, TIGHT, 0, 0, 2000, 40, &pf),
        Err(RfbError::TooLong {
            field: "pixels",
            ..
        })
    ));
    let mut rects = Vec::new();
    assert!(enc
        .encode_into(&src, TIGHT, 1, 0, w, h, &pf, &mut rects)
        .is_err());
    assert!(rects.is_empty());
}

#[test]
fn level_changes_reset_the_viewer_s_stream_and_still_decode() {
    let src = image("mixed", 200, 100);
    let pf = PixelFormat::RGB888;
    let mut enc = Encoder::new();
    enc.tight.gradient = false;
    let mut dec = Decoder::new(Limits::default());
    let mut got = Framebuffer::new(200, 100);
    let mut sizes = Vec::new();
    for (i, level) in [6, 6, 9, 9, 1, 0, 6].into_iter().enumerate() {
        enc.tight.level = level;
        let y = (i * 14) as u16;
        let r = enc.encode(&src, TIGHT, 0, y, 200, 14, &pf).unwrap();
        let resets = r.data[0] & 0x0f;
        // Only stream 0 (copy) is used; a new level restarts it.
        let changed = i > 0 && [6, 6, 9, 9, 1, 0, 6][i - 1] != level;
        assert_eq!(resets, if changed { 1 } else { 0 }, "level {level} at {i}");
        sizes.push((level, r.data.len()));
        transmit(&[r], &pf, &mut dec, &mut got);
    }
    assert_eq!(
        got.get_rect(0, 0, 200, 98).unwrap(),
        src.get_rect(0, 0, 200, 98).unwrap()
    );
    // Level 0 stores: larger than the pixels themselves.
    let stored = sizes[5].1;
    assert!(stored > 200 * 14 * 3, "{sizes:?}");
}

/// Bytes written by hand from the specification's Tight section.
#[test]
fn a_fill_and_a_small_palette_rectangle_are_the_specification_s_bytes() {
    let mut fb = Framebuffer::new(8, 4);
    fb.fill_rect(0, 0, 8, 4, 0x123456).unwrap();
    let mut enc = Encoder::new();
    let r = enc
        .encode(&fb, TIGHT, 0, 0, 8, 4, &PixelFormat::RGB888)
        .unwrap();
    assert_eq!(
        r.data[..],
        [
            0x80, // compression-control: 1000 FillCompression, no stream resets
            0x12, 0x34, 0x56, // TPIXEL: red, green, blue (32 bpp, depth 24, 8-bit)
        ]
    );
    // In RGB565 a TPIXEL is the pixel: 0x123456 → r 2, g 13, b 10 → 0x11aa, little-endian.
    let r = enc
        .encode(&fb, TIGHT, 0, 0, 8, 4, &PixelFormat::RGB565)
        .unwrap();
    assert_eq!(r.data[..], [0x80, 0xaa, 0x11]);

    // Two colours, 10x2: rows of 10 bits padded to 2 bytes, 4 bytes in all (under 12:
    // no zlib, no length).
    let mut fb = Framebuffer::new(10, 2);
    fb.fill_rect(0, 0, 10, 2, 0xffffff).unwrap();
    fb.put_rect(1, 0, 1, 1, &[0x0000ff]).unwrap();
    fb.put_rect(9, 1, 1, 1, &[0x0000ff]).unwrap();
    let r = enc
        .encode(&fb, TIGHT, 0, 0, 10, 2, &PixelFormat::RGB888)
        .unwrap();
    assert_eq!(
        r.data[..],
        [
            0x50, // BasicCompression: bit 6 read-filter-id, bits 5-4 stream 1, no resets
            0x01, // filter-id: PaletteFilter
            0x01, // number of colours - 1
            0xff,
            0xff,
            0xff, // colour 0 (the first seen): white
            0x00,
            0x00,
            0xff, // colour 1: blue
            0b0100_0000,
            0b0000_0000, // row 0: pixel 1 is blue, leftmost pixel in bit 7
            0b0000_0000,
            0b0100_0000, // row 1: pixel 9 is blue, padding bits zero
        ]
    );
    let mut got = Framebuffer::new(10, 2);
    Decoder::new(Limits::default())
        .apply(&r, &PixelFormat::RGB888, &mut got)
        .unwrap();
    assert_eq!(got, fb);

    // Three colours in 3x2 (no more than half the pixels): one byte an index, 6 bytes.
    let mut fb = Framebuffer::new(3, 2);
    fb.put_rect(
        0,
        0,
        3,
        2,
        &[0xff0000, 0x00ff00, 0xff0000, 0x0000ff, 0x0000ff, 0x00ff00],
    )
    .unwrap();
    let r = enc
        .encode(&fb, TIGHT, 0, 0, 3, 2, &PixelFormat::RGB565)
        .unwrap();
    assert_eq!(
        r.data[..],
        [
            0x60, // BasicCompression, read-filter-id, stream 2
            0x01, // PaletteFilter
            0x02, // three colours
            0x00, 0xf8, // red in RGB565 (0xf800), little-endian
            0xe0, 0x07, // green (0x07e0)
            0x1f, 0x00, // blue (0x001f)
            0, 1, 0, 2, 2, 1, // indices, row by row
        ]
    );
}

/// Sizes beside ZRLE's on screen-like images of 640x480 (whole screens, then the same
/// screen as 40 horizontal strips, as a proxy's dirty areas would come).
#[test]
fn sizes_beside_zrle() {
    let pf = PixelFormat::RGB888;
    let (w, h) = (640u16, 480u16);
    println!(
        "{:<8} {:>9} {:>9} {:>9} {:>12}",
        "image", "ZRLE", "Tight", "Tight-nogr", "strips T/Z"
    );
    for kind_name in KINDS {
        let src = image(kind_name, w, h);
        let size = |enc: i32, gradient: bool, strips: bool| -> usize {
            let mut e = Encoder::new();
            e.tight.gradient = gradient;
            let mut rects = Vec::new();
            let step = if strips { 12 } else { h };
            for y in (0..h).step_by(step as usize) {
                e.encode_into(&src, enc, 0, y, w, step, &pf, &mut rects)
                    .unwrap();
            }
            let mut got = Framebuffer::new(w, h);
            transmit(&rects, &pf, &mut Decoder::new(Limits::default()), &mut got);
            assert!(got == src);
            rects.iter().map(|r| 12 + r.data.len()).sum()
        };
        let (z, t, tn) = (
            size(ZRLE, true, false),
            size(TIGHT, true, false),
            size(TIGHT, false, false),
        );
        let (zs, ts) = (size(ZRLE, true, true), size(TIGHT, true, true));
        println!("{kind_name:<8} {z:>9} {t:>9} {tn:>9} {:>6}/{:<6}", ts, zs);
        match kind_name {
            // The gradient filter is what makes Tight win on photographs.
            "photo" => assert!(t < tn * 9 / 10 && t < z, "photo: {t} {tn} {z}"),
            "blocks" => {}
            // Elsewhere Tight stays within a quarter of ZRLE.
            _ => assert!(t <= z + z / 4 + 64, "{kind_name}: Tight {t}, ZRLE {z}"),
        }
    }
}
