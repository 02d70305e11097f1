//! Throughput of each segmenter with optimistic fingerprinting, as a sender runs them:
//! cut a 64 MiB message, then XXH3 every segment. Run with
//! `cargo run --release -p vargr-dedup --example segment_speed [MiB]`.

use std::time::Instant;

use vargr_dedup::segment::by_name;
use vargr_dedup::{Fingerprint, Shape};

fn random(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(n);
    out
}

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64);
    let data = random(mib << 20, 1);
    // A 4-byte-per-pixel image of the same size, as square as it gets.
    let side = ((data.len() / 4) as f64).sqrt() as usize;
    let image = Shape::Grid {
        dims: vec![data.len() / 4 / side, side],
        elem_size: 4,
    };
    let image_len = data.len() / 4 / side * side * 4;
    let cases: &[(&str, bool)] = &[
        ("cdc", false),
        ("cdc:256", false),
        ("cdc:16:64:256", false),
        ("static:4k", false),
        ("static:64", false),
        ("sw", false),
        ("tiles", true),
        ("tiles:4x4", true),
        ("varg", true),
        ("varg:width=4,every=8,min=4", true),
        ("varg:motion=off", true),
        ("ndarray", true),
    ];
    println!(
        "{:<28} {:>10} {:>10} {:>10}",
        "segmenter", "segments", "mean B", "MB/s"
    );
    for &(spec, grid) in cases {
        let s = by_name(spec).expect("valid spec");
        let (bytes, shape) = if grid {
            (&data[..image_len], image.clone())
        } else {
            (&data[..], Shape::Bytes)
        };
        let mut best = f64::INFINITY;
        let mut count = 0;
        let mut check = 0u64;
        for _ in 0..3 {
            let t = Instant::now();
            let cut = s.cut(bytes, &shape).expect("cut");
            for seg in &cut.segments {
                check ^= Fingerprint::full(seg).0;
            }
            best = best.min(t.elapsed().as_secs_f64());
            count = cut.segments.len();
        }
        std::hint::black_box(check);
        println!(
            "{:<28} {:>10} {:>10} {:>10.0}",
            spec,
            count,
            bytes.len() / count.max(1),
            bytes.len() as f64 / best / 1e6
        );
    }
}
