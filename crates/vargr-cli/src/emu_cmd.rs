//! `vargr emu`: the Longcut WAN emulator as a relay in front of any TCP program;
//! `vargr emu record` measures a real path into a trace it replays, against the
//! `vargr emu echo` server at the far end.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use vargr_emu::record::{EchoServer, RecordConfig};
use vargr_emu::{
    fmt_bandwidth, fmt_duration, parse_bandwidth, parse_duration, parse_size, run_relay, EventSink,
    LinkSpec, RelayConfig, Sharing, StopHandle, Trace, WanProfile,
};

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct EmuArgs {
    #[command(subcommand)]
    cmd: Option<EmuCmd>,
    /// Address clients connect to (e.g. 127.0.0.1:7000; port 0 picks one).
    #[arg(long, required = true)]
    listen: Option<String>,
    /// The real server (host:port) each connection is relayed to.
    #[arg(long, required = true)]
    connect: Option<String>,
    /// One-way delay per direction (36ms, 500us); a ping-pong costs twice this.
    #[arg(long, conflicts_with = "rtt")]
    latency: Option<String>,
    /// Round-trip time instead of --latency (half of it each way), as WAN tables quote it.
    #[arg(long)]
    rtt: Option<String>,
    /// Bottleneck bandwidth per direction (100mbit, 1gbit, 10MB/s); default unlimited.
    #[arg(long)]
    bandwidth: Option<String>,
    /// Random extra delay up to this much, never reordering a connection's bytes.
    #[arg(long)]
    jitter: Option<String>,
    /// Replay (time, latency, bandwidth) rows from this file instead of constants.
    #[arg(long, conflicts_with_all = ["latency", "rtt", "bandwidth"])]
    trace: Option<String>,
    /// Give every connection the full bandwidth instead of sharing one bottleneck.
    #[arg(long)]
    per_connection: bool,
    /// Seed for the jitter.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run the relay at the normal priority. By default it asks for real-time
    /// scheduling (SCHED_FIFO, when the user may), so that the programs it serves
    /// cannot delay its deliveries on a loaded machine.
    #[arg(long)]
    no_realtime: bool,
}

#[derive(Subcommand)]
enum EmuCmd {
    /// Measure a real path into a trace that `--trace FILE` and `--wan trace=FILE`
    /// replay: every interval, small ping-pongs (latency) and a bulk probe (bandwidth)
    /// to a `vargr emu echo` server at the far end.
    Record(RecordArgs),
    /// The far end of `vargr emu record`: echoes its pings and times its bulk probes.
    Echo {
        /// Address to listen on (port 0 picks one; the address is printed).
        #[arg(long)]
        listen: String,
    },
}

#[derive(Args)]
struct RecordArgs {
    /// The `vargr emu echo` server (host:port), or a relay in front of one.
    #[arg(long)]
    connect: String,
    /// Where to write the trace (default: standard output).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// How long to record, in seconds.
    #[arg(long, default_value_t = 60.0)]
    seconds: f64,
    /// Time between samples (1s, 250ms).
    #[arg(long, default_value = "1s")]
    interval: String,
    /// Ping-pongs per sample; the latency is half their median round trip.
    #[arg(long, default_value_t = 5)]
    pings: usize,
    /// Bytes of each bulk probe (256k, 1m); 0 records latency only.
    #[arg(long, default_value = "256k")]
    probe_bytes: String,
    /// The longest a probe may wait for the path.
    #[arg(long, default_value = "30s")]
    timeout: String,
}

fn resolve(what: &str, s: &str) -> Result<SocketAddr> {
    s.to_socket_addrs()
        .with_context(|| format!("--{what} {s:?}: not a host:port"))?
        .next()
        .with_context(|| format!("--{what} {s:?}: resolves to no address"))
}

