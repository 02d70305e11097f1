//! `vargr proxy`: a pair of WAN accelerators for any TCP stream (the seed's Canidae as a
//! proxy, issue 6).
//!
//! ```text
//!  client ──tcp──▶ near proxy ══════ link (dedup + zstd) ══════▶ far proxy ──tcp──▶ server
//!                  --listen ADDR[=SEG]  --peer FAR              --serve ADDR  --forward [PORT=]HOST:PORT
//! ```
//!
//! The near proxy accepts application connections and carries each over a TCP
//! connection of its own to the far proxy, which connects it to the real server. Both
//! directions cross as the two-level fingerprint protocol of `vargr-dedup`: on each side
//! a [`Sender`] for the bytes going out and a [`Receiver`] for the bytes coming in, so a
//! segment either proxy has seen before, in either direction and on any connection to
//! or from the same peer, costs a fingerprint. The segment caches persist across runs
//! (`--cache-dir`, like `vargr sync`), one per peer proxy and role
//! (`proxy-to-NAME` at the near side, `proxy-from-NAME` at the far side), opened once per
//! process and shared by every connection through [`SharedCache`].
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
//! With several services, the far proxy picks the server by the near proxy's port:
//! `--forward 8080=app.example:80 --forward 5901=desk.example:5901`.
//!
//! A link connection runs, in order: the HMAC handshake of [`vargr_net::auth`] (a wrong
//! secret is refused and the connection closed; after it every byte travels in records
//! sealed with the connection's session keys, MACs on loopback and encryption to other
//! hosts by default, `--link-security`), a hello from the near proxy (its name,
//! the port the application connected to, the segmenter chosen for that port,
//! fingerprint width, group size), the far proxy's welcome (its name) or an abort with
//! the reason, then frames `[kind u8][len u32 LE][body]` in both directions:
//!
//! | kind | body |
//! |---|---|
//! | `DATA` | this side's sender output: the next piece of this direction's zstd stream, flushed ([`vargr_sync::zpieces`]) |
//! | `REPLY` | this side's receiver output: requests and acknowledgements |
//! | `CREDIT` | u64: application bytes this side has written to its application so far |
//! | `ABORT` | why this side gave up; the other closes its application connection with a reset |
//!
//! Inside the dedup stream, channel 0 carries application bytes and an empty message on
//! channel 1 is the end of the stream (the application shut its write side): the other
//! side shuts the write side of its application socket once everything before it is
//! written, and the other direction keeps running until it ends too.
//!
//! Design choices, and why:
//! - *Streaming cuts.* Bytes are cut with [`Segmenter::boundaries`] as they arrive; when
//!   the application pauses (a read would block) the tail goes out as a last segment and
//!   the sender's group is closed ([`Sender::flush`]), so an interactive protocol never
//!   waits for more bytes that are not coming. A forced cut costs about a segment of
//!   redundancy (content-defined boundaries resynchronise right after it), which adds
//!   up when the source is slower than the proxy and pauses between packets: a
//!   repeated 4 MiB download from a 40 Mbit/s server crossed in 358 KB instead of the
//!   92 KB of a fast one. `--hold 3ms` waits that long for more bytes before cutting a
//!   tail (202 KB there), at that cost in latency; the default holds nothing.
//! - *One thread per connection, poll(2) over two non-blocking sockets.* A blocking
//!   write on either socket could otherwise stall the acknowledgements of the other
//!   direction and deadlock two proxies writing to each other.
//! - *Credit flow control per direction.* A side sends application bytes only while
//!   fewer than [`WINDOW`] of them are not yet written to the far application, so the
//!   link is always read (acknowledgements keep flowing) and neither side buffers more
//!   than about a window for a slow application: as with plain TCP, one direction may
//!   stall while the other runs.
//! - *One zstd stream per direction, cut into pieces.* Each DATA frame is flushed so it
//!   decodes on arrival, yet compresses against everything before it: small interactive
//!   writes (a request line, a keystroke) cost little once their like has crossed.
//! - *Errors are not clean ends.* A failure (the other proxy died, a reset from an
//!   application, bad bytes from the peer) closes the application connection with a
//!   TCP reset, so a client never mistakes a broken transfer for a complete one. TCP
//!   keep-alives and `TCP_USER_TIMEOUT` on the link turn a vanished peer into an error.
//!
//! Every connection prints one line on stderr when it ends: application and link bytes
//! in each direction and what the protocol did, e.g.
//! `vargr proxy: connection 3 closed: from app 4194304 B → link 101234 B, from link 812 B → app 0 B; ...`.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use vargr_dedup::cache::{DiskCache, DiskConfig, SharedCache};
use vargr_dedup::similar::SimilarityIndex;
use vargr_dedup::stream::StreamModel;
use vargr_dedup::{Config, FpBits, Receiver, Segmenter, Sender};
use vargr_net::auth::Secret;
use vargr_net::gate::{Gate, GateConfig};
use vargr_net::{Addr, Conn, Listener, RecordOpener, RecordSealer};
use vargr_sync::zpieces::{PieceDecoder, PieceEncoder};

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
    /// File holding the proxies' shared secret (hex); default `$VARGR_PROXY_SECRET`.
    #[arg(long)]
    secret_file: Option<PathBuf>,
    /// Protection of the link after its handshake: auto (MACs on loopback, encryption
    /// to other hosts), mac (authenticated, clear text) or encrypt.
    #[arg(long, default_value = "auto", value_name = "auto|mac|encrypt")]
    link_security: vargr_net::LinkSecurity,
    /// How this proxy names itself to its peer (the peer's cache of it); default the
    /// host name.
    #[arg(long)]
    name: Option<String>,
    /// When the application pauses, wait this long for more bytes before sending the
    /// tail (0: at once). A source slower than the proxy pauses between packets, and
    /// every cut there costs about a segment of redundancy; a few ms avoid most of them
    /// at that cost in latency.
    #[arg(long, default_value = "0ms", value_name = "DURATION")]
    hold: String,
    #[command(flatten)]
    dedup: crate::sync_cmd::DedupArgs,
}

