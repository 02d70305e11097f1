//! The crate's one error type, [`TopoError`], and [`Location`].
//!
//! Every fallible function of the crate returns `TopoError`. Errors that come
//! from a text (an MRNet topology file, a TOML topology, a hostfile) carry a
//! [`Location`] — file name, 1-based line and 1-based column of the offending
//! token — so that their `Display` reads like a compiler diagnostic:
//! `topo.txt:3:14: duplicate node node1:0 (first seen at 2:9)`.
//! Errors about a spec string quote the string and list the accepted forms.

use std::fmt;
use std::path::PathBuf;

/// Where in a text something was found: file name (or any label the caller
/// passed as `source`), 1-based line and 1-based column (in characters).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Location {
    /// The name given by the caller for the text, usually its file name.
    pub file: String,
    /// 1-based line number.
    pub line: usize,
    /// 1-based column, counted in characters (not bytes).
    pub col: usize,
}

impl Location {
    /// Computes the location of byte `offset` inside `text`.
    ///
    /// Offsets past the end (or inside a multi-byte character) are clamped.
    pub fn at(file: &str, text: &str, offset: usize) -> Location {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = before[line_start..].chars().count() + 1;
        Location {
            file: file.to_string(),
            line,
            col,
        }
    }

    /// The `line:col` part alone, as used for "first seen at 2:9".
    pub fn line_col(&self) -> LineCol {
        LineCol {
            line: self.line,
            col: self.col,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// A 1-based line and column without the file name (displayed `line:col`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LineCol {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column in characters.
    pub col: usize,
}

impl fmt::Display for LineCol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// The spec forms accepted by [`crate::Topology::generate`], for messages.
pub const SPEC_FORMS: &str = "flat:N, kary:K@N, kary:K^D, knomial:K@N, binomial@N, \
     or a level list such as 1x4x16";

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    /// A spec string that is not one of the accepted forms, or has bad numbers.
    #[error("invalid topology spec {spec:?}: {reason}; accepted forms: {forms}", forms = SPEC_FORMS)]
    Spec {
        /// The spec exactly as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A topology that would have more nodes than [`crate::MAX_NODES`].
    #[error("topology {what:?} is too large: {nodes} nodes, the limit is {limit}")]
    TooLarge {
        /// The spec or file that asked for it.
        what: String,
        /// How many nodes it would have (saturating).
        nodes: u64,
        /// The limit, [`crate::MAX_NODES`].
        limit: usize,
    },

    /// A token that does not fit the grammar: missing `=>` or `;`, a word that
    /// is not `host:rank`, a TOML document of the wrong shape.
    #[error("{at}: expected {expected}, found {found}")]
    Syntax {
        /// Where the unexpected token is.
        at: Location,
        /// What the grammar wanted there.
        expected: String,
        /// What was there instead (quoted token, or "end of file").
        found: String,
    },

    /// A `host:rank` whose rank is not a non-negative 32-bit number.
    #[error("{at}: bad rank {rank:?} in {name:?}: a rank is a non-negative integer")]
    BadRank {
        /// Where the rank starts.
        at: Location,
        /// The whole `host:rank` word.
        name: String,
        /// The rank part.
        rank: String,
    },

    /// A node listed as a child twice, or defined (left of `=>`) twice.
    #[error("{at}: duplicate node {node} (first seen at {first})")]
    DuplicateNode {
        /// Where the second occurrence is.
        at: Location,
        /// The `host:rank` of the node.
        node: String,
        /// Where it was first seen (same file).
        first: LineCol,
    },

    /// A node listed as a child of one of its own descendants (or itself).
    #[error("{at}: cycle: {node} is listed as a child of {parent}, which is {node} or one of its descendants")]
    Cycle {
        /// Where the closing child is listed.
        at: Location,
        /// The node that closes the cycle.
        node: String,
        /// The node it was listed under.
        parent: String,
    },

    /// A node on the left of `=>` that is never connected to the root.
    #[error("{at}: unreachable node {node}: it is never listed as a child, so it is not connected to the root {root}")]
    Unreachable {
        /// Where the node is defined.
        at: Location,
        /// The node.
        node: String,
        /// The root of the file (left side of the first statement).
        root: String,
    },

    /// A node on the left of `=>` before the statement that attaches it.
    #[error("{at}: node {node} is defined before it is attached to the tree (it is listed as a child at {attached}); list a parent's statement before its children's")]
    DefinedBeforeAttached {
        /// Where the early definition is.
        at: Location,
        /// The node.
        node: String,
        /// Where the node is listed as a child.
        attached: LineCol,
    },

    /// A text with no statements (or no `[[node]]` tables) at all.
    #[error("{file}: empty topology: no statements found")]
    Empty {
        /// The file name.
        file: String,
    },

    /// An error reported by the TOML parser, located where it could be.
    #[error("{file}{loc}: {message}", loc = at.map(|p| format!(":{p}")).unwrap_or_default())]
    Toml {
        /// The file name.
        file: String,
        /// Line and column, if the TOML parser reported a span.
        at: Option<LineCol>,
        /// The TOML parser's message.
        message: String,
    },

    /// A hostfile line that cannot be read.
    #[error("{at}: {message}")]
    HostFile {
        /// Where.
        at: Location,
        /// What is wrong.
        message: String,
    },

    /// A hostfile without any host.
    #[error("{file}: hostfile lists no hosts")]
    EmptyHostFile {
        /// The file name.
        file: String,
    },

    /// A topology node placed on a host the hostfile does not list.
    #[error("unknown host: node {node} (id {id}) is on host {host:?}, which is not listed in hostfile {hostfile}")]
    UnknownHost {
        /// The node's `host:rank`.
        node: String,
        /// The node's global id.
        id: u32,
        /// The host it names.
        host: String,
        /// The hostfile's name.
        hostfile: String,
    },

    /// [`crate::HostPolicy::BySlots`] with fewer slots than nodes.
    #[error("not enough slots in hostfile {hostfile}: the topology has {needed} nodes, the hosts offer {available} slots")]
    NotEnoughSlots {
        /// The hostfile's name.
        hostfile: String,
        /// Nodes in the topology.
        needed: usize,
        /// Slots over all hosts.
        available: u64,
    },

    /// A topology structure that breaks an invariant (from deserialisation
    /// of a hand-made value, see [`crate::Topology::validate`]).
    #[error("invalid topology: {0}")]
    Invalid(String),

    /// [`crate::Topology::load`] of a path that neither exists nor looks
    /// like a spec.
    #[error("{}: no such file, and not a topology spec ({forms})", path.display(), forms = SPEC_FORMS)]
    NotFound {
        /// The path.
        path: PathBuf,
    },

    /// A file that could not be read.
    #[error("{}: {err}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        err: std::io::Error,
    },
}

impl TopoError {
    /// The location in the input text, if the error has one.
    pub fn location(&self) -> Option<&Location> {
        match self {
            TopoError::Syntax { at, .. }
            | TopoError::BadRank { at, .. }
            | TopoError::DuplicateNode { at, .. }
            | TopoError::Cycle { at, .. }
            | TopoError::Unreachable { at, .. }
            | TopoError::DefinedBeforeAttached { at, .. }
            | TopoError::HostFile { at, .. } => Some(at),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_counts_chars_and_lines() {
        let text = "ab\ncé d\n";
        assert_eq!(Location::at("f", text, 0).to_string(), "f:1:1");
        assert_eq!(Location::at("f", text, 3).to_string(), "f:2:1");
        // 'é' is two bytes; 'd' is at byte 7, column 4
        assert_eq!(Location::at("f", text, 7).to_string(), "f:2:4");
        // past the end clamps
        assert_eq!(Location::at("f", text, 100).to_string(), "f:3:1");
        // inside a multi-byte char clamps back
        assert_eq!(Location::at("f", text, 5).to_string(), "f:2:2");
    }

    #[test]
    fn spec_error_quotes_and_lists_forms() {
        let e = TopoError::Spec {
            spec: "tree:3".into(),
            reason: "unknown form".into(),
        };
        let s = e.to_string();
        assert!(s.contains("\"tree:3\""), "{s}");
        assert!(s.contains("kary:K@N"), "{s}");
    }
}
