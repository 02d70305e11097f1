//! The `vargr` command as a user runs it: `demo` and `topo`.

mod common;

use std::time::Duration;

use common::run_cli;

const GUARD: Duration = Duration::from_secs(30);

fn assert_demo_ok(args: &[&str], backends: usize) {
    let r = run_cli(args, GUARD);
    assert!(
        r.status.success(),
        "vargr {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        r.status,
        r.stdout,
        r.stderr
    );
    // The summary table.
    let table = r
        .stdout
        .split_once("step")
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("no summary table in:\n{}", r.stdout));
    for step in [
        "start-up",
        "multicast + sum",
        "round trips",
        "equivalence classes",
        "BE→BE message",
        "monitor pull",
        "shutdown",
    ] {
        assert!(table.contains(step), "summary lacks {step:?}:\n{table}");
    }
    let n = backends as i64;
    let sum_line = table
        .lines()
        .find(|l| l.contains("multicast + sum"))
        .expect("sum row");
    let expect = 1000 * n + n * (n - 1) / 2;
    assert!(
        sum_line.contains(&format!("= {expect} (correct)")),
        "sum row should report {expect} (correct): {sum_line}"
    );
    assert!(
        table.contains(&format!(
            "back-end {} got \"hello from back-end 0\"",
            backends - 1
        )),
        "BE→BE row:\n{table}"
    );
    // The monitor's view: every node answered the pull through the tree.
    let pull = table
        .lines()
        .find(|l| l.contains("monitor pull"))
        .expect("pull row");
    assert!(pull.contains("nodes answered through the tree"), "{pull}");
    assert!(!pull.contains("missing"), "{pull}");
    assert!(
        r.stdout.contains("WAVES/S"),
        "no monitor view:\n{}",
        r.stdout
    );
}

#[test]
fn codec_bench_prices_every_codec_on_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("ramp.f64");
    let data: Vec<u8> = (0..20_000)
        .flat_map(|i| (f64::from(i) * 0.5).to_le_bytes())
        .collect();
    std::fs::write(&f, data).unwrap();
    let path = f.to_str().unwrap();
    let r = run_cli(
        &[
            "codec",
            "bench",
            path,
            "--type",
            "f64",
            "--bandwidth",
            "10mbit",
        ],
        GUARD,
    );
    assert!(r.status.success(), "{r:?}");
    for codec in ["none", "lz4", "fpc:16", "zstd:3", "shuffle-lz4"] {
        assert!(
            r.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{codec} "))),
            "no {codec} row:\n{}",
            r.stdout
        );
    }
    // A smooth ramp compresses well and a 10 Mbit/s link makes that pay.
    assert!(r.stdout.contains("pays on this link: "), "{}", r.stdout);
    assert!(
        r.stdout.contains("the adaptive engine would send it with "),
        "{}",
        r.stdout
    );

    let bad = run_cli(&["codec", "bench", path, "--type", "f65"], GUARD);
    assert!(!bad.status.success());
    assert!(bad.stderr.contains("f65"), "{}", bad.stderr);
    let missing = run_cli(&["codec", "bench", "/nonexistent/file"], GUARD);
    assert!(
        missing.stderr.contains("/nonexistent/file"),
        "{}",
        missing.stderr
    );
}

#[test]
fn demo_default_topology_runs_to_completion() {
    assert_demo_ok(&["demo"], 16);
}

#[test]
fn demo_flat_topology_runs_to_completion() {
    assert_demo_ok(&["demo", "--topology", "flat:4"], 4);
}

#[test]
fn topo_gen_output_reparses_with_check() {
    let dir = tempfile::tempdir().unwrap();
    let gen = run_cli(&["topo", "gen", "kary:4@16"], GUARD);
    assert!(gen.status.success(), "topo gen failed: {}", gen.stderr);
    let file = dir.path().join("kary.top");
    std::fs::write(&file, &gen.stdout).unwrap();
    let check = run_cli(&["topo", "check", file.to_str().unwrap()], GUARD);
    assert!(
        check.status.success(),
        "topo check of gen output failed: {}\nfile:\n{}",
        check.stderr,
        gen.stdout
    );
    assert!(
        check
            .stdout
            .contains("ok: 21 nodes, 16 back-ends, 4 internal, depth 2, max fan-out 4"),
        "unexpected summary: {}",
        check.stdout
    );

    // The TOML form re-parses to the same shape.
    let toml = run_cli(&["topo", "gen", "kary:4@16", "--format", "toml"], GUARD);
    assert!(toml.status.success(), "{}", toml.stderr);
    let tfile = dir.path().join("kary.toml");
    std::fs::write(&tfile, &toml.stdout).unwrap();
    let check = run_cli(&["topo", "check", tfile.to_str().unwrap()], GUARD);
    assert!(check.status.success(), "{}", check.stderr);
    assert!(
        check.stdout.contains("21 nodes, 16 back-ends"),
        "{}",
        check.stdout
    );
}

