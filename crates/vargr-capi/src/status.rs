//! Status codes, the per-thread last error message, and the guard every entry point runs
//! its body in.
//!
//! C has no exceptions and must never see a Rust panic unwind into it (that is undefined
//! behaviour), so every exported function is `guard("name", || body)`: the body returns
//! `Result<(), Error>`, the guard turns it into a [`vargr_status`] code, stores the
//! message for [`vargr_last_error`], and catches panics as [`vargr_status::VARGR_ERR_PANIC`].
//! A successful call leaves the last message alone (like `errno`), which keeps the
//! cheap calls cheap.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use vargr_coll::CollError;
use vargr_tbon::TbonError;

/// What went wrong, as returned by every function of the C API (as an `int`).
/// `vargr_last_error()` gives the message.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vargr_status {
    /// Success.
    VARGR_OK = 0,
    /// A null pointer, bad UTF-8, an unknown enum value, a bad option or rank.
    VARGR_ERR_INVALID_ARGUMENT = 1,
    /// A format string that does not parse, or values that do not match it.
    VARGR_ERR_FORMAT = 2,
    /// A topology spec or file that does not parse or does not exist.
    VARGR_ERR_TOPOLOGY = 3,
    /// Starting the tree or joining a job failed.
    VARGR_ERR_STARTUP = 4,
    /// A connection, node or peer was lost, or another I/O failure.
    VARGR_ERR_IO = 5,
    /// A receive with a timeout found nothing in time.
    VARGR_ERR_TIMEOUT = 6,
    /// The network was shut down (normal end for a back-end's receive loop).
    VARGR_ERR_CLOSED = 7,
    /// A filter failed, or a filter plugin could not be loaded.
    VARGR_ERR_FILTER = 8,
    /// The ranks broke a collective's precondition (conditional allreduce inputs, or
    /// ranks disagreeing about counts).
    VARGR_ERR_PRECONDITION = 9,
    /// The handle is in use by another thread, or flow control refused a send.
    VARGR_ERR_BUSY = 10,
    /// Memory for a result could not be allocated.
    VARGR_ERR_NO_MEMORY = 11,
    /// A bug inside vargr (a Rust panic, caught at the boundary).
    VARGR_ERR_PANIC = 12,
}

/// An error on its way to the C caller: a status and the message behind it.
#[derive(Debug)]
pub struct Error {
    pub status: vargr_status,
    pub message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(status: vargr_status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(vargr_status::VARGR_ERR_INVALID_ARGUMENT, message)
    }

    pub fn format(message: impl Into<String>) -> Error {
        Error::new(vargr_status::VARGR_ERR_FORMAT, message)
    }

