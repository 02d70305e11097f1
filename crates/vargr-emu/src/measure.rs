//! How close the relay comes to the link it promises, measured on loopback.
//!
//! The targets are those of the seed's evaluation: ping-pong latency within 2 %
//! of the configured value (issue 30 asks it for one-way latencies of 1 ms and more),
//! bulk throughput within 3 % of the configured bandwidth, and the same latency with 2
//! and with 40 concurrent connections (seed figure 7). [`measure`] runs a relay in front of a local echo/sink server and reports those
//! numbers; `examples/accuracy.rs` prints them as JSON. It is a benchmark, not a test: the
//! numbers depend on the machine's load, so nothing here fails on a miss.
//!
//! Latency is reported one-way, as half the round trip (like PMB PingPong), and compared
//! with [`WanProfile::one_way`] for the message size. Throughput is measured at the
//! receiver, from its first read to its last, so the latency does not dilute it.
//!
//! Part of any measured error belongs to the host, not the emulator: a thread (and, in a
//! virtual machine, a whole virtual CPU) that has waited milliseconds for a message takes
//! tens of microseconds to wake when it comes, which a real WAN's receiver pays too. So
//! each client also measures that cost straight to the server, without the relay, with
//! the server holding each message for the link's latency so both ends idle as long as
//! they do behind the relay, alternating with the relayed ping-pong round by round so
//! both meet the same load; [`LatencyResult::emulator_error_pct`] subtracts it. The
//! relay's own account of how late it wrote each segment ([`RelayStats`]) is the
//! emulator's error without the host's part.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::error::EmuError;
use crate::profile::WanProfile;
use crate::relay::{Relay, RelayConfig, RelayStats, Sharing};
use crate::units::{fmt_bandwidth, fmt_duration};

const ECHO: u8 = b'e';
const SINK: u8 = b's';
/// Echo after holding each message for the time (ns) in its first 8 bytes.
const HOLD: u8 = b'h';
const WARMUP_ROUNDS: usize = 3;

/// What to measure.
#[derive(Debug, Clone)]
pub struct MeasureConfig {
    /// The link emulated in both directions.
    pub profile: WanProfile,
    /// One ping-pong run per entry, with that many concurrent connections.
    pub connections: Vec<usize>,
    /// Timed round trips per connection (after a short warm-up).
    pub rounds: usize,
    /// Ping-pong message size in bytes.
    pub message_bytes: usize,
    /// Bytes sent in the bulk run; 0 skips it.
    pub bulk_bytes: usize,
    /// Bandwidth sharing in the relay.
    pub sharing: Sharing,
    /// The relay's busy-poll margin ([`RelayConfig::spin`]).
    pub spin: Duration,
}

impl MeasureConfig {
    /// Ping-pong with 2 and 40 connections, 30 rounds of 8 bytes, and a bulk run of about
    /// one second of the link's bandwidth (1 MiB if unlimited).
    pub fn new(profile: WanProfile) -> MeasureConfig {
        let bulk_bytes = match profile.bandwidth_bits_per_s {
            Some(bw) => ((bw / 8) as usize).clamp(256 << 10, 128 << 20),
            None => 1 << 20,
        };
        MeasureConfig {
            profile,
            connections: vec![2, 40],
            rounds: 30,
            message_bytes: 8,
            bulk_bytes,
            sharing: Sharing::Shared,
            spin: RelayConfig::DEFAULT_SPIN,
        }
    }
}

/// One ping-pong run.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyResult {
    /// Concurrent connections through the relay.
    pub connections: usize,
    /// Round trips timed, over all connections.
    pub samples: usize,
    /// What the profile promises for one message, one way.
    pub expected: Duration,
    /// Mean of half the round-trip times.
    pub mean: Duration,
    /// Median of half the round-trip times.
    pub median: Duration,
    /// Largest half round-trip time.
    pub max: Duration,
    /// `(mean - expected) / expected`, in percent.
    pub error_pct: f64,
    /// Whether the mean is within 2 % of the expected value.
    pub within_target: bool,
    /// The host's own mean one-way time for a message after idling about as long as the
    /// latency (measured without the relay; see the [module docs](self)).
    pub host_overhead: Duration,
    /// `(mean - host_overhead - expected) / expected`, in percent: the emulator's share.
    pub emulator_error_pct: f64,
    /// Whether the emulator's share is within 2 %.
    pub emulator_within_target: bool,
}

