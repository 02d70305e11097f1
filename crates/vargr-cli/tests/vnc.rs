//! `vargr vnc` as users run it: TigerVNC's Xvnc, a far and a near proxy process, and
//! viewers (vargr-rfb's client over TCP) behind the near one. Every viewer's picture
//! must equal a direct read of the server's screen; a second session must find the
//! first one's screen in the persistent caches; bad viewers, a wrong secret and a dead
//! far proxy must end what they touch, with a reason, and nothing else. Every wait is
//! bounded.
//!
//! Skipped with a printed reason when Xvnc is not installed, unless
//! `VARGR_REQUIRE_XVNC=1` (scripts/test.sh), which makes the skip a failure.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::proxy_process::Proxy;
use vargr_rfb::encoding::{HEXTILE, RAW, ZRLE};
use vargr_rfb::{Framebuffer, PixelFormat};
use vargr_vnc::{ProxyLimits, RecordReader};

#[path = "../../vargr-rfb/tests/xvnc_support/mod.rs"]
mod xvnc_support;

use xvnc_support::*;

const GUARD: Duration = Duration::from_secs(30);

/// A screen-sized XBM of random bits: `xsetroot -bitmap` shows it untiled, and its
/// pixels neither compress nor repeat within the screen.
fn noise_bitmap(dir: &Path, seed: u64) -> String {
    let bytes = common::random_bytes(W as usize * H as usize / 8, seed);
    let mut text =
        format!("#define n_width {W}\n#define n_height {H}\nstatic unsigned char n_bits[] = {{\n");
    for b in bytes {
        text.push_str(&format!("0x{b:02x},"));
    }
    text.push_str("};\n");
    let path = dir.join(format!("noise-{seed}.xbm"));
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// The far and near proxies, joined with one secret, in front of `server`.
fn pair(dir: &Path, server_port: u16, secret: &str, far_extra: &[&str]) -> (Proxy, Proxy) {
    pair_with(dir, server_port, secret, far_extra, &[])
}

/// [`pair`] with extra arguments for each proxy.
fn pair_with(
    dir: &Path,
    server_port: u16,
    secret: &str,
    far_extra: &[&str],
    near_extra: &[&str],
) -> (Proxy, Proxy) {
    let secret_file = dir.join("secret");
    std::fs::write(&secret_file, secret).unwrap();
    let s = secret_file.to_str().unwrap();
    let forward = format!("127.0.0.1:{server_port}");
    let mut far_args = vec![
        "--serve",
        "127.0.0.1:0",
        "--forward",
        &forward,
        "--name",
        "far",
        "--secret-file",
        s,
    ];
    far_args.extend_from_slice(far_extra);
    let far = Proxy::start("vnc", &far_args, &[], &dir.join("far-cache"), 1);
    let peer = format!("127.0.0.1:{}", far.ports[0]);
    let mut near_args = vec![
        "--listen",
        "127.0.0.1:0",
        "--peer",
        &peer,
        "--name",
        "near",
        "--secret-file",
        s,
    ];
    near_args.extend_from_slice(near_extra);
    let near = Proxy::start("vnc", &near_args, &[], &dir.join("near-cache"), 1);
    (far, near)
}

/// Another near proxy, in `dir` with a secret of its own, in front of the far proxy
/// on `far_port`.
fn near_proxy(dir: &Path, far_port: u16, secret: &str) -> Proxy {
    std::fs::create_dir_all(dir).unwrap();
    let secret_file = dir.join("secret");
    std::fs::write(&secret_file, secret).unwrap();
    let peer = format!("127.0.0.1:{far_port}");
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--peer",
        &peer,
        "--secret-file",
        secret_file.to_str().unwrap(),
    ];
    Proxy::start("vnc", &args, &[], &dir.join("cache"), 1)
}

