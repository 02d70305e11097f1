//! Longcut on vargr's own links: the emulator as a link stage, and the table that says
//! which pairs of sites are joined by which WAN.
//!
//! Trees (`vargr-tbon`) and rank meshes (`vargr-coll`) both label their processes with
//! sites; a link between two sites gets an [`EmuLinkStage`] for the profile a [`WanMap`]
//! gives that pair, so a multi-cluster run fits on one machine.

use std::collections::BTreeMap;
use std::time::Instant;

use bytes::Bytes;
use vargr_net::{Stage, StageChain};

use crate::error::ParseError;
use crate::profile::WanProfile;
use crate::stage::EmuStage;

/// Longcut as a link stage: outgoing frames are held until the emulated WAN would have
/// delivered them (latency plus size over bandwidth, in order).
pub struct EmuLinkStage(EmuStage);

impl EmuLinkStage {
    pub fn new(profile: WanProfile, seed: u64) -> EmuLinkStage {
        // No limit of its own: what it holds counts as the link's backlog, so
        // backpressure pauses the producers instead of this stage dropping anything.
        EmuLinkStage(EmuStage::new(profile, seed).with_limit(usize::MAX))
    }
}

impl Stage for EmuLinkStage {
    fn name(&self) -> &str {
        "emu"
    }

    fn outbound(&mut self, now: Instant, frame: Bytes, _out: &mut Vec<Bytes>) {
        let accepted = self.0.push(now, frame);
        debug_assert!(
            accepted.is_ok(),
            "an unlimited emulation stage refused a frame"
        );
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.0.next_deadline()
    }

    fn release(&mut self, now: Instant, out: &mut Vec<Bytes>) {
        while let Some(b) = self.0.poll_ready(now) {
            out.push(b);
        }
    }

    fn held_bytes(&self) -> usize {
        self.0.queued_bytes()
    }
}

/// WAN profiles between pairs of sites, keyed `"A-B"` (either order) or `"*"` for any
/// pair of different sites.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WanMap {
    pairs: BTreeMap<String, WanProfile>,
}

impl WanMap {
    /// Parses profiles keyed by site pair, checking each and naming the pair at fault.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<WanMap, ParseError> {
        let mut map = WanMap::default();
        for (pair, profile) in pairs {
            if pair != "*"
                && pair
                    .split_once('-')
                    .is_none_or(|(a, b)| a.is_empty() || b.is_empty())
            {
                return Err(ParseError::Profile {
                    text: pair.to_string(),
                    reason: "a WAN key is \"SITE-SITE\" or \"*\"".into(),
                });
            }
            let p: WanProfile = profile.parse().map_err(|e| ParseError::Profile {
                text: profile.to_string(),
                reason: format!("WAN profile for sites {pair:?}: {e}"),
            })?;
            map.pairs.insert(pair.to_string(), p);
        }
        Ok(map)
    }

    /// Parses the one-line form used by `vargr run --wan` and `VARGR_WAN`: either a bare
    /// profile for every pair (`rtt=36ms,bandwidth=100mbit`) or `;`-separated
    /// `PAIR:PROFILE` entries (`a-b:rtt=36ms;*:rtt=10ms`).
    pub fn parse_line(text: &str) -> Result<WanMap, ParseError> {
        let entries: Vec<(&str, &str)> = text
            .split(';')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| match e.split_once(':') {
                Some((pair, profile)) if !pair.contains('=') => (pair.trim(), profile.trim()),
                _ => ("*", e),
            })
            .collect();
        WanMap::from_pairs(entries)
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The profile between sites `a` and `b`, if they differ and one is configured.
    pub fn between(&self, a: &str, b: &str) -> Option<WanProfile> {
        if a == b {
            return None;
        }
        self.pairs
            .get(&format!("{a}-{b}"))
            .or_else(|| self.pairs.get(&format!("{b}-{a}")))
            .or_else(|| self.pairs.get("*"))
            .copied()
    }

    /// The stages of a link from site `local` to site `peer` (empty within a site).
    pub fn chain(&self, local: Option<&str>, peer: Option<&str>, seed: u64) -> StageChain {
        let mut stages: Vec<Box<dyn Stage>> = Vec::new();
        if let (Some(a), Some(b)) = (local, peer) {
            if let Some(p) = self.between(a, b) {
                stages.push(Box::new(EmuLinkStage::new(p, seed)));
            }
        }
        StageChain::new(stages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_line_forms() {
        let all = WanMap::parse_line("rtt=36ms,bandwidth=100mbit").unwrap();
        assert_eq!(
            all.between("a", "b").unwrap().latency,
            Duration::from_millis(18)
        );
        assert_eq!(all.between("a", "a"), None);
        let m = WanMap::parse_line("a-b:latency=5ms; *:latency=1ms").unwrap();
        assert_eq!(
            m.between("b", "a").unwrap().latency,
            Duration::from_millis(5)
        );
        assert_eq!(
            m.between("a", "c").unwrap().latency,
            Duration::from_millis(1)
        );
        assert!(m.chain(Some("a"), Some("a"), 0).is_empty());
        assert_eq!(m.chain(Some("a"), Some("b"), 0).names(), vec!["emu"]);
        assert!(m.chain(None, Some("b"), 0).is_empty());
    }

    #[test]
    fn errors_name_the_pair() {
        let e = WanMap::parse_line("a-b:rtt=fast").unwrap_err().to_string();
        assert!(e.contains("a-b"), "{e}");
        let e = WanMap::from_pairs([("ab", "rtt=1ms")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("SITE-SITE"), "{e}");
    }
}
