//! `vargr proxy` as users run it: two real proxy processes between a client and a
//! server on loopback. Bytes must arrive identical both ways, interactive exchanges must
//! not stall, a repeated download must cross the link as fingerprints, a wrong secret
//! must be refused, and a dead far proxy must end the client's connection. Every wait
//! is bounded.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::proxy_process::Proxy;
use common::random_bytes as random;

const GUARD: Duration = Duration::from_secs(60);

/// The lines of connections that ended.
fn closed_lines(p: &Proxy) -> Vec<String> {
    p.lines()
        .into_iter()
        .filter(|l| l.contains(" closed: from app "))
        .collect()
}

/// A near and a far proxy in front of `server_port`, with the same secret.
struct Pair {
    far: Proxy,
    near: Proxy,
}

fn pair(dir: &Path, server_port: u16, near_extra: &[&str]) -> Pair {
    let secret = dir.join("secret");
    std::fs::write(&secret, "5e".repeat(32)).unwrap();
    let secret = secret.to_str().unwrap().to_string();
    let forward = format!("127.0.0.1:{server_port}");
    let far = Proxy::start(
        "proxy",
        &[
            "--serve",
            "127.0.0.1:0",
            "--forward",
            &forward,
            "--secret-file",
            &secret,
            "--name",
            "far",
        ],
        &[],
        &dir.join("far-cache"),
        1,
    );
    let peer = format!("127.0.0.1:{}", far.ports[0]);
    let mut args = vec!["--peer", &peer, "--secret-file", &secret, "--name", "near"];
    if !near_extra.contains(&"--listen") {
        args.extend(["--listen", "127.0.0.1:0"]);
    }
    args.extend(near_extra);
    let listens = args.iter().filter(|a| **a == "--listen").count();
    let near = Proxy::start("proxy", &args, &[], &dir.join("near-cache"), listens);
    Pair { far, near }
}

/// A server that echoes each connection's bytes and shuts its write side at EOF.
fn echo_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) => {
                            let _ = s.shutdown(Shutdown::Write);
                            return;
                        }
                        Ok(n) => {
                            if s.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                        Err(_) => return,
                    }
                }
            });
        }
    });
    port
}

/// A server that sends `blob` on every connection, shuts its write side, and drains.
fn blob_server(blob: Arc<Vec<u8>>) -> u16 {
    blobs_server(vec![blob])
}

/// Serves `blobs[k]` to the k-th connection (the last one from then on).
fn blobs_server(blobs: Vec<Arc<Vec<u8>>>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (k, s) in l.incoming().enumerate() {
            let Ok(mut s) = s else { return };
            let blob = blobs[k.min(blobs.len() - 1)].clone();
            std::thread::spawn(move || {
                if s.write_all(&blob).is_ok() {
                    let _ = s.shutdown(Shutdown::Write);
                    let _ = std::io::copy(&mut s, &mut std::io::sink());
                }
            });
        }
    });
    port
}

fn client(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(GUARD)).unwrap();
    s.set_write_timeout(Some(GUARD)).unwrap();
    s
}

/// Reads to EOF; a time-out fails the test (a hang).
fn read_all(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => got,
        Err(e) => panic!("reading through the proxies after {} bytes: {e}", got.len()),
    }
}

