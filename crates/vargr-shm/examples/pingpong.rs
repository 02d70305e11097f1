//! One-way latency and bandwidth between two processes through vargr-shm.
//!
//! `cargo run --release -p vargr-shm --example pingpong [ROUNDS]`: the process starts a
//! copy of itself, then for each size bounces a message back and forth ROUNDS times
//! (one-way latency = half the round trip) and streams 1 MiB messages one way
//! (bandwidth). Waiting blocks on the bell after `YIELDS` yields, as the mesh does.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use vargr_shm::{Endpoint, Layout, MsgHead, PeerFiles};

const YIELDS: u32 = 32;
const SIZES: [usize; 5] = [8, 1024, 65536, 1 << 20, 4 << 20];

fn endpoint(dir: &Path, me: usize) -> Endpoint {
    let files = |i: usize| PeerFiles::beside(&dir.join(format!("p{i}")));
    let mut ep = Endpoint::create(me, Layout::new(2, 1 << 20).unwrap(), files(me), 1 << 30)
        .expect("creating the endpoint");
    ep.locate(1 - me, files(1 - me));
    ep
}

thread_local! {
    /// Messages that arrived while a send was pushing.
    static ARRIVED: std::cell::RefCell<std::collections::VecDeque<Bytes>> = Default::default();
}

fn keep(_: usize, _: MsgHead, b: Bytes) {
    ARRIVED.with(|a| a.borrow_mut().push_back(b));
}

/// Waits for the next message, yielding a little, then blocking on the bell.
fn recv(ep: &mut Endpoint) -> Bytes {
    loop {
        ep.progress(keep).unwrap();
        if let Some(b) = ARRIVED.with(|a| a.borrow_mut().pop_front()) {
            return b;
        }
        let w = ep.watch();
        for _ in 0..YIELDS {
            if w.news() {
                break;
            }
            std::thread::yield_now();
        }
        if !w.news() && ep.prepare_sleep().unwrap() {
            ep.bell().wait(Duration::from_secs(1));
            ep.woke();
        }
    }
}

/// Sends and pushes until all of it is in the peer's ring.
fn send(ep: &mut Endpoint, data: Bytes) {
    let h = MsgHead {
        dest: 0,
        src: 0,
        tag: 0,
    };
    ep.send(1 - ep.slot(), h, data).unwrap();
    while ep.backlog() {
        if !ep.progress(keep).unwrap() && ep.prepare_sleep().unwrap() {
            ep.bell().wait(Duration::from_secs(1));
            ep.woke();
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        let dir = Path::new(&args[2]);
        let mut ep = endpoint(dir, 1);
        std::fs::write(dir.join("ready"), b"").unwrap();
        loop {
            let b = recv(&mut ep);
            if b.is_empty() {
                return;
            }
            if b.len() == 1 {
                // Stream mode: count messages until an empty one, then acknowledge.
                let n = u64::from(b[0]);
                for _ in 0..n {
                    recv(&mut ep);
                }
                send(&mut ep, Bytes::from_static(b"k"));
                continue;
            }
            send(&mut ep, b);
        }
    }
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .arg("child")
        .arg(dir.path())
        .spawn()
        .unwrap();
    let mut ep = endpoint(dir.path(), 0);
    while !dir.path().join("ready").exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    println!(
        "cores {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    for &size in &SIZES {
        let size = size.max(2);
        let msg = Bytes::from(vec![7u8; size]);
        let n = if size >= 1 << 20 { rounds / 20 } else { rounds }.max(10);
        for _ in 0..n / 10 {
            send(&mut ep, msg.clone());
            recv(&mut ep);
        }
        let t = Instant::now();
        for _ in 0..n {
            send(&mut ep, msg.clone());
            recv(&mut ep);
        }
        let one_way = t.elapsed().as_secs_f64() / n as f64 / 2.0;
        println!(
            "size {size:>8} B: one-way latency {:>9.2} µs ({:.0} MB/s)",
            one_way * 1e6,
            size as f64 / one_way / 1e6
        );
    }
    // Streaming: 200 messages of 1 MiB one way, then an acknowledgement.
    let msg = Bytes::from(vec![3u8; 1 << 20]);
    let n = 200u8;
    let t = Instant::now();
    send(&mut ep, Bytes::from(vec![n]));
    for _ in 0..n {
        send(&mut ep, msg.clone());
    }
    recv(&mut ep);
    let s = t.elapsed().as_secs_f64();
    println!(
        "stream of {n} x 1 MiB: {:.0} MB/s",
        f64::from(n) * (1 << 20) as f64 / s / 1e6
    );
    send(&mut ep, Bytes::new());
    child.wait().unwrap();
}
