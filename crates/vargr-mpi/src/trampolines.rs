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
    MPI_Pcontrol => vargr_w_MPI_Pcontrol,
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
    MPI_Request_get_status => vargr_w_MPI_Request_get_status,
    MPI_Sendrecv_replace => vargr_w_MPI_Sendrecv_replace,
    MPI_Waitsome => vargr_w_MPI_Waitsome,
    MPI_Testany => vargr_w_MPI_Testany,
    MPI_Testsome => vargr_w_MPI_Testsome,
    MPI_Mprobe => vargr_w_MPI_Mprobe,
    MPI_Improbe => vargr_w_MPI_Improbe,
    MPI_Mrecv => vargr_w_MPI_Mrecv,
    MPI_Imrecv => vargr_w_MPI_Imrecv,
    MPI_Comm_dup => vargr_w_MPI_Comm_dup,
    MPI_Comm_dup_with_info => vargr_w_MPI_Comm_dup_with_info,
    MPI_Comm_split => vargr_w_MPI_Comm_split,
    MPI_Comm_split_type => vargr_w_MPI_Comm_split_type,
    MPI_Comm_create => vargr_w_MPI_Comm_create,
    MPI_Comm_create_group => vargr_w_MPI_Comm_create_group,
    MPI_Cart_create => vargr_w_MPI_Cart_create,
    MPI_Cart_sub => vargr_w_MPI_Cart_sub,
    MPI_Graph_create => vargr_w_MPI_Graph_create,
    MPI_Dist_graph_create_adjacent => vargr_w_MPI_Dist_graph_create_adjacent,
    MPI_Dist_graph_create => vargr_w_MPI_Dist_graph_create,
    MPI_Intercomm_create => vargr_w_MPI_Intercomm_create,
    MPI_Intercomm_merge => vargr_w_MPI_Intercomm_merge,
}

#[cfg(vargr_mpi_abi = "openmpi")]
macro_rules! fortran_trampolines {
    ($($wrapper:ident : $($name:ident),+ ;)*) => {
        extern "C" {
            $(fn $wrapper();)*
        }
        $($(
            #[no_mangle]
            #[unsafe(naked)]
            pub extern "C" fn $name() {
                tail_jump!($wrapper)
            }
        )+)*
        /// The Fortran entry points this library replaces (c/fortran.c).
        pub const WRAPPED_FORTRAN: &[&str] = &[$($(stringify!($name)),+),*];
    };
}

