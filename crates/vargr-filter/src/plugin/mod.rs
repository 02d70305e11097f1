//! Filters loaded from shared objects through the C ABI of `include/vargr_filter.h`.
//!
//! MRNet loads filter functions with `dlopen` and calls them with `void**` state. vargr
//! keeps run-time loading, because tool builders rely on it, but behind a versioned ABI
//! (checked on load) and a safe wrapper, [`PluginFilter`]: it owns the plugin's
//! per-instance state, keeps the library loaded while instances live, hands packets over
//! as read-only views, and decodes every emitted packet with vargr-wire's bounded decoder.
//! Rust callbacks given to C never unwind into it.

mod host;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;
use std::sync::Arc;

use libloading::Library;
use vargr_wire::Packet;

use crate::{FilterContext, FilterError, TransformFilter};
use host::{values_bytes, CtxC, EmitSink, HostApi, PacketView, HOST, OK};

/// The ABI version this host speaks (`VARGR_FILTER_ABI_VERSION`).
pub const ABI_VERSION: u32 = 1;
const MAX_FILTERS: usize = 1024;
const MAX_MESSAGE: usize = 4096;

type CreateFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void, *mut c_char, usize) -> c_int;
type ApplyFn = unsafe extern "C" fn(
    *mut c_void,
    *const CtxC,
    *const PacketView,
    usize,
    *const HostApi,
    *mut c_void,
) -> c_int;

#[repr(C)]
#[derive(Clone, Copy)]
struct DescC {
    name: *const c_char,
    description: *const c_char,
    create: Option<CreateFn>,
    apply: Option<ApplyFn>,
    destroy: Option<unsafe extern "C" fn(*mut c_void)>,
    last_error: Option<unsafe extern "C" fn(*mut c_void) -> *const c_char>,
}

/// One filter listed by a loaded plugin: a factory for [`PluginFilter`]s.
#[derive(Clone)]
pub(crate) struct PluginEntry {
    pub(crate) name: String,
    create: CreateFn,
    apply: ApplyFn,
    destroy: unsafe extern "C" fn(*mut c_void),
    last_error: Option<unsafe extern "C" fn(*mut c_void) -> *const c_char>,
    /// Keeps the library loaded while the entry or an instance lives.
    _lib: Arc<Library>,
}

// SAFETY: the entry holds function pointers into a library kept loaded by the Arc; the
// ABI requires create() to be callable from any thread.
unsafe impl Send for PluginEntry {}
unsafe impl Sync for PluginEntry {}

