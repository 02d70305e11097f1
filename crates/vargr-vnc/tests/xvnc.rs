//! The proxy pair against a real VNC server: TigerVNC's Xvnc on 127.0.0.1, reached by
//! the far side over TCP, and viewers in memory behind the near side. `xsetroot`
//! changes the screen; each viewer's picture must equal a direct Raw read of the
//! server's framebuffer, so real servers' updates survive decoding, the link and
//! re-encoding for each viewer.
//!
//! Skipped with a printed reason when Xvnc is not installed, unless
//! `VARGR_REQUIRE_XVNC=1` (scripts/test.sh sets it after installing
//! tigervnc-standalone-server), which turns the skip into a failure. The Xvnc
//! helpers are vargr-rfb's (its tests/xvnc_support), included below.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use vargr_rfb::encoding::{DESKTOP_SIZE, HEXTILE, RAW, ZRLE};
use vargr_rfb::{
    ClientConfig, ClientEvent, ClientMsg, ClientSide, Decoder, Framebuffer, Limits, PixelFormat,
    ServerMsg,
};
use vargr_vnc::{FarConfig, FarSide, NearConfig, NearSide, ViewerId};

#[path = "../../vargr-rfb/tests/xvnc_support/mod.rs"]
mod xvnc_support;

use xvnc_support::*;

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
                    self.c.request_screen(false).unwrap();
                }
                ClientEvent::Message(ServerMsg::FramebufferUpdate(rects)) => {
                    let fb = self.fb.as_mut().unwrap();
                    for r in &rects {
                        self.dec.apply(r, &self.pf, fb).unwrap();
                        self.seen.push(r.encoding);
                    }
                    self.c.request_screen(true).unwrap();
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
            far: FarSide::new(FarConfig::default()).unwrap(),
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
            self.far.send_update();
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
                .all(|v| v.fb.as_ref() == Some(&direct.as_seen_in(&v.pf)))
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
