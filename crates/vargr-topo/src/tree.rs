//! The checked tree: [`Node`], [`Topology`] and the queries the runtime needs.
//!
//! This module exists so that every input (spec string, MRNet file, TOML,
//! deserialised value) ends in one structure whose invariants hold:
//!
//! * node ids are the breadth-first order of the full topology (root = 0,
//!   children in file/generation order); nodes are stored sorted by id;
//! * every node except the root has exactly one parent, which lists it;
//! * back-ends (nodes with a parent and no children) carry `backend_rank`
//!   `0..N-1` in depth-first, left-to-right order.
//!
//! [`Topology::subtree`] keeps global ids, parents and back-end ranks, so a
//! sub-tree is not renumbered: its root may have `parent: Some(..)` and its
//! back-end ranks form a contiguous range that need not start at 0.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::error::TopoError;
use rustc_hash::FxHashMap;

/// One process of the tree: front-end (root), commnode or back-end (leaf).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Global id in the full topology: root = 0, then breadth-first order.
    /// Kept unchanged by [`Topology::subtree`].
    pub id: u32,
    /// Host name (`"localhost"` for generated topologies).
    pub host: String,
    /// MRNet's per-host process number, the `rank` of `host:rank`.
    pub rank: u32,
    /// Global id of the parent; `None` only for the front-end.
    pub parent: Option<u32>,
    /// Global ids of the children, in file/generation order.
    pub children: Vec<u32>,
    /// `Some(r)` for back-ends: `0..N-1` in left-to-right leaf order of the
    /// full topology. Kept by [`Topology::subtree`].
    pub backend_rank: Option<u32>,
}

/// What a node is in the full topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    /// The root of the full topology (no parent).
    FrontEnd,
    /// An internal process: has a parent and children.
    CommNode,
    /// A leaf with a parent: a tool back-end.
    BackEnd,
}

impl Node {
    /// `host:rank`, the node's name in MRNet files.
    pub fn name(&self) -> String {
        format!("{}:{}", self.host, self.rank)
    }

    /// The node's role in the full topology (independent of sub-trees).
    pub fn role(&self) -> Role {
        if self.parent.is_none() {
            Role::FrontEnd
        } else if self.children.is_empty() {
            Role::BackEnd
        } else {
            Role::CommNode
        }
    }

    /// True for back-ends (leaves with a parent).
    pub fn is_backend(&self) -> bool {
        self.backend_rank.is_some()
    }
}

/// A validated tree of MRNet processes. See the module docs for invariants.
///
/// Serialises as `{"nodes": [...]}`; deserialisation re-checks every
/// invariant with [`Topology::validate`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "TopologyRepr", into = "TopologyRepr")]
pub struct Topology {
    /// Sorted by id; `nodes[0]` is the root.
    nodes: Vec<Node>,
    /// Ids of the back-ends, ordered by back-end rank.
    backends: Vec<u32>,
}

#[derive(Serialize, Deserialize)]
struct TopologyRepr {
    nodes: Vec<Node>,
}

impl TryFrom<TopologyRepr> for Topology {
    type Error = TopoError;
    fn try_from(r: TopologyRepr) -> Result<Self, TopoError> {
        Topology::from_nodes(r.nodes)
    }
}

impl From<Topology> for TopologyRepr {
    fn from(t: Topology) -> Self {
        TopologyRepr { nodes: t.nodes }
    }
}

/// The largest topology any constructor accepts, in nodes.
pub const MAX_NODES: usize = 1_000_000;

impl Topology {
    /// Builds a topology from nodes, checking every invariant (see
    /// [`Topology::validate`]). Nodes may come in any order.
    pub fn from_nodes(mut nodes: Vec<Node>) -> Result<Topology, TopoError> {
        nodes.sort_by_key(|n| n.id);
        let backends = check(&nodes)?;
        Ok(Topology { nodes, backends })
    }

    /// Builds from nodes known to be valid (sorted, BFS, ranks in DFS order).
    pub(crate) fn from_trusted(nodes: Vec<Node>) -> Topology {
        debug_assert!(check(&nodes).is_ok(), "{:?}", check(&nodes));
        let mut t = Topology {
            nodes,
            backends: Vec::new(),
        };
        t.backends = t
            .dfs(t.root().id)
            .filter(|n| n.backend_rank.is_some())
            .map(|n| n.id)
            .collect();
        t
    }

