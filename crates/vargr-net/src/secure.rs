//! Blocking connections after the handshake, with every frame protected.
//!
//! Start-up exchanges (a rendezvous, a child's sub-tree, a monitor's requests) and the
//! byte streams of `vargr sync` and `vargr proxy` run on blocking sockets; links in a
//! reactor are [`crate::Link`]s. Both seal and open frames with the same session
//! ([`crate::seal`]), and a [`SecureConn`] hands its sequence numbers on when it becomes
//! a link, so a connection stays protected from its handshake to its end.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use vargr_wire::{encode_header, Frame, FrameKind, HEADER_LEN};

use crate::auth::read_exact_by;
use crate::seal::{OpenError, Opener, Protection, Sealer, Session, TAG_LEN};
use crate::{Conn, Link, NetError};

/// An authenticated blocking connection that reads and writes whole protected frames.
pub struct SecureConn {
    conn: Conn,
    peer: String,
    sealer: Sealer,
    opener: Opener,
    /// Read timeout for [`SecureConn::read_frame`] (none: wait for ever).
    timeout: Option<Duration>,
}

impl std::fmt::Debug for SecureConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecureConn({}, {})", self.peer, self.protection().name())
    }
}

impl SecureConn {
    pub(crate) fn new(conn: Conn, session: &Session, peer: String) -> SecureConn {
        let (sealer, opener) = session.split();
        // The handshake left the socket with whatever time it had left.
        let _ = conn.set_timeout(Some(Duration::from_secs(10)));
        SecureConn {
            conn,
            peer,
            sealer,
            opener,
            timeout: Some(Duration::from_secs(10)),
        }
    }

    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Renames the peer in later errors.
    pub fn set_peer(&mut self, peer: String) {
        self.peer = peer;
    }

    pub fn protection(&self) -> Protection {
        self.sealer.protection()
    }

    /// The socket underneath, for options and polling (never for bytes).
    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    /// How long [`SecureConn::read_frame`] waits for a whole frame, and a write for
    /// room in the socket (`None`: for ever).
    pub fn set_timeout(&mut self, t: Option<Duration>) {
        self.timeout = t;
        let _ = self.conn.set_timeout(t);
    }

    pub fn write_frame(&mut self, f: &Frame) -> Result<(), NetError> {
        let mut out = BytesMut::with_capacity(f.wire_len() + TAG_LEN);
        self.sealer.seal_frame(f, &mut out);
        self.conn
            .write_all(&out)
            .map_err(|e| NetError::io("writing to", &self.peer, e))
    }

    /// Reads one whole frame within the timeout and checks it.
    pub fn read_frame(&mut self, max: usize) -> Result<Frame, NetError> {
        let started = Instant::now();
        // Far enough to mean "no deadline" without overflowing an Instant.
        let deadline = started
            + self
                .timeout
                .unwrap_or(Duration::from_secs(100 * 365 * 86400));
        let what = "a frame";
        read_frame_by(
            &mut self.conn,
            &mut self.opener,
            max,
            &self.peer,
            what,
            started,
            deadline,
        )
    }

    /// Hands the connection, and the session's place in it, to a reactor link.
    pub fn into_link(self, peer: impl Into<String>, max_frame: usize) -> io::Result<Link> {
        let mio = self.conn.into_mio()?;
        Ok(Link::new(mio, peer, max_frame).with_seal(self.sealer, self.opener))
    }

    /// Splits into a reading and a writing byte stream of sealed records, for protocols
    /// that are byte streams (`vargr sync`, `vargr proxy`). Blocks without a timeout.
    pub fn into_streams(self) -> io::Result<(RecordReader, RecordWriter)> {
        let (conn, sealer, opener) = self.into_records();
        conn.set_timeout(None)?;
        let reader = conn.try_clone()?;
        Ok((
            RecordReader {
                conn: reader,
                opener,
                plain: Vec::new(),
                at: 0,
                scratch: vec![0; RECORD + HEADER_LEN + TAG_LEN],
            },
            RecordWriter {
                conn,
                sealer,
                out: Vec::new(),
            },
        ))
    }
}

pub(crate) fn open_error(peer: &str, e: OpenError) -> NetError {
    match e {
        OpenError::Wire(source) => NetError::Wire {
            peer: peer.into(),
            source,
        },
        forged @ OpenError::Forged { .. } => NetError::Auth {
            peer: peer.into(),
            reason: forged.to_string(),
        },
    }
}

