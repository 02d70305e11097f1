//! `vargr vnc`: Varg's VNC proxy pair over real sockets (the protocol is vargr-vnc's).
//!
//! ```text
//!  viewers ──rfb──▶ near proxy ══════ link (Varg: 2-D dedup + zstd) ══════ far proxy ──rfb──▶ VNC server
//!                   --listen ADDR --peer FAR                            --serve ADDR --forward HOST:5900
//! ```
//!
//! The near proxy opens one link to the far proxy when its first viewer connects and
//! shares it among all viewers; the far proxy makes one RFB connection to the server
//! per link. When the last viewer leaves, the link closes; the segment caches stay on
//! disk (`vnc-to-NAME` near, `vnc-from-NAME` far), so the next session's first
//! screen costs fingerprints where it repeats the last one's.
//!
//! A link runs the HMAC handshake of [`vargr_net::auth`] and then sealed records, as
//! `vargr proxy`'s: a hello from the near proxy (version, name, fingerprint width and
//! group), a welcome from the far proxy once it has reached the server, or an abort
//! with the reason; then the frames of [`vargr_vnc::link`].
//!
//! One thread serves the near proxy (poll(2) over the listener, the link and every
//! viewer), one thread each link at the far proxy (the server and the link). A side
//! writes only what the other asked for (viewers get updates on request, the far
//! proxy sends updates within the near proxy's credit), so a viewer or a link that
//! stops reading holds one update's bytes, not a growing queue. A viewer that breaks
//! RFB ends alone; a link or server failure ends the session and closes its viewers.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use vargr_dedup::cache::{DiskCache, DiskConfig, SharedCache};
use vargr_dedup::protocol::Stats;
use vargr_dedup::segment::VargParams;
use vargr_net::auth::Secret;
use vargr_net::{Addr, Conn, LinkSecurity, Listener, NetError};
use vargr_vnc::link::{F_ABORT, F_HELLO, F_WELCOME};
use vargr_vnc::{
    FarConfig, FarLink, FarSide, LinkConfig, NearConfig, NearLink, NearSide, RecordWriter,
    RegionCut, ViewerId, VncError,
};

use crate::caches::{save_cache, Caches};
use crate::driver::{connect_now, pollfd, set_nonblocking, tune_link, LinkConn, OutBuf};
use crate::error::{error_chain, ProxyError};
use crate::setup::{open_link, serve_links, SetupKinds, MAX_HELLO, SETUP_TIMEOUT};
use crate::watch::{poll_timeout, Progress, Watch};

/// Version of the set-up and frames between the two proxies.
/// 2: plain updates teach by the orientation of the cut (the welcome names the far
/// proxy's Varg parameters), small control messages travel in layouts.
pub const VNC_LINK_VERSION: u32 = 2;
const KINDS: SetupKinds = SetupKinds {
    hello: F_HELLO,
    welcome: F_WELCOME,
    abort: F_ABORT,
};
/// Bytes read from a socket per turn, so that one busy peer does not starve others.
const READ_BUDGET: usize = 1 << 20;
/// The far proxy sends no new update while this much is still unwritten to the link
/// socket: the credit bounds what is in flight, this what waits in the process.
const LINK_BACKLOG: usize = 64 << 10;

/// What a VNC proxy needs, from its caller.
pub struct VncSettings {
    pub secret: Secret,
    pub security: LinkSecurity,
    /// How this proxy names itself to its peer (the peer's cache of it).
    pub name: String,
    pub cache_root: PathBuf,
    pub cache: DiskConfig,
    pub link: LinkConfig,
    /// Far proxy: how changed areas are cut (Varg's regions by default).
    pub regions: RegionCut,
    /// Far proxy: the VNC server's password, if it asks for one.
    pub server_password: Option<Vec<u8>>,
    /// Near proxy: the password viewers must give (else security None).
    pub viewer_password: Option<Vec<u8>>,
    /// Far proxy: write each session's server updates, timed, to a new file in this
    /// directory (`vargr bench vnc` replays such recordings).
    pub record: Option<PathBuf>,
    /// How long a server, viewer or link peer may take to finish its handshake, or
    /// stay silent in the middle of a message, or take none of what it is sent,
    /// before its connection ends ([`crate::watch`]).
    pub stall: Duration,
    /// Near proxy: most viewers at once; more are refused.
    pub max_viewers: usize,
}

