//! Debian's HPC Challenge (`hpcc`: HPL, PTRANS, DGEMM, STREAM, RandomAccess, FFT, b_eff;
//! a program no one here wrote, installed by this test with apt when missing) under
//! libvargr_mpi.so, traced and compressing between two emulated sites: every kernel
//! verifies its own result, and the library must leave every verification passing.
//!
//! Needs `mpirun`; skipped with a message without it, unless `VARGR_REQUIRE_MPIRUN=1`.

use std::path::Path;
use std::process::Command;

mod common;
use common::{have_mpirun, with_library, MPIRUN};

fn hpcc() {
    // `hpcc` takes no options: any run of it is a benchmark run, writing hpccoutf.txt.
    let found = || {
        Command::new("sh")
            .args(["-c", "command -v hpcc"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if found() {
        return;
    }
    let apt = Command::new("apt-get")
        .args(["install", "-y", "-qq", "hpcc"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output();
    assert!(
        apt.is_ok_and(|o| o.status.success()) && found(),
        "hpcc missing and not installable: apt-get install hpcc"
    );
}

/// HPCC's input (bench/mpi/hpccinf.txt.in, shared with `vargr bench mpi-shim`) for a
/// small problem on 4 ranks (2 x 2): seconds, not minutes, on two cores.
fn input() -> String {
    include_str!("../../../bench/mpi/hpccinf.txt.in")
        .replace("@N@", "600")
        .replace("@NB@", "60")
        .replace("@P@", "2")
        .replace("@Q@", "2")
}

/// Runs hpcc in `dir` (with the library when `with`); returns its output file and
/// mpirun's stderr.
fn run(dir: &Path, with: bool) -> (String, String) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("hpccinf.txt"), input()).unwrap();
    let mut c = Command::new("mpirun");
    c.args(MPIRUN).args(["-n", "4"]);
    c.env_remove("LD_PRELOAD");
    if with {
        let trace = dir.join("trace");
        with_library(
            &mut c,
            &[
                ("VARGR_MPI_TRACE", trace.as_os_str()),
                ("VARGR_MPI_CODEC", "fixed:lz4".as_ref()),
                ("VARGR_MPI_SITES", "blocks:2".as_ref()),
                ("VARGR_MPI_CODEC_MIN", "4k".as_ref()),
            ],
        );
    }
    let o = c.arg("hpcc").current_dir(dir).output().unwrap();
    assert!(
        o.status.success(),
        "hpcc (library: {with}): {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (
        std::fs::read_to_string(dir.join("hpccoutf.txt")).unwrap(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The kernels' verdicts: every line of the output that says PASSED or FAILED, with
/// the kernel it belongs to, and the summary's success and error counts.
fn verdicts(out: &str) -> Vec<String> {
    let mut section = String::new();
    let mut v = Vec::new();
    for l in out.lines() {
        if l.starts_with("Begin of ") {
            section = l.trim_start_matches("Begin of ").to_string();
        }
        if l.contains("PASSED") || l.contains("FAILED") {
            let word = if l.contains("FAILED") {
                "FAILED"
            } else {
                "PASSED"
            };
            v.push(format!("{section}: {word}"));
        }
        // The summary's own verdicts: RandomAccess's errors across ranks, and success.
        if section.starts_with("Summary") && (l.starts_with("Success=") || l.contains("_Errors=")) {
            v.push(l.to_string());
        }
    }
    v
}

/// MPIFFT's largest error after its inverse transform (the summary's `MPIFFT_maxErr`).
fn fft_error(out: &str) -> f64 {
    out.lines()
        .find_map(|l| l.strip_prefix("MPIFFT_maxErr="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::INFINITY)
}

#[test]
fn hpcc_verifies_every_kernel_traced_and_compressed() {
    if !have_mpirun() {
        return;
    }
    hpcc();
    let tmp = tempfile::tempdir().unwrap();
    let (plain_out, _) = run(&tmp.path().join("plain"), false);
    let plain = verdicts(&plain_out);
    let (out, err) = run(&tmp.path().join("with"), true);
    let with = verdicts(&out);
    // PTRANS's ten checks, HPL's residual, Success=1 and RandomAccess's error counts.
    assert!(plain.len() >= 14, "{plain:?}");
    assert!(
        plain
            .iter()
            .all(|v| v.ends_with("PASSED") || v.ends_with("=0") || v == "Success=1"),
        "{plain:?}"
    );
    assert_eq!(with, plain, "{out}");
    for o in [&plain_out, &out] {
        assert!(fft_error(o) < 1e-10, "MPIFFT_maxErr {}", fft_error(o));
    }
    // The job compressed: PTRANS and HPL's panels cross between the sites.
    assert!(err.contains("vargr-mpi: compression fixed:lz4:"), "{err}");
    let files = vargr_trace::TraceFile::read_dir(&tmp.path().join("with/trace")).unwrap();
    assert_eq!(files.len(), 4);
    // Every message pairs with its receive: HPCC's small Isends share Open MPI's handle
    // for a send finished at once, and its row and column communicators are first used
    // in different orders by different ranks.
    let m = vargr_trace::analysis::analyze(&files).messages;
    assert_eq!((m.unmatched_sends, m.unmatched_recvs), (0, 0));
    assert!(m.matched.len() > 10_000, "{}", m.matched.len());
}
