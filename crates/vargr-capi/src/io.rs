//! Collective file I/O from C (`vargr-io`): a file opened on a communicator, each rank's
//! view of it, and two-phase or locality-aware collective writes and reads, as MPI-IO's
//! `MPI_File_open`, `MPI_File_set_view` and `MPI_File_write_all` do.
//!
//! A file is used by one thread at a time, like its communicator: calls on a file that
//! another thread is using get `VARGR_ERR_BUSY`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::{Mutex, MutexGuard, TryLockError};

use vargr_coll::ElemKind;
use vargr_io::{
    Aggregation, Count, ErrorClass, File, Hints, IoError, Mode, Order, Run, Solver, View,
};

use crate::coll::{comm_of, vargr_comm};
use crate::ptr::{self, into_handle};
use crate::status::{guard, vargr_status, Error, Result};

/// A file open on every rank of a communicator (opaque).
pub struct vargr_file {
    file: Mutex<File>,
}

/// A contiguous range of file bytes, for `vargr_file_set_view_runs`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct vargr_run {
    pub offset: u64,
    pub length: u64,
}

/// Open flags, or-ed together (MPI's `MPI_MODE_*`).
pub const VARGR_MODE_READ: c_int = 1;
pub const VARGR_MODE_WRITE: c_int = 2;
/// Create the file if missing (rank 0 creates it, the others then open it).
pub const VARGR_MODE_CREATE: c_int = 4;
/// With `VARGR_MODE_CREATE`: fail if the file exists.
pub const VARGR_MODE_EXCLUSIVE: c_int = 8;
/// Empty the file on open.
pub const VARGR_MODE_TRUNCATE: c_int = 16;

/// How collective I/O chooses its aggregators.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vargr_aggregation {
    /// ROMIO's two-phase pattern: one aggregator per node, domain i to the i-th.
    VARGR_AGG_TWO_PHASE = 0,
    /// LA-Two-Phase counting bytes held per node (Jonker-Volgenant assignment).
    VARGR_AGG_LOCALITY_BYTES = 1,
    /// LA-Two-Phase counting contiguous blocks held per node.
    VARGR_AGG_LOCALITY_BLOCKS = 2,
}

/// Array order of a subarray view.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vargr_order {
    VARGR_ORDER_C = 0,
    VARGR_ORDER_FORTRAN = 1,
}

/// Settings of collective I/O; zero fields take the defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct vargr_file_hints {
    /// Aggregators (ROMIO's `cb_nodes`); 0: one per node.
    pub cb_nodes: u32,
    /// Bytes an aggregator handles per round (`cb_buffer_size`); 0: 4 MiB.
    pub cb_buffer_size: u64,
    /// A `vargr_aggregation`.
    pub aggregation: c_int,
    /// Nonzero: send redistributed data as elements of `datatype` so that links which
    /// compress (between sites) can (Dynamic-CoMPI); 0: send it as it is.
    pub compress: c_int,
    /// A `vargr_datatype`, or 0 for bytes.
    pub datatype: c_int,
}

/// What the last collective operation moved, as this rank saw it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct vargr_io_stats {
    pub aggregators: u64,
    pub rounds: u64,
    pub bytes_between_nodes: u64,
    pub bytes_within_node: u64,
    pub bytes_kept: u64,
    pub bytes_sieved: u64,
}

impl From<IoError> for Error {
    fn from(e: IoError) -> Error {
        use vargr_status::*;
        if let IoError::Comm(c) = e {
            return Error::from(c);
        }
        // For another rank's failure, the kind that rank had: every rank gets one status.
        let status = match e.class() {
            ErrorClass::Os | ErrorClass::Comm => VARGR_ERR_IO,
            ErrorClass::View => VARGR_ERR_INVALID_ARGUMENT,
            ErrorClass::Other => VARGR_ERR_PRECONDITION,
        };
        Error::new(status, e.to_string())
    }
}

