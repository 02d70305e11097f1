//! Hostfiles and the mapping of tree nodes onto hosts.
//!
//! Generated topologies put every process on `localhost`; to run on a
//! cluster, a tool maps the nodes onto the hosts of an allocation. The
//! hostfile format is Open MPI's, with MPICH's `host:N` accepted too:
//!
//! ```text
//! # comment
//! node01 slots=4          # Open MPI style
//! node02:2                # MPICH style: 2 slots
//! node03                  # 1 slot
//! node04 slots=2 max_slots=8   # max_slots / max-slots accepted, ignored
//! node05 slots=2 site=westcoast  # vargr: the host's site (cluster, data centre)
//! ```
//!
//! A host listed twice gets the sum of its slots (as in Open MPI). Host
//! names follow the same rule as in topology files (letters, digits, `.`,
//! `-`, `_`).
//!
//! [`Topology::assign_hosts`] overwrites every node's host and rank
//! according to a [`HostPolicy`]; [`Topology::check_hosts`] instead checks
//! a topology that already names its hosts (an MRNet file) against a
//! hostfile.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::str::FromStr;

use crate::error::{Location, TopoError};
use crate::tree::{valid_host, Topology};

/// One host of a hostfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEntry {
    /// Host name.
    pub host: String,
    /// Process slots (at least 1; 1 when not given).
    pub slots: u32,
    /// Site label (`site=NAME`): which cluster or data centre the host is in, for
    /// WAN-aware collectives and emulation.
    pub site: Option<String>,
}

/// The hosts of an allocation, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFile {
    file: String,
    entries: Vec<HostEntry>,
}

/// How [`Topology::assign_hosts`] spreads nodes over hosts. Both walk the
/// nodes in id (breadth-first) order, so the front-end lands on the first
/// host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostPolicy {
    /// Node i goes to host `i mod H`; slots are ignored (oversubscription
    /// allowed).
    #[default]
    RoundRobin,
    /// Fill the first host's slots, then the next host's, and so on; an
    /// error if the topology has more nodes than the hostfile has slots.
    BySlots,
}

impl FromStr for HostPolicy {
    type Err = String;
    /// `round-robin` / `rr`, `by-slots` / `slots` (case-insensitive).
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "round-robin" | "roundrobin" | "rr" => Ok(HostPolicy::RoundRobin),
            "by-slots" | "byslots" | "slots" => Ok(HostPolicy::BySlots),
            _ => Err(format!(
                "unknown host policy {s:?}: expected round-robin or by-slots"
            )),
        }
    }
}

/// Words of `line` with their byte offsets.
fn words(line: &str) -> impl Iterator<Item = (usize, &str)> {
    line.split(|c: char| c.is_ascii_whitespace())
        .scan(0usize, |off, w| {
            let at = *off;
            *off += w.len() + 1;
            Some((at, w))
        })
        .filter(|(_, w)| !w.is_empty())
}

