//! Longcut on vargr's own links: the emulator as a link stage, and the table that says
//! which pairs of sites are joined by which WAN.
//!
//! Trees (`vargr-tbon`) and rank meshes (`vargr-coll`) both label their processes with
//! sites; a link between two sites gets an [`EmuLinkStage`] for the profile a [`WanMap`]
//! gives that pair, so a multi-cluster run fits on one machine.

use std::collections::BTreeMap;
use std::time::Instant;

use bytes::Bytes;
use vargr_stage::Stage;

use crate::emulator::LinkEmulator;
use crate::error::{EmuError, ParseError};
use crate::gateway::SharedBottleneck;
use crate::profile::{LinkSpec, WanProfile};
use crate::shaper::Shaper;
use crate::trace::Trace;

/// Longcut as a link stage: outgoing frames are held until the emulated WAN would have
/// delivered them (latency plus size over bandwidth, in order).
pub struct EmuLinkStage(LinkEmulator);

impl EmuLinkStage {
    pub fn new(spec: impl Into<LinkSpec>, seed: u64) -> EmuLinkStage {
        // No limit of its own: what it holds counts as the link's backlog, so
        // backpressure pauses the producers instead of this stage dropping anything.
        EmuLinkStage(LinkEmulator::new(spec, seed).with_limit(usize::MAX))
    }

    /// The stage serializing on `shared`, the bottleneck of every link between the same
    /// two sites from this host (see [`crate::Gateways`]).
    pub fn shared(spec: impl Into<LinkSpec>, seed: u64, shared: SharedBottleneck) -> EmuLinkStage {
        EmuLinkStage(
            LinkEmulator::with_shaper(Shaper::new(spec, seed).with_shared(shared))
                .with_limit(usize::MAX),
        )
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

/// WAN conditions between pairs of sites, keyed `"A-B"` or `"*"` for any pair of
/// different sites. `"A-B"` governs frames from A to B, and also from B to A unless
/// `"B-A"` is given: so one entry makes a symmetric link, two make one per direction.
/// A value is a profile (`rtt=36ms,bandwidth=100mbit`) or a recorded trace
/// (`trace=FILE[,jitter=1ms]`, the rows `vargr emu --trace` reads).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WanMap {
    pairs: BTreeMap<String, LinkSpec>,
}

/// Parses one value: a profile, or `trace=FILE` with an optional `jitter=`.
fn parse_spec(text: &str) -> Result<LinkSpec, EmuError> {
    let Some(rest) = text.trim().strip_prefix("trace=") else {
        return Ok(LinkSpec::Constant(text.parse::<WanProfile>()?));
    };
    let (path, extra) = rest.split_once(',').unwrap_or((rest, ""));
    let jitter = if extra.trim().is_empty() {
        std::time::Duration::ZERO
    } else {
        let p: WanProfile = extra.parse()?;
        if p.latency != std::time::Duration::ZERO || p.bandwidth_bits_per_s.is_some() {
            return Err(ParseError::Profile {
                text: text.to_string(),
                reason: "a trace gives latency and bandwidth itself; only jitter= may follow it"
                    .into(),
            }
            .into());
        }
        p.jitter
    };
    Ok(LinkSpec::Trace {
        trace: std::sync::Arc::new(Trace::load(path)?),
        jitter,
    })
}

impl WanMap {
    /// Parses profiles keyed by site pair, checking each and naming the pair at fault.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<WanMap, EmuError> {
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
                }
                .into());
            }
            let spec = parse_spec(profile).map_err(|e| ParseError::Profile {
                text: profile.to_string(),
                reason: format!("WAN profile for sites {pair:?}: {e}"),
            })?;
            map.pairs.insert(pair.to_string(), spec);
        }
        Ok(map)
    }

    /// Parses the one-line form used by `vargr run --wan` and `VARGR_WAN`: either a bare
    /// profile for every pair (`rtt=36ms,bandwidth=100mbit`) or `;`-separated
    /// `PAIR:PROFILE` entries (`a-b:rtt=36ms;*:rtt=10ms`).
    pub fn parse_line(text: &str) -> Result<WanMap, EmuError> {
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

    /// The conditions for frames from site `a` to site `b`, if they differ and some are
    /// configured.
    pub fn between(&self, a: &str, b: &str) -> Option<LinkSpec> {
        if a == b {
            return None;
        }
        self.pairs
            .get(&format!("{a}-{b}"))
            .or_else(|| self.pairs.get(&format!("{b}-{a}")))
            .or_else(|| self.pairs.get("*"))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_line_forms() {
        let lat = |s: Option<LinkSpec>| s.unwrap().profile_at(Duration::ZERO).latency;
        let all = WanMap::parse_line("rtt=36ms,bandwidth=100mbit").unwrap();
        assert_eq!(lat(all.between("a", "b")), Duration::from_millis(18));
        assert_eq!(all.between("a", "a"), None);
        let m = WanMap::parse_line("a-b:latency=5ms; *:latency=1ms").unwrap();
        assert_eq!(lat(m.between("b", "a")), Duration::from_millis(5));
        assert_eq!(lat(m.between("a", "c")), Duration::from_millis(1));
        // Two entries make two directions.
        let d = WanMap::parse_line("a-b:latency=5ms;b-a:latency=9ms").unwrap();
        assert_eq!(lat(d.between("a", "b")), Duration::from_millis(5));
        assert_eq!(lat(d.between("b", "a")), Duration::from_millis(9));
    }

    #[test]
    fn traces_are_replayed() {
        let dir = std::env::temp_dir().join(format!("vargr-wanmap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("link.trace");
        std::fs::write(&f, "0 10ms 8mbit\n1s 30ms 8mbit\n").unwrap();
        let m = WanMap::parse_line(&format!("a-b:trace={},jitter=1ms", f.display())).unwrap();
        let spec = m.between("a", "b").unwrap();
        assert_eq!(
            spec.profile_at(Duration::from_millis(1500)).latency,
            Duration::from_millis(30)
        );
        assert_eq!(
            spec.profile_at(Duration::ZERO).jitter,
            Duration::from_millis(1)
        );
        let e = WanMap::parse_line("trace=/no/such/file")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/no/such/file"), "{e}");
        let e = WanMap::parse_line(&format!("trace={},rtt=5ms", f.display()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("only jitter"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
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