fn elem_of(datatype: c_int) -> Result<ElemKind> {
    Ok(match datatype {
        0 | 2 => ElemKind::U8,
        1 => ElemKind::I8,
        3 => ElemKind::I16,
        4 => ElemKind::U16,
        5 => ElemKind::I32,
        6 => ElemKind::U32,
        7 => ElemKind::I64,
        8 => ElemKind::U64,
        9 => ElemKind::F32,
        10 => ElemKind::F64,
        d => return Err(Error::invalid(format!("unknown datatype {d}"))),
    })
}

fn hints_of(h: Option<&vargr_file_hints>) -> Result<Hints> {
    let mut hints = Hints::default();
    let Some(h) = h else {
        return Ok(hints);
    };
    if h.cb_nodes > 0 {
        hints.cb_nodes = Some(h.cb_nodes as usize);
    }
    if h.cb_buffer_size > 0 {
        hints.cb_buffer_size = h.cb_buffer_size;
    }
    hints.aggregation = match h.aggregation {
        0 => Aggregation::TwoPhase,
        1 | 2 => Aggregation::Locality {
            count: if h.aggregation == 1 {
                Count::Bytes
            } else {
                Count::Blocks
            },
            solver: Solver::JonkerVolgenant,
        },
        a => return Err(Error::invalid(format!("unknown aggregation {a}"))),
    };
    hints.compress = h.compress != 0;
    hints.elem = elem_of(h.datatype)?;
    Ok(hints)
}

fn mode_of(flags: c_int) -> Result<Mode> {
    let known = VARGR_MODE_READ
        | VARGR_MODE_WRITE
        | VARGR_MODE_CREATE
        | VARGR_MODE_EXCLUSIVE
        | VARGR_MODE_TRUNCATE;
    if flags & !known != 0 || flags & (VARGR_MODE_READ | VARGR_MODE_WRITE) == 0 {
        return Err(Error::invalid(format!(
            "open mode {flags:#x}: give VARGR_MODE_READ and/or VARGR_MODE_WRITE, with CREATE, EXCLUSIVE or TRUNCATE"
        )));
    }
    Ok(Mode {
        read: flags & VARGR_MODE_READ != 0,
        write: flags & VARGR_MODE_WRITE != 0,
        create: flags & VARGR_MODE_CREATE != 0,
        exclusive: flags & VARGR_MODE_EXCLUSIVE != 0,
        truncate: flags & VARGR_MODE_TRUNCATE != 0,
    })
}

fn lock(f: &vargr_file) -> Result<MutexGuard<'_, File>> {
    match f.file.try_lock() {
        Ok(g) => Ok(g),
        // A panic inside an earlier call was already reported.
        Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
        Err(TryLockError::WouldBlock) => Err(Error::new(
            vargr_status::VARGR_ERR_BUSY,
            "the file is in use by another thread",
        )),
    }
}

/// Opens `path` on every rank of `comm` (collective). `hints` may be NULL. If any rank
/// cannot open it, every rank gets an error naming that rank.
///
/// # Safety
/// `comm` is live, `path` a NUL-terminated string, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_file_open(
    comm: *const vargr_comm,
    path: *const c_char,
    mode: c_int,
    hints: *const vargr_file_hints,
    out: *mut *mut vargr_file,
) -> c_int {
    guard("vargr_file_open", || {
        // SAFETY (all below): the caller's contract.
        let c = unsafe { ptr::handle(comm, "comm")? };
        let path = unsafe { ptr::string(path, "path")? };
        let out = unsafe { ptr::out(out, "out")? };
        let hints = hints_of(unsafe { hints.as_ref() })?;
        let mode = mode_of(mode)?;
        let file = File::open(&*comm_of(c)?, path, mode, hints)?;
        *out = into_handle(vargr_file {
            file: Mutex::new(file),
        });
        Ok(())
    })
}

/// Sets this rank's view to `count` file runs, in file order and not overlapping.
///
/// # Safety
/// `file` is live; `runs` holds `count` runs (may be NULL when `count` is 0).
#[no_mangle]
pub unsafe extern "C" fn vargr_file_set_view_runs(
    file: *const vargr_file,
    runs: *const vargr_run,
    count: usize,
) -> c_int {
    guard("vargr_file_set_view_runs", || {
        // SAFETY (all below): the caller's contract.
        let f = unsafe { ptr::handle(file, "file")? };
        let runs = unsafe { ptr::slice(runs, count, "runs")? };
        let view = View::from_runs(runs.iter().map(|r| Run::new(r.offset, r.length)))
            .map_err(IoError::from)?;
        lock(f)?.set_view(view);
        Ok(())
    })
}

