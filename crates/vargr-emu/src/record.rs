//! Recording a real path into a trace that Longcut replays (`vargr emu record`).
//!
//! The seed collected its traces with NWS (a four-byte ping for latency, a few 16 KiB
//! messages for bandwidth, every minute) and with EventSpace (the timings of a running
//! benchmark's messages), then replayed them on the emulated WAN (seed 000, ch. 8.1,
//! section IV). This is the NWS way, at the sample rate an experiment needs: every
//! `interval`, a few small ping-pongs (their median round trip, halved, is the row's
//! one-way latency) and one bulk probe (its bytes over the time the far side took to
//! receive them, first read to last, is the row's bandwidth, so the latency does not
//! dilute it), over two TCP connections to an [`EchoServer`] at the far end of the
//! path. The rows are a [`Trace`]: [`Trace::to_text`] writes the file `--wan trace=FILE`
//! and `vargr emu --trace FILE` read.
//!
//! The echo protocol: a connection's first byte picks its mode. `p`: every 8 bytes
//! received are sent back. `b`: repeatedly a u64 length (little-endian), then that many
//! bytes; the answer is two u64s, the nanoseconds from the first read of the payload to
//! the last, and the bytes received after the first read.
//!
//! Every socket has a deadline ([`RecordConfig::timeout`]): a path that stops answering
//! ends the recording with an error naming the probe.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::error::EmuError;
use crate::trace::{Trace, TraceRow};

const PING: u8 = b'p';
const BULK: u8 = b'b';
/// The largest bulk probe the echo server accepts.
const MAX_PROBE: u64 = 1 << 30;
/// How long the echo server waits for a client's next bytes before it hangs up.
const SERVER_IDLE: Duration = Duration::from_secs(300);
/// Clients an echo server serves at once (a thread each); more are closed at once, so
/// that a flood of connections costs sockets, not threads.
pub const MAX_ECHO_CLIENTS: usize = 64;

/// What to record, and for how long.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    /// The [`EchoServer`] at the far end of the path (or a relay in front of one).
    pub target: SocketAddr,
    /// How long to record.
    pub duration: Duration,
    /// Time between the starts of two samples (a sample that takes longer delays the
    /// next; rows carry the times they were really taken).
    pub interval: Duration,
    /// Ping-pongs per sample; the row's latency is half their median round trip.
    pub pings: usize,
    /// Bytes of each bulk probe; 0 records no bandwidth (rows say `unlimited`).
    pub probe_bytes: usize,
    /// The longest any probe may wait for the path.
    pub timeout: Duration,
}

impl RecordConfig {
    /// One sample a second for `duration`: 5 pings and a 256 KiB probe, a 30 s deadline.
    pub fn new(target: SocketAddr, duration: Duration) -> RecordConfig {
        RecordConfig {
            target,
            duration,
            interval: Duration::from_secs(1),
            pings: 5,
            probe_bytes: 256 << 10,
            timeout: Duration::from_secs(30),
        }
    }
}

/// Records the path to `cfg.target`; `on_row` sees each row as it is taken (the CLI
/// prints them). The trace's first row is at time zero.
pub fn record(cfg: &RecordConfig, mut on_row: impl FnMut(&TraceRow)) -> Result<Trace, EmuError> {
    let io_err = |what: &str, e: io::Error| EmuError::Record {
        target: cfg.target,
        what: what.to_string(),
        source: e,
    };
    let mut ping = connect(cfg, PING).map_err(|e| io_err("connecting the ping probe", e))?;
    let mut bulk = match cfg.probe_bytes {
        0 => None,
        _ => Some(connect(cfg, BULK).map_err(|e| io_err("connecting the bulk probe", e))?),
    };
    let payload = vec![0x5au8; cfg.probe_bytes];
    let start = Instant::now();
    let mut rows: Vec<TraceRow> = Vec::new();
    let mut next = start;
    while rows.is_empty() || next < start + cfg.duration {
        thread::sleep(next.saturating_duration_since(Instant::now()));
        let at = start.elapsed();
        let latency =
            ping_median(&mut ping, cfg.pings.max(1)).map_err(|e| io_err("ping-pong", e))? / 2;
        let bandwidth_bits_per_s = match &mut bulk {
            Some(s) => Some(probe(s, &payload).map_err(|e| io_err("bulk probe", e))?),
            None => None,
        };
        let row = TraceRow {
            at,
            latency,
            bandwidth_bits_per_s,
        };
        on_row(&row);
        rows.push(row);
        next += cfg.interval.max(Duration::from_millis(1));
    }
    let _ = ping.shutdown(Shutdown::Both);
    Trace::from_rows(rows, &cfg.target.to_string())
}

