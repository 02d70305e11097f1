//! Against a real VNC server: TigerVNC's Xvnc on 127.0.0.1, driven by `ClientSide`
//! over a std TcpStream. The same screen is fetched in Raw, Hextile, ZRLE and Tight, and in
//! other pixel formats, and every decoding must give the same framebuffer: the point
//! is that a real server's bytes decode.
//!
//! Skipped with a printed reason when Xvnc is not installed, unless
//! `VARGR_REQUIRE_XVNC=1` (scripts/test.sh sets it after installing
//! tigervnc-standalone-server), which turns the skip into a failure.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vargr_rfb::encoding::{HEXTILE, RAW, TIGHT, ZRLE};
use vargr_rfb::{
    security, ClientConfig, ClientEvent, ClientMsg, ClientSide, Decoder, Framebuffer, Limits,
    PixelFormat, ServerMsg,
};

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
                "vargr-rfb-xvnc-{}-{display}.log",
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

/// A file removed when dropped, also when the test panics.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
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

#[test]
fn real_server_updates_decode_the_same_in_every_encoding() {
    let Some(xvnc) = find("Xvnc") else {
        return skip("Xvnc not found (Debian package tigervnc-standalone-server)");
    };
    let mut server = Xvnc::start(&xvnc, &["-SecurityTypes", "None"]);
    let sock = server.connect();
    // A plaid of red and blue, so that every encoding has tiles of several colours.
    let drew = server.x_client("xsetroot", &["-mod", "5", "3", "-fg", "red", "-bg", "blue"]);
    if !drew {
        println!("xsetroot not found (x11-xserver-utils): checking the initial root window only");
    }
    let (mut v, version, sec) = Viewer::open(sock, None);
    assert_eq!(
        version,
        ClientEvent::Version(vargr_rfb::ProtocolVersion::V3_8)
    );
    assert_eq!(sec, ClientEvent::Security(security::NONE));

    let pf = PixelFormat::RGB888;
    let mut raw = Framebuffer::new(W, H);
    let used = v.fetch(&mut raw, RAW, &pf, false);
    assert!(used.iter().all(|&e| e == RAW), "{used:?}");
    if drew {
        assert!(raw.pixels().contains(&0xff0000) && raw.pixels().contains(&0x0000ff));
    }
    // Tight without a JPEG quality level: TigerVNC then sends no JPEG.
    for enc in [HEXTILE, ZRLE, TIGHT] {
        let mut fb = Framebuffer::new(W, H);
        let used = v.fetch(&mut fb, enc, &pf, false);
        assert!(
            used.iter().all(|&e| e == enc),
            "asked for {enc}, got {used:?}"
        );
        assert!(
            fb == raw,
            "encoding {enc} decodes to another picture than Raw"
        );
    }
    // Other pixel formats: the server converts, ZRLE's CPIXEL changes.
    let mut be = PixelFormat::RGB888;
    be.big_endian = true;
    for pf in [be, PixelFormat::RGB565, PixelFormat::BGR233] {
        for enc in [RAW, HEXTILE, ZRLE, TIGHT] {
            let mut fb = Framebuffer::new(W, H);
            let used = v.fetch(&mut fb, enc, &pf, false);
            assert!(
                used.iter().all(|&e| e == enc),
                "asked for {enc}, got {used:?}"
            );
            assert!(fb == quantised(&raw, &pf), "encoding {enc} in {pf:?}");
        }
    }
    // Changes, seen through incremental updates on top of the last screen.
    if drew {
        for (enc, colour, name) in [(ZRLE, 0x00ff00, "#00ff00"), (TIGHT, 0x123456, "#123456")] {
            let mut fb = raw.clone();
            server.x_client("xsetroot", &["-solid", name]);
            let deadline = Instant::now() + Duration::from_secs(20);
            while fb.pixels().iter().any(|&c| c != colour) {
                assert!(
                    Instant::now() < deadline,
                    "the change to {name} never arrived"
                );
                v.fetch(&mut fb, enc, &PixelFormat::RGB888, true);
            }
            raw = fb;
        }
    }
    println!(
        "Xvnc on :{} port {}: Raw, Hextile, ZRLE and Tight agree in 4 pixel formats",
        server.display, server.port
    );
}

#[test]
fn real_server_accepts_vnc_authentication() {
    let Some(xvnc) = find("Xvnc") else {
        return skip("Xvnc not found (Debian package tigervnc-standalone-server)");
    };
    let Some(vncpasswd) = find("vncpasswd").or_else(|| find("tigervncpasswd")) else {
        return skip("vncpasswd not found (Debian package tigervnc-tools)");
    };
    let file =
        TempFile(std::env::temp_dir().join(format!("vargr-rfb-passwd-{}", std::process::id())));
    let mut p = Command::new(vncpasswd)
        .arg("-f")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    p.stdin.take().unwrap().write_all(b"sesame\n").unwrap();
    let out = p.wait_with_output().unwrap();
    std::fs::write(&file.0, &out.stdout).unwrap();
    let pw = file.0.to_str().unwrap().to_string();
    let mut server = Xvnc::start(&xvnc, &["-SecurityTypes", "VncAuth", "-PasswordFile", &pw]);

    let (_, _, sec) = Viewer::open(server.connect(), Some(b"sesame"));
    assert_eq!(sec, ClientEvent::Security(security::VNC_AUTH));

    // The wrong password is refused with the server's reason.
    let mut c = ClientSide::new(ClientConfig {
        password: Some(b"wrong".to_vec()),
        ..ClientConfig::default()
    });
    let mut sock = server.connect();
    let mut buf = vec![0u8; 4096];
    let err = loop {
        let ev = c.poll_event();
        sock.write_all(&c.take_output()).unwrap();
        match ev {
            Ok(Some(_)) => continue,
            Ok(None) => {}
            Err(e) => break e,
        }
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "closed without a SecurityResult");
        c.receive(&buf[..n]);
    };
    assert!(
        matches!(
            &err,
            vargr_rfb::RfbError::Refused {
                stage: "authentication",
                ..
            }
        ),
        "{err}"
    );
    println!("Xvnc refused the wrong password: {err}");
}
