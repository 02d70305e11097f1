//! Workloads of the seed's experiments (BIPS3D, STEM-II, IOR): each rank's view of one
//! shared file, for tests and `vargr bench io`.
//!
//! Why: two-phase I/O and its locality-aware variant only pay off, or fail to, on the
//! access patterns the seed measured: BIPS3D's irregular mesh partitioned by METIS (every
//! rank's elements scattered over the whole file), STEM-II's regular block distribution
//! (few long runs per rank) and IOR's segmented pattern (one block per rank per segment).
//! The generators here are pure and deterministic so a benchmark, a test and the MPI-IO
//! reference program (`bench/mpi/io_check.c`) see the same views. The same module holds
//! the two things that program shares with Rust: the runs file each rank reads its view
//! from, and the data pattern (a function of the file offset, so any writer produces the
//! same file).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::view::{Order, Run, View, ViewError};

/// Which of the seed's workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Bips3d,
    Stem2,
    Ior,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Bips3d, Kind::Stem2, Kind::Ior];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Bips3d => "bips3d",
            Kind::Stem2 => "stem2",
            Kind::Ior => "ior",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// The file sizes `vargr bench io` runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Size {
    /// About 1 MiB.
    Small,
    /// About 16 MiB.
    Medium,
    /// About 128 MiB.
    Large,
}

impl Size {
    pub const ALL: [Size; 3] = [Size::Small, Size::Medium, Size::Large];

    /// The target file size; generators round to their own grain.
    pub fn bytes(self) -> u64 {
        match self {
            Size::Small => 1 << 20,
            Size::Medium => 16 << 20,
            Size::Large => 128 << 20,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Size::Small => "small",
            Size::Medium => "medium",
            Size::Large => "large",
        }
    }

