//! One replay: a recording served to a measuring viewer over an emulated WAN, directly
//! or through Varg's proxy pair.
//!
//! The **replay server** is vargr-vnc's `NearSide` fed the recording's messages at
//! their recorded times: a VNC server that, like Xvnc, answers one outstanding update
//! request at a time with everything changed since the last answer (a viewer behind
//! a slow link gets fewer, larger updates), encoded as that viewer asked. The
//! **viewer** is vargr-rfb's `ClientSide` and `Decoder`, with one incremental request
//! outstanding, as classic viewers do. Both run in this process on one clock, so the
//! time from the server applying update i to the viewer's screen equalling it (or a
//! later state) is measured directly: the screen's hash after every update is known
//! from the recording, and the viewer looks its own up.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use vargr_emu::{Relay, RelayConfig, RelayStats, WanProfile};
use vargr_rfb::encoding::COPY_RECT;
use vargr_rfb::{
    security, ClientConfig, ClientEvent, ClientMsg, ClientSide, Decoder, Framebuffer, Limits,
    ServerMsg,
};
use vargr_vnc::{NearConfig, NearSide, ProxyMsg};

use super::record::{screen_hash, Recording};

/// How the viewer reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Viewer → relay → replay server, in this encoding.
    Direct(i32),
    /// Viewer → near `vargr vnc` → relay → far `vargr vnc` → replay server; the viewer
    /// takes ZRLE from the near proxy (that hop is the LAN). The far proxy cuts changes
    /// into Varg's regions (its default) or, with `tiles`, into 32-pixel tiles.
    Varg { tiles: bool },
}

/// What one replay measured.
pub struct Outcome {
    /// Bytes the relay delivered, viewer (or near proxy) to server side, and back.
    pub forward: u64,
    pub backward: u64,
    /// Per recorded update: from the server applying it to the viewer showing it (or a
    /// later state); `None` if never within the drain.
    pub latencies: Vec<Option<Duration>>,
    /// FramebufferUpdates the viewer received.
    pub viewer_updates: u64,
    pub final_hash: Option<u64>,
    /// Bytes counted at the sockets: the viewer's and the replay server's.
    pub viewer_in: u64,
    pub viewer_out: u64,
    pub server_in: u64,
    pub server_out: u64,
    /// The far proxy's "session ended" line, with varg.
    pub far_report: Option<String>,
    pub seconds: f64,
}

/// The times the replay server applied each step, shared with the viewer.
type Applied = Arc<Mutex<Vec<Instant>>>;

/// How long any one wait may take before the replay is declared stuck.
const GUARD: Duration = Duration::from_secs(30);

