//! Blocking without holding the interpreter: waits run with the GIL released, in slices,
//! so that Ctrl-C (and any other Python signal handler) runs between two slices.
//!
//! Python handles a signal only when the main thread returns to the interpreter; a
//! thread blocked in Rust for minutes would make Ctrl-C do nothing. Every blocking call
//! of the package that has a timed form waits through [`wait`] instead. Collectives
//! have no timed form: they run through [`interruptible`], and the rank transport asks
//! [`check_signals`] between slices of its waits (`vargr_net::mesh::set_interrupt_check`).

use std::cell::Cell;
use std::sync::Mutex;
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

thread_local! {
    /// Whether this thread is inside [`interruptible`] (only such waits run Python code).
    static INTERRUPTIBLE: Cell<bool> = const { Cell::new(false) };
}

/// What a signal handler raised while a collective waited, for [`take_interrupt`].
static PENDING: Mutex<Option<PyErr>> = Mutex::new(None);

/// Runs `f` (called with the GIL released) so that Ctrl-C can end the transport's waits
/// inside it; the collective then fails with `CollError::Interrupted`, which
/// [`take_interrupt`] turns back into the handler's exception.
pub fn interruptible<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            INTERRUPTIBLE.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(INTERRUPTIBLE.with(|c| c.replace(true)));
    f()
}

/// The transport's interrupt check: runs Python's signal handlers on a thread inside
/// [`interruptible`]; true (stop waiting) if one raised, keeping its exception.
pub fn check_signals() -> bool {
    if !INTERRUPTIBLE.with(Cell::get) {
        return false;
    }
    Python::attach(|py| match py.check_signals() {
        Ok(()) => false,
        Err(e) => {
            *PENDING.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            true
        }
    })
}

/// The exception a signal handler raised during an interrupted collective, or a
/// `KeyboardInterrupt` if none was kept.
pub fn take_interrupt() -> PyErr {
    PENDING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .unwrap_or_else(|| pyo3::exceptions::PyKeyboardInterrupt::new_err("interrupted"))
}
