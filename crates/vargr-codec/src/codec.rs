//! [`Codec`]: a codec with its sender-side parameters, and the dispatch to each codec's
//! compressor and decompressor.
//!
//! A [`CodecId`] is what the receiver needs (which decoder); a [`Codec`] is what the
//! sender chooses (which encoder, at which zstd level, with which FPC table size). The
//! parameters a decoder needs travel inside the payload, so one id covers all levels.

use std::fmt;
use std::str::FromStr;

use crate::{fpc, huffman, lz, rice, rle, shuffle, CodecError, CodecId, ElemKind};

/// A codec as the sender configures it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// No compression.
    None,
    /// LZ4 block format (`lz4_flex`).
    Lz4,
    /// zstd at `level` (-7..=22; 1 fast, 3 zstd's default, 9 and up slow).
    Zstd { level: i32 },
    /// Byte run-length encoding.
    Rle,
    /// Rice codes of zigzag deltas between consecutive elements.
    Rice,
    /// Canonical Huffman over bytes, codes of at most 12 bits.
    Huffman,
    /// FPC with two predictor tables of `2^table_bits` entries (4..=20) for 8-byte
    /// elements, or its 32-bit variant for 4-byte elements.
    Fpc { table_bits: u8 },
    /// Byte shuffle by element size, then LZ4.
    ShuffleLz4,
    /// Byte shuffle by element size, then zstd at `level`.
    ShuffleZstd { level: i32 },
}

/// The zstd level used when a name gives none (`"zstd"`), zstd's own default.
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// The FPC table size used when a name gives none (`"fpc"`): 2^16 entries, 512 KiB a table.
pub const DEFAULT_FPC_TABLE_BITS: u8 = 16;

impl Codec {
    /// The codecs a benchmark or an adaptive engine tries by default: each codec once,
    /// zstd at three levels and shuffle+zstd at two.
    pub const CATALOG: [Codec; 13] = [
        Codec::None,
        Codec::Lz4,
        Codec::Zstd { level: 1 },
        Codec::Zstd { level: 3 },
        Codec::Zstd { level: 9 },
        Codec::Rle,
        Codec::Rice,
        Codec::Huffman,
        Codec::Fpc { table_bits: 10 },
        Codec::Fpc {
            table_bits: DEFAULT_FPC_TABLE_BITS,
        },
        Codec::ShuffleLz4,
        Codec::ShuffleZstd { level: 1 },
        Codec::ShuffleZstd { level: 3 },
    ];

    /// The wire id of the payloads this codec produces.
    pub fn id(self) -> CodecId {
        match self {
            Codec::None => CodecId::None,
            Codec::Lz4 => CodecId::Lz4,
            Codec::Zstd { .. } => CodecId::Zstd,
            Codec::Rle => CodecId::Rle,
            Codec::Rice => CodecId::Rice,
            Codec::Huffman => CodecId::Huffman,
            Codec::Fpc { .. } => CodecId::Fpc,
            Codec::ShuffleLz4 => CodecId::ShuffleLz4,
            Codec::ShuffleZstd { .. } => CodecId::ShuffleZstd,
        }
    }

    /// Whether this codec can compress elements of `elem` at all (FPC needs 4- or
    /// 8-byte elements; everything else takes anything).
    pub fn supports(self, elem: ElemKind) -> bool {
        !matches!(self, Codec::Fpc { .. }) || matches!(elem.size(), 4 | 8)
    }

    /// Appends the payload for `input` (no frame header) to `out`.
    ///
    /// The payload may be larger than the input; [`encode`](crate::encode) is what falls
    /// back to raw. On error `out` is left as it was.
    pub fn compress(
        self,
        input: &[u8],
        elem: ElemKind,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let start = out.len();
        let res = match self {
            Codec::None => {
                out.extend_from_slice(input);
                Ok(())
            }
            Codec::Lz4 => {
                lz::lz4_compress(input, out);
                Ok(())
            }
            Codec::Zstd { level } => lz::zstd_compress(input, level, out),
            Codec::Rle => {
                rle::compress(input, out);
                Ok(())
            }
            Codec::Rice => {
                rice::compress(input, elem.size(), out);
                Ok(())
            }
            Codec::Huffman => {
                huffman::compress(input, out);
                Ok(())
            }
            Codec::Fpc { table_bits } => fpc::compress(input, elem, table_bits, out),
            Codec::ShuffleLz4 => with_plane_buffer(|tmp| {
                shuffle::shuffle(input, elem.size(), tmp);
                lz::lz4_compress(tmp, out);
                Ok(())
            }),
            Codec::ShuffleZstd { level } => with_plane_buffer(|tmp| {
                shuffle::shuffle(input, elem.size(), tmp);
                lz::zstd_compress(tmp, level, out)
            }),
        };
        if res.is_err() {
            out.truncate(start);
        }
        res
    }
}

