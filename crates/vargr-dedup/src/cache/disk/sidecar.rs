//! The record index of a sealed container, kept beside it (`<container>.idx`), so that
//! opening a cache reads a few bytes per segment instead of every segment.
//!
//! Written once, when a container is sealed (the cache rolls to the next one), through a
//! rename. It is only a shortcut: every record is still verified when it is read, and an
//! index that is missing, damaged, or promises more bytes than the container holds
//! (torn) is ignored and the container scanned as before.
//!
//! ```text
//! magic "vargrSI\0" | version u16 | 0u16 | seq u64 | container length u64 | count u64 |
//! count × (full fp u64 | offset u32 | payload length u32) | checksum u32
//! ```

use std::path::{Path, PathBuf};

use crate::cache::record::checksum;

const MAGIC: [u8; 8] = *b"vargrSI\0";
const VERSION: u16 = 1;
const HEAD: usize = 36;
const ENTRY: usize = 16;

/// One record of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub full: u64,
    pub off: u32,
    pub len: u32,
}

/// A sealed container's records, in the order they were written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sidecar {
    pub seq: u64,
    /// The container's length when it was sealed.
    pub container_len: u64,
    pub entries: Vec<Entry>,
}

pub(crate) fn path_for(container: &Path) -> PathBuf {
    let mut p = container.as_os_str().to_owned();
    p.push(".idx");
    PathBuf::from(p)
}

impl Sidecar {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD + self.entries.len() * ENTRY + 4);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.container_len.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.full.to_le_bytes());
            out.extend_from_slice(&e.off.to_le_bytes());
            out.extend_from_slice(&e.len.to_le_bytes());
        }
        let c = checksum(&out);
        out.extend_from_slice(&c.to_le_bytes());
        out
    }

    /// `None` for anything but an intact index of a known version.
    pub fn decode(b: &[u8]) -> Option<Sidecar> {
        let (body, sum) = b.split_at_checked(b.len().checked_sub(4)?)?;
        if checksum(body).to_le_bytes() != sum
            || body.get(..8)? != MAGIC
            || body.get(8..10)? != VERSION.to_le_bytes()
        {
            return None;
        }
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?))
        };
        let (seq, container_len, count) = (u64_at(12)?, u64_at(20)?, u64_at(28)?);
        let entries = body.get(HEAD..)?;
        if entries.len() as u64 != count.checked_mul(ENTRY as u64)? {
            return None;
        }
        let entries = entries
            .chunks_exact(ENTRY)
            .map(|e| Entry {
                full: u64::from_le_bytes(e[..8].try_into().expect("8 bytes")),
                off: u32::from_le_bytes(e[8..12].try_into().expect("4 bytes")),
                len: u32::from_le_bytes(e[12..].try_into().expect("4 bytes")),
            })
            .collect();
        Some(Sidecar {
            seq,
            container_len,
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_damage() {
        let s = Sidecar {
            seq: 7,
            container_len: 4096,
            entries: vec![
                Entry {
                    full: 1,
                    off: 32,
                    len: 100,
                },
                Entry {
                    full: 2,
                    off: 148,
                    len: 50,
                },
            ],
        };
        let b = s.encode();
        assert_eq!(Sidecar::decode(&b), Some(s));
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 1;
            assert_eq!(Sidecar::decode(&d), None, "byte {i}");
        }
        assert_eq!(Sidecar::decode(&b[..b.len() - 1]), None);
        assert_eq!(Sidecar::decode(&[]), None);
    }
}