/// The bulk run.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputResult {
    /// Bytes sent.
    pub bytes: usize,
    /// The configured bandwidth.
    pub expected_bits_per_s: u64,
    /// What the receiver saw.
    pub measured_bits_per_s: f64,
    /// `(measured - expected) / expected`, in percent.
    pub error_pct: f64,
    /// Whether the error is within 3 %.
    pub within_target: bool,
}

/// Everything [`measure`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct AccuracyReport {
    /// The profile measured.
    pub profile: WanProfile,
    /// One entry per ping-pong run.
    pub latency: Vec<LatencyResult>,
    /// The bulk run, if the profile has a bandwidth limit and bulk bytes were asked for.
    pub throughput: Option<ThroughputResult>,
    /// The relay's own account (its lateness is the part of the error it caused).
    pub relay: RelayStats,
}

impl AccuracyReport {
    /// The report as one JSON object (times in microseconds).
    pub fn to_json(&self) -> String {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let latency: Vec<String> = self
            .latency
            .iter()
            .map(|l| {
                format!(
                    "{{\"connections\":{},\"samples\":{},\"expected_us\":{:.1},\"mean_us\":{:.1},\
                     \"median_us\":{:.1},\"max_us\":{:.1},\"error_pct\":{:.3},\"within_target\":{},\
                     \"host_overhead_us\":{:.1},\"emulator_error_pct\":{:.3},\
                     \"emulator_within_target\":{}}}",
                    l.connections,
                    l.samples,
                    us(l.expected),
                    us(l.mean),
                    us(l.median),
                    us(l.max),
                    l.error_pct,
                    l.within_target,
                    us(l.host_overhead),
                    l.emulator_error_pct,
                    l.emulator_within_target,
                )
            })
            .collect();
        let throughput = match &self.throughput {
            Some(t) => format!(
                "{{\"bytes\":{},\"expected_bps\":{},\"measured_bps\":{:.0},\"error_pct\":{:.3},\
                 \"within_target\":{}}}",
                t.bytes, t.expected_bits_per_s, t.measured_bits_per_s, t.error_pct, t.within_target
            ),
            None => "null".into(),
        };
        format!(
            "{{\"latency_one_way\":\"{}\",\"bandwidth\":\"{}\",\"jitter\":\"{}\",\
             \"pingpong\":[{}],\"throughput\":{},\"relay\":{{\"realtime\":{},\"deliveries\":{},\
             \"lateness_mean_us\":{:.1},\"lateness_p50_below_us\":{:.0},\
             \"lateness_p99_below_us\":{:.0},\"lateness_max_us\":{:.1}}}}}",
            fmt_duration(self.profile.latency),
            fmt_bandwidth(self.profile.bandwidth_bits_per_s),
            fmt_duration(self.profile.jitter),
            latency.join(","),
            throughput,
            self.relay.realtime,
            self.relay.deliveries,
            us(self.relay.lateness_mean()),
            us(self.relay.lateness_quantile(0.5)),
            us(self.relay.lateness_quantile(0.99)),
            us(self.relay.lateness_max),
        )
    }
}

/// Runs a relay with `cfg.profile` in front of a local server and measures it.
pub fn measure(cfg: &MeasureConfig) -> Result<AccuracyReport, EmuError> {
    let server = Server::start()?;
    let mut relay_cfg = RelayConfig::new(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        server.addr,
        cfg.profile,
    );
    relay_cfg.sharing = cfg.sharing;
    relay_cfg.spin = cfg.spin;
    let relay = Relay::bind(relay_cfg)?;
    let addr = relay.local_addr();
    let stop = relay.stop_handle();
    let relay_thread = thread::spawn(move || relay.run());

    let result = (|| -> io::Result<_> {
        let mut latency = Vec::new();
        for &n in &cfg.connections {
            let (host, relayed) = ping_pong(server.addr, addr, cfg, n)?;
            latency.push(latency_result(cfg, n, &relayed, mean(&host)));
        }
        let throughput = match cfg.profile.bandwidth_bits_per_s {
            Some(bw) if cfg.bulk_bytes > 0 => Some(bulk(addr, &server, cfg.bulk_bytes, bw)?),
            _ => None,
        };
        Ok((latency, throughput))
    })();

    stop.stop();
    let relay_stats = relay_thread.join().expect("relay thread panicked")?;
    server.stop();
    let (latency, throughput) = result?;
    Ok(AccuracyReport {
        profile: cfg.profile,
        latency,
        throughput,
        relay: relay_stats,
    })
}

