//! Point-to-point from C as MPI programs write it: receives from any source or with any
//! tag (`VARGR_ANY_SOURCE`, `VARGR_ANY_TAG`), non-blocking sends and receives as
//! `vargr_request`s completed by wait, test, waitany and waitall, and probes.
//!
//! A non-blocking receive remembers the caller's buffer and fills it when the request
//! completes, as `MPI_Irecv` does; matching follows the order receives were posted
//! (see `vargr_coll::Comm::irecv`). Sends are eager, so an `isend` is complete at once
//! and its buffer is free to reuse when the call returns.

use std::ffi::{c_int, c_void};

use vargr_coll::{Received, Request};

use super::{lock, rank_arg, vargr_comm};
use crate::ptr::{self, free_handle, into_handle};
use crate::status::{guard, vargr_status, Error, Result};

/// `src` of a receive or probe that takes a message from any rank.
pub const VARGR_ANY_SOURCE: c_int = -1;
/// `tag` of a receive or probe that takes a message with any tag.
pub const VARGR_ANY_TAG: u64 = u64::MAX;

/// What a completed receive or a probe reports (MPI's `MPI_Status`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct vargr_recv_status {
    /// The sender's rank in the communicator.
    pub source: c_int,
    pub tag: u64,
    /// Whole elements of the receive's datatype in the message (`MPI_Get_count`); for
    /// a probe, of the probe's datatype.
    pub count: usize,
    /// The message's length in bytes.
    pub bytes: usize,
}

/// A non-blocking send or receive (opaque), from `vargr_comm_isend` or
/// `vargr_comm_irecv`; completing it frees it and sets the caller's pointer to NULL.
pub struct vargr_request {
    comm: *const vargr_comm,
    req: Option<Request>,
    /// Where a receive's message goes, and its room in bytes.
    buf: *mut c_void,
    room: usize,
    elem: usize,
}

/// Byte width of a `vargr_datatype` (from the one table of codes, `by_type!`).
fn elem_size(datatype: c_int) -> Result<usize> {
    fn size<T>() -> Result<usize> {
        Ok(std::mem::size_of::<T>())
    }
    by_type!(datatype, size())
}

fn source_arg(c: &vargr_comm, src: c_int) -> Result<Option<usize>> {
    if src == VARGR_ANY_SOURCE {
        return Ok(None);
    }
    rank_arg(src, "src", c.size).map(Some)
}

fn tag_arg(tag: u64) -> Option<u64> {
    (tag != VARGR_ANY_TAG).then_some(tag)
}

fn status_of(source: usize, tag: u64, bytes: usize, elem: usize) -> vargr_recv_status {
    vargr_recv_status {
        source: source as c_int,
        tag,
        count: bytes / elem.max(1),
        bytes,
    }
}

/// Copies a received message into the caller's buffer and reports it.
///
/// # Safety
/// `buf` is valid for `room` bytes of writing (or NULL with `room` 0).
unsafe fn deliver(
    m: &Received,
    buf: *mut c_void,
    room: usize,
    elem: usize,
) -> Result<vargr_recv_status> {
    let n = m.data.len();
    if n > room || !n.is_multiple_of(elem) {
        return Err(Error::new(
            vargr_status::VARGR_ERR_PRECONDITION,
            format!(
                "the message from rank {} with tag {} has {n} bytes; the receive buffer \
                 holds {room} bytes of {elem}-byte elements (truncated, as MPI_ERR_TRUNCATE)",
                m.source, m.tag
            ),
        ));
    }
    // SAFETY: the caller's contract; `n <= room`.
    let dst = unsafe { ptr::slice_mut(buf.cast::<u8>(), n, "buf")? };
    dst.copy_from_slice(&m.data);
    Ok(status_of(m.source, m.tag, n, elem))
}

/// # Safety
/// `st` is NULL or writable.
unsafe fn report(st: *mut vargr_recv_status, s: vargr_recv_status) {
    // SAFETY: the caller's contract.
    if let Some(out) = unsafe { st.as_mut() } {
        *out = s;
    }
}

