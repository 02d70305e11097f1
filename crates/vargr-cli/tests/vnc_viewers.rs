//! Real viewers through `vargr vnc`: TigerVNC's vncviewer and xtightvncviewer, each on
//! an Xvfb of its own, and vncsnapshot (an RFB 3.3 client) watch TigerVNC's Xvnc
//! through a far and a near proxy process while bench/vnc/session.sh draws with real X
//! programs. When a session holds still, every viewer's window must show exactly the
//! server's screen (both read from X with xwd), whatever encoding it asked for.
//!
//! The harness is vargr-vnc's (tests/viewer_support, proved on direct connections in
//! vargr-vnc's tests/viewers.rs). Skipped with a printed reason when a program is
//! missing, unless `VARGR_REQUIRE_XVNC=1` (scripts/test.sh).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::proxy_process::Proxy;

#[path = "../../vargr-vnc/tests/viewer_support/mod.rs"]
mod viewer_support;
#[path = "../../vargr-rfb/tests/xvnc_support/mod.rs"]
mod xvnc_support;

use viewer_support::*;
use xvnc_support::{find, skip, Xvnc};

const SW: u32 = 640;
const SH: u32 = 400;

#[test]
fn real_viewers_through_the_pair_show_the_server_screen_after_each_session() {
    let tools = [
        "Xvnc",
        "Xvfb",
        "xwd",
        "xsetroot",
        "xdotool",
        "vncviewer",
        "xtightvncviewer",
        "vncsnapshot",
        "djpeg",
        "xterm",
        "feh",
        "gnuplot",
        "xclock",
        "pgmramp",
        "ppmpat",
    ];
    if let Some(t) = tools.iter().find(|t| find(t).is_none()) {
        return skip(&format!("{t} is not installed"));
    }
    let geometry = format!("{SW}x{SH}");
    let server = Xvnc::start(
        &find("Xvnc").unwrap(),
        &["-geometry", &geometry, "-SecurityTypes", "None"],
    );
    let display = format!(":{}", server.display);
    hide_cursor(&display);

    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "3c".repeat(32)).unwrap();
    let s = secret.to_str().unwrap();
    let forward = format!("127.0.0.1:{}", server.port);
    let far = Proxy::start(
        "vnc",
        &[
            "--serve",
            "127.0.0.1:0",
            "--forward",
            &forward,
            "--secret-file",
            s,
        ],
        &[],
        &dir.path().join("far"),
        1,
    );
    let peer = format!("127.0.0.1:{}", far.ports[0]);
    let near = Proxy::start(
        "vnc",
        &[
            "--listen",
            "127.0.0.1:0",
            "--peer",
            &peer,
            "--secret-file",
            s,
        ],
        &[],
        &dir.path().join("near"),
        1,
    );
    let near_addr = SocketAddr::from(([127, 0, 0, 1], near.ports[0]));

    // Each asks for another encoding; xtightvncviewer's list is all it announces.
    let cases = [
        (Kind::TigerVnc, "ZRLE"),
        (Kind::TigerVnc, "Hextile"),
        (Kind::XTightVnc, "tight copyrect"),
        (Kind::XTightVnc, "hextile"),
        (Kind::XTightVnc, "raw"),
    ];
    let xvfbs: Vec<Xvfb> = cases
        .iter()
        .map(|_| Xvfb::start(SW + 64, SH + 64))
        .collect();
    let mut viewers: Vec<Viewer> = cases
        .iter()
        .zip(&xvfbs)
        .map(|(&(kind, enc), x)| {
            let opts = Options {
                encodings: Some(enc.to_string()),
                ..Options::default()
            };
            Viewer::start(kind, near_addr, x, &opts)
        })
        .collect();
    for v in &mut viewers {
        v.window(Duration::from_secs(15))
            .unwrap_or_else(|e| panic!("{e}\n{}\n{}", v.log(), near.text()));
    }
    for name in [
        "scrolling-text",
        "panning-image",
        "redrawn-plot",
        "idle",
        "revisited-slides",
    ] {
        let mut session = Session::start(&display, name, 3, true);
        session.wait_holding(Duration::from_secs(30));
        for ((_, enc), v) in cases.iter().zip(&mut viewers) {
            wait_same(v, &display, Duration::from_secs(20)).unwrap_or_else(|d| {
                panic!(
                    "{name}, viewer asking for {enc}: {}\n{}\nnear: {}\nfar: {}",
                    d.save(),
                    v.log(),
                    near.text(),
                    far.text()
                )
            });
        }
        if name == "panning-image" {
            // vncsnapshot speaks RFB 3.3 and saves a JPEG: close to the screen, not equal.
            let shot = snapshot(near_addr);
            let off = shot.mean_abs_diff(&server_picture(&display));
            assert!(off < 2.0, "vncsnapshot through the pair is off by {off:.2}");
        }
        drop(session);
    }
    drop(viewers);
    drop(xvfbs);
    let sessions = far
        .lines()
        .into_iter()
        .filter(|l| l.contains("session ended") || l.contains("session failed"))
        .count();
    assert!(sessions >= 1, "far: {}", far.text());
}
