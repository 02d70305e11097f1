//! Against a real VNC server: TigerVNC's Xvnc on 127.0.0.1, driven by `ClientSide`
//! over a std TcpStream. The same screen is fetched in Raw, Hextile, ZRLE and Tight, and in
//! other pixel formats, and every decoding must give the same framebuffer: the point
//! is that a real server's bytes decode.
//!
//! Skipped with a printed reason when Xvnc is not installed, unless
//! `VARGR_REQUIRE_XVNC=1` (scripts/test.sh sets it after installing
//! tigervnc-standalone-server), which turns the skip into a failure.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vargr_rfb::encoding::{HEXTILE, RAW, TIGHT, ZRLE};
use vargr_rfb::{security, ClientConfig, ClientEvent, ClientSide, Framebuffer, PixelFormat};

mod xvnc_support;

use xvnc_support::*;

/// A file removed when dropped, also when the test panics.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
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
            assert!(fb == raw.as_seen_in(&pf), "encoding {enc} in {pf:?}");
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