/// Receives into `buf` (room for `count` elements of `datatype`) the next message from
/// `src` (or `VARGR_ANY_SOURCE`) with `tag` (or `VARGR_ANY_TAG`); `*status` (if not
/// NULL) gets its source, tag and size. A longer message is an error
/// (`VARGR_ERR_PRECONDITION`, as `MPI_ERR_TRUNCATE`) and is consumed.
///
/// # Safety
/// `comm` is live; `buf` is valid for `count` elements of `datatype`; `status` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_recv_any(
    comm: *const vargr_comm,
    src: c_int,
    tag: u64,
    buf: *mut c_void,
    count: usize,
    datatype: c_int,
    status: *mut vargr_recv_status,
) -> c_int {
    guard("vargr_comm_recv_any", || {
        // SAFETY: the caller's contract.
        let c = unsafe { ptr::handle(comm, "comm")? };
        let elem = elem_size(datatype)?;
        let src = source_arg(c, src)?;
        let m = lock(c)?.recv_any(src, tag_arg(tag))?;
        // SAFETY: the caller's contract.
        let s = unsafe { deliver(&m, buf, count.saturating_mul(elem), elem)? };
        // SAFETY: the caller's contract.
        unsafe { report(status, s) };
        Ok(())
    })
}

/// Sends `count` elements of `buf` to `dest` with `tag` as a request. Sends are eager:
/// the request is complete at once and `buf` may be reused when this returns.
///
/// Ownership: `*out` belongs to the caller until a wait or successful test frees it.
///
/// # Safety
/// `comm` is live and outlives the request; `buf` is valid for `count` elements of
/// `datatype`, aligned; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_isend(
    comm: *const vargr_comm,
    dest: c_int,
    tag: u64,
    buf: *const c_void,
    count: usize,
    datatype: c_int,
    out: *mut *mut vargr_request,
) -> c_int {
    guard("vargr_comm_isend", || {
        // SAFETY: the caller's contract.
        let out = unsafe { ptr::out(out, "out")? };
        *out = std::ptr::null_mut();
        // SAFETY: forwarded contract.
        unsafe { super::send(comm, dest, tag, buf, count, datatype)? };
        *out = into_handle(vargr_request {
            comm,
            req: None,
            buf: std::ptr::null_mut(),
            room: 0,
            elem: 1,
        });
        Ok(())
    })
}

/// Posts a receive into `buf` (room for `count` elements of `datatype`) from `src` (or
/// `VARGR_ANY_SOURCE`) with `tag` (or `VARGR_ANY_TAG`). `buf` is filled when the
/// request completes; until then it must stay valid and untouched.
///
/// Ownership: `*out` belongs to the caller until a wait or successful test frees it
/// (or `vargr_request_cancel`).
///
/// # Safety
/// `comm` is live and outlives the request; `buf` is valid for `count` elements of
/// `datatype` until the request completes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_irecv(
    comm: *const vargr_comm,
    src: c_int,
    tag: u64,
    buf: *mut c_void,
    count: usize,
    datatype: c_int,
    out: *mut *mut vargr_request,
) -> c_int {
    guard("vargr_comm_irecv", || {
        // SAFETY: the caller's contract.
        let out = unsafe { ptr::out(out, "out")? };
        *out = std::ptr::null_mut();
        // SAFETY: the caller's contract.
        let c = unsafe { ptr::handle(comm, "comm")? };
        let elem = elem_size(datatype)?;
        let room = count
            .checked_mul(elem)
            .ok_or_else(|| Error::invalid(format!("count {count} is too large")))?;
        if buf.is_null() && room > 0 {
            return Err(Error::invalid("buf is NULL"));
        }
        let src = source_arg(c, src)?;
        let req = lock(c)?.irecv(src, tag_arg(tag))?;
        *out = into_handle(vargr_request {
            comm,
            req: Some(req),
            buf,
            room,
            elem,
        });
        Ok(())
    })
}

/// Finishes a request whose receive (if any) completed with `m`; frees it.
///
/// # Safety
/// `*slot` is a live request; `status` is NULL or writable.
unsafe fn finish(
    slot: &mut *mut vargr_request,
    m: Option<Received>,
    status: *mut vargr_recv_status,
) -> Result<()> {
    // SAFETY: the caller's contract; the handle is freed once, here.
    let r = unsafe { Box::from_raw(*slot) };
    *slot = std::ptr::null_mut();
    let s = match m {
        // SAFETY: the buffer the receive was posted with.
        Some(m) => unsafe { deliver(&m, r.buf, r.room, r.elem)? },
        None => vargr_recv_status::default(),
    };
    // SAFETY: the caller's contract.
    unsafe { report(status, s) };
    Ok(())
}

/// The live request and its communicator; `None` when `*req` is NULL (MPI's
/// `MPI_REQUEST_NULL`, which completes at once).
///
/// # Safety
/// `req` is NULL or writable and holds NULL or a live request.
unsafe fn request<'a>(
    req: *mut *mut vargr_request,
) -> Result<Option<(&'a mut *mut vargr_request, &'a vargr_comm)>> {
    // SAFETY: the caller's contract.
    let slot = unsafe { ptr::out(req, "req")? };
    if slot.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let r = unsafe { ptr::handle(*slot, "*req")? };
    // SAFETY: the request's contract: its communicator outlives it.
    let c = unsafe { ptr::handle(r.comm, "the request's comm")? };
    Ok(Some((slot, c)))
}

