//! Arbitrary bytes into `vargr sync`'s preamble, reply frames and control messages
//! (the JSON inside them) and the path check of manifest entries, and into `vargr
//! proxy`'s link framing with the codec frames it carries: errors, never panics or
//! allocations beyond the frame limits.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    vargr_sync::fuzzing::decode_all(data);
    let mut rest = data;
    while let Ok(Some((_, body))) = vargr_sync::split_frame(rest, 1 << 20) {
        let _ = vargr_codec::decode_to_vec(body, 1 << 20);
        rest = &rest[5 + body.len()..];
    }
});
