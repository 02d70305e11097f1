//! The host side of the plugin ABI: the C structs, the helpers handed to plugins and
//! the emit() callback. Every callback checks its pointers, never unwinds into C, and
//! emitted packets go through vargr-wire's bounded decoder.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use bytes::{BufMut, Bytes, BytesMut};
use vargr_wire::{Elem, Field, Packet, Value, DEFAULT_MAX_FRAME};

use super::ABI_VERSION;
use crate::arith::{with_num, Num};

pub(super) const OK: c_int = 0;
const ERR_FIELD: c_int = 1;
const ERR_TYPE: c_int = 2;
const ERR_RANGE: c_int = 3;
const ERR_INVALID: c_int = 4;

#[repr(C)]
pub(super) struct PacketView {
    pub(super) stream: u32,
    pub(super) tag: i32,
    pub(super) source: u32,
    pub(super) num_fields: u32,
    pub(super) format: *const c_char,
    pub(super) payload: *const u8,
    pub(super) payload_len: usize,
    pub(super) host: *const c_void,
}

#[repr(C)]
pub(super) struct CtxC {
    pub(super) node_id: u32,
    pub(super) stream: u32,
    pub(super) is_root: u32,
    pub(super) num_inputs: u32,
}

#[repr(C)]
pub(super) struct HostApi {
    abi_version: u32,
    reserved: u32,
    get_i64: unsafe extern "C" fn(*const PacketView, u32, *mut i64) -> c_int,
    get_f64: unsafe extern "C" fn(*const PacketView, u32, *mut f64) -> c_int,
    get_str:
        unsafe extern "C" fn(*const PacketView, u32, u32, *mut *const c_char, *mut usize) -> c_int,
    array: unsafe extern "C" fn(
        *const PacketView,
        u32,
        *mut u32,
        *mut *const c_void,
        *mut usize,
    ) -> c_int,
    emit: unsafe extern "C" fn(*mut c_void, i32, *const c_char, *const u8, usize) -> c_int,
}

pub(super) static HOST: HostApi = HostApi {
    abi_version: ABI_VERSION,
    reserved: 0,
    get_i64,
    get_f64,
    get_str,
    array,
    emit,
};

/// What emit() collects during one apply() call.
pub(super) struct EmitSink {
    pub(super) stream: u32,
    pub(super) out: Vec<Packet>,
    pub(super) error: Option<String>,
}

/// The packet's values in vargr-wire's encoding: its payload without source and format.
pub(super) fn values_bytes(p: &Packet) -> Bytes {
    let mut buf = BytesMut::new();
    p.encode_payload(&mut buf);
    buf.freeze().slice(6 + p.format.as_str().len()..)
}

/// Runs a callback body without letting a panic cross into C.
fn guarded(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(ERR_INVALID)
}

/// # Safety
/// `v` must be null or a view the host passed to the running apply() call.
unsafe fn field<'a>(v: *const PacketView, field: u32) -> Result<&'a Value, c_int> {
    if v.is_null() || (*v).host.is_null() {
        return Err(ERR_INVALID);
    }
    let p = &*((*v).host as *const Packet);
    p.values.get(field as usize).ok_or(ERR_FIELD)
}

fn scalar_i64<T: Num>(v: &Value) -> Option<i64> {
    T::scalar(v)?.to_i64()
}

fn scalar_f64<T: Num>(v: &Value) -> Option<f64> {
    T::scalar(v).map(Num::to_f64)
}

fn array_ptr<T: Num>(v: &Value) -> Option<(*const c_void, usize)> {
    T::array(v).map(|a| (a.as_ptr().cast(), a.len()))
}

/// ABI code of an element type (`VARGR_ELEM_*`).
fn elem_code(e: Elem) -> u32 {
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
        Elem::Str => 0,
    }
}
const ELEM_RAW: u32 = 11;

