//! A rank's view of a file: the file byte ranges its data occupies, in data order.
//!
//! Why: MPI describes a rank's part of a file with a displacement and a filetype (a
//! vector, a subarray, indexed blocks); two-phase I/O only ever needs the resulting list
//! of file runs. A [`View`] is that list, checked once when it is made: runs in file
//! order, none overlapping, none past the end of a 64-bit file, adjacent runs merged. The
//! constructors build the common MPI shapes; anything else can be given as runs.
//!
//! The rank's data is the concatenation of its runs: data byte `d` goes to the file byte
//! found by walking the runs (see [`View::map`]).

use std::ops::Range;

use thiserror::Error;

/// A contiguous range of file bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Run {
    pub offset: u64,
    pub len: u64,
}

impl Run {
    pub fn new(offset: u64, len: u64) -> Run {
        Run { offset, len }
    }

    /// One past the last byte (a view never holds a run whose end overflows).
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// Why a view could not be made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ViewError {
    #[error("run {index} (offset {offset}, {len} bytes) ends past the largest file offset")]
    Overflow { index: usize, offset: u64, len: u64 },
    #[error("run {index} at offset {offset} starts before the end of the run before it ({previous_end}): runs must be in file order and must not overlap")]
    Order {
        index: usize,
        offset: u64,
        previous_end: u64,
    },
    #[error("{what}: {why}")]
    Shape { what: &'static str, why: String },
    #[error("data bytes {at}..{end} are past the view's {bytes} bytes")]
    PastEnd { at: u64, end: u64, bytes: u64 },
}

/// Array order for [`View::subarray`], as MPI's `MPI_ORDER_C` and `MPI_ORDER_FORTRAN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The last dimension varies fastest.
    C,
    /// The first dimension varies fastest.
    Fortran,
}

/// The file runs a rank's data occupies, in file order, not overlapping, merged.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct View {
    runs: Vec<Run>,
    /// Data bytes before each run (so mapping a data offset is a binary search).
    starts: Vec<u64>,
    bytes: u64,
}

fn shape(what: &'static str, why: impl Into<String>) -> ViewError {
    ViewError::Shape {
        what,
        why: why.into(),
    }
}

fn mul(what: &'static str, a: u64, b: u64) -> Result<u64, ViewError> {
    a.checked_mul(b)
        .ok_or_else(|| shape(what, format!("{a} × {b} overflows")))
}

fn add(what: &'static str, a: u64, b: u64) -> Result<u64, ViewError> {
    a.checked_add(b)
        .ok_or_else(|| shape(what, format!("{a} + {b} overflows")))
}

impl View {
    /// A view of `runs` as given: in file order and not overlapping (touching runs are
    /// merged, empty ones dropped).
    pub fn from_runs(runs: impl IntoIterator<Item = Run>) -> Result<View, ViewError> {
        let mut v = View::default();
        for (index, r) in runs.into_iter().enumerate() {
            if r.offset.checked_add(r.len).is_none() {
                return Err(ViewError::Overflow {
                    index,
                    offset: r.offset,
                    len: r.len,
                });
            }
            if r.len == 0 {
                continue;
            }
            if let Some(last) = v.runs.last_mut() {
                if r.offset < last.end() {
                    return Err(ViewError::Order {
                        index,
                        offset: r.offset,
                        previous_end: last.end(),
                    });
                }
                if r.offset == last.end() {
                    last.len += r.len;
                    v.bytes += r.len;
                    continue;
                }
            }
            v.starts.push(v.bytes);
            v.runs.push(r);
            v.bytes = v
                .bytes
                .checked_add(r.len)
                .ok_or_else(|| shape("view", "more than 2^64 bytes of data"))?;
        }
        Ok(v)
    }

    /// `len` bytes from `offset`.
    pub fn contiguous(offset: u64, len: u64) -> Result<View, ViewError> {
        View::from_runs([Run::new(offset, len)])
    }

    /// `count` blocks of `block` bytes, `stride` bytes apart, from `disp` (MPI's
    /// `MPI_Type_vector` in bytes).
    pub fn vector(disp: u64, count: u64, block: u64, stride: u64) -> Result<View, ViewError> {
        const W: &str = "vector";
        if count > 1 && stride < block {
            return Err(shape(
                W,
                format!("a stride of {stride} bytes is shorter than the block of {block}: blocks would overlap"),
            ));
        }
        let mut runs = Vec::with_capacity(count.min(1 << 20) as usize);
        for i in 0..count {
            runs.push(Run::new(add(W, disp, mul(W, i, stride)?)?, block));
        }
        View::from_runs(runs)
    }

