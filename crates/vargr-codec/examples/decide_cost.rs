//! Measures what `Engine::decide` costs per message once warmed up, with the default
//! default settings (periodic samples included, amortised), with rarer samples, and
//! with none. Run it in release mode:
//!
//! ```text
//! cargo run --release -p vargr-codec --example decide_cost
//! ```

use std::hint::black_box;
use std::time::Instant;

use vargr_codec::{testdata, ElemKind, Engine, EngineConfig, LinkKey, LinkModel};

fn main() {
    for sample_every in [32, 128, 0] {
        println!("sample_every = {sample_every}");
        run(EngineConfig {
            sample_every,
            ..EngineConfig::default()
        });
    }
}

fn run(config: EngineConfig) {
    let mut engine = Engine::new(config).expect("config is valid");
    let link = LinkKey(1);
    engine.set_link_model(link, LinkModel::new(200e-6, 12.5e6));
    let cases = [
        (
            "random bytes, raw",
            ElemKind::BYTES,
            testdata::random_bytes(64 * 1024, 1),
        ),
        (
            "smooth f64, compressed",
            ElemKind::F64,
            testdata::f64_bytes(&testdata::smooth_field_f64(8192, 0.0, 2)),
        ),
    ];
    for (name, elem, data) in &cases {
        for _ in 0..100 {
            engine.decide(link, *elem, data);
        }
        let n = 200_000u32;
        let start = Instant::now();
        for _ in 0..n {
            black_box(engine.decide(link, *elem, black_box(data)));
        }
        let per = start.elapsed().as_secs_f64() / f64::from(n);
        println!("{name:<24} {:>8.1} ns per decision", per * 1e9);
    }
}
