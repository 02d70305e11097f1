//! The tree (MRNet's model) from C: network options, the front-end's network,
//! communicators and streams, packets, and the back-end.
//!
//! Each handle is a Box owned by C between its `create`/`join`/`recv` and its `free`.
//! Handles may be used from several threads (the Rust objects behind them are
//! thread-safe); a network is shut down by `vargr_network_shutdown` or by freeing it.

use std::ffi::{c_char, c_int, CString};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use vargr_filter::{Registry, SyncMode};
use vargr_tbon::{
    Backend, BackendSpec, Communicator, Network, NetworkOptions, Stream, StreamOptions,
};
use vargr_topo::{Spec, Topology};
use vargr_wire::{Format, Packet};

use crate::args::{args_from_packet, values_from_args, vargr_arg};
use crate::ptr::{self, free_handle, into_handle};
use crate::status::{guard, vargr_status, Error, Result};

/// Options for `vargr_network_create` (opaque; see `vargr_options_*`). Set them from
/// one thread at a time.
pub struct vargr_options {
    opts: NetworkOptions,
}

/// A running tree, from the front-end's side (opaque).
pub struct vargr_network {
    /// None once shut down.
    net: Mutex<Option<Network>>,
}

/// A set of back-ends a stream talks to (opaque).
pub struct vargr_communicator {
    comm: Communicator,
}

/// A front-end's stream: multicast down, filtered waves up (opaque).
pub struct vargr_stream {
    stream: Stream,
}

/// A received (or built) packet: stream, tag, source and typed values (opaque).
pub struct vargr_packet {
    packet: Packet,
    /// The format as a C string, made on first request.
    format: OnceLock<CString>,
}

/// A back-end's handle on the tree (opaque).
pub struct vargr_backend {
    backend: Backend,
}

/// Synchronization of a stream's upward waves (MRNet's sync filters).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vargr_sync {
    /// A wave is one packet from every back-end of the stream.
    VARGR_SYNC_WAIT_FOR_ALL = 0,
    /// A wave is released when complete or `timeout_ms` after its first packet.
    VARGR_SYNC_TIMEOUT = 1,
    /// Every packet is a wave of its own.
    VARGR_SYNC_DONT_WAIT = 2,
}

// The header promises that tree handles may be used from several threads.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<vargr_network>();
    shared::<vargr_communicator>();
    shared::<vargr_stream>();
    shared::<vargr_packet>();
    shared::<vargr_backend>();
};

impl vargr_packet {
    pub(crate) fn new(packet: Packet) -> vargr_packet {
        vargr_packet {
            packet,
            format: OnceLock::new(),
        }
    }
}

fn lock(net: &vargr_network) -> MutexGuard<'_, Option<Network>> {
    net.net.lock().unwrap_or_else(|p| p.into_inner())
}

fn with_network<T>(net: &vargr_network, f: impl FnOnce(&Network) -> Result<T>) -> Result<T> {
    match lock(net).as_ref() {
        Some(n) => f(n),
        None => Err(Error::new(
            vargr_status::VARGR_ERR_CLOSED,
            "the network was shut down",
        )),
    }
}

// ---- options ----------------------------------------------------------------------

/// Creates network options with the defaults (local processes over Unix sockets;
/// commnodes run `$VARGR_COMMNODE`, else a `vargr` next to the program, else `vargr` on
/// the PATH).
///
/// Ownership: `*out` belongs to the caller; free it with `vargr_options_free`.
///
/// # Safety
/// `out` is valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn vargr_options_create(out: *mut *mut vargr_options) -> c_int {
    guard("vargr_options_create", || {
        // SAFETY: the caller's contract.
        let out = unsafe { ptr::out(out, "out")? };
        *out = into_handle(vargr_options {
            opts: NetworkOptions::default(),
        });
        Ok(())
    })
}

/// Frees options (NULL is a no-op). Networks created with them are not affected.
///
/// # Safety
/// `opts` is NULL or from `vargr_options_create`, not freed before.
#[no_mangle]
pub unsafe extern "C" fn vargr_options_free(opts: *mut vargr_options) -> c_int {
    // SAFETY: the caller's contract.
    guard("vargr_options_free", || unsafe {
        free_handle(opts);
        Ok(())
    })
}

/// # Safety
/// `opts` is a live options handle or NULL.
unsafe fn options_mut<'a>(opts: *mut vargr_options) -> Result<&'a mut NetworkOptions> {
    // SAFETY: a live handle per the contract; options are not shared across threads.
    unsafe { opts.as_mut() }
        .map(|o| &mut o.opts)
        .ok_or_else(|| Error::invalid("opts is NULL"))
}

