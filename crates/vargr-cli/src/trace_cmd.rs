//! `vargr trace`: turns the trace files of `vargr run --trace DIR` into things people
//! look at — a Perfetto/Chrome timeline and a one-file HTML report. The work is in
//! `vargr_trace::{analysis, export, report}`; this file reads, writes and prints.

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
    /// Write a self-contained HTML report: culprit, time maps, arrival order, latencies.
    Report {
        /// Directory given to `vargr run --trace`.
        dir: PathBuf,
        /// Output file [default: DIR/report.html].
        #[arg(short, long)]
        output: Option<PathBuf>,
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
        TraceCmd::Report { dir, output } => {
            let a = load(&dir)?;
            let out = output.unwrap_or_else(|| dir.join("report.html"));
            let html = report::render(&a, &dir.display().to_string());
            std::fs::write(&out, html)
                .with_context(|| format!("{}: cannot write", out.display()))?;
            println!("wrote {}", out.display());
            println!("{}", a.summary.line());
            for w in a.summary.warnings() {
                println!("note: {w}");
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
    if !dir.exists() {
        bail!("{}: no such directory", dir.display());
    }
    if !dir.is_dir() {
        bail!(
            "{}: not a directory (give the DIR of `vargr run --trace DIR`)",
            dir.display()
        );
    }
    let files = TraceFile::read_dir(dir)?;
    if files.is_empty() {
        bail!(
            "{}: no trace files (*.vtr) here; write them with `vargr run --trace {} -- PROG`",
            dir.display(),
            dir.display()
        );
    }
    Ok(analysis::analyze(&files))
}
