//! How the link compresses what the dedup sender writes, and what it would cost.
//!
//! A screen's updates are mostly small (a clock's tick, a line of text: a few KiB)
//! and now and then large (a new picture). One zstd stream serves the large ones
//! best: its window reaches megabytes back, where a panned picture was seen. The
//! small ones gain more from a strong level than from a long window, and a strong
//! level on a whole stream would cost the large ones dearly. So a piece up to
//! [`Tiers::small`] bytes goes as a zstd frame of its own at [`Tiers::small_level`]
//! with the last [`HISTORY`] bytes of everything sent as its prefix, which both ends
//! keep; a larger one goes into the stream. What that saves, and what it costs in
//! latency, is in docs/benchmarks.md (Varg, "How Varg got here"); `cargo run --release -p
//! vargr-vnc --example link_bytes` shows it per update of a recording.

use std::io;

use vargr_sync::zpieces::{PieceDecoder, PieceEncoder};
use zstd::zstd_safe::{CCtx, DCtx};

/// Bytes of what was sent that a small piece is compressed against.
pub const HISTORY: usize = 128 << 10;
/// How a zstd dictionary starts (0xEC30A437, little-endian).
const DICT_MAGIC: [u8; 4] = [0x37, 0xa4, 0x30, 0xec];

/// Where a piece goes, by size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiers {
    /// zstd level of the stream that carries large pieces.
    pub stream_level: i32,
    /// Largest piece sent as a frame of its own (0: none).
    pub small: usize,
    pub small_level: i32,
}

/// The last [`HISTORY`] bytes sent, the same at both ends.
#[derive(Default)]
struct History(Vec<u8>);

impl History {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
        if self.0.len() > 2 * HISTORY {
            self.0.drain(..self.0.len() - HISTORY);
        }
    }

    /// The prefix for the next frame. zstd reads a prefix that starts with its
    /// dictionary magic as a dictionary, so such a one starts a byte later (both ends
    /// cut alike).
    fn recent(&self) -> &[u8] {
        let r = &self.0[self.0.len().saturating_sub(HISTORY)..];
        if r.starts_with(&DICT_MAGIC) {
            &r[1..]
        } else {
            r
        }
    }
}

/// A compressed piece and how it travels.
pub enum Piece {
    /// The next bytes of the stream.
    Stream(Vec<u8>),
    /// A zstd frame whose prefix is the history.
    Frame(Vec<u8>),
}

/// The sending end.
pub struct Squeezer {
    tiers: Tiers,
    stream: PieceEncoder,
    cctx: CCtx<'static>,
    history: History,
}

fn zstd_error(code: usize) -> io::Error {
    io::Error::other(zstd::zstd_safe::get_error_name(code))
}

impl Squeezer {
    pub fn new(tiers: Tiers) -> io::Result<Squeezer> {
        Ok(Squeezer {
            tiers,
            stream: PieceEncoder::new(tiers.stream_level)?,
            cctx: CCtx::create(),
            history: History::default(),
        })
    }

    /// Compresses the next piece.
    pub fn piece(&mut self, bytes: &[u8]) -> io::Result<Piece> {
        let piece = if bytes.len() <= self.tiers.small {
            let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(bytes.len()));
            self.cctx
                .compress_using_dict(
                    &mut out,
                    bytes,
                    self.history.recent(),
                    self.tiers.small_level,
                )
                .map_err(zstd_error)?;
            Piece::Frame(out)
        } else {
            Piece::Stream(self.stream.piece(bytes)?)
        };
        self.history.push(bytes);
        Ok(piece)
    }

    /// What zstd at level 1 makes of `bytes` against the history: an estimate of
    /// what they would cost sent next. A clock's tick then costs what differs from
    /// the last tick, in whichever form the last tick went.
    pub fn estimate(&mut self, bytes: &[u8]) -> usize {
        if bytes.is_empty() {
            return 0;
        }
        let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(bytes.len()));
        self.cctx
            .compress_using_dict(&mut out, bytes, self.history.recent(), 1)
            .map_or(bytes.len(), |_| out.len())
    }
}

/// The receiving end: refuses a piece that would expand beyond a limit, before it
/// expands.
pub struct Unsqueezer {
    stream: PieceDecoder,
    dctx: DCtx<'static>,
    history: History,
    limit: usize,
}

