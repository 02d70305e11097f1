//! Point-to-point semantics as MPI defines them, on real threads over the in-process
//! transport: wildcards, posted-order matching of non-blocking receives, probes,
//! cancellation and misuse.

mod common;

use bytes::Bytes;
use common::*;
use vargr_coll::{CollError, Comm, Op};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn text(data: &[u8]) -> String {
    String::from_utf8(data.to_vec()).unwrap()
}

#[test]
fn any_source_gets_every_sender_and_any_tag_keeps_each_senders_order() {
    run_ranks(4, None, |comm: Comm| {
        let (me, p) = (comm.rank(), comm.size());
        if me == 0 {
            let mut got = vec![Vec::new(); p];
            for _ in 0..3 * (p - 1) {
                let r = comm.recv_any(None, None).unwrap();
                got[r.source].push((r.tag, text(&r.data)));
            }
            for (src, msgs) in got.iter().enumerate().skip(1) {
                let want: Vec<_> = (0..3).map(|i| (10 - i, format!("{src}:{i}"))).collect();
                assert_eq!(msgs, &want, "messages of rank {src} out of order");
            }
        } else {
            for i in 0..3u64 {
                // Decreasing tags: order must come from arrival, not from the tag.
                comm.send_bytes(0, 10 - i, b(&format!("{me}:{i}"))).unwrap();
            }
        }
    });
}

#[test]
fn receives_match_in_the_order_they_were_posted() {
    run_ranks(3, None, |comm: Comm| match comm.rank() {
        0 => {
            // Posted: any source and tag, then (1, 5), then (any, 5).
            let any = comm.irecv(None, None).unwrap();
            let from1 = comm.irecv(Some(1), Some(5)).unwrap();
            let any5 = comm.irecv(None, Some(5)).unwrap();
            comm.send_bytes(1, 0, b("go")).unwrap();
            let a = comm.wait(any).unwrap().unwrap();
            let c = comm.wait(any5).unwrap().unwrap();
            let f = comm.wait(from1).unwrap().unwrap();
            // Rank 1 sends (5,"first") then (5,"second"); rank 2 sends nothing here.
            assert_eq!((a.source, a.tag, text(&a.data)), (1, 5, "first".into()));
            assert_eq!((f.source, text(&f.data)), (1, "second".into()));
            assert_eq!((c.source, c.tag, text(&c.data)), (2, 5, "third".into()));
        }
        1 => {
            comm.recv_bytes(0, 0).unwrap();
            comm.send_bytes(0, 5, b("first")).unwrap();
            comm.send_bytes(0, 5, b("second")).unwrap();
            comm.send_bytes(2, 0, b("go")).unwrap();
        }
        _ => {
            comm.recv_bytes(1, 0).unwrap();
            comm.send_bytes(0, 5, b("third")).unwrap();
        }
    });
}

#[test]
fn a_blocking_receive_after_a_posted_one_gets_the_later_message() {
    run_ranks(2, None, |comm: Comm| {
        if comm.rank() == 0 {
            let early = comm.irecv(Some(1), Some(3)).unwrap();
            let later = comm.recv_bytes(1, 3).unwrap();
            assert_eq!(text(&later), "b");
            assert_eq!(text(&comm.wait(early).unwrap().unwrap().data), "a");
        } else {
            comm.send_bytes(0, 3, b("a")).unwrap();
            comm.send_bytes(0, 3, b("b")).unwrap();
        }
    });
}

