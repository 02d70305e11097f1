//! `vargr bench …`: the benchmarks live in their own program, `vargr-bench`, installed
//! beside `vargr`; this command hands its arguments to it.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;

#[derive(Args)]
#[command(disable_help_flag = true)]
pub struct BenchArgs {
    /// The benchmark and its arguments (`vargr bench --help` lists them).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

/// Replaces this process with `vargr-bench ARGS` (same pid, so a signal to `vargr bench`
/// reaches the benchmark and the processes it started), named `vargr bench` so that its
/// help and usage read as the command the user typed.
pub fn run(a: BenchArgs) -> Result<()> {
    let me = std::env::current_exe().context("locating the vargr binary")?;
    let bench = me.with_file_name("vargr-bench");
    if !bench.is_file() {
        bail!(
            "{} not found: `vargr bench` runs the vargr-bench program installed beside vargr \
             (cargo build -p vargr-cli builds both)",
            bench.display()
        );
    }
    let err = Command::new(&bench)
        .arg0("vargr bench")
        .args(&a.args)
        .exec();
    Err(err).with_context(|| format!("starting {}", bench.display()))
}
