//! The live monitor of `vargr mpi-run --monitor` with real MPI programs under Open MPI:
//! a C program of ours (`c/monitor_check.c`) and an mpi4py one (`py/monitor_check.py`)
//! where one rank reaches every allreduce last. While they run, `vargr top` shows their
//! collectives and names that rank; at the end the monitor has every record, the status
//! counts every call, point-to-point collectors stay out of it, and the programs print
//! what they print without the library.
//!
//! Needs `mpirun` and `mpicc` (Open MPI), and python3's mpi4py for the Python test;
//! skipped with a message without mpirun, unless `VARGR_REQUIRE_MPIRUN=1`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{build_c, have_mpirun, ok, vargr, MPIRUN};

const ITERS: usize = 300;
const LATE: u32 = 2;

/// `vargr mpi-run --monitor ... -- mpirun -n 4 PROG`, running.
fn monitored(kinds: &str, status: Option<&Path>, runtime: &Path, prog: &[&str]) -> Child {
    let mut c = Command::new(vargr());
    c.args(["mpi-run", &format!("--monitor={kinds}")]);
    if let Some(s) = status {
        c.arg("--status").arg(s);
    }
    c.args(["--", "mpirun"])
        .args(MPIRUN)
        .args(["-n", "4"])
        .args(prog)
        .env("XDG_RUNTIME_DIR", runtime)
        .env_remove("LD_PRELOAD")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.spawn().unwrap()
}

/// `vargr top --once [FILE]` as the user of `runtime` would run it.
fn top(file: Option<&Path>, runtime: &Path) -> std::process::Output {
    let mut c = Command::new(vargr());
    c.args(["top", "--once"]).env("XDG_RUNTIME_DIR", runtime);
    if let Some(f) = file {
        c.arg(f);
    }
    c.output().unwrap()
}

/// Polls `vargr top --once` until it shows an allreduce with a culprit (the run is
/// live and monitored), or the run ends; returns the view.
fn watch_live(run: &mut Child, file: Option<&Path>, runtime: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = top(file, runtime);
        let view = String::from_utf8_lossy(&o.stdout).into_owned();
        if o.status.success() && view.lines().any(|l| l.starts_with("allreduce")) {
            return view;
        }
        assert!(
            run.try_wait().unwrap().is_none(),
            "the run ended before `vargr top` showed it: {view}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(Instant::now() < deadline, "vargr top never showed the run");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The run's stdout (ranks' lines, sorted) and stderr, after checking it succeeded.
fn finished(run: Child) -> (Vec<String>, String) {
    let o = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let out = ok("vargr mpi-run --monitor", o);
    let mut lines: Vec<String> = out.lines().map(String::from).collect();
    lines.sort();
    (lines, err)
}

fn plain(prog: &[&str]) -> Vec<String> {
    let out = ok(
        "mpirun",
        Command::new("mpirun")
            .args(MPIRUN)
            .args(["-n", "4"])
            .args(prog)
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap(),
    );
    let mut lines: Vec<String> = out.lines().map(String::from).collect();
    lines.sort();
    lines
}

/// What the final status says about one collector.
fn collector<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status["collectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {status:#}"))
}

/// The checks both programs share: the live view named the late rank, the final
/// status counted every call and every record of one (the monitor keeps the records of
/// collective calls only: an allreduce and a barrier each iteration), and held only
/// collectives.
fn check_status(live: &str, status: &serde_json::Value, err: &str) {
    let row = live.lines().find(|l| l.starts_with("allreduce")).unwrap();
    assert!(row.contains(&format!("rank {LATE} (")), "{live}");
    assert!(live.contains("4 ranks, 4 processes"), "{live}");
    let all = collector(status, "ctx0/allreduce");
    assert_eq!(all["calls"], ITERS as u64, "{status:#}");
    assert_eq!(all["culprit"], LATE, "{status:#}");
    assert!(all["culprit_share"].as_f64().unwrap() > 0.9, "{status:#}");
    assert_eq!(collector(status, "ctx0/barrier")["calls"], ITERS as u64);
    for c in status["collectors"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        assert!(
            !["p2p", "send", "recv", "sendrecv"]
                .iter()
                .any(|k| name.ends_with(&format!("/{k}"))),
            "a point-to-point collector taken for a collective: {name}"
        );
    }
    assert_eq!(status["lost"], 0, "{status:#}");
    assert_eq!(
        status["records"].as_u64().unwrap(),
        4 * ITERS as u64 * 2,
        "{status:#}"
    );
    assert!(
        err.contains(&format!(
            "allreduce: rank {LATE} arrived last in 100 % of {ITERS} calls"
        )) || err.contains(&format!("allreduce: rank {LATE} arrived last in 9")),
        "{err}"
    );
}

