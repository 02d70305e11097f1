//! `vargr-bench coll-check`: every collective on fixed inputs, printed so that the output can be
//! compared line for line with `bench/mpi/coll_check.c` run under Open MPI (the same
//! inputs, the same line format; floats printed as their bit patterns, so "equal" means
//! bitwise equal). Each rank also runs every algorithm of allreduce, bcast, reduce and
//! allgather and fails if any disagrees with the default choice.

use std::fmt::Write as _;

use anyhow::{ensure, Context, Result};
use vargr_coll::{Across, Algorithm, CollKind, Comm, Elem, Op};

const N: usize = 5;

fn in_i32(r: usize, i: usize) -> i32 {
    ((r * 7 + i * 3) % 11) as i32 - 5
}
fn pr_i32(r: usize, i: usize) -> i32 {
    match (r + i) % 15 {
        0 | 3 | 6 | 9 | 12 => 2,
        5 | 10 => -1,
        _ => 1,
    }
}
fn bits_i32(r: usize, i: usize) -> i32 {
    ((r as u32 + 1)
        .wrapping_mul(i as u32 + 3)
        .wrapping_mul(2_654_435_761)) as i32
}
fn bool_i32(r: usize, i: usize) -> i32 {
    i32::from((r * i + r) & 3 != 0)
}
fn in_f64(r: usize, i: usize) -> f64 {
    ((r * 5 + i * 2) % 9) as f64 * 0.25 - 1.0
}
fn pr_f64(r: usize, i: usize) -> f64 {
    [1.0, 2.0, 0.5, -1.0, 1.0, 1.0][(r + 2 * i) % 6]
}
fn in_u8(r: usize, i: usize) -> u8 {
    (r * 37 + i * 11) as u8
}
fn in_u64(r: usize, i: usize) -> u64 {
    r as u64 * 1_000_000_007 + i as u64
}
fn in_f32(r: usize, i: usize) -> f32 {
    ((r * 3 + i) % 7) as f32 * 0.5
}

/// How values print: integers in decimal, floats as hex bit patterns.
trait Show {
    fn show(&self) -> String;
}
macro_rules! show_int {
    ($($t:ty),*) => {$(impl Show for $t { fn show(&self) -> String { self.to_string() } })*};
}
show_int!(i32, i64, u8, u64);
impl Show for f64 {
    fn show(&self) -> String {
        format!("{:016x}", self.to_bits())
    }
}
impl Show for f32 {
    fn show(&self) -> String {
        format!("{:08x}", self.to_bits())
    }
}

fn line<T: Show>(out: &mut String, r: usize, name: &str, v: &[T]) {
    let vals: Vec<String> = v.iter().map(Show::show).collect();
    let _ = writeln!(out, "{r} {name}: {}", vals.join(" "));
}

fn allreduce_line<T: Elem + Show>(
    c: &Comm,
    out: &mut String,
    name: &str,
    op: &Op,
    f: impl Fn(usize, usize) -> T,
) -> Result<()> {
    let r = c.rank();
    let mut v: Vec<T> = (0..N).map(|i| f(r, i)).collect();
    c.allreduce(&mut v, op)?;
    line(out, r, name, &v);
    Ok(())
}

/// Packed layout with one element of gap after each block: (counts, displs, total).
fn gapped(counts: &[usize]) -> (Vec<usize>, usize) {
    let mut d = Vec::with_capacity(counts.len());
    let mut at = 0;
    for c in counts {
        d.push(at);
        at += c + 1;
    }
    (d, at)
}

fn packed(counts: &[usize]) -> (Vec<usize>, usize) {
    let mut d = Vec::with_capacity(counts.len());
    let mut at = 0;
    for c in counts {
        d.push(at);
        at += c;
    }
    (d, at)
}