/// A direct Raw read of the server's screen.
fn direct_screen(server: &mut Xvnc) -> Framebuffer {
    let (mut v, _, _) = Viewer::open(server.connect(), None);
    let mut fb = Framebuffer::new(W, H);
    v.fetch(&mut fb, RAW, &PixelFormat::RGB888, false);
    fb
}

/// Reads the whole screen through `v` until it shows `want` as `pf` holds it.
fn until_shows(v: &mut Viewer, encoding: i32, pf: &PixelFormat, want: &Framebuffer, what: &str) {
    let want = want.as_seen_in(pf);
    let deadline = Instant::now() + GUARD;
    loop {
        let mut fb = Framebuffer::new(W, H);
        v.fetch(&mut fb, encoding, pf, false);
        if fb == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the viewer never showed the server's picture"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `field` of the `n`th "session ended" line: the number before " B out" etc.
fn session_bytes_out(p: &Proxy, n: usize) -> u64 {
    let lines: Vec<String> = p
        .lines()
        .into_iter()
        .filter(|l| l.contains("session ended"))
        .collect();
    let l = &lines[n];
    let at = l.find("link ").expect("link bytes") + 5;
    l[at..].split(' ').next().unwrap().parse().unwrap()
}

fn wait_sessions_ended(p: &Proxy, n: usize) {
    assert!(
        p.wait_for(GUARD, |lines| lines
            .iter()
            .filter(|l| l.contains("session ended"))
            .count()
            >= n),
        "{n} sessions never ended:\n{}",
        p.text()
    );
}

/// Waits for a line of `p`'s log that `pred` accepts; fails with `what` and the log.
fn logged(p: &Proxy, what: &str, pred: impl Fn(&str) -> bool) {
    assert!(
        p.wait_for(GUARD, |lines| lines.iter().any(|l| pred(l))),
        "{what}:\n{}",
        p.text()
    );
}

/// Reads until the peer closes (or resets) the connection; false if it stays open.
fn closed_within(s: &mut TcpStream, guard: Duration) -> bool {
    s.set_read_timeout(Some(guard)).unwrap();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + guard;
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return true,
            Ok(_) => {}
        }
    }
    false
}

/// The screen a recording ends on.
fn replay(path: &Path) -> Framebuffer {
    let f = std::fs::File::open(path).unwrap();
    let mut r = RecordReader::new(f, ProxyLimits::default()).unwrap();
    let mut fb = None;
    while let Some((_, m)) = r.next_record().unwrap() {
        m.paint_on(&mut fb).unwrap();
    }
    fb.expect("an Init")
}

fn xvnc_or_skip() -> Option<std::path::PathBuf> {
    let found = find("Xvnc").filter(|_| find("xsetroot").is_some());
    if found.is_none() {
        skip("Xvnc or xsetroot not found (tigervnc-standalone-server, x11-xserver-utils)");
    }
    found
}

