//! libFuzzer entry for `cargo fuzz run dedup_protocol`; the checks live in `vargr_fuzz::dedup_protocol`,
//! which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::dedup_protocol::run(data));
