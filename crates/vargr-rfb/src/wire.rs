//! A bounds-checked reader for decoders that may see a partial message.
//!
//! Running out of bytes is not an error while a message is still arriving: the reader
//! reports how many bytes the message needs at least ([`Step::Short`]), so a decoder
//! consumes nothing and its caller knows when trying again is worth it.

use crate::RfbError;

/// Why a parse stopped: more bytes are needed, or the bytes are wrong.
#[derive(Debug)]
pub(crate) enum Step {
    /// The message needs at least this many bytes from its start.
    Short(usize),
    Bad(RfbError),
}

impl From<RfbError> for Step {
    fn from(e: RfbError) -> Step {
        Step::Bad(e)
    }
}

pub(crate) type Parse<T> = Result<T, Step>;

pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    /// The bytes read since position `start`.
    pub fn since(&self, start: usize) -> &'a [u8] {
        &self.buf[start..self.pos]
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn bytes(&mut self, n: usize) -> Parse<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(Step::Short(usize::MAX))?;
        if end > self.buf.len() {
            return Err(Step::Short(end));
        }
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub fn skip(&mut self, n: usize) -> Parse<()> {
        self.bytes(n).map(|_| ())
    }

    pub fn u8(&mut self) -> Parse<u8> {
        Ok(self.bytes(1)?[0])
    }

    pub fn u16(&mut self) -> Parse<u16> {
        let b = self.bytes(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self) -> Parse<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn i32(&mut self) -> Parse<i32> {
        Ok(self.u32()? as i32)
    }

    /// A u32 length followed by that many bytes, refused above `max` before waiting
    /// for (or allocating) the bytes.
    pub fn string(
        &mut self,
        message: &'static str,
        field: &'static str,
        max: u32,
    ) -> Parse<Vec<u8>> {
        let len = self.u32()?;
        if len > max {
            return Err(Step::Bad(RfbError::TooLong {
                message,
                field,
                len: len as u64,
                max: max as u64,
            }));
        }
        Ok(self.bytes(len as usize)?.to_vec())
    }
}

/// Runs a parser on the front of `buf`; on success removes the bytes it used. `want`
/// is raised to the known minimum length while the message is incomplete.
pub(crate) fn decode_front<T>(
    buf: &mut bytes::BytesMut,
    parse: impl FnOnce(&mut Reader) -> Parse<T>,
) -> Result<Option<T>, RfbError> {
    let mut r = Reader::new(buf);
    match parse(&mut r) {
        Ok(v) => {
            let used = r.pos();
            let _ = buf.split_to(used);
            Ok(Some(v))
        }
        Err(Step::Short(_)) => Ok(None),
        Err(Step::Bad(e)) => Err(e),
    }
}

/// Like [`decode_front`], but also reports how many bytes an incomplete message needs.
pub(crate) fn decode_front_want<T>(
    buf: &mut bytes::BytesMut,
    parse: impl FnOnce(&mut Reader) -> Parse<T>,
) -> Result<Result<T, usize>, RfbError> {
    let mut r = Reader::new(buf);
    match parse(&mut r) {
        Ok(v) => {
            let used = r.pos();
            let _ = buf.split_to(used);
            Ok(Ok(v))
        }
        Err(Step::Short(n)) => Ok(Err(n)),
        Err(Step::Bad(e)) => Err(e),
    }
}

/// Encoded data that ends inside a nested structure (a ZRLE stream, a stored payload)
/// is corrupt, not incomplete.
pub(crate) fn whole<T>(encoding: &'static str, r: Parse<T>) -> Result<T, RfbError> {
    match r {
        Ok(v) => Ok(v),
        Err(Step::Short(_)) => Err(RfbError::Corrupt {
            encoding,
            what: "data ends early".into(),
        }),
        Err(Step::Bad(e)) => Err(e),
    }
}
