//! Path specifications: PATHS' (seed 001) declarative description of how the data of
//! each thread reaches an element, and where computations run on the way.
//!
//! A file describes one element (a name and the host that holds it) and the paths to
//! it, each from one or more back-ends (`host:rank`, `host:first-last`) through named
//! stages:
//!
//! ```toml
//! plugins = ["libstages.so"]     # C stage plugins (vargr_stage.h), relative to the file
//!
//! [element]
//! name = "PI-SUM1"
//! host = "p0"
//!
//! [[path]]                       # seed 001, figure 3
//! from = "n1:0-1"
//! stages = ["reduce:sum", "codec:fixed:lz4", "remote:p0", "reduce:sum"]
//!
//! [[path]]
//! from = "n2:0-1"
//! stages = ["reduce:sum", "remote:p0", "reduce:sum"]
//! ```
//!
//! Stages run where the path is: `remote:HOST` moves it to another host over a link;
//! `reduce:FILTER` reduces at the current host (a vargr filter spec: `sum`,
//! `histogram:0,10,5`, a plugin filter); the stages listed before a `remote` are that
//! link's stages (`codec:MODE`, `dedup:SEGMENTER`, `emu:PROFILE` and user stages by
//! name, see `vargr_stage::user`); `py:NAME` is a Python callable at an end of the path
//! (first, at the back-end, or after the last `remote`, at the element). The last host
//! must be the element's.
//!
//! [`PathSpec::parse`] checks the file (errors name the path, the stage and the line);
//! [`PathSpec::merge`] joins the paths that agree from the element outwards into one
//! [`PathTree`] (PATHS' `build_path` sharing the wrappers paths have in common); and
//! [`PathTree::build`] turns the tree into what vargr runs: a `vargr_topo::Topology`
//! (one process per host the tree passes, back-ends at the leaves, the front-end at the
//! element), the stages of each link (carried to every node in
//! `vargr_tbon::LinkStages::paths`) and a stream's filters (the reduction of each node,
//! `identity` where a node has none). This crate owns the file format; the
//! configuration model names the file (`paths.spec`), as it names the codec engine's.

mod build;
mod render;
mod spec;
mod tree;

pub use build::Built;
pub use spec::{Element, Path, PathSpec, Source, StageRef};
pub use tree::{NodeKind, PathTree, TreeNode};

/// A path specification that cannot be used, naming where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The file cannot be read, or is not TOML of this form.
    #[error("{file}{}: {reason}", at.map(|(l, c)| format!(":{l}:{c}")).unwrap_or_default())]
    File {
        file: String,
        at: Option<(usize, usize)>,
        reason: String,
    },
    /// One path is wrong, or one stage on it.
    #[error("{file}:{line}: path {path} (from {from:?}){}: {reason}", stage.as_ref().map(|s| format!(", stage {s:?}")).unwrap_or_default())]
    Path {
        file: String,
        line: usize,
        /// 1-based, in file order.
        path: usize,
        from: String,
        stage: Option<String>,
        reason: String,
    },
    /// The merged tree cannot run as a vargr tree.
    #[error("{file}: {reason}")]
    Tree { file: String, reason: String },
}
