//! The relay over real sockets on loopback: bytes arrive intact and in order, ends of
//! stream and errors pass through, many connections all finish, stopping returns.
//!
//! Timings are printed (run with `--nocapture`), never asserted: CI machines are noisy.
//! `examples/accuracy.rs` is where timing is measured.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use vargr_emu::{
    EmuError, EventSink, LinkSpec, Relay, RelayConfig, RelayEvent, RelayStats, Sharing, StopHandle,
    Trace, WanProfile,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A loopback server running `handler` on a thread per connection; joined on stop.
struct Server {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Server {
    fn start(handler: fn(TcpStream) -> io::Result<()>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = stopping.clone();
        let acceptor = thread::spawn(move || {
            let mut workers = Vec::new();
            for conn in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(conn) = conn {
                    workers.push(thread::spawn(move || {
                        let _ = handler(conn);
                    }));
                }
            }
            for w in workers {
                w.join().unwrap();
            }
        });
        Server {
            addr,
            stopping,
            acceptor: Some(acceptor),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

fn echo(mut conn: TcpStream) -> io::Result<()> {
    conn.set_nodelay(true)?;
    let mut buf = vec![0; 64 << 10];
    loop {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        conn.write_all(&buf[..n])?;
    }
}

/// A relay on its own thread, recording its events; `finish` stops it.
struct RunningRelay {
    addr: SocketAddr,
    stop: StopHandle,
    thread: JoinHandle<Result<RelayStats, EmuError>>,
    events: Arc<(Mutex<Vec<RelayEvent>>, Condvar)>,
}

impl RunningRelay {
    fn start(mut cfg: RelayConfig) -> RunningRelay {
        let events: Arc<(Mutex<Vec<RelayEvent>>, Condvar)> = Arc::default();
        let sink = events.clone();
        cfg.events = Some(EventSink::new(move |e| {
            sink.0.lock().unwrap().push(e.clone());
            sink.1.notify_all();
        }));
        let relay = Relay::bind(cfg).unwrap();
        let addr = relay.local_addr();
        let stop = relay.stop_handle();
        let thread = thread::spawn(move || relay.run());
        RunningRelay {
            addr,
            stop,
            thread,
            events,
        }
    }

    /// Waits until `count` events match `pred`; returns all events so far.
    fn wait_events(&self, count: usize, pred: impl Fn(&RelayEvent) -> bool) -> Vec<RelayEvent> {
        let (lock, cvar) = &*self.events;
        let (events, timeout) = cvar
            .wait_timeout_while(lock.lock().unwrap(), Duration::from_secs(20), |ev| {
                ev.iter().filter(|e| pred(e)).count() < count
            })
            .unwrap();
        assert!(
            !timeout.timed_out(),
            "timed out waiting for events; saw {events:?}"
        );
        events.clone()
    }

    /// Stops the relay; its thread must return (nothing left running).
    fn finish(self) -> RelayStats {
        self.stop.stop();
        self.thread.join().unwrap().unwrap()
    }
}

fn is_closed(e: &RelayEvent) -> bool {
    matches!(e, RelayEvent::Closed { .. })
}

fn relay_to(target: SocketAddr, spec: impl Into<LinkSpec>) -> RelayConfig {
    RelayConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), target, spec)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Deterministic, non-repeating test bytes.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sends `data` from another thread while reading the echo here, so neither side can
/// block the other however large `data` is. Returns the echo and the time of each read.
fn echo_through(stream: &TcpStream, data: Vec<u8>) -> (Vec<u8>, Vec<(Instant, usize)>) {
    let mut writer = stream.try_clone().unwrap();
    let len = data.len();
    let sender = thread::spawn(move || writer.write_all(&data).unwrap());
    let mut got = Vec::with_capacity(len);
    let mut reads = Vec::new();
    let mut buf = vec![0; 64 << 10];
    let mut reader = stream;
    while got.len() < len {
        let n = reader.read(&mut buf).unwrap();
        assert!(n > 0, "echo ended after {} of {len} bytes", got.len());
        reads.push((Instant::now(), n));
        got.extend_from_slice(&buf[..n]);
    }
    sender.join().unwrap();
    (got, reads)
}

/// Mean one-way time (half the round trip) of `rounds` 8-byte ping-pongs.
fn ping_pong(stream: &mut TcpStream, rounds: usize) -> Duration {
    let mut total = Duration::ZERO;
    let mut back = [0u8; 8];
    for i in 0..rounds as u64 {
        let t = Instant::now();
        stream.write_all(&i.to_le_bytes()).unwrap();
        stream.read_exact(&mut back).unwrap();
        total += t.elapsed();
        assert_eq!(u64::from_le_bytes(back), i);
    }
    total / (2 * rounds as u32)
}

#[test]
fn echo_is_intact_and_in_order() {
    let server = Server::start(echo);
    let profile = WanProfile::new(ms(2), Some(100_000_000));
    let relay = RunningRelay::start(relay_to(server.addr, profile));
    let mut s = connect(relay.addr);

    let mut sent = 0;
    for (i, size) in [1usize, 100, 10_000, 300_000].into_iter().enumerate() {
        let data = pattern(i as u64, size);
        let (got, _) = echo_through(&s, data.clone());
        assert!(got == data, "echo of {size} bytes differs");
        sent += size as u64;
    }
    let one_way = ping_pong(&mut s, 20);
    sent += 20 * 8;
    println!(
        "ping-pong one-way {one_way:?} (model {:?})",
        profile.one_way(8)
    );

    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(
        s.read(&mut [0; 1]).unwrap(),
        0,
        "EOF comes back after the echo"
    );
    let events = relay.wait_events(1, is_closed);
    assert!(events.contains(&RelayEvent::Closed {
        conn: 0,
        forward_bytes: sent,
        backward_bytes: sent,
    }));
    let stats = relay.finish();
    assert_eq!((stats.accepted, stats.closed, stats.resets), (1, 1, 0));
    assert_eq!((stats.forward_bytes, stats.backward_bytes), (sent, sent));
    println!(
        "relay lateness mean {:?} max {:?} over {} segments",
        stats.lateness_mean(),
        stats.lateness_max,
        stats.deliveries
    );
}

#[test]
fn bulk_transfer_is_intact() {
    let server = Server::start(echo);
    let bw = 40_000_000;
    let relay = RunningRelay::start(relay_to(server.addr, WanProfile::new(ms(1), Some(bw))));
    let s = connect(relay.addr);
    let data = pattern(7, 1 << 20);
    let (got, reads) = echo_through(&s, data.clone());
    assert!(got == data, "bulk echo differs");
    // Throughput at the receiver, from its first read to its last.
    let span = reads.last().unwrap().0 - reads[0].0;
    let after_first: usize = reads[1..].iter().map(|r| r.1).sum();
    let measured = after_first as f64 * 8.0 / span.as_secs_f64();
    println!(
        "bulk: {:.2} Mbit/s measured, {:.2} configured ({:+.2} %)",
        measured / 1e6,
        bw as f64 / 1e6,
        100.0 * (measured - bw as f64) / bw as f64
    );
    drop(s);
    relay.wait_events(1, is_closed);
    relay.finish();
}

#[test]
fn tiny_delay_line_pushes_back_without_loss() {
    let server = Server::start(echo);
    let mut cfg = relay_to(server.addr, WanProfile::new(ms(1), Some(100_000_000)));
    // Far below one read: every read fills the line, so reading pauses and resumes.
    cfg.max_in_flight = Some(3000);
    let relay = RunningRelay::start(cfg);
    let s = connect(relay.addr);
    let data = pattern(3, 500_000);
    let (got, _) = echo_through(&s, data.clone());
    assert!(got == data, "echo through a 3000-byte delay line differs");
    drop(s);
    relay.wait_events(1, is_closed);
    assert_eq!(relay.finish().resets, 0);
}

#[test]
fn half_close_passes_through_both_ways() {
    // Reads to EOF, then answers with the count and closes.
    fn count_then_close(mut conn: TcpStream) -> io::Result<()> {
        let mut all = Vec::new();
        conn.read_to_end(&mut all)?;
        conn.write_all(format!("got {} bytes", all.len()).as_bytes())
    }
    let server = Server::start(count_then_close);
    let relay = RunningRelay::start(relay_to(server.addr, WanProfile::new(ms(3), None)));
    let mut s = connect(relay.addr);
    s.write_all(&pattern(1, 5000)).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, "got 5000 bytes");
    relay.wait_events(1, is_closed);
    let stats = relay.finish();
    assert_eq!((stats.closed, stats.resets), (1, 0));
}

#[test]
fn forty_concurrent_connections_all_complete() {
    let server = Server::start(echo);
    let profile = WanProfile::new(ms(2), Some(200_000_000));
    let relay = RunningRelay::start(relay_to(server.addr, profile));
    let n = 40;
    let barrier = Arc::new(Barrier::new(n));
    let clients: Vec<_> = (0..n)
        .map(|i| {
            let (addr, barrier) = (relay.addr, barrier.clone());
            thread::spawn(move || {
                let mut s = connect(addr);
                barrier.wait();
                for round in 0..5 {
                    let data = pattern((i * 100 + round) as u64, 2000);
                    let (got, _) = echo_through(&s, data.clone());
                    assert!(got == data, "connection {i} round {round} differs");
                }
                let one_way = ping_pong(&mut s, 10);
                s.shutdown(Shutdown::Write).unwrap();
                assert_eq!(s.read(&mut [0; 1]).unwrap(), 0);
                one_way
            })
        })
        .collect();
    let one_way: Vec<Duration> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    println!(
        "40 connections: mean one-way {:?}, worst connection {:?} (model {:?})",
        one_way.iter().sum::<Duration>() / n as u32,
        one_way.iter().max().unwrap(),
        profile.one_way(8)
    );
    relay.wait_events(n, is_closed);
    let stats = relay.finish();
    assert_eq!((stats.accepted, stats.closed, stats.resets), (40, 40, 0));
}

#[test]
fn trace_jitter_and_private_bandwidth_keep_order() {
    let server = Server::start(echo);
    // Latency swings between 0 and 4 ms every 20 ms, with 2 ms of jitter on top.
    let trace = Trace::parse("0 0ms 50mbit\n20ms 4ms 20mbit\n", "swing").unwrap();
    let spec = LinkSpec::Trace {
        trace: Arc::new(trace),
        jitter: ms(2),
    };
    let mut cfg = relay_to(server.addr, spec);
    cfg.sharing = Sharing::PerConnection;
    cfg.seed = 42;
    let relay = RunningRelay::start(cfg);
    let mut s = connect(relay.addr);
    let mut writer = s.try_clone().unwrap();
    // Many small writes spread over several trace periods.
    let sender = thread::spawn(move || {
        for i in 0u32..400 {
            writer.write_all(&i.to_le_bytes()).unwrap();
            thread::sleep(Duration::from_micros(200));
        }
    });
    let mut buf = [0u8; 4];
    for i in 0u32..400 {
        s.read_exact(&mut buf).unwrap();
        assert_eq!(u32::from_le_bytes(buf), i, "bytes overtook each other");
    }
    sender.join().unwrap();
    drop(s);
    relay.wait_events(1, is_closed);
    relay.finish();
}

#[test]
fn unreachable_target_resets_the_client_and_says_why() {
    // A port that was free a moment ago: nothing listens there.
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let relay = RunningRelay::start(relay_to(dead, WanProfile::default()));
    let mut s = connect(relay.addr);
    let _ = s.write_all(b"hello");
    match s.read(&mut [0; 16]) {
        Ok(0) => {}
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset),
        Ok(n) => panic!("read {n} bytes from an unreachable target"),
    }
    let events = relay.wait_events(1, |e| matches!(e, RelayEvent::ConnectFailed { .. }));
    let failed = events
        .iter()
        .find(|e| matches!(e, RelayEvent::ConnectFailed { .. }));
    let message = failed.unwrap().to_string();
    println!("{message}");
    assert!(message.contains(&dead.to_string()), "{message}");
    let stats = relay.finish();
    assert_eq!((stats.accepted, stats.connect_failures), (1, 1));
}

