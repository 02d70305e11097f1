//! `vargr paths`: path specifications (seed 001's PATHS), checked and drawn.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use vargr_paths::PathSpec;

#[derive(Subcommand)]
pub enum PathsCmd {
    /// Check a path specification and draw the tree its paths merge into: the element
    /// at the root, each link's stages after the node that sends on it.
    Show {
        /// The file (default: the `paths.spec` setting, VARGR_PATHS).
        file: Option<PathBuf>,
        /// The tree as JSON.
        #[arg(long, conflicts_with = "dot")]
        json: bool,
        /// The tree as Graphviz DOT.
        #[arg(long)]
        dot: bool,
        /// Also print the tree topology it runs as (MRNet form) and each link's stages.
        #[arg(long, conflicts_with_all = ["json", "dot"])]
        topology: bool,
    },
}

pub fn run(cmd: PathsCmd, config: &vargr_config::Config) -> Result<()> {
    let PathsCmd::Show {
        file,
        json,
        dot,
        topology,
    } = cmd;
    let spec = match (&file, &config.paths) {
        (Some(f), _) => PathSpec::load(f)?,
        (None, Some(s)) => s.clone(),
        (None, None) => bail!("no file given and no paths.spec set (VARGR_PATHS)"),
    };
    // Stages a Rust program registers are not known here: named, not refused.
    let elsewhere = spec.check_stages(true)?;
    let tree = spec.merge()?;
    let built = tree.build()?;
    let out = if json {
        tree.to_json() + "\n"
    } else if dot {
        tree.to_dot()
    } else {
        let mut s = tree.draw();
        if topology {
            s.push('\n');
            s.push_str(&built.topology.to_mrnet());
            for (id, stages) in built.links.iter().filter(|(_, s)| !s.is_empty()) {
                let node = built.topology.node(*id).context("a link's node")?;
                s.push_str(&format!(
                    "link {} -> parent: {}\n",
                    node.name(),
                    stages.join(" | ")
                ));
            }
        }
        s
    };
    print!("{out}");
    if !elsewhere.is_empty() {
        eprintln!(
            "vargr: note: stages no plugin lists, to be registered by the program that runs these paths: {}",
            elsewhere.join(", ")
        );
    }
    Ok(())
}
