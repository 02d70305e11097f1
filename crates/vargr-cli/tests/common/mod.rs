//! Helpers shared by the process-level integration tests: the `vargr` binary, networks
//! of real processes, bounded receives, running the CLI with a hang guard, and finding
//! the processes a test started through `/proc`.
//!
//! Every wait here is bounded. Guards are generous: they catch hangs, they do not
//! measure speed.

#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use vargr_tbon::{BackendSpec, Network, NetworkOptions, Packet, Stream, TbonError, Value};
use vargr_topo::Topology;

pub mod proxy_process;

/// Tags understood by `vargr backend` (crates/vargr-cli/src/roles.rs).
pub const TAG_ECHO: i32 = 1;
pub const TAG_RANK: i32 = 2;
/// Answers `v` with `v 1 2^rank` (see roles.rs).
pub const TAG_WAVE: i32 = 8;

/// Builds `bench/mpi/NAME.c` with Open MPI's mpicc into `dir`; returns the program.
pub fn build_bench_mpi(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../bench/mpi/{name}.c"));
    let exe = dir.join(name);
    let st = Command::new("mpicc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("mpicc not found: install Open MPI (scripts/test.sh installs libopenmpi-dev)");
    assert!(st.success(), "mpicc failed on {}", src.display());
    exe
}

/// Bytes recorded per stage-boundary collector (`link/stage/...`) over all trace files
/// in `dir`.
pub fn stage_bytes(dir: &std::path::Path) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for f in vargr_trace::TraceFile::read_dir(dir).unwrap() {
        for t in &f.threads {
            for r in &t.records {
                let name = f.collector_name(r.collector);
                if name.starts_with("link/stage/") {
                    *out.entry(name.to_string()).or_default() += u64::from(r.bytes);
                }
            }
        }
    }
    out
}

/// Reproducible incompressible bytes (xorshift64; `seed` forced odd).
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The `vargr` binary under test.
pub fn vargr() -> &'static str {
    env!("CARGO_BIN_EXE_vargr")
}

/// The `vargr-bench` binary under test: the ranks that check jobs from the inside
/// (`rank-info`, `mesh-check`, `coll-check`, `slow-rank`, ...).
pub fn vargr_bench() -> &'static str {
    env!("CARGO_BIN_EXE_vargr-bench")
}

/// Options whose commnodes are the `vargr` binary under test.
pub fn opts() -> NetworkOptions {
    NetworkOptions {
        commnode_program: Some(vargr().into()),
        ..Default::default()
    }
}

/// Starts a tree of real processes: `vargr commnode` inside, `vargr backend ROLE` at the
/// leaves.
pub fn start(spec: &str, role: &str, opts: NetworkOptions) -> Network {
    let topo = Topology::generate(spec).unwrap_or_else(|e| panic!("topology {spec}: {e}"));
    Network::new(
        topo,
        BackendSpec::command(vargr(), &["backend", role]),
        opts,
    )
    .unwrap_or_else(|e| panic!("starting {spec} with back-end role {role}: {e}"))
}

/// Receives the next result on `s`, giving up (panicking) after `guard`.
///
/// The wait is cut into short `recv_timeout` slices, so a missed wake-up in the engine
/// costs one slice rather than the whole guard and the other tests stay about what they
/// test. Lost wake-ups themselves are tested in `streams.rs` with plain `recv`.
pub fn recv_within(s: &Stream, guard: Duration) -> Result<Packet, TbonError> {
    let deadline = Instant::now() + guard;
    loop {
        match s.recv_timeout(Duration::from_millis(50)) {
            Ok(Some(p)) => return Ok(p),
            Ok(None) => {}
            Err(e) => return Err(e),
        }
        if Instant::now() >= deadline {
            panic!(
                "no result on stream {} within {:?} (hang guard)",
                s.id(),
                guard
            );
        }
    }
}

