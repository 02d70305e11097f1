//! `vargr run` and job wire-up with real processes: local ranks, ranks as threads,
//! a hostfile's sites, Open MPI's mpirun, and the failures a user will meet.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn lines_sorted(out: &str) -> Vec<String> {
    let mut v: Vec<String> = out.lines().map(String::from).collect();
    v.sort();
    v
}

#[test]
fn every_rank_learns_the_whole_job() {
    let r = run_cli(
        &["run", "-n", "4", "--", vargr_bench(), "rank-info"],
        Duration::from_secs(60),
    );
    assert!(r.status.success(), "{r:?}");
    let got = lines_sorted(&r.stdout);
    assert_eq!(got.len(), 4, "{r:?}");
    for (i, l) in got.iter().enumerate() {
        assert!(
            l.starts_with(&format!("rank {i} of 4 ")) && l.ends_with("peers 4"),
            "{l}"
        );
    }
}

#[test]
fn ranks_per_process_share_a_process_and_sites_are_passed_on() {
    let r = run_cli(
        &[
            "run",
            "-n",
            "5",
            "--ranks-per-process",
            "2",
            "--site",
            "west",
            "--",
            vargr_bench(),
            "rank-info",
        ],
        Duration::from_secs(60),
    );
    assert!(r.status.success(), "{r:?}");
    let got = lines_sorted(&r.stdout);
    assert_eq!(got.len(), 5, "{r:?}");
    assert!(got.iter().all(|l| l.contains("site west")), "{got:?}");
}

#[test]
fn the_first_failing_rank_stops_the_job_and_is_named() {
    let script = "if [ \"$VARGR_RANK\" = 2 ]; then exit 3; fi; exec sleep 30";
    let r = run_cli(
        &["run", "-n", "3", "--", "sh", "-c", script],
        Duration::from_secs(20),
    );
    assert!(!r.status.success());
    assert!(
        r.stderr.contains("rank 2") && r.stderr.contains("exit status: 3"),
        "{r:?}"
    );
    // The failing rank's own exit status, as mpirun reports it.
    assert_eq!(r.status.code(), Some(3), "{r:?}");
}

#[test]
fn a_rank_that_never_arrives_is_named_by_the_others() {
    let script = format!(
        "if [ \"$VARGR_RANK\" = 1 ]; then exec sleep 10; else exec {} rank-info; fi",
        vargr_bench()
    );
    let r = run_cli(
        &[
            "run",
            "-n",
            "3",
            "--startup-timeout",
            "2",
            "--",
            "sh",
            "-c",
            &script,
        ],
        Duration::from_secs(30),
    );
    assert!(!r.status.success());
    assert!(
        r.stderr.contains("[1]") && r.stderr.contains("never reached"),
        "{r:?}"
    );
}

#[test]
fn a_hostfile_too_small_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let hf = dir.path().join("hosts");
    std::fs::write(&hf, "node1 slots=2 site=a\n").unwrap();
    let r = run_cli(
        &[
            "run",
            "-n",
            "3",
            "--hosts",
            hf.to_str().unwrap(),
            "--",
            "true",
        ],
        Duration::from_secs(20),
    );
    assert!(!r.status.success());
    assert!(
        r.stderr.contains("needs 3 process slots") && r.stderr.contains("has 2"),
        "{r:?}"
    );
}

#[test]
fn ranks_started_by_open_mpi_wire_up_without_vargr_run() {
    let out = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            "3",
            vargr_bench(),
            "rank-info",
        ])
        .env_remove("VARGR_JOB")
        .output()
        .expect("mpirun not found: install Open MPI (scripts/test.sh installs openmpi-bin)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = lines_sorted(&stdout);
    assert_eq!(got.len(), 3, "{got:?}");
    for (i, l) in got.iter().enumerate() {
        assert!(l.starts_with(&format!("rank {i} of 3 ")), "{l}");
    }
}

