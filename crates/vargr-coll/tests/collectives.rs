//! Every collective × algorithm × communicator size × message size, on real threads over
//! the in-process transport, checked against sequential references that every rank
//! computes on its own (inputs are a pure function of case, rank and index).
//!
//! Integers are compared exactly. Floats use integer values in −3..=3, so every bracketing
//! gives the exact same result and comparisons stay exact; bracketing differences on
//! arbitrary floats are covered in `props.rs` with a tolerance.

mod common;

use common::*;
use vargr_coll::{Algorithm, CollError, CollKind, Comm, Op};

fn alg(s: &str) -> Option<Algorithm> {
    Some(s.parse().unwrap())
}

const COUNTS: [usize; 6] = [0, 1, 3, 8, 13, 1000];

fn ops() -> Vec<Op> {
    vec![
        Op::Sum,
        Op::Prod,
        Op::Min,
        Op::Max,
        Op::Land,
        Op::Lor,
        Op::Band,
        Op::Bor,
    ]
}

fn roots(p: usize) -> Vec<usize> {
    let mut r = vec![0, p - 1, p / 2];
    r.dedup();
    r
}

fn check_allreduce<T: TE>(comm: &Comm, algs: &[Option<Algorithm>], case: &mut u64) {
    let (me, p) = (comm.rank(), comm.size());
    for op in ops() {
        if op.check(T::KIND).is_err() {
            let mut x = input::<T>(0, me, 2);
            let err = comm.allreduce(&mut x, &op).unwrap_err();
            assert!(matches!(err, CollError::OpType { .. }), "{err}");
            continue;
        }
        for &n in &COUNTS {
            for &a in algs {
                *case += 1;
                let mut x = input::<T>(*case, me, n);
                comm.allreduce_with(&mut x, &op, a)
                    .unwrap_or_else(|e| panic!("allreduce {a:?} {op:?} n={n}: {e}"));
                let want = reference::<T>(&op, *case, p, n);
                assert_eq!(x, want, "allreduce {a:?} {} {op:?} n={n} p={p}", T::KIND);
            }
        }
    }
}

#[test]
fn allreduce_all_algorithms_types_and_sizes() {
    for p in SIZES {
        let h = layout(p, p as u64);
        run_ranks(p, Some(h), move |comm| {
            let algs: Vec<_> = [
                "recursive_doubling",
                "ring",
                "rabenseifner",
                "reduce_bcast",
                "hierarchical:tree",
                "hierarchical:magpie",
                "shm",
            ]
            .iter()
            .map(|s| alg(s))
            .chain([None])
            .collect();
            let mut case = 0;
            check_allreduce::<i32>(&comm, &algs, &mut case);
            check_allreduce::<u8>(&comm, &algs, &mut case);
            check_allreduce::<f64>(&comm, &algs, &mut case);
            check_allreduce::<i64>(&comm, &algs[..2], &mut case);
            check_allreduce::<u16>(&comm, &algs[2..4], &mut case);
            check_allreduce::<f32>(&comm, &algs[4..], &mut case);
            check_allreduce::<i8>(&comm, &[None], &mut case);
            check_allreduce::<u32>(&comm, &[None], &mut case);
            check_allreduce::<u64>(&comm, &[None], &mut case);
            check_allreduce::<i16>(&comm, &[None], &mut case);
        });
    }
}

#[test]
fn reduce_all_algorithms_and_roots() {
    for p in SIZES {
        run_ranks(p, None, move |comm| {
            let me = comm.rank();
            let mut case = 1000;
            for a in [
                alg("flat"),
                alg("binomial"),
                alg("kary:3"),
                alg("kary:1"),
                alg("rabenseifner"),
                None,
            ] {
                for root in roots(p) {
                    for op in [Op::Sum, Op::Max, Op::Bor] {
                        for n in COUNTS {
                            case += 1;
                            let x = input::<i64>(case, me, n);
                            let mut out = if me == root { vec![0; n] } else { vec![] };
                            comm.reduce_with(&x, &mut out, &op, root, a).unwrap();
                            if me == root {
                                assert_eq!(
                                    out,
                                    reference::<i64>(&op, case, p, n),
                                    "{a:?} root {root} n {n}"
                                );
                            }
                        }
                    }
                    case += 1;
                    let x = input::<f32>(case, me, 7);
                    let mut out = vec![0.0f32; 7];
                    comm.reduce_with(&x, &mut out, &Op::Sum, root, a).unwrap();
                    if me == root {
                        assert_eq!(out, reference::<f32>(&Op::Sum, case, p, 7));
                    }
                }
            }
        });
    }
}

