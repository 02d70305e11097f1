//! `vargr trace`: turns the trace files of `vargr run --trace DIR` (or a tree's) into
//! things people look at — a Perfetto/Chrome timeline, a one-file HTML report with its
//! tables or JSON, and the comparison of two runs. The work is in
//! `vargr_trace::{analysis, export, report, stages, tree, diff}`; this file reads, writes
//! and prints.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Subcommand, ValueEnum};
use vargr_trace::analysis::{self, Analysis};
use vargr_trace::{export, report, TraceFile};

#[derive(Subcommand)]
pub enum TraceCmd {
    /// Convert a trace directory to a timeline for ui.perfetto.dev or chrome://tracing.
    Export {
        /// Directory given to `vargr run --trace`.
        dir: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Perfetto)]
        format: Format,
        /// Output file [default: DIR/trace.json].
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Write a self-contained HTML report (culprit, time maps, arrival and departure
    /// order, latencies, time per path stage, tree nodes) and print its tables.
    Report {
        /// Directory given to `vargr run --trace` (or a tree's trace directory).
        dir: PathBuf,
        /// Output file [default: DIR/report.html; with --json, none unless given].
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Print the analyses as JSON on stdout instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Compare two trace directories (two runs, or two configurations) collector by
    /// collector: calls, mean, median and p90 time per call, total time, bytes.
    Diff {
        /// The first trace directory (the baseline).
        a: PathBuf,
        /// The second trace directory.
        b: PathBuf,
        /// Print the comparison as JSON.
        #[arg(long)]
        json: bool,
        /// Exit with status 3 when a collector of both got slower than this (percent of
        /// A's mean time per call); for scripts that guard against regressions.
        #[arg(long, value_name = "PCT")]
        fail_slower: Option<f64>,
    },
    /// Check a trace-event JSON file against the format's rules (used by tests).
    #[command(hide = true)]
    Validate { file: PathBuf },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    /// Trace-event JSON (Chrome's format, which Perfetto reads).
    #[value(alias = "chrome")]
    Perfetto,
}

pub fn run(cmd: TraceCmd) -> Result<()> {
    match cmd {
        TraceCmd::Export {
            dir,
            format: Format::Perfetto,
            output,
        } => {
            let a = load(&dir)?;
            let out = output.unwrap_or_else(|| dir.join("trace.json"));
            let file = std::fs::File::create(&out)
                .with_context(|| format!("{}: cannot create", out.display()))?;
            let mut w = BufWriter::new(file);
            let done = export::write_chrome(&a.timeline, &mut w)
                .and_then(|d| w.flush().map(|()| d))
                .with_context(|| format!("{}: cannot write", out.display()))?;
            println!(
                "wrote {}: {} on {} of {} (open it in https://ui.perfetto.dev)",
                out.display(),
                count(done.events, "event", "events"),
                count(done.tracks, "track", "tracks"),
                count(done.processes, "process", "processes")
            );
            if done.overflow_tracks > 0 {
                println!(
                    "note: {} extra tracks hold records that overlapped without nesting",
                    done.overflow_tracks
                );
            }
            println!("{}", a.summary.line());
            Ok(())
        }
        TraceCmd::Report { dir, output, json } => {
            let a = load(&dir)?;
            let out = match (output, json) {
                (Some(o), _) => Some(o),
                (None, false) => Some(dir.join("report.html")),
                (None, true) => None,
            };
            if let Some(out) = &out {
                let html = report::render(&a, &dir.display().to_string());
                std::fs::write(out, html)
                    .with_context(|| format!("{}: cannot write", out.display()))?;
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&report::json(&a))?);
                return Ok(());
            }
            if let Some(out) = &out {
                println!("wrote {}", out.display());
            }
            println!("{}", a.summary.line());
            for w in a.summary.warnings() {
                println!("note: {w}");
            }
            print!("{}", report::text(&a));
            Ok(())
        }
        TraceCmd::Diff {
            a,
            b,
            json,
            fail_slower,
        } => {
            let d = vargr_trace::diff::diff(&load_files(&a)?, &load_files(&b)?);
            if json {
                let doc = d.json(&a.display().to_string(), &b.display().to_string());
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                println!("A: {}\nB: {}", a.display(), b.display());
                print!("{}", vargr_trace::diff::table(&d));
            }
            if let Some(pct) = fail_slower {
                let slower = d.slower_than(pct);
                if !slower.is_empty() {
                    let names: Vec<&str> = slower.iter().map(|r| r.collector.as_str()).collect();
                    eprintln!(
                        "vargr: {} slower than A by more than {pct}% (mean time per call): {}",
                        count(names.len(), "collector", "collectors"),
                        names.join(", ")
                    );
                    std::io::stdout().flush()?;
                    std::process::exit(3);
                }
            }
            Ok(())
        }
        TraceCmd::Validate { file } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("{}: cannot read", file.display()))?;
            let doc: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{}: not JSON", file.display()))?;
            match export::validate(&doc) {
                Ok(v) => {
                    println!(
                        "{}: valid, {} ({} complete) on {} of {}",
                        file.display(),
                        count(v.events, "event", "events"),
                        v.complete,
                        count(v.tracks, "track", "tracks"),
                        count(v.processes, "process", "processes")
                    );
                    Ok(())
                }
                Err(errs) => bail!(
                    "{}: not a valid trace-event file:\n  {}",
                    file.display(),
                    errs.join("\n  ")
                ),
            }
        }
    }
}

/// `1 track`, `4 tracks`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Reads every trace file of `dir` and analyses them, with errors that name the path.
fn load(dir: &Path) -> Result<Analysis> {
    Ok(analysis::analyze(&read(dir)?))
}

/// Every record of `dir` on one time axis.
fn load_files(dir: &Path) -> Result<analysis::Timeline> {
    Ok(analysis::timeline(&read(dir)?))
}

/// Reads every trace file of `dir`, with errors that name the path.
fn read(dir: &Path) -> Result<Vec<TraceFile>> {
    Ok(TraceFile::read_run(dir)?)
}