#[test]
fn test_wait_any_and_sends_complete_as_requests() {
    run_ranks(3, None, |comm: Comm| {
        if comm.rank() == 0 {
            let r1 = comm.irecv(Some(1), None).unwrap();
            let r2 = comm.irecv(Some(2), None).unwrap();
            let mut left = vec![r1, r2];
            let mut seen = Vec::new();
            comm.send_bytes(2, 9, b("go")).unwrap();
            while !left.is_empty() {
                let (i, m) = comm.wait_any(&left).unwrap();
                let _spent = left.remove(i);
                seen.push(m.unwrap().source);
                if seen.len() == 1 {
                    assert_eq!(seen, [2], "rank 1 sends only after rank 2's message");
                    comm.send_bytes(1, 9, b("go")).unwrap();
                }
            }
            assert_eq!(seen, [2, 1]);
            let s = comm.isend_bytes(1, 8, b("x")).unwrap();
            assert!(comm.test(&s).unwrap().is_some());
            assert!(comm.wait(s).unwrap().is_none());
        } else {
            comm.recv_bytes(0, 9).unwrap();
            comm.send_bytes(0, 1, b("m")).unwrap();
            if comm.rank() == 1 {
                comm.recv_bytes(0, 8).unwrap();
            }
        }
        // A request not yet matched tests as incomplete and stays valid.
        let r = comm.irecv(Some(comm.rank()), Some(77)).unwrap();
        assert!(comm.test(&r).unwrap().is_none());
        comm.send_bytes(comm.rank(), 77, b("self")).unwrap();
        assert_eq!(text(&comm.test(&r).unwrap().unwrap().data), "self");
        // Spent: any further use is a typed error.
        assert!(matches!(comm.test(&r), Err(CollError::BadRequest { .. })));
    });
}

#[test]
fn probe_sees_the_message_the_next_receive_gets() {
    run_ranks(2, None, |comm: Comm| {
        if comm.rank() == 0 {
            assert_eq!(comm.iprobe(Some(1), Some(4)).unwrap(), None);
            comm.send_bytes(1, 0, b("go")).unwrap();
            let st = comm.probe(None, None).unwrap();
            assert_eq!((st.source, st.tag, st.len), (1, 4, 5));
            // Probing again sees the same message; a posted receive takes it first.
            assert_eq!(comm.iprobe(None, None).unwrap(), Some(st));
            let r = comm.recv_any(Some(st.source), Some(st.tag)).unwrap();
            assert_eq!(text(&r.data), "hello");
            let r = comm.recv_bytes(1, 4).unwrap();
            assert_eq!(text(&r), "again");
        } else {
            comm.recv_bytes(0, 0).unwrap();
            comm.send_bytes(0, 4, b("hello")).unwrap();
            comm.send_bytes(0, 4, b("again")).unwrap();
        }
    });
}

#[test]
fn wildcards_never_take_collective_traffic_or_another_communicators_messages() {
    run_ranks(3, None, |comm: Comm| {
        let dup = comm.dup().unwrap();
        if comm.rank() == 0 {
            let r = comm.irecv(None, None).unwrap();
            // Collectives run while the wildcard is posted.
            let mut x = [1u64];
            comm.allreduce(&mut x, &Op::Sum).unwrap();
            assert_eq!(x[0], 3);
            let d = dup.recv_any(None, None).unwrap();
            assert_eq!((d.source, text(&d.data)), (2, "dup".into()));
            let m = comm.wait(r).unwrap().unwrap();
            assert_eq!((m.source, text(&m.data)), (1, "comm".into()));
            // A request of one communicator is refused by another.
            let other = dup.irecv(None, None).unwrap();
            assert!(matches!(
                comm.cancel(other),
                Err(CollError::BadRequest { .. })
            ));
        } else {
            let mut x = [1u64];
            comm.allreduce(&mut x, &Op::Sum).unwrap();
            if comm.rank() == 1 {
                comm.send_bytes(0, 1, b("comm")).unwrap();
            } else {
                dup.send_bytes(0, 1, b("dup")).unwrap();
            }
        }
    });
}

#[test]
fn a_cancelled_receive_leaves_its_message_for_the_next() {
    run_ranks(2, None, |comm: Comm| {
        if comm.rank() == 0 {
            let r = comm.irecv(Some(1), Some(2)).unwrap();
            assert!(comm.cancel(r).unwrap());
            comm.send_bytes(1, 0, b("go")).unwrap();
            assert_eq!(text(&comm.recv_bytes(1, 2).unwrap()), "kept");
        } else {
            comm.recv_bytes(0, 0).unwrap();
            comm.send_bytes(0, 2, b("kept")).unwrap();
        }
    });
}