/// Loads filter `filter_name` from the plugin shared object `so_path` (MRNet's
/// `load_FilterFunc`): checks now that the plugin loads (ABI version, symbols) and
/// defines that filter, and makes every node of networks created with `opts` load it.
/// Open streams with `filter_name` (or `filter_name:params`) as the up-filter.
///
/// The plugin is written against `vargr_filter.h`. `so_path` is made absolute, since
/// nodes may start in other directories.
///
/// # Safety
/// `opts` is a live options handle; the strings are NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn vargr_options_load_filter(
    opts: *mut vargr_options,
    so_path: *const c_char,
    filter_name: *const c_char,
) -> c_int {
    guard("vargr_options_load_filter", || {
        // SAFETY: the caller's contract.
        let (opts, path, name) = unsafe {
            (
                options_mut(opts)?,
                ptr::string(so_path, "so_path")?,
                ptr::string(filter_name, "filter_name")?,
            )
        };
        let abs = Path::new(path).canonicalize().map_err(|e| {
            Error::new(
                vargr_status::VARGR_ERR_FILTER,
                format!("filter plugin {path}: {e}"),
            )
        })?;
        // Load every plugin so far too: two plugins defining one name are caught here.
        let mut registry = Registry::with_builtins();
        for p in &opts.plugins {
            registry.load_plugin(Path::new(p))?;
        }
        let names = registry.load_plugin(&abs)?;
        if !names.iter().any(|n| n == name) {
            return Err(Error::new(
                vargr_status::VARGR_ERR_FILTER,
                format!(
                    "filter plugin {} defines {}, not {name:?}",
                    abs.display(),
                    names.join(", ")
                ),
            ));
        }
        let abs = abs.display().to_string();
        if !opts.plugins.contains(&abs) {
            opts.plugins.push(abs);
        }
        Ok(())
    })
}

/// Sets the program that runs commnodes (the `vargr` binary); NULL restores the default.
///
/// # Safety
/// `opts` is a live options handle; `program` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn vargr_options_set_commnode(
    opts: *mut vargr_options,
    program: *const c_char,
) -> c_int {
    guard("vargr_options_set_commnode", || {
        // SAFETY: the caller's contract.
        let (opts, program) = unsafe { (options_mut(opts)?, ptr::opt_string(program, "program")?) };
        opts.commnode_program = program.map(String::from);
        Ok(())
    })
}

/// Sets the transport between local processes: `"unix"` (default) or `"tcp"`.
///
/// # Safety
/// `opts` is a live options handle; `transport` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn vargr_options_set_transport(
    opts: *mut vargr_options,
    transport: *const c_char,
) -> c_int {
    guard("vargr_options_set_transport", || {
        // SAFETY: the caller's contract.
        let (opts, t) = unsafe { (options_mut(opts)?, ptr::string(transport, "transport")?) };
        if t != "unix" && t != "tcp" {
            return Err(Error::invalid(format!(
                "unknown transport {t:?} (expected unix or tcp)"
            )));
        }
        opts.transport = t.to_string();
        Ok(())
    })
}

/// Sets what each node asks of the TCP links to its children after their handshake:
/// `"auto"` (default: MACs on loopback, encryption to other hosts), `"mac"` or
/// `"encrypt"`.
///
/// # Safety
/// `opts` is a live options handle; `security` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn vargr_options_set_link_security(
    opts: *mut vargr_options,
    security: *const c_char,
) -> c_int {
    guard("vargr_options_set_link_security", || {
        // SAFETY: the caller's contract.
        let (opts, s) = unsafe { (options_mut(opts)?, ptr::string(security, "security")?) };
        opts.link_security = s.parse().map_err(Error::invalid)?;
        Ok(())
    })
}

/// Sets what the orphans of a dead communication node do: `"ancestor"` (default: the
/// nearest live ancestor adopts them) or `"off"` (the sub-tree is lost with it).
///
/// # Safety
/// `opts` is a live options handle; `recovery` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn vargr_options_set_recovery(
    opts: *mut vargr_options,
    recovery: *const c_char,
) -> c_int {
    guard("vargr_options_set_recovery", || {
        // SAFETY: the caller's contract.
        let (opts, r) = unsafe { (options_mut(opts)?, ptr::string(recovery, "recovery")?) };
        opts.recovery = r.parse().map_err(Error::invalid)?;
        Ok(())
    })
}

