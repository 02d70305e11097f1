//! Checked conversions of the raw pointers C hands us: handles, strings, out-parameters.
//!
//! Every check names the argument, so a NULL or bad UTF-8 comes back as
//! `VARGR_ERR_INVALID_ARGUMENT` with a message such as `topology is NULL` instead of a
//! crash. What cannot be checked (a dangling or foreign pointer) is the caller's
//! responsibility, as documented in the header.

use std::ffi::{c_char, CStr};

use crate::status::{Error, Result};

/// Borrows the object behind a handle.
///
/// # Safety
/// `p` is NULL or a live handle of type `T` created by this library and not yet freed.
pub unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T> {
    // SAFETY: non-null handles are live `Box<T>`s per the caller's contract.
    unsafe { p.as_ref() }.ok_or_else(|| Error::invalid(format!("{what} is NULL")))
}

/// Borrows a NUL-terminated UTF-8 string.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives `'a`.
pub unsafe fn string<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|e| {
        Error::invalid(format!(
            "{what} is not valid UTF-8 (bad byte at offset {}): {:?}",
            e.valid_up_to(),
            String::from_utf8_lossy(s.to_bytes())
        ))
    })
}

/// Like [`string`], with NULL meaning "not given".
///
/// # Safety
/// As [`string`].
pub unsafe fn opt_string<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded contract.
    unsafe { string(p, what) }.map(Some)
}

/// Checks an out-parameter and returns it for writing.
///
/// # Safety
/// `p` is NULL or valid for writing a `T`.
pub unsafe fn out<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    // SAFETY: non-null out-parameters are writable per the caller's contract.
    unsafe { p.as_mut() }.ok_or_else(|| Error::invalid(format!("{what} (out-parameter) is NULL")))
}

/// Moves `v` to the heap and hands ownership to C.
pub fn into_handle<T>(v: T) -> *mut T {
    Box::into_raw(Box::new(v))
}

/// Takes ownership back from C and drops the object (NULL is a no-op).
///
/// # Safety
/// `p` is NULL or a handle created by [`into_handle`] for the same `T`, not freed before.
pub unsafe fn free_handle<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: created by Box::into_raw and freed once, per the caller's contract.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// A slice of `len` elements at `p`; NULL is accepted when `len` is 0.
///
/// # Safety
/// `p` is NULL (with `len == 0`) or valid for reading `len` elements of `T`, aligned,
/// for `'a`.
pub unsafe fn slice<'a, T>(p: *const T, len: usize, what: &str) -> Result<&'a [T]> {
    check_buffer(p, len, what)?;
    if len == 0 {
        return Ok(&[]);
    }
    // SAFETY: non-null, aligned (checked) and valid for `len` reads per the contract.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Like [`slice`], for writing.
///
/// # Safety
/// As [`slice`], valid for writing, and not aliased by any other argument.
pub unsafe fn slice_mut<'a, T>(p: *mut T, len: usize, what: &str) -> Result<&'a mut [T]> {
    check_buffer(p, len, what)?;
    if len == 0 {
        return Ok(&mut []);
    }
    // SAFETY: non-null, aligned (checked), valid and unaliased per the contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

fn check_buffer<T>(p: *const T, len: usize, what: &str) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    if p.is_null() {
        return Err(Error::invalid(format!(
            "{what} is NULL but has {len} elements"
        )));
    }
    if !p.is_aligned() {
        return Err(Error::invalid(format!(
            "{what} at {p:p} is not aligned to {} bytes",
            std::mem::align_of::<T>()
        )));
    }
    if len
        .checked_mul(std::mem::size_of::<T>())
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(Error::invalid(format!(
            "{what}: {len} elements is too large"
        )));
    }
    Ok(())
}
