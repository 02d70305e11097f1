//! User stages: stages written by the user (in Rust, or in C through the plugin ABI of
//! `include/vargr_stage.h`), registered by name and inserted on a path by name.
//!
//! The table is process-wide, unlike the filter registry object, because the chains that
//! use its stages are built deep inside the runtime: in every tree node and for every
//! link of a job, from the names a path specification gives. A program registers its
//! Rust stages (or loads its plugins) once, before it starts a tree or joins a job; the
//! `vargr` processes of a tree load the plugins its path specification lists.
//!
//! Every stage made here is [`Guarded`]: a panic inside it is caught and reported as the
//! stage's failure, which closes the one link it runs on (naming the stage and the link)
//! and leaves the process running.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use bytes::Bytes;
use vargr_wire::Frame;

use crate::Stage;

/// Names a path uses for what vargr builds itself; user stages cannot take them.
pub const BUILT_IN_KINDS: &[&str] = &["reduce", "remote", "codec", "dedup", "emu", "py"];

/// Builds a stage from the params part of a spec (`""` when none).
pub type Factory = Arc<dyn Fn(&str) -> Result<Box<dyn Stage>, String> + Send + Sync>;

/// Why a user stage could not be registered, loaded or made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserStageError {
    #[error("stage name {name:?}: {reason}")]
    Name { name: String, reason: String },
    #[error("unknown stage {name:?}: register it (Rust) or load the plugin that lists it (C); registered: {known}")]
    Unknown { name: String, known: String },
    #[error("stage {stage} with params {params:?}: {reason}")]
    Create {
        stage: String,
        params: String,
        reason: String,
    },
    #[error("stage plugin {}: {reason}", path.display())]
    Plugin { path: PathBuf, reason: String },
}

#[derive(Clone)]
struct Entry {
    factory: Factory,
    /// The plugin that listed the stage (None: registered from Rust).
    plugin: Option<PathBuf>,
}

static TABLE: RwLock<BTreeMap<String, Entry>> = RwLock::new(BTreeMap::new());

fn table() -> std::sync::RwLockReadGuard<'static, BTreeMap<String, Entry>> {
    TABLE.read().unwrap_or_else(|e| e.into_inner())
}