/// Starts nodes on remote hosts with a shell command template such as
/// `"ssh -o BatchMode=yes {host} {cmd}"` (implies TCP); NULL: local processes.
///
/// # Safety
/// `opts` is a live options handle; `template_` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn vargr_options_set_remote_shell(
    opts: *mut vargr_options,
    template_: *const c_char,
) -> c_int {
    guard("vargr_options_set_remote_shell", || {
        // SAFETY: the caller's contract.
        let (opts, t) = unsafe { (options_mut(opts)?, ptr::opt_string(template_, "template")?) };
        opts.remote_template = t.map(String::from);
        Ok(())
    })
}

/// How long `vargr_network_create` waits for every back-end (default 30 s).
///
/// # Safety
/// `opts` is a live options handle.
#[no_mangle]
pub unsafe extern "C" fn vargr_options_set_startup_timeout(
    opts: *mut vargr_options,
    timeout_ms: u32,
) -> c_int {
    guard("vargr_options_set_startup_timeout", || {
        // SAFETY: the caller's contract.
        let opts = unsafe { options_mut(opts)? };
        opts.startup_timeout = Duration::from_millis(timeout_ms.into());
        Ok(())
    })
}

/// Makes every node write its event trace to `dir/node-<id>.vtr` at shutdown (NULL:
/// `$VARGR_TRACE_DIR` if set, else no trace files).
///
/// # Safety
/// `opts` is a live options handle; `dir` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn vargr_options_set_trace_dir(
    opts: *mut vargr_options,
    dir: *const c_char,
) -> c_int {
    guard("vargr_options_set_trace_dir", || {
        // SAFETY: the caller's contract.
        let (opts, dir) = unsafe { (options_mut(opts)?, ptr::opt_string(dir, "dir")?) };
        opts.trace_dir = dir.map(Into::into);
        Ok(())
    })
}

// ---- network ----------------------------------------------------------------------

/// Reads a NULL-terminated argv array.
///
/// # Safety
/// `argv` is NULL or an array of NUL-terminated strings ending with NULL.
unsafe fn argv_of(argv: *const *const c_char) -> Result<(String, Vec<String>)> {
    const MAX_ARGS: usize = 1 << 16;
    if argv.is_null() {
        return Err(Error::invalid("backend_argv is NULL"));
    }
    let mut words = Vec::new();
    loop {
        if words.len() == MAX_ARGS {
            return Err(Error::invalid(format!(
                "backend_argv has no terminating NULL within {MAX_ARGS} entries"
            )));
        }
        // SAFETY: the array is NULL-terminated, and we stop at the NULL.
        let p = unsafe { *argv.add(words.len()) };
        if p.is_null() {
            break;
        }
        // SAFETY: entries are NUL-terminated strings per the contract.
        let w = unsafe { ptr::string(p, &format!("backend_argv[{}]", words.len()))? };
        words.push(w.to_string());
    }
    let mut it = words.into_iter();
    let program = it
        .next()
        .ok_or_else(|| Error::invalid("backend_argv is empty (it needs the back-end program)"))?;
    Ok((program, it.collect()))
}

/// # Safety
/// As `vargr_network_create`.
unsafe fn create(
    topology: Topology,
    backend_argv: *const *const c_char,
    options: *const vargr_options,
    out: *mut *mut vargr_network,
) -> Result<()> {
    // SAFETY: the caller's contract.
    let out = unsafe { ptr::out(out, "out")? };
    *out = std::ptr::null_mut();
    // SAFETY: the caller's contract.
    let (program, args) = unsafe { argv_of(backend_argv)? };
    // SAFETY: NULL or a live options handle.
    let mut opts =
        unsafe { options.as_ref() }.map_or_else(NetworkOptions::default, |o| o.opts.clone());
    // What the options leave open comes from the configuration (VARGR_COMMNODE, ...).
    vargr_config::from_process()
        .map_err(|e| Error::invalid(e.to_string()))?
        .tree_defaults(&mut opts);
    let net = Network::new(topology, BackendSpec::Command { program, args }, opts)?;
    *out = into_handle(vargr_network {
        net: Mutex::new(Some(net)),
    });
    Ok(())
}

