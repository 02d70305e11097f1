//! libFuzzer entry for `cargo fuzz run monitor_reply`; the checks live in `vargr_fuzz::monitor_reply`,
//! which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::monitor_reply::run(data));
