//! `vargr proxy`: the command line of a pair of WAN accelerators for any TCP stream
//! (crate vargr-proxy holds the protocol, its driver and both ends).
//!
//! ```text
//!  client ──tcp──▶ near proxy ══════ link (dedup + zstd) ══════▶ far proxy ──tcp──▶ server
//!                  --listen ADDR[=SEG]  --peer FAR              --serve ADDR  --forward [PORT=]HOST:PORT
//! ```
//!
//! ```text
//! # both ends share a secret (or --secret-file FILE)
//! export VARGR_PROXY_SECRET=$(openssl rand -hex 32)
//! # near the server: connections from near proxies go to the server
//! vargr proxy --serve 0.0.0.0:7100 --forward app.example:80
//! # near the clients: one port per service, each with its segmenter
//! vargr proxy --peer far.example:7100 --listen 127.0.0.1:8080 \
//!     --listen 127.0.0.1:5901=cdc:32:128:1k
//! ```
//!
//! Every connection prints one line on stderr when it ends: application and link bytes
//! in each direction and what the protocol did, e.g.
//! `vargr proxy: connection 3 closed: from app 4194304 B → link 101234 B, from link 812 B → app 0 B; ...`.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use vargr_net::auth::Secret;
use vargr_net::Addr;
use vargr_proxy::{error_chain, Event, Forwards, Listen, Proxy, ProxySettings, PumpSettings};

/// What both ends of a proxy pair (`vargr proxy`, `vargr vnc`) need to find each other.
#[derive(Debug, Args)]
pub struct PairArgs {
    /// File holding the proxies' shared secret (hex); default `$VARGR_PROXY_SECRET`.
    #[arg(long)]
    pub secret_file: Option<PathBuf>,
    /// Protection of the link after its handshake: auto (MACs on loopback, encryption
    /// to other hosts), mac (authenticated, clear text) or encrypt.
    #[arg(long, default_value = "auto", value_name = "auto|mac|encrypt")]
    pub link_security: vargr_net::LinkSecurity,
    /// How this proxy names itself to its peer (the peer's cache of it); default the
    /// host name.
    #[arg(long)]
    pub name: Option<String>,
}

impl PairArgs {
    pub fn secret(&self) -> Result<Secret> {
        secret(&self.secret_file)
    }

    pub fn name(&self) -> String {
        self.name.clone().unwrap_or_else(vargr_sync::host_name)
    }
}

#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Near proxy: accept application connections on HOST:PORT, optionally with the
    /// segmenter for that port (`127.0.0.1:5900=cdc:64:256:2k`); repeat for more ports.
    #[arg(long, value_name = "ADDR[=SEGMENTER]", conflicts_with_all = ["serve", "forward"])]
    listen: Vec<String>,
    /// Near proxy: the far proxy (HOST:PORT of its --serve).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "serve")]
    peer: Option<String>,
    /// Far proxy: accept the near proxy's connections on HOST:PORT.
    #[arg(long, value_name = "ADDR")]
    serve: Option<String>,
    /// Far proxy: the server each connection goes to: HOST:PORT for every port, or
    /// PORT=HOST:PORT for connections the near proxy accepted on PORT; repeatable.
    #[arg(long, value_name = "[PORT=]HOST:PORT")]
    forward: Vec<String>,
    /// Segmenter of the ports given without one (cdc:MIN:AVG:MAX, static:SIZE, sw).
    #[arg(long, default_value = "cdc:64:256:2k")]
    segmenter: String,
    #[command(flatten)]
    pair: PairArgs,
    /// When the application pauses, wait this long for more bytes before sending the
    /// tail (0: at once). A source slower than the proxy pauses between packets, and
    /// every cut there costs about a segment of redundancy; a few ms avoid most of them
    /// at that cost in latency.
    #[arg(long, default_value = "0ms", value_name = "DURATION")]
    hold: String,
    #[command(flatten)]
    dedup: crate::sync_cmd::DedupArgs,
}

pub fn run(a: ProxyArgs, config: &vargr_config::Config) -> Result<()> {
    let d = a.dedup.settings(config, 3)?;
    let hold = vargr_emu::parse_duration(&a.hold).context("--hold")?;
    let settings = ProxySettings {
        secret: a.pair.secret()?,
        security: a.pair.link_security,
        name: a.pair.name(),
        pump: PumpSettings {
            bits: d.bits,
            group: d.group,
            zstd_level: d.zstd_level,
            hold,
        },
        cache_root: d.cache_root,
        cache: d.cache,
    };
    let forward = a.forward.join(", ");
    let proxy = Proxy::new(settings, Box::new(move |e| print_event(&e, &forward)));
    // Buffered cache records reach the disk on Ctrl-C and SIGTERM too.
    let on_signal = proxy.clone();
    let _ = ctrlc::set_handler(move || {
        on_signal.flush_caches();
        std::process::exit(130);
    });
    match (&a.serve, a.listen.is_empty()) {
        (Some(serve), true) => {
            let forwards = parse_forwards(&a.forward)?;
            Ok(proxy.run_far(parse_addr("--serve", serve)?, forwards)?)
        }
        (None, false) => {
            let peer = a
                .peer
                .as_deref()
                .ok_or_else(|| anyhow!("a near proxy (--listen) needs --peer FAR_HOST:PORT"))?;
            let peer = parse_addr("--peer", peer)?;
            let listen = a
                .listen
                .iter()
                .map(|l| parse_listen(l, &a.segmenter))
                .collect::<Result<Vec<_>>>()?;
            Ok(proxy.run_near(listen, peer)?)
        }
        _ => bail!(
            "say which end this is: --listen ADDR --peer FAR_HOST:PORT (near the clients) \
             or --serve ADDR --forward HOST:PORT (near the server)"
        ),
    }
}