/// Application bytes a side may have sent that the other has not yet written to its
/// application.
const WINDOW: u64 = 8 << 20;
/// Application bytes read per turn of the loop (and so the largest DATA frame, roughly).
const READ_BUDGET: usize = 256 << 10;
/// Link bytes read per turn of the loop, so that writes interleave with reads.
const LINK_READ_BUDGET: usize = 1 << 20;
/// Stop reading the application while this much waits to go out on the link.
const LINK_OUT_HIGH: usize = 1 << 20;
/// Uncut bytes that force a cut (a segmenter that finds no boundary).
const PENDING_CAP: usize = 1 << 20;
/// Largest link frame body, and the largest decompressed DATA frame.
const MAX_FRAME: usize = 8 << 20;
/// Largest hello or welcome.
const MAX_HELLO: usize = 64 << 10;
/// How long handshakes and connects may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// After both directions ended, how long to wait for the peer to close the link.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Unacknowledged link data older than this means the peer is gone.
const LINK_USER_TIMEOUT_MS: u32 = 30_000;
/// Bumped when either side's bytes change meaning.
const PROXY_VERSION: u32 = 2;

const F_DATA: u8 = 1;
const F_REPLY: u8 = 2;
const F_CREDIT: u8 = 3;
const F_ABORT: u8 = 4;
const F_HELLO: u8 = 5;
const F_WELCOME: u8 = 6;

/// Dedup channels: application bytes, and the end of the stream.
const CH_DATA: u32 = 0;
const CH_EOF: u32 = 1;

/// Near → far, first frame after authentication.
#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    version: u32,
    /// The near proxy's name (the far proxy's cache of it).
    name: String,
    /// The port the application connected to (chooses the far proxy's --forward).
    port: u16,
    segmenter: String,
    fp_bits: u8,
    group: u32,
}

/// Far → near: the server is connected.
#[derive(Debug, Serialize, Deserialize)]
struct Welcome {
    name: String,
}

/// What both roles share.
struct Common {
    secret: Secret,
    security: vargr_net::LinkSecurity,
    hold: Duration,
    name: String,
    bits: FpBits,
    group: u32,
    zstd_level: i32,
    caches: Arc<Caches>,
    next_id: AtomicU64,
}

pub fn run(a: ProxyArgs) -> Result<()> {
    let d = a.dedup.settings()?;
    let caches = Arc::new(Caches {
        root: d.cache_root,
        cfg: d.cache,
        open: Mutex::new(HashMap::new()),
        similar: Held::new(vargr_sync::load_similarity, vargr_sync::save_similarity),
        sent: Held::new(
            |dir, capacity| vargr_sync::load_stream_as(dir, STREAM_SENT, capacity),
            |dir, model| vargr_sync::save_stream_as(dir, STREAM_SENT, model),
        ),
        received: Held::new(
            |dir, capacity| vargr_sync::load_stream_as(dir, STREAM_RECEIVED, capacity),
            |dir, model| vargr_sync::save_stream_as(dir, STREAM_RECEIVED, model),
        ),
    });
    // Buffered cache records reach the disk on Ctrl-C and SIGTERM too.
    let on_signal = caches.clone();
    let _ = ctrlc::set_handler(move || {
        on_signal.flush_all();
        std::process::exit(130);
    });
    let hold = vargr_emu::parse_duration(&a.hold).context("--hold")?;
    let common = Arc::new(Common {
        secret: secret(&a.secret_file)?,
        security: a.link_security,
        hold,
        name: a.name.clone().unwrap_or_else(vargr_sync::host_name),
        bits: d.bits,
        group: d.group,
        zstd_level: d.zstd_level,
        caches,
        next_id: AtomicU64::new(1),
    });
    match (&a.serve, a.listen.is_empty()) {
        (Some(serve), true) => run_far(serve, &a.forward, common),
        (None, false) => {
            let peer = a
                .peer
                .as_deref()
                .ok_or_else(|| anyhow!("a near proxy (--listen) needs --peer FAR_HOST:PORT"))?;
            run_near(&a.listen, peer, &a.segmenter, common)
        }
        _ => bail!(
            "say which end this is: --listen ADDR --peer FAR_HOST:PORT (near the clients) \
             or --serve ADDR --forward HOST:PORT (near the server)"
        ),
    }
}

/// `HOST:PORT`, `tcp:HOST:PORT` or `unix:/path`.
fn parse_addr(flag: &str, s: &str) -> Result<Addr> {
    let full = if s.starts_with("tcp:") || s.starts_with("unix:") {
        s.to_string()
    } else {
        format!("tcp:{s}")
    };
    full.parse()
        .with_context(|| format!("{flag} {s:?}: expected HOST:PORT"))
}

