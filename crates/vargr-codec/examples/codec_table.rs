//! Prints ratio and speed of every codec on the standard data sets: the table
//! `vargr bench codec` will show. Run it in release mode:
//!
//! ```text
//! cargo run --release -p vargr-codec --example codec_table [BYTES]
//! ```

use vargr_codec::{format_table, measure_all, testdata};

fn main() {
    let bytes = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1 << 20);
    for set in testdata::standard_sets(bytes) {
        println!("## {} ({}, {} bytes)", set.name, set.elem, set.bytes.len());
        print!("{}", format_table(&measure_all(&set.bytes, set.elem)));
        println!();
    }
}
