//! Values crossing the boundary: the tagged-argument array between the C shim's
//! variadic functions and Rust, and memory handed to C by `unpack`.
//!
//! Stable Rust cannot define C variadic functions, so `c/shim.c` walks a format's
//! fields (asked of [`vargr_format_fields`], so there is one parser, vargr-wire's) with
//! `va_arg` into an array of [`vargr_arg`], and calls the `*_args` functions, which are
//! also the entry points for languages that cannot call variadic functions. On unpack
//! it goes the other way: Rust fills the array, allocating arrays and strings with
//! `malloc`, and the shim stores them through the caller's pointers.

use std::ffi::{c_char, c_int, c_void};

use bytemuck::Pod;
use vargr_wire::{Elem, Field, Format, Packet, Value};

use crate::ptr;
use crate::status::{guard, Error, Result};

/// Most fields a format string may have (and the size of an argument array that fits
/// any format).
pub const VARGR_MAX_FIELDS: usize = 256;

/// One field's value for the `*_args` functions (send: filled by the caller; unpack:
/// filled by vargr).
///
/// - integer scalars (`%c %uc %hd %uhd %d %ud %ld %uld`): `i` (converted to the field's
///   type as C converts; `%uld` keeps its bits);
/// - `%f %lf`: `f`;
/// - `%s`: `ptr` to a NUL-terminated UTF-8 string (unpack: also `len`, its byte length);
/// - arrays `%a<type>`: `ptr` to `len` elements (`%as`: `len` `const char *` strings);
/// - `%b`: `ptr` to `len` bytes.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct vargr_arg {
    pub i: i64,
    pub f: f64,
    pub ptr: *const c_void,
    pub len: usize,
}

impl Default for vargr_arg {
    fn default() -> Self {
        vargr_arg {
            i: 0,
            f: 0.0,
            ptr: std::ptr::null(),
            len: 0,
        }
    }
}

/// Field codes written by `vargr_format_fields`: an element type, with
/// `VARGR_FIELD_ARRAY` added for its array form.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vargr_field {
    /// `%c`: int8_t
    VARGR_FIELD_CHAR = 1,
    /// `%uc`: uint8_t
    VARGR_FIELD_UCHAR = 2,
    /// `%hd`: int16_t
    VARGR_FIELD_SHORT = 3,
    /// `%uhd`: uint16_t
    VARGR_FIELD_USHORT = 4,
    /// `%d`: int32_t
    VARGR_FIELD_INT = 5,
    /// `%ud`: uint32_t
    VARGR_FIELD_UINT = 6,
    /// `%ld`: int64_t
    VARGR_FIELD_LONG = 7,
    /// `%uld`: uint64_t
    VARGR_FIELD_ULONG = 8,
    /// `%f`: float
    VARGR_FIELD_FLOAT = 9,
    /// `%lf`: double
    VARGR_FIELD_DOUBLE = 10,
    /// `%s`: char *
    VARGR_FIELD_STR = 11,
    /// `%b`: raw bytes
    VARGR_FIELD_RAW = 12,
    /// Added to an element code for its array form (`%ad` is 0x15).
    VARGR_FIELD_ARRAY = 0x10,
}

fn elem_code(e: Elem) -> u8 {
    match e {
        Elem::Char => 1,
        Elem::UChar => 2,
        Elem::Short => 3,
        Elem::UShort => 4,
        Elem::Int => 5,
        Elem::UInt => 6,
        Elem::Long => 7,
        Elem::ULong => 8,
        Elem::Float => 9,
        Elem::Double => 10,
        Elem::Str => 11,
    }
}

pub fn field_code(f: Field) -> u8 {
    match f {
        Field::Scalar(e) => elem_code(e),
        Field::Array(e) => elem_code(e) | vargr_field::VARGR_FIELD_ARRAY as u8,
        Field::Raw => vargr_field::VARGR_FIELD_RAW as u8,
    }
}