/// Checks a segmenter spec for a byte stream.
fn stream_segmenter(spec: &str) -> Result<Box<dyn Segmenter>> {
    let s = vargr_dedup::by_name(spec)?;
    if s.boundaries(&[], true).is_none() {
        bail!("segmenter {spec:?} needs whole messages; a TCP stream needs cdc, static or sw");
    }
    Ok(s)
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

// ---------------------------------------------------------------------------------
// Caches

/// The segment caches of this process, one per peer and role, opened on first use.
struct Caches {
    root: PathBuf,
    cfg: DiskConfig,
    open: Mutex<HashMap<String, SharedCache<DiskCache>>>,
    /// Each cache's delta-base index.
    similar: Held<SimilarityIndex>,
    /// Each cache's stream models, one per direction: what this side sends to the peer,
    /// and what it receives from it. Two connections at once may pair a model on this
    /// side with another on the peer's: the tokens then differ and both sides reset,
    /// which costs predictions and never bytes.
    sent: Held<StreamModel>,
    received: Held<StreamModel>,
}

/// What a cache keeps beside its segments that one connection at a time uses, by cache
/// directory: handed to a connection from memory if no other holds it, else from its
/// file the first time, else empty (the others start empty); put back when the
/// connection ends (the first one back stays); saved at exit.
struct Held<T> {
    idle: Mutex<HashMap<PathBuf, T>>,
    load: fn(&Path, usize) -> T,
    save: fn(&Path, &T),
}

impl<T> Held<T> {
    fn new(load: fn(&Path, usize) -> T, save: fn(&Path, &T)) -> Held<T> {
        Held {
            idle: Mutex::new(HashMap::new()),
            load,
            save,
        }
    }

    fn take(&self, dir: &Path, capacity: usize) -> T {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.remove(dir)
            .unwrap_or_else(|| (self.load)(dir, capacity))
    }

    fn put(&self, dir: &Path, value: T) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.entry(dir.to_path_buf()).or_insert(value);
    }

    fn save_all(&self) {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        for (dir, value) in idle.iter() {
            (self.save)(dir, value);
        }
    }
}

/// The stream model files of a proxy's cache.
const STREAM_SENT: &str = "stream-sent.model";
const STREAM_RECEIVED: &str = "stream-received.model";

impl Caches {
    fn get(&self, key: &str) -> Result<SharedCache<DiskCache>> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = open.get(key) {
            return Ok(c.clone());
        }
        let c = DiskCache::open_for_peer(&self.root, key, self.cfg.clone()).with_context(|| {
            format!(
                "opening the segment cache {key} under {}",
                self.root.display()
            )
        })?;
        let c = SharedCache::new(c);
        open.insert(key.to_string(), c.clone());
        Ok(c)
    }

    fn flush_all(&self) {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        for c in open.values() {
            let _ = c.lock().flush();
        }
        self.similar.save_all();
        self.sent.save_all();
        self.received.save_all();
    }
}

/// Flushes a cache and saves its counters where `vargr dedup stats` finds them; a
/// failure only loses the statistics (the records stay buffered until the next flush).
fn save_cache(cache: &SharedCache<DiskCache>) {
    let mut c = cache.lock();
    let _ = c.flush();
    if let Ok(body) = serde_json::to_vec_pretty(&c.stats()) {
        let _ = std::fs::write(c.dir().join(vargr_sync::SESSION_STATS), body);
    }
}

/// A cache directory name for a peer's name (`proxy-to-` + a sanitised name).
fn cache_key(prefix: &str, name: &str) -> String {
    vargr_sync::cache_key(&format!("{prefix}{name}"))
}

// ---------------------------------------------------------------------------------
// The near proxy

struct ListenSpec {
    listener: Listener,
    local: Addr,
    port: u16,
    segmenter: String,
}

fn run_near(listen: &[String], peer: &str, default_seg: &str, common: Arc<Common>) -> Result<()> {
    let peer_addr = parse_addr("--peer", peer)?;
    let mut specs = Vec::new();
    for l in listen {
        let (addr, seg) = match l.split_once('=') {
            Some((a, s)) => (a, s),
            None => (l.as_str(), default_seg),
        };
        stream_segmenter(seg).with_context(|| format!("--listen {l:?}"))?;
        let addr = parse_addr("--listen", addr)?;
        let listener = Listener::bind(&addr)?;
        let local = listener.local_addr()?;
        let port = match &local {
            Addr::Tcp(a) => a
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or(0),
            Addr::Unix(_) => 0,
        };
        specs.push(ListenSpec {
            listener,
            local,
            port,
            segmenter: seg.to_string(),
        });
    }
    for s in &specs {
        eprintln!(
            "vargr proxy: listening on {} (segmenter {}), carrying connections to {peer_addr}",
            s.local, s.segmenter
        );
    }
    let _ = io::stderr().flush();
    let peer_addr = Arc::new(peer_addr);
    let threads: Vec<_> = specs
        .into_iter()
        .map(|spec| {
            let common = common.clone();
            let peer = peer_addr.clone();
            std::thread::spawn(move || accept_near(spec, peer, common))
        })
        .collect();
    for t in threads {
        t.join()
            .map_err(|_| anyhow!("a listener thread panicked"))??;
    }
    Ok(())
}