#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    version: u32,
    name: String,
    fp_bits: u8,
    group: u32,
}

#[derive(Debug, Serialize, Deserialize)]
struct Welcome {
    name: String,
    /// The far proxy's Varg parameters (none when it cuts tiles): the near proxy cuts
    /// its mirror with them to learn what plain updates teach.
    lessons: Option<VargParams>,
}

/// What a session did, when it ended.
#[derive(Debug)]
pub struct SessionReport {
    pub route: String,
    pub error: Option<String>,
    /// Link bytes written and read (sealed records, as on the wire).
    pub link_out: u64,
    pub link_in: u64,
    /// The far side's dedup sender (zeros at the near side).
    pub sent: Stats,
    pub elapsed: Duration,
}

/// What a VNC proxy tells its caller, as it happens.
#[derive(Debug)]
pub enum VncEvent<'a> {
    Listening {
        local: &'a Addr,
        peer: &'a Addr,
    },
    Serving {
        local: &'a Addr,
        forward: &'a Addr,
    },
    /// The far proxy refused a link before its handshake completed.
    Refused {
        error: &'a NetError,
    },
    /// A session could not start (the viewers waiting for it are closed).
    SetupFailed {
        error: &'a ProxyError,
    },
    ViewerJoined {
        id: u64,
        from: &'a str,
    },
    /// A viewer was turned away before it joined.
    ViewerRefused {
        from: &'a str,
        reason: &'a str,
    },
    ViewerLeft {
        id: u64,
        error: Option<&'a str>,
    },
    SessionEnded(&'a SessionReport),
}

