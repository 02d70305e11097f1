//! Decompression times a receiving codec stage reports back to the sending one.
//!
//! Only the receiver can time a decompression, and the sender's cost model needs it
//! (`Td` in the seed's Eq. 4.2): without reports the sender falls back on its own
//! machine's speed, which is wrong when the receiver is slower or busier. A report is
//! a link-local frame: the peer's codec stage consumes it, nothing above sees it.
//!
//! ```text
//! per record (18 bytes): codec id u8, element kind u8,
//!                        original bytes u64 LE, nanoseconds u64 LE
//! ```

use crate::{CodecError, CodecId, ElemKind};

/// Bytes of one record.
pub const RECORD_LEN: usize = 18;
/// Records in one report at most (one per codec and element kind is all a stage sends).
pub const MAX_RECORDS: usize = 64;

/// Decompression work of one kind since the last report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeReport {
    pub codec: CodecId,
    pub elem: ElemKind,
    /// Original bytes restored.
    pub bytes: u64,
    /// Time spent restoring them.
    pub nanos: u64,
}

/// Appends the records to `out`.
pub fn encode_reports(records: &[DecodeReport], out: &mut Vec<u8>) {
    for r in records.iter().take(MAX_RECORDS) {
        out.push(r.codec.as_u8());
        out.push(r.elem.as_u8());
        out.extend_from_slice(&r.bytes.to_le_bytes());
        out.extend_from_slice(&r.nanos.to_le_bytes());
    }
}

/// Reads a report's records; a payload that is not whole records, too long, or names
/// an unknown codec or element kind is an error, and nothing is allocated beyond
/// [`MAX_RECORDS`] records.
pub fn decode_reports(payload: &[u8]) -> Result<Vec<DecodeReport>, CodecError> {
    if payload.len() % RECORD_LEN != 0 {
        return Err(CodecError::BadReport(format!(
            "{} bytes is not a whole number of {RECORD_LEN}-byte records",
            payload.len()
        )));
    }
    let n = payload.len() / RECORD_LEN;
    if n > MAX_RECORDS {
        return Err(CodecError::BadReport(format!(
            "{n} records, at most {MAX_RECORDS} allowed"
        )));
    }
    payload
        .chunks_exact(RECORD_LEN)
        .map(|r| {
            let word = |at: usize| {
                u64::from_le_bytes(r[at..at + 8].try_into().expect("8 bytes of a record"))
            };
            Ok(DecodeReport {
                codec: CodecId::from_u8(r[0])?,
                elem: ElemKind::from_u8(r[1]).ok_or(CodecError::UnknownElem(r[1]))?,
                bytes: word(2),
                nanos: word(10),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip_and_bad_ones_are_errors() {
        let records = vec![
            DecodeReport {
                codec: CodecId::Lz4,
                elem: ElemKind::F64,
                bytes: 1 << 20,
                nanos: 400_000,
            },
            DecodeReport {
                codec: CodecId::Zstd,
                elem: ElemKind::BYTES,
                bytes: 5,
                nanos: u64::MAX,
            },
        ];
        let mut b = Vec::new();
        encode_reports(&records, &mut b);
        assert_eq!(b.len(), 2 * RECORD_LEN);
        assert_eq!(decode_reports(&b).unwrap(), records);
        assert!(decode_reports(&b[..RECORD_LEN + 1]).is_err());
        let mut bad = b.clone();
        bad[0] = 0xEE;
        assert!(matches!(
            decode_reports(&bad),
            Err(CodecError::UnknownCodec(0xEE))
        ));
        let long = vec![0u8; RECORD_LEN * (MAX_RECORDS + 1)];
        assert!(matches!(
            decode_reports(&long),
            Err(CodecError::BadReport(_))
        ));
        assert_eq!(decode_reports(&[]).unwrap(), vec![]);
    }
}
