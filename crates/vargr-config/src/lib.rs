//! vargr's one configuration model.
//!
//! A setting's value comes from, in rising precedence: its default, a TOML file
//! (`~/.config/vargr/config.toml`, or the file given with `--config`), the environment,
//! and the command line. [`Layers`] collects the text of each from each source;
//! [`Config::resolve`] parses and checks all of it in one place, into the typed values
//! the libraries take, and an error names the source (file and key, variable or flag)
//! and the value. Libraries never read files or the environment for their settings: the
//! front ends (the CLI and the bindings) resolve a [`Config`] and pass its values down.
//!
//! Every setting is listed once, in [`KEYS`], with its file key, its environment variable
//! and its help; `vargr config show` prints the effective configuration from it, with
//! where each value came from.

mod keys;
pub mod mpi_env;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use keys::{by_name, Key, KEYS};
use vargr_codec::stage::CodecMode;
use vargr_codec::EngineConfig;
use vargr_coll::monitor::MonitorConfig;
use vargr_coll::{Job, JoinOptions, SchedPolicy, Selector};
use vargr_emu::WanMap;

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    File(PathBuf),
    Env(&'static str),
    /// A command-line flag, as the user typed its name.
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Env(v) => write!(f, "environment {v}"),
            Source::Flag(n) => write!(f, "flag {n}"),
        }
    }
}

/// A configuration that cannot be used, naming where the bad part came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("{path}: unknown setting {key:?} (`vargr config show` lists them all)")]
    UnknownKey { path: PathBuf, key: String },
    #[error("collective algorithm selection: {0}")]
    Selection(String),
    #[error("{key} = {value:?} (from {origin}): {reason}")]
    Value {
        key: &'static str,
        value: String,
        origin: Source,
        reason: String,
    },
}

/// The text of every setting that something set, and what set it.
#[derive(Debug, Clone, Default)]
pub struct Layers {
    values: BTreeMap<&'static str, (String, Source)>,
}

impl Layers {
    /// Only the defaults.
    pub fn new() -> Layers {
        Layers::default()
    }

    /// The file of settings of the user who has these directories: the value of
    /// `XDG_CONFIG_HOME` if set, else `HOME/.config`; then `vargr/config.toml`.
    pub fn user_file(xdg_config_home: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
        let base = match xdg_config_home.filter(|p| p.is_absolute()) {
            Some(x) => x.to_path_buf(),
            None => home?.join(".config"),
        };
        Some(base.join("vargr").join("config.toml"))
    }

    /// Adds the settings of a TOML file, over those before it. A file that does not
    /// exist adds nothing when `optional` (the user's default file).
    pub fn file(&mut self, path: &Path, optional: bool) -> Result<&mut Self, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if optional && e.kind() == std::io::ErrorKind::NotFound => return Ok(self),
            Err(e) => {
                return Err(ConfigError::File {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                })
            }
        };
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::File {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        for (section, body) in &table {
            let toml::Value::Table(body) = body else {
                return Err(ConfigError::UnknownKey {
                    path: path.to_path_buf(),
                    key: section.clone(),
                });
            };
            for (name, value) in body {
                let dotted = format!("{section}.{name}");
                let key = by_name(&dotted).ok_or_else(|| ConfigError::UnknownKey {
                    path: path.to_path_buf(),
                    key: dotted.clone(),
                })?;
                let text = match value {
                    toml::Value::String(s) => s.clone(),
                    toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
                        value.to_string()
                    }
                    _ => {
                        return Err(ConfigError::Value {
                            key: key.name,
                            value: value.to_string(),
                            origin: Source::File(path.to_path_buf()),
                            reason: "expected a string, a number or true/false".into(),
                        })
                    }
                };
                self.values
                    .insert(key.name, (text, Source::File(path.to_path_buf())));
            }
        }
        Ok(self)
    }

    /// Adds every setting's environment variable that `get` finds set, over the file.
    pub fn env(&mut self, get: impl Fn(&str) -> Option<String>) -> &mut Self {
        for k in KEYS {
            if let Some(v) = get(k.env) {
                self.values.insert(k.name, (v, Source::Env(k.env)));
            }
        }
        self
    }

    /// Sets `key` from the command-line flag `flag`, over everything else.
    ///
    /// # Panics
    /// If `key` is not in [`KEYS`]: a flag wired to a setting that does not exist is a
    /// bug of the CLI, not of its user.
    pub fn flag(&mut self, key: &str, flag: &str, value: impl Into<String>) -> &mut Self {
        let key = by_name(key).unwrap_or_else(|| panic!("flag {flag} sets unknown key {key}"));
        self.values
            .insert(key.name, (value.into(), Source::Flag(flag.to_string())));
        self
    }

    /// The text and source of a setting, the default if nothing set it.
    fn get(&self, key: &'static str) -> Option<(String, Source)> {
        if let Some((v, s)) = self.values.get(key) {
            return Some((v.clone(), s.clone()));
        }
        let k = by_name(key).expect("the configuration only asks for its own keys");
        k.default.map(|d| (d.to_string(), Source::Default))
    }
}