/// Checks a user stage's name: 1-128 letters, digits, '_', '-', '.', and not a
/// built-in kind.
pub fn check_name(name: &str) -> Result<(), UserStageError> {
    let bad = |reason: &str| UserStageError::Name {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    if name.is_empty()
        || name.len() > 128
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    {
        return Err(bad("use 1-128 letters, digits, '_', '-', '.'"));
    }
    if BUILT_IN_KINDS.contains(&name) {
        return Err(bad("taken by a built-in stage"));
    }
    Ok(())
}

/// Registers a Rust stage under `name`, replacing an earlier Rust registration of the
/// same name (a plugin's name is refused).
pub fn register(
    name: &str,
    factory: impl Fn(&str) -> Result<Box<dyn Stage>, String> + Send + Sync + 'static,
) -> Result<(), UserStageError> {
    check_name(name)?;
    let mut t = TABLE.write().unwrap_or_else(|e| e.into_inner());
    if let Some(Entry {
        plugin: Some(p), ..
    }) = t.get(name)
    {
        return Err(UserStageError::Name {
            name: name.to_string(),
            reason: format!("already listed by plugin {}", p.display()),
        });
    }
    t.insert(
        name.to_string(),
        Entry {
            factory: Arc::new(factory),
            plugin: None,
        },
    );
    Ok(())
}

/// Loads a C stage plugin and registers every stage it lists; returns their names.
/// Loading the same file again is harmless; another file listing a name already
/// registered is refused.
pub fn load_plugin(path: &Path) -> Result<Vec<String>, UserStageError> {
    let canonical = path.canonicalize().map_err(|e| UserStageError::Plugin {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut t = TABLE.write().unwrap_or_else(|e| e.into_inner());
    let already: Vec<String> = t
        .iter()
        .filter(|(_, e)| e.plugin.as_deref() == Some(canonical.as_path()))
        .map(|(n, _)| n.clone())
        .collect();
    if !already.is_empty() {
        return Ok(already);
    }
    let stages = crate::plugin::load(&canonical)?;
    for (name, _) in &stages {
        if let Err(reason) = check_name(name) {
            return Err(UserStageError::Plugin {
                path: canonical.clone(),
                reason: reason.to_string(),
            });
        }
        if t.contains_key(name) {
            return Err(UserStageError::Plugin {
                path: canonical.clone(),
                reason: format!("stage {name:?} is already registered"),
            });
        }
    }
    let names = stages.iter().map(|(n, _)| n.clone()).collect();
    for (name, factory) in stages {
        t.insert(
            name,
            Entry {
                factory,
                plugin: Some(canonical.clone()),
            },
        );
    }
    Ok(names)
}

/// The names of every registered user stage.
pub fn registered() -> Vec<String> {
    table().keys().cloned().collect()
}

/// Whether a user stage of this name is registered.
pub fn is_registered(name: &str) -> bool {
    table().contains_key(name)
}

/// Splits a stage spec, `name` or `name:params`.
pub fn split_spec(spec: &str) -> (&str, &str) {
    spec.split_once(':').unwrap_or((spec, ""))
}

/// Makes the user stage `spec` names (`name` or `name:params`), guarded.
pub fn create(spec: &str) -> Result<Box<dyn Stage>, UserStageError> {
    let (name, params) = split_spec(spec);
    let factory = table()
        .get(name)
        .map(|e| e.factory.clone())
        .ok_or_else(|| {
            let known = registered();
            UserStageError::Unknown {
                name: name.to_string(),
                known: if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                },
            }
        })?;
    let made = catch_unwind(AssertUnwindSafe(|| factory(params)))
        .unwrap_or_else(|p| Err(format!("panicked: {}", panic_message(&p))));
    let inner = made.map_err(|reason| UserStageError::Create {
        stage: name.to_string(),
        params: params.to_string(),
        reason,
    })?;
    Ok(Box::new(Guarded::new(name, inner)))
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// A user stage behind a guard: panics become the stage's failure, and a stage that
/// panicked is not called again (its state may be half-changed), so its link closes.
pub struct Guarded {
    name: String,
    inner: Box<dyn Stage>,
    failure: Option<String>,
    broken: bool,
}

impl Guarded {
    pub fn new(name: &str, inner: Box<dyn Stage>) -> Guarded {
        Guarded {
            name: name.to_string(),
            inner,
            failure: None,
            broken: false,
        }
    }

    /// Runs `f` on the inner stage unless it broke before; a panic breaks it.
    fn call<T>(&mut self, f: impl FnOnce(&mut dyn Stage) -> T) -> Option<T> {
        if self.broken {
            return None;
        }
        match catch_unwind(AssertUnwindSafe(|| f(self.inner.as_mut()))) {
            Ok(v) => Some(v),
            Err(p) => {
                self.broken = true;
                self.failure = Some(format!("panicked: {}", panic_message(&p)));
                None
            }
        }
    }
}

impl Stage for Guarded {
    fn name(&self) -> &str {
        &self.name
    }

    fn outbound(&mut self, now: Instant, frame: Bytes, out: &mut Vec<Bytes>) {
        // Into a buffer of its own, so that a panic half-way emits nothing.
        if let Some(mut made) = self.call(|s| {
            let mut made = Vec::new();
            s.outbound(now, frame, &mut made);
            made
        }) {
            out.append(&mut made);
        }
    }

    fn inbound(&mut self, now: Instant, frame: Frame, out: &mut Vec<Frame>) -> Result<(), String> {
        let r = self.call(|s| {
            let mut made = Vec::new();
            s.inbound(now, frame, &mut made).map(|()| made)
        });
        match r {
            Some(Ok(mut made)) => {
                out.append(&mut made);
                Ok(())
            }
            Some(Err(e)) => Err(e),
            None => Err(self
                .failure
                .take()
                .unwrap_or_else(|| "failed before".into())),
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        if self.broken {
            return None;
        }
        // Not guarded: a `&self` query; a stage that panics here is a bug like any other.
        self.inner.next_deadline()
    }

    fn release(&mut self, now: Instant, out: &mut Vec<Bytes>) {
        if let Some(mut made) = self.call(|s| {
            let mut made = Vec::new();
            s.release(now, &mut made);
            made
        }) {
            out.append(&mut made);
        }
    }

    fn held_bytes(&self) -> usize {
        if self.broken {
            0
        } else {
            self.inner.held_bytes()
        }
    }

    fn take_failure(&mut self) -> Option<String> {
        self.failure
            .take()
            .or_else(|| self.call(|s| s.take_failure()).flatten())
    }
}
