//! Xvnc for the tests that need a real VNC server (vargr-rfb's and vargr-vnc's
//! tests/xvnc.rs include this file): start TigerVNC's Xvnc on 127.0.0.1, draw on it,
//! and read its screen directly with a `ClientSide` over TCP. Each test uses part of it.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vargr_rfb::{
    security, ClientConfig, ClientEvent, ClientMsg, ClientSide, Decoder, Framebuffer, Limits,
    PixelFormat, ServerMsg,
};

pub const W: u16 = 320;
pub const H: u16 = 200;

pub fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Whether the test may skip: not when scripts/test.sh installed the server.
pub fn skip(reason: &str) {
    assert!(
        std::env::var("VARGR_REQUIRE_XVNC").as_deref() != Ok("1"),
        "VARGR_REQUIRE_XVNC=1 but {reason}"
    );
    println!("skipped: {reason}");
}

/// An Xvnc process, killed and reaped when dropped (also when the test panics).
pub struct Xvnc {
    pub child: Child,
    pub display: u32,
    pub port: u16,
    pub log: PathBuf,
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
    pub fn start(xvnc: &Path, extra: &[&str]) -> Xvnc {
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
            // One file per attempt: a failed attempt's drop removes its log, which
            // must not be the log of the test that holds this display.
            static ATTEMPT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let attempt = ATTEMPT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let log = std::env::temp_dir().join(format!(
                "{}-xvnc-{}-{display}-{attempt}.log",
                env!("CARGO_PKG_NAME"),
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

    /// Whether Xvnc listens, for viewers and for X clients; false if it exited first.
    /// Xvnc opens its RFB port before its X socket, so an X client started on the
    /// port alone may find no display.
    pub fn wait_listening(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(15);
        let x_socket = format!("/tmp/.X11-unix/X{}", self.display);
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok()
                && std::os::unix::net::UnixStream::connect(&x_socket).is_ok()
            {
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

    pub fn connect(&mut self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("Xvnc listens");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// Runs an X client on the display; false if it is not installed.
    pub fn x_client(&self, program: &str, args: &[&str]) -> bool {
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
pub struct Viewer {
    pub c: ClientSide,
    pub sock: TcpStream,
    pub dec: Decoder,
}

impl Viewer {
    pub fn next(&mut self) -> ClientEvent {
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

    pub fn open(sock: TcpStream, password: Option<&[u8]>) -> (Viewer, ClientEvent, ClientEvent) {
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
    pub fn fetch(
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