/// Loads a plugin and checks its version, symbols and filter list.
pub(crate) fn load(path: &Path) -> Result<Vec<PluginEntry>, FilterError> {
    let fail = |reason: String| FilterError::Plugin {
        path: path.to_path_buf(),
        reason,
    };
    if !path.is_file() {
        return Err(fail("no such file".into()));
    }
    // SAFETY: loading runs the library's initializers; loading a plugin means trusting it.
    let lib = unsafe { Library::new(path) }.map_err(|e| fail(format!("cannot load: {e}")))?;
    let missing = |sym: &str| {
        fail(format!(
            "missing symbol {sym}: not a vargr filter plugin (see include/vargr_filter.h)"
        ))
    };
    // SAFETY: the signatures are those the header declares.
    let version = unsafe {
        let f = lib
            .get::<unsafe extern "C" fn() -> u32>(b"vargr_filter_abi_version\0")
            .map_err(|_| missing("vargr_filter_abi_version"))?;
        f()
    };
    if version != ABI_VERSION {
        return Err(fail(format!(
            "plugin speaks filter ABI version {version}, this vargr speaks {ABI_VERSION}: rebuild it against this vargr's vargr_filter.h"
        )));
    }
    let mut n = 0usize;
    // SAFETY: as above; the list must stay valid while the library is loaded.
    let list = unsafe {
        let f = lib
            .get::<unsafe extern "C" fn(*mut usize) -> *const DescC>(b"vargr_filter_list\0")
            .map_err(|_| missing("vargr_filter_list"))?;
        f(&mut n)
    };
    if list.is_null() || n == 0 {
        return Err(fail("vargr_filter_list returned no filters".into()));
    }
    if n > MAX_FILTERS {
        return Err(fail(format!(
            "vargr_filter_list claims {n} filters (limit {MAX_FILTERS})"
        )));
    }
    // SAFETY: the plugin promises `n` descriptors at `list`.
    let descs = unsafe { std::slice::from_raw_parts(list, n) }.to_vec();
    let lib = Arc::new(lib);
    let mut out: Vec<PluginEntry> = Vec::with_capacity(n);
    for (i, d) in descs.iter().enumerate() {
        // SAFETY: a non-null name must be a NUL-terminated string.
        let name = (!d.name.is_null())
            .then(|| unsafe { CStr::from_ptr(d.name) }.to_str().ok())
            .flatten();
        let Some(name) = name.filter(|s| valid_name(s)) else {
            return Err(fail(format!(
                "filter {i} has no valid name (1-128 letters, digits, '_', '-', '.')"
            )));
        };
        if out.iter().any(|e| e.name == name) {
            return Err(fail(format!("filter name {name:?} is listed twice")));
        }
        let (Some(create), Some(apply), Some(destroy)) = (d.create, d.apply, d.destroy) else {
            return Err(fail(format!(
                "filter {name:?} lacks create, apply or destroy"
            )));
        };
        out.push(PluginEntry {
            name: name.to_string(),
            create,
            apply,
            destroy,
            last_error: d.last_error,
            _lib: lib.clone(),
        });
    }
    Ok(out)
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

impl PluginEntry {
    pub(crate) fn instantiate(
        &self,
        params: &str,
    ) -> Result<Box<dyn TransformFilter>, FilterError> {
        let c_params = CString::new(params)
            .map_err(|_| FilterError::params(&self.name, params, "contains a NUL byte"))?;
        let mut err = vec![0u8; 512];
        let mut state: *mut c_void = std::ptr::null_mut();
        // SAFETY: arguments follow the header: a C string, an out pointer, a buffer and its length.
        let status = unsafe {
            (self.create)(
                c_params.as_ptr(),
                &mut state,
                err.as_mut_ptr().cast(),
                err.len(),
            )
        };
        if status != OK {
            let end = err.iter().position(|b| *b == 0).unwrap_or(err.len());
            let message = String::from_utf8_lossy(&err[..end]).into_owned();
            return Err(FilterError::PluginFailed {
                filter: self.name.clone(),
                status,
                message,
            });
        }
        Ok(Box::new(PluginFilter {
            entry: self.clone(),
            state,
        }))
    }
}

/// A plugin filter instance: owns the plugin's state and destroys it on drop.
pub(crate) struct PluginFilter {
    entry: PluginEntry,
    state: *mut c_void,
}

// SAFETY: the ABI requires instances to be usable from any thread, one at a time.
unsafe impl Send for PluginFilter {}

impl Drop for PluginFilter {
    fn drop(&mut self) {
        // SAFETY: the state came from this entry's create() and is destroyed once; the
        // library stays loaded until `entry` is dropped after this.
        unsafe { (self.entry.destroy)(self.state) }
    }
}

impl TransformFilter for PluginFilter {
    fn apply(
        &mut self,
        ctx: &FilterContext,
        wave: Vec<Packet>,
    ) -> Result<Vec<Packet>, FilterError> {
        let name = &self.entry.name;
        let mut formats = Vec::with_capacity(wave.len());
        let mut payloads = Vec::with_capacity(wave.len());
        for p in &wave {
            formats.push(
                CString::new(p.format.as_str())
                    .map_err(|_| FilterError::format(name, "format holds a NUL byte"))?,
            );
            payloads.push(values_bytes(p));
        }
        let views: Vec<PacketView> = wave
            .iter()
            .zip(formats.iter().zip(&payloads))
            .map(|(p, (f, b))| PacketView {
                stream: p.stream,
                tag: p.tag,
                source: p.source,
                num_fields: p.values.len() as u32,
                format: f.as_ptr(),
                payload: b.as_ptr(),
                payload_len: b.len(),
                host: (p as *const Packet).cast(),
            })
            .collect();
        let c_ctx = CtxC {
            node_id: ctx.node_id,
            stream: ctx.stream,
            is_root: ctx.is_root as u32,
            num_inputs: u32::try_from(ctx.num_inputs).unwrap_or(u32::MAX),
        };
        let mut sink = EmitSink {
            stream: ctx.stream,
            out: Vec::new(),
            error: None,
        };
        // SAFETY: every pointer stays valid for the call: views, formats and payloads
        // are borrowed from locals, HOST is static, sink outlives the call.
        let status = unsafe {
            (self.entry.apply)(
                self.state,
                &c_ctx,
                views.as_ptr(),
                views.len(),
                &HOST,
                (&mut sink as *mut EmitSink).cast(),
            )
        };
        if status != OK {
            let message = self
                .entry
                .last_error
                // SAFETY: last_error returns NULL or a C string valid until the next call.
                .map(|f| unsafe { f(self.state) })
                .filter(|p| !p.is_null())
                .map(|p| truncate(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "no message (the plugin has no last_error)".into());
            return Err(FilterError::PluginFailed {
                filter: name.clone(),
                status,
                message,
            });
        }
        if let Some(e) = sink.error {
            return Err(FilterError::format(
                name,
                format!("emitted an invalid packet: {e}"),
            ));
        }
        Ok(sink.out)
    }
    fn name(&self) -> &str {
        &self.entry.name
    }
}

fn truncate(mut s: String) -> String {
    if s.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}