/// The checks of one rank; returns its output lines.
fn check(c: &Comm) -> Result<String> {
    let (r, p) = (c.rank(), c.size());
    let mut out = String::new();
    let o = &mut out;
    allreduce_line(c, o, "allreduce sum i32", &Op::Sum, in_i32)?;
    allreduce_line(c, o, "allreduce min i32", &Op::Min, in_i32)?;
    allreduce_line(c, o, "allreduce max i32", &Op::Max, in_i32)?;
    allreduce_line(c, o, "allreduce prod i32", &Op::Prod, pr_i32)?;
    allreduce_line(c, o, "allreduce band i32", &Op::Band, bits_i32)?;
    allreduce_line(c, o, "allreduce bor i32", &Op::Bor, bits_i32)?;
    allreduce_line(c, o, "allreduce land i32", &Op::Land, bool_i32)?;
    allreduce_line(c, o, "allreduce lor i32", &Op::Lor, bool_i32)?;
    allreduce_line(c, o, "allreduce sum f64", &Op::Sum, in_f64)?;
    allreduce_line(c, o, "allreduce prod f64", &Op::Prod, pr_f64)?;
    allreduce_line(c, o, "allreduce min f64", &Op::Min, in_f64)?;
    allreduce_line(c, o, "allreduce max f64", &Op::Max, in_f64)?;
    allreduce_line(c, o, "allreduce sum u8", &Op::Sum, in_u8)?;
    allreduce_line(c, o, "allreduce sum u64", &Op::Sum, in_u64)?;
    allreduce_line(c, o, "allreduce max f32", &Op::Max, in_f32)?;

    let send: Vec<i32> = (0..N).map(|i| in_i32(r, i)).collect();
    let mut recv = vec![0i32; N];
    c.reduce(&send, &mut recv, &Op::Sum, p - 1)?;
    if r == p - 1 {
        line(o, r, "reduce sum i32", &recv);
    }

    let root = 1 % p;
    let mut b: Vec<i64> = (0..N)
        .map(|i| if r == root { (r * 100 + i) as i64 } else { 0 })
        .collect();
    c.bcast(&mut b, root)?;
    line(o, r, "bcast i64", &b);

    let send: Vec<i32> = (0..2).map(|i| (r * 10 + i) as i32).collect();
    let mut all = vec![-1i32; 2 * p];
    c.gather(&send, &mut all, 0)?;
    if r == 0 {
        line(o, r, "gather i32", &all);
    }

    let src: Vec<i32> = (0..2 * p).map(|j| (j * 3 + 1) as i32).collect();
    let mut mine = vec![0i32; 2];
    c.scatter(if r == p - 1 { &src } else { &[] }, &mut mine, p - 1)?;
    line(o, r, "scatter i32", &mine);

    let send = [r as i32, (r * r) as i32];
    let mut all = vec![0i32; 2 * p];
    c.allgather(&send, &mut all)?;
    line(o, r, "allgather i32", &all);

    let send: Vec<i32> = (0..p).map(|j| (r * 100 + j) as i32).collect();
    let mut recv = vec![0i32; p];
    c.alltoall(&send, &mut recv)?;
    line(o, r, "alltoall i32", &recv);

    let counts: Vec<usize> = (0..p).map(|j| j % 3 + 1).collect();
    let (gd, gtotal) = gapped(&counts);
    let send: Vec<i32> = (0..counts[r]).map(|k| (r * 10 + k) as i32).collect();
    let mut recv = vec![-1i32; gtotal];
    c.gatherv(&send, &mut recv, &counts, &gd, 0)?;
    if r == 0 {
        line(o, r, "gatherv i32", &recv);
    }
    let (pd, ptotal) = packed(&counts);
    let src: Vec<i32> = (0..ptotal).map(|j| (j * 2) as i32).collect();
    let mut mine = vec![0i32; counts[r]];
    c.scatterv(if r == 0 { &src } else { &[] }, &counts, &pd, &mut mine, 0)?;
    line(o, r, "scatterv i32", &mine);
    let mut recv = vec![-1i32; gtotal];
    c.allgatherv(&send, &mut recv, &counts, &gd)?;
    line(o, r, "allgatherv i32", &recv);

    let scounts: Vec<usize> = (0..p).map(|j| (r + j) % 3).collect();
    let (sd, stotal) = packed(&scounts);
    let send: Vec<i32> = (0..p)
        .flat_map(|j| (0..scounts[j]).map(move |k| (r * 1000 + j * 10 + k) as i32))
        .collect();
    debug_assert_eq!(send.len(), stotal);
    let rcounts: Vec<usize> = (0..p).map(|j| (j + r) % 3).collect();
    let (rd, rtotal) = packed(&rcounts);
    let mut recv = vec![-1i32; rtotal];
    c.alltoallv(&send, &scounts, &sd, &mut recv, &rcounts, &rd)?;
    line(o, r, "alltoallv i32", &recv);

    c.barrier()?;

    let sub = c
        .split(Some((r % 2) as u32), -(r as i32))?
        .context("a rank with a color got no communicator")?;
    let mut s = [r as i64];
    sub.allreduce(&mut s, &Op::Sum)?;
    line(o, r, "split", &[sub.rank() as i64, sub.size() as i64, s[0]]);

    c.send((r + 1) % p, 5, &[(r * 3 + 1) as i32, (r * 3 + 2) as i32])?;
    let mut got = [0i32; 2];
    c.recv((r + p - 1) % p, 5, &mut got)?;
    line(o, r, "ring i32", &got);

    every_algorithm_agrees(c)?;
    Ok(out)
}

