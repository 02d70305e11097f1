//! Arbitrary bytes through the codec frame decoder, under a small length limit. Nothing
//! may panic, nothing may decode past the limit or to another length than the header
//! says, and whatever decodes must survive a re-encode with the same codec.

use vargr_codec::{decode, encode, Codec, CodecId, ElemKind, Header, Span};

const MAX_LEN: usize = 64 * 1024;

fn check(frame: &[u8]) {
    let mut out = Vec::new();
    let Ok(header) = decode(frame, MAX_LEN, &mut out) else {
        assert!(out.is_empty(), "a failed decode left output behind");
        return;
    };
    assert!(out.len() <= MAX_LEN);
    assert_eq!(out.len() as u64, header.original_len);
    // The first catalog codec with this id; encode sends raw where it does not fit.
    let codec = Codec::CATALOG
        .into_iter()
        .find(|c| c.id() == header.codec)
        .unwrap_or(Codec::None);
    let mut again = Vec::new();
    encode(codec, header.elem, &out, &mut again);
    let mut back = Vec::new();
    decode(&again, MAX_LEN, &mut back).expect("a re-encoded frame decodes");
    assert_eq!(back, out, "round trip through {codec} changed the data");
}

pub fn run(data: &[u8]) {
    check(data);
    // The same bytes behind a valid header, so that every codec's decoder sees them
    // without the fuzzer first having to find the magic byte.
    if let [c, e, l0, l1, payload @ ..] = data {
        let mut frame = Vec::with_capacity(payload.len() + 8);
        Header {
            codec: CodecId::ALL[usize::from(*c) % CodecId::ALL.len()],
            elem: ElemKind::ALL[usize::from(*e) % ElemKind::ALL.len()],
            original_len: u64::from(u16::from_le_bytes([*l0, *l1])),
            // Half the time a span, so the split layout's checks are reached too.
            span: (*e & 0x80 != 0).then(|| Span {
                start: u64::from(*l0 % 16),
                len: u64::from(u16::from_le_bytes([*l0, *l1])).saturating_sub(16),
            }),
        }
        .write(&mut frame);
        frame.extend_from_slice(payload);
        check(&frame);
    }
}
