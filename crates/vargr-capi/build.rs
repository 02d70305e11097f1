//! Compiles the C shim (`c/shim.c`): the variadic entry points stable Rust cannot define.
//! It includes the checked-in `include/vargr.h` for the types it shares with Rust.

fn main() {
    // Programs linked against libvargr.so record this name, however they found it.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libvargr.so");
    println!("cargo:rerun-if-changed=c/shim.c");
    println!("cargo:rerun-if-changed=include/vargr.h");
    cc::Build::new()
        .file("c/shim.c")
        .include("include")
        .std("c99")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("vargr_shim");
}
