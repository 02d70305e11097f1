//! mpi4py's own demo programs, from its source distribution (downloaded by this test with
//! `pip download --no-binary :all: mpi4py`, never copied into the repository), run with
//! Debian's mpi4py (built against the system's Open MPI) under libvargr_mpi.so: traced,
//! and compressing every message of 1 KiB or more between two emulated sites. Each gives
//! the output it gives without the library (the MPI-1 reference's examples that run on
//! Python 3, the reductions and sequential tests, hello world, and osu_bw's sizes up to
//! 4 MiB; not nxtval's one-sided counter, which fails or hangs one run in two under
//! Open MPI 4.1 without the library too); and a script of ours sends pickled Python
//! objects between the sites, which mpi4py receives with matched probes.
//!
//! Needs `mpirun` and python3's mpi4py (installed with apt when missing); skipped with a
//! message without mpirun, unless `VARGR_REQUIRE_MPIRUN=1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const VERSION: &str = "3.1.4";

mod common;
use common::{have_mpirun, target_dir, with_library, MPIRUN};

/// The Python that Debian's mpi4py is built for (a `python3` earlier on the PATH, such
/// as pyenv's, does not have it).
const PYTHON: &str = "/usr/bin/python3";

/// Debian's mpi4py, installed if missing.
fn mpi4py() {
    let has = || {
        Command::new(PYTHON)
            .args(["-c", "import mpi4py"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has() {
        let apt = Command::new("apt-get")
            .args(["install", "-y", "-qq", "python3-mpi4py"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output();
        assert!(
            apt.is_ok_and(|o| o.status.success()) && has(),
            "python3's mpi4py missing and not installable: apt-get install python3-mpi4py"
        );
    }
}

/// mpi4py's demo directory from its source distribution, downloaded once.
fn demos() -> PathBuf {
    let base = target_dir().join("mpi4py-sdist");
    let demo = base.join(format!("mpi4py-{VERSION}/demo"));
    if demo.is_dir() {
        return demo;
    }
    std::fs::create_dir_all(&base).unwrap();
    let o = Command::new("python3")
        .args(["-m", "pip", "download", "--no-binary", ":all:", "--no-deps"])
        .arg(format!("mpi4py=={VERSION}"))
        .arg("-d")
        .arg(&base)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "pip download mpi4py: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = Command::new("tar")
        .arg("xzf")
        .arg(base.join(format!("mpi4py-{VERSION}.tar.gz")))
        .arg("-C")
        .arg(&base)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "tar: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    demo
}

/// A run: mpirun's output, and each rank's stdout as mpirun kept it apart
/// (`--output-filename`: the ranks' lines interleave on mpirun's own stdout).
struct Ran {
    out: Output,
    ranks: Vec<String>,
}

impl Ran {
    fn outcome(&self) -> (bool, &[String]) {
        (self.out.status.success(), &self.ranks)
    }
}

/// `mpirun -n N /usr/bin/python3 ARGS` in `dir`, with the library (tracing into `trace` and
/// compressing between two sites) when `trace` is given.
fn run(dir: &Path, n: usize, args: &[&str], trace: Option<&Path>) -> Ran {
    let files = tempfile::tempdir().unwrap();
    let mut c = Command::new("mpirun");
    c.args(MPIRUN).args(["-n", &n.to_string()]);
    c.arg("--output-filename").arg(files.path());
    c.env_remove("LD_PRELOAD").env_remove("VARGR_MPI_TRACE");
    if let Some(t) = trace {
        with_library(
            &mut c,
            &[
                ("VARGR_MPI_TRACE", t.as_os_str()),
                ("VARGR_MPI_CODEC", "fixed:lz4".as_ref()),
                ("VARGR_MPI_SITES", "blocks:2".as_ref()),
                ("VARGR_MPI_CODEC_MIN", "1k".as_ref()),
            ],
        );
    }
    c.arg(PYTHON).args(args).current_dir(dir);
    let out = c.output().unwrap();
    let ranks = (0..n)
        .map(|r| {
            std::fs::read_to_string(files.path().join(format!("1/rank.{r}/stdout")))
                .unwrap_or_default()
        })
        .collect();
    Ran { out, ranks }
}

/// Runs `args` without and with the library; their outputs must agree. Returns the
/// library run's stderr, or `None` for a demo that fails on its own (some of the
/// reference examples are Python 2: `execfile`, `array('c')`), which is not ours to run.
fn same(dir: &Path, n: usize, args: &[&str], trace: &Path) -> Option<String> {
    let plain = run(dir, n, args, None);
    if !plain.out.status.success() {
        eprintln!(
            "{args:?} fails without the library, not compared: {}",
            String::from_utf8_lossy(&plain.out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
        return None;
    }
    let with = run(dir, n, args, Some(trace));
    assert_eq!(
        with.outcome(),
        plain.outcome(),
        "{args:?} under the library\nstderr: {}",
        String::from_utf8_lossy(&with.out.stderr)
    );
    Some(String::from_utf8_lossy(&with.out.stderr).into_owned())
}

#[test]
fn mpi4py_demos_run_the_same_traced_and_compressed() {
    if !have_mpirun() {
        return;
    }
    mpi4py();
    let demo = demos();
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace");
    // The MPI-1 reference's examples (point to point, datatypes, collectives), as the
    // demo's runtests.sh runs them.
    let refs = demo.join("mpi-ref-v1");
    let mut examples: Vec<String> = std::fs::read_dir(&refs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ex-") && n.ends_with(".py"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 15, "{examples:?}");
    let compared = examples
        .iter()
        .filter(|ex| same(&refs, 3, &[ex], &trace).is_some())
        .count();
    // 11 of mpi4py 3.1.4's 19 run on Python 3.
    assert!(
        compared >= 10,
        "only {compared} of {} examples ran",
        examples.len()
    );
    for (dir, n, args) in [
        ("reductions", 5, &["test_reductions.py", "-q"][..]),
        ("sequential", 5, &["test_seq.py"]),
        (".", 4, &["helloworld.py"]),
    ] {
        assert!(
            same(&demo.join(dir), n, args, &trace).is_some(),
            "{dir}/{args:?} fails without the library"
        );
    }
    // Messages up to 4 MiB between the two ranks, one on each site: the sizes it
    // reports (its timings vary) and that it ran.
    let sizes = |o: &Ran| -> Vec<String> {
        o.ranks[0]
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(String::from))
            .collect()
    };
    let plain = run(&demo, 2, &["osu_bw.py"], None);
    let with = run(&demo, 2, &["osu_bw.py"], Some(&trace));
    assert!(plain.out.status.success() && with.out.status.success());
    assert!(
        sizes(&plain).contains(&"4194304".to_string()),
        "{:?}",
        plain.ranks
    );
    assert_eq!(sizes(&with), sizes(&plain));
    let err = String::from_utf8_lossy(&with.out.stderr);
    assert!(err.contains("vargr-mpi: compression fixed:lz4:"), "{err}");
}

#[test]
fn pickled_objects_cross_sites_through_matched_probes() {
    if !have_mpirun() {
        return;
    }
    mpi4py();
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("pickles.py");
    std::fs::write(
        &script,
        r#"
from mpi4py import MPI
import hashlib, os, pickle
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
peer = (rank + size // 2) % size
obj = {"rank": rank, "rows": [[i * 0.5 for i in range(200)] for _ in range(100)],
       "text": "slow links " * 2000}
if rank < size // 2:
    comm.send(obj, dest=peer, tag=3)
    got = comm.recv(source=peer, tag=4)
else:
    got = comm.recv(source=MPI.ANY_SOURCE, tag=3)
    comm.send(obj, dest=peer, tag=4)
req = comm.irecv(bytearray(1 << 20), source=peer, tag=5)
comm.isend(obj, dest=peer, tag=5).wait()
again = req.wait()
digest = hashlib.sha256(pickle.dumps((got, again))).hexdigest()[:16]
# Paused: MPI.Pcontrol(0) stops the library recording, MPI.Pcontrol(1) resumes it. A
# message started before the pause (tag 31) is recorded all the same.
early = bytearray(8)
started = [comm.Irecv(early, source=peer, tag=31), comm.Isend(b"early!!!", dest=peer, tag=31)]
MPI.Pcontrol(0)
paused = comm.sendrecv(rank, dest=peer, sendtag=30, source=peer, recvtag=30)
MPI.Pcontrol(1)
MPI.Request.Waitall(started)
# Polled with Request.Get_status (MPI_Request_get_status), freed by Wait (tag 32).
polled = bytearray(8)
r = comm.Irecv(polled, source=peer, tag=32)
s = comm.Isend(b"polled!!", dest=peer, tag=32)
while not r.Get_status():
    pass
r.Wait()
s.Wait()
assert bytes(early) == b"early!!!" and bytes(polled) == b"polled!!"
# One write per line: mpirun interleaves the ranks' output between writes.
os.write(1, f"rank {rank}: from {got['rank']} and {again['rank']}: {digest} {paused}\n".encode())
"#,
    )
    .unwrap();
    let trace = tmp.path().join("trace");
    let err = same(tmp.path(), 4, &["pickles.py"], &trace).expect("our script runs");
    assert!(err.contains("vargr-mpi: compression fixed:lz4:"), "{err}");
    // mpi4py's pickled receives are matched probes, and the trace holds them.
    let files = vargr_trace::TraceFile::read_dir(&trace).unwrap();
    assert_eq!(files.len(), 4);
    let names: std::collections::BTreeSet<&str> = files
        .iter()
        .flat_map(|f| f.collectors.iter().map(String::as_str))
        .collect();
    for c in ["ctx0/mprobe", "ctx0/mrecv", "ctx0/p2p"] {
        assert!(names.contains(c), "{c} missing from {names:?}");
    }
    // Nothing of what ran between MPI.Pcontrol(0) and MPI.Pcontrol(1), tag 30; the
    // message started before the pause (31) and the one polled with Get_status (32)
    // are there, sent and received, and the first Get_status that found 32 done is a
    // test.
    for f in &files {
        let p2p = f.collectors.iter().position(|c| c == "ctx0/p2p");
        let test = f.collectors.iter().position(|c| c == "mpi/test");
        let msgs: Vec<_> = f
            .threads
            .iter()
            .flat_map(|t| &t.records)
            .filter(|r| Some(usize::from(r.collector)) == p2p)
            .collect();
        assert!(
            msgs.iter().all(|r| r.seq != 30),
            "a paused message was recorded"
        );
        for tag in [31, 32] {
            for op in [vargr_trace::EventOp::Send, vargr_trace::EventOp::Recv] {
                let n = msgs
                    .iter()
                    .filter(|r| r.seq == tag && r.op == op as u8)
                    .count();
                assert_eq!(n, 1, "{}: tag {tag} {op:?}", f.process);
            }
        }
        assert!(
            test.is_some(),
            "{}: no test in {:?}",
            f.process,
            f.collectors
        );
    }
}
