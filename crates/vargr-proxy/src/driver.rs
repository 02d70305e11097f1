//! The pump over real sockets, and the socket work around it.
//!
//! One thread per connection runs poll(2) over two non-blocking sockets, the
//! application's and the link's: a blocking write on either could otherwise stall the
//! acknowledgements of the other direction and deadlock two proxies writing to each
//! other. The link's bytes travel in records sealed with the session keys of its
//! handshake, one record per frame of the pump. Set-up frames (hello, welcome, abort)
//! are read and written blocking, before the pump starts.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use vargr_dedup::cache::SegmentCache;
use vargr_net::{Addr, Conn, RecordOpener, RecordSealer};
use vargr_sync::FRAME_HEAD_LEN;

use crate::error::SetupFrameError;
use crate::pump::{AppRead, Pump, PumpError};
use crate::wire::frame;

/// Link bytes read per turn of the loop, so that writes interleave with reads.
const LINK_READ_BUDGET: usize = 1 << 20;
/// After both directions ended, how long to wait for the peer to close the link.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Unacknowledged link data older than this means the peer is gone.
const LINK_USER_TIMEOUT_MS: u32 = 30_000;

/// A link connection after its handshake: the socket and its record layer.
pub(crate) struct LinkConn {
    pub conn: Conn,
    pub seal: RecordSealer,
    pub open: RecordOpener,
    /// Opened bytes not consumed yet (handed to the pump after set-up).
    plain: Vec<u8>,
}

impl LinkConn {
    pub fn new(c: vargr_net::SecureConn) -> LinkConn {
        let (conn, seal, open) = c.into_records();
        LinkConn {
            conn,
            seal,
            open,
            plain: Vec::new(),
        }
    }

    /// Sends one set-up frame.
    pub fn write_frame(&mut self, kind: u8, body: &[u8]) -> io::Result<()> {
        let mut out = Vec::new();
        self.seal.seal(&frame(kind, body), &mut out);
        self.conn.write_all(&out)
    }

    /// Reads one set-up frame of at most `max` bytes.
    pub fn read_frame(&mut self, max: usize) -> Result<(u8, Vec<u8>), SetupFrameError> {
        let mut scratch = vec![0u8; 64 << 10];
        loop {
            match vargr_sync::split_frame(&self.plain, max) {
                Ok(Some((kind, body))) => {
                    let body = body.to_vec();
                    self.plain.drain(..FRAME_HEAD_LEN + body.len());
                    return Ok((kind, body));
                }
                Ok(None) => {}
                Err(len) => return Err(SetupFrameError::TooLarge { len, max }),
            }
            let n = self.conn.read(&mut scratch)?;
            if n == 0 {
                return Err(SetupFrameError::Closed);
            }
            self.open.feed(&scratch[..n]);
            self.open.take(&mut self.plain)?;
        }
    }

    /// Opened bytes that arrived after the set-up frames.
    pub fn take_plain(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.plain)
    }

    /// Best effort, within a few seconds: writes what `out` still holds and a frame
    /// `kind` saying `why` after it, ends the write side, and reads until the peer
    /// closes, so that closing with its bytes unread does not reset the connection
    /// and lose the reason.
    pub fn say_why(&mut self, out: &mut OutBuf, kind: u8, why: &str) {
        let mut f = Vec::new();
        vargr_sync::put_frame(&mut f, kind, why.as_bytes());
        self.seal.seal(&f, &mut out.data);
        if set_nonblocking(&self.conn, false).is_err()
            || self.conn.set_timeout(Some(Duration::from_secs(2))).is_err()
        {
            return;
        }
        if out.write_to(&mut self.conn).is_err() || shutdown(&self.conn, Shutdown::Write).is_err() {
            return;
        }
        let mut scratch = [0u8; 4096];
        while matches!(self.conn.read(&mut scratch), Ok(n) if n > 0) {}
    }
}

