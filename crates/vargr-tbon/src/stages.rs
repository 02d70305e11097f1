//! The link configuration a tree carries to every node, and the stages it gives each link.
//!
//! Every node receives the same [`LinkStages`] and, for each link it owns, asks the one
//! link policy of `vargr-links` for the link's stages from its own host and site and
//! the peer's. So a topology whose hosts belong to different sites runs on one machine
//! as if its sites were joined by the configured WAN (seed 000, Longcut), with the
//! same compression and redundancy elimination between sites as a job's links.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use vargr_codec::stage::CodecMode;
use vargr_emu::WanMap;
use vargr_links::{LinkEnds, LinkPolicy, LinkSettings};
use vargr_net::StageChain;

use crate::TbonError;

/// The gateways behind `pointer`, mapped once per process (a node makes many links,
/// each asking for its policy).
fn open_gateways(pointer: &str) -> Result<std::sync::Arc<vargr_emu::Gateways>, TbonError> {
    use std::sync::{Arc, Mutex};
    static OPEN: Mutex<Vec<(String, Arc<vargr_emu::Gateways>)>> = Mutex::new(Vec::new());
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, g)) = open.iter().find(|(p, _)| p == pointer) {
        return Ok(g.clone());
    }
    let g = vargr_emu::Gateways::open_pointer(std::path::Path::new(pointer))
        .map(Arc::new)
        .map_err(|e| TbonError::Config(format!("the emulated WAN's gateways {pointer}: {e}")))?;
    open.push((pointer.to_string(), g.clone()));
    Ok(g)
}

/// Link labels and the stages they call for, shared by every node of a network.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkStages {
    /// Site of each host (a cluster, a data centre). Hosts not listed have no site.
    pub sites: BTreeMap<String, String>,
    /// WAN between two sites, keyed `"A-B"` (either order) or `"*"` for any pair, as a
    /// profile such as `rtt=36ms,bandwidth=100mbit` or a recorded trace (see
    /// `vargr_emu::WanMap`). Links between those sites get an emulation stage in each
    /// direction.
    pub wan: BTreeMap<String, String>,
    /// Compression on links between sites: `off`, `fixed:CODEC` or `adaptive` (the
    /// default). Such links always get a codec stage, so that either side can read
    /// what the other compressed.
    #[serde(default)]
    pub codec: Option<String>,
    /// Redundancy elimination on links between sites: a segmenter spec (e.g.
    /// `cdc:256:1k:8k`); off when absent. Both sides of every such link get the stage.
    #[serde(default)]
    pub dedup: Option<String>,
    /// The stages a path specification (vargr-paths) gives links, by the node id of the
    /// link's child end: such a link gets exactly these stages, in this order, instead
    /// of its label's.
    #[serde(default)]
    pub paths: BTreeMap<u32, Vec<String>>,
    /// Stage plugins (shared objects) every node loads before it makes its links, so
    /// that the paths can name their stages.
    #[serde(default)]
    pub stage_plugins: Vec<String>,
    /// The pointer file of the shared bottlenecks of the emulated WAN
    /// ([`vargr_emu::Gateways`]): links between the same two sites then compete for one
    /// WAN, as through the seed's gateways. [`crate::Network::new`] makes it when every
    /// node runs on its machine (local processes or threads), and only then: a node
    /// given it runs on the same machine as every other.
    #[serde(default)]
    pub gateways: Option<String>,
}

impl LinkStages {
    /// Checks every setting once, at the front-end, so a typo fails before anything
    /// starts and names the setting.
    pub fn validate(&self) -> Result<(), TbonError> {
        let policy = self.policy(1 << 20)?;
        for &child in self.paths.keys() {
            self.chain_by(&policy, "here", "there", child, 0)?;
        }
        Ok(())
    }

    pub fn site_of(&self, host: &str) -> Option<&str> {
        self.sites.get(host).map(String::as_str)
    }

