//! Stream behaviour under load with real processes: latest mode, backpressure, and the
//! front-end's blocking `recv`.

mod common;

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use vargr_tbon::{NetworkOptions, Packet, StreamOptions, SyncMode, TbonError, Value};

/// Sends 500 increasing values down a latest-mode pass-through stream, waits without
/// reading, then drains: every back-end's newest echo (499) must be among what arrives,
/// and nothing arrives more often than it was sent.
fn latest_keeps_the_newest(spec: &str) {
    const SENT: i32 = 500;
    let net = start(spec, "echo", opts());
    let n = net.num_backends();
    let s = net
        .open_stream(
            &net.broadcast_communicator(),
            StreamOptions::new("null").sync(SyncMode::DontWait).latest(),
        )
        .unwrap();
    for i in 0..SENT {
        s.send(TAG_ECHO, "%d", vec![Value::Int(i)]).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut got: Vec<Packet> = Vec::new();
    let guard = Instant::now() + Duration::from_secs(20);
    while let Some(p) = s.recv_timeout(Duration::from_millis(200)).unwrap() {
        got.push(p);
        assert!(
            Instant::now() < guard,
            "{spec}: drain did not end (hang guard)"
        );
    }
    let mut last: BTreeMap<u32, i64> = BTreeMap::new();
    let mut per_source: BTreeMap<u32, usize> = BTreeMap::new();
    for p in &got {
        let v = first_int(p);
        let prev = last.insert(p.source, v);
        assert!(
            prev.is_none_or(|pv| pv < v),
            "{spec}: back-end {} went from {prev:?} back to {v}",
            p.source
        );
        *per_source.entry(p.source).or_default() += 1;
    }
    eprintln!(
        "{spec}: latest mode: {} packets for {} sent to {n} back-ends; per back-end {per_source:?}; newest {last:?}",
        got.len(),
        SENT as usize * n
    );
    assert!(
        got.len() <= SENT as usize * n,
        "{spec}: {} packets",
        got.len()
    );
    let missing: Vec<u32> = (0..n as u32)
        .filter(|r| last.get(r) != Some(&(SENT as i64 - 1)))
        .collect();
    assert!(
        missing.is_empty(),
        "{spec}: the newest echo (499) of back-ends {missing:?} never arrived; newest seen per back-end: {last:?}"
    );
    let _ = net.shutdown();
}

#[test]
fn latest_mode_one_backend_keeps_the_newest() {
    latest_keeps_the_newest("flat:1");
}

#[test]
fn latest_mode_keeps_every_backends_newest() {
    latest_keeps_the_newest("flat:4");
}

#[test]
fn latest_mode_keeps_every_backends_newest_through_commnodes() {
    latest_keeps_the_newest("1x2x4");
}

const KIB: usize = 1024;

fn kib_packet(i: i32) -> Vec<Value> {
    let mut v = vec![1i32; 256];
    v[0] = i;
    vec![Value::IntArray(v)]
}

fn check_kib_sum(p: &Packet, i: i32, n: i32) {
    match p.values.first() {
        Some(Value::IntArray(v)) => {
            assert_eq!(v.len(), 256);
            assert_eq!(v[0], i * n, "wave {i} out of order or wrong");
            assert!(v[1..].iter().all(|&x| x == n), "wave {i}: {:?}", &v[..8]);
        }
        other => panic!("wave {i}: {other:?}"),
    }
}

fn small_queue() -> NetworkOptions {
    NetworkOptions {
        queue_limit: 64 * KIB,
        ..opts()
    }
}

/// With a 64 KiB queue limit, a front-end that keeps a bounded window of waves in flight
/// (32 KiB down each link, 32 results at most unread) gets every one of 5000 1-KiB sums
/// back, in order: a small limit does not disturb the ordinary pipelined pattern.
#[test]
fn backpressure_windowed_sends_complete() {
    const WAVES: i32 = 5_000;
    const WINDOW: i32 = 32;
    let net = start("1x2x4", "echo", small_queue());
    let n = net.num_backends() as i32;
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    let guard = Duration::from_secs(60);
    let t = Instant::now();
    let mut sent = 0;
    for i in 0..WAVES {
        while sent < WAVES && sent < i + WINDOW {
            s.send(TAG_ECHO, "%ad", kib_packet(sent)).unwrap();
            sent += 1;
        }
        let p = recv_ok(&s, guard.saturating_sub(t.elapsed()));
        check_kib_sum(&p, i, n);
    }
    net.shutdown().unwrap();
}

/// Sending 20,000 1 KiB waves without receiving any result, with a 64 KiB queue limit:
/// memory stays bounded, so the tree fills up and the sender cannot go on. It must get a
/// clear flow-control error (not hang, not tear the tree down), and every wave it did
/// send must then come back, in order and correct.
#[test]
fn backpressure_send_all_then_read_all() {
    const WAVES: i32 = 20_000;
    let net = start("1x2x4", "echo", small_queue());
    let n = net.num_backends() as i32;
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let sender = std::thread::spawn(move || {
        for i in 0..WAVES {
            if let Err(e) = s.send(TAG_ECHO, "%ad", kib_packet(i)) {
                let _ = tx.send(Err(e));
                return (s, i);
            }
            let _ = tx.send(Ok(i));
        }
        (s, WAVES)
    });
    // Hang guard only: the sender must either finish or stop with an error.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut error = None;
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Ok(i)) if i == WAVES - 1 => break,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                error = Some(e);
                break;
            }
            Err(_) => panic!("deadlock: Stream::send neither finished nor failed"),
        }
    }
    let (s, sent) = sender.join().unwrap();
    if let Some(e) = &error {
        assert!(
            matches!(e, TbonError::Backpressure(_)),
            "unexpected error: {e}"
        );
        assert!(e.to_string().contains("receive"), "{e}");
    }
    assert!(sent > 0);
    for i in 0..sent {
        let r = recv_within(&s, Duration::from_secs(30));
        let first = match &r {
            Ok(p) => match p.values.first() {
                Some(Value::IntArray(v)) => v.first().copied(),
                _ => None,
            },
            Err(_) => None,
        };
        if first != Some(i * n) {
            panic!(
                "wave {i} of {sent}: expected {} in the first element, got {:?}; \
                 faults so far: {:?}",
                i * n,
                r.map(|_| first),
                net.faults()
            );
        }
        check_kib_sum(r.as_ref().unwrap(), i, n);
    }
    assert!(net.faults().is_empty(), "{:?}", net.faults());
    net.shutdown().unwrap();
}

