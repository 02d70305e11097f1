//! `vargr`: the command-line face of the libraries. It parses, calls, and prints.

mod bench_cmd;
mod closed_stdout;
mod codec_cmd;
mod config_cmd;
mod dedup_cmd;
mod demo;
mod emu_cmd;
mod mpi_run_cmd;
mod paths_cmd;
mod proxy_cmd;
mod roles;
mod run_cmd;
mod sync_cmd;
mod top_cmd;
mod topo_cmd;
mod trace_cmd;
mod vnc_cmd;

use std::path::PathBuf;

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "vargr",
    version,
    about = "A communication layer for parallel and distributed programs on slow networks"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Show more of what vargr does on stderr: -v info, -vv debug, -vvv everything.
    /// VARGR_LOG (or RUST_LOG) filters finer: `VARGR_LOG=vargr_tbon=debug`.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Show only errors (and no progress bars).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// A configuration file to use instead of ~/.config/vargr/config.toml.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a local tree and tour multicast, reduction, equivalence classes and BE→BE messages.
    Demo(demo::DemoArgs),
    /// Generate, check and draw topologies.
    #[command(subcommand)]
    Topo(topo_cmd::TopoCmd),
    /// Benchmarks (JSON under bench/results/): runs the vargr-bench program beside vargr.
    Bench(bench_cmd::BenchArgs),
    /// Start the ranks of a parallel job (locally, or on the hosts of a hostfile).
    Run(run_cmd::RunArgs),
    /// Run an unmodified MPI program under libvargr_mpi.so: `vargr mpi-run --trace DIR --
    /// mpirun -n 4 ./app` writes each rank's MPI calls into DIR.
    MpiRun(mpi_run_cmd::MpiRunArgs),
    /// WAN emulator: relay TCP connections with a configured latency and bandwidth.
    Emu(emu_cmd::EmuArgs),
    /// Codecs: ratio and speed on a file, and what pays on a given link.
    #[command(subcommand)]
    Codec(codec_cmd::CodecCmd),
    /// Timelines and reports from the trace files of `vargr run --trace DIR`.
    #[command(subcommand)]
    Trace(trace_cmd::TraceCmd),
    /// Redundancy elimination: the two-level fingerprint model, and the segment caches.
    #[command(subcommand)]
    Dedup(dedup_cmd::DedupCmd),
    /// Copy a file or a tree, sending only what the receiver's segment cache lacks
    /// (PATH, HOST:PATH over ssh, or vargr://HOST:PORT/PATH to a `--serve` daemon).
    Sync(sync_cmd::SyncArgs),
    /// WAN accelerator for any TCP stream, in pairs: `--listen ADDR --peer FAR` near the
    /// clients, `--serve ADDR --forward SERVER` near the server; repeats cross as fingerprints.
    Proxy(proxy_cmd::ProxyArgs),
    /// Varg: a VNC proxy pair for slow links, `--listen ADDR --peer FAR` near the viewers,
    /// `--serve ADDR --forward VNCSERVER` near the server; screen regions seen before cross
    /// as fingerprints.
    Vnc(vnc_cmd::VncArgs),
    /// Path specifications (PATHS): `vargr paths show FILE` checks one and draws the tree
    /// its paths merge into.
    #[command(subcommand)]
    Paths(paths_cmd::PathsCmd),
    /// vargr's settings: `vargr config show` prints the effective ones and their sources.
    #[command(subcommand)]
    Config(config_cmd::ConfigCmd),
    /// Live view of a monitored run (`vargr run --monitor`): collectives, rates,
    /// latencies, who arrives last, records lost, clock error per process.
    Top(top_cmd::TopArgs),
    /// Internal node of a tree (started by vargr itself).
    #[command(hide = true)]
    Commnode,
    /// Built-in back-end programs used by the demo, the benchmarks and tests.
    #[command(hide = true)]
    Backend {
        /// echo | demo | load | fail-after:N | slow:RANK:MICROSECONDS
        role: String,
    },
}

fn main() {
    closed_stdout::end_quietly();
    let matches = Cli::command()
        .after_long_help(config_cmd::env_help())
        .get_matches_from(run_cmd::mpirun_spelling(std::env::args_os()));
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let verbosity = if cli.quiet {
        -1
    } else {
        i8::try_from(cli.verbose).unwrap_or(i8::MAX)
    };
    // The settings, checked before any command runs.
    let config = match config_cmd::load(cli.config.as_deref()) {
        Ok((config, _)) => config,
        Err(e) => {
            eprintln!("vargr: error: {e:#}");
            std::process::exit(2);
        }
    };
    config.apply_to_process();
    let log = config
        .log_filter
        .clone()
        .or_else(|| std::env::var("RUST_LOG").ok());
    if let Err(e) = vargr_log::LogSettings::from_user(log, None, verbosity).install() {
        eprintln!("vargr: {e}");
        std::process::exit(2);
    }
    let r: Result<()> = match cli.cmd {
        Cmd::Demo(a) => demo::run(a, cli.config.as_deref()),
        Cmd::Config(c) => config_cmd::run(c, cli.config.as_deref()),
        Cmd::Topo(t) => topo_cmd::run(t),
        Cmd::Paths(p) => paths_cmd::run(p, &config),
        Cmd::Bench(a) => bench_cmd::run(a),
        Cmd::Emu(a) => emu_cmd::run(a),
        Cmd::Trace(t) => trace_cmd::run(t),
        Cmd::Codec(c) => codec_cmd::run(c),
        Cmd::Top(a) => top_cmd::run(a),
        Cmd::Sync(a) => sync_cmd::run(a, cli.quiet, &config),
        Cmd::Proxy(a) => proxy_cmd::run(a, &config),
        Cmd::Vnc(a) => vnc_cmd::run(a, &config),
        Cmd::Dedup(c) => dedup_cmd::run(c, &config),
        Cmd::Run(a) => run_cmd::run(a, cli.config.as_deref()),
        Cmd::MpiRun(a) => mpi_run_cmd::run(a, cli.config.as_deref()),
        Cmd::Commnode => roles::commnode(),
        Cmd::Backend { role } => roles::backend(&role),
    };
    if let Err(e) = r {
        eprintln!("vargr: error: {e:#}");
        // `vargr run` ends with the exit status of the rank that failed first.
        let code = e.downcast_ref::<run_cmd::JobFailed>().map_or(1, |f| f.code);
        std::process::exit(code);
    }
}