/// Every rank printed `rank R ok` exactly once for R in 0..n.
fn all_ok(stdout: &str, n: usize) {
    let got = lines_sorted(stdout);
    let mut want: Vec<String> = (0..n).map(|r| format!("rank {r} ok")).collect();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn the_mesh_carries_all_pairs_and_a_large_ring_between_processes() {
    let r = run_cli(
        &["run", "-n", "6", "--", vargr_bench(), "mesh-check"],
        Duration::from_secs(60),
    );
    assert!(r.status.success(), "{r:?}");
    all_ok(&r.stdout, 6);
}

/// `process R shm sent S received M single-copy K` lines of `mesh-check --shm-stats`,
/// as R -> (S, M, K).
fn shm_counts(stdout: &str) -> std::collections::BTreeMap<u32, (u64, u64, u64)> {
    stdout
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w[..] {
                ["process", r, "shm", "sent", s, "received", m, "single-copy", k] => Some((
                    r.parse().ok()?,
                    (s.parse().ok()?, m.parse().ok()?, k.parse().ok()?),
                )),
                _ => None,
            }
        })
        .collect()
}

#[test]
fn processes_of_one_host_exchange_messages_through_shared_memory() {
    // One rank per process: every message of the check (3 small ones each and the 1 MiB
    // ring) crosses processes, and the counters show each went through shared memory.
    let args = [
        "run",
        "-n",
        "4",
        "--ranks-per-process",
        "1",
        "--",
        vargr_bench(),
        "mesh-check",
        "--shm-stats",
    ];
    let r = run_cli(&args, Duration::from_secs(60));
    assert!(r.status.success(), "{r:?}");
    let counts = shm_counts(&r.stdout);
    assert_eq!(counts.len(), 4, "{}", r.stdout);
    // The 1 MiB message each sends on round the ring goes by single copy (the kernel
    // lets processes of one user read each other's memory).
    for (p, counts) in &counts {
        assert_eq!(*counts, (4, 4, 1), "process {p}: {}", r.stdout);
    }
    let ok: Vec<_> = r.stdout.lines().filter(|l| l.ends_with(" ok")).collect();
    assert_eq!(ok.len(), 4, "{}", r.stdout);
    // Threads and processes mixed: only messages between processes take the rings.
    let mixed = [
        "run",
        "-n",
        "7",
        "--ranks-per-process",
        "3",
        "--",
        vargr_bench(),
        "mesh-check",
        "--shm-stats",
    ];
    let r = run_cli(&mixed, Duration::from_secs(60));
    assert!(r.status.success(), "{r:?}");
    let counts = shm_counts(&r.stdout);
    // Process 0 (ranks 0-2) sends each of its 3 ranks' values to the 4 ranks elsewhere,
    // and the ring's message from rank 2 to rank 3.
    assert_eq!(counts.get(&0), Some(&(13, 13, 1)), "{}", r.stdout);
    // Small collectives between the processes meet in the job's collective area (the
    // `shm` algorithm, as for threads); without shared memory they take messages.
    let small = |env: &[(&str, Option<&std::ffi::OsStr>)]| {
        let bench = [
            "run",
            "-n",
            "4",
            "--",
            vargr_bench(),
            "coll-bench-rank",
            "--op",
            "allreduce",
            "--bytes",
            "8",
            "--iters",
            "20",
            "--warmup",
            "2",
            "--compute-iters",
            "0",
        ];
        let r = run_cli_env(&bench, env, Duration::from_secs(60));
        assert!(r.status.success(), "{r:?}");
        let line = r.stdout.lines().find_map(|l| l.strip_prefix("RESULT "));
        let v: serde_json::Value = serde_json::from_str(line.expect("a RESULT line")).unwrap();
        v["algorithm"].as_str().unwrap_or_default().to_string()
    };
    assert_eq!(small(&[]), "shm");
    let off = [("VARGR_SHM", Some(std::ffi::OsStr::new("false")))];
    assert_ne!(small(&off), "shm");
    // Switched off, the same job runs over the sockets.
    let r = run_cli_env(&args, &off, Duration::from_secs(60));
    assert!(r.status.success(), "{r:?}");
    assert_eq!(
        r.stdout.lines().filter(|l| l.ends_with("shm off")).count(),
        4,
        "{}",
        r.stdout
    );
}

