//! libFuzzer entry for `cargo fuzz run tbon_clock`; the checks live in `vargr_fuzz::tbon_clock`,
//! which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::tbon_clock::run(data));