/// One-way times (half round trips) of `cfg.rounds` ping-pongs on each of `n` concurrent
/// connections through the relay at `relay`, and as many straight to the server at
/// `direct`, which holds each message for the link's latency (left out of the time), so
/// that both ends idle as long as behind the relay. Each client
/// alternates the two, round by round, so that both see the machine in the same state:
/// the host's share is measured beside the relay's, not before it. Both sorted.
fn ping_pong(
    direct: SocketAddr,
    relay: SocketAddr,
    cfg: &MeasureConfig,
    n: usize,
) -> io::Result<(Vec<Duration>, Vec<Duration>)> {
    let barrier = Arc::new(Barrier::new(n));
    let rounds = cfg.rounds;
    let hold = cfg.profile.latency;
    type Samples = (Vec<Duration>, Vec<Duration>);
    let clients: Vec<JoinHandle<io::Result<Samples>>> = (0..n)
        .map(|_| {
            let barrier = barrier.clone();
            let size = cfg.message_bytes;
            thread::spawn(move || {
                let mut held = TcpStream::connect(direct)?;
                held.set_nodelay(true)?;
                let held_size = size.max(8);
                held.write_all(&[HOLD])?;
                held.write_all(&(held_size as u32).to_le_bytes())?;
                let mut held_msg = vec![0x5a; held_size];
                held_msg[..8].copy_from_slice(&(hold.as_nanos() as u64).to_le_bytes());
                let mut relayed = TcpStream::connect(relay)?;
                relayed.set_nodelay(true)?;
                relayed.write_all(&[ECHO])?;
                let msg = vec![0x5a; size.max(1)];
                let mut back = vec![0; held_size.max(msg.len())];
                // Start together so the connections really overlap.
                barrier.wait();
                let (mut host, mut through) =
                    (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
                for round in 0..WARMUP_ROUNDS + rounds {
                    let t = Instant::now();
                    held.write_all(&held_msg)?;
                    held.read_exact(&mut back[..held_size])?;
                    // Less the hold asked for, not the hold spent: waking from it late
                    // (behind the other connections' threads) is the host's cost, as
                    // the relayed server's waking when the relay delivers is.
                    let host_rtt = t.elapsed().saturating_sub(hold);
                    let t = Instant::now();
                    relayed.write_all(&msg)?;
                    relayed.read_exact(&mut back[..msg.len()])?;
                    let relayed_rtt = t.elapsed();
                    if round >= WARMUP_ROUNDS {
                        host.push(host_rtt / 2);
                        through.push(relayed_rtt / 2);
                    }
                }
                Ok((host, through))
            })
        })
        .collect();
    let (mut host, mut relayed) = (Vec::new(), Vec::new());
    for c in clients {
        let (h, r) = c.join().expect("ping-pong client panicked")?;
        host.extend(h);
        relayed.extend(r);
    }
    host.sort();
    relayed.sort();
    Ok((host, relayed))
}

fn mean(samples: &[Duration]) -> Duration {
    samples.iter().sum::<Duration>() / samples.len().max(1) as u32
}

/// Compares sorted relayed samples with the model and the host's own overhead.
fn latency_result(
    cfg: &MeasureConfig,
    n: usize,
    samples: &[Duration],
    host_overhead: Duration,
) -> LatencyResult {
    let expected = cfg.profile.one_way(cfg.message_bytes.max(1));
    let mean = mean(samples);
    let pct = |diff: f64| {
        if expected.is_zero() {
            0.0
        } else {
            100.0 * diff / expected.as_secs_f64()
        }
    };
    let diff = mean.as_secs_f64() - expected.as_secs_f64();
    let emulator_diff = diff - host_overhead.as_secs_f64();
    LatencyResult {
        connections: n,
        samples: samples.len(),
        expected,
        mean,
        median: samples.get(samples.len() / 2).copied().unwrap_or_default(),
        max: samples.last().copied().unwrap_or_default(),
        error_pct: pct(diff),
        within_target: pct(diff).abs() <= 2.0,
        host_overhead,
        emulator_error_pct: pct(emulator_diff),
        emulator_within_target: pct(emulator_diff).abs() <= 2.0,
    }
}

fn bulk(addr: SocketAddr, server: &Server, bytes: usize, bw: u64) -> io::Result<ThroughputResult> {
    let mut s = TcpStream::connect(addr)?;
    s.write_all(&[SINK])?;
    let chunk = vec![0xa5; 64 << 10];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        s.write_all(&chunk[..n])?;
        left -= n;
    }
    s.shutdown(Shutdown::Write)?;
    let seen = server
        .sink_results
        .recv_timeout(Duration::from_secs(600))
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the sink never finished"))?;
    let measured = seen.bytes_after_first as f64 * 8.0 / seen.span.as_secs_f64().max(1e-9);
    let error_pct = 100.0 * (measured - bw as f64) / bw as f64;
    Ok(ThroughputResult {
        bytes,
        expected_bits_per_s: bw,
        measured_bits_per_s: measured,
        error_pct,
        within_target: error_pct.abs() <= 3.0,
    })
}