#[test]
fn the_mesh_mixes_ranks_as_threads_and_processes() {
    let r = run_cli(
        &[
            "run",
            "-n",
            "7",
            "--ranks-per-process",
            "3",
            "--",
            vargr_bench(),
            "mesh-check",
        ],
        Duration::from_secs(60),
    );
    assert!(r.status.success(), "{r:?}");
    all_ok(&r.stdout, 7);
}

#[test]
fn wildcard_and_nonblocking_receives_keep_mpis_order_across_processes_and_threads() {
    for extra in [&[][..], &["--ranks-per-process", "3"][..]] {
        let mut args = vec!["run", "-n", "7"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", vargr_bench(), "p2p-check"]);
        let r = run_cli(&args, Duration::from_secs(60));
        assert!(r.status.success(), "{extra:?}: {r:?}");
        let got = lines_sorted(&r.stdout);
        let mut want: Vec<String> = (0..7).map(|r| format!("rank {r} p2p ok")).collect();
        want.sort();
        assert_eq!(got, want, "{extra:?}");
    }
}

#[test]
fn the_mesh_works_under_open_mpi() {
    let out = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            "4",
            vargr_bench(),
            "mesh-check",
        ])
        .env_remove("VARGR_JOB")
        .output()
        .expect("mpirun not found: install Open MPI (scripts/test.sh installs openmpi-bin)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    all_ok(&stdout, 4);
}

fn mpirun(n: usize, prog: &[&str]) -> String {
    let out = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            &n.to_string(),
        ])
        .args(prog)
        .env_remove("VARGR_JOB")
        .output()
        .expect("mpirun not found: install Open MPI (scripts/test.sh installs openmpi-bin)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn collectives_equal_open_mpi_for_processes_threads_and_mpirun() {
    let dir = tempfile::tempdir().unwrap();
    let reference = build_bench_mpi(dir.path(), "coll_check");
    let reference = reference.to_str().unwrap();
    // Processes; ranks as threads under the priority and the coscheduling scheduler;
    // threads and processes mixed; all threads; three sites over an emulated
    // WAN (hierarchical algorithms chosen from the job's sites).
    let cases: [(usize, &[&str]); 6] = [
        (4, &[]),
        (6, &["--ranks-per-process", "3", "--sched", "priority"]),
        (6, &["--ranks-per-process", "3", "--sched", "coschedule"]),
        (7, &["--ranks-per-process", "3"]),
        (6, &["--ranks-per-process", "6"]),
        (
            6,
            &[
                "--ranks-per-process",
                "2",
                "--sites",
                "3",
                "--wan",
                "rtt=4ms",
            ],
        ),
    ];
    for (n, extra) in cases {
        let want = lines_sorted(&mpirun(n, &[reference]));
        assert!(want.len() > 20 * n, "{want:?}");
        let n_text = n.to_string();
        let mut args = vec!["run", "-n", &n_text];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", vargr_bench(), "coll-check"]);
        let r = run_cli(&args, Duration::from_secs(120));
        assert!(r.status.success(), "{r:?}");
        assert_eq!(lines_sorted(&r.stdout), want, "{n} ranks, {extra:?}");
    }
    // The same program started by mpirun instead of vargr run.
    let want = lines_sorted(&mpirun(5, &[reference]));
    assert_eq!(
        lines_sorted(&mpirun(5, &[vargr_bench(), "coll-check"])),
        want
    );
}