/// Every setting, typed and checked.
#[derive(Debug, Clone)]
pub struct Config {
    pub codec: CodecMode,
    pub codec_engine: EngineConfig,
    pub codec_samples: Option<PathBuf>,
    pub dedup: Option<String>,
    pub wan: WanMap,
    /// The pointer file of the emulated WAN's shared bottlenecks (`vargr run` sets it).
    pub gateways: Option<PathBuf>,
    pub site: Option<String>,
    pub sched: SchedPolicy,
    pub selector: Selector,
    pub trace_dir: Option<PathBuf>,
    pub trace_enabled: bool,
    pub trace_ring: usize,
    pub clock_sync: bool,
    /// Shared memory between the processes of a job on one host.
    pub shm: bool,
    /// `None` when no monitor runs.
    pub monitor: Option<MonitorConfig>,
    pub commnode: Option<PathBuf>,
    /// The ssh command of `vargr sync HOST:PATH`.
    pub ssh: String,
    pub cache_dir: Option<PathBuf>,
    pub log_filter: Option<String>,
    /// The path specification `paths.spec` names, checked and parsed.
    pub paths: Option<vargr_paths::PathSpec>,
    /// The text of every setting that has one, and where it came from.
    effective: Vec<(&'static Key, String, Source)>,
}

impl Config {
    /// Parses and checks every setting of `layers`.
    pub fn resolve(layers: &Layers) -> Result<Config, ConfigError> {
        let r = Resolver { layers };
        if let Some(kinds) = r.text("monitor.kinds") {
            if let Some(bad) = kinds
                .split(',')
                .map(str::trim)
                .find(|k| !matches!(*k, "load-balance" | "stats" | "distributed"))
            {
                return Err(r.bad(
                    "monitor.kinds",
                    format!("unknown monitor {bad:?} (load-balance, stats, distributed)"),
                ));
            }
        }
        let monitor = match r.text("monitor.kinds") {
            None => None,
            Some(kinds) => Some(MonitorConfig {
                period: Duration::from_millis(r.parse("monitor.period_ms")?.unwrap_or(200)),
                stats: has(&kinds, "stats"),
                distributed: has(&kinds, "distributed"),
                coschedule: r.flag("monitor.coschedule")?,
                collectors: r
                    .text("monitor.scope")
                    .unwrap_or_default()
                    .split(',')
                    .map(|p| p.trim().to_string())
                    .filter(|p| !p.is_empty())
                    .collect(),
                status_file: r.text("monitor.status").map(PathBuf::from),
                fanout: match r.parse::<usize>("monitor.fanout")? {
                    Some(0) => return Err(r.bad("monitor.fanout", "a fan-out of 0".to_string())),
                    Some(k) => k,
                    None => vargr_coll::gather::DEFAULT_FANOUT,
                },
                pull_budget: r
                    .parse("monitor.budget_ms")?
                    .map_or(vargr_coll::gather::DEFAULT_BUDGET, Duration::from_millis),
            }),
        };
        let codec_engine = match r.text("links.codec_engine") {
            None => EngineConfig::default(),
            Some(path) => EngineConfig::from_toml_file(Path::new(&path))
                .map_err(|e| r.bad("links.codec_engine", e))?,
        };
        let config = Config {
            codec: r
                .parse_with("links.codec", |t| t.parse::<CodecMode>())?
                .unwrap_or(CodecMode::Adaptive),
            codec_engine,
            codec_samples: r.text("links.codec_samples").map(PathBuf::from),
            dedup: r.text("links.dedup").filter(|d| d != "off"),
            wan: r
                .parse_with("links.wan", WanMap::parse_line)?
                .unwrap_or_default(),
            gateways: r
                .text("links.gateways")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            site: r.text("job.site").filter(|s| !s.is_empty()),
            sched: r
                .parse_with("job.sched", |t| t.parse::<SchedPolicy>())?
                .unwrap_or_default(),
            selector: Selector::from_vars(|var| {
                let key = KEYS.iter().find(|k| k.env == var)?;
                r.text(key.name)
            })
            .map_err(|e| ConfigError::Selection(e.to_string()))?,
            trace_dir: r.text("trace.dir").map(PathBuf::from),
            trace_enabled: r.flag("trace.enabled")?,
            trace_ring: r.parse("trace.ring")?.unwrap_or(16384),
            clock_sync: r.flag("trace.clock_sync")?,
            shm: r.flag("job.shm")?,
            monitor,
            commnode: r.text("tree.commnode").map(PathBuf::from),
            ssh: r.text("sync.ssh").unwrap_or_else(|| "ssh".into()),
            cache_dir: r.text("cache.dir").map(PathBuf::from),
            log_filter: r.text("log.filter"),
            paths: match r.text("paths.spec") {
                None => None,
                Some(f) => Some(
                    vargr_paths::PathSpec::load(Path::new(&f))
                        .map_err(|e| r.bad("paths.spec", e))?,
                ),
            },
            effective: KEYS
                .iter()
                .filter_map(|k| layers.get(k.name).map(|(v, s)| (k, v, s)))
                .collect(),
        };
        // A dedup segmenter is checked by the link policy that will use it.
        vargr_links::LinkPolicy::new(vargr_links::LinkSettings {
            dedup: config.dedup.clone(),
            engine: config.codec_engine.clone(),
            ..vargr_links::LinkSettings::default()
        })
        .map_err(|e| r.bad("links.dedup", e))?;
        Ok(config)
    }

