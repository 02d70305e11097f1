//! Which stages each link gets: one policy for the links of trees and of jobs.
//!
//! PATHS wraps links in stages chosen by configuration, never by code. A tree node (for
//! each link it owns) and a job's rank (for each peer) describe the link by its ends,
//! [`LinkEnds`], and ask [`LinkPolicy::chain`] for its stages; nothing else builds a
//! chain. The ends give the link a [`LinkLabel`]:
//!
//! - **cross-site** links get redundancy elimination (when configured), a codec stage
//!   (always, even when off, so that a compressed frame never reaches a side that cannot
//!   read it) and WAN emulation (when a WAN joins the two sites), in that order: dedup
//!   must see the data, not compressed bytes, and compression goes before the WAN whose
//!   bytes it saves;
//! - **same-site** and **same-host** links get none.
//!
//! Sites are the user's statement that a link is slow, so the codec compresses across
//! sites even when an emulated WAN joins two sites on one machine. A link between sites
//! with no emulated WAN is a real one: its codec stage learns the path's speed from the
//! kernel's readings of the connection.
//!
//! Emulated links between two sites from the processes of one host share one
//! bottleneck per direction when [`LinkSettings::gateways`] is given (the seed's
//! gateways: `vargr run` makes the table), so that their flows compete for one WAN;
//! links to another host, and every link without the table, get a bottleneck each.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use vargr_codec::stage::{
    link_model, Calibration, CodecMode, CodecStage, SampleDir, StageSettings,
};
use vargr_codec::{Candidates, CodecError, EngineConfig, LinkOptions};
use vargr_dedup::stage::{DedupOptions, DedupStage};
use vargr_emu::{EmuLinkStage, Gateways, WanMap};
use vargr_stage::{Stage, StageChain};

/// What links are configured with: the typed settings a [`LinkPolicy`] is made of.
#[derive(Debug, Clone)]
pub struct LinkSettings {
    /// WAN between sites (emulated on links that cross them).
    pub wan: WanMap,
    /// Compression on links between sites.
    pub codec: CodecMode,
    /// The adaptive engine's settings.
    pub engine: EngineConfig,
    /// Where codec stages record what they carry, for the guided strategy.
    pub samples: Option<SampleDir>,
    /// Redundancy elimination on links between sites: a segmenter spec such as
    /// `cdc:256:1k:8k`; none when absent.
    pub dedup: Option<String>,
    /// The largest frame a link carries: what its stages may have to decode.
    pub max_frame: usize,
    /// The shared bottlenecks of this host's emulated WAN: links between the same two
    /// sites, from any process of this host to another on it, serialize on one.
    pub gateways: Option<Arc<Gateways>>,
}

impl Default for LinkSettings {
    fn default() -> Self {
        LinkSettings {
            wan: WanMap::default(),
            codec: CodecMode::Adaptive,
            engine: EngineConfig::default(),
            samples: None,
            dedup: None,
            max_frame: 64 << 20,
            gateways: None,
        }
    }
}

/// Settings that cannot make a working link, found when the policy is made (at start-up,
/// before any link exists).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("codec engine settings: {0}")]
    Engine(#[from] CodecError),
    /// `reason` names the segmenter.
    #[error("{reason}")]
    Dedup { spec: String, reason: String },
    /// A stage a path specification puts on a link cannot be made.
    #[error("stage {spec:?}: {reason}")]
    PathStage { spec: String, reason: String },
}

/// One end's view of a link: what the policy chooses its stages by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkEnds<'a> {
    pub local_host: &'a str,
    pub peer_host: &'a str,
    /// Sites (clusters, data centres) of the two ends, where known.
    pub local_site: Option<&'a str>,
    pub peer_site: Option<&'a str>,
    /// Seeds the link's emulated randomness (jitter, loss), so that runs repeat.
    pub seed: u64,
    /// Whether both ends run on this machine: only then do their emulated links share
    /// the host's gateways ([`LinkSettings::gateways`]). Host names alone do not say so:
    /// a tree's topology may give the nodes of one machine the names of the clusters
    /// they stand for.
    pub same_machine: bool,
}

/// What kind of link a pair of ends makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLabel {
    SameHost,
    /// The same site, or sites not stated: nothing says the link is slow.
    SameSite,
    CrossSite,
}