/// Integer results must not depend on the algorithm; run each one on the same call.
fn every_algorithm_agrees(c: &Comm) -> Result<()> {
    let (r, p) = (c.rank(), c.size());
    let count = 37;
    let input: Vec<i64> = (0..count).map(|i| (r * 31 + i * 7) as i64 - 50).collect();
    let mut want = input.clone();
    c.allreduce(&mut want, &Op::Sum)?;
    let mut algs = vec![
        Algorithm::RecursiveDoubling,
        Algorithm::Ring,
        Algorithm::Rabenseifner,
        Algorithm::ReduceBcast,
        Algorithm::Hierarchical(Across::Tree),
        Algorithm::Hierarchical(Across::Magpie),
    ];
    if c.algorithm_for(CollKind::Allreduce, 8) == Algorithm::Shm
        || c.algorithm_for(CollKind::Barrier, 0) == Algorithm::Shm
    {
        algs.push(Algorithm::Shm);
    }
    for &a in &algs {
        let mut v = input.clone();
        c.allreduce_with(&mut v, &Op::Sum, Some(a))?;
        ensure!(
            v == want,
            "rank {r}: allreduce with {a} differs from the default"
        );
    }
    for a in [
        Algorithm::Flat,
        Algorithm::Binomial,
        Algorithm::Kary(3),
        Algorithm::Rabenseifner,
    ] {
        let mut v = vec![0i64; count];
        c.reduce_with(&input, &mut v, &Op::Sum, p / 2, Some(a))?;
        ensure!(r != p / 2 || v == want, "rank {r}: reduce with {a} differs");
    }
    for a in [
        Algorithm::Flat,
        Algorithm::Binomial,
        Algorithm::Kary(3),
        Algorithm::ScatterAllgather,
    ] {
        let mut v = if r == p - 1 {
            input.clone()
        } else {
            vec![0; count]
        };
        c.bcast_with(&mut v, p - 1, Some(a))?;
        let mut root_input = vec![0i64; count];
        for (i, x) in root_input.iter_mut().enumerate() {
            *x = ((p - 1) * 31 + i * 7) as i64 - 50;
        }
        ensure!(v == root_input, "rank {r}: bcast with {a} differs");
    }
    if algs.contains(&Algorithm::Shm) {
        large_buffers_agree(c)?;
    }
    let mut want = vec![0i64; count * p];
    c.allgather(&input, &mut want)?;
    for a in [
        Algorithm::Ring,
        Algorithm::RecursiveDoubling,
        Algorithm::Bruck,
    ] {
        let mut v = vec![0i64; count * p];
        c.allgather_with(&input, &mut v, Some(a))?;
        ensure!(v == want, "rank {r}: allgather with {a} differs");
    }
    Ok(())
}