    pub fn parse(s: &str) -> Option<Size> {
        Size::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// One job's views of a shared file of `file_len` bytes: `views[r]` is rank r's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub kind: Kind,
    pub file_len: u64,
    pub views: Vec<View>,
}

impl Workload {
    pub fn ranks(&self) -> usize {
        self.views.len()
    }
}

/// Why a workload could not be made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WorkloadError {
    #[error("{workload}: {why}")]
    Params { workload: &'static str, why: String },
    #[error(transparent)]
    View(#[from] ViewError),
}

fn params(workload: &'static str, why: impl Into<String>) -> WorkloadError {
    WorkloadError::Params {
        workload,
        why: why.into(),
    }
}

fn need_ranks(workload: &'static str, ranks: usize) -> Result<(), WorkloadError> {
    if ranks == 0 {
        return Err(params(workload, "a job needs at least one rank"));
    }
    Ok(())
}

fn checked_product(workload: &'static str, xs: &[u64]) -> Result<u64, WorkloadError> {
    xs.iter().try_fold(1u64, |acc, &x| {
        acc.checked_mul(x)
            .ok_or_else(|| params(workload, format!("the file size {xs:?} overflows")))
    })
}

/// The workload `kind` for `ranks` ranks with a file of about `file_bytes` bytes.
///
/// BIPS3D stores 400-byte records per mesh node (the seed's load 100 of 4-byte values:
/// 1 MiB is 2621 nodes, 16 MiB ≈ mesh1, 128 MiB ≈ mesh4); STEM-II a grid twice as wide
/// as it is tall, 8 species of 8 bytes per cell; IOR 32 KiB blocks.
pub fn sized(kind: Kind, ranks: usize, file_bytes: u64) -> Result<Workload, WorkloadError> {
    match kind {
        Kind::Bips3d => bips3d(ranks, (file_bytes / 400).max(ranks as u64), 400, 2007),
        Kind::Stem2 => {
            const SPECIES: u64 = 8;
            let cells = (file_bytes / (8 * SPECIES)).max(1);
            let nz = ((cells as f64 / 4.0).cbrt().round() as u64).max(1);
            stem2(ranks, 2 * nz, 2 * nz, nz, SPECIES, 8)
        }
        Kind::Ior => {
            const BLOCK: u64 = 32 << 10;
            let segments = (file_bytes / (BLOCK * ranks.max(1) as u64)).max(1);
            ior(ranks, BLOCK, segments)
        }
    }
}

/// SplitMix64: a tiny, well-mixed deterministic generator for the mesh jitter.
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A value in [-0.4, 0.4) from `h`: under half a cell, so a grid line's nodes stay in
/// order along it while cuts across lines come out ragged.
fn jitter(h: u64) -> f64 {
    ((h >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 0.8
}

/// BIPS3D-like irregular distribution: about `elements_target` mesh nodes of
/// `elem_bytes` each, node i's record at `i * elem_bytes`, partitioned among `ranks` by
/// recursive coordinate bisection.
///
/// The mesh is an nx × ny × nz grid of nodes (a device twice as long in z), each moved by
/// a jitter drawn from `seed` so partition boundaries are ragged as on an unstructured
/// mesh. Nodes are numbered plane by plane (x fastest, z slowest), as a mesh generator
/// sweeping the device would. The partitioner cuts the longest side of each part's
/// bounding box at the weighted median (for any rank count, parts differ by at most a
/// node or so), so every rank owns a compact region of space whose records are scattered
/// through a stretch of the file (one run per grid line it crosses). Parts go to ranks in
/// a seeded random order, as a graph partitioner's part numbers bear no relation to the
/// file: so the ranks of one host hold stretches far apart in the file, which is what
/// LA-Two-Phase's locality-aware aggregators are for.
pub fn bips3d(
    ranks: usize,
    elements_target: u64,
    elem_bytes: u64,
    seed: u64,
) -> Result<Workload, WorkloadError> {
    const W: &str = "bips3d";
    need_ranks(W, ranks)?;
    if elem_bytes == 0 {
        return Err(params(W, "records of 0 bytes"));
    }
    if elements_target < ranks as u64 {
        return Err(params(
            W,
            format!("{elements_target} nodes cannot be shared by {ranks} ranks"),
        ));
    }
    // Cap the mesh so ids and coordinates stay small; 2^28 nodes is far past `Size::Large`.
    if elements_target > 1 << 28 {
        return Err(params(
            W,
            format!("{elements_target} nodes is more than this generator makes (2^28)"),
        ));
    }
    let side = ((elements_target as f64 / 2.0).cbrt().round() as u64).max(1);
    let (nx, ny) = (side, side);
    let nz = ((elements_target as f64 / (nx * ny) as f64).round() as u64).max(1);
    let n = (nx * ny * nz) as usize;
    if n < ranks {
        return Err(params(
            W,
            format!("the {nx}×{ny}×{nz} mesh has fewer nodes than {ranks} ranks"),
        ));
    }
    let file_len = checked_product(W, &[n as u64, elem_bytes])?;
    // Nodes are numbered plane by plane (x fastest, z slowest), as a mesh generator
    // sweeping the device writes them.
    let mut points = Vec::with_capacity(n);
    for k in 0..nz {
        for j in 0..ny {
            for i in 0..nx {
                let id = (k * ny + j) * nx + i;
                let h = splitmix64(seed ^ splitmix64(id));
                points.push([
                    i as f64 + jitter(h),
                    j as f64 + jitter(splitmix64(h)),
                    k as f64 + jitter(splitmix64(h ^ 0x5555)),
                ]);
            }
        }
    }
    let mut owner = vec![0u32; n];
    let mut ids: Vec<u32> = (0..n as u32).collect();
    bisect(&points, &mut ids, ranks, 0, &mut owner);
    // A graph partitioner numbers its parts in no relation to the file order (METIS's
    // part ids are arbitrary): part p goes to rank rank_of[p], a seeded shuffle.
    let mut rank_of: Vec<u32> = (0..ranks as u32).collect();
    for i in (1..ranks).rev() {
        let j = (splitmix64(seed ^ 0xb1b5 ^ i as u64) % (i as u64 + 1)) as usize;
        rank_of.swap(i, j);
    }
    for o in owner.iter_mut() {
        *o = rank_of[*o as usize];
    }
    // Walk the file in order, extending each rank's last run when its next node follows.
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); ranks];
    for (i, &r) in owner.iter().enumerate() {
        let off = i as u64 * elem_bytes;
        let mine = &mut runs[r as usize];
        match mine.last_mut() {
            Some(last) if last.end() == off => last.len += elem_bytes,
            _ => mine.push(Run::new(off, elem_bytes)),
        }
    }
    let views = runs
        .into_iter()
        .map(View::from_runs)
        .collect::<Result<_, _>>()?;
    Ok(Workload {
        kind: Kind::Bips3d,
        file_len,
        views,
    })
}

/// Recursive coordinate bisection of `ids` into `parts` parts numbered from `first`.
fn bisect(points: &[[f64; 3]], ids: &mut [u32], parts: usize, first: usize, owner: &mut [u32]) {
    if parts == 1 {
        for &id in ids.iter() {
            owner[id as usize] = first as u32;
        }
        return;
    }
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for &id in ids.iter() {
        for d in 0..3 {
            lo[d] = lo[d].min(points[id as usize][d]);
            hi[d] = hi[d].max(points[id as usize][d]);
        }
    }
    let mut axis = 0;
    for d in 1..3 {
        if hi[d] - lo[d] > hi[axis] - lo[axis] {
            axis = d;
        }
    }
    let left_parts = parts / 2;
    // Nodes in proportion to parts, so odd rank counts stay balanced; at least one each.
    let left = ids.len() * left_parts / parts;
    // Ties on the coordinate broken by id: the split depends on nothing but the mesh.
    ids.select_nth_unstable_by(left, |&a, &b| {
        points[a as usize][axis]
            .total_cmp(&points[b as usize][axis])
            .then(a.cmp(&b))
    });
    let (l, r) = ids.split_at_mut(left);
    bisect(points, l, left_parts, first, owner);
    bisect(points, r, parts - left_parts, first + left_parts, owner);
}

/// A balanced factorisation of `ranks` into two, larger first, as
/// `MPI_Dims_create(ranks, 2)` makes: the factors closest to each other.
pub fn dims_create(ranks: usize) -> [usize; 2] {
    let ranks = ranks.max(1);
    let b = (1..=ranks)
        .take_while(|b| b * b <= ranks)
        .filter(|b| ranks % b == 0)
        .last()
        .unwrap_or(1);
    [ranks / b, b]
}

/// Where block `r` of `n` elements split in `p` nearly equal blocks starts, and its size
/// (the first `n % p` blocks one longer).
fn block(n: u64, p: u64, r: u64) -> (u64, u64) {
    let (q, extra) = (n / p, n % p);
    (r * q + r.min(extra), q + u64::from(r < extra))
}

/// STEM-II-like regular block distribution: an nx × ny × nz grid with `species` values
/// of `elem_bytes` per cell, stored in C order (species fastest), split in blocks of
/// whole columns over a 2-D process grid from [`dims_create`], the larger factor along
/// the longer of x and y, as the parallel STEM-II shares the horizontal domain. Rank r's
/// block is at process coordinates r in C order, as `MPI_Cart_create` numbers them. Each
/// rank's view has one run per x plane of its block. An axis shorter than its process
/// count leaves some ranks without data.
pub fn stem2(
    ranks: usize,
    nx: u64,
    ny: u64,
    nz: u64,
    species: u64,
    elem_bytes: u64,
) -> Result<Workload, WorkloadError> {
    const W: &str = "stem2";
    need_ranks(W, ranks)?;
    let sizes = [nx, ny, nz, species];
    let file_len = checked_product(W, &[nx, ny, nz, species, elem_bytes])?;
    if file_len == 0 {
        return Err(params(
            W,
            format!("an empty grid {sizes:?} of {elem_bytes}-byte values"),
        ));
    }
    let [big, small] = dims_create(ranks).map(|f| f as u64);
    let (px, py) = if ny > nx { (small, big) } else { (big, small) };
    let mut views = Vec::with_capacity(ranks);
    for r in 0..ranks as u64 {
        let (x0, xs) = block(nx, px, r / py);
        let (y0, ys) = block(ny, py, r % py);
        views.push(View::subarray(
            0,
            &sizes,
            &[xs, ys, nz, species],
            &[x0, y0, 0, 0],
            Order::C,
            elem_bytes,
        )?);
    }
    Ok(Workload {
        kind: Kind::Stem2,
        file_len,
        views,
    })
}

/// IOR-like segmented pattern: `segments` segments, each one block of `block_bytes` per
/// rank in rank order; rank r's blocks are at `(s * ranks + r) * block_bytes`.
pub fn ior(ranks: usize, block_bytes: u64, segments: u64) -> Result<Workload, WorkloadError> {
    const W: &str = "ior";
    need_ranks(W, ranks)?;
    let file_len = checked_product(W, &[segments, ranks as u64, block_bytes])?;
    if file_len == 0 {
        return Err(params(
            W,
            format!("{segments} segments of {block_bytes}-byte blocks is an empty file"),
        ));
    }
    let stride = ranks as u64 * block_bytes;
    let views = (0..ranks as u64)
        .map(|r| View::vector(r * block_bytes, segments, block_bytes, stride))
        .collect::<Result<_, _>>()?;
    Ok(Workload {
        kind: Kind::Ior,
        file_len,
        views,
    })
}

/// The host of each rank when `ranks` ranks fill `hosts` hosts in consecutive blocks, as
/// a hostfile with equal slots per host is filled (block sizes differ by at most one,
/// the larger first).
pub fn host_layout(ranks: usize, hosts: usize) -> Result<Vec<usize>, WorkloadError> {
    if hosts == 0 || hosts > ranks {
        return Err(params(
            "host layout",
            format!("{ranks} ranks cannot fill {hosts} hosts"),
        ));
    }
    let mut out = Vec::with_capacity(ranks);
    for h in 0..hosts {
        let (_, n) = block(ranks as u64, hosts as u64, h as u64);
        out.extend(std::iter::repeat_n(h, n as usize));
    }
    Ok(out)
}

/// The shape of a workload on a host layout.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub file_len: u64,
    pub runs_per_rank: Vec<usize>,
    pub bytes_per_rank: Vec<u64>,
    pub bytes_per_host: Vec<u64>,
    /// Places where the file passes from one host's data to another's: what an aggregator
    /// owning a contiguous file domain has to gather across hosts.
    pub host_changes: usize,
}

impl Stats {
    pub fn mean_runs(&self) -> f64 {
        self.runs_per_rank.iter().sum::<usize>() as f64 / self.runs_per_rank.len().max(1) as f64
    }