    /// The link policy these settings make; `max_frame` bounds what a stage decodes.
    pub fn policy(&self, max_frame: usize) -> Result<LinkPolicy, TbonError> {
        for p in &self.stage_plugins {
            vargr_stage::user::load_plugin(std::path::Path::new(p))
                .map_err(|e| TbonError::Config(e.to_string()))?;
        }
        let wan = WanMap::from_pairs(self.wan.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| TbonError::Config(format!("WAN between sites: {e}")))?;
        let codec = match &self.codec {
            None => CodecMode::Adaptive,
            Some(m) => m
                .parse()
                .map_err(|e| TbonError::Config(format!("codec mode {m:?}: {e}")))?,
        };
        let gateways = self.gateways.as_deref().map(open_gateways).transpose()?;
        LinkPolicy::new(LinkSettings {
            wan,
            codec,
            gateways,
            dedup: self.dedup.clone(),
            max_frame,
            ..LinkSettings::default()
        })
        .map_err(|e| TbonError::Config(e.to_string()))
    }

    /// The stages of the link from `local` to `peer` (hosts) whose child end is node
    /// `child`, for frames this side sends; `max_frame` bounds what a stage decodes.
    pub fn chain(
        &self,
        local: &str,
        peer: &str,
        child: u32,
        seed: u64,
        max_frame: usize,
    ) -> Result<StageChain, TbonError> {
        let policy = self.policy(max_frame)?;
        self.chain_by(&policy, local, peer, child, seed)
    }

    /// [`LinkStages::chain`] with the policy made once for many links (a node with many
    /// children): making it checks every setting again. Only a path's stages can fail
    /// here (a user stage this process does not have), and the link must not then run
    /// without them.
    pub fn chain_by(
        &self,
        policy: &LinkPolicy,
        local: &str,
        peer: &str,
        child: u32,
        seed: u64,
    ) -> Result<StageChain, TbonError> {
        let ends = LinkEnds {
            local_host: local,
            peer_host: peer,
            local_site: self.site_of(local),
            peer_site: self.site_of(peer),
            seed,
            // Set only when every node runs on this machine, whatever their host names.
            same_machine: self.gateways.is_some(),
        };
        match self.paths.get(&child) {
            None => Ok(policy.chain(&ends)),
            Some(specs) => policy
                .path_chain(specs, &ends)
                .map_err(|e| TbonError::Config(format!("the path's link from node {child}: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Two nodes' links from cluster x to cluster y (hosts named after the clusters, as a
    /// tree's topology names them on one machine): when does a 10,000-byte frame on each
    /// fall due, one after the other, on a WAN of one byte per microsecond?
    fn dues(gateways: Option<String>) -> (Duration, Duration) {
        let stages = LinkStages {
            sites: [("a", "x"), ("b", "y")]
                .map(|(h, s)| (h.to_string(), s.to_string()))
                .into(),
            wan: [("x-y".to_string(), "latency=0ms,bandwidth=8mbit".to_string())].into(),
            codec: Some("off".into()),
            gateways,
            ..LinkStages::default()
        };
        let t0 = Instant::now();
        let due = |child| {
            let mut chain = stages.chain("a", "b", child, 0, 1 << 20).unwrap();
            let mut out = Vec::new();
            chain.outbound(t0, bytes::Bytes::from(vec![7u8; 10_000]), &mut out);
            chain.next_deadline().unwrap() - t0
        };
        (due(1), due(2))
    }

    #[test]
    fn a_trees_links_between_two_sites_share_the_gateway_given_them() {
        let dir = tempfile::tempdir().unwrap();
        let pointer = dir.path().join("gateways");
        let table = vargr_emu::Gateways::create().unwrap();
        table.write_pointer(&pointer).unwrap();
        let ms = Duration::from_millis;
        let (first, second) = dues(Some(pointer.display().to_string()));
        assert!(first >= ms(10) && first < ms(11), "{first:?}");
        assert!(second >= ms(20) && second < ms(21), "{second:?}");
        // Without it, each link is a WAN of its own.
        let (first, second) = dues(None);
        assert!(first < ms(11) && second < ms(11), "{first:?} {second:?}");
        // A pointer that leads nowhere is an error naming it, not a link without a WAN.
        let bad = LinkStages {
            gateways: Some("/nonexistent/gateways".into()),
            ..LinkStages::default()
        };
        let e = bad.policy(1 << 20).err().unwrap().to_string();
        assert!(e.contains("/nonexistent/gateways"), "{e}");
    }
}
