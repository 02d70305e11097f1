//! Tight's encoder (encoding 7, without JPEG), written from the RFB community's
//! specification. Per rectangle it picks what the colours in it make cheapest:
//!
//! - one colour: a fill, the colour alone;
//! - two: the palette filter at one bit a pixel (zlib stream 1);
//! - up to 256, no more than half the pixels: the palette filter at one byte a pixel
//!   (stream 2), unless a pixel is one byte anyway;
//! - more: the pixels as they are (copy filter, stream 0) or, when the prediction
//!   differences have clearly less entropy, the gradient filter (stream 3).
//!
//! Each kind of data has its own stream so that zlib's window holds earlier data of the
//! same kind; the streams last as long as the connection, as the decoder's do. A level
//! change restarts a stream and sets its reset bit, because the zlib backend in use
//! cannot change the level of a running stream.
//!
//! Tight rectangles are at most 2048 pixels wide (the specification) and, here, at most
//! 65536 pixels: the most Tight servers put in one rectangle, which viewers' buffers are
//! sized for. [`pieces`] cuts an area into such rectangles.

use bytes::{BufMut, BytesMut};
use flate2::{Compress, Compression, FlushCompress};

use super::tight::{
    tpixel_len, COPY_FILTER, FILL, GRADIENT_FILTER, MIN_TO_COMPRESS, PALETTE_FILTER,
};
use crate::PixelFormat;

/// The widest Tight rectangle (the specification's limit).
pub const MAX_WIDTH: u16 = 2048;
/// The most pixels this encoder puts in one Tight rectangle.
pub const MAX_PIXELS: u32 = 65536;

const COPY_STREAM: usize = 0;
const MONO_STREAM: usize = 1;
const PALETTE_STREAM: usize = 2;
const GRADIENT_STREAM: usize = 3;

/// How Tight rectangles are made; it may change between rectangles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TightOptions {
    /// zlib's level for the four streams, 0 (store) to 9; 6 by default, zlib's own
    /// default and TightVNC's default compression level.
    pub level: u32,
    /// Whether the gradient filter may be chosen for rectangles of many colours.
    pub gradient: bool,
}

impl Default for TightOptions {
    fn default() -> TightOptions {
        TightOptions {
            level: 6,
            gradient: true,
        }
    }
}

/// Whether a `w × h` rectangle is one Tight may send.
pub(super) fn fits(w: u16, h: u16) -> bool {
    w <= MAX_WIDTH && w as u32 * h as u32 <= MAX_PIXELS
}

/// Cuts the area at (x, y) of `w × h` into rectangles Tight may send, row by
/// row: equal columns no wider than [`MAX_WIDTH`], as many rows as [`MAX_PIXELS`]
/// allows. An empty area is one empty rectangle.
pub fn pieces(x: u16, y: u16, w: u16, h: u16) -> Vec<(u16, u16, u16, u16)> {
    if w == 0 || h == 0 {
        return vec![(x, y, w, h)];
    }
    let cols = (w as u32).div_ceil(MAX_WIDTH as u32);
    let cw = (w as u32).div_ceil(cols);
    let rows_per = (MAX_PIXELS / cw).max(1);
    let mut out = Vec::new();
    let mut py = 0u32;
    while py < h as u32 {
        let ph = rows_per.min(h as u32 - py);
        let mut px = 0u32;
        while px < w as u32 {
            let pw = cw.min(w as u32 - px);
            out.push((x + px as u16, y + py as u16, pw as u16, ph as u16));
            px += pw;
        }
        py += ph;
    }
    out
}

/// One zlib stream and the level it was started at (`None` until first used: the
/// viewer's stream is then fresh too).
struct Stream {
    z: Option<(Compress, u32)>,
}

impl Stream {
    /// Makes the stream ready at `level`; true if the viewer must reset its own.
    fn ready(&mut self, level: u32) -> bool {
        match &self.z {
            Some((_, l)) if *l == level => false,
            old => {
                let reset = old.is_some();
                self.z = Some((Compress::new(Compression::new(level), true), level));
                reset
            }
        }
    }