impl LinkEnds<'_> {
    pub fn label(&self) -> LinkLabel {
        match (self.local_site, self.peer_site) {
            (Some(a), Some(b)) if a != b => LinkLabel::CrossSite,
            _ if self.local_host == self.peer_host => LinkLabel::SameHost,
            _ => LinkLabel::SameSite,
        }
    }
}

/// The one policy that turns a link's ends into its stages.
#[derive(Debug, Clone)]
pub struct LinkPolicy {
    settings: LinkSettings,
    dedup: Option<DedupOptions>,
}

impl LinkPolicy {
    /// Checks the settings once, so that a typo fails before anything starts.
    pub fn new(settings: LinkSettings) -> Result<LinkPolicy, PolicyError> {
        vargr_codec::Engine::new(settings.engine.clone())?;
        let dedup = match settings.dedup.as_deref() {
            Some(spec) if !spec.is_empty() && spec != "off" => {
                let opts = DedupOptions {
                    segmenter: spec.to_string(),
                    ..DedupOptions::default()
                };
                DedupStage::new(&opts, settings.max_frame).map_err(|reason| {
                    PolicyError::Dedup {
                        spec: spec.to_string(),
                        reason,
                    }
                })?;
                Some(opts)
            }
            _ => None,
        };
        Ok(LinkPolicy { settings, dedup })
    }

    pub fn settings(&self) -> &LinkSettings {
        &self.settings
    }

    /// The stages of the link between `ends`, for the frames this end sends and
    /// receives.
    pub fn chain(&self, ends: &LinkEnds<'_>) -> StageChain {
        StageChain::new(self.stages(ends))
    }

    fn stages(&self, ends: &LinkEnds<'_>) -> Vec<Box<dyn Stage>> {
        let mut stages: Vec<Box<dyn Stage>> = Vec::new();
        let (LinkLabel::CrossSite, Some(here), Some(there)) =
            (ends.label(), ends.local_site, ends.peer_site)
        else {
            return stages;
        };
        let max_frame = self.settings.max_frame;
        if let Some(st) = self
            .dedup
            .as_ref()
            .and_then(|o| DedupStage::new(o, max_frame).ok())
        {
            stages.push(Box::new(st));
        }
        let wan = self.settings.wan.between(here, there);
        // An emulated link's speed is known; a real one's is learned from the kernel.
        let model = match &wan {
            Some(spec) => {
                let p = spec.profile_at(Duration::ZERO);
                link_model(p.latency, p.bandwidth_bits_per_s)
            }
            None => link_model(Duration::ZERO, None),
        };
        let options = LinkOptions {
            same_host: ends.local_host == ends.peer_host,
            compress_same_host: true,
        };
        let codec = &self.settings.codec;
        let settings = StageSettings {
            engine: self.settings.engine.clone(),
            calibration: (*codec == CodecMode::Adaptive)
                .then(|| calibration(&self.settings.engine.candidates)),
            samples: self.settings.samples.clone(),
        };
        // Checked by `new`: a link never fails here.
        if let Ok(st) = CodecStage::new(codec.clone(), model, options, max_frame, &settings) {
            stages.push(Box::new(if wan.is_none() {
                st.learning_path()
            } else {
                st
            }));
        }
        if let Some(spec) = wan {
            // The table is this host's: a link to another host keeps its own bottleneck.
            let shared = match &self.settings.gateways {
                Some(g) if ends.same_machine => g.bottleneck(here, there),
                _ => None,
            };
            stages.push(Box::new(match shared {
                Some(b) => EmuLinkStage::shared(spec, ends.seed, b),
                None => EmuLinkStage::new(spec, ends.seed),
            }));
        }
        stages
    }
}

