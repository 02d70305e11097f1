//! From the merged tree to what vargr runs: a tree topology, the stages of each of its
//! links, the stream filters of its nodes, and the Python stages at its ends.

use std::collections::BTreeMap;
use std::fmt::Write;

use vargr_links::{LinkEnds, LinkPolicy, LinkSettings};
use vargr_tbon::{BackendSpec, Network, NetworkOptions, Stream, StreamOptions, TbonError};
use vargr_topo::Topology;

use crate::spec::PathSpec;
use crate::tree::{NodeKind, PathTree};
use crate::PathError;

/// A merged tree made runnable on a vargr tree network.
#[derive(Debug, Clone)]
pub struct Built {
    /// The element's host is the front-end (node 0), every host between a commnode,
    /// every source a back-end.
    pub topology: Topology,
    /// The stages of the link from each node (by topology id) to its parent.
    pub links: BTreeMap<u32, Vec<String>>,
    /// The reduction at each internal node (by topology id): a filter spec, `identity`
    /// where the paths do not reduce.
    pub filters: BTreeMap<u32, String>,
    /// C stage plugins every node loads.
    pub plugins: Vec<String>,
    /// Python stages at the element, in order.
    pub last: Vec<String>,
    /// Python stages at each back-end (by back-end rank), in order.
    pub first: BTreeMap<u32, Vec<String>>,
}

impl PathTree {
    /// The topology (as an MRNet file's statements, so that vargr-topo numbers it),
    /// link stages and filters of this tree.
    pub fn build(&self) -> Result<Built, PathError> {
        let mut mrnet = String::new();
        for n in self.nodes.iter().filter(|n| !n.children.is_empty()) {
            let _ = write!(mrnet, "{} =>", n.name());
            for &c in &n.children {
                let _ = write!(mrnet, " {}", self.nodes[c].name());
            }
            mrnet.push_str(" ;\n");
        }
        if mrnet.is_empty() {
            return Err(PathError::Tree {
                file: self.file.clone(),
                reason: "no back-end reaches the element".into(),
            });
        }
        let topology = Topology::parse_mrnet(&mrnet, &self.file).map_err(|e| PathError::Tree {
            file: self.file.clone(),
            reason: format!("as a tree topology: {e}"),
        })?;
        let id_of: BTreeMap<String, u32> = topology.nodes().map(|n| (n.name(), n.id)).collect();
        let mut built = Built {
            links: BTreeMap::new(),
            filters: BTreeMap::new(),
            plugins: self
                .plugins
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            last: self.nodes[0].py.clone(),
            first: BTreeMap::new(),
            topology: topology.clone(),
        };
        for n in &self.nodes {
            let id = id_of[&n.name()];
            if n.parent.is_some() {
                built.links.insert(id, n.link.clone());
            }
            match n.kind {
                NodeKind::Source => {
                    let rank = topology
                        .node(id)
                        .and_then(|t| t.backend_rank)
                        .expect("a source is a leaf");
                    if !n.py.is_empty() {
                        built.first.insert(rank, n.py.clone());
                    }
                }
                NodeKind::Element | NodeKind::Host => {
                    let f = n.reduce.clone().unwrap_or_else(|| "identity".into());
                    built.filters.insert(id, f);
                }
            }
        }
        Ok(built)
    }
}

impl Built {
    /// `base` with this tree's link stages and stage plugins.
    pub fn network_options(&self, mut base: NetworkOptions) -> NetworkOptions {
        base.link_stages.paths = self.links.clone();
        base.link_stages.stage_plugins = self.plugins.clone();
        base
    }

    /// Starts the tree (`backend` at the leaves) and opens the paths' stream to every
    /// back-end: `build_path`, with the front-end's end of the stream as the element.
    pub fn start(
        &self,
        backend: BackendSpec,
        base: NetworkOptions,
        stream: impl FnOnce(StreamOptions) -> StreamOptions,
    ) -> Result<(Network, Stream), TbonError> {
        let net = Network::new(self.topology.clone(), backend, self.network_options(base))?;
        let s = net.open_stream(&net.broadcast_communicator(), stream(self.stream_options()))?;
        Ok((net, s))
    }

    /// A stream that reduces as the paths say: each node's reduction, `sync` waves.
    pub fn stream_options(&self) -> StreamOptions {
        let root = self.filters.get(&0).map_or("identity", String::as_str);
        let mut o = StreamOptions::new(root);
        for (&id, f) in &self.filters {
            if id != 0 {
                o = o.at_node(id, Some(f), None);
            }
        }
        o
    }
}

impl PathSpec {
    /// Loads the plugins and makes every link stage once, so that a bad stage fails
    /// here naming its path and line rather than in a node process. With
    /// `allow_unregistered`, names no plugin lists and this process has not registered
    /// pass (Rust stages of another program); they are returned.
    pub fn check_stages(&self, allow_unregistered: bool) -> Result<Vec<String>, PathError> {
        for p in &self.plugins {
            vargr_stage::user::load_plugin(p).map_err(|e| PathError::File {
                file: self.file.clone(),
                at: None,
                reason: e.to_string(),
            })?;
        }
        let policy = LinkPolicy::new(LinkSettings::default()).expect("the defaults work");
        let ends = LinkEnds {
            local_host: "here",
            peer_host: "there",
            local_site: None,
            peer_site: None,
            seed: 0,
            same_machine: false,
        };
        let mut unregistered = Vec::new();
        for path in &self.paths {
            for st in &path.stages {
                let (kind, _) = vargr_stage::user::split_spec(&st.spec);
                if vargr_stage::user::BUILT_IN_KINDS.contains(&kind)
                    && !matches!(kind, "codec" | "dedup" | "emu")
                {
                    continue;
                }
                let user = !matches!(kind, "codec" | "dedup" | "emu");
                if user && allow_unregistered && !vargr_stage::user::is_registered(kind) {
                    unregistered.push(kind.to_string());
                    continue;
                }
                if let Err(e) = policy.path_chain(std::slice::from_ref(&st.spec), &ends) {
                    return Err(PathError::Path {
                        file: self.file.clone(),
                        line: st.line,
                        path: path.index,
                        from: path.from.clone(),
                        stage: Some(st.spec.clone()),
                        reason: match e {
                            vargr_links::PolicyError::PathStage { reason, .. } => reason,
                            other => other.to_string(),
                        },
                    });
                }
            }
        }
        unregistered.sort();
        unregistered.dedup();
        Ok(unregistered)
    }
}
