//! Links after the handshake: a relay that forwards a real handshake and then speaks for
//! the client gets nothing through; both protections carry a real sync.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{vargr, SyncDaemon as Daemon};
use vargr_sync::{SendOptions, Transport};

fn setup() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("src")).unwrap();
    std::fs::write(d.path().join("src/legit.txt"), "legit\n".repeat(100)).unwrap();
    std::fs::create_dir_all(d.path().join("evil")).unwrap();
    std::fs::write(d.path().join("evil/planted.txt"), "owned\n").unwrap();
    std::fs::create_dir_all(d.path().join("served")).unwrap();
    let secret = d.path().join("secret");
    std::fs::write(&secret, "ab".repeat(32)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    d
}

/// Copies one whole vargr frame (header, then the payload its header announces).
fn pass_frame(from: &mut TcpStream, to: &mut TcpStream) {
    let mut head = [0u8; vargr_wire::HEADER_LEN];
    from.read_exact(&mut head).unwrap();
    let total = vargr_wire::frame_len(&head, 1024).unwrap().unwrap();
    let mut rest = vec![0u8; total - head.len()];
    from.read_exact(&mut rest).unwrap();
    to.write_all(&head).unwrap();
    to.write_all(&rest).unwrap();
}

/// What an attacker who knows the record format but not the keys writes: each write a
/// Data frame with a made-up trailer.
struct ForgedRecords(TcpStream);

impl Write for ForgedRecords {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut f = bytes::BytesMut::new();
        vargr_wire::encode_header(vargr_wire::FrameKind::Data, 0, 0, 0, buf.len(), &mut f);
        f.extend_from_slice(buf);
        f.extend_from_slice(&[0u8; vargr_net::seal::TAG_LEN]);
        self.0.write_all(&f)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn sync(d: &Path, port: u16, dest: &str, extra: &[&str]) -> (bool, String) {
    let out = Command::new(vargr())
        .arg("sync")
        .arg(d.join("src"))
        .arg(format!("vargr://127.0.0.1:{port}/{dest}"))
        .arg("--secret-file")
        .arg(d.join("secret"))
        .arg("--cache-dir")
        .arg(d.join("ccache"))
        .arg("--quiet")
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_relay_that_forwards_the_handshake_cannot_write_through_the_daemon() {
    let d = setup();
    let daemon = Daemon::start(
        &d.path().join("served"),
        &d.path().join("secret"),
        &d.path().join("dcache"),
    );
    let relay = TcpListener::bind("127.0.0.1:0").unwrap();
    let relay_port = relay.local_addr().unwrap().port();
    let (evil, attacker_cache) = (d.path().join("evil"), d.path().join("acache"));
    let daemon_port = daemon.port;
    // Twice: raw sync bytes (what took over a session before frames were sealed), then
    // records in the right format with made-up trailers.
    let attacker = std::thread::spawn(move || {
        let mut results = Vec::new();
        for forged_records in [false, true] {
            let (mut client, _) = relay.accept().unwrap();
            let mut server = TcpStream::connect(("127.0.0.1", daemon_port)).unwrap();
            server
                .set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            // Challenge, proof, welcome: the real client proves the secret for us.
            pass_frame(&mut server, &mut client);
            pass_frame(&mut client, &mut server);
            pass_frame(&mut server, &mut client);
            drop(client);
            // Then the relay speaks for itself, as a vargr sync sender would.
            let writer: Box<dyn Write + Send> = if forged_records {
                Box::new(ForgedRecords(server.try_clone().unwrap()))
            } else {
                Box::new(server.try_clone().unwrap())
            };
            let t = Transport {
                reader: Box::new(server),
                writer,
                peer: "the daemon, hijacked".into(),
            };
            let opts = SendOptions {
                dest: "copy".into(),
                cache_root: attacker_cache.clone(),
                sender_name: "attacker".into(),
                ..SendOptions::default()
            };
            results.push(vargr_sync::send(&evil, t, &opts, &mut |_| {}).map(|_| ()));
        }
        results
    });
    for _ in 0..2 {
        let (ok, err) = sync(d.path(), relay_port, "copy", &[]);
        assert!(
            !ok,
            "the client's own session was cut off by the relay: {err}"
        );
    }
    let sent = attacker.join().unwrap();
    assert!(
        sent.iter().all(Result::is_err),
        "the daemon accepted the relay's session: {sent:?}"
    );
    assert!(
        !d.path().join("served/copy/planted.txt").exists()
            && !d.path().join("served/planted.txt").exists(),
        "the relay wrote through the daemon"
    );
    let line = daemon
        .wait_for("check", Duration::from_secs(20))
        .expect("the daemon should say the relay's records failed their check");
    assert!(line.contains("failed its mac check"), "{line}");
}

#[test]
fn syncs_run_under_every_protection() {
    let d = setup();
    let daemon = Daemon::start(
        &d.path().join("served"),
        &d.path().join("secret"),
        &d.path().join("dcache"),
    );
    for mode in ["auto", "mac", "encrypt"] {
        let (ok, err) = sync(d.path(), daemon.port, mode, &["--link-security", mode]);
        assert!(ok, "{mode}: {err}");
        assert_eq!(
            std::fs::read(d.path().join(format!("served/{mode}/legit.txt"))).unwrap(),
            std::fs::read(d.path().join("src/legit.txt")).unwrap(),
            "{mode}"
        );
    }
}

/// A peer that sends a byte a second and never finishes its handshake holds
/// neither the daemon nor the syncs behind it, and is cut off at the handshake deadline.
#[test]
fn a_trickling_peer_does_not_stall_the_daemon() {
    let d = setup();
    let daemon = Daemon::start(
        &d.path().join("served"),
        &d.path().join("secret"),
        &d.path().join("dcache"),
    );
    let port = daemon.port;
    let trickler = std::thread::spawn(move || {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let started = std::time::Instant::now();
        // Well past the handshake deadline (10 s), unless the daemon hangs up first.
        while started.elapsed() < Duration::from_secs(30) {
            if c.write_all(&[0xA5]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        started.elapsed()
    });
    std::thread::sleep(Duration::from_millis(300));
    for dest in ["one", "two"] {
        let (ok, err) = sync(d.path(), port, dest, &[]);
        assert!(ok, "a sync behind a trickling peer: {err}");
    }
    let line = daemon
        .wait_for("timed out", Duration::from_secs(20))
        .expect("the daemon should report the trickler's handshake timing out");
    assert!(!line.contains("after 0 ms"), "{line}");
    let lasted = trickler.join().unwrap();
    assert!(
        lasted < Duration::from_secs(25),
        "the trickler was held for {lasted:?}"
    );
}

/// A tree of real processes over TCP carries its waves under MACs and under encryption.
#[test]
fn a_tree_over_tcp_sums_under_each_protection() {
    use vargr_net::LinkSecurity;
    use vargr_tbon::{StreamOptions, Value};
    for security in [LinkSecurity::Mac, LinkSecurity::Encrypt] {
        let opts = vargr_tbon::NetworkOptions {
            transport: "tcp".into(),
            link_security: security,
            ..common::opts()
        };
        let net = common::start("1x2x4", "echo", opts);
        let s = net
            .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
            .unwrap();
        let p = common::round_trip(&s, common::TAG_RANK, "%d", vec![Value::Int(0)]);
        assert_eq!(common::first_int(&p), 6, "{security}");
    }
}