fn connect(cfg: &RecordConfig, mode: u8) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&cfg.target, cfg.timeout)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(cfg.timeout))?;
    s.set_write_timeout(Some(cfg.timeout))?;
    (&s).write_all(&[mode])?;
    Ok(s)
}

/// The median round trip of `n` 8-byte ping-pongs.
fn ping_median(s: &mut TcpStream, n: usize) -> io::Result<Duration> {
    let mut rtts = Vec::with_capacity(n);
    let mut back = [0u8; 8];
    for i in 0..n as u64 {
        let t = Instant::now();
        s.write_all(&i.to_le_bytes())?;
        s.read_exact(&mut back)?;
        rtts.push(t.elapsed());
        if back != i.to_le_bytes() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the echo server sent back other bytes",
            ));
        }
    }
    rtts.sort();
    Ok(rtts[rtts.len() / 2])
}

/// Sends one bulk probe and returns the bandwidth the far side saw, in bits per second.
fn probe(s: &mut TcpStream, payload: &[u8]) -> io::Result<u64> {
    s.write_all(&(payload.len() as u64).to_le_bytes())?;
    s.write_all(payload)?;
    let mut answer = [0u8; 16];
    s.read_exact(&mut answer)?;
    let span = u64::from_le_bytes(answer[..8].try_into().expect("8 bytes"));
    let after_first = u64::from_le_bytes(answer[8..].try_into().expect("8 bytes"));
    if after_first == 0 || span == 0 {
        // All in one read: faster than this host can tell; the probe is too small.
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the probe arrived in one read: too small to time (raise --probe-bytes)",
        ));
    }
    Ok((u128::from(after_first) * 8 * 1_000_000_000 / u128::from(span)).max(1) as u64)
}