/// Reads exactly one frame and its trailer, all of it by `deadline` (`started` dates
/// the timeout message), and checks it: the one reader of blocking connections, the
/// handshake's plain frames included.
pub(crate) fn read_frame_by(
    conn: &mut Conn,
    opener: &mut Opener,
    max: usize,
    peer: &str,
    what: &'static str,
    started: Instant,
    deadline: Instant,
) -> Result<Frame, NetError> {
    let trailer = if opener.protection() == Protection::None {
        0
    } else {
        TAG_LEN
    };
    let mut buf = BytesMut::zeroed(HEADER_LEN);
    read_exact_by(conn, &mut buf, peer, what, started, deadline)?;
    // Validated before a payload of its claimed size is read.
    let total = vargr_wire::frame_len(&buf, max)
        .map_err(|e| NetError::Wire {
            peer: peer.into(),
            source: e,
        })?
        .expect("a whole header was read");
    buf.resize(total + trailer, 0);
    read_exact_by(conn, &mut buf[HEADER_LEN..], peer, what, started, deadline)?;
    match opener.open(&mut buf, max) {
        Ok(Some(f)) => Ok(f),
        Ok(None) => unreachable!("a whole frame and its trailer were read"),
        Err(e) => Err(open_error(peer, e)),
    }
}

/// Bytes of one record of a byte stream: large enough that the trailer costs nothing.
const RECORD: usize = 64 << 10;

/// Seals a byte stream into records (Data frames of at most 64 KiB), sans-IO: for
/// protocols that poll their own sockets (`vargr proxy`).
pub struct RecordSealer {
    sealer: Sealer,
}

impl RecordSealer {
    /// Appends `data`, sealed, to `out`.
    pub fn seal(&mut self, data: &[u8], out: &mut Vec<u8>) {
        for body in data.chunks(RECORD) {
            let mut head = BytesMut::with_capacity(HEADER_LEN);
            encode_header(FrameKind::Data, 0, 0, 0, body.len(), &mut head);
            self.sealer
                .seal(head.freeze(), &mut |b| out.extend_from_slice(&b));
            self.sealer.seal(Bytes::copy_from_slice(body), &mut |b| {
                out.extend_from_slice(&b)
            });
        }
    }
}

/// Opens the records of a byte stream, sans-IO: feed it what the socket gave, take the
/// bytes of every record that is complete and checked.
pub struct RecordOpener {
    opener: Opener,
    peer: String,
    raw: BytesMut,
}

impl RecordOpener {
    pub fn feed(&mut self, raw: &[u8]) {
        self.raw.extend_from_slice(raw);
    }

    /// Bytes received but not yet part of a complete record.
    pub fn pending(&self) -> usize {
        self.raw.len()
    }

    /// Appends the payload of every complete record to `out`.
    pub fn take(&mut self, out: &mut Vec<u8>) -> Result<(), NetError> {
        while let Some(f) = self
            .opener
            .open(&mut self.raw, RECORD)
            .map_err(|e| open_error(&self.peer, e))?
        {
            if f.kind != FrameKind::Data {
                return Err(NetError::Auth {
                    peer: self.peer.clone(),
                    reason: format!("a {} frame inside a byte stream", f.kind.name()),
                });
            }
            out.extend_from_slice(&f.payload);
        }
        Ok(())
    }
}

impl SecureConn {
    /// The socket and the sans-IO halves of a record stream over it.
    pub fn into_records(self) -> (Conn, RecordSealer, RecordOpener) {
        (
            self.conn,
            RecordSealer {
                sealer: self.sealer,
            },
            RecordOpener {
                opener: self.opener,
                peer: self.peer,
                raw: BytesMut::new(),
            },
        )
    }
}

/// The writing half of a record stream: each `write` becomes one sealed record, sent at
/// once, so that it behaves as the socket it replaces; wrap it in a `BufWriter` to
/// gather small writes.
pub struct RecordWriter {
    conn: Conn,
    sealer: RecordSealer,
    out: Vec<u8>,
}

impl Write for RecordWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let body = &buf[..buf.len().min(RECORD)];
        if body.is_empty() {
            return Ok(0);
        }
        self.out.clear();
        self.sealer.seal(body, &mut self.out);
        self.conn.write_all(&self.out)?;
        Ok(body.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.conn.flush()
    }
}

/// The reading half of a record stream. A forged or damaged record is an
/// [`io::ErrorKind::InvalidData`] error naming the peer.
pub struct RecordReader {
    conn: Conn,
    opener: RecordOpener,
    plain: Vec<u8>,
    at: usize,
    scratch: Vec<u8>,
}

impl Read for RecordReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.plain.len() {
            self.plain.clear();
            self.at = 0;
            let n = loop {
                match self.conn.read(&mut self.scratch) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => break r?,
                }
            };
            if n == 0 {
                if self.opener.pending() == 0 {
                    return Ok(0);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{}: the stream ended inside a record", self.opener.peer),
                ));
            }
            self.opener.feed(&self.scratch[..n]);
            self.opener
                .take(&mut self.plain)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        }
        let n = buf.len().min(self.plain.len() - self.at);
        buf[..n].copy_from_slice(&self.plain[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}