    /// The block `starts .. starts + subsizes` of an array of `sizes` elements of
    /// `elem_bytes` each stored at `disp` in `order` (MPI's `MPI_Type_create_subarray`).
    pub fn subarray(
        disp: u64,
        sizes: &[u64],
        subsizes: &[u64],
        starts: &[u64],
        order: Order,
        elem_bytes: u64,
    ) -> Result<View, ViewError> {
        const W: &str = "subarray";
        let n = sizes.len();
        if n == 0 || subsizes.len() != n || starts.len() != n {
            return Err(shape(
                W,
                format!(
                    "{} sizes, {} subsizes and {} starts: give one of each per dimension",
                    sizes.len(),
                    subsizes.len(),
                    starts.len()
                ),
            ));
        }
        for d in 0..n {
            if add(W, starts[d], subsizes[d])? > sizes[d] {
                return Err(shape(
                    W,
                    format!(
                        "dimension {d}: elements {}..{} of {}",
                        starts[d],
                        starts[d] + subsizes[d],
                        sizes[d]
                    ),
                ));
            }
        }
        // Dimensions from slowest to fastest varying.
        let dims: Vec<usize> = match order {
            Order::C => (0..n).collect(),
            Order::Fortran => (0..n).rev().collect(),
        };
        let mut stride = vec![0u64; n];
        let mut s = elem_bytes;
        for &d in dims.iter().rev() {
            stride[d] = s;
            s = mul(W, s, sizes[d])?;
        }
        if subsizes.contains(&0) {
            return Ok(View::default());
        }
        let fastest = dims[n - 1];
        let row = mul(W, subsizes[fastest], elem_bytes)?;
        // Walk every row of the block (all dimensions but the fastest) in file order.
        let outer: Vec<usize> = dims[..n - 1].to_vec();
        let mut index = vec![0u64; outer.len()];
        let mut runs = Vec::new();
        loop {
            let mut off = disp;
            for d in 0..n {
                let i = match outer.iter().position(|&o| o == d) {
                    Some(k) => starts[d] + index[k],
                    None => starts[d],
                };
                off = add(W, off, mul(W, i, stride[d])?)?;
            }
            runs.push(Run::new(off, row));
            // Odometer over the outer dimensions, fastest of them last.
            let mut k = outer.len();
            loop {
                if k == 0 {
                    return View::from_runs(runs);
                }
                k -= 1;
                index[k] += 1;
                if index[k] < subsizes[outer[k]] {
                    break;
                }
                index[k] = 0;
            }
        }
    }

    /// Blocks given as (displacement, length) in elements of `elem_bytes`, from `disp`
    /// (MPI's `MPI_Type_indexed`); displacements must grow.
    pub fn indexed(disp: u64, blocks: &[(u64, u64)], elem_bytes: u64) -> Result<View, ViewError> {
        const W: &str = "indexed";
        let mut runs = Vec::with_capacity(blocks.len());
        for &(d, len) in blocks {
            runs.push(Run::new(
                add(W, disp, mul(W, d, elem_bytes)?)?,
                mul(W, len, elem_bytes)?,
            ));
        }
        View::from_runs(runs)
    }

    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// Bytes of data the view holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The file range from the first byte of the view to the end of its last, if any.
    pub fn extent(&self) -> Option<Range<u64>> {
        Some(self.runs.first()?.offset..self.runs.last()?.end())
    }

