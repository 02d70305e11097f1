//! `libvargr_mpi.so`: vargr's monitoring (EventSpace, seed 004) for MPI programs that
//! were not written for vargr, through MPI's profiling interface (PMPI). Every MPI
//! function is also callable as `PMPI_X`; a library that defines `MPI_X` and calls
//! `PMPI_X` sits between the program and its MPI without either being changed.
//!
//! # How it is built, per MPI ABI
//! MPI standardises the API, not the ABI: Open MPI's handles (`MPI_Comm`,
//! `MPI_Datatype`, `MPI_Request`) are pointers to structures, MPICH's are ints, and
//! constants, `MPI_Status` and the library's soname differ. So the wrappers
//! (`c/wrappers.c`) are C compiled by `build.rs` with `cc` against the `mpi.h` of the
//! MPI they will run on, and linked with its libmpi; they hand Rust only plain numbers
//! (communicator ids, world ranks, tags, bytes, times) through a small C ABI
//! ([`events`]). Rust never sees a handle, so the Rust core is the same for every MPI
//! and only the C files are compiled once per ABI. C rather than Rust bindings to each
//! mpi.h because the header is the definition (macros, `MPI_STATUS_IGNORE`, handle
//! types), and because the compression layer needs `MPI_Pack`, datatypes and statuses
//! at the same level.
//!
//! A cdylib exports only the Rust functions it defines (rust-lang/rust#99411), so each
//! wrapped `MPI_X` is a naked Rust function holding one jump to the C `vargr_w_MPI_X`
//! ([`trampolines`], as vargr-capi does for its variadic functions): arguments reach the
//! C function untouched whatever their types, so the trampolines are ABI-neutral too.
//!
//! This build is for Open MPI (found with `mpicc --showme`; `VARGR_MPICC` names another
//! Open MPI). The sibling crate `vargr-mpi-mpich` makes `libvargr_mpi_mpich.so` from
//! the same sources against MPICH's header (its mpicc `-show`); `vargr mpi-run` picks
//! the library from what the launcher says it is (`mpirun --version`). Without Open MPI the library
//! is built with no wrappers, so that a workspace build never needs MPI.
//!
//! # How it is loaded
//! `vargr mpi-run [--trace DIR] -- mpirun -n 4 ./app` puts the library in `LD_PRELOAD`
//! and sets the documented variables ([`settings`]) for the launcher and, through it,
//! the ranks (Open MPI's mpirun also gets `-x` for each, so ranks on other hosts have
//! them). Under any other launcher set them yourself, or link the library before MPI
//! (`mpicc app.c -L DIR -lvargr_mpi -lmpi`). Functions it does not wrap are not defined
//! by it, so they resolve to MPI untouched.
//!
//! # Fortran and mpi4py
//! Open MPI 4.1's Fortran bindings do **not** reach these wrappers: `libmpi_mpifh.so`'s
//! `mpi_send_` (and the `mpi_f08` module's `mpi_send_f08_`, through `ompi_send_f`)
//! call `PMPI_Send` directly (`nm -D libmpi_mpifh.so` lists `U PMPI_Send`, no
//! `U MPI_Send`), so a Fortran program's calls bypass any C `MPI_Send`; `c/fortran.c`
//! replaces them (see the end of this page). mpi4py calls the C
//! API (`MPI_Init_thread`, `MPI_Send`, ...) through libmpi's dynamic symbols, so
//! preloading reaches it (Debian's python3-mpi4py 3.1.4 traced); its pickled `recv`
//! uses matched probes (`MPI_Mprobe`, `MPI_Mrecv`), which are wrapped too.
//!
//! # An MPI the library was not built for
//! `MPI_Init` and `MPI_Init_thread` first ask the running MPI for its version
//! (`PMPI_Get_library_version`, callable before initialisation) and refuse to start,
//! printing both, when it is not the MPI (family and major version) whose header the
//! wrappers were compiled against: passing Open MPI's handles to MPICH would crash or,
//! worse, misbehave quietly. Linking libmpi makes the Open MPI symbols the wrappers use
//! resolvable in any program, so the check runs instead of a loader error.
//!
//! # What is recorded
//! With `VARGR_MPI_TRACE=DIR`, every wrapped call writes vargr-trace records ([`events`]
//! lists them), and at `MPI_Finalize` each rank writes `DIR/<host>-<rank>.vtr`, which
//! `vargr trace report DIR` and `vargr trace export DIR` read. With `VARGR_MPI_MONITOR`
//! (`vargr mpi-run --monitor`), an agent thread sends the same records, reduced, to the
//! run's live monitor (`vargr_coll::open_plane`), which `vargr top` shows. Without
//! either, each wrapper checks one flag and calls MPI.
//!
//! # Compression between sites (CoMPI)
//! With `VARGR_MPI_CODEC` (or `vargr mpi-run --codec`), messages between ranks of
//! different sites are compressed: [`compress`] says which and how they are framed, and
//! `c/compress.c` moves the frames with the real MPI so that matching, statuses,
//! truncation and errors stay the program's. The point-to-point wrappers call it in
//! place of `PMPI_*`; every wait and test wrapper finishes the requests it started.
//! `MPI_Alltoall` and `MPI_Alltoallv` between sites are rebuilt on compressed
//! point-to-point messages; other collectives pass untouched.
//!
//! Fortran programs reach the same wrappers through `c/fortran.c`: Open MPI's Fortran
//! bindings call `PMPI_*` directly, so the library replaces them.

#[cfg(any(vargr_mpi_abi = "openmpi", vargr_mpi_abi = "mpich"))]
#[allow(non_snake_case)]
pub mod trampolines;

pub mod compress;
pub mod events;
pub mod settings;

/// The MPI this library's wrappers were built for (`"openmpi"`, `"mpich"`), or `"none"`.
pub const BUILT_FOR: &str = if cfg!(vargr_mpi_abi = "openmpi") {
    "openmpi"
} else if cfg!(vargr_mpi_abi = "mpich") {
    "mpich"
} else {
    "none"
};