#[test]
fn bcast_all_algorithms() {
    for p in SIZES {
        run_ranks(p, None, move |comm| {
            let me = comm.rank();
            let mut case = 2000;
            for a in [
                alg("flat"),
                alg("binomial"),
                alg("kary:2"),
                alg("kary:5"),
                alg("scatter_allgather"),
                None,
            ] {
                for root in roots(p) {
                    for n in COUNTS {
                        case += 1;
                        let want = input::<u32>(case, root, n);
                        let mut buf = if me == root { want.clone() } else { vec![0; n] };
                        comm.bcast_with(&mut buf, root, a).unwrap();
                        assert_eq!(buf, want, "{a:?} root {root} n {n}");
                        let wantb = input::<u8>(case, root, n + 1);
                        let mut b = if me == root {
                            wantb.clone()
                        } else {
                            vec![0; n + 1]
                        };
                        comm.bcast_with(&mut b, root, a).unwrap();
                        assert_eq!(b, wantb);
                    }
                }
            }
        });
    }
}

#[test]
fn barrier_gather_scatter_allgather_alltoall() {
    for p in SIZES {
        run_ranks(p, None, move |comm| {
            let me = comm.rank();
            comm.barrier().unwrap();
            comm.barrier_with(alg("flat")).unwrap();
            comm.barrier_with(alg("dissemination")).unwrap();
            comm.barrier_with(alg("shm")).unwrap();
            let mut case = 3000;
            for n in COUNTS {
                let all = |case: u64| -> Vec<u16> {
                    (0..p).flat_map(|r| input::<u16>(case, r, n)).collect()
                };
                for root in roots(p) {
                    for a in [alg("flat"), alg("binomial"), None] {
                        case += 1;
                        let mut out = if me == root {
                            vec![0u16; p * n]
                        } else {
                            vec![]
                        };
                        comm.gather_with(&input::<u16>(case, me, n), &mut out, root, a)
                            .unwrap();
                        if me == root {
                            assert_eq!(out, all(case), "gather {a:?} root {root} n {n}");
                        }
                        case += 1;
                        let src = if me == root { all(case) } else { vec![] };
                        let mut mine = vec![0u16; n];
                        comm.scatter_with(&src, &mut mine, root, a).unwrap();
                        assert_eq!(
                            mine,
                            input::<u16>(case, me, n),
                            "scatter {a:?} root {root} n {n}"
                        );
                    }
                }
                for a in [alg("ring"), alg("recursive_doubling"), alg("bruck"), None] {
                    case += 1;
                    let mut out = vec![0u16; p * n];
                    comm.allgather_with(&input::<u16>(case, me, n), &mut out, a)
                        .unwrap();
                    assert_eq!(out, all(case), "allgather {a:?} n {n}");
                }
                // alltoall: block j of rank i is input(case, i)[j*n..]
                case += 1;
                let send = input::<u16>(case, me, p * n);
                let mut recv = vec![0u16; p * n];
                comm.alltoall(&send, &mut recv).unwrap();
                let want: Vec<u16> = (0..p)
                    .flat_map(|i| input::<u16>(case, i, p * n)[me * n..(me + 1) * n].to_vec())
                    .collect();
                assert_eq!(recv, want, "alltoall n {n}");
            }
        });
    }
}

