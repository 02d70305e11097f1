//! Arbitrary bytes through the frame decoder and, for Data frames, the payload decoder.
//! Nothing may panic, whatever decodes must re-encode to an equal packet, and the codec
//! stage's look at a payload's dominant array (`array_span`) stays inside the payload.

use bytes::{Bytes, BytesMut};
use vargr_wire::{decode_frame, FrameKind, Packet};

const MAX_FRAME: usize = 1 << 20;

fn check_payload(stream: u32, tag: i32, payload: &Bytes) {
    if let Some((elem, r)) = vargr_wire::array_span(payload) {
        assert!(r.start <= r.end && r.end <= payload.len());
        assert_eq!(r.len() % elem.size().expect("numeric"), 0);
    }
    let Ok(p) = Packet::decode_payload(stream, tag, payload) else {
        return;
    };
    let mut out = BytesMut::new();
    p.encode_payload(&mut out);
    assert_eq!(out.len(), p.encoded_len());
    let wire = out.freeze();
    let q = Packet::decode_payload(stream, tag, &wire).expect("re-encoded packet decodes");
    assert!(
        q.bitwise_eq(&p),
        "round trip changed the packet:\n{p:?}\n{q:?}"
    );
    // Encoding is canonical: a second trip gives the same bytes.
    let mut again = BytesMut::new();
    q.encode_payload(&mut again);
    assert_eq!(again.freeze(), wire);
}

pub fn run(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = decode_frame(&mut buf, MAX_FRAME) {
        if frame.kind == FrameKind::Data {
            check_payload(frame.stream, frame.tag, &frame.payload);
        }
    }
    // The same bytes as a bare payload reach the value decoders without a valid header.
    check_payload(0, 0, &Bytes::copy_from_slice(data));
}