/// Starts a tree: `topology` is a topology file (MRNet format, or TOML when it ends in
/// `.toml`) or a spec such as `"kary:2@8"`, `"flat:4"`, `"1x4x16"`; every back-end runs
/// `backend_argv` (program and arguments, NULL-terminated) with `VARGR_*` variables set
/// so that it can call `vargr_backend_join`. Returns when every back-end has joined.
///
/// `options` may be NULL (defaults); it is copied, so it may be freed afterwards.
/// Ownership: `*out` belongs to the caller (NULL on error); free it with
/// `vargr_network_free`.
///
/// # Safety
/// Strings are NUL-terminated; `backend_argv` ends with NULL; `options` is NULL or live;
/// `out` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_create(
    topology: *const c_char,
    backend_argv: *const *const c_char,
    options: *const vargr_options,
    out: *mut *mut vargr_network,
) -> c_int {
    guard("vargr_network_create", || {
        // SAFETY: the caller's contract.
        let spec = unsafe { ptr::string(topology, "topology")? };
        let topo = Topology::load(Path::new(spec))?;
        // SAFETY: forwarded contract.
        unsafe { create(topo, backend_argv, options, out) }
    })
}

/// Like `vargr_network_create`, with the topology given as text: a spec such as
/// `"kary:2@8"`, or the contents of an MRNet topology file
/// (`"host:0 => host:1 host:2 ;"`).
///
/// # Safety
/// As `vargr_network_create`.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_create_from_text(
    topology_text: *const c_char,
    backend_argv: *const *const c_char,
    options: *const vargr_options,
    out: *mut *mut vargr_network,
) -> c_int {
    guard("vargr_network_create_from_text", || {
        // SAFETY: the caller's contract.
        let text = unsafe { ptr::string(topology_text, "topology_text")? };
        let topo = if Spec::looks_like_spec(text) {
            Topology::generate(text)?
        } else {
            Topology::parse_mrnet(text, "topology_text")?
        };
        // SAFETY: forwarded contract.
        unsafe { create(topo, backend_argv, options, out) }
    })
}

/// The number of back-ends of the network.
///
/// # Safety
/// `net` is a live network handle; `n` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_num_backends(
    net: *const vargr_network,
    n: *mut u32,
) -> c_int {
    guard("vargr_network_num_backends", || {
        // SAFETY: the caller's contract.
        let (net, n) = unsafe { (ptr::handle(net, "net")?, ptr::out(n, "n")?) };
        *n = with_network(net, |net| Ok(net.num_backends() as u32))?;
        Ok(())
    })
}

/// A communicator of every back-end.
///
/// Ownership: `*out` belongs to the caller; free it with `vargr_communicator_free`.
///
/// # Safety
/// `net` is a live network handle; `out` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_broadcast_communicator(
    net: *const vargr_network,
    out: *mut *mut vargr_communicator,
) -> c_int {
    guard("vargr_network_broadcast_communicator", || {
        // SAFETY: the caller's contract.
        let (net, out) = unsafe { (ptr::handle(net, "net")?, ptr::out(out, "out")?) };
        let comm = with_network(net, |net| Ok(net.broadcast_communicator()))?;
        *out = into_handle(vargr_communicator { comm });
        Ok(())
    })
}

/// A communicator of the back-ends `ranks[0..n]` (duplicates are ignored).
///
/// Ownership: `ranks` is only read during the call; `*out` belongs to the caller; free
/// it with `vargr_communicator_free`.
///
/// # Safety
/// `net` is a live network handle; `ranks` is valid for `n` reads; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_communicator(
    net: *const vargr_network,
    ranks: *const u32,
    n: usize,
    out: *mut *mut vargr_communicator,
) -> c_int {
    guard("vargr_network_communicator", || {
        // SAFETY: the caller's contract.
        let (net, ranks, out) = unsafe {
            (
                ptr::handle(net, "net")?,
                ptr::slice(ranks, n, "ranks")?,
                ptr::out(out, "out")?,
            )
        };
        let comm = with_network(net, |net| Ok(net.communicator(ranks)?))?;
        *out = into_handle(vargr_communicator { comm });
        Ok(())
    })
}

/// The number of back-ends in a communicator.
///
/// # Safety
/// `comm` is a live communicator handle; `n` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn vargr_communicator_size(
    comm: *const vargr_communicator,
    n: *mut usize,
) -> c_int {
    guard("vargr_communicator_size", || {
        // SAFETY: the caller's contract.
        let (comm, n) = unsafe { (ptr::handle(comm, "comm")?, ptr::out(n, "n")?) };
        *n = comm.comm.ranks().len();
        Ok(())
    })
}

