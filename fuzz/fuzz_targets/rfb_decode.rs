//! libFuzzer entry for `cargo fuzz run rfb_decode`; the checks live in `vargr_fuzz::rfb_decode`,
//! which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::rfb_decode::run(data));
