//! Codec sample traces come from crashed runs and other machines: reading arbitrary
//! bytes must return an error, never panic or allocate without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = vargr_codec::guided::decode_trace(data, "fuzz");
});
