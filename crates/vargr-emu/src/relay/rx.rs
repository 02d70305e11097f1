//! When did these bytes really arrive? Reads that also return the kernel's receive time.
//!
//! The shaper schedules bytes from their arrival time. Stamping them with the clock after
//! `read` returns would add the relay's own wake-up delay (tens of microseconds on a
//! loaded machine, more while it is busy with other connections) to every message. On
//! Linux the socket is asked for receive timestamps (`SO_TIMESTAMPNS`), which TCP reports
//! for the last segment a read consumed, so the delay starts when the bytes reached the
//! host, as on a real gateway. Elsewhere, or if the kernel gives no stamp, the read's
//! return time is used.

use std::io;
use std::time::{Duration, Instant};

use mio::net::TcpStream;

/// Stamps older than this are distrusted (a wall-clock step between the two clocks).
const MAX_AGE: Duration = Duration::from_secs(1);

/// Asks the kernel to stamp data received on `socket`; harmless if it cannot.
///
/// Linux switches stamping on system-wide a moment *after* the first socket asks for it,
/// so the relay also asks on its listening socket at bind time: by the time clients
/// connect, stamps flow, and accepted sockets inherit the option.
#[cfg(unix)]
pub(super) fn enable(socket: &impl std::os::fd::AsRawFd) {
    #[cfg(target_os = "linux")]
    {
        let on: libc::c_int = 1;
        // SAFETY: valid descriptor, option value is a c_int of the given size.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = socket;
}

/// Reads like `Read::read` and returns when the data arrived.
#[cfg(target_os = "linux")]
pub(super) fn read_stamped(stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<(usize, Instant)> {
    use std::os::fd::AsRawFd;

    // Room for one timespec control message, aligned for cmsghdr.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `msg` describes `buf` and `control`, both valid for writes of their sizes.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    let now = Instant::now();
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut arrival = now;
    // SAFETY: the CMSG_* macros walk the control buffer the kernel just filled, within
    // msg_controllen; the payload of SCM_TIMESTAMPNS is a timespec.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                arrival = to_instant(ts, now);
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n as usize, arrival))
}

/// Converts a `CLOCK_REALTIME` stamp to an `Instant` by its age relative to `now`.
#[cfg(target_os = "linux")]
fn to_instant(stamp: libc::timespec, now: Instant) -> Instant {
    let mut real = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut real) };
    let nanos = |t: libc::timespec| t.tv_sec as i128 * 1_000_000_000 + t.tv_nsec as i128;
    let age = nanos(real) - nanos(stamp);
    if age <= 0 || age > MAX_AGE.as_nanos() as i128 {
        return now;
    }
    now.checked_sub(Duration::from_nanos(age as u64))
        .unwrap_or(now)
}

#[cfg(not(target_os = "linux"))]
pub(super) fn read_stamped(stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<(usize, Instant)> {
    use std::io::Read;
    let _ = MAX_AGE;
    let n = stream.read(buf)?;
    Ok((n, Instant::now()))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn stamps_are_the_arrival_not_the_read() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        enable(&listener);
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let mut server = TcpStream::from_std(server);
        enable(&server);
        // Stamping starts a moment after it is first asked for, so try a few messages.
        let mut stamped = 0;
        for _ in 0..20 {
            client.write_all(b"hello").unwrap();
            // Read late, so a stamp taken at read time would come after `before`.
            std::thread::sleep(Duration::from_millis(5));
            let mut buf = [0u8; 16];
            let (n, arrival, before) = loop {
                let before = Instant::now();
                match read_stamped(&mut server, &mut buf) {
                    Ok((n, arrival)) => break (n, arrival, before),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                    Err(e) => panic!("{e}"),
                }
            };
            assert_eq!(&buf[..n], b"hello");
            if arrival < before {
                stamped += 1;
            }
        }
        // The stamp is when the bytes arrived, before the read that found them began.
        assert!(stamped > 0, "no read carried an arrival stamp");
    }
}
