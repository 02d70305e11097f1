//! Trace files arrive from other processes (monitor pulls over the mesh) and from disk:
//! decoding arbitrary bytes must return an error, never panic or allocate without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = vargr_trace::TraceFile::decode(data, std::path::Path::new("fuzz"));
});
