//! The proxy pair against a real VNC server: TigerVNC's Xvnc on 127.0.0.1, reached by
//! the far side over TCP, and viewers in memory behind the near side. `xsetroot`
//! changes the screen; each viewer's picture must equal a direct Raw read of the
//! server's framebuffer, so real servers' updates survive decoding, the link and
//! re-encoding for each viewer.
//!
//! Skipped with a printed reason when Xvnc is not installed, unless
//! `VARGR_REQUIRE_XVNC=1` (scripts/test.sh sets it after installing
//! tigervnc-standalone-server), which turns the skip into a failure. The Xvnc
//! helpers are vargr-rfb's tests/xvnc.rs's.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vargr_rfb::encoding::{DESKTOP_SIZE, HEXTILE, RAW, ZRLE};
use vargr_rfb::{
    security, ClientConfig, ClientEvent, ClientMsg, ClientSide, Decoder, Framebuffer, Limits,
    PixelFormat, ServerMsg,
};
use vargr_vnc::{FarConfig, FarSide, NearConfig, NearSide, ViewerId};

const W: u16 = 320;
const H: u16 = 200;

fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Whether the test may skip: not when scripts/test.sh installed the server.
fn skip(reason: &str) {
    assert!(
        std::env::var("VARGR_REQUIRE_XVNC").as_deref() != Ok("1"),
        "VARGR_REQUIRE_XVNC=1 but {reason}"
    );
    println!("skipped: {reason}");
}

/// An Xvnc process, killed and reaped when dropped (also when the test panics).
struct Xvnc {
    child: Child,
    display: u32,
    port: u16,
    log: PathBuf,
}

impl Drop for Xvnc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "Xvnc's log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
        // SIGTERM lets Xvnc remove its lock file and socket; SIGKILL if it lingers.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

impl Xvnc {
    /// Starts Xvnc on a free display and waits until it listens. Two tests (or test
    /// runs) may pick the same display at once; X's lock file lets only one start,
    /// and the other tries the next number.
    fn start(xvnc: &Path, extra: &[&str]) -> Xvnc {
        let mut display = 40 + std::process::id() % 100;
        for _ in 0..10 {
            // A display with neither socket nor lock file, and a port the kernel just gave.
            while Path::new(&format!("/tmp/.X11-unix/X{display}")).exists()
                || Path::new(&format!("/tmp/.X{display}-lock")).exists()
            {
                display += 1;
            }
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let log = std::env::temp_dir().join(format!(
                "vargr-vnc-xvnc-{}-{display}.log",
                std::process::id()
            ));
            let child = Command::new(xvnc)
                .arg(format!(":{display}"))
                .args(["-geometry", &format!("{W}x{H}"), "-depth", "24"])
                .args([
                    "-rfbport",
                    &port.to_string(),
                    "-interface",
                    "127.0.0.1",
                    "-nolisten",
                    "tcp",
                ])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("Xvnc starts");
            let mut x = Xvnc {
                child,
                display,
                port,
                log,
            };
            if x.wait_listening() {
                return x;
            }
            display += 1;
        }
        panic!("Xvnc did not start on any of 10 displays");
    }

