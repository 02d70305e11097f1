//! Blocking without holding the interpreter: waits run with the GIL released, in slices,
//! so that Ctrl-C (and any other Python signal handler) runs between two slices.
//!
//! Python handles a signal only when the main thread returns to the interpreter; a
//! thread blocked in Rust for minutes would make Ctrl-C do nothing. Every blocking call
//! of the package that has a timed form waits through [`wait`] instead.

use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// Longest time between two checks for signals.
pub const SLICE: Duration = Duration::from_millis(50);

/// Calls `step(slice)` with the GIL released until it returns `Some`, checking for
/// signals between calls; `step` waits at most `slice`. With a `timeout` (seconds),
/// gives up with `Ok(None)` once it has passed. A signal handler that raises (Ctrl-C's
/// `KeyboardInterrupt`) ends the wait with its exception.
pub fn wait<T: Send>(
    py: Python<'_>,
    timeout: Option<f64>,
    mut step: impl FnMut(Duration) -> Option<T> + Send,
) -> PyResult<Option<T>> {
    let deadline = match timeout {
        Some(t) if t.is_nan() || t < 0.0 => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "timeout must be a non-negative number of seconds, got {t}"
            )))
        }
        Some(t) => Some(Instant::now() + Duration::from_secs_f64(t.min(1e9))),
        None => None,
    };
    loop {
        let slice = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(SLICE),
            None => SLICE,
        };
        if let Some(v) = py.detach(|| step(slice)) {
            return Ok(Some(v));
        }
        py.check_signals()?;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
    }
}
