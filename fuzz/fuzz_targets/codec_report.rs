//! libFuzzer entry for `cargo fuzz run codec_report`; the checks live in `vargr_fuzz::codec_report`,
//! which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::codec_report::run(data));
