//! libFuzzer entry for `cargo fuzz run dedup_layout`; the checks live in `vargr_fuzz::dedup_layout`,
//! which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::dedup_layout::run(data));
