//! One zstd stream cut into pieces that each decode on arrival: how `vargr proxy`
//! compresses a link direction. Each piece is the compressed form of one run of bytes,
//! flushed, so the far side decodes it at once, yet with the history of every piece
//! before it: small interactive writes compress against what crossed earlier, which a
//! frame compressed alone cannot do.

use std::io::{self, Write};

/// The sending half.
pub struct PieceEncoder(zstd::stream::write::Encoder<'static, Vec<u8>>);

impl PieceEncoder {
    pub fn new(level: i32) -> io::Result<PieceEncoder> {
        Ok(PieceEncoder(zstd::stream::write::Encoder::new(
            Vec::new(),
            level,
        )?))
    }

    /// The next piece, holding `bytes`.
    pub fn piece(&mut self, bytes: &[u8]) -> io::Result<Vec<u8>> {
        self.0.write_all(bytes)?;
        self.0.flush()?;
        Ok(std::mem::take(self.0.get_mut()))
    }
}

/// Largest piece the encoder makes for `n` bytes: what a decoder should accept.
pub fn max_piece(n: usize) -> usize {
    zstd::zstd_safe::compress_bound(n) + 64
}

/// The receiving half: refuses a piece that would expand beyond a limit, before it
/// holds more than that.
pub struct PieceDecoder(zstd::stream::write::Decoder<'static, Bounded>);

/// A `Vec` that refuses to grow past `limit`.
struct Bounded {
    buf: Vec<u8>,
    limit: usize,
}

impl Write for Bounded {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.buf.len() + b.len() > self.limit {
            return Err(io::Error::other(format!(
                "a piece expands beyond {} bytes",
                self.limit
            )));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl PieceDecoder {
    /// A decoder whose pieces each expand to at most `limit` bytes.
    pub fn new(limit: usize) -> io::Result<PieceDecoder> {
        let sink = Bounded {
            buf: Vec::new(),
            limit,
        };
        Ok(PieceDecoder(zstd::stream::write::Decoder::new(sink)?))
    }

    /// The bytes of the next piece. After an error the stream is broken: stop.
    pub fn piece(&mut self, piece: &[u8]) -> io::Result<Vec<u8>> {
        self.0.write_all(piece)?;
        self.0.flush()?;
        Ok(std::mem::take(&mut self.0.get_mut().buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_decode_on_arrival_and_share_history() {
        let mut e = PieceEncoder::new(3).unwrap();
        let mut d = PieceDecoder::new(1 << 16).unwrap();
        let line = b"GET /index.html HTTP/1.1\r\nHost: example.org\r\nAccept: */*\r\n\r\n";
        let first = e.piece(line).unwrap();
        let second = e.piece(line).unwrap();
        assert!(
            second.len() < first.len() / 3,
            "{} then {}",
            first.len(),
            second.len()
        );
        assert_eq!(d.piece(&first).unwrap(), line);
        assert_eq!(d.piece(&second).unwrap(), line);
        assert_eq!(d.piece(&e.piece(b"").unwrap()).unwrap(), b"");
        assert!(first.len() <= max_piece(line.len()));
    }

    #[test]
    fn a_bomb_and_garbage_are_errors() {
        let mut e = PieceEncoder::new(3).unwrap();
        let bomb = e.piece(&vec![0u8; 1 << 20]).unwrap();
        let mut d = PieceDecoder::new(1 << 16).unwrap();
        let err = d.piece(&bomb).unwrap_err();
        assert!(err.to_string().contains("expands beyond"), "{err}");
        let mut d = PieceDecoder::new(1 << 16).unwrap();
        assert!(d.piece(b"\x28\xb5\x2f\xfd garbage").is_err());
    }
}
