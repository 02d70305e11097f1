//! Byte shuffle: the filter Blosc puts in front of a general compressor for typed arrays.
//!
//! An array of `n` elements of `s` bytes is transposed into `s` planes of `n` bytes:
//! first every element's byte 0, then every byte 1, and so on. In numeric arrays the
//! high bytes (exponents, the upper bytes of small integers) change slowly, so their
//! planes become long runs that LZ4 and zstd compress far better than the interleaved
//! original. A trailing partial element is left unshuffled at the end.
//!
//! It is a handful of lines, so it is written here rather than taken from a crate.

/// Appends `input` transposed by element size `size` to `out`.
pub(crate) fn shuffle(input: &[u8], size: usize, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + input.len(), 0);
    let dst = &mut out[start..];
    // Constant sizes let the compiler unroll the inner loop.
    match size {
        2 => shuffle_w::<2>(input, dst),
        4 => transpose4(input, dst, true),
        8 => transpose8(input, dst, true),
        _ => dst.copy_from_slice(input),
    }
}

fn shuffle_w<const S: usize>(input: &[u8], dst: &mut [u8]) {
    let n = input.len() / S;
    let (body, tail) = dst.split_at_mut(n * S);
    for (i, elem) in input.chunks_exact(S).enumerate() {
        for (j, &b) in elem.iter().enumerate() {
            body[j * n + i] = b;
        }
    }
    tail.copy_from_slice(&input[n * S..]);
}

/// Appends the inverse of [`shuffle`] of `input` to `out`.
pub(crate) fn unshuffle(input: &[u8], size: usize, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + input.len(), 0);
    let dst = &mut out[start..];
    match size {
        2 => unshuffle_w::<2>(input, dst),
        4 => transpose4(input, dst, false),
        8 => transpose8(input, dst, false),
        _ => dst.copy_from_slice(input),
    }
}

/// The 4-byte shuffle (`forward`) or its inverse, four elements at a time as a 4×4
/// byte transpose in registers: byte by byte, the compiler vectorises the 2-byte loop
/// but not this one, which then ran slower than LZ4 itself (docs/benchmarks.md).
fn transpose4(input: &[u8], dst: &mut [u8], forward: bool) {
    let n = input.len() / 4;
    let (body, tail) = dst.split_at_mut(n * 4);
    let word = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    // Byte `s / 8` of each of the four words, as one word.
    let column = |w: [u32; 4], s: u32| {
        ((w[0] >> s) & 0xff)
            | (((w[1] >> s) & 0xff) << 8)
            | (((w[2] >> s) & 0xff) << 16)
            | (((w[3] >> s) & 0xff) << 24)
    };
    let blocks = n / 4;
    for k in 0..blocks {
        if forward {
            let e = &input[16 * k..16 * k + 16];
            let w = [word(&e[0..]), word(&e[4..]), word(&e[8..]), word(&e[12..])];
            for j in 0..4 {
                body[j * n + 4 * k..j * n + 4 * k + 4]
                    .copy_from_slice(&column(w, 8 * j as u32).to_le_bytes());
            }
        } else {
            let w: [u32; 4] = std::array::from_fn(|j| word(&input[j * n + 4 * k..]));
            let e = &mut body[16 * k..16 * k + 16];
            for i in 0..4 {
                e[4 * i..4 * i + 4].copy_from_slice(&column(w, 8 * i as u32).to_le_bytes());
            }
        }
    }
    transpose_rest(input, body, tail, 4, 4 * blocks, forward);
}

/// The elements from `from` on (fewer than a block), byte by byte, and the partial
/// element at the end, for the transposes by blocks.
fn transpose_rest(
    input: &[u8],
    body: &mut [u8],
    tail: &mut [u8],
    size: usize,
    from: usize,
    forward: bool,
) {
    let n = body.len() / size;
    for i in from..n {
        for j in 0..size {
            if forward {
                body[j * n + i] = input[i * size + j];
            } else {
                body[i * size + j] = input[j * n + i];
            }
        }
    }
    tail.copy_from_slice(&input[n * size..]);
}