#[test]
fn sites_that_split_a_process_or_miscount_are_refused() {
    for (args, want) in [
        (
            vec!["run", "-n", "6", "--ranks-per-process", "4", "--sites", "3"],
            "share a process",
        ),
        (vec!["run", "-n", "6", "--sites", "a:2,b:3"], "hold 5 ranks"),
        (
            vec!["run", "-n", "2", "--sites", "2", "--wan", "rtt=soon"],
            "--wan",
        ),
    ] {
        let mut args = args;
        args.extend_from_slice(&["--", "true"]);
        let r = run_cli(&args, Duration::from_secs(30));
        assert!(!r.status.success(), "{r:?}");
        assert!(r.stderr.contains(want), "{want}: {r:?}");
    }
}

#[test]
fn sor_gives_the_same_answer_with_conditional_allreduce_across_emulated_sites() {
    let r = run_cli(
        &[
            "run",
            "-n",
            "6",
            "--ranks-per-process",
            "2",
            "--sites",
            "3",
            "--wan",
            "rtt=2ms",
            "--",
            vargr_bench(),
            "sor-check",
            "--side",
            "40",
            "--epsilon",
            "60",
        ],
        Duration::from_secs(120),
    );
    assert!(r.status.success(), "{r:?}");
    let got = lines_sorted(&r.stdout);
    assert_eq!(got.len(), 6, "{r:?}");
    for (i, l) in got.iter().enumerate() {
        assert!(l.starts_with(&format!("rank {i} ok ")), "{l}");
    }
}

#[test]
fn the_load_balance_monitor_names_a_slow_rank() {
    for extra in [&[][..], &["--ranks-per-process", "2"][..]] {
        let mut args = vec!["run", "-n", "4", "--monitor"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[
            "--",
            vargr_bench(),
            "slow-rank",
            "--rank",
            "2",
            "--iters",
            "600",
        ]);
        let r = run_cli(&args, Duration::from_secs(60));
        assert!(r.status.success(), "{r:?}");
        assert!(
            r.stderr
                .contains("vargr monitor (final): allreduce: rank 2 arrived last"),
            "{extra:?}: {}",
            r.stderr
        );
    }
}