/// Varying counts: rank r contributes `r % 4 + extra` elements; displacements leave gaps
/// and reverse the order to catch offset mix-ups.
#[test]
fn v_variants_with_gaps_and_reversed_order() {
    for p in SIZES {
        run_ranks(p, None, move |comm| {
            let me = comm.rank();
            for extra in [0usize, 1, 9] {
                let case = 4000 + extra as u64;
                let counts: Vec<usize> = (0..p).map(|r| r % 4 + extra).collect();
                let mut displs = vec![0; p];
                let mut at = 0;
                for r in (0..p).rev() {
                    displs[r] = at;
                    at += counts[r] + 1;
                }
                let total = at;
                let placed = |case: u64| {
                    let mut v = vec![0i32; total];
                    for r in 0..p {
                        v[displs[r]..displs[r] + counts[r]]
                            .copy_from_slice(&input::<i32>(case, r, counts[r]));
                    }
                    v
                };
                for root in roots(p) {
                    let mut out = if me == root {
                        vec![0i32; total]
                    } else {
                        vec![]
                    };
                    comm.gatherv(
                        &input::<i32>(case, me, counts[me]),
                        &mut out,
                        &counts,
                        &displs,
                        root,
                    )
                    .unwrap();
                    if me == root {
                        assert_eq!(out, placed(case), "gatherv root {root}");
                    }
                    let src = if me == root {
                        placed(case + 100)
                    } else {
                        vec![]
                    };
                    let mut mine = vec![0i32; counts[me]];
                    comm.scatterv(&src, &counts, &displs, &mut mine, root)
                        .unwrap();
                    assert_eq!(mine, input::<i32>(case + 100, me, counts[me]));
                }
                let mut out = vec![0i32; total];
                comm.allgatherv(
                    &input::<i32>(case + 200, me, counts[me]),
                    &mut out,
                    &counts,
                    &displs,
                )
                .unwrap();
                assert_eq!(out, placed(case + 200));

                // alltoallv: rank i sends (i + j) % 3 + extra elements to rank j.
                let cnt = |i: usize, j: usize| (i + j) % 3 + extra;
                let sc: Vec<usize> = (0..p).map(|j| cnt(me, j)).collect();
                let sd: Vec<usize> = sc
                    .iter()
                    .scan(0, |a, &c| {
                        let d = *a;
                        *a += c;
                        Some(d)
                    })
                    .collect();
                let rc: Vec<usize> = (0..p).map(|i| cnt(i, me)).collect();
                let rd: Vec<usize> = rc
                    .iter()
                    .scan(0, |a, &c| {
                        let d = *a;
                        *a += c + 2;
                        Some(d)
                    })
                    .collect();
                let send_of =
                    |i: usize| input::<i32>(case + 300, i, (0..p).map(|j| cnt(i, j)).sum());
                let send = send_of(me);
                let mut recv = vec![0i32; rd[p - 1] + rc[p - 1]];
                comm.alltoallv(&send, &sc, &sd, &mut recv, &rc, &rd)
                    .unwrap();
                for i in 0..p {
                    let theirs = send_of(i);
                    let off: usize = (0..me).map(|j| cnt(i, j)).sum();
                    assert_eq!(
                        &recv[rd[i]..rd[i] + rc[i]],
                        &theirs[off..off + cnt(i, me)],
                        "from {i}"
                    );
                }
            }
        });
    }
}

#[test]
fn noncommutative_user_op_keeps_rank_order() {
    for p in SIZES {
        run_ranks(p, None, move |comm| {
            let me = comm.rank();
            let op = matmul_op();
            let mat =
                |r: usize| -> Vec<u64> { (0..8).map(|i| mix((r * 8 + i) as u64) % 5).collect() };
            let mut want = mat(0);
            for r in 1..p {
                let m = mat(r);
                for k in 0..2 {
                    let prod = matmul(&want[4 * k..4 * k + 4], &m[4 * k..4 * k + 4]);
                    want[4 * k..4 * k + 4].copy_from_slice(&prod);
                }
            }
            for a in [
                None,
                alg("recursive_doubling"),
                alg("reduce_bcast"),
                alg("shm"),
            ] {
                let mut x = mat(me);
                comm.allreduce_with(&mut x, &op, a).unwrap();
                assert_eq!(x, want, "allreduce {a:?}");
            }
            for (a, root) in [(None, p - 1), (alg("flat"), p / 2), (alg("binomial"), 0)] {
                let mut out = vec![0u64; 8];
                comm.reduce_with(&mat(me), &mut out, &op, root, a).unwrap();
                if me == root {
                    assert_eq!(out, want, "reduce {a:?} root {root}");
                }
            }
            // Reordering algorithms refuse, on every rank, before sending anything.
            let mut x = mat(me);
            let err = comm.allreduce_with(&mut x, &op, alg("ring")).unwrap_err();
            assert!(matches!(err, CollError::Unsupported { .. }), "{err}");
            comm.barrier().unwrap();
        });
    }
}

