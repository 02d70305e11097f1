//! The filters that run at every node of a vargr tree.
//!
//! MRNet splits what happens to upstream packets at a node in two: a *synchronization*
//! filter decides which packets belong together (a "wave"), and a *transformation* filter
//! turns each wave into output packets. vargr keeps that split:
//!
//! - [`SyncFilter`] is a sans-IO state machine: the runtime pushes packets with the
//!   current [`Instant`](std::time::Instant), asks [`SyncFilter::poll_timeout`] when to
//!   wake it, and gets waves back. When a wave leaves is decided by a [`SyncPolicy`]:
//!   MRNet's three ([`SyncMode`]: wait-for-all, time-out, don't-wait) or a user's, from
//!   Rust or a C plugin, made by a [`Registry`] from a spec such as `"timeout:250ms"`.
//! - [`TransformFilter`] is a trait whose implementors own their state (no `void**`, no
//!   static storage), created per stream per node by a [`Registry`] from a spec such as
//!   `"histogram:0,100,10"`.
//!
//! Built-in transformations: `sum`, `min`, `max`, `avg`, `concat`, `null`/`identity`,
//! `equivalence`, `histogram:lo,hi,bins` and `timealign:secs`. Their arithmetic is written
//! once, generically over every numeric element type (see `arith`), not as a type switch
//! per filter. Filters whose result cannot be rebuilt from partial results of the same
//! format (`avg`, `equivalence`, `histogram`) send a self-describing *partial* form up
//! the tree, tagged by a leading `%s` marker, and produce the readable result only where
//! [`FilterContext::is_root`] is set; each module documents its scheme.
//!
//! Filters of both kinds can also be loaded at run time from shared objects through a
//! small versioned C ABI (`include/vargr_filter.h`, [`Registry::load_plugin`]); a safe
//! wrapper checks the version, the symbols and everything the plugin hands back.
//!
//! A filter that panics must not take the tree down: [`apply_guarded`] turns a panic into
//! [`FilterError::Panicked`].

mod arith;
mod builtins;
pub mod equivalence;
mod error;
mod histogram;
mod plugin;
mod registry;
mod sync;
mod timealign;

use std::panic::{catch_unwind, AssertUnwindSafe};

pub use error::FilterError;
/// The C ABI version this build speaks (`VARGR_FILTER_ABI_VERSION` in `vargr_filter.h`).
pub use plugin::ABI_VERSION as PLUGIN_ABI_VERSION;
/// The sync-filter C ABI version (`VARGR_SYNC_ABI_VERSION` in `vargr_filter.h`).
pub use plugin::SYNC_PLUGIN_ABI_VERSION;
pub use registry::{Factory, Registry, SyncFactory};
pub use sync::{SyncDecision, SyncEvent, SyncFilter, SyncMode, SyncPolicy, SyncView};
pub use vargr_wire::Packet;

/// Where a filter instance runs: passed to every [`TransformFilter::apply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterContext {
    /// Rank of the node running the filter (unique in the tree).
    pub node_id: u32,
    pub stream: u32,
    /// True at the front-end: the last application of the filter on this stream.
    pub is_root: bool,
    /// Children feeding this node on this stream (live ones).
    pub num_inputs: usize,
}

/// A transformation filter: one instance per stream per node, owning its state.
pub trait TransformFilter: Send {
    /// One wave: the packets released together by the synchronization filter (one per
    /// child usually). Returns output packets (usually one).
    fn apply(&mut self, ctx: &FilterContext, wave: Vec<Packet>)
        -> Result<Vec<Packet>, FilterError>;

    /// Called once when the stream closes: emits whatever the filter still holds (e.g.
    /// the last partial interval of `timealign`). Most filters hold nothing.
    fn flush(&mut self, ctx: &FilterContext) -> Result<Vec<Packet>, FilterError> {
        let _ = ctx;
        Ok(Vec::new())
    }

    /// Name used in error messages.
    fn name(&self) -> &str {
        "filter"
    }
}

/// Runs a filter, turning a panic inside it into [`FilterError::Panicked`] so the tree
/// lives on. The instance may be left half-updated: the runtime should drop it (and
/// report the stream as failed) rather than feed it more waves.
pub fn apply_guarded(
    f: &mut dyn TransformFilter,
    ctx: &FilterContext,
    wave: Vec<Packet>,
) -> Result<Vec<Packet>, FilterError> {
    let name = f.name().to_string();
    match catch_unwind(AssertUnwindSafe(|| f.apply(ctx, wave))) {
        Ok(result) => result,
        Err(payload) => {
            let message = if let Some(s) = payload.downcast_ref::<&str>() {
                (*s).to_string()
            } else if let Some(s) = payload.downcast_ref::<String>() {
                s.clone()
            } else {
                "non-string panic payload".to_string()
            };
            Err(FilterError::Panicked {
                filter: name,
                message,
            })
        }
    }
}
