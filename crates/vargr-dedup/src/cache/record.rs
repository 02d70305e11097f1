//! The on-disk format of a container: a header, then records back to back.
//!
//! ```text
//! header (32 bytes): magic "vargrSC\0" | version u16 | fp bits u8 | 0u8 | seq u64 |
//!                    start position u64 | checksum u32     (integers little-endian)
//! record:            len u32 | full fp u64 | payload (len bytes) | checksum u32
//! ```
//!
//! Magic and version stay where they are in every future version. Both checksums are
//! the low 32 bits of XXH3-64 over the bytes before them. The record's
//! checksum covers its length field too, so a damaged length cannot pass for a good
//! record. Records carry the full 64-bit fingerprint so a cache can be reopened at another
//! fingerprint width. The start position is the number of bytes the cache had written
//! over its whole life when this container began; hit ages are measured against it.

use xxhash_rust::xxh3::xxh3_64;

pub(crate) const MAGIC: [u8; 8] = *b"vargrSC\0";
pub(crate) const VERSION: u16 = 1;
pub(crate) const HEADER_LEN: usize = 32;
/// Length field and full fingerprint.
pub(crate) const REC_HEAD: usize = 12;
/// Bytes a record adds to its payload.
pub(crate) const REC_OVERHEAD: usize = REC_HEAD + 4;

pub(crate) fn checksum(bytes: &[u8]) -> u32 {
    xxh3_64(bytes) as u32
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub bits: u8,
    pub seq: u64,
    pub start: u64,
}

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderFault {
    Magic,
    Checksum,
    /// Written by a newer vargr: leave it alone.
    Version(u16),
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(&MAGIC);
        h[8..10].copy_from_slice(&VERSION.to_le_bytes());
        h[10] = self.bits;
        h[12..20].copy_from_slice(&self.seq.to_le_bytes());
        h[20..28].copy_from_slice(&self.start.to_le_bytes());
        let c = checksum(&h[..28]);
        h[28..].copy_from_slice(&c.to_le_bytes());
        h
    }

    pub fn decode(h: &[u8; HEADER_LEN]) -> Result<Header, HeaderFault> {
        if h[..8] != MAGIC {
            return Err(HeaderFault::Magic);
        }
        // Version before checksum: a newer format may checksum differently, and must
        // not be taken for damage and removed.
        let version = u16::from_le_bytes([h[8], h[9]]);
        if version != VERSION {
            return Err(HeaderFault::Version(version));
        }
        if checksum(&h[..28]) != u32_at(h, 28) {
            return Err(HeaderFault::Checksum);
        }
        Ok(Header {
            bits: h[10],
            seq: u64_at(h, 12),
            start: u64_at(h, 20),
        })
    }
}

/// Appends one record to `buf`.
pub(crate) fn append(buf: &mut Vec<u8>, full: u64, payload: &[u8]) {
    let start = buf.len();
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&full.to_le_bytes());
    buf.extend_from_slice(payload);
    let c = checksum(&buf[start..]);
    buf.extend_from_slice(&c.to_le_bytes());
}

/// The payload length a record head announces.
pub(crate) fn head_len(head: &[u8]) -> u32 {
    u32_at(head, 0)
}

/// The full fingerprint of `rec` (one whole record) if its checksum holds.
pub(crate) fn verify(rec: &[u8]) -> Option<u64> {
    if rec.len() < REC_OVERHEAD || head_len(rec) as usize != rec.len() - REC_OVERHEAD {
        return None;
    }
    let body = rec.len() - 4;
    (checksum(&rec[..body]) == u32_at(rec, body)).then(|| u64_at(rec, 4))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_faults() {
        let h = Header {
            bits: 40,
            seq: 7,
            start: 123_456,
        };
        let mut e = h.encode();
        assert_eq!(Header::decode(&e), Ok(h));
        e[13] ^= 1;
        assert_eq!(Header::decode(&e), Err(HeaderFault::Checksum));
        e[0] = b'X';
        assert_eq!(Header::decode(&e), Err(HeaderFault::Magic));
    }

    #[test]
    fn record_checksum_covers_every_byte() {
        let mut buf = Vec::new();
        append(&mut buf, 0xfeed, b"payload");
        assert_eq!(buf.len(), 7 + REC_OVERHEAD);
        assert_eq!(verify(&buf), Some(0xfeed));
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert_eq!(verify(&bad), None, "flip at byte {i} passed");
        }
    }
}
