//! Exports the C wrappers (`c/wrappers.c`) under their MPI names.
//!
//! A cdylib exports only the Rust functions it defines; symbols of C objects linked into
//! it stay hidden (rust-lang/rust#99411). So each wrapped `MPI_X` is a naked Rust
//! function holding one tail jump to `vargr_w_MPI_X`: registers and stack reach the C
//! function untouched, whatever the MPI's handle types are.

#[cfg(target_arch = "x86_64")]
macro_rules! tail_jump {
    ($target:ident) => {
        core::arch::naked_asm!("jmp {}", sym $target)
    };
}

#[cfg(target_arch = "aarch64")]
macro_rules! tail_jump {
    ($target:ident) => {
        core::arch::naked_asm!("b {}", sym $target)
    };
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("vargr-mpi's trampolines support x86_64 and aarch64 only");

macro_rules! trampolines {
    ($($name:ident => $wrapper:ident),* $(,)?) => {
        extern "C" {
            // Declared without parameters: only the address is used.
            $(fn $wrapper();)*
        }
        $(
            #[no_mangle]
            #[unsafe(naked)]
            pub extern "C" fn $name() {
                tail_jump!($wrapper)
            }
        )*
        /// The MPI functions this library wraps.
        pub const WRAPPED: &[&str] = &[$(stringify!($name)),*];
    };
}

trampolines! {
    MPI_Init => vargr_w_MPI_Init,
    MPI_Init_thread => vargr_w_MPI_Init_thread,
    MPI_Finalize => vargr_w_MPI_Finalize,
    MPI_Send => vargr_w_MPI_Send,
    MPI_Ssend => vargr_w_MPI_Ssend,
    MPI_Isend => vargr_w_MPI_Isend,
    MPI_Recv => vargr_w_MPI_Recv,
    MPI_Irecv => vargr_w_MPI_Irecv,
    MPI_Sendrecv => vargr_w_MPI_Sendrecv,
    MPI_Wait => vargr_w_MPI_Wait,
    MPI_Waitall => vargr_w_MPI_Waitall,
    MPI_Waitany => vargr_w_MPI_Waitany,
    MPI_Test => vargr_w_MPI_Test,
    MPI_Testall => vargr_w_MPI_Testall,
    MPI_Probe => vargr_w_MPI_Probe,
    MPI_Iprobe => vargr_w_MPI_Iprobe,
    MPI_Barrier => vargr_w_MPI_Barrier,
    MPI_Bcast => vargr_w_MPI_Bcast,
    MPI_Reduce => vargr_w_MPI_Reduce,
    MPI_Allreduce => vargr_w_MPI_Allreduce,
    MPI_Gather => vargr_w_MPI_Gather,
    MPI_Allgather => vargr_w_MPI_Allgather,
    MPI_Scatter => vargr_w_MPI_Scatter,
    MPI_Alltoall => vargr_w_MPI_Alltoall,
    MPI_Alltoallv => vargr_w_MPI_Alltoallv,
}
