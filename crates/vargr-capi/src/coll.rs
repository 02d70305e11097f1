//! Ranks and collectives from C: joining the job started by `vargr run`, `mpirun` or
//! `srun` (one rank per process), typed collectives over C buffers, and the conditional
//! allreduce.
//!
//! A communicator is used by one thread at a time, like an MPI communicator: its
//! collectives sit behind a mutex that is only *tried* (a second thread gets
//! `VARGR_ERR_BUSY` instead of a collective that would interleave with the first).
//! Rank and size are copied into the handle so they cost no lock.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use bytemuck::Pod;
use vargr_coll::{Comm, CondAllreduce, CondOp, Elem, Job, Op, Predicate};

use crate::ptr::{self, free_handle, into_handle};
use crate::status::{guard, vargr_status, Error, Result};

/// A rank's communicator (opaque): the world of the job this process joined.
pub struct vargr_comm {
    rank: c_int,
    size: c_int,
    comm: Mutex<Comm>,
    job: Job,
}

/// A conditional allreduce set up on a communicator (opaque).
pub struct vargr_cond {
    cond: Mutex<CondAllreduce>,
}

/// Element types of collective buffers.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vargr_datatype {
    VARGR_INT8 = 1,
    VARGR_UINT8 = 2,
    VARGR_INT16 = 3,
    VARGR_UINT16 = 4,
    VARGR_INT32 = 5,
    VARGR_UINT32 = 6,
    VARGR_INT64 = 7,
    VARGR_UINT64 = 8,
    VARGR_FLOAT = 9,
    VARGR_DOUBLE = 10,
}

/// Reduction operators, with MPI's semantics (integer sum and product wrap; logical and
/// bitwise operators are for integer types only).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vargr_op {
    VARGR_OP_SUM = 1,
    VARGR_OP_PROD = 2,
    VARGR_OP_MIN = 3,
    VARGR_OP_MAX = 4,
    VARGR_OP_LAND = 5,
    VARGR_OP_LOR = 6,
    VARGR_OP_BAND = 7,
    VARGR_OP_BOR = 8,
}

/// The reduction of a conditional allreduce.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vargr_cond_op {
    VARGR_COND_SUM = 1,
    VARGR_COND_MAX = 2,
    VARGR_COND_MIN = 3,
}

/// The test of a conditional allreduce: `result <predicate> threshold`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vargr_predicate {
    VARGR_PRED_GREATER = 1,
    VARGR_PRED_GREATER_EQ = 2,
    VARGR_PRED_LESS = 3,
    VARGR_PRED_LESS_EQ = 4,
}

/// What one `vargr_cond_allreduce` call decided.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct vargr_cond_outcome {
    /// 1 if `result <predicate> threshold` holds for the global result, else 0.
    pub holds: c_int,
    /// 1 if decided from this site's value alone, without any remote result.
    pub local: c_int,
    /// Remote sites whose values were used.
    pub remote_used: u32,
    /// The value the decision was made on: the global result when every site's value
    /// was used, otherwise a partial one (use it only for the test, and for logging).
    pub value: f64,
}

// A communicator may be handed between threads (one at a time: the mutex).
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<vargr_comm>();
    shared::<vargr_cond>();
};

/// Whether this process joined a job already (a process hosts one world).
static JOINED: AtomicBool = AtomicBool::new(false);

/// Joins the job this process was started in (`vargr run -n N prog`, `mpirun`, `srun`)
/// and returns its world communicator. Blocks until every rank has arrived (60 s at
/// most, then an error naming what is missing). One rank per process: a process
/// started with `--ranks-per-process K > 1` is refused. Call once per process.
///
/// Ownership: `*out` belongs to the caller (NULL on error); release it with
/// `vargr_world_finalize` before the process exits.
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_world_join(out: *mut *mut vargr_comm) -> c_int {
    guard("vargr_world_join", || {
        // SAFETY: the caller's contract.
        let out = unsafe { ptr::out(out, "out")? };
        *out = std::ptr::null_mut();
        if JOINED.swap(true, Ordering::SeqCst) {
            return Err(Error::invalid(
                "this process already joined its job (vargr_world_join is called once)",
            ));
        }
        let joined = join();
        if joined.is_err() {
            JOINED.store(false, Ordering::SeqCst);
        }
        *out = into_handle(joined?);
        Ok(())
    })
}