/// Runs `prog` monitored with the status file `dir/status.json`, checks what it prints
/// against `expected` and the live and final status ([`check_status`]); returns the file.
fn with_named_status(dir: &Path, runtime: &Path, prog: &[&str], expected: &[String]) -> PathBuf {
    let named = dir.join("status.json");
    let mut run = monitored("load-balance", Some(&named), runtime, prog);
    let live = watch_live(&mut run, Some(&named), runtime);
    let (out, err) = finished(run);
    assert_eq!(out, expected);
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&named).unwrap()).unwrap();
    check_status(&live, &status, &err);
    named
}

#[test]
fn a_c_programs_late_rank_is_named_live_and_every_record_reaches_the_monitor() {
    if !have_mpirun() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    let prog = build_c(dir.path(), "monitor_check");
    let args = [prog.as_str(), &ITERS.to_string(), &LATE.to_string(), "3000"];
    let expected = plain(&args);

    // The default status file: `vargr top` finds it without being told, and it goes
    // with the run.
    let mut run = monitored("load-balance,stats", None, &runtime, &args);
    let live = watch_live(&mut run, None, &runtime);
    let top_dir = runtime.join("vargr/top");
    let files: Vec<_> = std::fs::read_dir(&top_dir).unwrap().flatten().collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let status_file = files[0].path();
    let (out, err) = finished(run);
    assert_eq!(out, expected);
    assert!(!status_file.exists(), "the run's status file outlived it");
    assert!(live.contains("allreduce"), "{live}");
    assert!(
        err.contains("allreduce latency µs"),
        "the stats monitor: {err}"
    );

    // A named status file stays, with the final view.
    let named = with_named_status(dir.path(), &runtime, &args, &expected);
    let o = top(Some(&named), &runtime);
    let view = ok("vargr top --once", o);
    assert!(view.contains(&format!("rank {LATE} (")), "{view}");
}

/// The Python that Debian's mpi4py is built for.
const PYTHON: &str = "/usr/bin/python3";

#[test]
fn an_mpi4py_programs_late_rank_is_named_live() {
    if !have_mpirun() {
        return;
    }
    let has = Command::new(PYTHON)
        .args(["-c", "import mpi4py"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has {
        assert!(
            std::env::var_os("VARGR_REQUIRE_MPIRUN").is_none(),
            "python3's mpi4py is required: apt-get install python3-mpi4py"
        );
        eprintln!("skipped: python3's mpi4py is missing");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/monitor_check.py");
    let args = [
        PYTHON,
        script.to_str().unwrap(),
        &ITERS.to_string(),
        &LATE.to_string(),
        // Longer than the C program's 3 ms: an interpreted rank on a loaded machine
        // (four ranks on two cores) is sometimes late by a few milliseconds itself.
        "0.010",
    ];
    let expected = plain(&args);
    with_named_status(dir.path(), &runtime, &args, &expected);
}

/// With a gather fan-out of 2, the agents of 8 ranks form a tree (the monitor's children
/// are ranks 0 and 1, whose agents gather ranks 2..6 and, below rank 2's, 6 and 7):
/// while the run is live the monitor pulls over 2 connections, and at the end it has
/// every call and every record, as the flat gather does. Ranks whose parent agent
/// finished first answer the monitor directly for their last records.
#[test]
fn an_mpi_runs_agents_gather_through_a_tree() {
    if !have_mpirun() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    let prog = build_c(dir.path(), "monitor_check");
    let status = dir.path().join("status.json");
    let run = Command::new(vargr())
        .args(["mpi-run", "--monitor=load-balance", "--status"])
        .arg(&status)
        .args(["--", "mpirun"])
        .args(MPIRUN)
        .args([
            "-n",
            "8",
            &prog,
            &ITERS.to_string(),
            &LATE.to_string(),
            "3000",
        ])
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("VARGR_MONITOR_FANOUT", "2")
        .env_remove("LD_PRELOAD")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Live: all eight ranks heard from, over the monitor's two children.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut seen_tree = false;
    let mut run = run;
    while !seen_tree && run.try_wait().unwrap().is_none() {
        if let Some(st) = std::fs::read(&status)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        {
            seen_tree =
                st["connections"] == 2 && st["nodes"].as_array().is_some_and(|n| n.len() == 8);
        }
        assert!(Instant::now() < deadline, "the run never showed a tree");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_, err) = finished(run);
    assert!(
        seen_tree,
        "the run ended before its status showed the tree: {err}"
    );
    let st: serde_json::Value = serde_json::from_slice(&std::fs::read(&status).unwrap()).unwrap();
    assert_eq!(
        collector(&st, "ctx0/allreduce")["calls"],
        ITERS as u64,
        "{st:#}"
    );
    assert_eq!(collector(&st, "ctx0/allreduce")["culprit"], LATE, "{st:#}");
    assert_eq!(st["lost"], 0, "{st:#}");
    assert_eq!(
        st["records"].as_u64().unwrap(),
        8 * ITERS as u64 * 2,
        "{st:#}"
    );
    assert_eq!(st["nodes"].as_array().unwrap().len(), 8, "{st:#}");
}
