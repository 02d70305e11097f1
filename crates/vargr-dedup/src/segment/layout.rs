//! Layout encoding: LEB128 varints, read back with every field checked.
//!
//! Layouts travel uncompressed beside the segments, so small numbers take one byte.

use super::SegmentError;

/// Appends `v` as an unsigned LEB128 varint (1 byte below 128, 2 below 16384).
pub(crate) fn put(out: &mut Vec<u8>, v: u64) {
    let mut v = v;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// [`put`] for sizes and counts.
pub(crate) fn put_usize(out: &mut Vec<u8>, v: usize) {
    put(out, v as u64);
}

/// Reads a layout front to back; errors name the segmenter and the field.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    segmenter: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(segmenter: &'static str, buf: &'a [u8]) -> Reader<'a> {
        Reader {
            buf,
            pos: 0,
            segmenter,
        }
    }

    pub(crate) fn error(&self, reason: String) -> SegmentError {
        SegmentError::Layout {
            segmenter: self.segmenter,
            reason,
        }
    }

    /// Reads the layout's first byte, which must be `tag`; `kind` names the layout in
    /// the error ("an ndarray").
    pub(crate) fn expect_tag(&mut self, tag: u8, kind: &str) -> Result<(), SegmentError> {
        if self.byte("tag")? != tag {
            return Err(self.error(format!(
                "not {kind} layout (tag is not '{}')",
                char::from(tag)
            )));
        }
        Ok(())
    }

    pub(crate) fn byte(&mut self, what: &str) -> Result<u8, SegmentError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.error(format!("ends at byte {} before the {what}", self.pos)))?;
        self.pos += 1;
        Ok(b)
    }

    pub(crate) fn varint(&mut self, what: &str) -> Result<u64, SegmentError> {
        let start = self.pos;
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte(what)?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                break;
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.error(format!("{what} at byte {start} overflows 64 bits")))
    }

    /// A varint that must lie in `lo..=hi`.
    pub(crate) fn bounded(
        &mut self,
        what: &str,
        lo: usize,
        hi: usize,
    ) -> Result<usize, SegmentError> {
        let start = self.pos;
        let v = self.varint(what)?;
        match usize::try_from(v) {
            Ok(v) if (lo..=hi).contains(&v) => Ok(v),
            _ => Err(self.error(format!("{what} {v} at byte {start} is outside {lo}..={hi}"))),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos == self.buf.len()
    }

    /// Fails unless the whole layout was read.
    pub(crate) fn finish(&self) -> Result<(), SegmentError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(self.error(format!(
                "{} bytes left over after byte {}",
                self.buf.len() - self.pos,
                self.pos
            )))
        }
    }
}

/// Total length of `segments`; an error if it does not fit a `usize`.
pub(crate) fn total_len(
    segmenter: &'static str,
    segments: &[&[u8]],
) -> Result<usize, SegmentError> {
    segments
        .iter()
        .try_fold(0usize, |acc, s| acc.checked_add(s.len()))
        .ok_or_else(|| SegmentError::Layout {
            segmenter,
            reason: "segments total more than the address space".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_reject_overflow() {
        for v in [0u64, 1, 127, 128, 16383, 16384, u64::MAX / 3, u64::MAX] {
            let mut b = Vec::new();
            put(&mut b, v);
            let mut r = Reader::new("t", &b);
            assert_eq!(r.varint("v").unwrap(), v);
            r.finish().unwrap();
        }
        let mut b = Vec::new();
        put(&mut b, 300);
        assert_eq!(b.len(), 2);
        assert!(Reader::new("t", &[0xff; 11]).varint("v").is_err());
        assert!(Reader::new(
            "t",
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]
        )
        .varint("v")
        .is_err());
        assert!(Reader::new("t", &[0x80]).varint("v").is_err());
        assert!(Reader::new("t", &[5]).bounded("v", 6, 9).is_err());
    }
}
