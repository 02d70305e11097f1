//! `vargr topo`: generate, check and draw topologies.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Subcommand;
use vargr_topo::{HostFile, HostPolicy, Topology};

#[derive(Subcommand)]
pub enum TopoCmd {
    /// Generate a topology: flat:N, kary:K@N, kary:K^D, 1x4x16, knomial:K@N, binomial@N.
    Gen {
        spec: String,
        /// Hostfile to place nodes on (one host per line, optional slots=N).
        #[arg(long)]
        hosts: Option<PathBuf>,
        /// How nodes are mapped to hosts: rr (round-robin) or slots (fill each host).
        #[arg(long, default_value = "rr")]
        policy: String,
        /// Output format: mrnet, toml or dot.
        #[arg(long, default_value = "mrnet")]
        format: String,
    },
    /// Validate a topology file (MRNet or TOML) and summarise it.
    Check {
        file: PathBuf,
        /// Also check that every host is listed in this hostfile.
        #[arg(long)]
        hosts: Option<PathBuf>,
    },
    /// Draw a topology in the terminal (or as Graphviz DOT with --dot).
    Show {
        file: PathBuf,
        #[arg(long)]
        dot: bool,
    },
}

pub fn run(cmd: TopoCmd) -> Result<()> {
    match cmd {
        TopoCmd::Gen {
            spec,
            hosts,
            policy,
            format,
        } => {
            let mut t = Topology::generate(&spec)?;
            if let Some(h) = hosts {
                let hf = HostFile::load(&h)?;
                let policy = match policy.as_str() {
                    "rr" | "round-robin" => HostPolicy::RoundRobin,
                    "slots" | "by-slots" => HostPolicy::BySlots,
                    other => bail!("unknown --policy {other:?} (expected rr or slots)"),
                };
                t.assign_hosts(&hf, policy)?;
            }
            let out = match format.as_str() {
                "mrnet" => t.to_mrnet(),
                "toml" => t.to_toml(),
                "dot" => t.to_dot(),
                other => bail!("unknown --format {other:?} (expected mrnet, toml or dot)"),
            };
            print!("{out}");
            Ok(())
        }
        TopoCmd::Check { file, hosts } => {
            let t = Topology::load(&file)?;
            if let Some(h) = hosts {
                t.check_hosts(&HostFile::load(&h)?)?;
            }
            println!(
                "{}: ok: {} nodes, {} back-ends, {} internal, depth {}, max fan-out {}",
                file.display(),
                t.len(),
                t.num_backends(),
                t.internal().len(),
                t.depth(),
                t.max_fanout()
            );
            Ok(())
        }
        TopoCmd::Show { file, dot } => {
            let t = Topology::load(&file)?;
            print!("{}", if dot { t.to_dot() } else { t.draw() });
            Ok(())
        }
    }
}