#[test]
fn topo_check_broken_file_reports_file_line_col() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.top");
    // Line 2 misses its `;`, so the error is found at line 3, column 1.
    std::fs::write(
        &file,
        "localhost:0 => localhost:1 localhost:2 ;\nlocalhost:1 => localhost:3\nlocalhost:9 => ;\n",
    )
    .unwrap();
    let r = run_cli(&["topo", "check", file.to_str().unwrap()], GUARD);
    assert!(
        !r.status.success(),
        "broken file was accepted: {}",
        r.stdout
    );
    let want = format!("{}:3:1", file.display());
    assert!(
        r.stderr.contains(&want),
        "stderr should locate the error as {want}: {}",
        r.stderr
    );

    // A missing file is an error too, naming the file.
    let missing = dir.path().join("nope.top");
    let r = run_cli(&["topo", "check", missing.to_str().unwrap()], GUARD);
    assert!(!r.status.success());
    assert!(r.stderr.contains("nope.top"), "{}", r.stderr);
}

#[test]
fn topo_show_dot_prints_digraph() {
    let dir = tempfile::tempdir().unwrap();
    let gen = run_cli(&["topo", "gen", "1x2x4"], GUARD);
    assert!(gen.status.success(), "{}", gen.stderr);
    let file = dir.path().join("t.top");
    std::fs::write(&file, &gen.stdout).unwrap();
    let r = run_cli(&["topo", "show", file.to_str().unwrap(), "--dot"], GUARD);
    assert!(r.status.success(), "{}", r.stderr);
    assert!(r.stdout.contains("digraph"), "not DOT:\n{}", r.stdout);
    // One edge per non-root node: 2 commnodes + 4 back-ends.
    assert_eq!(r.stdout.matches("->").count(), 6, "{}", r.stdout);
    let plain = run_cli(&["topo", "show", file.to_str().unwrap()], GUARD);
    assert!(plain.status.success(), "{}", plain.stderr);
    assert!(plain.stdout.contains("[front-end]"), "{}", plain.stdout);
}

#[test]
fn topo_gen_bad_spec_quotes_the_spec() {
    for spec in ["kary:0@x", "blah:3", "flat:"] {
        let r = run_cli(&["topo", "gen", spec], GUARD);
        assert!(
            !r.status.success(),
            "spec {spec:?} was accepted: {}",
            r.stdout
        );
        assert!(
            r.stderr.contains(&format!("{spec:?}")),
            "error should quote {spec:?}: {}",
            r.stderr
        );
    }
}

#[test]
fn bench_codec_sends_real_messages_and_writes_records() {
    // One small set over a slow emulated link: every mode is a real two-site job, and
    // the ratio comes from what the codec stage put on the link.
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("codec.json");
    let r = run_cli(
        &[
            "bench",
            "codec",
            "--quick",
            "--no-fetch",
            "--data",
            tmp.path().to_str().unwrap(),
            "--only",
            "f64-pattern",
            "--links",
            "latency=1ms,bandwidth=50mbit",
            "--reps",
            "2",
            "--warmup",
            "1",
            "--bulk-mb",
            "0",
            "--json",
            json.to_str().unwrap(),
        ],
        GUARD,
    );
    assert!(r.status.success(), "{r:?}");
    assert!(r.stdout.contains("real data skipped"), "{}", r.stdout);
    let all: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let of = |test: &str| -> Vec<&serde_json::Value> {
        all.iter().filter(|r| r["test"] == test).collect()
    };
    // Codec speeds and the decision cost are measured in process, beside the jobs.
    assert!(of("speed")
        .iter()
        .all(|r| r["compress_mb_s"].as_f64().unwrap() > 0.0));
    assert!(
        !of("speed").is_empty() && !of("decision").is_empty(),
        "{all:?}"
    );
    let records = of("message");
    let get = |codec: &str| {
        records
            .iter()
            .find(|r| r["codec"] == codec)
            .unwrap_or_else(|| panic!("no {codec} record in {records:?}"))
    };
    for r in &records {
        for key in [
            "dataset",
            "dtype",
            "bytes",
            "link",
            "codec",
            "ratio",
            "median_us",
        ] {
            assert!(!r[key].is_null(), "{key} missing in {r}");
        }
    }
    assert_eq!(get("none")["speedup_vs_none"], 1.0);
    // An arithmetic sequence of doubles: FPC predicts it, and the wire shows it.
    assert!(
        get("fpc:16")["ratio"].as_f64().unwrap() > 5.0,
        "{records:?}"
    );
    // `none` is every job's raw units, timed in the same jobs.
    assert!(
        get("none")["median_us"].as_f64().unwrap() > 0.0,
        "{records:?}"
    );
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    // `vargr dedup model | head -0`: the reader is gone before the first line.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(common::vargr())
        .args(["dedup", "model"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {err}", out.status);
    assert!(!err.contains("panicked"), "{err}");
}