impl LinkPolicy {
    /// The stages a path specification gives the link between `ends`, in the path's
    /// order (stage 0 nearest the sending application), instead of those its label
    /// would give: the path says how to get there. Built-in kinds are made here as for
    /// labelled links (`codec:MODE`, `dedup:SEGMENTER`, `emu:PROFILE`); any other name
    /// is a user stage from `vargr_stage::user`'s table, guarded.
    pub fn path_chain(
        &self,
        specs: &[String],
        ends: &LinkEnds<'_>,
    ) -> Result<StageChain, PolicyError> {
        let mut stages: Vec<Box<dyn Stage>> = Vec::with_capacity(specs.len());
        let max_frame = self.settings.max_frame;
        let fail = |spec: &str, reason: String| PolicyError::PathStage {
            spec: spec.to_string(),
            reason,
        };
        // An emulated WAN on the same link tells its codec stage the link's speed.
        let mut wan = None;
        for spec in specs {
            if let Some(("emu", profile)) = spec.split_once(':') {
                wan = Some(path_wan(profile).map_err(|r| fail(spec, r))?);
            }
        }
        for spec in specs {
            let (kind, params) = vargr_stage::user::split_spec(spec);
            let stage: Box<dyn Stage> = match kind {
                "codec" => {
                    let mode: CodecMode = params.parse().map_err(|e| fail(spec, format!("{e}")))?;
                    let model = match &wan {
                        Some(w) => {
                            let p = w.profile_at(Duration::ZERO);
                            link_model(p.latency, p.bandwidth_bits_per_s)
                        }
                        None => link_model(Duration::ZERO, None),
                    };
                    let settings = StageSettings {
                        engine: self.settings.engine.clone(),
                        calibration: (mode == CodecMode::Adaptive)
                            .then(|| calibration(&self.settings.engine.candidates)),
                        samples: self.settings.samples.clone(),
                    };
                    let options = LinkOptions {
                        same_host: ends.local_host == ends.peer_host,
                        compress_same_host: true,
                    };
                    let st = CodecStage::new(mode, model, options, max_frame, &settings)
                        .map_err(|e| fail(spec, e.to_string()))?;
                    Box::new(if wan.is_none() {
                        st.learning_path()
                    } else {
                        st
                    })
                }
                "dedup" => {
                    let opts = DedupOptions {
                        segmenter: params.to_string(),
                        ..DedupOptions::default()
                    };
                    Box::new(DedupStage::new(&opts, max_frame).map_err(|r| fail(spec, r))?)
                }
                "emu" => {
                    let w = path_wan(params).map_err(|r| fail(spec, r))?;
                    Box::new(EmuLinkStage::new(w, ends.seed))
                }
                _ => vargr_stage::user::create(spec).map_err(|e| fail(spec, e.to_string()))?,
            };
            stages.push(stage);
        }
        Ok(StageChain::new(stages))
    }
}

/// The link conditions of a path's `emu:PROFILE` stage.
fn path_wan(profile: &str) -> Result<vargr_emu::LinkSpec, String> {
    WanMap::from_pairs([("*", profile)])
        .map_err(|e| e.to_string())?
        .between("here", "there")
        .ok_or_else(|| "no link conditions".to_string())
}

