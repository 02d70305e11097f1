//! Exports the C shim's functions (`c/shim.c`) from libvargr.
//!
//! A cdylib only exports the Rust functions it defines: symbols of C objects linked into
//! it stay hidden (rust-lang/rust#99411), and stable Rust cannot define a variadic
//! function itself. So each variadic entry point (and its `va_list` form) is a naked
//! Rust function holding one tail jump to the shim's hidden implementation: arguments,
//! registers and stack reach the C function untouched, and rustc exports the symbol.
//! Their prototypes are in the header's trailer (cbindgen does not see these
//! functions: they are made by a macro).

#[cfg(target_arch = "x86_64")]
macro_rules! tail_jump {
    ($shim:ident) => {
        core::arch::naked_asm!("jmp {}", sym $shim)
    };
}

#[cfg(target_arch = "aarch64")]
macro_rules! tail_jump {
    ($shim:ident) => {
        core::arch::naked_asm!("b {}", sym $shim)
    };
}

macro_rules! trampolines {
    ($($name:ident => $shim:ident),* $(,)?) => {
        extern "C" {
            // Declared without parameters: only the address is used.
            $(fn $shim();)*
        }
        $(
            #[no_mangle]
            #[unsafe(naked)]
            pub extern "C" fn $name() {
                tail_jump!($shim)
            }
        )*
    };
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("vargr-capi's variadic trampolines support x86_64 and aarch64 only");

trampolines! {
    vargr_stream_send => vargr_shim_stream_send,
    vargr_stream_vsend => vargr_shim_stream_vsend,
    vargr_backend_send => vargr_shim_backend_send,
    vargr_backend_vsend => vargr_shim_backend_vsend,
    vargr_backend_send_to => vargr_shim_backend_send_to,
    vargr_backend_vsend_to => vargr_shim_backend_vsend_to,
    vargr_packet_create => vargr_shim_packet_create,
    vargr_packet_vcreate => vargr_shim_packet_vcreate,
    vargr_packet_unpack => vargr_shim_packet_unpack,
    vargr_packet_vunpack => vargr_shim_packet_vunpack,
}
