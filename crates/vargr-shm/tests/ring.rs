//! The ring and the endpoint: messages arrive whole and in order however the pushes and
//! drains interleave, between threads and between processes; a peer writing garbage
//! gets a typed error, never a crash or a hang.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;
use vargr_shm::{Endpoint, Incoming, Layout, MsgHead, Outgoing, PeerFiles, Segment, ShmError};

/// Where ring 0 starts in a segment of up to 512 rings: the header, then a cache line of
/// news bits.
const RINGS: u64 = 128 + 64;

fn msg(i: usize, len: usize) -> Bytes {
    (0..len)
        .map(|j| (i * 31 + j * 7) as u8)
        .collect::<Vec<_>>()
        .into()
}

fn head(i: usize) -> MsgHead {
    MsgHead {
        dest: i as u32 % 5,
        src: 7,
        tag: i as u64 * 1_000_003,
    }
}

fn endpoints(dir: &std::path::Path, slots: usize, ring: usize) -> Vec<Endpoint> {
    let files: Vec<_> = (0..slots)
        .map(|i| PeerFiles::beside(&dir.join(format!("p{i}"))))
        .collect();
    (0..slots)
        .map(|i| {
            let mut e = Endpoint::create(
                i,
                Layout::new(slots, ring).unwrap(),
                files[i].clone(),
                1 << 26,
            )
            .unwrap();
            for (j, f) in files.iter().enumerate() {
                e.locate(j, f.clone());
            }
            e
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any sizes (empty, tiny, several times the ring) and any interleaving of pushes
    /// and drains deliver every message once, whole, in order.
    #[test]
    fn messages_arrive_whole_and_in_order(
        sizes in prop::collection::vec(
            prop_oneof![4 => 0usize..40, 4 => 4000usize..5000, 4 => 9000usize..20000, 1 => 524288usize..530000],
            1..30),
        steps in prop::collection::vec(0u8..3, 1..200),
        single_copy in any::<bool>(),
    ) {
        let seg = Segment::create("t", Layout::new(1, 8192).unwrap()).unwrap();
        let ring = seg.ring(0);
        let mut tx = Outgoing::default();
        if single_copy {
            // This process reading its own memory, as a peer would read ours.
            prop_assert!(seg.single_copy_works());
            tx.enable_single_copy();
        }
        let mut rx = Incoming::default();
        let mut got = Vec::new();
        let mut queued = 0;
        // Each pass over the steps ends with a push and a drain, so every run finishes.
        let pass = steps.into_iter().chain([0, 1, 2]).collect::<Vec<_>>();
        let mut steps = pass.iter().copied().cycle();
        while got.len() < sizes.len() {
            match steps.next().unwrap() {
                0 if queued < sizes.len() => {
                    tx.enqueue(head(queued), msg(queued, sizes[queued]));
                    queued += 1;
                }
                1 => { tx.push(&ring).unwrap(); }
                _ => {
                    if queued == sizes.len() {
                        tx.push(&ring).unwrap();
                    }
                    rx.drain(&ring, 1 << 20, |h, b| got.push((h, b))).unwrap();
                }
            }
        }
        for (i, (h, b)) in got.iter().enumerate() {
            prop_assert_eq!(*h, head(i));
            prop_assert_eq!(b, &msg(i, sizes[i]));
        }
        prop_assert!(tx.is_empty());
        prop_assert!(!rx.in_message());
    }

    /// Garbage in the ring's data and positions gives a typed error or nothing, never a
    /// panic, and never more than the limit's worth of memory.
    #[test]
    fn garbage_from_a_peer_is_an_error_not_a_crash(
        data in prop::collection::vec(any::<u8>(), 0..8192),
        tail in prop_oneof![0u64..9000, any::<u64>()],
        head_pos in prop_oneof![Just(0u64), any::<u64>()],
    ) {
        let seg = Segment::create("t", Layout::new(1, 4096).unwrap()).unwrap();
        let base = RINGS + 192;
        rustix::io::pwrite(seg.fd(), &data[..data.len().min(4096)], base).unwrap();
        rustix::io::pwrite(seg.fd(), &tail.to_le_bytes(), RINGS).unwrap();
        rustix::io::pwrite(seg.fd(), &head_pos.to_le_bytes(), RINGS + 64).unwrap();
        let ring = seg.ring(0);
        let mut rx = Incoming::default();
        let mut n = 0;
        let _ = rx.drain(&ring, 1 << 16, |_, b| { n += 1; assert!(b.len() <= 1 << 16); });
        // The producer side checks the consumer's position too.
        let mut tx = Outgoing::default();
        tx.enqueue(head(0), msg(0, 100));
        let _ = tx.push(&ring);
    }
}

#[test]
fn corrupt_records_are_named_errors() {
    let seg = Segment::create("t", Layout::new(1, 4096).unwrap()).unwrap();
    let ring = seg.ring(0);
    // A record claiming more than was published.
    let mut rec = [0u8; 32];
    rec[0..4].copy_from_slice(&1000u32.to_le_bytes());
    rec[4..8].copy_from_slice(&1u32.to_le_bytes());
    rec[24..32].copy_from_slice(&1000u64.to_le_bytes());
    rustix::io::pwrite(seg.fd(), &rec, RINGS + 192).unwrap();
    rustix::io::pwrite(seg.fd(), &64u64.to_le_bytes(), RINGS).unwrap();
    let e = Incoming::default()
        .drain(&ring, 1 << 20, |_, _| panic!("nothing is whole"))
        .unwrap_err();
    assert!(e.0.contains("overruns"), "{e}");
    // A message over the limit.
    rustix::io::pwrite(seg.fd(), &1032u64.to_le_bytes(), RINGS).unwrap();
    let e = Incoming::default()
        .drain(&ring, 100, |_, _| panic!("refused"))
        .unwrap_err();
    assert!(e.0.contains("limit"), "{e}");
    // A single-copy record naming memory the peer does not have.
    let mut rec = [0u8; 64];
    rec[0..4].copy_from_slice(&32u32.to_le_bytes());
    rec[4..8].copy_from_slice(&4u32.to_le_bytes());
    rec[24..32].copy_from_slice(&100_000u64.to_le_bytes());
    rec[32..36].copy_from_slice(&std::process::id().to_le_bytes());
    rec[40..48].copy_from_slice(&8u64.to_le_bytes()); // address 8: never mapped
    rec[48..56].copy_from_slice(&100_000u64.to_le_bytes());
    rustix::io::pwrite(seg.fd(), &rec, RINGS + 192).unwrap();
    rustix::io::pwrite(seg.fd(), &64u64.to_le_bytes(), RINGS).unwrap();
    let e = Incoming::default()
        .drain(&ring, 1 << 20, |_, _| panic!("refused"))
        .unwrap_err();
    assert!(e.0.contains("single-copy read"), "{e}");
    // A producer position far ahead.
    rustix::io::pwrite(seg.fd(), &(1u64 << 40).to_le_bytes(), RINGS).unwrap();
    let e = Incoming::default()
        .drain(&ring, 1 << 20, |_, _| ())
        .unwrap_err();
    assert!(e.0.contains("producer position"), "{e}");
}

#[test]
fn endpoints_report_a_corrupt_ring_with_the_peer_and_stop_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut eps = endpoints(dir.path(), 3, 4096);
    eps[2].send(0, head(1), msg(1, 10)).unwrap();
    eps[1].send(0, head(2), msg(2, 10)).unwrap();
    // Process 1 then scribbles over what it published in process 0's inbox.
    let seg_of_0 = {
        let s = std::fs::read_to_string(&eps[0].files().pointer).unwrap();
        let mut it = s.split_whitespace();
        let (pid, fd) = (it.next().unwrap(), it.next().unwrap());
        std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/{pid}/fd/{fd}"))
            .unwrap()
    };
    let ring1 = RINGS + (192 + 4096) as u64;
    rustix::io::pwrite(&seg_of_0, &[0xff; 48], ring1 + 192).unwrap();
    let mut got = Vec::new();
    let e = eps[0].progress(|s, h, b| got.push((s, h, b))).unwrap_err();
    assert!(
        matches!(&e, ShmError::Corrupt { slot: 1, .. }),
        "{e}: the error names process 1"
    );
    // Process 2's message still arrives, and the corrupt ring is not read again.
    assert_eq!(got, vec![(2, head(1), msg(1, 10))]);
    eps[2].send(0, head(3), msg(3, 5)).unwrap();
    got.clear();
    eps[0].progress(|s, h, b| got.push((s, h, b))).unwrap();
    assert_eq!(got, vec![(2, head(3), msg(3, 5))]);
}

#[test]
fn segments_that_are_not_sealed_or_not_ours_are_refused() {
    let seg = Segment::create("t", Layout::new(2, 4096).unwrap()).unwrap();
    let dup = || seg.fd().try_clone_to_owned().unwrap();
    let me = std::process::id();
    assert!(Segment::open(dup(), me, 2, "x").is_ok());
    let e = Segment::open(dup(), me + 1, 2, "x").err().unwrap();
    assert!(e.to_string().contains("made by process"), "{e}");
    let e = Segment::open(dup(), me, 3, "x").err().unwrap();
    assert!(e.to_string().contains("expected 3"), "{e}");
    // A plain file could be truncated under the mapping.
    let f = tempfile::tempfile().unwrap();
    let e = Segment::open(f.into(), me, 2, "x").err().unwrap();
    assert!(e.to_string().contains("seal"), "{e}");
    // An unsealed memfd with a copied header.
    let m = rustix::fs::memfd_create("u", rustix::fs::MemfdFlags::empty()).unwrap();
    let mut h = vec![0u8; Layout::new(2, 4096).unwrap().len()];
    rustix::io::pread(seg.fd(), &mut h, 0).unwrap();
    rustix::io::pwrite(&m, &h, 0).unwrap();
    let e = Segment::open(m, me, 2, "x").err().unwrap();
    assert!(e.to_string().contains("seal"), "{e}");
    assert!(Layout::new(2, 5000).is_err());
    assert!(Layout::new(0, 4096).is_err());
}

#[test]
fn files_planted_in_advance_are_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let files = PeerFiles::beside(&dir.path().join("p"));
    std::fs::write(&files.bell, b"").unwrap();
    let e = Endpoint::create(0, Layout::new(2, 4096).unwrap(), files.clone(), 1 << 20)
        .err()
        .unwrap();
    assert!(e.to_string().contains("creating"), "{e}");
    std::fs::remove_file(&files.bell).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &files.pointer).unwrap();
    assert!(Endpoint::create(0, Layout::new(2, 4096).unwrap(), files, 1 << 20).is_err());
}