fn slots_number(v: &str) -> Option<u32> {
    (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .then(|| v.parse::<u32>().ok())
        .flatten()
        .filter(|&n| n > 0)
}

impl HostFile {
    /// Parses a hostfile; `source` names it in messages.
    pub fn parse(text: &str, source: &str) -> Result<HostFile, TopoError> {
        let mut entries: Vec<HostEntry> = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut line_start = 0usize;
        for raw in text.split_inclusive('\n') {
            let base = line_start;
            line_start += raw.len();
            let line = raw.split('#').next().unwrap_or("");
            let err = |off: usize, message: String| TopoError::HostFile {
                at: Location::at(source, text, base + off),
                message,
            };
            let mut ws = words(line);
            let mut site: Option<String> = None;
            let Some((off, first)) = ws.next() else {
                continue;
            };
            let (host, mut slots) = match first.split_once(':') {
                Some((h, n)) => {
                    let n = slots_number(n).ok_or_else(|| {
                        err(
                            off + h.len() + 1,
                            format!(
                                "bad slot count {n:?} in {first:?}: expected a positive integer"
                            ),
                        )
                    })?;
                    (h, Some(n))
                }
                None => (first, None),
            };
            if !valid_host(host) {
                return Err(err(
                    off,
                    format!("bad host name {host:?}: use letters, digits, '.', '-' and '_'"),
                ));
            }
            for (off, w) in ws {
                let (key, value) = w.split_once('=').unwrap_or((w, ""));
                match key {
                    "slots" => {
                        if slots.is_some() {
                            return Err(err(off, format!("slots given twice for host {host}")));
                        }
                        slots = Some(slots_number(value).ok_or_else(|| {
                            err(off, format!("bad slot count {value:?}: expected slots=N with N a positive integer"))
                        })?);
                    }
                    "site" if valid_host(value) => site = Some(value.to_string()),
                    "site" => {
                        return Err(err(
                            off,
                            format!("bad site {value:?}: use letters, digits, '.', '-' and '_'"),
                        ))
                    }
                    "max_slots" | "max-slots" => {
                        slots_number(value).ok_or_else(|| {
                            err(off, format!("bad {key} {value:?}: expected a positive integer"))
                        })?;
                    }
                    _ => {
                        return Err(err(
                            off,
                            format!("unknown hostfile attribute {w:?}: accepted are slots=N, max_slots=N and site=NAME"),
                        ))
                    }
                }
            }
            let slots = slots.unwrap_or(1);
            match seen.get(host) {
                Some(&i) => {
                    entries[i].slots = entries[i].slots.saturating_add(slots);
                    if let Some(s) = site {
                        if entries[i].site.as_ref().is_some_and(|old| *old != s) {
                            return Err(err(off, format!("host {host} is given two sites")));
                        }
                        entries[i].site = Some(s);
                    }
                }
                None => {
                    seen.insert(host.to_string(), entries.len());
                    entries.push(HostEntry {
                        host: host.to_string(),
                        slots,
                        site,
                    });
                }
            }
        }
        HostFile::new(source, entries)
    }

    /// Reads and parses a hostfile.
    pub fn load(path: &Path) -> Result<HostFile, TopoError> {
        let text = std::fs::read_to_string(path).map_err(|err| TopoError::Io {
            path: path.to_path_buf(),
            err,
        })?;
        HostFile::parse(&text, &path.display().to_string())
    }

    /// Builds a hostfile from entries (host names checked, duplicates kept
    /// as given); `name` is used in messages.
    pub fn new(name: &str, entries: Vec<HostEntry>) -> Result<HostFile, TopoError> {
        if entries.is_empty() {
            return Err(TopoError::EmptyHostFile {
                file: name.to_string(),
            });
        }
        if let Some(e) = entries
            .iter()
            .find(|e| !valid_host(&e.host) || e.slots == 0)
        {
            return Err(TopoError::Invalid(format!(
                "hostfile {name}: bad entry {:?} with {} slots",
                e.host, e.slots
            )));
        }
        Ok(HostFile {
            file: name.to_string(),
            entries,
        })
    }

    /// The name given when parsing (usually the file name).
    pub fn name(&self) -> &str {
        &self.file
    }

    /// The hosts, in file order.
    pub fn entries(&self) -> &[HostEntry] {
        &self.entries
    }

    /// True if `host` is listed.
    pub fn contains(&self, host: &str) -> bool {
        self.entries.iter().any(|e| e.host == host)
    }

    /// Slots over all hosts.
    pub fn total_slots(&self) -> u64 {
        self.entries.iter().map(|e| u64::from(e.slots)).sum()
    }
}

impl Topology {
    /// Places every node on a host of `hosts` following `policy` (front-end
    /// on the first host), and renumbers ranks per host: 0, 1, … in id
    /// order. Existing hosts and ranks are overwritten; to validate hosts a
    /// topology file already names, use [`Topology::check_hosts`].
    pub fn assign_hosts(&mut self, hosts: &HostFile, policy: HostPolicy) -> Result<(), TopoError> {
        let n = self.len();
        let h = hosts.entries.len();
        let mut placement: Vec<usize> = Vec::with_capacity(n);
        match policy {
            HostPolicy::RoundRobin => placement.extend((0..n).map(|i| i % h)),
            HostPolicy::BySlots => {
                let available = hosts.total_slots();
                if available < n as u64 {
                    return Err(TopoError::NotEnoughSlots {
                        hostfile: hosts.file.clone(),
                        needed: n,
                        available,
                    });
                }
                for (hi, e) in hosts.entries.iter().enumerate() {
                    let take = (e.slots as usize).min(n - placement.len());
                    placement.resize(placement.len() + take, hi);
                }
            }
        }
        let mut next_rank = vec![0u32; h];
        for (node, hi) in self.nodes_mut().iter_mut().zip(placement) {
            node.host.clone_from(&hosts.entries[hi].host);
            node.rank = next_rank[hi];
            next_rank[hi] += 1;
        }
        Ok(())
    }

    /// Checks that every node's host is listed in `hosts`; the error names
    /// the first node (in id order) on an unknown host.
    pub fn check_hosts(&self, hosts: &HostFile) -> Result<(), TopoError> {
        let known: HashSet<&str> = hosts.entries.iter().map(|e| e.host.as_str()).collect();
        match self.nodes().find(|n| !known.contains(n.host.as_str())) {
            None => Ok(()),
            Some(n) => Err(TopoError::UnknownHost {
                node: n.name(),
                id: n.id,
                host: n.host.clone(),
                hostfile: hosts.file.clone(),
            }),
        }
    }
}

#[cfg(test)]
#[path = "hostfile_tests.rs"]
mod tests;