#[test]
fn viewers_see_the_server_and_a_second_session_finds_the_first_in_the_cache() {
    let Some(xvnc) = xvnc_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut server = Xvnc::start(&xvnc, &["-SecurityTypes", "None"]);
    let first = noise_bitmap(dir.path(), 1);
    server.x_client(
        "xsetroot",
        &["-bitmap", &first, "-fg", "red", "-bg", "#203040"],
    );
    let rec = dir.path().join("recordings");
    std::fs::create_dir(&rec).unwrap();
    let rec_arg = rec.to_str().unwrap().to_string();
    let (far, near) = pair(
        dir.path(),
        server.port,
        &"5e".repeat(32),
        &["--record", &rec_arg],
    );
    let near_addr = ("127.0.0.1", near.ports[0]);

    let screen = direct_screen(&mut server);
    let (mut v1, _, _) = Viewer::open(TcpStream::connect(near_addr).unwrap(), None);
    let (mut v2, _, _) = Viewer::open(TcpStream::connect(near_addr).unwrap(), None);
    until_shows(
        &mut v1,
        ZRLE,
        &PixelFormat::RGB888,
        &screen,
        "first screen, ZRLE",
    );
    until_shows(
        &mut v2,
        HEXTILE,
        &PixelFormat::RGB565,
        &screen,
        "first screen, Hextile 565",
    );

    let second = noise_bitmap(dir.path(), 2);
    server.x_client(
        "xsetroot",
        &["-bitmap", &second, "-fg", "white", "-bg", "black"],
    );
    let screen = direct_screen(&mut server);
    until_shows(
        &mut v1,
        ZRLE,
        &PixelFormat::RGB888,
        &screen,
        "second screen, ZRLE",
    );
    until_shows(
        &mut v2,
        HEXTILE,
        &PixelFormat::RGB565,
        &screen,
        "second screen, Hextile",
    );
    drop((v1, v2));
    wait_sessions_ended(&far, 1);
    let first_session = session_bytes_out(&far, 0);
    // Two noise screens of 320 × 200 bits cross at least once each.
    assert!(first_session > 2 * 8000, "first session: {first_session} B");
    // The far proxy recorded what the server sent; replayed, it ends on the screen.
    let files: Vec<_> = std::fs::read_dir(&rec)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}\n{}", far.text());
    assert_eq!(
        replay(&files[0]),
        screen,
        "the recording replays to the screen"
    );

    // The same screen again, in a new session: from the caches, as fingerprints.
    let (mut v3, _, _) = Viewer::open(TcpStream::connect(near_addr).unwrap(), None);
    until_shows(
        &mut v3,
        ZRLE,
        &PixelFormat::RGB888,
        &screen,
        "a new session",
    );
    drop(v3);
    wait_sessions_ended(&far, 2);
    let second_session = session_bytes_out(&far, 1);
    println!("link bytes: first session {first_session}, second {second_session}");
    assert!(
        second_session * 4 < first_session / 2,
        "the second session sent {second_session} B for a screen the first sent in about {} B",
        first_session / 2
    );
}

#[test]
fn bad_viewers_a_wrong_secret_and_a_dead_far_proxy_end_only_what_they_touch() {
    let Some(xvnc) = xvnc_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut server = Xvnc::start(&xvnc, &["-SecurityTypes", "None"]);
    server.x_client("xsetroot", &["-mod", "5", "3", "-fg", "red", "-bg", "blue"]);
    let (mut far, near) = pair(dir.path(), server.port, &"5e".repeat(32), &[]);
    let near_addr = ("127.0.0.1", near.ports[0]);
    let screen = direct_screen(&mut server);
    let (mut good, _, _) = Viewer::open(TcpStream::connect(near_addr).unwrap(), None);
    until_shows(
        &mut good,
        ZRLE,
        &PixelFormat::RGB888,
        &screen,
        "the good viewer",
    );

    // A viewer that speaks a version no one knows is refused; the other goes on.
    let mut bad = TcpStream::connect(near_addr).unwrap();
    let mut version = [0u8; 12];
    bad.set_read_timeout(Some(GUARD)).unwrap();
    bad.read_exact(&mut version).unwrap();
    assert_eq!(&version, b"RFB 003.008\n");
    bad.write_all(b"RFB 009.000\n").unwrap();
    assert!(
        closed_within(&mut bad, GUARD),
        "the bad viewer stays connected"
    );
    logged(&near, "no reason given for the bad viewer", |l| {
        l.contains("ended:")
    });
    // A viewer that sends garbage after the handshake ends too.
    let (mut garbage, _, _) = Viewer::open(TcpStream::connect(near_addr).unwrap(), None);
    garbage.sock.write_all(&[0xee; 64]).unwrap();
    assert!(
        closed_within(&mut garbage.sock, GUARD),
        "garbage was accepted"
    );
    until_shows(
        &mut good,
        ZRLE,
        &PixelFormat::RGB888,
        &screen,
        "after the bad viewers",
    );

    // A near proxy with the wrong secret cannot start a session: its viewer is closed.
    let wrong = near_proxy(&dir.path().join("wrong"), far.ports[0], &"77".repeat(32));
    let mut refused = TcpStream::connect(("127.0.0.1", wrong.ports[0])).unwrap();
    assert!(
        closed_within(&mut refused, GUARD),
        "a viewer of the wrong pair was served"
    );
    logged(&wrong, "no reason for the refused session", |l| {
        l.contains("failed to start") && l.contains("secret")
    });
    until_shows(
        &mut good,
        ZRLE,
        &PixelFormat::RGB888,
        &screen,
        "after the wrong pair",
    );

    // The far proxy dies: the near one closes its viewers and says why.
    let _ = far.child.kill();
    let _ = far.child.wait();
    assert!(
        closed_within(&mut good.sock, GUARD),
        "the viewer outlived the far proxy"
    );
    logged(&near, "no reason for the lost session", |l| {
        l.contains("session failed") && l.contains("far proxy")
    });
}

