//! Rectangles written byte by byte from RFC 6143's definitions (§7.7), painted by the
//! decoder: they check the decoders against the specification rather than against
//! this crate's own encoders.

use std::io::Write;

use bytes::Bytes;
use flate2::write::ZlibEncoder;
use flate2::{Compress, Compression, FlushCompress};
use vargr_rfb::encoding::{COPY_RECT, DESKTOP_SIZE, HEXTILE, RAW, RRE, ZRLE};
use vargr_rfb::{Decoder, Framebuffer, Limits, PixelFormat, Rect, RfbError};

const R: u32 = 0xff0000;
const G: u32 = 0x00ff00;
const B: u32 = 0x0000ff;
const K: u32 = 0x000000;
const WH: u32 = 0xffffff;

fn rect(x: u16, y: u16, width: u16, height: u16, encoding: i32, data: Vec<u8>) -> Rect {
    Rect {
        x,
        y,
        width,
        height,
        encoding,
        data: Bytes::from(data),
    }
}

/// A pixel of RGB888 (32 bits, little-endian, red at bit 16) on the wire.
fn px(rgb: u32) -> [u8; 4] {
    rgb.to_le_bytes()
}

fn paint(fb: &mut Framebuffer, r: &Rect) -> Result<(), RfbError> {
    Decoder::new(Limits::default()).apply(r, &PixelFormat::RGB888, fb)
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn raw_is_pixels_row_by_row() {
    let mut fb = Framebuffer::new(4, 2);
    // 2x2 at (1,0): red, green / blue, white.
    paint(
        &mut fb,
        &rect(1, 0, 2, 2, RAW, cat(&[&px(R), &px(G), &px(B), &px(WH)])),
    )
    .unwrap();
    assert_eq!(fb.pixels(), &[K, R, G, K, K, B, WH, K]);
    // One byte short, and one too many.
    assert!(paint(&mut fb, &rect(0, 0, 1, 1, RAW, vec![1, 2, 3])).is_err());
    assert!(paint(&mut fb, &rect(0, 0, 1, 1, RAW, vec![1, 2, 3, 4, 5])).is_err());
}

#[test]
fn copy_rect_is_a_source_position() {
    let mut fb = Framebuffer::new(3, 1);
    fb.put_rect(0, 0, 3, 1, &[R, G, B]).unwrap();
    // src-x-position 0, src-y-position 0 (u16 each), copied to (1,0), 2x1.
    paint(&mut fb, &rect(1, 0, 2, 1, COPY_RECT, vec![0, 0, 0, 0])).unwrap();
    assert_eq!(fb.pixels(), &[R, R, G]);
    // A source past the edge.
    assert!(matches!(
        paint(&mut fb, &rect(0, 0, 2, 1, COPY_RECT, vec![0, 2, 0, 0])),
        Err(RfbError::OutOfBounds { .. })
    ));
}

#[test]
fn rre_is_a_background_and_subrectangles() {
    let mut fb = Framebuffer::new(4, 3);
    // number-of-subrectangles 2, background white, then (pixel, x, y, w, h) twice.
    let data = cat(&[
        &[0, 0, 0, 2],
        &px(WH),
        &px(R),
        &[0, 0, 0, 0, 0, 2, 0, 1],
        &px(B),
        &[0, 3, 0, 1, 0, 1, 0, 2],
    ]);
    paint(&mut fb, &rect(0, 0, 4, 3, RRE, data)).unwrap();
    assert_eq!(fb.pixels(), &[R, R, WH, WH, WH, WH, WH, B, WH, WH, WH, B]);
    // A subrectangle reaching past the rectangle.
    let data = cat(&[&[0, 0, 0, 1], &px(WH), &px(R), &[0, 3, 0, 0, 0, 2, 0, 1]]);
    assert!(matches!(
        paint(&mut fb, &rect(0, 0, 4, 3, RRE, data)),
        Err(RfbError::Corrupt { .. })
    ));
}

#[test]
fn hextile_subencodings() {
    // 40x17: tiles of 16x16, 16x16, 8x16 on the first row, 16x1, 16x1, 8x1 below.
    let mut fb = Framebuffer::new(40, 17);
    let raw_tile: Vec<u8> = (0..8 * 16)
        .flat_map(|i| px(if i % 2 == 0 { R } else { G }))
        .collect();
    let data = cat(&[
        // Tile 1: BackgroundSpecified (2) | ForegroundSpecified (4) | AnySubrects (8):
        // white background, blue foreground, 1 subrectangle at x=2,y=3 of 4x5
        // (x-and-y 0x23, width-and-height (4-1)<<4 | (5-1) = 0x34).
        &[2 | 4 | 8],
        &px(WH),
        &px(B),
        &[1, 0x23, 0x34],
        // Tile 2: AnySubrects | SubrectsColoured (16), background carried over (white):
        // 2 subrectangles with their own colours: red 1x1 at 0,0; green 16x1 at 0,15.
        &[8 | 16, 2],
        &px(R),
        &[0x00, 0x00],
        &px(G),
        &[0x0f, 0xf0],
        // Tile 3 (8x16): Raw (1), 8x16 pixels alternating red and green.
        &[1],
        &raw_tile,
        // Tile 4 (16x1): BackgroundSpecified, black.
        &[2],
        &px(K),
        // Tile 5 (16x1): subencoding 0, black carried over.
        &[0],
        // Tile 6 (8x1): BackgroundSpecified white, AnySubrects with the foreground
        // carried over across the raw tile: green, the last coloured subrectangle's
        // (tile 2), as TigerVNC's and libvncserver's decoders take it; 1 subrectangle
        // of 2x1 at 6,0.
        &[2 | 8],
        &px(WH),
        &[1, 0x60, 0x10],
    ]);
    paint(&mut fb, &rect(0, 0, 40, 17, HEXTILE, data)).unwrap();
    let at = |x: u16, y: u16| fb.get(x, y);
    assert_eq!(
        (at(0, 0), at(2, 3), at(5, 7), at(6, 7), at(2, 8)),
        (WH, B, B, WH, WH)
    );
    assert_eq!(
        (at(16, 0), at(17, 0), at(16, 15), at(31, 15), at(20, 7)),
        (R, WH, G, G, WH)
    );
    assert_eq!((at(32, 0), at(33, 0), at(32, 1)), (R, G, R));
    assert_eq!(
        (at(0, 16), at(31, 16), at(37, 16), at(38, 16), at(39, 16)),
        (K, K, WH, G, G)
    );

    // A first tile without a background, a foreground never given, a subrectangle
    // leaving its tile, unknown subencoding bits, data left over.
    for bad in [
        vec![0u8],
        cat(&[&[2 | 8], &px(WH), &[1, 0, 0]]),
        cat(&[&[2 | 4 | 8], &px(WH), &px(B), &[1, 0xf0, 0x10]]),
        vec![0x20],
        cat(&[&[2], &px(WH), &[0]]),
    ] {
        let mut fb = Framebuffer::new(16, 16);
        assert!(
            paint(&mut fb, &rect(0, 0, 16, 16, HEXTILE, bad.clone())).is_err(),
            "{bad:?}"
        );
    }
}

/// A ZRLE rectangle: u32 length, then the zlib stream of the tiles.
fn zrle(z: &mut Compress, tiles: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(tiles.len() + 1024);
    z.compress_vec(tiles, &mut out, FlushCompress::Sync)
        .unwrap();
    cat(&[&(out.len() as u32).to_be_bytes(), &out])
}

/// A CPIXEL of RGB888: the three low bytes, little-endian (§7.7.6).
fn cpx(rgb: u32) -> [u8; 3] {
    let b = rgb.to_le_bytes();
    [b[0], b[1], b[2]]
}

#[test]
fn zrle_tile_kinds_share_one_stream() {
    // 130x3: three tiles of 64x3, 64x3, 2x3 per rectangle.
    let mut fb = Framebuffer::new(130, 6);
    let mut z = Compress::new(Compression::default(), true);
    let mut dec = Decoder::new(Limits::default());
    let pf = PixelFormat::RGB888;

    // Rectangle 1 (rows 0-2).
    // Tile 1, solid (1): red.
    let mut tiles = cat(&[&[1], &cpx(R)]);
    // Tile 2, packed palette of 2 colours (subencoding 2): 1 bit per pixel, rows
    // padded to whole bytes, most significant bit first: 64 pixels = 8 bytes a row.
    // Row 0 all index 1 (blue), rows 1 and 2 alternate 1,0 (0xaa).
    tiles.extend(cat(&[&[2], &cpx(WH), &cpx(B), &[0xff; 8], &[0xaa; 16]]));
    // Tile 3 (2x3), raw (0): six CPIXELs.
    tiles.extend(cat(&[
        &[0],
        &cpx(R),
        &cpx(G),
        &cpx(B),
        &cpx(K),
        &cpx(WH),
        &cpx(R),
    ]));
    let r1 = rect(0, 0, 130, 3, ZRLE, zrle(&mut z, &tiles));
    dec.apply(&r1, &pf, &mut fb).unwrap();
    assert_eq!((fb.get(0, 0), fb.get(63, 2)), (R, R));
    assert_eq!(
        (
            fb.get(64, 0),
            fb.get(127, 0),
            fb.get(64, 1),
            fb.get(65, 1),
            fb.get(127, 2)
        ),
        (B, B, B, WH, WH)
    );
    assert_eq!(fb.get_rect(128, 0, 2, 3).unwrap(), vec![R, G, B, K, WH, R]);

    // Rectangle 2 (rows 3-5) continues the same zlib stream.
    // Tile 1 (64x3 = 192 pixels), plain RLE (128): CPIXEL then run length as bytes
    // summed plus one: green for 1 + 100 pixels, red for 1 + 90.
    let mut tiles = cat(&[&[128], &cpx(G), &[100], &cpx(R), &[90]]);
    // Tile 2, palette RLE of 3 colours (128 + 3): index 2 (blue) with the top bit set
    // takes a run of 1 + 150; index 0 (black) with the top bit clear is one pixel;
    // index 1 (white) with a run of 1 + 39.
    tiles.extend(cat(&[
        &[131],
        &cpx(K),
        &cpx(WH),
        &cpx(B),
        &[0x82, 150, 0x00, 0x81, 39],
    ]));
    // Tile 3 (2x3 = 6 pixels), packed palette of 3 (2 bits a pixel, a row is 1 byte):
    // rows "2 1", "0 0", "1 2" → 0b1001_0000, 0, 0b0110_0000.
    tiles.extend(cat(&[&[3], &cpx(R), &cpx(G), &cpx(B), &[0x90, 0x00, 0x60]]));
    let r2 = rect(0, 3, 130, 3, ZRLE, zrle(&mut z, &tiles));
    dec.apply(&r2, &pf, &mut fb).unwrap();
    let row = |y| fb.get_rect(0, y, 64, 1).unwrap();
    assert!(row(3).iter().all(|&c| c == G));
    assert_eq!(&row(4)[..37], &[G; 37]);
    assert!(row(4)[37..].iter().all(|&c| c == R) && row(5).iter().all(|&c| c == R));
    let t2: Vec<u32> = (3..6)
        .flat_map(|y| fb.get_rect(64, y, 64, 1).unwrap())
        .collect();
    assert!(t2[..151].iter().all(|&c| c == B));
    assert_eq!(t2[151], K);
    assert!(t2[152..].iter().all(|&c| c == WH));
    assert_eq!(fb.get_rect(128, 3, 2, 3).unwrap(), vec![B, G, R, R, G, B]);

    // A fresh decoder cannot read rectangle 2: it is the middle of a stream.
    assert!(Decoder::new(Limits::default())
        .apply(&r2, &pf, &mut fb)
        .is_err());
}

#[test]
fn zrle_refuses_malformed_tiles() {
    let pf = PixelFormat::RGB888;
    // One 4x1 tile per case.
    for (what, tiles) in [
        ("unused subencoding 17", vec![17u8]),
        ("unused subencoding 129", vec![129]),
        (
            "packed index 3 of a 3-colour palette",
            cat(&[&[3], &cpx(R), &cpx(G), &cpx(B), &[0xff]]),
        ),
        ("run past the tile", cat(&[&[128], &cpx(R), &[4]])),
        (
            "palette RLE index past palette",
            cat(&[&[130], &cpx(R), &cpx(G), &[0x05]]),
        ),
        ("ends early", cat(&[&[0], &cpx(R)])),
        ("bytes after the last tile", cat(&[&[1], &cpx(R), &[0]])),
    ] {
        let mut z = ZlibEncoder::new(Vec::new(), Compression::default());
        z.write_all(&tiles).unwrap();
        let comp = z.finish().unwrap();
        let data = cat(&[&(comp.len() as u32).to_be_bytes(), &comp]);
        let mut fb = Framebuffer::new(4, 1);
        let r = Decoder::new(Limits::default()).apply(&rect(0, 0, 4, 1, ZRLE, data), &pf, &mut fb);
        assert!(r.is_err(), "{what}");
    }
    // Garbage that is not zlib.
    let mut fb = Framebuffer::new(4, 1);
    let r = Decoder::new(Limits::default()).apply(
        &rect(0, 0, 4, 1, ZRLE, vec![0, 0, 0, 2, 0x12, 0x34]),
        &pf,
        &mut fb,
    );
    assert!(matches!(
        r,
        Err(RfbError::Corrupt {
            encoding: "ZRLE",
            ..
        })
    ));
}

#[test]
fn zrle_cpixel_in_16_bits_is_the_whole_pixel() {
    let pf = PixelFormat::RGB565;
    let mut z = Compress::new(Compression::default(), true);
    // One 2x1 tile, raw: 16-bit little-endian pixels 0xf800 (red) and 0x001f (blue).
    let data = zrle(&mut z, &[0, 0x00, 0xf8, 0x1f, 0x00]);
    let mut fb = Framebuffer::new(2, 1);
    Decoder::new(Limits::default())
        .apply(&rect(0, 0, 2, 1, ZRLE, data), &pf, &mut fb)
        .unwrap();
    assert_eq!(fb.pixels(), &[R, B]);
}

#[test]
fn desktop_size_resizes() {
    let mut fb = Framebuffer::new(4, 4);
    // The rectangle's width and height are the new size; no data follows.
    paint(&mut fb, &rect(0, 0, 8, 2, DESKTOP_SIZE, vec![])).unwrap();
    assert_eq!((fb.width(), fb.height()), (8, 2));
    let huge = Rect::desktop_size(60000, 2);
    assert!(matches!(
        paint(&mut fb, &huge),
        Err(RfbError::TooLong { .. })
    ));
}

#[test]
fn zrle_run_lengths_continue_past_255() {
    let mut z = Compress::new(Compression::default(), true);
    // One 20x20 tile (400 pixels), plain RLE: green for 1 + 255 + 44 = 300 pixels
    // (a byte of 255 continues the length), then red for 1 + 99.
    let data = zrle(&mut z, &cat(&[&[128], &cpx(G), &[255, 44], &cpx(R), &[99]]));
    let mut fb = Framebuffer::new(20, 20);
    Decoder::new(Limits::default())
        .apply(
            &rect(0, 0, 20, 20, ZRLE, data),
            &PixelFormat::RGB888,
            &mut fb,
        )
        .unwrap();
    assert!(fb.pixels()[..300].iter().all(|&c| c == G));
    assert!(fb.pixels()[300..].iter().all(|&c| c == R));
}

/// Tight's compact length: 7 bits a byte, low first, the top bit saying "more".
fn compact(n: usize) -> Vec<u8> {
    match n {
        0..=127 => vec![n as u8],
        128..=16383 => vec![(n & 0x7f) as u8 | 0x80, (n >> 7) as u8],
        _ => vec![
            (n & 0x7f) as u8 | 0x80,
            ((n >> 7) & 0x7f) as u8 | 0x80,
            (n >> 14) as u8,
        ],
    }
}

#[test]
fn tight_fill_copy_palette_and_gradient() {
    use vargr_rfb::encoding::TIGHT;
    let pf = PixelFormat::RGB888;
    let mut dec = Decoder::new(Limits::default());
    let mut fb = Framebuffer::new(16, 4);
    // TPIXEL in RGB888 is 3 bytes: red, green, blue.
    let (tr, tg, tb, tw) = ([0xff, 0, 0], [0, 0xff, 0], [0, 0, 0xff], [0xff, 0xff, 0xff]);

    // Fill: compression-control 0x80 (type 8), one TPIXEL.
    dec.apply(
        &rect(0, 0, 16, 4, TIGHT, cat(&[&[0x80], &tg])),
        &pf,
        &mut fb,
    )
    .unwrap();
    assert!(fb.pixels().iter().all(|&c| c == G));

    // Basic on stream 0 without a filter byte (copy), 2x1 = 6 bytes: under 12, so
    // sent as is, without zlib or a length.
    dec.apply(
        &rect(0, 0, 2, 1, TIGHT, cat(&[&[0x00], &tr, &tb])),
        &pf,
        &mut fb,
    )
    .unwrap();
    assert_eq!(fb.get_rect(0, 0, 3, 1).unwrap(), vec![R, B, G]);

    // Basic on stream 1 with a filter byte (0x40 | 1 << 4 = 0x50), copy filter (0):
    // 4x1 = 12 bytes, compressed: compact length, then zlib data on stream 1.
    let mut z1 = Compress::new(Compression::default(), true);
    let plain = cat(&[&tw, &tr, &tg, &tb]);
    let mut comp = Vec::with_capacity(100);
    z1.compress_vec(&plain, &mut comp, FlushCompress::Sync)
        .unwrap();
    let r = rect(
        0,
        1,
        4,
        1,
        TIGHT,
        cat(&[&[0x50, 0], &compact(comp.len()), &comp]),
    );
    dec.apply(&r, &pf, &mut fb).unwrap();
    assert_eq!(fb.get_rect(0, 1, 4, 1).unwrap(), vec![WH, R, G, B]);

    // Palette filter (1) with 2 colours (count - 1 = 1): 1 bit a pixel, rows padded
    // to bytes, most significant bit first; 10x2 = 2 bytes a row, 4 bytes: raw.
    let data = cat(&[
        &[0x40, 1, 1],
        &tw,
        &tb,
        &[0b1010_0000, 0b0100_0000, 0xff, 0xc0],
    ]);
    dec.apply(&rect(0, 2, 10, 2, TIGHT, data), &pf, &mut fb)
        .unwrap();
    let row2 = fb.get_rect(0, 2, 10, 1).unwrap();
    assert_eq!(row2, vec![B, WH, B, WH, WH, WH, WH, WH, WH, B]);
    assert!(fb.get_rect(0, 3, 10, 1).unwrap().iter().all(|&c| c == B));

    // Palette of 3 colours: a byte a pixel; 3x1 raw. Then an index past the palette.
    let data = cat(&[&[0x40, 1, 2], &tr, &tg, &tb, &[2, 1, 0]]);
    dec.apply(&rect(13, 0, 3, 1, TIGHT, data), &pf, &mut fb)
        .unwrap();
    assert_eq!(fb.get_rect(13, 0, 3, 1).unwrap(), vec![B, G, R]);
    let data = cat(&[&[0x40, 1, 2], &tr, &tg, &tb, &[3, 1, 0]]);
    assert!(dec
        .apply(&rect(13, 0, 3, 1, TIGHT, data), &pf, &mut fb)
        .is_err());

    // Gradient filter (2), 2x2 = 12 bytes, so compressed on stream 2 (type 0x40 |
    // 2 << 4 = 0x60), after resetting stream 2 (bit 2 of the low nibble: 0x04).
    // Wanted pixels (R,G,B): (10,20,30) (12,20,30) / (11,20,30) (14,22,30).
    // Predictions: first pixel 0 → diff (10,20,30); second: left → (2,0,0);
    // below-left: above → (1,0,0); last: left + above - above-left =
    // (11+12-10, 20, 30) = (13,20,30) → diff (1,2,0).
    let plain = [10, 20, 30, 2, 0, 0, 1, 0, 0, 1, 2, 0];
    let mut z2 = Compress::new(Compression::default(), true);
    let mut comp = Vec::with_capacity(100);
    z2.compress_vec(&plain, &mut comp, FlushCompress::Sync)
        .unwrap();
    let r = rect(
        14,
        2,
        2,
        2,
        TIGHT,
        cat(&[&[0x64, 2], &compact(comp.len()), &comp]),
    );
    dec.apply(&r, &pf, &mut fb).unwrap();
    assert_eq!(
        fb.get_rect(14, 2, 2, 2).unwrap(),
        vec![0x0a141e, 0x0c141e, 0x0b141e, 0x0e161e]
    );

    // JPEG (type 9) is refused, PNG (type 10) too.
    assert!(dec
        .apply(&rect(0, 0, 1, 1, TIGHT, vec![0x90, 1, 0]), &pf, &mut fb)
        .is_err());
    assert!(dec
        .apply(&rect(0, 0, 1, 1, TIGHT, vec![0xa0, 1, 0]), &pf, &mut fb)
        .is_err());
}

#[test]
fn tight_tpixel_is_the_pixel_outside_rgb888() {
    use vargr_rfb::encoding::TIGHT;
    // In RGB565 a TPIXEL is the 16-bit pixel: fill with 0x07e0 (green), little-endian.
    let mut fb = Framebuffer::new(2, 2);
    Decoder::new(Limits::default())
        .apply(
            &rect(0, 0, 2, 2, TIGHT, vec![0x80, 0xe0, 0x07]),
            &PixelFormat::RGB565,
            &mut fb,
        )
        .unwrap();
    assert!(fb.pixels().iter().all(|&c| c == G));
    assert_eq!(compact(300), vec![0xac, 0x02]);
}
