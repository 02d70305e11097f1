//! Faults with real processes: back-ends and commnodes that die, a front-end that is
//! killed, and connections that do not know the network's secret.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use vargr_net::auth::{self, Secret};
use vargr_net::{Addr, LinkSecurity, Listener};
use vargr_tbon::{BackendSpec, Network, Stream, StreamOptions, TbonError, Value};
use vargr_topo::Topology;

/// Reads results until one is an error, within `guard`; returns it with the packets seen.
fn first_error(s: &Stream, guard: Duration) -> (TbonError, Vec<vargr_tbon::Packet>) {
    let deadline = Instant::now() + guard;
    let mut packets = Vec::new();
    while Instant::now() < deadline {
        match s.recv_timeout(Duration::from_millis(50)) {
            Ok(Some(p)) => packets.push(p),
            Ok(None) => {}
            Err(e) => return (e, packets),
        }
    }
    panic!(
        "no error on stream {} within {guard:?}; packets seen: {packets:?}",
        s.id()
    );
}

/// The VARGR_NODE a process of the tree was started with.
fn node_of(pid: u32) -> Option<u32> {
    environ_var(pid, "VARGR_NODE")?.parse().ok()
}

fn backend_nodes(net: &Network) -> Vec<u32> {
    (0..net.num_backends() as u32)
        .map(|r| net.topology().backend(r).expect("rank exists").id)
        .collect()
}

/// Every back-end exits (status 3) on its third packet: the front-end's stream reports
/// the lost node, shutdown still returns, and no process of the tree is left.
fn all_backends_exit(spec: &str) {
    let net = start(spec, "fail-after:2", opts());
    let procs = tree_processes(&net);
    let n = net.num_backends() as i64;
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    for i in 0..2 {
        let p = round_trip(&s, TAG_ECHO, "%d", vec![Value::Int(i + 1)]);
        assert_eq!(first_int(&p), (i as i64 + 1) * n, "{spec}: wave {i}");
    }
    s.send(TAG_ECHO, "%d", vec![Value::Int(3)]).unwrap();
    let (e, packets) = first_error(&s, Duration::from_secs(5));
    let bes = backend_nodes(&net);
    match &e {
        TbonError::NodeLost { node, backends, .. } => {
            assert!(
                bes.contains(node) || net.topology().internal().iter().any(|c| c.id == *node),
                "{spec}: lost node {node} is not in the tree"
            );
            assert!(!backends.is_empty(), "{spec}: {e}");
            assert!(
                e.to_string().contains(&format!("node {node}")),
                "{spec}: error should name the node: {e}"
            );
        }
        other => panic!("{spec}: expected NodeLost, got {other:?} (packets {packets:?})"),
    }
    // No result of the third wave can be right: nobody answered it.
    assert!(
        packets.is_empty(),
        "{spec}: results of a wave no back-end answered: {packets:?}"
    );
    let faults = net.faults();
    assert!(
        faults
            .iter()
            .any(|f| matches!(f, TbonError::NodeLost { .. })),
        "{spec}: Network::faults lacks the loss: {faults:?}"
    );

    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(net.shutdown());
    });
    let r = rx
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{spec}: Network::shutdown did not return (hang guard)"));
    eprintln!("{spec}: shutdown after losing every back-end returned {r:?}");
    let left = wait_all_gone(&procs, Duration::from_secs(1));
    assert!(left.is_empty(), "{spec}: processes left: {left:#?}");
}

#[test]
fn flat_backends_that_exit_are_reported_as_lost() {
    all_backends_exit("flat:3");
}

#[test]
fn tree_backends_that_exit_are_reported_as_lost() {
    all_backends_exit("1x2x4");
}

/// One back-end (rank 2) exits on its second packet; the others run `echo`. The loss is
/// reported with its node and rank, and the stream keeps reducing over the survivors.
#[test]
fn one_lost_backend_leaves_the_others_working() {
    let spec = "1x2x4";
    let topo = Topology::generate(spec).unwrap();
    let loser_rank = 2u32;
    let loser = topo.backend(loser_rank).unwrap().id;
    let script = format!(
        "if [ \"$VARGR_NODE\" = {loser} ]; then exec {v} backend fail-after:1; \
         else exec {v} backend echo; fi",
        v = vargr()
    );
    let net = Network::new(topo, BackendSpec::command("sh", &["-c", &script]), opts()).unwrap();
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    let p = round_trip(&s, TAG_ECHO, "%d", vec![Value::Int(10)]);
    assert_eq!(first_int(&p), 40);

    // Wave 2: the loser exits instead of answering.
    s.send(TAG_ECHO, "%d", vec![Value::Int(100)]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut lost = None;
    let mut result = None;
    while (lost.is_none() || result.is_none()) && Instant::now() < deadline {
        match s.recv_timeout(Duration::from_millis(50)) {
            Ok(Some(p)) => result = Some(first_int(&p)),
            Ok(None) => {}
            Err(e) => lost = Some(e),
        }
    }
    match &lost {
        Some(e @ TbonError::NodeLost { node, backends, .. }) => {
            assert_eq!(*node, loser, "{e}");
            assert_eq!(backends, &vec![loser_rank], "{e}");
            assert!(e.to_string().contains(&format!("node {loser}")), "{e}");
        }
        other => panic!("expected the loss of node {loser}, got {other:?}"),
    }
    assert_eq!(result, Some(300), "wave 2 over the three survivors");

    // Later waves: exactly the survivors, no further errors.
    for v in [1, 2, 3] {
        let p = round_trip(&s, TAG_ECHO, "%d", vec![Value::Int(v)]);
        assert_eq!(first_int(&p), 3 * v as i64);
    }
    // A new stream over everyone only waits for the living.
    let s2 = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("max"))
        .unwrap();
    let p = round_trip(&s2, TAG_RANK, "%d", vec![Value::Int(0)]);
    assert_eq!(first_int(&p), 3);
    net.shutdown().unwrap();
}