pub type VncReport = Box<dyn Fn(VncEvent<'_>) + Send + Sync>;

/// One VNC proxy process: its settings and caches.
pub struct VncProxy {
    settings: VncSettings,
    caches: Caches,
    report: VncReport,
}

struct Viewer {
    conn: Conn,
    out: OutBuf,
    read: u64,
    watch: Watch,
}

/// The near proxy's shared link and the viewers on it.
struct NearSession {
    link: LinkConn,
    out: OutBuf,
    nl: NearLink<SharedCache<DiskCache>>,
    near: NearSide,
    viewers: BTreeMap<ViewerId, Viewer>,
    cache: SharedCache<DiskCache>,
    route: String,
    link_in: u64,
    link_watch: Watch,
    started: Instant,
}

impl VncProxy {
    pub fn new(settings: VncSettings, report: VncReport) -> Arc<VncProxy> {
        let caches = Caches::new(settings.cache_root.clone(), settings.cache.clone());
        Arc::new(VncProxy {
            settings,
            caches,
            report,
        })
    }

    /// Writes every cache's buffered records (at exit, on a signal).
    pub fn flush_caches(&self) {
        self.caches.flush_all();
    }

    /// The near proxy: serves viewers on `listen` through the far proxy at `peer`.
    /// Runs until the listener fails.
    pub fn run_near(&self, listen: Addr, peer: Addr) -> Result<(), ProxyError> {
        let listener = Listener::bind(&listen)?;
        let local = listener.local_addr()?;
        (self.report)(VncEvent::Listening {
            local: &local,
            peer: &peer,
        });
        let lfd = match &listener {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l, _) => l.as_raw_fd(),
        };
        let mut session: Option<NearSession> = None;
        let mut scratch = vec![0u8; 256 << 10];
        loop {
            let mut fds = vec![libc::pollfd {
                fd: lfd,
                events: libc::POLLIN,
                revents: 0,
            }];
            let mut ids = Vec::new();
            if let Some(s) = &session {
                let out = if s.out.len() > 0 { libc::POLLOUT } else { 0 };
                fds.push(pollfd(&s.link.conn, libc::POLLIN | out));
                // Viewers' input waits while the link is backed up.
                let input = if s.out.len() < LINK_BACKLOG {
                    libc::POLLIN
                } else {
                    0
                };
                for (id, v) in &s.viewers {
                    let out = if v.out.len() > 0 { libc::POLLOUT } else { 0 };
                    fds.push(pollfd(&v.conn, input | out));
                    ids.push(*id);
                }
            }
            let stall = self.settings.stall;
            let timeout = match &session {
                Some(s) => poll_timeout(
                    Instant::now(),
                    s.viewers
                        .values()
                        .filter_map(|v| v.watch.wake_at(stall))
                        .chain(s.link_watch.wake_at(stall)),
                ),
                None => -1,
            };
            // On a timeout nothing is ready, and the deadlines below are checked.
            poll(&mut fds, timeout)?;
            let ready =
                |f: &libc::pollfd| f.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
            if ready(&fds[0]) {
                let conn = listener.accept_timeout(Duration::ZERO)?;
                let from = conn.peer_name();
                let viewers = session.as_ref().map_or(0, |s| s.viewers.len());
                if viewers >= self.settings.max_viewers {
                    (self.report)(VncEvent::ViewerRefused {
                        from: &from,
                        reason: &format!("{viewers} viewers already, the most allowed"),
                    });
                    crate::driver::reset(conn);
                    continue;
                }
                if session.is_none() {
                    match self.near_setup(&peer) {
                        Ok(s) => session = Some(s),
                        Err(e) => {
                            (self.report)(VncEvent::SetupFailed { error: &e });
                            crate::driver::reset(conn);
                            continue;
                        }
                    }
                }
                let s = session.as_mut().expect("set up above");
                let id = match &self.settings.viewer_password {
                    Some(_) => {
                        let mut challenge = [0u8; 16];
                        getrandom::getrandom(&mut challenge).map_err(|e| {
                            ProxyError::io("drawing a challenge")(io::Error::other(e.to_string()))
                        })?;
                        s.near.add_viewer_with_challenge(challenge)
                    }
                    None => s.near.add_viewer(),
                };
                set_nonblocking(&conn, true)
                    .map_err(ProxyError::io("making a viewer socket non-blocking"))?;
                (self.report)(VncEvent::ViewerJoined {
                    id: id.0,
                    from: &from,
                });
                s.viewers.insert(
                    id,
                    Viewer {
                        conn,
                        out: OutBuf::default(),
                        read: 0,
                        watch: Watch::new(Instant::now()),
                    },
                );
            }
            let Some(s) = session.as_mut() else {
                continue;
            };
            // The link first: what it brings changes what the viewers get.
            let link_result = if fds.len() > 1 && ready(&fds[1]) {
                s.read_link(&mut scratch)
            } else {
                Ok(())
            };
            let mut gone = Vec::new();
            for (k, id) in ids.iter().enumerate() {
                let f = &fds[2 + k];
                if !ready(f) || !s.viewers.contains_key(id) {
                    continue;
                }
                if let Err(e) = s.read_viewer(*id, &mut scratch) {
                    gone.push((*id, e));
                }
            }
            // Again while a viewer held back in a turn has since taken all its bytes:
            // its waiting request is answered now, not at the next event (which may
            // never come on a screen that holds still).
            let result = link_result.and_then(|()| loop {
                let held = s.turn(&mut gone)?;
                s.write_out(&mut gone)?;
                if !held
                    .iter()
                    .any(|id| s.viewers.get(id).is_some_and(|v| v.out.len() == 0))
                {
                    break Ok(());
                }
            });
            let result = result.and_then(|()| s.check_deadlines(stall, &mut gone));
            for (id, why) in gone {
                if let Some(mut v) = s.viewers.remove(&id) {
                    s.near.remove_viewer(id);
                    // A refusal's reason, if the socket takes it.
                    let _ = v.out.write_to(&mut v.conn);
                    (self.report)(VncEvent::ViewerLeft {
                        id: id.0,
                        error: why.as_deref(),
                    });
                }
            }
            if let Err(e) = result {
                self.end_near(session.take().expect("running"), Some(e));
            } else if s.viewers.is_empty() {
                self.end_near(session.take().expect("running"), None);
            }
        }
    }

    fn end_near(&self, mut s: NearSession, error: Option<String>) {
        if let Some(e) = &error {
            s.link.say_why(&mut s.out, F_ABORT, e);
        }
        for (id, v) in std::mem::take(&mut s.viewers) {
            (self.report)(VncEvent::ViewerLeft {
                id: id.0,
                error: error.as_deref(),
            });
            crate::driver::reset(v.conn);
        }
        let report = SessionReport {
            route: s.route.clone(),
            error,
            link_out: s.out.written,
            link_in: s.link_in,
            sent: Stats::default(),
            elapsed: s.started.elapsed(),
        };
        (self.report)(VncEvent::SessionEnded(&report));
        save_cache(&s.cache);
    }

    /// Connects to the far proxy: authentication, hello, welcome.
    fn near_setup(&self, peer: &Addr) -> Result<NearSession, ProxyError> {
        let s = &self.settings;
        let hello = Hello {
            version: VNC_LINK_VERSION,
            name: s.name.clone(),
            fp_bits: s.link.dedup.bits.get(),
            group: s.link.dedup.group,
        };
        let body = serde_json::to_vec(&hello).expect("serializable");
        let (link, welcome) = open_link(peer, &s.secret, s.security, &KINDS, &body)?;
        let welcome: Welcome = serde_json::from_slice(&welcome).map_err(|e| {
            ProxyError::Refused(format!(
                "the far proxy {peer} sent a malformed welcome: {e}"
            ))
        })?;
        let what = peer.to_string();
        let cache = self.caches.get("vnc-to-", &welcome.name)?;
        let link_config = LinkConfig {
            lessons: welcome.lessons,
            ..s.link.clone()
        };
        let nl = NearLink::new(&link_config, cache.clone()).map_err(vnc_error)?;
        let near = NearSide::new(NearConfig {
            limits: s.link.limits.clone(),
            password: s.viewer_password.clone(),
        });
        link.conn.set_timeout(None).ok();
        set_nonblocking(&link.conn, true)
            .map_err(ProxyError::io("making the link non-blocking"))?;
        tune_link(&link.conn);
        let mut session = NearSession {
            link,
            out: OutBuf::default(),
            nl,
            near,
            viewers: BTreeMap::new(),
            cache,
            route: format!("viewers → {} ({what})", welcome.name),
            link_in: 0,
            link_watch: Watch::new(Instant::now()),
            started: Instant::now(),
        };
        // Bytes that came with the welcome.
        let plain = session.link.take_plain();
        session.nl.receive(&plain).map_err(vnc_error)?;
        Ok(session)
    }

    /// The far proxy: accepts near proxies' links on `serve` and connects each to the
    /// VNC server at `forward`. Runs until the listener fails.
    pub fn run_far(self: &Arc<Self>, serve: Addr, forward: Addr) -> Result<(), ProxyError> {
        let l = Listener::bind(&serve)?;
        (self.report)(VncEvent::Serving {
            local: &l.local_addr()?,
            forward: &forward,
        });
        let me = self.clone();
        let refused = Box::new(move |e: &NetError| (me.report)(VncEvent::Refused { error: e }));
        let me = self.clone();
        let each = Arc::new(move |link: LinkConn| me.far_session(link, &forward));
        serve_links(
            l,
            &self.settings.secret,
            self.settings.security,
            "vargr-vnc-far",
            refused,
            each,
        )
    }

    fn far_session(&self, mut link: LinkConn, forward: &Addr) {
        let near = link.conn.peer_name();
        let started = Instant::now();
        let (server, cache, hello) = match self.far_setup(&mut link, &near, forward) {
            Ok(x) => x,
            Err(e) => {
                (self.report)(VncEvent::SetupFailed { error: &e });
                let _ = link.write_frame(F_ABORT, error_chain(&e).as_bytes());
                return;
            }
        };
        let mut run = FarRun {
            link,
            server,
            out: OutBuf::default(),
            server_out: OutBuf::default(),
            link_in: 0,
            server_in: 0,
        };
        let (error, sent) = self.far_loop(&mut run, cache.clone());
        if let Some(e) = &error {
            run.link.say_why(&mut run.out, F_ABORT, e);
        }
        let report = SessionReport {
            route: format!("{} ({near}) → {forward}", hello.name),
            error,
            link_out: run.out.written,
            link_in: run.link_in,
            sent,
            elapsed: started.elapsed(),
        };
        (self.report)(VncEvent::SessionEnded(&report));
        save_cache(&cache);
    }

    /// Reads the hello, opens the cache, reaches the VNC server, answers.
    fn far_setup(
        &self,
        link: &mut LinkConn,
        near: &str,
        forward: &Addr,
    ) -> Result<(Conn, SharedCache<DiskCache>, Hello), ProxyError> {
        let s = &self.settings;
        let (kind, body) = link
            .read_frame(MAX_HELLO)
            .map_err(|source| ProxyError::Setup {
                what: format!("reading the hello of {near}"),
                source,
            })?;
        if kind != F_HELLO {
            return Err(ProxyError::Refused(format!(
                "expected a hello, got frame type {kind}"
            )));
        }
        let hello: Hello = serde_json::from_slice(&body)
            .map_err(|e| ProxyError::Refused(format!("malformed hello: {e}")))?;
        if hello.version != VNC_LINK_VERSION {
            return Err(ProxyError::Refused(format!(
                "the near proxy speaks VNC link protocol {}, this one {VNC_LINK_VERSION}",
                hello.version
            )));
        }
        if hello.fp_bits != s.link.dedup.bits.get() || hello.group != s.link.dedup.group {
            return Err(ProxyError::Refused(format!(
                "the near proxy uses {}-bit fingerprints in groups of {}, this one {} in \
                 groups of {} (--fp-bits and --group must match)",
                hello.fp_bits,
                hello.group,
                s.link.dedup.bits.get(),
                s.link.dedup.group
            )));
        }
        let cache = self.caches.get("vnc-from-", &hello.name)?;
        let server = connect_now(forward, SETUP_TIMEOUT).map_err(ProxyError::io(format!(
            "connecting to the VNC server {forward}"
        )))?;
        let welcome = Welcome {
            name: s.name.clone(),
            lessons: match &s.regions {
                RegionCut::Varg(p) => Some(p.clone()),
                RegionCut::Tiles => None,
            },
        };
        link.write_frame(
            F_WELCOME,
            &serde_json::to_vec(&welcome).expect("serializable"),
        )
        .map_err(ProxyError::io(format!("sending the welcome to {near}")))?;
        Ok((server, cache, hello))
    }

    /// Runs a far session until the server, the link or the near proxy ends it;
    /// returns why it failed, and what its dedup sender did.
    fn far_loop(&self, run: &mut FarRun, cache: SharedCache<DiskCache>) -> (Option<String>, Stats) {
        let mut fl = match FarLink::new(&self.settings.link, cache) {
            Ok(fl) => fl,
            Err(e) => return (Some(e.to_string()), Stats::default()),
        };
        let r = self.far_turns(run, &mut fl);
        (r.err(), fl.stats().clone())
    }

    fn far_turns(
        &self,
        run: &mut FarRun,
        fl: &mut FarLink<SharedCache<DiskCache>>,
    ) -> Result<(), String> {
        let s = &self.settings;
        let mut far = FarSide::new(FarConfig {
            client: vargr_rfb::ClientConfig {
                password: s.server_password.clone(),
                limits: s.link.limits.rfb.clone(),
                ..Default::default()
            },
            limits: s.link.limits.clone(),
            regions: s.regions.clone(),
            record: s.record.is_some(),
        })
        .map_err(|e| e.to_string())?;
        let mut recording = match &s.record {
            Some(dir) => Some(
                new_recording(dir)
                    .map_err(|e| format!("starting a recording in {}: {e}", dir.display()))?,
            ),
            None => None,
        };
        let t0 = Instant::now();
        for c in [&run.link.conn, &run.server] {
            set_nonblocking(c, true).map_err(|e| format!("making a socket non-blocking: {e}"))?;
        }
        tune_link(&run.link.conn);
        let plain = run.link.take_plain();
        fl.receive(&plain).map_err(|e| e.to_string())?;
        let mut scratch = vec![0u8; 256 << 10];
        let stall = s.stall;
        let mut server_watch = Watch::new(Instant::now());
        let mut link_watch = Watch::new(Instant::now());
        loop {
            far.receive_near(&fl.take_control());
            far.process().map_err(|e| format!("VNC server: {e}"))?;
            if let Some(w) = &mut recording {
                while let Some(m) = far.poll_recorded() {
                    w.write(t0.elapsed(), &m)
                        .map_err(|e| format!("writing the recording: {e}"))?;
                }
            }
            run.server_out
                .data
                .extend_from_slice(&far.take_server_output());
            while let Some(m) = far.poll_near() {
                fl.send_outgoing(&m).map_err(|e| e.to_string())?;
            }
            if fl.ready() && run.out.len() < LINK_BACKLOG && far.send_update() {
                while let Some(m) = far.poll_near() {
                    fl.send_outgoing(&m).map_err(|e| e.to_string())?;
                }
            }
            fl.flush().map_err(|e| e.to_string())?;
            let frames = fl.take_output();
            if !frames.is_empty() {
                run.link.seal.seal(&frames, &mut run.out.data);
            }
            run.write_out()?;
            let link_out = if run.out.len() > 0 { libc::POLLOUT } else { 0 };
            let server_out = if run.server_out.len() > 0 {
                libc::POLLOUT
            } else {
                0
            };
            // The near side's input waits while the server does not take it.
            let link_in = if run.server_out.len() < LINK_BACKLOG {
                libc::POLLIN
            } else {
                0
            };
            let mut fds = [
                pollfd(&run.link.conn, link_in | link_out),
                pollfd(&run.server, libc::POLLIN | server_out),
            ];
            let now = Instant::now();
            let (ready, partial) = far.server_progress();
            server_watch.observe(
                now,
                Progress {
                    ready,
                    partial: partial > 0,
                    read: run.server_in,
                    unsent: run.server_out.len() > 0,
                    written: run.server_out.written,
                },
            );
            link_watch.observe(now, link_progress(&run.link, run.link_in, &run.out));
            if let Some(why) = server_watch.overdue(now, stall) {
                return Err(format!("the VNC server {why}"));
            }
            if let Some(why) = link_watch.overdue(now, stall) {
                return Err(format!("the near proxy {why}"));
            }
            let timeout = poll_timeout(
                now,
                [server_watch.wake_at(stall), link_watch.wake_at(stall)]
                    .into_iter()
                    .flatten(),
            );
            poll(&mut fds, timeout).map_err(|e| e.to_string())?;
            let ready =
                |f: &libc::pollfd| f.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
            if ready(&fds[0]) {
                let (plain, eof) = read_sealed(&mut run.link, &mut scratch, &mut run.link_in)
                    .map_err(|e| format!("reading from the near proxy: {e}"))?;
                fl.receive(&plain)
                    .map_err(|e| format!("from the near proxy: {e}"))?;
                if eof {
                    // The last viewer left (an abort would have been an error above).
                    if let Some(w) = recording.take() {
                        w.finish()
                            .map_err(|e| format!("finishing the recording: {e}"))?;
                    }
                    return Ok(());
                }
            }
            if ready(&fds[1]) {
                let (n, eof) = read_some(&mut run.server, &mut scratch, |b| far.receive_server(b))
                    .map_err(|e| format!("reading from the VNC server: {e}"))?;
                run.server_in += n as u64;
                if eof {
                    // What it sent last may be whole messages still to handle, or
                    // the start of one that will never end.
                    far.process().map_err(|e| format!("VNC server: {e}"))?;
                    return Err(match far.server_progress().1 {
                        0 => "the VNC server closed the connection".into(),
                        n => format!(
                            "the VNC server closed the connection in the middle of a \
                             message ({n} bytes of it received)"
                        ),
                    });
                }
            }
        }
    }
}

