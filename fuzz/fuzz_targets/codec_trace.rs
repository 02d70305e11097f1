//! libFuzzer entry for `cargo fuzz run codec_trace`; the checks live in `vargr_fuzz::codec_trace`,
//! which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::codec_trace::run(data));
