//! The guided strategy (CoMPI's GS, seed 002 §4.7): learn offline, apply for free.
//!
//! A first run records what its links carried (`vargr run --codec-samples DIR`): for every
//! kind of message — the same frame kind, element type, stream, tag and length, the
//! seed's "message characteristics" — the first few payloads as samples. `vargr codec
//! plan DIR` compresses every sample with every codec offline, prices each on the link
//! the plan is for, and writes one rule per kind of message: the codec with the highest
//! speedup, or none when nothing beats sending raw. Later runs with `--codec
//! guided:PLAN` look the rule up by the message's key and pay no study at all. Keys are
//! hashes of the characteristics, not of the order, so messages that arrive in another
//! order still find their rules.
//!
//! Trace files come from crashed runs and other machines, so reading is bounded and
//! damage is an error naming the file and offset.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Codec, CodecError, ElemKind};

const MAGIC: &[u8; 6] = b"VCTR1\n";
/// Largest sample kept per message (and accepted when reading).
pub const MAX_SAMPLE: usize = 4 << 20;

/// What identifies a kind of message: the characteristics the plan is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageKey {
    pub kind: u8,
    pub elem: ElemKind,
    pub stream: u32,
    pub tag: i32,
    pub len: u32,
}

impl MessageKey {
    /// A stable 64-bit hash of the characteristics (FNV-1a: the same on every machine
    /// and every build, unlike the standard library's hasher).
    pub fn id(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let elem = ElemKind::ALL
            .iter()
            .position(|&e| e == self.elem)
            .unwrap_or(0) as u8;
        let mut eat = |b: &[u8]| {
            for &x in b {
                h ^= u64::from(x);
                h = h.wrapping_mul(0x100_0000_01b3);
            }
        };
        eat(&[self.kind, elem]);
        eat(&self.stream.to_le_bytes());
        eat(&self.tag.to_le_bytes());
        eat(&self.len.to_le_bytes());
        h
    }
}

/// One recorded sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub key: MessageKey,
    pub payload: Vec<u8>,
}

/// Appends one sample to a trace (the file starts with [`trace_header`]).
pub fn encode_sample(s: &Sample, out: &mut Vec<u8>) {
    let elem = ElemKind::ALL
        .iter()
        .position(|&e| e == s.key.elem)
        .unwrap_or(0) as u8;
    out.push(s.key.kind);
    out.push(elem);
    out.extend_from_slice(&s.key.stream.to_le_bytes());
    out.extend_from_slice(&s.key.tag.to_le_bytes());
    out.extend_from_slice(&s.key.len.to_le_bytes());
    out.extend_from_slice(&(s.payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&s.payload);
}

/// The bytes a trace file starts with.
pub fn trace_header() -> &'static [u8] {
    MAGIC
}

/// Parses a whole trace file; `name` names it in errors.
pub fn decode_trace(b: &[u8], name: &str) -> Result<Vec<Sample>, CodecError> {
    let bad = |at: usize, what: &str| {
        CodecError::InvalidParam(format!("codec trace {name}, byte {at}: {what}"))
    };
    if !b.starts_with(MAGIC) {
        return Err(bad(0, "not a vargr codec trace (no VCTR1 magic)"));
    }
    let mut at = MAGIC.len();
    let mut out = Vec::new();
    while at < b.len() {
        let head = b
            .get(at..at + 18)
            .ok_or_else(|| bad(at, "record cut inside its header"))?;
        let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        let elem = *ElemKind::ALL
            .get(usize::from(head[1]))
            .ok_or_else(|| bad(at + 1, "unknown element type"))?;
        let key = MessageKey {
            kind: head[0],
            elem,
            stream: u32_at(2),
            tag: u32_at(6) as i32,
            len: u32_at(10),
        };
        let n = u32_at(14) as usize;
        if n > MAX_SAMPLE {
            return Err(bad(at + 14, &format!("sample of {n} bytes is too large")));
        }
        at += 18;
        let payload = b
            .get(at..at + n)
            .ok_or_else(|| bad(at, "sample cut short"))?
            .to_vec();
        at += n;
        out.push(Sample { key, payload });
    }
    Ok(out)
}

/// What a plan says about one kind of message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    /// The codec to use; `none` to send raw.
    pub codec: String,
    /// Predicted speedup over sending raw on the plan's link.
    pub speedup: f64,
    /// What the rule is for, for people reading the plan.
    pub elem: String,
    pub len: u32,
}

/// A decision rules file: one rule per message key (hex id).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The link the plan was priced for.
    pub latency_s: f64,
    pub bytes_per_s: f64,
    pub rules: BTreeMap<String, Rule>,
}

impl Plan {
    pub fn load(path: &Path) -> Result<Plan, CodecError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CodecError::InvalidParam(format!("codec plan {}: {e}", path.display())))?;
        serde_json::from_str(&text)
            .map_err(|e| CodecError::InvalidParam(format!("codec plan {}: {e}", path.display())))
    }

    /// The codec for `key`: its rule's, or `None` (raw) for a message the plan never
    /// saw.
    pub fn codec_for(&self, key: &MessageKey) -> Codec {
        self.rules
            .get(&format!("{:016x}", key.id()))
            .and_then(|r| r.codec.parse().ok())
            .unwrap_or(Codec::None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(len: u32) -> MessageKey {
        MessageKey {
            kind: 22,
            elem: ElemKind::F64,
            stream: 3,
            tag: 1,
            len,
        }
    }

    #[test]
    fn traces_round_trip_and_damage_is_named() {
        let mut b = trace_header().to_vec();
        let s = Sample {
            key: key(24),
            payload: vec![1, 2, 3],
        };
        encode_sample(&s, &mut b);
        encode_sample(&s, &mut b);
        assert_eq!(decode_trace(&b, "t").unwrap(), vec![s.clone(), s]);
        let e = decode_trace(&b[..b.len() - 1], "t.ctr")
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.ctr") && e.contains("cut short"), "{e}");
        assert!(decode_trace(b"nope", "x").is_err());
    }

    #[test]
    fn keys_are_stable_and_plans_look_them_up() {
        assert_eq!(key(8).id(), key(8).id());
        assert_ne!(key(8).id(), key(16).id());
        let mut p = Plan::default();
        p.rules.insert(
            format!("{:016x}", key(8).id()),
            Rule {
                codec: "fpc:16".into(),
                speedup: 2.0,
                elem: "f64".into(),
                len: 8,
            },
        );
        assert_eq!(p.codec_for(&key(8)), "fpc:16".parse().unwrap());
        assert_eq!(p.codec_for(&key(16)), Codec::None);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_trace(&b, "x");
            let mut with_magic = MAGIC.to_vec();
            with_magic.extend_from_slice(&b);
            let _ = decode_trace(&with_magic, "x");
        }
    }
}
