//! Trees of real processes (`vargr commnode`, `vargr backend echo`): multicast and
//! reductions over every shape the generator knows, over Unix sockets, TCP and the
//! remote-launcher path.

mod common;

use std::time::Duration;

use common::*;
use vargr_tbon::{Network, NetworkOptions, StreamOptions, Value};

/// Multicast + sum round trips, then min/max/sum on sub-communicators; finally a clean
/// shutdown after which no process of the tree is left.
fn exercise(spec: &str, n: usize, opts: NetworkOptions) {
    exercise_checking(spec, n, opts, |_| {});
}

/// [`exercise`], with a look at the tree's processes (`vargr` ones) before the traffic.
fn exercise_checking(spec: &str, n: usize, opts: NetworkOptions, check: impl Fn(&[Proc])) {
    let net = start(spec, "echo", opts);
    assert_eq!(net.num_backends(), n, "{spec}");
    let procs = tree_processes(&net);
    assert!(
        count_matching(&procs, "backend echo") >= n,
        "{spec}: expected {n} back-end processes, found {procs:#?}"
    );
    let vargrs: Vec<Proc> = procs
        .iter()
        .filter(|p| p.cmdline.starts_with(vargr()))
        .cloned()
        .collect();
    check(&vargrs);
    check_sums(&net, spec);
    let r = net.shutdown();
    assert!(r.is_ok(), "{spec}: shutdown: {r:?}");
    let left = wait_all_gone(&procs, Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "{spec}: processes left after shutdown: {left:#?}"
    );
}

fn check_sums(net: &Network, spec: &str) {
    let n = net.num_backends() as i64;
    let all = net.broadcast_communicator();
    let sum = net.open_stream(&all, StreamOptions::new("sum")).unwrap();

    let p = round_trip(&sum, TAG_RANK, "%d", vec![Value::Int(1000)]);
    assert_eq!(
        first_int(&p),
        1000 * n + n * (n - 1) / 2,
        "{spec}: Σ(1000 + rank)"
    );
    for i in [0, 1, 7, -3, 100_000] {
        let p = round_trip(&sum, TAG_ECHO, "%d", vec![Value::Int(i)]);
        assert_eq!(first_int(&p), i as i64 * n, "{spec}: Σ echo({i})");
    }
    // Several fields and an array, element-wise.
    let p = round_trip(
        &sum,
        TAG_ECHO,
        "%ld %ad",
        vec![Value::Long(1 << 40), Value::IntArray(vec![1, -2, 3])],
    );
    assert_eq!(p.values[0], Value::Long((1i64 << 40) * n), "{spec}");
    assert_eq!(
        p.values[1],
        Value::IntArray(vec![n as i32, -2 * n as i32, 3 * n as i32]),
        "{spec}"
    );
    // Pipelined: several waves in flight, results in order.
    for i in 0..20 {
        sum.send(TAG_ECHO, "%d", vec![Value::Int(i)]).unwrap();
    }
    for i in 0..20 {
        let p = recv_ok(&sum, Duration::from_secs(10));
        assert_eq!(first_int(&p), i as i64 * n, "{spec}: pipelined wave {i}");
    }

    // Sub-communicators: a few ranks spread over the tree.
    let last = (n - 1) as u32;
    let subsets: Vec<Vec<u32>> = vec![
        vec![0],
        vec![last],
        vec![1.min(last), last / 2, last],
        (0..=last).filter(|r| r % 3 == 1).collect(),
    ];
    for ranks in subsets {
        if ranks.is_empty() {
            continue;
        }
        let comm = net.communicator(&ranks).unwrap();
        let mut uniq = ranks.clone();
        uniq.sort_unstable();
        uniq.dedup();
        let lo = *uniq.first().unwrap() as i64;
        let hi = *uniq.last().unwrap() as i64;
        let total: i64 = uniq.iter().map(|&r| 10 + r as i64).sum();
        for (filter, want) in [("min", 10 + lo), ("max", 10 + hi), ("sum", total)] {
            let s = net.open_stream(&comm, StreamOptions::new(filter)).unwrap();
            assert_eq!(s.num_members(), uniq.len());
            let p = round_trip(&s, TAG_RANK, "%d", vec![Value::Int(10)]);
            assert_eq!(first_int(&p), want, "{spec}: {filter} over ranks {uniq:?}");
        }
    }
    // A communicator naming a missing rank is refused, not sent.
    assert!(net.communicator(&[last + 1]).is_err());
}

#[test]
fn flat_8() {
    exercise("flat:8", 8, opts());
}

