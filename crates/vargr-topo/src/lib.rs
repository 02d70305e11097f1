//! vargr-topo: the shape of a vargr tree, and where its processes run.
//!
//! An MRNet-style tool is a tree: a front-end at the root, internal
//! "commnodes" that filter and forward, and back-ends at the leaves. This
//! crate describes that tree and nothing else — pure code, no sockets, no
//! processes; the only I/O is the [`Topology::load`] / [`HostFile::load`]
//! convenience. Every input is resolved into one checked structure,
//! [`Topology`], whose [`Node`]s have breadth-first global ids and
//! depth-first back-end ranks:
//!
//! * spec strings (`flat:N`, `kary:K@N`, `kary:K^D`, `1x4x16`,
//!   `knomial:K@N`, `binomial@N`) resolved by builders, as flux-core does
//!   with its topology URIs — [`Topology::generate`], [`Spec`], module
//!   [`spec`];
//! * MRNet topology files (`host:rank => host:rank … ;`) read by a
//!   hand-written parser that reports file, line and column —
//!   [`Topology::parse_mrnet`], module [`mrnet`];
//! * a TOML form for hand-written configurations — [`Topology::parse_toml`],
//!   module [`toml_fmt`];
//! * hostfiles (Open MPI / MPICH style) and mapping policies —
//!   [`HostFile`], [`HostPolicy`], [`Topology::assign_hosts`], module
//!   [`hostfile`].
//!
//! Out come the queries the runtime needs (back-ends, sub-trees to hand to a
//! child when launching it, back-ends under a node) and renderings:
//! [`Topology::to_mrnet`], [`Topology::to_toml`], [`Topology::to_dot`],
//! [`Topology::draw`]. All errors are one enum, [`TopoError`], carrying
//! where the problem is.
//!
//! ```
//! use vargr_topo::Topology;
//! let t = Topology::generate("kary:2^2").unwrap();
//! assert_eq!((t.len(), t.num_backends(), t.depth()), (7, 4, 2));
//! let again = Topology::parse_mrnet(&t.to_mrnet(), "t.top").unwrap();
//! assert_eq!(t, again);
//! ```

use std::path::Path;

pub mod error;
pub mod hostfile;
pub mod mrnet;
mod numbering;
pub mod render;
pub mod spec;
mod statements;
pub mod toml_fmt;
pub mod tree;

pub use error::{LineCol, Location, TopoError, SPEC_FORMS};
pub use hostfile::{HostEntry, HostFile, HostPolicy};
pub use numbering::GENERATED_HOST;
pub use render::{DRAW_BIG, DRAW_MAX_DEPTH, DRAW_WIDTH};
pub use spec::Spec;
pub use tree::{Node, Role, Topology, MAX_NODES};

impl Topology {
    /// Generates a topology from a spec string (see [`spec`] for the forms).
    pub fn generate(spec: &str) -> Result<Topology, TopoError> {
        Ok(Spec::parse(spec)?.build())
    }

    /// Parses an MRNet topology file; `source` (usually the file name)
    /// prefixes error locations.
    pub fn parse_mrnet(text: &str, source: &str) -> Result<Topology, TopoError> {
        mrnet::parse(text, source)
    }

    /// Parses the TOML form (see [`toml_fmt`]); `source` names the text in
    /// errors.
    pub fn parse_toml(text: &str, source: &str) -> Result<Topology, TopoError> {
        toml_fmt::parse(text, source)
    }

    /// Spec or file: if `path` does not exist and looks like a spec, the
    /// spec is generated; otherwise the file is read, as TOML if its
    /// extension is `.toml` (any case), else as an MRNet file.
    pub fn load(path: &Path) -> Result<Topology, TopoError> {
        if !path.exists() {
            return match path.to_str().filter(|s| Spec::looks_like_spec(s)) {
                Some(s) => Topology::generate(s),
                None => Err(TopoError::NotFound {
                    path: path.to_path_buf(),
                }),
            };
        }
        let text = std::fs::read_to_string(path).map_err(|err| TopoError::Io {
            path: path.to_path_buf(),
            err,
        })?;
        let name = path.display().to_string();
        let is_toml = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("toml"));
        if is_toml {
            Topology::parse_toml(&text, &name)
        } else {
            Topology::parse_mrnet(&text, &name)
        }
    }
}

#[cfg(test)]
mod parse_tests;
#[cfg(test)]
mod tests;
