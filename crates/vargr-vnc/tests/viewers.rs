//! Real viewers against a real VNC server, connected directly: TigerVNC's vncviewer
//! and xtightvncviewer, each on an Xvfb of its own, watch TigerVNC's Xvnc while
//! bench/vnc/session.sh draws on it; once the session stops, the viewer's window
//! must show exactly the server's screen (both read from X with xwd). These prove the
//! harness in tests/viewer_support that the proxy pair's tests put in between:
//! every session ends on one picture that viewers show; a stopped viewer differs (so
//! the comparison cannot pass vacuously) and catches up; VNC passwords; pointer input
//! from a viewer; vncsnapshot's JPEG within a tolerance.
//!
//! Skipped with a printed reason when a program is missing, unless
//! `VARGR_REQUIRE_XVNC=1` (scripts/test.sh), which turns the skip into a failure.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "viewer_support/mod.rs"]
mod viewer_support;
#[path = "../../vargr-rfb/tests/xvnc_support/mod.rs"]
mod xvnc_support;

use viewer_support::*;
use xvnc_support::{find, skip, Xvnc};

/// The server's screen: big enough for a readable xterm, small enough to compare fast.
const SW: u32 = 640;
const SH: u32 = 400;

/// Programs every test here needs; the reason to skip if one is missing.
fn missing(extra: &[&str]) -> Option<String> {
    ["Xvnc", "Xvfb", "xwd", "xsetroot", "xdotool"]
        .iter()
        .chain(extra)
        .find(|p| find(p).is_none())
        .map(|p| format!("{p} is not installed"))
}

fn start_xvnc(extra: &[&str]) -> Xvnc {
    let geometry = format!("{SW}x{SH}");
    // The later -geometry wins over xvnc_support's 320×200.
    let mut args = vec!["-geometry", geometry.as_str()];
    args.extend(extra);
    let xvnc = Xvnc::start(&find("Xvnc").unwrap(), &args);
    hide_cursor(&format!(":{}", xvnc.display));
    xvnc
}

fn addr(x: &Xvnc) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], x.port))
}

/// Room around the remote screen: TigerVNC puts its window a little off 0,0.
fn viewer_xvfb() -> Xvfb {
    Xvfb::start(SW + 64, SH + 64)
}

