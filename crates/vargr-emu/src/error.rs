//! The crate's typed errors: each says which text, file line or address was at fault.

use std::io;
use std::net::SocketAddr;

use thiserror::Error;

/// Text that is not a valid duration, bandwidth or WAN profile.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    /// A duration such as `36ms`.
    #[error(
        "invalid duration {text:?}: {reason} \
         (expected a number and a unit: ns, us, ms, s or min, e.g. 36ms, 500us, 1.5s)"
    )]
    Duration {
        /// The text as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A bandwidth such as `100mbit`.
    #[error(
        "invalid bandwidth {text:?}: {reason} (expected a number and a unit: bit, kbit, \
         mbit, gbit (per second) or B/s, kB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s, \
         e.g. 100mbit or 10MB/s; or 'unlimited')"
    )]
    Bandwidth {
        /// The text as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A size such as `4g` or `512KiB`.
    #[error(
        "invalid size {text:?}: {reason} (expected a number of bytes, optionally with k, m, \
         g or t (powers of 1024, optionally followed by B or iB), e.g. 4g, 512m, 1048576)"
    )]
    Size {
        /// The text as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A profile such as `latency=18ms,bandwidth=3mbit`.
    #[error(
        "invalid WAN profile {text:?}: {reason} (expected comma-separated key=value \
         pairs with keys latency, rtt, bandwidth and jitter, e.g. latency=18ms,bandwidth=3mbit)"
    )]
    Profile {
        /// The text as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Everything that can go wrong in this crate.
#[derive(Debug, Error)]
pub enum EmuError {
    /// A value given on the command line or in a configuration.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A line of a trace file.
    #[error("{origin}:{line}: {message}")]
    Trace {
        /// The file name (or other origin) of the trace text.
        origin: String,
        /// One-based line number; 0 when the problem is the file as a whole.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A trace file that cannot be read.
    #[error("cannot read trace file {path}: {source}")]
    TraceIo {
        /// The path as given.
        path: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The relay cannot listen on its address.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// The underlying error.
        source: io::Error,
    },
    /// The shared gateways table cannot be made or opened.
    #[error("the emulated WAN's shared gateways table: {0}")]
    Gateways(#[source] vargr_shm::ShmError),
    /// A probe of `vargr emu record` failed.
    #[error("recording the path to {target}: {what}: {source}")]
    Record {
        /// The echo server (or relay) probed.
        target: SocketAddr,
        /// Which probe.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The relay's event loop failed (not a single connection: those are reported as
    /// [`RelayEvent`](crate::RelayEvent)s and never end the relay).
    #[error("relay event loop: {0}")]
    Io(#[from] io::Error),
}
