//! Runtime files (rendezvous files, Unix sockets) with real processes: they live in the
//! user's private runtime directory, are refused when anyone else could have written
//! them, and do not outlive the run that made them.
//!
//! Every test points `XDG_RUNTIME_DIR` and `TMPDIR` at a directory of its own, so it
//! sees exactly what its processes left, wherever they put it.

mod common;

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// A private `XDG_RUNTIME_DIR` and `TMPDIR` under one temporary directory.
struct Sandbox {
    root: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let root = tempfile::tempdir().unwrap();
        for d in ["xdg", "tmp"] {
            std::fs::create_dir(root.path().join(d)).unwrap();
            std::fs::set_permissions(root.path().join(d), std::fs::Permissions::from_mode(0o700))
                .unwrap();
        }
        Sandbox { root }
    }

    fn xdg(&self) -> PathBuf {
        self.root.path().join("xdg")
    }

    /// The runtime directory vargr uses under this sandbox.
    fn runtime(&self) -> PathBuf {
        self.xdg().join("vargr")
    }

    fn tmp(&self) -> PathBuf {
        self.root.path().join("tmp")
    }

    fn env(&self) -> Vec<(&'static str, Option<&OsStr>)> {
        vec![
            (
                "XDG_RUNTIME_DIR",
                Some(self.xdg().into_os_string().leak() as &OsStr),
            ),
            ("TMPDIR", Some(self.tmp().into_os_string().leak() as &OsStr)),
        ]
    }

    fn apply(&self, cmd: &mut Command) {
        cmd.env("XDG_RUNTIME_DIR", self.xdg())
            .env("TMPDIR", self.tmp());
    }

    /// Every socket file anywhere in the sandbox.
    fn sockets(&self) -> Vec<PathBuf> {
        fn walk(d: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
                let p = e.path();
                let t = e.file_type().unwrap();
                if t.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "sock") {
                    out.push(p);
                }
            }
        }
        let mut out = Vec::new();
        walk(self.root.path(), &mut out);
        out
    }
}

fn all_ok(stdout: &str, n: usize) {
    let mut got: Vec<&str> = stdout.lines().collect();
    got.sort();
    let mut want: Vec<String> = (0..n).map(|r| format!("rank {r} ok")).collect();
    want.sort();
    assert_eq!(got, want);
}

/// Local ranks meet over Unix sockets in the runtime directory (created 0700), and no
/// socket is left behind: neither by ranks that exit (each removes its own) nor by a
/// rank killed with SIGKILL (`vargr run` removes it). Every run used to leave its
/// `vargr-mesh-*.sock` files in the temporary directory.
#[test]
fn no_mesh_socket_outlives_a_run() {
    let sb = Sandbox::new();
    let r = run_cli_env(
        &["run", "-n", "3", "--", vargr_bench(), "mesh-check"],
        &sb.env(),
        Duration::from_secs(60),
    );
    assert!(r.status.success(), "{r:?}");
    all_ok(&r.stdout, 3);
    let m = std::fs::symlink_metadata(sb.runtime()).expect("the ranks made no runtime directory");
    assert!(m.is_dir() && m.permissions().mode() & 0o077 == 0, "{m:?}");
    assert_eq!(
        sb.sockets(),
        Vec::<PathBuf>::new(),
        "sockets left after a run"
    );

    let script = format!(
        "if [ \"$VARGR_RANK\" = 2 ]; then (sleep 1; kill -9 $$) & fi; \
         exec {} slow-rank --rank 0 --iters 1000000 --sleep-us 1000",
        vargr_bench()
    );
    let r = run_cli_env(
        &["run", "-n", "3", "--", "sh", "-c", &script],
        &sb.env(),
        Duration::from_secs(60),
    );
    assert!(!r.status.success(), "{r:?}");
    assert_eq!(
        sb.sockets(),
        Vec::<PathBuf>::new(),
        "sockets left after a killed rank"
    );
}

/// Without `vargr run` (mpirun), each rank removes its own socket when its mesh goes,
/// and rank 0 its rendezvous file.
#[test]
fn no_runtime_file_outlives_a_job_under_open_mpi() {
    let sb = Sandbox::new();
    let mut cmd = Command::new("mpirun");
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        "3",
        vargr_bench(),
        "mesh-check",
    ])
    .env_remove("VARGR_JOB");
    sb.apply(&mut cmd);
    let out = cmd
        .output()
        .expect("mpirun not found: install Open MPI (scripts/test.sh installs openmpi-bin)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    all_ok(&stdout, 3);
    assert!(sb.runtime().is_dir(), "the ranks made no runtime directory");
    let left: Vec<_> = std::fs::read_dir(sb.runtime())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(left, Vec::<PathBuf>::new(), "runtime files left by the job");
    assert_eq!(sb.sockets(), Vec::<PathBuf>::new());
}

