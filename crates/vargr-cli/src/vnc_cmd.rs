//! `vargr vnc`: the command line of Varg, a VNC proxy pair that sends the screen
//! regions the viewers' side has seen as fingerprints (crate vargr-proxy, module vnc,
//! runs it; vargr-vnc holds the protocol).
//!
//! ```text
//! # both ends share a secret (or --secret-file FILE)
//! export VARGR_PROXY_SECRET=$(openssl rand -hex 32)
//! # beside the VNC server
//! vargr vnc --serve 0.0.0.0:7200 --forward 127.0.0.1:5901
//! # beside the viewers: point any VNC viewer at 127.0.0.1:5900
//! vargr vnc --listen 127.0.0.1:5900 --peer far.example:7200
//! ```

use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use vargr_dedup::segment::VargParams;
use vargr_proxy::{error_chain, VncEvent, VncProxy, VncSettings};
use vargr_vnc::{LinkConfig, RegionCut};

use crate::proxy_cmd::{parse_addr, PairArgs};

#[derive(Debug, Args)]
pub struct VncArgs {
    /// Near proxy: accept VNC viewers on HOST:PORT.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["serve", "forward"])]
    listen: Option<String>,
    /// Near proxy: the far proxy (HOST:PORT of its --serve).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "serve")]
    peer: Option<String>,
    /// Far proxy: accept the near proxy's links on HOST:PORT.
    #[arg(long, value_name = "ADDR")]
    serve: Option<String>,
    /// Far proxy: the VNC server (HOST:PORT, e.g. 127.0.0.1:5901 for display :1).
    #[arg(long, value_name = "HOST:PORT")]
    forward: Option<String>,
    /// Far proxy: file holding the VNC server's password (first line), if it asks.
    #[arg(long, value_name = "FILE")]
    server_password_file: Option<PathBuf>,
    /// Near proxy: viewers must give the password in FILE (first line); without it
    /// they connect with no authentication, so listen only where they are trusted.
    #[arg(long, value_name = "FILE")]
    viewer_password_file: Option<PathBuf>,
    /// How the far proxy cuts changed areas: varg (content-anchored regions, the
    /// default) or tiles (32-pixel tiles: less CPU, fewer repeats found).
    #[arg(long, default_value = "varg", value_name = "varg|tiles")]
    regions: String,
    /// Link bytes the far proxy may have in flight before the near proxy's credit:
    /// about the link's bandwidth × round trip; more only queues.
    #[arg(long, default_value = "64k", value_name = "BYTES")]
    window: String,
    /// Far proxy: record each session's server updates, timed, in a new file in DIR
    /// (for `vargr bench vnc --recordings DIR`).
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    /// End a connection whose peer (VNC server, viewer or the other proxy) has not
    /// finished its handshake, has sent part of a message and nothing more, or has
    /// taken none of what it was sent, for this long. Silence between messages (a
    /// still screen) is never timed out.
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    stall_timeout: String,
    /// Near proxy: most viewers at once; more are turned away.
    #[arg(long, default_value_t = 64, value_name = "N")]
    max_viewers: usize,
    #[command(flatten)]
    pair: PairArgs,
    #[command(flatten)]
    dedup: crate::sync_cmd::DedupArgs,
}

fn password(file: &Option<PathBuf>, flag: &str) -> Result<Option<Vec<u8>>> {
    let Some(f) = file else { return Ok(None) };
    let text = std::fs::read(f).with_context(|| format!("{flag} {}", f.display()))?;
    let line = text.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        bail!("{flag} {}: the first line is empty", f.display());
    }
    Ok(Some(line.to_vec()))
}

pub fn run(a: VncArgs, config: &vargr_config::Config) -> Result<()> {
    let d = a.dedup.settings(config, 9)?;
    let regions = match a.regions.as_str() {
        "varg" => RegionCut::Varg(VargParams::default()),
        "tiles" => RegionCut::Tiles,
        other => bail!("--regions {other:?}: expected varg or tiles"),
    };
    let window = vargr_emu::parse_size(&a.window).context("--window")?;
    let mut link = LinkConfig {
        window: window.max(1),
        zstd_level: d.zstd_level,
        ..LinkConfig::default()
    };
    link.dedup.bits = d.bits;
    link.dedup.group = d.group;
    let settings = VncSettings {
        secret: a.pair.secret()?,
        security: a.pair.link_security,
        name: a.pair.name(),
        cache_root: d.cache_root,
        cache: d.cache,
        link,
        regions,
        server_password: password(&a.server_password_file, "--server-password-file")?,
        viewer_password: password(&a.viewer_password_file, "--viewer-password-file")?,
        record: a.record.clone(),
        stall: vargr_emu::parse_duration(&a.stall_timeout).context("--stall-timeout")?,
        max_viewers: a.max_viewers.max(1),
    };
    let proxy = VncProxy::new(settings, Box::new(print_event));
    let on_signal = proxy.clone();
    let _ = ctrlc::set_handler(move || {
        on_signal.flush_caches();
        std::process::exit(130);
    });
    match (&a.serve, &a.listen) {
        (Some(serve), None) => {
            let forward = a
                .forward
                .as_deref()
                .ok_or_else(|| anyhow!("a far proxy (--serve) needs --forward VNC_HOST:PORT"))?;
            Ok(proxy.run_far(
                parse_addr("--serve", serve)?,
                parse_addr("--forward", forward)?,
            )?)
        }
        (None, Some(listen)) => {
            let peer = a
                .peer
                .as_deref()
                .ok_or_else(|| anyhow!("a near proxy (--listen) needs --peer FAR_HOST:PORT"))?;
            Ok(proxy.run_near(parse_addr("--listen", listen)?, parse_addr("--peer", peer)?)?)
        }
        _ => bail!(
            "say which end this is: --listen ADDR --peer FAR_HOST:PORT (near the viewers) \
             or --serve ADDR --forward VNC_HOST:PORT (near the VNC server)"
        ),
    }
}

/// One line on stderr per event.
fn print_event(e: VncEvent<'_>) {
    match e {
        VncEvent::Listening { local, peer } => {
            eprintln!("vargr vnc: listening on {local} for viewers, through {peer}")
        }
        VncEvent::Serving { local, forward } => {
            eprintln!("vargr vnc: serving on {local}, VNC server {forward}")
        }
        VncEvent::Refused { error } => eprintln!("vargr vnc: refused a link: {error}"),
        VncEvent::SetupFailed { error } => {
            eprintln!("vargr vnc: session failed to start: {}", error_chain(error))
        }
        VncEvent::ViewerJoined { id, from } => eprintln!("vargr vnc: viewer {id} from {from}"),
        VncEvent::ViewerRefused { from, reason } => {
            eprintln!("vargr vnc: turned away a viewer from {from}: {reason}")
        }
        VncEvent::ViewerLeft { id, error } => match error {
            None => eprintln!("vargr vnc: viewer {id} left"),
            Some(e) => eprintln!("vargr vnc: viewer {id} ended: {e}"),
        },
        VncEvent::SessionEnded(r) => {
            let outcome = match &r.error {
                None => "ended".to_string(),
                Some(e) => format!("failed ({e})"),
            };
            let tx = &r.sent;
            eprintln!(
                "vargr vnc: session {outcome}: {}; link {} B out, {} B in; {} regions, {} as \
                 fingerprints ({} predicted), {} resent on request; {:.2} s",
                r.route,
                r.link_out,
                r.link_in,
                tx.segments,
                tx.fingerprinted,
                tx.predicted,
                tx.requested,
                r.elapsed.as_secs_f64()
            );
        }
    }
    let _ = io::stderr().flush();
}
