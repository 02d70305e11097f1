//! The C API from C and C++ for real: the examples and a C API test are compiled with
//! the system `cc`/`c++` against the freshly built libvargr (shared and static), then
//! run as real processes (a front-end spawning back-ends and commnodes over sockets;
//! ranks under `vargr run`), and the installed package is found with CMake and
//! pkg-config. Every run has a hang guard that kills its whole process group.
//!
//! Needs `cc` and `c++`; the CMake and pkg-config checks are skipped (with a note)
//! when those tools are missing.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where things are: the workspace, the profile directory holding libvargr, the
/// `vargr` binary, and a scratch directory shared by the tests of this binary.
struct Env {
    root: PathBuf,
    profile: PathBuf,
    vargr: PathBuf,
    /// target/<profile>/capi-examples, emptied when the tests start. Not a temporary
    /// directory: a static is never dropped, so one would be left behind by every run.
    scratch: PathBuf,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let root = root.canonicalize().expect("workspace root");
        // target/<profile>/deps/<this test>: the profile directory is two levels up.
        let exe = std::env::current_exe().expect("test executable path");
        let profile = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile> above the test executable")
            .to_path_buf();
        // `cargo test` builds the library for the tests but leaves target/<profile>/
        // libvargr.{so,a} as they were: refresh them (a no-op when up to date).
        cargo_build(&root, &profile, &["-p", "vargr-capi"]);
        let vargr = match std::env::var_os("VARGR_BIN") {
            Some(p) => PathBuf::from(p),
            None => {
                build_if_missing(
                    &root,
                    &profile,
                    "vargr",
                    &["-p", "vargr-cli", "--bin", "vargr"],
                );
                profile.join("vargr")
            }
        };
        assert!(
            vargr.is_file(),
            "the vargr binary {} is missing",
            vargr.display()
        );
        let scratch = profile.join("capi-examples");
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).expect("scratch directory");
        Env {
            root,
            profile,
            vargr,
            scratch,
        }
    })
}

/// Runs `cargo build ARGS` in the profile of this test when `file` is not there yet.
fn build_if_missing(root: &Path, profile: &Path, file: &str, args: &[&str]) {
    if !profile.join(file).exists() {
        cargo_build(root, profile, args);
        assert!(
            profile.join(file).exists(),
            "cargo build {args:?} made no {file}"
        );
    }
}

/// Runs `cargo build ARGS` in the target directory and profile of this test.
fn cargo_build(root: &Path, profile: &Path, args: &[&str]) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root).arg("build").args(args);
    if profile.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    if let Some(target) = profile.parent() {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    let status = cmd.status().expect("running cargo build");
    assert!(status.success(), "cargo build {args:?} failed");
}

fn include_dirs() -> Vec<String> {
    let e = env();
    vec![
        format!("-I{}", e.root.join("crates/vargr-capi/include").display()),
        format!("-I{}", e.root.join("crates/vargr-filter/include").display()),
    ]
}

/// Link flags for the shared library, with an rpath so the result runs as is.
fn shared_libs() -> Vec<String> {
    let p = env().profile.display().to_string();
    vec![
        format!("-L{p}"),
        "-lvargr".into(),
        format!("-Wl,-rpath,{p}"),
    ]
}