    /// The effective configuration as a table: every setting, its value (or `-` when
    /// unset) and where the value came from.
    pub fn show(&self) -> String {
        let width = KEYS.iter().map(|k| k.name.len()).max().unwrap_or(0);
        let mut out = String::new();
        for k in KEYS {
            let (value, source) = match self.effective.iter().find(|(e, ..)| e.name == k.name) {
                Some((_, v, s)) => (format!("{v:?}"), s.to_string()),
                None => ("-".to_string(), "unset".to_string()),
            };
            out.push_str(&format!(
                "{:width$}  {value:<24}  {source}\n",
                k.name,
                width = width
            ));
        }
        out
    }

    /// Applies the settings that belong to the whole process (the collectors' switch and
    /// ring size): front ends call it once, before anything is traced.
    pub fn apply_to_process(&self) {
        vargr_trace::set_enabled(self.trace_enabled);
        vargr_trace::set_ring_capacity(self.trace_ring);
    }

    /// Fills what a tree's options leave to the configuration: the commnode program and
    /// the trace directory.
    pub fn tree_defaults(&self, opts: &mut vargr_tbon::NetworkOptions) {
        if opts.commnode_program.is_none() {
            opts.commnode_program = self.commnode.as_ref().map(|p| p.display().to_string());
        }
        if opts.trace_dir.is_none() {
            opts.trace_dir = self.trace_dir.clone();
        }
    }

    /// How a process of a job joins it with these settings. Opens the emulated WAN's
    /// shared bottlenecks when a WAN is emulated and the launcher made them; an error
    /// names the pointer file.
    pub fn join_options(&self) -> Result<JoinOptions, ConfigError> {
        let gateways = match &self.gateways {
            Some(p) if !self.wan.is_empty() => Some(std::sync::Arc::new(
                vargr_emu::Gateways::open_pointer(p).map_err(|e| {
                    let (value, origin) = self
                        .effective
                        .iter()
                        .find(|(k, ..)| k.name == "links.gateways")
                        .map(|(_, v, s)| (v.clone(), s.clone()))
                        .unwrap_or_else(|| (p.display().to_string(), Source::Default));
                    ConfigError::Value {
                        key: "links.gateways",
                        value,
                        origin,
                        reason: e.to_string(),
                    }
                })?,
            )),
            _ => None,
        };
        Ok(JoinOptions {
            wan: self.wan.clone(),
            gateways,
            selector: self.selector.clone(),
            sched: self.sched,
            codec: self.codec.clone(),
            codec_engine: self.codec_engine.clone(),
            codec_samples: self.codec_samples.clone(),
            dedup: self.dedup.clone(),
            site: self.site.clone(),
            trace_dir: self.trace_dir.clone(),
            monitor: self.monitor.clone(),
            clock_sync: self.clock_sync,
            shm: self.shm,
            ..JoinOptions::default()
        })
    }

    /// The settings something other than a default set, as the environment of a process
    /// that should see the same configuration (what `vargr run` hands its ranks).
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        self.effective
            .iter()
            .filter(|(_, _, s)| *s != Source::Default)
            .map(|(k, v, _)| (k.env, v.clone()))
            .collect()
    }
}

