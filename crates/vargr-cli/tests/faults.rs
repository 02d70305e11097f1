//! Faults with real processes: back-ends and commnodes that die, a front-end that is
//! killed, and connections that do not know the network's secret. What only the
//! router decides (which waves a loss costs, who is reported, what a stream over lost
//! back-ends does) is tested in vargr-tbon's simulated tree (`sim::faults`,
//! `sim::recovery`), without processes.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use vargr_net::auth::{self, Secret};
use vargr_net::{Addr, LinkSecurity, Listener};
use vargr_tbon::{
    Network, NetworkOptions, Recovery, Stream, StreamOptions, TbonError, TreeEvent, Value,
};

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

/// Without recovery, SIGKILL a commnode: its back-ends go with it, the front-end names
/// the commnode and the back-ends it took along, and the other half of the tree keeps
/// working.
#[test]
fn killed_commnode_takes_its_subtree_and_is_reported() {
    let o = NetworkOptions {
        recovery: Recovery::Off,
        ..opts()
    };
    let net = start("1x2x4", "echo", o);
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

/// Polls the front-end's events until `done` holds for them, within `guard`.
fn wait_events(
    net: &Network,
    guard: Duration,
    done: impl Fn(&[TreeEvent]) -> bool,
) -> Vec<TreeEvent> {
    let deadline = Instant::now() + guard;
    loop {
        let ev = net.events();
        if done(&ev) {
            return ev;
        }
        assert!(
            Instant::now() < deadline,
            "events not seen within {guard:?} (hang guard); have {ev:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends one wave and returns its result, skipping (and returning) the loss reports
/// that come first.
fn wave_after_reports(s: &Stream, tag: i32, v: i32) -> (vargr_tbon::Packet, Vec<TbonError>) {
    s.send(tag, "%d", vec![Value::Int(v)]).unwrap();
    let mut reports = Vec::new();
    loop {
        match recv_within(s, Duration::from_secs(10)) {
            Ok(p) => return (p, reports),
            Err(e) => reports.push(e),
        }
    }
}

/// With recovery on (the default), SIGKILL a commnode of a two-level tree: its two
/// back-ends survive and are adopted by the front-end, which hears of the loss and of
/// each adoption, and later waves (and new streams) reduce over all four back-ends.
#[test]
fn killed_commnodes_backends_are_adopted_by_the_front_end() {
    let net = start("1x2x4", "echo", opts());
    let root = net.topology().root().id;
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
    let orphans: Vec<u32> = [0, 1]
        .iter()
        .map(|&r| net.topology().backend(r).unwrap().id)
        .collect();
    // SAFETY: kill(2) on a pid read from /proc a moment ago.
    let rc = unsafe { libc::kill(victim.pid as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());

    let events = wait_events(&net, Duration::from_secs(10), |ev| {
        orphans.iter().all(|o| {
            ev.iter()
                .any(|e| matches!(e, TreeEvent::Reparented { node, .. } if node == o))
        })
    });
    assert!(
        events.contains(&TreeEvent::NodeLost {
            node: 1,
            host: "localhost".into(),
            backends: vec![0, 1]
        }),
        "{events:#?}"
    );
    for (rank, o) in orphans.iter().enumerate() {
        let want = TreeEvent::Reparented {
            node: *o,
            lost_parent: 1,
            new_parent: root,
            backends: vec![rank as u32],
        };
        assert!(events.contains(&want), "want {want:?} in {events:#?}");
    }
    // Nothing was in flight: no wave went without anyone.
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, TreeEvent::WavesLost { .. })),
        "{events:#?}"
    );
    let left = wait_all_gone(&under, Duration::from_millis(200));
    assert_eq!(left.len(), 2, "the orphaned back-ends died: {under:#?}");

    for v in [1, 2, 3] {
        let (p, reports) = wave_after_reports(&s, TAG_RANK, v);
        assert_eq!(
            first_int(&p),
            4 * v as i64 + 6,
            "wave {v} over all four ranks"
        );
        assert!(
            reports
                .iter()
                .all(|e| matches!(e, TbonError::NodeLost { node: 1, .. })),
            "{reports:?}"
        );
    }
    let s2 = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("max"))
        .unwrap();
    let p = round_trip(&s2, TAG_RANK, "%d", vec![Value::Int(0)]);
    assert_eq!(first_int(&p), 3);
    net.shutdown().unwrap();
    let left = wait_all_gone(&procs, Duration::from_secs(5));
    assert!(left.is_empty(), "processes left: {left:#?}");
}

/// Waves on one `sum` stream of `TAG_WAVE` answers, `WINDOW` in flight, each result
/// checked as it arrives.
struct Soak<'a> {
    s: &'a Stream,
    all: i64,
    sent: u64,
    /// Per wave: the back-ends (bit mask) whose answers it holds; 0 if empty.
    masks: Vec<i64>,
}