/// Parses a format string into field codes (`vargr_field`), one per field.
///
/// `fields` may be NULL when `cap` is 0. Writes the number of fields to `*n`; fails with
/// `VARGR_ERR_INVALID_ARGUMENT` when it exceeds `cap` (nothing is written to `fields`
/// then; `VARGR_MAX_FIELDS` always suffices), and with `VARGR_ERR_FORMAT` when the
/// format does not parse.
///
/// # Safety
/// `format` is a NUL-terminated string; `fields` is valid for `cap` bytes; `n` is valid
/// for writing.
#[no_mangle]
pub unsafe extern "C" fn vargr_format_fields(
    format: *const c_char,
    fields: *mut u8,
    cap: usize,
    n: *mut usize,
) -> c_int {
    guard("vargr_format_fields", || {
        // SAFETY: the caller's contract, forwarded to the checked helpers.
        let (text, n) = unsafe { (ptr::string(format, "format")?, ptr::out(n, "n")?) };
        let f = Format::parse(text)?;
        *n = f.len();
        if f.len() > cap {
            return Err(Error::invalid(format!(
                "format {text:?} has {} fields, room was given for {cap}",
                f.len()
            )));
        }
        // SAFETY: `fields` is valid for `cap >= f.len()` bytes per the contract.
        let out = unsafe { ptr::slice_mut(fields, f.len(), "fields")? };
        for (o, &field) in out.iter_mut().zip(f.fields()) {
            *o = field_code(field);
        }
        Ok(())
    })
}

/// Copies `len` elements from C memory (any alignment) into a vector.
///
/// # Safety
/// `p` is valid for reading `len` elements of `T` when `len > 0`.
unsafe fn copy_in<T: Pod>(
    p: *const c_void,
    len: usize,
    what: &dyn Fn() -> String,
) -> Result<Vec<T>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(Error::invalid(format!(
            "{} is NULL but has {len} elements",
            what()
        )));
    }
    let bytes = len
        .checked_mul(std::mem::size_of::<T>())
        .filter(|&b| b <= u32::MAX as usize)
        .ok_or_else(|| Error::format(format!("{}: {len} elements do not fit a packet", what())))?;
    let mut v = vec![T::zeroed(); len];
    // SAFETY: `p` is readable for `bytes` per the contract; `v` owns `bytes` bytes; the
    // two cannot overlap (`v` was just allocated). Byte copy: `p` may be unaligned.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), v.as_mut_ptr().cast::<u8>(), bytes) };
    Ok(v)
}

/// Builds the values of a packet with `format` from C arguments.
///
/// # Safety
/// Pointers in `args` follow [`vargr_arg`]'s description for their field.
pub unsafe fn values_from_args(format: &Format, args: &[vargr_arg]) -> Result<Vec<Value>> {
    if args.len() != format.len() {
        return Err(Error::format(format!(
            "format {:?} has {} fields, {} arguments were given",
            format.as_str(),
            format.len(),
            args.len()
        )));
    }
    let mut values = Vec::with_capacity(args.len());
    for (index, (&field, a)) in format.fields().iter().zip(args).enumerate() {
        let what = || format!("argument {index} ({field})");
        // SAFETY: each pointer is valid for its field per the contract.
        let v = unsafe { value_from_arg(field, a, &what)? };
        values.push(v);
    }
    Ok(values)
}

