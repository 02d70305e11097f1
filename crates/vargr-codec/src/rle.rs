//! Byte run-length encoding, the seed's RLE: cheap, and worth it only where bytes repeat
//! (sparse arrays full of zeros, images with flat areas, padding).
//!
//! The stream is a sequence of tokens. Each token starts with a LEB128 varint `t`:
//!
//! - `t` even: a literal run; `t / 2 + 1` bytes follow and are copied as they are;
//! - `t` odd: a repeat; one byte follows and is repeated `t / 2 + MIN_RUN` times.
//!
//! Runs shorter than [`MIN_RUN`] stay inside literals, so the stream never grows by more
//! than one byte per 64 literal bytes (plus the varint of a very long literal), and a run
//! of any length costs at most ten bytes. The decoder stops when it has produced the
//! announced length; tokens that would go past it, and bytes after the last token, are
//! errors.

use crate::header::{read_varint, write_varint};
use crate::{CodecError, CodecId};

/// The shortest run that is encoded as a repeat token.
pub const MIN_RUN: usize = 3;

/// Appends the RLE stream for `input` to `out`.
pub(crate) fn compress(input: &[u8], out: &mut Vec<u8>) {
    let mut lit_start = 0;
    let mut i = 0;
    while i < input.len() {
        let b = input[i];
        let run = input[i..].iter().take_while(|&&x| x == b).count();
        if run >= MIN_RUN {
            flush_literal(&input[lit_start..i], out);
            write_varint(((run - MIN_RUN) as u64) << 1 | 1, out);
            out.push(b);
            i += run;
            lit_start = i;
        } else {
            i += run;
        }
    }
    flush_literal(&input[lit_start..], out);
}

fn flush_literal(lit: &[u8], out: &mut Vec<u8>) {
    if !lit.is_empty() {
        write_varint(((lit.len() - 1) as u64) << 1, out);
        out.extend_from_slice(lit);
    }
}

/// Appends exactly `len` decoded bytes to `out`.
pub(crate) fn decompress(payload: &[u8], len: usize, out: &mut Vec<u8>) -> Result<(), CodecError> {
    const C: CodecId = CodecId::Rle;
    let end = out.len() + len;
    out.reserve(len);
    let mut rest = payload;
    while out.len() < end {
        let t = read_varint(&mut rest, "rle token")
            .map_err(|_| CodecError::corrupt(C, "rle token varint"))?;
        let room = (end - out.len()) as u64;
        if t & 1 == 0 {
            let n = (t >> 1) + 1;
            if n > room {
                return Err(CodecError::corrupt(
                    C,
                    "rle literal run longer than the announced length",
                ));
            }
            let n = n as usize;
            let Some((lit, tail)) = rest.split_at_checked(n) else {
                return Err(CodecError::corrupt(
                    C,
                    "rle literal run past the end of the payload",
                ));
            };
            out.extend_from_slice(lit);
            rest = tail;
        } else {
            let n = (t >> 1).saturating_add(MIN_RUN as u64);
            if n > room {
                return Err(CodecError::corrupt(
                    C,
                    "rle repeat longer than the announced length",
                ));
            }
            let Some((&b, tail)) = rest.split_first() else {
                return Err(CodecError::corrupt(C, "rle repeat byte missing"));
            };
            out.resize(out.len() + n as usize, b);
            rest = tail;
        }
    }
    if !rest.is_empty() {
        return Err(CodecError::corrupt(C, "rle bytes after the last token"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trip(input: &[u8]) -> Vec<u8> {
        let mut c = Vec::new();
        compress(input, &mut c);
        let mut d = Vec::new();
        decompress(&c, input.len(), &mut d).unwrap();
        assert_eq!(d, input);
        c
    }

    #[test]
    fn documented_tokens() {
        // Two literals, then a repeat of 5 (t = (5 - 3) * 2 + 1 = 5).
        assert_eq!(trip(&[1, 2, 7, 7, 7, 7, 7]), [2, 1, 2, 5, 7]);
        assert_eq!(trip(&[]), [] as [u8; 0]);
        assert_eq!(trip(&[4, 4]), [2, 4, 4]);
        assert_eq!(trip(&vec![0; 1 << 20]).len(), 4);
    }

    #[test]
    fn a_run_past_the_length_is_refused() {
        assert!(decompress(&[5, 7], 4, &mut Vec::new()).is_err());
        assert!(decompress(&[2, 1, 2, 0], 2, &mut Vec::new()).is_err());
    }
}