    /// Re-checks every invariant: ids ascending and in breadth-first order
    /// from the root, each non-root node listed by exactly one parent whose
    /// id it names, back-end ranks on exactly the leaves with a parent and
    /// consecutive in depth-first order (starting at 0 when the root has no
    /// parent).
    pub fn validate(&self) -> Result<(), TopoError> {
        check(&self.nodes).map(|_| ())
    }

    /// The root: the front-end, or a sub-tree's top node.
    pub fn root(&self) -> &Node {
        &self.nodes[0]
    }

    /// The node with global id `id`, if it is in this topology.
    pub fn node(&self, id: u32) -> Option<&Node> {
        self.index(id).map(|i| &self.nodes[i])
    }

    /// All nodes in id (breadth-first) order.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a topology has at least its root. Present for clippy.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The back-ends, ordered by back-end rank.
    pub fn backends(&self) -> Vec<&Node> {
        self.backends.iter().map(|&id| self.get(id)).collect()
    }

    /// Number of back-ends.
    pub fn num_backends(&self) -> usize {
        self.backends.len()
    }

    /// The back-end with rank `rank`, if it is in this topology.
    pub fn backend(&self, rank: u32) -> Option<&Node> {
        let first = self.get(*self.backends.first()?).backend_rank?;
        let id = *self.backends.get(rank.checked_sub(first)? as usize)?;
        Some(self.get(id))
    }

    /// Internal nodes: neither the root nor a leaf (MRNet commnodes).
    pub fn internal(&self) -> Vec<&Node> {
        self.nodes[1..]
            .iter()
            .filter(|n| !n.children.is_empty())
            .collect()
    }

    /// Edges on the longest root-to-leaf path (0 for a lone root).
    pub fn depth(&self) -> usize {
        // BFS order: a node's depth is its parent's + 1, parents come first.
        let mut depth = vec![0usize; self.nodes.len()];
        let mut max = 0;
        for (i, n) in self.nodes.iter().enumerate() {
            for &c in &n.children {
                let ci = self.index(c).expect("valid child");
                depth[ci] = depth[i] + 1;
                max = max.max(depth[ci]);
            }
        }
        max
    }

    /// The largest number of children of any node.
    pub fn max_fanout(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| n.children.len())
            .max()
            .unwrap_or(0)
    }

    /// Role of the node with id `id` in the full topology.
    pub fn role(&self, id: u32) -> Option<Role> {
        self.node(id).map(Node::role)
    }

    /// The sub-tree rooted at `id`, with global ids, parents and back-end
    /// ranks unchanged. Its root keeps `parent: Some(..)` pointing at a node
    /// outside the sub-tree (unless `id` is the full tree's root). This is
    /// the "portion of the configuration relevant to that child" that an
    /// MRNet parent sends when it launches a child.
    pub fn subtree(&self, id: u32) -> Option<Topology> {
        let start = self.index(id)?;
        let mut nodes = Vec::new();
        let mut queue = VecDeque::from([start]);
        while let Some(i) = queue.pop_front() {
            let n = &self.nodes[i];
            queue.extend(
                n.children
                    .iter()
                    .map(|&c| self.index(c).expect("valid child")),
            );
            nodes.push(n.clone());
        }
        // Breadth-first order of a sub-tree is ascending global id, because
        // global ids are assigned level by level, left to right.
        debug_assert!(nodes.windows(2).all(|w| w[0].id < w[1].id));
        Some(Topology::from_trusted(nodes))
    }

    /// Back-end ranks of the leaves at or below node `id`, ascending (empty
    /// if `id` is not in this topology).
    pub fn backends_under(&self, id: u32) -> Vec<u32> {
        if self.index(id).is_none() {
            return Vec::new();
        }
        self.dfs(id).filter_map(|n| n.backend_rank).collect()
    }

    /// Nodes at or below `id` in depth-first pre-order (children in order).
    pub fn dfs(&self, id: u32) -> impl Iterator<Item = &Node> {
        let mut stack: Vec<u32> = self.index(id).map(|_| id).into_iter().collect();
        std::iter::from_fn(move || {
            let n = self.get(stack.pop()?);
            stack.extend(n.children.iter().rev());
            Some(n)
        })
    }

    /// Position of `id` in `nodes`.
    pub(crate) fn index(&self, id: u32) -> Option<usize> {
        index_in(&self.nodes, id)
    }

    /// The node with `id`, which must exist.
    pub(crate) fn get(&self, id: u32) -> &Node {
        &self.nodes[self.index(id).expect("id in topology")]
    }

    /// Mutable access for host assignment (hosts and ranks only).
    pub(crate) fn nodes_mut(&mut self) -> &mut [Node] {
        &mut self.nodes
    }
}

