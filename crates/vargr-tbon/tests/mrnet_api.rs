//! What MRNet's API offers beyond streams, on whole trees in one process (threads
//! launcher, real Unix sockets): the front-end's receive from any stream, notification
//! descriptors on both sides, per-stream receive on back-ends, changing a stream's
//! filters while it runs, and the tree's events one at a time.

use std::os::fd::RawFd;
use std::time::Duration;

use vargr_tbon::{
    Backend, BackendSpec, FilterRole, Network, NetworkOptions, StreamOptions, TbonError, TreeEvent,
    Value,
};
use vargr_topo::Topology;

/// Back-ends answer "%d" rank + the value sent.
const TAG_ADD: i32 = 1;
/// Back-ends answer on every stream they were told of, one thread per stream, each
/// receiving only its own stream (the value is the number of streams to wait for).
const TAG_THREADS: i32 = 2;
const TAG_DIE: i32 = 3;

fn serve(be: Backend) {
    while let Ok(p) = be.recv() {
        let r = match p.tag {
            TAG_ADD => {
                let Some(Value::Int(v)) = p.values.first() else {
                    continue;
                };
                be.send(
                    p.stream,
                    p.tag,
                    "%d",
                    vec![Value::Int(be.rank() as i32 + v)],
                )
            }
            TAG_THREADS => per_stream_threads(&be, &p.values),
            TAG_DIE => return,
            _ => Ok(()),
        };
        if r.is_err() {
            return;
        }
    }
}