/// Runs `f` with this thread's empty buffer for shuffled planes. A fresh vector per
/// message of a megabyte or more is a fresh mapping from the allocator, and faulting
/// its pages in cost more than the shuffle itself.
fn with_plane_buffer<T>(f: impl FnOnce(&mut Vec<u8>) -> T) -> T {
    thread_local! {
        static PLANES: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    PLANES.with(|cell| match cell.try_borrow_mut() {
        Ok(mut tmp) => {
            tmp.clear();
            let r = f(&mut tmp);
            // Keep a buffer for the usual message, not for the largest one ever seen.
            if tmp.capacity() > 64 << 20 {
                *tmp = Vec::new();
            }
            r
        }
        // Not reentrant today; a nested call would get a buffer of its own.
        Err(_) => f(&mut Vec::new()),
    })
}

/// Decodes a payload made by codec `id`, appending exactly `len` bytes to `out`.
///
/// `len` is the original length from the frame header, already checked against the
/// receiver's limit: no decoder writes more, and one that would produce another length
/// fails. On error `out` is left as it was (its capacity may have grown by up to `len`).
pub fn decompress(
    id: CodecId,
    payload: &[u8],
    elem: ElemKind,
    len: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let start = out.len();
    let res = match id {
        CodecId::None => {
            if payload.len() == len {
                out.extend_from_slice(payload);
                Ok(())
            } else {
                Err(CodecError::LengthMismatch {
                    codec: id,
                    expected: len,
                    got: payload.len(),
                })
            }
        }
        CodecId::Lz4 => lz::lz4_decompress(id, payload, len, out),
        CodecId::Zstd => lz::zstd_decompress(id, payload, len, out),
        CodecId::Rle => rle::decompress(payload, len, out),
        CodecId::Rice => rice::decompress(payload, elem.size(), len, out),
        CodecId::Huffman => huffman::decompress(payload, len, out),
        CodecId::Fpc => fpc::decompress(payload, elem, len, out),
        CodecId::ShuffleLz4 | CodecId::ShuffleZstd => with_plane_buffer(|tmp| {
            let res = if id == CodecId::ShuffleLz4 {
                lz::lz4_decompress(id, payload, len, tmp)
            } else {
                lz::zstd_decompress(id, payload, len, tmp)
            };
            res.map(|()| shuffle::unshuffle(tmp, elem.size(), out))
        }),
    };
    match res {
        Ok(()) if out.len() - start == len => Ok(()),
        Ok(()) => {
            // Each decoder checks its own length; this guards the guarantee itself.
            let got = out.len() - start;
            out.truncate(start);
            Err(CodecError::LengthMismatch {
                codec: id,
                expected: len,
                got,
            })
        }
        Err(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

impl fmt::Display for Codec {
    /// The name [`FromStr`] reads back: `lz4`, `zstd:3`, `fpc:16`, `shuffle-zstd:1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Codec::Zstd { level } | Codec::ShuffleZstd { level } => {
                write!(f, "{}:{level}", self.id())
            }
            Codec::Fpc { table_bits } => write!(f, "fpc:{table_bits}"),
            _ => f.write_str(self.id().name()),
        }
    }
}

impl FromStr for Codec {
    type Err = CodecError;

    /// Reads `none`, `lz4`, `zstd[:LEVEL]`, `rle`, `rice`, `huffman`, `fpc[:TABLE_BITS]`,
    /// `shuffle-lz4`, `shuffle-zstd[:LEVEL]`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase();
        let (name, param) = match s.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (s.as_str(), None),
        };
        let bad = || {
            CodecError::InvalidParam(format!(
                "codec {s:?}: expected none, lz4, zstd[:LEVEL], rle, rice, huffman, \
                 fpc[:TABLE_BITS], shuffle-lz4 or shuffle-zstd[:LEVEL]"
            ))
        };
        let level = |p: Option<&str>| -> Result<i32, CodecError> {
            let level = p.map_or(Ok(DEFAULT_ZSTD_LEVEL), |p| p.parse().map_err(|_| bad()))?;
            if lz::ZSTD_LEVELS.contains(&level) {
                Ok(level)
            } else {
                Err(CodecError::InvalidParam(format!(
                    "codec {s:?}: zstd level {level} is outside -7..=22"
                )))
            }
        };
        let no_param = |c: Codec| if param.is_none() { Ok(c) } else { Err(bad()) };
        match name {
            "none" | "raw" => no_param(Codec::None),
            "lz4" => no_param(Codec::Lz4),
            "rle" => no_param(Codec::Rle),
            "rice" => no_param(Codec::Rice),
            "huffman" => no_param(Codec::Huffman),
            "shuffle-lz4" => no_param(Codec::ShuffleLz4),
            "zstd" => Ok(Codec::Zstd {
                level: level(param)?,
            }),
            "shuffle-zstd" => Ok(Codec::ShuffleZstd {
                level: level(param)?,
            }),
            "fpc" => {
                let bits =
                    param.map_or(Ok(DEFAULT_FPC_TABLE_BITS), |p| p.parse().map_err(|_| bad()))?;
                if fpc::TABLE_BITS.contains(&bits) {
                    Ok(Codec::Fpc { table_bits: bits })
                } else {
                    Err(CodecError::InvalidParam(format!(
                        "codec {s:?}: fpc table bits {bits} are outside 4..=20"
                    )))
                }
            }
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Codec::CATALOG {
            assert_eq!(c.to_string().parse::<Codec>().unwrap(), c);
        }
        assert_eq!("zstd".parse::<Codec>().unwrap(), Codec::Zstd { level: 3 });
        assert!("zstd:99".parse::<Codec>().is_err());
        assert!("fpc:30".parse::<Codec>().is_err());
        assert!("lz4:1".parse::<Codec>().is_err());
        assert!("gzip".parse::<Codec>().is_err());
    }
}