/// `X` in "... {key} X B ..." of a close line.
fn field(line: &str, key: &str) -> u64 {
    let rest = line
        .split(key)
        .nth(1)
        .unwrap_or_else(|| panic!("no {key:?} in {line:?}"));
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn bytes_cross_both_ways_interactively_and_with_half_close() {
    let dir = tempfile::tempdir().unwrap();
    // The near proxy holds tails back for 2 ms (--hold), the far one sends them at once:
    // neither may stall an exchange.
    let p = pair(dir.path(), echo_server(), &["--hold", "2ms"]);
    let mut c = client(p.near.ports[0]);

    // Small exchanges: each must come back without more bytes behind it.
    for i in 0..20 {
        let msg = format!("ping {i}\n");
        c.write_all(msg.as_bytes()).unwrap();
        let mut back = vec![0u8; msg.len()];
        c.read_exact(&mut back)
            .unwrap_or_else(|e| panic!("ping {i} stalled: {e}\n{}", p.near.text()));
        assert_eq!(back, msg.as_bytes());
    }

    // Bulk both ways at once, repeated so that the second half is dedup'ed, then a
    // half-close: the echo comes back complete and then EOF.
    let half = random(1 << 20, 9);
    let mut data = half.clone();
    data.extend_from_slice(&half);
    let mut w = c.try_clone().unwrap();
    let sent = data.clone();
    let writer = std::thread::spawn(move || {
        w.write_all(&sent).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    });
    let back = read_all(&mut c);
    writer.join().unwrap();
    assert_eq!(back.len(), data.len());
    assert!(back == data, "the echo differs from what was sent");

    assert!(
        p.near.wait_for(GUARD, |l| l
            .iter()
            .any(|l| l.contains(" closed: from app "))),
        "near proxy did not report the connection:\n{}",
        p.near.text()
    );
    let line = &closed_lines(&p.near)[0];
    let sent_app = field(line, "from app ");
    let pings: usize = (0..20).map(|i| format!("ping {i}\n").len()).sum();
    assert_eq!(sent_app, (data.len() + pings) as u64, "{line}");
    assert!(
        field(line, "→ link ") < sent_app * 3 / 4,
        "the repeated half should cross as fingerprints: {line}"
    );
}

/// Downloads through the near proxy's `port`, checks the bytes against `want`, and
/// waits for the far proxy to report its `round`-th closed connection.
fn fetch(p: &Pair, port: usize, round: usize, want: &[u8]) {
    let mut c = client(p.near.ports[port]);
    let got = read_all(&mut c);
    assert!(
        got == want,
        "fetch {round}: {} bytes, not the {} expected",
        got.len(),
        want.len()
    );
    drop(c);
    assert!(
        p.far
            .wait_for(GUARD, |_| closed_lines(&p.far).len() >= round),
        "far proxy did not report fetch {round}:\n{}",
        p.far.text()
    );
}

#[test]
fn a_repeated_download_crosses_as_fingerprints() {
    let blob = Arc::new(random(4 << 20, 77));
    let server = blob_server(blob.clone());
    let dir = tempfile::tempdir().unwrap();
    let ports = [
        "--listen",
        "127.0.0.1:0",
        "--listen",
        "127.0.0.1:0=static:4k",
    ];
    let p = pair(dir.path(), server, &ports);
    fetch(&p, 0, 1, &blob);
    fetch(&p, 0, 2, &blob);
    let lines = closed_lines(&p.far);
    let first = field(&lines[0], "→ link ");
    let second = field(&lines[1], "→ link ");
    for l in &lines {
        assert_eq!(field(l, "from app "), blob.len() as u64, "{l}");
        assert!(l.contains("cdc:64:256:2k"), "{l}");
    }
    eprintln!(
        "4 MiB of random bytes across the link: first fetch {first} B, second {second} B \
         ({:.1}x less)",
        first as f64 / second as f64
    );
    assert!(
        first >= blob.len() as u64,
        "random bytes cannot shrink: {first}"
    );
    assert!(
        second * 10 < first,
        "{second} B is not far fewer than {first} B"
    );
    // The second connection starts from the stream model the first one left: its
    // segments follow the first fetch's order and go as one-byte predictions.
    let segments = field(&lines[1], "B; ");
    let predicted = field(&lines[1], "resent on request, ");
    assert!(
        predicted * 10 >= segments * 9,
        "{predicted} of {segments} segments predicted: {}",
        lines[1]
    );

    // The second port uses its own segmenter; the far side learns it from the hello.
    fetch(&p, 1, 3, &blob);
    let l = &closed_lines(&p.far)[2];
    assert!(l.contains("static:4k"), "{l}");

    // The caches outlive the processes: new proxies on the same caches send
    // fingerprints from the first fetch, and predict from the saved stream models.
    let Pair { far, near } = p;
    far.stop();
    near.stop();

    let p = pair(dir.path(), server, &ports);
    fetch(&p, 0, 1, &blob);
    let again = field(&closed_lines(&p.far)[0], "→ link ");
    let predicted = field(&closed_lines(&p.far)[0], "resent on request, ");
    eprintln!("after a restart of both proxies: {again} B, {predicted} segments predicted");
    assert!(predicted > 0, "the stream models were not kept on disk");
    assert!(
        again * 10 < first,
        "{again} B after a restart, {first} B the first time"
    );
}

#[test]
fn an_edited_download_crosses_as_deltas_on_a_later_connection() {
    let v1 = random(2 << 20, 78);
    let mut v2 = v1.clone();
    for i in (1_000..v2.len()).step_by(3_000) {
        v2[i] ^= 0x33;
    }
    let server = blobs_server(vec![Arc::new(v1.clone()), Arc::new(v2.clone())]);
    let dir = tempfile::tempdir().unwrap();
    let p = pair(dir.path(), server, &[]);
    fetch(&p, 0, 1, &v1);
    fetch(&p, 0, 2, &v2);
    let lines = closed_lines(&p.far);
    let second = field(&lines[1], "→ link ");
    let deltas = field(&lines[1], "as fingerprints, ");
    eprintln!("2 MiB with a byte changed every 3,000: {second} B across, {deltas} deltas");
    // Every 256-2048-byte segment of the second fetch differs from the first's, so
    // without deltas from the first connection's index it would cost the whole 2 MiB.
    assert!(deltas > 100, "{}", lines[1]);
    assert!(second < (2 << 20) / 5, "{second} B");
}

#[test]
fn a_wrong_secret_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let forward = format!("127.0.0.1:{}", echo_server());
    let far = Proxy::start(
        "proxy",
        &["--serve", "127.0.0.1:0", "--forward", &forward],
        &[("VARGR_PROXY_SECRET", &"11".repeat(32))],
        &dir.path().join("far-cache"),
        1,
    );
    let peer = format!("127.0.0.1:{}", far.ports[0]);
    let near = Proxy::start(
        "proxy",
        &["--listen", "127.0.0.1:0", "--peer", &peer],
        &[("VARGR_PROXY_SECRET", &"22".repeat(32))],
        &dir.path().join("near-cache"),
        1,
    );
    let mut c = client(near.ports[0]);
    let _ = c.write_all(b"hello");
    let mut buf = [0u8; 16];
    match c.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() != ErrorKind::WouldBlock && e.kind() != ErrorKind::TimedOut => {}
        other => panic!("expected the connection to be closed, got {other:?}"),
    }
    assert!(
        near.wait_for(GUARD, |l| l.iter().any(|l| l.contains("wrong secret"))),
        "near proxy:\n{}",
        near.text()
    );
    assert!(
        far.wait_for(GUARD, |l| l.iter().any(|l| l.contains("refused"))),
        "far proxy:\n{}",
        far.text()
    );

    // Without any secret, the proxy says how to give one.
    let r = common::run_cli(
        &["proxy", "--listen", "127.0.0.1:0", "--peer", &peer],
        GUARD,
    );
    assert!(!r.status.success());
    assert!(r.stderr.contains("VARGR_PROXY_SECRET"), "{}", r.stderr);
}

