//! Filters loaded from shared objects through the C ABI of `include/vargr_filter.h`.
//!
//! MRNet loads filter functions with `dlopen` and calls them with `void**` state. vargr
//! keeps run-time loading, because tool builders rely on it, but behind a versioned ABI
//! (checked on load) and a safe wrapper, [`PluginFilter`]: it owns the plugin's
//! per-instance state, keeps the library loaded while instances live, hands packets over
//! as read-only views, and decodes every emitted packet with vargr-wire's bounded decoder.
//! Rust callbacks given to C never unwind into it.

mod host;
mod sync;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;
use std::sync::Arc;

use libloading::Library;
use vargr_wire::Packet;

use crate::{FilterContext, FilterError, TransformFilter};
use host::{values_bytes, CtxC, EmitSink, HostApi, PacketView, HOST, OK};
pub(crate) use sync::SyncEntry;
use sync::{SyncDescC, SYNC_ABI_VERSION};

/// The ABI version this host speaks (`VARGR_FILTER_ABI_VERSION`).
pub const ABI_VERSION: u32 = 1;
pub use sync::SYNC_ABI_VERSION as SYNC_PLUGIN_ABI_VERSION;
const MAX_FILTERS: usize = 1024;
const MAX_MESSAGE: usize = 4096;

pub(super) type CreateFn =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, *mut c_char, usize) -> c_int;
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
    last_error: Option<LastErrorFn>,
}

/// One filter listed by a loaded plugin: a factory for [`PluginFilter`]s.
#[derive(Clone)]
pub(crate) struct PluginEntry {
    pub(crate) name: String,
    create: CreateFn,
    apply: ApplyFn,
    destroy: unsafe extern "C" fn(*mut c_void),
    last_error: Option<LastErrorFn>,
    /// Keeps the library loaded while the entry or an instance lives.
    _lib: Arc<Library>,
}

// SAFETY: the entry holds function pointers into a library kept loaded by the Arc; the
// ABI requires create() to be callable from any thread.
unsafe impl Send for PluginEntry {}
unsafe impl Sync for PluginEntry {}

/// What one plugin file offers: transformation filters, sync filters, or both.
pub(crate) struct Loaded {
    pub(crate) transforms: Vec<PluginEntry>,
    pub(crate) syncs: Vec<SyncEntry>,
}

/// Loads a plugin and checks the version, symbols and list of each family it exports.
pub(crate) fn load(path: &Path) -> Result<Loaded, FilterError> {
    let fail = |reason: String| FilterError::Plugin {
        path: path.to_path_buf(),
        reason,
    };
    if !path.is_file() {
        return Err(fail("no such file".into()));
    }
    // SAFETY: loading runs the library's initializers; loading a plugin means trusting it.
    let lib = unsafe { Library::new(path) }.map_err(|e| fail(format!("cannot load: {e}")))?;
    let transforms = family::<DescC>(&lib, path, &TRANSFORMS)?;
    let syncs = family::<SyncDescC>(&lib, path, &SYNCS)?;
    if transforms.is_none() && syncs.is_none() {
        return Err(fail(
            "missing symbol vargr_filter_abi_version: not a vargr filter plugin (see include/vargr_filter.h; a sync-filter plugin exports vargr_sync_abi_version)".into(),
        ));
    }
    let lib = Arc::new(lib);
    let mut out = Loaded {
        transforms: Vec::new(),
        syncs: Vec::new(),
    };
    for (name, d) in transforms.unwrap_or_default() {
        let (Some(create), Some(apply), Some(destroy)) = (d.create, d.apply, d.destroy) else {
            return Err(fail(format!(
                "filter {name:?} lacks create, apply or destroy"
            )));
        };
        out.transforms.push(PluginEntry {
            name,
            create,
            apply,
            destroy,
            last_error: d.last_error,
            _lib: lib.clone(),
        });
    }
    for (name, d) in syncs.unwrap_or_default() {
        let (Some(create), Some(decide), Some(destroy)) = (d.create, d.decide, d.destroy) else {
            return Err(fail(format!(
                "sync filter {name:?} lacks create, decide or destroy"
            )));
        };
        out.syncs.push(SyncEntry {
            name,
            create,
            decide,
            destroy,
            last_error: d.last_error,
            _lib: lib.clone(),
        });
    }
    Ok(out)
}

/// The two symbols and the version of one family of filters.
struct Family {
    what: &'static str,
    version_sym: &'static [u8],
    list_sym: &'static [u8],
    version: u32,
}

const TRANSFORMS: Family = Family {
    what: "filter",
    version_sym: b"vargr_filter_abi_version\0",
    list_sym: b"vargr_filter_list\0",
    version: ABI_VERSION,
};

