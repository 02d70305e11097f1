//! Reproducible pseudo-random test data (xorshift64), shared by the unit tests.

/// `n` bytes from xorshift64 seeded with `seed` (forced odd, so never the zero state).
pub(crate) fn random(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
