//! `vargr bench dedup --quick` end to end on synthetic data: every part runs, the JSON
//! has the fields the issue asks for, and the figures are sane. No timing assertions.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{vargr, wait_guarded};

/// Runs `vargr bench dedup --quick --no-fetch --skip-wan` on synthetic data with
/// `extra` arguments, and returns its JSON records and its standard output.
fn quick_bench(extra: &[&str]) -> (Vec<serde_json::Value>, String) {
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("dedup.json");
    let mut child = Command::new(vargr())
        .args([
            "bench",
            "dedup",
            "--quick",
            "--no-fetch",
            "--skip-wan",
            "--data",
        ])
        .arg(d.path().join("no-data"))
        .arg("--json")
        .arg(&json)
        .args(extra)
        .current_dir(d.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            r.read_to_string(&mut s).unwrap();
            s
        })
    };
    let (out, err) = (read(Box::new(out)), read(Box::new(err)));
    let status = wait_guarded(&mut child, Duration::from_secs(300)).expect("bench dedup hung");
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(status.success(), "stdout:\n{out}\nstderr:\n{err}");
    let records = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (records, out)
}

#[test]
fn pipeline_options_choose_what_runs() {
    let (records, _) = quick_bench(&[
        "--only",
        "pipeline",
        "--pipeline-modes",
        "zstd1",
        "--pipeline-caches",
        "memory",
        "--pipeline-threads",
        "2",
    ]);
    assert_eq!(records.len(), 2, "{records:?}");
    for (r, phase) in records.iter().zip(["cold", "warm"]) {
        assert_eq!(r["benchmark"], "pipeline", "{r}");
        assert_eq!(r["phase"], phase, "{r}");
        assert_eq!(r["cache"], "memory", "{r}");
        assert_eq!(r["threads"], 2, "{r}");
        assert!(r["options"].as_str().unwrap().starts_with("zstd 1"), "{r}");
    }
}

#[test]
fn quick_bench_dedup_writes_sane_records() {
    let (records, out) = quick_bench(&[]);
    assert!(out.contains("targets"), "{out}");

    for r in &records {
        for key in [
            "benchmark",
            "dataset",
            "tool",
            "bytes_in",
            "bytes_on_wire",
            "seconds",
        ] {
            assert!(r.get(key).is_some(), "{key} missing in {r}");
        }
        let tool = r["tool"].as_str().unwrap();
        assert!(["vargr", "rsync", "zstd-patch-from"].contains(&tool), "{r}");
    }
    let of = |b: &str| -> Vec<&serde_json::Value> {
        records.iter().filter(|r| r["benchmark"] == b).collect()
    };

    let tp = of("throughput");
    for seg in [
        "cdc",
        "cdc:256",
        "cdc:16:64:256",
        "static:4k",
        "sw",
        "tiles",
        "varg",
    ] {
        let r = tp
            .iter()
            .find(|r| r["segmenter"] == seg)
            .unwrap_or_else(|| panic!("no throughput record for {seg}"));
        assert!(r["mb_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["segments"].as_u64().unwrap() > 0, "{r}");
    }

    // Four modes (no stream compressor, zstd 3, zstd 1, delta batches) × two caches ×
    // one or two threads × cold and warm.
    let pipe = of("pipeline");
    assert_eq!(pipe.len(), 32, "{pipe:?}");
    for r in &pipe {
        let (wire, n) = (
            r["bytes_on_wire"].as_u64().unwrap(),
            r["bytes_in"].as_u64().unwrap(),
        );
        // New data without a stream compressor costs its bytes and a little framing.
        let bound = match (r["phase"].as_str(), r["options"].as_str()) {
            (Some("cold"), Some(o)) if o.starts_with("no stream") => n + n / 100,
            _ => n,
        };
        assert!(wire > 0 && wire < bound, "{r}");
    }

    // vargr synced both releases (over local pipes with --skip-wan); the second one,
    // mostly a repeat of the first, took far fewer bytes than its size.
    let sync = of("sync");
    let vargr_second = sync
        .iter()
        .find(|r| r["tool"] == "vargr" && r.get("base").is_some())
        .expect("vargr sync of the second release");
    let (n, wire) = (
        vargr_second["bytes_in"].as_u64().unwrap(),
        vargr_second["bytes_on_wire"].as_u64().unwrap(),
    );
    assert!(n > 1 << 20 && wire > 0 && wire * 4 < n, "{vargr_second}");
    let link = vargr_second["link"].as_str().unwrap_or_default();
    assert!(link.contains("no emulated link"), "{vargr_second}");
    // rsync and zstd ran, or say why not.
    for tool in ["rsync", "zstd-patch-from"] {
        let r = sync
            .iter()
            .find(|r| r["tool"] == tool)
            .unwrap_or_else(|| panic!("no {tool} record"));
        assert!(
            r["bytes_on_wire"].as_u64().unwrap() > 0 || r.get("note").is_some(),
            "{r}"
        );
    }

    let fps = of("fingerprints");
    let at = |level: &str, s: u64| {
        fps.iter()
            .find(|r| {
                r["fingerprint"] == level && r["avg_segment_bytes"].as_f64() == Some(s as f64)
            })
            .unwrap_or_else(|| panic!("no {level} record at {s} B"))
    };
    for s in [32, 64, 128, 256] {
        let two = at("two-level", s);
        let red = two["redundancy"].as_f64().unwrap();
        assert!((red - 0.75).abs() < 0.05, "{two}");
        let (r2, r1) = (
            two["ratio"].as_f64().unwrap(),
            at("one-level", s)["ratio"].as_f64().unwrap(),
        );
        assert!(r2 > r1 && r1 > 1.0, "{s} B: two-level {r2}, one-level {r1}");
        let model = two["model_ratio"].as_f64().unwrap();
        assert!(
            (r2 - model).abs() / model < 0.05,
            "{s} B: {r2} against the model's {model}"
        );
    }
    let (r2, r1) = (
        at("two-level", 32)["ratio"].as_f64().unwrap(),
        at("one-level", 32)["ratio"].as_f64().unwrap(),
    );
    assert!(r2 > 2.0 && r1 < 1.5, "32 B: {r2} against {r1}");
}