pub fn run(a: EmuArgs) -> Result<()> {
    match a.cmd {
        Some(EmuCmd::Record(r)) => return record(r),
        Some(EmuCmd::Echo { listen }) => return echo(&listen),
        None => {}
    }
    let (Some(listen), Some(connect)) = (&a.listen, &a.connect) else {
        bail!("give --listen and --connect (or a subcommand: record, echo)");
    };
    let listen = resolve("listen", listen)?;
    let connect = resolve("connect", connect)?;
    let jitter = match &a.jitter {
        Some(j) => parse_duration(j).context("--jitter")?,
        None => std::time::Duration::ZERO,
    };
    let (spec, described): (LinkSpec, String) = match &a.trace {
        Some(path) => {
            let trace = Trace::load(std::path::Path::new(path))?;
            let d = format!("trace {path}");
            (
                LinkSpec::Trace {
                    trace: Arc::new(trace),
                    jitter,
                },
                d,
            )
        }
        None => {
            let bw = match &a.bandwidth {
                Some(b) => parse_bandwidth(b).context("--bandwidth")?,
                None => None,
            };
            let profile = match (&a.latency, &a.rtt) {
                (Some(l), _) => WanProfile::new(parse_duration(l).context("--latency")?, bw),
                (None, Some(r)) => WanProfile::from_rtt(parse_duration(r).context("--rtt")?, bw),
                (None, None) => bail!("give --latency, --rtt or --trace"),
            }
            .with_jitter(jitter);
            let d = format!(
                "{} one way, {}",
                fmt_duration(profile.latency),
                fmt_bandwidth(bw)
            );
            (LinkSpec::Constant(profile), d)
        }
    };
    let mut cfg = RelayConfig::new(listen, connect, spec);
    cfg.seed = a.seed;
    cfg.realtime = !a.no_realtime;
    if a.per_connection {
        cfg.sharing = Sharing::PerConnection;
    }
    cfg.events = Some(EventSink::new(|e| eprintln!("vargr emu: {e}")));
    let stop = StopHandle::new();
    let s2 = stop.clone();
    ctrlc::set_handler(move || s2.stop()).context("installing the Ctrl-C handler")?;
    eprintln!("vargr emu: {listen} -> {connect} ({described}); Ctrl-C stops");
    let stats = run_relay(cfg, stop)?;
    println!(
        "connections {}  failed {}  bytes forward {}  backward {}  mean lateness {}",
        stats.accepted,
        stats.connect_failures,
        stats.forward_bytes,
        stats.backward_bytes,
        fmt_duration(stats.lateness_mean())
    );
    Ok(())
}

fn record(a: RecordArgs) -> Result<()> {
    let target = resolve("connect", &a.connect)?;
    if !(a.seconds.is_finite() && a.seconds > 0.0) {
        bail!("--seconds {}: give a positive number", a.seconds);
    }
    let mut cfg = RecordConfig::new(target, std::time::Duration::from_secs_f64(a.seconds));
    cfg.interval = parse_duration(&a.interval).context("--interval")?;
    cfg.pings = a.pings.max(1);
    cfg.probe_bytes = usize::try_from(parse_size(&a.probe_bytes).context("--probe-bytes")?)
        .context("--probe-bytes")?;
    cfg.timeout = parse_duration(&a.timeout).context("--timeout")?;
    eprintln!(
        "vargr emu record: {target} for {}s, a sample every {}",
        a.seconds,
        fmt_duration(cfg.interval)
    );
    let trace = vargr_emu::record::record(&cfg, |r| {
        let bw = match r.bandwidth_bits_per_s {
            Some(b) => format!("{:.3} Mbit/s", b as f64 / 1e6),
            None => "-".into(),
        };
        eprintln!(
            "  {:>8.3} s  latency {:>9.3} ms  bandwidth {bw}",
            r.at.as_secs_f64(),
            r.latency.as_secs_f64() * 1e3,
        )
    })?;
    let text = format!(
        "# recorded by vargr emu record from {target}: one-way latency (half the median \
         of {} ping-pongs) and the bandwidth of a {}-byte probe\n{}",
        cfg.pings,
        cfg.probe_bytes,
        trace.to_text()
    );
    match &a.out {
        Some(p) => std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

fn echo(listen: &str) -> Result<()> {
    let server = EchoServer::start(resolve("listen", listen)?)?;
    eprintln!(
        "vargr emu echo: listening on {}; Ctrl-C stops",
        server.local_addr()
    );
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .context("installing the Ctrl-C handler")?;
    // Waits for Ctrl-C (or SIGTERM) for as long as the user wants it to serve.
    let _ = rx.recv();
    server.stop();
    Ok(())
}
