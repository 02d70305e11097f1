//! Segmenters: cut a message into segments likely to repeat, and put it back together.
//!
//! Placeholder interface; the segmenters themselves are being written.

use std::borrow::Cow;

/// What a message holds, so a segmenter can cut along its structure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// A byte stream.
    Bytes,
    /// A dense row-major array: `dims` from slowest to fastest, `elem_size` bytes each
    /// (an image is `[height, width]` with `elem_size` bytes per pixel).
    Grid { dims: Vec<usize>, elem_size: usize },
}

/// A message cut into segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut<'a> {
    /// The segments, in the order the receiver gets them.
    pub segments: Vec<Cow<'a, [u8]>>,
    /// What the receiver's [`Segmenter::reassemble`] needs besides the segments (empty
    /// when they simply concatenate).
    pub layout: Vec<u8>,
}

/// Cuts messages into segments and reassembles them.
pub trait Segmenter: Send + Sync {
    /// Short name (`cdc`, `static`, ...), as used on the command line.
    fn name(&self) -> &str;
    /// Cuts `data`, which holds `shape`.
    fn cut<'a>(&self, data: &'a [u8], shape: &Shape) -> Result<Cut<'a>, SegmentError>;
    /// Appends the message that `layout` and `segments` came from to `out`.
    fn reassemble(
        &self,
        layout: &[u8],
        segments: &[&[u8]],
        out: &mut Vec<u8>,
    ) -> Result<(), SegmentError>;
}

/// Why a message could not be cut or put back together.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    #[error("{segmenter}: {reason}")]
    Invalid {
        segmenter: &'static str,
        reason: String,
    },
}
