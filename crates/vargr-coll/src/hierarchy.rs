//! Where each rank runs: host and site. Hierarchy-aware algorithms reduce inside a host,
//! then inside a site, then across sites, so that each slow link is crossed as few times
//! as possible (MagPIe's rule: at most one wide-area link on any sender-receiver path).

use serde::{Deserialize, Serialize};

use crate::error::{CollError, Result};

/// Host and site of every rank of a communicator, indexed by communicator rank. Ids are
/// opaque labels; only equality matters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hierarchy {
    pub host: Vec<u32>,
    pub site: Vec<u32>,
}

/// One rank's groups, which a hierarchical schedule is built from. Every list is ordered by
/// communicator rank, and a group's leader is its lowest rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Levels {
    /// Ranks on my host (same site and host id).
    pub host_group: Vec<usize>,
    /// Host leaders of my site (only meaningful if I lead my host).
    pub site_group: Vec<usize>,
    /// Site leaders, in order of their lowest rank.
    pub site_roots: Vec<usize>,
}

impl Hierarchy {
    pub fn new(host: Vec<u32>, site: Vec<u32>) -> Result<Hierarchy> {
        if host.len() != site.len() {
            return Err(CollError::BadHierarchy {
                expected: host.len(),
                got: site.len(),
            });
        }
        Ok(Hierarchy { host, site })
    }

    /// Everyone on one host of one site.
    pub fn flat(n: usize) -> Hierarchy {
        Hierarchy {
            host: vec![0; n],
            site: vec![0; n],
        }
    }

    pub fn len(&self) -> usize {
        self.host.len()
    }

    pub fn is_empty(&self) -> bool {
        self.host.is_empty()
    }

    /// The same hierarchy restricted to `members` (old ranks, in new rank order).
    pub fn subset(&self, members: &[usize]) -> Hierarchy {
        Hierarchy {
            host: members.iter().map(|&r| self.host[r]).collect(),
            site: members.iter().map(|&r| self.site[r]).collect(),
        }
    }

    /// True if there is more than one host or site, i.e. the hierarchy can change how a
    /// collective should run.
    pub fn is_nontrivial(&self) -> bool {
        let same = |v: &[u32]| v.windows(2).all(|w| w[0] == w[1]);
        !(same(&self.host) && same(&self.site))
    }

    pub fn sites(&self) -> usize {
        let mut s = self.site.clone();
        s.sort_unstable();
        s.dedup();
        s.len()
    }

    pub fn levels(&self, me: usize) -> Levels {
        let n = self.len();
        let host_group: Vec<usize> = (0..n)
            .filter(|&r| self.site[r] == self.site[me] && self.host[r] == self.host[me])
            .collect();
        let is_host_leader =
            |r: usize| (0..r).all(|q| self.site[q] != self.site[r] || self.host[q] != self.host[r]);
        let site_group: Vec<usize> = (0..n)
            .filter(|&r| self.site[r] == self.site[me] && is_host_leader(r))
            .collect();
        let site_roots: Vec<usize> = (0..n)
            .filter(|&r| (0..r).all(|q| self.site[q] != self.site[r]))
            .collect();
        Levels {
            host_group,
            site_group,
            site_roots,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_pick_lowest_ranks_as_leaders() {
        // ranks: 0 1 2 3 4 5 ; sites A A B A B B ; hosts 0 1 0 0 0 1
        let h = Hierarchy::new(vec![0, 1, 0, 0, 0, 1], vec![0, 0, 1, 0, 1, 1]).unwrap();
        let l = h.levels(3);
        assert_eq!(l.host_group, vec![0, 3]);
        assert_eq!(l.site_group, vec![0, 1]);
        assert_eq!(l.site_roots, vec![0, 2]);
        let l = h.levels(4);
        assert_eq!(l.host_group, vec![2, 4]);
        assert_eq!(l.site_group, vec![2, 5]);
        assert!(h.is_nontrivial());
        assert!(!Hierarchy::flat(4).is_nontrivial());
        assert!(Hierarchy::new(vec![0], vec![]).is_err());
    }
}
