//! Lossless codecs for vargr messages, behind one small, bounded frame header.
//!
//! Slow links make compression worth its CPU time, but which codec pays depends on the
//! data: LZ4 for anything, zstd when the link is very slow, FPC for floating-point
//! fields, Rice for integer sequences with small steps, RLE for sparse data, Huffman for
//! text, and a byte shuffle before LZ4 or zstd for typed arrays (as Blosc does). This
//! crate holds them all, the way the seed's CoMPI does, so that the codec stage and its
//! adaptive engine can choose per message.
//!
//! - [`Codec`] is a codec with the sender's parameters (`zstd:3`, `fpc:16`);
//!   [`CodecId`] is the byte on the wire that tells the receiver which decoder to use;
//!   [`ElemKind`] says what the bytes hold (`f64`, `i32`, …) and so the element size.
//! - [`encode`] writes a frame (header + payload) and sends the data raw whenever the
//!   codec does not make it smaller; [`decode`] reads one back, refusing a frame whose
//!   announced length exceeds the caller's limit before allocating anything.
//! - [`measure_all`] reports ratio and speed of every codec on some data;
//!   [`testdata`] makes realistic data to measure on.
//! - [`Engine`] chooses per message, link and data class whether and with which codec
//!   to compress (the seed's runtime adaptive strategy), from a cost model
//!   ([`LinkModel`] per link, [`CodecStats`] per codec and [`DataClass`]) that decides
//!   whether compression pays (Eq. 4.4); [`EngineConfig`] holds its settings.
//!
//! The crate is sans-IO and never panics on input: every decoder is fuzzed, and garbage
//! gives a [`CodecError`] naming the field or stream part that is wrong.
//!
//! ```
//! use vargr_codec::{decode, encode, Codec, CodecId, ElemKind};
//!
//! let field: Vec<u8> = (0..1000).flat_map(|i| (i as f64 * 0.25).to_le_bytes()).collect();
//!
//! let mut frame = Vec::new();
//! let header = encode(Codec::Fpc { table_bits: 16 }, ElemKind::F64, &field, &mut frame);
//! assert_eq!(header.codec, CodecId::Fpc);
//! assert!(frame.len() < field.len() / 2);
//!
//! // The receiver accepts messages of up to 1 MiB.
//! let mut out = Vec::new();
//! let got = decode(&frame, 1 << 20, &mut out)?;
//! assert_eq!(got.elem, ElemKind::F64);
//! assert_eq!(out, field);
//!
//! // Random bytes do not compress, so they travel raw behind the same header.
//! let noise = vargr_codec::testdata::random_bytes(100, 1);
//! assert_eq!(encode(Codec::Lz4, ElemKind::BYTES, &noise, &mut Vec::new()).codec, CodecId::None);
//! # Ok::<(), vargr_codec::CodecError>(())
//! ```

mod adaptive;
mod bits;
mod codec;
mod config;
mod error;
mod fpc;
pub mod guided;
mod header;
mod huffman;
mod kind;
mod lz;
mod measure;
pub mod model;
pub mod report;
mod rice;
mod rle;
mod shuffle;
pub mod stage;
pub mod testdata;

pub use adaptive::{ClassSummary, Clock, Decision, Engine, LinkKey, LinkOptions, Reason};
pub use codec::{decompress, Codec, DEFAULT_FPC_TABLE_BITS, DEFAULT_ZSTD_LEVEL};
pub use config::{Candidates, EngineConfig, MAX_CANDIDATES};
pub use error::CodecError;
pub use fpc::TABLE_BITS as FPC_TABLE_BITS;
pub use header::{
    decode, decode_to_vec, encode, encode_span, encode_to_vec, Header, Span, HEADER_MAX,
    HEADER_MIN, MAGIC_VERSION,
};
pub use huffman::MAX_BITS as HUFFMAN_MAX_BITS;
pub use kind::{CodecId, ElemKind};
pub use lz::ZSTD_LEVELS;
pub use measure::{format_table, measure, measure_all, CodecMeasure, DEFAULT_BUDGET};
pub use model::{CodecRun, CodecStats, DataClass, LinkModel, Prediction};
pub use rice::{BLOCK as RICE_BLOCK, QMAX as RICE_QMAX};
pub use rle::MIN_RUN as RLE_MIN_RUN;
