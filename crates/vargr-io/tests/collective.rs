//! Collective writes and reads on real threads over the in-process transport, checked
//! byte by byte against the file every view describes: both aggregation patterns,
//! several collective buffer sizes (so domains take several rounds), holes kept, and the
//! ways a collective operation can fail reaching every rank.

use std::sync::Arc;
use std::time::Duration;

use vargr_coll::{Comm, Fabric, Hierarchy, Op, WaitPolicy, World};
use vargr_io::{
    Aggregation, Count, ErrorClass, File, Hints, IoError, Mode, Plan, Run, Solver, View,
};

/// Runs `f` on `p` threads with ranks on the given nodes (one host per node).
fn run_ranks(p: usize, node: Vec<u32>, f: impl Fn(Comm) + Send + Sync + 'static) {
    let fabric = Fabric::with_policy(
        p,
        WaitPolicy {
            spins: 0,
            yields: 64,
            timeout: Some(Duration::from_secs(30)),
        },
    );
    let f = Arc::new(f);
    let h = Hierarchy::new(node, vec![0; p]).unwrap();
    let handles: Vec<_> = fabric
        .endpoints()
        .into_iter()
        .map(|ep| {
            let (f, h) = (f.clone(), h.clone());
            std::thread::spawn(move || {
                f(World::new(Arc::new(ep)).with_hierarchy(h).comm().unwrap())
            })
        })
        .collect();
    let failed: Vec<String> = handles
        .into_iter()
        .enumerate()
        .filter_map(|(r, h)| {
            h.join()
                .err()
                .map(|e| format!("rank {r}: {:?}", e.downcast_ref::<String>()))
        })
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
}

fn byte(o: u64) -> u8 {
    ((o.wrapping_mul(131) >> 3) ^ (o >> 11)) as u8
}

