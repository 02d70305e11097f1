use std::path::Path;

/// What went wrong with shared memory, naming the file or the peer.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    #[error("{what} {who}: {source}")]
    Io {
        what: &'static str,
        who: String,
        #[source]
        source: std::io::Error,
    },
    /// A segment, bell or pointer file that is not what it should be.
    #[error("{who} refused: {why}")]
    Refused { who: String, why: String },
    #[error("a segment of {0} is impossible")]
    Layout(String),
    /// A peer broke the protocol in a ring it shares with us (slot = its index on the host).
    #[error("the ring shared with process {slot} of this host is corrupt: {why}")]
    Corrupt { slot: usize, why: String },
}

impl ShmError {
    pub(crate) fn io(
        what: &'static str,
        who: impl AsRef<Path>,
        e: impl Into<std::io::Error>,
    ) -> ShmError {
        ShmError::Io {
            what,
            who: who.as_ref().display().to_string(),
            source: e.into(),
        }
    }
}