struct FarRun {
    link: LinkConn,
    server: Conn,
    out: OutBuf,
    server_out: OutBuf,
    link_in: u64,
    server_in: u64,
}

impl FarRun {
    fn write_out(&mut self) -> Result<(), String> {
        if self.server_out.len() > 0 {
            self.server_out
                .write_to(&mut self.server)
                .map_err(|e| format!("writing to the VNC server: {e}"))?;
        }
        if self.out.len() > 0 {
            self.out
                .write_to(&mut self.link.conn)
                .map_err(|e| format!("writing to the near proxy: {e}"))?;
        }
        Ok(())
    }
}

impl NearSession {
    fn read_link(&mut self, scratch: &mut [u8]) -> Result<(), String> {
        let (plain, eof) = read_sealed(&mut self.link, scratch, &mut self.link_in)
            .map_err(|e| format!("reading from the far proxy: {e}"))?;
        self.nl
            .receive(&plain)
            .map_err(|e| format!("from the far proxy: {e}"))?;
        while let Some(m) = self.nl.poll_msg() {
            self.near.receive_far_msg(m);
            if self.nl.lesson_pending() {
                // Learnt from the mirror as of this message, before later ones.
                self.near
                    .apply_far()
                    .map_err(|e| format!("from the far proxy: {e}"))?;
                self.nl
                    .learn(self.near.mirror())
                    .map_err(|e| format!("near cache: {e}"))?;
            }
        }
        if eof {
            return Err("the far proxy closed the link".into());
        }
        Ok(())
    }