/// The far end of a recorded path: echoes pings and times bulk probes (see the
/// [module docs](self) for the protocol). A thread per connection; stops when dropped
/// or [`stop`](EchoServer::stop)ped.
pub struct EchoServer {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl EchoServer {
    /// Listens on `addr` (port 0 picks one; see [`local_addr`](EchoServer::local_addr)).
    pub fn start(addr: SocketAddr) -> Result<EchoServer, EmuError> {
        let listen_err = |source| EmuError::Listen { addr, source };
        let listener = TcpListener::bind(addr).map_err(listen_err)?;
        let addr = listener.local_addr().map_err(listen_err)?;
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = stopping.clone();
        let serving = Arc::new(AtomicUsize::new(0));
        let acceptor = thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                if serving.fetch_add(1, Ordering::SeqCst) >= MAX_ECHO_CLIENTS {
                    serving.fetch_sub(1, Ordering::SeqCst);
                    continue; // dropped: the client sees the connection close
                }
                let serving = serving.clone();
                thread::spawn(move || {
                    let _ = serve(conn);
                    serving.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Ok(EchoServer {
            addr,
            stopping,
            acceptor: Some(acceptor),
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting (connections being served end when their clients leave or go
    /// quiet for five minutes).
    pub fn stop(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.shut();
    }
}

fn serve(mut conn: TcpStream) -> io::Result<()> {
    conn.set_nodelay(true)?;
    conn.set_read_timeout(Some(SERVER_IDLE))?;
    conn.set_write_timeout(Some(SERVER_IDLE))?;
    let mut mode = [0u8];
    conn.read_exact(&mut mode)?;
    match mode[0] {
        PING => {
            let mut msg = [0u8; 8];
            loop {
                match conn.read_exact(&mut msg) {
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                    other => other?,
                }
                conn.write_all(&msg)?;
            }
        }
        BULK => {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let mut len = [0u8; 8];
                match conn.read_exact(&mut len) {
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                    other => other?,
                }
                let mut left = u64::from_le_bytes(len);
                if left > MAX_PROBE {
                    return Ok(());
                }
                let (mut first, mut last, mut after_first) = (None, Instant::now(), 0u64);
                while left > 0 {
                    let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let n = conn.read(&mut buf[..want])?;
                    if n == 0 {
                        return Ok(());
                    }
                    last = Instant::now();
                    match first {
                        None => first = Some(last),
                        Some(_) => after_first += n as u64,
                    }
                    left -= n as u64;
                }
                let span = first.map_or(0, |f| (last - f).as_nanos() as u64);
                let mut answer = [0u8; 16];
                answer[..8].copy_from_slice(&span.to_le_bytes());
                answer[8..].copy_from_slice(&after_first.to_le_bytes());
                conn.write_all(&answer)?;
            }
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::WanProfile;
    use crate::relay::{Relay, RelayConfig};

    #[test]
    fn an_echo_server_serves_a_bounded_number_of_clients() {
        let echo = EchoServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut held: Vec<TcpStream> = (0..MAX_ECHO_CLIENTS)
            .map(|_| TcpStream::connect(echo.local_addr()).unwrap())
            .collect();
        // Each held client has chosen its probe: a thread waits on each.
        for c in &mut held {
            c.write_all(&[PING]).unwrap();
        }
        let mut extra = TcpStream::connect(echo.local_addr()).unwrap();
        extra
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut b = [0u8; 1];
        assert!(
            matches!(extra.read(&mut b), Ok(0) | Err(_)),
            "a client beyond {MAX_ECHO_CLIENTS} was served"
        );
        // One leaves: a newcomer is served again.
        drop(held.pop());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut c = TcpStream::connect(echo.local_addr()).unwrap();
            c.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            // A refused one is closed at once; a served one waits for its probe.
            match c.read(&mut b) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                _ => assert!(Instant::now() < deadline, "no place freed up"),
            }
        }
    }

    #[test]
    fn a_recording_through_a_relay_follows_its_profile_and_replays() {
        let echo = EchoServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
        let profile: WanProfile = "latency=5ms,bandwidth=20mbit".parse().unwrap();
        let mut relay_cfg =
            RelayConfig::new("127.0.0.1:0".parse().unwrap(), echo.local_addr(), profile);
        relay_cfg.realtime = false;
        let relay = Relay::bind(relay_cfg).unwrap();
        let addr = relay.local_addr();
        let stop = relay.stop_handle();
        let relay = thread::spawn(move || relay.run());
        let mut cfg = RecordConfig::new(addr, Duration::from_millis(1200));
        cfg.interval = Duration::from_millis(300);
        cfg.probe_bytes = 64 << 10;
        let mut seen = 0;
        let trace = record(&cfg, |_| seen += 1).unwrap();
        stop.stop();
        relay.join().unwrap().unwrap();
        assert_eq!(seen, trace.rows().len());
        assert!(trace.rows().len() >= 3, "{:?}", trace.rows());
        // Wide margins: the machine is shared, and a late wake-up only adds time.
        for r in trace.rows() {
            let ms = r.latency.as_secs_f64() * 1e3;
            assert!((4.5..20.0).contains(&ms), "latency {ms} ms, {r:?}");
            let mbit = r.bandwidth_bits_per_s.unwrap() as f64 / 1e6;
            assert!(
                (8.0..30.0).contains(&mbit),
                "bandwidth {mbit} Mbit/s, {r:?}"
            );
        }
        // What it writes is what a replay reads.
        let again = Trace::parse(&trace.to_text(), "recorded").unwrap();
        assert_eq!(again.rows().len(), trace.rows().len());
        for (a, b) in again.rows().iter().zip(trace.rows()) {
            assert!(
                a.at.abs_diff(b.at) < Duration::from_micros(1),
                "{a:?} {b:?}"
            );
            assert!(
                a.latency.abs_diff(b.latency) < Duration::from_micros(1),
                "{a:?} {b:?}"
            );
            let (x, y) = (
                a.bandwidth_bits_per_s.unwrap(),
                b.bandwidth_bits_per_s.unwrap(),
            );
            assert!(x.abs_diff(y) <= 1, "{a:?} {b:?}");
        }
    }

    #[test]
    fn a_dead_target_is_named() {
        // A port nobody listens on.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut cfg = RecordConfig::new(port, Duration::from_secs(1));
        cfg.timeout = Duration::from_secs(2);
        let e = record(&cfg, |_| {}).unwrap_err().to_string();
        assert!(
            e.contains(&port.to_string()) && e.contains("ping probe"),
            "{e}"
        );
    }
}