const SYNCS: Family = Family {
    what: "sync filter",
    version_sym: b"vargr_sync_abi_version\0",
    list_sym: b"vargr_sync_list\0",
    version: SYNC_ABI_VERSION,
};

/// A descriptor whose first field is the filter's name.
trait Named: Copy {
    fn name_ptr(&self) -> *const c_char;
}

impl Named for DescC {
    fn name_ptr(&self) -> *const c_char {
        self.name
    }
}

impl Named for SyncDescC {
    fn name_ptr(&self) -> *const c_char {
        self.name
    }
}

/// One family's descriptors with their checked names; `None` if the plugin does not
/// export the family's version symbol.
fn family<D: Named>(
    lib: &Library,
    path: &Path,
    fam: &Family,
) -> Result<Option<Vec<(String, D)>>, FilterError> {
    let fail = |reason: String| FilterError::Plugin {
        path: path.to_path_buf(),
        reason,
    };
    let sym = |s: &[u8]| String::from_utf8_lossy(&s[..s.len() - 1]).into_owned();
    // SAFETY: the signatures are those the header declares.
    let version = unsafe {
        match lib.get::<unsafe extern "C" fn() -> u32>(fam.version_sym) {
            Ok(f) => f(),
            Err(_) => return Ok(None),
        }
    };
    if version != fam.version {
        return Err(fail(format!(
            "plugin speaks {} ABI version {version}, this vargr speaks {}: rebuild it against this vargr's vargr_filter.h",
            fam.what, fam.version
        )));
    }
    let mut n = 0usize;
    // SAFETY: as above; the list must stay valid while the library is loaded.
    let list = unsafe {
        let f = lib
            .get::<unsafe extern "C" fn(*mut usize) -> *const D>(fam.list_sym)
            .map_err(|_| {
                fail(format!(
                    "missing symbol {}: not a vargr filter plugin (see include/vargr_filter.h)",
                    sym(fam.list_sym)
                ))
            })?;
        f(&mut n)
    };
    if list.is_null() || n == 0 {
        return Err(fail(format!("{} returned no filters", sym(fam.list_sym))));
    }
    if n > MAX_FILTERS {
        return Err(fail(format!(
            "{} claims {n} filters (limit {MAX_FILTERS})",
            sym(fam.list_sym)
        )));
    }
    // SAFETY: the plugin promises `n` descriptors at `list`.
    let descs = unsafe { std::slice::from_raw_parts(list, n) }.to_vec();
    let mut out: Vec<(String, D)> = Vec::with_capacity(n);
    for (i, d) in descs.into_iter().enumerate() {
        let p = d.name_ptr();
        // SAFETY: a non-null name must be a NUL-terminated string.
        let name = (!p.is_null())
            .then(|| unsafe { CStr::from_ptr(p) }.to_str().ok())
            .flatten();
        let Some(name) = name.filter(|s| valid_name(s)) else {
            return Err(fail(format!(
                "{} {i} has no valid name (1-128 letters, digits, '_', '-', '.')",
                fam.what
            )));
        };
        if out.iter().any(|(e, _)| e == name) {
            return Err(fail(format!("{} name {name:?} is listed twice", fam.what)));
        }
        out.push((name.to_string(), d));
    }
    Ok(Some(out))
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
        let state = create_state(&self.name, self.create, params)?;
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
            return Err(failed(name, status, self.entry.last_error, self.state));
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

/// Makes a plugin filter's state from the spec's params, through its create().
fn create_state(name: &str, create: CreateFn, params: &str) -> Result<*mut c_void, FilterError> {
    let c_params = CString::new(params)
        .map_err(|_| FilterError::params(name, params, "contains a NUL byte"))?;
    let mut err = vec![0u8; 512];
    let mut state: *mut c_void = std::ptr::null_mut();
    // SAFETY: arguments follow the header: a C string, an out pointer, a buffer and its length.
    let status = unsafe {
        create(
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
            filter: name.to_string(),
            status,
            message,
        });
    }
    Ok(state)
}

pub(super) type LastErrorFn = unsafe extern "C" fn(*mut c_void) -> *const c_char;

/// The error of a failed call, with the plugin's last_error message if it has one.
fn failed(
    name: &str,
    status: c_int,
    last_error: Option<LastErrorFn>,
    state: *mut c_void,
) -> FilterError {
    let message = last_error
        // SAFETY: last_error returns NULL or a C string valid until the next call.
        .map(|f| unsafe { f(state) })
        .filter(|p| !p.is_null())
        .map(|p| truncate(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "no message (the plugin has no last_error)".into());
    FilterError::PluginFailed {
        filter: name.to_string(),
        status,
        message,
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
