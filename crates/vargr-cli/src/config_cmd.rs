//! `vargr config`: vargr's settings, their effective values and where each came from.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Subcommand;
use vargr_config::{Config, Layers, KEYS};

#[derive(Subcommand)]
pub enum ConfigCmd {
    /// Print every setting's effective value and its source: default, the
    /// configuration file, the environment or a flag.
    Show,
    /// List every setting: its key in the configuration file, its environment variable
    /// and what it does.
    Keys,
}

pub fn run(cmd: ConfigCmd, file: Option<&Path>) -> Result<()> {
    match cmd {
        ConfigCmd::Show => {
            let (config, files) = load(file)?;
            for f in files {
                println!("# file {}", f.display());
            }
            print!("{}", config.show());
        }
        ConfigCmd::Keys => {
            for k in KEYS {
                let default = k
                    .default
                    .map(|d| format!(" (default {d:?})"))
                    .unwrap_or_default();
                println!("{:<22} {:<26} {}{default}", k.name, k.env, k.help);
            }
        }
    }
    Ok(())
}

/// The configuration of this process: defaults, the user's file (or `file`, which
/// must exist), the environment. Returns it with the files that were read.
pub fn load(file: Option<&Path>) -> Result<(Config, Vec<PathBuf>)> {
    let (layers, read) = layers(file)?;
    Ok((Config::resolve(&layers)?, read))
}

/// The layers under a command's flags: defaults, the user's file (or `file`), the
/// environment; with the files that were read.
pub fn layers(file: Option<&Path>) -> Result<(Layers, Vec<PathBuf>)> {
    Ok(vargr_config::process_layers(file)?)
}

/// The environment variables of every setting, for `--help`.
pub fn env_help() -> String {
    let mut s = String::from("Settings (file ~/.config/vargr/config.toml or --config FILE, then these variables, then flags; `vargr config show`):\n");
    for k in KEYS {
        s.push_str(&format!("  {:<26} {}\n", k.env, k.help));
    }
    s
}