    /// Deflates `data`, flushed so the viewer can inflate all of it now.
    fn deflate(&mut self, data: &[u8]) -> Vec<u8> {
        let (z, _) = self.z.as_mut().expect("ready() came first");
        let mut out = Vec::with_capacity(data.len() / 2 + 64);
        let mut used = 0;
        loop {
            out.reserve(64 << 10);
            let before = z.total_in();
            z.compress_vec(&data[used..], &mut out, FlushCompress::Sync)
                .expect("deflate of a buffer in memory");
            used += (z.total_in() - before) as usize;
            if used == data.len() && out.len() < out.capacity() {
                return out;
            }
        }
    }
}

/// A connection's four Tight zlib streams, on the sending side.
pub(super) struct Encoder {
    streams: [Stream; 4],
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder {
            streams: core::array::from_fn(|_| Stream { z: None }),
        }
    }

    /// Encodes `values` (pixel values of `pf`, `w × h` row by row; the caller checked
    /// [`fits`]) as one rectangle's data.
    pub fn encode(
        &mut self,
        values: &[u32],
        w: u16,
        h: u16,
        pf: &PixelFormat,
        opts: &TightOptions,
        out: &mut BytesMut,
    ) {
        let tp = TPixel::new(pf);
        let level = opts.level.min(9);
        let n = values.len();
        if n == 0 {
            // No pixels: the copy filter with no data, the control byte alone.
            return self.basic(COPY_STREAM, None, &[], &[], level, out);
        }
        match colours(values, 256) {
            Some(p) if p.colours.len() == 1 => {
                out.put_u8(FILL << 4);
                tp.put(p.colours[0], out);
            }
            Some(p) if p.colours.len() == 2 => {
                let row = (w as usize).div_ceil(8);
                let mut data = vec![0u8; row * h as usize];
                for (i, &v) in values.iter().enumerate() {
                    // Index 1 sets the bit; the leftmost pixel is the most significant.
                    if p.index(v) == 1 {
                        let (y, x) = (i / w as usize, i % w as usize);
                        data[y * row + x / 8] |= 0x80 >> (x % 8);
                    }
                }
                let head = palette_head(&p.colours, &tp);
                self.basic(MONO_STREAM, Some(PALETTE_FILTER), &head, &data, level, out);
            }
            Some(p) if tp.len > 1 && p.colours.len() <= n / 2 => {
                let data: Vec<u8> = values.iter().map(|&v| p.index(v)).collect();
                let head = palette_head(&p.colours, &tp);
                let copy = tp.put_all(values);
                // The palette goes out uncompressed, which can cost more than the
                // indices save: compare both at zlib's fastest level on fresh streams.
                if head.len() + trial(&data) < trial(&copy) {
                    let filter = Some(PALETTE_FILTER);
                    self.basic(PALETTE_STREAM, filter, &head, &data, level, out);
                } else {
                    self.basic(COPY_STREAM, None, &[], &copy, level, out);
                }
            }
            _ => {
                let copy = tp.put_all(values);
                if opts.gradient && matches!(pf.bits_per_pixel, 16 | 32) {
                    let diff = gradient(values, w, &tp);
                    if entropy(&diff) < 0.9 * entropy(&copy) {
                        let filter = Some(GRADIENT_FILTER);
                        return self.basic(GRADIENT_STREAM, filter, &[], &diff, level, out);
                    }
                }
                self.basic(COPY_STREAM, None, &[], &copy, level, out);
            }
        }
    }

    /// BasicCompression: the control byte (stream, resets, whether a filter id
    /// follows), the filter id, `head` (a palette), then the data: as it is when
    /// shorter than 12 bytes, otherwise its compact length and the deflated bytes.
    fn basic(
        &mut self,
        stream: usize,
        filter: Option<u8>,
        head: &[u8],
        data: &[u8],
        level: u32,
        out: &mut BytesMut,
    ) {
        let mut control = (stream as u8) << 4;
        if filter.is_some() {
            control |= 0x40;
        }
        let compress = data.len() as u64 >= MIN_TO_COMPRESS;
        if compress && self.streams[stream].ready(level) {
            control |= 1 << stream;
        }
        out.put_u8(control);
        if let Some(f) = filter {
            debug_assert!(f != COPY_FILTER || head.is_empty());
            out.put_u8(f);
        }
        out.put_slice(head);
        if !compress {
            out.put_slice(data);
            return;
        }
        let z = self.streams[stream].deflate(data);
        put_compact_len(z.len(), out);
        out.put_slice(&z);
    }
}