/// One thread per stream id in `values`, each waiting on its own stream (through the
/// back-end's notification descriptor for that stream) and answering 10 * rank + k for
/// the k-th multicast, twice.
fn per_stream_threads(be: &Backend, values: &[Value]) -> Result<(), TbonError> {
    let Some(Value::UIntArray(ids)) = values.first() else {
        return Ok(());
    };
    let threads: Vec<_> = ids
        .iter()
        .map(|&id| {
            let be = be.clone();
            std::thread::spawn(move || -> Result<(), TbonError> {
                let fd = be.notification_fd(Some(id))?;
                for k in 0..2 {
                    assert!(readable(fd, 10_000), "stream {id}: no notification");
                    let p = be
                        .recv_stream(id, Some(Duration::ZERO))?
                        .expect("readable means a packet is there");
                    assert_eq!(p.stream, id);
                    be.send(id, p.tag, "%d", vec![Value::Int(10 * be.rank() as i32 + k)])?;
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().expect("per-stream thread")?;
    }
    Ok(())
}

fn start(spec: &str) -> Network {
    let topo = Topology::generate(spec).unwrap();
    Network::new(topo, BackendSpec::threads(serve), NetworkOptions::default()).unwrap()
}

/// Whether `fd` becomes readable within `ms` milliseconds.
fn readable(fd: RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the duration of the call.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    n == 1 && p.revents & libc::POLLIN != 0
}

#[test]
fn recv_any_serves_every_stream_and_names_it() {
    let net = start("1x2x4");
    let all = net.broadcast_communicator();
    let a = net.open_stream(&all, StreamOptions::new("sum")).unwrap();
    let b = net.open_stream(&all, StreamOptions::new("max")).unwrap();
    for _ in 0..3 {
        a.send(TAG_ADD, "%d", vec![Value::Int(1)]).unwrap();
        b.send(TAG_ADD, "%d", vec![Value::Int(100)]).unwrap();
    }
    let mut order = Vec::new();
    for i in 0..6 {
        let (id, r) = net
            .recv_any(Some(Duration::from_secs(10)))
            .unwrap()
            .expect("a result");
        let v = r.unwrap().values[0].clone();
        if id == a.id() {
            assert_eq!(v, Value::Int(4 + 6));
        } else {
            assert_eq!((id, v), (b.id(), Value::Int(103)));
        }
        order.push(id);
        if i == 0 {
            // Let every other result arrive, so that both streams have some waiting.
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    // Served in turn: with three results on each, the two streams alternate.
    assert!(order.windows(2).all(|w| w[0] != w[1]), "{order:?}");
    assert!(net
        .recv_any(Some(Duration::from_millis(50)))
        .unwrap()
        .is_none());
    // A handle on the stream a result came from answers on that stream.
    let again = net.stream(b.id()).unwrap();
    assert_eq!(again.num_members(), 4);
    again.send(TAG_ADD, "%d", vec![Value::Int(7)]).unwrap();
    assert_eq!(b.recv().unwrap().values[0], Value::Int(10));
    assert!(matches!(net.stream(999), Err(TbonError::NoStream(999))));
    net.shutdown().unwrap();
}

#[test]
fn notification_descriptors_are_readable_exactly_while_results_wait() {
    let net = start("kary:2@4");
    let all = net.broadcast_communicator();
    let a = net.open_stream(&all, StreamOptions::new("sum")).unwrap();
    let b = net.open_stream(&all, StreamOptions::new("sum")).unwrap();
    let any = net.notification_fd(None).unwrap();
    let only_b = net.notification_fd(Some(b.id())).unwrap();
    assert_eq!(net.notification_fd(None).unwrap(), any, "one per kind");
    assert!(net.notification_fd(Some(999)).is_err());
    assert!(!readable(any, 0) && !readable(only_b, 0));
    a.send(TAG_ADD, "%d", vec![Value::Int(0)]).unwrap();
    // Nobody is in the library: the progress thread reads the links.
    assert!(readable(any, 10_000));
    std::thread::sleep(Duration::from_millis(100));
    assert!(!readable(only_b, 0), "a result on a is not one on b");
    // Level-triggered: still readable until the result is taken.
    assert!(readable(any, 0));
    assert_eq!(a.recv().unwrap().values[0], Value::Int(6));
    assert!(!readable(any, 0));
    b.send(TAG_ADD, "%d", vec![Value::Int(0)]).unwrap();
    assert!(readable(only_b, 10_000) && readable(any, 0));
    let (id, _) = net.recv_any(None).unwrap().unwrap();
    assert_eq!(id, b.id());
    assert!(!readable(any, 0) && !readable(only_b, 0));
    net.shutdown().unwrap();
}

#[test]
fn backends_receive_per_stream_on_threads_of_their_own() {
    let net = start("1x2x4");
    let all = net.broadcast_communicator();
    let ctl = net.open_stream(&all, StreamOptions::new("null")).unwrap();
    let s1 = net.open_stream(&all, StreamOptions::new("sum")).unwrap();
    let s2 = net.open_stream(&all, StreamOptions::new("max")).unwrap();
    ctl.send(
        TAG_THREADS,
        "%aud",
        vec![Value::UIntArray(vec![s1.id(), s2.id()])],
    )
    .unwrap();
    for k in 0..2 {
        // Answered by different threads of each back-end, in the opposite order.
        s2.send(TAG_ADD, "", vec![]).unwrap();
        s1.send(TAG_ADD, "", vec![]).unwrap();
        assert_eq!(s2.recv().unwrap().values[0], Value::Int(30 + k));
        assert_eq!(s1.recv().unwrap().values[0], Value::Int(60 + 4 * k));
    }
    net.shutdown().unwrap();
}

#[test]
fn set_filter_changes_a_running_stream_everywhere() {
    let net = start("kary:2@4");
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    s.send(TAG_ADD, "%d", vec![Value::Int(1)]).unwrap();
    assert_eq!(s.recv().unwrap().values[0], Value::Int(10));
    s.set_filter(FilterRole::Up, "max").unwrap();
    assert_eq!(s.filter(FilterRole::Up).unwrap(), "max");
    s.send(TAG_ADD, "%d", vec![Value::Int(1)]).unwrap();
    assert_eq!(s.recv().unwrap().values[0], Value::Int(4));
    // A bad spec changes nothing.
    let e = s.set_filter(FilterRole::Up, "no_such_filter").unwrap_err();
    assert!(e.to_string().contains("no_such_filter"), "{e}");
    let e = s.set_filter(FilterRole::Sync, "sometimes").unwrap_err();
    assert!(matches!(e, TbonError::BadStream(_)), "{e}");
    assert_eq!(s.filter(FilterRole::Up).unwrap(), "max");
    // Don't-wait: every back-end's packet comes on its own.
    s.set_filter(FilterRole::Sync, "dontwait").unwrap();
    s.set_filter(FilterRole::Up, "null").unwrap();
    s.send(TAG_ADD, "%d", vec![Value::Int(0)]).unwrap();
    let mut got: Vec<Value> = (0..4)
        .map(|_| s.recv().unwrap().values[0].clone())
        .collect();
    got.sort_by_key(|v| format!("{v:?}"));
    assert_eq!(got, (0..4).map(Value::Int).collect::<Vec<_>>());
    // A down filter applies to the multicasts from the next one on; removing it too.
    s.set_filter(FilterRole::Sync, "all").unwrap();
    s.set_filter(FilterRole::Up, "sum").unwrap();
    s.set_filter(FilterRole::Down, "null").unwrap();
    assert_eq!(s.filter(FilterRole::Down).unwrap(), "null");
    s.send(TAG_ADD, "%d", vec![Value::Int(2)]).unwrap();
    assert_eq!(s.recv().unwrap().values[0], Value::Int(14));
    s.set_filter(FilterRole::Down, "").unwrap();
    assert_eq!(s.filter(FilterRole::Down).unwrap(), "");
    net.shutdown().unwrap();
}

#[test]
fn tree_events_come_one_at_a_time_and_end_at_shutdown() {
    let net = start("1x2x4");
    let mut events = net.tree_events();
    assert_eq!(
        events.next_timeout(Duration::from_millis(50)).unwrap(),
        None
    );
    let kill = net
        .open_stream(&net.communicator(&[1]).unwrap(), StreamOptions::new("null"))
        .unwrap();
    kill.send(TAG_DIE, "", vec![]).unwrap();
    // Waiting for an event makes progress: nothing else is receiving.
    let e = events
        .next_timeout(Duration::from_secs(10))
        .unwrap()
        .expect("the loss");
    assert!(
        matches!(&e, TreeEvent::NodeLost { backends, .. } if backends == &vec![1]),
        "{e:?}"
    );
    let waiter = std::thread::spawn(move || loop {
        match events.next_timeout(Duration::from_secs(10)) {
            Ok(Some(_)) => continue,
            Ok(None) => return Err("no end within 10 s"),
            Err(_) => return Ok(()),
        }
    });
    net.shutdown().unwrap();
    assert_eq!(waiter.join().unwrap(), Ok(()));
}

#[test]
fn back_ends_and_front_end_run_filters_of_their_own() {
    let net = start("1x2x4");
    let all = net.broadcast_communicator();
    // Commnodes sum; the front-end takes the larger of their two sums.
    let s = net
        .open_stream(&all, StreamOptions::new("sum").per_role(None, Some("max")))
        .unwrap();
    s.send(TAG_ADD, "%d", vec![Value::Int(0)]).unwrap();
    assert_eq!(s.recv().unwrap().values, vec![Value::Int(2 + 3)]);
    // Back-ends turn their "%d" into a one-element "%ad" before it goes up (concat of
    // one packet), which the commnodes and the front-end then add element-wise.
    let s = net
        .open_stream(
            &all,
            StreamOptions::new("sum").per_role(Some("concat"), None),
        )
        .unwrap();
    s.send(TAG_ADD, "%d", vec![Value::Int(10)]).unwrap();
    let got = s.recv().unwrap();
    assert_eq!(got.values, vec![Value::IntArray(vec![6 + 40])], "{got:?}");
    // Changing `up` (here the commnodes' and the front-end's) leaves the back-ends' own.
    s.set_filter(FilterRole::Up, "max").unwrap();
    s.send(TAG_ADD, "%d", vec![Value::Int(10)]).unwrap();
    assert_eq!(s.recv().unwrap().values, vec![Value::IntArray(vec![13])]);
    net.shutdown().unwrap();
}