const WINDOW: u64 = 4;

impl Soak<'_> {
    fn value(wave: u64) -> i64 {
        wave as i64 + 1
    }

    fn send_one(&mut self) {
        self.s
            .send(TAG_WAVE, "%ld", vec![Value::Long(Self::value(self.sent))])
            .unwrap_or_else(|e| panic!("sending wave {}: {e}", self.sent));
        self.sent += 1;
    }

    /// The next wave's result; loss reports before it are skipped (checked at the end).
    fn recv_one(&mut self) -> i64 {
        let w = self.masks.len() as u64;
        loop {
            match recv_within(self.s, Duration::from_secs(20)) {
                Ok(p) => {
                    let v: Vec<i64> = p
                        .values
                        .iter()
                        .map(|x| match x {
                            Value::Long(v) => *v,
                            other => panic!("wave {w}: {other:?} in {p:?}"),
                        })
                        .collect();
                    let [sum, count, mask] = v[..] else {
                        panic!("wave {w}: {p:?}")
                    };
                    // Distinct powers of two: as many bits as answers, or one counted twice.
                    assert_eq!(
                        i64::from(mask.count_ones()),
                        count,
                        "wave {w}: some back-end counted twice (mask {mask:b}, count {count})"
                    );
                    assert_eq!(mask & !self.all, 0, "wave {w}: unknown back-ends {mask:b}");
                    assert_eq!(
                        sum,
                        Self::value(w) * count,
                        "wave {w}: answers to another wave were mixed in (mask {mask:b})"
                    );
                    self.masks.push(mask);
                    return mask;
                }
                Err(TbonError::WaveEmpty { wave, .. }) => {
                    assert_eq!(wave, w, "empty wave numbered differently");
                    self.masks.push(0);
                    return 0;
                }
                Err(TbonError::NodeLost { .. } | TbonError::WavesLost { .. }) => {}
                Err(e) => panic!("wave {w}: {e}"),
            }
        }
    }

    /// Receives `n` more results, keeping the window full.
    fn run(&mut self, n: usize) -> i64 {
        let mut last = 0;
        for _ in 0..n {
            while self.sent < self.masks.len() as u64 + WINDOW {
                self.send_one();
            }
            last = self.recv_one();
        }
        last
    }

    fn drain(&mut self) {
        while (self.masks.len() as u64) < self.sent {
            self.recv_one();
        }
    }
}