unsafe extern "C" fn get_i64(v: *const PacketView, f: u32, out: *mut i64) -> c_int {
    guarded(|| {
        let value = match field(v, f) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let Field::Scalar(elem) = vargr_wire::Format::field_of(value) else {
            return ERR_TYPE;
        };
        if out.is_null() {
            return ERR_INVALID;
        }
        if matches!(elem, Elem::Float | Elem::Double | Elem::Str) {
            return ERR_TYPE;
        }
        match with_num!(elem, scalar_i64(value)).flatten() {
            Some(x) => {
                *out = x;
                OK
            }
            None => ERR_RANGE,
        }
    })
}

unsafe extern "C" fn get_f64(v: *const PacketView, f: u32, out: *mut f64) -> c_int {
    guarded(|| {
        let value = match field(v, f) {
            Ok(x) => x,
            Err(e) => return e,
        };
        if out.is_null() {
            return ERR_INVALID;
        }
        let Field::Scalar(elem) = vargr_wire::Format::field_of(value) else {
            return ERR_TYPE;
        };
        match with_num!(elem, scalar_f64(value)).flatten() {
            Some(x) => {
                *out = x;
                OK
            }
            None => ERR_TYPE,
        }
    })
}

unsafe extern "C" fn get_str(
    v: *const PacketView,
    f: u32,
    index: u32,
    ptr: *mut *const c_char,
    len: *mut usize,
) -> c_int {
    guarded(|| {
        let value = match field(v, f) {
            Ok(x) => x,
            Err(e) => return e,
        };
        if ptr.is_null() || len.is_null() {
            return ERR_INVALID;
        }
        let s = match value {
            Value::Str(s) if index == 0 => s,
            Value::StrArray(a) => match a.get(index as usize) {
                Some(s) => s,
                None => return ERR_FIELD,
            },
            Value::Str(_) => return ERR_FIELD,
            _ => return ERR_TYPE,
        };
        *ptr = s.as_ptr().cast();
        *len = s.len();
        OK
    })
}

unsafe extern "C" fn array(
    v: *const PacketView,
    f: u32,
    elem: *mut u32,
    ptr: *mut *const c_void,
    count: *mut usize,
) -> c_int {
    guarded(|| {
        let value = match field(v, f) {
            Ok(x) => x,
            Err(e) => return e,
        };
        if elem.is_null() || ptr.is_null() || count.is_null() {
            return ERR_INVALID;
        }
        let (code, found) = match (value, vargr_wire::Format::field_of(value)) {
            (Value::Raw(b), _) => (ELEM_RAW, Some((b.as_ptr().cast(), b.len()))),
            (_, Field::Array(e)) => (elem_code(e), with_num!(e, array_ptr(value)).flatten()),
            _ => (0, None),
        };
        let Some((p, n)) = found else { return ERR_TYPE };
        *elem = code;
        *ptr = p;
        *count = n;
        OK
    })
}

unsafe extern "C" fn emit(
    out_ctx: *mut c_void,
    tag: i32,
    format: *const c_char,
    payload: *const u8,
    len: usize,
) -> c_int {
    guarded(|| {
        if out_ctx.is_null() {
            return ERR_INVALID;
        }
        let sink = &mut *(out_ctx as *mut EmitSink);
        let result = (|| {
            if format.is_null() || (payload.is_null() && len > 0) {
                return Err("null format or payload".to_string());
            }
            let fmt = CStr::from_ptr(format).to_bytes();
            if fmt.len() > u16::MAX as usize || len > DEFAULT_MAX_FRAME {
                return Err(format!(
                    "format of {} bytes or payload of {len} bytes is too long",
                    fmt.len()
                ));
            }
            let mut buf = BytesMut::with_capacity(6 + fmt.len() + len);
            buf.put_u32_le(u32::MAX);
            buf.put_u16_le(fmt.len() as u16);
            buf.put_slice(fmt);
            if len > 0 {
                buf.put_slice(std::slice::from_raw_parts(payload, len));
            }
            Packet::decode_payload(sink.stream, tag, &buf.freeze()).map_err(|e| e.to_string())
        })();
        match result {
            Ok(p) => {
                sink.out.push(p);
                OK
            }
            Err(e) => {
                sink.error.get_or_insert(e);
                ERR_INVALID
            }
        }
    })
}
