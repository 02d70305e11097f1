//! `vargr bench ffi`: what reaching vargr from C and from Python costs, against the
//! targets the bindings were built to (`TARGET_NS`, `PYTHON_TARGET_US`; results in
//! docs/benchmarks.md).
//!
//! C: builds libvargr (release by default, as users would link it), compiles
//! `crates/vargr-capi/bench/boundary.c` with the system compiler, and runs it as a
//! one-rank job so that it times both a packet accessor and `vargr_comm_rank` against
//! the same work compiled into the C program.
//!
//! Python (`--python PY`, an interpreter with the vargr package installed, built with the
//! release profile): `python/bench/compare_allreduce.py` alternates rounds of the Rust
//! allreduce (`vargr bench coll`'s rank) and the Python one under the same launcher.
//! Run from the repository's root.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use crate::Programs;

const BOUNDARY_C: &str = "crates/vargr-capi/bench/boundary.c";
const COMPARE_PY: &str = "python/bench/compare_allreduce.py";
/// The bound on what Python adds to an 8-byte allreduce.
const PYTHON_TARGET_US: f64 = 5.0;
const HEADER_DIR: &str = "crates/vargr-capi/include";
/// The bound on one call across the boundary.
const TARGET_NS: f64 = 100.0;

#[derive(Args, Clone, Debug)]
pub struct FfiBenchArgs {
    /// Write the records as JSON here (default bench/results/ffi.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Calls per timed loop (each figure is the best of 5 loops).
    #[arg(long, default_value_t = 20_000_000)]
    iters: u64,
    /// Link the debug library (quick) instead of the release one (fat LTO: minutes).
    #[arg(long)]
    debug: bool,
    /// Also compare an 8-byte allreduce from Python with Rust's, with this interpreter
    /// (it must import a release build of the vargr package).
    #[arg(long)]
    python: Option<PathBuf>,
    /// Ranks and alternating rounds of the Python comparison.
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

/// What compare_allreduce.py prints (the parts used here).
#[derive(Deserialize)]
struct CompareOut {
    rust: MedianOut,
    python: std::collections::BTreeMap<String, MedianOut>,
    overhead_us: std::collections::BTreeMap<String, f64>,
}

#[derive(Deserialize)]
struct MedianOut {
    median_us: f64,
}

#[derive(Serialize, Debug)]
struct PythonRecord {
    benchmark: &'static str,
    /// The Python form (`allreduce` of a float, `Allreduce` of buffers, …).
    form: String,
    ranks: usize,
    rounds: usize,
    rust_median_us: f64,
    python_median_us: f64,
    overhead_us: f64,
}

#[derive(Serialize)]
struct Results {
    c_boundary: Vec<FfiRecord>,
    python_allreduce: Vec<PythonRecord>,
}

/// What boundary.c prints.
#[derive(Deserialize)]
struct BoundaryOut {
    ns_per_call: f64,
    local_ns_per_call: f64,
    comm_rank_ns_per_call: Option<f64>,
}

#[derive(Serialize, Debug)]
struct FfiRecord {
    benchmark: &'static str,
    call: &'static str,
    profile: &'static str,
    ns_per_call: f64,
    /// The same work as a plain (not inlined) function of the C program.
    local_ns_per_call: Option<f64>,
    overhead_ns: Option<f64>,
    iters: u64,
}

fn run_checked(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("{what}: could not start {:?}", cmd.get_program()))?;
    crate::tree::check_output(&out, what)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn run(a: FfiBenchArgs, programs: &Programs) -> Result<()> {
    if !Path::new(BOUNDARY_C).is_file() {
        bail!("{BOUNDARY_C} not found: run vargr bench ffi from the repository's root");
    }
    let profile = if a.debug { "debug" } else { "release" };
    println!("building libvargr ({profile}) ...");
    let mut cargo = Command::new("cargo");
    cargo.args(["build", "--quiet", "-p", "vargr-capi"]);
    if !a.debug {
        cargo.arg("--release");
    }
    run_checked(&mut cargo, "cargo build -p vargr-capi")?;
    let lib_dir = std::fs::canonicalize(Path::new("target").join(profile))
        .context("finding target/ after the build")?;
    let exe = lib_dir.join("vargr-ffi-boundary");
    run_checked(
        Command::new("cc")
            .args(["-O2", "-I", HEADER_DIR, BOUNDARY_C, "-L"])
            .arg(&lib_dir)
            .arg("-lvargr")
            .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
            .arg("-o")
            .arg(&exe),
        "compiling boundary.c",
    )?;
    println!("timing {} calls, best of 5 loops ...", a.iters);
    let me = programs.vargr()?;
    let text = run_checked(
        Command::new(me)
            .args(["run", "-n", "1", "--"])
            .arg(&exe)
            .arg(a.iters.to_string()),
        "the boundary program",
    )?;
    let line = text
        .lines()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("the boundary program printed no result: {text}"))?;
    let out: BoundaryOut = serde_json::from_str(line).with_context(|| format!("parsing {line}"))?;
    let mut records = vec![FfiRecord {
        benchmark: "c-boundary",
        call: "vargr_packet_tag",
        profile,
        ns_per_call: out.ns_per_call,
        local_ns_per_call: Some(out.local_ns_per_call),
        overhead_ns: Some(out.ns_per_call - out.local_ns_per_call),
        iters: a.iters,
    }];
    if let Some(ns) = out.comm_rank_ns_per_call {
        records.push(FfiRecord {
            benchmark: "c-boundary",
            call: "vargr_comm_rank",
            profile,
            ns_per_call: ns,
            local_ns_per_call: None,
            overhead_ns: None,
            iters: a.iters,
        });
    }
    println!();
    println!(
        "{:<18} {:>10} {:>14} {:>12}",
        "call", "ns/call", "local ns/call", "overhead ns"
    );
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for r in &records {
        println!(
            "{:<18} {:>10.1} {:>14} {:>12}",
            r.call,
            r.ns_per_call,
            opt(r.local_ns_per_call),
            opt(r.overhead_ns)
        );
    }
    let worst = records.iter().map(|r| r.ns_per_call).fold(0.0, f64::max);
    println!(
        "slowest call {worst:.1} ns ({profile} library); target at most {TARGET_NS:.0} ns: {}",
        if worst <= TARGET_NS { "met" } else { "NOT met" }
    );
    let python = match &a.python {
        Some(py) => python_allreduce(py, me, &a)?,
        None => Vec::new(),
    };
    let results = Results {
        c_boundary: records,
        python_allreduce: python,
    };
    crate::tree::write_records(
        a.json.as_deref(),
        "ffi.json",
        std::slice::from_ref(&results),
    )
}