fn join() -> Result<vargr_comm> {
    let job = vargr_config::join_job()?;
    let local = job.local_ranks();
    if local.len() != 1 {
        return Err(Error::invalid(format!(
            "this process hosts ranks {}..{} (vargr run --ranks-per-process {}); the C API \
             runs one rank per process",
            local.start,
            local.end,
            local.len()
        )));
    }
    let comm = job.world(local.start)?.comm()?;
    let too_big = |_| Error::invalid("the job has more than INT_MAX ranks");
    Ok(vargr_comm {
        rank: c_int::try_from(comm.rank()).map_err(too_big)?,
        size: c_int::try_from(comm.size()).map_err(too_big)?,
        comm: Mutex::new(comm),
        job,
    })
}

/// Flushes what is still queued for other processes (and the trace file under
/// `vargr run --trace`), then frees the world communicator (NULL is a no-op). Call it
/// before the process exits, after every rank's last collective.
///
/// # Safety
/// `world` is NULL or from `vargr_world_join`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn vargr_world_finalize(world: *mut vargr_comm) -> c_int {
    guard("vargr_world_finalize", || {
        if world.is_null() {
            return Ok(());
        }
        // SAFETY: a live handle per the contract; freed below and never used again.
        let w = unsafe { Box::from_raw(world) };
        let vargr_comm { comm, job, .. } = *w;
        drop(comm);
        job.finish();
        Ok(())
    })
}

/// This rank's number in the communicator, `0 .. size - 1`.
///
/// # Safety
/// `comm` is a live communicator; `rank` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_rank(comm: *const vargr_comm, rank: *mut c_int) -> c_int {
    // Inlined checks: this is the call the boundary benchmark times.
    // SAFETY: the caller's contract.
    match unsafe { (comm.as_ref(), rank.as_mut()) } {
        (Some(c), Some(r)) => {
            *r = c.rank;
            0
        }
        _ => guard("vargr_comm_rank", || {
            Err(Error::invalid("comm or rank (out-parameter) is NULL"))
        }),
    }
}

/// The number of ranks in the communicator.
///
/// # Safety
/// `comm` is a live communicator; `size` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_size(comm: *const vargr_comm, size: *mut c_int) -> c_int {
    guard("vargr_comm_size", || {
        // SAFETY: the caller's contract.
        let (c, size) = unsafe { (ptr::handle(comm, "comm")?, ptr::out(size, "size")?) };
        *size = c.size;
        Ok(())
    })
}

/// The communicator, if no other thread is running a call on it.
/// The communicator behind a handle, for the other modules (files open on it).
pub(crate) fn comm_of(c: &vargr_comm) -> Result<MutexGuard<'_, Comm>> {
    lock(c)
}

fn lock(c: &vargr_comm) -> Result<MutexGuard<'_, Comm>> {
    match c.comm.try_lock() {
        Ok(g) => Ok(g),
        // A panic inside an earlier call was already reported; the communicator's state
        // is only sequence numbers, which every rank advanced alike or the job failed.
        Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
        Err(TryLockError::WouldBlock) => Err(Error::new(
            vargr_status::VARGR_ERR_BUSY,
            format!(
                "rank {}: the communicator is in use by another thread (one thread at a time \
                 may call collectives on a communicator)",
                c.rank
            ),
        )),
    }
}

fn op_of(op: c_int) -> Result<Op> {
    Ok(match op {
        1 => Op::Sum,
        2 => Op::Prod,
        3 => Op::Min,
        4 => Op::Max,
        5 => Op::Land,
        6 => Op::Lor,
        7 => Op::Band,
        8 => Op::Bor,
        _ => {
            return Err(Error::invalid(format!(
                "op {op} is not a vargr_op (1 sum .. 8 bor)"
            )))
        }
    })
}

fn rank_arg(r: c_int, what: &str, size: c_int) -> Result<usize> {
    if r < 0 || r >= size {
        return Err(Error::invalid(format!(
            "{what} {r} is out of range for a communicator of {size} ranks"
        )));
    }
    Ok(r as usize)
}

/// Runs `$f::<T>(args)` for the element type named by a `vargr_datatype` code.
macro_rules! by_type {
    ($dt:expr, $f:ident ( $($arg:expr),* )) => {
        match $dt {
            1 => $f::<i8>($($arg),*),
            2 => $f::<u8>($($arg),*),
            3 => $f::<i16>($($arg),*),
            4 => $f::<u16>($($arg),*),
            5 => $f::<i32>($($arg),*),
            6 => $f::<u32>($($arg),*),
            7 => $f::<i64>($($arg),*),
            8 => $f::<u64>($($arg),*),
            9 => $f::<f32>($($arg),*),
            10 => $f::<f64>($($arg),*),
            dt => Err(Error::invalid(format!(
                "datatype {dt} is not a vargr_datatype (1 VARGR_INT8 .. 10 VARGR_DOUBLE)"
            ))),
        }
    };
}

