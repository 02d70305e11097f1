//! Segmenters: cut a message into segments likely to repeat, and put it back together.
//!
//! The seed's Canidae separates segmentation from redundancy elimination: a segmenter
//! knows the data's structure, the fingerprint protocol knows nothing but segments. Each
//! segmenter here implements [`Segmenter`]: [`Segmenter::cut`] turns a message of some
//! [`Shape`] into segments plus a small *layout* (sent uncompressed, so it is a few
//! varints: at most a header and one or two bytes a segment), and
//! [`Segmenter::reassemble`] turns layout and segments back into the message.
//!
//! | spec | type | for |
//! |---|---|---|
//! | `cdc[:AVG]`, `cdc:MIN:AVG:MAX` | [`Cdc`] | byte streams: FastCDC, boundaries move with the content |
//! | `static:SIZE` | [`Fixed`] | byte streams of fixed records; the baseline |
//! | `sw[:SEG[:WIN[:EVERY]]]` | [`SpringWetherall`] | byte streams: fixed segments centred on content anchors |
//! | `tiles[:WxH]` | [`Tiles`] | images: the static 2-D grid of VNC and MPEG; the 2-D baseline |
//! | `varg[:key=value,...]` | [`Varg`] | screen images: the seed's 2-D Varg segmentation |
//! | `ndarray[:SIZE]` | [`NdArray`] | typed arrays of any rank: blocks along the array's own axes |
//!
//! [`by_name`] builds one from such a spec. The 1-D segmenters also cut streams
//! incrementally ([`Segmenter::boundaries`]), so a TCP proxy need not buffer whole
//! messages.
//!
//! `reassemble` reads bytes from the network: it checks every count, size and dimension
//! against the segments it was handed, allocates no more than their total length, and
//! returns [`SegmentError::Layout`] rather than panicking.

use std::borrow::Cow;

pub(crate) mod cdc;
mod fixed;
mod grid;
mod layout;
mod ndarray;
mod spec;
mod sw;
mod tiles;
mod varg;

#[cfg(test)]
mod tests;

pub use cdc::Cdc;
pub use fixed::Fixed;
pub use ndarray::NdArray;
pub use spec::by_name;
pub use sw::SpringWetherall;
pub use tiles::Tiles;
pub use varg::{RegionBox, Regions, Varg, VargParams};

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

    /// Cuts `data`, which holds `shape`. 1-D segmenters ignore the shape; the others
    /// check that `data` is as long as the shape says.
    fn cut<'a>(&self, data: &'a [u8], shape: &Shape) -> Result<Cut<'a>, SegmentError>;

    /// Appends the message that `layout` and `segments` came from to `out`. On error
    /// `out` is left as it was.
    fn reassemble(
        &self,
        layout: &[u8],
        segments: &[&[u8]],
        out: &mut Vec<u8>,
    ) -> Result<(), SegmentError>;

    /// For segmenters of byte streams: the ends of the segments of `data` that no later
    /// byte can change, in increasing order. With `last` the stream ends with `data`, and
    /// the last end is `data.len()` (none for empty data). Otherwise the caller keeps
    /// `data[last end..]` and calls again with it followed by the next bytes; the
    /// segments so found are those [`Segmenter::cut`] finds in the whole stream.
    ///
    /// `None` for segmenters that need the whole message (2-D and n-D ones).
    fn boundaries(&self, data: &[u8], last: bool) -> Option<Vec<usize>> {
        let _ = (data, last);
        None
    }
}

/// Why a message could not be cut or put back together, or a segmenter not built.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    /// The message does not fit the segmenter (wrong shape, length not matching it).
    #[error("{segmenter}: {reason}")]
    Invalid {
        segmenter: &'static str,
        reason: String,
    },
    /// A layout and segments that do not describe a message (from a broken or hostile
    /// peer, or another segmenter's layout).
    #[error("{segmenter}: bad layout: {reason}")]
    Layout {
        segmenter: &'static str,
        reason: String,
    },
    /// A segmenter spec that could not be parsed.
    #[error("segmenter spec {spec:?}: {reason}; expected {expected}")]
    Spec {
        spec: String,
        reason: String,
        expected: &'static str,
    },
}

/// A segmenter of byte streams decides only where segments end; cutting, streaming and
/// reassembly (the segments concatenate) follow from that, the same for all of them.
pub(crate) trait StreamCuts: Send + Sync {
    const NAME: &'static str;
    /// As [`Segmenter::boundaries`].
    fn ends(&self, data: &[u8], last: bool) -> Vec<usize>;
}

impl<T: StreamCuts> Segmenter for T {
    fn name(&self) -> &str {
        T::NAME
    }

    fn cut<'a>(&self, data: &'a [u8], _shape: &Shape) -> Result<Cut<'a>, SegmentError> {
        Ok(Cut {
            segments: slices(data, &self.ends(data, true)),
            layout: Vec::new(),
        })
    }

    fn reassemble(
        &self,
        layout: &[u8],
        segments: &[&[u8]],
        out: &mut Vec<u8>,
    ) -> Result<(), SegmentError> {
        concat(T::NAME, layout, segments, out)
    }

    fn boundaries(&self, data: &[u8], last: bool) -> Option<Vec<usize>> {
        Some(self.ends(data, last))
    }
}

/// Segments of `data` ending at `ends` (increasing, last = `data.len()`), borrowed.
fn slices<'a>(data: &'a [u8], ends: &[usize]) -> Vec<Cow<'a, [u8]>> {
    let mut start = 0;
    ends.iter()
        .map(|&end| {
            let s = Cow::Borrowed(&data[start..end]);
            start = end;
            s
        })
        .collect()
}

/// Reassembly of the 1-D segmenters: the segments concatenate, the layout is empty.
fn concat(
    segmenter: &'static str,
    layout: &[u8],
    segments: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<(), SegmentError> {
    if !layout.is_empty() {
        return Err(SegmentError::Layout {
            segmenter,
            reason: format!(
                "expected an empty layout (segments concatenate), got {} bytes",
                layout.len()
            ),
        });
    }
    out.reserve(layout::total_len(segmenter, segments)?);
    for s in segments {
        out.extend_from_slice(s);
    }
    Ok(())
}
