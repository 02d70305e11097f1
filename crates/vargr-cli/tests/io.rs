//! Collective I/O between real processes: files vargr-io writes under `vargr run` are
//! byte-identical to the ones Open MPI's MPI-IO (ROMIO) writes through the same views,
//! for every workload of the seed, with ROMIO's pattern and with LA-Two-Phase, on one
//! node and on two emulated sites.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use vargr_io::workload::{self, Kind};

fn results(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .map(|j| serde_json::from_str(j).unwrap())
        .collect()
}

#[test]
fn files_written_by_vargr_io_equal_romios_for_every_workload() {
    let dir = tempfile::tempdir().unwrap();
    let io_check = build_bench_mpi(dir.path(), "io_check");
    let ranks = 4;
    let bytes = 1 << 20;
    for kind in [Kind::Bips3d, Kind::Stem2, Kind::Ior] {
        let name = kind.name();
        let w = workload::sized(kind, ranks, bytes).unwrap();
        let runs = dir.path().join(format!("{name}-runs"));
        std::fs::create_dir(&runs).unwrap();
        workload::write_runs_dir(&runs, &w).unwrap();
        let reference = dir.path().join(format!("{name}.romio"));
        let out = Command::new("mpirun")
            .args([
                "--allow-run-as-root",
                "--oversubscribe",
                "--bind-to",
                "none",
            ])
            .args(["--mca", "io", "romio321", "-n", &ranks.to_string()])
            .arg(&io_check)
            .args(["write"])
            .arg(&runs)
            .arg(&reference)
            .env_remove("VARGR_JOB")
            .output()
            .expect("mpirun");
        assert!(out.status.success(), "{out:?}");
        let want = std::fs::read(&reference).unwrap();
        assert_eq!(want.len() as u64, w.file_len);
        for (method, extra) in [
            ("two-phase", &[][..]),
            ("la-two-phase", &["--sites", "2"][..]),
            (
                "la-two-phase+codec",
                &["--sites", "2", "--codec", "adaptive"][..],
            ),
        ] {
            let file = dir.path().join(format!("{name}.{method}"));
            let file_text = file.display().to_string();
            let n = ranks.to_string();
            let mut args = vec!["run", "-n", &n];
            args.extend_from_slice(extra);
            args.extend_from_slice(&[
                "--",
                vargr_bench(),
                "io-rank",
                "--workload",
                name,
                "--bytes",
                "1048576",
                "--file",
                &file_text,
                "--method",
                method,
                "--cb-buffer",
                "65536",
            ]);
            let r = run_cli(&args, Duration::from_secs(120));
            assert!(r.status.success(), "{name} {method}: {r:?}");
            let got = std::fs::read(&file).unwrap();
            assert!(
                got == want,
                "{name} {method}: the file differs from ROMIO's"
            );
            let res = results(&r.stdout);
            assert_eq!(res.len(), 2, "{name} {method}: {}", r.stdout);
            assert_eq!(res[0]["op"], "write");
            assert_eq!(res[1]["op"], "read");
            // With two sites, two aggregators, one per node.
            let aggs = res[0]["aggregators"].as_array().unwrap().len();
            assert_eq!(
                aggs,
                if extra.is_empty() { 1 } else { 2 },
                "{name} {method}"
            );
        }
    }
}

#[test]
fn a_rank_that_cannot_open_the_file_fails_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("missing").join("f");
    let file_text = file.display().to_string();
    let r = run_cli(
        &[
            "run",
            "-n",
            "3",
            "--",
            vargr_bench(),
            "io-rank",
            "--workload",
            "ior",
            "--bytes",
            "65536",
            "--file",
            &file_text,
        ],
        Duration::from_secs(60),
    );
    assert!(!r.status.success());
    // Rank 0 names the directory; the others say rank 0 failed, and nobody hangs.
    assert!(r.stderr.contains("opening"), "{}", r.stderr);
    assert!(r.stderr.contains("rank 0 failed"), "{}", r.stderr);
}

fn io_rank(ranks: &str, file: &Path, extra: &[&str]) -> CliRun {
    let file_text = file.display().to_string();
    let mut args = vec![
        "run",
        "-n",
        ranks,
        "--",
        vargr_bench(),
        "io-rank",
        "--workload",
        "ior",
        "--bytes",
        "1048576",
        "--cb-buffer",
        "65536",
        "--file",
        &file_text,
    ];
    args.extend_from_slice(extra);
    run_cli(&args, Duration::from_secs(120))
}

#[test]
fn a_full_disk_fails_every_rank_and_keeps_the_rounds_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    // Writes past 300,000 bytes fail with EFBIG, as on a full disk. One aggregator writes
    // rounds of 64 KiB in file order: four rounds fit, the fifth fails.
    let r = io_rank(
        "3",
        &file,
        &["--op", "write", "--file-size-limit", "300000"],
    );
    assert!(!r.status.success(), "{r:?}");
    assert!(r.stderr.contains("File too large"), "{}", r.stderr);
    // Every rank reports it: the aggregator with the OS error, the others naming it.
    assert!(r.stderr.contains("rank 0 failed"), "{}", r.stderr);
    let len = std::fs::metadata(&file).unwrap().len();
    assert_eq!(
        len, 300_000,
        "the file holds what was written before the failure"
    );
    let w = workload::sized(Kind::Ior, 3, 1 << 20).unwrap();
    let want = workload::expected_file(&w, 8);
    let got = std::fs::read(&file).unwrap();
    assert!(
        got[..4 * 65536] == want[..4 * 65536],
        "the whole rounds are in place"
    );
}

#[test]
fn a_rank_that_dies_mid_collective_ends_the_others_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let t = std::time::Instant::now();
    let r = io_rank("4", &dir.path().join("f"), &["--die-before-write", "2"]);
    assert!(!r.status.success(), "{r:?}");
    assert!(r.stderr.contains("rank 2"), "{}", r.stderr);
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "took {:?}",
        t.elapsed()
    );
}
