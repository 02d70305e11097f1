//! ZRLE (RFC 6143 §7.7.6): 64×64 tiles, each raw, solid, a packed palette or run
//! lengths, all in one zlib stream that lasts as long as the connection.

use bytes::{BufMut, BytesMut};
use flate2::{Compress, Compression, FlushCompress};

use crate::wire::{whole, Parse, Reader, Step};
use crate::{Framebuffer, Limits, PixelFormat, RfbError};

pub(crate) const RAW: u8 = 0;
pub(crate) const SOLID: u8 = 1;
pub(crate) const PLAIN_RLE: u8 = 128;

fn bad(what: String) -> Step {
    Step::Bad(RfbError::Corrupt {
        encoding: "ZRLE",
        what,
    })
}

fn tiles(w: u16, h: u16) -> impl Iterator<Item = (u16, u16, u16, u16)> {
    (0..h).step_by(64).flat_map(move |ty| {
        (0..w)
            .step_by(64)
            .map(move |tx| (tx, ty, 64.min(w - tx), 64.min(h - ty)))
    })
}

/// How ZRLE writes a pixel: CPIXEL drops the unused byte of a 32-bit pixel whose
/// colour fits in its 3 low or 3 high bytes (§7.7.6).
#[derive(Clone, Copy)]
struct CPixel {
    pf: PixelFormat,
    /// Bytes per CPIXEL, and for 3-byte ones the shift of the kept bytes.
    len: usize,
    shift: u32,
}

impl CPixel {
    fn new(pf: &PixelFormat) -> CPixel {
        let fits = |limit: u32| {
            [
                (pf.red_max, pf.red_shift),
                (pf.green_max, pf.green_shift),
                (pf.blue_max, pf.blue_shift),
            ]
            .iter()
            .all(|&(max, shift)| {
                ((max as u64) << shift) < (1u64 << 24) << limit && shift as u32 >= limit
            })
        };
        let (len, shift) = if pf.bits_per_pixel == 32 && pf.depth <= 24 && pf.true_colour {
            if fits(0) {
                (3, 0)
            } else if fits(8) {
                (3, 8)
            } else {
                (4, 0)
            }
        } else {
            (pf.bytes_per_pixel(), 0)
        };
        CPixel {
            pf: *pf,
            len,
            shift,
        }
    }