/// This process's layers under any flags: the defaults, `file` (which must exist) or
/// else the user's file (`~/.config/vargr/config.toml`, if there is one), then the
/// environment, which is how `vargr run`, `mpirun` and `srun` hand every rank the same
/// settings. Returns them with the files that were read.
pub fn process_layers(file: Option<&Path>) -> Result<(Layers, Vec<PathBuf>), ConfigError> {
    let mut layers = Layers::new();
    let mut read = Vec::new();
    let var = |name: &str| std::env::var_os(name).map(PathBuf::from);
    match file {
        Some(f) => {
            layers.file(f, false)?;
            read.push(f.to_path_buf());
        }
        None => {
            if let Some(f) =
                Layers::user_file(var("XDG_CONFIG_HOME").as_deref(), var("HOME").as_deref())
            {
                if f.exists() {
                    read.push(f.clone());
                }
                layers.file(&f, true)?;
            }
        }
    }
    layers.env(|name| std::env::var(name).ok());
    Ok((layers, read))
}

/// This process's configuration: [`process_layers`] without a file of its own, resolved.
pub fn from_process() -> Result<Config, ConfigError> {
    Config::resolve(&process_layers(None)?.0)
}

/// Joins the job this process was started in with the settings its launcher gave it:
/// what a rank written in Rust calls first.
pub fn join_job() -> Result<Job, JoinError> {
    let config = from_process()?;
    config.apply_to_process();
    Ok(Job::join_with(config.join_options()?)?)
}

/// Why a process could not join its job.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Job(#[from] vargr_coll::CollError),
}

/// Whether the comma-separated `list` holds `item`.
fn has(list: &str, item: &str) -> bool {
    list.split(',').any(|x| x.trim() == item)
}

/// Typed reads of one [`Layers`], with errors that name the source.
struct Resolver<'a> {
    layers: &'a Layers,
}