    /// Reads what a viewer sent; `Err(None)` when it closed, `Err(Some(why))` on error.
    fn read_viewer(&mut self, id: ViewerId, scratch: &mut [u8]) -> Result<(), Option<String>> {
        let v = self.viewers.get_mut(&id).expect("listed");
        let near = &mut self.near;
        let (n, eof) = read_some(&mut v.conn, scratch, |b| {
            near.receive_viewer(id, b).expect("listed viewer")
        })
        .map_err(|e| Some(format!("reading from the viewer: {e}")))?;
        v.read += n as u64;
        if eof {
            return Err(None);
        }
        Ok(())
    }

    /// Ends the viewers (into `gone`) and the link (an error) that passed a deadline.
    fn check_deadlines(
        &mut self,
        stall: Duration,
        gone: &mut Vec<(ViewerId, Option<String>)>,
    ) -> Result<(), String> {
        let now = Instant::now();
        for (&id, v) in &mut self.viewers {
            let Ok((ready, partial)) = self.near.viewer_progress(id) else {
                continue;
            };
            v.watch.observe(
                now,
                Progress {
                    ready,
                    partial: partial > 0,
                    read: v.read,
                    unsent: v.out.len() > 0,
                    written: v.out.written,
                },
            );
            if let Some(why) = v.watch.overdue(now, stall) {
                if !gone.iter().any(|(g, _)| *g == id) {
                    gone.push((id, Some(format!("the viewer {why}"))));
                }
            }
        }
        self.link_watch
            .observe(now, link_progress(&self.link, self.link_in, &self.out));
        match self.link_watch.overdue(now, stall) {
            Some(why) => Err(format!("the far proxy {why}")),
            None => Ok(()),
        }
    }

