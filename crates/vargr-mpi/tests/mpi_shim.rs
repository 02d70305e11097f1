//! libvargr_mpi.so with real MPI programs under Open MPI's mpirun: a C program of ours
//! (`c/shim_check.c`: point to point, blocking and not, `MPI_ANY_SOURCE`, probes, the
//! wrapped collectives, and calls the library does not wrap) gives the same output with
//! and without the library, and its trace holds the records it should; another
//! (`c/codec_check.c`: every way a message crosses between two emulated sites, with
//! truncation, derived types, probes, persistent requests and every send mode) gives
//! the same output compressed as not, and a damaged frame is an MPI error; NetPIPE,
//! installed from Debian (`netpipe-openmpi`), runs under `vargr mpi-run --trace` and
//! `--codec` with the same output, and `vargr trace report` reads its trace; a program built with
//! MPICH is refused at start, with the reason (when MPICH is installed beside Open MPI).
//!
//! Needs `mpirun` and `mpicc` (Open MPI); skipped with a message without mpirun, unless
//! `VARGR_REQUIRE_MPIRUN=1`. `vargr` is `$VARGR_BIN`, else the one in this test's
//! target directory (built if missing); `vargr mpi-run` takes the library beside it.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::{Command, Output};

use vargr_trace::analysis;
use vargr_trace::{EventOp, TraceFile, NO_PEER};

mod common;
use common::{build_c, have_mpirun, lib, ok, vargr, MPIRUN};

fn mpirun(n: usize, prog: &[&str]) -> Command {
    let mut c = Command::new("mpirun");
    c.args(MPIRUN).args(["-n", &n.to_string()]).args(prog);
    c.env_remove("VARGR_MPI_TRACE").env_remove("LD_PRELOAD");
    c
}

/// `vargr mpi-run --trace DIR -- mpirun ... PROG`; its stdout without its own last line.
fn traced(dir: &Path, n: usize, prog: &[&str]) -> String {
    let mut c = Command::new(vargr());
    c.arg("mpi-run")
        .arg("--trace")
        .arg(dir)
        .arg("--")
        .arg("mpirun")
        .args(MPIRUN)
        .args(["-n", &n.to_string()])
        .args(prog)
        .env_remove("LD_PRELOAD");
    let out = ok("vargr mpi-run", c.output().unwrap());
    let (program, ours) = out
        .trim_end()
        .rsplit_once('\n')
        .unwrap_or(("", out.trim_end()));
    assert!(
        ours.starts_with(&format!("vargr mpi-run: {n} trace files in ")),
        "{out}"
    );
    format!("{program}\n")
}

fn report(dir: &Path) -> String {
    let out = ok(
        "vargr trace report",
        Command::new(vargr())
            .args(["trace", "report"])
            .arg(dir)
            .output()
            .unwrap(),
    );
    assert!(dir.join("report.html").is_file());
    out
}

/// (rank, collector, op) → records, over every file.
type Counts = HashMap<(u32, String, EventOp), Vec<vargr_trace::Record>>;

fn by_kind(files: &[TraceFile]) -> Counts {
    let mut m = Counts::new();
    for f in files {
        for t in &f.threads {
            for r in &t.records {
                let rank = t.rank.expect("every track is a rank's");
                let name = f.collectors[usize::from(r.collector)].clone();
                m.entry((rank, name, r.event_op().unwrap()))
                    .or_default()
                    .push(*r);
            }
        }
    }
    m
}

fn count(c: &Counts, rank: u32, collector: &str, op: EventOp) -> usize {
    c.get(&(rank, collector.to_string(), op))
        .map_or(0, Vec::len)
}