fn python_allreduce(py: &Path, me: &Path, a: &FfiBenchArgs) -> Result<Vec<PythonRecord>> {
    println!();
    println!(
        "8-byte allreduce, {} ranks: Rust and Python in {} alternating rounds ...",
        a.ranks, a.rounds
    );
    let text = run_checked(
        Command::new(py)
            .arg(COMPARE_PY)
            .arg("--vargr")
            .arg(me)
            .args(["--ranks", &a.ranks.to_string()])
            .args(["--rounds", &a.rounds.to_string()]),
        COMPARE_PY,
    )?;
    let json_start = text
        .find('{')
        .with_context(|| format!("{COMPARE_PY} printed no result: {text}"))?;
    let out: CompareOut = serde_json::from_str(&text[json_start..])
        .with_context(|| format!("parsing {COMPARE_PY}'s output"))?;
    let records: Vec<PythonRecord> = out
        .python
        .iter()
        .map(|(form, m)| PythonRecord {
            benchmark: "python-allreduce-8B",
            form: form.clone(),
            ranks: a.ranks,
            rounds: a.rounds,
            rust_median_us: out.rust.median_us,
            python_median_us: m.median_us,
            overhead_us: out.overhead_us.get(form).copied().unwrap_or(f64::NAN),
        })
        .collect();
    println!(
        "{:<24} {:>10} {:>12} {:>12}",
        "form", "Rust µs", "Python µs", "overhead µs"
    );
    for r in &records {
        println!(
            "{:<24} {:>10.2} {:>12.2} {:>12.2}",
            r.form, r.rust_median_us, r.python_median_us, r.overhead_us
        );
    }
    let worst = records
        .iter()
        .map(|r| r.overhead_us)
        .fold(f64::MIN, f64::max);
    println!(
        "largest overhead {worst:.2} µs; target at most {PYTHON_TARGET_US:.0} µs: {}",
        if worst <= PYTHON_TARGET_US {
            "met"
        } else {
            "NOT met"
        }
    );
    Ok(records)
}