    fn read(&self, r: &mut Reader) -> Parse<u32> {
        let b = r.bytes(self.len)?;
        Ok(if self.len == 3 {
            let v = if self.pf.big_endian {
                (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32
            } else {
                (b[2] as u32) << 16 | (b[1] as u32) << 8 | b[0] as u32
            };
            self.pf.to_rgb(v << self.shift)
        } else {
            self.pf.read_rgb(b)
        })
    }

    fn write(&self, value: u32, out: &mut BytesMut) {
        if self.len == 3 {
            let v = value >> self.shift;
            let b = [(v >> 16) as u8, (v >> 8) as u8, v as u8];
            if self.pf.big_endian {
                out.put_slice(&b);
            } else {
                out.put_slice(&[b[2], b[1], b[0]]);
            }
        } else {
            self.pf.write_value(value, out);
        }
    }
}

/// The receiving end of a connection's ZRLE stream.
pub(super) struct Inflater {
    z: super::zlib::Inflater,
}

impl Inflater {
    pub fn new() -> Inflater {
        Inflater {
            z: super::zlib::Inflater::new(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn decode(
        &mut self,
        data: &[u8],
        x: u16,
        y: u16,
        w: u16,
        h: u16,
        pf: &PixelFormat,
        fb: &mut Framebuffer,
        limits: &Limits,
    ) -> Result<(), RfbError> {
        let cp = CPixel::new(pf);
        // Worst case per tile: the subencoding, a 127-colour palette, and per pixel a
        // CPIXEL and a run-length byte.
        let max: u64 = tiles(w, h)
            .map(|(_, _, tw, th)| {
                1 + 127 * cp.len as u64 + tw as u64 * th as u64 * (cp.len as u64 + 1)
            })
            .sum();
        let max = max.min(limits.max_rect_bytes);
        let plain = self.z.inflate("ZRLE", data, max)?;
        let mut r = Reader::new(&plain);
        let mut px = Vec::with_capacity(64 * 64);
        for (tx, ty, tw, th) in tiles(w, h) {
            whole("ZRLE", decode_tile(&mut r, &cp, tw, th, &mut px))?;
            fb.put_rect(x + tx, y + ty, tw, th, &px)?;
        }
        if r.remaining() != 0 {
            return Err(RfbError::Corrupt {
                encoding: "ZRLE",
                what: format!("{} inflated bytes after the last tile", r.remaining()),
            });
        }
        Ok(())
    }
}

fn decode_tile(r: &mut Reader, cp: &CPixel, tw: u16, th: u16, px: &mut Vec<u32>) -> Parse<()> {
    let n = tw as usize * th as usize;
    px.clear();
    let s = r.u8()?;
    match s {
        RAW => {
            for _ in 0..n {
                px.push(cp.read(r)?);
            }
        }
        SOLID => {
            let c = cp.read(r)?;
            px.resize(n, c);
        }
        2..=16 => {
            let palette = (0..s).map(|_| cp.read(r)).collect::<Parse<Vec<u32>>>()?;
            let bits = match s {
                2 => 1,
                3..=4 => 2,
                _ => 4,
            };
            let row_bytes = (tw as usize * bits).div_ceil(8);
            for _ in 0..th {
                let row = r.bytes(row_bytes)?;
                for i in 0..tw as usize {
                    let bit = i * bits;
                    let idx = (row[bit / 8] >> (8 - bits - bit % 8)) & ((1 << bits) - 1) as u8;
                    px.push(
                        *palette
                            .get(idx as usize)
                            .ok_or_else(|| bad(format!("palette index {idx} of {s} colours")))?,
                    );
                }
            }
        }
        PLAIN_RLE => {
            while px.len() < n {
                let c = cp.read(r)?;
                let run = run_length(r, n - px.len())?;
                px.resize(px.len() + run, c);
            }
        }
        130..=255 => {
            let size = s as usize - 128;
            let palette = (0..size).map(|_| cp.read(r)).collect::<Parse<Vec<u32>>>()?;
            while px.len() < n {
                let b = r.u8()?;
                let idx = (b & 127) as usize;
                let c = *palette
                    .get(idx)
                    .ok_or_else(|| bad(format!("palette index {idx} of {size} colours")))?;
                let run = if b & 128 != 0 {
                    run_length(r, n - px.len())?
                } else {
                    1
                };
                px.resize(px.len() + run, c);
            }
        }
        _ => return Err(bad(format!("tile subencoding {s} is not defined"))),
    }
    Ok(())
}

/// A run length: bytes of 255 continue it, the last is below 255; the run is their
/// sum plus one, and may not pass the tile's end.
fn run_length(r: &mut Reader, left: usize) -> Parse<usize> {
    let mut len = 1usize;
    loop {
        let b = r.u8()?;
        len += b as usize;
        if len > left {
            return Err(bad(format!(
                "run of {len} pixels where {left} are left in the tile"
            )));
        }
        if b != 255 {
            return Ok(len);
        }
    }
}

/// The sending end of a connection's zlib stream.
pub(super) struct Deflater {
    z: Compress,
}

impl Deflater {
    pub fn new() -> Deflater {
        Deflater {
            z: Compress::new(Compression::new(6), true),
        }
    }

    pub fn encode(&mut self, values: &[u32], w: u16, h: u16, pf: &PixelFormat, out: &mut BytesMut) {
        let mut plain = BytesMut::new();
        encode_tiles(values, w, h, &CPixel::new(pf), &mut plain);
        let mut z = Vec::with_capacity(plain.len() / 2 + 64);
        let mut used = 0;
        loop {
            z.reserve(64 << 10);
            let before = self.z.total_in();
            self.z
                .compress_vec(&plain[used..], &mut z, FlushCompress::Sync)
                .expect("deflate of a buffer in memory");
            used += (self.z.total_in() - before) as usize;
            if used == plain.len() && z.len() < z.capacity() {
                break;
            }
        }
        out.put_u32(z.len() as u32);
        out.put_slice(&z);
    }
}

/// The tiles of a `w × h` rectangle of pixel values, before zlib.
fn encode_tiles(values: &[u32], w: u16, h: u16, cp: &CPixel, out: &mut BytesMut) {
    let mut tile = Vec::with_capacity(64 * 64);
    for (tx, ty, tw, th) in tiles(w, h) {
        tile.clear();
        for row in ty..ty + th {
            let at = row as usize * w as usize + tx as usize;
            tile.extend_from_slice(&values[at..at + tw as usize]);
        }
        encode_tile(&tile, tw, cp, out);
    }
}

/// ZRLE's tiles without its zlib stream, in RGB888 (three-byte CPIXELs): palettes,
/// runs and packed indices, for a link that compresses everything it carries with
/// a stream of its own (Varg's proxies). Appends the `w × h` canonical pixels.
pub fn packed_tiles(pixels: &[u32], w: u16, h: u16, out: &mut BytesMut) {
    assert_eq!(pixels.len(), w as usize * h as usize, "w × h pixels");
    let pf = PixelFormat::RGB888;
    let values: Vec<u32> = pixels.iter().map(|&c| pf.from_rgb(c)).collect();
    encode_tiles(&values, w, h, &CPixel::new(&pf), out);
}

/// Paints [`packed_tiles`] of a `w × h` area at (x, y) of `fb`; returns the bytes
/// they took from `data`.
pub fn paint_packed_tiles(
    data: &[u8],
    x: u16,
    y: u16,
    w: u16,
    h: u16,
    fb: &mut Framebuffer,
) -> Result<usize, RfbError> {
    let pf = PixelFormat::RGB888;
    let cp = CPixel::new(&pf);
    fb.check("packed tiles", x, y, w, h)?;
    let mut r = Reader::new(data);
    let mut px = Vec::with_capacity(64 * 64);
    for (tx, ty, tw, th) in tiles(w, h) {
        whole("ZRLE", decode_tile(&mut r, &cp, tw, th, &mut px))?;
        fb.put_rect(x + tx, y + ty, tw, th, &px)?;
    }
    Ok(data.len() - r.remaining())
}

/// Runs of equal values: (value, length).
fn runs(tile: &[u32]) -> Vec<(u32, usize)> {
    let mut runs: Vec<(u32, usize)> = Vec::new();
    for &v in tile {
        match runs.last_mut() {
            Some((last, n)) if *last == v => *n += 1,
            _ => runs.push((v, 1)),
        }
    }
    runs
}

fn put_run_length(len: usize, out: &mut BytesMut) {
    let mut left = len - 1;
    while left >= 255 {
        out.put_u8(255);
        left -= 255;
    }
    out.put_u8(left as u8);
}

/// Writes the smallest of the tile kinds that can hold this tile.
fn encode_tile(tile: &[u32], tw: u16, cp: &CPixel, out: &mut BytesMut) {
    let mut palette: Vec<u32> = Vec::new();
    for &v in tile {
        if !palette.contains(&v) {
            if palette.len() == 127 {
                palette.clear();
                break;
            }
            palette.push(v);
        }
    }
    if palette.len() == 1 {
        out.put_u8(SOLID);
        cp.write(palette[0], out);
        return;
    }
    let runs = runs(tile);
    let len_bytes = |n: usize| (n - 1) / 255 + 1;
    let raw = tile.len() * cp.len;
    let plain_rle: usize = runs.iter().map(|&(_, n)| cp.len + len_bytes(n)).sum();
    let p = palette.len();
    let packed_bits = match p {
        2 => 1,
        3..=4 => 2,
        5..=16 => 4,
        _ => 0,
    };
    let th = tile.len() / tw as usize;
    let packed =
        (packed_bits > 0).then(|| p * cp.len + th * (tw as usize * packed_bits).div_ceil(8));
    let palette_rle = (p > 1).then(|| {
        p * cp.len
            + runs
                .iter()
                .map(|&(_, n)| if n == 1 { 1 } else { 1 + len_bytes(n) })
                .sum::<usize>()
    });
    let index = |v: u32| {
        palette
            .iter()
            .position(|&c| c == v)
            .expect("in the palette") as u8
    };
    let best = [Some(raw), Some(plain_rle), packed, palette_rle]
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.map(|s| (s, i)))
        .min()
        .expect("raw is always possible")
        .1;
    match best {
        0 => {
            out.put_u8(RAW);
            tile.iter().for_each(|&v| cp.write(v, out));
        }
        1 => {
            out.put_u8(PLAIN_RLE);
            for &(v, n) in &runs {
                cp.write(v, out);
                put_run_length(n, out);
            }
        }
        2 => {
            out.put_u8(p as u8);
            palette.iter().for_each(|&v| cp.write(v, out));
            for row in tile.chunks_exact(tw as usize) {
                let mut byte = 0u8;
                let mut filled = 0;
                for &v in row {
                    byte |= index(v) << (8 - packed_bits - filled);
                    filled += packed_bits;
                    if filled == 8 {
                        out.put_u8(byte);
                        (byte, filled) = (0, 0);
                    }
                }
                if filled > 0 {
                    out.put_u8(byte);
                }
            }
        }
        _ => {
            out.put_u8(128 + p as u8);
            palette.iter().for_each(|&v| cp.write(v, out));
            for &(v, n) in &runs {
                if n == 1 {
                    out.put_u8(index(v));
                } else {
                    out.put_u8(index(v) | 128);
                    put_run_length(n, out);
                }
            }
        }
    }
}
