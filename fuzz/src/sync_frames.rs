//! Arbitrary bytes into `vargr sync`'s preamble, reply frames and control messages
//! (the JSON inside them) and the path check of manifest entries, and into `vargr
//! proxy`'s link framing with the zstd stream pieces it carries: errors, never panics
//! or allocations beyond the frame limits.

use vargr_sync::zpieces::{max_piece, PieceDecoder};

pub fn run(data: &[u8]) {
    vargr_sync::fuzzing::decode_all(data);
    let Ok(mut z) = PieceDecoder::new(1 << 16) else {
        return;
    };
    let mut rest = data;
    while let Ok(Some((_, body))) = vargr_sync::split_frame(rest, max_piece(1 << 16)) {
        match z.piece(body) {
            Ok(out) => assert!(out.len() <= 1 << 16),
            Err(_) => break,
        }
        rest = &rest[5 + body.len()..];
    }
}
