//! Control messages of the tree protocol.
//!
//! They are rare (start-up, stream creation, faults), so they travel as JSON in the
//! payload of their frame kind: easy to read in a capture and to extend. Data frames,
//! the hot path, use vargr-wire's packed encoding instead.

use serde::{Deserialize, Serialize};
use vargr_topo::Topology;

/// What a parent tells a child after the handshake: the child's sub-tree and how to
/// start the nodes below it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubtreeMsg {
    pub topology: Topology,
    pub config: RunConfig,
    /// The parent's host, for choosing the stages of the link to it.
    #[serde(default)]
    pub parent_host: String,
    /// Where the child's ancestors listen, its parent first: an orphan asks them to
    /// adopt it, nearest first (see [`crate::recovery`]).
    #[serde(default)]
    pub ancestors: Vec<Ancestor>,
}

/// One ancestor of a node: who it is and where it accepts orphans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ancestor {
    pub node: u32,
    pub host: String,
    pub addr: String,
}

/// "I am node `node`, orphaned by node `lost_parent`": an orphan's request to an
/// ancestor, sent right after the handshake.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AdoptMsg {
    pub node: u32,
    pub host: String,
    pub lost_parent: u32,
    /// The lost parent's host, for the front-end's report if nobody else saw it die.
    #[serde(default)]
    pub lost_host: String,
    pub backends: Vec<u32>,
    /// How far the orphan got on each stream it knows.
    pub streams: Vec<StreamProgress>,
}

/// A node's position on one stream, in its own count: multicasts heard, answers sent
/// up (for a back-end its packets, for an internal node its released waves).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamProgress {
    pub stream: u32,
    pub heard: u64,
    pub answered: u64,
}

/// The adopter's answer: the orphan's new parent and that parent's ancestors.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AdoptedMsg {
    pub parent: u32,
    pub parent_host: String,
    pub ancestors: Vec<Ancestor>,
}

/// Configuration every node of one network shares.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunConfig {
    pub backend_program: String,
    pub backend_args: Vec<String>,
    pub commnode_program: String,
    /// `None`: local processes; `Some(t)`: remote-shell template with {host} and {cmd}.
    pub remote_template: Option<String>,
    /// "unix" or "tcp".
    pub transport: String,
    /// Directory for Unix sockets.
    pub sockdir: String,
    /// What orphans of a dead commnode do.
    #[serde(default)]
    pub recovery: crate::Recovery,
    pub max_frame: usize,
    pub heartbeat_ms: u64,
    pub heartbeat_timeout_ms: u64,
    pub startup_timeout_ms: u64,
    pub queue_limit: usize,
    pub num_backends: u32,
    /// Filter plugins (shared objects) every node loads at start.
    pub plugins: Vec<String>,
    /// Attach mode: back-ends are started by another launcher and meet their parents
    /// through the rendezvous at this address.
    #[serde(default)]
    pub attach: Option<String>,
    /// Sites of hosts and the WAN between them: the stages of each link.
    #[serde(default)]
    pub link_stages: crate::stages::LinkStages,
    /// Every node process writes its trace file (`node-<id>.vtr`) here at shutdown.
    #[serde(default)]
    pub trace_dir: Option<String>,
    /// What each node asks of the links to its children (the stronger wish of the two
    /// ends wins).
    #[serde(default, with = "link_security")]
    pub link_security: vargr_net::LinkSecurity,
    /// Test-only: ns added to the skew-exchange clock of nodes by id (see
    /// [`crate::NetworkOptions::clock_offsets_ns`]).
    #[serde(default)]
    pub clock_offsets_ns: std::collections::BTreeMap<u32, i64>,
}

/// [`vargr_net::LinkSecurity`] by its name, as the CLI spells it.
mod link_security {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &vargr_net::LinkSecurity, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(v.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<vargr_net::LinkSecurity, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// A sub-tree is up: the back-end ranks reachable through it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadyMsg {
    pub node: u32,
    pub backends: Vec<u32>,
}

/// A request to the attach-mode rendezvous.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum AttachMsg {
    /// A node whose children are attaching back-ends listens at `addr`.
    Parent { node: u32, addr: String },
    /// A back-end started by another launcher asks where rank `rank` belongs.
    Backend { rank: u32 },
}

/// The rendezvous' answer to a back-end: its node id and its parent's address.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttachReplyMsg {
    pub node: u32,
    pub parent: String,
}