/// One line on stderr per event.
fn print_event(e: &Event<'_>, forward: &str) {
    match e {
        Event::Listening {
            local,
            segmenter,
            peer,
        } => eprintln!(
            "vargr proxy: listening on {local} (segmenter {segmenter}), carrying connections \
             to {peer}"
        ),
        Event::Serving { local } => {
            eprintln!("vargr proxy: serving on {local}, forwarding to {forward}")
        }
        Event::Refused { error } => eprintln!("vargr proxy: refused a connection: {error}"),
        Event::SetupFailed { id, app, error } => eprintln!(
            "vargr proxy: connection {id} from {app} failed: {}",
            error_chain(*error)
        ),
        Event::FarRefused { id, near, error } => eprintln!(
            "vargr proxy: connection {id} from {near} refused: {}",
            error_chain(*error)
        ),
        Event::StartFailed { id, route, error } => eprintln!(
            "vargr proxy: connection {id} failed to start: {route}: {}",
            error_chain(*error)
        ),
        Event::Closed(r) => {
            let outcome = match &r.error {
                None => "closed".to_string(),
                Some(e) => format!("failed ({e})"),
            };
            let tx = &r.sent;
            eprintln!(
                "vargr proxy: connection {} {outcome}: from app {} B → link {} B, from link {} B \
                 → app {} B; {} segments sent, {} as fingerprints, {} as deltas, {} resent on \
                 request, {} named by prediction; {} ({}), {:.2} s",
                r.id,
                r.app_in,
                r.link_out,
                r.link_in,
                r.app_out,
                tx.segments,
                tx.fingerprinted,
                tx.deltas,
                tx.requested,
                tx.predicted,
                r.route,
                r.segmenter,
                r.elapsed.as_secs_f64()
            );
        }
    }
    let _ = io::stderr().flush();
}

/// `HOST:PORT`, `tcp:HOST:PORT` or `unix:/path`.
pub(crate) fn parse_addr(flag: &str, s: &str) -> Result<Addr> {
    let full = if s.starts_with("tcp:") || s.starts_with("unix:") {
        s.to_string()
    } else {
        format!("tcp:{s}")
    };
    full.parse()
        .with_context(|| format!("{flag} {s:?}: expected HOST:PORT"))
}

/// `--listen ADDR[=SEGMENTER]`.
fn parse_listen(l: &str, default_seg: &str) -> Result<Listen> {
    let (addr, seg) = match l.split_once('=') {
        Some((a, s)) => (a, s),
        None => (l, default_seg),
    };
    vargr_proxy::pump::stream_segmenter(seg).with_context(|| format!("--listen {l:?}"))?;
    Ok(Listen {
        addr: parse_addr("--listen", addr)?,
        segmenter: seg.to_string(),
    })
}

/// `--forward [PORT=]HOST:PORT`, repeated.
fn parse_forwards(list: &[String]) -> Result<Forwards> {
    let mut f = Forwards {
        by_port: HashMap::new(),
        default: None,
    };
    if list.is_empty() {
        bail!("a far proxy (--serve) needs --forward HOST:PORT: the server to connect to");
    }
    for s in list {
        match s.split_once('=') {
            Some((port, target)) => {
                let port: u16 = port.trim().parse().map_err(|_| {
                    anyhow!("--forward {s:?}: {port:?} is not a port; expected PORT=HOST:PORT")
                })?;
                let addr = parse_addr("--forward", target)?;
                if f.by_port.insert(port, addr).is_some() {
                    bail!("--forward {s:?}: port {port} is forwarded twice");
                }
            }
            None => {
                if f.default.is_some() {
                    bail!(
                        "--forward {s:?}: a second target for every port; use \
                         PORT=HOST:PORT to forward by the near proxy's port"
                    );
                }
                f.default = Some(parse_addr("--forward", s)?);
            }
        }
    }
    Ok(f)
}

fn secret(file: &Option<PathBuf>) -> Result<Secret> {
    let hex = match file {
        Some(f) => std::fs::read_to_string(f)
            .with_context(|| format!("reading the secret from {}", f.display()))?,
        None => std::env::var("VARGR_PROXY_SECRET").map_err(|_| {
            anyhow!(
                "the proxies need a shared secret: --secret-file FILE or $VARGR_PROXY_SECRET \
                 (64 hex digits, the same on both)"
            )
        })?,
    };
    Secret::from_hex(hex.trim()).context("the proxy secret")
}