/// The 8-byte shuffle (`forward`) or its inverse, eight elements at a time as an 8×8
/// byte transpose of eight words: three rounds that swap the off-diagonal halves of
/// 4-, 2- and 1-byte blocks: the compiler vectorises neither loop element by element
/// (docs/benchmarks.md has both speeds).
fn transpose8(input: &[u8], dst: &mut [u8], forward: bool) {
    let n = input.len() / 8;
    let (body, tail) = dst.split_at_mut(n * 8);
    let word = |b: &[u8]| u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let blocks = n / 8;
    for k in 0..blocks {
        let mut r: [u64; 8] = if forward {
            std::array::from_fn(|i| word(&input[64 * k + 8 * i..]))
        } else {
            std::array::from_fn(|j| word(&input[j * n + 8 * k..]))
        };
        for i in 0..4 {
            let t = ((r[i] >> 32) ^ r[i + 4]) & 0x0000_0000_ffff_ffff;
            r[i] ^= t << 32;
            r[i + 4] ^= t;
        }
        for i in [0, 1, 4, 5] {
            let t = ((r[i] >> 16) ^ r[i + 2]) & 0x0000_ffff_0000_ffff;
            r[i] ^= t << 16;
            r[i + 2] ^= t;
        }
        for i in [0, 2, 4, 6] {
            let t = ((r[i] >> 8) ^ r[i + 1]) & 0x00ff_00ff_00ff_00ff;
            r[i] ^= t << 8;
            r[i + 1] ^= t;
        }
        for (c, w) in r.iter().enumerate() {
            let at = if forward {
                c * n + 8 * k
            } else {
                64 * k + 8 * c
            };
            body[at..at + 8].copy_from_slice(&w.to_le_bytes());
        }
    }
    transpose_rest(input, body, tail, 8, 8 * blocks, forward);
}

fn unshuffle_w<const S: usize>(input: &[u8], dst: &mut [u8]) {
    let n = input.len() / S;
    let (body, tail) = dst.split_at_mut(n * S);
    for (i, elem) in body.chunks_exact_mut(S).enumerate() {
        for (j, b) in elem.iter_mut().enumerate() {
            *b = input[j * n + i];
        }
    }
    tail.copy_from_slice(&input[n * S..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planes_are_in_byte_order() {
        let input = [1, 2, 3, 4, 5, 6, 7];
        let mut s = Vec::new();
        shuffle(&input, 2, &mut s);
        assert_eq!(s, [1, 3, 5, 2, 4, 6, 7]);
        let mut back = Vec::new();
        unshuffle(&s, 2, &mut back);
        assert_eq!(back, input);
    }

    #[test]
    fn every_size_and_tail_round_trips_against_the_plain_transpose() {
        for size in [2, 4, 8] {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 4099, 65_536] {
                let input: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
                let mut s = Vec::new();
                shuffle(&input, size, &mut s);
                let n = len / size;
                for (i, &b) in input[..n * size].iter().enumerate() {
                    assert_eq!(
                        s[(i % size) * n + i / size],
                        b,
                        "size {size} len {len} at {i}"
                    );
                }
                assert_eq!(s[n * size..], input[n * size..]);
                let mut back = Vec::new();
                unshuffle(&s, size, &mut back);
                assert_eq!(back, input, "size {size} len {len}");
            }
        }
    }

    #[test]
    fn shorter_than_one_element_is_untouched() {
        let mut s = Vec::new();
        shuffle(&[9, 8, 7], 8, &mut s);
        assert_eq!(s, [9, 8, 7]);
        let mut back = Vec::new();
        unshuffle(&s, 8, &mut back);
        assert_eq!(back, [9, 8, 7]);
    }
}
