//! Addresses and the two transports (TCP, Unix-domain sockets) behind one type.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::NetError;

/// Where a listener can be reached: `unix:/path` or `tcp:host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Addr {
    Tcp(String),
    Unix(PathBuf),
}

impl Addr {
    /// This address as other hosts reach it: a TCP listener's port under this machine's
    /// host name (it may be bound to a wildcard or loopback address); a Unix socket's
    /// path as it is.
    pub fn advertised(&self) -> Addr {
        match self {
            Addr::Tcp(a) => {
                let port = a.rsplit_once(':').map_or("", |(_, p)| p);
                Addr::Tcp(format!("{}:{port}", crate::launch::hostname()))
            }
            a => a.clone(),
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Tcp(a) => write!(f, "tcp:{a}"),
            Addr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl FromStr for Addr {
    type Err = NetError;
    fn from_str(s: &str) -> Result<Self, NetError> {
        let bad = |reason: &str| NetError::BadAddr {
            addr: s.to_string(),
            reason: reason.to_string(),
        };
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err(bad("empty socket path"));
            }
            Ok(Addr::Unix(PathBuf::from(p)))
        } else if let Some(a) = s.strip_prefix("tcp:") {
            match a.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                    Ok(Addr::Tcp(a.to_string()))
                }
                _ => Err(bad("missing host or port")),
            }
        } else {
            Err(bad("unknown scheme"))
        }
    }
}

/// A bound listening socket.
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Listener {
    /// Binds `addr`. A TCP port of 0 picks a free port; see [`Listener::local_addr`].
    pub fn bind(addr: &Addr) -> Result<Listener, NetError> {
        match addr {
            Addr::Tcp(a) => {
                let l = TcpListener::bind(a).map_err(|e| NetError::io("binding", addr, e))?;
                Ok(Listener::Tcp(l))
            }
            Addr::Unix(p) => {
                let _ = std::fs::remove_file(p);
                let l = UnixListener::bind(p).map_err(|e| NetError::io("binding", addr, e))?;
                Ok(Listener::Unix(l, p.clone()))
            }
        }
    }

    /// The address peers should connect to.
    pub fn local_addr(&self) -> Result<Addr, NetError> {
        match self {
            Listener::Tcp(l) => {
                let a = l
                    .local_addr()
                    .map_err(|e| NetError::io("reading address of", "tcp listener", e))?;
                Ok(Addr::Tcp(a.to_string()))
            }
            Listener::Unix(_, p) => Ok(Addr::Unix(p.clone())),
        }
    }

    /// Accepts one connection, waiting at most `timeout`.
    pub fn accept_timeout(&self, timeout: Duration) -> Result<Conn, NetError> {
        let fd = match self {
            Listener::Tcp(l) => std::os::fd::AsRawFd::as_raw_fd(l),
            Listener::Unix(l, _) => std::os::fd::AsRawFd::as_raw_fd(l),
        };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let deadline = std::time::Instant::now() + timeout;
        let n = loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: pfd is a valid pollfd for the duration of the call.
            let n = unsafe { libc::poll(&mut pfd, 1, ms) };
            if n >= 0 {
                break n;
            }
            let e = io::Error::last_os_error();
            // A signal (the SIGTERM whose handler saves state, a profiler's) is not an
            // error of the listener: wait out the rest of the time.
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(NetError::io("waiting on", self.describe(), e));
            }
        };
        if n == 0 {
            return Err(NetError::Timeout {
                what: "a connection",
                peer: self.describe(),
                after_ms: timeout.as_millis() as u64,
            });
        }
        let conn = match self {
            Listener::Tcp(l) => Conn::Tcp(
                l.accept()
                    .map_err(|e| NetError::io("accepting on", self.describe(), e))?
                    .0,
            ),
            Listener::Unix(l, _) => Conn::Unix(
                l.accept()
                    .map_err(|e| NetError::io("accepting on", self.describe(), e))?
                    .0,
            ),
        };
        conn.tune();
        Ok(conn)
    }

    fn describe(&self) -> String {
        self.local_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "listener".into())
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A connected stream, blocking until [`Conn::into_mio`] hands it to a reactor.
pub enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// Connects to `addr`, retrying refused connections until `timeout` (the listener may
/// still be starting).
pub fn connect(addr: &Addr, timeout: Duration) -> Result<Conn, NetError> {
    connect_with(addr, timeout, true)
}

/// Connects to `addr` once: a refused connection is an error at once (a listener that
/// was up and is gone: its process died), not a reason to wait.
pub fn connect_once(addr: &Addr, timeout: Duration) -> Result<Conn, NetError> {
    connect_with(addr, timeout, false)
}

fn connect_with(addr: &Addr, timeout: Duration, retry: bool) -> Result<Conn, NetError> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let r = match addr {
            Addr::Tcp(a) => a
                .to_socket_addrs()
                .and_then(|mut it| {
                    it.next()
                        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))
                })
                .and_then(|sa| TcpStream::connect_timeout(&sa, timeout))
                .map(Conn::Tcp),
            Addr::Unix(p) => UnixStream::connect(p).map(Conn::Unix),
        };
        match r {
            Ok(c) => {
                c.tune();
                return Ok(c);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound
                ) && retry
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(NetError::io("connecting to", addr, e)),
        }
    }
}

