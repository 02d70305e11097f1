//! Merging: paths that agree from the element outwards share those nodes, as PATHS'
//! `build_path` shares the wrappers paths have in common; what is left is a tree whose
//! root holds the element and whose leaves are the back-ends.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;

use serde::Serialize;

use crate::spec::{Element, PathSpec};
use crate::PathError;

/// What a node of the merged tree is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeKind {
    /// The root: the element's host, the tree's front-end.
    Element,
    /// A host paths pass through (a commnode).
    Host,
    /// A back-end a path starts from.
    Source,
}

/// One node of the merged tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TreeNode {
    pub kind: NodeKind,
    pub host: String,
    /// The process number on its host (`host:rank`): a back-end's as written, others'
    /// the lowest free one, given from the root down.
    pub rank: u32,
    /// The reduction here (a filter spec), if any.
    pub reduce: Option<String>,
    /// Python stages: at the element, the last ones; at a back-end, the first ones.
    pub py: Vec<String>,
    /// The stages of the link to the parent (none at the element).
    pub link: Vec<String>,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    /// The paths (1-based) through this node.
    pub paths: Vec<usize>,
}

impl TreeNode {
    /// `host:rank`.
    pub fn name(&self) -> String {
        format!("{}:{}", self.host, self.rank)
    }
}

/// The merged tree of a specification's paths. `nodes[0]` is the element.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathTree {
    pub file: String,
    pub element: Element,
    pub plugins: Vec<PathBuf>,
    pub nodes: Vec<TreeNode>,
}

/// What makes two paths' nodes one: the same node under the same parent.
#[derive(PartialEq, Eq)]
struct Key<'a> {
    kind: NodeKind,
    host: &'a str,
    rank: Option<u32>,
    reduce: Option<&'a str>,
    py: &'a [String],
    link: &'a [String],
}

impl PathSpec {
    /// Merges the paths into one tree (see the module docs).
    pub fn merge(&self) -> Result<PathTree, PathError> {
        let mut nodes: Vec<TreeNode> = Vec::new();
        for path in &self.paths {
            let segs = &path.segments;
            let end = segs.last().expect("a path has a segment");
            let root = Key {
                kind: NodeKind::Element,
                host: &end.host,
                rank: None,
                reduce: end.reduce.as_deref(),
                py: &path.last,
                link: &[],
            };
            if let Some(r) = nodes.first() {
                if !same(r, &root) {
                    return Err(PathError::Tree {
                        file: self.file.clone(),
                        reason: format!(
                            "paths {} and {} do different things at element {}: (reduce {:?}, python {:?}) against (reduce {:?}, python {:?}); a tree has one root",
                            r.paths[0], path.index, self.element.name, r.reduce, r.py, root.reduce, root.py
                        ),
                    });
                }
            }
            for source in &path.sources {
                let mut at = step(&mut nodes, None, &root, path.index);
                // The hosts between, from the element outwards; the back-end's own host is
                // a node only where the path reduces there.
                for (i, seg) in segs.iter().enumerate().rev().skip(1) {
                    if i == 0 && seg.reduce.is_none() {
                        break;
                    }
                    let key = Key {
                        kind: NodeKind::Host,
                        host: &seg.host,
                        rank: None,
                        reduce: seg.reduce.as_deref(),
                        py: &[],
                        link: &seg.link,
                    };
                    at = step(&mut nodes, Some(at), &key, path.index);
                }
                let direct = segs.len() > 1 && segs[0].reduce.is_none();
                let leaf = Key {
                    kind: NodeKind::Source,
                    host: &source.host,
                    rank: Some(source.rank),
                    reduce: None,
                    py: &path.first,
                    link: if direct { &segs[0].link } else { &[] },
                };
                step(&mut nodes, Some(at), &leaf, path.index);
            }
        }
        number(&mut nodes);
        Ok(PathTree {
            file: self.file.clone(),
            element: self.element.clone(),
            plugins: self.plugins.clone(),
            nodes,
        })
    }
}

fn same(n: &TreeNode, k: &Key<'_>) -> bool {
    n.kind == k.kind
        && n.host == k.host
        && k.rank.is_none_or(|r| r == n.rank)
        && n.reduce.as_deref() == k.reduce
        && n.py == k.py
        && n.link == k.link
}

/// The child of `parent` that `key` names, made if there is none; returns its index.
fn step(nodes: &mut Vec<TreeNode>, parent: Option<usize>, key: &Key<'_>, path: usize) -> usize {
    let found = match parent {
        None => (!nodes.is_empty()).then_some(0),
        Some(p) => nodes[p]
            .children
            .iter()
            .copied()
            .find(|&c| same(&nodes[c], key)),
    };
    let i = found.unwrap_or_else(|| {
        nodes.push(TreeNode {
            kind: key.kind,
            host: key.host.to_string(),
            rank: key.rank.unwrap_or(0),
            reduce: key.reduce.map(String::from),
            py: key.py.to_vec(),
            link: key.link.to_vec(),
            parent,
            children: Vec::new(),
            paths: Vec::new(),
        });
        let i = nodes.len() - 1;
        if let Some(p) = parent {
            nodes[p].children.push(i);
        }
        i
    });
    if !nodes[i].paths.contains(&path) {
        nodes[i].paths.push(path);
    }
    i
}

/// Gives the element and the hosts between the lowest ranks their hosts leave free,
/// from the root down.
fn number(nodes: &mut [TreeNode]) {
    let mut used: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for n in nodes.iter().filter(|n| n.kind == NodeKind::Source) {
        used.entry(n.host.clone()).or_default().insert(n.rank);
    }
    let mut queue = VecDeque::from([0usize]);
    while let Some(i) = queue.pop_front() {
        queue.extend(nodes[i].children.iter().copied());
        if nodes[i].kind == NodeKind::Source {
            continue;
        }
        let taken = used.entry(nodes[i].host.clone()).or_default();
        let rank = (0..).find(|r| !taken.contains(r)).expect("a free rank");
        taken.insert(rank);
        nodes[i].rank = rank;
    }
}