    pub fn max_runs(&self) -> usize {
        self.runs_per_rank.iter().copied().max().unwrap_or(0)
    }

    pub fn min_runs(&self) -> usize {
        self.runs_per_rank.iter().copied().min().unwrap_or(0)
    }
}

/// Runs and bytes per rank and host of `w` with ranks on hosts as `layout` says.
pub fn stats(w: &Workload, layout: &[usize]) -> Result<Stats, WorkloadError> {
    if layout.len() != w.ranks() {
        return Err(params(
            "stats",
            format!("a layout of {} ranks for {} ranks", layout.len(), w.ranks()),
        ));
    }
    let hosts = layout.iter().max().map_or(0, |h| h + 1);
    let mut bytes_per_host = vec![0u64; hosts];
    let mut all: Vec<(u64, usize)> = Vec::new();
    for (v, &h) in w.views.iter().zip(layout) {
        bytes_per_host[h] += v.bytes();
        all.extend(v.runs().iter().map(|r| (r.offset, h)));
    }
    all.sort_unstable();
    let host_changes = all.windows(2).filter(|p| p[0].1 != p[1].1).count();
    Ok(Stats {
        file_len: w.file_len,
        runs_per_rank: w.views.iter().map(|v| v.runs().len()).collect(),
        bytes_per_rank: w.views.iter().map(View::bytes).collect(),
        bytes_per_host,
        host_changes,
    })
}

/// The data pattern's byte at file offset `o`: any writer of any view writes the same
/// file. With `elem_bytes == 8` it is byte `o % 8` of the little-endian f64 `v(o / 8)`,
/// `v(i) = (((7 i) mod 1000) · 4096 + (splitmix64(i) >> 52)) / 512`: a sawtooth field
/// with 12 bits of noise, exact in binary (so C and Rust agree bit for bit) and, like
/// measured data, only partly compressible (a periodic field would flatter compression);
/// for any other `elem_bytes` it is the low byte of `(131 o) >> 3`. Products wrap at 2^64
/// in both languages.
pub fn pattern_byte(offset: u64, elem_bytes: u64) -> u8 {
    if elem_bytes == 8 {
        let i = offset / 8;
        let v = ((i.wrapping_mul(7) % 1000) * 4096 + (splitmix64(i) >> 52)) as f64 / 512.0;
        v.to_le_bytes()[(offset % 8) as usize]
    } else {
        (offset.wrapping_mul(131) >> 3) as u8
    }
}

/// The file every rank's pattern data makes together: the pattern at every offset some
/// view covers, zeros elsewhere (what MPI-IO and vargr-io must both write).
pub fn expected_file(w: &Workload, elem_bytes: u64) -> Vec<u8> {
    let mut file = vec![0u8; w.file_len as usize];
    for r in w.views.iter().flat_map(|v| v.runs()) {
        for o in r.offset..r.end() {
            file[o as usize] = pattern_byte(o, elem_bytes);
        }
    }
    file
}

/// A rank's data for `runs`: the pattern bytes of each run, runs concatenated in order.
pub fn fill_pattern(runs: &[Run], elem_bytes: u64) -> Vec<u8> {
    let total: u64 = runs.iter().map(|r| r.len).sum();
    let mut out = Vec::with_capacity(total as usize);
    for r in runs {
        out.extend((r.offset..r.end()).map(|o| pattern_byte(o, elem_bytes)));
    }
    out
}

/// The runs file's first 8 bytes; then a u64 LE count and count (offset, length) pairs
/// of u64 LE.
pub const RUNS_MAGIC: &[u8; 8] = b"VRGRUNS1";

/// What is wrong with a runs file.
#[derive(Debug, Error)]
pub enum RunsFileError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: does not start with VRGRUNS1", path.display())]
    Magic { path: PathBuf },
    #[error("{}: {len} bytes cannot hold the header and {count} runs", path.display())]
    Count { path: PathBuf, count: u64, len: u64 },
    #[error("{}: {source}", path.display())]
    Runs { path: PathBuf, source: ViewError },
}

