//! The job monitor's gather tree (issue 30) with real processes on real sockets: with a
//! small fan-out the agents of a 10-process job form a tree with interior agents, and
//! the monitor ends with what a flat gather gives; an interior agent whose process
//! stalls is named missing while the others' answers still come, and what it held
//! arrives once it runs again.

mod common;

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The final summary's culprit line and record totals, and the status file.
fn final_view(stderr: &str, status: &Path) -> (String, String, serde_json::Value) {
    let line = |needle: &str| {
        stderr
            .lines()
            .find_map(|l| l.find(needle).map(|i| l[i..].to_string()))
            .unwrap_or_else(|| panic!("no {needle:?} in:\n{stderr}"))
    };
    let culprit = line("vargr monitor (final): allreduce: rank 2 arrived last in");
    let gathered = line("vargr monitor: gathered");
    let st = serde_json::from_slice(&std::fs::read(status).unwrap()).unwrap();
    (culprit, gathered, st)
}

/// `vargr run -n N --monitor` over the slow-rank program (rank 2 sleeps `sleep_us`
/// before each of `iters` allreduces), keeping its status in `status`.
fn slow_rank_job(n: usize, status: &Path, iters: u32, sleep_us: u32) -> Vec<String> {
    let (n, iters, sleep_us) = (n.to_string(), iters.to_string(), sleep_us.to_string());
    [
        "run",
        "-n",
        &n,
        "--monitor",
        "load-balance",
        "--status",
        status.to_str().unwrap(),
        "--",
        vargr_bench(),
        "slow-rank",
        "--rank",
        "2",
        "--iters",
        &iters,
        "--sleep-us",
        &sleep_us,
    ]
    .map(String::from)
    .to_vec()
}

/// [`slow_rank_job`] run to its end with this gather fan-out.
fn monitored_job(n: usize, fanout: usize, status: &Path, iters: u32) -> CliRun {
    let fanout = fanout.to_string();
    let args = slow_rank_job(n, status, iters, 2000);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_cli_env(
        &args,
        &[("VARGR_MONITOR_FANOUT", Some(OsStr::new(&fanout)))],
        Duration::from_secs(180),
    )
}

#[test]
fn a_gather_tree_with_interior_agents_gathers_what_the_flat_gather_does() {
    let tmp = tempfile::tempdir().unwrap();
    let mut views = Vec::new();
    // Fan-out 2 over 10 agents: the monitor talks to 2, agents 0..4 are interior; 64 is
    // the flat gather (every agent the monitor's child).
    for (fanout, connections) in [(2, 2), (64, 10)] {
        let status = tmp.path().join(format!("status-{fanout}.json"));
        let r = monitored_job(10, fanout, &status, 200);
        assert!(r.status.success(), "fan-out {fanout}: {r:?}");
        let (culprit, gathered, st) = final_view(&r.stderr, &status);
        assert_eq!(st["connections"], connections, "fan-out {fanout}: {st}");
        assert_eq!(st["nodes"].as_array().unwrap().len(), 10, "{st}");
        assert_eq!(st["missing"].as_array().unwrap().len(), 0, "{st}");
        assert!(
            gathered.ends_with("0 overwritten before a pull (gather rate 1.0000)"),
            "fan-out {fanout}: {gathered}"
        );
        // Every call of every rank was merged: all 200 calls complete.
        assert!(
            culprit.contains(" of 200 calls"),
            "fan-out {fanout}: {culprit}"
        );
        views.push((
            gathered,
            st["records"].clone(),
            st["collectors"][0]["calls"].clone(),
        ));
    }
    assert_eq!(views[0], views[1], "tree and flat gathers differ");
}

/// The pid of the job's process whose first rank is `rank`.
fn process_of_rank(job: u32, rank: u32) -> Option<u32> {
    descendants_of(&[job])
        .into_iter()
        .find(|p| environ_var(p.pid, "VARGR_RANK").as_deref() == Some(&rank.to_string()))
        .map(|p| p.pid)
}

fn read_status(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Polls the status file until `want` holds (a hang guard, not a measurement).
fn wait_status(
    path: &Path,
    what: &str,
    want: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(st) = read_status(path).filter(|s| want(s)) {
            return st;
        }
        assert!(Instant::now() < deadline, "{what}: {:?}", read_status(path));
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

#[test]
fn a_stalled_interior_agent_is_named_and_the_rest_of_the_tree_still_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let status = tmp.path().join("status.json");
    // Nine one-rank processes, fan-out 2: the monitor's children are the agents of
    // ranks 0 and 1; rank 1's has ranks 4 and 5 below it.
    let mut job = Command::new(vargr())
        .args(slow_rank_job(9, &status, 400, 10_000))
        .env("VARGR_MONITOR_FANOUT", "2")
        .env("VARGR_MONITOR_BUDGET_MS", "1000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = job.stderr.take().unwrap();
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let st = wait_status(&status, "all nine processes answering", |s| {
        s["nodes"].as_array().is_some_and(|n| n.len() == 9)
    });
    assert_eq!(st["connections"], 2, "{st}");
    let stalled = process_of_rank(job.id(), 1).expect("rank 1's process");
    signal(stalled, "-STOP");
    let st = wait_status(&status, "rank 1's agent named missing", |s| {
        s["missing"].as_array().is_some_and(|m| {
            m.iter()
                .any(|a| a.as_str().is_some_and(|a| a.starts_with("agent of rank 1")))
        })
    });
    // The pull was not held by the stalled sub-tree: later pulls come, each with the
    // other agents' answers (agent 0's sub-tree: ranks 0, 2, 3, 6, 7, 8).
    let pulls = st["pulls"].as_u64().unwrap();
    let later = wait_status(&status, "pulls while rank 1 is stalled", |s| {
        s["pulls"].as_u64().unwrap_or(0) >= pulls + 2
    });
    let missing: Vec<&str> = later["missing"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    assert_eq!(missing, vec!["agent of rank 1"], "{later}");
    // `vargr top` says so, for as long as it lasts.
    let top = run_cli(
        &["top", "--once", status.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(top.status.success(), "{top:?}");
    assert!(
        top.stdout
            .contains("not answering in time: agent of rank 1")
            && top.stdout.contains("over 2 connections"),
        "{}",
        top.stdout
    );
    signal(stalled, "-CONT");
    let status_code = wait_guarded(&mut job, Duration::from_secs(120)).expect("the job ends");
    let stderr = err.join().unwrap();
    assert!(status_code.success(), "{stderr}");
    // What rank 1's sub-tree held while stalled came with its late answers: every call
    // of every rank is complete, and no record was lost.
    let (culprit, gathered, end) = final_view(&stderr, &status);
    assert!(culprit.contains(" of 400 calls"), "{culprit}");
    assert!(gathered.ends_with("(gather rate 1.0000)"), "{gathered}");
    assert_eq!(end["missing"].as_array().unwrap().len(), 0, "{end}");
    assert_eq!(end["nodes"].as_array().unwrap().len(), 9, "{end}");
}