impl Unsqueezer {
    pub fn new(limit: usize) -> io::Result<Unsqueezer> {
        Ok(Unsqueezer {
            stream: PieceDecoder::new(limit)?,
            dctx: DCtx::create(),
            history: History::default(),
            limit,
        })
    }

    /// The bytes of the next piece of the stream.
    pub fn stream(&mut self, piece: &[u8]) -> io::Result<Vec<u8>> {
        let bytes = self.stream.piece(piece)?;
        self.history.push(&bytes);
        Ok(bytes)
    }

    /// The bytes of a frame compressed against the history.
    pub fn frame(&mut self, frame: &[u8]) -> io::Result<Vec<u8>> {
        let size = match zstd::zstd_safe::get_frame_content_size(frame) {
            Ok(Some(n)) => n,
            _ => return Err(io::Error::other("a frame without its content size")),
        };
        if size > self.limit as u64 {
            return Err(io::Error::other(format!(
                "a frame of {size} bytes, more than {}",
                self.limit
            )));
        }
        let mut out = Vec::with_capacity(size as usize);
        let n = self
            .dctx
            .decompress_using_dict(&mut out, frame, self.history.recent())
            .map_err(zstd_error)?;
        if n as u64 != size {
            return Err(io::Error::other(format!(
                "a frame of {n} bytes where its header says {size}"
            )));
        }
        self.history.push(&out);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize, seed: u64) -> Vec<u8> {
        let words = [
            "clock", "tick", "screen", "update", "varg", "region", "tile",
        ];
        let mut s = seed;
        let mut out = Vec::new();
        while out.len() < n {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            out.extend_from_slice(words[(s >> 33) as usize % words.len()].as_bytes());
            out.push(b' ');
        }
        out.truncate(n);
        out
    }

    #[test]
    fn pieces_of_both_kinds_decode_in_order_and_repeats_cost_little() {
        let tiers = Tiers {
            stream_level: 9,
            small: 4 << 10,
            small_level: 19,
        };
        let mut tx = Squeezer::new(tiers).unwrap();
        let mut rx = Unsqueezer::new(1 << 20).unwrap();
        let small = text(3000, 1);
        // Noise-like, as a photo's pixels: found again only by a long window.
        let large: Vec<u8> = (0..100_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let mut sizes = Vec::new();
        for bytes in [&small, &large, &small, &large, &text(2000, 3)] {
            let back = match tx.piece(bytes).unwrap() {
                Piece::Stream(p) => {
                    assert!(bytes.len() > tiers.small);
                    sizes.push(p.len());
                    rx.stream(&p).unwrap()
                }
                Piece::Frame(f) => {
                    assert!(bytes.len() <= tiers.small);
                    sizes.push(f.len());
                    rx.frame(&f).unwrap()
                }
            };
            assert_eq!(&back, bytes);
        }
        // A small piece seen before is found in the history; a large one in the
        // stream's window.
        assert!(sizes[2] < 40, "a repeated small piece cost {sizes:?}");
        assert!(
            sizes[3] < sizes[1] / 20,
            "a repeated large piece cost {sizes:?}"
        );
        // The estimate sees what the next frame would: the last piece, not the first
        // (two large pieces later, past the history).
        let (last, first) = (tx.estimate(&text(2000, 3)), tx.estimate(&small));
        assert!(last < 40 && first > 10 * last, "{last} {first}");
    }

    #[test]
    fn a_frame_that_lies_about_its_size_or_is_damaged_is_refused() {
        let tiers = Tiers {
            stream_level: 3,
            small: 1 << 20,
            small_level: 3,
        };
        let mut tx = Squeezer::new(tiers).unwrap();
        let Piece::Frame(f) = tx.piece(&text(50_000, 4)).unwrap() else {
            panic!("a small piece")
        };
        let mut rx = Unsqueezer::new(10_000).unwrap();
        let e = rx.frame(&f).unwrap_err();
        assert!(e.to_string().contains("more than 10000"), "{e}");
        let mut rx = Unsqueezer::new(1 << 20).unwrap();
        let mut bad = f.clone();
        let k = bad.len() / 2;
        bad[k] ^= 0x55;
        assert!(rx.frame(&bad).is_err() || rx.frame(&f).is_ok());
        assert!(Unsqueezer::new(1 << 20).unwrap().frame(&f[..10]).is_err());
    }
}
