use std::io;

use thiserror::Error;
use vargr_wire::WireError;

/// Failures of transports, authentication and process launch.
#[derive(Debug, Error)]
pub enum NetError {
    #[error("bad address {addr:?}: {reason} (expected unix:/path or tcp:host:port)")]
    BadAddr { addr: String, reason: String },
    #[error("{what} {addr}: {source}")]
    Io {
        what: &'static str,
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("malformed frame from {peer}: {source}")]
    Wire {
        peer: String,
        #[source]
        source: WireError,
    },
    #[error("authentication with {peer} failed: {reason}")]
    Auth { peer: String, reason: String },
    #[error("refused by {peer}: {reason}")]
    Refused { peer: String, reason: String },
    #[error("timed out after {after_ms} ms waiting for {what} from {peer}")]
    Timeout {
        what: &'static str,
        peer: String,
        after_ms: u64,
    },
    #[error("could not start {program:?} for node {node}: {source}")]
    Spawn {
        program: String,
        node: u32,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Stage(#[from] vargr_stage::StageError),
    #[error("job start-up: {reason}")]
    Job { reason: String },
    /// The check installed with [`crate::mesh::set_interrupt_check`] asked a blocking
    /// receive to stop (a host language's Ctrl-C).
    #[error("interrupted while waiting for rank {src}")]
    Interrupted { src: u32 },
    #[error("bad launcher template {template:?}: {reason}")]
    BadTemplate { template: String, reason: String },
    /// A host name a remote shell would take for an option (`-oProxyCommand=...`).
    #[error("refusing host {host:?}: {reason}")]
    BadHost { host: String, reason: String },
    /// A runtime directory or file that is not this user's alone.
    #[error(transparent)]
    RuntimeDir(#[from] crate::runtime_dir::RuntimeDirError),
}

impl NetError {
    pub(crate) fn io(what: &'static str, addr: impl ToString, source: io::Error) -> Self {
        NetError::Io {
            what,
            addr: addr.to_string(),
            source,
        }
    }
}