    /// Whether Xvnc listens; false if it exited first.
    fn wait_listening(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return true;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                eprintln!(
                    "Xvnc :{} exited ({status}): {}",
                    self.display,
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
                return false;
            }
            assert!(
                Instant::now() < deadline,
                "Xvnc did not listen on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn connect(&mut self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("Xvnc listens");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// Runs an X client on the display; false if it is not installed.
    fn x_client(&self, program: &str, args: &[&str]) -> bool {
        let Some(p) = find(program) else { return false };
        let status = Command::new(p)
            .args(args)
            .env("DISPLAY", format!(":{}", self.display))
            .status()
            .unwrap();
        assert!(status.success(), "{program} {args:?}: {status}");
        true
    }
}

/// A client connection: the state machine, its socket and a decoder for its updates.
struct Viewer {
    c: ClientSide,
    sock: TcpStream,
    dec: Decoder,
}

impl Viewer {
    fn next(&mut self) -> ClientEvent {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            // Decoding may queue an answer (ClientInit after SecurityResult): send it
            // before waiting for the server.
            let ev = self.c.poll_event().unwrap();
            self.sock.write_all(&self.c.take_output()).unwrap();
            if let Some(ev) = ev {
                return ev;
            }
            let n = self.sock.read(&mut buf).expect("the server answers");
            assert!(n > 0, "the server closed the connection");
            self.c.receive(&buf[..n]);
        }
    }

    fn open(sock: TcpStream, password: Option<&[u8]>) -> (Viewer, ClientEvent, ClientEvent) {
        let c = ClientSide::new(ClientConfig {
            password: password.map(<[u8]>::to_vec),
            security_types: vec![security::VNC_AUTH, security::NONE],
            ..ClientConfig::default()
        });
        let mut v = Viewer {
            c,
            sock,
            dec: Decoder::new(Limits::default()),
        };
        let version = v.next();
        let sec = v.next();
        let ClientEvent::ServerInit(init) = v.next() else {
            panic!("no ServerInit")
        };
        assert_eq!((init.width, init.height), (W, H));
        (v, version, sec)
    }

    /// Fetches the whole screen (non-incremental unless `incremental`) in `encoding`
    /// and `pf`, painting into `fb`; returns the encodings the server used.
    fn fetch(
        &mut self,
        fb: &mut Framebuffer,
        encoding: i32,
        pf: &PixelFormat,
        incremental: bool,
    ) -> Vec<i32> {
        self.c.send(&ClientMsg::SetPixelFormat(*pf)).unwrap();
        self.c
            .send(&ClientMsg::SetEncodings(vec![encoding]))
            .unwrap();
        self.c
            .send(&ClientMsg::FramebufferUpdateRequest {
                incremental,
                x: 0,
                y: 0,
                width: W,
                height: H,
            })
            .unwrap();
        let mut used = Vec::new();
        let (mut area, mut updates) = (0u64, 0);
        // A full update may come in several messages: wait until the screen is covered
        // (an incremental one: until one update came).
        let full = W as u64 * H as u64;
        while area < full && (!incremental || updates == 0) {
            if let ClientEvent::Message(ServerMsg::FramebufferUpdate(rects)) = self.next() {
                updates += 1;
                for r in &rects {
                    self.dec.apply(r, pf, fb).unwrap();
                    area += r.width as u64 * r.height as u64;
                    used.push(r.encoding);
                }
            }
        }
        used
    }
}

fn quantised(fb: &Framebuffer, pf: &PixelFormat) -> Framebuffer {
    let mut q = Framebuffer::new(fb.width(), fb.height());
    let px: Vec<u32> = fb
        .pixels()
        .iter()
        .map(|&c| pf.to_rgb(pf.from_rgb(c)))
        .collect();
    q.put_rect(0, 0, fb.width(), fb.height(), &px).unwrap();
    q
}

/// A viewer behind the near side, in memory, asking again after every update.
struct ProxiedViewer {
    id: ViewerId,
    c: ClientSide,
    dec: Decoder,
    fb: Option<Framebuffer>,
    pf: PixelFormat,
    encoding: i32,
    seen: Vec<i32>,
}

impl ProxiedViewer {
    fn request(&mut self, incremental: bool) {
        let ctx = self.c.context().unwrap();
        let (width, height) = (ctx.width, ctx.height);
        self.c
            .send(&ClientMsg::FramebufferUpdateRequest {
                incremental,
                x: 0,
                y: 0,
                width,
                height,
            })
            .unwrap();
    }

    fn step(&mut self) {
        while let Some(ev) = self.c.poll_event().unwrap() {
            match ev {
                ClientEvent::ServerInit(init) => {
                    assert_eq!((init.width, init.height), (W, H));
                    self.fb = Some(Framebuffer::new(init.width, init.height));
                    self.c.send(&ClientMsg::SetPixelFormat(self.pf)).unwrap();
                    self.c
                        .send(&ClientMsg::SetEncodings(vec![self.encoding, DESKTOP_SIZE]))
                        .unwrap();
                    self.request(false);
                }
                ClientEvent::Message(ServerMsg::FramebufferUpdate(rects)) => {
                    let fb = self.fb.as_mut().unwrap();
                    for r in &rects {
                        self.dec.apply(r, &self.pf, fb).unwrap();
                        self.seen.push(r.encoding);
                    }
                    self.request(true);
                }
                _ => {}
            }
        }
    }
}

/// The far side on a socket to Xvnc, the near side and its viewers in memory.
struct Pair {
    sock: TcpStream,
    far: FarSide,
    near: NearSide,
    viewers: Vec<ProxiedViewer>,
}

impl Pair {
    fn new(sock: TcpStream) -> Pair {
        sock.set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        Pair {
            sock,
            far: FarSide::new(FarConfig::default()),
            near: NearSide::new(NearConfig::default()),
            viewers: Vec::new(),
        }
    }

