//! One authenticated connection: framed reads and a batched, bounded write queue.
//!
//! Reads go straight into the link's buffer and are cut into frames that share it.
//! Writes are queued as `Bytes` (an encoded frame is shared by every child it is sent
//! to) and flushed with one `writev` per batch. Frames on *latest*-mode streams wait in
//! a one-per-stream slot while the link is backed up, so a slow reader sees only the
//! newest (PATHS' last-observe). Low-priority frames (the monitor plane) wait in a lane
//! of their own and go only when nothing else is queued, one at a time, so an
//! application frame waits at most for the one low-priority frame already on its way.

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use vargr_wire::{decode_frame, Frame};

use crate::addr::MioConn;
use crate::seal::{Opener, Sealer};
use crate::NetError;
use vargr_stage::StageChain;

const READ_CHUNK: usize = 64 * 1024;
const MAX_IOVECS: usize = 64;

/// Counters kept per link (read by monitors and `vargr top`).
#[derive(Debug, Clone, Default)]
pub struct LinkStats {
    pub frames_in: u64,
    pub frames_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Latest-mode frames replaced by a newer one before they could be sent.
    pub skipped: u64,
}

/// What a read pass found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The socket has no more data for now.
    Drained,
    /// The frame budget was used up; more data may be waiting.
    Budget,
    /// The peer closed the connection.
    Closed,
}

pub struct Link {
    conn: MioConn,
    peer: String,
    rbuf: BytesMut,
    wq: VecDeque<Bytes>,
    wq_bytes: usize,
    latest: BTreeMap<u64, Bytes>,
    low: VecDeque<Bytes>,
    max_frame: usize,
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    pub(crate) paused: bool,
    /// Whether the poller is asked for writable events (only while writes are blocked,
    /// so that a peer draining its socket does not wake this process).
    pub(crate) write_interest: bool,
    pub stats: LinkStats,
    pub last_read: Instant,
    pub last_write: Instant,
    /// Stages every frame passes (empty: none, and no cost).
    stages: StageChain,
    staged: Vec<Bytes>,
    /// When the path was last read for the stages (`TCP_INFO`).
    path_read_at: Option<Instant>,
    /// The last reading saw the path carrying data.
    path_busy: bool,
    /// The session's halves: every frame written gets its trailer, every frame read is
    /// checked (none: a link without protection, as Unix sockets may be).
    sealer: Option<Sealer>,
    opener: Option<Opener>,
    /// A stage failed while sending: the next flush closes the link with it.
    failed: Option<vargr_stage::StageError>,
}

/// How often a link reads its path for the stages while it sends or the path is busy:
/// often enough to catch a transfer in its middle (samples taken at its end are
/// application-limited), rare enough that the system call costs nothing measurable.
const PATH_EVERY: std::time::Duration = std::time::Duration::from_millis(10);
/// The least time between two readings when the link writes.
const PATH_AFTER_WRITE: std::time::Duration = std::time::Duration::from_millis(1);

impl Link {
    pub fn new(conn: MioConn, peer: impl Into<String>, max_frame: usize) -> Link {
        let now = Instant::now();
        Link {
            conn,
            peer: peer.into(),
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            wq: VecDeque::new(),
            wq_bytes: 0,
            latest: BTreeMap::new(),
            low: VecDeque::new(),
            max_frame,
            readable: true,
            writable: true,
            paused: false,
            write_interest: false,
            stats: LinkStats::default(),
            last_read: now,
            last_write: now,
            stages: StageChain::default(),
            staged: Vec::new(),
            path_read_at: None,
            path_busy: false,
            sealer: None,
            opener: None,
            failed: None,
        }
    }

    /// Protects the link with a session's halves, as the handshake left them.
    pub fn with_seal(mut self, sealer: Sealer, opener: Opener) -> Link {
        self.sealer = Some(sealer);
        self.opener = Some(opener);
        self
    }

    /// Puts `stages` on this link (before any traffic).
    pub fn with_stages(mut self, stages: StageChain) -> Link {
        self.stages = stages;
        self
    }

    pub fn stages(&self) -> &StageChain {
        &self.stages
    }

    /// When a stage next needs [`Link::release_stages`].
    pub fn stage_deadline(&self) -> Option<Instant> {
        if self.stages.is_empty() {
            return None;
        }
        self.stages.next_deadline()
    }

    /// Queues the frames stages held back that are due by `now`.
    pub fn release_stages(&mut self, now: Instant) {
        let mut out = std::mem::take(&mut self.staged);
        self.stages.release(now, &mut out);
        for b in out.drain(..) {
            self.push_wire(b);
        }
        self.staged = out;
        self.note_failure();
    }

    fn note_failure(&mut self) {
        if self.failed.is_none() {
            self.failed = self.stages.take_failure(&self.peer);
        }
    }