/// This machine's speeds with `candidates`, measured at the first adaptive link of the
/// process (about 20 ms) and shared by every link after it.
fn calibration(candidates: &Candidates) -> Arc<Calibration> {
    type Measured = Vec<(Candidates, Arc<Calibration>)>;
    static MEASURED: Mutex<Measured> = Mutex::new(Vec::new());
    let mut measured = MEASURED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = measured.iter().find(|(k, _)| k == candidates) {
        return c.clone();
    }
    let c = Arc::new(Calibration::measure(candidates));
    measured.push((candidates.clone(), c.clone()));
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends<'a>(
        hosts: (&'a str, &'a str),
        sites: (Option<&'a str>, Option<&'a str>),
    ) -> LinkEnds<'a> {
        LinkEnds {
            local_host: hosts.0,
            peer_host: hosts.1,
            local_site: sites.0,
            peer_site: sites.1,
            seed: 7,
            same_machine: hosts.0 == hosts.1,
        }
    }

    #[test]
    fn labels_come_from_sites_then_hosts() {
        assert_eq!(
            ends(("a", "b"), (Some("x"), Some("y"))).label(),
            LinkLabel::CrossSite
        );
        assert_eq!(
            ends(("a", "a"), (Some("x"), Some("y"))).label(),
            LinkLabel::CrossSite
        );
        assert_eq!(
            ends(("a", "a"), (Some("x"), Some("x"))).label(),
            LinkLabel::SameHost
        );
        assert_eq!(
            ends(("a", "b"), (Some("x"), Some("x"))).label(),
            LinkLabel::SameSite
        );
        assert_eq!(
            ends(("a", "b"), (None, Some("y"))).label(),
            LinkLabel::SameSite
        );
    }

    #[test]
    fn only_links_between_sites_get_stages_in_the_order_that_works() {
        let policy = LinkPolicy::new(LinkSettings {
            wan: WanMap::parse_line("x-y:rtt=10ms,bandwidth=100mbit").unwrap(),
            dedup: Some("cdc:256:1k:8k".into()),
            ..LinkSettings::default()
        })
        .unwrap();
        let names = |e: LinkEnds<'_>| -> Vec<String> {
            policy
                .chain(&e)
                .names()
                .iter()
                .map(|s| s.to_string())
                .collect()
        };
        assert_eq!(
            names(ends(("a", "b"), (Some("x"), Some("y")))),
            ["dedup", "codec", "emu"]
        );
        // No WAN between x and z: a real link, still compressed, nothing emulated.
        assert_eq!(
            names(ends(("a", "b"), (Some("x"), Some("z")))),
            ["dedup", "codec"]
        );
        assert!(names(ends(("a", "b"), (Some("x"), Some("x")))).is_empty());
        assert!(names(ends(("a", "a"), (None, None))).is_empty());
        // With the codec off the stage is still there, so the far side can decode.
        let off = LinkPolicy::new(LinkSettings {
            codec: CodecMode::Off,
            ..LinkSettings::default()
        })
        .unwrap();
        let chain = off.chain(&ends(("a", "b"), (Some("x"), Some("y"))));
        assert_eq!(chain.names(), ["codec"]);
    }

    #[test]
    fn a_paths_stages_replace_the_labels_in_the_paths_order() {
        let policy = LinkPolicy::new(LinkSettings::default()).unwrap();
        let specs: Vec<String> = ["dedup:cdc:256:1k:8k", "codec:fixed:lz4", "emu:rtt=10ms"]
            .map(String::from)
            .to_vec();
        // A same-host link: its label gives no stages, the path gives three.
        let chain = policy
            .path_chain(&specs, &ends(("a", "a"), (None, None)))
            .unwrap();
        assert_eq!(chain.names(), ["dedup", "codec", "emu"]);
        assert!(policy
            .path_chain(&[], &ends(("a", "b"), (Some("x"), Some("y"))))
            .unwrap()
            .is_empty());
        for (bad, what) in [
            ("codec:zip", "codec:zip"),
            ("emu:rtt=soon", "soon"),
            ("dedup:nonsense", "nonsense"),
            ("nosuchstage", "unknown stage"),
        ] {
            let e = policy
                .path_chain(&[bad.to_string()], &ends(("a", "b"), (None, None)))
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains(bad) && e.contains(what), "{e}");
        }
    }

    #[test]
    fn links_between_two_sites_on_this_host_share_the_gateway() {
        let policy = LinkPolicy::new(LinkSettings {
            // One byte per microsecond, no latency: a deadline is the queue's length.
            wan: WanMap::parse_line("x-y:latency=0ms,bandwidth=8mbit").unwrap(),
            codec: CodecMode::Off,
            gateways: Some(Arc::new(Gateways::create().unwrap())),
            ..LinkSettings::default()
        })
        .unwrap();
        let t0 = std::time::Instant::now();
        let due = |e: LinkEnds<'_>| {
            let mut chain = policy.chain(&e);
            let mut out = Vec::new();
            chain.outbound(t0, bytes::Bytes::from(vec![7u8; 10_000]), &mut out);
            assert!(out.is_empty(), "held by the emulation");
            chain.next_deadline().unwrap() - t0
        };
        let ms = Duration::from_millis;
        let first = due(ends(("a", "a"), (Some("x"), Some("y"))));
        assert!(first >= ms(10) && first < ms(11), "{first:?}");
        // A second link from x to y on this host queues behind the first.
        let second = due(ends(("a", "a"), (Some("x"), Some("y"))));
        assert!(second >= ms(20) && second < ms(21), "{second:?}");
        // The other direction, and a link to another host, have bottlenecks of their own.
        let back = due(ends(("a", "a"), (Some("y"), Some("x"))));
        assert!(back < ms(11), "{back:?}");
        let remote = due(ends(("a", "b"), (Some("x"), Some("y"))));
        assert!(remote < ms(11), "{remote:?}");
    }

    #[test]
    fn bad_settings_fail_when_the_policy_is_made_naming_the_setting() {
        let e = LinkPolicy::new(LinkSettings {
            dedup: Some("nonsense:1".into()),
            ..LinkSettings::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("nonsense:1"), "{e}");
        let e = LinkPolicy::new(LinkSettings {
            engine: EngineConfig {
                sample_bytes: 0,
                ..EngineConfig::default()
            },
            ..LinkSettings::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("sample_bytes"), "{e}");
    }
}