#[test]
fn our_program_runs_the_same_and_its_trace_holds_every_call() {
    if !have_mpirun() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_c(tmp.path(), "shim_check");
    let prog = prog.as_str();
    let plain = ok("plain run", mpirun(4, &[prog]).output().unwrap());
    assert_eq!(plain.lines().count(), 4, "{plain}");
    assert!(
        plain.contains("rank 3: ring 2499500 any-source-from 7 tested 5"),
        "{plain}"
    );

    // Preloaded without a trace directory: the wrappers only call MPI.
    let mut c = mpirun(4, &["-x", "LD_PRELOAD", prog]);
    c.env("LD_PRELOAD", lib());
    assert_eq!(ok("preloaded run", c.output().unwrap()), plain);
    // A trace directory that cannot be made: each rank says so and runs untraced.
    let mut c = mpirun(4, &["-x", "LD_PRELOAD", "-x", "VARGR_MPI_TRACE", prog]);
    c.env("LD_PRELOAD", lib())
        .env("VARGR_MPI_TRACE", "/proc/self/no/such/dir");
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(ok("untraceable run", o), plain);
    assert_eq!(
        err.matches("cannot make the trace directory /proc/self/no/such/dir")
            .count(),
        4,
        "{err}"
    );

    let dir = tmp.path().join("trace");
    assert_eq!(traced(&dir, 4, &[prog]), plain);
    let files = TraceFile::read_dir(&dir).unwrap();
    assert_eq!(files.len(), 4);
    let c = by_kind(&files);
    let names: BTreeSet<&str> = c.keys().map(|k| k.1.as_str()).collect();
    assert!(
        !names
            .iter()
            .any(|n| n.contains("scan") || n.contains("split")),
        "MPI_Scan (not wrapped) and MPI_Comm_split (which only names) leave no record: \
         {names:?}"
    );
    for r in 0..4u32 {
        use EventOp::{Call, Recv, Send, User};
        assert_eq!(count(&c, r, "ctx0/sendrecv", User), 1);
        // 3 to everyone, 2 to the right, plus part c (rank 2) and part d (ranks 1..3),
        // 2 on the world's duplicates, 2 to the right before the pause, and rank 2's
        // freed one.
        let isends = [7, 8, 10, 8][r as usize];
        let dup_isends: usize = c
            .iter()
            .filter(|(k, _)| k.0 == r && k.1.ends_with("/isend") && k.1 != "ctx0/isend")
            .map(|(_, v)| v.len())
            .sum();
        assert_eq!(dup_isends, 2, "rank {r}");
        assert_eq!(count(&c, r, "ctx0/isend", User), isends, "rank {r}");
        // Everyone to everyone, two small sends, the duplicates', and one after the pause
        // (not the one in it).
        assert_eq!(count(&c, r, "mpi/waitall", User), 4);
        for coll in [
            "barrier",
            "bcast",
            "reduce",
            "allreduce",
            "allgather",
            "scatter",
            "alltoall",
            "alltoallv",
        ] {
            assert_eq!(count(&c, r, &format!("ctx0/{coll}"), Call), 1, "{coll}");
        }
        // The program's, and the one that collects its lines.
        assert_eq!(count(&c, r, "ctx0/gather", Call), 2);
        let calls = |n: &str| c[&(r, format!("ctx0/{n}"), Call)][0];
        assert_eq!((calls("bcast").bytes, calls("bcast").peer), (64, 2));
        assert_eq!((calls("reduce").bytes, calls("reduce").peer), (64, 0));
        assert_eq!(calls("allreduce").peer, NO_PEER);
        // Rank r sends 4 × (r+1) ints and receives 1+2+3+4 ints.
        assert_eq!(calls("alltoallv").bytes, (16 * (r + 1)).max(40));
        assert_eq!(calls("scatter").bytes, if r == 1 { 48 } else { 12 });
        // The split communicator, named by its group: alike on both its members, not
        // like the other half's, and without a place (`-N`), as the first made over its
        // group.
        let half: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| n.ends_with(&format!(".{}/allreduce", r % 2)) && n.starts_with("ctx"))
            .filter(|n| *n != "ctx0/allreduce" && !n.contains('-'))
            .filter(|n| count(&c, (r + 1) % 4, n, Call) == 0)
            .collect();
        assert_eq!(half.len(), 1, "{names:?}");
        assert_eq!(count(&c, r, half[0], Call), 1, "{names:?}");
        assert_eq!(count(&c, (r + 2) % 4, half[0], Call), 1, "{names:?}");
        // The constructors' communicators, several over one group (the half's, the
        // Cartesian column's, MPI_Comm_create's, ...): named alike on both members of
        // each half.
        let allreduces = |rank: u32| -> BTreeSet<String> {
            c.keys()
                .filter(|k| k.0 == rank && k.1.ends_with("/allreduce") && k.2 == Call)
                .map(|k| k.1.clone())
                .collect()
        };
        assert_eq!(allreduces(r), allreduces((r + 2) % 4), "rank {r}");
        assert!(allreduces(r).len() >= 3, "{:?}", allreduces(r));
        // Non-blocking receives end when the Waitall completes them, not when posted.
        let wait = c[&(r, "mpi/waitall".to_string(), User)][0];
        let any: Vec<_> = c[&(r, "ctx0/p2p".to_string(), Recv)]
            .iter()
            .filter(|m| m.seq == 9)
            .copied()
            .collect();
        assert_eq!(any.len(), 3);
        assert!(any
            .iter()
            .all(|m| m.start < wait.start && m.end >= wait.start));
        // Received from MPI_ANY_SOURCE: the status's sources, every other rank once.
        let from: BTreeSet<u32> = any.iter().map(|m| m.peer).collect();
        assert_eq!(from, (0..4).filter(|&p| p != r).collect());
        assert!(any.iter().all(|m| m.bytes == 800));
        assert!(count(&c, r, "ctx0/p2p", Send) >= 4);
    }
    // What ran between MPI_Pcontrol(0) and MPI_Pcontrol(1) left nothing: no message
    // of tag 30 (the sendrecv and barrier counts above are of the recorded ones).
    for r in 0..4u32 {
        let left = (r + 3) % 4;
        assert!(
            plain
                .lines()
                .any(|l| l.starts_with(&format!("rank {r}:"))
                    && l.ends_with(&format!(" paused {left}"))),
            "{plain}"
        );
        for op in [EventOp::Send, EventOp::Recv] {
            let msgs = &c[&(r, "ctx0/p2p".to_string(), op)];
            assert!(
                msgs.iter().all(|m| m.seq != 30),
                "rank {r}: a paused message was recorded"
            );
            // Started before the pause: recorded, whether done in it (31) or after (32).
            for tag in [31, 32] {
                assert_eq!(
                    msgs.iter().filter(|m| m.seq == tag).count(),
                    1,
                    "rank {r} {op:?} tag {tag}"
                );
            }
        }
    }
    assert_eq!(count(&c, 0, "ctx0/ssend", EventOp::User), 1);
    let probe = c[&(1, "ctx0/probe".to_string(), EventOp::User)][0];
    assert_eq!((probe.peer, probe.seq, probe.bytes), (0, 11, 40));
    // A test or probe that finds something is a record of its own; those that find
    // nothing before it are one record of the run (how many in seq), ending before it.
    assert_eq!(count(&c, 3, "ctx0/iprobe", EventOp::User), 1);
    let found = c[&(3, "ctx0/iprobe".to_string(), EventOp::User)][0];
    let polls = &c[&(3, "ctx0/iprobe-polls".to_string(), EventOp::User)];
    assert_eq!(polls.len(), 1, "{polls:?}");
    assert!(polls[0].seq >= 1 && polls[0].peer == 2, "{polls:?}");
    assert!(polls[0].start <= polls[0].end && polls[0].end <= found.start);
    // Its Iprobes alternated with Testany: each kind is one run, ended by the same call.
    let anys = &c[&(3, "mpi/testany-polls".to_string(), EventOp::User)];
    assert_eq!(anys.len(), 1, "{anys:?}");
    assert_eq!(anys[0].seq, polls[0].seq, "{anys:?} {polls:?}");
    assert_eq!(anys[0].end, polls[0].end);
    assert!(polls[0].start <= anys[0].start);
    assert_eq!(count(&c, 3, "mpi/test", EventOp::User), 1);
    assert!(count(&c, 3, "mpi/test-polls", EventOp::User) <= 1);
    // Rank 1 polled a receive with MPI_Request_get_status: a run of test polls, then
    // the test that found it done, which ends the message; the wait that freed it later
    // adds no second one.
    assert_eq!(count(&c, 1, "mpi/test-polls", EventOp::User), 1);
    assert_eq!(count(&c, 1, "mpi/test", EventOp::User), 1);
    let done = c[&(1, "mpi/test".to_string(), EventOp::User)][0];
    let msg: Vec<_> = c[&(1, "ctx0/p2p".to_string(), EventOp::Recv)]
        .iter()
        .filter(|m| m.seq == 17)
        .copied()
        .collect();
    assert_eq!(msg.len(), 1, "{msg:?}");
    assert_eq!(msg[0].end, done.end);
    let waits = &c[&(1, "mpi/wait".to_string(), EventOp::User)];
    assert_eq!(
        waits.len(),
        3 + 1,
        "three for the sends to everyone, one for this"
    );
    assert!(waits.iter().any(|w| w.start >= done.end), "{waits:?}");
    // Rank 2 freed its send of tag 18 at once: recorded as ending at the free, before its
    // next call (an isend of tag 13), not when MPI gave that call the freed handle.
    let freed = c[&(2, "ctx0/p2p".to_string(), EventOp::Send)]
        .iter()
        .find(|m| m.seq == 18)
        .copied()
        .unwrap();
    let next = c[&(2, "ctx0/isend".to_string(), EventOp::User)]
        .iter()
        .find(|m| m.seq == 13)
        .copied()
        .unwrap();
    assert!(freed.end < next.start, "{freed:?} {next:?}");
    assert_eq!(count(&c, 0, "mpi/waitany", EventOp::User), 3);
    assert_eq!(count(&c, 1, "mpi/testall", EventOp::User), 1);

    // Every message pairs with its receive: the ring, everyone to everyone, two small
    // sends to the right (whose shared handle must not lose one), parts c
    // (with rank 3's go-ahead and rank 2's answer to it), the polled one, the one whose
    // request was freed at once (recorded as sent at the free), d, the two on the
    // world's duplicates, and the two around the ring around the pause.
    let a = analysis::analyze(&files);
    let m = &a.messages;
    assert_eq!((m.unmatched_sends, m.unmatched_recvs), (0, 0));
    assert_eq!(m.matched.len(), 4 + 12 + 8 + 2 + 2 + 1 + 1 + 3 + 8 + 8);
    let ring: BTreeSet<(u32, u32, u32)> = m
        .matched
        .iter()
        .filter(|x| x.seq == 7)
        .map(|x| (x.src, x.dst, x.bytes))
        .collect();
    assert_eq!(ring, (0..4).map(|r| (r, (r + 1) % 4, 4000)).collect());
    assert!(
        a.summary.warnings().is_empty(),
        "{:?}",
        a.summary.warnings()
    );
    // Ten collectives on the world, each instance with all four ranks. (The split
    // communicator's calls are one instance per rank: the analysis joins ranks of a
    // context through messages on it, and there are none.)
    let world: Vec<usize> = a
        .instances
        .list
        .iter()
        .filter(|i| a.timeline.collectors[i.collector].starts_with("ctx0/"))
        .map(|i| i.ranks.len())
        .collect();
    assert_eq!(world, [4; 10]);
    let out = report(&dir);
    assert!(out.contains("on 4 ranks in 4 processes"), "{out}");
}