/// Frees a communicator (NULL is a no-op). Streams opened on it are not affected.
///
/// # Safety
/// `comm` is NULL or a live communicator handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn vargr_communicator_free(comm: *mut vargr_communicator) -> c_int {
    // SAFETY: the caller's contract.
    guard("vargr_communicator_free", || unsafe {
        free_handle(comm);
        Ok(())
    })
}

/// Opens a stream to `comm`'s back-ends. `up_filter` reduces each wave at every node on
/// the way up: a built-in (`"sum"`, `"min"`, `"max"`, `"avg"`, `"concat"`, `"null"`,
/// `"equivalence"`, `"histogram:lo,hi,bins"`, `"timealign:secs"`) or a filter loaded
/// with `vargr_options_load_filter`; NULL means `"null"` (waves pass unchanged).
/// `sync` is a `vargr_sync`; `timeout_ms` is used by `VARGR_SYNC_TIMEOUT` only.
///
/// Ownership: `*out` belongs to the caller; free it with `vargr_stream_free`.
///
/// # Safety
/// Handles are live; `up_filter` is NULL or NUL-terminated; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_open_stream(
    net: *const vargr_network,
    comm: *const vargr_communicator,
    up_filter: *const c_char,
    sync: c_int,
    timeout_ms: u32,
    out: *mut *mut vargr_stream,
) -> c_int {
    guard("vargr_network_open_stream", || {
        // SAFETY: the caller's contract.
        let (net, comm, up, out) = unsafe {
            (
                ptr::handle(net, "net")?,
                ptr::handle(comm, "comm")?,
                ptr::opt_string(up_filter, "up_filter")?,
                ptr::out(out, "out")?,
            )
        };
        let sync = match sync {
            0 => SyncMode::WaitForAll,
            1 => SyncMode::TimeOut(Duration::from_millis(timeout_ms.into())),
            2 => SyncMode::DontWait,
            s => {
                return Err(Error::invalid(format!(
                    "sync {s} is not a vargr_sync (0 wait-for-all, 1 timeout, 2 dont-wait)"
                )))
            }
        };
        let opts = StreamOptions::new(up.unwrap_or("null")).sync(sync);
        let stream = with_network(net, |net| Ok(net.open_stream(&comm.comm, opts)?))?;
        *out = into_handle(vargr_stream { stream });
        Ok(())
    })
}

/// Shuts the tree down: every node stops and every process exits (stragglers are
/// killed after a grace period). Later calls on the network fail with
/// `VARGR_ERR_CLOSED`; streams receive `VARGR_ERR_CLOSED`. The handle must still be
/// freed with `vargr_network_free`.
///
/// # Safety
/// `net` is a live network handle.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_shutdown(net: *mut vargr_network) -> c_int {
    guard("vargr_network_shutdown", || {
        // SAFETY: the caller's contract.
        let net = unsafe { ptr::handle(net.cast_const(), "net")? };
        let taken = lock(net).take();
        match taken {
            Some(n) => Ok(n.shutdown()?),
            None => Ok(()),
        }
    })
}

/// Frees a network, shutting it down first if `vargr_network_shutdown` was not called
/// (NULL is a no-op). Free its streams and communicators too (before or after).
///
/// # Safety
/// `net` is NULL or a live network handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_free(net: *mut vargr_network) -> c_int {
    // SAFETY: the caller's contract.
    guard("vargr_network_free", || unsafe {
        free_handle(net);
        Ok(())
    })
}

// ---- streams ----------------------------------------------------------------------

/// The stream's id (what `vargr_packet_stream` reports and back-ends send on).
///
/// # Safety
/// `s` is a live stream handle; `id` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn vargr_stream_id(s: *const vargr_stream, id: *mut u32) -> c_int {
    guard("vargr_stream_id", || {
        // SAFETY: the caller's contract.
        let (s, id) = unsafe { (ptr::handle(s, "s")?, ptr::out(id, "id")?) };
        *id = s.stream.id();
        Ok(())
    })
}

/// Multicasts a packet to every back-end of the stream; the non-variadic form of
/// `vargr_stream_send`, with one `vargr_arg` per field of `format`.
///
/// Ownership: everything is copied before the call returns.
///
/// # Safety
/// `s` is live; `format` is NUL-terminated; `args` is valid for `n` reads, and its
/// pointers for their fields (see `vargr_arg`).
#[no_mangle]
pub unsafe extern "C" fn vargr_stream_send_args(
    s: *const vargr_stream,
    tag: i32,
    format: *const c_char,
    args: *const vargr_arg,
    n: usize,
) -> c_int {
    guard("vargr_stream_send", || {
        // SAFETY: the caller's contract.
        let (s, p) = unsafe { (ptr::handle(s, "s")?, build_packet(0, tag, format, args, n)?) };
        Ok(s.stream.send_packet(p)?)
    })
}