/// Runs in file order, not overlapping (touching is fine), none past 2^64.
fn check_runs(runs: &[Run]) -> Result<(), ViewError> {
    let mut previous_end = 0;
    for (index, r) in runs.iter().enumerate() {
        let Some(end) = r.offset.checked_add(r.len) else {
            return Err(ViewError::Overflow {
                index,
                offset: r.offset,
                len: r.len,
            });
        };
        if index > 0 && r.offset < previous_end {
            return Err(ViewError::Order {
                index,
                offset: r.offset,
                previous_end,
            });
        }
        previous_end = end;
    }
    Ok(())
}

/// Writes `runs` to `path` in the format `bench/mpi/io_check.c` reads.
pub fn write_runs_file(path: &Path, runs: &[Run]) -> Result<(), RunsFileError> {
    check_runs(runs).map_err(|source| RunsFileError::Runs {
        path: path.into(),
        source,
    })?;
    let mut buf = Vec::with_capacity(16 + 16 * runs.len());
    buf.extend_from_slice(RUNS_MAGIC);
    buf.extend_from_slice(&(runs.len() as u64).to_le_bytes());
    for r in runs {
        buf.extend_from_slice(&r.offset.to_le_bytes());
        buf.extend_from_slice(&r.len.to_le_bytes());
    }
    let io = |source| RunsFileError::Io {
        path: path.into(),
        source,
    };
    let mut f = std::fs::File::create(path).map_err(io)?;
    f.write_all(&buf).map_err(io)
}

