//! What the tests of libvargr_mpi.so share: mpirun's flags, the check that it is there,
//! and the library, built fresh for the test's profile.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub const MPIRUN: &[&str] = &[
    "--allow-run-as-root",
    "--oversubscribe",
    "--bind-to",
    "none",
    // A program that deadlocks (a matching bug) ends with an error instead of holding
    // the test run for ever.
    "--timeout",
    "300",
];

pub fn have_mpirun() -> bool {
    let found = Command::new("mpirun").arg("--version").output().is_ok();
    if !found {
        assert!(
            std::env::var_os("VARGR_REQUIRE_MPIRUN").is_none(),
            "mpirun is required (VARGR_REQUIRE_MPIRUN is set) but not on the PATH"
        );
        eprintln!("skipped: mpirun not found (install openmpi-bin and libopenmpi-dev)");
    }
    found
}

/// target/<profile>: two levels above this test's executable (target/<profile>/deps).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// Runs `cargo build ARGS` in this test's target directory and profile.
pub fn cargo_build(args: &[&str]) {
    let profile = target_dir();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("build")
        .args(args)
        .env("CARGO_TARGET_DIR", profile.parent().unwrap());
    if profile.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    assert!(
        cmd.status().unwrap().success(),
        "cargo build {args:?} failed"
    );
}

pub fn lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        // `cargo test` builds the cdylib for the tests but leaves target/<profile>/
        // libvargr_mpi.so as it was: refresh it (a no-op when up to date).
        cargo_build(&["-p", "vargr-mpi"]);
        let l = target_dir().join("libvargr_mpi.so");
        assert!(l.is_file(), "{} missing", l.display());
        l
    })
    .clone()
}

/// The library built for MPICH (crates/vargr-mpi-mpich), fresh.
#[allow(dead_code)] // not every test file runs MPICH
pub fn lib_mpich() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        cargo_build(&["-p", "vargr-mpi-mpich"]);
        let l = target_dir().join("libvargr_mpi_mpich.so");
        assert!(l.is_file(), "{} missing", l.display());
        l
    })
    .clone()
}

/// Preloads the library into mpirun's ranks with `vars` set for every rank (`-x` passes
/// each on); call before the program's arguments.
#[allow(dead_code)] // not every test file preloads this way
pub fn with_library(c: &mut Command, vars: &[(&str, &OsStr)]) {
    c.args(["-x", "LD_PRELOAD"]).env("LD_PRELOAD", lib());
    for (k, v) in vars {
        c.args(["-x", k]).env(k, v);
    }
}

/// `$VARGR_BIN`, else the profile's vargr (built if missing), with the library beside it
/// fresh.
#[allow(dead_code)] // not every test file runs vargr
pub fn vargr() -> PathBuf {
    lib();
    let v = match std::env::var_os("VARGR_BIN") {
        Some(v) => PathBuf::from(v),
        None => {
            let v = target_dir().join("vargr");
            if !v.is_file() {
                cargo_build(&["-p", "vargr-cli", "--bin", "vargr"]);
            }
            v
        }
    };
    assert!(v.is_file(), "{} missing", v.display());
    v
}

/// `o`'s stdout, after checking that it succeeded.
#[allow(dead_code)]
pub fn ok(what: &str, o: Output) -> String {
    assert!(
        o.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Builds one of the tests' C programs into `dir`.
#[allow(dead_code)]
pub fn build_c(dir: &Path, name: &str) -> String {
    let prog = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    ok(
        "mpicc",
        Command::new("mpicc")
            .args(["-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&prog)
            .arg(&src)
            .output()
            .unwrap(),
    );
    prog.to_str().unwrap().to_string()
}