#[test]
fn levels_1x2x4() {
    exercise("1x2x4", 4, opts());
}

#[test]
fn kary_4_at_16() {
    exercise("kary:4@16", 16, opts());
}

#[test]
fn binomial_at_8() {
    exercise("binomial@8", 8, opts());
}

#[test]
fn tcp_transport_locally() {
    exercise_checking(
        "kary:2@4",
        4,
        NetworkOptions {
            transport: "tcp".into(),
            ..opts()
        },
        |procs| {
            // 2 commnodes + 4 back-ends, each told to reach its parent over TCP.
            assert_eq!(procs.len(), 6, "{procs:#?}");
            for p in procs {
                let parent = environ_var(p.pid, "VARGR_PARENT").unwrap_or_default();
                assert!(parent.starts_with("tcp:127.0.0.1:"), "{p:?}: {parent}");
            }
        },
    );
}

/// `sh -c {cmd}` stands in for `ssh {host} {cmd}`: the remote path (TCP, the secret on
/// standard input, every word shell-quoted) run on this machine.
#[test]
fn remote_template_through_sh() {
    exercise_checking(
        "kary:2@4",
        4,
        NetworkOptions {
            remote_template: Some("sh -c {cmd}".into()),
            ..opts()
        },
        |procs| {
            assert_eq!(procs.len(), 6, "{procs:#?}");
            for p in procs {
                // The secret came on standard input, never in the environment or argv.
                let secret = environ_var(p.pid, "VARGR_SECRET").unwrap_or_default();
                assert_eq!(secret, "-", "{p:?}");
                let parent = environ_var(p.pid, "VARGR_PARENT").unwrap_or_default();
                assert!(parent.starts_with("tcp:"), "{p:?}: {parent}");
                assert!(
                    !p.cmdline
                        .split(' ')
                        .any(|w| w.len() == 64 && w.bytes().all(|b| b.is_ascii_hexdigit())),
                    "{p:?}"
                );
            }
        },
    );
}

/// A `Network` is `Send`: creating it on one thread and using it on another is allowed
/// by the type system. The tree must survive the creating thread's exit.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked a child exits, so vargr forks
/// from one lasting spawner thread; this test guards that.
#[test]
fn network_survives_the_thread_that_created_it() {
    let (net, procs) = std::thread::spawn(|| {
        let net = start("flat:2", "echo", opts());
        let procs = tree_processes(&net);
        (net, procs)
    })
    .join()
    .expect("creating thread");
    assert_eq!(count_matching(&procs, "backend echo"), 2, "{procs:#?}");
    // Give a SIGKILL sent at thread exit time to land.
    std::thread::sleep(Duration::from_millis(300));
    let killed: Vec<&Proc> = procs.iter().filter(|p| !alive(p)).collect();
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    s.send(TAG_ECHO, "%d", vec![Value::Int(5)]).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        recv_within(&s, Duration::from_secs(5))
    }));
    let faults = net.faults();
    let _ = net.shutdown();
    assert!(
        killed.is_empty(),
        "back-ends died when the thread that created the Network exited: {killed:#?}; \
         faults seen by the front-end: {faults:?}; then recv gave {r:?}"
    );
    assert!(
        matches!(&r, Ok(Ok(p)) if first_int(p) == 10),
        "round trip after the creating thread exited: {r:?}"
    );
}

/// A sub-tree that is ready long before its sibling must not take its waiting parent
/// for dead: the parent beats to it while the slow one starts (at scale, start-up can
/// take longer than the heartbeat time-out).
#[test]
fn a_subtree_ready_early_outlives_a_slow_sibling() {
    use vargr_tbon::BackendSpec;
    let opts = NetworkOptions {
        heartbeat: Duration::from_millis(200),
        heartbeat_timeout: Duration::from_millis(600),
        ..opts()
    };
    // Back-end node 6 (the last, under the second commnode) starts 2 s late.
    let script = format!(
        "if [ \"$VARGR_NODE\" = 6 ]; then sleep 2; fi; exec '{}' backend echo",
        vargr()
    );
    let net = Network::new(
        vargr_topo::Topology::generate("1x2x4").unwrap(),
        BackendSpec::command("sh", &["-c", &script]),
        opts,
    )
    .expect("start-up with a slow back-end");
    assert!(net.startup_time() >= Duration::from_secs(2));
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    let p = round_trip(&s, TAG_RANK, "%d", vec![Value::Int(0)]);
    assert_eq!(first_int(&p), 6);
}
