//! libFuzzer entry for `cargo fuzz run trace_decode`; the checks live in `vargr_fuzz::trace_decode`,
//! which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::trace_decode::run(data));
