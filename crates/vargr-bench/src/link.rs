//! `vargr bench link`: what protecting one frame costs, sealing on one side and opening
//! on the other, for each protection and frame size, in this process (no sockets), so
//! that the figure is the cryptography and its bookkeeping alone. The end-to-end cost
//! on trees and syncs is measured by `scripts/bench-link-security.sh` against a build
//! without protection.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use bytes::{Bytes, BytesMut};
use clap::Args;
use serde::Serialize;
use vargr_net::seal::{bench_pair, Protection};
use vargr_wire::{encode_frame, Frame, FrameKind};

#[derive(Args, Clone)]
pub struct LinkBenchArgs {
    /// Write the records as JSON here (default bench/results/link-seal.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Repetitions of each measurement; the median is reported.
    #[arg(long, default_value_t = 5)]
    reps: usize,
}

#[derive(Serialize)]
struct Record {
    protection: &'static str,
    payload_bytes: usize,
    /// Median over the repetitions of the mean time per frame.
    seal_ns: f64,
    open_ns: f64,
    frames: usize,
}

const SIZES: [usize; 5] = [16, 64, 1024, 4096, 65536];

pub fn run(a: LinkBenchArgs) -> Result<()> {
    let mut records = Vec::new();
    println!("protection  payload B   seal ns/frame   open ns/frame    seal+open MB/s");
    for p in [Protection::Mac, Protection::Encrypt] {
        for size in SIZES {
            let frames = if size >= 4096 { 4_000 } else { 100_000 };
            let mut seal = Vec::new();
            let mut open = Vec::new();
            for _ in 0..a.reps.max(1) {
                let (s, o) = one(p, size, frames);
                seal.push(s);
                open.push(o);
            }
            let (s, o) = (median(&mut seal), median(&mut open));
            println!(
                "{:10} {:10} {:15.0} {:15.0} {:17.0}",
                p.name(),
                size,
                s,
                o,
                (size + 16) as f64 / (s + o) * 1e3
            );
            records.push(Record {
                protection: p.name(),
                payload_bytes: size,
                seal_ns: s,
                open_ns: o,
                frames,
            });
        }
    }
    crate::tree::write_records(a.json.as_deref(), "link-seal.json", &records)
}

/// Mean ns per frame to seal `frames` frames of `size` bytes, and to open them.
fn one(p: Protection, size: usize, frames: usize) -> (f64, f64) {
    let (mut sealer, mut opener) = bench_pair(p);
    let mut wire = BytesMut::new();
    encode_frame(
        &Frame::new(FrameKind::Data, 1, 2, vec![7u8; size]),
        &mut wire,
    );
    let wire = wire.freeze();
    // Sealed output is kept as the link keeps it: the pieces, not a copy.
    let mut out: Vec<Bytes> = Vec::with_capacity(frames * 3);
    let t = Instant::now();
    for _ in 0..frames {
        sealer.seal(wire.clone(), &mut |b| out.push(b));
    }
    let seal = t.elapsed().as_nanos() as f64 / frames as f64;
    let mut buf = BytesMut::with_capacity(out.iter().map(Bytes::len).sum());
    for b in &out {
        buf.extend_from_slice(b);
    }
    let t = Instant::now();
    let mut opened = 0;
    while let Ok(Some(_)) = opener.open(&mut buf, 1 << 20) {
        opened += 1;
    }
    let open = t.elapsed().as_nanos() as f64 / frames as f64;
    assert_eq!(opened, frames, "every sealed frame opens");
    (seal, open)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
