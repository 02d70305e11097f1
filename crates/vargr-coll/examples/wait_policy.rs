//! Sweeps the in-process transport's wait policy (spins, yields before parking) for
//! small allreduces, to pick `WaitPolicy::default()` from data.
//!
//! `cargo run --release -p vargr-coll --example wait_policy [iters]`

use vargr_coll::{bench_allreduce_with, Algorithm, WaitPolicy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iters: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(300);
    let policies = [(0, 0), (0, 8), (0, 64), (0, 256), (32, 64), (100, 16)];
    let algs = [
        Algorithm::Shm,
        Algorithm::RecursiveDoubling,
        Algorithm::ReduceBcast,
    ];
    let only: Option<usize> = std::env::args().nth(2).map(|s| s.parse()).transpose()?;
    println!(
        "{:>5} {:>20} {:>12} {:>10} {:>10}",
        "ranks", "algorithm", "spins/yields", "median_us", "p90_us"
    );
    for ranks in [4, 16, 64]
        .into_iter()
        .filter(|r| only.is_none_or(|o| o == *r))
    {
        for a in algs {
            for (spins, yields) in policies {
                let policy = WaitPolicy {
                    spins,
                    yields,
                    timeout: None,
                };
                let (med, p90) = bench_allreduce_with(ranks, 8, iters, Some(a), policy)?;
                println!(
                    "{ranks:>5} {a:>20} {:>12} {med:>10.1} {p90:>10.1}",
                    format!("{spins}/{yields}")
                );
            }
        }
    }
    Ok(())
}
