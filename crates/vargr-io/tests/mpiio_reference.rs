//! The MPI-IO reference (`bench/mpi/io_check.c`) against the Rust side of the workloads:
//! Open MPI's two io components write the seed's workloads through the views in runs
//! files, and the files must be byte for byte what `fill_pattern` says, so the reference
//! can judge the files vargr writes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use vargr_io::workload::{self, Kind, Size, Workload};
use vargr_io::{Run, View};

const COMPONENTS: [&str; 2] = ["romio321", "ompio"];

/// Whether `tool` runs at all; the tests are skipped, saying why, only when it is absent.
fn have(tool: &str) -> bool {
    match Command::new(tool).arg("--version").output() {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipped: {tool} not found (scripts/test.sh installs Open MPI)");
            false
        }
        Err(e) => panic!("{tool}: {e}"),
    }
}

/// Builds `bench/mpi/io_check.c` with mpicc into `dir`.
fn build_io_check(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/mpi/io_check.c");
    let exe = dir.join("io_check");
    let st = Command::new("mpicc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("mpicc");
    assert!(st.success(), "mpicc failed on {}", src.display());
    exe
}

fn mpirun(component: &str, n: usize, exe: &Path, args: &[&str]) -> Output {
    Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
            "--mca",
            "io",
            component,
            "-n",
            &n.to_string(),
        ])
        .arg(exe)
        .args(args)
        .env_remove("VARGR_JOB")
        .output()
        .expect("mpirun")
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `io_check both` with two iterations and checks its report line by line.
fn write_and_read(
    component: &str,
    exe: &Path,
    w: &Workload,
    runs: &Path,
    file: &Path,
    extra: &[&str],
) {
    let mut args = vec![
        "both",
        runs.to_str().unwrap(),
        file.to_str().unwrap(),
        "--iters",
        "2",
    ];
    args.extend_from_slice(extra);
    let out = mpirun(component, w.ranks(), exe, &args);
    let what = format!("{:?} {} ranks under {component}", w.kind, w.ranks());
    assert!(out.status.success(), "{what}: {}", text(&out));
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{what}: {}", text(&out));
    for (i, line) in lines.iter().enumerate() {
        let op = if i < 2 { "write" } else { "read" };
        let head = format!("{{\"op\":\"{op}\",\"seconds\":",);
        assert!(line.starts_with(&head), "{what}: {line}");
        let tail = format!(
            ",\"bytes\":{},\"ranks\":{},\"iters\":2,\"iter\":{}",
            w.file_len,
            w.ranks(),
            i % 2
        );
        assert!(line.contains(&tail), "{what}: {line}");
        if op == "read" {
            assert!(line.ends_with(",\"mismatches\":0}"), "{what}: {line}");
        }
    }
}

#[test]
fn open_mpi_writes_the_pattern_through_every_workload_view() {
    if !have("mpicc") || !have("mpirun") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build_io_check(dir.path());
    for kind in Kind::ALL {
        let w = workload::sized(kind, 4, Size::Small.bytes()).unwrap();
        let runs = dir.path().join(kind.name());
        std::fs::create_dir(&runs).unwrap();
        workload::write_runs_dir(&runs, &w).unwrap();
        let want = workload::expected_file(&w, 8);
        let mut files = Vec::new();
        for c in COMPONENTS {
            let file = dir.path().join(format!("{}-{c}", kind.name()));
            write_and_read(c, &exe, &w, &runs, &file, &[]);
            let got = std::fs::read(&file).unwrap();
            assert!(
                got == want,
                "{kind:?} under {c}: the file is not the pattern"
            );
            files.push(got);
        }
        assert!(files[0] == files[1], "{kind:?}: romio321 and ompio differ");
    }
}

#[test]
fn hints_ranks_without_data_and_damage() {
    if !have("mpicc") || !have("mpirun") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build_io_check(dir.path());
    let runs = dir.path().join("runs");
    std::fs::create_dir(&runs).unwrap();

    // Ranks 2 and 3 hold no data (one x plane over a 2×2 process grid), under both
    // components; then three ranks with collective buffering hints.
    let w = workload::stem2(4, 1, 6, 3, 2, 8).unwrap();
    assert_eq!(w.views.iter().filter(|v| v.bytes() == 0).count(), 2);
    workload::write_runs_dir(&runs, &w).unwrap();
    for c in COMPONENTS {
        let file = dir.path().join(format!("empty-{c}"));
        write_and_read(c, &exe, &w, &runs, &file, &[]);
        assert!(
            std::fs::read(&file).unwrap() == workload::expected_file(&w, 8),
            "{c}"
        );
    }
    let w = workload::bips3d(3, 3000, 24, 9).unwrap();
    workload::write_runs_dir(&runs, &w).unwrap();
    let file = dir.path().join("hinted");
    let hints = ["--cb-nodes", "2", "--cb-buffer", "4096"];
    write_and_read("romio321", &exe, &w, &runs, &file, &hints);
    assert!(std::fs::read(&file).unwrap() == workload::expected_file(&w, 8));

    // A damaged byte is found, named by its file offset, and fails the run.
    let mut bytes = std::fs::read(&file).unwrap();
    let at = w.views[2].runs()[1].offset + 5;
    bytes[at as usize] ^= 0x40;
    std::fs::write(&file, &bytes).unwrap();
    let args = ["read", runs.to_str().unwrap(), file.to_str().unwrap()];
    let out = mpirun("romio321", 3, &exe, &args);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "1 bytes differ from the pattern, the first at file offset {at}"
        )),
        "{}",
        text(&out)
    );

    // A runs file out of order is refused, naming the file.
    let bad = View::from_runs([Run::new(0, 8)]).unwrap();
    workload::write_runs_file(&runs.join("rank-0.runs"), bad.runs()).unwrap();
    let mut raw = std::fs::read(runs.join("rank-1.runs")).unwrap();
    raw.extend_from_slice(&[0; 16]);
    let count = (raw.len() as u64 - 16) / 16;
    raw[8..16].copy_from_slice(&count.to_le_bytes());
    std::fs::write(runs.join("rank-1.runs"), &raw).unwrap();
    let out = mpirun("romio321", 3, &exe, &args);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("rank-1.runs: run ") && text(&out).contains("must not overlap"),
        "{}",
        text(&out)
    );
}