impl Resolver<'_> {
    fn text(&self, key: &'static str) -> Option<String> {
        self.layers.get(key).map(|(v, _)| v)
    }

    fn bad(&self, key: &'static str, reason: impl fmt::Display) -> ConfigError {
        let (value, origin) = self
            .layers
            .get(key)
            .unwrap_or_else(|| (String::new(), Source::Default));
        ConfigError::Value {
            key,
            value,
            origin,
            reason: reason.to_string(),
        }
    }

    fn parse_with<T, E: fmt::Display>(
        &self,
        key: &'static str,
        parse: impl Fn(&str) -> Result<T, E>,
    ) -> Result<Option<T>, ConfigError> {
        match self.text(key) {
            None => Ok(None),
            Some(t) => parse(t.trim()).map(Some).map_err(|e| self.bad(key, e)),
        }
    }

    /// A yes/no setting: `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off`, empty.
    fn flag(&self, key: &'static str) -> Result<bool, ConfigError> {
        let yes = self.parse_with(key, |t| match t.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" | "" => Ok(false),
            _ => Err("expected true or false (or 1, 0, yes, no, on, off)"),
        })?;
        Ok(yes.unwrap_or(false))
    }

    fn parse<T: std::str::FromStr>(&self, key: &'static str) -> Result<Option<T>, ConfigError>
    where
        T::Err: fmt::Display,
    {
        self.parse_with(key, |t| t.parse::<T>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn flags_beat_the_environment_which_beats_the_file_which_beats_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(
            &file,
            "[links]\ncodec = \"fixed:lz4\"\nwan = \"rtt=10ms\"\n[job]\nsched = \"serialize\"\n",
        )
        .unwrap();
        let mut layers = Layers::new();
        layers
            .file(&file, false)
            .unwrap()
            .env(env_of(&[
                ("VARGR_SCHED", "priority"),
                ("VARGR_CODEC", "off"),
            ]))
            .flag("links.codec", "--codec", "adaptive");
        let c = Config::resolve(&layers).unwrap();
        assert_eq!(c.codec, CodecMode::Adaptive);
        assert_eq!(c.sched, SchedPolicy::Priority);
        assert!(c.wan.between("a", "b").is_some());
        assert_eq!(c.trace_ring, 16384);
        let shown = c.show();
        let line = |key: &str| {
            shown
                .lines()
                .find(|l| l.starts_with(key))
                .unwrap()
                .to_string()
        };
        assert!(line("links.codec ").ends_with("flag --codec"), "{shown}");
        assert!(
            line("job.sched ").ends_with("environment VARGR_SCHED"),
            "{shown}"
        );
        assert!(line("links.wan ").ends_with("config.toml"), "{shown}");
        assert!(line("trace.ring ").ends_with("default"), "{shown}");
        assert!(line("trace.dir ").ends_with("unset"), "{shown}");
        // What a launcher hands on: what was set, not the defaults.
        let env = c.to_env();
        assert!(env.contains(&("VARGR_CODEC", "adaptive".to_string())));
        assert!(env.contains(&("VARGR_WAN", "rtt=10ms".to_string())));
        assert!(!env.iter().any(|(k, _)| *k == "VARGR_TRACE_RING"));
    }

    #[test]
    fn errors_name_the_file_the_key_and_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "[links]\ncodek = \"off\"\n").unwrap();
        let e = Layers::new().file(&file, false).unwrap_err().to_string();
        assert!(e.contains("c.toml") && e.contains("links.codek"), "{e}");

        std::fs::write(&file, "[job]\nsched = \"fastest\"\n").unwrap();
        let mut layers = Layers::new();
        layers.file(&file, false).unwrap();
        let e = Config::resolve(&layers).unwrap_err().to_string();
        assert!(
            e.contains("job.sched") && e.contains("fastest") && e.contains("c.toml"),
            "{e}"
        );

        let mut layers = Layers::new();
        layers.env(env_of(&[
            ("VARGR_MONITOR", "stats"),
            ("VARGR_MONITOR_PERIOD_MS", "soon"),
        ]));
        let e = Config::resolve(&layers).unwrap_err().to_string();
        assert!(
            e.contains("VARGR_MONITOR_PERIOD_MS") && e.contains("soon"),
            "{e}"
        );

        let mut layers = Layers::new();
        layers.flag("links.dedup", "--dedup", "cdc:nonsense");
        let e = Config::resolve(&layers).unwrap_err().to_string();
        assert!(
            e.contains("flag --dedup") && e.contains("cdc:nonsense"),
            "{e}"
        );

        std::fs::write(&file, "[links\n").unwrap();
        let e = Layers::new().file(&file, false).unwrap_err().to_string();
        assert!(e.contains("c.toml"), "{e}");
        // The user's default file may be absent; a named one may not.
        let absent = dir.path().join("absent.toml");
        assert!(Layers::new().file(&absent, true).is_ok());
        assert!(Layers::new().file(&absent, false).is_err());
    }

    #[test]
    fn a_path_specification_is_checked_when_the_configuration_is() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("paths.toml");
        std::fs::write(
            &file,
            "[element]\nname = \"E\"\nhost = \"fe\"\n[[path]]\nfrom = \"a:0-3\"\nstages = [\"remote:fe\", \"reduce:sum\"]\n",
        )
        .unwrap();
        let mut layers = Layers::new();
        layers.env(env_of(&[("VARGR_PATHS", file.to_str().unwrap())]));
        let spec = Config::resolve(&layers).unwrap().paths.unwrap();
        assert_eq!(spec.paths[0].sources.len(), 4);
        std::fs::write(&file, "[element]\nname = \"E\"\nhost = \"fe\"\n").unwrap();
        let e = Config::resolve(&layers).unwrap_err().to_string();
        assert!(
            e.contains("paths.spec") && e.contains("VARGR_PATHS") && e.contains("no [[path]]"),
            "{e}"
        );
    }

    #[test]
    fn the_user_file_follows_xdg() {
        let f = Layers::user_file(Some(Path::new("/x")), Some(Path::new("/home/u")));
        assert_eq!(f.unwrap(), Path::new("/x/vargr/config.toml"));
        let f = Layers::user_file(None, Some(Path::new("/home/u")));
        assert_eq!(f.unwrap(), Path::new("/home/u/.config/vargr/config.toml"));
        // A relative XDG_CONFIG_HOME is ignored, as the XDG spec says.
        let f = Layers::user_file(Some(Path::new("rel")), Some(Path::new("/home/u")));
        assert_eq!(f.unwrap(), Path::new("/home/u/.config/vargr/config.toml"));
        assert_eq!(Layers::user_file(None, None), None);
    }

    #[test]
    fn a_monitor_runs_only_when_asked_for() {
        let c = Config::resolve(&Layers::new()).unwrap();
        assert!(c.monitor.is_none());
        let mut layers = Layers::new();
        layers.env(env_of(&[("VARGR_MONITOR", "load-balance,stats")]));
        let m = Config::resolve(&layers).unwrap().monitor.unwrap();
        assert!(m.stats && !m.distributed && !m.coschedule);
        assert_eq!(m.collectors, vec!["ctx0/*".to_string()]);
        assert_eq!(m.period, Duration::from_millis(200));
    }
}