    /// Runs the near side over what arrived and queues what it answers.
    /// Returns the viewers held back (their socket had not taken everything).
    fn turn(
        &mut self,
        gone: &mut Vec<(ViewerId, Option<String>)>,
    ) -> Result<Vec<ViewerId>, String> {
        let mut held = Vec::new();
        for (&id, v) in &self.viewers {
            let hold = v.out.len() > 0;
            self.near.hold_viewer(id, hold).expect("listed viewer");
            if hold {
                held.push(id);
            }
        }
        let failed = self
            .near
            .process()
            .map_err(|e| format!("from the far proxy: {e}"))?;
        for (id, e) in failed {
            gone.push((id, Some(e.to_string())));
        }
        for (&id, v) in &mut self.viewers {
            if let Ok(b) = self.near.take_viewer_output(id) {
                v.out.data.extend_from_slice(&b);
            }
        }
        self.nl.send_control(&self.near.take_far_output());
        let frames = self.nl.take_output();
        if !frames.is_empty() {
            self.link.seal.seal(&frames, &mut self.out.data);
        }
        Ok(held)
    }

    /// Writes what the sockets take; viewers whose socket failed join `gone`.
    fn write_out(&mut self, gone: &mut Vec<(ViewerId, Option<String>)>) -> Result<(), String> {
        if self.out.len() > 0 {
            self.out
                .write_to(&mut self.link.conn)
                .map_err(|e| format!("writing to the far proxy: {e}"))?;
        }
        for (&id, v) in &mut self.viewers {
            if v.out.len() > 0 && !gone.iter().any(|(g, _)| *g == id) {
                if let Err(e) = v.out.write_to(&mut v.conn) {
                    gone.push((id, Some(format!("writing to the viewer: {e}"))));
                }
            }
        }
        Ok(())
    }
}

