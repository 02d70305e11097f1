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
    MPI_Bsend => vargr_w_MPI_Bsend,
    MPI_Rsend => vargr_w_MPI_Rsend,
    MPI_Ibsend => vargr_w_MPI_Ibsend,
    MPI_Issend => vargr_w_MPI_Issend,
    MPI_Irsend => vargr_w_MPI_Irsend,
    MPI_Send_init => vargr_w_MPI_Send_init,
    MPI_Bsend_init => vargr_w_MPI_Bsend_init,
    MPI_Ssend_init => vargr_w_MPI_Ssend_init,
    MPI_Rsend_init => vargr_w_MPI_Rsend_init,
    MPI_Recv_init => vargr_w_MPI_Recv_init,
    MPI_Start => vargr_w_MPI_Start,
    MPI_Startall => vargr_w_MPI_Startall,
    MPI_Request_free => vargr_w_MPI_Request_free,
    MPI_Sendrecv_replace => vargr_w_MPI_Sendrecv_replace,
    MPI_Waitsome => vargr_w_MPI_Waitsome,
    MPI_Testany => vargr_w_MPI_Testany,
    MPI_Testsome => vargr_w_MPI_Testsome,
    MPI_Mprobe => vargr_w_MPI_Mprobe,
    MPI_Improbe => vargr_w_MPI_Improbe,
    MPI_Mrecv => vargr_w_MPI_Mrecv,
    MPI_Imrecv => vargr_w_MPI_Imrecv,
}