    /// True while reading is paused by backpressure.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    pub fn peer(&self) -> &str {
        &self.peer
    }

    pub(crate) fn conn(&mut self) -> &mut MioConn {
        &mut self.conn
    }

    /// Bytes queued but not yet accepted by the kernel.
    pub fn backlog(&self) -> usize {
        if self.stages.is_empty() {
            return self.wq_bytes;
        }
        self.wq_bytes + self.stages.held_bytes()
    }

    /// Reads and decodes up to `budget` frames into `out`.
    pub fn read_frames(
        &mut self,
        out: &mut Vec<Frame>,
        budget: usize,
    ) -> Result<ReadOutcome, NetError> {
        let mut got = 0;
        // A short read means the socket is empty: with edge-triggered polling, data that
        // arrives later raises a new event, so the extra read that would only return
        // EAGAIN is skipped.
        let mut drained = false;
        loop {
            while got < budget {
                let next = match self.opener.as_mut() {
                    Some(o) => o
                        .open(&mut self.rbuf, self.max_frame)
                        .map_err(|e| crate::secure::open_error(&self.peer, e)),
                    None => {
                        decode_frame(&mut self.rbuf, self.max_frame).map_err(|e| NetError::Wire {
                            peer: self.peer.clone(),
                            source: e,
                        })
                    }
                };
                match next {
                    Ok(Some(f)) => {
                        self.stats.frames_in += 1;
                        if self.stages.is_empty() {
                            out.push(f);
                        } else {
                            self.stages.inbound(&self.peer, Instant::now(), f, out)?;
                        }
                        got += 1;
                    }
                    Ok(None) => break,
                    Err(e) => return Err(e),
                }
            }
            if got >= budget {
                // Frames still buffered from this peer are not silence: a node that reads
                // slower than its peer sends must not declare the peer dead.
                self.last_read = Instant::now();
                return Ok(ReadOutcome::Budget);
            }
            if drained {
                self.readable = false;
                return Ok(ReadOutcome::Drained);
            }
            match self.read_some() {
                Ok((0, _)) => return Ok(ReadOutcome::Closed),
                Ok((n, asked)) => {
                    self.stats.bytes_in += n as u64;
                    self.last_read = Instant::now();
                    drained = n < asked;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.readable = false;
                    return Ok(ReadOutcome::Drained);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Ok(ReadOutcome::Closed)
                }
                Err(e) => return Err(NetError::io("reading from", &self.peer, e)),
            }
        }
    }

    /// Reads once into the buffer's spare room; returns (bytes read, room offered).
    fn read_some(&mut self) -> io::Result<(usize, usize)> {
        if self.rbuf.capacity() - self.rbuf.len() < READ_CHUNK / 4 {
            self.rbuf.reserve(READ_CHUNK);
        }
        let fd = match &self.conn {
            MioConn::Tcp(s) => s.as_raw_fd(),
            MioConn::Unix(s) => s.as_raw_fd(),
        };
        let spare = self.rbuf.spare_capacity_mut();
        let asked = spare.len();
        // SAFETY: the kernel writes at most `spare.len()` bytes into the spare capacity,
        // and only the bytes it reports written are exposed by `set_len`.
        let n = unsafe { libc::read(fd, spare.as_mut_ptr().cast(), spare.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        // SAFETY: `n` bytes were initialised by the read above.
        unsafe { self.rbuf.set_len(self.rbuf.len() + n) };
        Ok((n, asked))
    }

    /// Queues an encoded frame. Call [`Link::flush`] (the reactor does) to send it.
    pub fn queue(&mut self, bytes: Bytes) {
        if self.stages.is_empty() {
            return self.push_wire(bytes);
        }
        let mut out = std::mem::take(&mut self.staged);
        self.stages.outbound(Instant::now(), bytes, &mut out);
        for b in out.drain(..) {
            self.push_wire(b);
        }
        self.staged = out;
        self.note_failure();
    }

    fn push_wire(&mut self, bytes: Bytes) {
        // An empty buffer (a zero-length message body sent after its header) would make
        // `write` return 0, which means a dead socket.
        if bytes.is_empty() {
            return;
        }
        match self.sealer.as_mut() {
            None => {
                self.wq_bytes += bytes.len();
                self.wq.push_back(bytes);
            }
            Some(s) => {
                let (wq, wq_bytes) = (&mut self.wq, &mut self.wq_bytes);
                s.seal(bytes, &mut |b| {
                    if !b.is_empty() {
                        *wq_bytes += b.len();
                        wq.push_back(b);
                    }
                });
            }
        }
    }

    /// Queues a frame of a latest-mode stream: sent now if the link keeps up, otherwise
    /// it replaces any older frame with the same `key` (stream and source) still waiting.
    pub fn queue_latest(&mut self, key: u64, bytes: Bytes) {
        if self.wq.is_empty() && self.latest.is_empty() {
            self.queue(bytes);
        } else if self.latest.insert(key, bytes).is_some() {
            self.stats.skipped += 1;
        }
    }

    /// Queues a low-priority frame: it is sent only when no other frame waits.
    pub fn queue_low(&mut self, bytes: Bytes) {
        self.low.push_back(bytes);
    }

    /// Bytes of low-priority frames not yet handed to the socket.
    pub fn low_backlog(&self) -> usize {
        self.low.iter().map(Bytes::len).sum()
    }

    /// Hands the stages a fresh reading of the connection's path if the last one is at
    /// least `gap` old, and only for TCP links whose stages want readings.
    fn read_path(&mut self, gap: std::time::Duration) {
        if !self.stages.wants_path() {
            return;
        }
        let now = Instant::now();
        if self
            .path_read_at
            .is_some_and(|t| now.duration_since(t) < gap)
        {
            return;
        }
        self.path_read_at = Some(now);
        if let Some(info) = self
            .conn
            .tcp_fd()
            .and_then(|fd| crate::path::tcp_path_info(fd).ok())
        {
            self.path_busy = info.busy;
            self.stages.path_info(&info);
        }
    }

    /// When the link next reads its busy path for the stages, if it does.
    pub fn path_deadline(&self) -> Option<Instant> {
        if !self.path_busy {
            return None;
        }
        self.path_read_at.map(|t| t + PATH_EVERY)
    }

    /// Reads the path for the stages if a reading is due.
    pub fn poll_path(&mut self) {
        self.read_path(PATH_EVERY);
    }

    /// Writes as much of the queue as the socket takes. Returns true when all is sent.
    pub fn flush(&mut self) -> Result<bool, NetError> {
        if let Some(e) = self.failed.take() {
            return Err(e.into());
        }
        let sent = self.write_queue();
        // Right after a write is when bytes wait in the socket, the moment a
        // measurement of the path can start: read then, unless a reading is very fresh.
        self.read_path(PATH_AFTER_WRITE);
        sent
    }

    fn write_queue(&mut self) -> Result<bool, NetError> {
        loop {
            if self.wq.is_empty() {
                if !self.latest.is_empty() {
                    let slots = std::mem::take(&mut self.latest);
                    for (_, b) in slots {
                        self.queue(b);
                    }
                } else if self.stage_deadline().is_none() {
                    // Low-priority frames enter the stages only when they hold nothing,
                    // or a burst of them would sit in an emulated WAN ahead of the
                    // application's next frame.
                    if let Some(b) = self.low.pop_front() {
                        self.queue(b);
                    }
                }
                // Frames may wait in a stage (an emulated WAN) rather than the queue.
                if self.wq.is_empty() {
                    return Ok(true);
                }
            }
            let n = if self.wq.len() == 1 {
                // The common case at low load: one frame, no iovec array to fill.
                self.conn.write(&self.wq[0])
            } else {
                let mut iov: [IoSlice<'_>; MAX_IOVECS] = [IoSlice::new(&[]); MAX_IOVECS];
                let mut k = 0;
                for b in self.wq.iter().take(MAX_IOVECS) {
                    iov[k] = IoSlice::new(b);
                    k += 1;
                }
                self.conn.write_vectored(&iov[..k])
            };
            match n {
                Ok(0) => {
                    return Err(NetError::io(
                        "writing to",
                        &self.peer,
                        io::ErrorKind::WriteZero.into(),
                    ))
                }
                Ok(mut n) => {
                    self.stats.bytes_out += n as u64;
                    self.wq_bytes -= n;
                    self.last_write = Instant::now();
                    while n > 0 {
                        let front = self
                            .wq
                            .front_mut()
                            .expect("written bytes came from the queue");
                        if n >= front.len() {
                            n -= front.len();
                            self.wq.pop_front();
                            self.stats.frames_out += 1;
                        } else {
                            front.advance(n);
                            n = 0;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable = false;
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(NetError::io("writing to", &self.peer, e)),
            }
        }
    }

    pub(crate) fn wants_write(&self) -> bool {
        self.failed.is_some()
            || !self.wq.is_empty()
            || !self.latest.is_empty()
            || (!self.low.is_empty() && self.stage_deadline().is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn low_priority_frames_wait_for_the_others() {
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let conn = MioConn::Unix(mio::net::UnixStream::from_std(a));
        let mut l = Link::new(conn, "test", 1 << 20);
        l.queue_low(Bytes::from_static(b"low1 "));
        l.queue(Bytes::from_static(b"app1 "));
        l.queue_low(Bytes::from_static(b"low2 "));
        l.queue(Bytes::from_static(b"app2 "));
        assert!(l.wants_write());
        assert_eq!(l.low_backlog(), 10);
        assert!(l.flush().unwrap());
        assert!(!l.wants_write());
        let mut got = vec![0u8; 20];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"app1 app2 low1 low2 ");
    }
}