/// Once every back-end is lost, a new stream over them can never produce a result: the
/// front-end must say so (at open, send or recv) instead of waiting forever.
#[test]
fn stream_over_lost_backends_reports_an_error() {
    let net = start("flat:2", "fail-after:0", opts());
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    s.send(TAG_ECHO, "%d", vec![Value::Int(1)]).unwrap();
    let (e, _) = first_error(&s, Duration::from_secs(5));
    assert!(matches!(e, TbonError::NodeLost { .. }), "{e:?}");
    // Wait until both losses are known.
    let deadline = Instant::now() + Duration::from_secs(5);
    while net.faults().len() < 2 && Instant::now() < deadline {
        let _ = s.recv_timeout(Duration::from_millis(50));
    }
    assert_eq!(net.faults().len(), 2, "{:?}", net.faults());

    let r = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .and_then(|s2| {
            s2.send(TAG_ECHO, "%d", vec![Value::Int(1)])?;
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Some(p) = s2.recv_timeout(Duration::from_millis(50))? {
                    return Ok(Some(p));
                }
            }
            Ok(None)
        });
    let _ = net.shutdown();
    assert!(
        r.is_err(),
        "a stream over lost back-ends should fail, got {r:?} (None: nothing within 5 s)"
    );
}

/// SIGKILL a commnode: its back-ends go with it, the front-end names the commnode and
/// the back-ends it took along, and the other half of the tree keeps working.
#[test]
fn killed_commnode_takes_its_subtree_and_is_reported() {
    let net = start("1x2x4", "echo", opts());
    let procs = tree_processes(&net);
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    let p = round_trip(&s, TAG_RANK, "%d", vec![Value::Int(0)]);
    assert_eq!(first_int(&p), 6);

    let victim = procs
        .iter()
        .find(|p| p.cmdline.ends_with("vargr commnode") && node_of(p.pid) == Some(1))
        .unwrap_or_else(|| panic!("no commnode for node 1 among {procs:#?}"))
        .clone();
    let under: Vec<Proc> = descendants_of(&[victim.pid]);
    assert_eq!(under.len(), 2, "node 1's back-ends: {under:#?}");
    // SAFETY: kill(2) on a pid read from /proc a moment ago.
    let rc = unsafe { libc::kill(victim.pid as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());

    let (e, _) = first_error(&s, Duration::from_secs(5));
    match &e {
        TbonError::NodeLost { node, backends, .. } => {
            assert_eq!(*node, 1, "{e}");
            assert_eq!(backends, &vec![0, 1], "{e}");
        }
        other => panic!("expected NodeLost for commnode 1, got {other:?}"),
    }
    let left = wait_all_gone(&under, Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "back-ends outlived their commnode: {left:#?}"
    );

    let p = round_trip(&s, TAG_RANK, "%d", vec![Value::Int(0)]);
    assert_eq!(first_int(&p), 2 + 3, "sum over the surviving ranks 2 and 3");
    let _ = net.shutdown();
    let left = wait_all_gone(&procs, Duration::from_secs(2));
    assert!(left.is_empty(), "processes left: {left:#?}");
}

/// SIGKILL a front-end (`vargr bench tree`) in the middle of its run: every commnode
/// and back-end it started must go too.
#[test]
fn no_process_outlives_a_killed_front_end() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("x.json");
    let mut fe = Command::new(vargr())
        .args([
            "bench",
            "tree",
            "--topology",
            "1x2x4",
            "--iters",
            "100000",
            "--no-floor",
            "--json",
        ])
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let procs = loop {
        let d = descendants_of(&[fe.id()]);
        let commnodes = d
            .iter()
            .filter(|p| p.cmdline.ends_with("vargr commnode"))
            .count();
        if commnodes == 2 && count_matching(&d, "backend echo") == 4 {
            break d;
        }
        if Instant::now() >= deadline || fe.try_wait().unwrap().is_some() {
            let _ = fe.kill();
            let _ = fe.wait();
            panic!("the front-end's tree never appeared: {d:#?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        fe.try_wait().unwrap().is_none(),
        "the front-end finished before it could be killed"
    );
    let fe_pid = fe.id();
    fe.kill().unwrap();
    fe.wait().unwrap();
    let left = wait_all_gone(&procs, Duration::from_secs(5));
    // A SIGKILLed front-end cannot remove its socket directory: do it for it.
    if let Ok(d) = std::fs::read_dir(vargr_net::runtime_dir::default_path()) {
        let prefix = vargr_tbon::sockdir_prefix(fe_pid);
        for e in d.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    assert!(
        left.is_empty(),
        "processes outlived their killed front-end: {left:#?}"
    );
}

fn socket_in(dir: &tempfile::TempDir) -> Addr {
    Addr::Unix(dir.path().join("parent.sock"))
}

/// Both halves of the handshake over a transport, with the given secrets.
fn handshake(addr: Addr, acceptor: Secret, connector: Secret) -> (String, String) {
    let l = Listener::bind(&addr).unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let c = vargr_net::connect(&addr, Duration::from_secs(5))?;
        auth::connect(
            c,
            &connector,
            7,
            LinkSecurity::Auto,
            Duration::from_secs(5),
            "test parent",
        )
    });
    let conn = l.accept_timeout(Duration::from_secs(5)).unwrap();
    let acc = auth::accept(conn, &acceptor, LinkSecurity::Auto, Duration::from_secs(5));
    let con = t.join().unwrap();
    (
        match acc {
            Ok((id, _)) => format!("ok {id}"),
            Err(e) => format!("err {e}"),
        },
        match con {
            Ok(_) => "ok".into(),
            Err(e) => format!("err {e}"),
        },
    )
}

#[test]
fn wrong_secret_is_refused_on_both_sides() {
    let dir = tempfile::tempdir().unwrap();
    for addr in [socket_in(&dir), Addr::Tcp("127.0.0.1:0".into())] {
        let s = Secret::random();
        let (acc, con) = handshake(addr.clone(), s.clone(), s);
        assert_eq!((acc.as_str(), con.as_str()), ("ok 7", "ok"), "{addr}");

        let (acc, con) = handshake(addr.clone(), Secret::random(), Secret::random());
        assert!(
            acc.starts_with("err") && acc.contains("wrong secret"),
            "{addr}: acceptor: {acc}"
        );
        assert!(
            con.starts_with("err") && con.contains("refused") && con.contains("wrong secret"),
            "{addr}: connector: {con}"
        );
    }
}

/// A real `vargr backend` started with the wrong secret: the parent refuses it and the
/// child exits non-zero saying why.
#[test]
fn backend_process_with_wrong_secret_is_refused_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::bind(&socket_in(&dir)).unwrap();
    let mine = Secret::random();
    let mut child = Command::new(vargr())
        .args(["backend", "echo"])
        .env("VARGR_PARENT", l.local_addr().unwrap().to_string())
        .env("VARGR_NODE", "1")
        .env("VARGR_SECRET", Secret::random().to_hex())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let conn = l.accept_timeout(Duration::from_secs(10)).unwrap();
    let r = auth::accept(conn, &mine, LinkSecurity::Auto, Duration::from_secs(5));
    let e = r.expect_err("the wrong secret was accepted");
    assert!(e.to_string().contains("wrong secret"), "{e}");
    let status = wait_guarded(&mut child, Duration::from_secs(10))
        .expect("the refused back-end did not exit (hang guard)");
    let stderr = err.join().unwrap();
    assert!(!status.success(), "refused back-end exited with {status}");
    assert!(
        stderr.contains("wrong secret") && stderr.contains("refused"),
        "stderr should say it was refused for the wrong secret: {stderr}"
    );
}

/// Started by hand without the variables a parent sets, or with a malformed secret, the
/// built-in back-end and the commnode exit non-zero with a message naming the problem.
#[test]
fn processes_without_a_parent_explain_themselves() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 3] = [
        (&["backend", "echo"], &[], "VARGR_PARENT is not set"),
        (&["commnode"], &[], "VARGR_PARENT is not set"),
        (
            &["backend", "echo"],
            &[
                ("VARGR_PARENT", "unix:/nonexistent/x.sock"),
                ("VARGR_NODE", "1"),
                ("VARGR_SECRET", "xyz"),
            ],
            "hex digits",
        ),
    ];
    for (args, env, want) in cases {
        let mut cmd = Command::new(vargr());
        cmd.args(args)
            .env_remove("VARGR_PARENT")
            .env_remove("VARGR_NODE")
            .env_remove("VARGR_SECRET")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
        let status = wait_guarded(&mut child, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("vargr {args:?} hung"));
        let stderr = err.join().unwrap();
        assert!(!status.success(), "vargr {args:?} {env:?}: {status}");
        assert!(stderr.contains(want), "vargr {args:?} {env:?}: {stderr}");
    }
}
