//! libFuzzer entry for `cargo fuzz run tbon_monitor`; the checks live in `vargr_fuzz::tbon_monitor`,
//! which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::tbon_monitor::run(data));
