//! libFuzzer entry for `cargo fuzz run mpi_frame`; the checks live in `vargr_fuzz::mpi_frame`,
//! which the stable runner (`fuzz-run`) drives too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vargr_fuzz::mpi_frame::run(data));
