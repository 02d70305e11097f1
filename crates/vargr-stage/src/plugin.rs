//! Stages loaded from shared objects through the C ABI of `include/vargr_stage.h`.
//!
//! The same discipline as vargr-filter's plugins: the version is checked on load, every
//! descriptor's name and functions are checked before use, the library stays loaded
//! while an instance lives, and a plugin's output is copied out of vargr's own buffer
//! with its claimed length checked against the room it was given.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use libloading::Library;
use vargr_wire::{Frame, FrameKind, HEADER_LEN};

use crate::user::{Factory, UserStageError};
use crate::Stage;

/// The ABI version this host speaks (`VARGR_STAGE_ABI_VERSION`).
pub const STAGE_ABI_VERSION: u32 = 1;
const MAX_STAGES: usize = 1024;
const MAX_MESSAGE: usize = 4096;

type CreateFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void, *mut c_char, usize) -> c_int;
type CallFn = unsafe extern "C" fn(*mut c_void, *const FrameC, *mut u8, usize, *mut usize) -> c_int;
type LastErrorFn = unsafe extern "C" fn(*mut c_void) -> *const c_char;

#[repr(C)]
struct FrameC {
    kind: u8,
    flags: u8,
    reserved: u16,
    stream: u32,
    tag: i32,
    payload: *const u8,
    payload_len: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DescC {
    name: *const c_char,
    description: *const c_char,
    max_growth: usize,
    create: Option<CreateFn>,
    outbound: Option<CallFn>,
    inbound: Option<CallFn>,
    destroy: Option<unsafe extern "C" fn(*mut c_void)>,
    last_error: Option<LastErrorFn>,
}

/// One stage a plugin lists.
struct Entry {
    name: String,
    max_growth: usize,
    create: CreateFn,
    outbound: CallFn,
    inbound: Option<CallFn>,
    destroy: unsafe extern "C" fn(*mut c_void),
    last_error: Option<LastErrorFn>,
    /// Keeps the library loaded while the entry or an instance lives.
    _lib: Arc<Library>,
}

// SAFETY: function pointers into a library kept loaded by the Arc; the ABI requires
// create() to be callable from any thread.
unsafe impl Send for Entry {}
unsafe impl Sync for Entry {}

/// Loads a plugin and returns a factory per stage it lists.
pub(crate) fn load(path: &Path) -> Result<Vec<(String, Factory)>, UserStageError> {
    let fail = |reason: String| UserStageError::Plugin {
        path: path.to_path_buf(),
        reason,
    };
    // SAFETY: loading runs the library's initializers; loading a plugin means trusting it.
    let lib = unsafe { Library::new(path) }.map_err(|e| fail(format!("cannot load: {e}")))?;
    // SAFETY: the signatures are those the header declares.
    let version = unsafe {
        lib.get::<unsafe extern "C" fn() -> u32>(b"vargr_stage_abi_version\0")
            .map_err(|_| {
                fail("missing symbol vargr_stage_abi_version: not a vargr stage plugin (see include/vargr_stage.h)".into())
            })?()
    };
    if version != STAGE_ABI_VERSION {
        return Err(fail(format!(
            "plugin speaks stage ABI version {version}, this vargr speaks {STAGE_ABI_VERSION}: rebuild it against this vargr's vargr_stage.h"
        )));
    }
    let mut n = 0usize;
    // SAFETY: as above; the list must stay valid while the library is loaded.
    let list = unsafe {
        lib.get::<unsafe extern "C" fn(*mut usize) -> *const DescC>(b"vargr_stage_list\0")
            .map_err(|_| fail("missing symbol vargr_stage_list".into()))?(&mut n)
    };
    if list.is_null() || n == 0 || n > MAX_STAGES {
        return Err(fail(format!(
            "vargr_stage_list returned {n} stages (1-{MAX_STAGES} expected)"
        )));
    }
    // SAFETY: the plugin promises `n` descriptors at `list`.
    let descs = unsafe { std::slice::from_raw_parts(list, n) }.to_vec();
    let lib = Arc::new(lib);
    let mut out: Vec<(String, Factory)> = Vec::with_capacity(n);
    for (i, d) in descs.into_iter().enumerate() {
        // SAFETY: a non-null name must be a NUL-terminated string.
        let name = (!d.name.is_null())
            .then(|| unsafe { CStr::from_ptr(d.name) }.to_str().ok())
            .flatten()
            .ok_or_else(|| fail(format!("stage {i} has no UTF-8 name")))?
            .to_string();
        if out.iter().any(|(e, _)| *e == name) {
            return Err(fail(format!("stage name {name:?} is listed twice")));
        }
        let (Some(create), Some(outbound), Some(destroy)) = (d.create, d.outbound, d.destroy)
        else {
            return Err(fail(format!(
                "stage {name:?} lacks create, outbound or destroy"
            )));
        };
        let entry = Arc::new(Entry {
            name: name.clone(),
            max_growth: d.max_growth,
            create,
            outbound,
            inbound: d.inbound,
            destroy,
            last_error: d.last_error,
            _lib: lib.clone(),
        });
        let factory: Factory = Arc::new(move |params: &str| {
            let state = create_state(&entry, params)?;
            Ok(Box::new(PluginStage {
                entry: entry.clone(),
                state,
                buf: Vec::new(),
                failure: None,
                failed: false,
            }) as Box<dyn Stage>)
        });
        out.push((name, factory));
    }
    Ok(out)
}

fn create_state(entry: &Entry, params: &str) -> Result<*mut c_void, String> {
    let c_params = CString::new(params).map_err(|_| "params contain a NUL byte".to_string())?;
    let mut err = vec![0u8; 512];
    let mut state: *mut c_void = std::ptr::null_mut();
    // SAFETY: arguments follow the header: a C string, an out pointer, a buffer and its length.
    let status = unsafe {
        (entry.create)(
            c_params.as_ptr(),
            &mut state,
            err.as_mut_ptr().cast(),
            err.len(),
        )
    };
    if status != 0 {
        let end = err.iter().position(|b| *b == 0).unwrap_or(err.len());
        return Err(format!(
            "create returned status {status}: {}",
            String::from_utf8_lossy(&err[..end])
        ));
    }
    Ok(state)
}

/// One instance of a plugin's stage on one link end.
struct PluginStage {
    entry: Arc<Entry>,
    state: *mut c_void,
    /// The output room handed to the plugin, kept between frames.
    buf: Vec<u8>,
    failure: Option<String>,
    /// Failed once: later frames are dropped, not sent untransformed, until the link
    /// closes.
    failed: bool,
}

// SAFETY: the ABI requires instances to be usable from any thread, one at a time.
unsafe impl Send for PluginStage {}

impl Drop for PluginStage {
    fn drop(&mut self) {
        // SAFETY: the state came from this entry's create() and is destroyed once; the
        // library stays loaded until `entry` is dropped after this.
        unsafe { (self.entry.destroy)(self.state) }
    }
}

fn carries_data(kind: u8) -> bool {
    kind == FrameKind::Data as u8 || kind == FrameKind::PointToPoint as u8
}

impl PluginStage {
    /// Runs `call` on one payload; the new payload, or why not.
    fn run(&mut self, call: CallFn, head: FrameC) -> Result<&[u8], String> {
        let cap = head.payload_len.saturating_add(self.entry.max_growth);
        if self.buf.len() < cap {
            self.buf.resize(cap, 0);
        }
        let mut out_len = 0usize;
        // SAFETY: the view's payload and the output buffer are valid for the call, the
        // buffer for `cap` bytes.
        let status = unsafe { call(self.state, &head, self.buf.as_mut_ptr(), cap, &mut out_len) };
        if status != 0 {
            let message = self
                .entry
                .last_error
                // SAFETY: last_error returns NULL or a C string valid until the next call.
                .map(|f| unsafe { f(self.state) })
                .filter(|p| !p.is_null())
                .map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
                .unwrap_or_else(|| "no message (the plugin has no last_error)".into());
            let mut m = format!("returned status {status}: {message}");
            m.truncate(MAX_MESSAGE);
            return Err(m);
        }
        if out_len > cap {
            return Err(format!(
                "bad output length: {out_len} bytes claimed for a frame of {} bytes with room for {cap}",
                head.payload_len
            ));
        }
        Ok(&self.buf[..out_len])
    }
}

impl Stage for PluginStage {
    fn name(&self) -> &str {
        &self.entry.name
    }

