//! Which stages each link of a tree gets, decided from the link's labels.
//!
//! Stage choice is configuration, never code (ARCHITECTURE principle 2): every node
//! evaluates the same [`LinkStages`] for the links it owns, from its own host and the
//! peer's. Today the labels are sites and the one stage chosen from them is WAN
//! emulation, so a topology whose hosts belong to different sites runs on one machine
//! as if its sites were joined by the configured WAN (seed 000, Longcut).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use vargr_codec::stage::{CodecMode, CodecStage};
use vargr_emu::{EmuLinkStage, WanProfile};
use vargr_net::{Stage, StageChain};

use crate::TbonError;

/// Link labels and the stages they call for, shared by every node of a network.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkStages {
    /// Site of each host (a cluster, a data centre). Hosts not listed have no site.
    pub sites: BTreeMap<String, String>,
    /// WAN between two sites, keyed `"A-B"` (either order) or `"*"` for any pair, as a
    /// profile such as `rtt=36ms,bandwidth=100mbit`. Links between those sites get an
    /// emulation stage in each direction.
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
    /// Checks every profile once, at the front-end, so a typo fails before anything
    /// starts and names the site pair.
    pub fn validate(&self) -> Result<(), TbonError> {
        self.codec_mode()?;
        vargr_codec::stage::engine_config().map_err(|e| TbonError::Config(e.to_string()))?;
        if let Some(opts) = self.dedup_options() {
            vargr_dedup::stage::DedupStage::new(&opts, 1 << 20)
                .map_err(|e| TbonError::Config(format!("dedup {:?}: {e}", opts.segmenter)))?;
        }
        for (pair, profile) in &self.wan {
            profile
                .parse::<WanProfile>()
                .map_err(|e| TbonError::Config(format!("WAN profile for sites {pair:?}: {e}")))?;
            if pair != "*" && pair.split_once('-').is_none() {
                return Err(TbonError::Config(format!(
                    "WAN key {pair:?}: expected \"SITE-SITE\" or \"*\""
                )));
            }
        }
        Ok(())
    }

    pub fn site_of(&self, host: &str) -> Option<&str> {
        self.sites.get(host).map(String::as_str)
    }

    /// The WAN profile between two hosts' sites, if they differ and one is configured.
    pub fn wan_between(&self, a: &str, b: &str) -> Option<WanProfile> {
        let (sa, sb) = (self.site_of(a)?, self.site_of(b)?);
        if sa == sb {
            return None;
        }
        let text = self
            .wan
            .get(&format!("{sa}-{sb}"))
            .or_else(|| self.wan.get(&format!("{sb}-{sa}")))
            .or_else(|| self.wan.get("*"))?;
        text.parse().ok()
    }

    fn dedup_options(&self) -> Option<vargr_dedup::stage::DedupOptions> {
        let spec = self
            .dedup
            .as_deref()
            .filter(|s| !s.is_empty() && *s != "off")?;
        Some(vargr_dedup::stage::DedupOptions {
            segmenter: spec.to_string(),
            ..Default::default()
        })
    }

    fn codec_mode(&self) -> Result<CodecMode, TbonError> {
        match &self.codec {
            None => Ok(CodecMode::Adaptive),
            Some(m) => m
                .parse()
                .map_err(|e| TbonError::Config(format!("codec mode {m:?}: {e}"))),
        }
    }

    /// The stages of the link from `local` to `peer`, for frames this side sends;
    /// `max_frame` bounds what a codec stage decodes.
    pub fn chain(&self, local: &str, peer: &str, seed: u64, max_frame: usize) -> StageChain {
        let mut stages: Vec<Box<dyn Stage>> = Vec::new();
        let crosses =
            matches!((self.site_of(local), self.site_of(peer)), (Some(a), Some(b)) if a != b);
        let wan = self.wan_between(local, peer);
        if crosses {
            // Checked by `validate`; before the codec, which must not hide the data.
            if let Some(st) = self
                .dedup_options()
                .and_then(|o| vargr_dedup::stage::DedupStage::new(&o, max_frame).ok())
            {
                stages.push(Box::new(st));
            }
            let model = match &wan {
                Some(p) => vargr_codec::stage::link_model(p.latency, p.bandwidth_bits_per_s),
                None => vargr_codec::stage::link_model(std::time::Duration::ZERO, None),
            };
            let options = vargr_codec::LinkOptions {
                same_host: local == peer,
                compress_same_host: true,
            };
            // Checked by `validate` at the front-end; a node never fails here.
            let mode = self.codec_mode().unwrap_or(CodecMode::Off);
            if let Ok(st) = CodecStage::new(mode, model, options, max_frame) {
                // A real link between sites: its speed is learned from the connection.
                let st = if wan.is_none() {
                    st.learning_path()
                } else {
                    st
                };
                stages.push(Box::new(st));
            }
        }
        if let Some(p) = wan {
            stages.push(Box::new(EmuLinkStage::new(p, seed)));
        }
        StageChain::new(stages)
    }
}
