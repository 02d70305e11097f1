//! Whole trees in one process (threads launcher, real Unix sockets): streams, filters,
//! point-to-point, latest mode, faults and shutdown.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vargr_tbon::{
    Backend, BackendSpec, Network, NetworkOptions, StreamOptions, SyncMode, TbonError, Value,
};
use vargr_topo::Topology;

const TAG_ECHO: i32 = 1;
const TAG_RANK: i32 = 2;
const TAG_P2P: i32 = 3;
const TAG_SLOW: i32 = 4;
const TAG_DIE: i32 = 5;

fn serve(be: Backend) {
    loop {
        let p = match be.recv() {
            Ok(p) => p,
            Err(_) => return,
        };
        let r = match p.tag {
            TAG_ECHO => be.send(p.stream, p.tag, p.format.as_str(), p.values.clone()),
            TAG_RANK => be.send(
                p.stream,
                p.tag,
                "%d %alf",
                vec![
                    Value::Int(be.rank() as i32),
                    Value::DoubleArray(vec![be.rank() as f64, 1.0]),
                ],
            ),
            TAG_P2P => {
                // Forward to the next back-end; the message returns to the stream when it
                // reaches its destination.
                let Some(Value::UInt(dest)) = p.values.first() else {
                    continue;
                };
                if p.source == u32::MAX {
                    be.send_to(
                        *dest,
                        TAG_P2P,
                        "%ud %ud",
                        vec![Value::UInt(*dest), p.values[1].clone()],
                    )
                } else {
                    let Some(Value::UInt(stream)) = p.values.get(1) else {
                        continue;
                    };
                    be.send(
                        *stream,
                        TAG_P2P,
                        "%ud %ud",
                        vec![Value::UInt(p.source), Value::UInt(be.rank())],
                    )
                }
            }
            TAG_SLOW => {
                std::thread::sleep(Duration::from_millis(50));
                be.send(p.stream, p.tag, "%d", vec![Value::Int(1)])
            }
            TAG_DIE => return,
            _ => Ok(()),
        };
        if r.is_err() {
            return;
        }
    }
}

fn start(spec: &str) -> Network {
    let topo = Topology::generate(spec).unwrap();
    Network::new(topo, BackendSpec::threads(serve), NetworkOptions::default()).unwrap()
}

#[test]
fn multicast_and_sum_on_several_shapes() {
    for spec in ["flat:5", "kary:2@7", "1x3x9", "binomial@8"] {
        let net = start(spec);
        let n = net.num_backends() as i32;
        let s = net
            .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
            .unwrap();
        for i in 0..50 {
            s.send(
                TAG_ECHO,
                "%d %alf",
                vec![Value::Int(i), Value::DoubleArray(vec![0.5, i as f64])],
            )
            .unwrap();
            let p = s.recv().unwrap();
            assert_eq!(p.values[0], Value::Int(i * n), "{spec}");
            assert_eq!(
                p.values[1],
                Value::DoubleArray(vec![0.5 * n as f64, (i * n) as f64]),
                "{spec}"
            );
        }
        net.shutdown().unwrap();
    }
}

#[test]
fn min_max_and_sub_communicators() {
    let net = start("1x2x6");
    let comm = net.communicator(&[1, 3, 4]).unwrap();
    let mx = net.open_stream(&comm, StreamOptions::new("max")).unwrap();
    let mn = net.open_stream(&comm, StreamOptions::new("min")).unwrap();
    mx.send(TAG_RANK, "", vec![]).unwrap();
    mn.send(TAG_RANK, "", vec![]).unwrap();
    assert_eq!(mx.recv().unwrap().values[0], Value::Int(4));
    assert_eq!(mn.recv().unwrap().values[0], Value::Int(1));
    assert!(net.communicator(&[9]).is_err());
    assert!(net.communicator(&[]).is_err());
    net.shutdown().unwrap();
}

