//! The fingerprint index shared by both caches: optimistic fingerprint → where the record is.
//!
//! One global hash table rather than the seed's table per container: a lookup is one
//! probe however many containers there are, and "a later segment replaces an earlier
//! one" is a plain overwrite. A slot holds the segment's *full* 64-bit fingerprint and its
//! location (container or block number in the high half, byte offset in the low half);
//! it is found by the full fingerprint cut to the cache's width. Keeping the full one
//! costs nothing (a key takes 64 bits anyway) and tells a repeated insert of the same
//! segment, which is then not written again, from a colliding one, which replaces it.
//!
//! A SwissTable slot is 16 bytes plus one control byte, at a load between 7/16 and 7/8:
//! 19.4 to 39 bytes per segment, about 26 on average over a table's growth
//! ([`Index::bytes`] measures it). The seed packed 64-bit entries (8 bytes) by giving up
//! probing: a colliding write went to another container, and a lookup probed them all.
//!
//! Entries of evicted containers are not removed at once (that would need a list of
//! keys per container, 8 more bytes per segment, or a scan per eviction); they are found
//! stale on lookup, and swept in one pass once they reach a quarter of the index.

use hashbrown::HashTable;

use crate::fp::FpBits;

/// A record's place: a container (or block) number and a byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Loc(u64);

impl Loc {
    pub fn new(unit: u32, offset: u32) -> Loc {
        Loc((u64::from(unit) << 32) | u64::from(offset))
    }

    pub fn unit(self) -> u32 {
        (self.0 >> 32) as u32
    }

    pub fn offset(self) -> u32 {
        self.0 as u32
    }
}

/// One indexed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub full: u64,
    pub loc: Loc,
}

#[derive(Debug)]
pub(crate) struct Index {
    table: HashTable<Slot>,
    mask: u64,
}

/// Table hash of a truncated fingerprint. Short test fingerprints (12 bits) leave the
/// high bits, which SwissTable uses for its control bytes, empty: mix them in.
fn hash(key: u64) -> u64 {
    let x = (key ^ (key >> 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

impl Index {
    pub fn new(bits: FpBits) -> Index {
        Index {
            table: HashTable::new(),
            mask: bits.mask(),
        }
    }

    /// The slot for truncated fingerprint `key`.
    pub fn get(&self, key: u64) -> Option<Slot> {
        let mask = self.mask;
        self.table
            .find(hash(key), |s| s.full & mask == key)
            .copied()
    }

    /// Points `full`'s truncated fingerprint at `loc`; returns the slot it replaced.
    pub fn insert(&mut self, full: u64, loc: Loc) -> Option<Slot> {
        let (mask, key) = (self.mask, full & self.mask);
        let new = Slot { full, loc };
        let h = hash(key);
        if let Some(s) = self.table.find_mut(h, |s| s.full & mask == key) {
            return Some(std::mem::replace(s, new));
        }
        self.table.insert_unique(h, new, |s| hash(s.full & mask));
        None
    }

    pub fn remove(&mut self, key: u64) -> Option<Slot> {
        let mask = self.mask;
        let e = self.table.find_entry(hash(key), |s| s.full & mask == key);
        e.ok().map(|e| e.remove().0)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&Slot) -> bool) {
        self.table.retain(|s| keep(s));
        let mask = self.mask;
        self.table.shrink_to_fit(|s| hash(s.full & mask));
    }

    /// Truncated fingerprints of every entry.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.table.iter().map(|s| s.full & self.mask)
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Bytes the table occupies (slots plus control bytes).
    pub fn bytes(&self) -> u64 {
        let cap = self.table.capacity() as u64;
        if cap == 0 {
            return 0;
        }
        let buckets = if cap < 8 {
            (cap + 1).next_power_of_two()
        } else {
            (cap * 8 / 7).next_power_of_two()
        };
        buckets * (std::mem::size_of::<Slot>() as u64 + 1)
    }
}

/// Whether a sweep of stale entries is due.
pub(crate) fn sweep_due(stale: u64, entries: usize) -> bool {
    stale >= 1024 && stale * 4 >= entries as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loc_packs_both_halves() {
        let l = Loc::new(0xdead_beef, 0x1234_5678);
        assert_eq!((l.unit(), l.offset()), (0xdead_beef, 0x1234_5678));
    }

    #[test]
    fn keyed_by_truncated_fingerprint() {
        let mut ix = Index::new(FpBits::new(12).unwrap());
        assert_eq!(ix.insert(0x1_0abc, Loc::new(1, 1)), None);
        let old = ix.insert(0x2_0abc, Loc::new(2, 2)).unwrap();
        assert_eq!(old.full, 0x1_0abc);
        assert_eq!(ix.get(0xabc).unwrap().full, 0x2_0abc);
        assert_eq!(ix.len(), 1);
        assert_eq!(ix.remove(0xabc).unwrap().loc, Loc::new(2, 2));
        assert_eq!(ix.get(0xabc), None);
    }

    #[test]
    fn bytes_per_entry_is_small() {
        let mut ix = Index::new(FpBits::DEFAULT);
        for k in 0..100_000u64 {
            ix.insert(k.wrapping_mul(0x2545_f491_4f6c_dd1d), Loc::new(0, 0));
        }
        assert_eq!(ix.len(), 100_000);
        let per = ix.bytes() as f64 / 100_000.0;
        assert!((19.0..40.0).contains(&per), "{per} bytes per entry");
        ix.retain(|s| s.full % 2 == 0);
        assert!(ix.len() < 60_000);
    }
}
