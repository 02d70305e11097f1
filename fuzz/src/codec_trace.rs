//! Codec sample traces come from crashed runs and other machines: reading arbitrary
//! bytes must return an error, never panic or allocate without bound.

pub fn run(data: &[u8]) {
    let _ = vargr_codec::guided::decode_trace(data, "fuzz");
}
