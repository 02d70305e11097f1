//! Attach mode with real processes: back-ends started by someone else (a test playing
//! `srun`, a shell loop, Open MPI's `mpirun`) meet their leaf parents through the
//! front-end's rendezvous, by address in the environment or through a file.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use vargr_tbon::{AttachSpec, BackendSpec, Network, NetworkOptions, StreamOptions, Value};
use vargr_topo::Topology;

/// Σ(1000 + rank) over every back-end, and rank order as the tree sees it.
fn check_sum(net: &Network) {
    let n = net.num_backends() as i64;
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    let p = round_trip(&s, TAG_RANK, "%d", vec![Value::Int(1000)]);
    assert_eq!(first_int(&p), 1000 * n + n * (n - 1) / 2);
    let p = round_trip(&s, TAG_ECHO, "%d", vec![Value::Int(7)]);
    assert_eq!(first_int(&p), 7 * n);
}

/// Starts back-ends by hand, as a launcher would, with `VARGR_RENDEZVOUS=file:PATH` and
/// the rank in `rank_var`, once the front-end has written the file.
fn start_by_hand(file: &Path, ranks: &[u32], rank_var: &str, secret: Option<&str>) -> Vec<Child> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !file.exists() {
        assert!(Instant::now() < deadline, "rendezvous file never written");
        std::thread::sleep(Duration::from_millis(10));
    }
    ranks
        .iter()
        .map(|r| {
            let mut c = Command::new(vargr());
            c.args(["backend", "echo"])
                .env("VARGR_RENDEZVOUS", format!("file:{}", file.display()))
                .env(rank_var, r.to_string())
                .env_remove("VARGR_PARENT")
                .stderr(Stdio::piped());
            if let Some(s) = secret {
                // A secret in the environment does not override the file's.
                c.env("VARGR_SECRET", s);
            }
            c.spawn().expect("starting a back-end by hand")
        })
        .collect()
}

fn finish(children: Vec<Child>) -> Vec<String> {
    children
        .into_iter()
        .map(|mut c| {
            let st = wait_guarded(&mut c, Duration::from_secs(10));
            assert!(st.is_some(), "a hand-started back-end did not exit");
            let mut err = String::new();
            use std::io::Read;
            let _ = c.stderr.take().unwrap().read_to_string(&mut err);
            err
        })
        .collect()
}

#[test]
fn back_ends_started_by_hand_attach_through_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rendezvous");
    let topo = Topology::generate("kary:2@8").unwrap();
    let spec = AttachSpec {
        launch: None,
        file: Some(file.clone()),
    };
    // Ranks arrive in a scrambled order and name themselves the way Slurm does.
    let f2 = file.clone();
    let starter = std::thread::spawn(move || {
        start_by_hand(&f2, &[5, 0, 7, 2, 1, 6, 3, 4], "SLURM_PROCID", None)
    });
    let net = Network::new(topo, BackendSpec::Attach(spec), opts()).unwrap();
    let children = starter.join().unwrap();
    // The file holds the secret: owner-only.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "rendezvous file mode {mode:o}");
    check_sum(&net);
    net.shutdown().unwrap();
    finish(children);
}

#[test]
fn a_launch_command_starts_the_back_ends() {
    // A shell loop stands in for a job launcher; the rank comes from PMI_RANK.
    let script = format!(
        "i=0; while [ $i -lt {{n}} ]; do PMI_RANK=$i {} backend echo & i=$((i+1)); done; wait",
        vargr()
    );
    let spec = AttachSpec {
        launch: Some(vec!["sh".into(), "-c".into(), script]),
        file: None,
    };
    let topo = Topology::generate("1x2x6").unwrap();
    let net = Network::new(topo, BackendSpec::Attach(spec), opts()).unwrap();
    assert_eq!(net.num_backends(), 6);
    check_sum(&net);
    let procs = tree_processes(&net);
    net.shutdown().unwrap();
    let left = wait_all_gone(&procs, Duration::from_secs(5));
    assert!(left.is_empty(), "left after shutdown: {left:#?}");
}

#[test]
fn open_mpi_mpirun_starts_the_back_ends() {
    let have_mpirun = Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        have_mpirun,
        "mpirun not found: install Open MPI (scripts/test.sh installs Debian's openmpi-bin)"
    );
    let launch = [
        "mpirun",
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        "{n}",
        vargr(),
        "backend",
        "echo",
    ];
    let spec = AttachSpec {
        launch: Some(launch.iter().map(|s| s.to_string()).collect()),
        file: None,
    };
    let topo = Topology::generate("kary:2@4").unwrap();
    let net = Network::new(topo, BackendSpec::Attach(spec), opts()).unwrap();
    check_sum(&net);
    // Ranks as Open MPI numbered them: back-end r reports r (TAG_RANK adds its rank).
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("concat"))
        .unwrap();
    let p = round_trip(&s, TAG_RANK, "%d", vec![Value::Int(0)]);
    let mut ranks: Vec<i32> = match &p.values[0] {
        Value::IntArray(v) => v.clone(),
        other => panic!("concat gave {other:?}"),
    };
    ranks.sort_unstable();
    assert_eq!(ranks, vec![0, 1, 2, 3]);
    net.shutdown().unwrap();
}

#[test]
fn a_rank_out_of_range_is_named_and_the_missing_rank_reported() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rv");
    let spec = AttachSpec {
        launch: None,
        file: Some(file.clone()),
    };
    let f2 = file.clone();
    let starter =
        std::thread::spawn(move || start_by_hand(&f2, &[0, 1, 2, 99], "VARGR_RANK", None));
    let o = NetworkOptions {
        startup_timeout: Duration::from_secs(3),
        ..opts()
    };
    let err = Network::new(
        Topology::generate("flat:4").unwrap(),
        BackendSpec::Attach(spec),
        o,
    )
    .err()
    .expect("a network missing rank 3 must not start");
    let msg = err.to_string();
    assert!(msg.contains("never attached") && msg.contains('3'), "{msg}");
    let errs = finish(starter.join().unwrap());
    assert!(
        errs[3].contains("rank 99 is out of range") && errs[3].contains("4 back-ends"),
        "stderr of the rank-99 back-end: {}",
        errs[3]
    );
}

#[test]
fn a_back_end_with_the_wrong_secret_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rv");
    let spec = AttachSpec {
        launch: None,
        file: Some(file.clone()),
    };
    // Rank 1 reads a forged file: right address, wrong secret.
    let forged = dir.path().join("forged");
    let f2 = file.clone();
    let forged2 = forged.clone();
    let starter = std::thread::spawn(move || {
        let mut good = start_by_hand(&f2, &[0], "VARGR_RANK", None);
        let addr = std::fs::read_to_string(&f2).unwrap();
        let addr = addr.lines().next().unwrap().to_string();
        std::fs::write(&forged2, format!("{addr}\n{}\n", "ab".repeat(32))).unwrap();
        good.extend(start_by_hand(&forged2, &[1], "VARGR_RANK", None));
        good
    });
    let o = NetworkOptions {
        startup_timeout: Duration::from_secs(3),
        ..opts()
    };
    let err = Network::new(
        Topology::generate("flat:2").unwrap(),
        BackendSpec::Attach(spec),
        o,
    )
    .err()
    .expect("a network missing rank 1 must not start");
    assert!(err.to_string().contains("never attached"), "{err}");
    let errs = finish(starter.join().unwrap());
    assert!(
        errs[1].to_lowercase().contains("secret") || errs[1].contains("refused"),
        "stderr of the forged back-end: {}",
        errs[1]
    );
}
