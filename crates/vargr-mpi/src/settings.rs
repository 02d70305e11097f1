//! The library's settings. vargr's libraries take typed values from their front end; this
//! library is its own front end (it runs inside a program that knows nothing of vargr),
//! so it reads its documented environment variables, here and nowhere else.
//!
//! - `VARGR_MPI_TRACE=DIR`: record every wrapped call and write each rank's trace file
//!   into DIR at `MPI_Finalize` (made if missing). Unset or empty: record nothing; the
//!   wrappers only call MPI.
//!
//! `vargr mpi-run --trace DIR` sets it (with `LD_PRELOAD`); under another launcher set
//! both yourself.

use std::ffi::OsString;
use std::path::PathBuf;

/// The variable naming the trace directory.
pub const TRACE_VAR: &str = "VARGR_MPI_TRACE";

/// What the library does in this process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// Where trace files go; `None`: no records.
    pub trace_dir: Option<PathBuf>,
}

impl Settings {
    /// From the process's environment.
    pub fn from_env() -> Settings {
        Settings::from_vars(|k| std::env::var_os(k))
    }

    /// From any source of variables (the environment, or a test's map).
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Settings {
        Settings {
            trace_dir: var(TRACE_VAR).filter(|d| !d.is_empty()).map(PathBuf::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_or_missing_directory_means_no_trace() {
        assert_eq!(Settings::from_vars(|_| None).trace_dir, None);
        assert_eq!(Settings::from_vars(|_| Some("".into())).trace_dir, None);
        let s = Settings::from_vars(|k| (k == TRACE_VAR).then(|| "/tmp/t".into()));
        assert_eq!(s.trace_dir, Some(PathBuf::from("/tmp/t")));
    }
}