    /// Prefixes the message with the function or argument it came from.
    pub fn context(mut self, what: &str) -> Error {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl From<TbonError> for Error {
    fn from(e: TbonError) -> Error {
        use vargr_status::*;
        let status = match &e {
            TbonError::Startup(_) => VARGR_ERR_STARTUP,
            TbonError::Net(_)
            | TbonError::NodeLost { .. }
            | TbonError::ParentLost(_)
            | TbonError::NotAdopted { .. }
            | TbonError::WavesLost { .. }
            | TbonError::WaveEmpty { .. }
            | TbonError::Clock(_)
            | TbonError::Trace(_) => VARGR_ERR_IO,
            TbonError::Filter { .. } => VARGR_ERR_FILTER,
            TbonError::Wire(_) => VARGR_ERR_FORMAT,
            TbonError::NoStream(_)
            | TbonError::BadCommunicator(_)
            | TbonError::BadStream(_)
            | TbonError::Config(_) => VARGR_ERR_INVALID_ARGUMENT,
            TbonError::Backpressure(_) => VARGR_ERR_BUSY,
            TbonError::Shutdown => VARGR_ERR_CLOSED,
            TbonError::Timeout(_) | TbonError::ObserveTimeout { .. } => VARGR_ERR_TIMEOUT,
            TbonError::ObserveStale { .. } => VARGR_ERR_INVALID_ARGUMENT,
        };
        Error::new(status, e.to_string())
    }
}

impl From<CollError> for Error {
    fn from(e: CollError) -> Error {
        use vargr_status::*;
        let status = match &e {
            CollError::Timeout { .. } => VARGR_ERR_TIMEOUT,
            CollError::PeerLost { .. } => VARGR_ERR_IO,
            CollError::Job { .. } => VARGR_ERR_STARTUP,
            CollError::CondPrecondition { .. } | CollError::MessageLength { .. } => {
                VARGR_ERR_PRECONDITION
            }
            _ => VARGR_ERR_INVALID_ARGUMENT,
        };
        Error::new(status, e.to_string())
    }
}

impl From<vargr_config::JoinError> for Error {
    fn from(e: vargr_config::JoinError) -> Error {
        match e {
            vargr_config::JoinError::Job(e) => e.into(),
            // The settings the launcher gave cannot be used: start-up cannot go on.
            vargr_config::JoinError::Config(e) => {
                Error::new(vargr_status::VARGR_ERR_STARTUP, e.to_string())
            }
        }
    }
}

impl From<vargr_wire::WireError> for Error {
    fn from(e: vargr_wire::WireError) -> Error {
        Error::format(e.to_string())
    }
}

impl From<vargr_topo::TopoError> for Error {
    fn from(e: vargr_topo::TopoError) -> Error {
        Error::new(vargr_status::VARGR_ERR_TOPOLOGY, e.to_string())
    }
}

impl From<vargr_filter::FilterError> for Error {
    fn from(e: vargr_filter::FilterError) -> Error {
        Error::new(vargr_status::VARGR_ERR_FILTER, e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // Interior NULs would cut the message short in C; show them instead.
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Runs an entry point's body: converts its result to a status code, records the
/// message of a failure for this thread, and stops panics at the boundary.
pub fn guard(name: &str, body: impl FnOnce() -> Result<()>) -> c_int {
    show_diagnostics();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => vargr_status::VARGR_OK as c_int,
        Ok(Err(e)) => {
            set_last_error(&format!("{name}: {}", e.message));
            e.status as c_int
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".into());
            set_last_error(&format!(
                "{name}: internal error (a bug in vargr, please report it): {what}"
            ));
            vargr_status::VARGR_ERR_PANIC as c_int
        }
    }
}

/// The message of the last failed vargr call on this thread (`""` if none failed yet).
///
/// Ownership: the string belongs to vargr and stays valid until the next failing vargr
/// call on the same thread; copy it to keep it. Never NULL.
#[no_mangle]
pub extern "C" fn vargr_last_error() -> *const c_char {
    // Reading a thread-local cannot panic short of thread teardown; catch it anyway.
    catch_unwind(|| LAST_ERROR.with(|e| e.borrow().as_ptr()))
        .unwrap_or(c"vargr: the last error is unavailable (thread is exiting)".as_ptr())
}

/// The name of a status code, e.g. `"VARGR_ERR_TIMEOUT"` (`"unknown status"` for other
/// values).
///
/// Ownership: a static string; never NULL, never freed.
#[no_mangle]
pub extern "C" fn vargr_status_name(status: c_int) -> *const c_char {
    let name: &'static CStr = match status {
        0 => c"VARGR_OK",
        1 => c"VARGR_ERR_INVALID_ARGUMENT",
        2 => c"VARGR_ERR_FORMAT",
        3 => c"VARGR_ERR_TOPOLOGY",
        4 => c"VARGR_ERR_STARTUP",
        5 => c"VARGR_ERR_IO",
        6 => c"VARGR_ERR_TIMEOUT",
        7 => c"VARGR_ERR_CLOSED",
        8 => c"VARGR_ERR_FILTER",
        9 => c"VARGR_ERR_PRECONDITION",
        10 => c"VARGR_ERR_BUSY",
        11 => c"VARGR_ERR_NO_MEMORY",
        12 => c"VARGR_ERR_PANIC",
        _ => c"unknown status",
    };
    name.as_ptr()
}

/// The vargr version this library was built from, e.g. `"0.1.0"`.
///
/// Ownership: a static string; never NULL, never freed.
#[no_mangle]
pub extern "C" fn vargr_version() -> *const c_char {
    const V: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    V.as_ptr().cast()
}

/// Shows what the libraries report on stderr (warnings by default; `VARGR_LOG` or
/// `RUST_LOG` filters), from the first call into the library on.
fn show_diagnostics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let var = |name| std::env::var(name).ok();
        vargr_log::LogSettings::from_user(var("VARGR_LOG"), var("RUST_LOG"), 0).install_or_warn();
        // Collectors on or off and their ring size; a bad configuration is reported by
        // the call that needs it (joining a job, starting a tree).
        if let Ok(config) = vargr_config::from_process() {
            config.apply_to_process();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: vargr_last_error returns a valid NUL-terminated string owned by this
        // thread's slot, read before any other vargr call.
        unsafe { CStr::from_ptr(vargr_last_error()) }
            .to_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn errors_and_panics_become_codes_and_messages() {
        let rc = guard("f", || Err(Error::invalid("x is NULL")));
        assert_eq!(rc, vargr_status::VARGR_ERR_INVALID_ARGUMENT as c_int);
        assert_eq!(last(), "f: x is NULL");
        let rc = guard("g", || panic!("boom"));
        assert_eq!(rc, vargr_status::VARGR_ERR_PANIC as c_int);
        assert!(last().starts_with("g: internal error") && last().ends_with("boom"));
        // Success leaves the message alone.
        assert_eq!(guard("h", || Ok(())), 0);
        assert!(last().ends_with("boom"));
        let rc = guard("nul", || Err(Error::format("a\0b")));
        assert_eq!(rc, vargr_status::VARGR_ERR_FORMAT as c_int);
        assert_eq!(last(), "nul: a\\0b");
    }

    #[test]
    fn status_names_cover_every_code() {
        for code in 0..=12 {
            // SAFETY: static NUL-terminated strings.
            let name = unsafe { CStr::from_ptr(vargr_status_name(code)) };
            assert!(name.to_str().unwrap().starts_with("VARGR_"), "{code}");
        }
        // SAFETY: as above.
        let v = unsafe { CStr::from_ptr(vargr_version()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
