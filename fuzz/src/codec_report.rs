//! Codec reports arrive from the peer's stage: arbitrary bytes must give records or an
//! error, never a panic or an allocation past the record limit.

pub fn run(data: &[u8]) {
    if let Ok(records) = vargr_codec::report::decode_reports(data) {
        assert!(records.len() <= vargr_codec::report::MAX_RECORDS);
        let mut again = Vec::new();
        vargr_codec::report::encode_reports(&records, &mut again);
        assert_eq!(again, data);
    }
}
