//! The one place that numbers a tree: adjacency lists in, [`Topology`] out.
//!
//! Generators and parsers describe a tree as children lists over their own
//! indices (generation order, or order of first appearance in a file). This
//! module renumbers it breadth-first from the root, fills in parents and
//! assigns back-end ranks in depth-first leaf order, so that every input
//! obeys the same invariants (see [`crate::tree`]).

use crate::tree::{Node, Topology};

/// Host name used for generated topologies.
pub const GENERATED_HOST: &str = "localhost";

/// Builds a topology from `children[i]` (indices of i's children, in order).
///
/// Every index must be reachable from `root` exactly once (callers check
/// this, with located errors, before calling). `names[i]` is `(host, rank)`
/// of index i; `None` means generated names: `localhost`, rank = global id.
pub(crate) fn build(
    mut children: Vec<Vec<u32>>,
    root: u32,
    names: Option<Vec<(String, u32)>>,
) -> Topology {
    let n = children.len();
    // Breadth-first order: order[new_id] = old index.
    let mut order: Vec<u32> = Vec::with_capacity(n);
    order.push(root);
    let mut head = 0;
    while head < order.len() {
        let old = order[head] as usize;
        order.extend_from_slice(&children[old]);
        head += 1;
    }
    debug_assert_eq!(order.len(), n, "every node reachable exactly once");
    let mut new_id = vec![0u32; n];
    for (new, &old) in order.iter().enumerate() {
        new_id[old as usize] = new as u32;
    }
    let mut names = names;
    let mut nodes: Vec<Node> = order
        .iter()
        .enumerate()
        .map(|(id, &old)| {
            let mut kids = std::mem::take(&mut children[old as usize]);
            for k in kids.iter_mut() {
                *k = new_id[*k as usize];
            }
            let (host, rank) = match names.as_mut() {
                Some(v) => std::mem::take(&mut v[old as usize]),
                None => (GENERATED_HOST.to_string(), id as u32),
            };
            Node {
                id: id as u32,
                host,
                rank,
                parent: None,
                children: kids,
                backend_rank: None,
            }
        })
        .collect();
    for i in 0..nodes.len() {
        let parent = nodes[i].id;
        for k in 0..nodes[i].children.len() {
            let c = nodes[i].children[k] as usize;
            nodes[c].parent = Some(parent);
        }
    }
    assign_backend_ranks(&mut nodes);
    Topology::from_trusted(nodes)
}

/// Gives every leaf with a parent its rank, in depth-first pre-order.
fn assign_backend_ranks(nodes: &mut [Node]) {
    let mut next = 0u32;
    let mut stack = vec![0u32];
    while let Some(i) = stack.pop() {
        let n = &mut nodes[i as usize];
        if n.children.is_empty() && n.parent.is_some() {
            n.backend_rank = Some(next);
            next += 1;
        } else {
            stack.extend(n.children.iter().rev());
        }
    }
}