/// Writes until the socket would block; returns the bytes written.
fn write_until_blocked(w: &mut impl Write, data: &[u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < data.len() {
        match w.write(&data[n..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Bytes waiting to be written to a non-blocking socket.
#[derive(Default)]
pub(crate) struct OutBuf {
    pub data: Vec<u8>,
    at: usize,
    /// Bytes the socket has taken, in all.
    pub written: u64,
}

impl OutBuf {
    pub(crate) fn len(&self) -> usize {
        self.data.len() - self.at
    }

    /// Writes until the socket would block; returns the bytes written.
    pub(crate) fn write_to(&mut self, w: &mut impl Write) -> io::Result<usize> {
        let n = write_until_blocked(w, &self.data[self.at..])?;
        self.at += n;
        self.written += n as u64;
        if self.at == self.data.len() {
            self.data.clear();
            self.at = 0;
        } else if self.at > (1 << 20) && self.at * 2 > self.data.len() {
            self.data.drain(..self.at);
            self.at = 0;
        }
        Ok(n)
    }
}

/// A pump between an application socket and a link.
pub(crate) struct Driver<C: SegmentCache> {
    pub pump: Pump<C>,
    app: Conn,
    link: Conn,
    seal: RecordSealer,
    open: RecordOpener,
    link_out: OutBuf,
    link_shut_at: Option<Instant>,
    scratch: Vec<u8>,
    /// One turn of application bytes.
    chunk: Vec<u8>,
    /// Link bytes read and written (sealed).
    pub link_in: u64,
    pub link_out_bytes: u64,
}

impl<C: SegmentCache> Driver<C> {
    /// Makes both sockets non-blocking; `pump` was made with the link's left-over
    /// set-up bytes.
    pub fn new(pump: Pump<C>, app: Conn, link: LinkConn) -> io::Result<Driver<C>> {
        let LinkConn {
            conn: link,
            seal,
            open,
            ..
        } = link;
        for c in [&app, &link] {
            c.set_timeout(None)?;
            set_nonblocking(c, true)?;
        }
        tune_link(&link);
        Ok(Driver {
            pump,
            app,
            link,
            seal,
            open,
            link_out: OutBuf::default(),
            link_shut_at: None,
            scratch: vec![0; 64 << 10],
            chunk: Vec::new(),
            link_in: 0,
            link_out_bytes: 0,
        })
    }

    /// Runs the connection until both directions ended or it failed.
    pub fn run(&mut self) -> Result<(), PumpError> {
        loop {
            self.pump.on_time(Instant::now())?;
            let reading = self.pump.wants_app_bytes(self.link_out.len());
            if !reading {
                self.pump.flush_waiting()?;
            }
            self.write_out()?;
            if self.pump.is_done(self.link_out.len()) {
                // This side is finished: say so, and wait (a while) for the other.
                let link = &self.link;
                let t = *self.link_shut_at.get_or_insert_with(|| {
                    let _ = shutdown(link, Shutdown::Write);
                    Instant::now()
                });
                if self.pump.link_ended() || t.elapsed() > CLOSE_TIMEOUT {
                    return Ok(());
                }
            }
            self.pump.check_link_end()?;
            let (mut app_events, mut link_events) = (0, 0);
            if reading {
                app_events |= libc::POLLIN;
            }
            if !self.pump.app_output().is_empty() {
                app_events |= libc::POLLOUT;
            }
            if !self.pump.link_ended() {
                link_events |= libc::POLLIN;
            }
            if self.link_out.len() > 0 {
                link_events |= libc::POLLOUT;
            }
            let mut fds = [
                pollfd(&self.app, app_events),
                pollfd(&self.link, link_events),
            ];
            let deadline = [
                self.pump.hold_until(),
                self.link_shut_at.map(|t| t + CLOSE_TIMEOUT),
            ]
            .into_iter()
            .flatten()
            .min();
            let timeout = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
                }
                None => -1,
            };
            if fds.iter().all(|f| f.fd < 0) && timeout < 0 {
                return Err(PumpError::local("internal: nothing left to wait for"));
            }
            // SAFETY: `fds` is an array of two valid pollfd for the duration of the call.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(PumpError::local(format!("poll: {e}")));
            }
            let ready = libc::POLLIN | libc::POLLHUP | libc::POLLERR;
            if reading && fds[0].revents & ready != 0 {
                self.read_app()?;
            }
            if fds[1].revents & ready != 0 {
                self.read_link()?;
            }
        }
    }

    /// Seals the pump's frames for the link, one record each.
    fn seal_frames(&mut self) {
        for f in self.pump.take_frames() {
            self.seal.seal(&f, &mut self.link_out.data);
        }
    }

    /// Writes what can be written to both sockets; shuts the application's write side
    /// once the peer's stream has ended and all of it is written.
    fn write_out(&mut self) -> Result<(), PumpError> {
        if !self.pump.app_output().is_empty() {
            let n = write_until_blocked(&mut self.app, self.pump.app_output())
                .map_err(|e| PumpError::local(format!("writing to the application: {e}")))?;
            self.pump.app_written(n);
        }
        if self.pump.take_app_shutdown() {
            let _ = shutdown(&self.app, Shutdown::Write);
        }
        self.seal_frames();
        if self.link_out.len() > 0 {
            let n = self
                .link_out
                .write_to(&mut self.link)
                .map_err(|e| PumpError::link(format!("writing to the other proxy: {e}")))?;
            self.link_out_bytes += n as u64;
        }
        Ok(())
    }

    fn read_app(&mut self) -> Result<(), PumpError> {
        let budget = self.pump.app_read_budget();
        self.chunk.clear();
        let mut how = AppRead::Budget;
        while self.chunk.len() < budget {
            match self.app.read(&mut self.scratch) {
                Ok(0) => {
                    how = AppRead::Ended;
                    break;
                }
                Ok(n) => self.chunk.extend_from_slice(&self.scratch[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    how = AppRead::Paused;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(PumpError::local(format!(
                        "reading from the application: {e}"
                    )))
                }
            }
        }
        self.pump.app_input(&self.chunk, how, Instant::now())
    }

    fn read_link(&mut self) -> Result<(), PumpError> {
        let (mut got, mut eof) = (0, false);
        while got < LINK_READ_BUDGET {
            match self.link.read(&mut self.scratch) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    self.open.feed(&self.scratch[..n]);
                    got += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(PumpError::link(format!(
                        "reading from the other proxy: {e}"
                    )))
                }
            }
        }
        self.link_in += got as u64;
        let mut plain = Vec::new();
        self.open
            .take(&mut plain)
            .map_err(|e| PumpError::link(e.to_string()))?;
        self.pump.link_input(&plain, eof)?;
        if eof && self.open.pending() > 0 {
            return Err(self.pump.ended_inside_a_frame());
        }
        Ok(())
    }

    /// Best effort: sends an ABORT after what the link already holds, giving up after a
    /// couple of seconds.
    pub fn tell_peer(&mut self, why: &str) {
        self.pump.abort(why);
        self.seal_frames();
        if set_nonblocking(&self.link, false).is_ok()
            && self.link.set_timeout(Some(Duration::from_secs(2))).is_ok()
        {
            let _ = self.link_out.write_to(&mut self.link);
        }
    }

    /// The application's socket, to be closed (or reset).
    pub fn into_app(self) -> Conn {
        self.app
    }
}

fn fd(c: &Conn) -> RawFd {
    match c {
        Conn::Tcp(s) => s.as_raw_fd(),
        Conn::Unix(s) => s.as_raw_fd(),
    }
}

pub(crate) fn pollfd(c: &Conn, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        // A negative fd is skipped: nothing to wait for on this socket.
        fd: if events == 0 { -1 } else { fd(c) },
        events,
        revents: 0,
    }
}