/// Large buffers take the shared-memory path that splits the combining among the ranks,
/// a slot's worth at a time: one longer than a slot with a tail of a few lines, summed
/// and composed by a non-commutative operator (which must keep rank order).
fn large_buffers_agree(c: &Comm) -> Result<()> {
    let (r, p) = (c.rank(), c.size());
    let count = (1 << 20) / 8 + 37;
    let input: Vec<i64> = (0..count)
        .map(|i| ((r * 131 + i * 7) % 1001) as i64 - 500)
        .collect();
    let mut want = input.clone();
    c.allreduce_with(&mut want, &Op::Sum, Some(Algorithm::Ring))?;
    let mut v = input.clone();
    c.allreduce_with(&mut v, &Op::Sum, Some(Algorithm::Shm))?;
    ensure!(
        v == want,
        "rank {r}: large allreduce with shm differs from the ring"
    );

    // Affine maps x -> a*x + b as (a, b) pairs; composing them does not commute.
    let compose = Op::user_noncommutative("affine", |inout, input| {
        let left: &[u64] = bytemuck::cast_slice(input);
        let right: &mut [u64] = bytemuck::cast_slice_mut(inout);
        for (f, g) in left.chunks_exact(2).zip(right.chunks_exact_mut(2)) {
            // g after f: a_g*(a_f*x + b_f) + b_g
            let (a, b) = (
                g[0].wrapping_mul(f[0]),
                g[0].wrapping_mul(f[1]).wrapping_add(g[1]),
            );
            g.copy_from_slice(&[a, b]);
        }
    });
    let map = |rank: usize, i: usize| [(rank * 3 + i % 5 + 1) as u64, (rank + i) as u64];
    let pairs = (96 << 10) / 16 + 3;
    let mut v: Vec<u64> = (0..pairs).flat_map(|i| map(r, i)).collect();
    c.allreduce_with(&mut v, &compose, Some(Algorithm::Shm))?;
    for (i, got) in v.chunks_exact(2).enumerate() {
        let mut acc = map(0, i);
        for q in 1..p {
            let g = map(q, i);
            acc = [
                g[0].wrapping_mul(acc[0]),
                g[0].wrapping_mul(acc[1]).wrapping_add(g[1]),
            ];
        }
        ensure!(
            got == acc,
            "rank {r}: composed map {i} is {got:?}, expected {acc:?}"
        );
    }

    // Lengths that differ, among large buffers and across the split threshold: every
    // rank gets an error (none waits for ever), and the next call works.
    for small in [8200, 100] {
        let mut z = vec![1i64; if r == 0 { small } else { 8192 }];
        let got = c.allreduce_with(&mut z, &Op::Sum, Some(Algorithm::Shm));
        ensure!(
            matches!(got, Err(vargr_coll::CollError::UserOp { .. })),
            "rank {r}: allreduce of {} elements against 8192: {got:?}",
            z.len()
        );
    }
    let mut v = input.clone();
    c.allreduce_with(&mut v, &Op::Sum, Some(Algorithm::Shm))?;
    ensure!(
        v == want,
        "rank {r}: large allreduce after a failed one differs"
    );
    Ok(())
}

pub fn run() -> Result<()> {
    let job = vargr_config::join_job()?;
    let outs = job.run(|c| {
        check(&c).map_err(|e| vargr_coll::CollError::Job {
            reason: format!("{e:#}"),
        })
    })?;
    for o in outs {
        print!("{o}");
    }
    job.finish();
    Ok(())
}

