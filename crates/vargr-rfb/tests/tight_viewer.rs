//! A real viewer decodes the Tight encoder's rectangles: a small server (a TcpListener
//! and vargr-rfb's `ServerSide`) serves a fixed picture in Tight to TightVNC's viewer
//! (`xtightvncviewer`) and to TigerVNC's (`vncviewer`), each on its own Xvfb display;
//! the viewer's window is captured with `xwd` and compared pixel for pixel with the
//! picture.
//!
//! The picture is sent as several areas, each through `Encoder::encode_into`, so the
//! viewer gets every kind of rectangle: fills, one-bit and one-byte palettes, copied
//! and gradient-filtered pixels, and pieces of an area wider than Tight allows.

mod xvnc_support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use vargr_rfb::encoding::TIGHT;
use vargr_rfb::{
    security, ClientMsg, Encoder, Framebuffer, PixelFormat, ProtocolVersion, ServerConfig,
    ServerEvent, ServerInit, ServerMsg, ServerSide,
};
use xvnc_support::{find, skip};

const W: u16 = 2100;
const H: u16 = 300;
const NAME: &str = "vargr-tight-viewer-test";

mod pictures;

/// The areas the picture is sent as, each of one kind.
fn areas() -> Vec<(&'static str, u16, u16, u16, u16)> {
    let mut a = vec![("mixed", 0, 0, W, 100)];
    for (i, kind) in ["solid", "text", "blocks", "photo", "noise", "text"]
        .into_iter()
        .enumerate()
    {
        a.push((kind, i as u16 * 350, 100, 350, 200));
    }
    a
}

fn picture() -> Framebuffer {
    let mut fb = Framebuffer::new(W, H);
    for (kind, ax, ay, w, h) in areas() {
        let part = pictures::image(kind, w, h);
        fb.put_rect(ax, ay, w, h, part.pixels()).unwrap();
    }
    fb
}

/// What the server saw and sent.
#[derive(Debug)]
struct Served {
    pixel_format: PixelFormat,
    encodings: Vec<i32>,
    /// The compression type (control byte's high four bits) of every rectangle.
    kinds: Vec<u8>,
    widths: Vec<u16>,
}

/// Serves `fb` to one viewer: the whole picture in Tight on its first request (and on
/// any non-incremental one); incremental requests are left unanswered, nothing changes.
fn serve(
    listener: TcpListener,
    fb: Framebuffer,
    report: mpsc::Sender<Served>,
    stop: Arc<AtomicBool>,
) {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut sock = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(_) if Instant::now() < deadline && !stop.load(Ordering::Relaxed) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("no viewer connected: {e}"),
        }
    };
    sock.set_nonblocking(false).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut server = ServerSide::new(ServerConfig {
        max_version: ProtocolVersion::V3_8,
        security_types: vec![security::NONE],
        password: None,
        challenge: [0; 16],
        limits: Default::default(),
    });
    let mut enc = Encoder::new();
    let mut sent = false;
    let mut buf = vec![0u8; 64 << 10];
    while !stop.load(Ordering::Relaxed) {
        sock.write_all(&server.take_output()).unwrap();
        let n = match sock.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => return,
        };
        server.receive(&buf[..n]);
        while let Some(ev) = server.poll_event().unwrap() {
            match ev {
                ServerEvent::ClientInit(_) => server
                    .send_server_init(&ServerInit {
                        width: W,
                        height: H,
                        pixel_format: PixelFormat::RGB888,
                        name: NAME.as_bytes().to_vec(),
                    })
                    .unwrap(),
                ServerEvent::Message(ClientMsg::FramebufferUpdateRequest {
                    incremental, ..
                }) if !incremental || !sent => {
                    let pf = server.pixel_format().unwrap();
                    let encodings = server.encodings().to_vec();
                    let mut rects = Vec::new();
                    for (_, x, y, w, h) in areas() {
                        enc.encode_into(&fb, TIGHT, x, y, w, h, &pf, &mut rects)
                            .unwrap();
                    }
                    let kinds = rects.iter().map(|r| r.data[0] >> 4).collect();
                    let widths = rects.iter().map(|r| r.width).collect();
                    server.send(&ServerMsg::FramebufferUpdate(rects)).unwrap();
                    if !sent {
                        let _ = report.send(Served {
                            pixel_format: pf,
                            encodings,
                            kinds,
                            widths,
                        });
                    }
                    sent = true;
                }
                _ => {}
            }
        }
    }
}