/// Stream creation, sent down to every node with members below it. With `update` set it
/// changes an open stream's filters instead (MRNet's `set_FilterParameters`): it travels
/// the same links as the stream's multicasts, so every node switches between the same
/// two multicasts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StreamOpenMsg {
    pub id: u32,
    pub members: Vec<u32>,
    pub up: String,
    pub sync: String,
    pub down: Option<String>,
    pub latest: bool,
    #[serde(default)]
    pub update: bool,
    /// The up filter of the back-ends, run on each packet they send (MRNet's filters
    /// assigned per node); None: back-ends send their packets as they are.
    #[serde(default)]
    pub up_backend: Option<String>,
    /// The up filter of the front-end, the last to run; None: `up`.
    #[serde(default)]
    pub up_frontend: Option<String>,
    /// Heterogeneous filters: other up and sync filters for some nodes (the front-end
    /// and commnodes), chosen by node id or depth (see [`NodeFilters`]).
    #[serde(default)]
    pub per_node: Vec<NodeFilters>,
    /// The stream's wave deadline in ms: no packet waits longer at a node, whatever its
    /// sync filter decides. None: no deadline.
    #[serde(default)]
    pub wave_deadline_ms: Option<u64>,
}

/// Which nodes a [`NodeFilters`] applies to.
///
/// By depth (the front-end is depth 0, its children 1, ...) because trees are built by
/// level (`1x4x16`, `kary:4@64`) and a level's job is usually the same at every node of
/// it (count at the leaves' parents, sum at the root), whatever the tree's size; by node
/// id for the exceptions (one commnode on a host with more memory, a node whose children
/// are of another kind). A node rule wins over a depth rule; within a kind, the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeSel {
    Depth(u32),
    Node(u32),
}

/// The filters of the nodes `at` selects, where they differ from the stream's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFilters {
    pub at: NodeSel,
    /// The up (transformation) filter spec; None: the stream's.
    pub up: Option<String>,
    /// The sync filter spec; None: the stream's.
    pub sync: Option<String>,
}

impl StreamOpenMsg {
    /// The up filter spec a node runs: the front-end's (`root`), a back-end's (`leaf`:
    /// its own, else `up`, which it then does not run) or a commnode's.
    pub fn up_for(&self, root: bool, leaf: bool) -> &str {
        let own = match (root, leaf) {
            (true, _) => self.up_frontend.as_deref(),
            (false, true) => self.up_backend.as_deref(),
            (false, false) => None,
        };
        own.unwrap_or(&self.up)
    }

    /// The per-node rule for node `node` at `depth`, if any (back-ends have none: they
    /// run `up_backend`).
    fn rule(&self, node: u32, depth: u32, leaf: bool) -> Option<&NodeFilters> {
        if leaf {
            return None;
        }
        let first = |want: NodeSel| self.per_node.iter().find(|r| r.at == want);
        first(NodeSel::Node(node)).or_else(|| first(NodeSel::Depth(depth)))
    }

    /// The up filter spec node `node` at `depth` runs: its rule's, else
    /// [`up_for`](Self::up_for).
    pub fn up_at(&self, node: u32, depth: u32, root: bool, leaf: bool) -> &str {
        self.rule(node, depth, leaf)
            .and_then(|r| r.up.as_deref())
            .unwrap_or_else(|| self.up_for(root, leaf))
    }

    /// The sync filter spec node `node` at `depth` runs: its rule's, else the stream's.
    pub fn sync_at(&self, node: u32, depth: u32, leaf: bool) -> &str {
        self.rule(node, depth, leaf)
            .and_then(|r| r.sync.as_deref())
            .unwrap_or(&self.sync)
    }
}

/// A failure travelling up to the front-end.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum FaultMsg {
    NodeLost {
        node: u32,
        host: String,
        reason: String,
        backends: Vec<u32>,
    },
    Filter {
        stream: u32,
        node: u32,
        filter: String,
        reason: String,
    },
    /// Node `node` (and `backends` below it) lost its parent `lost_parent` and was
    /// adopted by `new_parent`.
    Reparented {
        node: u32,
        lost_parent: u32,
        #[serde(default)]
        lost_host: String,
        new_parent: u32,
        backends: Vec<u32>,
    },
    /// Waves `first..end` of `stream` (numbered by the node the report is at, renumbered
    /// on each hop up) went without `backends`, whose path up died with node `lost`.
    /// `end` is [`crate::router::OPEN`] when the node that lost them reports it: they
    /// have not come back yet (the front-end joins it with the adopter's report).
    WavesLost {
        stream: u32,
        first: u64,
        end: u64,
        backends: Vec<u32>,
        lost: u32,
    },
}

pub fn to_json<T: Serialize>(v: &T) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec(v).expect("control messages always serialise"))
}

pub fn from_json<'a, T: Deserialize<'a>>(what: &str, b: &'a [u8]) -> Result<T, crate::TbonError> {
    serde_json::from_slice(b)
        .map_err(|e| crate::TbonError::Net(format!("malformed {what} message: {e}")))
}
