//! Allreduce latency on the in-process transport: ranks as threads of one process.
//!
//! `cargo run --release -p vargr-coll --example inproc_allreduce [iters]` prints the
//! median and 90th-percentile latency for 4/16/64 ranks × 8 B / 64 KiB / 1 MiB, per
//! algorithm ("auto" is the built-in selection table's choice).

use vargr_coll::{bench_allreduce, Algorithm};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iters: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(200);
    let algs: [Option<Algorithm>; 6] = [
        None,
        Some(Algorithm::Shm),
        Some(Algorithm::RecursiveDoubling),
        Some(Algorithm::Ring),
        Some(Algorithm::Rabenseifner),
        Some(Algorithm::ReduceBcast),
    ];
    println!(
        "{:>5} {:>8} {:>20} {:>12} {:>12}",
        "ranks", "bytes", "algorithm", "median_us", "p90_us"
    );
    for ranks in [4, 16, 64] {
        for bytes in [8, 64 << 10, 1 << 20] {
            // Large messages at many ranks are slow; fewer iterations keep the run short.
            let it = if bytes >= 1 << 20 {
                iters / 10
            } else if bytes > 8 {
                iters / 4
            } else {
                iters
            }
            .max(5);
            for a in algs {
                let (med, p90) = bench_allreduce(ranks, bytes, it, a)?;
                let name = a.map_or_else(|| "auto".to_string(), |a| a.to_string());
                println!("{ranks:>5} {bytes:>8} {name:>20} {med:>12.1} {p90:>12.1}");
            }
        }
    }
    Ok(())
}
