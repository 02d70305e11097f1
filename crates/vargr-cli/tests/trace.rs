//! `vargr trace export` and `vargr trace report` on the trace files of real jobs.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::*;

/// Runs `vargr ARGS` and fails the test, with its output, unless it succeeds.
fn ok(args: &[&str]) -> CliRun {
    let r = run_cli(args, Duration::from_secs(120));
    assert!(r.status.success(), "vargr {args:?}: {r:?}");
    r
}

fn traced_job(dir: &Path, prog: &[&str]) {
    let d = dir.to_str().expect("a UTF-8 temp dir");
    let mut args = vec![
        "run",
        "-n",
        "4",
        "--ranks-per-process",
        "2",
        "--trace",
        d,
        "--",
    ];
    args.push(vargr_bench());
    args.extend_from_slice(prog);
    ok(&args);
    let files = std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "vtr"))
        })
        .count();
    assert_eq!(files, 2, "one trace file per process");
}

#[test]
fn a_traced_job_exports_a_valid_timeline_and_a_report() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let d = dir.to_str().unwrap();
    traced_job(dir, &["coll-check"]);

    let r = ok(&["trace", "export", d]);
    let json = dir.join("trace.json");
    assert!(
        r.stdout.contains(&format!("wrote {}", json.display())),
        "{r:?}"
    );
    assert!(r.stdout.contains("on 4 ranks in 2 processes"), "{r:?}");
    assert!(r.stdout.contains("culprit: rank "), "{r:?}");

    // The JSON parses, passes the validator, and has one track per rank.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).expect("JSON");
    let v = ok(&["trace", "validate", json.to_str().unwrap()]);
    assert!(v.stdout.contains("valid"), "{v:?}");
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        ["rank 0", "rank 1", "rank 2", "rank 3"],
        "{names:?}"
    );
    let tracks: BTreeSet<(i64, i64)> = events
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| (e["pid"].as_i64().unwrap(), e["tid"].as_i64().unwrap()))
        .collect();
    assert_eq!(tracks.len(), 4);
    // Every collective of coll-check shows up, with its sends and receives.
    let calls: BTreeSet<&str> = events
        .iter()
        .filter(|e| e["cat"] == "call")
        .filter_map(|e| e["name"].as_str())
        .collect();
    for c in [
        "allreduce",
        "bcast",
        "reduce",
        "gather",
        "scatter",
        "allgather",
        "alltoall",
        "barrier",
    ] {
        assert!(calls.contains(c), "{c} missing from {calls:?}");
    }
    assert!(events.iter().any(|e| e["cat"] == "send"));
    assert!(events.iter().any(|e| e["cat"] == "recv"));

    // -o puts it elsewhere.
    let other = dir.join("other.json");
    ok(&[
        "trace",
        "export",
        d,
        "--format",
        "perfetto",
        "-o",
        other.to_str().unwrap(),
    ]);
    assert!(other.exists());

    let r = ok(&["trace", "report", d]);
    let html_path = dir.join("report.html");
    assert!(
        r.stdout.contains(&format!("wrote {}", html_path.display())),
        "{r:?}"
    );
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(html.contains("<h2 id=\"summary\">Summary</h2>"));
    assert!(
        html.contains("<th class=\"l\">Ranks</th><td>4</td>"),
        "{html}"
    );
    assert!(html.contains("<svg"));
    assert!(!html.contains("<script"));
    // Each process's rank threads: TLP, states, CPU time, counters or why not.
    assert!(
        html.contains("<h2 id=\"threads\">Rank threads</h2>"),
        "{html}"
    );
    let r = ok(&["trace", "report", d, "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON");
    let threads = doc["threads"].as_array().expect("threads");
    assert_eq!(threads.len(), 2, "{threads:?}");
    for p in threads {
        let u = &p["usage"];
        assert_eq!(u["ranks"], 2, "{p}");
        let tlp: f64 = u["tlp"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x.as_f64())
            .sum();
        assert!((tlp - 1.0).abs() < 1e-6, "{p}");
        assert!(u["transitions"].as_u64().unwrap() > 0, "{p}");
        for r in u["per_rank"].as_array().unwrap() {
            let c = &r["counters"];
            assert!(
                c["instructions"].is_u64() || c["unavailable"].is_string(),
                "{r}"
            );
        }
    }
}

