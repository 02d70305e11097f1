//! `vargr emu`: the Longcut WAN emulator as a relay in front of any TCP program.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use vargr_emu::{
    fmt_bandwidth, fmt_duration, parse_bandwidth, parse_duration, run_relay, EventSink, LinkSpec,
    RelayConfig, Sharing, StopHandle, Trace, WanProfile,
};

#[derive(Args)]
pub struct EmuArgs {
    /// Address clients connect to (e.g. 127.0.0.1:7000; port 0 picks one).
    #[arg(long)]
    listen: String,
    /// The real server (host:port) each connection is relayed to.
    #[arg(long)]
    connect: String,
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

fn resolve(what: &str, s: &str) -> Result<SocketAddr> {
    s.to_socket_addrs()
        .with_context(|| format!("--{what} {s:?}: not a host:port"))?
        .next()
        .with_context(|| format!("--{what} {s:?}: resolves to no address"))
}

pub fn run(a: EmuArgs) -> Result<()> {
    let listen = resolve("listen", &a.listen)?;
    let connect = resolve("connect", &a.connect)?;
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