/// Like [`recv_within`], for results that must be packets.
pub fn recv_ok(s: &Stream, guard: Duration) -> Packet {
    recv_within(s, guard).unwrap_or_else(|e| panic!("stream {}: {e}", s.id()))
}

/// The first value of a packet as an i64 (any integer type).
pub fn first_int(p: &Packet) -> i64 {
    match p.values.first() {
        Some(Value::Int(v)) => i64::from(*v),
        Some(Value::UInt(v)) => i64::from(*v),
        Some(Value::Long(v)) => *v,
        Some(Value::ULong(v)) => *v as i64,
        Some(Value::IntArray(v)) if !v.is_empty() => i64::from(v[0]),
        other => panic!("expected an integer first value, got {other:?} in {p:?}"),
    }
}

/// One multicast + reduction round trip: sends `values` with `tag`, returns the result.
pub fn round_trip(s: &Stream, tag: i32, format: &str, values: Vec<Value>) -> Packet {
    s.send(tag, format, values)
        .unwrap_or_else(|e| panic!("send on stream {}: {e}", s.id()));
    recv_ok(s, Duration::from_secs(10))
}

/// What a finished CLI run printed.
#[derive(Debug)]
pub struct CliRun {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `vargr ARGS`, killing it (and failing the test) if it runs longer than `guard`.
pub fn run_cli(args: &[&str], guard: Duration) -> CliRun {
    run_cli_env(args, &[], guard)
}

/// Runs `vargr ARGS --json FILE` (a benchmark), fails the test if it fails, and returns
/// the records it wrote.
pub fn bench_records(args: &[&str], guard: Duration) -> Vec<serde_json::Value> {
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("records.json");
    let mut all = args.to_vec();
    all.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let run = run_cli(&all, guard);
    assert!(
        run.status.success(),
        "vargr {all:?}\nstdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

/// [`run_cli`] with variables added to (or, with `None`, removed from) its environment.
pub fn run_cli_env(
    args: &[&str],
    env: &[(&str, Option<&std::ffi::OsStr>)],
    guard: Duration,
) -> CliRun {
    run_program_env(vargr(), args, env, guard)
}

/// [`run_cli_env`] for another program (`vargr-bench`'s roles).
pub fn run_program_env(
    program: &str,
    args: &[&str],
    env: &[(&str, Option<&std::ffi::OsStr>)],
    guard: Duration,
) -> CliRun {
    let mut cmd = Command::new(program);
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {program} {args:?}: {e}"));
    let out = reader(child.stdout.take().expect("piped stdout"));
    let err = reader(child.stderr.take().expect("piped stderr"));
    let status = wait_guarded(&mut child, guard);
    let stdout = out.join().expect("stdout reader");
    let stderr = err.join().expect("stderr reader");
    match status {
        Some(status) => CliRun {
            status,
            stdout,
            stderr,
        },
        None => panic!(
            "vargr {args:?} did not finish within {guard:?} (hang guard); killed it.\n\
             stdout:\n{stdout}\nstderr:\n{stderr}"
        ),
    }
}

fn reader(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Waits up to `guard` for `child`; on time-out kills and reaps it and returns None.
pub fn wait_guarded(child: &mut Child, guard: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + guard;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// A process identified by pid and start time (so a recycled pid is not mistaken for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub start: u64,
    pub cmdline: String,
}

/// (state, start time) from /proc/PID/stat, None if the process is gone.
fn stat(pid: u32) -> Option<(char, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: parse after the last ')'.
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields after the name start at field 3 (state); start time is field 22.
    let state = f.first()?.chars().next()?;
    let start = f.get(19)?.parse().ok()?;
    Some((state, start))
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|w| !w.is_empty())
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn proc_of(pid: u32) -> Option<Proc> {
    let (_, start) = stat(pid)?;
    Some(Proc {
        pid,
        start,
        cmdline: cmdline(pid),
    })
}

/// True while the process runs (a zombie has exited and counts as gone).
pub fn alive(p: &Proc) -> bool {
    matches!(stat(p.pid), Some((state, start)) if start == p.start && state != 'Z')
}

fn children_file(path: &str) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// Direct children of every thread of process `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            out.extend(children_file(&format!("{}/children", t.path().display())));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Every live descendant of the given processes (not including them).
/// Every live process of `net`'s tree (its direct children and their descendants).
pub fn tree_processes(net: &vargr_tbon::Network) -> Vec<Proc> {
    let direct = net.child_pids();
    let mut out: Vec<Proc> = direct
        .iter()
        .filter_map(|&p| proc_of(p))
        .filter(alive)
        .collect();
    out.extend(descendants_of(&direct));
    out
}

pub fn descendants_of(roots: &[u32]) -> Vec<Proc> {
    let mut out = Vec::new();
    let mut todo: Vec<u32> = roots.iter().flat_map(|&r| children_of(r)).collect();
    while let Some(pid) = todo.pop() {
        if let Some(p) = proc_of(pid) {
            if alive(&p) {
                todo.extend(children_of(pid));
                out.push(p);
            }
        }
    }
    out
}

/// Every live process started by the calling thread, and their descendants. Tests run
/// on threads of one process, so this isolates one test's processes from another's.
pub fn my_descendants() -> Vec<Proc> {
    // Children are forked by vargr's spawner thread, so look at every thread's children.
    let mut direct = Vec::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            direct.extend(children_file(&format!("{}/children", t.path().display())));
        }
    }
    let mut out = Vec::new();
    for pid in direct {
        if let Some(p) = proc_of(pid) {
            if alive(&p) {
                out.extend(descendants_of(&[pid]));
                out.push(p);
            }
        }
    }
    out
}

/// Polls until none of `procs` is alive or `guard` passes; returns those still alive.
pub fn wait_all_gone(procs: &[Proc], guard: Duration) -> Vec<Proc> {
    let deadline = Instant::now() + guard;
    loop {
        let left: Vec<Proc> = procs.iter().filter(|p| alive(p)).cloned().collect();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A variable of a process's environment, as the process was started.
pub fn environ_var(pid: u32, key: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{key}=");
    env.split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Counts processes whose command line contains `needle`.
pub fn count_matching(procs: &[Proc], needle: &str) -> usize {
    procs.iter().filter(|p| p.cmdline.contains(needle)).count()
}

/// A `vargr sync --serve` daemon on a free port, its log lines on a channel; killed on
/// drop.
pub struct SyncDaemon {
    child: Child,
    pub port: u16,
    log: std::sync::mpsc::Receiver<String>,
}

impl SyncDaemon {
    pub fn start(
        root: &std::path::Path,
        secret_file: &std::path::Path,
        cache: &std::path::Path,
    ) -> SyncDaemon {
        SyncDaemon::start_with(root, secret_file, cache, &[])
    }

    pub fn start_with(
        root: &std::path::Path,
        secret_file: &std::path::Path,
        cache: &std::path::Path,
        extra: &[&str],
    ) -> SyncDaemon {
        use std::io::BufRead;
        let mut child = Command::new(vargr())
            .args(["sync", "--serve"])
            .arg(root)
            .args(["--listen", "tcp:127.0.0.1:0", "--secret-file"])
            .arg(secret_file)
            .arg("--cache-dir")
            .arg(cache)
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let port = first
            .rsplit(':')
            .next()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no port in {first:?}"));
        // Drained all along, so that the daemon never blocks on a full pipe.
        let (tx, log) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        SyncDaemon { child, port, log }
    }

    /// The first log line containing `what`, waiting at most `guard`.
    pub fn wait_for(&self, what: &str, guard: Duration) -> Option<String> {
        let deadline = Instant::now() + guard;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.log.recv_timeout(left) {
                Ok(l) if l.contains(what) => return Some(l),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
}

impl Drop for SyncDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