    fn viewer(&mut self, pf: PixelFormat, encoding: i32) {
        self.viewers.push(ProxiedViewer {
            id: self.near.add_viewer(),
            c: ClientSide::new(ClientConfig::default()),
            dec: Decoder::new(Limits::default()),
            fb: None,
            pf,
            encoding,
            seen: Vec::new(),
        });
    }

    /// One round: what Xvnc sent (waiting 10 ms at most), through both sides to the
    /// viewers and back.
    fn round(&mut self) {
        let mut buf = vec![0u8; 256 << 10];
        match self.sock.read(&mut buf) {
            Ok(0) => panic!("Xvnc closed the connection"),
            Ok(n) => self.far.receive_server(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading from Xvnc: {e}"),
        }
        for _ in 0..4 {
            self.far.process().unwrap();
            self.sock.write_all(&self.far.take_server_output()).unwrap();
            self.near.receive_far(&self.far.take_near_output());
            let failed = self.near.process().unwrap();
            assert!(failed.is_empty(), "{failed:?}");
            self.far.receive_near(&self.near.take_far_output());
            for v in &mut self.viewers {
                v.c.receive(&self.near.take_viewer_output(v.id).unwrap());
                v.step();
                self.near.receive_viewer(v.id, &v.c.take_output()).unwrap();
            }
        }
    }

    /// Runs until every viewer shows `direct` (as its format holds it).
    fn until_viewers_show(&mut self, direct: &Framebuffer, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            self.round();
            if self
                .viewers
                .iter()
                .all(|v| v.fb.as_ref() == Some(&quantised(direct, &v.pf)))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: the viewers never showed the server's picture"
            );
        }
    }
}

/// A direct Raw read of the whole screen, until it satisfies `ready`.
fn direct_read(v: &mut Viewer, ready: impl Fn(&Framebuffer) -> bool) -> Framebuffer {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut fb = Framebuffer::new(W, H);
        v.fetch(&mut fb, RAW, &PixelFormat::RGB888, false);
        if ready(&fb) {
            return fb;
        }
        assert!(
            Instant::now() < deadline,
            "the server never showed the change"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn viewers_behind_the_proxy_pair_see_what_a_real_server_shows() {
    let Some(xvnc) = find("Xvnc") else {
        return skip("Xvnc not found (Debian package tigervnc-standalone-server)");
    };
    if find("xsetroot").is_none() {
        return skip("xsetroot not found (Debian package x11-xserver-utils)");
    }
    let mut server = Xvnc::start(&xvnc, &["-SecurityTypes", "None"]);
    // A plaid of red and blue: every encoding gets tiles of several colours.
    server.x_client("xsetroot", &["-mod", "5", "3", "-fg", "red", "-bg", "blue"]);
    let (mut direct, _, _) = Viewer::open(server.connect(), None);
    let mut pair = Pair::new(server.connect());
    pair.viewer(PixelFormat::RGB888, ZRLE);
    pair.viewer(PixelFormat::RGB565, HEXTILE);
    let mut be = PixelFormat::RGB888;
    be.big_endian = true;
    pair.viewer(be, RAW);

    let plaid =
        |fb: &Framebuffer| fb.pixels().contains(&0xff0000) && fb.pixels().contains(&0x0000ff);
    let screen = direct_read(&mut direct, plaid);
    pair.until_viewers_show(&screen, "the first screen");

    for (colour, name) in [(0x00ff00, "#00ff00"), (0x123456, "#123456")] {
        server.x_client("xsetroot", &["-solid", name]);
        let screen = direct_read(&mut direct, |fb| fb.pixels().iter().all(|&c| c == colour));
        pair.until_viewers_show(&screen, name);
    }
    server.x_client(
        "xsetroot",
        &["-mod", "7", "2", "-fg", "yellow", "-bg", "black"],
    );
    let screen = direct_read(&mut direct, |fb| {
        fb.pixels().contains(&0xffff00) && fb.pixels().contains(&0)
    });
    pair.until_viewers_show(&screen, "a second plaid");
    for v in &pair.viewers {
        assert!(
            v.seen.iter().all(|&e| e == v.encoding),
            "viewer asked for {}, got {:?}",
            v.encoding,
            v.seen
        );
    }
    println!(
        "Xvnc on :{} port {}: three viewers behind the proxy pair match the server",
        server.display, server.port
    );
}