    /// The pieces of the view inside file range `lo..hi`: each a file run and where its
    /// bytes start in the rank's data.
    pub fn clip(&self, lo: u64, hi: u64) -> impl Iterator<Item = (Run, u64)> + '_ {
        let first = self.runs.partition_point(|r| r.end() <= lo);
        self.runs[first..]
            .iter()
            .zip(&self.starts[first..])
            .take_while(move |(r, _)| r.offset < hi)
            .map(move |(r, &start)| {
                let a = r.offset.max(lo);
                let b = r.end().min(hi);
                (Run::new(a, b - a), start + (a - r.offset))
            })
    }

    /// The file runs that data bytes `at .. at + len` of the view go to, each with the
    /// data offset it starts at.
    pub fn map(&self, at: u64, len: u64) -> Result<Vec<(Run, u64)>, ViewError> {
        let end = at.checked_add(len).filter(|&e| e <= self.bytes);
        let Some(end) = end else {
            return Err(ViewError::PastEnd {
                at,
                end: at.saturating_add(len),
                bytes: self.bytes,
            });
        };
        let mut out = Vec::new();
        if len == 0 {
            return Ok(out);
        }
        let mut i = self.starts.partition_point(|&s| s <= at) - 1;
        let mut d = at;
        while d < end {
            let (r, s) = (self.runs[i], self.starts[i]);
            let skip = d - s;
            let take = (r.len - skip).min(end - d);
            out.push((Run::new(r.offset + skip, take), d));
            d += take;
            i += 1;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(v: &View) -> Vec<(u64, u64)> {
        v.runs().iter().map(|r| (r.offset, r.len)).collect()
    }

    #[test]
    fn runs_are_merged_checked_and_mapped() {
        let v = View::from_runs([
            Run::new(0, 4),
            Run::new(4, 4),
            Run::new(10, 0),
            Run::new(16, 8),
        ])
        .unwrap();
        assert_eq!(runs(&v), [(0, 8), (16, 8)]);
        assert_eq!(v.bytes(), 16);
        assert_eq!(v.extent(), Some(0..24));
        assert_eq!(
            v.map(6, 4).unwrap(),
            [(Run::new(6, 2), 6), (Run::new(16, 2), 8)]
        );
        assert!(matches!(v.map(10, 7), Err(ViewError::PastEnd { .. })));
        assert!(matches!(v.map(u64::MAX, 2), Err(ViewError::PastEnd { .. })));
        let clipped: Vec<_> = v.clip(5, 18).collect();
        assert_eq!(clipped, [(Run::new(5, 3), 5), (Run::new(16, 2), 8)]);
        assert_eq!(v.clip(8, 16).count(), 0);
        let err = View::from_runs([Run::new(8, 4), Run::new(10, 4)]).unwrap_err();
        assert!(err.to_string().contains("run 1 at offset 10"), "{err}");
        assert!(matches!(
            View::from_runs([Run::new(u64::MAX - 1, 4)]),
            Err(ViewError::Overflow { index: 0, .. })
        ));
    }

    #[test]
    fn vector_and_indexed_match_mpi() {
        let v = View::vector(8, 3, 4, 10).unwrap();
        assert_eq!(runs(&v), [(8, 4), (18, 4), (28, 4)]);
        assert!(View::vector(0, 2, 8, 4).is_err());
        // A stride equal to the block is contiguous.
        assert_eq!(runs(&View::vector(0, 4, 8, 8).unwrap()), [(0, 32)]);
        let v = View::indexed(100, &[(0, 2), (5, 1)], 8).unwrap();
        assert_eq!(runs(&v), [(100, 16), (140, 8)]);
        assert!(View::indexed(0, &[(5, 1), (0, 2)], 8).is_err());
        assert!(View::indexed(0, &[(u64::MAX / 4, 1)], 8).is_err());
    }

    #[test]
    fn subarrays_in_both_orders() {
        // A 4×6 array of 8-byte elements; rows 1..3, columns 2..5.
        let c = View::subarray(0, &[4, 6], &[2, 3], &[1, 2], Order::C, 8).unwrap();
        assert_eq!(runs(&c), [(64, 24), (112, 24)]);
        // The same in Fortran order: dimension 0 varies fastest (column-major).
        let f = View::subarray(0, &[4, 6], &[2, 3], &[1, 2], Order::Fortran, 8).unwrap();
        assert_eq!(runs(&f), [(72, 16), (104, 16), (136, 16)]);
        // 3-D, whole rows merge into one run.
        let whole = View::subarray(16, &[2, 3, 4], &[2, 3, 4], &[0, 0, 0], Order::C, 1).unwrap();
        assert_eq!(runs(&whole), [(16, 24)]);
        assert!(View::subarray(0, &[4], &[3], &[2], Order::C, 8).is_err());
        assert!(View::subarray(0, &[4, 4], &[1], &[0], Order::C, 8).is_err());
        assert_eq!(
            View::subarray(0, &[4, 4], &[0, 2], &[0, 0], Order::C, 8)
                .unwrap()
                .bytes(),
            0
        );
    }

    proptest::proptest! {
        /// Mapping data bytes through the view agrees with walking it byte by byte.
        #[test]
        fn map_agrees_with_a_walk(
            gaps in proptest::collection::vec((0u64..20, 1u64..20), 0..12),
            at in 0u64..200,
            len in 0u64..200,
        ) {
            let mut off = 0;
            let mut rs = Vec::new();
            for (gap, l) in gaps {
                off += gap;
                rs.push(Run::new(off, l));
                off += l;
            }
            let v = View::from_runs(rs).unwrap();
            let walk: Vec<u64> = v.runs().iter().flat_map(|r| r.offset..r.end()).collect();
            proptest::prop_assert_eq!(walk.len() as u64, v.bytes());
            match v.map(at, len) {
                Ok(pieces) => {
                    let got: Vec<u64> = pieces.iter().flat_map(|(r, _)| r.offset..r.end()).collect();
                    proptest::prop_assert_eq!(&got[..], &walk[at as usize..(at + len) as usize]);
                    for (r, d) in pieces {
                        proptest::prop_assert_eq!(walk[d as usize], r.offset);
                    }
                }
                Err(_) => proptest::prop_assert!(at + len > v.bytes()),
            }
        }
    }
}