/// A child process killed (SIGTERM, then SIGKILL) and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts Xvfb on a display it picks itself (`-displayfd`: it writes the number to
/// its stdout once it accepts connections, so parallel tests never share one).
fn start_xvfb(xvfb: &Path) -> (Proc, u32) {
    let mut p = Proc(
        Command::new(xvfb)
            .args([
                "-displayfd",
                "1",
                "-screen",
                "0",
                "2400x400x24",
                "-nolisten",
                "tcp",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("Xvfb starts"),
    );
    let mut out = p.0.stdout.take().unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while out.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    let display = String::from_utf8_lossy(&line)
        .trim()
        .parse()
        .expect("Xvfb wrote its display number");
    (p, display)
}

/// An XWD file's pixels as canonical 0x00RRGGBB: a big-endian header of 25 u32 words
/// (header_size first; the window name fills the rest of header_size), ncolors
/// 12-byte colours, then the rows.
fn parse_xwd(b: &[u8]) -> Framebuffer {
    let word = |i: usize| u32::from_be_bytes(b[i * 4..i * 4 + 4].try_into().unwrap());
    let (header_size, format, width, height) = (word(0) as usize, word(2), word(4), word(5));
    let (byte_order, bpp, bytes_per_line) = (word(7), word(11), word(12) as usize);
    let masks = [word(14), word(15), word(16)];
    let ncolors = word(19) as usize;
    assert_eq!(format, 2, "ZPixmap");
    assert_eq!(bpp, 32, "32 bits a pixel (Xvfb at depth 24)");
    let data = &b[header_size + ncolors * 12..];
    let mut fb = Framebuffer::new(width as u16, height as u16);
    let mut px = Vec::with_capacity(width as usize * height as usize);
    for y in 0..height as usize {
        for x in 0..width as usize {
            let p: [u8; 4] = data[y * bytes_per_line + x * 4..][..4].try_into().unwrap();
            let v = if byte_order == 0 {
                u32::from_le_bytes(p)
            } else {
                u32::from_be_bytes(p)
            };
            let ch = |m: u32| (v & m) >> m.trailing_zeros();
            px.push(ch(masks[0]) << 16 | ch(masks[1]) << 8 | ch(masks[2]));
        }
    }
    fb.put_rect(0, 0, width as u16, height as u16, &px).unwrap();
    fb
}

/// Where `want` lies inside `got`, if anywhere: its first row is searched for, then
/// the whole picture compared. Returns the count of differing pixels at the best spot.
fn locate(got: &Framebuffer, want: &Framebuffer) -> Result<(u16, u16), String> {
    if got.width() < want.width() || got.height() < want.height() {
        return Err(format!(
            "window {}x{} is smaller than the picture {}x{}",
            got.width(),
            got.height(),
            want.width(),
            want.height()
        ));
    }
    let first = want.get_rect(0, 0, want.width(), 1).unwrap();
    let mut best = (u64::MAX, 0, 0);
    for oy in 0..=got.height() - want.height() {
        for ox in 0..=got.width() - want.width() {
            if got.get_rect(ox, oy, want.width(), 1).unwrap() != first {
                continue;
            }
            let region = got.get_rect(ox, oy, want.width(), want.height()).unwrap();
            let diff = region
                .iter()
                .zip(want.pixels())
                .filter(|(a, b)| a != b)
                .count() as u64;
            if diff == 0 {
                return Ok((ox, oy));
            }
            best = best.min((diff, ox, oy));
        }
    }
    Err(if best.0 == u64::MAX {
        "the picture's first row is nowhere in the window".into()
    } else {
        format!("{} pixels differ at best, at {},{}", best.0, best.1, best.2)
    })
}

#[test]
fn xtightvncviewer_shows_the_picture_sent_in_tight() {
    // A local viewer would put Raw first; the list makes Tight its preference, as it is
    // for remote servers.
    let args = ["-encodings", "tight copyrect", "-compresslevel", "6"];
    shows_the_picture("xtightvncviewer", &args);
}

#[test]
fn tigervnc_s_viewer_shows_the_picture_sent_in_tight() {
    // Full colour, so that the viewer does not pick a smaller format on its own.
    let args = [
        "-PreferredEncoding=Tight",
        "-AutoSelect=0",
        "-FullColor=1",
        "-SecurityTypes=None",
    ];
    shows_the_picture("vncviewer", &args);
}

/// Serves the picture to `viewer` (run with `args`) and compares its window.
fn shows_the_picture(viewer: &str, args: &[&str]) {
    let needed = ["Xvfb", viewer, "xwd", "xdotool"];
    let found: Vec<Option<PathBuf>> = needed.iter().map(|t| find(t)).collect();
    if let Some(i) = found.iter().position(Option::is_none) {
        return skip(&format!("{} is not installed", needed[i]));
    }
    let [xvfb, viewer, xwd, xdotool] = [0, 1, 2, 3].map(|i| found[i].clone().unwrap());
    let (_xvfb, display) = start_xvfb(&xvfb);
    let want = picture();

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let (fb, stop) = (want.clone(), stop.clone());
        std::thread::spawn(move || serve(listener, fb, tx, stop))
    };
    let log =
        std::env::temp_dir().join(format!("vargr-rfb-tight-viewer-{}.log", std::process::id()));
    let _viewer = Proc(
        Command::new(&viewer)
            .args(["-display", &format!(":{display}")])
            .args(args)
            .arg(format!("127.0.0.1::{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the viewer starts"),
    );
    let viewer_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let served = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("the viewer asked for no update; its log:\n{}", viewer_log()));
    // Its preferred real encoding (pseudo-encodings are negative or large) is Tight.
    let real = served.encodings.iter().find(|&&e| (0..256).contains(&e));
    assert_eq!(real, Some(&TIGHT), "{served:?}");
    // Every kind of rectangle went out: fill (8), copy (0), one-bit palette (stream 1
    // with a filter, 5), one-byte palette (6), gradient (7); and pieces of the wide area.
    for k in [8, 0, 5, 6, 7] {
        assert!(
            served.kinds.contains(&k),
            "no rectangle of type {k}: {served:?}"
        );
    }
    assert!(served.widths.iter().all(|&w| w <= 2048) && served.widths.contains(&1050));

    // The viewer draws soon after the update; capture until it matches or time runs out.
    let deadline = Instant::now() + Duration::from_secs(20);
    let result = loop {
        let out = Command::new(&xdotool)
            .args(["search", "--name", NAME])
            .env("DISPLAY", format!(":{display}"))
            .output()
            .unwrap();
        let windows: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let mut why = format!("no window named {NAME}");
        for win in &windows {
            let cap = Command::new(&xwd)
                .args(["-silent", "-id", win, "-display", &format!(":{display}")])
                .output()
                .unwrap();
            if !cap.status.success() || cap.stdout.len() < 100 {
                why = format!(
                    "xwd -id {win} failed: {}",
                    String::from_utf8_lossy(&cap.stderr)
                );
                continue;
            }
            match locate(&parse_xwd(&cap.stdout), &want) {
                Ok(at) => {
                    why.clear();
                    println!("window {win}: the picture at {at:?}, {served:?}");
                    break;
                }
                Err(e) => why = format!("window {win}: {e}"),
            }
        }
        if why.is_empty() {
            break Ok(());
        }
        if Instant::now() > deadline {
            break Err(why);
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    stop.store(true, Ordering::Relaxed);
    drop(_viewer);
    server.join().unwrap();
    let text = viewer_log();
    let _ = std::fs::remove_file(&log);
    if let Err(why) = result {
        panic!(
            "{why}; pixel format {:?}; the viewer's log:\n{text}",
            served.pixel_format
        );
    }
}