/// # Safety
/// `format` is NUL-terminated; `args` is valid for `n` reads, pointers for their fields.
unsafe fn build_packet(
    stream: u32,
    tag: i32,
    format: *const c_char,
    args: *const vargr_arg,
    n: usize,
) -> Result<Packet> {
    // SAFETY: the caller's contract.
    let (text, args) = unsafe { (ptr::string(format, "format")?, ptr::slice(args, n, "args")?) };
    let format = Format::parse(text)?;
    // SAFETY: forwarded contract.
    let values = unsafe { values_from_args(&format, args)? };
    Ok(Packet::with_format(stream, tag, format, values)?)
}

fn give_packet(out: &mut *mut vargr_packet, r: Result<Option<Packet>>, what: &str) -> Result<()> {
    match r? {
        Some(p) => {
            *out = into_handle(vargr_packet::new(p));
            Ok(())
        }
        None => Err(Error::new(vargr_status::VARGR_ERR_TIMEOUT, what)),
    }
}

/// Waits for the next result on the stream: a filtered wave, or an error naming a lost
/// node or failed filter. `VARGR_ERR_CLOSED` once the network was shut down.
///
/// Ownership: `*out` belongs to the caller (NULL on error); free it with
/// `vargr_packet_free`.
///
/// # Safety
/// `s` is a live stream handle; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_stream_recv(
    s: *const vargr_stream,
    out: *mut *mut vargr_packet,
) -> c_int {
    guard("vargr_stream_recv", || {
        // SAFETY: the caller's contract.
        let (s, out) = unsafe { (ptr::handle(s, "s")?, ptr::out(out, "out")?) };
        *out = std::ptr::null_mut();
        // Once the network is shut down (or freed) this ends with VARGR_ERR_CLOSED,
        // after any packets that had already arrived.
        give_packet(out, s.stream.recv().map(Some).map_err(Error::from), "")
    })
}

/// Like `vargr_stream_recv`, giving up with `VARGR_ERR_TIMEOUT` after `timeout_ms`.
///
/// # Safety
/// As `vargr_stream_recv`.
#[no_mangle]
pub unsafe extern "C" fn vargr_stream_recv_timeout(
    s: *const vargr_stream,
    timeout_ms: u32,
    out: *mut *mut vargr_packet,
) -> c_int {
    guard("vargr_stream_recv_timeout", || {
        // SAFETY: the caller's contract.
        let (s, out) = unsafe { (ptr::handle(s, "s")?, ptr::out(out, "out")?) };
        *out = std::ptr::null_mut();
        let timeout = Duration::from_millis(timeout_ms.into());
        let what = format!(
            "no packet on stream {} within {timeout_ms} ms",
            s.stream.id()
        );
        give_packet(
            out,
            s.stream.recv_timeout(timeout).map_err(Error::from),
            &what,
        )
    })
}

/// Frees a stream handle (NULL is a no-op).
///
/// # Safety
/// `s` is NULL or a live stream handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn vargr_stream_free(s: *mut vargr_stream) -> c_int {
    // SAFETY: the caller's contract.
    guard("vargr_stream_free", || unsafe {
        free_handle(s);
        Ok(())
    })
}

// ---- packets ----------------------------------------------------------------------

/// Builds a packet (source: none); the non-variadic form of `vargr_packet_create`.
///
/// Ownership: everything is copied; `*out` belongs to the caller; free it with
/// `vargr_packet_free`.
///
/// # Safety
/// As `vargr_stream_send_args`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_packet_create_args(
    out: *mut *mut vargr_packet,
    stream: u32,
    tag: i32,
    format: *const c_char,
    args: *const vargr_arg,
    n: usize,
) -> c_int {
    guard("vargr_packet_create", || {
        // SAFETY: the caller's contract.
        let out = unsafe { ptr::out(out, "out")? };
        *out = std::ptr::null_mut();
        // SAFETY: the caller's contract.
        let p = unsafe { build_packet(stream, tag, format, args, n)? };
        *out = into_handle(vargr_packet::new(p));
        Ok(())
    })
}