/// A new recording file in `dir`, created there and nowhere else: a name that exists
/// (a symbolic link included) is not opened but skipped.
fn new_recording(dir: &std::path::Path) -> io::Result<RecordWriter<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    for n in 0..1000 {
        let path = dir.join(format!("vnc-{secs}-{n}.vncrec"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o600)
            .open(&path)
        {
            Ok(f) => return RecordWriter::new(f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("1000 recordings this second already"))
}

/// What a link did: `read` sealed bytes in, `out` what waits for its socket (its
/// handshake is done before a session starts).
fn link_progress(link: &LinkConn, read: u64, out: &OutBuf) -> Progress {
    Progress {
        ready: true,
        partial: link.open.pending() > 0,
        read,
        unsent: out.len() > 0,
        written: out.written,
    }
}

fn vnc_error(e: VncError) -> ProxyError {
    ProxyError::Refused(e.to_string())
}

fn poll(fds: &mut [libc::pollfd], timeout: i32) -> Result<i32, ProxyError> {
    loop {
        // SAFETY: `fds` is a slice of valid pollfd for the duration of the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if rc >= 0 {
            return Ok(rc);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(ProxyError::Io {
                what: "poll".into(),
                source: e,
            });
        }
    }
}

/// Reads until the socket would block or a budget is read, handing each piece to
/// `on`; returns the bytes read and whether the peer closed.
fn read_some(
    conn: &mut Conn,
    scratch: &mut [u8],
    mut on: impl FnMut(&[u8]),
) -> io::Result<(usize, bool)> {
    let mut got = 0;
    while got < READ_BUDGET {
        match conn.read(scratch) {
            Ok(0) => return Ok((got, true)),
            Ok(n) => {
                on(&scratch[..n]);
                got += n;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((got, false))
}

/// Reads sealed records from a link; returns the opened bytes and whether it closed
/// (inside a record is an error).
fn read_sealed(
    link: &mut LinkConn,
    scratch: &mut [u8],
    counted: &mut u64,
) -> io::Result<(Vec<u8>, bool)> {
    let LinkConn { conn, open, .. } = link;
    let (n, eof) = read_some(conn, scratch, |b| open.feed(b))?;
    *counted += n as u64;
    let mut plain = Vec::new();
    open.take(&mut plain).map_err(io::Error::other)?;
    if eof && open.pending() > 0 {
        return Err(io::Error::other("the link closed inside a record"));
    }
    Ok((plain, eof))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_never_follows_a_link_planted_where_it_would_go() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"keep").unwrap();
        let rec = dir.path().join("rec");
        std::fs::create_dir(&rec).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        // Links on the first names of this second and the next few.
        for secs in now..now + 3 {
            for n in 0..3 {
                std::os::unix::fs::symlink(&outside, rec.join(format!("vnc-{secs}-{n}.vncrec")))
                    .unwrap();
            }
        }
        let w = new_recording(&rec).unwrap();
        w.finish().unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        let files: Vec<_> = std::fs::read_dir(&rec)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| !p.is_symlink())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        let mode = std::fs::metadata(&files[0]).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
    }
}
