//! Where a node sits in the tree: its children as the router keeps them, and the view
//! of its place that the clock exchange and the monitor plane work from.
//!
//! The router owns this state; the clock exchange ([`crate::clock`]) and the monitor
//! plane ([`crate::monitor`]) are handed a [`Place`] with each event instead of the
//! router itself, so neither depends on the router.

use rustc_hash::FxHashMap;
use vargr_net::LinkId;

/// One child of a node, alive or lost.
pub struct ChildInfo {
    pub link: LinkId,
    pub node: u32,
    pub host: String,
    pub backends: Vec<u32>,
    pub alive: bool,
    pub shutdown_done: bool,
    /// Once lost: per stream, the first wave (numbered here) released without it.
    pub lost_from: FxHashMap<u32, u64>,
}

impl ChildInfo {
    pub fn new(link: LinkId, node: u32, host: String, backends: Vec<u32>) -> ChildInfo {
        ChildInfo {
            link,
            node,
            host,
            backends,
            alive: true,
            shutdown_done: false,
            lost_from: FxHashMap::default(),
        }
    }
}

/// A node's place in the tree at one moment, as its router knows it.
#[derive(Clone, Copy)]
pub struct Place<'a> {
    pub node: u32,
    pub host: &'a str,
    /// `None` at the root, and while orphaned.
    pub parent: Option<LinkId>,
    /// The front-end: no parent, and not an orphan waiting for one.
    pub is_root: bool,
    /// Indices are the ones events about children carry.
    pub children: &'a [ChildInfo],
}