/// Soak: a tree of 27 processes (9 commnodes, 18 back-ends), waves flowing four at a
/// time, eight random commnodes SIGKILLed (four one after the other, then two pairs),
/// each while waves are in flight. Throughout: no hang (every wait has a guard), every result is the exact sum
/// of the back-ends that contributed to it (none counted twice, no answer of another
/// wave mixed in), and every back-end missing from a wave is named by a loss report
/// covering that wave. After each kill the orphans are adopted, and waves again reduce
/// over all 18 back-ends.
#[test]
fn soak_random_commnode_kills_under_load() {
    let t0 = Instant::now();
    let net = start("1x3x6x18", "echo", opts());
    let procs = tree_processes(&net);
    let n = net.num_backends() as u32;
    let all = (1i64 << n) - 1;
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    let mut soak = Soak {
        s: &s,
        all,
        sent: 0,
        masks: Vec::new(),
    };
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        | 1;
    eprintln!("soak seed {seed}");
    let mut x = seed;
    let mut victims = Vec::new();
    assert_eq!(soak.run(10), all, "before any kill");
    // One commnode at a time, then two at once (orphans may then knock at a dead or
    // orphaned ancestor and must go on up): eight of the nine.
    for (round, at_once) in [1, 1, 1, 1, 2, 2].into_iter().enumerate() {
        soak.run(200);
        let mut commnodes: Vec<&Proc> = procs
            .iter()
            .filter(|p| p.cmdline.ends_with("vargr commnode") && alive(p))
            .collect();
        let mut pids = Vec::new();
        for _ in 0..at_once {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let victim = commnodes.swap_remove((x % commnodes.len() as u64) as usize);
            let node = node_of(victim.pid).expect("a commnode has VARGR_NODE");
            eprintln!(
                "round {round}: killing commnode node {node} (pid {})",
                victim.pid
            );
            victims.push(node);
            pids.push(victim.pid);
        }
        // With waves in flight.
        soak.run(2);
        for pid in pids {
            // SAFETY: kill(2) on a pid of this test's tree, alive a moment ago.
            let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        }
        let killed_at = (Instant::now(), soak.sent);
        // Keep the waves flowing until the orphans are back.
        let deadline = Instant::now() + Duration::from_secs(20);
        soak.run(WINDOW as usize);
        while soak.run(1) != all {
            assert!(
                Instant::now() < deadline,
                "round {round}: waves still lack back-ends 20 s after the kills (victims so far {victims:?}) \
                 (last mask {:b}); events {:#?}",
                soak.masks.last().unwrap(),
                net.events()
            );
        }
        eprintln!(
            "round {round}: all back-ends again {:?} and {} waves after the kills",
            killed_at.0.elapsed(),
            soak.masks.len() as u64 - killed_at.1
        );
    }
    soak.drain();
    let events = net.events();
    for v in &victims {
        assert!(
            events
                .iter()
                .any(|e| matches!(e, TreeEvent::NodeLost { node, .. } if node == v)),
            "no loss reported for killed node {v}: {events:#?}"
        );
    }
    let mut partial = 0;
    for (w, &mask) in soak.masks.iter().enumerate() {
        let w = w as u64;
        let missing = all & !mask;
        if missing != 0 {
            partial += 1;
        }
        for b in (0..n).filter(|b| missing & (1 << b) != 0) {
            let reported = events.iter().any(|e| {
                matches!(e, TreeEvent::WavesLost { stream, first, end, backends, .. }
                    if *stream == s.id() && (*first..*end).contains(&w) && backends.contains(&b))
            });
            assert!(
                reported,
                "wave {w} went without back-end {b} and no report says so; events {events:#?}"
            );
        }
    }
    // And no report claims a back-end that did contribute.
    for e in &events {
        if let TreeEvent::WavesLost {
            first,
            end,
            backends,
            ..
        } = e
        {
            for w in *first..(*end).min(soak.masks.len() as u64) {
                let claimed = backends.iter().fold(0i64, |m, b| m | (1 << b));
                assert_eq!(
                    soak.masks[w as usize] & claimed,
                    0,
                    "{e:?}, but wave {w} holds some of them"
                );
            }
        }
    }
    eprintln!("events: {events:?}");
    eprintln!(
        "soak: {} waves, {partial} partial, all reported; {} events; {:?}",
        soak.masks.len(),
        events.len(),
        t0.elapsed()
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(net.shutdown());
    });
    let r = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("Network::shutdown did not return (hang guard)");
    assert!(r.is_ok(), "{r:?}");
    let left = wait_all_gone(&procs, Duration::from_secs(5));
    assert!(left.is_empty(), "processes left: {left:#?}");
}

/// SIGSTOP a commnode: its parent and its back-ends each declare it dead when its
/// heartbeats stop, the back-ends are adopted by the front-end (after their handshake
/// with the stopped node times out), and waves sum over all four again. Resumed, the
/// stale commnode finds its links gone and no child to save, and exits without
/// claiming its old back-ends back.
#[test]
fn stopped_commnode_is_replaced_and_exits_when_resumed() {
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
    let orphans: Vec<u32> = [0, 1]
        .iter()
        .map(|&r| net.topology().backend(r).unwrap().id)
        .collect();
    // SAFETY: kill(2) on a pid read from /proc a moment ago.
    let rc = unsafe { libc::kill(victim.pid as libc::pid_t, libc::SIGSTOP) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    let events = wait_events(&net, Duration::from_secs(20), |ev| {
        orphans.iter().all(|o| {
            ev.iter()
                .any(|e| matches!(e, TreeEvent::Reparented { node, .. } if node == o))
        })
    });
    assert!(
        events
            .iter()
            .any(|e| matches!(e, TreeEvent::NodeLost { node: 1, .. })),
        "{events:#?}"
    );
    let (p, _) = wave_after_reports(&s, TAG_RANK, 0);
    assert_eq!(first_int(&p), 6, "all four ranks while node 1 is stopped");

    // SAFETY: as above; the process is stopped, not gone.
    let rc = unsafe { libc::kill(victim.pid as libc::pid_t, libc::SIGCONT) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    let left = wait_all_gone(std::slice::from_ref(&victim), Duration::from_secs(10));
    assert!(left.is_empty(), "the resumed stale commnode kept running");
    for v in [1, 2] {
        let (p, reports) = wave_after_reports(&s, TAG_RANK, v);
        assert_eq!(
            first_int(&p),
            4 * v as i64 + 6,
            "after the resume: {reports:?}"
        );
    }
    let later = net.events();
    assert_eq!(
        later
            .iter()
            .filter(|e| matches!(e, TreeEvent::Reparented { .. }))
            .count(),
        2,
        "nobody moved again: {later:#?}"
    );
    net.shutdown().unwrap();
    let left = wait_all_gone(&procs, Duration::from_secs(5));
    assert!(left.is_empty(), "processes left: {left:#?}");
}