fn data_of(view: &View) -> Vec<u8> {
    view.runs()
        .iter()
        .flat_map(|r| (r.offset..r.end()).map(byte))
        .collect()
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Elements of 8 bytes dealt to ranks by `owner`, as each rank's view.
fn dealt(elements: u64, me: usize, owner: impl Fn(u64) -> usize) -> View {
    View::from_runs(
        (0..elements)
            .filter(|&e| owner(e) == me)
            .map(|e| Run::new(e * 8, 8)),
    )
    .unwrap()
}

fn locality() -> Aggregation {
    Aggregation::Locality {
        count: Count::Bytes,
        solver: Solver::JonkerVolgenant,
    }
}

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn expected_file(len: u64, holes: impl Fn(u64) -> bool, fill: u8) -> Vec<u8> {
    (0..len)
        .map(|o| if holes(o) { fill } else { byte(o) })
        .collect()
}

#[test]
fn scattered_views_write_and_read_back_in_every_pattern() {
    let dir = temp();
    let base = dir.path().to_path_buf();
    // 7 ranks on 3 nodes; elements dealt at random; domains split in rounds of 40 bytes
    // (not a multiple of the element size), of 1 KiB and of the default 4 MiB.
    let node = vec![0, 0, 0, 1, 1, 2, 2];
    let elements = 700;
    run_ranks(7, node, move |comm| {
        let me = comm.rank();
        let view = dealt(elements, me, |e| (mix(e) % 7) as usize);
        let mut case = 0;
        for aggregation in [
            Aggregation::TwoPhase,
            locality(),
            Aggregation::Locality {
                count: Count::Blocks,
                solver: Solver::Hungarian,
            },
        ] {
            for (cb, cb_nodes) in [(40, None), (1024, Some(2)), (4 << 20, Some(5))] {
                case += 1;
                let path = base.join(format!("f{case}"));
                let hints = Hints {
                    cb_buffer_size: cb,
                    cb_nodes,
                    aggregation,
                    ..Hints::default()
                };
                let mut f = File::open(&comm, &path, Mode::create(), hints).unwrap();
                f.set_view(view.clone());
                f.write_all(&data_of(&view)).unwrap();
                f.sync().unwrap();
                let mut back = vec![0u8; view.bytes() as usize];
                f.read_all(&mut back).unwrap();
                assert_eq!(back, data_of(&view), "{aggregation:?} cb {cb}");
                let want_aggs = cb_nodes.unwrap_or(3);
                assert_eq!(f.stats().aggregators.len(), want_aggs);
                comm.barrier().unwrap();
                if me == 0 {
                    let got = std::fs::read(&path).unwrap();
                    assert_eq!(
                        got,
                        expected_file(elements * 8, |_| false, 0),
                        "{aggregation:?} cb {cb}"
                    );
                }
                f.close().unwrap();
            }
        }
    });
}

#[test]
fn holes_keep_what_the_file_held_and_independent_io_follows_the_view() {
    let dir = temp();
    let path = dir.path().join("holes");
    let len = 4096u64;
    std::fs::write(&path, vec![0xAAu8; len as usize]).unwrap();
    let p2 = path.clone();
    run_ranks(4, vec![0, 0, 1, 1], move |comm| {
        let me = comm.rank() as u64;
        // Rank r writes 24-byte blocks every 128 bytes from 32r: 32 bytes of every 128
        // stay holes.
        let view = View::vector(32 * me, 32, 24, 128).unwrap();
        let hints = Hints {
            cb_buffer_size: 300,
            aggregation: locality(),
            ..Hints::default()
        };
        let mut f = File::open(&comm, &p2, Mode::READ_WRITE, hints).unwrap();
        f.set_view(view.clone());
        f.write_all(&data_of(&view)).unwrap();
        assert!(
            f.stats().bytes_sieved > 0 || f.stats().aggregators.iter().all(|&a| a != comm.rank())
        );
        // Independent I/O: data bytes 20..30 of the view straddle its first two blocks.
        let mut part = [0u8; 10];
        assert_eq!(f.read_at(20, &mut part).unwrap(), 10);
        assert_eq!(&part[..], &data_of(&view)[20..30]);
        f.write_at(20, &[me as u8; 10]).unwrap();
        assert_eq!(f.read_at(20, &mut part).unwrap(), 10);
        assert_eq!(part, [me as u8; 10]);
        f.write_at(20, &data_of(&view)[20..30]).unwrap();
        assert!(f.write_at(view.bytes() - 2, &[0; 3]).is_err());
        // Resizing and preallocation are collective: when they return, every rank sees
        // the new size (the barriers keep a rank's look from racing the next change).
        assert_eq!(f.size().unwrap(), 4096);
        comm.barrier().unwrap();
        f.preallocate(8192).unwrap();
        assert_eq!(f.size().unwrap(), 8192);
        comm.barrier().unwrap();
        f.set_size(4096).unwrap();
        assert_eq!(f.size().unwrap(), 4096);
        f.close().unwrap();
    });
    let hole = |o: u64| o % 32 >= 24;
    assert_eq!(
        std::fs::read(&path).unwrap(),
        expected_file(len, hole, 0xAA)
    );
}

#[test]
fn locality_aware_aggregation_keeps_data_on_its_node() {
    let dir = temp();
    let base = dir.path().to_path_buf();
    // 4 nodes of 2 ranks; quarter q of the file is held (mostly) by node (q + 1) % 4, so
    // ROMIO's pattern (domain q on node q) moves nearly everything and LA-Two-Phase
    // almost nothing.
    let node = vec![0, 0, 1, 1, 2, 2, 3, 3];
    let elements = 4000u64;
    let b2 = base.clone();
    run_ranks(8, node, move |comm| {
        let me = comm.rank();
        let owner = |e: u64| {
            let q = e * 4 / elements;
            let n = if mix(e) % 10 == 0 {
                mix(e >> 1) % 4
            } else {
                (q + 1) % 4
            };
            (2 * n + mix(e ^ 99) % 2) as usize
        };
        let view = dealt(elements, me, owner);
        let mut moved = Vec::new();
        for (i, aggregation) in [Aggregation::TwoPhase, locality()].into_iter().enumerate() {
            let hints = Hints {
                aggregation,
                ..Hints::default()
            };
            let mut f = File::open(
                &comm,
                b2.join(format!("la{i}")),
                Mode::create(),
                hints.clone(),
            )
            .unwrap();
            f.set_view(view.clone());
            f.write_all(&data_of(&view)).unwrap();
            let mut between = [f.stats().bytes_between_nodes];
            comm.allreduce(&mut between, &Op::Sum).unwrap();
            moved.push(between[0]);
            // The plan computed from all views without communicating agrees.
            let views: Vec<View> = (0..8).map(|r| dealt(elements, r, owner)).collect();
            let nodes: Vec<usize> = (0..8).map(|r| r / 2).collect();
            let plan = Plan::offline(&views, &nodes, &hints).unwrap();
            assert_eq!(plan.aggregators(), &f.stats().aggregators[..]);
            assert_eq!(plan.bytes_between_nodes(&views, &nodes), between[0]);
            if i == 1 {
                // Domain q went to node (q + 1) % 4.
                let aggs = &f.stats().aggregators;
                for (q, &a) in aggs.iter().enumerate() {
                    assert_eq!(a / 2, (q + 1) % 4, "{aggs:?}");
                }
            }
            f.close().unwrap();
        }
        let total = elements * 8;
        assert!(moved[0] > total * 7 / 10, "{moved:?}");
        assert!(moved[1] < total / 5, "{moved:?}");
    });
    let a = std::fs::read(base.join("la0")).unwrap();
    assert_eq!(a, std::fs::read(base.join("la1")).unwrap());
    assert_eq!(a, expected_file(4000 * 8, |_| false, 0));
}

fn expect_everywhere(r: Result<(), IoError>, culprit: usize, me: usize, what: &str) {
    let e = r.expect_err(what);
    let text = e.to_string();
    if me == culprit {
        assert!(!matches!(e, IoError::Elsewhere { .. }), "{text}");
    } else {
        assert!(
            matches!(e, IoError::Elsewhere { rank, .. } if rank == culprit),
            "{what}: {text}"
        );
    }
}

#[test]
fn failures_reach_every_rank() {
    let dir = temp();
    let base = dir.path().to_path_buf();
    std::os::unix::fs::symlink("/etc/hostname", base.join("link")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        base.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    run_ranks(3, vec![0, 1, 2], move |comm| {
        let me = comm.rank();
        // Cannot be opened: a missing directory, a link, a FIFO (which must not block).
        for (name, want) in [
            ("no/such/dir", "opening"),
            ("link", "opening"),
            ("fifo", "not a regular file"),
        ] {
            let e = File::open(&comm, base.join(name), Mode::create(), Hints::default())
                .err()
                .unwrap_or_else(|| panic!("{name} opened"));
            // Rank 0 creates first; the others learn of its failure, as the same kind.
            if me == 0 {
                assert!(e.to_string().contains(want), "{name}: {e}");
            } else {
                assert!(
                    matches!(e, IoError::Elsewhere { rank: 0, .. }),
                    "{name}: {e}"
                );
            }
            let want_class = if name == "fifo" {
                ErrorClass::Other
            } else {
                ErrorClass::Os
            };
            assert_eq!(e.class(), want_class, "{name}: {e}");
            if name == "no/such/dir" {
                assert_eq!(e.errno(), Some(2), "{e}");
            }
        }
        let path = base.join("f");
        let mut f = File::open(&comm, &path, Mode::create(), Hints::default()).unwrap();
        // Overlapping views: ranks 1 and 2 share bytes 80..88.
        let view = match me {
            0 => View::contiguous(0, 40).unwrap(),
            1 => View::contiguous(40, 48).unwrap(),
            _ => View::contiguous(80, 40).unwrap(),
        };
        f.set_view(view.clone());
        let e = f.write_all(&data_of(&view)).unwrap_err();
        assert_eq!(e.class(), ErrorClass::View, "{e}");
        let text = e.to_string();
        assert!(
            text.contains("ranks 1 and 2 both write file bytes 80..88"),
            "{text}"
        );
        // A rank giving the wrong amount of data.
        let view = View::contiguous(40 * me as u64, 40).unwrap();
        f.set_view(view.clone());
        let mut data = data_of(&view);
        if me == 1 {
            data.pop();
        }
        expect_everywhere(f.write_all(&data), 1, me, "short data");
        // After all that, the file still works; a second write reuses the plan.
        f.write_all(&data_of(&view)).unwrap();
        f.write_all(&data_of(&view)).unwrap();
        comm.barrier().unwrap();
        if me == 0 {
            assert_eq!(
                std::fs::read(&path).unwrap(),
                expected_file(120, |_| false, 0)
            );
        }
        comm.barrier().unwrap();
        // One rank alone changes its view: every rank must plan again. (Bytes 40..80
        // keep what rank 1 wrote there before; 120..200 were never written.)
        if me == 1 {
            let moved = View::contiguous(200, 40).unwrap();
            f.set_view(moved.clone());
            f.write_all(&data_of(&moved)).unwrap();
        } else {
            f.write_all(&data_of(&view)).unwrap();
        }
        f.close().unwrap();
        if me == 0 {
            let never = |o: u64| (120..200).contains(&o);
            assert_eq!(std::fs::read(&path).unwrap(), expected_file(240, never, 0));
        }
    });
}
