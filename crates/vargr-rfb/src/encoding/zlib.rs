//! A zlib stream that lasts as long as the connection (ZRLE has one, Tight four),
//! inflated one rectangle at a time with a bound on the output.

use flate2::{Decompress, FlushDecompress, Status};

use crate::RfbError;

pub(super) struct Inflater {
    z: Decompress,
}

impl Inflater {
    pub fn new() -> Inflater {
        Inflater {
            z: Decompress::new(true),
        }
    }

    /// Starts a new stream (Tight's reset bits).
    pub fn reset(&mut self) {
        self.z.reset(true);
    }

    /// Inflates all of `data` (the sender flushes at the end of each rectangle),
    /// refusing more than `max` bytes of output.
    pub fn inflate(
        &mut self,
        encoding: &'static str,
        data: &[u8],
        max: u64,
    ) -> Result<Vec<u8>, RfbError> {
        let mut out: Vec<u8> = Vec::new();
        let mut used = 0usize;
        loop {
            out.reserve(64 << 10);
            let (in0, out0) = (self.z.total_in(), out.len());
            let status = self
                .z
                .decompress_vec(&data[used..], &mut out, FlushDecompress::Sync)
                .map_err(|e| RfbError::Corrupt {
                    encoding,
                    what: format!("zlib: {e}"),
                })?;
            used += (self.z.total_in() - in0) as usize;
            if out.len() as u64 > max {
                return Err(RfbError::TooLong {
                    message: encoding,
                    field: "inflated data",
                    len: out.len() as u64,
                    max,
                });
            }
            let full = out.len() == out.capacity();
            let progress = self.z.total_in() > in0 || out.len() > out0;
            if status == Status::StreamEnd || (used == data.len() && !full) || !progress {
                break;
            }
        }
        Ok(out)
    }
}