fn accept_near(spec: ListenSpec, peer: Arc<Addr>, common: Arc<Common>) -> Result<()> {
    let spec = Arc::new(spec);
    loop {
        let app = match spec.listener.accept_timeout(Duration::from_secs(3600)) {
            Ok(c) => c,
            Err(vargr_net::NetError::Timeout { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let id = common.next_id.fetch_add(1, Ordering::Relaxed);
        let (spec, peer, common) = (spec.clone(), peer.clone(), common.clone());
        std::thread::Builder::new()
            .name(format!("vargr-proxy-{id}"))
            .spawn(move || near_connection(id, app, &spec, &peer, &common))
            .context("starting a connection thread")?;
    }
}

fn near_connection(id: u64, app: Conn, spec: &ListenSpec, peer: &Addr, common: &Common) {
    let app_name = app.peer_name();
    match near_setup(spec, peer, common) {
        Ok((link, cache, far)) => {
            let pump = Pump::new(id, app, link, &spec.segmenter, cache.clone(), common);
            finish(
                id,
                pump,
                &format!("{app_name} → {far} ({peer})"),
                &cache,
                common,
            );
        }
        Err(e) => {
            eprintln!("vargr proxy: connection {id} from {app_name} failed: {e:#}");
            reset(app);
        }
    }
}

/// Connects to the far proxy: authentication, hello, welcome.
fn near_setup(
    spec: &ListenSpec,
    peer: &Addr,
    common: &Common,
) -> Result<(LinkConn, SharedCache<DiskCache>, String)> {
    let what = peer.to_string();
    let link = connect_now(peer, SETUP_TIMEOUT)
        .with_context(|| format!("connecting to the far proxy {what}"))?;
    let link = vargr_net::auth::connect(
        link,
        &common.secret,
        0,
        common.security,
        SETUP_TIMEOUT,
        &what,
    )
    .with_context(|| {
        format!(
            "authenticating with the far proxy {what} (both need the same --secret-file \
             or $VARGR_PROXY_SECRET)"
        )
    })?;
    let mut link = LinkConn::new(link);
    let hello = Hello {
        version: PROXY_VERSION,
        name: common.name.clone(),
        port: spec.port,
        segmenter: spec.segmenter.clone(),
        fp_bits: common.bits.get(),
        group: common.group,
    };
    let body = serde_json::to_vec(&hello).expect("serializable");
    write_frame_blocking(&mut link, F_HELLO, &body)
        .with_context(|| format!("sending the hello to {what}"))?;
    // The far proxy connects to the server before it answers.
    link.conn.set_timeout(Some(SETUP_TIMEOUT * 3))?;
    let (kind, body) = read_frame_blocking(&mut link, MAX_HELLO)
        .with_context(|| format!("waiting for the far proxy {what} to connect the server"))?;
    let welcome: Welcome = match kind {
        F_WELCOME => serde_json::from_slice(&body)
            .map_err(|e| anyhow!("the far proxy {what} sent a malformed welcome: {e}"))?,
        F_ABORT => bail!(
            "the far proxy {what} refused: {}",
            String::from_utf8_lossy(&body)
        ),
        k => bail!("the far proxy {what} answered with frame type {k}, not a welcome"),
    };
    let cache = common.caches.get(&cache_key("proxy-to-", &welcome.name))?;
    Ok((link, cache, welcome.name))
}

// ---------------------------------------------------------------------------------
// The far proxy

/// `--forward` targets: by the near proxy's port, and for any port.
struct Forwards {
    by_port: HashMap<u16, Addr>,
    default: Option<Addr>,
}

impl Forwards {
    fn parse(list: &[String]) -> Result<Forwards> {
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

    fn target(&self, port: u16) -> Option<&Addr> {
        self.by_port.get(&port).or(self.default.as_ref())
    }
}

fn run_far(serve: &str, forward: &[String], common: Arc<Common>) -> Result<()> {
    let forwards = Arc::new(Forwards::parse(forward)?);
    let addr = parse_addr("--serve", serve)?;
    let l = Listener::bind(&addr)?;
    eprintln!(
        "vargr proxy: serving on {}, forwarding to {}",
        l.local_addr()?,
        forward.join(", ")
    );
    let _ = io::stderr().flush();
    let gate = Gate::open(
        l,
        common.secret.clone(),
        GateConfig {
            deadline: SETUP_TIMEOUT,
            security: common.security,
            ..GateConfig::default()
        },
        Box::new(|e| eprintln!("vargr proxy: refused a connection: {e}")),
    );
    loop {
        let link = match gate.accept_timeout(Duration::from_secs(3600)) {
            Ok(a) => LinkConn::new(a.conn),
            Err(vargr_net::NetError::Timeout { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let id = common.next_id.fetch_add(1, Ordering::Relaxed);
        let (forwards, common) = (forwards.clone(), common.clone());
        std::thread::Builder::new()
            .name(format!("vargr-proxy-{id}"))
            .spawn(move || far_connection(id, link, &forwards, &common))
            .context("starting a connection thread")?;
    }
}

fn far_connection(id: u64, mut link: LinkConn, forwards: &Forwards, common: &Common) {
    let near = link.conn.peer_name();
    match far_setup(&mut link, &near, forwards, common) {
        Ok((app, cache, hello, target)) => {
            let pump = Pump::new(id, app, link, &hello.segmenter, cache.clone(), common);
            finish(
                id,
                pump,
                &format!("{} ({near}) → {target}", hello.name),
                &cache,
                common,
            );
        }
        Err(e) => {
            let msg = format!("{e:#}");
            eprintln!("vargr proxy: connection {id} from {near} refused: {msg}");
            let _ = write_frame_blocking(&mut link, F_ABORT, msg.as_bytes());
        }
    }
}

/// Reads the near proxy's hello, opens its cache and connects the server.
fn far_setup(
    link: &mut LinkConn,
    near: &str,
    forwards: &Forwards,
    common: &Common,
) -> Result<(Conn, SharedCache<DiskCache>, Hello, Addr)> {
    let (kind, body) = read_frame_blocking(link, MAX_HELLO)
        .with_context(|| format!("reading the hello of {near}"))?;
    if kind != F_HELLO {
        bail!("expected a hello, got frame type {kind}");
    }
    let hello: Hello =
        serde_json::from_slice(&body).map_err(|e| anyhow!("malformed hello: {e}"))?;
    if hello.version != PROXY_VERSION {
        bail!(
            "the near proxy speaks proxy protocol {}, this one {PROXY_VERSION}",
            hello.version
        );
    }
    if hello.fp_bits != common.bits.get() {
        bail!(
            "the near proxy uses {}-bit fingerprints, this one {} (--fp-bits must match)",
            hello.fp_bits,
            common.bits.get()
        );
    }
    if hello.group == 0 || hello.group > 1 << 16 {
        bail!("group of {} segments: expected 1 ..= 65536", hello.group);
    }
    stream_segmenter(&hello.segmenter)?;
    let target = forwards
        .target(hello.port)
        .ok_or_else(|| {
            anyhow!(
                "no --forward for port {} (and none for every port)",
                hello.port
            )
        })?
        .clone();
    let cache = common.caches.get(&cache_key("proxy-from-", &hello.name))?;
    let app = connect_now(&target, SETUP_TIMEOUT)
        .with_context(|| format!("connecting to the server {target}"))?;
    let welcome = serde_json::to_vec(&Welcome {
        name: common.name.clone(),
    })
    .expect("serializable");
    write_frame_blocking(link, F_WELCOME, &welcome)
        .with_context(|| format!("sending the welcome to {near}"))?;
    Ok((app, cache, hello, target))
}

// ---------------------------------------------------------------------------------
// Both: running a connection and reporting it

/// Runs a pump, prints its line, and keeps the cache's records on disk.
fn finish(
    id: u64,
    pump: Result<Pump>,
    route: &str,
    cache: &SharedCache<DiskCache>,
    common: &Common,
) {
    let mut pump = match pump {
        Ok(p) => p,
        Err(e) => {
            eprintln!("vargr proxy: connection {id} failed to start: {route}: {e:#}");
            return;
        }
    };
    let t0 = Instant::now();
    let r = pump.run();
    let tx = pump.tx.stats().clone();
    let c = &pump.counts;
    let outcome = match &r {
        Ok(()) => "closed".to_string(),
        Err(e) => format!("failed ({e})"),
    };
    eprintln!(
        "vargr proxy: connection {} {outcome}: from app {} B → link {} B, from link {} B → app {} B; \
         {} segments sent, {} as fingerprints, {} as deltas, {} resent on request, {} named by \
         prediction; {} ({}), {:.2} s",
        pump.id,
        c.app_in,
        c.link_out,
        c.link_in,
        c.app_out,
        tx.segments,
        tx.fingerprinted,
        tx.deltas,
        tx.requested,
        tx.predicted,
        route,
        pump.segmenter_name,
        t0.elapsed().as_secs_f64()
    );
    if let Err(e) = &r {
        if e.tell_peer {
            pump.tell_peer(&e.msg);
        }
    }
    let dir = cache.lock().dir().to_path_buf();
    let held = &common.caches;
    held.sent.put(&dir, pump.tx.take_stream());
    held.received.put(&dir, pump.rx.take_stream());
    held.similar.put(&dir, pump.tx.take_similarity());
    let Pump { app, .. } = pump;
    match r {
        Ok(()) => drop(app),
        Err(_) => reset(app),
    }
    save_cache(cache);
}

// ---------------------------------------------------------------------------------
// The pump: one connection, both directions, on one thread

/// Why a connection ended early. `tell_peer`: the link still works, so the other
/// proxy is told (it resets its application connection too).
#[derive(Debug)]
struct PumpError {
    msg: String,
    tell_peer: bool,
}

impl std::fmt::Display for PumpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl PumpError {
    /// The application socket failed, or this side's cache: tell the peer.
    fn local(msg: impl Into<String>) -> PumpError {
        PumpError {
            msg: msg.into(),
            tell_peer: true,
        }
    }
    /// The link failed or the peer gave up: nothing to tell it.
    fn link(msg: impl Into<String>) -> PumpError {
        PumpError {
            msg: msg.into(),
            tell_peer: false,
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    app_in: u64,
    app_out: u64,
    link_in: u64,
    link_out: u64,
}

/// Bytes waiting to be written to a non-blocking socket.
#[derive(Default)]
struct OutBuf {
    data: Vec<u8>,
    at: usize,
}

impl OutBuf {
    fn len(&self) -> usize {
        self.data.len() - self.at
    }

    /// Writes until the socket would block; returns the bytes written.
    fn write_to(&mut self, w: &mut impl Write) -> io::Result<usize> {
        let mut n = 0;
        while self.at < self.data.len() {
            match w.write(&self.data[self.at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(k) => {
                    self.at += k;
                    n += k;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.at == self.data.len() {
            self.data.clear();
            self.at = 0;
        } else if self.at > (1 << 20) && self.at * 2 > self.data.len() {
            self.data.drain(..self.at);
            self.at = 0;
        }
        Ok(n)
    }
}

struct Pump {
    id: u64,
    app: Conn,
    link: Conn,
    segmenter: Box<dyn Segmenter>,
    segmenter_name: String,
    tx: Sender<SharedCache<DiskCache>>,
    rx: Receiver<SharedCache<DiskCache>>,
    zout: PieceEncoder,
    zin: PieceDecoder,
    max_segment: usize,
    scratch: Vec<u8>,
    // application → link
    /// Read from the application, not yet cut.
    pending: Vec<u8>,
    /// Application bytes handed to the sender.
    given: u64,
    /// Application bytes the peer has written to its application (its last credit).
    credit: u64,
    /// The application shut its write side; the end of the stream is queued.
    app_eof: bool,
    /// See `--hold`.
    hold: Duration,
    /// When to send the tail if no more bytes come.
    hold_until: Option<Instant>,
    // link → application
    app_out: OutBuf,
    /// Bytes written to the application.
    written: u64,
    credit_sent: u64,
    /// The peer's end of stream was delivered.
    peer_eof: bool,
    /// This side shut the application's write side.
    app_shut: bool,
    // the link
    link_seal: RecordSealer,
    link_open: RecordOpener,
    /// Opened bytes of the link not yet cut into frames.
    link_in: Vec<u8>,
    link_out: OutBuf,
    link_eof: bool,
    link_shut_at: Option<Instant>,
    counts: Counts,
}

impl Pump {
    fn new(
        id: u64,
        app: Conn,
        link: LinkConn,
        segmenter: &str,
        cache: SharedCache<DiskCache>,
        common: &Common,
    ) -> Result<Pump> {
        let config = Config {
            bits: common.bits,
            group: common.group,
            // The credit window bounds what is in flight, not the group count.
            window_groups: 1 << 14,
            max_pending: 4 * WINDOW as usize,
            // Its output goes through the link's zstd stream.
            session_bases: false,
            ..Config::default()
        };
        let dir = cache.lock().dir().to_path_buf();
        let mut tx = Sender::new(config, cache.clone())?;
        let held = &common.caches;
        tx.set_similarity(held.similar.take(&dir, config.delta_index));
        tx.set_stream(held.sent.take(&dir, config.delta_index));
        let mut rx = Receiver::new(config, cache)?;
        rx.set_stream(held.received.take(&dir, config.delta_index));
        let LinkConn {
            conn: link,
            seal: link_seal,
            open: link_open,
            plain: link_in,
        } = link;
        for c in [&app, &link] {
            c.set_timeout(None)?;
            set_nonblocking(c, true)?;
        }
        tune_link(&link);
        Ok(Pump {
            id,
            app,
            link,
            link_seal,
            link_open,
            segmenter: stream_segmenter(segmenter)?,
            segmenter_name: segmenter.to_string(),
            tx,
            rx,
            zout: PieceEncoder::new(common.zstd_level)?,
            zin: PieceDecoder::new(MAX_FRAME)?,
            max_segment: config.max_segment,
            scratch: vec![0; 64 << 10],
            pending: Vec::new(),
            given: 0,
            credit: 0,
            app_eof: false,
            hold: common.hold,
            hold_until: None,
            app_out: OutBuf::default(),
            written: 0,
            credit_sent: 0,
            peer_eof: false,
            app_shut: false,
            link_in,
            link_out: OutBuf::default(),
            link_eof: false,
            link_shut_at: None,
            counts: Counts::default(),
        })
    }

    fn want_app_read(&self) -> bool {
        !self.app_eof
            && self.link_out.len() < LINK_OUT_HIGH
            && self.given - self.credit.min(self.given) < WINDOW
            && !self.tx.window_full()
    }

    /// Both directions ended, everything acknowledged and written.
    fn all_done(&self) -> bool {
        self.app_eof && self.app_shut && self.tx.is_idle() && self.link_out.len() == 0
    }

    fn run(&mut self) -> Result<(), PumpError> {
        loop {
            if self.hold_until.is_some_and(|t| Instant::now() >= t) {
                self.release_tail()?;
            }
            let reading = self.want_app_read();
            if !reading {
                // Whatever was cut can be checked and delivered while this side waits.
                self.tx.flush();
                self.sender_output()?;
            }
            self.write_out()?;
            if self.all_done() {
                // This side is finished: say so, and wait (a while) for the other.
                let t = *self.link_shut_at.get_or_insert_with(|| {
                    let _ = shutdown(&self.link, Shutdown::Write);
                    Instant::now()
                });
                if self.link_eof || t.elapsed() > CLOSE_TIMEOUT {
                    return Ok(());
                }
            }
            // The other proxy closes the link once both streams ended and all of this
            // side's data was acknowledged; what is left is writing to the application.
            if self.link_eof && !(self.peer_eof && self.app_eof && self.tx.is_idle()) {
                return Err(PumpError::link(
                    "the other proxy closed the link before the connection ended",
                ));
            }
            let (mut app_events, mut link_events) = (0, 0);
            if reading {
                app_events |= libc::POLLIN;
            }
            if self.app_out.len() > 0 {
                app_events |= libc::POLLOUT;
            }
            if !self.link_eof {
                link_events |= libc::POLLIN;
            }
            if self.link_out.len() > 0 {
                link_events |= libc::POLLOUT;
            }
            let mut fds = [
                pollfd(&self.app, app_events),
                pollfd(&self.link, link_events),
            ];
            let deadline = [
                self.hold_until,
                self.link_shut_at.map(|t| t + CLOSE_TIMEOUT),
            ]
            .into_iter()
            .flatten()
            .min();
            let timeout = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
                }
                None => -1,
            };
            if fds.iter().all(|f| f.fd < 0) && timeout < 0 {
                return Err(PumpError::local("internal: nothing left to wait for"));
            }
            // SAFETY: `fds` is an array of two valid pollfd for the duration of the call.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(PumpError::local(format!("poll: {e}")));
            }
            let ready = libc::POLLIN | libc::POLLHUP | libc::POLLERR;
            if reading && fds[0].revents & ready != 0 {
                self.read_app()?;
            }
            if fds[1].revents & ready != 0 {
                self.read_link()?;
            }
        }
    }

    /// Writes what can be written to both sockets; shuts the application's write side
    /// once the peer's stream has ended and all of it is written.
    fn write_out(&mut self) -> Result<(), PumpError> {
        if self.app_out.len() > 0 {
            let n = self
                .app_out
                .write_to(&mut self.app)
                .map_err(|e| PumpError::local(format!("writing to the application: {e}")))?;
            self.written += n as u64;
            self.counts.app_out += n as u64;
            if !self.link_eof && self.written - self.credit_sent >= WINDOW / 4 {
                self.credit_sent = self.written;
                let body = self.written.to_le_bytes();
                self.put_frame(F_CREDIT, &body);
            }
        }
        if self.peer_eof && !self.app_shut && self.app_out.len() == 0 {
            let _ = shutdown(&self.app, Shutdown::Write);
            self.app_shut = true;
        }
        if self.link_out.len() > 0 {
            let n = self
                .link_out
                .write_to(&mut self.link)
                .map_err(|e| PumpError::link(format!("writing to the other proxy: {e}")))?;
            self.counts.link_out += n as u64;
        }
        Ok(())
    }

    fn read_app(&mut self) -> Result<(), PumpError> {
        let room = (WINDOW - (self.given - self.credit.min(self.given))) as usize;
        let budget = READ_BUDGET.min(room).max(1);
        let (mut got, mut pause, mut eof) = (0, false, false);
        while got < budget {
            match self.app.read(&mut self.scratch) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    self.pending.extend_from_slice(&self.scratch[..n]);
                    got += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    pause = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(PumpError::local(format!(
                        "reading from the application: {e}"
                    )))
                }
            }
        }
        self.counts.app_in += got as u64;
        if pause && !eof && !self.hold.is_zero() {
            // Send what no later byte can change; the tail waits a moment for more.
            if got > 0 || self.hold_until.is_none() {
                self.hold_until = Some(Instant::now() + self.hold);
            }
            self.cut(false)?;
            self.sender_output()?;
            return Ok(());
        }
        self.hold_until = None;
        self.cut(pause || eof)?;
        if eof {
            self.app_eof = true;
            self.tx
                .send_message(CH_EOF, &[], &[])
                .map_err(|e| PumpError::local(format!("dedup: {e}")))?;
        }
        if pause || eof {
            // Nothing more now: let the other side check and deliver what it has.
            self.tx.flush();
        }
        self.sender_output()?;
        Ok(())
    }

    /// The application stayed quiet for `--hold`: the tail goes out, the group closes.
    fn release_tail(&mut self) -> Result<(), PumpError> {
        self.hold_until = None;
        self.cut(true)?;
        self.tx.flush();
        self.sender_output()?;
        Ok(())
    }

    /// Hands the segments of `pending` to the sender: those no later byte can change,
    /// or all of them when `last` (the application paused or ended).
    fn cut(&mut self, last: bool) -> Result<(), PumpError> {
        let force = last || self.pending.len() >= PENDING_CAP;
        let ends = self
            .segmenter
            .boundaries(&self.pending, force)
            .unwrap_or_default();
        let Some(&used) = ends.last() else {
            return Ok(());
        };
        let mut segs: Vec<&[u8]> = Vec::with_capacity(ends.len());
        let mut at = 0;
        for &end in &ends {
            // No segment beyond what the protocol and the caches accept.
            while end - at > self.max_segment {
                segs.push(&self.pending[at..at + self.max_segment]);
                at += self.max_segment;
            }
            segs.push(&self.pending[at..end]);
            at = end;
        }
        self.tx
            .send_message(CH_DATA, &[], &segs)
            .map_err(|e| PumpError::local(format!("dedup: {e}")))?;
        self.given += used as u64;
        self.pending.drain(..used);
        Ok(())
    }

    /// Moves the sender's output into DATA frames.
    fn sender_output(&mut self) -> Result<(), PumpError> {
        let mut raw = Vec::new();
        self.tx.take_output(&mut raw);
        for chunk in raw.chunks(MAX_FRAME) {
            let piece = self
                .zout
                .piece(chunk)
                .map_err(|e| PumpError::local(format!("compressing: {e}")))?;
            self.put_frame(F_DATA, &piece);
        }
        Ok(())
    }

    fn put_frame(&mut self, kind: u8, body: &[u8]) {
        self.link_seal
            .seal(&proxy_frame(kind, body), &mut self.link_out.data);
    }

    fn read_link(&mut self) -> Result<(), PumpError> {
        let mut got = 0;
        while got < LINK_READ_BUDGET {
            match self.link.read(&mut self.scratch) {
                Ok(0) => {
                    self.link_eof = true;
                    break;
                }
                Ok(n) => {
                    self.link_open.feed(&self.scratch[..n]);
                    got += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(PumpError::link(format!(
                        "reading from the other proxy: {e}"
                    )))
                }
            }
        }
        self.counts.link_in += got as u64;
        let unread = self.link_in.len();
        self.link_open
            .take(&mut self.link_in)
            .map_err(|e| PumpError::link(e.to_string()))?;
        let mut at = 0;
        loop {
            let frame = match vargr_sync::split_frame(
                &self.link_in[at..],
                vargr_sync::zpieces::max_piece(MAX_FRAME),
            ) {
                Ok(Some((kind, body))) => (kind, body.to_vec()),
                Ok(None) => break,
                Err(len) => {
                    return Err(self.bad(format!(
                        "frame of {len} bytes at link byte {} exceeds {MAX_FRAME}",
                        self.counts.link_in - (unread - at) as u64
                    )))
                }
            };
            at += 5 + frame.1.len();
            self.on_frame(frame.0, &frame.1)?;
        }
        self.link_in.drain(..at);
        if self.link_eof && (!self.link_in.is_empty() || self.link_open.pending() > 0) {
            return Err(PumpError::link(format!(
                "the other proxy's stream ended inside a frame ({} bytes unread)",
                self.link_in.len()
            )));
        }
        let mut reply = Vec::new();
        self.rx.take_output(&mut reply);
        if !reply.is_empty() {
            self.put_frame(F_REPLY, &reply);
        }
        self.sender_output()?;
        Ok(())
    }

    /// Best effort: queues an ABORT after what the link already holds and writes it all,
    /// giving up after a couple of seconds.
    fn tell_peer(&mut self, why: &str) {
        self.put_frame(F_ABORT, why.as_bytes());
        if set_nonblocking(&self.link, false).is_ok()
            && self.link.set_timeout(Some(Duration::from_secs(2))).is_ok()
        {
            let _ = self.link_out.write_to(&mut self.link);
        }
    }

    /// A protocol violation by the other proxy: tell it why, and stop.
    fn bad(&self, what: String) -> PumpError {
        PumpError::local(format!("from the other proxy: {what}"))
    }

    fn on_frame(&mut self, kind: u8, body: &[u8]) -> Result<(), PumpError> {
        match kind {
            F_DATA => {
                let raw = self
                    .zin
                    .piece(body)
                    .map_err(|e| self.bad(format!("data frame: {e}")))?;
                self.rx
                    .handle_input(&raw)
                    .map_err(|e| self.bad(format!("dedup: {e}")))?;
                while let Some(d) = self.rx.poll_delivered() {
                    match d.channel {
                        CH_DATA if !self.peer_eof => {
                            let segs: Vec<&[u8]> = d.segments.iter().map(|s| &s[..]).collect();
                            self.segmenter
                                .reassemble(&d.layout, &segs, &mut self.app_out.data)
                                .map_err(|e| self.bad(e.to_string()))?;
                        }
                        CH_EOF if !self.peer_eof && d.is_empty() => self.peer_eof = true,
                        ch => {
                            return Err(self.bad(format!(
                                "message on channel {ch} (after the end of the stream: {})",
                                self.peer_eof
                            )))
                        }
                    }
                }
                if self.app_out.len() as u64 > 2 * WINDOW {
                    return Err(self.bad(format!(
                        "{} bytes for the application beyond its window of {WINDOW}",
                        self.app_out.len()
                    )));
                }
            }
            F_REPLY => self
                .tx
                .handle_input(body)
                .map_err(|e| self.bad(format!("dedup replies: {e}")))?,
            F_CREDIT => {
                let v = body
                    .try_into()
                    .map(u64::from_le_bytes)
                    .map_err(|_| self.bad(format!("credit of {} bytes", body.len())))?;
                if v > self.given {
                    return Err(self.bad(format!(
                        "credit for {v} bytes, only {} were sent",
                        self.given
                    )));
                }
                self.credit = self.credit.max(v);
            }
            F_ABORT => {
                return Err(PumpError::link(format!(
                    "the other proxy gave up: {}",
                    String::from_utf8_lossy(body)
                )))
            }
            k => return Err(self.bad(format!("unknown frame type {k}"))),
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// Sockets

fn fd(c: &Conn) -> RawFd {
    match c {
        Conn::Tcp(s) => s.as_raw_fd(),
        Conn::Unix(s) => s.as_raw_fd(),
    }
}

fn pollfd(c: &Conn, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        // A negative fd is skipped: nothing to wait for on this socket.
        fd: if events == 0 { -1 } else { fd(c) },
        events,
        revents: 0,
    }
}

fn set_nonblocking(c: &Conn, on: bool) -> io::Result<()> {
    match c {
        Conn::Tcp(s) => s.set_nonblocking(on),
        Conn::Unix(s) => s.set_nonblocking(on),
    }
}

fn shutdown(c: &Conn, how: Shutdown) -> io::Result<()> {
    match c {
        Conn::Tcp(s) => s.shutdown(how),
        Conn::Unix(s) => s.shutdown(how),
    }
}

/// Closes with a TCP reset, so the other end sees an error rather than a clean end.
fn reset(c: Conn) {
    if let Conn::Tcp(s) = &c {
        let l = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: `l` is a valid linger struct of the size passed, for a live socket.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&l as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
    }
    drop(c);
}

/// Connects once: a refused connection is an answer (a proxy's client should learn at
/// once that the server or the far proxy is down), unlike `vargr_net::connect`, which
/// retries while a listener may still be starting.
fn connect_now(addr: &Addr, timeout: Duration) -> io::Result<Conn> {
    match addr {
        Addr::Tcp(a) => {
            let mut last = io::Error::new(io::ErrorKind::NotFound, "resolves to no address");
            for sa in std::net::ToSocketAddrs::to_socket_addrs(a.as_str())? {
                match std::net::TcpStream::connect_timeout(&sa, timeout) {
                    Ok(s) => {
                        s.set_nodelay(true)?;
                        return Ok(Conn::Tcp(s));
                    }
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
        Addr::Unix(p) => std::os::unix::net::UnixStream::connect(p).map(Conn::Unix),
    }
}

/// A link that stops answering fails within about half a minute: unacknowledged data
/// after [`LINK_USER_TIMEOUT_MS`] (Linux's `TCP_USER_TIMEOUT`), and an idle link after
/// keep-alive probes at 10 s, then every 5 s, four unanswered. Failing faster would
/// break connections on a WAN's passing hiccups.
fn tune_link(c: &Conn) {
    let Conn::Tcp(s) = c else { return };
    let fd = s.as_raw_fd();
    let set = |level: libc::c_int, name: libc::c_int, v: libc::c_int| {
        // SAFETY: `v` is a valid c_int of the size passed, for a live socket.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    #[cfg(target_os = "linux")]
    {
        set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 10);
        set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5);
        set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 4);
        set(
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            LINK_USER_TIMEOUT_MS as libc::c_int,
        );
    }
}

/// A link connection after its handshake: the socket and its record layer.
struct LinkConn {
    conn: Conn,
    seal: RecordSealer,
    open: RecordOpener,
    /// Opened bytes not consumed yet (handed to the pump after set-up).
    plain: Vec<u8>,
}

impl LinkConn {
    fn new(c: vargr_net::SecureConn) -> LinkConn {
        let (conn, seal, open) = c.into_records();
        LinkConn {
            conn,
            seal,
            open,
            plain: Vec::new(),
        }
    }
}

fn proxy_frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(5 + body.len());
    f.push(kind);
    f.extend_from_slice(&(body.len() as u32).to_le_bytes());
    f.extend_from_slice(body);
    f
}

fn write_frame_blocking(c: &mut LinkConn, kind: u8, body: &[u8]) -> io::Result<()> {
    let mut out = Vec::new();
    c.seal.seal(&proxy_frame(kind, body), &mut out);
    c.conn.write_all(&out)
}

fn read_frame_blocking(c: &mut LinkConn, max: usize) -> Result<(u8, Vec<u8>)> {
    let mut scratch = vec![0u8; 64 << 10];
    loop {
        if c.plain.len() >= 5 {
            let len = u32::from_le_bytes(c.plain[1..5].try_into().expect("four bytes")) as usize;
            if len > max {
                bail!("a setup frame of {len} bytes, more than {max}: not a vargr proxy?");
            }
            if c.plain.len() >= 5 + len {
                let kind = c.plain[0];
                let body = c.plain[5..5 + len].to_vec();
                c.plain.drain(..5 + len);
                return Ok((kind, body));
            }
        }
        let n = c.conn.read(&mut scratch).map_err(closed_or)?;
        if n == 0 {
            return Err(closed_or(io::ErrorKind::UnexpectedEof.into()));
        }
        c.open.feed(&scratch[..n]);
        c.open.take(&mut c.plain)?;
    }
}

fn closed_or(e: io::Error) -> anyhow::Error {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => anyhow!("the connection was closed"),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => anyhow!("timed out"),
        _ => e.into(),
    }
}