/// # Safety
/// As [`values_from_args`], for one field.
unsafe fn value_from_arg(field: Field, a: &vargr_arg, what: &dyn Fn() -> String) -> Result<Value> {
    use Elem::*;
    // C converts to the field's type, so truncating casts are the contract.
    // SAFETY: every pointer in `a` is valid for its field per the caller's contract,
    // which is what copy_in and ptr::string require.
    Ok(unsafe {
        match field {
            Field::Scalar(Char) => Value::Char(a.i as i8),
            Field::Scalar(UChar) => Value::UChar(a.i as u8),
            Field::Scalar(Short) => Value::Short(a.i as i16),
            Field::Scalar(UShort) => Value::UShort(a.i as u16),
            Field::Scalar(Int) => Value::Int(a.i as i32),
            Field::Scalar(UInt) => Value::UInt(a.i as u32),
            Field::Scalar(Long) => Value::Long(a.i),
            Field::Scalar(ULong) => Value::ULong(a.i as u64),
            Field::Scalar(Float) => Value::Float(a.f as f32),
            Field::Scalar(Double) => Value::Double(a.f),
            Field::Scalar(Str) => Value::Str(ptr::string(a.ptr.cast(), &what())?.into()),
            Field::Array(Char) => Value::CharArray(copy_in(a.ptr, a.len, what)?),
            Field::Array(UChar) => Value::UCharArray(copy_in(a.ptr, a.len, what)?),
            Field::Array(Short) => Value::ShortArray(copy_in(a.ptr, a.len, what)?),
            Field::Array(UShort) => Value::UShortArray(copy_in(a.ptr, a.len, what)?),
            Field::Array(Int) => Value::IntArray(copy_in(a.ptr, a.len, what)?),
            Field::Array(UInt) => Value::UIntArray(copy_in(a.ptr, a.len, what)?),
            Field::Array(Long) => Value::LongArray(copy_in(a.ptr, a.len, what)?),
            Field::Array(ULong) => Value::ULongArray(copy_in(a.ptr, a.len, what)?),
            Field::Array(Float) => Value::FloatArray(copy_in(a.ptr, a.len, what)?),
            Field::Array(Double) => Value::DoubleArray(copy_in(a.ptr, a.len, what)?),
            Field::Array(Str) => {
                let ptrs: Vec<usize> = copy_in(a.ptr, a.len, what)?;
                let mut v = Vec::with_capacity(ptrs.len());
                for (j, &p) in ptrs.iter().enumerate() {
                    let s = ptr::string(p as *const c_char, &format!("{} string {j}", what()))?;
                    v.push(s.to_string());
                }
                Value::StrArray(v)
            }
            Field::Raw => {
                let b: Vec<u8> = copy_in(a.ptr, a.len, what)?;
                Value::Raw(bytes::Bytes::from(b))
            }
        }
    })
}

/// A NUL-terminated copy of `s` in memory given to C (`malloc`ed, freed by the caller
/// with `vargr_free`).
pub(crate) fn c_string(s: &str) -> Result<*mut c_char> {
    Ok(CBuf::with_str(s)?.into_raw().cast_mut().cast())
}

/// Memory given to C: `malloc`ed, freed by the caller with `vargr_free`. NULL for an
/// empty array or `%b` field.
struct CBuf(*mut u8);

impl CBuf {
    /// `n` bytes (at least 1, so the pointer is never NULL on success).
    fn alloc(n: usize) -> Result<CBuf> {
        // SAFETY: malloc with a nonzero size; NULL is handled below.
        let p = unsafe { libc::malloc(n.max(1)) }.cast::<u8>();
        if p.is_null() {
            return Err(Error::new(
                crate::status::vargr_status::VARGR_ERR_NO_MEMORY,
                format!("allocating {n} bytes for an unpacked value"),
            ));
        }
        Ok(CBuf(p))
    }

    fn with_bytes(b: &[u8]) -> Result<CBuf> {
        if b.is_empty() {
            return Ok(CBuf(std::ptr::null_mut()));
        }
        let buf = CBuf::alloc(b.len())?;
        // SAFETY: `buf` holds at least `b.len()` bytes and was just allocated.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), buf.0, b.len()) };
        Ok(buf)
    }

    /// A NUL-terminated copy of `s`.
    fn with_str(s: &str) -> Result<CBuf> {
        let buf = CBuf::alloc(s.len() + 1)?;
        // SAFETY: `buf` holds `s.len() + 1` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf.0, s.len());
            *buf.0.add(s.len()) = 0;
        }
        Ok(buf)
    }

    /// One block holding `n` pointers followed by the NUL-terminated strings they point
    /// to: a single `vargr_free` releases everything.
    fn with_strs(v: &[String]) -> Result<CBuf> {
        if v.is_empty() {
            return Ok(CBuf(std::ptr::null_mut()));
        }
        let table = std::mem::size_of::<*mut c_char>() * v.len();
        let total = table + v.iter().map(|s| s.len() + 1).sum::<usize>();
        let buf = CBuf::alloc(total)?;
        let mut at = table;
        for (j, s) in v.iter().enumerate() {
            // SAFETY: the table entries and the string bytes stay within `total` bytes
            // of the fresh block; malloc aligns the table for pointers.
            unsafe {
                let dst = buf.0.add(at);
                std::ptr::copy_nonoverlapping(s.as_ptr(), dst, s.len());
                *dst.add(s.len()) = 0;
                buf.0.cast::<*mut c_char>().add(j).write(dst.cast());
            }
            at += s.len() + 1;
        }
        Ok(buf)
    }

    fn into_raw(self) -> *const c_void {
        let p = self.0;
        std::mem::forget(self);
        p.cast()
    }
}

