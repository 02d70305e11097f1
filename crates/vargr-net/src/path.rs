//! What the kernel has measured about a TCP connection's path (Linux `TCP_INFO`): the
//! smallest round trip and the delivery rate. Stages that model the link (the codec
//! stage's cost model) learn from it instead of guessing, on links nobody configured.

use std::time::Duration;

pub use vargr_stage::PathInfo;

/// Reads `TCP_INFO` of the TCP socket `fd`.
#[cfg(target_os = "linux")]
pub fn tcp_path_info(fd: std::os::fd::RawFd) -> std::io::Result<PathInfo> {
    const SIZE: usize = std::mem::size_of::<libc::tcp_info>();
    let mut raw = [0u8; SIZE];
    let mut len = SIZE as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `raw`, which has that many.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            raw.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Older kernels fill less; the fields read here need Linux 4.9 or later.
    let needed = std::mem::offset_of!(libc::tcp_info, tcpi_busy_time);
    if (len as usize) < needed {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "TCP_INFO without min_rtt and bytes_acked (Linux before 4.9)",
        ));
    }
    // SAFETY: `raw` holds SIZE bytes and tcp_info is plain integers; unaligned read.
    let info: libc::tcp_info = unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) };
    Ok(PathInfo {
        min_rtt: Duration::from_micros(u64::from(info.tcpi_min_rtt)),
        busy: info.tcpi_unacked > 0 || info.tcpi_notsent_bytes > 0,
        backlogged: info.tcpi_notsent_bytes > 0,
        bytes_acked: info.tcpi_bytes_acked,
        at: std::time::Instant::now(),
    })
}

/// Reads `TCP_INFO` of the TCP socket `fd` (not available on this system).
#[cfg(not(target_os = "linux"))]
pub fn tcp_path_info(_fd: i32) -> std::io::Result<PathInfo> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "TCP_INFO is read on Linux only",
    ))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    #[test]
    fn a_loopback_connection_reports_its_round_trip_and_what_was_acked() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            let mut got = 0;
            while got < 8 << 20 {
                got += b.read(&mut buf).unwrap();
            }
        });
        let chunk = vec![7u8; 1 << 20];
        for _ in 0..8 {
            a.write_all(&chunk).unwrap();
        }
        reader.join().unwrap();
        let info = tcp_path_info(a.as_raw_fd()).unwrap();
        // Read from the kernel, not left at zero (its value is the machine's business).
        assert!(info.min_rtt > Duration::ZERO, "{info:?}");
        assert!(info.bytes_acked >= 8 << 20, "{info:?}");
        // A socket that is not TCP is an error, not a made-up reading.
        let (u, _) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(tcp_path_info(u.as_raw_fd()).is_err());
    }
}