pub fn replay(
    rec: &Arc<Recording>,
    profile: WanProfile,
    route: Route,
    vargr: &Path,
    drain: Duration,
    scratch: &Path,
) -> Result<Outcome> {
    let started = Instant::now();
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let server_addr = listener.local_addr()?;
    let applied: Applied = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let (rec, applied, stop) = (rec.clone(), applied.clone(), stop.clone());
        std::thread::spawn(move || serve(listener, &rec, &applied, &stop))
    };
    let result = (|| {
        let (relay_to, encoding, proxies) = match route {
            Route::Direct(enc) => (server_addr, enc, None),
            Route::Varg { tiles } => {
                let secret = random_secret()?;
                let far = ProxyProc::start(
                    vargr,
                    &[
                        "--serve",
                        "127.0.0.1:0",
                        "--forward",
                        &server_addr.to_string(),
                        "--name",
                        "far",
                        "--regions",
                        if tiles { "tiles" } else { "varg" },
                    ],
                    &secret,
                    &scratch.join("far-cache"),
                )?;
                (far.addr, vargr_rfb::encoding::ZRLE, Some((far, secret)))
            }
        };
        let relay = start_relay(profile, relay_to)?;
        let (viewer_addr, proxies) = match proxies {
            None => (relay.addr, None),
            Some((far, secret)) => {
                let near = ProxyProc::start(
                    vargr,
                    &[
                        "--listen",
                        "127.0.0.1:0",
                        "--peer",
                        &relay.addr.to_string(),
                        "--name",
                        "near",
                    ],
                    &secret,
                    &scratch.join("near-cache"),
                )?;
                (near.addr, Some((far, near)))
            }
        };
        let viewed = view(viewer_addr, encoding, rec, &applied, drain);
        let far_report = proxies.map(|(mut far, near)| {
            // The far proxy reports its session once the link closes behind the viewer.
            let line = far.wait_line("session ended", Duration::from_secs(10));
            drop(near);
            drop(far);
            line
        });
        let server_done = wait_finished(&server, Duration::from_secs(10));
        stop.store(true, Ordering::Relaxed);
        let relayed = relay.stop()?;
        let v = viewed?;
        ensure!(
            server_done,
            "the replay server did not see the connection end"
        );
        Ok((v, relayed, far_report.flatten()))
    })();
    stop.store(true, Ordering::Relaxed);
    let served = server
        .join()
        .map_err(|_| anyhow!("the replay server panicked"))?;
    let (v, relayed, far_report) = result?;
    let (server_in, server_out) = served.context("the replay server")?;
    Ok(Outcome {
        forward: relayed.forward_bytes,
        backward: relayed.backward_bytes,
        latencies: v.latencies,
        viewer_updates: v.updates,
        final_hash: v.final_hash,
        viewer_in: v.bytes_in,
        viewer_out: v.bytes_out,
        server_in,
        server_out,
        far_report,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn wait_finished<T>(h: &JoinHandle<T>, guard: Duration) -> bool {
    let deadline = Instant::now() + guard;
    while !h.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    h.is_finished()
}

/// 32 random bytes as hex, for the proxies' `VARGR_PROXY_SECRET`.
fn random_secret() -> Result<String> {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom")?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The relay on its own thread.
struct RunningRelay {
    addr: SocketAddr,
    stop: vargr_emu::StopHandle,
    thread: JoinHandle<Result<RelayStats, vargr_emu::EmuError>>,
}

fn start_relay(profile: WanProfile, to: SocketAddr) -> Result<RunningRelay> {
    let cfg = RelayConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), to, profile);
    let relay = Relay::bind(cfg)?;
    let addr = relay.local_addr();
    let stop = relay.stop_handle();
    let thread = std::thread::spawn(move || relay.run());
    Ok(RunningRelay { addr, stop, thread })
}

impl RunningRelay {
    fn stop(self) -> Result<RelayStats> {
        self.stop.stop();
        Ok(self
            .thread
            .join()
            .map_err(|_| anyhow!("the relay panicked"))??)
    }
}

/// A `vargr vnc` process with its stderr collected; killed when dropped.
struct ProxyProc {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    addr: SocketAddr,
}

impl Drop for ProxyProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ProxyProc {
    /// Starts `vargr vnc ARGS` with a fresh cache directory (every replay starts cold)
    /// and waits for the address it prints.
    fn start(vargr: &Path, args: &[&str], secret: &str, cache: &Path) -> Result<ProxyProc> {
        let _ = std::fs::remove_dir_all(cache);
        let mut child = super::record::end_with_us(&mut Command::new(vargr))
            .arg("vnc")
            .args(args)
            .arg("--cache-dir")
            .arg(cache)
            .env("VARGR_PROXY_SECRET", secret)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} vnc", vargr.display()))?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let err = BufReader::new(child.stderr.take().expect("piped"));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for l in err.lines().map_while(Result::ok) {
                sink.lock().expect("not poisoned").push(l);
            }
        });
        let mut p = ProxyProc {
            child,
            lines,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        };
        let line = p
            .wait_line(" on tcp:", GUARD)
            .ok_or_else(|| anyhow!("vargr vnc {args:?} did not start: {}", p.text()))?;
        // "vargr vnc: serving on tcp:127.0.0.1:PORT, VNC server …" or "listening on".
        let addr = line
            .split(" on tcp:")
            .nth(1)
            .and_then(|s| s.split([' ', ',']).next())
            .ok_or_else(|| anyhow!("no address in {line:?}"))?;
        p.addr = addr
            .parse()
            .with_context(|| format!("the address in {line:?}"))?;
        Ok(p)
    }

    fn text(&self) -> String {
        self.lines.lock().expect("not poisoned").join("\n")
    }

    /// The first line containing `what`, waiting up to `guard` for it (not past the
    /// process's exit).
    fn wait_line(&mut self, what: &str, guard: Duration) -> Option<String> {
        let deadline = Instant::now() + guard;
        loop {
            let exited = matches!(self.child.try_wait(), Ok(Some(_)));
            let found = self
                .lines
                .lock()
                .expect("not poisoned")
                .iter()
                .find(|l| l.contains(what))
                .cloned();
            if found.is_some() || exited || Instant::now() > deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// What a client sends until it has the ServerInit, in RFB 3.8 with security None
/// (version, security type, ClientInit): what the viewer and the far proxy speak to a
/// `NearSide`.
const HANDSHAKE_IN: u64 = 12 + 1 + 1;

/// The replay server: accepts one viewer (or the far proxy), then feeds the
/// recording's steps to a `NearSide` at their times (from the viewer's first message
/// after the handshake) until the connection ends or `stop`. Returns the bytes read and written on the socket.
fn serve(
    listener: TcpListener,
    rec: &Recording,
    applied: &Mutex<Vec<Instant>>,
    stop: &AtomicBool,
) -> Result<(u64, u64)> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + GUARD;
    let mut sock = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e).context("accepting the viewer"),
        }
        if stop.load(Ordering::Relaxed) {
            return Ok((0, 0));
        }
        ensure!(
            Instant::now() < deadline,
            "no viewer connected within {GUARD:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    sock.set_nonblocking(true)?;
    sock.set_nodelay(true)?;
    let mut near = NearSide::new(NearConfig::default());
    near.receive_far_msg(ProxyMsg::Init {
        width: rec.width,
        height: rec.height,
        name: rec.name.clone(),
    });
    let id = near.add_viewer();
    let (mut bytes_in, mut bytes_out) = (0u64, 0u64);
    let (mut out, mut sent) = (Vec::new(), 0usize);
    let mut buf = vec![0u8; 1 << 16];
    let mut next = 0;
    // The recording's clock starts with the viewer's first message after the
    // handshake: connection set-up (direct: RFB over the WAN; varg: the proxies' link)
    // is not part of any update's latency.
    let mut start = None;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if start.is_none() && bytes_in > HANDSHAKE_IN {
            start = Some(now);
        }
        let due = |i: usize| start.zip(rec.steps.get(i)).map(|(t, s)| t + s.at);
        if due(next).is_some_and(|t| t <= now) {
            // Noted before the viewer can be answered with it.
            let mut a = applied.lock().expect("not poisoned");
            while due(next).is_some_and(|t| t <= now) {
                a.push(now);
                for m in &rec.steps[next].msgs {
                    near.receive_far_msg(m.clone());
                }
                next += 1;
            }
        }
        let failed = near.process()?;
        if let Some((_, e)) = failed.into_iter().next() {
            bail!("the viewer failed: {e}");
        }
        let _ = near.take_far_output();
        out.extend_from_slice(&near.take_viewer_output(id)?);
        while sent < out.len() {
            match sock.write(&out[sent..]) {
                Ok(k) => {
                    sent += k;
                    bytes_out += k as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e).context("writing to the viewer"),
            }
        }
        if sent == out.len() {
            out.clear();
            sent = 0;
        }
        let wait = due(next)
            .map(|t| t.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_millis(50))
            .min(Duration::from_millis(50));
        let mut fds = [libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN | if out.is_empty() { 0 } else { libc::POLLOUT },
            revents: 0,
        }];
        let ms = wait.as_micros().div_ceil(1000) as i32;
        // SAFETY: one valid pollfd for the socket we own.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
        loop {
            match sock.read(&mut buf) {
                Ok(0) => return Ok((bytes_in, bytes_out)),
                Ok(k) => {
                    bytes_in += k as u64;
                    near.receive_viewer(id, &buf[..k])?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Ok((bytes_in, bytes_out))
                }
                Err(e) => return Err(e).context("reading from the viewer"),
            }
        }
    }
    Ok((bytes_in, bytes_out))
}

