//! How fast the segment caches insert and serve small segments.
//!
//! `cargo run --release -p vargr-dedup --example cache_speed [N]`: inserts N (default
//! one million) distinct 64-byte segments into a `DiskCache` in a temporary directory,
//! reads them back in insertion order and in random order, reopens the directory (sealed
//! containers from their sidecar indexes, the newest by reading it through), and does the same for a `MemCache`.

use std::time::Instant;

use vargr_dedup::cache::{DiskCache, DiskConfig, MemCache, SegmentCache};
use vargr_dedup::{Fingerprint, FpBits};

fn segment(i: u64) -> [u8; 64] {
    let mut s = [0u8; 64];
    for (j, w) in s.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ j as u64).to_le_bytes());
    }
    s
}

fn rate(n: usize, t: Instant) -> String {
    let s = t.elapsed().as_secs_f64();
    format!("{:>7.2} M/s ({:.3} s)", n as f64 / s / 1e6, s)
}

fn run(name: &str, c: &mut impl SegmentCache, fps: &[Fingerprint], order: &[usize]) {
    let bits = c.bits();
    let t = Instant::now();
    for (i, f) in fps.iter().enumerate() {
        c.insert(*f, &segment(i as u64)).unwrap();
    }
    c.flush().unwrap();
    println!("{name} insert:       {}", rate(fps.len(), t));
    for (label, idx) in [("get in order", None), ("get random  ", Some(order))] {
        let t = Instant::now();
        let mut bytes = 0usize;
        for k in 0..fps.len() {
            let i = idx.map_or(k, |o| o[k]);
            let s = c.get(fps[i].truncate(bits)).unwrap();
            bytes += s.map_or(0, |s| s.len());
        }
        println!("{name} {label}: {}  ({bytes} bytes)", rate(fps.len(), t));
    }
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("N: a number of segments"))
        .unwrap_or(1_000_000);
    let fps: Vec<_> = (0..n as u64)
        .map(|i| Fingerprint::full(&segment(i)))
        .collect();
    // A fixed permutation (xorshift Fisher-Yates) for the random-order reads.
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }

    let dir = tempfile::tempdir().unwrap();
    // The Bloom filter sized for what goes in, so its measured rate means something.
    let cfg = DiskConfig {
        bloom_entries: Some(n as u64),
        ..DiskConfig::default()
    };
    let mut c = DiskCache::open(dir.path(), cfg.clone()).unwrap();
    run("disk", &mut c, &fps, &order);
    let s = c.stats();
    println!(
        "disk: {} segments, {} containers, {} MB on disk, index {:.1} B/segment, \
         bloom {} MB, chunks loaded {}",
        s.segments,
        s.containers,
        s.disk_bytes >> 20,
        s.index_bytes as f64 / s.segments as f64,
        s.bloom.as_ref().unwrap().bytes >> 20,
        s.chunk_loads
    );
    let t = Instant::now();
    for i in 0..n as u64 {
        c.may_contain(Fingerprint(
            i.wrapping_mul(0xff51_afd7_ed55_8ccd) & cfg.bits.mask(),
        ));
    }
    let b = c.stats().bloom.unwrap();
    println!(
        "disk may_contain:   {}  false positives {:.3} % (model {:.3} %)",
        rate(n, t),
        b.measured_rate * 100.0,
        b.model_rate * 100.0
    );
    drop(c);
    let t = Instant::now();
    let mut c = DiskCache::open(dir.path(), cfg).unwrap();
    println!("disk reopen: {}", rate(n, t));
    let t = Instant::now();
    for &i in &order[..n / 10] {
        assert!(c.get(fps[i].truncate(c.bits())).unwrap().is_some());
    }
    println!("disk get after reopen (cold chunks): {}", rate(n / 10, t));

    let mut m = MemCache::new(FpBits::DEFAULT, 256 << 20);
    run("mem ", &mut m, &fps, &order);
}