/// Sets this rank's view to `count` blocks of `block` bytes, `stride` bytes apart, from
/// byte `disp` (MPI's vector type).
///
/// # Safety
/// `file` is live.
#[no_mangle]
pub unsafe extern "C" fn vargr_file_set_view_vector(
    file: *const vargr_file,
    disp: u64,
    count: u64,
    block: u64,
    stride: u64,
) -> c_int {
    guard("vargr_file_set_view_vector", || {
        // SAFETY: the caller's contract.
        let f = unsafe { ptr::handle(file, "file")? };
        let view = View::vector(disp, count, block, stride).map_err(IoError::from)?;
        lock(f)?.set_view(view);
        Ok(())
    })
}

/// Sets this rank's view to the block `starts .. starts + subsizes` of an `ndims`-
/// dimensional array of `sizes` elements of `elem_bytes` each, stored from byte `disp`
/// in `order` (a `vargr_order`; MPI's subarray type).
///
/// # Safety
/// `file` is live; `sizes`, `subsizes` and `starts` hold `ndims` values each.
#[no_mangle]
pub unsafe extern "C" fn vargr_file_set_view_subarray(
    file: *const vargr_file,
    disp: u64,
    ndims: usize,
    sizes: *const u64,
    subsizes: *const u64,
    starts: *const u64,
    order: c_int,
    elem_bytes: u64,
) -> c_int {
    guard("vargr_file_set_view_subarray", || {
        // SAFETY (all below): the caller's contract.
        let f = unsafe { ptr::handle(file, "file")? };
        let sizes = unsafe { ptr::slice(sizes, ndims, "sizes")? };
        let subsizes = unsafe { ptr::slice(subsizes, ndims, "subsizes")? };
        let starts = unsafe { ptr::slice(starts, ndims, "starts")? };
        let order = match order {
            0 => Order::C,
            1 => Order::Fortran,
            o => return Err(Error::invalid(format!("unknown order {o}"))),
        };
        let view = View::subarray(disp, sizes, subsizes, starts, order, elem_bytes)
            .map_err(IoError::from)?;
        lock(f)?.set_view(view);
        Ok(())
    })
}

/// Writes every rank's `bytes` bytes through its view (collective); `bytes` must equal
/// the view's size on every rank.
///
/// # Safety
/// `file` is live; `buf` holds `bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn vargr_file_write_all(
    file: *const vargr_file,
    buf: *const c_void,
    bytes: usize,
) -> c_int {
    guard("vargr_file_write_all", || {
        // SAFETY (all below): the caller's contract.
        let f = unsafe { ptr::handle(file, "file")? };
        let data = unsafe { ptr::slice(buf.cast::<u8>(), bytes, "buf")? };
        Ok(lock(f)?.write_all(data)?)
    })
}

/// Reads every rank's view into its `bytes`-byte `buf` (collective).
///
/// # Safety
/// `file` is live; `buf` is writable for `bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn vargr_file_read_all(
    file: *const vargr_file,
    buf: *mut c_void,
    bytes: usize,
) -> c_int {
    guard("vargr_file_read_all", || {
        // SAFETY (all below): the caller's contract.
        let f = unsafe { ptr::handle(file, "file")? };
        let data = unsafe { ptr::slice_mut(buf.cast::<u8>(), bytes, "buf")? };
        Ok(lock(f)?.read_all(data)?)
    })
}

/// Writes `bytes` bytes as data bytes `at ..` of this rank's view (independent).
///
/// # Safety
/// `file` is live; `buf` holds `bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn vargr_file_write_at(
    file: *const vargr_file,
    at: u64,
    buf: *const c_void,
    bytes: usize,
) -> c_int {
    guard("vargr_file_write_at", || {
        // SAFETY (all below): the caller's contract.
        let f = unsafe { ptr::handle(file, "file")? };
        let data = unsafe { ptr::slice(buf.cast::<u8>(), bytes, "buf")? };
        Ok(lock(f)?.write_at(at, data)?)
    })
}