/// `vargr-bench sor-check`: red-black SOR with a plain and with a conditional allreduce; each
/// rank prints `rank R ok ITERATIONS LOCAL` when both runs agree on the iteration count
/// and the answer, and fails otherwise.
pub fn sor_check(side: usize, epsilon: f64) -> Result<()> {
    use crate::sor::{sor, ConvergenceTest, SorConfig};
    let job = vargr_config::join_job()?;
    let cfg = SorConfig {
        side,
        epsilon,
        ..SorConfig::default()
    };
    let outs = job.run(|c| {
        let plain = sor(&c, &cfg, ConvergenceTest::Allreduce)?;
        let cond = sor(&c, &cfg, ConvergenceTest::Conditional)?;
        if plain.iterations != cond.iterations || plain.checksum != cond.checksum {
            return Err(vargr_coll::CollError::Job {
                reason: format!(
                    "rank {}: plain allreduce took {} iterations (checksum {:x}), conditional {} ({:x})",
                    c.rank(),
                    plain.iterations,
                    plain.checksum,
                    cond.iterations,
                    cond.checksum
                ),
            });
        }
        Ok(format!(
            "rank {} ok {} {}",
            c.rank(),
            cond.iterations,
            cond.decided_locally
        ))
    })?;
    for o in outs {
        println!("{o}");
    }
    job.finish();
    Ok(())
}

/// `vargr-bench slow-rank`: allreduce loops in which one rank sleeps before every call (tests
/// and demonstrations of the load-balance monitor).
pub fn slow_rank(slow: usize, iters: u32, sleep_us: u64) -> Result<()> {
    let job = vargr_config::join_job()?;
    job.run(|c| {
        for i in 0..iters {
            if c.rank() == slow {
                std::thread::sleep(std::time::Duration::from_micros(sleep_us));
            }
            let mut x = [f64::from(i)];
            c.allreduce(&mut x, &Op::Sum)?;
        }
        Ok(())
    })?;
    job.finish();
    Ok(())
}

/// `vargr-bench codec-check`: large, compressible collectives whose exact results every rank
/// checks, so that links that compress (between sites) are shown to change nothing.
/// Prints one line per rank with a checksum of what it received.
pub fn codec_check(elements: usize, rounds: usize) -> Result<()> {
    let job = vargr_config::join_job()?;
    let lines = job.run(|c| {
        let (r, p) = (c.rank(), c.size());
        // A piecewise-constant field (runs that LZ4 sees, predictable doubles for FPC).
        let field = |k: usize| (k / 64) as f64 * 0.5;
        let mut bcast_ok = true;
        let mut b = Vec::new();
        for _ in 0..rounds.max(1) {
            b = if r == 0 {
                (0..elements).map(field).collect()
            } else {
                vec![0.0; elements]
            };
            c.bcast(&mut b, 0)?;
            bcast_ok &= b.iter().enumerate().all(|(k, &v)| v == field(k));
        }
        // Exact in f64: small integers and halves.
        let mut s: Vec<f64> = (0..elements).map(|k| field(k) + r as f64).collect();
        c.allreduce(&mut s, &Op::Sum)?;
        let rank_sum = (p * (p - 1) / 2) as f64;
        let sum_ok = s
            .iter()
            .enumerate()
            .all(|(k, &v)| v == field(k) * p as f64 + rank_sum);
        let checksum: f64 = s.iter().sum::<f64>() + b.iter().sum::<f64>();
        Ok(format!(
            "rank {r}: bcast {} allreduce {} checksum {checksum}",
            if bcast_ok { "ok" } else { "WRONG" },
            if sum_ok { "ok" } else { "WRONG" }
        ))
    })?;
    job.finish();
    for l in &lines {
        println!("{l}");
    }
    if lines.iter().any(|l| l.contains("WRONG")) {
        anyhow::bail!("a collective over compressing links gave a wrong result");
    }
    Ok(())
}
