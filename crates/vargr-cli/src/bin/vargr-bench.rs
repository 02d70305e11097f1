//! `vargr-bench`: vargr's benchmarks and the ranks its tests start (crate vargr-bench).

#[path = "../closed_stdout.rs"]
mod closed_stdout;

use anyhow::Context;
use clap::Parser;

fn main() {
    closed_stdout::end_quietly();
    let cli = vargr_bench::Cli::parse();
    // Its ranks report (the monitor's lines, warnings) as the vargr command's do.
    let var = |name| std::env::var(name).ok();
    if let Err(e) =
        vargr_log::LogSettings::from_user(var("VARGR_LOG"), var("RUST_LOG"), 0).install()
    {
        eprintln!("vargr-bench: {e}");
        std::process::exit(2);
    }
    match vargr_config::from_process() {
        Ok(config) => config.apply_to_process(),
        Err(e) => {
            eprintln!("vargr-bench: error: {e}");
            std::process::exit(2);
        }
    }
    let r = std::env::current_exe()
        .context("locating the vargr-bench binary")
        .and_then(|me| {
            let programs = vargr_bench::Programs::new(me.with_file_name("vargr"), me);
            vargr_bench::run(cli, &programs)
        });
    if let Err(e) = r {
        eprintln!("vargr-bench: error: {e:#}");
        std::process::exit(1);
    }
}
