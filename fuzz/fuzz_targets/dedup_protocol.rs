//! Arbitrary bytes into both sides of the two-level fingerprint protocol: after a
//! valid hello at the receiver, and as replies at the sender. Nothing may panic, and
//! the receiver never delivers more than it was sent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vargr_dedup::cache::MemCache;
use vargr_dedup::{Config, FpBits, Receiver, Sender};

fuzz_target!(|data: &[u8]| {
    // 12-bit fingerprints, so fuzzed fingerprints hit cached segments.
    let config = Config {
        bits: FpBits::new(12).unwrap(),
        group: 4,
        max_pending: 1 << 20,
        ..Config::default()
    };
    let cache = || MemCache::new(config.bits, 1 << 20);
    let mut tx = Sender::new(config, cache()).unwrap();
    tx.send_message(0, b"l", &[b"seed segment", b"another"]).unwrap();
    tx.flush();
    let mut hello = Vec::new();
    tx.take_output(&mut hello);
    let mut rx = Receiver::new(config, cache()).unwrap();
    rx.handle_input(&hello).unwrap();
    // Split anywhere: pieces must not matter.
    let cut = data.first().map_or(0, |&b| usize::from(b)).min(data.len());
    if rx.handle_input(&data[..cut]).is_ok() {
        let _ = rx.handle_input(&data[cut..]);
    }
    let mut delivered = 0;
    while let Some(d) = rx.poll_delivered() {
        delivered += d.len();
    }
    assert!(delivered <= hello.len() + data.len());
    let _ = rx.finish();
    let _ = tx.handle_input(data);
});