impl Drop for CBuf {
    fn drop(&mut self) {
        // SAFETY: NULL or allocated by malloc in `alloc`, not handed out (into_raw
        // forgets).
        unsafe { libc::free(self.0.cast()) }
    }
}

fn array_out<T: Pod>(v: &[T]) -> Result<(CBuf, usize)> {
    Ok((CBuf::with_bytes(bytemuck::cast_slice(v))?, v.len()))
}

/// Fills `args` from the packet's values, after checking that `format` is the packet's.
/// On error nothing is allocated.
pub fn args_from_packet(p: &Packet, format: &str, args: &mut [vargr_arg]) -> Result<()> {
    let asked = Format::parse(format)?;
    if asked != p.format {
        return Err(Error::format(format!(
            "the packet's format is {:?}, unpack asked for {:?}",
            p.format.as_str(),
            asked.as_str()
        )));
    }
    if args.len() != asked.len() {
        return Err(Error::format(format!(
            "format {:?} has {} fields, room for {} values was given",
            asked.as_str(),
            asked.len(),
            args.len()
        )));
    }
    // Allocations are held here until every value succeeded, then released to C.
    let mut held: Vec<CBuf> = Vec::new();
    let mut filled = vec![vargr_arg::default(); args.len()];
    for (a, v) in filled.iter_mut().zip(&p.values) {
        if let Some((buf, len)) = fill_one(a, v)? {
            a.ptr = buf.0.cast_const().cast();
            a.len = len;
            held.push(buf);
        }
    }
    for b in held {
        b.into_raw();
    }
    args.copy_from_slice(&filled);
    Ok(())
}

/// Stores a scalar in `a`, or returns the allocation and length of anything else.
fn fill_one(a: &mut vargr_arg, v: &Value) -> Result<Option<(CBuf, usize)>> {
    Ok(Some(match v {
        Value::Char(x) => return scalar(a, i64::from(*x)),
        Value::UChar(x) => return scalar(a, i64::from(*x)),
        Value::Short(x) => return scalar(a, i64::from(*x)),
        Value::UShort(x) => return scalar(a, i64::from(*x)),
        Value::Int(x) => return scalar(a, i64::from(*x)),
        Value::UInt(x) => return scalar(a, i64::from(*x)),
        Value::Long(x) => return scalar(a, *x),
        Value::ULong(x) => return scalar(a, *x as i64),
        Value::Float(x) => {
            a.f = f64::from(*x);
            return Ok(None);
        }
        Value::Double(x) => {
            a.f = *x;
            return Ok(None);
        }
        Value::Str(s) => (CBuf::with_str(s)?, s.len()),
        Value::CharArray(x) => array_out(x)?,
        Value::UCharArray(x) => array_out(x)?,
        Value::ShortArray(x) => array_out(x)?,
        Value::UShortArray(x) => array_out(x)?,
        Value::IntArray(x) => array_out(x)?,
        Value::UIntArray(x) => array_out(x)?,
        Value::LongArray(x) => array_out(x)?,
        Value::ULongArray(x) => array_out(x)?,
        Value::FloatArray(x) => array_out(x)?,
        Value::DoubleArray(x) => array_out(x)?,
        Value::StrArray(x) => (CBuf::with_strs(x)?, x.len()),
        Value::Raw(b) => (CBuf::with_bytes(b)?, b.len()),
    }))
}

fn scalar(a: &mut vargr_arg, i: i64) -> Result<Option<(CBuf, usize)>> {
    a.i = i;
    Ok(None)
}

/// Frees memory that vargr handed to the caller (unpacked arrays, strings and `%b`
/// fields). NULL is a no-op.
///
/// # Safety
/// `p` is NULL or a pointer vargr returned as caller-owned, not freed before.
#[no_mangle]
pub unsafe extern "C" fn vargr_free(p: *mut c_void) {
    // SAFETY: such pointers come from libc::malloc (see CBuf), per the contract.
    unsafe { libc::free(p) }
}
