//! Filter names to factories: built-ins, filters registered from Rust, plugin filters,
//! for both kinds of filter (transformation and synchronization, two name spaces).
//!
//! A spec is `name` or `name:params` (`"histogram:0,100,10"`, `"timeout:250ms"`); the
//! runtime calls [`Registry::create`] or [`Registry::create_sync`] once per stream per
//! node, so every instance owns its state.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::builtins::{Avg, Concat, Identity, Op, Reduce, Spin};
use crate::equivalence::Equivalence;
use crate::histogram::Histogram;
use crate::timealign::TimeAlign;
use crate::{plugin, FilterError, SyncMode, SyncPolicy, TransformFilter};

/// Builds a filter instance from the params part of a spec (`""` when none).
pub type Factory = Box<dyn Fn(&str) -> Result<Box<dyn TransformFilter>, FilterError> + Send + Sync>;

/// Builds a synchronization policy from the params part of a spec (`""` when none).
pub type SyncFactory = Box<dyn Fn(&str) -> Result<Box<dyn SyncPolicy>, FilterError> + Send + Sync>;

/// Name -> factory. `Registry::default()` is empty; [`Registry::with_builtins`] has the
/// built-in filters.
#[derive(Default)]
pub struct Registry {
    factories: BTreeMap<String, Factory>,
    sync_factories: BTreeMap<String, SyncFactory>,
    /// Canonical plugin paths loaded, with the names each registered.
    plugins: Vec<(PathBuf, Vec<String>)>,
}

/// A factory for a filter that takes no parameters.
fn plain(name: &'static str, make: fn() -> Box<dyn TransformFilter>) -> Factory {
    Box::new(move |params: &str| {
        if params.trim().is_empty() {
            Ok(make())
        } else {
            Err(FilterError::params(
                name,
                params,
                format!("{name} takes no parameters"),
            ))
        }
    })
}

impl Registry {
    /// `sum`, `min`, `max`, `avg`, `concat`, `null`, `identity`, `equivalence`,
    /// `histogram:lo,hi,bins`, `timealign:secs`, and `spin:US` (a sum costing US µs of CPU
    /// per input packet, for benchmarks); and the sync filters of [`SyncMode`] (`all`,
    /// `timeout:250ms`, `dontwait` and their other spellings).
    pub fn with_builtins() -> Registry {
        let mut r = Registry::default();
        for name in [
            "all",
            "wait-for-all",
            "waitforall",
            "timeout",
            "dontwait",
            "dont-wait",
            "none",
        ] {
            r.register_sync(
                name,
                Box::new(move |p: &str| {
                    let spec = if p.is_empty() {
                        name.to_string()
                    } else {
                        format!("{name}:{p}")
                    };
                    Ok(spec.parse::<SyncMode>()?.policy())
                }),
            );
        }
        r.register("sum", plain("sum", || Box::new(Reduce(Op::Sum))));
        r.register("min", plain("min", || Box::new(Reduce(Op::Min))));
        r.register("max", plain("max", || Box::new(Reduce(Op::Max))));
        r.register("avg", plain("avg", || Box::new(Avg)));
        r.register("concat", plain("concat", || Box::new(Concat)));
        r.register("null", plain("null", || Box::new(Identity)));
        r.register("identity", plain("identity", || Box::new(Identity)));
        r.register(
            "equivalence",
            plain("equivalence", || Box::new(Equivalence)),
        );
        r.register(
            "histogram",
            Box::new(
                |p: &str| Ok(Box::new(Histogram::from_params(p)?) as Box<dyn TransformFilter>),
            ),
        );
        r.register(
            "timealign",
            Box::new(
                |p: &str| Ok(Box::new(TimeAlign::from_params(p)?) as Box<dyn TransformFilter>),
            ),
        );
        r.register(
            "spin",
            Box::new(|p: &str| Ok(Box::new(Spin::from_params(p)?) as Box<dyn TransformFilter>)),
        );
        r
    }

    /// Registers (or replaces) a filter.
    pub fn register(&mut self, name: &str, factory: Factory) {
        self.factories.insert(name.to_string(), factory);
    }

    /// Builds an instance from `"name"` or `"name:params"`.
    pub fn create(&self, spec: &str) -> Result<Box<dyn TransformFilter>, FilterError> {
        let spec = spec.trim();
        let (name, params) = spec.split_once(':').unwrap_or((spec, ""));
        match self.factories.get(name) {
            Some(f) => f(params),
            None => Err(FilterError::UnknownFilter {
                name: name.to_string(),
                known: self.names().join(", "),
            }),
        }
    }

    /// Registers (or replaces) a sync filter.
    pub fn register_sync(&mut self, name: &str, factory: SyncFactory) {
        self.sync_factories.insert(name.to_string(), factory);
    }

    /// Builds a synchronization policy from `"name"` or `"name:params"`. Built-in names
    /// are matched without regard to case (`ALL`, `TimeOut:5s`).
    pub fn create_sync(&self, spec: &str) -> Result<Box<dyn SyncPolicy>, FilterError> {
        let spec = spec.trim();
        let (name, params) = spec.split_once(':').unwrap_or((spec, ""));
        let factory = self
            .sync_factories
            .get(name)
            .or_else(|| self.sync_factories.get(&name.to_ascii_lowercase()));
        match factory {
            Some(f) => f(params.trim()),
            None => Err(FilterError::UnknownSyncFilter {
                name: name.to_string(),
                known: self.sync_names().join(", "),
            }),
        }
    }

    /// Registered sync filter names, sorted.
    pub fn sync_names(&self) -> Vec<String> {
        self.sync_factories.keys().cloned().collect()
    }

    /// Loads a plugin (see `include/vargr_filter.h`) and registers its filters, of both
    /// kinds; returns their names (transformation filters first). Loading the same file
    /// again returns the same names. A name already registered from elsewhere is refused,
    /// so a plugin cannot silently replace `sum` or `all`.
    pub fn load_plugin(&mut self, path: &Path) -> Result<Vec<String>, FilterError> {
        let canonical = path.canonicalize().map_err(|e| FilterError::Plugin {
            path: path.to_path_buf(),
            reason: format!("cannot open: {e}"),
        })?;
        if let Some((_, names)) = self.plugins.iter().find(|(p, _)| *p == canonical) {
            return Ok(names.clone());
        }
        let loaded = plugin::load(&canonical)?;
        let clash = (loaded.transforms.iter().map(|e| &e.name))
            .find(|n| self.factories.contains_key(*n))
            .or_else(|| {
                (loaded.syncs.iter().map(|e| &e.name)).find(|n| {
                    self.sync_factories.contains_key(*n)
                        || self.sync_factories.contains_key(&n.to_ascii_lowercase())
                })
            });
        if let Some(name) = clash {
            return Err(FilterError::Plugin {
                path: path.to_path_buf(),
                reason: format!("filter name {name:?} is already registered"),
            });
        }
        let names: Vec<String> = (loaded.transforms.iter().map(|e| e.name.clone()))
            .chain(loaded.syncs.iter().map(|e| e.name.clone()))
            .collect();
        for entry in loaded.transforms {
            let name = entry.name.clone();
            self.register(
                &name,
                Box::new(move |params: &str| entry.instantiate(params)),
            );
        }
        for entry in loaded.syncs {
            let name = entry.name.clone();
            self.register_sync(
                &name,
                Box::new(move |params: &str| entry.instantiate(params)),
            );
        }
        self.plugins.push((canonical, names.clone()));
        Ok(names)
    }

    /// Registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.factories.keys().cloned().collect()
    }
}
