//! `static`: fixed-size segments of a byte stream.
//!
//! The baseline content-defined chunking is measured against, and the right choice for
//! streams of fixed-size records that never shift (a boundary that is a record
//! boundary is worth more than one the content picks).

use super::{SegmentError, StreamCuts};

const NAME: &str = "static";

/// Segments of `size` bytes; the last may be shorter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixed {
    size: usize,
}

impl Fixed {
    /// `size` at least 1.
    pub fn new(size: usize) -> Result<Fixed, SegmentError> {
        if size == 0 {
            return Err(SegmentError::Invalid {
                segmenter: NAME,
                reason: "segment size 0; need at least 1 byte".into(),
            });
        }
        Ok(Fixed { size })
    }

    pub fn size(&self) -> usize {
        self.size
    }
}

impl StreamCuts for Fixed {
    const NAME: &'static str = NAME;

    fn ends(&self, data: &[u8], last: bool) -> Vec<usize> {
        let mut ends: Vec<usize> = (1..=data.len() / self.size)
            .map(|k| k * self.size)
            .collect();
        if last && data.len() % self.size != 0 {
            ends.push(data.len());
        }
        ends
    }
}
