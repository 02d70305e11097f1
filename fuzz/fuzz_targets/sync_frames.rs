//! libFuzzer entry for `cargo fuzz run sync_frames`; the checks live in `vargr_fuzz::sync_frames`,
//! which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::sync_frames::run(data));
