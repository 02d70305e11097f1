//! Trace analysis from C: the JSON documents `vargr trace report --json` and `vargr
//! trace diff --json` print, so that a tool written in C reads a run's collectives
//! (culprits, arrival and departure orders, latencies, stages, tree nodes) without the
//! command line.

use std::ffi::{c_char, c_int};
use std::path::Path;

use vargr_trace::{analysis, diff, report, FileError, TraceFile};

use crate::args::c_string;
use crate::ptr::{out, string};
use crate::status::{guard, vargr_status, Error, Result};

/// A run's trace files; errors name the path.
fn read(dir: &str) -> Result<Vec<TraceFile>> {
    TraceFile::read_run(Path::new(dir)).map_err(|e| {
        let status = match e {
            FileError::Io { .. } | FileError::NoRun { .. } => vargr_status::VARGR_ERR_IO,
            FileError::Format { .. } | FileError::Damaged { .. } => vargr_status::VARGR_ERR_FORMAT,
        };
        Error::new(status, e.to_string())
    })
}

/// The analysis of the run traced into `dir` (`vargr run --trace DIR`), as `vargr trace
/// report --json` prints it: `*json` receives a NUL-terminated UTF-8 JSON document.
///
/// Ownership: `*json` belongs to the caller, who releases it with `vargr_free`; it is
/// set only on success. Errors: `VARGR_ERR_IO` when `dir` holds no trace,
/// `VARGR_ERR_FORMAT` for a file that is not one (the message names the path).
///
/// # Safety
/// `dir` is a NUL-terminated string; `json` is valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn vargr_trace_report_json(
    dir: *const c_char,
    json: *mut *mut c_char,
) -> c_int {
    guard("vargr_trace_report_json", || {
        // SAFETY: per the function's contract.
        let (dir, json) = unsafe { (string(dir, "dir")?, out(json, "json")?) };
        let doc = report::json(&analysis::analyze(&read(dir)?));
        *json = c_string(&doc.to_string())?;
        Ok(())
    })
}

/// The runs traced into `a` and `b` compared collector by collector, as `vargr trace
/// diff --json` prints them: `*json` receives a NUL-terminated UTF-8 JSON document
/// with `rows`, `only_a` and `only_b`.
///
/// Ownership and errors as [`vargr_trace_report_json`].
///
/// # Safety
/// `a` and `b` are NUL-terminated strings; `json` is valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn vargr_trace_diff_json(
    a: *const c_char,
    b: *const c_char,
    json: *mut *mut c_char,
) -> c_int {
    guard("vargr_trace_diff_json", || {
        // SAFETY: per the function's contract.
        let (a, b, json) = unsafe { (string(a, "a")?, string(b, "b")?, out(json, "json")?) };
        let (ta, tb) = (analysis::timeline(&read(a)?), analysis::timeline(&read(b)?));
        *json = c_string(&diff::diff(&ta, &tb).json(a, b).to_string())?;
        Ok(())
    })
}
