//! Trace analysis from Python: what `vargr trace report --json` and `vargr trace diff
//! --json` print, as the same JSON documents (the package parses them into dicts), so a
//! notebook or a test reads a run's collectives without the command line.

use std::path::PathBuf;

use pyo3::prelude::*;
use vargr_trace::{analysis, diff, report, TraceFile};

use pyo3::exceptions::{PyOSError, PyValueError};
use vargr_trace::FileError;

/// A run's trace files; a directory without them is an `OSError`, a file that is not a
/// trace (or a damaged one) a `ValueError`, each naming the path.
fn read(dir: &std::path::Path) -> PyResult<Vec<TraceFile>> {
    TraceFile::read_run(dir).map_err(|e| match e {
        FileError::Io { .. } | FileError::NoRun { .. } => PyOSError::new_err(e.to_string()),
        FileError::Format { .. } | FileError::Damaged { .. } => {
            PyValueError::new_err(e.to_string())
        }
    })
}

/// The analysis of the run traced into `dir`, as `vargr trace report --json` prints it.
#[pyfunction]
pub fn trace_report(py: Python<'_>, dir: PathBuf) -> PyResult<String> {
    py.detach(|| {
        let a = analysis::analyze(&read(&dir)?);
        Ok(report::json(&a).to_string())
    })
}

/// Runs `a` and `b` compared collector by collector, as `vargr trace diff --json`
/// prints them.
#[pyfunction]
pub fn trace_diff(py: Python<'_>, a: PathBuf, b: PathBuf) -> PyResult<String> {
    py.detach(|| {
        let (ta, tb) = (
            analysis::timeline(&read(&a)?),
            analysis::timeline(&read(&b)?),
        );
        Ok(diff::diff(&ta, &tb)
            .json(&a.display().to_string(), &b.display().to_string())
            .to_string())
    })
}
