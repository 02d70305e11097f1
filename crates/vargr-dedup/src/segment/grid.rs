//! Dense row-major grids and the boxes (hyper-rectangles) the 2-D and n-D segmenters cut
//! them into.

use std::borrow::Cow;

use super::layout::{self, Reader};
use super::{SegmentError, Shape};

/// Rank limit for layouts read from the network (a rank is a count we must not trust).
pub(crate) const MAX_RANK: usize = 32;

/// A grid whose byte length is known to fit a `usize`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grid {
    pub dims: Vec<usize>,
    pub elem: usize,
    /// Bytes between consecutive indices of each dimension.
    strides: Vec<usize>,
    pub len: usize,
}

impl Grid {
    /// `None` if the rank is 0, an element is empty, or the size overflows.
    pub fn new(dims: &[usize], elem: usize) -> Option<Grid> {
        if dims.is_empty() || elem == 0 {
            return None;
        }
        let mut strides = vec![0; dims.len()];
        let mut len = elem;
        for d in (0..dims.len()).rev() {
            strides[d] = len;
            len = len.checked_mul(dims[d])?;
        }
        Some(Grid {
            dims: dims.to_vec(),
            elem,
            strides,
            len,
        })
    }

    /// The grid `shape` describes, checked against `data`; `rank2` views rank 1 as one
    /// row and refuses ranks above 2.
    pub fn of(
        segmenter: &'static str,
        shape: &Shape,
        data: &[u8],
        rank2: bool,
    ) -> Result<Grid, SegmentError> {
        let invalid = |reason: String| SegmentError::Invalid { segmenter, reason };
        let Shape::Grid { dims, elem_size } = shape else {
            return Err(invalid(format!(
                "needs a grid shape (dims and element size), got a byte stream of {} bytes",
                data.len()
            )));
        };
        let dims: Vec<usize> = match (rank2, dims.len()) {
            (true, 1) => vec![1, dims[0]],
            (true, 2) | (false, _) => dims.clone(),
            (true, r) => {
                return Err(invalid(format!(
                    "cuts 2-D images, got a grid of rank {r} (use ndarray)"
                )))
            }
        };
        let grid = Grid::new(&dims, *elem_size).ok_or_else(|| {
            invalid(format!(
                "grid {dims:?} of {elem_size}-byte elements is empty-ranked, has empty elements or overflows"
            ))
        })?;
        if grid.len != data.len() {
            return Err(invalid(format!(
                "grid {dims:?} of {elem_size}-byte elements is {} bytes, the message {}",
                grid.len,
                data.len()
            )));
        }
        Ok(grid)
    }

    /// Appends dims and element size to a layout.
    pub fn put(&self, out: &mut Vec<u8>) {
        for &d in &self.dims {
            layout::put_usize(out, d);
        }
        layout::put_usize(out, self.elem);
    }

    /// Reads what [`Grid::put`] wrote for a grid of `rank` dimensions, and checks that it
    /// is exactly `total` bytes long (the length of the segments that will fill it).
    pub fn read(r: &mut Reader<'_>, rank: usize, total: usize) -> Result<Grid, SegmentError> {
        let mut dims = Vec::with_capacity(rank.min(MAX_RANK));
        for _ in 0..rank {
            dims.push(r.bounded("dimension", 0, usize::MAX)?);
        }
        let elem = r.bounded("element size", 1, usize::MAX)?;
        match Grid::new(&dims, elem) {
            Some(g) if g.len == total => Ok(g),
            Some(g) => Err(r.error(format!(
                "grid {dims:?} of {elem}-byte elements is {} bytes, the segments {total}",
                g.len
            ))),
            None => Err(r.error(format!("grid {dims:?} of {elem}-byte elements overflows"))),
        }
    }

    /// Bytes in a box of extents `ext` (within the grid, so no overflow).
    pub fn box_len(&self, ext: &[usize]) -> usize {
        ext.iter().product::<usize>() * self.elem
    }

    fn offset(&self, at: &[usize]) -> usize {
        at.iter().zip(&self.strides).map(|(i, s)| i * s).sum()
    }

    /// The slowest dimension a contiguous run of the box spans, and the run's length:
    /// the fast dimensions the box covers whole merge into one run.
    fn run_shape(&self, origin: &[usize], ext: &[usize]) -> (usize, usize) {
        let mut inner = self.dims.len() - 1;
        while inner > 0 && ext[inner] == self.dims[inner] && origin[inner] == 0 {
            inner -= 1;
        }
        (inner, self.strides[inner] * ext[inner])
    }

    /// Calls `f(offset, len)` for each contiguous run of bytes of the box at `origin`
    /// with extents `ext`, in row-major order. The box must lie within the grid.
    fn runs(&self, origin: &[usize], ext: &[usize], mut f: impl FnMut(usize, usize)) {
        if ext.contains(&0) {
            return;
        }
        let (inner, run) = self.run_shape(origin, ext);
        let mut idx = origin.to_vec();
        loop {
            f(self.offset(&idx), run);
            // Odometer over the dimensions slower than `inner`.
            let mut d = inner;
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < origin[d] + ext[d] {
                    break;
                }
                idx[d] = origin[d];
            }
        }
    }

    /// The box's bytes in row-major order; borrowed when they are contiguous in `data`.
    /// The blocks of extent `block` that tile the grid ([`Blocks`] order), from `data`.
    pub fn gather_blocks<'a>(&self, data: &'a [u8], block: &[usize]) -> Vec<Cow<'a, [u8]>> {
        Blocks::new(&self.dims, block)
            .map(|(o, e)| self.gather(data, &o, &e))
            .collect()
    }

    pub fn gather<'a>(&self, data: &'a [u8], origin: &[usize], ext: &[usize]) -> Cow<'a, [u8]> {
        let len = self.box_len(ext);
        let (inner, _) = self.run_shape(origin, ext);
        if len == 0 || ext[..inner].iter().all(|&e| e == 1) {
            let start = if len == 0 { 0 } else { self.offset(origin) };
            return Cow::Borrowed(&data[start..start + len]);
        }
        let mut out = Vec::with_capacity(len);
        self.runs(origin, ext, |off, n| {
            out.extend_from_slice(&data[off..off + n])
        });
        Cow::Owned(out)
    }

    /// Writes `src` (the box's bytes in row-major order, exactly [`Grid::box_len`]
    /// long) into `img`.
    pub fn scatter(&self, img: &mut [u8], origin: &[usize], ext: &[usize], src: &[u8]) {
        let mut pos = 0;
        self.runs(origin, ext, |off, n| {
            img[off..off + n].copy_from_slice(&src[pos..pos + n]);
            pos += n;
        });
    }
}

