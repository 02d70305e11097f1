//! libFuzzer entry for `cargo fuzz run link_seal`; the checks live in `vargr_fuzz::link_seal`,
//! which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::link_seal::run(data));