#[test]
fn the_report_names_a_slow_rank_as_the_culprit() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    // Rank 1 sleeps 2 ms before each allreduce: it arrives last in (nearly) every call.
    traced_job(
        tmp.path(),
        &[
            "slow-rank",
            "--rank",
            "1",
            "--iters",
            "100",
            "--sleep-us",
            "2000",
        ],
    );
    let r = ok(&["trace", "report", d]);
    assert!(r.stdout.contains("culprit: rank 1 (last in "), "{r:?}");
    let html = std::fs::read_to_string(tmp.path().join("report.html")).unwrap();
    assert!(
        html.contains("Rank <b>1</b> arrived last most often"),
        "{html}"
    );
}

#[test]
fn bad_trace_directories_are_named_in_the_error() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let r = run_cli(
        &["trace", "report", missing.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(!r.status.success());
    assert!(
        r.stderr
            .contains(&format!("{}: no such directory", missing.display())),
        "{r:?}"
    );

    let empty = tmp.path();
    let r = run_cli(
        &["trace", "export", empty.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(!r.status.success());
    assert!(r.stderr.contains("no trace files (*.vtr)"), "{r:?}");

    let bad = tmp.path().join("vm-00000.vtr");
    std::fs::write(&bad, b"VARGRTR1 this is not a trace").unwrap();
    let r = run_cli(
        &["trace", "report", empty.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(!r.status.success());
    assert!(
        r.stderr.contains(&bad.display().to_string()) && r.stderr.contains("not a vargr trace"),
        "{r:?}"
    );
}

/// A trace file changed after it was written (one byte of a record here) still parses;
/// its checksum makes report and export refuse it, naming it, instead of reporting
/// wrong times.
#[test]
fn a_damaged_trace_file_is_named_by_report_and_export() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let d = dir.to_str().unwrap();
    traced_job(dir, &["coll-check"]);
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "vtr"))
        .collect();
    files.sort();
    let victim = &files[1];
    let mut bytes = std::fs::read(victim).unwrap();
    // A byte of the last record, before the 32-byte checksum.
    let at = bytes.len() - 32 - 20;
    bytes[at] ^= 0x04;
    std::fs::write(victim, &bytes).unwrap();
    for cmd in ["report", "export"] {
        let r = run_cli(&["trace", cmd, d], Duration::from_secs(30));
        assert!(!r.status.success(), "vargr trace {cmd}: {r:?}");
        assert!(
            r.stderr.contains(&format!(
                "{}: damaged trace file (its BLAKE3 checksum does not match its contents)",
                victim.display()
            )),
            "vargr trace {cmd}: {r:?}"
        );
    }
}

#[test]
fn clocks_of_processes_are_aligned_with_a_reported_error() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    // Rank 2's process reads a clock 50 ms ahead, as if it ran on another host.
    let mut child = std::process::Command::new(vargr())
        .args([
            "run",
            "-n",
            "4",
            "--ranks-per-process",
            "2",
            "--trace",
            d,
            "--",
        ])
        .args([vargr_bench(), "coll-check"])
        .env("VARGR_CLOCK_SKEW_NS", "2=50000000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status = wait_guarded(&mut child, Duration::from_secs(120)).expect("hang guard");
    assert!(status.success());
    let files = vargr_trace::TraceFile::read_dir(tmp.path()).unwrap();
    assert_eq!(files.len(), 2);
    for f in &files {
        let a = f.align;
        assert!(a.aligned, "{}: {a:?}", f.process);
        let want = if f.process.starts_with("ranks 2..") {
            50_000_000
        } else {
            0
        };
        assert!(a.error_ns < 5_000_000, "{}: {a:?}", f.process);
        assert!(
            (a.offset_ns - want).unsigned_abs() <= a.error_ns + 100_000,
            "{}: {a:?}, want {want}",
            f.process
        );
    }
    // The report's clock table gives every process's offset and error.
    ok(&["trace", "report", d]);
    let html = std::fs::read_to_string(tmp.path().join("report.html")).unwrap();
    let at = html.find("offset to the root").expect("no clock table");
    let table = &html[at..at + html[at..].find("</table>").unwrap()];
    // In ms with two decimals; the estimate itself may be off by its error bound (checked
    // above), which on a loaded machine is more than the last digit.
    assert!(
        table.contains("<td>49.") || table.contains("<td>50."),
        "the 50 ms offset is not shown: {table}"
    );
}

/// Runs `vargr-bench coll-check` traced into `dir` with extra `vargr run` options.
fn traced_job_with(dir: &Path, opts: &[&str]) {
    let d = dir.to_str().expect("a UTF-8 temp dir");
    let mut args = vec!["run", "-n", "4", "--ranks-per-process", "2", "--trace", d];
    args.extend_from_slice(opts);
    args.extend_from_slice(&["--", vargr_bench(), "coll-check"]);
    ok(&args);
}

/// Two configurations of one program (two sites behind an emulated WAN, and one host)
/// compared by `vargr trace diff`: the same collectives with the same numbers of calls,
/// the stage collectors only where links have stages, and exit statuses scripts can use.
#[test]
fn trace_diff_compares_two_configurations() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("wan"), tmp.path().join("local"));
    traced_job_with(&a, &["--sites", "2", "--wan", "rtt=2ms"]);
    traced_job_with(&b, &[]);
    let (da, db) = (a.to_str().unwrap(), b.to_str().unwrap());

    let r = ok(&["trace", "diff", da, db]);
    assert!(
        r.stdout.starts_with(&format!("A: {da}\nB: {db}\n")),
        "{r:?}"
    );
    assert!(r.stdout.contains("Δ mean"), "{r:?}");
    assert!(r.stdout.contains("only in A: link/stage/"), "{r:?}");

    let r = ok(&["trace", "diff", da, db, "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON");
    let only_a: Vec<&str> = doc["only_a"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    for s in [
        "link/stage/emu/out",
        "link/stage/emu/in",
        "link/stage/codec/out",
    ] {
        assert!(only_a.contains(&s), "{s} not only in A: {only_a:?}");
    }
    assert_eq!(doc["only_b"], serde_json::json!([]), "{doc}");
    let rows = doc["rows"].as_array().unwrap();
    let both: Vec<&serde_json::Value> = rows.iter().filter(|r| !r["change"].is_null()).collect();
    let names: Vec<&str> = both
        .iter()
        .map(|r| r["collector"].as_str().unwrap())
        .collect();
    for c in [
        "ctx0/allreduce",
        "ctx0/bcast",
        "ctx0/alltoall",
        "ctx0/barrier",
    ] {
        assert!(names.contains(&c), "{c} missing from {names:?}");
    }
    for r in &both {
        // Same program, same calls (every rank of a communicator records each).
        assert_eq!(r["a"]["calls"], r["b"]["calls"], "{r}");
        assert_eq!(r["change"]["calls"], 0, "{r}");
        assert!(r["a"]["call_records"].as_bool().unwrap(), "{r}");
        assert_eq!(r["a"]["calls"].as_u64().unwrap() % 2, 0, "{r}");
        let (ta, tb) = (
            r["a"]["time"]["total"].as_f64().unwrap(),
            r["b"]["time"]["total"].as_f64().unwrap(),
        );
        let want = (tb - ta) / ta * 100.0;
        let got = r["change"]["total"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-6 * want.abs().max(1.0), "{r}");
    }

    // A trace against itself changes nothing; any change beyond −100 % fails the guard.
    let same = ok(&["trace", "diff", da, da, "--fail-slower", "0"]);
    assert!(!same.stdout.contains("only in"), "{same:?}");
    let r = run_cli(
        &["trace", "diff", da, db, "--fail-slower=-100"],
        Duration::from_secs(60),
    );
    assert_eq!(r.status.code(), Some(3), "{r:?}");
    assert!(
        r.stderr.contains("slower than A by more than -100%"),
        "{r:?}"
    );
    let missing = tmp.path().join("nope");
    let r = run_cli(
        &["trace", "diff", da, missing.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert_eq!(r.status.code(), Some(1), "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("{}: no such directory", missing.display())),
        "{r:?}"
    );

    // The report of the two-site run times its stages and orders departures.
    let r = ok(&["trace", "report", da, "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON");
    let stages = doc["stages"]["stages"].as_array().unwrap();
    let emu = stages
        .iter()
        .find(|s| s["stage"] == "emu" && s["direction"] == "out")
        .unwrap_or_else(|| panic!("no emu stage: {stages:?}"));
    assert!(emu["frames"].as_u64().unwrap() > 0);
    assert!(!doc["stages"]["places"].as_array().unwrap().is_empty());
    for c in doc["collectives"].as_array().unwrap() {
        for r in c["ranks"].as_array().unwrap() {
            let sum = |k: &str| -> u64 {
                r[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap())
                    .sum()
            };
            assert_eq!(sum("arrival_hist"), r["instances"].as_u64().unwrap(), "{c}");
            assert_eq!(
                sum("departure_hist"),
                r["instances"].as_u64().unwrap(),
                "{c}"
            );
        }
    }
    let r = ok(&["trace", "report", da]);
    assert!(r.stdout.contains("time per path stage:"), "{r:?}");
    assert!(r.stdout.contains("first out"), "{r:?}");
    let html = std::fs::read_to_string(a.join("report.html")).unwrap();
    assert!(html.contains("id=\"stages\""));
    assert!(html.contains("aria-label=\"departure order\""));
}
