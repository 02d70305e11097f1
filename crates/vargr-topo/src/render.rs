//! Pictures of a topology: Graphviz ([`Topology::to_dot`]) and a terminal
//! drawing in the style of `tree(1)` ([`Topology::draw`]).
//!
//! Topologies reach a million nodes, so the terminal drawing must stay
//! short: beyond a width limit (or whenever the tree is big) it collapses
//! runs of identical sibling sub-trees, leaves included, into one summary
//! line such as `... 60 more back-ends (BE 4-63)`, and it stops descending
//! after [`DRAW_MAX_DEPTH`] levels. The text formats live with their parsers
//! (`to_mrnet` in [`crate::mrnet`], `to_toml` in [`crate::toml_fmt`]).

use std::fmt::Write as _;

use crate::tree::{Node, Role, Topology};
use rustc_hash::FxHashMap;

/// Children shown per node by [`Topology::draw`] before collapsing.
pub const DRAW_WIDTH: usize = 8;
/// Above this many nodes, [`Topology::draw`] collapses identical sibling
/// sub-trees even when a node has few children.
pub const DRAW_BIG: usize = 200;
/// Levels below the root drawn before the rest is summarised.
pub const DRAW_MAX_DEPTH: usize = 64;

fn role_label(n: &Node) -> String {
    match n.role() {
        Role::FrontEnd => "front-end".into(),
        Role::CommNode => "commnode".into(),
        Role::BackEnd => format!("back-end {}", n.backend_rank.unwrap_or(0)),
    }
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// ` (BE a-b)` for `count` back-ends starting at rank `first`.
fn be_range(first: Option<u32>, count: usize) -> String {
    match (first, count) {
        (Some(a), 1) => format!(" (BE {a})"),
        (Some(a), n) if n > 1 => format!(" (BE {a}-{})", u64::from(a) + n as u64 - 1),
        _ => String::new(),
    }
}

/// Per-node facts used to summarise collapsed siblings (indexed like nodes).
struct Facts<'t> {
    nodes: Vec<&'t Node>,
    /// Child indices of each node.
    kids: Vec<Vec<usize>>,
    /// Back-ends at or below each node.
    leaves: Vec<usize>,
    /// Lowest back-end rank at or below each node.
    first_be: Vec<Option<u32>>,
    /// Structural shape: equal ids mean isomorphic ordered sub-trees.
    shape: Vec<u32>,
}

