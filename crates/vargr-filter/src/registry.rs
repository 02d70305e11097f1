//! Filter names to factories: built-ins, filters registered from Rust, plugin filters.
//!
//! A spec is `name` or `name:params` (`"histogram:0,100,10"`); the runtime calls
//! [`Registry::create`] once per stream per node, so every instance owns its state.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::builtins::{Avg, Concat, Identity, Op, Reduce, Spin};
use crate::equivalence::Equivalence;
use crate::histogram::Histogram;
use crate::timealign::TimeAlign;
use crate::{plugin, FilterError, TransformFilter};

/// Builds a filter instance from the params part of a spec (`""` when none).
pub type Factory = Box<dyn Fn(&str) -> Result<Box<dyn TransformFilter>, FilterError> + Send + Sync>;

/// Name -> factory. `Registry::default()` is empty; [`Registry::with_builtins`] has the
/// built-in filters.
#[derive(Default)]
pub struct Registry {
    factories: BTreeMap<String, Factory>,
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
    /// per input packet, for benchmarks).
    pub fn with_builtins() -> Registry {
        let mut r = Registry::default();
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

    /// Loads a plugin (see `include/vargr_filter.h`) and registers its filters; returns
    /// their names. Loading the same file again returns the same names. A name already
    /// registered from elsewhere is refused, so a plugin cannot silently replace `sum`.
    pub fn load_plugin(&mut self, path: &Path) -> Result<Vec<String>, FilterError> {
        let canonical = path.canonicalize().map_err(|e| FilterError::Plugin {
            path: path.to_path_buf(),
            reason: format!("cannot open: {e}"),
        })?;
        if let Some((_, names)) = self.plugins.iter().find(|(p, _)| *p == canonical) {
            return Ok(names.clone());
        }
        let entries = plugin::load(&canonical)?;
        if let Some(e) = entries
            .iter()
            .find(|e| self.factories.contains_key(&e.name))
        {
            return Err(FilterError::Plugin {
                path: path.to_path_buf(),
                reason: format!("filter name {:?} is already registered", e.name),
            });
        }
        let names: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
        for entry in entries {
            let name = entry.name.clone();
            self.register(
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