#[test]
fn many_concurrent_streams_keep_their_waves_apart() {
    let net = Arc::new(start("kary:3@9"));
    let threads: Vec<_> = (0..4)
        .map(|k| {
            let net = net.clone();
            std::thread::spawn(move || {
                let s = net
                    .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
                    .unwrap();
                for i in 0..100 {
                    s.send(TAG_ECHO, "%ld", vec![Value::Long(k * 1000 + i)])
                        .unwrap();
                    assert_eq!(s.recv().unwrap().values[0], Value::Long(9 * (k * 1000 + i)));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    Arc::try_unwrap(net).ok().unwrap().shutdown().unwrap();
}

#[test]
fn pipelined_waves_arrive_in_order() {
    let net = start("1x2x4");
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    for i in 0..200 {
        s.send(TAG_ECHO, "%d", vec![Value::Int(i)]).unwrap();
    }
    for i in 0..200 {
        assert_eq!(s.recv().unwrap().values[0], Value::Int(4 * i));
    }
    net.shutdown().unwrap();
}

#[test]
fn backend_to_backend_routed_through_the_tree() {
    let net = start("1x2x4");
    let s = net
        .open_stream(
            &net.communicator(&[0]).unwrap(),
            StreamOptions::new("null").sync(SyncMode::DontWait),
        )
        .unwrap();
    let report = net
        .open_stream(
            &net.broadcast_communicator(),
            StreamOptions::new("null").sync(SyncMode::DontWait),
        )
        .unwrap();
    // Back-end 0 sends to back-end 3 (other sub-tree); 3 reports on `report`.
    s.send(
        TAG_P2P,
        "%ud %ud",
        vec![Value::UInt(3), Value::UInt(report.id())],
    )
    .unwrap();
    let p = report.recv_timeout(Duration::from_secs(5)).unwrap();
    let p = p.expect("the destination reports back");
    assert_eq!(p.values, vec![Value::UInt(0), Value::UInt(3)]);
    net.shutdown().unwrap();
}

#[test]
fn dont_wait_passes_every_packet() {
    let net = start("kary:2@4");
    let s = net
        .open_stream(
            &net.broadcast_communicator(),
            StreamOptions::new("null").sync(SyncMode::DontWait),
        )
        .unwrap();
    s.send(TAG_RANK, "", vec![]).unwrap();
    let mut ranks: Vec<i32> = (0..4)
        .map(|_| match s.recv().unwrap().values[0] {
            Value::Int(r) => r,
            _ => -1,
        })
        .collect();
    ranks.sort();
    assert_eq!(ranks, vec![0, 1, 2, 3]);
    net.shutdown().unwrap();
}

#[test]
fn timeout_sync_releases_partial_waves() {
    let net = start("flat:3");
    let s = net
        .open_stream(
            &net.broadcast_communicator(),
            StreamOptions::new("sum").sync(SyncMode::TimeOut(Duration::from_millis(20))),
        )
        .unwrap();
    s.send(TAG_SLOW, "", vec![]).unwrap();
    // Slow back-ends answer after 50 ms; with a 20 ms time-out the first wave may be
    // partial, but every contribution arrives in some wave and nothing is lost.
    let mut total = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while total < 3 && Instant::now() < deadline {
        if let Some(p) = s.recv_timeout(Duration::from_millis(200)).unwrap() {
            if let Value::Int(v) = p.values[0] {
                total += v;
            }
        }
    }
    assert_eq!(total, 3);
    net.shutdown().unwrap();
}

#[test]
fn lost_backend_is_reported_on_the_stream_and_others_go_on() {
    let net = start("1x2x4");
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    let kill = net
        .open_stream(&net.communicator(&[2]).unwrap(), StreamOptions::new("null"))
        .unwrap();
    kill.send(TAG_DIE, "", vec![]).unwrap();
    let err = s
        .recv_timeout(Duration::from_secs(3))
        .expect_err("the loss is reported as an error on the stream");
    match &err {
        TbonError::NodeLost { backends, .. } => assert_eq!(backends, &vec![2]),
        other => panic!("unexpected error {other}"),
    }
    assert!(err.to_string().contains("back-ends lost: 2"), "{err}");
    // The survivors still reduce.
    s.send(TAG_ECHO, "%d", vec![Value::Int(5)]).unwrap();
    assert_eq!(s.recv().unwrap().values[0], Value::Int(15));
    assert_eq!(net.faults().len(), 1);
    net.shutdown().unwrap();
}

#[test]
fn every_backend_starts_and_shutdown_is_clean() {
    let started = Arc::new(AtomicUsize::new(0));
    let c = started.clone();
    let topo = Topology::generate("kary:4@16").unwrap();
    let net = Network::new(
        topo,
        BackendSpec::threads(move |be| {
            c.fetch_add(1, Ordering::SeqCst);
            serve(be)
        }),
        NetworkOptions::default(),
    )
    .unwrap();
    // A back-end counts as up once it has joined, which is before its body runs; a
    // reduction over all of them proves every body is running.
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    s.send(TAG_ECHO, "%d", vec![Value::Int(1)]).unwrap();
    assert_eq!(s.recv().unwrap().values[0], Value::Int(16));
    assert_eq!(started.load(Ordering::SeqCst), 16);
    net.shutdown().unwrap();
}

#[test]
fn unknown_filter_is_a_clear_error() {
    let net = start("flat:2");
    let e = net
        .open_stream(
            &net.broadcast_communicator(),
            StreamOptions::new("nosuchfilter"),
        )
        .err()
        .expect("must fail");
    assert!(matches!(e, TbonError::BadStream(_)), "{e}");
    net.shutdown().unwrap();
}

#[test]
fn a_receive_blocked_at_shutdown_ends_with_a_shutdown_error() {
    let net = start("kary:2@4");
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(s.recv()));
    // Nothing was sent, so the receive blocks until the network goes.
    std::thread::sleep(std::time::Duration::from_millis(100));
    net.shutdown().unwrap();
    match rx.recv_timeout(std::time::Duration::from_secs(20)) {
        Ok(Err(vargr_tbon::TbonError::Shutdown)) => {}
        Err(_) => panic!("the receive was still blocked 20 s after the shutdown"),
        Ok(other) => panic!("expected a shutdown error, got {other:?}"),
    }
}
