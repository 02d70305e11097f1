//! `varg`: the seed's 2-D segmentation of screen images (Varg, seed ch. 7.5 and 8.5).
//!
//! Static tiles lose every segment when a window scrolls by one pixel. Anchoring both
//! axes on content did no better in the seed (one changed pixel in an anchor column
//! moves every boundary below it), so Varg anchors one axis only:
//!
//! 1. **Movement estimation.** Representative fingerprints of every 32nd row and every
//!    32nd column are looked up among the row and column fingerprints of the previous
//!    image. Vertical scrolling keeps whole rows (they only move), horizontal scrolling
//!    keeps whole columns; whichever set matches the larger share tells the dominant
//!    movement.
//! 2. For vertical movement the image is cut into static columns `width` pixels wide,
//!    and each column into regions at **anchor rows** chosen by content, so regions move
//!    with the content. For horizontal movement the same is done to the transposed
//!    image: static bands `width` rows high, cut at anchor columns.
//! 3. Anchor selection, per column: (a) fingerprint each row of the column; (b) mark
//!    runs of at least `similar` identical fingerprints (flat colour) as *similar*;
//!    (c) select rows whose fingerprint is below 2^64 / `every` (its top bits zero,
//!    Manber's rule on the most significant bits), at least `min` rows after the
//!    previous boundary. The first row always starts a region.
//!
//! Defaults are the seed's best for its genomics traces (ch. 8.5.5.3): 16-pixel
//! columns, an anchor every 8th row on average, a minimum region height of 16, similar
//! runs of 8, no maximum height.
//!
//! Where the seed is vague, our choices:
//! - Each similar run is a region of its own (its first row and the row after it are
//!   boundaries whatever the minimum), so a flat area neither selects all its rows nor
//!   none; this reproduces the seed's short regions "just above a similar region".
//!   Rows inside a run are never selected. `similar` 0 turns the detection off.
//! - Row fingerprints are XXH3 of the row's bytes within the column (the seed: a Rabin
//!   fingerprint four bytes at a time); column fingerprints within a band are a
//!   multiply-xor hash accumulated row by row, which reads the image in memory order.
//! - Movement estimation keeps the last image's fingerprints in the segmenter, so use
//!   one `Varg` per image stream. With no previous image of the same size, or a tie
//!   (an unchanged screen matches both ways), the previous orientation stays: changing
//!   it would change every segment of an unchanged screen. The first image is cut
//!   vertically.
//! - `max` (0 = none) bounds region height; the seed found no gain in it, but a cache
//!   may limit segment size.
//!
//! Layout: `V`, orientation (0 columns, 1 bands), height, width, element size, strip
//! width, then each strip's region lengths in order (varints: one byte a region below
//! 128 rows, as the seed's 1-4 bytes a segment).

use std::collections::HashSet;
use std::sync::Mutex;

use xxhash_rust::xxh3::xxh3_64;

use super::grid::{fill, Boxed, Grid};
use super::layout::{self, Reader};
use super::{Cut, SegmentError, Segmenter, Shape};

const NAME: &str = "varg";
const TAG: u8 = b'V';
/// Movement estimation samples every 32nd row and column (the seed's).
const MOTION_STRIDE: usize = 32;

/// Parameters of [`Varg`]; see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VargParams {
    /// Width of the static columns in pixels (height of the bands when horizontal).
    pub width: usize,
    /// Mean distance between selected anchor rows.
    pub every: u64,
    /// Minimum distance from a boundary to the next selected anchor row.
    pub min: usize,
    /// Identical consecutive row fingerprints that make a similar region (0: off).
    pub similar: usize,
    /// Maximum region height (0: none).
    pub max: usize,
    /// Estimate the dominant movement (off: always static columns).
    pub motion: bool,
}

impl Default for VargParams {
    fn default() -> Self {
        VargParams {
            width: 16,
            every: 8,
            min: 16,
            similar: 8,
            max: 0,
            motion: true,
        }
    }
}

/// What movement estimation remembers of the previous image.
#[derive(Debug)]
struct Frame {
    dims: (usize, usize, usize),
    rows: HashSet<u64>,
    cols: HashSet<u64>,
    horizontal: bool,
}

