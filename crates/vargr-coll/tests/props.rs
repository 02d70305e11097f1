//! Property tests: random sizes, counts, algorithms and values.
//!
//! - Integer allreduce equals the sequential reference exactly, for every algorithm.
//! - Arbitrary-float allreduce is bitwise identical on all ranks and within a relative
//!   tolerance of the left-to-right reference (algorithms bracket differently; see the
//!   `algo` module docs for each order).
//! - Schedules (pure data) pair up: for every (sender, receiver, phase) the sequence of
//!   sent lengths equals the sequence of expected lengths — checked without threads.

mod common;

use std::collections::HashMap;

use common::*;
use proptest::prelude::*;
use vargr_coll::algo::{allreduce as ar, gather as g, tree};
use vargr_coll::{Algorithm, Hierarchy, Op, Schedule, Step};

type Builder = Box<dyn Fn(usize) -> Schedule>;

const ALLREDUCE: [&str; 7] = [
    "recursive_doubling",
    "ring",
    "rabenseifner",
    "reduce_bcast",
    "hierarchical:tree",
    "hierarchical:magpie",
    "shm",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn integer_allreduce_is_exact(p in 1usize..10, n in 0usize..70, a in 0usize..7, seed in any::<u64>()) {
        let alg: Algorithm = ALLREDUCE[a].parse().unwrap();
        run_ranks(p, Some(layout(p, seed)), move |comm| {
            let mut x = input::<i64>(seed, comm.rank(), n);
            comm.allreduce_with(&mut x, &Op::Sum, Some(alg)).unwrap();
            assert_eq!(x, reference_uncached::<i64>(&Op::Sum, seed, p, n), "{alg}");
        });
    }

    #[test]
    fn float_allreduce_agrees_everywhere(p in 1usize..10, n in 1usize..40, a in 0usize..7, seed in any::<u64>()) {
        let alg: Algorithm = ALLREDUCE[a].parse().unwrap();
        run_ranks(p, Some(layout(p, seed)), move |comm| {
            let val = |r: usize, i: usize| (mix(seed ^ (r as u64) << 32 ^ i as u64) as f64 / u64::MAX as f64 - 0.3) * 1e6;
            let mut x: Vec<f64> = (0..n).map(|i| val(comm.rank(), i)).collect();
            comm.allreduce_with(&mut x, &Op::Sum, Some(alg)).unwrap();
            let mut all = vec![0.0f64; n * p];
            comm.allgather(&x, &mut all).unwrap();
            for chunk in all.chunks(n) {
                assert_eq!(chunk.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                           x.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "{alg}: ranks disagree");
            }
            for (i, got) in x.iter().enumerate() {
                let want: f64 = (0..p).map(|r| val(r, i)).sum();
                let scale: f64 = (0..p).map(|r| val(r, i).abs()).sum();
                assert!((got - want).abs() <= 1e-12 * scale.max(1.0), "{alg}: {got} vs {want}");
            }
        });
    }

    #[test]
    fn alltoallv_random_counts(p in 1usize..8, seed in any::<u64>()) {
        run_ranks(p, None, move |comm| {
            let me = comm.rank();
            let cnt = |i: usize, j: usize| (mix(seed ^ (i * 31 + j) as u64) % 6) as usize;
            let sc: Vec<usize> = (0..p).map(|j| cnt(me, j)).collect();
            let rc: Vec<usize> = (0..p).map(|i| cnt(i, me)).collect();
            let prefix = |c: &[usize]| c.iter().scan(0, |a, &x| { let d = *a; *a += x; Some(d) }).collect::<Vec<_>>();
            let (sd, rd) = (prefix(&sc), prefix(&rc));
            let send: Vec<u32> = (0..sc.iter().sum::<usize>()).map(|k| (me * 1000 + k) as u32).collect();
            let mut recv = vec![0u32; rc.iter().sum()];
            comm.alltoallv(&send, &sc, &sd, &mut recv, &rc, &rd).unwrap();
            for i in 0..p {
                let off: usize = (0..me).map(|j| cnt(i, j)).sum();
                let want: Vec<u32> = (off..off + cnt(i, me)).map(|k| (i * 1000 + k) as u32).collect();
                assert_eq!(&recv[rd[i]..rd[i] + rc[i]], &want[..]);
            }
        });
    }

    #[test]
    fn schedules_pair_up(p in 1usize..40, count in 0usize..100, root_seed in any::<usize>(), k in 1usize..5, seed in any::<u64>()) {
        let root = root_seed % p;
        let h: Hierarchy = layout(p, seed);
        let builders: Vec<(&str, Builder)> = vec![
            ("barrier", Box::new(move |me| tree::barrier_dissemination(me, p))),
            ("bcast_binomial", Box::new(move |me| tree::bcast_binomial(me, p, root, count * 4))),
            ("bcast_kary", Box::new(move |me| tree::bcast_kary(me, p, root, count * 4, k))),
            ("bcast_sag", Box::new(move |me| tree::bcast_scatter_allgather(me, p, root, count, 4))),
            ("reduce_kary", Box::new(move |me| tree::reduce_kary(me, p, root, count * 4, k))),
            ("reduce_rab", Box::new(move |me| ar::reduce_rabenseifner(me, p, root, count, 4))),
            ("rd", Box::new(move |me| ar::recursive_doubling(me, p, count * 4))),
            ("ring", Box::new(move |me| ar::ring(me, p, count, 4))),
            ("rab", Box::new(move |me| ar::rabenseifner(me, p, count, 4))),
            ("hier", Box::new(move |me| ar::hierarchical(me, &h.levels(me), count * 4, vargr_coll::Across::Magpie))),
            ("gather", Box::new(move |me| g::gather_binomial(me, p, root, count))),
            ("scatter", Box::new(move |me| g::scatter_binomial(me, p, root, count))),
            ("bruck", Box::new(move |me| g::allgather_bruck(me, p, count))),
        ];
        for (name, b) in &builders {
            let scheds: Vec<Schedule> = (0..p).map(b).collect();
            let mut sent: HashMap<(usize, usize, u16), Vec<usize>> = HashMap::new();
            let mut want: HashMap<(usize, usize, u16), Vec<usize>> = HashMap::new();
            for (me, s) in scheds.iter().enumerate() {
                for st in &s.steps {
                    match st {
                        Step::Send { to, phase, range, .. } => sent.entry((me, *to, *phase)).or_default().push(range.len()),
                        Step::Recv { from, phase, range, .. } => want.entry((*from, me, *phase)).or_default().push(range.len()),
                        _ => {}
                    }
                }
            }
            prop_assert_eq!(&sent, &want, "{} p={} count={} root={}", name, p, count, root);
        }
    }
}

#[test]
fn shm_groups_of_split_communicators_stay_apart() {
    // Two colors share a context id; their shared-memory groups must not mix.
    run_ranks(6, None, |comm| {
        let sub = comm
            .split(Some((comm.rank() % 2) as u32), 0)
            .unwrap()
            .unwrap();
        for i in 0..50u64 {
            let mut x = [comm.rank() as u64 + i];
            sub.allreduce_with(&mut x, &Op::Sum, Some("shm".parse().unwrap()))
                .unwrap();
            let want: u64 = (0..6)
                .filter(|r| r % 2 == comm.rank() % 2)
                .map(|r| r as u64 + i)
                .sum();
            assert_eq!(x[0], want);
        }
    });
}
