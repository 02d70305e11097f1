//! libFuzzer entry for `cargo fuzz run trace_report`; the checks live in
//! `vargr_fuzz::trace_report`, which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::trace_report::run(data));