/// What `data` costs on the wire, deflated at level 1 on a fresh stream: a guess that
/// cannot see what the connection's stream already holds.
fn trial(data: &[u8]) -> usize {
    if (data.len() as u64) < MIN_TO_COMPRESS {
        return data.len();
    }
    let mut s = Stream { z: None };
    s.ready(1);
    let n = s.deflate(data).len();
    n + 1 + (n >= 0x80) as usize + (n >= 0x4000) as usize
}

/// A length in 1 to 3 bytes, 7 bits each but the last, low bits first. 65536 pixels
/// of 4 bytes deflate to well under the 22 bits this holds.
fn put_compact_len(n: usize, out: &mut BytesMut) {
    assert!(n < 1 << 22, "compact length {n} exceeds 22 bits");
    if n < 0x80 {
        out.put_u8(n as u8);
    } else if n < 0x4000 {
        out.put_slice(&[0x80 | (n & 0x7f) as u8, (n >> 7) as u8]);
    } else {
        out.put_slice(&[
            0x80 | (n & 0x7f) as u8,
            0x80 | (n >> 7 & 0x7f) as u8,
            (n >> 14) as u8,
        ]);
    }
}

/// The palette filter's head: the number of colours less one, then the colours.
fn palette_head(colours: &[u32], tp: &TPixel) -> Vec<u8> {
    let mut head = vec![(colours.len() - 1) as u8];
    colours.iter().for_each(|&c| tp.put(c, &mut head));
    head
}

/// A rectangle's distinct values, in order of first appearance.
struct Palette {
    colours: Vec<u32>,
    /// Sorted (value, index) pairs.
    sorted: Vec<(u32, u8)>,
}

impl Palette {
    fn index(&self, v: u32) -> u8 {
        let at = self
            .sorted
            .binary_search_by_key(&v, |&(c, _)| c)
            .expect("every value is in its rectangle's palette");
        self.sorted[at].1
    }
}

/// The distinct values of `values`, or `None` when there are more than `max`.
fn colours(values: &[u32], max: usize) -> Option<Palette> {
    let mut colours: Vec<u32> = Vec::new();
    let mut sorted: Vec<(u32, u8)> = Vec::new();
    let mut last = None;
    for &v in values {
        // Runs are common on screens: skip the search for a repeated value.
        if last == Some(v) {
            continue;
        }
        last = Some(v);
        if let Err(at) = sorted.binary_search_by_key(&v, |&(c, _)| c) {
            if colours.len() == max {
                return None;
            }
            sorted.insert(at, (v, colours.len() as u8));
            colours.push(v);
        }
    }
    Some(Palette { colours, sorted })
}

/// How TPIXELs are written: three bytes red, green, blue for 32 bits of depth 24 with
/// 8-bit channels, otherwise a pixel as the format has it.
struct TPixel {
    pf: PixelFormat,
    len: usize,
}

impl TPixel {
    fn new(pf: &PixelFormat) -> TPixel {
        TPixel {
            pf: *pf,
            len: tpixel_len(pf),
        }
    }

    fn channels(&self, v: u32) -> [u32; 3] {
        let pf = &self.pf;
        let ch = |shift: u8, max: u16| v.checked_shr(shift as u32).unwrap_or(0) & max as u32;
        [
            ch(pf.red_shift, pf.red_max),
            ch(pf.green_shift, pf.green_max),
            ch(pf.blue_shift, pf.blue_max),
        ]
    }

    fn maxima(&self) -> [u32; 3] {
        [
            self.pf.red_max as u32,
            self.pf.green_max as u32,
            self.pf.blue_max as u32,
        ]
    }

    fn put(&self, v: u32, out: &mut impl BufMut) {
        if self.len == 3 {
            let [r, g, b] = self.channels(v);
            out.put_slice(&[r as u8, g as u8, b as u8]);
        } else {
            self.pf.write_value(v, out);
        }
    }

