//! The TOML form of a topology, for hand-written configurations.
//!
//! MRNet's format is terse but unfamiliar; TOML gives comments, editor
//! support and a place to grow. The form mirrors MRNet statements, one
//! `[[node]]` table per parent, the first table being the root:
//!
//! ```toml
//! [[node]]
//! name = "fe:0"                  # host:rank
//! children = ["cn:0", "cn:1"]
//!
//! [[node]]
//! name = "cn:0"
//! children = ["be:0", "be:1"]
//! ```
//!
//! Leaves need no table (a table without `children` is allowed, e.g. for a
//! lone front-end). Unknown keys are errors. TOML syntax errors carry the
//! toml crate's line and column; tree errors (duplicate, cycle, unreachable,
//! defined before attached, empty) are the same as for MRNet files and point
//! at the first character of the offending name.

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Location, TopoError};
use crate::statements::{assemble, split_name, Item, Src, Stmt};
use crate::tree::Topology;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    #[serde(default)]
    node: Vec<TomlNode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlNode {
    name: Spanned<String>,
    #[serde(default)]
    children: Vec<Spanned<String>>,
}

/// Parses the TOML form; `file` names it in messages.
pub(crate) fn parse(text: &str, file: &str) -> Result<Topology, TopoError> {
    let doc: Doc = toml::from_str(text).map_err(|e| TopoError::Toml {
        file: file.to_string(),
        at: e
            .span()
            .map(|s| Location::at(file, text, s.start).line_col()),
        message: e.message().trim().lines().collect::<Vec<_>>().join(": "),
    })?;
    let src = Src { file, text };
    let stmts = doc
        .node
        .iter()
        .map(|n| {
            Ok(Stmt {
                left: item(&n.name, &src)?,
                children: n
                    .children
                    .iter()
                    .map(|c| item(c, &src))
                    .collect::<Result<_, TopoError>>()?,
            })
        })
        .collect::<Result<Vec<_>, TopoError>>()?;
    assemble(&stmts, &src)
}

/// The `host:rank` in a TOML string, located at the name's first character.
fn item<'a>(s: &'a Spanned<String>, src: &Src) -> Result<Item<'a>, TopoError> {
    let start = s.span().start;
    let quoted = src
        .text
        .get(start..)
        .is_some_and(|t| t.starts_with(['"', '\'']));
    split_name(s.get_ref(), start + usize::from(quoted), src)
}

impl Topology {
    /// The TOML form (see [`crate::toml_fmt`]): one `[[node]]` per node
    /// with children, root first, breadth-first. Re-parseable by
    /// [`Topology::parse_toml`]; for a full topology the result is equal.
    pub fn to_toml(&self) -> String {
        let mut out = self.summary_comment();
        for n in self.nodes() {
            if n.children.is_empty() && n.id != self.root().id {
                continue;
            }
            out.push_str(&format!("\n[[node]]\nname = \"{}\"\n", n.name()));
            if n.children.is_empty() {
                continue;
            }
            out.push_str("children = [");
            for (i, &c) in n.children.iter().enumerate() {
                if i > 0 {
                    out.push_str(if i % 6 == 0 { ",\n    " } else { ", " });
                }
                out.push('"');
                out.push_str(&self.get(c).name());
                out.push('"');
            }
            out.push_str("]\n");
        }
        out
    }
}
