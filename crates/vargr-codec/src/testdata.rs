//! Deterministic data that looks like what parallel programs send, for tests and for
//! `vargr bench codec`.
//!
//! Random bytes say nothing about a codec meant for simulation output, and real traces
//! are too big to ship, so these generators imitate the shapes that matter: smooth
//! floating-point fields (where FPC and shuffle shine), integer sequences with small
//! deltas (Rice), sparse matrices (RLE, the zero runs), text-like logs (Huffman) and
//! incompressible bytes (every codec must step aside). Every generator is a pure
//! function of its arguments: same seed, same bytes, on every machine.

use std::f64::consts::PI;

use crate::ElemKind;

/// A small, fast, seedable generator (SplitMix64): good enough for test data, and no
/// dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// A named data set: the bytes and the element kind to compress them as.
#[derive(Debug, Clone)]
pub struct DataSet {
    pub name: &'static str,
    pub elem: ElemKind,
    pub bytes: Vec<u8>,
}

/// Little-endian bytes of a slice of `f64`.
pub fn f64_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Little-endian bytes of a slice of `f32`.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Little-endian bytes of a slice of `i32`.
pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Little-endian bytes of a slice of `u64`.
pub fn u64_bytes(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A smooth 2-D field, row-major on a square-ish grid of `n` points: a few waves plus a
/// slow gradient, like a temperature or pressure field of a simulation step. `noise`
/// (0 for none, 1e-6 to 1e-3 realistic) adds relative measurement noise to the low bits.
pub fn smooth_field_f64(n: usize, noise: f64, seed: u64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    let cols = ((n as f64).sqrt().ceil() as usize).max(1);
    let (fx, fy) = (1.0 + rng.next_f64(), 1.0 + rng.next_f64());
    (0..n)
        .map(|i| {
            let x = (i % cols) as f64 / cols as f64;
            let y = (i / cols) as f64 / cols as f64;
            let v = 300.0
                + 20.0 * (2.0 * PI * fx * x).sin() * (2.0 * PI * fy * y).cos()
                + 5.0 * (6.0 * PI * (x + y)).sin()
                + 10.0 * x;
            v * (1.0 + noise * (rng.next_f64() - 0.5))
        })
        .collect()
}

/// [`smooth_field_f64`] in single precision.
pub fn smooth_field_f32(n: usize, noise: f64, seed: u64) -> Vec<f32> {
    smooth_field_f64(n, noise, seed)
        .into_iter()
        .map(|v| v as f32)
        .collect()
}

/// A random walk with steps in `-max_step..=max_step`: particle ids after a sort,
/// counters, mesh indices.
pub fn small_deltas_i32(n: usize, max_step: i32, seed: u64) -> Vec<i32> {
    let mut rng = Rng::new(seed);
    let span = 2 * max_step as u64 + 1;
    let mut x = rng.below(1 << 20) as i32;
    (0..n)
        .map(|_| {
            x = x.wrapping_add(rng.below(span) as i32 - max_step);
            x
        })
        .collect()
}

/// Nanosecond timestamps of events about `period` apart with jitter, like a trace.
pub fn timestamps_u64(n: usize, period: u64, seed: u64) -> Vec<u64> {
    let mut rng = Rng::new(seed);
    let mut t = 1_700_000_000_000_000_000u64;
    (0..n)
        .map(|_| {
            t += period / 2 + rng.below(period.max(1));
            t
        })
        .collect()
}

/// A sparse matrix in compressed-row form: `rows` rows of about `per_row` nonzeros each
/// out of `cols` columns, clustered near the diagonal as in a discretised PDE.
/// Returns (row offsets, column indices, values).
pub fn sparse_csr(
    rows: usize,
    cols: usize,
    per_row: usize,
    seed: u64,
) -> (Vec<i32>, Vec<i32>, Vec<f64>) {
    let mut rng = Rng::new(seed);
    let mut offsets = vec![0i32];
    let mut idx = Vec::new();
    let mut vals = Vec::new();
    let cols = cols.max(1);
    for r in 0..rows {
        let centre = r * cols / rows.max(1);
        let mut row: Vec<i32> = (0..per_row)
            .map(|_| {
                let off = rng.below(4 * per_row as u64 + 1) as i64 - 2 * per_row as i64;
                (centre as i64 + off).clamp(0, cols as i64 - 1) as i32
            })
            .collect();
        row.sort_unstable();
        row.dedup();
        for &c in &row {
            idx.push(c);
            vals.push(if c as usize == centre {
                4.0
            } else {
                -1.0 + 0.01 * rng.next_f64()
            });
        }
        offsets.push(idx.len() as i32);
    }
    (offsets, idx, vals)
}

/// A sparse matrix stored densely, row-major: mostly exact zeros.
pub fn sparse_dense_f64(rows: usize, cols: usize, per_row: usize, seed: u64) -> Vec<f64> {
    let (offsets, idx, vals) = sparse_csr(rows, cols, per_row, seed);
    let mut m = vec![0.0; rows * cols];
    for r in 0..rows {
        for k in offsets[r] as usize..offsets[r + 1] as usize {
            m[r * cols + idx[k] as usize] = vals[k];
        }
    }
    m
}

/// Log-like text: words from a small vocabulary, numbers and newlines.
pub fn text_like(n: usize, seed: u64) -> Vec<u8> {
    const WORDS: [&str; 24] = [
        "rank", "step", "send", "recv", "bytes", "time", "the", "of", "to", "node", "stream",
        "filter", "ok", "done", "wait", "barrier", "reduce", "sum", "max", "error", "retry",
        "link", "up", "down",
    ];
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(n + 16);
    while out.len() < n {
        match rng.below(10) {
            0 => out.extend_from_slice(format!("{}", rng.below(100_000)).as_bytes()),
            1 => out.push(b'\n'),
            _ => out.extend_from_slice(WORDS[rng.below(WORDS.len() as u64) as usize].as_bytes()),
        }
        out.push(b' ');
    }
    out.truncate(n);
    out
}

/// Uniformly random bytes: incompressible.
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(n);
    out
}