    fn put_all(&self, values: &[u32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(values.len() * self.len);
        values.iter().for_each(|&v| self.put(v, &mut out));
        out
    }

    fn put_channels(&self, c: [u32; 3], out: &mut impl BufMut) {
        let pf = &self.pf;
        let at = |v: u32, s: u8| v.checked_shl(s as u32).unwrap_or(0);
        self.put(
            at(c[0], pf.red_shift) | at(c[1], pf.green_shift) | at(c[2], pf.blue_shift),
            out,
        );
    }
}

/// The gradient filter: each channel less its prediction left + above - above-left
/// (clamped to the channel's range, pixels outside the rectangle zero), modulo the range.
fn gradient(values: &[u32], w: u16, tp: &TPixel) -> Vec<u8> {
    let max = tp.maxima();
    let w = w as usize;
    let mut out = Vec::with_capacity(values.len() * tp.len);
    let mut above = vec![[0u32; 3]; w];
    let mut row = vec![[0u32; 3]; w];
    for line in values.chunks_exact(w) {
        for (x, &v) in line.iter().enumerate() {
            row[x] = tp.channels(v);
            let left = if x > 0 { row[x - 1] } else { [0; 3] };
            let above_left = if x > 0 { above[x - 1] } else { [0; 3] };
            let mut d = [0u32; 3];
            for c in 0..3 {
                let est = (left[c] as i64 + above[x][c] as i64 - above_left[c] as i64)
                    .clamp(0, max[c] as i64) as u32;
                d[c] = row[x][c].wrapping_sub(est) & max[c];
            }
            tp.put_channels(d, &mut out);
        }
        std::mem::swap(&mut above, &mut row);
    }
    out
}

/// Bits per byte of `data` as independent symbols: a cheap guess at how well zlib's
/// Huffman stage will do, blind to repeats that its matches find.
fn entropy(data: &[u8]) -> f64 {
    let mut counts = [0u32; 256];
    data.iter().for_each(|&b| counts[b as usize] += 1);
    let n = data.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_lengths_follow_the_specification() {
        let enc = |n| {
            let mut b = BytesMut::new();
            put_compact_len(n, &mut b);
            b.to_vec()
        };
        assert_eq!(enc(0), [0x00]);
        assert_eq!(enc(127), [0x7f]);
        assert_eq!(enc(128), [0x80, 0x01]);
        // The specification's example: 10000 is 90 4E.
        assert_eq!(enc(10000), [0x90, 0x4e]);
        assert_eq!(enc(16383), [0xff, 0x7f]);
        assert_eq!(enc(16384), [0x80, 0x80, 0x01]);
        assert_eq!(enc(4194303), [0xff, 0xff, 0xff]);
    }

    #[test]
    fn pieces_cover_the_area_once_and_fit() {
        for (w, h) in [
            (3000u16, 100u16),
            (2048, 32),
            (2049, 1),
            (1, 35000),
            (640, 480),
            (5, 0),
        ] {
            let ps = pieces(10, 20, w, h);
            let mut area = 0u64;
            for &(x, y, pw, ph) in &ps {
                assert!(fits(pw, ph), "{w}x{h}: piece {pw}x{ph}");
                assert!(x >= 10 && y >= 20 && x + pw <= 10 + w && y + ph <= 20 + h);
                area += pw as u64 * ph as u64;
            }
            assert_eq!(area, w as u64 * h as u64, "{w}x{h}");
            // Pieces are disjoint: with full coverage and equal area, checking pairs suffices.
            for (i, a) in ps.iter().enumerate() {
                for b in &ps[i + 1..] {
                    let apart = a.0 + a.2 <= b.0
                        || b.0 + b.2 <= a.0
                        || a.1 + a.3 <= b.1
                        || b.1 + b.3 <= a.1;
                    assert!(apart || a.2 == 0 || a.3 == 0, "{a:?} overlaps {b:?}");
                }
            }
        }
        assert_eq!(
            pieces(0, 0, 3000, 10),
            vec![(0, 0, 1500, 10), (1500, 0, 1500, 10)]
        );
    }

    #[test]
    fn palettes_stop_past_their_maximum() {
        let v: Vec<u32> = (0..300).map(|i| i % 7).collect();
        let p = colours(&v, 256).unwrap();
        assert_eq!(p.colours, (0..7).collect::<Vec<_>>());
        assert_eq!(p.index(5), 5);
        let many: Vec<u32> = (0..257).collect();
        assert!(colours(&many, 256).is_none());
        assert!(colours(&many[..256], 256).is_some());
    }

    #[test]
    fn a_level_change_resets_only_that_stream() {
        let mut s = Stream { z: None };
        assert!(!s.ready(6), "a fresh stream needs no reset");
        assert!(!s.ready(6));
        assert!(s.ready(9));
        assert!(!s.ready(9));
    }
}
