//! A job whose rank stops (SIGSTOP) or dies (SIGKILL), with real processes: the job
//! ends in bounded time, the rank that failed first is named, and `vargr run` exits
//! with that rank's status, as mpirun does.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// A rank program that runs collectives for far longer than any test; rank 2 does
/// `action` to itself a second in.
fn script(action: &str) -> String {
    format!(
        "if [ \"$VARGR_RANK\" = 2 ] || [ \"$OMPI_COMM_WORLD_RANK\" = 2 ]; then \
         (sleep 1; kill -{action} $$) & fi; \
         exec {} slow-rank --rank 0 --iters 1000000 --sleep-us 1000",
        vargr_bench()
    )
}

/// The pid in `... (pid N on HOST) ...`.
fn pid_in(line: &str) -> u32 {
    let at = line.find("(pid ").expect("no pid named") + 5;
    line[at..]
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("no pid named")
}

/// A stopped rank never exits and never closes its sockets: it used to hang the job
/// for ever. The hang guard is generous; the job should end about 2 s after the stop.
#[test]
fn a_stopped_rank_ends_the_job_and_is_named() {
    let s = script("STOP");
    let r = run_cli(
        &[
            "run",
            "-n",
            "3",
            "--liveness-timeout",
            "2",
            "--heartbeat",
            "0.5",
            "--",
            "sh",
            "-c",
            &s,
        ],
        Duration::from_secs(60),
    );
    assert!(!r.status.success(), "{r:?}");
    // `vargr run`'s own verdict (the other ranks print why they failed too, and their
    // writes to the shared stderr may land inside the line).
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains("the job was stopped"))
        .unwrap_or_else(|| panic!("vargr run gave no verdict: {r:?}"));
    assert!(
        line.contains("vargr: error: rank 2 (pid ") && line.contains("sent nothing for"),
        "{line}"
    );
    // The stopped process was killed and reaped, not left behind stopped.
    let pid = pid_in(line);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "rank 2 (pid {pid}) is still there"
    );
}

/// Rank 2 killed with SIGKILL: the ranks waiting for it fail too, moments later, and
/// rank 0 used to be blamed (the processes were checked in rank order) with exit
/// status 1. Now rank 2 is named and `vargr run` exits 137 (128 + 9), as mpirun does.
/// Repeated: the ranks that fail over it end within milliseconds of it.
#[test]
fn a_killed_rank_is_blamed_and_its_signal_is_the_exit_status() {
    let s = script("9");
    for round in 0..3 {
        let r = run_cli(
            &["run", "-n", "3", "--", "sh", "-c", &s],
            Duration::from_secs(60),
        );
        let blame = r
            .stderr
            .lines()
            .find(|l| l.contains("failed first"))
            .unwrap_or_else(|| panic!("round {round}: nobody blamed: {r:?}"));
        assert!(
            blame.contains("vargr: error: rank 2 (pid ") && blame.contains("SIGKILL"),
            "round {round}: {blame}"
        );
        assert_eq!(r.status.code(), Some(137), "round {round}: {r:?}");
    }
}

/// Under mpirun rank 0's process hosts the rendezvous and its heartbeats: the other
/// processes are told the job ended and why, fail, and mpirun ends the job.
#[test]
fn a_stopped_rank_ends_a_job_under_open_mpi() {
    let s = script("STOP");
    let mut child = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            "3",
            "sh",
            "-c",
            &s,
        ])
        .env_remove("VARGR_JOB")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun not found: install Open MPI (scripts/test.sh installs openmpi-bin)");
    let err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(err).unwrap_or_default());
    let st = wait_guarded(&mut child, Duration::from_secs(60));
    let stderr = reader.join().unwrap();
    let st = st.unwrap_or_else(|| panic!("mpirun still running (hang guard):\n{stderr}"));
    assert!(!st.success() && st.signal().is_none(), "{st:?}\n{stderr}");
    assert!(
        stderr.contains("the job was ended: rank 2 (pid ") && stderr.contains("sent nothing for"),
        "{stderr}"
    );
}

/// Under mpirun, when the process hosting the rendezvous (rank 0's) stops, the others
/// notice its silence themselves, name it, fail, and mpirun ends the job.
#[test]
fn a_stopped_rank_0_ends_a_job_under_open_mpi() {
    let s = format!(
        "if [ \"$OMPI_COMM_WORLD_RANK\" = 0 ]; then (sleep 1; kill -STOP $$) & fi; \
         exec {} slow-rank --rank 1 --iters 1000000 --sleep-us 1000",
        vargr_bench()
    );
    let mut child = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            "3",
            "sh",
            "-c",
            &s,
        ])
        .env_remove("VARGR_JOB")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun not found: install Open MPI (scripts/test.sh installs openmpi-bin)");
    let err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(err).unwrap_or_default());
    let st = wait_guarded(&mut child, Duration::from_secs(60));
    let stderr = reader.join().unwrap();
    let st = st.unwrap_or_else(|| panic!("mpirun still running (hang guard):\n{stderr}"));
    assert!(!st.success(), "{st:?}\n{stderr}");
    assert!(
        stderr.contains("rank 0's process (the job rendezvous at ")
            && stderr.contains("sent nothing for"),
        "{stderr}"
    );
}