/// What the fake server does after the handshake (or instead of it).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Serves {
    /// [`fake_picture`], in Raw, to every full request.
    Picture,
    /// A rectangle in encoding 0x7777, which no one knows.
    UnknownEncoding,
    /// A Raw rectangle 8 pixels wider than the framebuffer.
    OutsideScreen,
    /// Half a Raw rectangle of the whole screen, then it closes the connection.
    HalfThenClose,
    /// Half a Raw rectangle of the whole screen, then silence, the connection open.
    HalfThenSilence,
    /// Not even its protocol version: silence from the start.
    Nothing,
}

/// A VNC server on a port of its own, serving its `k`th connection as `serves(k)`
/// says: a picture, or one of the ways a broken or hostile server goes wrong.
fn fake_server(serves: fn(usize) -> Serves) -> u16 {
    use vargr_rfb::{
        security, Encoder, ProtocolVersion, ServerConfig, ServerEvent, ServerInit, ServerMsg,
        ServerSide,
    };
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (k, sock) in l.incoming().enumerate() {
            let Ok(mut sock) = sock else { continue };
            let serves = serves(k);
            std::thread::spawn(move || {
                sock.set_read_timeout(Some(GUARD)).unwrap();
                let mut buf = [0u8; 4096];
                // Until the proxy hangs up (or the guard passes).
                let mut silence = |sock: &mut TcpStream| while let Ok(1..) = sock.read(&mut buf) {};
                if serves == Serves::Nothing {
                    return silence(&mut sock);
                }
                let mut rfb = ServerSide::new(ServerConfig {
                    max_version: ProtocolVersion::V3_8,
                    security_types: vec![security::NONE],
                    password: None,
                    challenge: [0; 16],
                    limits: Default::default(),
                });
                let fb = fake_picture();
                let mut enc = Encoder::new();
                // A FramebufferUpdate of one rectangle, its header only.
                let rect_head = |w: u16, h: u16, encoding: i32| {
                    let mut b = vec![0u8, 0, 0, 1, 0, 0, 0, 0];
                    b.extend_from_slice(&w.to_be_bytes());
                    b.extend_from_slice(&h.to_be_bytes());
                    b.extend_from_slice(&encoding.to_be_bytes());
                    b
                };
                let mut rbuf = [0u8; 4096];
                loop {
                    while let Ok(Some(ev)) = rfb.poll_event() {
                        let full = match ev {
                            ServerEvent::ClientInit(_) => {
                                rfb.send_server_init(&ServerInit {
                                    width: W,
                                    height: H,
                                    pixel_format: PixelFormat::RGB888,
                                    name: b"fake".to_vec(),
                                })
                                .unwrap();
                                continue;
                            }
                            ServerEvent::Message(
                                vargr_rfb::ClientMsg::FramebufferUpdateRequest {
                                    incremental, ..
                                },
                            ) => !incremental,
                            _ => continue,
                        };
                        let bad = match serves {
                            Serves::Picture if full => {
                                let pf = rfb.pixel_format().unwrap();
                                let r = enc.encode(&fb, RAW, 0, 0, W, H, &pf).unwrap();
                                rfb.send(&ServerMsg::FramebufferUpdate(vec![r])).unwrap();
                                continue;
                            }
                            Serves::Picture => continue,
                            Serves::UnknownEncoding => {
                                let mut b = rect_head(8, 8, 0x7777);
                                b.extend_from_slice(&[0; 64]);
                                b
                            }
                            Serves::OutsideScreen => {
                                let mut b = rect_head(W + 8, H, RAW);
                                b.resize(b.len() + 4 * (W as usize + 8) * H as usize, 0x5a);
                                b
                            }
                            Serves::HalfThenClose | Serves::HalfThenSilence => {
                                let mut b = rect_head(W, H, RAW);
                                b.resize(b.len() + 2 * W as usize * H as usize, 0x5a);
                                b
                            }
                            Serves::Nothing => unreachable!("returned above"),
                        };
                        let _ = sock.write_all(&rfb.take_output());
                        let _ = sock.write_all(&bad);
                        if serves == Serves::HalfThenSilence {
                            silence(&mut sock);
                        }
                        return;
                    }
                    if sock.write_all(&rfb.take_output()).is_err() {
                        return;
                    }
                    match sock.read(&mut rbuf) {
                        Ok(n @ 1..) => rfb.receive(&rbuf[..n]),
                        // A good session outlives the read guard.
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Ok(0) | Err(_) => return,
                    }
                }
            });
        }
    });
    port
}

