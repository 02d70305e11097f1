//! libFuzzer entry for `cargo fuzz run monitor_gather`; the checks live in `vargr_fuzz::monitor_gather`,
//! which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::monitor_gather::run(data));