struct Viewed {
    latencies: Vec<Option<Duration>>,
    updates: u64,
    final_hash: Option<u64>,
    bytes_in: u64,
    bytes_out: u64,
}

/// The measuring viewer: asks for `encoding` (and CopyRect), keeps one incremental
/// request outstanding, and after every update (and every few milliseconds, for
/// steps that change nothing) marks the steps its screen has caught up with. Ends
/// when it shows the last step, or `drain` after the server applied it.
fn view(
    addr: SocketAddr,
    encoding: i32,
    rec: &Recording,
    applied: &Mutex<Vec<Instant>>,
    drain: Duration,
) -> Result<Viewed> {
    let mut sock = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(Duration::from_millis(5)))?;
    let mut c = ClientSide::new(ClientConfig {
        security_types: vec![security::NONE],
        ..ClientConfig::default()
    });
    let mut dec = Decoder::new(Limits::default());
    let mut fb: Option<Framebuffer> = None;
    let n = rec.steps.len();
    let mut shown: Vec<Option<Instant>> = vec![None; n];
    let mut upto = 0;
    let mut hash = None;
    let (mut updates, mut bytes_in, mut bytes_out) = (0u64, 0u64, 0u64);
    let mut buf = vec![0u8; 1 << 16];
    let give_up = Instant::now() + Duration::from_secs_f64(rec.seconds()) + drain + GUARD;
    loop {
        match sock.read(&mut buf) {
            Ok(0) => bail!("the server closed the connection"),
            Ok(k) => {
                bytes_in += k as u64;
                c.receive(&buf[..k]);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e).context("reading from the server"),
        }
        while let Some(ev) = c.poll_event()? {
            match ev {
                ClientEvent::ServerInit(init) => {
                    fb = Some(Framebuffer::new(init.width, init.height));
                    c.send(&ClientMsg::SetEncodings(vec![encoding, COPY_RECT]))?;
                    c.request_screen(false)?;
                }
                ClientEvent::Message(ServerMsg::FramebufferUpdate(rects)) => {
                    let f = fb.as_mut().expect("after ServerInit");
                    let pf = c.pixel_format().expect("after ServerInit");
                    for r in &rects {
                        dec.apply(r, &pf, f)?;
                    }
                    hash = Some(screen_hash(f));
                    updates += 1;
                    c.request_screen(true)?;
                }
                _ => {}
            }
        }
        let o = c.take_output();
        if !o.is_empty() {
            sock.write_all(&o).context("writing to the server")?;
            bytes_out += o.len() as u64;
        }
        let now = Instant::now();
        let (count, last) = {
            let a = applied.lock().expect("not poisoned");
            (a.len(), a.last().copied())
        };
        if let Some(j) = hash.and_then(|h| rec.newest_match(h, count)) {
            for s in shown.iter_mut().take(j + 1).skip(upto) {
                *s = Some(now);
            }
            upto = upto.max(j + 1);
        }
        if count == n && (upto == n || now > last.expect("n > 0") + drain) {
            break;
        }
        ensure!(
            now < give_up,
            "the replay did not end (shown {upto} of {n} updates)"
        );
    }
    // Half-close and read what is still coming, so the bytes counted here are all the
    // relay delivered.
    sock.shutdown(Shutdown::Write)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => bytes_in += k as u64,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let a = applied.lock().expect("not poisoned");
    let latencies = shown
        .iter()
        .zip(a.iter())
        .map(|(s, &at)| s.map(|t| t.saturating_duration_since(at)))
        .collect();
    Ok(Viewed {
        latencies,
        updates,
        final_hash: hash,
        bytes_in,
        bytes_out,
    })
}