fn netpipe() -> String {
    let np = "NPopenmpi";
    if Command::new(np).arg("-h").output().is_err() {
        // The test installs it, as scripts/test.sh installs the tests' other programs.
        let apt = Command::new("apt-get")
            .args(["install", "-y", "-qq", "netpipe-openmpi"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output();
        assert!(
            apt.is_ok_and(|o| o.status.success()) && Command::new(np).arg("-h").output().is_ok(),
            "{np} missing and not installable: apt-get install netpipe-openmpi"
        );
    }
    np.into()
}

#[test]
fn netpipe_runs_the_same_traced_and_its_trace_reads() {
    if !have_mpirun() {
        return;
    }
    let np = netpipe();
    let tmp = tempfile::tempdir().unwrap();
    // Integrity mode checks every message's bytes and prints no times, so the outputs
    // compare; -a posts receives early (MPI_Irecv), -z receives from MPI_ANY_SOURCE.
    let args = [np.as_str(), "-i", "-a", "-z", "-u", "8192", "-n", "3"];
    // NetPIPE reports on stderr.
    let both = |what: &str, o: Output| {
        format!(
            "{}{}",
            ok(what, o.clone()),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let plain = both(
        "NetPIPE",
        mpirun(2, &args).current_dir(tmp.path()).output().unwrap(),
    );
    let dir = tmp.path().join("trace");
    let mut c = Command::new(vargr());
    c.arg("mpi-run")
        .arg("--trace")
        .arg(&dir)
        .arg("--")
        .arg("mpirun")
        .args(MPIRUN)
        .args(["-n", "2"])
        .args(args)
        .current_dir(tmp.path());
    let out = both("NetPIPE traced", c.output().unwrap());
    let lines = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.contains("Integrity check"))
            .map(String::from)
            .collect()
    };
    assert!(lines(&plain).len() > 20, "{plain}");
    assert!(
        lines(&plain).iter().all(|l| l.contains("passed")),
        "{plain}"
    );
    assert_eq!(lines(&out), lines(&plain));
    // Every size NetPIPE sent is a message of the trace.
    let sizes: BTreeSet<u32> = lines(&plain)
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        .collect();
    let files = TraceFile::read_dir(&dir).unwrap();
    assert_eq!(files.len(), 2);
    let a = analysis::analyze(&files);
    let sent: BTreeSet<u32> = a.messages.matched.iter().map(|m| m.bytes).collect();
    assert!(sizes.is_subset(&sent), "{sizes:?} not in {sent:?}");
    assert_eq!(
        (a.messages.unmatched_sends, a.messages.unmatched_recvs),
        (0, 0)
    );
    let r = report(&dir);
    assert!(r.contains("on 2 ranks in 2 processes"), "{r}");

    // The two ranks on two sites, every message of 1 KiB or more compressed: NetPIPE's
    // own integrity check passes for every size.
    for mode in ["fixed:lz4", "adaptive"] {
        let mut c = Command::new(vargr());
        c.arg("mpi-run")
            .args(["--codec", mode, "--sites", "blocks:2", "--codec-min", "1k"])
            .args(["--link", "rtt=1ms,bandwidth=100mbit"])
            .arg("--")
            .arg("mpirun")
            .args(MPIRUN)
            .args(["-n", "2"])
            .args(args)
            .current_dir(tmp.path());
        let out = both(mode, c.output().unwrap());
        assert_eq!(lines(&out), lines(&plain), "{mode}");
        assert!(
            out.contains(&format!("vargr-mpi: compression {mode}:")),
            "{mode}: {out}"
        );
    }
}

/// `vargr mpi-run [--lib LIB] VARGS -- LAUNCHER -n N PROG`, without a preload of its own.
fn mpi_run(lib: Option<&Path>, vargs: &[&str], launcher: &[&str], n: usize, prog: &str) -> Output {
    let mut c = Command::new(vargr());
    c.arg("mpi-run");
    if let Some(l) = lib {
        c.arg("--lib").arg(l);
    }
    c.args(vargs)
        .arg("--")
        .args(launcher)
        .args(["-n", &n.to_string(), prog])
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap()
}

#[test]
fn mpich_programs_run_traced_and_compressed_and_the_other_abi_is_refused() {
    if !have_mpirun() {
        return;
    }
    // Debian's MPICH, beside Open MPI (its alternatives rank below Open MPI's).
    let (cc, run) = ("mpicc.mpich", "mpirun.mpich");
    if Command::new(cc).arg("-show").output().is_err() {
        eprintln!("skipped: {cc} not found (apt-get install mpich libmpich-dev)");
        return;
    }
    common::lib_mpich();
    let tmp = tempfile::tempdir().unwrap();
    let build = |name: &str| {
        let prog = tmp.path().join(format!("{name}_mpich"));
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
        ok(
            cc,
            Command::new(cc)
                // MPICH's MPI_STATUSES_IGNORE, (MPI_Status *)1, trips GCC's bounds check.
                .args([
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-Wno-stringop-overflow",
                    "-o",
                ])
                .arg(&prog)
                .arg(&src)
                .output()
                .unwrap(),
        );
        prog.to_str().unwrap().to_string()
    };
    let shim_check = build("shim_check");
    let codec_check = build("codec_check");
    let plain = |prog: &str| {
        ok(
            "MPICH run",
            Command::new(run).args(["-n", "4", prog]).output().unwrap(),
        )
    };

    // vargr mpi-run picks the MPICH build for MPICH's launcher: traced and compressed,
    // the programs print what they print without it.
    for prog in [&shim_check, &codec_check] {
        let dir = tmp.path().join(format!("trace-{}", prog.len()));
        let o = mpi_run(
            None,
            &[
                "--trace",
                dir.to_str().unwrap(),
                "--codec",
                "fixed:lz4",
                "--sites",
                "blocks:2",
                "--codec-min",
                "1k",
            ],
            &[run],
            4,
            prog,
        );
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let out = ok(prog, o);
        let (program, ours) = out.trim_end().rsplit_once('\n').unwrap();
        assert!(
            ours.starts_with("vargr mpi-run: 4 trace files in "),
            "{out}"
        );
        assert_eq!(sorted(program), sorted(&plain(prog)), "{prog}\n{err}");
        assert!(
            err.contains("vargr-mpi: compression fixed:lz4: "),
            "{prog}: {err}"
        );
        let files = TraceFile::read_dir(&dir).unwrap();
        assert_eq!(files.len(), 4);
        assert!(analysis::analyze(&files).messages.matched.len() > 10);
    }

    // A library built for one ABI refuses a program of the other, naming both. The
    // MPICH program runs on its own (a singleton): the refusal comes before MPI starts,
    // and Hydra, whose ranks end that early, at times dies of SIGPIPE before it has
    // passed their stderr on.
    let o = Command::new(&shim_check)
        .env("LD_PRELOAD", lib())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert_eq!(
        err.matches("vargr-mpi: refusing to start: libvargr_mpi.so was built for Open MPI 4.")
            .count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("this program runs on \"MPICH Version: "),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).is_empty());
    let open_mpi_prog = build_c(tmp.path(), "shim_check");
    let mut launcher = vec!["mpirun"];
    launcher.extend(MPIRUN);
    let o = mpi_run(
        Some(&common::lib_mpich()),
        &[],
        &launcher,
        2,
        &open_mpi_prog,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("vargr-mpi: refusing to start: libvargr_mpi_mpich.so was built for MPICH 4."),
        "{err}"
    );
    assert!(err.contains("this program runs on \"Open MPI v4."), "{err}");
}

/// The lines of `out`, sorted (ranks print in any order).
fn sorted(out: &str) -> Vec<String> {
    let mut l: Vec<String> = out.lines().map(String::from).collect();
    l.sort();
    l
}

/// `mpirun -n 4 PROG ARGS` preloaded, with `vars` set for every rank.
fn preloaded(prog: &str, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut a: Vec<&str> = vec!["-x", "LD_PRELOAD"];
    for (k, _) in vars {
        a.extend(["-x", k]);
    }
    a.push(prog);
    a.extend(args);
    let mut c = mpirun(4, &a);
    c.env("LD_PRELOAD", lib());
    for (k, v) in vars {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// The job's compression summary line for `mode` in mpirun's stderr, and its ratio.
fn compression<'a>(err: &'a str, mode: &str) -> (&'a str, f64) {
    let line = err
        .lines()
        .find(|l| l.starts_with(&format!("vargr-mpi: compression {mode}:")))
        .unwrap_or_else(|| panic!("{mode}: no summary in {err}"));
    let ratio = line
        .rsplit_once("(x")
        .and_then(|(_, r)| r.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no ratio in {line}"));
    (line, ratio)
}

const SITES: (&str, &str) = ("VARGR_MPI_SITES", "blocks:2");
const MIN_1K: (&str, &str) = ("VARGR_MPI_CODEC_MIN", "1k");

#[test]
fn messages_between_sites_compress_and_arrive_as_sent() {
    if !have_mpirun() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_c(tmp.path(), "codec_check");
    let plain = ok("plain run", mpirun(4, &[&prog]).output().unwrap());
    assert!(
        plain.contains("rank 2: truncated: MPI_ERR_TRUNCATE"),
        "{plain}"
    );
    assert!(plain.contains("rank 0: probed 3000 doubles"), "{plain}");
    for mode in ["fixed:lz4", "fixed:zstd:3", "adaptive"] {
        let o = preloaded(
            &prog,
            &[],
            &[
                ("VARGR_MPI_CODEC", mode),
                SITES,
                MIN_1K,
                ("VARGR_MPI_LINK", "rtt=2ms,bandwidth=100mbit"),
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let out = ok(mode, o);
        assert_eq!(sorted(&out), sorted(&plain), "{mode}\n{err}");
        // One line for the job: frames sent, and (with a fixed codec) fewer bytes than
        // they held. The adaptive engine's choices depend on how fast the codecs run on
        // the machine at that moment, so only its results are checked here.
        let (line, ratio) = compression(&err, mode);
        assert!(mode == "adaptive" || ratio > 2.0, "{mode}: {line}");
    }
    // Traced and compressed at once, as `vargr mpi-run` starts it.
    let dir = tmp.path().join("trace");
    let mut c = Command::new(vargr());
    c.arg("mpi-run")
        .arg("--trace")
        .arg(&dir)
        .args([
            "--codec",
            "fixed:lz4",
            "--sites",
            "blocks:2",
            "--codec-min",
            "1k",
        ])
        .arg("--")
        .arg("mpirun")
        .args(MPIRUN)
        .args(["-n", "4", &prog])
        .env_remove("LD_PRELOAD");
    let out = ok("vargr mpi-run --codec", c.output().unwrap());
    let (program, ours) = out.trim_end().rsplit_once('\n').unwrap();
    assert!(
        ours.starts_with("vargr mpi-run: 4 trace files in "),
        "{out}"
    );
    assert_eq!(sorted(program), sorted(&plain));
    let files = TraceFile::read_dir(&dir).unwrap();
    let a = analysis::analyze(&files);
    // The trace holds the program's messages as it sent them, not the frames.
    assert!(
        a.messages.matched.iter().any(|m| m.bytes == 65536),
        "{:?}",
        a.messages.matched.len()
    );
}

#[test]
fn a_damaged_frame_is_an_mpi_error_and_ranks_that_disagree_do_not_start() {
    if !have_mpirun() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_c(tmp.path(), "codec_check");
    let o = preloaded(
        &prog,
        &["corrupt"],
        &[("VARGR_MPI_CODEC", "fixed:lz4"), SITES, MIN_1K],
    );
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let out = ok("corrupt", o);
    assert!(out.contains("rank 2: corrupt: rc error"), "{out}\n{err}");
    assert!(out.contains("rank 2: corrupt: class other"), "{out}\n{err}");
    assert!(err.contains("is damaged"), "{err}");

    // Ranks 2 and 3 without the codec: refused at MPI_Init, with the reason.
    let mut c = Command::new("mpirun");
    c.args(MPIRUN)
        .args([
            "-n",
            "2",
            "-x",
            "LD_PRELOAD",
            "-x",
            "VARGR_MPI_CODEC=fixed:lz4",
        ])
        .arg(&prog)
        .args([":", "-n", "2", "-x", "LD_PRELOAD"])
        .arg(&prog)
        .env("LD_PRELOAD", lib())
        .env_remove("VARGR_MPI_CODEC");
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("compression is on for some ranks and not others"),
        "{err}"
    );
    // A setting that does not parse is named, by the ranks or at once by mpi-run.
    let o = preloaded(
        &prog,
        &[],
        &[
            ("VARGR_MPI_CODEC", "fixed:lz4"),
            ("VARGR_MPI_SITES", "rings"),
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("VARGR_MPI_SITES"), "{err}");
    let o = Command::new(vargr())
        .args(["mpi-run", "--codec", "sometimes", "--", "true"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--codec sometimes"));
}

/// Builds one of the tests' Fortran programs into `dir`.
fn build_fortran(dir: &Path, name: &str) -> String {
    let prog = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fortran/{name}.f90"));
    ok(
        "mpifort",
        Command::new("mpifort")
            .args(["-Wall", "-Werror", "-o"])
            .arg(&prog)
            .arg(&src)
            .current_dir(dir)
            .output()
            .unwrap(),
    );
    prog.to_str().unwrap().to_string()
}

#[test]
fn fortran_programs_are_traced_and_compressed_like_c_ones() {
    if !have_mpirun() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // mpif.h-style calls (`use mpi`), and `use mpi_f08`, which reaches MPI another way.
    for (name, messages) in [("shim_check", 12), ("f08_check", 4)] {
        let prog = build_fortran(tmp.path(), name);
        let plain = ok(name, mpirun(4, &[&prog]).output().unwrap());
        let dir = tmp.path().join(format!("{name}-trace"));
        let mut c = Command::new(vargr());
        c.arg("mpi-run")
            .arg("--trace")
            .arg(&dir)
            .args(["--codec", "fixed:lz4", "--sites", "blocks:2"])
            .args(["--codec-min", "1k", "--", "mpirun"])
            .args(MPIRUN)
            .args(["-n", "4", &prog])
            .env_remove("LD_PRELOAD");
        let o = c.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let out = ok(name, o);
        let (program, ours) = out.trim_end().rsplit_once('\n').unwrap();
        assert!(
            ours.starts_with("vargr mpi-run: 4 trace files in "),
            "{out}"
        );
        assert_eq!(sorted(program), sorted(&plain), "{name}\n{err}");
        // The frames crossed between the sites, compressed.
        let (line, ratio) = compression(&err, "fixed:lz4");
        assert!(ratio > 2.0, "{name}: {line}");
        // The trace holds the program's messages of 8192 doubles, matched send to receive.
        let a = analysis::analyze(&TraceFile::read_dir(&dir).unwrap());
        let big = a
            .messages
            .matched
            .iter()
            .filter(|m| m.bytes == 65536)
            .count();
        assert!(big >= messages, "{name}: {big} messages of 64 KiB matched");
        if name == "shim_check" {
            // MPI_PCONTROL(0) paused the library: nothing of tag 30.
            assert!(program.contains(": paused "), "{program}");
            assert!(
                a.messages.matched.iter().all(|m| m.seq != 30),
                "a paused Fortran message was recorded"
            );
            // Started before the pause (31), polled with MPI_REQUEST_GET_STATUS (32):
            // each rank's to its neighbour, matched.
            // And on the two duplicates of the world (50, 51), used in opposite orders.
            for tag in [31, 32, 50, 51] {
                let n = a.messages.matched.iter().filter(|m| m.seq == tag).count();
                assert_eq!(n, 4, "tag {tag}");
            }
            let m = &a.messages;
            assert_eq!((m.unmatched_sends, m.unmatched_recvs), (0, 0));
        }
    }
}

#[test]
fn a_plan_made_from_recorded_samples_guides_compression() {
    if !have_mpirun() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_c(tmp.path(), "codec_check");
    let plain = ok("plain run", mpirun(4, &[&prog]).output().unwrap());
    let samples = tmp.path().join("samples");
    let run = |codec: &str, extra: &[&std::ffi::OsStr]| {
        let o = Command::new(vargr())
            .arg("mpi-run")
            .args(["--codec", codec, "--sites", "blocks:2", "--codec-min", "1k"])
            .args(extra)
            .arg("--")
            .arg("mpirun")
            .args(MPIRUN)
            .args(["-n", "4", &prog])
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let out = ok(codec, o);
        assert_eq!(sorted(&out), sorted(&plain), "{codec}\n{err}");
        err
    };
    // The first run records; every rank writes its samples at MPI_Finalize.
    run(
        "adaptive",
        &["--codec-samples".as_ref(), samples.as_os_str()],
    );
    let files = std::fs::read_dir(&samples)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "ctr")
        })
        .count();
    assert_eq!(files, 4);
    let o = Command::new(vargr())
        .args(["codec", "plan"])
        .arg(&samples)
        .args(["--bandwidth", "100mbit", "--latency", "1ms"])
        .output()
        .unwrap();
    let said = ok("vargr codec plan", o);
    let plan = samples.join("plan.json");
    assert!(plan.is_file(), "{said}");
    // The plan's run compresses what the plan says, and the program sees the same.
    let mode = format!("guided:{}", plan.display());
    let err = run(&mode, &[]);
    let (line, ratio) = compression(&err, &mode);
    assert!(ratio > 1.5, "{line}\n{said}");
}