#[test]
fn a_dead_far_proxy_ends_the_client_connection() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = pair(dir.path(), echo_server(), &[]);
    let mut c = client(p.near.ports[0]);
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(b"are you there?").unwrap();
    let mut back = [0u8; 14];
    c.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"are you there?");

    let _ = p.far.child.kill();
    let _ = p.far.child.wait();
    let t0 = Instant::now();
    let mut buf = [0u8; 16];
    match c.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() != ErrorKind::WouldBlock && e.kind() != ErrorKind::TimedOut => {}
        other => panic!(
            "the client should see the end of the connection, got {other:?} after {:?}",
            t0.elapsed()
        ),
    }
    assert!(
        p.near
            .wait_for(GUARD, |l| l.iter().any(|l| l.contains("failed"))),
        "near proxy:\n{}",
        p.near.text()
    );

    // A new connection while the far proxy is down is closed at once, with the reason
    // in the near proxy's log.
    let mut c = client(p.near.ports[0]);
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    match c.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() != ErrorKind::WouldBlock && e.kind() != ErrorKind::TimedOut => {}
        other => panic!("expected the connection to be closed, got {other:?}"),
    }
    assert!(
        p.near.wait_for(GUARD, |l| l
            .iter()
            .any(|l| l.contains("connecting to the far proxy"))),
        "near proxy:\n{}",
        p.near.text()
    );
}

#[test]
fn a_client_that_reads_late_does_not_stop_its_upload() {
    // The server reads the upload while it writes the download; the client reads the
    // download only once its upload is done. Over plain TCP this works as long as one
    // direction may stall while the other runs; through the proxies too.
    const N: usize = 12 << 20;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = l.local_addr().unwrap().port();
    let upload_ok = Arc::new(Mutex::new(None));
    let seen = upload_ok.clone();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = w.write_all(&random(N, 5));
            let _ = w.shutdown(Shutdown::Write);
        });
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        *seen.lock().unwrap() = Some(got == random(N, 6));
    });
    let dir = tempfile::tempdir().unwrap();
    let p = pair(dir.path(), server, &[]);
    let mut c = client(p.near.ports[0]);
    c.write_all(&random(N, 6))
        .unwrap_or_else(|e| panic!("the upload stalled: {e}\n{}", p.near.text()));
    c.shutdown(Shutdown::Write).unwrap();
    let down = read_all(&mut c);
    assert!(
        down == random(N, 5),
        "the download differs ({} bytes)",
        down.len()
    );
    let deadline = Instant::now() + GUARD;
    while upload_ok.lock().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(*upload_ok.lock().unwrap(), Some(true), "the upload differs");
}