mod p2p;
pub use p2p::{vargr_recv_status, vargr_request, VARGR_ANY_SOURCE, VARGR_ANY_TAG};

/// Whether two byte ranges share memory (`&` and `&mut` to the same bytes would be
/// undefined behaviour in Rust, so overlapping buffers are checked before slicing).
fn overlap(a: *const c_void, a_len: usize, b: *const c_void, b_len: usize) -> bool {
    let (a, b) = (a as usize, b as usize);
    a_len > 0 && b_len > 0 && a < b.saturating_add(b_len) && b < a.saturating_add(a_len)
}

fn bytes<T>(count: usize) -> usize {
    count.saturating_mul(std::mem::size_of::<T>())
}

/// `n` elements from each of `size` ranks: the length of a gathered buffer.
fn per_rank_total(n: usize, size: c_int) -> Result<usize> {
    n.checked_mul(size as usize)
        .ok_or_else(|| Error::invalid(format!("count {n} is too large")))
}

/// The elements of the root's side of a gather or scatter: `size * n` at the root, none
/// elsewhere.
fn root_total(c: &vargr_comm, n: usize, root: usize) -> Result<usize> {
    if c.rank as usize == root {
        per_rank_total(n, c.size)
    } else {
        Ok(0)
    }
}

/// `send` (`send_n` elements) and `recv` (`recv_n` elements) as slices, refused when
/// they share memory.
///
/// # Safety
/// Each pointer is NULL with a count of 0, or valid for its count of `T`, aligned;
/// `recv` for writing.
unsafe fn disjoint<'a, T>(
    send: *const c_void,
    send_n: usize,
    recv: *mut c_void,
    recv_n: usize,
) -> Result<(&'a [T], &'a mut [T])> {
    if overlap(send, bytes::<T>(send_n), recv, bytes::<T>(recv_n)) {
        return Err(Error::invalid("send and recv overlap"));
    }
    // SAFETY: the caller's contract; checked not to overlap.
    unsafe {
        Ok((
            ptr::slice(send.cast::<T>(), send_n, "send")?,
            ptr::slice_mut(recv.cast::<T>(), recv_n, "recv")?,
        ))
    }
}

/// Blocks until every rank of the communicator has called it.
///
/// # Safety
/// `comm` is a live communicator.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_barrier(comm: *const vargr_comm) -> c_int {
    guard("vargr_comm_barrier", || {
        // SAFETY: the caller's contract.
        let c = unsafe { ptr::handle(comm, "comm")? };
        Ok(lock(c)?.barrier()?)
    })
}

/// Broadcasts `count` elements of the root's `buf` into every rank's `buf`.
///
/// # Safety
/// `comm` is live; `buf` is valid for `count` elements of `datatype`, aligned.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_bcast(
    comm: *const vargr_comm,
    buf: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
) -> c_int {
    guard("vargr_comm_bcast", || {
        // SAFETY: the caller's contract.
        let c = unsafe { ptr::handle(comm, "comm")? };
        let root = rank_arg(root, "root", c.size)?;
        /// # Safety: as the function.
        unsafe fn run<T: Pod>(
            c: &vargr_comm,
            buf: *mut c_void,
            n: usize,
            root: usize,
        ) -> Result<()> {
            // SAFETY: forwarded contract.
            let buf = unsafe { ptr::slice_mut(buf.cast::<T>(), n, "buf")? };
            Ok(lock(c)?.bcast(buf, root)?)
        }
        // SAFETY: forwarded contract.
        unsafe { by_type!(datatype, run(c, buf, count, root)) }
    })
}