impl Conn {
    fn tune(&self) {
        if let Conn::Tcp(s) = self {
            let _ = s.set_nodelay(true);
            let sock = socket2::SockRef::from(s);
            // Kernel heartbeats for links whose peer vanishes without closing.
            let ka = socket2::TcpKeepalive::new()
                .with_time(Duration::from_secs(1))
                .with_interval(Duration::from_secs(1))
                .with_retries(1);
            let _ = sock.set_tcp_keepalive(&ka);
        }
    }

    pub fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Conn::Tcp(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
            Conn::Unix(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
        }
    }

    /// Marks the connection as background traffic: IP precedence CS1 ("lower effort",
    /// RFC 8622) so that routers and the kernel's queueing serve application traffic
    /// first, and a small send buffer so that a burst of it cannot fill the queue.
    pub fn set_low_priority(&self) {
        if let Conn::Tcp(s) = self {
            let sock = socket2::SockRef::from(s);
            let _ = sock.set_tos(0x20);
        }
    }

    /// Waits until the connection has bytes to read (or is closed), for at most
    /// `timeout`; `Ok(false)` when the time ran out.
    pub fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        use std::os::fd::AsRawFd;
        let fd = match self {
            Conn::Tcp(s) => s.as_raw_fd(),
            Conn::Unix(s) => s.as_raw_fd(),
        };
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `p` is one valid pollfd for the duration of the call.
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        match rc {
            0 => Ok(false),
            r if r > 0 => Ok(true),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Where the connection leads, for the choice of its protection.
    pub fn reach(&self) -> crate::seal::Reach {
        match self {
            Conn::Tcp(s) => match s.peer_addr() {
                Ok(a) if a.ip().is_loopback() => crate::seal::Reach::Loopback,
                _ => crate::seal::Reach::Remote,
            },
            Conn::Unix(_) => crate::seal::Reach::UnixSocket,
        }
    }

    /// A second handle on the same socket (one thread reads while another writes).
    pub fn try_clone(&self) -> io::Result<Conn> {
        Ok(match self {
            Conn::Tcp(s) => Conn::Tcp(s.try_clone()?),
            Conn::Unix(s) => Conn::Unix(s.try_clone()?),
        })
    }

    pub fn peer_name(&self) -> String {
        match self {
            Conn::Tcp(s) => s
                .peer_addr()
                .map(|a| format!("tcp:{a}"))
                .unwrap_or_else(|_| "tcp peer".into()),
            Conn::Unix(_) => "unix peer".into(),
        }
    }

    /// Switches to non-blocking mode for use in a [`crate::Reactor`].
    pub fn into_mio(self) -> io::Result<MioConn> {
        match self {
            Conn::Tcp(s) => {
                s.set_read_timeout(None)?;
                s.set_nonblocking(true)?;
                Ok(MioConn::Tcp(mio::net::TcpStream::from_std(s)))
            }
            Conn::Unix(s) => {
                s.set_read_timeout(None)?;
                s.set_nonblocking(true)?;
                Ok(MioConn::Unix(mio::net::UnixStream::from_std(s)))
            }
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            Conn::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            Conn::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A non-blocking stream registered with a reactor.
pub enum MioConn {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
}

impl MioConn {
    /// The socket of a TCP connection (for `TCP_INFO`); `None` for a Unix socket.
    pub(crate) fn tcp_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        match self {
            MioConn::Tcp(s) => Some(s.as_raw_fd()),
            MioConn::Unix(_) => None,
        }
    }
    pub(crate) fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            MioConn::Tcp(s) => s,
            MioConn::Unix(s) => s,
        }
    }
    pub(crate) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            MioConn::Tcp(s) => s.write(buf),
            MioConn::Unix(s) => s.write(buf),
        }
    }
    pub(crate) fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            MioConn::Tcp(s) => s.write_vectored(bufs),
            MioConn::Unix(s) => s.write_vectored(bufs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn ignore(_: libc::c_int) {}

    #[test]
    fn a_signal_during_accept_is_waited_out_not_an_error() {
        // A handler without SA_RESTART: the signal interrupts poll with EINTR, as the
        // proxy's SIGTERM handler did before it could save its caches.
        // SAFETY: a plain sigaction with a handler that does nothing.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = ignore as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()), 0);
        }
        let l = Listener::bind(&"tcp:127.0.0.1:0".parse().unwrap()).unwrap();
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() } as usize;
        let poker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            // SAFETY: the accepting thread is alive until the test joins this one.
            unsafe { libc::pthread_kill(me as libc::pthread_t, libc::SIGUSR2) };
        });
        let r = l.accept_timeout(Duration::from_millis(300));
        poker.join().unwrap();
        match r {
            Err(NetError::Timeout { .. }) => {}
            Err(e) => panic!("the signal ended the wait: {e}"),
            Ok(_) => panic!("nobody connected"),
        }
    }
}
