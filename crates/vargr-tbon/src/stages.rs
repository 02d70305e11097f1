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
}

impl LinkStages {
    /// Checks every setting once, at the front-end, so a typo fails before anything
    /// starts and names the setting.
    pub fn validate(&self) -> Result<(), TbonError> {
        self.policy(1 << 20).map(drop)
    }

    pub fn site_of(&self, host: &str) -> Option<&str> {
        self.sites.get(host).map(String::as_str)
    }

    /// The link policy these settings make; `max_frame` bounds what a stage decodes.
    pub fn policy(&self, max_frame: usize) -> Result<LinkPolicy, TbonError> {
        let wan = WanMap::from_pairs(self.wan.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| TbonError::Config(format!("WAN between sites: {e}")))?;
        let codec = match &self.codec {
            None => CodecMode::Adaptive,
            Some(m) => m
                .parse()
                .map_err(|e| TbonError::Config(format!("codec mode {m:?}: {e}")))?,
        };
        LinkPolicy::new(LinkSettings {
            wan,
            codec,
            dedup: self.dedup.clone(),
            max_frame,
            ..LinkSettings::default()
        })
        .map_err(|e| TbonError::Config(e.to_string()))
    }

    /// The stages of the link from `local` to `peer` (hosts), for frames this side
    /// sends; `max_frame` bounds what a stage decodes.
    pub fn chain(&self, local: &str, peer: &str, seed: u64, max_frame: usize) -> StageChain {
        // Checked by `validate` at the front-end; a node never fails here.
        match self.policy(max_frame) {
            Ok(policy) => self.chain_by(&policy, local, peer, seed),
            Err(_) => StageChain::default(),
        }
    }

    /// [`LinkStages::chain`] with the policy made once for many links (a node with many
    /// children): making it checks every setting again.
    pub fn chain_by(&self, policy: &LinkPolicy, local: &str, peer: &str, seed: u64) -> StageChain {
        policy.chain(&LinkEnds {
            local_host: local,
            peer_host: peer,
            local_site: self.site_of(local),
            peer_site: self.site_of(peer),
            seed,
        })
    }
}
