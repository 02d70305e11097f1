//! Arbitrary bytes into both sides of the two-level fingerprint protocol: after a
//! valid hello at the receiver, and as replies at the sender. Nothing may panic, and
//! the receiver never delivers more than one largest segment per byte it was sent (a
//! fingerprint or a delta stands for a whole segment).

use vargr_dedup::cache::MemCache;
use vargr_dedup::{Config, FpBits, Receiver, Sender};

/// 12-bit fingerprints, so fuzzed fingerprints hit cached segments.
pub fn config() -> Config {
    Config {
        bits: FpBits::new(12).unwrap(),
        group: 4,
        max_segment: 1 << 12,
        max_pending: 1 << 20,
        ..Config::default()
    }
}

fn cache(config: &Config) -> MemCache {
    MemCache::new(config.bits, 1 << 20)
}

/// A segment long enough to be a delta base.
pub fn seed_segment() -> Vec<u8> {
    (0..600u32).map(|i| (i * 31 % 253) as u8).collect()
}

/// A sender that has sent two cached segments, and the hello plus first message it
/// sent (what the receiver is given before the fuzzed bytes).
pub fn seeded_sender() -> (Sender<MemCache>, Vec<u8>) {
    let config = config();
    let mut tx = Sender::new(config, cache(&config)).unwrap();
    tx.send_message(0, b"l", &[b"seed segment", &seed_segment()])
        .unwrap();
    tx.flush();
    let mut hello = Vec::new();
    tx.take_output(&mut hello);
    (tx, hello)
}

pub fn run(data: &[u8]) {
    let config = config();
    let (mut tx, hello) = seeded_sender();
    let mut rx = Receiver::new(config, cache(&config)).unwrap();
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
    assert!(delivered <= (hello.len() + data.len()) * config.max_segment);
    let _ = rx.finish();
    let _ = tx.handle_input(data);
}