/// What the sink saw: bytes after its first read, over the time to its last read.
struct SinkResult {
    bytes_after_first: u64,
    span: Duration,
}

/// A loopback server: the first byte of a connection picks echo or sink.
struct Server {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    acceptor: JoinHandle<()>,
    sink_results: mpsc::Receiver<SinkResult>,
}

impl Server {
    fn start() -> io::Result<Server> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stopping = Arc::new(AtomicBool::new(false));
        let (tx, sink_results) = mpsc::channel();
        let stop = stopping.clone();
        let acceptor = thread::spawn(move || {
            let mut workers = Vec::new();
            for conn in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let tx = tx.clone();
                workers.push(thread::spawn(move || {
                    let _ = serve(conn, &tx);
                }));
            }
            for w in workers {
                let _ = w.join();
            }
        });
        Ok(Server {
            addr,
            stopping,
            acceptor,
            sink_results,
        })
    }

    fn stop(self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect(self.addr);
        let _ = self.acceptor.join();
    }
}

fn serve(mut conn: TcpStream, results: &mpsc::Sender<SinkResult>) -> io::Result<()> {
    conn.set_nodelay(true)?;
    let mut mode = [0u8];
    conn.read_exact(&mut mode)?;
    let mut buf = vec![0u8; 64 << 10];
    match mode[0] {
        ECHO => loop {
            let n = conn.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            conn.write_all(&buf[..n])?;
        },
        HOLD => {
            let mut size = [0u8; 4];
            conn.read_exact(&mut size)?;
            let mut msg = vec![0u8; (u32::from_le_bytes(size) as usize).max(8)];
            // The kernel's default timer slack (50 µs) would make every hold late.
            let _slack = vargr_timer::SlackGuard::minimal();
            loop {
                match conn.read_exact(&mut msg) {
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                    other => other?,
                }
                let hold = u64::from_le_bytes(msg[..8].try_into().expect("8 bytes"));
                thread::sleep(Duration::from_nanos(hold));
                conn.write_all(&msg)?;
            }
        }
        SINK => {
            let (mut first, mut last, mut after_first) = (None, None, 0u64);
            loop {
                let n = conn.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                let now = Instant::now();
                match first {
                    None => first = Some(now),
                    Some(_) => after_first += n as u64,
                }
                last = Some(now);
            }
            let span = match (first, last) {
                (Some(f), Some(l)) => l - f,
                _ => Duration::ZERO,
            };
            let _ = results.send(SinkResult {
                bytes_after_first: after_first,
                span,
            });
            Ok(())
        }
        _ => Ok(()),
    }
}