/// Open MPI's Fortran bindings call PMPI directly (c/fortran.c says why): each function
/// under the names Open MPI exports it by (mpif.h and `use mpi` with and without
/// underscores, upper case) and ompi_X_f, which `use mpi_f08` calls. MPICH's bindings
/// call the C functions, which need nothing more.
#[cfg(vargr_mpi_abi = "openmpi")]
pub mod fortran {
    fortran_trampolines! {
        vargr_f_init: mpi_init_, mpi_init__, mpi_init, MPI_INIT, ompi_init_f;
        vargr_f_init_thread: mpi_init_thread_, mpi_init_thread__, mpi_init_thread, MPI_INIT_THREAD, ompi_init_thread_f;
        vargr_f_finalize: mpi_finalize_, mpi_finalize__, mpi_finalize, MPI_FINALIZE, ompi_finalize_f;
        vargr_f_pcontrol: mpi_pcontrol_, mpi_pcontrol__, mpi_pcontrol, MPI_PCONTROL, ompi_pcontrol_f;
        vargr_f_send: mpi_send_, mpi_send__, mpi_send, MPI_SEND, ompi_send_f;
        vargr_f_ssend: mpi_ssend_, mpi_ssend__, mpi_ssend, MPI_SSEND, ompi_ssend_f;
        vargr_f_bsend: mpi_bsend_, mpi_bsend__, mpi_bsend, MPI_BSEND, ompi_bsend_f;
        vargr_f_rsend: mpi_rsend_, mpi_rsend__, mpi_rsend, MPI_RSEND, ompi_rsend_f;
        vargr_f_isend: mpi_isend_, mpi_isend__, mpi_isend, MPI_ISEND, ompi_isend_f;
        vargr_f_issend: mpi_issend_, mpi_issend__, mpi_issend, MPI_ISSEND, ompi_issend_f;
        vargr_f_ibsend: mpi_ibsend_, mpi_ibsend__, mpi_ibsend, MPI_IBSEND, ompi_ibsend_f;
        vargr_f_irsend: mpi_irsend_, mpi_irsend__, mpi_irsend, MPI_IRSEND, ompi_irsend_f;
        vargr_f_send_init: mpi_send_init_, mpi_send_init__, mpi_send_init, MPI_SEND_INIT, ompi_send_init_f;
        vargr_f_ssend_init: mpi_ssend_init_, mpi_ssend_init__, mpi_ssend_init, MPI_SSEND_INIT, ompi_ssend_init_f;
        vargr_f_bsend_init: mpi_bsend_init_, mpi_bsend_init__, mpi_bsend_init, MPI_BSEND_INIT, ompi_bsend_init_f;
        vargr_f_rsend_init: mpi_rsend_init_, mpi_rsend_init__, mpi_rsend_init, MPI_RSEND_INIT, ompi_rsend_init_f;
        vargr_f_irecv: mpi_irecv_, mpi_irecv__, mpi_irecv, MPI_IRECV, ompi_irecv_f;
        vargr_f_recv_init: mpi_recv_init_, mpi_recv_init__, mpi_recv_init, MPI_RECV_INIT, ompi_recv_init_f;
        vargr_f_recv: mpi_recv_, mpi_recv__, mpi_recv, MPI_RECV, ompi_recv_f;
        vargr_f_sendrecv: mpi_sendrecv_, mpi_sendrecv__, mpi_sendrecv, MPI_SENDRECV, ompi_sendrecv_f;
        vargr_f_sendrecv_replace: mpi_sendrecv_replace_, mpi_sendrecv_replace__, mpi_sendrecv_replace, MPI_SENDRECV_REPLACE, ompi_sendrecv_replace_f;
        vargr_f_probe: mpi_probe_, mpi_probe__, mpi_probe, MPI_PROBE, ompi_probe_f;
        vargr_f_iprobe: mpi_iprobe_, mpi_iprobe__, mpi_iprobe, MPI_IPROBE, ompi_iprobe_f;
        vargr_f_mprobe: mpi_mprobe_, mpi_mprobe__, mpi_mprobe, MPI_MPROBE, ompi_mprobe_f;
        vargr_f_improbe: mpi_improbe_, mpi_improbe__, mpi_improbe, MPI_IMPROBE, ompi_improbe_f;
        vargr_f_mrecv: mpi_mrecv_, mpi_mrecv__, mpi_mrecv, MPI_MRECV, ompi_mrecv_f;
        vargr_f_imrecv: mpi_imrecv_, mpi_imrecv__, mpi_imrecv, MPI_IMRECV, ompi_imrecv_f;
        vargr_f_wait: mpi_wait_, mpi_wait__, mpi_wait, MPI_WAIT, ompi_wait_f;
        vargr_f_test: mpi_test_, mpi_test__, mpi_test, MPI_TEST, ompi_test_f;
        vargr_f_waitall: mpi_waitall_, mpi_waitall__, mpi_waitall, MPI_WAITALL, ompi_waitall_f;
        vargr_f_testall: mpi_testall_, mpi_testall__, mpi_testall, MPI_TESTALL, ompi_testall_f;
        vargr_f_waitany: mpi_waitany_, mpi_waitany__, mpi_waitany, MPI_WAITANY, ompi_waitany_f;
        vargr_f_testany: mpi_testany_, mpi_testany__, mpi_testany, MPI_TESTANY, ompi_testany_f;
        vargr_f_waitsome: mpi_waitsome_, mpi_waitsome__, mpi_waitsome, MPI_WAITSOME, ompi_waitsome_f;
        vargr_f_testsome: mpi_testsome_, mpi_testsome__, mpi_testsome, MPI_TESTSOME, ompi_testsome_f;
        vargr_f_request_free: mpi_request_free_, mpi_request_free__, mpi_request_free, MPI_REQUEST_FREE, ompi_request_free_f;
        vargr_f_request_get_status: mpi_request_get_status_, mpi_request_get_status__, mpi_request_get_status, MPI_REQUEST_GET_STATUS, ompi_request_get_status_f;
        vargr_f_start: mpi_start_, mpi_start__, mpi_start, MPI_START, ompi_start_f;
        vargr_f_startall: mpi_startall_, mpi_startall__, mpi_startall, MPI_STARTALL, ompi_startall_f;
        vargr_f_barrier: mpi_barrier_, mpi_barrier__, mpi_barrier, MPI_BARRIER, ompi_barrier_f;
        vargr_f_bcast: mpi_bcast_, mpi_bcast__, mpi_bcast, MPI_BCAST, ompi_bcast_f;
        vargr_f_reduce: mpi_reduce_, mpi_reduce__, mpi_reduce, MPI_REDUCE, ompi_reduce_f;
        vargr_f_allreduce: mpi_allreduce_, mpi_allreduce__, mpi_allreduce, MPI_ALLREDUCE, ompi_allreduce_f;
        vargr_f_gather: mpi_gather_, mpi_gather__, mpi_gather, MPI_GATHER, ompi_gather_f;
        vargr_f_scatter: mpi_scatter_, mpi_scatter__, mpi_scatter, MPI_SCATTER, ompi_scatter_f;
        vargr_f_allgather: mpi_allgather_, mpi_allgather__, mpi_allgather, MPI_ALLGATHER, ompi_allgather_f;
        vargr_f_alltoall: mpi_alltoall_, mpi_alltoall__, mpi_alltoall, MPI_ALLTOALL, ompi_alltoall_f;
        vargr_f_alltoallv: mpi_alltoallv_, mpi_alltoallv__, mpi_alltoallv, MPI_ALLTOALLV, ompi_alltoallv_f;
        vargr_f_comm_dup: mpi_comm_dup_, mpi_comm_dup__, mpi_comm_dup, MPI_COMM_DUP, ompi_comm_dup_f;
        vargr_f_comm_dup_with_info: mpi_comm_dup_with_info_, mpi_comm_dup_with_info__, mpi_comm_dup_with_info, MPI_COMM_DUP_WITH_INFO, ompi_comm_dup_with_info_f;
        vargr_f_comm_split: mpi_comm_split_, mpi_comm_split__, mpi_comm_split, MPI_COMM_SPLIT, ompi_comm_split_f;
        vargr_f_comm_split_type: mpi_comm_split_type_, mpi_comm_split_type__, mpi_comm_split_type, MPI_COMM_SPLIT_TYPE, ompi_comm_split_type_f;
        vargr_f_comm_create: mpi_comm_create_, mpi_comm_create__, mpi_comm_create, MPI_COMM_CREATE, ompi_comm_create_f;
        vargr_f_comm_create_group: mpi_comm_create_group_, mpi_comm_create_group__, mpi_comm_create_group, MPI_COMM_CREATE_GROUP, ompi_comm_create_group_f;
        vargr_f_cart_create: mpi_cart_create_, mpi_cart_create__, mpi_cart_create, MPI_CART_CREATE, ompi_cart_create_f;
        vargr_f_cart_sub: mpi_cart_sub_, mpi_cart_sub__, mpi_cart_sub, MPI_CART_SUB, ompi_cart_sub_f;
        vargr_f_graph_create: mpi_graph_create_, mpi_graph_create__, mpi_graph_create, MPI_GRAPH_CREATE, ompi_graph_create_f;
        vargr_f_intercomm_create: mpi_intercomm_create_, mpi_intercomm_create__, mpi_intercomm_create, MPI_INTERCOMM_CREATE, ompi_intercomm_create_f;
        vargr_f_intercomm_merge: mpi_intercomm_merge_, mpi_intercomm_merge__, mpi_intercomm_merge, MPI_INTERCOMM_MERGE, ompi_intercomm_merge_f;
    }
}