/// Reduces every rank's `send` (`count` elements) with `op` into the root's `recv`.
/// `recv` is only used at the root (it may be NULL elsewhere); at the root `recv` may
/// equal `send` (in place) but may not partly overlap it.
///
/// # Safety
/// `comm` is live; buffers are valid for `count` elements of `datatype`, aligned.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_reduce(
    comm: *const vargr_comm,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    root: c_int,
) -> c_int {
    guard("vargr_comm_reduce", || {
        // SAFETY: the caller's contract.
        let c = unsafe { ptr::handle(comm, "comm")? };
        let (root, op) = (rank_arg(root, "root", c.size)?, op_of(op)?);
        /// # Safety: as the function.
        unsafe fn run<T: Elem>(
            c: &vargr_comm,
            send: *const c_void,
            recv: *mut c_void,
            n: usize,
            op: &Op,
            root: usize,
        ) -> Result<()> {
            let at_root = c.rank as usize == root;
            if at_root && send == recv.cast_const() {
                // In place: reduce from a copy of the input.
                // SAFETY: forwarded contract.
                let buf = unsafe { ptr::slice_mut(recv.cast::<T>(), n, "recv")? };
                let input = buf.to_vec();
                return Ok(lock(c)?.reduce(&input, buf, op, root)?);
            }
            // Only the root's `recv` is used (others may pass NULL).
            let recv_n = if at_root { n } else { 0 };
            // SAFETY: forwarded contract.
            let (send, recv) = unsafe { disjoint::<T>(send, n, recv, recv_n)? };
            Ok(lock(c)?.reduce(send, recv, op, root)?)
        }
        // SAFETY: forwarded contract.
        unsafe { by_type!(datatype, run(c, send, recv, count, &op, root)) }
    })
}

/// In-place allreduce: every rank's `buf` (`count` elements) becomes the reduction of
/// all of them with `op`.
///
/// # Safety
/// `comm` is live; `buf` is valid for `count` elements of `datatype`, aligned.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_allreduce(
    comm: *const vargr_comm,
    buf: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
) -> c_int {
    guard("vargr_comm_allreduce", || {
        // SAFETY: the caller's contract.
        let c = unsafe { ptr::handle(comm, "comm")? };
        let op = op_of(op)?;
        /// # Safety: as the function.
        unsafe fn run<T: Elem>(c: &vargr_comm, buf: *mut c_void, n: usize, op: &Op) -> Result<()> {
            // SAFETY: forwarded contract.
            let buf = unsafe { ptr::slice_mut(buf.cast::<T>(), n, "buf")? };
            Ok(lock(c)?.allreduce(buf, op)?)
        }
        // SAFETY: forwarded contract.
        unsafe { by_type!(datatype, run(c, buf, count, &op)) }
    })
}

/// Allreduce from `send` into `recv` (`count` elements each). `recv == send` works in
/// place; partly overlapping buffers are refused.
///
/// # Safety
/// `comm` is live; buffers are valid for `count` elements of `datatype`, aligned.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_allreduce_into(
    comm: *const vargr_comm,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
) -> c_int {
    guard("vargr_comm_allreduce_into", || {
        // SAFETY: the caller's contract.
        let c = unsafe { ptr::handle(comm, "comm")? };
        let op = op_of(op)?;
        /// # Safety: as the function.
        unsafe fn run<T: Elem>(
            c: &vargr_comm,
            send: *const c_void,
            recv: *mut c_void,
            n: usize,
            op: &Op,
        ) -> Result<()> {
            // SAFETY (all below): forwarded contract; overlap checked first.
            let out = unsafe { ptr::slice_mut(recv.cast::<T>(), n, "recv")? };
            if send == recv.cast_const() {
                return Ok(lock(c)?.allreduce(out, op)?);
            }
            if overlap(send, bytes::<T>(n), recv, bytes::<T>(n)) {
                return Err(Error::invalid("send and recv overlap"));
            }
            // SAFETY: forwarded contract; checked not to overlap `out`.
            let send = unsafe { ptr::slice(send.cast::<T>(), n, "send")? };
            Ok(lock(c)?.allreduce_into(send, out, op)?)
        }
        // SAFETY: forwarded contract.
        unsafe { by_type!(datatype, run(c, send, recv, count, &op)) }
    })
}

/// Every rank's `send` (`count` elements) lands in every rank's `recv`
/// (`size * count` elements) in rank order. The buffers may not overlap.
///
/// # Safety
/// `comm` is live; `send` holds `count` and `recv` `size * count` elements of
/// `datatype`, aligned.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_allgather(
    comm: *const vargr_comm,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: c_int,
) -> c_int {
    guard("vargr_comm_allgather", || {
        // SAFETY: the caller's contract.
        let c = unsafe { ptr::handle(comm, "comm")? };
        /// # Safety: as the function.
        unsafe fn run<T: Pod>(
            c: &vargr_comm,
            send: *const c_void,
            recv: *mut c_void,
            n: usize,
        ) -> Result<()> {
            let total = per_rank_total(n, c.size)?;
            // SAFETY: forwarded contract.
            let (send, recv) = unsafe { disjoint::<T>(send, n, recv, total)? };
            Ok(lock(c)?.allgather(send, recv)?)
        }
        // SAFETY: forwarded contract.
        unsafe { by_type!(datatype, run(c, send, recv, count)) }
    })
}