/// The Varg segmenter.
#[derive(Debug)]
pub struct Varg {
    params: VargParams,
    last: Mutex<Option<Frame>>,
}

/// The regions of one image, in the order [`Segmenter::cut`] gives its segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regions {
    /// Cut in horizontal bands (the screen moved sideways), else in static columns.
    pub horizontal: bool,
    pub boxes: Vec<RegionBox>,
}

/// One region: its top-left pixel and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionBox {
    pub row: usize,
    pub col: usize,
    pub height: usize,
    pub width: usize,
}

impl Default for Varg {
    fn default() -> Self {
        Varg::new(VargParams::default()).expect("default parameters are valid")
    }
}

/// A 64-bit finalizer (splitmix64), so hand-rolled hashes select evenly.
fn avalanche(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One step of a column hash: mixes in a pixel word.
fn absorb(h: u64, v: u64) -> u64 {
    (h.rotate_left(23) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Folds `rows` of pixels `E` bytes wide into the column hashes `h` (E known at
/// compile time, so a pixel loads as one word).
fn absorb_rows<const E: usize>(h: &mut [u64], rows: &[u8]) {
    for row in rows.chunks_exact(h.len() * E) {
        for (hc, px) in h.iter_mut().zip(row.chunks_exact(E)) {
            let mut w = [0u8; 8];
            w[..E].copy_from_slice(px);
            *hc = absorb(*hc, u64::from_le_bytes(w));
        }
    }
}

/// Hashes of each column of rows `rows` of `grid`.
fn column_hashes(grid: &Grid, data: &[u8], rows: std::ops::Range<usize>) -> Vec<u64> {
    let (w, e) = (grid.dims[1], grid.elem);
    let mut h = vec![0u64; w];
    if w == 0 {
        return h;
    }
    let band = &data[rows.start * w * e..rows.end * w * e];
    match e {
        1 => absorb_rows::<1>(&mut h, band),
        2 => absorb_rows::<2>(&mut h, band),
        3 => absorb_rows::<3>(&mut h, band),
        4 => absorb_rows::<4>(&mut h, band),
        8 => absorb_rows::<8>(&mut h, band),
        _ => {
            for row in band.chunks_exact(w * e) {
                for (hc, px) in h.iter_mut().zip(row.chunks_exact(e)) {
                    for chunk in px.chunks(8) {
                        let mut b = [0u8; 8];
                        b[..chunk.len()].copy_from_slice(chunk);
                        *hc = absorb(*hc, u64::from_le_bytes(b));
                    }
                }
            }
        }
    }
    h.iter_mut().for_each(|x| *x = avalanche(*x));
    h
}

/// An image `height × width` pixels of `elem` bytes as the segmenter's grid.
fn image_grid(data: &[u8], height: usize, width: usize, elem: usize) -> Result<Grid, SegmentError> {
    let shape = Shape::Grid {
        dims: vec![height, width],
        elem_size: elem,
    };
    Grid::of(NAME, &shape, data, true)
}

impl Varg {
    /// Needs `width >= 1` and `every >= 1`.
    pub fn new(params: VargParams) -> Result<Varg, SegmentError> {
        if params.width == 0 || params.every == 0 {
            return Err(SegmentError::Invalid {
                segmenter: NAME,
                reason: format!(
                    "column width {} and anchor distance {}: both must be at least 1",
                    params.width, params.every
                ),
            });
        }
        Ok(Varg {
            params,
            last: Mutex::new(None),
        })
    }

    pub fn params(&self) -> &VargParams {
        &self.params
    }

    /// Forgets the previous image (the next is cut in static columns).
    pub fn reset(&self) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Whether to cut in horizontal bands; updates the remembered image.
    fn horizontal(&self, grid: &Grid, data: &[u8]) -> bool {
        if !self.params.motion {
            return false;
        }
        let (h, w, e) = (grid.dims[0], grid.dims[1], grid.elem);
        let rows: Vec<u64> = data.chunks_exact((w * e).max(1)).map(xxh3_64).collect();
        let cols = column_hashes(grid, data, 0..h);
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let horizontal = match &*last {
            Some(f) if f.dims == (h, w, e) => {
                let share = |now: &[u64], before: &HashSet<u64>| {
                    let sample = now.iter().step_by(MOTION_STRIDE);
                    let n = sample.len().max(1);
                    (sample.filter(|x| before.contains(x)).count(), n)
                };
                let (rk, rn) = share(&rows, &f.rows);
                let (ck, cn) = share(&cols, &f.cols);
                // Compare rk/rn with ck/cn without division.
                match (ck * rn).cmp(&(rk * cn)) {
                    std::cmp::Ordering::Greater => true,
                    std::cmp::Ordering::Less => false,
                    std::cmp::Ordering::Equal => f.horizontal,
                }
            }
            Some(f) => f.horizontal,
            None => false,
        };
        *last = Some(Frame {
            dims: (h, w, e),
            rows: rows.into_iter().collect(),
            cols: cols.into_iter().collect(),
            horizontal,
        });
        horizontal
    }

    /// The regions [`Segmenter::cut`] would make of an image `height × width` pixels of
    /// `elem` bytes each (row-major in `data`), without gathering their bytes: for a
    /// caller that keeps the image and sends only some regions (a VNC proxy sends those
    /// that changed). Updates the remembered image as `cut` does.
    pub fn regions(
        &self,
        data: &[u8],
        height: usize,
        width: usize,
        elem: usize,
    ) -> Result<Regions, SegmentError> {
        let grid = image_grid(data, height, width, elem)?;
        let horizontal = height > 0 && width > 0 && self.horizontal(&grid, data);
        Ok(self.regions_of(&grid, data, horizontal))
    }

    /// The regions of an image cut the way `horizontal` says, as [`Varg::regions`]
    /// would make them had movement estimation chose it, leaving the remembered image
    /// alone: movement estimation is the only part that depends on earlier images, so
    /// a peer told the orientation cuts the image it holds the same way.
    pub fn regions_oriented(
        &self,
        data: &[u8],
        height: usize,
        width: usize,
        elem: usize,
        horizontal: bool,
    ) -> Result<Regions, SegmentError> {
        let grid = image_grid(data, height, width, elem)?;
        Ok(self.regions_of(&grid, data, horizontal))
    }

    fn regions_of(&self, grid: &Grid, data: &[u8], horizontal: bool) -> Regions {
        let (h, w, e) = (grid.dims[0], grid.dims[1], grid.elem);
        let sw = self.params.width;
        let mut boxes = Vec::new();
        if h == 0 || w == 0 {
            return Regions { horizontal, boxes };
        }
        if horizontal {
            for r0 in (0..h).step_by(sw) {
                let band = sw.min(h - r0);
                let fps = column_hashes(grid, data, r0..r0 + band);
                let mut c = 0;
                for len in self.anchor(&fps) {
                    boxes.push(RegionBox {
                        row: r0,
                        col: c,
                        height: band,
                        width: len,
                    });
                    c += len;
                }
            }
        } else {
            for c0 in (0..w).step_by(sw) {
                let cols = sw.min(w - c0);
                let fps: Vec<u64> = (0..h)
                    .map(|r| xxh3_64(&data[(r * w + c0) * e..(r * w + c0 + cols) * e]))
                    .collect();
                let mut r = 0;
                for len in self.anchor(&fps) {
                    boxes.push(RegionBox {
                        row: r,
                        col: c0,
                        height: len,
                        width: cols,
                    });
                    r += len;
                }
            }
        }
        Regions { horizontal, boxes }
    }

    /// Region lengths along one strip whose lines have fingerprints `fps`.
    fn anchor(&self, fps: &[u64]) -> Vec<usize> {
        let p = &self.params;
        let n = fps.len();
        let mut similar = vec![false; n];
        if p.similar >= 2 {
            let mut i = 0;
            while i < n {
                let j = i + fps[i..].iter().take_while(|&&f| f == fps[i]).count();
                if j - i >= p.similar {
                    similar[i..j].fill(true);
                }
                i = j;
            }
        }
        let threshold = u64::MAX / p.every;
        let mut lens = Vec::with_capacity(n / p.min.max(p.every as usize).max(1) + 2);
        let mut last = 0;
        for i in 1..n {
            let forced = similar[i] != similar[i - 1] || (similar[i] && fps[i] != fps[i - 1]);
            let chosen = !similar[i] && fps[i] <= threshold && i - last >= p.min;
            let full = p.max > 0 && i - last >= p.max;
            if forced || chosen || full {
                lens.push(i - last);
                last = i;
            }
        }
        if n > 0 {
            lens.push(n - last);
        }
        lens
    }
}

impl Segmenter for Varg {
    fn name(&self) -> &str {
        NAME
    }

    fn cut<'a>(&self, data: &'a [u8], shape: &Shape) -> Result<Cut<'a>, SegmentError> {
        let grid = Grid::of(NAME, shape, data, true)?;
        let (h, w) = (grid.dims[0], grid.dims[1]);
        let horizontal = h > 0 && w > 0 && self.horizontal(&grid, data);
        let regions = self.regions_of(&grid, data, horizontal);
        let mut layout = vec![TAG, u8::from(regions.horizontal)];
        grid.put(&mut layout);
        layout::put_usize(&mut layout, self.params.width);
        let mut segments = Vec::with_capacity(regions.boxes.len());
        for b in &regions.boxes {
            let len = if regions.horizontal {
                b.width
            } else {
                b.height
            };
            layout::put_usize(&mut layout, len);
            segments.push(grid.gather(data, &[b.row, b.col], &[b.height, b.width]));
        }
        Ok(Cut { segments, layout })
    }

    fn reassemble(
        &self,
        layout: &[u8],
        segments: &[&[u8]],
        out: &mut Vec<u8>,
    ) -> Result<(), SegmentError> {
        let mut r = Reader::new(NAME, layout);
        r.expect_tag(TAG, "a varg")?;
        let horizontal = match r.byte("orientation")? {
            0 => false,
            1 => true,
            o => return Err(r.error(format!("orientation {o}, expected 0 or 1"))),
        };
        let total = layout::total_len(NAME, segments)?;
        let grid = Grid::read(&mut r, 2, total)?;
        let sw = r.bounded("strip width", 1, usize::MAX)?;
        let (h, w) = (grid.dims[0], grid.dims[1]);
        // Strips across one axis, regions along the other; both non-empty means both
        // are at most the segments' total length, so these loops are bounded.
        let (across, along) = if horizontal { (h, w) } else { (w, h) };
        let mut boxes: Vec<Boxed> = Vec::new();
        if across > 0 && along > 0 {
            for s0 in (0..across).step_by(sw) {
                let thick = sw.min(across - s0);
                let mut at = 0;
                while at < along {
                    if boxes.len() == segments.len() {
                        return Err(r.error(format!(
                            "describes more than the {} segments received",
                            segments.len()
                        )));
                    }
                    let len = r.bounded("region length", 1, along - at)?;
                    boxes.push(if horizontal {
                        (vec![s0, at], vec![thick, len])
                    } else {
                        (vec![at, s0], vec![len, thick])
                    });
                    at += len;
                }
            }
        }
        fill(&r, &grid, boxes.into_iter().map(Ok), segments, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::random;

    fn image(h: usize, w: usize, seed: u64) -> Vec<u8> {
        random(h * w * 4, seed)
    }

    fn shape(h: usize, w: usize) -> Shape {
        Shape::Grid {
            dims: vec![h, w],
            elem_size: 4,
        }
    }

    /// Fraction of `b`'s segments also in `a`.
    fn shared(a: &Cut<'_>, b: &Cut<'_>) -> f64 {
        let seen: HashSet<&[u8]> = a.segments.iter().map(|s| &**s).collect();
        let k = b.segments.iter().filter(|s| seen.contains(&***s)).count();
        k as f64 / b.segments.len() as f64
    }

    #[test]
    fn anchors_respect_minimum_and_isolate_flat_runs() {
        let v = Varg::new(VargParams {
            every: 1,
            min: 4,
            similar: 3,
            ..VargParams::default()
        })
        .unwrap();
        // Distinct rows, then a flat run of 5, then distinct rows.
        let mut fps: Vec<u64> = (0..10).map(|i| i * 7919 + 1).collect();
        fps.extend([42; 5]);
        fps.extend((0..6).map(|i| i * 31 + 99));
        assert_eq!(v.anchor(&fps), vec![4, 4, 2, 5, 4, 2]);
        assert_eq!(v.anchor(&[]), Vec::<usize>::new());
        assert_eq!(v.anchor(&[1]), vec![1]);
    }

    #[test]
    fn regions_are_the_boxes_of_cut_segments() {
        let (h, w) = (200, 120);
        let img = image(h, w, 3);
        let (a, b) = (Varg::default(), Varg::default());
        // Twice, so the second image goes through movement estimation on both.
        for dx in [0usize, 7] {
            let mut shifted = Vec::with_capacity(img.len());
            for r in 0..h {
                for c in 0..w {
                    let c = (c + dx) % w;
                    shifted.extend_from_slice(&img[(r * w + c) * 4..(r * w + c + 1) * 4]);
                }
            }
            let cut = a.cut(&shifted, &shape(h, w)).unwrap();
            let regions = b.regions(&shifted, h, w, 4).unwrap();
            assert_eq!(cut.layout[1], u8::from(regions.horizontal));
            assert_eq!(cut.segments.len(), regions.boxes.len());
            let mut covered = 0;
            for (seg, bx) in cut.segments.iter().zip(&regions.boxes) {
                let mut want = Vec::new();
                for r in bx.row..bx.row + bx.height {
                    want.extend_from_slice(
                        &shifted[(r * w + bx.col) * 4..(r * w + bx.col + bx.width) * 4],
                    );
                }
                assert_eq!(&**seg, &want[..]);
                covered += bx.height * bx.width;
            }
            assert_eq!(covered, h * w);
        }
    }

    #[test]
    fn vertical_scroll_keeps_most_segments() {
        let (h, w) = (512, 256);
        let big = image(h + 40, w, 5);
        let v = Varg::default();
        let a = v.cut(&big[..h * w * 4], &shape(h, w)).unwrap();
        // Scroll by 3 rows and then by 37.
        for dy in [3, 37] {
            let b = v
                .cut(&big[dy * w * 4..(dy + h) * w * 4], &shape(h, w))
                .unwrap();
            assert_eq!(b.layout[1], 0, "vertical movement keeps columns");
            let s = shared(&a, &b);
            assert!(s > 0.8, "scroll by {dy}: only {s:.2} of segments repeat");
        }
    }

    #[test]
    fn horizontal_scroll_switches_to_bands() {
        let (h, w) = (128, 512);
        let wide = image(h, w + 40, 9);
        let crop = |dx: usize| -> Vec<u8> {
            (0..h)
                .flat_map(|r| wide[(r * (w + 40) + dx) * 4..(r * (w + 40) + dx + w) * 4].to_vec())
                .collect()
        };
        let v = Varg::default();
        let f0 = crop(0);
        let f1 = crop(5);
        let f2 = crop(12);
        let c0 = v.cut(&f0, &shape(h, w)).unwrap();
        assert_eq!(c0.layout[1], 0);
        let c1 = v.cut(&f1, &shape(h, w)).unwrap();
        assert_eq!(c1.layout[1], 1, "horizontal movement turns to bands");
        let c2 = v.cut(&f2, &shape(h, w)).unwrap();
        assert_eq!(c2.layout[1], 1);
        let s = shared(&c1, &c2);
        assert!(s > 0.8, "only {s:.2} of segments repeat");
        // An unchanged screen keeps the orientation, so every segment repeats.
        let c3 = v.cut(&f2, &shape(h, w)).unwrap();
        assert_eq!(c3, c2);
        // A segmenter that saw none of this cuts the same regions when told the
        // orientation, and remembers nothing of it.
        let fresh = Varg::default();
        let told = fresh.regions_oriented(&f2, h, w, 4, true).unwrap();
        let seen = Varg::default();
        for f in [&f0, &f1] {
            seen.regions(f, h, w, 4).unwrap();
        }
        assert_eq!(told, seen.regions(&f2, h, w, 4).unwrap());
        assert!(!fresh.regions(&f2, h, w, 4).unwrap().horizontal);
        // Without estimation it stays in columns, and shifted columns rarely repeat.
        let still = Varg::new(VargParams {
            motion: false,
            ..VargParams::default()
        })
        .unwrap();
        let d1 = still.cut(&f1, &shape(h, w)).unwrap();
        let d2 = still.cut(&f2, &shape(h, w)).unwrap();
        assert_eq!(d2.layout[1], 0);
        assert!(shared(&d1, &d2) < 0.2);
    }
}
