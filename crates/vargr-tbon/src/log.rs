//! Opt-in diagnostics on stderr (`VARGR_LOG=1`): links lost, faults, shutdown steps.
//! Off by default so tools embedding vargr keep their stderr.

use std::sync::OnceLock;

pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("VARGR_LOG").is_some_and(|v| v != "0"))
}

macro_rules! vlog {
    ($node:expr, $($arg:tt)*) => {
        if $crate::log::enabled() {
            eprintln!("vargr[node {} pid {}]: {}", $node, std::process::id(), format_args!($($arg)*));
        }
    };
}
pub(crate) use vlog;