#[test]
fn monitor_status_feeds_vargr_top_and_statistics_can_run_distributed() {
    let tmp = tempfile::tempdir().unwrap();
    let status = tmp.path().join("status.json");
    let st = status.to_str().unwrap();
    let r = run_cli(
        &[
            "run",
            "-n",
            "4",
            "--ranks-per-process",
            "2",
            "--monitor",
            "load-balance,stats",
            "--status",
            st,
            "--",
            vargr_bench(),
            "slow-rank",
            "--rank",
            "2",
            "--iters",
            "400",
        ],
        Duration::from_secs(60),
    );
    assert!(r.status.success(), "{r:?}");
    assert!(
        r.stderr.contains("allreduce latency µs: mean"),
        "{}",
        r.stderr
    );
    // The last status of the run is still there: `vargr top --once` draws it.
    let top = run_cli(&["top", "--once", st], Duration::from_secs(30));
    assert!(top.status.success(), "{top:?}");
    assert!(top.stdout.contains("COLLECTIVE"), "{}", top.stdout);
    let row = top
        .stdout
        .lines()
        .find(|l| l.starts_with("allreduce "))
        .unwrap_or_else(|| panic!("no allreduce row:\n{}", top.stdout));
    assert!(row.contains("rank 2 ("), "{row}");
    assert!(top.stdout.contains("ranks 2..4 of 4"), "{}", top.stdout);

    // Distributed statistics: every process computes its own, only results travel.
    let r = run_cli(
        &[
            "run",
            "-n",
            "4",
            "--ranks-per-process",
            "2",
            "--monitor",
            "stats,distributed",
            "--",
            vargr_bench(),
            "slow-rank",
            "--rank",
            "2",
            "--iters",
            "300",
        ],
        Duration::from_secs(60),
    );
    assert!(r.status.success(), "{r:?}");
    for p in ["ranks 0..2 of 4", "ranks 2..4 of 4"] {
        assert!(
            r.stderr
                .contains(&format!("allreduce on {p}, call time µs: mean")),
            "{p}: {}",
            r.stderr
        );
    }

    // Without a run to show, `vargr top` says so.
    let top = run_cli(
        &[
            "top",
            "--once",
            tmp.path().join("none.json").to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(!top.status.success());
    assert!(top.stderr.contains("none.json"), "{}", top.stderr);
}

/// mpirun's habits: `-np N`, the program without `--`, `--oversubscribe`, `--hostfile`
/// and `--tag-output`, and what is typed reaching rank 0 only.
#[test]
fn vargr_run_takes_mpiruns_spelling_and_gives_rank_0_the_input() {
    let run = |args: &[&str], input: &str| {
        let mut child = Command::new(vargr())
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
        let status = wait_guarded(&mut child, Duration::from_secs(60)).expect("vargr run hung");
        let mut out = String::new();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(status.success(), "{args:?}: {status}: {err}");
        let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    // Each rank echoes what it reads, after its rank; only rank 0 reads anything.
    let echo = r#"printf "%s:%s\n" "$VARGR_RANK" "$(cat)""#;
    assert_eq!(
        run(
            &["run", "-np", "3", "--oversubscribe", "sh", "-c", echo],
            "typed"
        ),
        ["0:typed", "1:", "2:"]
    );
    // The program's own -np is its own, and `--` still works.
    let args = r#"echo "$VARGR_RANK $*""#;
    assert_eq!(
        run(&["run", "-n", "1", "sh", "-c", args, "sh", "-np", "7"], ""),
        ["0 -np 7"]
    );
    assert_eq!(
        run(&["run", "-np", "1", "--", "sh", "-c", args, "sh", "x"], ""),
        ["0 x"]
    );
    // Open MPI's --tag-output; a rank's lines arrive whole, and a last one without a
    // newline gets one rather than run into another rank's (lines sorted here).
    assert_eq!(
        run(
            &[
                "run",
                "-np",
                "2",
                "--tag-output",
                "sh",
                "-c",
                "echo hi; printf end"
            ],
            ""
        ),
        [
            "[1,0]<stdout>:end",
            "[1,0]<stdout>:hi",
            "[1,1]<stdout>:end",
            "[1,1]<stdout>:hi"
        ]
    );
    // --host as mpirun takes it; ranks fill the slots in order. Through the remote
    // launcher too, the input goes to rank 0, after the secret line that the launcher
    // writes first (which a joining rank reads, as `read` does here).
    let on_hosts = |prog: &str, input: &str| {
        let args = [
            "run",
            "-np",
            "3",
            "--host",
            "localhost,localhost:2",
            "--launcher",
            "sh -c {cmd}",
            "sh",
            "-c",
            prog,
        ];
        run(&args, input)
    };
    assert_eq!(on_hosts(r#"echo "$VARGR_RANK""#, ""), ["0", "1", "2"]);
    assert_eq!(
        on_hosts(
            r#"read secret; printf "%s:%s\n" "$VARGR_RANK" "$(cat)""#,
            "typed far away"
        ),
        ["0:typed far away", "1:", "2:"]
    );
    for bad in ["localhost:x", "-oProxyCommand=x"] {
        let r = run_cli(
            &["run", "-n", "1", "--host", bad, "true"],
            Duration::from_secs(30),
        );
        assert!(
            !r.status.success() && r.stderr.contains("--host"),
            "{bad}: {r:?}"
        );
    }
    // Python ranks are one per process: refused before anything starts, saying why.
    let r = run_cli(
        &[
            "run",
            "-n",
            "2",
            "--ranks-per-process",
            "2",
            "python3",
            "-c",
            "pass",
        ],
        Duration::from_secs(30),
    );
    assert!(
        !r.status.success() && r.stderr.contains("Python rank"),
        "{r:?}"
    );
    // --hostfile is --hosts: a missing one is named.
    let bad = run_cli(
        &["run", "-n", "1", "--hostfile", "/nonexistent/hosts", "true"],
        Duration::from_secs(30),
    );
    assert!(
        !bad.status.success() && bad.stderr.contains("/nonexistent/hosts"),
        "{bad:?}"
    );
}