#[test]
fn shm_allreduce_of_large_buffers_splits_the_work_and_keeps_rank_order() {
    for p in [2, 3, 5, 16] {
        run_ranks(p, None, move |comm| {
            let me = comm.rank();
            // 64 KiB (the split threshold), one element more, a few lines more, and
            // more than 64 KiB per rank.
            for (case, n) in [(3000, 8192), (3001, 8193), (3002, 8200), (3003, 140_001)] {
                let mut x = input::<i64>(case, me, n);
                comm.allreduce_with(&mut x, &Op::Sum, alg("shm")).unwrap();
                assert_eq!(x, reference::<i64>(&Op::Sum, case, p, n), "p={p} n={n}");
                let mut y = input::<f32>(case, me, 2 * n);
                comm.allreduce_with(&mut y, &Op::Max, alg("shm")).unwrap();
                assert_eq!(y, reference::<f32>(&Op::Max, case, p, 2 * n), "p={p} n={n}");
            }
            // A non-commutative operator on 2x2 matrices, 80 KiB of them.
            let mats = 80 * 1024 / 32;
            let mat = |r: usize| -> Vec<u64> {
                (0..4 * mats)
                    .map(|i| mix((r * 4 * mats + i) as u64) % 5)
                    .collect()
            };
            let mut want = mat(0);
            for r in 1..p {
                let m = mat(r);
                for k in 0..mats {
                    let prod = matmul(&want[4 * k..4 * k + 4], &m[4 * k..4 * k + 4]);
                    want[4 * k..4 * k + 4].copy_from_slice(&prod);
                }
            }
            let mut x = mat(me);
            comm.allreduce_with(&mut x, &matmul_op(), alg("shm"))
                .unwrap();
            assert_eq!(x, want, "p={p}");

            // Lengths that differ, among large buffers and across the threshold: every
            // rank gets an error, none waits for ever, and the next call works.
            for small in [8200, 100] {
                let n = if me == 0 { small } else { 8192 };
                let mut z = vec![1i64; n];
                let err = comm
                    .allreduce_with(&mut z, &Op::Sum, alg("shm"))
                    .unwrap_err();
                assert!(matches!(err, CollError::UserOp { .. }), "{err}");
            }
            let mut x = input::<i64>(3004, me, 9000);
            comm.allreduce_with(&mut x, &Op::Sum, alg("shm")).unwrap();
            assert_eq!(x, reference::<i64>(&Op::Sum, 3004, p, 9000));
        });
    }
}

#[test]
fn power_of_two_butterflies_agree_bitwise_on_arbitrary_floats() {
    for p in [2, 4, 8, 16] {
        run_ranks(p, None, move |comm| {
            let me = comm.rank();
            let x: Vec<f64> = (0..37)
                .map(|i| (mix((me * 100 + i) as u64) as f64 / u64::MAX as f64 - 0.5) * 1e3)
                .collect();
            let mut outs = vec![];
            for a in ["recursive_doubling", "rabenseifner", "reduce_bcast"] {
                let mut y = x.clone();
                comm.allreduce_with(&mut y, &Op::Sum, alg(a)).unwrap();
                outs.push(y);
            }
            assert_eq!(outs[0], outs[1]);
            assert_eq!(outs[0], outs[2]);
        });
    }
}