fn signal(viewer: &Viewer, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &viewer.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn direct_viewers_show_exactly_the_server_screen_after_a_session() {
    if let Some(reason) = missing(&["vncviewer", "xtightvncviewer", "xterm"]) {
        return skip(&reason);
    }
    let server = start_xvnc(&["-SecurityTypes", "None"]);
    let display = format!(":{}", server.display);
    let cases = [
        (Kind::TigerVnc, "ZRLE"),
        (Kind::TigerVnc, "Hextile"),
        (Kind::XTightVnc, "tight copyrect"),
        (Kind::XTightVnc, "hextile"),
    ];
    let xvfbs: Vec<Xvfb> = cases.iter().map(|_| viewer_xvfb()).collect();
    let mut viewers: Vec<Viewer> = cases
        .iter()
        .zip(&xvfbs)
        .map(|(&(kind, enc), x)| {
            let opts = Options {
                encodings: Some(enc.into()),
                ..Options::default()
            };
            Viewer::start(kind, addr(&server), x, &opts)
        })
        .collect();
    // Connected before the session, so they follow it update by update (scrolls
    // included) rather than fetching one final picture.
    for v in &mut viewers {
        v.window(Duration::from_secs(15)).unwrap();
    }
    let t = Instant::now();
    let mut session = Session::start(&display, "scrolling-text", 3, true);
    session.wait_holding(Duration::from_secs(20));
    println!("session: {:?}", t.elapsed());
    // The log stands still on a full xterm; every viewer must have caught up with it.
    let screen = server_picture(&display);
    let colours: std::collections::HashSet<u32> = screen.rgb.iter().copied().collect();
    assert!(colours.len() >= 2, "the session drew nothing");
    for (v, (kind, enc)) in viewers.iter_mut().zip(cases) {
        let t = Instant::now();
        wait_same(v, &display, Duration::from_secs(10))
            .unwrap_or_else(|d| panic!("{kind:?} {enc}: {}\n{}", d.save(), v.log()));
        println!("{kind:?} {enc}: same after {:?}", t.elapsed());
    }
    // Each viewer got the encodings asked for: Xvnc logs what it sent each one.
    drop(viewers);
    let deadline = Instant::now() + Duration::from_secs(5);
    let used = loop {
        let used = encoders_used(&std::fs::read_to_string(&server.log).unwrap());
        if used.len() > cases.len() || Instant::now() > deadline {
            break used;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    println!("encoders per connection: {used:?}");
    let has = |want: &[&str], not: &[&str]| {
        used.iter()
            .any(|u| want.iter().all(|w| u.contains(*w)) && !not.iter().any(|n| u.contains(*n)))
    };
    assert!(
        has(&["ZRLE", "Tight"], &["Hextile"]),
        "TigerVNC ZRLE: {used:?}"
    );
    assert!(
        has(&["Hextile", "Tight"], &["ZRLE"]),
        "TigerVNC Hextile: {used:?}"
    );
    assert!(
        has(&["Tight"], &["ZRLE", "Hextile"]),
        "xtightvncviewer tight: {used:?}"
    );
    assert!(
        has(&["Hextile"], &["ZRLE", "Tight"]),
        "xtightvncviewer hextile: {used:?}"
    );
}

/// Each session ends on the same picture every time (two Xvnc servers draw it at
/// once), and a viewer shows that picture exactly; idle's clock is the exception to
/// the first.
#[test]
fn every_session_ends_on_one_picture_that_a_viewer_shows() {
    let tools = [
        "vncviewer",
        "xterm",
        "feh",
        "gnuplot",
        "xclock",
        "pgmramp",
        "rgb3toppm",
        "ppmpat",
        "pnmpaste",
        "ppmdraw",
    ];
    if let Some(reason) = missing(&tools) {
        return skip(&reason);
    }
    for name in ["scrolling-text", "panning-image", "redrawn-plot", "idle"] {
        let t = Instant::now();
        let none = ["-SecurityTypes", "None"];
        let (a, b) = (start_xvnc(&none), start_xvnc(&none));
        let (da, db) = (format!(":{}", a.display), format!(":{}", b.display));
        let xvfb = viewer_xvfb();
        let mut v = Viewer::tigervnc(addr(&a), &xvfb);
        v.window(Duration::from_secs(15)).unwrap();
        let mut sa = Session::start(&da, name, 2, true);
        let mut sb = Session::start(&db, name, 2, true);
        sa.wait_holding(Duration::from_secs(20));
        sb.wait_holding(Duration::from_secs(20));
        let (pa, pb) = (server_picture(&da), server_picture(&db));
        let colours: std::collections::HashSet<u32> = pa.rgb.iter().copied().collect();
        assert!(colours.len() >= 2, "{name} drew nothing");
        if name != "idle" {
            if let Some(d) = pa.diff(&pb) {
                panic!("{name} ends on two pictures: {}", d.save());
            }
        }
        wait_same(&mut v, &da, Duration::from_secs(10))
            .unwrap_or_else(|d| panic!("{name}: {}\n{}", d.save(), v.log()));
        println!("{name}: {:?}", t.elapsed());
    }
}

/// A viewer follows a running session: mid-session it equals the server at some
/// moment (the log stands still between lines).
#[test]
fn a_viewer_follows_a_running_session() {
    if let Some(reason) = missing(&["vncviewer", "xterm"]) {
        return skip(&reason);
    }
    let server = start_xvnc(&["-SecurityTypes", "None"]);
    let display = format!(":{}", server.display);
    let xvfb = viewer_xvfb();
    let mut v = Viewer::tigervnc(addr(&server), &xvfb);
    v.window(Duration::from_secs(15)).unwrap();
    let session = Session::start(&display, "scrolling-text", 4, false);
    std::thread::sleep(Duration::from_millis(1500));
    // The log moves 4 lines a second; the screen differs from the one a second ago.
    let before = server_picture(&display);
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        server_picture(&display).diff(&before).is_some(),
        "the session does not draw"
    );
    let r = wait_same(&mut v, &display, Duration::from_secs(3));
    session.finish();
    r.unwrap_or_else(|d| panic!("mid-session: {}\n{}", d.save(), v.log()));
}

/// The comparison fails when it must: a viewer that is stopped cannot show the
/// server's new background, and then shows it once it runs again.
#[test]
fn a_stale_viewer_differs_and_catches_up() {
    if let Some(reason) = missing(&["vncviewer", "xtightvncviewer"]) {
        return skip(&reason);
    }
    let server = start_xvnc(&["-SecurityTypes", "None"]);
    let display = format!(":{}", server.display);
    let set_root = |colour: &str| {
        x_run(&display, "xsetroot", &["-solid", colour]);
    };
    set_root("#204060");
    // The parser against a known screen: every pixel is the colour set.
    let p = server_picture(&display);
    assert_eq!((p.width, p.height), (SW, SH));
    assert!(p.rgb.iter().all(|&c| c == 0x204060), "xwd parsed wrong");

    for kind in [Kind::TigerVnc, Kind::XTightVnc] {
        let xvfb = viewer_xvfb();
        let mut v = Viewer::start(kind, addr(&server), &xvfb, &Options::default());
        wait_same(&mut v, &display, Duration::from_secs(15))
            .unwrap_or_else(|d| panic!("{kind:?} before: {}\n{}", d.save(), v.log()));
        assert!(capture(&mut v).rgb.iter().all(|&c| c == 0x204060));

        signal(&v, "-STOP");
        set_root("#a05010");
        let stale = wait_same(&mut v, &display, Duration::from_millis(500));
        signal(&v, "-CONT");
        let d = stale.expect_err("a stopped viewer showed the new screen");
        assert_eq!(d.sizes, None);
        assert_eq!(
            (d.pixels, d.bbox),
            ((SW * SH) as usize, (0, 0, SW, SH)),
            "{d}"
        );
        assert_eq!(d.first, Some((0, 0, 0xa05010, 0x204060)));

        wait_same(&mut v, &display, Duration::from_secs(10))
            .unwrap_or_else(|d| panic!("{kind:?} after: {}\n{}", d.save(), v.log()));
        set_root("#204060");
        wait_same(&mut v, &display, Duration::from_secs(10))
            .unwrap_or_else(|d| panic!("{kind:?} back: {}\n{}", d.save(), v.log()));

        // Another display does not match, even one step of blue off.
        let other = Xvfb::start(SW, SH);
        x_run(&other.name(), "xsetroot", &["-solid", "#204061"]);
        let d = wait_same(&mut v, &other.name(), Duration::from_millis(200)).unwrap_err();
        assert_eq!(d.first, Some((0, 0, 0x204061, 0x204060)), "{d}");
    }
}

/// The pointer where the server has it, from `xdotool getmouselocation`.
fn server_pointer(display: &str) -> (u32, u32) {
    let out = String::from_utf8(x_run(display, "xdotool", &["getmouselocation"])).unwrap();
    let field = |key: &str| -> u32 {
        let v = out.split(' ').find_map(|f| f.strip_prefix(key)).unwrap();
        v.parse().unwrap()
    };
    (field("x:"), field("y:"))
}

/// Input goes from a viewer to the server: the pointer moved over a viewer's window
/// moves the server's pointer to the same pixel; a view-only viewer's does not.
#[test]
fn a_viewer_moves_the_server_pointer_unless_view_only() {
    if let Some(reason) = missing(&["vncviewer", "xtightvncviewer"]) {
        return skip(&reason);
    }
    let server = start_xvnc(&["-SecurityTypes", "None"]);
    let display = format!(":{}", server.display);
    assert_eq!(server_pointer(&display), (SW - 1, SH - 1));
    for (i, kind) in [Kind::TigerVnc, Kind::XTightVnc].into_iter().enumerate() {
        let xvfb = viewer_xvfb();
        let quiet = Options {
            view_only: true,
            ..Options::default()
        };
        let mut v = Viewer::start(kind, addr(&server), &xvfb, &quiet);
        wait_same(&mut v, &display, Duration::from_secs(15))
            .unwrap_or_else(|d| panic!("{kind:?}: {}\n{}", d.save(), v.log()));
        let before = server_pointer(&display);
        v.click(30, 20);
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(
            server_pointer(&display),
            before,
            "{kind:?} view-only moved it"
        );
        drop(v);

        let mut v = Viewer::start(kind, addr(&server), &xvfb, &Options::default());
        wait_same(&mut v, &display, Duration::from_secs(15))
            .unwrap_or_else(|d| panic!("{kind:?}: {}\n{}", d.save(), v.log()));
        // A click on the root window does nothing there but move the pointer.
        let follows = |v: &Viewer, to: (u32, u32)| {
            let deadline = Instant::now() + Duration::from_secs(5);
            while server_pointer(&display) != to && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            assert_eq!(server_pointer(&display), to, "{kind:?}\n{}", v.log());
        };
        let to = (100 + 10 * i as u32, 50);
        v.click(to.0, to.1);
        follows(&v, to);
        v.pointer_to(to.0 + 7, to.1 + 9);
        follows(&v, (to.0 + 7, to.1 + 9));
    }
}

/// VNC authentication: both viewers with the right password file see the screen;
/// with a wrong one, they exit.
#[test]
fn viewers_with_a_password_file() {
    if let Some(reason) = missing(&["vncviewer", "xtightvncviewer", "vncpasswd"]) {
        return skip(&reason);
    }
    let dir = std::env::temp_dir();
    let file = |name: &str| -> PathBuf {
        dir.join(format!("vargr-vnc-viewers-{}-{name}", std::process::id()))
    };
    let (good, bad) = (file("good.passwd"), file("bad.passwd"));
    password_file("varg-28", &good);
    password_file("not-it", &bad);
    let server = start_xvnc(&[
        "-SecurityTypes",
        "VncAuth",
        "-PasswordFile",
        good.to_str().unwrap(),
    ]);
    let display = format!(":{}", server.display);
    x_run(&display, "xsetroot", &["-solid", "#336699"]);
    for kind in [Kind::TigerVnc, Kind::XTightVnc] {
        let xvfb = viewer_xvfb();
        let opts = Options {
            password_file: Some(good.clone()),
            ..Options::default()
        };
        let mut v = Viewer::start(kind, addr(&server), &xvfb, &opts);
        wait_same(&mut v, &display, Duration::from_secs(15))
            .unwrap_or_else(|d| panic!("{kind:?}: {}\n{}", d.save(), v.log()));

        let opts = Options {
            password_file: Some(bad.clone()),
            ..Options::default()
        };
        let mut v = Viewer::start(kind, addr(&server), &xvfb, &opts);
        let deadline = Instant::now() + Duration::from_secs(10);
        while v.running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!v.running(), "{kind:?} with a wrong password still runs");
    }
    let _ = std::fs::remove_file(good);
    let _ = std::fs::remove_file(bad);
}

/// vncsnapshot writes JPEG, so its picture is compared with a tolerance: close to
/// the server's screen, far from a different one.
#[test]
fn vncsnapshot_is_close_to_the_server_screen() {
    if let Some(reason) = missing(&["vncsnapshot", "djpeg", "xterm"]) {
        return skip(&reason);
    }
    let server = start_xvnc(&["-SecurityTypes", "None"]);
    let display = format!(":{}", server.display);
    // A still screen with text and colour.
    x_run(&display, "xsetroot", &["-solid", "#336699"]);
    let xterm = find("xterm").unwrap();
    let mut term = Command::new(xterm)
        .args(["-fn", "6x13", "-geometry", "60x10+20+20", "-e", "sh", "-c"])
        .arg("ls -l /usr/bin | head -n 9; sleep 60")
        .env("DISPLAY", &display)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let shot = snapshot(addr(&server));
    let screen = server_picture(&display);
    let close = shot.mean_abs_diff(&screen);
    x_run(&display, "xsetroot", &["-solid", "#996633"]);
    let changed = server_picture(&display);
    let far = shot.mean_abs_diff(&changed);
    let _ = term.kill();
    let _ = term.wait();
    println!("vncsnapshot: mean |Δ| {close:.2} against the screen, {far:.2} against another");
    assert!(
        close < 2.0,
        "vncsnapshot differs from the screen by {close:.2} on average"
    );
    assert!(
        far > 20.0,
        "vncsnapshot is close to another screen ({far:.2})"
    );
}