pub(crate) fn set_nonblocking(c: &Conn, on: bool) -> io::Result<()> {
    match c {
        Conn::Tcp(s) => s.set_nonblocking(on),
        Conn::Unix(s) => s.set_nonblocking(on),
    }
}

fn shutdown(c: &Conn, how: Shutdown) -> io::Result<()> {
    match c {
        Conn::Tcp(s) => s.shutdown(how),
        Conn::Unix(s) => s.shutdown(how),
    }
}

/// Closes with a TCP reset, so the other end sees an error rather than a clean end.
pub(crate) fn reset(c: Conn) {
    if let Conn::Tcp(s) = &c {
        let l = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: `l` is a valid linger struct of the size passed, for a live socket.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&l as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
    }
    drop(c);
}

/// Connects once: a refused connection is an answer (a proxy's client should learn at
/// once that the server or the far proxy is down), unlike `vargr_net::connect`, which
/// retries while a listener may still be starting.
pub(crate) fn connect_now(addr: &Addr, timeout: Duration) -> io::Result<Conn> {
    match addr {
        Addr::Tcp(a) => {
            let mut last = io::Error::new(io::ErrorKind::NotFound, "resolves to no address");
            for sa in std::net::ToSocketAddrs::to_socket_addrs(a.as_str())? {
                match std::net::TcpStream::connect_timeout(&sa, timeout) {
                    Ok(s) => {
                        s.set_nodelay(true)?;
                        return Ok(Conn::Tcp(s));
                    }
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
        Addr::Unix(p) => std::os::unix::net::UnixStream::connect(p).map(Conn::Unix),
    }
}

/// A link that stops answering fails within about half a minute: unacknowledged data
/// after [`LINK_USER_TIMEOUT_MS`] (Linux's `TCP_USER_TIMEOUT`), and an idle link after
/// keep-alive probes at 10 s, then every 5 s, four unanswered. Failing faster would
/// break connections on a WAN's passing hiccups.
pub(crate) fn tune_link(c: &Conn) {
    let Conn::Tcp(s) = c else { return };
    let fd = s.as_raw_fd();
    let set = |level: libc::c_int, name: libc::c_int, v: libc::c_int| {
        // SAFETY: `v` is a valid c_int of the size passed, for a live socket.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    #[cfg(target_os = "linux")]
    {
        set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 10);
        set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5);
        set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 4);
        set(
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            LINK_USER_TIMEOUT_MS as libc::c_int,
        );
    }
}
