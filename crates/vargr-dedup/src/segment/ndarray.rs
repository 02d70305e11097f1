//! `ndarray`: blocks of a typed array along its own dimensions.
//!
//! The seed's future work: a 1-D segmenter sees a 3-D field as bytes and cuts planes at
//! arbitrary points, so a plane repeated in the next time step rarely gives the same
//! segments. Here a block is a hyper-rectangle of about `target` bytes, filled fastest
//! dimension first (whole rows, then whole planes, ...), and the dimension where the
//! budget runs out is split into equal parts. Block boundaries so fall on the array's
//! own boundaries, and equal sub-arrays at equal block positions give equal segments.
//! Blocks are never split inside an element, so values stay aligned for local
//! compression too. A byte stream is treated as a 1-D array of bytes.

use super::grid::{fill_blocks, Grid, MAX_RANK};
use super::layout::{self, Reader};
use super::{Cut, SegmentError, Segmenter, Shape};

const NAME: &str = "ndarray";
const TAG: u8 = b'N';

/// Blocks of about `target` bytes along the array's dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NdArray {
    target: usize,
}

impl Default for NdArray {
    /// 4 KiB blocks.
    fn default() -> Self {
        NdArray { target: 4 << 10 }
    }
}

impl NdArray {
    /// `target` bytes per block, at least 1 (blocks hold at least one element).
    pub fn new(target: usize) -> Result<NdArray, SegmentError> {
        if target == 0 {
            return Err(SegmentError::Invalid {
                segmenter: NAME,
                reason: "block size 0; need at least 1 byte".into(),
            });
        }
        Ok(NdArray { target })
    }

    pub fn target(&self) -> usize {
        self.target
    }

    /// Block extents for `grid`: fastest dimension first, whole dimensions while the
    /// budget lasts, then an even split of the next one.
    fn block(&self, grid: &Grid) -> Vec<usize> {
        let mut budget = (self.target / grid.elem).max(1);
        let mut block = vec![1; grid.dims.len()];
        for d in (0..grid.dims.len()).rev() {
            let dim = grid.dims[d].max(1);
            if budget >= dim {
                block[d] = dim;
                budget /= dim;
            } else {
                block[d] = dim.div_ceil(dim.div_ceil(budget));
                break;
            }
        }
        block
    }
}

impl Segmenter for NdArray {
    fn name(&self) -> &str {
        NAME
    }

    /// Layout: `N`, rank, dims, element size, block extents (varints).
    fn cut<'a>(&self, data: &'a [u8], shape: &Shape) -> Result<Cut<'a>, SegmentError> {
        let bytes = Shape::Grid {
            dims: vec![data.len()],
            elem_size: 1,
        };
        let shape = if *shape == Shape::Bytes {
            &bytes
        } else {
            shape
        };
        let grid = Grid::of(NAME, shape, data, false)?;
        if grid.dims.len() > MAX_RANK {
            return Err(SegmentError::Invalid {
                segmenter: NAME,
                reason: format!("rank {} is above {MAX_RANK}", grid.dims.len()),
            });
        }
        let block = self.block(&grid);
        let mut layout = vec![TAG];
        layout::put_usize(&mut layout, grid.dims.len());
        grid.put(&mut layout);
        for &b in &block {
            layout::put_usize(&mut layout, b);
        }
        let segments = grid.gather_blocks(data, &block);
        Ok(Cut { segments, layout })
    }

    fn reassemble(
        &self,
        layout: &[u8],
        segments: &[&[u8]],
        out: &mut Vec<u8>,
    ) -> Result<(), SegmentError> {
        let mut r = Reader::new(NAME, layout);
        r.expect_tag(TAG, "an ndarray")?;
        let rank = r.bounded("rank", 1, MAX_RANK)?;
        let total = layout::total_len(NAME, segments)?;
        let grid = Grid::read(&mut r, rank, total)?;
        let mut block = Vec::with_capacity(rank);
        for _ in 0..rank {
            block.push(r.bounded("block extent", 1, usize::MAX)?);
        }
        fill_blocks(&r, &grid, &block, segments, out, |n| {
            format!(
                "{n:?} blocks of {block:?} cover {:?}, {} segments were received",
                grid.dims,
                segments.len()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(target: usize, dims: &[usize], elem: usize) -> Vec<usize> {
        NdArray::new(target)
            .unwrap()
            .block(&Grid::new(dims, elem).unwrap())
    }

    #[test]
    fn blocks_fill_fast_dimensions_first() {
        assert_eq!(block(4096, &[10, 64, 100], 8), vec![1, 5, 100]);
        assert_eq!(block(4096, &[10, 7, 100], 8), vec![1, 4, 100]);
        assert_eq!(block(4096, &[10, 64, 1000], 8), vec![1, 1, 500]);
        assert_eq!(block(64, &[3, 3], 100), vec![1, 1]);
        assert_eq!(block(1 << 20, &[2, 3], 1), vec![2, 3]);
        assert_eq!(block(16, &[0, 5], 1), vec![1, 5]);
    }

    #[test]
    fn a_repeated_plane_gives_repeated_segments() {
        let (t, y, x) = (4usize, 32usize, 40usize);
        let plane = crate::testdata::random(y * x * 4, 11);
        let mut data = Vec::new();
        for _ in 0..t {
            data.extend_from_slice(&plane);
        }
        let shape = Shape::Grid {
            dims: vec![t, y, x],
            elem_size: 4,
        };
        let cut = NdArray::new(1024).unwrap().cut(&data, &shape).unwrap();
        let per_plane = cut.segments.len() / t;
        for k in 1..t {
            assert_eq!(
                cut.segments[..per_plane],
                cut.segments[k * per_plane..(k + 1) * per_plane]
            );
        }
    }
}
