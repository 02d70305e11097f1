//! A compact, seeded mutator for the stable runner.
//!
//! Without coverage feedback the runner cannot learn which inputs are interesting, so
//! it leans on what finds bugs in decoders blindly: lengths and counts replaced by
//! boundary integers, truncations (every "cut short" path), bit flips in checked
//! fields, and splices of two valid inputs (a header of one, a body of another).
//! Everything follows from one 64-bit seed, so `--seed S --runs N` replays a run.

/// SplitMix64: tiny, fast, and good enough to pick mutations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

/// Values at the edges of what length, count and index fields hold.
const INTERESTING: [u64; 16] = [
    0,
    1,
    2,
    7,
    8,
    16,
    0x7f,
    0x80,
    0xff,
    0x100,
    0x7fff,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0xffff_ffff,
    u64::MAX,
];

/// Applies one to four mutations to `data`, drawing splice material from `pool`; the
/// result is at most `max_len` bytes.
pub fn mutate(data: &mut Vec<u8>, pool: &[Vec<u8>], rng: &mut Rng, max_len: usize) {
    for _ in 0..1 + rng.below(4) {
        mutate_once(data, pool, rng);
    }
    data.truncate(max_len);
}

fn mutate_once(data: &mut Vec<u8>, pool: &[Vec<u8>], rng: &mut Rng) {
    let len = data.len();
    match rng.below(11) {
        // Flip one bit.
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        // Replace a byte.
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = rng.next_u64() as u8;
        }
        // Nudge a byte up or down a little (counts off by one).
        2 if len > 0 => {
            let i = rng.below(len);
            let d = 1 + rng.below(4) as u8;
            data[i] = if rng.chance(2) {
                data[i].wrapping_add(d)
            } else {
                data[i].wrapping_sub(d)
            };
        }
        // Insert random bytes.
        3 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            data.splice(at..at, bytes);
        }
        // Delete a range.
        4 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(16));
            data.drain(at..at + n);
        }
        // Duplicate a range (repeated records, repeated frames).
        5 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(64));
            let copy = data[at..at + n].to_vec();
            let to = rng.below(len + 1);
            data.splice(to..to, copy);
        }
        // Overwrite with a boundary integer, 1, 2, 4 or 8 bytes, either byte order.
        6 if len > 0 => {
            let v = INTERESTING[rng.below(INTERESTING.len())];
            let width = [1, 2, 4, 8][rng.below(4)].min(len);
            let bytes = if rng.chance(2) {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            };
            let src = if rng.chance(2) {
                &bytes[..width]
            } else {
                &bytes[8 - width..]
            };
            let at = rng.below(len - width + 1);
            data[at..at + width].copy_from_slice(src);
        }
        // Truncate.
        7 if len > 0 => data.truncate(rng.below(len)),
        // Splice: the front of this input, the back of another.
        8 if !pool.is_empty() => {
            let other = &pool[rng.below(pool.len())];
            let at = rng.below(len + 1);
            let from = rng.below(other.len() + 1);
            data.truncate(at);
            data.extend_from_slice(&other[from..]);
        }
        // Append another input whole (two messages in one stream).
        9 if !pool.is_empty() => {
            let other = &pool[rng.below(pool.len())];
            data.extend_from_slice(other);
        }
        // Copy a range over another place of the input.
        10 if len > 1 => {
            let from = rng.below(len);
            let to = rng.below(len);
            let n = 1 + rng.below((len - from).min(len - to).min(32));
            data.copy_within(from..from + n, to);
        }
        // The pick was not possible for this input (empty, no pool): grow it instead.
        _ => data.push(rng.next_u64() as u8),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_inputs_and_inputs_change() {
        let pool = vec![b"hello world".to_vec(), vec![0; 40]];
        let run = |seed| {
            let mut rng = Rng::new(seed);
            (0..200)
                .map(|i| {
                    let mut d = pool[i % 2].clone();
                    mutate(&mut d, &pool, &mut rng, 100);
                    d
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
        assert!(run(5).iter().all(|d| d.len() <= 100));
        assert!(run(5).iter().filter(|d| !pool.contains(d)).count() > 150);
    }
}
