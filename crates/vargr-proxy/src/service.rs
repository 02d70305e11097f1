//! The two ends of a proxy pair: accepting connections, setting up their links (the
//! handshake, hello and welcome), running a pump per connection on a thread of its
//! own, and telling the caller what happened through [`Event`]s.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vargr_dedup::cache::{DiskCache, DiskConfig, SharedCache};
use vargr_dedup::protocol::Stats;
use vargr_net::auth::Secret;
use vargr_net::{Addr, Conn, LinkSecurity, Listener, NetError};

use crate::caches::{save_cache, Caches};
use crate::driver::{connect_now, reset, Driver, LinkConn};
use crate::error::{error_chain, ProxyError};
use crate::pump::{stream_segmenter, Pump, PumpError, PumpSettings};
use crate::setup::{open_link, serve_links, SetupKinds, MAX_HELLO, SETUP_TIMEOUT};
use crate::wire::{Hello, Welcome, F_ABORT, F_HELLO, F_WELCOME, PROXY_VERSION};

/// The set-up frames of `vargr proxy`'s links.
const KINDS: SetupKinds = SetupKinds {
    hello: F_HELLO,
    welcome: F_WELCOME,
    abort: F_ABORT,
};

/// What a proxy process needs, from its caller.
pub struct ProxySettings {
    /// Shared by both ends of the pair.
    pub secret: Secret,
    /// Protection of the link after its handshake.
    pub security: LinkSecurity,
    /// How this proxy names itself to its peer (the peer's cache of it).
    pub name: String,
    pub pump: PumpSettings,
    /// Segment caches live here, one directory per peer and role.
    pub cache_root: PathBuf,
    pub cache: DiskConfig,
}

/// A port the near proxy listens on, and the segmenter of its connections.
pub struct Listen {
    pub addr: Addr,
    pub segmenter: String,
}

/// Where the far proxy connects each connection: by the port the near proxy accepted
/// it on, else the default.
#[derive(Debug, Default)]
pub struct Forwards {
    pub by_port: HashMap<u16, Addr>,
    pub default: Option<Addr>,
}

impl Forwards {
    fn target(&self, port: u16) -> Option<&Addr> {
        self.by_port.get(&port).or(self.default.as_ref())
    }
}

/// What a connection did, when it ended.
#[derive(Debug)]
pub struct ConnectionReport {
    pub id: u64,
    /// Why it failed, if it did.
    pub error: Option<PumpError>,
    /// Application bytes read, link bytes written, link bytes read, application bytes
    /// written.
    pub app_in: u64,
    pub link_out: u64,
    pub link_in: u64,
    pub app_out: u64,
    /// What this side's dedup sender did.
    pub sent: Stats,
    /// `application → far proxy (address)` or `near proxy (address) → server`.
    pub route: String,
    pub segmenter: String,
    pub elapsed: Duration,
}

