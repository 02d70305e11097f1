//! Drawings of a merged tree, for `vargr paths show`: text for the terminal, JSON for
//! programs, DOT for Graphviz.

use std::fmt::Write;

use crate::tree::{NodeKind, PathTree, TreeNode};

fn label(n: &TreeNode) -> String {
    let mut s = n.name();
    match n.kind {
        NodeKind::Element => s.push_str(" (element)"),
        NodeKind::Host => {}
        NodeKind::Source => s.push_str(" (back-end)"),
    }
    if let Some(r) = &n.reduce {
        let _ = write!(s, " reduce:{r}");
    }
    for p in &n.py {
        let _ = write!(s, " py:{p}");
    }
    s
}

fn link(n: &TreeNode) -> String {
    if n.link.is_empty() {
        String::new()
    } else {
        format!("  <= {}", n.link.join(" | "))
    }
}

impl PathTree {
    /// The tree as text, the element first and each node under its parent, a link's
    /// stages after the node that sends on it (`<= stage | stage`, in sending order).
    pub fn draw(&self) -> String {
        let mut out = format!("{} @ {}\n", self.element.name, label(&self.nodes[0]));
        self.draw_children(0, "", &mut out);
        out
    }

    fn draw_children(&self, i: usize, prefix: &str, out: &mut String) {
        let kids = &self.nodes[i].children;
        for (k, &c) in kids.iter().enumerate() {
            let lastborn = k + 1 == kids.len();
            let n = &self.nodes[c];
            let _ = writeln!(
                out,
                "{prefix}{}{}{}",
                if lastborn { "└── " } else { "├── " },
                label(n),
                link(n)
            );
            let deeper = format!("{prefix}{}", if lastborn { "    " } else { "│   " });
            self.draw_children(c, &deeper, out);
        }
    }

    /// The tree as JSON: the element, the plugins and every node with its parent,
    /// children (indices), link stages and the paths through it.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a tree serialises")
    }

    /// The tree in Graphviz's DOT language, data flowing towards the element.
    pub fn to_dot(&self) -> String {
        let mut out = String::from("digraph paths {\n  rankdir=BT;\n  node [shape=box];\n");
        for (i, n) in self.nodes.iter().enumerate() {
            let _ = writeln!(out, "  n{i} [label={:?}];", label(n));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(p) = n.parent {
                let _ = writeln!(out, "  n{i} -> n{p} [label={:?}];", n.link.join("\n"));
            }
        }
        out.push_str("}\n");
        out
    }
}