/// What the fake server shows.
fn fake_picture() -> Framebuffer {
    let mut fb = Framebuffer::new(W, H);
    let n = W as u32 * H as u32;
    let px: Vec<u32> = (0..n)
        .map(|i| i.wrapping_mul(2654435761) & 0xffffff)
        .collect();
    fb.put_rect(0, 0, W, H, &px).unwrap();
    fb
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_viewer_that_stops_reading_holds_one_update() {
    let Some(xvnc) = xvnc_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut server = Xvnc::start(&xvnc, &["-SecurityTypes", "None"]);
    let noise = noise_bitmap(dir.path(), 5);
    server.x_client(
        "xsetroot",
        &["-bitmap", &noise, "-fg", "red", "-bg", "#203040"],
    );
    let (_far, near) = pair(dir.path(), server.port, &"5e".repeat(32), &[]);
    let near_addr = ("127.0.0.1", near.ports[0]);
    let screen = direct_screen(&mut server);
    let (mut good, _, _) = Viewer::open(TcpStream::connect(near_addr).unwrap(), None);
    until_shows(
        &mut good,
        ZRLE,
        &PixelFormat::RGB888,
        &screen,
        "the good viewer",
    );

    // A request for the whole screen in Raw (250 KiB) every millisecond for two
    // seconds, and never a byte read: the near proxy must hold one update for it, not
    // a queue of 2000 (500 MB).
    let (mut greedy, _, _) = Viewer::open(TcpStream::connect(near_addr).unwrap(), None);
    let before = rss_kib(near.child.id());
    greedy.sock.set_write_timeout(Some(GUARD)).unwrap();
    greedy.sock.write_all(&[2, 0, 0, 1, 0, 0, 0, 0]).unwrap(); // SetEncodings [Raw]
    let mut ask = vec![3, 0, 0, 0, 0, 0];
    ask.extend_from_slice(&W.to_be_bytes());
    ask.extend_from_slice(&H.to_be_bytes());
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        greedy.sock.write_all(&ask).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_secs(2));
    until_shows(
        &mut good,
        ZRLE,
        &PixelFormat::RGB888,
        &screen,
        "beside a greedy viewer",
    );
    let grown = rss_kib(near.child.id()).saturating_sub(before);
    println!("the near proxy grew by {grown} KiB beside a viewer that does not read");
    assert!(grown < 16 << 10, "the near proxy grew by {grown} KiB");
    drop(greedy);
}

