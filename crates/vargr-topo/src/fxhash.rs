//! A small, fast hasher for the name tables of big topologies.
//!
//! Checking a million `host:rank` names for duplicates with std's SipHash
//! dominated parse and validate times. Inputs here are configuration files
//! chosen by the tool's user, not adversarial network data, so the
//! multiply-rotate hash used inside rustc ("FxHash") is good enough and
//! several times faster. No dependency for twenty lines.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FxHash: `hash = (hash.rotl(5) ^ word) * K` per 64-bit word.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    hash: u64,
}

const K: u64 = 0x517c_c1b7_2722_0a95;

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(buf));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.hash
    }
}

pub(crate) type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinguishes_names() {
        let mut s: FxHashMap<(&str, u32), ()> = FxHashMap::default();
        assert!(s.insert(("localhost", 1), ()).is_none());
        assert!(s.insert(("localhost", 2), ()).is_none());
        assert!(s.insert(("localhosu", 1), ()).is_none());
        assert!(s
            .insert(("a-much-longer-host-name.example", 1), ())
            .is_none());
        assert!(s.insert(("localhost", 1), ()).is_some());
    }
}
