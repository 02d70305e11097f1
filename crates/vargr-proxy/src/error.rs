//! Why a proxy, or one of its connections, could not go on. Each error names what was
//! being done and with whom; its sources say why.

use std::io;
use std::path::PathBuf;

use vargr_dedup::CacheError;
use vargr_net::NetError;

use crate::pump::{PumpError, StreamSegmenterError};

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Net(#[from] NetError),
    #[error(transparent)]
    Segmenter(#[from] StreamSegmenterError),
    #[error(transparent)]
    Pump(#[from] PumpError),
    /// A socket operation, and what it was for.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "authenticating with the far proxy {peer} (both need the same --secret-file or \
         $VARGR_PROXY_SECRET)"
    )]
    Auth {
        peer: String,
        #[source]
        source: NetError,
    },
    /// A set-up frame that did not come as it should.
    #[error("{what}")]
    Setup {
        what: String,
        #[source]
        source: SetupFrameError,
    },
    /// The other proxy's set-up says something this one cannot go on with.
    #[error("{0}")]
    Refused(String),
    #[error("opening the segment cache {key} under {}", root.display())]
    Cache {
        key: String,
        root: PathBuf,
        #[source]
        source: CacheError,
    },
    #[error("a far proxy (--serve) needs --forward HOST:PORT: the server to connect to")]
    NoForward,
    #[error("a listener thread panicked")]
    ListenerPanicked,
}

impl ProxyError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> ProxyError {
        let what = what.into();
        move |source| ProxyError::Io { what, source }
    }
}

/// Reading a set-up frame (hello, welcome, abort).
#[derive(Debug, thiserror::Error)]
pub enum SetupFrameError {
    #[error("the connection was closed")]
    Closed,
    #[error("timed out")]
    TimedOut,
    #[error(transparent)]
    Io(io::Error),
    #[error("a setup frame of {len} bytes, more than {max}: not a vargr proxy?")]
    TooLarge { len: usize, max: usize },
    #[error(transparent)]
    Records(#[from] NetError),
}

impl From<io::Error> for SetupFrameError {
    fn from(e: io::Error) -> SetupFrameError {
        match e.kind() {
            io::ErrorKind::UnexpectedEof => SetupFrameError::Closed,
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => SetupFrameError::TimedOut,
            _ => SetupFrameError::Io(e),
        }
    }
}

/// `e` and its sources, `: `-separated: how errors read in a report and in an ABORT.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(c) = next {
        s.push_str(": ");
        s.push_str(&c.to_string());
        next = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_reads_what_then_why() {
        let e = ProxyError::Setup {
            what: "reading the hello of 10.0.0.1:5000".into(),
            source: io::Error::from(io::ErrorKind::UnexpectedEof).into(),
        };
        assert_eq!(
            error_chain(&e),
            "reading the hello of 10.0.0.1:5000: the connection was closed"
        );
        let io = ProxyError::io("connecting to the server s:80")(io::Error::other("refused"));
        assert_eq!(error_chain(&io), "connecting to the server s:80: refused");
    }
}