/// A viewer that asks for the screen and shows it.
fn good_viewer(port: u16, picture: &Framebuffer, what: &str) -> Viewer {
    let (mut v, _, _) = Viewer::open(TcpStream::connect(("127.0.0.1", port)).unwrap(), None);
    until_shows(&mut v, ZRLE, &PixelFormat::RGB888, picture, what);
    v
}

#[test]
fn bad_servers_and_stalled_peers_end_only_their_own_sessions_with_the_reason() {
    // Connection 0 is the good session, which must outlive every bad one; each later
    // one goes wrong in its own way. Sessions start one at a time (a near proxy each),
    // so the kth session is the server's kth connection.
    const BAD: [(Serves, &str); 5] = [
        (Serves::UnknownEncoding, "encoding 30583 is not supported"),
        (Serves::OutsideScreen, "exceeds the framebuffer"),
        (
            Serves::HalfThenClose,
            "closed the connection in the middle of a message",
        ),
        (
            Serves::HalfThenSilence,
            "the VNC server sent part of a message and nothing more for 2 s",
        ),
        (
            Serves::Nothing,
            "the VNC server did not finish its handshake in 2 s",
        ),
    ];
    let fake = fake_server(|k| match k {
        0 => Serves::Picture,
        k => BAD.get(k - 1).map_or(Serves::Picture, |b| b.0),
    });
    let dir = tempfile::tempdir().unwrap();
    // The near proxy's deadline leaves time to see a fourth viewer turned away while
    // the stalled ones are still there.
    let (far, near) = pair_with(
        dir.path(),
        fake,
        &"6a".repeat(32),
        &["--stall-timeout", "2s"],
        &["--stall-timeout", "5s", "--max-viewers", "3"],
    );
    let picture = fake_picture();
    let mut good = good_viewer(near.ports[0], &picture, "the good server");

    for (k, (serves, reason)) in BAD.iter().enumerate() {
        let near_bad = near_proxy(
            &dir.path().join(format!("bad-{k}")),
            far.ports[0],
            &"6a".repeat(32),
        );
        let mut v = TcpStream::connect(("127.0.0.1", near_bad.ports[0])).unwrap();
        assert!(
            closed_within(&mut v, GUARD),
            "{serves:?}: the bad server's viewer stays connected"
        );
        logged(
            &far,
            &format!("{serves:?}: the far proxy gave no reason"),
            |l| l.contains("session failed") && l.contains(reason),
        );
        logged(
            &near_bad,
            &format!("{serves:?}: the near proxy gave no reason"),
            |l| l.contains(reason),
        );
        until_shows(
            &mut good,
            ZRLE,
            &PixelFormat::RGB888,
            &picture,
            &format!("the good session after {serves:?}"),
        );
    }

    // Viewers that stop half-way, beside the good one: one silent from the start,
    // one that stops inside a message (3 bytes of a 10-byte request).
    let silent = TcpStream::connect(("127.0.0.1", near.ports[0])).unwrap();
    let (mut halting, _, _) = Viewer::open(
        TcpStream::connect(("127.0.0.1", near.ports[0])).unwrap(),
        None,
    );
    halting.sock.write_all(&[3, 0, 0]).unwrap();
    // A fourth viewer is one too many while they are there.
    let mut fourth = TcpStream::connect(("127.0.0.1", near.ports[0])).unwrap();
    assert!(
        closed_within(&mut fourth, GUARD),
        "a fourth viewer was served"
    );
    logged(&near, "the near proxy did not say why", |l| {
        l.contains("turned away a viewer") && l.contains("3 viewers already")
    });
    for (mut s, why) in [
        (silent, "did not finish its handshake in 5 s"),
        (
            halting.sock,
            "sent part of a message and nothing more for 5 s",
        ),
    ] {
        assert!(closed_within(&mut s, GUARD), "a viewer that {why} stays");
        logged(&near, &format!("no viewer ended because it {why}"), |l| {
            l.contains("ended: the viewer") && l.contains(why)
        });
    }
    until_shows(
        &mut good,
        ZRLE,
        &PixelFormat::RGB888,
        &picture,
        "the good session after the stalled viewers",
    );
    // Their places are free again.
    good_viewer(near.ports[0], &picture, "a viewer after the stalled ones");
}