/// Reads a runs file, refusing one whose count does not match its size or whose runs
/// are out of order or overlap.
pub fn read_runs_file(path: &Path) -> Result<Vec<Run>, RunsFileError> {
    let io = |source| RunsFileError::Io {
        path: path.into(),
        source,
    };
    // The count is checked against the file's size before the runs are read, so a
    // corrupt count cannot make us allocate, nor a wrong path read a huge file.
    let mut f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let mut header = [0u8; 16];
    let got = read_up_to(&mut f, &mut header).map_err(io)?;
    if got < 8 || &header[..8] != RUNS_MAGIC {
        return Err(RunsFileError::Magic { path: path.into() });
    }
    if got < 16 {
        return Err(RunsFileError::Count {
            path: path.into(),
            count: 0,
            len,
        });
    }
    let count = u64::from_le_bytes(header[8..].try_into().unwrap());
    if count.checked_mul(16).and_then(|b| b.checked_add(16)) != Some(len) {
        return Err(RunsFileError::Count {
            path: path.into(),
            count,
            len,
        });
    }
    let mut bytes = vec![0u8; (len - 16) as usize];
    f.read_exact(&mut bytes).map_err(io)?;
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let runs: Vec<Run> = (0..count as usize)
        .map(|i| Run::new(u64_at(16 * i), u64_at(16 * i + 8)))
        .collect();
    check_runs(&runs).map_err(|source| RunsFileError::Runs {
        path: path.into(),
        source,
    })?;
    Ok(runs)
}