/// Screen-like bytes: rows of flat runs with occasional changes (RLE's home ground).
pub fn runs_u8(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let b = if rng.below(3) == 0 {
            rng.next_u64() as u8
        } else {
            0xff
        };
        let run = 1 + rng.below(64) as usize;
        out.extend(std::iter::repeat_n(b, run.min(n - out.len())));
    }
    out
}

/// The standard data sets of about `bytes` bytes each, used by `vargr bench codec`.
pub fn standard_sets(bytes: usize) -> Vec<DataSet> {
    let n8 = bytes / 8;
    let n4 = bytes / 4;
    let side = ((n8 as f64).sqrt() as usize).max(1);
    let (_, idx, _) = sparse_csr(n4 / 8, n4, 8, 7);
    vec![
        DataSet {
            name: "smooth-f64",
            elem: ElemKind::F64,
            bytes: f64_bytes(&smooth_field_f64(n8, 0.0, 1)),
        },
        DataSet {
            name: "noisy-f64",
            elem: ElemKind::F64,
            bytes: f64_bytes(&smooth_field_f64(n8, 1e-6, 2)),
        },
        DataSet {
            name: "smooth-f32",
            elem: ElemKind::F32,
            bytes: f32_bytes(&smooth_field_f32(n4, 0.0, 3)),
        },
        DataSet {
            name: "deltas-i32",
            elem: ElemKind::I32,
            bytes: i32_bytes(&small_deltas_i32(n4, 3, 4)),
        },
        DataSet {
            name: "timestamps-u64",
            elem: ElemKind::U64,
            bytes: u64_bytes(&timestamps_u64(n8, 1000, 5)),
        },
        DataSet {
            name: "sparse-dense-f64",
            elem: ElemKind::F64,
            bytes: f64_bytes(&sparse_dense_f64(side, side, 5, 6)),
        },
        DataSet {
            name: "csr-index-i32",
            elem: ElemKind::I32,
            bytes: i32_bytes(&idx),
        },
        DataSet {
            name: "text",
            elem: ElemKind::BYTES,
            bytes: text_like(bytes, 8),
        },
        DataSet {
            name: "runs-u8",
            elem: ElemKind::BYTES,
            bytes: runs_u8(bytes, 9),
        },
        DataSet {
            name: "random",
            elem: ElemKind::BYTES,
            bytes: random_bytes(bytes, 10),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators_are_deterministic_and_sized() {
        for (a, b) in standard_sets(4096).iter().zip(standard_sets(4096)) {
            assert_eq!(a.bytes, b.bytes, "{}", a.name);
            assert!(
                a.bytes.len() <= 4096 && a.bytes.len() >= 1024,
                "{} {}",
                a.name,
                a.bytes.len()
            );
        }
        let (off, idx, vals) = sparse_csr(10, 100, 3, 1);
        assert_eq!(off.len(), 11);
        assert_eq!(idx.len(), vals.len());
        assert!(idx.iter().all(|&c| (0..100).contains(&c)));
    }
}
