//! Shared helpers for the collective tests: deterministic inputs every rank can compute
//! for every other rank, sequential reference reductions, and a thread-per-rank runner.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use vargr_coll::{Comm, Fabric, Hierarchy, Op, WaitPolicy, World};

pub const SIZES: [usize; 7] = [1, 2, 3, 5, 8, 13, 16];

/// Runs `f` on `p` threads, one world communicator each, and propagates any panic.
/// Receives time out after 30 s so a broken schedule fails instead of hanging.
pub fn run_ranks(p: usize, hierarchy: Option<Hierarchy>, f: impl Fn(Comm) + Send + Sync + 'static) {
    let fabric = Fabric::with_policy(
        p,
        WaitPolicy {
            spins: 0,
            yields: 64,
            timeout: Some(Duration::from_secs(30)),
        },
    );
    let f = Arc::new(f);
    let handles: Vec<_> = fabric
        .endpoints()
        .into_iter()
        .map(|ep| {
            let f = f.clone();
            let h = hierarchy.clone();
            std::thread::spawn(move || {
                let mut w = World::new(Arc::new(ep));
                if let Some(h) = h {
                    w = w.with_hierarchy(h);
                }
                f(w.comm().unwrap())
            })
        })
        .collect();
    let mut failed = None;
    for (r, h) in handles.into_iter().enumerate() {
        if let Err(e) = h.join() {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed.get_or_insert(format!("rank {r} of {p}: {msg}"));
        }
    }
    if let Some(m) = failed {
        panic!("{m}");
    }
}

pub fn mix(mut x: u64) -> u64 {
    // splitmix64
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Test element: conversions and a sequential reference for each built-in operator.
pub trait TE: vargr_coll::Elem + PartialEq + std::fmt::Debug {
    /// A value small enough that sums and products of 16 of them are exact in floats.
    fn gen(seed: u64) -> Self;
    fn reference(op: &Op, a: Self, b: Self) -> Self;
}

macro_rules! te_int {
    ($($t:ty),*) => {$(
        impl TE for $t {
            fn gen(seed: u64) -> Self {
                let v = mix(seed);
                // Mostly small values (so prod is interesting), sometimes anything.
                if v % 4 == 0 { v as $t } else { ((v >> 8) % 7) as $t }
            }
            fn reference(op: &Op, a: Self, b: Self) -> Self {
                match op {
                    Op::Sum => a.wrapping_add(b),
                    Op::Prod => a.wrapping_mul(b),
                    Op::Min => a.min(b),
                    Op::Max => a.max(b),
                    Op::Land => (a != 0 && b != 0) as $t,
                    Op::Lor => (a != 0 || b != 0) as $t,
                    Op::Band => a & b,
                    Op::Bor => a | b,
                    Op::User(_) => unreachable!(),
                }
            }
        }
    )*};
}
te_int!(i8, u8, i16, u16, i32, u32, i64, u64);

macro_rules! te_float {
    ($($t:ty),*) => {$(
        impl TE for $t {
            fn gen(seed: u64) -> Self {
                ((mix(seed) % 7) as i64 - 3) as $t
            }
            fn reference(op: &Op, a: Self, b: Self) -> Self {
                match op {
                    Op::Sum => a + b,
                    Op::Prod => a * b,
                    Op::Min => a.min(b),
                    Op::Max => a.max(b),
                    _ => unreachable!(),
                }
            }
        }
    )*};
}
te_float!(f32, f64);

/// Input of rank `r` for case `case`.
pub fn input<T: TE>(case: u64, r: usize, n: usize) -> Vec<T> {
    (0..n)
        .map(|i| T::gen(case.wrapping_mul(1_000_003) ^ ((r as u64) << 40) ^ i as u64))
        .collect()
}

type MemoKey = (u64, usize, usize, &'static str, String);

/// [`reference_uncached`], computed once per process and shared by all rank threads
/// (debug builds spend most test time here otherwise).
pub fn reference<T: TE>(op: &Op, case: u64, p: usize, n: usize) -> Vec<T> {
    static MEMO: OnceLock<Mutex<HashMap<MemoKey, Vec<u8>>>> = OnceLock::new();
    let key = (case, p, n, T::KIND.name(), op.name().to_string());
    let memo = MEMO.get_or_init(Default::default);
    if let Some(v) = memo.lock().unwrap().get(&key) {
        let mut out = vec![T::zeroed(); n];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(v);
        return out;
    }
    let v = reference_uncached::<T>(op, case, p, n);
    memo.lock()
        .unwrap()
        .insert(key, bytemuck::cast_slice(&v).to_vec());
    v
}

/// Left-to-right reduction over ranks `0..p`.
pub fn reference_uncached<T: TE>(op: &Op, case: u64, p: usize, n: usize) -> Vec<T> {
    let mut acc = input::<T>(case, 0, n);
    for r in 1..p {
        for (a, b) in acc.iter_mut().zip(input::<T>(case, r, n)) {
            *a = T::reference(op, *a, b);
        }
    }
    acc
}

/// A pseudo-random host/site layout for `p` ranks.
pub fn layout(p: usize, seed: u64) -> Hierarchy {
    let sites = 1 + (mix(seed) % 3) as u32;
    let site: Vec<u32> = (0..p)
        .map(|r| (mix(seed ^ r as u64) % sites as u64) as u32)
        .collect();
    let host: Vec<u32> = (0..p)
        .map(|r| (mix(seed.wrapping_add(7) ^ r as u64) % 3) as u32)
        .collect();
    Hierarchy::new(host, site).unwrap()
}

/// 2×2 matrix product over wrapping u64: associative, not commutative. Elements are
/// stored as 4 consecutive u64.
pub fn matmul_op() -> Op {
    Op::user_noncommutative("matmul", |inout, input| {
        let a: &[u64] = bytemuck::cast_slice(input);
        let b: &mut [u64] = bytemuck::cast_slice_mut(inout);
        for (x, y) in a.chunks_exact(4).zip(b.chunks_exact_mut(4)) {
            let r = matmul(x, y);
            y.copy_from_slice(&r);
        }
    })
}

pub fn matmul(x: &[u64], y: &[u64]) -> [u64; 4] {
    let m = |a: u64, b: u64| a.wrapping_mul(b);
    [
        m(x[0], y[0]).wrapping_add(m(x[1], y[2])),
        m(x[0], y[1]).wrapping_add(m(x[1], y[3])),
        m(x[2], y[0]).wrapping_add(m(x[3], y[2])),
        m(x[2], y[1]).wrapping_add(m(x[3], y[3])),
    ]
}