/// Waits for `*req` to complete, fills the receive's buffer and `*status` (if not NULL),
/// frees the request and sets `*req` to NULL. A NULL `*req` completes at once (as
/// `MPI_REQUEST_NULL`).
///
/// # Safety
/// `req` is writable and holds NULL or a live request; `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_request_wait(
    req: *mut *mut vargr_request,
    status: *mut vargr_recv_status,
) -> c_int {
    // SAFETY: the caller's contract.
    guard("vargr_request_wait", || unsafe { wait(req, status) })
}

/// `vargr_request_wait`'s work.
///
/// # Safety
/// As `vargr_request_wait`.
unsafe fn wait(req: *mut *mut vargr_request, status: *mut vargr_recv_status) -> Result<()> {
    // SAFETY: the caller's contract.
    let Some((slot, c)) = (unsafe { request(req)? }) else {
        return Ok(());
    };
    // SAFETY: checked live above; taken out once, then freed by `finish`.
    let inner = unsafe { (**slot).req.take() };
    let m = match inner {
        Some(r) => lock(c)?.wait(r)?,
        None => None,
    };
    // SAFETY: the caller's contract.
    unsafe { finish(slot, m, status) }
}

/// Completes `*req` if it can without waiting: `*flag` is 1 and the request is finished
/// as by `vargr_request_wait`, or 0 and the request stays live.
///
/// # Safety
/// `req` is writable and holds NULL or a live request; `flag` is writable; `status` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_request_test(
    req: *mut *mut vargr_request,
    flag: *mut c_int,
    status: *mut vargr_recv_status,
) -> c_int {
    guard("vargr_request_test", || {
        // SAFETY: the caller's contract.
        let flag = unsafe { ptr::out(flag, "flag")? };
        *flag = 0;
        // SAFETY: the caller's contract.
        let Some((slot, c)) = (unsafe { request(req)? }) else {
            *flag = 1;
            return Ok(());
        };
        // SAFETY: checked live above.
        let m = match unsafe { (**slot).req.as_ref() } {
            Some(r) => match lock(c)?.test(r)? {
                Some(m) => Some(m),
                None => return Ok(()),
            },
            None => None,
        };
        *flag = 1;
        // SAFETY: the caller's contract.
        unsafe { finish(slot, m, status) }
    })
}

/// Waits until one of the `n` requests completes; `*index` gets its position, which is
/// finished as by `vargr_request_wait` (and set to NULL). NULL entries are skipped; if
/// all are NULL, `*index` is `n`.
///
/// # Safety
/// `reqs` holds `n` entries, each NULL or a live request, all of one communicator;
/// `index` is writable; `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_request_waitany(
    reqs: *mut *mut vargr_request,
    n: usize,
    index: *mut usize,
    status: *mut vargr_recv_status,
) -> c_int {
    guard("vargr_request_waitany", || {
        // SAFETY: the caller's contract.
        let index = unsafe { ptr::out(index, "index")? };
        *index = n;
        // SAFETY: the caller's contract.
        let all = unsafe { ptr::slice_mut(reqs, n, "reqs")? };
        let live: Vec<usize> = (0..n).filter(|&i| !all[i].is_null()).collect();
        let Some(&first) = live.first() else {
            return Ok(());
        };
        // SAFETY: non-NULL entries are live requests.
        let c = unsafe { ptr::handle((*all[first]).comm, "the request's comm")? };
        // Sends are complete: the first one wins.
        // SAFETY: as above.
        if let Some(&i) = live.iter().find(|&&i| unsafe { (*all[i]).req.is_none() }) {
            *index = i;
            // SAFETY: a live request.
            return unsafe { finish(&mut all[i], None, status) };
        }
        // SAFETY: as above; the requests are only borrowed for the wait.
        let pending: Vec<Request> = live
            .iter()
            .map(|&i| unsafe { (*all[i]).req.take().expect("receives hold a request") })
            .collect();
        let got = lock(c)?.wait_any(&pending);
        // Give every request back before reporting anything.
        let mut k = None;
        for (j, r) in pending.into_iter().enumerate() {
            // SAFETY: as above.
            unsafe { (*all[live[j]]).req = Some(r) };
            if let Ok((done, _)) = &got {
                if *done == j {
                    k = Some(live[j]);
                }
            }
        }
        let (_, m) = got?;
        let i = k.expect("wait_any returns one of its requests");
        *index = i;
        // SAFETY: a live request; its inner request is spent and dropped with it.
        unsafe { finish(&mut all[i], m, status) }
    })
}