/// A front-end that reads its results late (3 s after sending, twice the heartbeat
/// time-out) must still get all of them, and no node may be declared lost.
fn late_reader(queue_limit: usize) {
    const WAVES: i32 = 200;
    let net = start(
        "flat:2",
        "echo",
        NetworkOptions {
            queue_limit,
            ..opts()
        },
    );
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    for i in 0..WAVES {
        s.send(TAG_ECHO, "%d", vec![Value::Int(i)]).unwrap();
    }
    std::thread::sleep(Duration::from_secs(3));
    for i in 0..WAVES {
        let r = recv_within(&s, Duration::from_secs(10));
        match r {
            Ok(p) => assert_eq!(first_int(&p), 2 * i as i64, "wave {i}"),
            Err(e) => panic!("wave {i} of {WAVES} after a 3 s pause in reading: {e}"),
        }
    }
    assert!(net.faults().is_empty(), "{:?}", net.faults());
    net.shutdown().unwrap();
}

/// Default limits: 200 unread results are far below the front-end's pause threshold, so
/// the keeper thread keeps every link alive while the user is away.
#[test]
fn late_reader_keeps_its_tree() {
    late_reader(NetworkOptions::default().queue_limit);
}

/// With a 64 KiB queue limit the front-end pauses reading its children once 64 results
/// wait unread; a paused link receives no heartbeats either, and after
/// `heartbeat_timeout` the front-end declares its (live) children dead.
#[test]
fn late_reader_over_the_pause_threshold_keeps_its_tree() {
    late_reader(64 * KIB);
}

/// The front-end's plain `Stream::recv` (no deadline) must not miss a result. The engine
/// lets a waiting thread sleep on a condition variable while another thread (the keeper,
/// every heartbeat/2) holds the reactor; a short heartbeat makes that overlap frequent.
#[test]
fn plain_recv_never_loses_a_wakeup() {
    const TRIPS: i32 = 3000;
    let net = start(
        "flat:2",
        "echo",
        NetworkOptions {
            heartbeat: Duration::from_millis(2),
            heartbeat_timeout: Duration::from_secs(30),
            ..opts()
        },
    );
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for i in 0..TRIPS {
            s.send(TAG_ECHO, "%d", vec![Value::Int(i)]).unwrap();
            let p = s.recv().unwrap();
            assert_eq!(first_int(&p), 2 * i as i64);
            if tx.send(i).is_err() {
                return;
            }
        }
    });
    let mut done = -1;
    while done < TRIPS - 1 {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(i) => done = i,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "Stream::recv hung after {} of {TRIPS} round trips (lost wake-up; hang guard 10 s)",
                done + 1
            ),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("the round-trip thread failed after {} trips", done + 1)
            }
        }
    }
    net.shutdown().unwrap();
}

/// Two front-end threads, each with its own stream, both in plain `Stream::recv`: the
/// one that polls the reactor must not leave the other asleep with its result delivered.
#[test]
fn concurrent_recv_on_two_streams_from_two_threads() {
    const TRIPS: i32 = 500;
    let net = start("flat:2", "echo", opts());
    let (tx, rx) = mpsc::channel();
    for t in 0..2 {
        let s = net
            .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
            .unwrap();
        let tx = tx.clone();
        std::thread::spawn(move || {
            for i in 0..TRIPS {
                s.send(TAG_ECHO, "%d", vec![Value::Int(i)]).unwrap();
                let p = s.recv().unwrap();
                assert_eq!(first_int(&p), 2 * i as i64);
                if tx.send((t, i)).is_err() {
                    return;
                }
            }
        });
    }
    drop(tx);
    let mut done = [-1, -1];
    while done.iter().any(|&d| d < TRIPS - 1) {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok((t, i)) => done[t] = i,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "Stream::recv hung: round trips done per thread {:?} of {TRIPS} (hang guard 10 s)",
                done.map(|d| d + 1)
            ),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("a round-trip thread failed: {:?}", done.map(|d| d + 1))
            }
        }
    }
    net.shutdown().unwrap();
}
