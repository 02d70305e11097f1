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
    assert!(
        table.contains("<td>49.99") || table.contains("<td>50.00"),
        "the 50 ms offset is not shown: {table}"
    );
}