/// Boxes of extents `block` tiling `dims` in row-major order of their origins; boxes at
/// the far edges are cut short.
pub(crate) struct Blocks<'g> {
    dims: &'g [usize],
    block: &'g [usize],
    next: Option<Vec<usize>>,
}

impl<'g> Blocks<'g> {
    /// `block` has `dims.len()` entries, each at least 1.
    pub fn new(dims: &'g [usize], block: &'g [usize]) -> Blocks<'g> {
        let empty = dims.contains(&0);
        Blocks {
            dims,
            block,
            next: (!empty).then(|| vec![0; dims.len()]),
        }
    }

    /// How many boxes there are; `None` on overflow.
    pub fn count(dims: &[usize], block: &[usize]) -> Option<usize> {
        dims.iter()
            .zip(block)
            .try_fold(1usize, |acc, (&d, &b)| acc.checked_mul(d.div_ceil(b)))
    }
}

impl Iterator for Blocks<'_> {
    /// (origin, extents)
    type Item = (Vec<usize>, Vec<usize>);

    fn next(&mut self) -> Option<Self::Item> {
        let origin = self.next.take()?;
        let ext: Vec<usize> = (0..self.dims.len())
            .map(|d| self.block[d].min(self.dims[d] - origin[d]))
            .collect();
        let mut n = origin.clone();
        for d in (0..self.dims.len()).rev() {
            n[d] += self.block[d];
            if n[d] < self.dims[d] {
                self.next = Some(n);
                break;
            }
            n[d] = 0;
        }
        Some((origin, ext))
    }
}

/// A box: origin and extents.
pub(crate) type Boxed = (Vec<usize>, Vec<usize>);

/// Reassembly shared by the grid segmenters: checks that `count` boxes match the
/// segments one for one and writes them into a grid appended to `out`. `grid.len` must
/// already equal the segments' total length, which bounds the allocation.
/// [`fill`] from one segment per block of extent `block`; `mismatch` words the error
/// when the segments are not as many as the blocks (`None`: too many to count).
pub(crate) fn fill_blocks(
    r: &Reader<'_>,
    grid: &Grid,
    block: &[usize],
    segments: &[&[u8]],
    out: &mut Vec<u8>,
    mismatch: impl FnOnce(Option<usize>) -> String,
) -> Result<(), SegmentError> {
    match Blocks::count(&grid.dims, block) {
        Some(n) if n == segments.len() => {}
        n => return Err(r.error(mismatch(n))),
    }
    fill(
        r,
        grid,
        Blocks::new(&grid.dims, block).map(Ok),
        segments,
        out,
    )
}

pub(crate) fn fill(
    r: &Reader<'_>,
    grid: &Grid,
    boxes: impl Iterator<Item = Result<Boxed, SegmentError>>,
    segments: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<(), SegmentError> {
    let start = out.len();
    out.resize(start + grid.len, 0);
    let result = (|| {
        let img = &mut out[start..];
        let mut used = 0;
        for b in boxes {
            let (origin, ext) = b?;
            let Some(seg) = segments.get(used) else {
                return Err(r.error(format!(
                    "describes more than the {} segments received",
                    segments.len()
                )));
            };
            let want = grid.box_len(&ext);
            if seg.len() != want {
                return Err(r.error(format!(
                    "segment {used} is {} bytes, its box {ext:?} at {origin:?} needs {want}",
                    seg.len()
                )));
            }
            grid.scatter(img, &origin, &ext, seg);
            used += 1;
        }
        if used != segments.len() {
            return Err(r.error(format!(
                "describes {used} segments, {} were received",
                segments.len()
            )));
        }
        r.finish()
    })();
    if result.is_err() {
        out.truncate(start);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_gather_and_scatter() {
        let g = Grid::new(&[3, 4, 5], 2).unwrap();
        let data: Vec<u8> = (0..g.len as u8).collect();
        let mut back = vec![0u8; g.len];
        let block = [2, 3, 2];
        let mut n = 0;
        for (o, e) in Blocks::new(&g.dims, &block) {
            let seg = g.gather(&data, &o, &e);
            assert_eq!(seg.len(), g.box_len(&e));
            g.scatter(&mut back, &o, &e, &seg);
            n += 1;
        }
        assert_eq!(n, Blocks::count(&g.dims, &block).unwrap());
        assert_eq!(back, data);
        // Full rows of one plane are contiguous, so borrowed.
        assert!(matches!(
            g.gather(&data, &[1, 1, 0], &[1, 2, 5]),
            Cow::Borrowed(_)
        ));
        assert!(matches!(
            g.gather(&data, &[1, 1, 1], &[1, 2, 4]),
            Cow::Owned(_)
        ));
    }
}