/// Reads into `buf` until it is full or the file ends; how many bytes were read.
fn read_up_to(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Writes `dir/rank-<r>.runs` for every rank of `w`.
pub fn write_runs_dir(dir: &Path, w: &Workload) -> Result<(), RunsFileError> {
    for (r, v) in w.views.iter().enumerate() {
        write_runs_file(&dir.join(format!("rank-{r}.runs")), v.runs())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte of [0, file_len) in exactly one rank's view, each view sorted.
    fn assert_covers(w: &Workload) {
        let mut all: Vec<Run> = Vec::new();
        for v in &w.views {
            for p in v.runs().windows(2) {
                assert!(
                    p[0].end() < p[1].offset,
                    "{:?}: unsorted or unmerged",
                    w.kind
                );
            }
            all.extend_from_slice(v.runs());
        }
        all.sort();
        let mut at = 0;
        for r in &all {
            assert_eq!(
                r.offset,
                at,
                "{:?} {} ranks: gap or overlap",
                w.kind,
                w.ranks()
            );
            at = r.end();
        }
        assert_eq!(at, w.file_len, "{:?} {} ranks", w.kind, w.ranks());
        let total: u64 = w.views.iter().map(View::bytes).sum();
        assert_eq!(total, w.file_len);
    }

    #[test]
    fn every_workload_covers_its_file_once() {
        for ranks in [1, 2, 3, 4, 6, 8, 12, 16] {
            for kind in Kind::ALL {
                let w = sized(kind, ranks, Size::Small.bytes()).unwrap();
                assert_eq!(w.ranks(), ranks);
                assert_covers(&w);
            }
            assert_covers(&bips3d(ranks, 1000, 24, 1).unwrap());
            assert_covers(&stem2(ranks, 7, 5, 3, 2, 8).unwrap());
            assert_covers(&ior(ranks, 100, 3).unwrap());
        }
    }

    #[test]
    fn sizes_are_near_their_targets() {
        for size in Size::ALL {
            for kind in Kind::ALL {
                let w = sized(kind, 6, size.bytes()).unwrap();
                let ratio = w.file_len as f64 / size.bytes() as f64;
                assert!(
                    (0.85..1.15).contains(&ratio),
                    "{kind:?} {size:?}: {}",
                    w.file_len
                );
            }
        }
    }

    #[test]
    fn bips3d_scatters_ranks_and_stays_balanced() {
        for ranks in [3, 4, 6, 12, 16] {
            let w = sized(Kind::Bips3d, ranks, Size::Small.bytes()).unwrap();
            let s = stats(&w, &host_layout(ranks, 1).unwrap()).unwrap();
            // Each rank's region crosses many grid lines, so its records are scattered.
            assert!(s.min_runs() >= 10, "{ranks}: {:?}", s.runs_per_rank);
            let (lo, hi) = (
                *s.bytes_per_rank.iter().min().unwrap(),
                *s.bytes_per_rank.iter().max().unwrap(),
            );
            assert!(hi - lo <= 400, "{ranks}: {:?}", s.bytes_per_rank);
            let stem = stats(
                &sized(Kind::Stem2, ranks, Size::Small.bytes()).unwrap(),
                &host_layout(ranks, 1).unwrap(),
            )
            .unwrap();
            assert!(s.mean_runs() > stem.mean_runs(), "{ranks}");
        }
        // Jitter makes the partition irregular: the seed changes which nodes go where.
        let a = bips3d(6, 5000, 8, 1).unwrap();
        let b = bips3d(6, 5000, 8, 2).unwrap();
        assert_eq!(a.file_len, b.file_len);
        assert_ne!(a.views, b.views);
    }

    #[test]
    fn stem2_blocks_are_subarrays_of_the_process_grid() {
        assert_eq!(dims_create(1), [1, 1]);
        assert_eq!(dims_create(3), [3, 1]);
        assert_eq!(dims_create(4), [2, 2]);
        assert_eq!(dims_create(6), [3, 2]);
        assert_eq!(dims_create(8), [4, 2]);
        assert_eq!(dims_create(12), [4, 3]);
        assert_eq!(dims_create(16), [4, 4]);
        // 4 ranks on a 2×2 grid over x and y: one run per x plane of the block.
        let w = stem2(4, 8, 8, 4, 2, 8).unwrap();
        for v in &w.views {
            assert_eq!(v.runs().len(), 4);
            assert_eq!(v.bytes(), 4 * 4 * 4 * 2 * 8);
        }
        // Rank 1 is at (0, 1): y from 4, the first x plane's run at 4 rows of 4×2×8 bytes.
        assert_eq!(w.views[1].runs()[0], Run::new(4 * 4 * 2 * 8, 4 * 4 * 2 * 8));
        // y is the longer axis here, so it takes the larger factor; z is never split.
        let w = stem2(3, 2, 9, 2, 1, 1).unwrap();
        assert_eq!(w.views[1].runs(), [Run::new(6, 6), Run::new(24, 6)]);
        // Fewer x planes than processes along x: some ranks get nothing, coverage holds.
        let w = stem2(12, 2, 1, 1, 1, 8).unwrap();
        assert_covers(&w);
        assert!(w.views.iter().any(|v| v.bytes() == 0));
        assert!(stem2(4, 0, 8, 8, 1, 8).is_err());
        assert!(stem2(4, u64::MAX, 8, 8, 1, 8).is_err());
    }

    #[test]
    fn ior_is_one_block_per_rank_per_segment() {
        let w = ior(3, 10, 4).unwrap();
        assert_eq!(w.file_len, 120);
        let r1: Vec<_> = w.views[1]
            .runs()
            .iter()
            .map(|r| (r.offset, r.len))
            .collect();
        assert_eq!(r1, [(10, 10), (40, 10), (70, 10), (100, 10)]);
        // One rank: the segments touch and merge.
        assert_eq!(ior(1, 10, 4).unwrap().views[0].runs(), [Run::new(0, 40)]);
        assert!(ior(0, 10, 4).is_err());
        assert!(ior(2, 0, 4).is_err());
    }

    #[test]
    fn hosts_are_filled_in_blocks_and_stats_count_them() {
        assert_eq!(host_layout(6, 2).unwrap(), [0, 0, 0, 1, 1, 1]);
        assert_eq!(host_layout(5, 3).unwrap(), [0, 0, 1, 1, 2]);
        assert!(host_layout(2, 3).is_err());
        assert!(host_layout(2, 0).is_err());
        let w = ior(4, 10, 3).unwrap();
        let s = stats(&w, &host_layout(4, 2).unwrap()).unwrap();
        assert_eq!(s.runs_per_rank, [3, 3, 3, 3]);
        assert_eq!(s.bytes_per_rank, [30; 4]);
        assert_eq!(s.bytes_per_host, [60, 60]);
        // Host 0, host 1, host 0, ... : a change at each of the 6 - 1 segment halves.
        assert_eq!(s.host_changes, 5);
        assert!(stats(&w, &[0, 0]).is_err());
    }

    #[test]
    fn generators_are_deterministic() {
        for kind in Kind::ALL {
            assert_eq!(
                sized(kind, 6, 1 << 18).unwrap(),
                sized(kind, 6, 1 << 18).unwrap()
            );
        }
        assert!(bips3d(8, 4, 8, 1).is_err());
        assert!(bips3d(0, 40, 8, 1).is_err());
    }

    #[test]
    fn pattern_matches_the_f64_formula() {
        // Element 3: (21 · 4096 + (splitmix64(3) >> 52 = 464)) / 512 = 168.90625 (the
        // constants computed independently, in Python).
        let bytes: Vec<u8> = (24..32).map(|o| pattern_byte(o, 8)).collect();
        assert_eq!(bytes, 168.90625f64.to_le_bytes());
        // Element 200: (400 · 4096 + 1009) / 512.
        assert_eq!(
            pattern_byte(1600 + 7, 8),
            3201.970703125f64.to_le_bytes()[7]
        );
        assert_eq!(pattern_byte(10, 4), ((10u64 * 131) >> 3) as u8);
        let data = fill_pattern(&[Run::new(24, 8), Run::new(1600, 8)], 8);
        assert_eq!(&data[..8], &168.90625f64.to_le_bytes());
        assert_eq!(&data[8..], &3201.970703125f64.to_le_bytes());
    }

    #[test]
    fn runs_files_round_trip_and_refuse_damage() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rank-0.runs");
        let runs = [
            Run::new(0, 8),
            Run::new(8, 4),
            Run::new(100, 0),
            Run::new(200, 1),
        ];
        write_runs_file(&p, &runs).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 16 + 16 * 4);
        assert_eq!(read_runs_file(&p).unwrap(), runs);
        write_runs_file(&p, &[]).unwrap();
        assert_eq!(read_runs_file(&p).unwrap(), []);

        let w = sized(Kind::Bips3d, 3, 1 << 16).unwrap();
        write_runs_dir(dir.path(), &w).unwrap();
        for (r, v) in w.views.iter().enumerate() {
            let got = read_runs_file(&dir.path().join(format!("rank-{r}.runs"))).unwrap();
            assert_eq!(got, v.runs());
        }

        let bad = |bytes: &[u8]| {
            std::fs::write(&p, bytes).unwrap();
            let e = read_runs_file(&p).unwrap_err();
            assert!(e.to_string().contains("rank-0.runs"), "{e}");
            e
        };
        let mut good = RUNS_MAGIC.to_vec();
        good.extend_from_slice(&1u64.to_le_bytes());
        good.extend_from_slice(&[0; 16]);
        assert!(matches!(bad(b"VRGRUNS2"), RunsFileError::Magic { .. }));
        assert!(matches!(bad(&good[..8]), RunsFileError::Count { .. }));
        assert!(matches!(bad(&good[..20]), RunsFileError::Count { .. }));
        let mut huge = good.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            bad(&huge),
            RunsFileError::Count {
                count: u64::MAX,
                ..
            }
        ));
        let mut overlap = RUNS_MAGIC.to_vec();
        for x in [2u64, 0, 10, 5, 1] {
            overlap.extend_from_slice(&x.to_le_bytes());
        }
        let e = bad(&overlap);
        assert!(matches!(e, RunsFileError::Runs { .. }), "{e}");
        assert!(e.to_string().contains("run 1 at offset 5"), "{e}");
        let mut past = RUNS_MAGIC.to_vec();
        for x in [1u64, u64::MAX, 2] {
            past.extend_from_slice(&x.to_le_bytes());
        }
        assert!(matches!(bad(&past), RunsFileError::Runs { .. }));
        assert!(write_runs_file(&p, &[Run::new(10, 5), Run::new(0, 1)]).is_err());
        assert!(matches!(
            read_runs_file(&dir.path().join("missing")),
            Err(RunsFileError::Io { .. })
        ));
    }

    proptest::proptest! {
        /// Coverage holds for any rank count and size knob.
        #[test]
        fn coverage_for_any_ranks_and_size(
            ranks in 1usize..20,
            nodes in 20u64..3000,
            grid in (1u64..9, 1u64..9, 1u64..9, 1u64..4),
            segments in 1u64..6,
            seed: u64,
        ) {
            proptest::prop_assume!(nodes >= ranks as u64);
            assert_covers(&bips3d(ranks, nodes, 8, seed).unwrap());
            assert_covers(&stem2(ranks, grid.0, grid.1, grid.2, grid.3, 4).unwrap());
            assert_covers(&ior(ranks, 16, segments).unwrap());
        }
    }
}
