//! A message from another site, as libvargr_mpi.so's receiving side reads it: arbitrary
//! bytes through `read_frame` into buffers of several sizes. Nothing may panic, write
//! past the buffer, or report another length than it wrote; whatever decodes must match
//! its checksum, so re-framing it and reading it back gives the same bytes.

use vargr_codec::{Codec, ElemKind};
use vargr_mpi::compress::{original_len, read_frame, write_frame, FrameError};

pub fn run(data: &[u8]) {
    for cap in [0usize, 16, 4096, 1 << 16] {
        // A guard after the buffer catches writes past it.
        let mut out = vec![0xA5u8; cap + 64];
        match read_frame(data, &mut out[..cap]) {
            Ok(n) => {
                assert!(n <= cap);
                assert!(
                    out[cap..].iter().all(|&b| b == 0xA5),
                    "wrote past the buffer"
                );
                assert_eq!(original_len(data), Some(n as u64));
                let mut again = Vec::new();
                write_frame(Codec::Lz4, ElemKind::BYTES, &out[..n], &mut again);
                let mut back = vec![0u8; n];
                assert_eq!(read_frame(&again, &mut back), Ok(n));
                assert_eq!(back, out[..n]);
            }
            Err(FrameError::Truncated { original }) => assert!(original > cap as u64),
            Err(FrameError::Corrupt(why)) => assert!(!why.is_empty()),
        }
    }
}