/// A rank started by a launcher other than `vargr run` (here, as under srun) looks for
/// rank 0's rendezvous file in the runtime directory.
fn rank_one_under_slurm(sb: &Sandbox) -> CliRun {
    let mut env = sb.env();
    env.extend([
        ("VARGR_RANK", Some(OsStr::new("1"))),
        ("VARGR_SIZE", Some(OsStr::new("2"))),
        ("SLURM_JOB_ID", Some(OsStr::new("4242"))),
        ("VARGR_JOB", None),
        ("OMPI_MCA_ess_base_jobid", None),
        ("PMIX_NAMESPACE", None),
        ("PMI_KVSNAME", None),
        ("SLURM_STEP_ID", None),
    ]);
    run_program_env(vargr_bench(), &["rank-info"], &env, Duration::from_secs(20))
}

/// A well-formed rendezvous file pointing nowhere, as another user would plant it.
fn plant(path: &Path, mode: u32) {
    let secret = vargr_net::auth::Secret::random();
    std::fs::write(path, format!("tcp:127.0.0.1:9\n{}\n", secret.to_hex())).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A rendezvous file anyone else could have written, or one in a runtime directory that
/// is not private, is refused at once with the path and the reason. It used to be read
/// from the shared temporary directory, whoever wrote it.
#[test]
fn a_planted_rendezvous_file_is_refused() {
    let sb = Sandbox::new();
    // Where the old code looked: it would have believed this one.
    plant(&sb.tmp().join("vargr-job-4242.rendezvous"), 0o666);

    std::fs::create_dir(sb.runtime()).unwrap();
    std::fs::set_permissions(sb.runtime(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let file = sb.runtime().join("job-4242.rendezvous");
    plant(&file, 0o666);
    let r = rank_one_under_slurm(&sb);
    assert!(!r.status.success(), "{r:?}");
    assert!(
        r.stderr.contains(&file.display().to_string())
            && r.stderr.contains("writable by group or others"),
        "{r:?}"
    );

    // The directory itself open to others: refused, and left as it is.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(sb.runtime(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = rank_one_under_slurm(&sb);
    assert!(!r.status.success(), "{r:?}");
    assert!(
        r.stderr.contains(&format!(
            "runtime directory {}: is writable",
            sb.runtime().display()
        )),
        "{r:?}"
    );
    let mode = std::fs::metadata(sb.runtime())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o777, "the directory was changed");

    // A link in place of the directory, even to a private one.
    std::fs::remove_file(&file).unwrap();
    std::fs::remove_dir(sb.runtime()).unwrap();
    let elsewhere = sb.root.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).unwrap();
    plant(&elsewhere.join("job-4242.rendezvous"), 0o600);
    std::os::unix::fs::symlink(&elsewhere, sb.runtime()).unwrap();
    let r = rank_one_under_slurm(&sb);
    assert!(!r.status.success(), "{r:?}");
    assert!(
        r.stderr.contains(&sb.runtime().display().to_string())
            && r.stderr.contains("symbolic link"),
        "{r:?}"
    );
}

/// A tree's Unix sockets live in a private directory of their own inside the runtime
/// directory it is given, and go with it at shutdown.
#[test]
fn a_tree_keeps_its_sockets_in_the_runtime_directory_and_removes_them() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("vargr");
    let net = start(
        "kary:2@4",
        "echo",
        vargr_tbon::NetworkOptions {
            runtime_dir: runtime.clone(),
            ..opts()
        },
    );
    let prefix = vargr_tbon::sockdir_prefix(std::process::id());
    let sockdirs: Vec<PathBuf> = std::fs::read_dir(&runtime)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&prefix)
        })
        .collect();
    assert_eq!(sockdirs.len(), 1, "{sockdirs:?}");
    let m = std::fs::symlink_metadata(&sockdirs[0]).unwrap();
    assert!(m.is_dir() && m.permissions().mode() & 0o077 == 0, "{m:?}");
    net.shutdown().unwrap();
    let left: Vec<_> = std::fs::read_dir(&runtime)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(
        left,
        Vec::<PathBuf>::new(),
        "left after the tree's shutdown"
    );
}

/// An `XDG_RUNTIME_DIR` that does not exist (inherited by a session on a host without
/// one) falls back to `vargr-<uid>` in the temporary directory, created private.
#[test]
fn a_missing_xdg_runtime_dir_falls_back_to_the_temporary_directory() {
    let sb = Sandbox::new();
    let missing = sb.root.path().join("no-such-dir");
    let tmp = sb.tmp();
    let r = run_cli_env(
        &["run", "-n", "2", "--", vargr_bench(), "mesh-check"],
        &[
            ("XDG_RUNTIME_DIR", Some(missing.as_os_str())),
            ("TMPDIR", Some(tmp.as_os_str())),
        ],
        Duration::from_secs(60),
    );
    assert!(r.status.success(), "{r:?}");
    all_ok(&r.stdout, 2);
    assert!(!missing.exists());
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let m = std::fs::symlink_metadata(tmp.join(format!("vargr-{uid}"))).unwrap();
    assert!(m.is_dir() && m.permissions().mode() & 0o077 == 0, "{m:?}");
    assert_eq!(sb.sockets(), Vec::<PathBuf>::new());
}