/// The packet's tag.
///
/// # Safety
/// `p` is a live packet handle; `tag` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_packet_tag(p: *const vargr_packet, tag: *mut i32) -> c_int {
    guard("vargr_packet_tag", || {
        // SAFETY: the caller's contract.
        let (p, tag) = unsafe { (ptr::handle(p, "p")?, ptr::out(tag, "tag")?) };
        *tag = p.packet.tag;
        Ok(())
    })
}

/// The id of the stream the packet arrived on.
///
/// # Safety
/// `p` is a live packet handle; `stream` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_packet_stream(p: *const vargr_packet, stream: *mut u32) -> c_int {
    guard("vargr_packet_stream", || {
        // SAFETY: the caller's contract.
        let (p, stream) = unsafe { (ptr::handle(p, "p")?, ptr::out(stream, "stream")?) };
        *stream = p.packet.stream;
        Ok(())
    })
}

/// The rank of the back-end that sent the packet (`UINT32_MAX`: the front-end or a
/// filter).
///
/// # Safety
/// `p` is a live packet handle; `source` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_packet_source(p: *const vargr_packet, source: *mut u32) -> c_int {
    guard("vargr_packet_source", || {
        // SAFETY: the caller's contract.
        let (p, source) = unsafe { (ptr::handle(p, "p")?, ptr::out(source, "source")?) };
        *source = p.packet.source;
        Ok(())
    })
}

/// The packet's format in canonical form (fields separated by one space).
///
/// Ownership: `*format` belongs to the packet and lives until `vargr_packet_free`.
///
/// # Safety
/// `p` is a live packet handle; `format` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_packet_format(
    p: *const vargr_packet,
    format: *mut *const c_char,
) -> c_int {
    guard("vargr_packet_format", || {
        // SAFETY: the caller's contract.
        let (p, format) = unsafe { (ptr::handle(p, "p")?, ptr::out(format, "format")?) };
        // Formats are ASCII without NULs (vargr-wire checks), so this cannot fail.
        let c = p
            .format
            .get_or_init(|| CString::new(p.packet.format.as_str()).unwrap_or_default());
        *format = c.as_ptr();
        Ok(())
    })
}

/// Copies the packet's values into `args` (`n` must be the number of fields), after
/// checking that `format` is the packet's format; the non-variadic form of
/// `vargr_packet_unpack`.
///
/// Ownership: strings, arrays and `%b` fields are allocated for the caller (each
/// `args[i].ptr`, freed with `vargr_free`; a `%as` field is one block: the pointer
/// table followed by the strings). On error nothing is allocated.
///
/// # Safety
/// `p` is live; `format` is NUL-terminated; `args` is valid for writing `n` entries.
#[no_mangle]
pub unsafe extern "C" fn vargr_packet_unpack_args(
    p: *const vargr_packet,
    format: *const c_char,
    args: *mut vargr_arg,
    n: usize,
) -> c_int {
    guard("vargr_packet_unpack", || {
        // SAFETY: the caller's contract.
        let (p, format, args) = unsafe {
            (
                ptr::handle(p, "p")?,
                ptr::string(format, "format")?,
                ptr::slice_mut(args, n, "args")?,
            )
        };
        args_from_packet(&p.packet, format, args)
    })
}

/// Frees a packet (NULL is a no-op). Values unpacked from it stay valid.
///
/// # Safety
/// `p` is NULL or a live packet handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn vargr_packet_free(p: *mut vargr_packet) -> c_int {
    // SAFETY: the caller's contract.
    guard("vargr_packet_free", || unsafe {
        free_handle(p);
        Ok(())
    })
}

// ---- back-end ---------------------------------------------------------------------

/// Joins the network that started this process (a back-end started by
/// `vargr_network_create`, or attached through `VARGR_RENDEZVOUS`).
///
/// Ownership: `*out` belongs to the caller (NULL on error); free it with
/// `vargr_backend_free`.
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_backend_join(out: *mut *mut vargr_backend) -> c_int {
    guard("vargr_backend_join", || {
        // SAFETY: the caller's contract.
        let out = unsafe { ptr::out(out, "out")? };
        *out = std::ptr::null_mut();
        let backend = Backend::from_env()?;
        *out = into_handle(vargr_backend { backend });
        Ok(())
    })
}