#[test]
fn target_reset_resets_the_client() {
    // Reads one message, then aborts with a reset.
    fn abort(mut conn: TcpStream) -> io::Result<()> {
        let mut buf = [0u8; 5];
        conn.read_exact(&mut buf)?;
        socket2::SockRef::from(&conn).set_linger(Some(Duration::ZERO))?;
        Ok(())
    }
    let server = Server::start(abort);
    let relay = RunningRelay::start(relay_to(server.addr, WanProfile::new(ms(1), None)));
    let mut s = connect(relay.addr);
    s.write_all(b"hello").unwrap();
    match s.read(&mut [0; 16]) {
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset),
        Ok(n) => panic!("expected a reset, read {n} bytes"),
    }
    let events = relay.wait_events(1, |e| matches!(e, RelayEvent::Reset { .. }));
    println!("{}", events.last().unwrap());
    let stats = relay.finish();
    assert_eq!((stats.resets, stats.closed), (1, 0));
}

#[test]
fn stop_resets_open_connections_and_returns() {
    let server = Server::start(echo);
    let relay = RunningRelay::start(relay_to(server.addr, WanProfile::new(ms(1), None)));
    let mut s = connect(relay.addr);
    assert_eq!(echo_through(&s, b"ping".to_vec()).0, b"ping");
    let stats = relay.finish();
    assert_eq!((stats.accepted, stats.resets), (1, 1));
    match s.read(&mut [0; 4]) {
        Ok(0) => {}
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset),
        Ok(n) => panic!("read {n} bytes after the relay stopped"),
    }
}