/// Reads data bytes `at ..` of this rank's view into `buf` (independent); `*got` is the
/// number read, fewer than `bytes` at the end of the file.
///
/// # Safety
/// `file` is live; `buf` is writable for `bytes` bytes; `got` writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_file_read_at(
    file: *const vargr_file,
    at: u64,
    buf: *mut c_void,
    bytes: usize,
    got: *mut usize,
) -> c_int {
    guard("vargr_file_read_at", || {
        // SAFETY (all below): the caller's contract.
        let f = unsafe { ptr::handle(file, "file")? };
        let data = unsafe { ptr::slice_mut(buf.cast::<u8>(), bytes, "buf")? };
        let got = unsafe { ptr::out(got, "got")? };
        *got = lock(f)?.read_at(at, data)?;
        Ok(())
    })
}

/// The file's size in bytes.
///
/// # Safety
/// `file` is live; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_file_size(file: *const vargr_file, out: *mut u64) -> c_int {
    guard("vargr_file_size", || {
        // SAFETY (all below): the caller's contract.
        let f = unsafe { ptr::handle(file, "file")? };
        let out = unsafe { ptr::out(out, "out")? };
        *out = lock(f)?.size()?;
        Ok(())
    })
}

/// Makes the file `len` bytes long (collective).
///
/// # Safety
/// `file` is live.
#[no_mangle]
pub unsafe extern "C" fn vargr_file_set_size(file: *const vargr_file, len: u64) -> c_int {
    guard("vargr_file_set_size", || {
        // SAFETY: the caller's contract.
        let f = unsafe { ptr::handle(file, "file")? };
        Ok(lock(f)?.set_size(len)?)
    })
}

/// Reserves disk space for the first `len` bytes (collective).
///
/// # Safety
/// `file` is live.
#[no_mangle]
pub unsafe extern "C" fn vargr_file_preallocate(file: *const vargr_file, len: u64) -> c_int {
    guard("vargr_file_preallocate", || {
        // SAFETY: the caller's contract.
        let f = unsafe { ptr::handle(file, "file")? };
        Ok(lock(f)?.preallocate(len)?)
    })
}

/// Flushes every rank's writes to the disk (collective).
///
/// # Safety
/// `file` is live.
#[no_mangle]
pub unsafe extern "C" fn vargr_file_sync(file: *const vargr_file) -> c_int {
    guard("vargr_file_sync", || {
        // SAFETY: the caller's contract.
        let f = unsafe { ptr::handle(file, "file")? };
        Ok(lock(f)?.sync()?)
    })
}

/// What the last collective operation moved, as this rank saw it.
///
/// # Safety
/// `file` is live; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_file_stats(
    file: *const vargr_file,
    out: *mut vargr_io_stats,
) -> c_int {
    guard("vargr_file_stats", || {
        // SAFETY (all below): the caller's contract.
        let f = unsafe { ptr::handle(file, "file")? };
        let out = unsafe { ptr::out(out, "out")? };
        let g = lock(f)?;
        let s = g.stats();
        *out = vargr_io_stats {
            aggregators: s.aggregators.len() as u64,
            rounds: s.rounds,
            bytes_between_nodes: s.bytes_between_nodes,
            bytes_within_node: s.bytes_within_node,
            bytes_kept: s.bytes_kept,
            bytes_sieved: s.bytes_sieved,
        };
        Ok(())
    })
}

/// Syncs and closes the file on every rank (collective) and frees the handle, also when
/// the sync fails (the status says so).
///
/// # Safety
/// `file` is live or NULL and not used after this call.
#[no_mangle]
pub unsafe extern "C" fn vargr_file_close(file: *mut vargr_file) -> c_int {
    guard("vargr_file_close", || {
        if file.is_null() {
            return Ok(());
        }
        // SAFETY: the caller gives the handle up.
        let f = unsafe { Box::from_raw(file) };
        let file = f.file.into_inner().unwrap_or_else(|p| p.into_inner());
        Ok(file.close()?)
    })
}