/// What a proxy tells its caller, as it happens.
#[derive(Debug)]
pub enum Event<'a> {
    /// The near proxy listens on `local`, carrying connections to `peer`.
    Listening {
        local: &'a Addr,
        segmenter: &'a str,
        peer: &'a Addr,
    },
    /// The far proxy accepts near proxies on `local`.
    Serving { local: &'a Addr },
    /// The far proxy refused a link before its handshake completed.
    Refused { error: &'a NetError },
    /// The near proxy could not set up a link for an application connection (which is
    /// reset).
    SetupFailed {
        id: u64,
        app: &'a str,
        error: &'a ProxyError,
    },
    /// The far proxy refused a near proxy's connection (and told it why).
    FarRefused {
        id: u64,
        near: &'a str,
        error: &'a ProxyError,
    },
    /// A connection was set up but its pump could not start.
    StartFailed {
        id: u64,
        route: &'a str,
        error: &'a ProxyError,
    },
    /// A connection ended.
    Closed(&'a ConnectionReport),
}

/// Where [`Event`]s go (called from every connection's thread).
pub type Report = Box<dyn Fn(Event<'_>) + Send + Sync>;

/// One proxy process: its settings, its caches, and its connections.
pub struct Proxy {
    settings: ProxySettings,
    caches: Caches,
    next_id: AtomicU64,
    report: Report,
}

impl Proxy {
    pub fn new(settings: ProxySettings, report: Report) -> Arc<Proxy> {
        let caches = Caches::new(settings.cache_root.clone(), settings.cache.clone());
        Arc::new(Proxy {
            settings,
            caches,
            next_id: AtomicU64::new(1),
            report,
        })
    }

    /// Writes every cache's buffered records and models (at exit, on a signal).
    pub fn flush_caches(&self) {
        self.caches.flush_all();
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The near proxy: accepts application connections on every `listen` address and
    /// carries each to the far proxy at `peer`. Runs until a listener fails.
    pub fn run_near(self: &Arc<Self>, listen: Vec<Listen>, peer: Addr) -> Result<(), ProxyError> {
        let mut specs = Vec::new();
        for l in listen {
            stream_segmenter(&l.segmenter)?;
            let listener = Listener::bind(&l.addr)?;
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
                segmenter: l.segmenter,
            });
        }
        for s in &specs {
            (self.report)(Event::Listening {
                local: &s.local,
                segmenter: &s.segmenter,
                peer: &peer,
            });
        }
        let peer = Arc::new(peer);
        let threads: Vec<_> = specs
            .into_iter()
            .map(|spec| {
                let (me, peer) = (self.clone(), peer.clone());
                std::thread::spawn(move || me.accept_near(spec, peer))
            })
            .collect();
        for t in threads {
            t.join().map_err(|_| ProxyError::ListenerPanicked)??;
        }
        Ok(())
    }

    fn accept_near(self: Arc<Self>, spec: ListenSpec, peer: Arc<Addr>) -> Result<(), ProxyError> {
        let spec = Arc::new(spec);
        loop {
            let app = match spec.listener.accept_timeout(Duration::from_secs(3600)) {
                Ok(c) => c,
                Err(NetError::Timeout { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            let id = self.next_id();
            let (me, spec, peer) = (self.clone(), spec.clone(), peer.clone());
            std::thread::Builder::new()
                .name(format!("vargr-proxy-{id}"))
                .spawn(move || me.near_connection(id, app, &spec, &peer))
                .map_err(ProxyError::io("starting a connection thread"))?;
        }
    }

    fn near_connection(&self, id: u64, app: Conn, spec: &ListenSpec, peer: &Addr) {
        let app_name = app.peer_name();
        match self.near_setup(spec, peer) {
            Ok((link, cache, far)) => {
                let route = format!("{app_name} → {far} ({peer})");
                self.finish(id, app, link, &spec.segmenter, &cache, &route);
            }
            Err(e) => {
                (self.report)(Event::SetupFailed {
                    id,
                    app: &app_name,
                    error: &e,
                });
                reset(app);
            }
        }
    }

    /// Connects to the far proxy: authentication, hello, welcome.
    fn near_setup(
        &self,
        spec: &ListenSpec,
        peer: &Addr,
    ) -> Result<(LinkConn, SharedCache<DiskCache>, String), ProxyError> {
        let s = &self.settings;
        let hello = Hello {
            version: PROXY_VERSION,
            name: s.name.clone(),
            port: spec.port,
            segmenter: spec.segmenter.clone(),
            fp_bits: s.pump.bits.get(),
            group: s.pump.group,
        };
        let body = serde_json::to_vec(&hello).expect("serializable");
        let (link, welcome) = open_link(peer, &s.secret, s.security, &KINDS, &body)?;
        let welcome: Welcome = serde_json::from_slice(&welcome).map_err(|e| {
            ProxyError::Refused(format!(
                "the far proxy {peer} sent a malformed welcome: {e}"
            ))
        })?;
        let cache = self.caches.get("proxy-to-", &welcome.name)?;
        Ok((link, cache, welcome.name))
    }

    /// The far proxy: accepts near proxies' links on `serve` and connects each to its
    /// server. Runs until the listener fails.
    pub fn run_far(self: &Arc<Self>, serve: Addr, forwards: Forwards) -> Result<(), ProxyError> {
        if forwards.by_port.is_empty() && forwards.default.is_none() {
            return Err(ProxyError::NoForward);
        }
        let forwards = Arc::new(forwards);
        let l = Listener::bind(&serve)?;
        (self.report)(Event::Serving {
            local: &l.local_addr()?,
        });
        let me = self.clone();
        let refused = Box::new(move |e: &NetError| (me.report)(Event::Refused { error: e }));
        let me = self.clone();
        let each = Arc::new(move |link: LinkConn| {
            let id = me.next_id();
            me.far_connection(id, link, &forwards)
        });
        serve_links(
            l,
            &self.settings.secret,
            self.settings.security,
            "vargr-proxy",
            refused,
            each,
        )
    }

    fn far_connection(&self, id: u64, mut link: LinkConn, forwards: &Forwards) {
        let near = link.conn.peer_name();
        match self.far_setup(&mut link, &near, forwards) {
            Ok((app, cache, hello, target)) => {
                let route = format!("{} ({near}) → {target}", hello.name);
                self.finish(id, app, link, &hello.segmenter, &cache, &route);
            }
            Err(e) => {
                (self.report)(Event::FarRefused {
                    id,
                    near: &near,
                    error: &e,
                });
                let _ = link.write_frame(F_ABORT, error_chain(&e).as_bytes());
            }
        }
    }

    /// Reads the near proxy's hello, opens its cache and connects the server.
    fn far_setup(
        &self,
        link: &mut LinkConn,
        near: &str,
        forwards: &Forwards,
    ) -> Result<(Conn, SharedCache<DiskCache>, Hello, Addr), ProxyError> {
        let s = &self.settings;
        let refuse = |why: String| Err(ProxyError::Refused(why));
        let (kind, body) = link
            .read_frame(MAX_HELLO)
            .map_err(|source| ProxyError::Setup {
                what: format!("reading the hello of {near}"),
                source,
            })?;
        if kind != F_HELLO {
            return refuse(format!("expected a hello, got frame type {kind}"));
        }
        let hello: Hello = match serde_json::from_slice(&body) {
            Ok(h) => h,
            Err(e) => return refuse(format!("malformed hello: {e}")),
        };
        if hello.version != PROXY_VERSION {
            return refuse(format!(
                "the near proxy speaks proxy protocol {}, this one {PROXY_VERSION}",
                hello.version
            ));
        }
        if hello.fp_bits != s.pump.bits.get() {
            return refuse(format!(
                "the near proxy uses {}-bit fingerprints, this one {} (--fp-bits must match)",
                hello.fp_bits,
                s.pump.bits.get()
            ));
        }
        if hello.group == 0 || hello.group > 1 << 16 {
            return refuse(format!(
                "group of {} segments: expected 1 ..= 65536",
                hello.group
            ));
        }
        stream_segmenter(&hello.segmenter)?;
        let Some(target) = forwards.target(hello.port).cloned() else {
            return refuse(format!(
                "no --forward for port {} (and none for every port)",
                hello.port
            ));
        };
        let cache = self.caches.get("proxy-from-", &hello.name)?;
        let app = connect_now(&target, SETUP_TIMEOUT)
            .map_err(ProxyError::io(format!("connecting to the server {target}")))?;
        let welcome = serde_json::to_vec(&Welcome {
            name: s.name.clone(),
        })
        .expect("serializable");
        link.write_frame(F_WELCOME, &welcome)
            .map_err(ProxyError::io(format!("sending the welcome to {near}")))?;
        Ok((app, cache, hello, target))
    }

    /// Runs a connection's pump, reports it, and keeps the cache's records on disk.
    fn finish(
        &self,
        id: u64,
        app: Conn,
        mut link: LinkConn,
        segmenter: &str,
        cache: &SharedCache<DiskCache>,
        route: &str,
    ) {
        let dir = cache.lock().dir().to_path_buf();
        let capacity = self.settings.pump.dedup_config().delta_index;
        let models = self.caches.take_models(&dir, capacity);
        let plain = link.take_plain();
        let started = Pump::new(&self.settings.pump, segmenter, cache.clone(), models, plain)
            .map_err(ProxyError::from)
            .and_then(|pump| {
                Driver::new(pump, app, link)
                    .map_err(ProxyError::io("making the sockets non-blocking"))
            });
        let mut driver = match started {
            Ok(d) => d,
            Err(e) => {
                (self.report)(Event::StartFailed {
                    id,
                    route,
                    error: &e,
                });
                return;
            }
        };
        let t0 = Instant::now();
        let r = driver.run();
        let (app_in, app_out) = driver.pump.app_bytes();
        let report = ConnectionReport {
            id,
            error: r.err(),
            app_in,
            link_out: driver.link_out_bytes,
            link_in: driver.link_in,
            app_out,
            sent: driver.pump.sender_stats().clone(),
            route: route.to_string(),
            segmenter: driver.pump.segmenter_name().to_string(),
            elapsed: t0.elapsed(),
        };
        (self.report)(Event::Closed(&report));
        if let Some(e) = &report.error {
            if e.tell_peer() {
                driver.tell_peer(&e.to_string());
            }
        }
        self.caches.put_models(&dir, driver.pump.take_models());
        let app = driver.into_app();
        match report.error {
            None => drop(app),
            Some(_) => reset(app),
        }
        save_cache(cache);
    }
}

struct ListenSpec {
    listener: Listener,
    local: Addr,
    port: u16,
    segmenter: String,
}