    fn outbound(&mut self, _now: Instant, frame: Bytes, out: &mut Vec<Bytes>) {
        if self.failed {
            return;
        }
        if frame.len() < HEADER_LEN || !carries_data(frame[2]) {
            out.push(frame);
            return;
        }
        let u32_at =
            |i: usize| u32::from_le_bytes([frame[i], frame[i + 1], frame[i + 2], frame[i + 3]]);
        let (kind, flags, stream, tag) = (frame[2], frame[3], u32_at(8), u32_at(12) as i32);
        let payload = &frame[HEADER_LEN..];
        let head = FrameC {
            kind,
            flags,
            reserved: 0,
            stream,
            tag,
            payload: payload.as_ptr(),
            payload_len: payload.len(),
        };
        let call = self.entry.outbound;
        match self.run(call, head) {
            Ok(new) => {
                let mut b = BytesMut::with_capacity(HEADER_LEN + new.len());
                let kind = FrameKind::from_u8(kind).expect("checked by carries_data");
                vargr_wire::encode_header(kind, flags, stream, tag, new.len(), &mut b);
                b.extend_from_slice(new);
                out.push(b.freeze());
            }
            Err(e) => {
                self.failed = true;
                self.failure = Some(e);
            }
        }
    }

    fn inbound(&mut self, _now: Instant, frame: Frame, out: &mut Vec<Frame>) -> Result<(), String> {
        let Some(call) = self
            .entry
            .inbound
            .filter(|_| carries_data(frame.kind as u8))
        else {
            out.push(frame);
            return Ok(());
        };
        let head = FrameC {
            kind: frame.kind as u8,
            flags: frame.flags,
            reserved: 0,
            stream: frame.stream,
            tag: frame.tag,
            payload: frame.payload.as_ptr(),
            payload_len: frame.payload.len(),
        };
        let new = Bytes::copy_from_slice(self.run(call, head)?);
        let mut f = Frame::new(frame.kind, frame.stream, frame.tag, new);
        f.flags = frame.flags;
        out.push(f);
        Ok(())
    }

    fn take_failure(&mut self) -> Option<String> {
        self.failure.take()
    }
}