#[test]
fn the_far_proxy_answers_the_servers_password_and_the_near_one_asks_viewers_for_theirs() {
    use vargr_rfb::{security, ClientConfig, ClientEvent, ClientSide};
    let Some(xvnc) = xvnc_or_skip() else { return };
    let Some(vncpasswd) = find("vncpasswd").or_else(|| find("tigervncpasswd")) else {
        return skip("vncpasswd not found (Debian package tigervnc-tools)");
    };
    let dir = tempfile::tempdir().unwrap();
    let mut p = std::process::Command::new(vncpasswd)
        .arg("-f")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    p.stdin.take().unwrap().write_all(b"sesame\n").unwrap();
    let obfuscated = dir.path().join("xvnc-passwd");
    std::fs::write(&obfuscated, p.wait_with_output().unwrap().stdout).unwrap();
    let mut server = Xvnc::start(
        &xvnc,
        &[
            "-SecurityTypes",
            "VncAuth",
            "-PasswordFile",
            obfuscated.to_str().unwrap(),
        ],
    );
    server.x_client(
        "xsetroot",
        &["-mod", "4", "4", "-fg", "green", "-bg", "black"],
    );
    let (mut direct, _, _) = Viewer::open(server.connect(), Some(b"sesame"));
    let mut screen = Framebuffer::new(W, H);
    direct.fetch(&mut screen, RAW, &PixelFormat::RGB888, false);

    let server_pw = dir.path().join("server-pw");
    std::fs::write(&server_pw, "sesame\n").unwrap();
    let viewer_pw = dir.path().join("viewer-pw");
    std::fs::write(&viewer_pw, "open sesame\n").unwrap();
    let near_extra = ["--viewer-password-file", viewer_pw.to_str().unwrap()];
    let (far, near) = pair_with(
        dir.path(),
        server.port,
        &"5e".repeat(32),
        &["--server-password-file", server_pw.to_str().unwrap()],
        &near_extra,
    );
    let near_addr = ("127.0.0.1", near.ports[0]);
    let (mut v, _, sec) =
        Viewer::open(TcpStream::connect(near_addr).unwrap(), Some(b"open sesame"));
    assert_eq!(sec, ClientEvent::Security(security::VNC_AUTH));
    until_shows(
        &mut v,
        ZRLE,
        &PixelFormat::RGB888,
        &screen,
        "behind two passwords",
    );

    // A viewer with the wrong password is refused, with the reason, and the other
    // viewer goes on.
    let mut sock = TcpStream::connect(near_addr).unwrap();
    sock.set_read_timeout(Some(GUARD)).unwrap();
    let mut c = ClientSide::new(ClientConfig {
        password: Some(b"sesame".to_vec()),
        ..ClientConfig::default()
    });
    let mut buf = [0u8; 4096];
    let refused = loop {
        match c.poll_event() {
            Err(e) => break e.to_string(),
            Ok(Some(ClientEvent::ServerInit(_))) => panic!("the wrong password was accepted"),
            Ok(_) => {}
        }
        sock.write_all(&c.take_output()).unwrap();
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "closed without a reason");
        c.receive(&buf[..n]);
    };
    assert!(refused.to_lowercase().contains("auth"), "{refused}");
    until_shows(
        &mut v,
        ZRLE,
        &PixelFormat::RGB888,
        &screen,
        "after a wrong password",
    );
    drop(far);
}
