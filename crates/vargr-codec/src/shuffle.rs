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
        4 => shuffle_w::<4>(input, dst),
        8 => shuffle_w::<8>(input, dst),
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
        4 => unshuffle_w::<4>(input, dst),
        8 => unshuffle_w::<8>(input, dst),
        _ => dst.copy_from_slice(input),
    }
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
    fn shorter_than_one_element_is_untouched() {
        let mut s = Vec::new();
        shuffle(&[9, 8, 7], 8, &mut s);
        assert_eq!(s, [9, 8, 7]);
        let mut back = Vec::new();
        unshuffle(&s, 8, &mut back);
        assert_eq!(back, [9, 8, 7]);
    }
}