/// Link flags for the static library: what `rustc --print native-static-libs` lists.
fn static_libs() -> Vec<String> {
    let mut v = vec![env().profile.join("libvargr.a").display().to_string()];
    v.extend(
        [
            "-lgcc_s",
            "-lutil",
            "-lrt",
            "-lpthread",
            "-lm",
            "-ldl",
            "-lc",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    v
}

/// Compiles `sources` with `compiler` into scratch/`name`.
fn compile(compiler: &str, std: &str, sources: &[&str], libs: &[String], name: &str) -> PathBuf {
    let e = env();
    let out = e.scratch.join(name);
    let mut cmd = Command::new(compiler);
    cmd.args([std, "-Wall", "-Wextra", "-Werror", "-g"])
        .args(include_dirs())
        .arg(format!("-I{}", e.root.join("examples/c").display()));
    for s in sources {
        cmd.arg(e.root.join(s));
    }
    cmd.args(libs).arg("-o").arg(&out);
    let o = cmd
        .output()
        .unwrap_or_else(|err| panic!("running {compiler}: {err}"));
    assert!(
        o.status.success(),
        "{compiler} failed for {sources:?}:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[derive(Debug)]
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` in its own process group; after `guard`, kills the group and panics.
/// Stragglers of the group are killed once the main process has exited.
fn run(mut cmd: Command, guard: Duration) -> Run {
    // The freshly built commnode, unless the test chose one.
    if !cmd.get_envs().any(|(k, _)| k == "VARGR_COMMNODE") {
        cmd.env("VARGR_COMMNODE", &env().vargr);
    }
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("starting {shown}: {e}"));
    let pgid = child.id() as i32;
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = reader(Box::new(child.stdout.take().expect("stdout")));
    let err = reader(Box::new(child.stderr.take().expect("stderr")));
    let started = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting for the child") {
            break st;
        }
        if started.elapsed() > guard {
            // SAFETY: kill(2) on a process group this test created; no memory involved.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait();
            panic!(
                "{shown} did not finish within {guard:?} (hang guard); stderr:\n{}",
                err.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: as above; the group may be empty already (ESRCH is fine).
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    Run {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

fn assert_ok(r: &Run, what: &str) {
    assert!(
        r.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        r.status,
        r.stdout,
        r.stderr
    );
}

/// The lines the IntegerAddition front-end prints for `n` back-ends.
fn integer_addition_lines(n: i32) -> Vec<String> {
    let mut v: Vec<String> = (0..5)
        .map(|i| {
            format!(
                "Iteration {i}: Success! recv_val({}) == 32*{i}*{n}={}",
                32 * i * n,
                32 * i * n
            )
        })
        .collect();
    v.push(format!(
        "Arrays: Success! count {n}, sums {{{}, {}}}",
        n * (n - 1) / 2,
        2 * n
    ));
    v.push(format!("Max rank: Success! {}", n - 1));
    v.push("integer_addition: OK".into());
    v
}

fn check_integer_addition(r: &Run, n: i32, filter: &str) {
    assert_ok(r, "integer_addition_fe");
    let mut want = vec![format!("network: {n} back-ends, filter {filter}")];
    want.extend(integer_addition_lines(n));
    let got: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(got, want, "stderr:\n{}", r.stderr);
}

fn be() -> &'static PathBuf {
    static BE: OnceLock<PathBuf> = OnceLock::new();
    BE.get_or_init(|| {
        compile(
            "cc",
            "-std=c99",
            &["examples/c/integer_addition_be.c"],
            &shared_libs(),
            "integer_addition_be",
        )
    })
}

fn fe() -> &'static PathBuf {
    static FE: OnceLock<PathBuf> = OnceLock::new();
    FE.get_or_init(|| {
        compile(
            "cc",
            "-std=c99",
            &["examples/c/integer_addition_fe.c"],
            &shared_libs(),
            "integer_addition_fe",
        )
    })
}

#[test]
fn c_api_test_passes() {
    let exe = compile(
        "cc",
        "-std=c99",
        &["crates/vargr-capi/tests/c/api_test.c"],
        &shared_libs(),
        "api_test",
    );
    let r = run(Command::new(exe), Duration::from_secs(60));
    assert_ok(&r, "api_test");
    assert!(
        r.stdout.starts_with("api_test: ") && r.stdout.trim_end().ends_with("checks OK"),
        "{r:?}"
    );
}

#[test]
fn c_tree_test_passes() {
    let compile_c = |name: &str| {
        compile(
            "cc",
            "-std=c99",
            &[&format!("crates/vargr-capi/tests/c/{name}.c")],
            &shared_libs(),
            name,
        )
    };
    let (fe, be) = (compile_c("tree_fe"), compile_c("tree_be"));
    let mut cmd = Command::new(fe);
    cmd.arg("kary:2@3").arg(be);
    let r = run(cmd, Duration::from_secs(120));
    assert_ok(&r, "tree_fe");
    assert!(
        r.stdout.starts_with("tree_test: ") && r.stdout.trim_end().ends_with("checks OK"),
        "{r:?}"
    );
}

#[test]
fn the_seeds_global_sum_runs_from_a_path_specification() {
    let e = env();
    let fe = compile(
        "cc",
        "-std=c99",
        &["examples/c/paths_fe.c"],
        &shared_libs(),
        "paths_fe",
    );
    let mut cmd = Command::new(fe);
    cmd.arg(e.root.join("examples/paths/gsum.toml")).arg(be());
    let r = run(cmd, Duration::from_secs(120));
    assert_ok(&r, "paths_fe");
    assert_eq!(
        r.stdout,
        "global sum: 4 (4 back-ends)\nglobal sum: 8 (4 back-ends)\nglobal sum: 12 (4 back-ends)\npaths: OK\n"
    );
    // A bad specification fails the call, naming the path, the stage and the line.
    let bad = e.scratch.join("bad_paths.toml");
    std::fs::write(
        &bad,
        "[element]\nname = \"E\"\nhost = \"fe\"\n[[path]]\nfrom = \"a:0\"\nstages = [\"codec:zip\", \"remote:fe\"]\n",
    )
    .unwrap();
    let mut cmd = Command::new(e.scratch.join("paths_fe"));
    cmd.arg(&bad).arg(be());
    let r = run(cmd, Duration::from_secs(60));
    assert!(!r.status.success());
    assert!(
        r.stderr.contains("vargr_network_create_from_paths")
            && r.stderr
                .contains("bad_paths.toml:6: path 1 (from \"a:0\"), stage \"codec:zip\""),
        "{}",
        r.stderr
    );
}

#[test]
fn integer_addition_over_a_tree_of_processes() {
    let mut cmd = Command::new(fe());
    cmd.arg("kary:2@4").arg(be());
    let r = run(cmd, Duration::from_secs(120));
    check_integer_addition(&r, 4, "sum");
}

/// Compiles the filter plugin `examples/filter-plugin/NAME.c` into scratch/libNAME.so.
fn plugin(name: &str) -> PathBuf {
    let e = env();
    let so = e.scratch.join(format!("lib{name}.so"));
    let o = Command::new("cc")
        .args(["-shared", "-fPIC", "-Wall", "-Werror"])
        .args(include_dirs())
        .arg(e.root.join(format!("examples/filter-plugin/{name}.c")))
        .arg("-o")
        .arg(&so)
        .output()
        .expect("running cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    so
}

fn int_filters() -> &'static PathBuf {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| plugin("int_filters"))
}

fn sync_filters() -> &'static PathBuf {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| plugin("sync_filters"))
}

/// Shared-library link flags plus the threads library.
fn threaded_libs() -> Vec<String> {
    let mut v = shared_libs();
    v.push("-pthread".into());
    v
}

#[test]
fn c_mrnet_api_test_passes() {
    let compile_c = |name: &str| {
        compile(
            "cc",
            "-std=c99",
            &[&format!("crates/vargr-capi/tests/c/{name}.c")],
            &threaded_libs(),
            name,
        )
    };
    let (fe, be) = (compile_c("mrnet_fe"), compile_c("mrnet_be"));
    let mut cmd = Command::new(fe);
    cmd.arg("1x2x4")
        .arg(be)
        .arg(int_filters())
        .arg(sync_filters());
    let r = run(cmd, Duration::from_secs(120));
    assert_ok(&r, "mrnet_fe");
    assert!(
        r.stdout.starts_with("mrnet_test: ") && r.stdout.trim_end().ends_with("checks OK"),
        "{r:?}"
    );
}

#[test]
fn integer_addition_with_a_plugin_filter_and_a_topology_file() {
    let e = env();
    let plugin = int_filters();
    // Node 1 is a commnode with two back-ends; node 2 is a back-end under the root.
    let topo = e.scratch.join("three.top");
    std::fs::write(
        &topo,
        "localhost:0 => localhost:1 localhost:2 ;\nlocalhost:1 => localhost:3 localhost:4 ;\n",
    )
    .unwrap();
    let mut cmd = Command::new(fe());
    cmd.arg(&topo).arg(be()).arg(plugin);
    let r = run(cmd, Duration::from_secs(120));
    check_integer_addition(&r, 3, "plugin_sum");
}

#[test]
fn a_front_end_linked_statically_runs_without_the_shared_library() {
    let exe = compile(
        "cc",
        "-std=c99",
        &["examples/c/integer_addition_fe.c"],
        &static_libs(),
        "integer_addition_fe_static",
    );
    let readelf = Command::new("readelf").arg("-d").arg(&exe).output();
    if let Ok(o) = readelf {
        let dynamic = String::from_utf8_lossy(&o.stdout);
        assert!(!dynamic.contains("libvargr"), "{dynamic}");
    }
    let mut cmd = Command::new(exe);
    cmd.arg("flat:2").arg(be());
    let r = run(cmd, Duration::from_secs(120));
    check_integer_addition(&r, 2, "sum");
}

#[test]
fn cpp_ranks_allreduce_under_vargr_run() {
    let exe = compile(
        "c++",
        "-std=c++17",
        &["examples/cpp/allreduce.cpp"],
        &shared_libs(),
        "allreduce",
    );
    let mut cmd = Command::new(&env().vargr);
    cmd.args(["run", "-n", "3", "--"]).arg(exe);
    let r = run(cmd, Duration::from_secs(120));
    assert_ok(&r, "vargr run -n 3 allreduce");
    let mut got: Vec<&str> = r.stdout.lines().collect();
    got.sort();
    let want: Vec<String> = (0..3)
        .map(|rank| {
            format!("rank {rank} of 3: sum=3,3,5 max=2 allgather=0,10,20 bcast=42.5 cond=1,0 OK")
        })
        .collect();
    assert_eq!(got, want, "stderr:\n{}", r.stderr);
}

#[test]
fn c_point_to_point_with_wildcards_requests_and_probes_under_vargr_run() {
    let exe = compile(
        "cc",
        "-std=c99",
        &["crates/vargr-capi/tests/c/p2p_test.c"],
        &shared_libs(),
        "p2p_test",
    );
    let mut cmd = Command::new(&env().vargr);
    cmd.args(["run", "-n", "4", "--"]).arg(exe);
    let r = run(cmd, Duration::from_secs(120));
    assert_ok(&r, "vargr run -n 4 p2p_test");
    let mut got: Vec<&str> = r.stdout.lines().collect();
    got.sort();
    let want: Vec<String> = (0..4).map(|rank| format!("rank {rank} p2p OK")).collect();
    assert_eq!(got, want, "stderr:\n{}", r.stderr);
}

#[test]
fn c_collective_file_io_under_vargr_run_with_two_sites() {
    let exe = compile(
        "cc",
        "-std=c99",
        &["crates/vargr-capi/tests/c/io_test.c"],
        &shared_libs(),
        "io_test",
    );
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(&env().vargr);
    cmd.args(["run", "-n", "4", "--sites", "2", "--"])
        .arg(exe)
        .arg(tmp.path().join("array.bin"))
        .arg(tmp.path().join("missing/array.bin"));
    let r = run(cmd, Duration::from_secs(120));
    assert_ok(&r, "vargr run -n 4 --sites 2 io_test");
    let mut got: Vec<&str> = r.stdout.lines().collect();
    got.sort();
    let want: Vec<String> = (0..4).map(|rank| format!("rank {rank} io OK")).collect();
    assert_eq!(got, want, "stderr:\n{}", r.stderr);
}

#[test]
fn traces_monitors_and_top_name_c_ranks() {
    let exe = compile(
        "cc",
        "-std=c99",
        &["crates/vargr-capi/tests/c/slow_rank.c"],
        &shared_libs(),
        "slow_rank",
    );
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace");
    let mut cmd = Command::new(&env().vargr);
    cmd.args(["run", "-n", "3", "--trace"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .args(["1", "300"]);
    let r = run(cmd, Duration::from_secs(120));
    assert_ok(&r, "vargr run --trace slow_rank");
    let mut cmd = Command::new(&env().vargr);
    cmd.args(["trace", "report"]).arg(&trace);
    let r = run(cmd, Duration::from_secs(60));
    assert_ok(&r, "vargr trace report");
    assert!(
        r.stdout.contains("collective instances on 3 ranks")
            && r.stdout.contains("culprit: rank 1 (last in "),
        "{}",
        r.stdout
    );
    // The same analysis through the C API: the report names rank 1, the run against
    // itself changes nothing, and a directory without traces is an I/O error naming it.
    let reader = compile(
        "cc",
        "-std=c99",
        &["crates/vargr-capi/tests/c/trace_json.c"],
        &shared_libs(),
        "trace_json",
    );
    let mut cmd = Command::new(&reader);
    cmd.arg(&trace);
    let r = run(cmd, Duration::from_secs(60));
    assert_ok(&r, "trace_json");
    let mut docs = r.stdout.lines().map(|l| {
        serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"))
    });
    let (report, same) = (docs.next().unwrap(), docs.next().unwrap());
    let allreduce = report["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["collector"].as_str().unwrap().ends_with("allreduce"))
        .expect("an allreduce collector");
    assert_eq!(allreduce["culprit"], 1, "{allreduce}");
    let row = same["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["collector"].as_str().unwrap().ends_with("allreduce"))
        .expect("an allreduce row");
    assert_eq!(row["change"]["calls"], 0, "{row}");
    let mut cmd = Command::new(&reader);
    cmd.arg(tmp.path());
    let r = run(cmd, Duration::from_secs(60));
    assert!(
        !r.status.success()
            && r.stderr.contains("VARGR_ERR_IO")
            && r.stderr.contains("no trace files"),
        "{}",
        r.stderr
    );

    let status = tmp.path().join("status.json");
    let mut cmd = Command::new(&env().vargr);
    cmd.args([
        "run",
        "-n",
        "3",
        "--monitor",
        "load-balance,stats",
        "--status",
    ])
    .arg(&status)
    .arg("--")
    .arg(&exe)
    .args(["1", "300"]);
    let r = run(cmd, Duration::from_secs(120));
    assert_ok(&r, "vargr run --monitor slow_rank");
    assert!(
        r.stderr
            .contains("vargr monitor (final): allreduce: rank 1 arrived last"),
        "{}",
        r.stderr
    );
    let mut cmd = Command::new(&env().vargr);
    cmd.args(["top", "--once"]).arg(&status);
    let r = run(cmd, Duration::from_secs(60));
    assert_ok(&r, "vargr top --once");
    let row = r
        .stdout
        .lines()
        .find(|l| l.starts_with("allreduce"))
        .unwrap_or_default();
    assert!(row.contains("rank 1 ("), "{}", r.stdout);
}

#[test]
fn boundary_benchmark_builds_and_reports_json() {
    let e = env();
    let exe = compile(
        "cc",
        "-O2",
        &["crates/vargr-capi/bench/boundary.c"],
        &shared_libs(),
        "boundary",
    );
    let mut cmd = Command::new(&exe);
    cmd.arg("1000");
    let r = run(cmd, Duration::from_secs(60));
    assert_ok(&r, "boundary");
    assert!(r.stdout.contains("\"ns_per_call\": "), "{r:?}");
    assert!(
        r.stdout.contains("\"comm_rank_ns_per_call\": null"),
        "{r:?}"
    );
    let mut cmd = Command::new(&e.vargr);
    cmd.args(["run", "-n", "1", "--"]).arg(&exe).arg("1000");
    let r = run(cmd, Duration::from_secs(60));
    assert_ok(&r, "vargr run -n 1 boundary");
    assert!(
        !r.stdout.contains("\"comm_rank_ns_per_call\": null"),
        "{r:?}"
    );
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn installed_package_is_found_by_cmake_and_pkg_config() {
    let e = env();
    let prefix = e.scratch.join("prefix");
    let mut install = Command::new(e.root.join("scripts/install-capi.sh"));
    install.arg(&prefix).arg("--debug");
    if let Some(target) = e.profile.parent() {
        install.env("CARGO_TARGET_DIR", target);
    }
    let r = run(install, Duration::from_secs(900));
    assert_ok(&r, "scripts/install-capi.sh");
    for f in [
        "include/vargr.h",
        "include/vargr_filter.h",
        "include/vargr_stage.h",
        "bin/vargr",
        "lib/libvargr.so",
        "lib/libvargr.a",
        "lib/pkgconfig/vargr.pc",
        "lib/pkgconfig/vargr-static.pc",
        "lib/cmake/vargr/vargrConfig.cmake",
        "lib/cmake/vargr/vargrConfigVersion.cmake",
    ] {
        assert!(prefix.join(f).is_file(), "{f} was not installed");
    }

    if have("cmake") {
        let build = e.scratch.join("cmake-build");
        let mut cfg = Command::new("cmake");
        cfg.arg("-S")
            .arg(e.root.join("examples/cmake"))
            .arg("-B")
            .arg(&build)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()));
        assert_ok(&run(cfg, Duration::from_secs(300)), "cmake configure");
        let mut b = Command::new("cmake");
        b.arg("--build").arg(&build);
        assert_ok(&run(b, Duration::from_secs(300)), "cmake --build");
        for fe in ["integer_addition_fe", "integer_addition_fe_static"] {
            let mut cmd = Command::new(build.join(fe));
            cmd.arg("flat:2").arg(build.join("integer_addition_be"));
            let r = run(cmd, Duration::from_secs(120));
            check_integer_addition(&r, 2, "sum");
        }
    } else {
        eprintln!("cmake not found: skipping the CMake package check");
    }

    if have("pkg-config") {
        let pc = |args: &[&str], pkg: &str| {
            let o = Command::new("pkg-config")
                .args(args)
                .arg(pkg)
                .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
                .output()
                .expect("running pkg-config");
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8(o.stdout).unwrap()
        };
        assert_eq!(
            pc(&["--modversion"], "vargr").trim(),
            env!("CARGO_PKG_VERSION")
        );
        let commnode = pc(&["--variable=commnode"], "vargr");
        assert_eq!(Path::new(commnode.trim()), prefix.join("bin/vargr"));
        // Shared (found at run time through the rpath vargr.pc adds) and static.
        for (pkg, exe) in [
            ("vargr", "integer_addition_fe_pc"),
            ("vargr-static", "integer_addition_fe_pc_static"),
        ] {
            let flags: Vec<String> = pc(&["--cflags", "--libs"], pkg)
                .split_whitespace()
                .map(String::from)
                .collect();
            let exe = e.scratch.join(exe);
            let mut cc = Command::new("cc");
            cc.arg("-std=c99")
                .arg(format!("-I{}", e.root.join("examples/c").display()))
                .arg(e.root.join("examples/c/integer_addition_fe.c"))
                .args(&flags)
                .arg("-o")
                .arg(&exe);
            assert_ok(
                &run(cc, Duration::from_secs(120)),
                "cc with pkg-config flags",
            );
            // Without cargo's LD_LIBRARY_PATH, which points at the build's own library.
            let ldd = Command::new("ldd")
                .arg(&exe)
                .env_remove("LD_LIBRARY_PATH")
                .output()
                .expect("running ldd");
            let deps = String::from_utf8_lossy(&ldd.stdout);
            if pkg == "vargr-static" {
                assert!(!deps.contains("libvargr"), "{pkg}: {deps}");
            } else {
                let lib = prefix.join("lib/libvargr.so").display().to_string();
                assert!(deps.contains(&lib), "{pkg}: {deps}");
            }
            // The installed commnode runs the tree's internal nodes.
            let mut cmd = Command::new(exe);
            cmd.arg("kary:2@3")
                .arg(be())
                .env_remove("LD_LIBRARY_PATH")
                .env("VARGR_COMMNODE", commnode.trim());
            let r = run(cmd, Duration::from_secs(120));
            check_integer_addition(&r, 3, "sum");
        }
    } else {
        eprintln!("pkg-config not found: skipping the pkg-config check");
    }
}

// ---- ports of MRNet's Examples (examples/c) ----------------------------------------

/// Compiles `examples/c/NAME.c` (with threads) once per test binary.
fn example(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = built.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    let p = compile(
        "cc",
        "-std=c99",
        &[&format!("examples/c/{name}.c")],
        &threaded_libs(),
        name,
    );
    built.push((name.to_string(), p.clone()));
    p
}

/// Runs an example and checks that it ends with "NAME: OK" and prints `lines` lines
/// containing `marker`.
fn check_example(r: &Run, name: &str, marker: &str, lines: usize) {
    assert_ok(r, name);
    assert_eq!(
        r.stdout.lines().last(),
        Some(format!("{name}: OK").as_str()),
        "{r:?}"
    );
    let n = r.stdout.lines().filter(|l| l.contains(marker)).count();
    assert_eq!(n, lines, "lines with {marker:?}:\n{}", r.stdout);
}

#[test]
fn integer_addition_async_waits_on_the_notification_descriptor() {
    let mut cmd = Command::new(example("integer_addition_async_fe"));
    cmd.arg("kary:2@4").arg(be());
    let r = run(cmd, Duration::from_secs(120));
    check_example(&r, "integer_addition_async", "Success!", 5);
}

#[test]
fn integer_addition_async_streams_selects_on_two_streams() {
    let mut cmd = Command::new(example("integer_addition_async_streams_fe"));
    cmd.arg("1x2x4").arg(be());
    let r = run(cmd, Duration::from_secs(120));
    check_example(&r, "integer_addition_async_streams", "Success!", 10);
}

#[test]
fn integer_addition_timeout_sets_the_sync_filter_parameter() {
    let mut cmd = Command::new(example("integer_addition_timeout_fe"));
    cmd.arg("kary:2@4").arg(be()).arg("2");
    let r = run(cmd, Duration::from_secs(120));
    check_example(&r, "integer_addition_timeout", "FE: Success", 2);
}

#[test]
fn integer_addition_concurrent_runs_two_networks_at_once() {
    let mut cmd = Command::new(example("integer_addition_concurrent_fe"));
    cmd.arg("kary:2@3").arg(be());
    let r = run(cmd, Duration::from_secs(120));
    check_example(&r, "integer_addition_concurrent", "Success!", 10);
}

#[test]
fn attach_mode_back_ends_started_by_a_launcher() {
    // A shell loop stands in for mpirun; each back-end's rank comes from PMI_RANK.
    let script = format!(
        "i=0; while [ $i -lt {{n}} ]; do PMI_RANK=$i '{}' & i=$((i+1)); done; wait",
        be().display()
    );
    let mut cmd = Command::new(example("attach_fe"));
    cmd.args(["1x2x4", "sh", "-c", &script]);
    let r = run(cmd, Duration::from_secs(120));
    check_example(&r, "attach", "Success!", 5);
    assert!(
        r.stdout.starts_with("network: 4 back-ends attached"),
        "{r:?}"
    );
}

#[test]
fn attach_mode_back_ends_started_by_hand_through_a_rendezvous_file() {
    let e = env();
    let file = e.scratch.join("rendezvous");
    let _ = std::fs::remove_file(&file);
    let mut cmd = Command::new(example("attach_fe"));
    cmd.args(["kary:2@4", "--file"]).arg(&file);
    let fe = std::thread::spawn(move || run(cmd, Duration::from_secs(120)));
    let started = Instant::now();
    while !file.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no rendezvous file"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Ranks in a scrambled order, as a job launcher may start them.
    let backends: Vec<_> = [2, 0, 3, 1]
        .iter()
        .map(|rank| {
            Command::new(be())
                .env("VARGR_RENDEZVOUS", format!("file:{}", file.display()))
                .env("PMI_RANK", rank.to_string())
                .stdin(Stdio::null())
                .spawn()
                .expect("starting a back-end")
        })
        .collect();
    let r = fe.join().expect("front-end thread");
    check_example(&r, "attach", "Success!", 5);
    // The shutdown ends each back-end's receive loop: they exit, successfully.
    for mut b in backends {
        let waited = Instant::now();
        let status = loop {
            if let Some(st) = b.try_wait().expect("waiting for a back-end") {
                break Some(st);
            }
            if waited.elapsed() > Duration::from_secs(10) {
                let _ = b.kill();
                let _ = b.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.is_some_and(|s| s.success()), "back-end: {status:?}");
    }
}

#[test]
fn per_thread_streams_a_thread_per_stream_on_both_sides() {
    let mut cmd = Command::new(example("per_thread_streams_fe"));
    cmd.arg("kary:2@4").arg(example("per_thread_streams_be"));
    let r = run(cmd, Duration::from_secs(120));
    check_example(&r, "per_thread_streams", "successful", 6);
    assert!(
        r.stdout.contains("callbacks: 0 node lost, 0 reparented"),
        "{r:?}"
    );
}

#[test]
fn fault_recovery_goes_on_after_a_commnode_is_killed() {
    let mut cmd = Command::new(example("fault_recovery_fe"));
    cmd.arg("1x2x4")
        .arg(example("fault_recovery_be"))
        .arg("kill");
    let r = run(cmd, Duration::from_secs(120));
    check_example(&r, "fault_recovery", "FE: check of", 2);
    assert!(r.stdout.contains("FE: events: 1 node lost"), "{r:?}");
    assert!(!r.stdout.contains("failed"), "{r:?}");
}

#[test]
fn hetero_filters_run_a_different_filter_at_each_kind_of_node() {
    let e = env();
    // Lines with the word, some of them twice (on different back-ends' shares), and
    // enough text for several blocks per back-end.
    let mut text = String::new();
    let mut want = std::collections::BTreeSet::new();
    for i in 0..600 {
        if i % 7 == 0 {
            let line = format!("line {} has the needle", i % 140);
            want.insert(line.clone());
            text.push_str(&line);
        } else {
            text.push_str(&format!(
                "line {i} is hay, hay and more hay to fill a block"
            ));
        }
        text.push('\n');
    }
    let file = e.scratch.join("haystack.txt");
    std::fs::write(&file, text).unwrap();
    let mut cmd = Command::new(example("hetero_filters_fe"));
    cmd.arg("needle")
        .arg(&file)
        .arg("1x2x4")
        .arg(example("hetero_filters_be"))
        .arg(plugin("hetero_filters"));
    let r = run(cmd, Duration::from_secs(120));
    assert_ok(&r, "hetero_filters_fe");
    assert_eq!(r.stdout.lines().last(), Some("hetero_filters: OK"), "{r:?}");
    let got: Vec<&str> = r.stdout.lines().filter(|l| l.contains("needle")).collect();
    let unique: std::collections::BTreeSet<String> = got.iter().map(|s| s.to_string()).collect();
    assert_eq!(got.len(), unique.len(), "a line came twice:\n{}", r.stdout);
    assert_eq!(unique, want, "stderr:\n{}", r.stderr);
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("blocks: ") && l != "blocks: 1"),
        "{r:?}"
    );
}
