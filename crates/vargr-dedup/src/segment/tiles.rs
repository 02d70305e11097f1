//! `tiles`: a static grid of tiles over an image.
//!
//! The segmentation of VNC's Hextile and of MPEG (8x8 or 16x16 pixel blocks). It loses
//! every tile when the image scrolls by one pixel, so it is the baseline 2-D content
//! segmentation is measured against; it is also the right choice when content never
//! moves. The seed found 4x4 tiles best without local compression and 32x32 with it;
//! the default is 32x32.

use super::grid::{fill_blocks, Grid};
use super::layout::{self, Reader};
use super::{Cut, SegmentError, Segmenter, Shape};

const NAME: &str = "tiles";
const TAG: u8 = b'T';

/// Tiles `width` pixels wide and `height` rows high; tiles at the right and bottom
/// edges are cut short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tiles {
    width: usize,
    height: usize,
}

impl Default for Tiles {
    fn default() -> Self {
        Tiles {
            width: 32,
            height: 32,
        }
    }
}

impl Tiles {
    /// Both at least 1.
    pub fn new(width: usize, height: usize) -> Result<Tiles, SegmentError> {
        if width == 0 || height == 0 {
            return Err(SegmentError::Invalid {
                segmenter: NAME,
                reason: format!("tile {width}x{height}: need at least 1x1"),
            });
        }
        Ok(Tiles { width, height })
    }

    /// (width, height)
    pub fn size(&self) -> (usize, usize) {
        (self.width, self.height)
    }
}

impl Segmenter for Tiles {
    fn name(&self) -> &str {
        NAME
    }

    /// Layout: `T`, height, width, element size, tile height, tile width (varints).
    fn cut<'a>(&self, data: &'a [u8], shape: &Shape) -> Result<Cut<'a>, SegmentError> {
        let grid = Grid::of(NAME, shape, data, true)?;
        let block = [
            self.height.min(grid.dims[0]).max(1),
            self.width.min(grid.dims[1]).max(1),
        ];
        let mut layout = vec![TAG];
        grid.put(&mut layout);
        layout::put_usize(&mut layout, block[0]);
        layout::put_usize(&mut layout, block[1]);
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
        r.expect_tag(TAG, "a tiles")?;
        let total = layout::total_len(NAME, segments)?;
        let grid = Grid::read(&mut r, 2, total)?;
        let block = [
            r.bounded("tile height", 1, usize::MAX)?,
            r.bounded("tile width", 1, usize::MAX)?,
        ];
        fill_blocks(&r, &grid, &block, segments, out, |n| {
            format!(
                "{:?} tiles of {}x{} cover a {}x{} image, {} segments were received",
                n,
                block[1],
                block[0],
                grid.dims[1],
                grid.dims[0],
                segments.len()
            )
        })
    }
}