/// This back-end's rank, `0 .. num_backends - 1`.
///
/// # Safety
/// `be` is a live back-end handle; `rank` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_backend_rank(be: *const vargr_backend, rank: *mut u32) -> c_int {
    guard("vargr_backend_rank", || {
        // SAFETY: the caller's contract.
        let (be, rank) = unsafe { (ptr::handle(be, "be")?, ptr::out(rank, "rank")?) };
        *rank = be.backend.rank();
        Ok(())
    })
}

/// The number of back-ends in the network.
///
/// # Safety
/// `be` is a live back-end handle; `n` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_backend_num_backends(
    be: *const vargr_backend,
    n: *mut u32,
) -> c_int {
    guard("vargr_backend_num_backends", || {
        // SAFETY: the caller's contract.
        let (be, n) = unsafe { (ptr::handle(be, "be")?, ptr::out(n, "n")?) };
        *n = be.backend.num_backends();
        Ok(())
    })
}

/// Waits for the next packet on any stream (or from another back-end).
/// `VARGR_ERR_CLOSED` once the front-end shut the network down: the normal end of a
/// back-end's loop.
///
/// Ownership: `*out` belongs to the caller (NULL on error); free it with
/// `vargr_packet_free`.
///
/// # Safety
/// `be` is a live back-end handle; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_backend_recv(
    be: *const vargr_backend,
    out: *mut *mut vargr_packet,
) -> c_int {
    guard("vargr_backend_recv", || {
        // SAFETY: the caller's contract.
        let (be, out) = unsafe { (ptr::handle(be, "be")?, ptr::out(out, "out")?) };
        *out = std::ptr::null_mut();
        give_packet(out, be.backend.recv().map(Some).map_err(Into::into), "")
    })
}

/// Like `vargr_backend_recv`, giving up with `VARGR_ERR_TIMEOUT` after `timeout_ms`.
///
/// # Safety
/// As `vargr_backend_recv`.
#[no_mangle]
pub unsafe extern "C" fn vargr_backend_recv_timeout(
    be: *const vargr_backend,
    timeout_ms: u32,
    out: *mut *mut vargr_packet,
) -> c_int {
    guard("vargr_backend_recv_timeout", || {
        // SAFETY: the caller's contract.
        let (be, out) = unsafe { (ptr::handle(be, "be")?, ptr::out(out, "out")?) };
        *out = std::ptr::null_mut();
        let r = be
            .backend
            .recv_timeout(Duration::from_millis(timeout_ms.into()))
            .map_err(Into::into);
        give_packet(out, r, &format!("no packet within {timeout_ms} ms"))
    })
}

/// Sends a packet up stream `stream` (towards the front-end, through the stream's
/// filters); the non-variadic form of `vargr_backend_send`.
///
/// # Safety
/// As `vargr_stream_send_args`, with `be` a live back-end handle.
#[no_mangle]
pub unsafe extern "C" fn vargr_backend_send_args(
    be: *const vargr_backend,
    stream: u32,
    tag: i32,
    format: *const c_char,
    args: *const vargr_arg,
    n: usize,
) -> c_int {
    guard("vargr_backend_send", || {
        // SAFETY: the caller's contract.
        let (be, mut p) = unsafe {
            (
                ptr::handle(be, "be")?,
                build_packet(stream, tag, format, args, n)?,
            )
        };
        p.source = be.backend.rank();
        Ok(be.backend.send_packet(&p)?)
    })
}

/// Sends a packet to back-end `dest`, routed through the tree; the non-variadic form of
/// `vargr_backend_send_to`. It arrives through `vargr_backend_recv` with `source` set.
///
/// # Safety
/// As `vargr_backend_send_args`.
#[no_mangle]
pub unsafe extern "C" fn vargr_backend_send_to_args(
    be: *const vargr_backend,
    dest: u32,
    tag: i32,
    format: *const c_char,
    args: *const vargr_arg,
    n: usize,
) -> c_int {
    guard("vargr_backend_send_to", || {
        // SAFETY: the caller's contract.
        let (be, p) = unsafe {
            (
                ptr::handle(be, "be")?,
                build_packet(dest, tag, format, args, n)?,
            )
        };
        Ok(be.backend.send_to(dest, tag, p.format.as_str(), p.values)?)
    })
}

/// Frees a back-end handle, closing its connection (NULL is a no-op).
///
/// # Safety
/// `be` is NULL or a live back-end handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn vargr_backend_free(be: *mut vargr_backend) -> c_int {
    // SAFETY: the caller's contract.
    guard("vargr_backend_free", || unsafe {
        free_handle(be);
        Ok(())
    })
}