/// Drains `ep` until `n` messages came, blocking on the bell between tries.
fn receive(ep: &mut Endpoint, n: usize, got: &mut Vec<(usize, MsgHead, Bytes)>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < n {
        assert!(Instant::now() < deadline, "{} of {n} messages", got.len());
        if !ep.progress(|s, h, b| got.push((s, h, b))).unwrap() && ep.prepare_sleep().unwrap() {
            ep.bell().wait(Duration::from_millis(200));
            ep.woke();
        }
    }
}

/// Keeps pushing `ep`'s backlog, blocking on the bell while the receiver has no room;
/// what arrives meanwhile goes to `got`.
fn flush(ep: &mut Endpoint, got: &mut Vec<(usize, MsgHead, Bytes)>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while ep.backlog() {
        assert!(Instant::now() < deadline, "backlog never drained");
        if !ep.progress(|s, h, b| got.push((s, h, b))).unwrap() && ep.prepare_sleep().unwrap() {
            ep.bell().wait(Duration::from_millis(200));
            ep.woke();
        }
    }
}

#[test]
fn two_threads_stream_through_a_small_ring() {
    let dir = tempfile::tempdir().unwrap();
    let mut eps = endpoints(dir.path(), 2, 4096);
    let mut b = eps.pop().unwrap();
    let mut a = eps.pop().unwrap();
    let sizes: Vec<usize> = (0..300).map(|i| (i * 977) % 20000).collect();
    let want = sizes.clone();
    let t = std::thread::spawn(move || {
        for (i, &s) in sizes.iter().enumerate() {
            a.send(1, head(i), msg(i, s)).unwrap();
        }
        flush(&mut a, &mut Vec::new());
        a
    });
    let mut got = Vec::new();
    receive(&mut b, want.len(), &mut got);
    let a = t.join().unwrap();
    for (i, (s, h, m)) in got.iter().enumerate() {
        assert_eq!((*s, *h), (0, head(i)));
        assert_eq!(m, &msg(i, want[i]));
    }
    assert_eq!(a.stats().sent, 300);
    assert_eq!(b.stats().received, 300);
}

