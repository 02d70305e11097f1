//! libFuzzer entry for `cargo fuzz run vnc_proxy`; the checks live in `vargr_fuzz::vnc_proxy`,
//! which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::vnc_proxy::run(data));
