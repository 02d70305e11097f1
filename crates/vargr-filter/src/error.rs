use std::path::PathBuf;

use vargr_wire::WireError;

/// Everything a filter, its parameters or a plugin can get wrong. Each variant names the
/// filter (or plugin file) and says what was expected.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("unknown filter {name:?} (known: {known})")]
    UnknownFilter { name: String, known: String },
    #[error("unknown sync filter {name:?} (known: {known})")]
    UnknownSyncFilter { name: String, known: String },
    #[error("{filter}: bad parameters {params:?}: {reason}")]
    BadParams {
        filter: String,
        params: String,
        reason: String,
    },
    /// The wave does not fit the filter, e.g. `sum: field 1 is %s, sum needs numbers`.
    #[error("{filter}: {reason}")]
    Format { filter: String, reason: String },
    #[error("{filter}: {error}")]
    Wire { filter: String, error: WireError },
    #[error("filter {filter} panicked: {message}")]
    Panicked { filter: String, message: String },
    /// Loading a plugin failed: missing file or symbol, wrong ABI version, bad descriptor.
    #[error("filter plugin {}: {reason}", path.display())]
    Plugin { path: PathBuf, reason: String },
    /// A plugin filter's create or apply returned an error.
    #[error("{filter}: plugin returned status {status}: {message}")]
    PluginFailed {
        filter: String,
        status: i32,
        message: String,
    },
    #[error("bad synchronization mode {input:?}: {reason}; expected all, wait-for-all, timeout:<n>[ms|s|us] or dontwait")]
    BadSyncMode { input: String, reason: String },
    /// A synchronization policy answered something that does not fit the queues.
    #[error("sync filter {filter}: {reason}")]
    BadDecision { filter: String, reason: String },
    /// A synchronization policy failed; the node waits for all from then on.
    #[error(
        "sync filter {filter} failed: {reason}; this node waits for all on the stream from now on"
    )]
    SyncFailed { filter: String, reason: String },
    /// A packet waited for the stream's wave deadline: the wave left without the sync
    /// filter's consent, as every overdue wave will from then on.
    #[error("sync filter {filter} held a packet for the stream's wave deadline of {deadline:?}: the wave left without it releasing it (and overdue waves will from now on)")]
    WaveDeadline {
        filter: String,
        deadline: std::time::Duration,
    },
}

impl FilterError {
    pub(crate) fn format(filter: &str, reason: impl Into<String>) -> FilterError {
        FilterError::Format {
            filter: filter.to_string(),
            reason: reason.into(),
        }
    }
    pub(crate) fn params(filter: &str, params: &str, reason: impl Into<String>) -> FilterError {
        FilterError::BadParams {
            filter: filter.to_string(),
            params: params.to_string(),
            reason: reason.into(),
        }
    }
    pub(crate) fn wire(filter: &str, error: WireError) -> FilterError {
        FilterError::Wire {
            filter: filter.to_string(),
            error,
        }
    }
}