const CHILD: &str = "VARGR_SHM_TEST_CHILD";

/// The child half of `two_processes_exchange_both_ways`: runs only when started by it.
#[test]
fn child_process_half() {
    let Ok(dir) = std::env::var(CHILD) else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    let mine = PeerFiles::beside(&dir.join("p1"));
    let mut ep = Endpoint::create(1, Layout::new(2, 8192).unwrap(), mine, 1 << 26).unwrap();
    ep.locate(0, PeerFiles::beside(&dir.join("p0")));
    std::fs::write(dir.join("ready"), b"").unwrap();
    // Echo every message back, one larger than the ring included.
    let mut got = Vec::new();
    receive(&mut ep, 50, &mut got);
    for (_, h, b) in got {
        ep.send(0, h, b).unwrap();
    }
    flush(&mut ep, &mut Vec::new());
}

#[test]
fn two_processes_exchange_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_half",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, dir.path())
        .spawn()
        .unwrap();
    let mine = PeerFiles::beside(&dir.path().join("p0"));
    let mut ep = Endpoint::create(0, Layout::new(2, 8192).unwrap(), mine, 1 << 26).unwrap();
    ep.locate(1, PeerFiles::beside(&dir.path().join("p1")));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.path().join("ready").exists() {
        assert!(Instant::now() < deadline, "the child never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Some messages larger than the ring, some large enough for single copy.
    let sizes: Vec<usize> = (0..50)
        .map(|i| (i * 7919) % 50000 + (i % 3) * 300_000)
        .collect();
    for (i, &s) in sizes.iter().enumerate() {
        ep.send(1, head(i), msg(i, s)).unwrap();
    }
    let mut got = Vec::new();
    flush(&mut ep, &mut got);
    receive(&mut ep, sizes.len(), &mut got);
    for (i, (s, h, m)) in got.iter().enumerate() {
        assert_eq!((*s, *h), (1, head(i)));
        assert_eq!(m, &msg(i, sizes[i]));
    }
    assert!(child.wait().unwrap().success());
    assert!(ep.stats().single_copy > 0, "{:?}", ep.stats());
    let _ = ep.bell().fd().as_fd();
}

/// Ranks meet in an area: every waiter wakes when the last one publishes (a futex wake
/// of one waiter would leave the others blocked), results are whole, and deposits that
/// do not fit are refused.
#[test]
fn ranks_meet_in_an_area_and_all_wake() {
    use std::sync::Arc;
    use vargr_shm::{Area, Outcome};
    let n = 6;
    let area = Arc::new(Area::create("t", n, 64).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    for round in 0..20u8 {
        for r in 0..n {
            let (area, tx) = (area.clone(), tx.clone());
            std::thread::spawn(move || {
                let gen = area.generation();
                area.deposit(r, &[round, r as u8]).unwrap();
                if area.arrive() {
                    // The last sums the second bytes in rank order.
                    let mut sum = 0u8;
                    let mut slot = Vec::new();
                    for q in 0..area.ranks() {
                        area.read_slot(q, &mut slot).unwrap();
                        assert_eq!(slot[0], round);
                        sum += slot[1];
                    }
                    area.publish(gen, Ok(&[round, sum]));
                } else {
                    // A slice far longer than the test's deadline: only a wake ends it.
                    while !area.wait(gen, 0, Duration::from_secs(3600)) {}
                }
                let mut out = [0u8; 2];
                assert!(matches!(area.result(&mut out).unwrap(), Outcome::Done));
                tx.send(out).unwrap();
            });
        }
        for _ in 0..n {
            let out = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("a waiter never woke");
            assert_eq!(out, [round, (0..n as u8).sum::<u8>()]);
        }
    }
    assert!(area.deposit(0, &[0u8; 65]).is_err());
    assert!(area.deposit(n, &[0u8; 8]).is_err());
    // Parts of a deposit and of the result area are bounded by what was deposited and
    // by the slot.
    area.deposit(1, &[7u8; 40]).unwrap();
    let mut part = [0u8; 16];
    area.read_slot_part(1, 24, &mut part).unwrap();
    assert_eq!(part, [7u8; 16]);
    assert!(area.read_slot_part(1, 32, &mut part).is_err());
    assert!(area.read_slot_part(n, 0, &mut part).is_err());
    assert!(area.write_result_part(56, &part).is_err());
    assert!(area.write_result_part(usize::MAX, &part).is_err());
    area.write_result_part(48, &part).unwrap();
    // A split round keeps the first reason it failed for, until it is cleared.
    assert_eq!(area.failure(), None);
    area.fail("rank 1: operator refused");
    area.fail("rank 2: another reason");
    assert_eq!(area.failure().as_deref(), Some("rank 1: operator refused"));
    area.clear_failure();
    assert_eq!(area.failure(), None);
    // A peer's length beyond the slot is refused when read (the lengths start at byte
    // 576 of the area, see its layout).
    let lens = 576 + 8 * 2;
    rustix::io::pwrite(area.fd(), &1000u64.to_le_bytes(), lens).unwrap();
    assert!(area.read_slot(2, &mut Vec::new()).is_err());
    let other = Area::open(
        area.fd().try_clone_to_owned().unwrap(),
        std::process::id(),
        n,
        64,
        "x",
    );
    assert!(other.is_ok());
    let wrong = Area::open(
        area.fd().try_clone_to_owned().unwrap(),
        std::process::id(),
        n + 1,
        64,
        "x",
    );
    assert!(wrong.is_err());
}