/// Waits for every one of the `n` requests, in order; `statuses` (if not NULL) holds
/// `n` entries that get each one's status. NULL entries complete at once.
///
/// # Safety
/// `reqs` holds `n` entries, each NULL or a live request; `statuses` is NULL or
/// writable for `n` entries.
#[no_mangle]
pub unsafe extern "C" fn vargr_request_waitall(
    reqs: *mut *mut vargr_request,
    n: usize,
    statuses: *mut vargr_recv_status,
) -> c_int {
    guard("vargr_request_waitall", || {
        // SAFETY: the caller's contract.
        let all = unsafe { ptr::slice_mut(reqs, n, "reqs")? };
        for (i, slot) in all.iter_mut().enumerate() {
            let st = if statuses.is_null() {
                std::ptr::null_mut()
            } else {
                // SAFETY: `statuses` holds `n` entries.
                unsafe { statuses.add(i) }
            };
            // SAFETY: the caller's contract.
            unsafe { wait(slot, st) }.map_err(|e| e.context(&format!("request {i}")))?;
        }
        Ok(())
    })
}

/// Withdraws a receive that has not matched a message and frees the request (sets
/// `*req` to NULL); `*cancelled` (if not NULL) is 1 if it was withdrawn, 0 if it had
/// already matched one (that message is then dropped). NULL `*req` is a no-op.
///
/// # Safety
/// `req` is writable and holds NULL or a live request; `cancelled` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_request_cancel(
    req: *mut *mut vargr_request,
    cancelled: *mut c_int,
) -> c_int {
    guard("vargr_request_cancel", || {
        // SAFETY: the caller's contract.
        let Some((slot, c)) = (unsafe { request(req)? }) else {
            return Ok(());
        };
        // SAFETY: a live request.
        let inner = unsafe { (**slot).req.take() };
        let done = match inner {
            Some(r) => lock(c)?.cancel(r)?,
            None => false,
        };
        // SAFETY: a live request, freed once.
        unsafe { free_handle(*slot) };
        *slot = std::ptr::null_mut();
        // SAFETY: the caller's contract.
        if let Some(out) = unsafe { cancelled.as_mut() } {
            *out = c_int::from(done);
        }
        Ok(())
    })
}

/// Waits for a message from `src` (or `VARGR_ANY_SOURCE`) with `tag` (or
/// `VARGR_ANY_TAG`) and reports it in `*status` (`count` in elements of `datatype`)
/// without receiving it: the next matching receive gets it.
///
/// # Safety
/// `comm` is live; `status` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_probe(
    comm: *const vargr_comm,
    src: c_int,
    tag: u64,
    datatype: c_int,
    status: *mut vargr_recv_status,
) -> c_int {
    guard("vargr_comm_probe", || {
        // SAFETY: the caller's contract.
        let c = unsafe { ptr::handle(comm, "comm")? };
        // SAFETY: the caller's contract.
        let out = unsafe { ptr::out(status, "status")? };
        let elem = elem_size(datatype)?;
        let s = lock(c)?.probe(source_arg(c, src)?, tag_arg(tag))?;
        *out = status_of(s.source, s.tag, s.len, elem);
        Ok(())
    })
}

/// Like `vargr_comm_probe` without waiting: `*flag` is 1 and `*status` filled if such a
/// message is here, else 0.
///
/// # Safety
/// `comm` is live; `flag` and `status` are writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_comm_iprobe(
    comm: *const vargr_comm,
    src: c_int,
    tag: u64,
    datatype: c_int,
    flag: *mut c_int,
    status: *mut vargr_recv_status,
) -> c_int {
    guard("vargr_comm_iprobe", || {
        // SAFETY: the caller's contract.
        let c = unsafe { ptr::handle(comm, "comm")? };
        // SAFETY: the caller's contract.
        let flag = unsafe { ptr::out(flag, "flag")? };
        // SAFETY: the caller's contract.
        let out = unsafe { ptr::out(status, "status")? };
        let elem = elem_size(datatype)?;
        *flag = 0;
        if let Some(s) = lock(c)?.iprobe(source_arg(c, src)?, tag_arg(tag))? {
            *out = status_of(s.source, s.tag, s.len, elem);
            *flag = 1;
        }
        Ok(())
    })
}