/// Gathers every rank's `send` (`count` elements) into the root's `recv`
/// (`size * count` elements; may be NULL on other ranks). The buffers may not overlap.
///
/// # Safety
/// As `vargr_comm_allgather`, `recv` only at the root.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_gather(
    comm: *const vargr_comm,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
) -> c_int {
    guard("vargr_comm_gather", || {
        // SAFETY: the caller's contract.
        let c = unsafe { ptr::handle(comm, "comm")? };
        let root = rank_arg(root, "root", c.size)?;
        /// # Safety: as the function.
        unsafe fn run<T: Pod>(
            c: &vargr_comm,
            send: *const c_void,
            recv: *mut c_void,
            n: usize,
            root: usize,
        ) -> Result<()> {
            let total = root_total(c, n, root)?;
            // SAFETY: forwarded contract.
            let (send, recv) = unsafe { disjoint::<T>(send, n, recv, total)? };
            Ok(lock(c)?.gather(send, recv, root)?)
        }
        // SAFETY: forwarded contract.
        unsafe { by_type!(datatype, run(c, send, recv, count, root)) }
    })
}

/// Scatters consecutive blocks of `count` elements of the root's `send`
/// (`size * count` elements; may be NULL on other ranks) into every rank's `recv`.
/// The buffers may not overlap.
///
/// # Safety
/// As `vargr_comm_gather`, with the roles of the buffers swapped.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_scatter(
    comm: *const vargr_comm,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
) -> c_int {
    guard("vargr_comm_scatter", || {
        // SAFETY: the caller's contract.
        let c = unsafe { ptr::handle(comm, "comm")? };
        let root = rank_arg(root, "root", c.size)?;
        /// # Safety: as the function.
        unsafe fn run<T: Pod>(
            c: &vargr_comm,
            send: *const c_void,
            recv: *mut c_void,
            n: usize,
            root: usize,
        ) -> Result<()> {
            let total = root_total(c, n, root)?;
            // SAFETY: forwarded contract.
            let (send, recv) = unsafe { disjoint::<T>(send, total, recv, n)? };
            Ok(lock(c)?.scatter(send, recv, root)?)
        }
        // SAFETY: forwarded contract.
        unsafe { by_type!(datatype, run(c, send, recv, count, root)) }
    })
}

/// Sends `count` elements to rank `dest` with a user tag; returns at once (eager).
///
/// # Safety
/// `comm` is live; `buf` is valid for `count` elements of `datatype`, aligned.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_send(
    comm: *const vargr_comm,
    dest: c_int,
    tag: u64,
    buf: *const c_void,
    count: usize,
    datatype: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    guard("vargr_comm_send", || unsafe {
        send(comm, dest, tag, buf, count, datatype)
    })
}

/// `vargr_comm_send`'s work, for it and `vargr_comm_isend`.
///
/// # Safety
/// As `vargr_comm_send`.
unsafe fn send(
    comm: *const vargr_comm,
    dest: c_int,
    tag: u64,
    buf: *const c_void,
    count: usize,
    datatype: c_int,
) -> Result<()> {
    // SAFETY: the caller's contract.
    let c = unsafe { ptr::handle(comm, "comm")? };
    let dest = rank_arg(dest, "dest", c.size)?;
    /// # Safety: as the function.
    unsafe fn run<T: Pod>(
        c: &vargr_comm,
        dest: usize,
        tag: u64,
        buf: *const c_void,
        n: usize,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        let buf = unsafe { ptr::slice(buf.cast::<T>(), n, "buf")? };
        Ok(lock(c)?.send(dest, tag, buf)?)
    }
    // SAFETY: forwarded contract.
    unsafe { by_type!(datatype, run(c, dest, tag, buf, count)) }
}