impl<'t> Facts<'t> {
    fn new(t: &'t Topology) -> Facts<'t> {
        let nodes: Vec<&Node> = t.nodes().collect();
        let n = nodes.len();
        let kids: Vec<Vec<usize>> = nodes
            .iter()
            .map(|x| {
                x.children
                    .iter()
                    .map(|&c| t.index(c).expect("child"))
                    .collect()
            })
            .collect();
        let (mut leaves, mut first_be, mut shape) = (vec![0; n], vec![None; n], vec![0u32; n]);
        let mut interned: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
        interned.insert(Vec::new(), 0);
        // Children have larger indices than parents (breadth-first order).
        for i in (0..n).rev() {
            if kids[i].is_empty() {
                leaves[i] = usize::from(nodes[i].backend_rank.is_some());
                first_be[i] = nodes[i].backend_rank;
                continue;
            }
            leaves[i] = kids[i].iter().map(|&c| leaves[c]).sum();
            first_be[i] = kids[i].iter().find_map(|&c| first_be[c]);
            let key: Vec<u32> = kids[i].iter().map(|&c| shape[c]).collect();
            let next = interned.len() as u32;
            shape[i] = *interned.entry(key).or_insert(next);
        }
        Facts {
            nodes,
            kids,
            leaves,
            first_be,
            shape,
        }
    }

    /// One line describing the sibling sub-trees `sibs` that are not drawn.
    fn summary(&self, sibs: &[usize]) -> String {
        let count = sibs.len();
        let total: usize = sibs.iter().map(|&c| self.leaves[c]).sum();
        let range = be_range(sibs.iter().find_map(|&c| self.first_be[c]), total);
        let leaf_kids = sibs.iter().filter(|&&c| self.kids[c].is_empty()).count();
        if leaf_kids == count {
            format!(
                "... {count} more back-end{}{range}",
                if count == 1 { "" } else { "s" }
            )
        } else if sibs.iter().all(|&c| self.shape[c] == self.shape[sibs[0]]) {
            let each = self.leaves[sibs[0]];
            format!(
                "... {} more identical {}, {} each{range}",
                count,
                if count == 1 { "sub-tree" } else { "sub-trees" },
                plural(each, "back-end")
            )
        } else {
            format!(
                "... {count} more {} ({}, {}), {} in all{range}",
                if count == 1 { "child" } else { "children" },
                plural(count - leaf_kids, "commnode"),
                plural(leaf_kids, "back-end"),
                plural(total, "back-end")
            )
        }
    }

    /// The line replacing everything below node `i` past the depth limit.
    fn too_deep(&self, i: usize) -> String {
        let range = be_range(self.first_be[i], self.leaves[i]);
        format!(
            "... deeper levels not drawn: {} below{range}",
            plural(self.leaves[i], "back-end")
        )
    }

    /// What to show under node `i`: children to draw and summary lines.
    fn entries(&self, i: usize, width: usize, big: bool) -> Vec<Entry> {
        let kids = &self.kids[i];
        if !big && kids.len() <= width {
            return kids.iter().map(|&c| Entry::Node(c)).collect();
        }
        // Runs of identical siblings: leaves show up to `keep`, sub-trees
        // show their first member; the rest of a run becomes one summary.
        let keep = width.max(2) - 1;
        // (entry, position in kids where it starts)
        let mut out: Vec<(Entry, usize)> = Vec::new();
        let mut start = 0;
        while start < kids.len() {
            let s = self.shape[kids[start]];
            let end = start
                + kids[start..]
                    .iter()
                    .take_while(|&&c| self.shape[c] == s)
                    .count();
            let len = end - start;
            // leaves: up to `keep`, and never a summary of a single leaf
            let show = match self.kids[kids[start]].is_empty() {
                true if len <= keep + 1 => len,
                true => keep,
                false => 1,
            };
            out.extend((start..start + show).map(|p| (Entry::Node(kids[p]), p)));
            if end - start > show {
                out.push((
                    Entry::Summary(self.summary(&kids[start + show..end])),
                    start + show,
                ));
            }
            start = end;
        }
        if out.len() > keep + 1 {
            let from = out[keep].1;
            out.truncate(keep);
            out.push((Entry::Summary(self.summary(&kids[from..])), from));
        }
        out.into_iter().map(|(e, _)| e).collect()
    }
}

enum Entry {
    Node(usize),
    Summary(String),
}

impl Topology {
    /// Graphviz `digraph`: front-end as an orange double octagon, commnodes
    /// as blue boxes, back-ends as green ellipses labelled with their rank.
    pub fn to_dot(&self) -> String {
        let mut out = String::from("digraph vargr {\n    node [fontname=\"Helvetica\"];\n");
        for n in self.nodes() {
            let (shape, color) = match n.role() {
                Role::FrontEnd => ("doubleoctagon", "#f4a261"),
                Role::CommNode => ("box", "#a8dadc"),
                Role::BackEnd => ("ellipse", "#d8f3dc"),
            };
            let _ = writeln!(
                out,
                "    n{} [label=\"{}\\n{}\", shape={shape}, style=filled, fillcolor=\"{color}\"];",
                n.id,
                n.name(),
                role_label(n)
            );
        }
        for n in self.nodes() {
            for c in &n.children {
                let _ = writeln!(out, "    n{} -> n{c};", n.id);
            }
        }
        out.push_str("}\n");
        out
    }

    /// A `tree(1)`-style drawing, one `host:rank [role]` per line; see the
    /// module docs for how big trees are collapsed. Same as
    /// `draw_with_width(DRAW_WIDTH)`.
    pub fn draw(&self) -> String {
        self.draw_with_width(DRAW_WIDTH)
    }

    /// [`Topology::draw`] showing at most about `width` children per node.
    pub fn draw_with_width(&self, width: usize) -> String {
        let f = Facts::new(self);
        let big = self.len() > DRAW_BIG;
        let mut out = String::new();
        // (entry, prefix of its line, is last sibling, depth); root first.
        let mut stack: Vec<(Entry, String, bool, usize)> =
            vec![(Entry::Node(0), String::new(), true, 0)];
        while let Some((entry, prefix, last, depth)) = stack.pop() {
            let connector = match (depth, last) {
                (0, _) => "",
                (_, true) => "└── ",
                (_, false) => "├── ",
            };
            let idx = match entry {
                Entry::Summary(text) => {
                    let _ = writeln!(out, "{prefix}{connector}{text}");
                    continue;
                }
                Entry::Node(idx) => idx,
            };
            let n = f.nodes[idx];
            let _ = writeln!(out, "{prefix}{connector}{} [{}]", n.name(), role_label(n));
            let child_prefix = match (depth, last) {
                (0, _) => String::new(),
                (_, true) => format!("{prefix}    "),
                (_, false) => format!("{prefix}│   "),
            };
            let entries = if depth >= DRAW_MAX_DEPTH && !f.kids[idx].is_empty() {
                vec![Entry::Summary(f.too_deep(idx))]
            } else {
                f.entries(idx, width, big)
            };
            let count = entries.len();
            for (i, e) in entries.into_iter().enumerate().rev() {
                stack.push((e, child_prefix.clone(), i + 1 == count, depth + 1));
            }
        }
        out
    }
}