/// True for host names vargr accepts: non-empty; letters, digits, `.-_`.
/// Restricting them keeps every topology printable as an MRNet file.
pub(crate) fn valid_host(host: &str) -> bool {
    !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// Position of `id` in `nodes` sorted by id: direct for full topologies,
/// binary search for sub-trees.
fn index_in(nodes: &[Node], id: u32) -> Option<usize> {
    let i = id as usize;
    if nodes.get(i).is_some_and(|n| n.id == id) {
        return Some(i);
    }
    nodes.binary_search_by_key(&id, |n| n.id).ok()
}

/// Checks the invariants of nodes sorted by id; returns back-end ids by rank.
fn check(nodes: &[Node]) -> Result<Vec<u32>, TopoError> {
    let bad = |m: String| Err(TopoError::Invalid(m));
    if nodes.is_empty() {
        return bad("no nodes".into());
    }
    if nodes.len() > MAX_NODES {
        return bad(format!("{} nodes, limit {MAX_NODES}", nodes.len()));
    }
    if let Some(w) = nodes.windows(2).find(|w| w[0].id >= w[1].id) {
        return bad(format!("node id {} appears twice", w[1].id));
    }
    // Names must be unique: group ranks by host (few hosts, cache-friendly),
    // then look for repeats among each host's sorted ranks.
    let mut by_host: FxHashMap<&str, Vec<u32>> = FxHashMap::default();
    for n in nodes {
        if !valid_host(&n.host) {
            return bad(format!("node {} has bad host name {:?}", n.id, n.host));
        }
        by_host.entry(&n.host).or_default().push(n.rank);
    }
    for (host, mut ranks) in by_host {
        ranks.sort_unstable();
        if let Some(w) = ranks.windows(2).find(|w| w[0] == w[1]) {
            return bad(format!("name {host}:{} is used by two nodes", w[0]));
        }
    }
    let mut listed = vec![false; nodes.len()];
    for n in nodes {
        for &c in &n.children {
            let Some(ci) = index_in(nodes, c) else {
                return bad(format!("node {} lists unknown child {c}", n.id));
            };
            if nodes[ci].parent != Some(n.id) {
                return bad(format!(
                    "node {c} is listed by {} but names parent {:?}",
                    n.id, nodes[ci].parent
                ));
            }
            if std::mem::replace(&mut listed[ci], true) {
                return bad(format!("node {c} is listed twice as a child"));
            }
        }
    }
    if listed[0] {
        return bad(format!("root {} is listed as a child", nodes[0].id));
    }
    if let Some(i) = (1..nodes.len()).find(|&i| !listed[i]) {
        return bad(format!("node {} is not listed by its parent", nodes[i].id));
    }
    // Breadth-first order from the root must be the id order.
    let mut expect = 1usize;
    for n in nodes {
        for &c in &n.children {
            if nodes.get(expect).map(|m| m.id) != Some(c) {
                return bad(format!("ids are not in breadth-first order at node {c}"));
            }
            expect += 1;
        }
    }
    if expect != nodes.len() {
        return bad("some nodes are not reachable from the root (cycle)".into());
    }
    // Back-end ranks: exactly the leaves with a parent, consecutive in DFS.
    let mut backends = Vec::new();
    let mut next: Option<u64> = nodes[0].parent.is_none().then_some(0);
    let mut stack = vec![0usize];
    while let Some(i) = stack.pop() {
        let n = &nodes[i];
        stack.extend(
            n.children
                .iter()
                .rev()
                .map(|&c| index_in(nodes, c).expect("checked")),
        );
        let leaf = n.children.is_empty() && n.parent.is_some();
        match (leaf, n.backend_rank) {
            (false, None) => {}
            (false, Some(_)) => {
                return bad(format!(
                    "node {} has a back-end rank but is not a leaf",
                    n.id
                ))
            }
            (true, None) => return bad(format!("leaf {} has no back-end rank", n.id)),
            (true, Some(r)) => {
                if let Some(e) = next.filter(|&e| e != u64::from(r)) {
                    return bad(format!("leaf {} has back-end rank {r}, expected {e}", n.id));
                }
                next = Some(u64::from(r) + 1);
                backends.push(n.id);
            }
        }
    }
    Ok(backends)
}