#[test]
fn split_dup_and_point_to_point() {
    for p in SIZES {
        run_ranks(p, Some(layout(p, 99)), move |comm| {
            let me = comm.rank();
            // Reverse order inside each color via the key; every third rank opts out.
            let color = if me % 3 == 2 {
                None
            } else {
                Some((me % 2) as u32)
            };
            let sub = comm.split(color, -(me as i32)).unwrap();
            match (color, &sub) {
                (None, None) => {}
                (Some(c), Some(s)) => {
                    let members: Vec<usize> = (0..p)
                        .rev()
                        .filter(|r| r % 3 != 2 && (r % 2) as u32 == c)
                        .collect();
                    assert_eq!(s.size(), members.len());
                    assert_eq!(members[s.rank()], me);
                    assert_ne!(s.context(), comm.context());
                    let mut x = [me as u64];
                    s.allreduce(&mut x, &Op::Sum).unwrap();
                    assert_eq!(x[0], members.iter().map(|&r| r as u64).sum::<u64>());
                    assert_eq!(s.hierarchy().unwrap().len(), s.size());
                }
                other => panic!(
                    "color {color:?} gave {:?}",
                    other.1.as_ref().map(|c| c.size())
                ),
            }
            // Interleave traffic on the parent and a dup with the same user tag.
            let d = comm.dup().unwrap();
            assert_ne!(d.context(), comm.context());
            let right = (me + 1) % p;
            let left = (me + p - 1) % p;
            comm.send(right, 5, &[me as u32, 1]).unwrap();
            d.send(right, 5, &[me as u32, 2]).unwrap();
            comm.send(right, 5, &[me as u32, 3]).unwrap();
            assert_eq!(d.recv_vec::<u32>(left, 5).unwrap(), vec![left as u32, 2]);
            let mut buf = [0u32; 4];
            assert_eq!(comm.recv(left, 5, &mut buf).unwrap(), 2);
            assert_eq!(&buf[..2], &[left as u32, 1]);
            assert_eq!(comm.recv_vec::<u32>(left, 5).unwrap(), vec![left as u32, 3]);
            // Truncation is an error, not a panic.
            comm.send(right, 6, &[1u8, 2, 3]).unwrap();
            let mut small = [0u8; 2];
            assert!(matches!(
                comm.recv(left, 6, &mut small),
                Err(CollError::MessageLength { .. })
            ));
            assert!(matches!(
                comm.send(p, 0, &[1u8]),
                Err(CollError::BadRank { .. })
            ));
            assert!(matches!(
                comm.send(0, 1 << 40, &[1u8]),
                Err(CollError::BadTag { .. })
            ));
            comm.barrier().unwrap();
        });
    }
}

#[test]
fn bad_input_gives_typed_errors() {
    run_ranks(3, None, |comm| {
        // Checked before anything is sent, so only the erring rank needs to call.
        if comm.rank() == 0 {
            let mut out = vec![0u8; 5];
            let err = comm.gather(&[1u8, 2], &mut out, 0);
            assert!(matches!(
                err,
                Err(CollError::BufferLength {
                    coll: CollKind::Gather,
                    expected: 6,
                    got: 5,
                    ..
                })
            ));
        }
        assert!(matches!(
            comm.bcast(&mut [0u8], 3),
            Err(CollError::BadRank { what: "root", .. })
        ));
        assert!(matches!(
            comm.alltoall(&[0u8; 4], &mut [0u8; 4]),
            Err(CollError::BadLayout { .. })
        ));
        let e = comm.allgatherv(&[0u8], &mut [0u8; 3], &[1, 1], &[0, 1]);
        assert!(matches!(e, Err(CollError::BadLayout { .. })));
        let e = comm.allgatherv(&[0u8], &mut [0u8; 3], &[1, 1, 1], &[0, 1, usize::MAX]);
        assert!(matches!(e, Err(CollError::BadLayout { .. })));
        let e = comm.allreduce_with(&mut [0u8], &Op::Sum, alg("hierarchical:tree"));
        assert!(matches!(e, Err(CollError::Unsupported { .. })));
        let e = comm.allreduce_with(&mut [0u8], &Op::Sum, alg("pairwise"));
        assert!(matches!(e, Err(CollError::Unsupported { .. })));
        assert!(matches!(
            comm.allreduce(&mut [0.5f32], &Op::Band),
            Err(CollError::OpType { .. })
        ));
        comm.barrier().unwrap();
    });
}

#[test]
fn selection_is_reported_and_follows_the_table() {
    run_ranks(4, Some(layout(4, 3)), |comm| {
        // Threads of one process: the shared-memory rendezvous wins for small messages,
        // and its split form for large ones; in between, the next rules (here MagPIe
        // across the layout's three sites).
        assert_eq!(comm.algorithm_for(CollKind::Allreduce, 8), Algorithm::Shm);
        assert_eq!(comm.algorithm_for(CollKind::Barrier, 0), Algorithm::Shm);
        assert_eq!(
            comm.algorithm_for(CollKind::Allreduce, 1 << 20),
            Algorithm::Shm
        );
        assert_eq!(
            comm.algorithm_for(CollKind::Allreduce, 1 << 15),
            Algorithm::Hierarchical(vargr_coll::Across::Magpie)
        );
        assert_eq!(comm.algorithm_for(CollKind::Bcast, 8), Algorithm::Binomial);
    });
}
