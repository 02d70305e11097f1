//! Monitor replies arrive from every agent of a job over the monitor plane: decoding
//! arbitrary bytes must return an error, never panic or allocate without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = vargr_trace::scope::Reply::decode(data, "fuzz");
});