/// Receives the next message from rank `src` with `tag` into `buf` (room for `count`
/// elements); `*received` (if not NULL) gets the number of elements that arrived. A
/// longer message is an error (`VARGR_ERR_PRECONDITION`).
///
/// # Safety
/// `comm` is live; `buf` is valid for `count` elements of `datatype`, aligned;
/// `received` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_recv(
    comm: *const vargr_comm,
    src: c_int,
    tag: u64,
    buf: *mut c_void,
    count: usize,
    datatype: c_int,
    received: *mut usize,
) -> c_int {
    guard("vargr_comm_recv", || {
        // SAFETY: the caller's contract.
        let c = unsafe { ptr::handle(comm, "comm")? };
        let src = rank_arg(src, "src", c.size)?;
        /// # Safety: as the function.
        unsafe fn run<T: Pod>(
            c: &vargr_comm,
            src: usize,
            tag: u64,
            buf: *mut c_void,
            n: usize,
        ) -> Result<usize> {
            // SAFETY: forwarded contract.
            let buf = unsafe { ptr::slice_mut(buf.cast::<T>(), n, "buf")? };
            Ok(lock(c)?.recv(src, tag, buf)?)
        }
        // SAFETY: forwarded contract.
        let got = unsafe { by_type!(datatype, run(c, src, tag, buf, count)) }?;
        // SAFETY: NULL or writable per the contract.
        if let Some(r) = unsafe { received.as_mut() } {
            *r = got;
        }
        Ok(())
    })
}

/// Sets up a conditional allreduce on `comm` (collective): each later
/// `vargr_cond_allreduce` tells whether `reduce(op, values) <predicate> threshold`,
/// deciding without waiting for remote sites when this site's values settle it.
/// `op` is a `vargr_cond_op`, `predicate` a `vargr_predicate`; `max` only decides `>`
/// and `>=`, `min` only `<` and `<=`, `sum` any (inputs must then all have one sign).
///
/// Ownership: `*out` belongs to the caller; free it with `vargr_cond_free` (collective).
///
/// # Safety
/// `comm` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_cond_create(
    comm: *const vargr_comm,
    op: c_int,
    predicate: c_int,
    threshold: f64,
    out: *mut *mut vargr_cond,
) -> c_int {
    guard("vargr_cond_create", || {
        // SAFETY: the caller's contract.
        let (c, out) = unsafe { (ptr::handle(comm, "comm")?, ptr::out(out, "out")?) };
        *out = std::ptr::null_mut();
        let op = match op {
            1 => CondOp::Sum,
            2 => CondOp::Max,
            3 => CondOp::Min,
            o => {
                return Err(Error::invalid(format!(
                    "op {o} is not a vargr_cond_op (1 sum, 2 max, 3 min)"
                )))
            }
        };
        let pred = match predicate {
            1 => Predicate::Greater,
            2 => Predicate::GreaterEq,
            3 => Predicate::Less,
            4 => Predicate::LessEq,
            p => {
                return Err(Error::invalid(format!(
                    "predicate {p} is not a vargr_predicate (1 >, 2 >=, 3 <, 4 <=)"
                )))
            }
        };
        let cond = lock(c)?.conditional(op, pred, threshold)?;
        *out = into_handle(vargr_cond {
            cond: Mutex::new(cond),
        });
        Ok(())
    })
}

/// One iteration's test (collective: every rank calls it once per iteration with its
/// `value`). `*outcome` says whether the condition holds and how it was decided.
///
/// # Safety
/// `cond` is live; `outcome` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_cond_allreduce(
    cond: *const vargr_cond,
    value: f64,
    outcome: *mut vargr_cond_outcome,
) -> c_int {
    guard("vargr_cond_allreduce", || {
        // SAFETY: the caller's contract.
        let (c, outcome) = unsafe { (ptr::handle(cond, "cond")?, ptr::out(outcome, "outcome")?) };
        let mut cond = match c.cond.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return Err(Error::new(
                    vargr_status::VARGR_ERR_BUSY,
                    "the conditional allreduce is in use by another thread",
                ))
            }
        };
        let o = cond.cond_allreduce(value)?;
        *outcome = vargr_cond_outcome {
            holds: o.holds.into(),
            local: o.local.into(),
            remote_used: o.remote_used,
            value: o.value,
        };
        Ok(())
    })
}

/// Ends a conditional allreduce (collective across sites: returns once every site has
/// closed). NULL is a no-op.
///
/// # Safety
/// `cond` is NULL or live, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn vargr_cond_free(cond: *mut vargr_cond) -> c_int {
    // SAFETY: the caller's contract.
    guard("vargr_cond_free", || unsafe {
        free_handle(cond);
        Ok(())
    })
}
