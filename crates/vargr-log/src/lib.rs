//! How vargr's front ends show what the libraries report.
//!
//! vargr's libraries never print: they emit `tracing` events with structured fields
//! (`node`, `rank`, `peer`, …), and whoever owns the process decides what is shown. The
//! `vargr` command and the Python and C bindings all decide the same way, here, so that a
//! filter or a `-v` means the same everywhere. This crate reads no environment: the
//! front end passes what its user set (`VARGR_LOG`, else `RUST_LOG`, and `-v`/`-q`).
//!
//! What is shown by default: warnings and errors, and the load-balance monitor's
//! reports (target `vargr::monitor`), which a user asked for with `--monitor`.

use tracing_subscriber::EnvFilter;

/// The target of the monitor's reports, shown at the default verbosity.
pub const MONITOR_TARGET: &str = "vargr::monitor";

/// What the user asked to see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogSettings {
    /// `-v` counted (positive) or `-q` counted (negative).
    pub verbosity: i8,
    /// A filter such as `vargr_tbon=debug,warn` (`tracing` `EnvFilter` directives), or
    /// `1` for everything vargr reports at debug level; `0` or empty: the default.
    pub filter: Option<String>,
}

/// A filter that is not one: names the text and why.
#[derive(Debug, thiserror::Error)]
#[error("log filter {text:?}: {reason}")]
pub struct FilterError {
    pub text: String,
    pub reason: String,
}

impl LogSettings {
    /// The filter these settings make.
    pub fn filter(&self) -> Result<EnvFilter, FilterError> {
        let base = match self.verbosity {
            i8::MIN..=-1 => "error",
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        };
        let directives = match self.filter.as_deref().map(str::trim) {
            None | Some("") | Some("0") => format!("{base},{MONITOR_TARGET}=info"),
            // Every event is vargr's own: nothing else in the process uses `tracing`.
            Some("1") => "debug".to_string(),
            Some(text) => text.to_string(),
        };
        EnvFilter::builder()
            .parse(&directives)
            .map_err(|e| FilterError {
                text: directives.clone(),
                reason: e.to_string(),
            })
    }

    /// The settings a front end's user gave: `VARGR_LOG`, else `RUST_LOG` (the values,
    /// read by the front end), and the count of `-v` (positive) or `-q` (negative).
    pub fn from_user(vargr_log: Option<String>, rust_log: Option<String>, verbosity: i8) -> Self {
        LogSettings {
            verbosity,
            filter: vargr_log.or(rust_log),
        }
    }

    /// Like [`LogSettings::install`], for front ends that cannot refuse to start (the
    /// bindings): a bad filter falls back to the default one and says so as a warning.
    pub fn install_or_warn(&self) {
        if let Err(e) = self.install() {
            let default = LogSettings {
                filter: None,
                ..self.clone()
            };
            let _ = default.install();
            tracing::warn!("{e}; showing the default");
        }
    }

    /// Shows the libraries' events on stderr from now on, once per process (later calls,
    /// or a subscriber the host program installed first, win nothing and are no error).
    pub fn install(&self) -> Result<(), FilterError> {
        let filter = self.filter()?;
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_target(false)
            .without_time()
            .with_ansi(false)
            .try_init();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbosity_and_filters_become_directives_and_bad_ones_are_named() {
        let f = |verbosity, filter: Option<&str>| {
            LogSettings {
                verbosity,
                filter: filter.map(str::to_string),
            }
            .filter()
            .map(|f| f.to_string())
        };
        assert!(f(0, None).unwrap().contains("warn"));
        assert!(f(0, None).unwrap().contains("vargr::monitor=info"));
        assert!(f(-1, None).unwrap().contains("error"));
        assert!(f(2, Some("0")).unwrap().contains("debug"));
        assert_eq!(f(0, Some("1")).unwrap(), "debug");
        assert_eq!(f(0, Some("vargr_net=trace")).unwrap(), "vargr_net=trace");
        let e = f(0, Some("vargr_net=loud")).unwrap_err().to_string();
        assert!(e.contains("vargr_net=loud"), "{e}");
    }
}
