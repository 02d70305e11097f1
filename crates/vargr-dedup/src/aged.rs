//! A map of fingerprints bounded in entries, the oldest insertions out first: what the
//! sender's similarity index and both sides' stream models keep, and save in that order.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::fp::Fingerprint;

#[derive(Debug, Clone)]
pub(crate) struct AgedMap {
    /// Key → value, with the generation of the insertion (to tell live `order` entries
    /// from overwritten ones).
    map: FxHashMap<u64, (Fingerprint, u32)>,
    /// Keys oldest first, with their generation.
    order: VecDeque<(u64, u32)>,
    generation: u32,
    capacity: usize,
}

impl AgedMap {
    pub fn new(capacity: usize) -> AgedMap {
        AgedMap {
            map: FxHashMap::default(),
            order: VecDeque::new(),
            generation: 0,
            capacity,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn get(&self, key: u64) -> Option<Fingerprint> {
        self.map.get(&key).map(|&(f, _)| f)
    }

    /// Inserts (or renews) `key`; call [`AgedMap::evict`] to enforce the bound.
    pub fn insert(&mut self, key: u64, value: Fingerprint) {
        self.generation = self.generation.wrapping_add(1);
        let g = self.generation;
        self.map.insert(key, (value, g));
        self.order.push_back((key, g));
    }

    /// Drops the oldest entries beyond the capacity (and stale order entries).
    pub fn evict(&mut self) {
        let cap = self.capacity;
        while self.map.len() > cap || self.order.len() > 4 * cap.max(1) {
            let Some((k, g)) = self.order.pop_front() else {
                break;
            };
            if self.map.get(&k).is_some_and(|&(_, have)| have == g) {
                self.map.remove(&k);
            }
        }
    }

    /// The live entries, oldest first.
    pub fn live(&self) -> impl Iterator<Item = (u64, Fingerprint)> + '_ {
        self.order
            .iter()
            .filter_map(|&(k, g)| match self.map.get(&k) {
                Some(&(f, have)) if have == g => Some((k, f)),
                _ => None,
            })
    }
}
