//! The tree (MRNet's model) from C: network options, the front-end's network,
//! communicators and streams, packets, and the back-end.
//!
//! Each handle is a Box owned by C between its `create`/`join`/`recv` and its `free`.
//! Handles may be used from several threads (the Rust objects behind them are
//! thread-safe); a network is shut down by `vargr_network_shutdown` or by freeing it.

use std::ffi::{c_char, c_int, CString};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use vargr_filter::{Registry, SyncMode};
use vargr_tbon::{
    AnyStream, AttachSpec, Backend, BackendSpec, Communicator, FilterRole, Network, NetworkOptions,
    NodeFilters, NodeSel, Stream, StreamOptions, TbonError,
};
use vargr_topo::{Spec, Topology};
use vargr_wire::{Format, Packet};

use crate::args::{args_from_packet, values_from_args, vargr_arg};
use crate::events::{vargr_event_callback, Dispatcher};
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
    /// Receives from any stream without holding `net` (which shutdown takes).
    any: AnyStream,
    /// Topology-change callbacks and their thread.
    events: Dispatcher,
}

impl Drop for vargr_network {
    fn drop(&mut self) {
        // The network first: its shutdown ends the event thread, which is then joined,
        // so no callback runs once vargr_network_free has returned.
        drop(lock(self).take());
        self.events.join();
    }
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

/// Which filter of a stream `vargr_stream_set_filter` changes (MRNet's
/// `FILTER_UPSTREAM_TRANS`, `FILTER_UPSTREAM_SYNC`, `FILTER_DOWNSTREAM_TRANS`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vargr_filter_role {
    /// The transformation filter of the waves going up.
    VARGR_FILTER_UP = 0,
    /// The synchronization of the waves going up.
    VARGR_FILTER_SYNC = 1,
    /// The transformation filter of the multicasts going down.
    VARGR_FILTER_DOWN = 2,
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

/// What a `vargr_node_filters` selects nodes by.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vargr_at {
    /// Every node at depth `which` (the front-end is 0, its children 1, ...).
    VARGR_AT_DEPTH = 0,
    /// The node with id `which` (a topology node id, not a back-end rank).
    VARGR_AT_NODE = 1,
}

/// Filters of their own for some of a stream's nodes (the front-end and commnodes):
/// see `vargr_network_open_stream_spec`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct vargr_node_filters {
    /// A `vargr_at`.
    pub by: c_int,
    /// The depth or the node id.
    pub which: u32,
    /// The up filter spec of these nodes; NULL: the stream's.
    pub up_filter: *const c_char,
    /// The sync filter spec of these nodes; NULL: the stream's.
    pub sync_filter: *const c_char,
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
/// Open streams with `filter_name` (or `filter_name:params`) as the up-filter, or, for a
/// sync filter the plugin defines, as the sync filter of `vargr_network_open_stream_spec`.
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
    // What the options leave open comes from the configuration (VARGR_COMMNODE, ...).
    let opts = unsafe { effective_options(options)? };
    let net = Network::new(topology, BackendSpec::Command { program, args }, opts)?;
    *out = network_handle(net);
    Ok(())
}

fn network_handle(net: Network) -> *mut vargr_network {
    into_handle(vargr_network {
        any: net.any_stream(),
        net: Mutex::new(Some(net)),
        events: Dispatcher::default(),
    })
}

/// The network's options, with what they leave open taken from the configuration.
///
/// # Safety
/// `options` is NULL or a live options handle.
unsafe fn effective_options(options: *const vargr_options) -> Result<NetworkOptions> {
    // SAFETY: the caller's contract.
    let mut opts =
        unsafe { options.as_ref() }.map_or_else(NetworkOptions::default, |o| o.opts.clone());
    vargr_config::from_process()
        .map_err(|e| Error::invalid(e.to_string()))?
        .tree_defaults(&mut opts);
    Ok(opts)
}

/// Reads a NULL-terminated argv array; NULL is an empty one.
///
/// # Safety
/// As [`argv_of`], NULL allowed.
unsafe fn opt_words(argv: *const *const c_char) -> Result<Vec<String>> {
    if argv.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: forwarded contract.
    let (program, mut args) = unsafe { argv_of(argv)? };
    args.insert(0, program);
    Ok(args)
}

/// Starts a tree whose back-ends are started by another launcher and attach to it
/// (MRNet's back-end attach mode): the front-end starts the commnodes and a rendezvous;
/// each back-end calls `vargr_backend_join` with `VARGR_RENDEZVOUS` (and
/// `VARGR_SECRET`) in its environment, taking its rank from `PMI_RANK`,
/// `OMPI_COMM_WORLD_RANK`, `SLURM_PROCID` or `VARGR_RANK`. Returns when every back-end
/// of the topology has attached (or the start-up time-out passed).
///
/// `launch_argv` (NULL-terminated; may be NULL) is run once with the rendezvous in its
/// environment to start the back-ends, e.g. `{"mpirun", "-n", "{n}", "my_daemon",
/// NULL}`: `{n}` in any word becomes the number of back-ends (Open MPI across hosts
/// needs `-x VARGR_RENDEZVOUS -x VARGR_SECRET`). `rendezvous_file` (may be NULL) also
/// gets the rendezvous (mode 0600), for back-ends started by hand with
/// `VARGR_RENDEZVOUS=file:PATH`. At least one of the two must be given.
///
/// Ownership: as `vargr_network_create`.
///
/// # Safety
/// `topology` is NUL-terminated; `launch_argv` is NULL or NULL-terminated;
/// `rendezvous_file` is NULL or NUL-terminated; `options` is NULL or live; `out` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_create_attached(
    topology: *const c_char,
    launch_argv: *const *const c_char,
    rendezvous_file: *const c_char,
    options: *const vargr_options,
    out: *mut *mut vargr_network,
) -> c_int {
    guard("vargr_network_create_attached", || {
        // SAFETY: the caller's contract.
        let out = unsafe { ptr::out(out, "out")? };
        *out = std::ptr::null_mut();
        // SAFETY: the caller's contract.
        let (spec, launch, file, opts) = unsafe {
            (
                ptr::string(topology, "topology")?,
                opt_words(launch_argv)?,
                ptr::opt_string(rendezvous_file, "rendezvous_file")?,
                effective_options(options)?,
            )
        };
        if launch.is_empty() && file.is_none() {
            return Err(Error::invalid(
                "neither launch_argv nor rendezvous_file is given: the back-ends could not \
                 find the tree",
            ));
        }
        let topo = Topology::load(Path::new(spec))?;
        let attach = AttachSpec {
            launch: (!launch.is_empty()).then_some(launch),
            file: file.map(Into::into),
        };
        *out = network_handle(Network::new(topo, BackendSpec::Attach(attach), opts)?);
        Ok(())
    })
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

/// A path specification, checked (its C stage plugins loaded, every link stage made
/// once), merged and built; errors name the path, the stage and the line.
fn built_paths(file: &str) -> Result<vargr_paths::Built> {
    let invalid = |e: vargr_paths::PathError| Error::invalid(e.to_string());
    let spec = vargr_paths::PathSpec::load(Path::new(file)).map_err(invalid)?;
    spec.check_stages(false).map_err(invalid)?;
    spec.merge().and_then(|t| t.build()).map_err(invalid)
}

/// Starts the tree a path specification (`paths_file`, TOML; see docs/guide.md, "Path
/// specifications") describes: the element's host is the front-end, every host its
/// paths pass a commnode, every source a back-end running `backend_argv`; each link
/// gets the stages its paths name (built-in ones, and user stages of the C plugins the
/// file lists, `vargr_stage.h`). Open its stream with `vargr_network_open_paths_stream`.
///
/// Ownership: as `vargr_network_create`.
///
/// # Safety
/// As `vargr_network_create`.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_create_from_paths(
    paths_file: *const c_char,
    backend_argv: *const *const c_char,
    options: *const vargr_options,
    out: *mut *mut vargr_network,
) -> c_int {
    guard("vargr_network_create_from_paths", || {
        // SAFETY: the caller's contract.
        let file = unsafe { ptr::string(paths_file, "paths_file")? };
        let built = built_paths(file)?;
        let mut with_paths = vargr_options {
            // SAFETY: NULL or a live options handle.
            opts: unsafe { options.as_ref() }
                .map_or_else(NetworkOptions::default, |o| o.opts.clone()),
        };
        with_paths.opts = built.network_options(with_paths.opts);
        // SAFETY: forwarded contract; the options are a local.
        unsafe { create(built.topology, backend_argv, &with_paths, out) }
    })
}

/// Opens the stream of a network made by `vargr_network_create_from_paths` from the same
/// `paths_file`, to every back-end: each node reduces as its paths say (`identity`
/// where they do not), with `sync_filter` waves (NULL: `"all"`; see
/// `vargr_network_open_stream_spec`).
///
/// Ownership: as `vargr_network_open_stream`.
///
/// # Safety
/// `net` is a live network handle; strings are NULL (`sync_filter` only) or
/// NUL-terminated; `out` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_open_paths_stream(
    net: *const vargr_network,
    paths_file: *const c_char,
    sync_filter: *const c_char,
    out: *mut *mut vargr_stream,
) -> c_int {
    guard("vargr_network_open_paths_stream", || {
        // SAFETY: the caller's contract.
        let (handle, file, sync, out) = unsafe {
            (
                ptr::handle(net, "net")?,
                ptr::string(paths_file, "paths_file")?,
                ptr::opt_string(sync_filter, "sync_filter")?,
                ptr::out(out, "out")?,
            )
        };
        *out = std::ptr::null_mut();
        let built = built_paths(file)?;
        let opts = built.stream_options().sync(sync.unwrap_or("all"));
        let stream = with_network(handle, |n| {
            if *n.topology() != built.topology {
                return Err(Error::invalid(format!(
                    "{file} describes another tree than this network's"
                )));
            }
            Ok(n.open_stream(&n.broadcast_communicator(), opts)?)
        })?;
        *out = into_handle(vargr_stream { stream });
        Ok(())
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
        // SAFETY: forwarded contract.
        unsafe {
            open_stream(
                net,
                comm,
                up_filter,
                sync,
                timeout_ms,
                std::ptr::null(),
                out,
            )
        }
    })
}

/// Like `vargr_network_open_stream`, with a down-filter too (MRNet's `new_Stream` with
/// a downstream transformation filter): `down_filter` transforms every multicast at
/// each node on its way down (the front-end's included), a built-in or a loaded
/// filter, with `filter:params` as for `up_filter`; NULL or `""` means none.
///
/// # Safety
/// As `vargr_network_open_stream`; `down_filter` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_open_stream_filters(
    net: *const vargr_network,
    comm: *const vargr_communicator,
    up_filter: *const c_char,
    sync: c_int,
    timeout_ms: u32,
    down_filter: *const c_char,
    out: *mut *mut vargr_stream,
) -> c_int {
    guard("vargr_network_open_stream_filters", || {
        // SAFETY: forwarded contract.
        unsafe { open_stream(net, comm, up_filter, sync, timeout_ms, down_filter, out) }
    })
}

/// Like `vargr_network_open_stream_filters`, with up filters per kind of node (MRNet's
/// per-node filter assignment, as in its HeterogeneousFilters example): the back-ends
/// run `backend_filter` on each packet they send before it goes up (it should give one
/// packet per packet: a wave waits for one from each back-end; NULL or `""`: none),
/// the commnodes run `internal_filter` on their waves (NULL: `"null"`), and the
/// front-end runs `frontend_filter` last (NULL or `""`: `internal_filter`). The
/// nodes' filters are independent instances; parameters come with the specs
/// (`name:params`). `vargr_stream_set_filter` with `VARGR_FILTER_UP` later changes
/// `internal_filter` (and the front-end's when it had none of its own).
///
/// # Safety
/// As `vargr_network_open_stream_filters`; the filter strings are NULL or
/// NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_open_stream_per_role(
    net: *const vargr_network,
    comm: *const vargr_communicator,
    backend_filter: *const c_char,
    internal_filter: *const c_char,
    frontend_filter: *const c_char,
    sync: c_int,
    timeout_ms: u32,
    down_filter: *const c_char,
    out: *mut *mut vargr_stream,
) -> c_int {
    guard("vargr_network_open_stream_per_role", || {
        // SAFETY: the caller's contract.
        let (be, fe) = unsafe {
            (
                ptr::opt_string(backend_filter, "backend_filter")?,
                ptr::opt_string(frontend_filter, "frontend_filter")?,
            )
        };
        let given = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(String::from);
        let (be, fe) = (given(be), given(fe));
        // SAFETY: forwarded contract.
        unsafe {
            open_stream_with(
                net,
                comm,
                internal_filter,
                sync,
                timeout_ms,
                down_filter,
                out,
                |o| {
                    o.up_backend = be;
                    o.up_frontend = fe;
                },
            )
        }
    })
}

/// Opens a stream with every filter named by a spec string, and filters of their own for
/// some nodes (heterogeneous filters). `up_filter` and `down_filter` are as for
/// `vargr_network_open_stream_filters`. `sync_filter` names the sync filter: a mode
/// (`"all"`, `"timeout:250ms"`, `"dontwait"`) or a user's sync filter loaded with
/// `vargr_options_load_filter` (`"k_of_n:2"`); NULL means `"all"`. `per_node` lists
/// `n_per_node` rules: the nodes a rule selects (by depth or node id; a node rule wins
/// over a depth rule, and among rules of one kind the first) run its up and sync
/// filters instead of the stream's. Back-ends are never selected (see
/// `vargr_network_open_stream_per_role` for theirs). `wave_deadline_ms` bounds how long
/// a packet may wait at a node whatever its sync filter decides (0: the default, 60 s);
/// the first overdue wave at a node is reported as that filter's error on the stream.
/// Every node's specs are checked here: a bad one fails the call, naming its rule.
///
/// Ownership: `per_node` and its strings are read during the call only; `*out` belongs
/// to the caller; free it with `vargr_stream_free`.
///
/// # Safety
/// As `vargr_network_open_stream_filters`; `per_node` points to `n_per_node` rules (or
/// is NULL with 0) whose strings are NULL or NUL-terminated.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn vargr_network_open_stream_spec(
    net: *const vargr_network,
    comm: *const vargr_communicator,
    up_filter: *const c_char,
    sync_filter: *const c_char,
    down_filter: *const c_char,
    per_node: *const vargr_node_filters,
    n_per_node: usize,
    wave_deadline_ms: u32,
    out: *mut *mut vargr_stream,
) -> c_int {
    guard("vargr_network_open_stream_spec", || {
        // SAFETY: the caller's contract.
        let (sync, rules) = unsafe {
            (
                ptr::opt_string(sync_filter, "sync_filter")?,
                node_rules(per_node, n_per_node)?,
            )
        };
        let sync = sync.unwrap_or("all").to_string();
        let deadline = match wave_deadline_ms {
            0 => StreamOptions::DEFAULT_WAVE_DEADLINE,
            ms => Duration::from_millis(ms.into()),
        };
        // SAFETY: forwarded contract.
        unsafe {
            open_stream_with(net, comm, up_filter, 0, 0, down_filter, out, |o| {
                o.sync = sync;
                o.per_node = rules;
                o.wave_deadline = Some(deadline);
            })
        }
    })
}

/// # Safety
/// As `vargr_network_open_stream_spec`'s `per_node`.
unsafe fn node_rules(p: *const vargr_node_filters, n: usize) -> Result<Vec<NodeFilters>> {
    let rules = if n == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's contract.
        unsafe { ptr::slice(p, n, "per_node")? }
    };
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let at = match r.by {
                0 => NodeSel::Depth(r.which),
                1 => NodeSel::Node(r.which),
                b => {
                    return Err(Error::invalid(format!(
                        "per_node[{i}].by is {b}, not a vargr_at (0 depth, 1 node)"
                    )))
                }
            };
            // SAFETY: the caller's contract.
            let (up, sync) = unsafe {
                (
                    ptr::opt_string(r.up_filter, "per_node[].up_filter")?,
                    ptr::opt_string(r.sync_filter, "per_node[].sync_filter")?,
                )
            };
            Ok(NodeFilters {
                at,
                up: up.map(String::from),
                sync: sync.map(String::from),
            })
        })
        .collect()
}

fn sync_mode(sync: c_int, timeout_ms: u32) -> Result<SyncMode> {
    Ok(match sync {
        0 => SyncMode::WaitForAll,
        1 => SyncMode::TimeOut(Duration::from_millis(timeout_ms.into())),
        2 => SyncMode::DontWait,
        s => {
            return Err(Error::invalid(format!(
                "sync {s} is not a vargr_sync (0 wait-for-all, 1 timeout, 2 dont-wait)"
            )))
        }
    })
}

/// # Safety
/// As `vargr_network_open_stream_filters`.
unsafe fn open_stream(
    net: *const vargr_network,
    comm: *const vargr_communicator,
    up_filter: *const c_char,
    sync: c_int,
    timeout_ms: u32,
    down_filter: *const c_char,
    out: *mut *mut vargr_stream,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe {
        open_stream_with(
            net,
            comm,
            up_filter,
            sync,
            timeout_ms,
            down_filter,
            out,
            |_| (),
        )
    }
}

/// [`open_stream`], with `more` setting further options.
///
/// # Safety
/// As `vargr_network_open_stream_filters`.
#[allow(clippy::too_many_arguments)]
unsafe fn open_stream_with(
    net: *const vargr_network,
    comm: *const vargr_communicator,
    up_filter: *const c_char,
    sync: c_int,
    timeout_ms: u32,
    down_filter: *const c_char,
    out: *mut *mut vargr_stream,
    more: impl FnOnce(&mut StreamOptions),
) -> Result<()> {
    // SAFETY: the caller's contract.
    let (net, comm, up, down, out) = unsafe {
        (
            ptr::handle(net, "net")?,
            ptr::handle(comm, "comm")?,
            ptr::opt_string(up_filter, "up_filter")?,
            ptr::opt_string(down_filter, "down_filter")?,
            ptr::out(out, "out")?,
        )
    };
    *out = std::ptr::null_mut();
    let mut opts = StreamOptions::new(up.unwrap_or("null")).sync(sync_mode(sync, timeout_ms)?);
    opts.down = down.filter(|d| !d.is_empty()).map(String::from);
    more(&mut opts);
    let stream = with_network(net, |net| Ok(net.open_stream(&comm.comm, opts)?))?;
    *out = into_handle(vargr_stream { stream });
    Ok(())
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
        let r = match taken {
            Some(n) => n.shutdown(),
            None => Ok(()),
        };
        // No callback runs once this returns (unless called from one).
        net.events.join();
        Ok(r?)
    })
}

/// Registers `callback` for the tree events of `kind` (a `vargr_event_kind`;
/// `VARGR_EVENT_ANY` for all), MRNet's `register_EventCallback`. Callbacks run on a
/// thread of the network's own, one event at a time in the order they happened, from
/// the first registration on; they may call vargr (even shut the network down). After
/// `vargr_network_shutdown` or `vargr_network_free` returns, none runs any more.
///
/// Ownership: `user_data` is passed back as is; it must stay valid (and usable from
/// another thread) until the network is shut down.
///
/// # Safety
/// `net` is a live network handle; `callback` is a valid function or NULL.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_add_event_callback(
    net: *const vargr_network,
    kind: c_int,
    callback: vargr_event_callback,
    user_data: *mut std::ffi::c_void,
) -> c_int {
    guard("vargr_network_add_event_callback", || {
        // SAFETY: the caller's contract.
        let net = unsafe { ptr::handle(net, "net")? };
        net.events.add(kind, callback, user_data, || {
            with_network(net, |n| Ok(n.tree_events()))
        })
    })
}

/// The process ids of the front-end's children (commnodes, or back-ends directly below
/// the front-end): `*n` is set to their number, and the first `cap` are stored in
/// `pids`. For tools that watch, signal or (in tests of fault recovery) kill them.
///
/// # Safety
/// `net` is live; `pids` is valid for `cap` writes (NULL when `cap` is 0); `n` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_child_pids(
    net: *const vargr_network,
    pids: *mut u32,
    cap: usize,
    n: *mut usize,
) -> c_int {
    guard("vargr_network_child_pids", || {
        // SAFETY: the caller's contract.
        let (net, pids, n) = unsafe {
            (
                ptr::handle(net, "net")?,
                ptr::slice_mut(pids, cap, "pids")?,
                ptr::out(n, "n")?,
            )
        };
        let got = with_network(net, |net| Ok(net.child_pids()))?;
        for (d, s) in pids.iter_mut().zip(&got) {
            *d = *s;
        }
        *n = got.len();
        Ok(())
    })
}

/// Another handle on the open stream `id` (MRNet's `Network::get_Stream`), e.g. the
/// stream a `vargr_network_recv` result came from.
///
/// Ownership: `*out` belongs to the caller (NULL on error); free it with
/// `vargr_stream_free`.
///
/// # Safety
/// `net` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_get_stream(
    net: *const vargr_network,
    id: u32,
    out: *mut *mut vargr_stream,
) -> c_int {
    guard("vargr_network_get_stream", || {
        // SAFETY: the caller's contract.
        let (net, out) = unsafe { (ptr::handle(net, "net")?, ptr::out(out, "out")?) };
        *out = std::ptr::null_mut();
        let stream = with_network(net, |n| Ok(n.stream(id)?))?;
        *out = into_handle(vargr_stream { stream });
        Ok(())
    })
}

/// Waits for the next result on any stream (MRNet's `Network::recv`): `*stream` is
/// set to its stream's id (`UINT32_MAX` when the error is not a stream's, such as
/// `VARGR_ERR_CLOSED` after shutdown), `*out` to the packet. A stream's error (a lost
/// node, a failed filter) is returned with its status, `*stream` naming the stream.
/// Streams with results waiting are served in turn.
///
/// Ownership: `*out` belongs to the caller (NULL on error); free it with
/// `vargr_packet_free`.
///
/// # Safety
/// `net` is live; `stream` and `out` are writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_recv(
    net: *const vargr_network,
    stream: *mut u32,
    out: *mut *mut vargr_packet,
) -> c_int {
    guard("vargr_network_recv", || {
        // SAFETY: forwarded contract.
        unsafe { recv_any(net, None, stream, out) }
    })
}

/// Like `vargr_network_recv`, giving up with `VARGR_ERR_TIMEOUT` after `timeout_ms`
/// (0: only what is there already).
///
/// # Safety
/// As `vargr_network_recv`.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_recv_timeout(
    net: *const vargr_network,
    timeout_ms: u32,
    stream: *mut u32,
    out: *mut *mut vargr_packet,
) -> c_int {
    guard("vargr_network_recv_timeout", || {
        // SAFETY: forwarded contract.
        unsafe { recv_any(net, Some(timeout_ms), stream, out) }
    })
}

/// # Safety
/// As `vargr_network_recv`.
unsafe fn recv_any(
    net: *const vargr_network,
    timeout_ms: Option<u32>,
    stream: *mut u32,
    out: *mut *mut vargr_packet,
) -> Result<()> {
    // SAFETY: the caller's contract.
    let (net, stream, out) = unsafe {
        (
            ptr::handle(net, "net")?,
            ptr::out(stream, "stream")?,
            ptr::out(out, "out")?,
        )
    };
    *out = std::ptr::null_mut();
    *stream = u32::MAX;
    // Not through `with_network`: waiting must not hold the lock that shutdown takes.
    let timeout = timeout_ms.map(|t| Duration::from_millis(t.into()));
    with_network(net, |_| Ok(()))?;
    let got = net.any.recv(timeout)?;
    match got {
        None => Err(Error::new(
            vargr_status::VARGR_ERR_TIMEOUT,
            format!(
                "no result on any stream within {} ms",
                timeout_ms.unwrap_or(0)
            ),
        )),
        Some((id, r)) => {
            *stream = id;
            *out = into_handle(vargr_packet::new(r?));
            Ok(())
        }
    }
}

/// A file descriptor that is readable while `vargr_network_recv` would return at once
/// (MRNet's `get_DataNotificationFd`), for programs that wait in `select`, `poll` or an
/// event loop. It stays readable until the results are received (there is no clearing
/// step: receive until `vargr_network_recv_timeout(net, 0, ...)` times out), and
/// becomes readable at shutdown. The first call starts a thread that reads the network
/// while the program waits outside vargr.
///
/// Ownership: the descriptor belongs to the network: only wait on it (do not read,
/// write or close it); it is closed when the network is freed.
///
/// # Safety
/// `net` is live; `fd` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_notification_fd(
    net: *const vargr_network,
    fd: *mut c_int,
) -> c_int {
    guard("vargr_network_notification_fd", || {
        // SAFETY: the caller's contract.
        let (net, fd) = unsafe { (ptr::handle(net, "net")?, ptr::out(fd, "fd")?) };
        *fd = with_network(net, |n| Ok(n.notification_fd(None)?))?;
        Ok(())
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

/// A file descriptor readable while `vargr_stream_recv` would return at once (MRNet's
/// `Stream::get_DataNotificationFd`); see `vargr_network_notification_fd`, whose rules
/// it follows.
///
/// Ownership: the descriptor belongs to the network (do not read or close it).
///
/// # Safety
/// `s` is live; `fd` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_stream_notification_fd(
    s: *const vargr_stream,
    fd: *mut c_int,
) -> c_int {
    guard("vargr_stream_notification_fd", || {
        // SAFETY: the caller's contract.
        let (s, fd) = unsafe { (ptr::handle(s, "s")?, ptr::out(fd, "fd")?) };
        *fd = s.stream.notification_fd()?;
        Ok(())
    })
}

fn role_of(role: c_int) -> Result<FilterRole> {
    match role {
        0 => Ok(FilterRole::Up),
        1 => Ok(FilterRole::Sync),
        2 => Ok(FilterRole::Down),
        r => Err(Error::invalid(format!(
            "role {r} is not a vargr_filter_role (0 up, 1 sync, 2 down)"
        ))),
    }
}

/// Replaces one of a running stream's filters at every node: `role` is a
/// `vargr_filter_role`; `spec` a filter spec as for `vargr_network_open_stream`
/// (`"max"`, `"histogram:0,100,10"`, a loaded filter), or for `VARGR_FILTER_SYNC` a
/// mode (`"all"`, `"dontwait"`, `"timeout:250ms"`), or for `VARGR_FILTER_DOWN` `""` to
/// remove the down filter. A bad spec fails here and changes nothing. The change
/// travels down with the multicasts, so it applies from the next one on; a replaced
/// filter starts with fresh state.
///
/// # Safety
/// `s` is live; `spec` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn vargr_stream_set_filter(
    s: *const vargr_stream,
    role: c_int,
    spec: *const c_char,
) -> c_int {
    guard("vargr_stream_set_filter", || {
        // SAFETY: the caller's contract.
        let (s, spec) = unsafe { (ptr::handle(s, "s")?, ptr::string(spec, "spec")?) };
        Ok(s.stream.set_filter(role_of(role)?, spec)?)
    })
}

/// Gives a running stream's filter new parameters (MRNet's `set_FilterParameters`):
/// for `VARGR_FILTER_UP` and `VARGR_FILTER_DOWN` the filter stays and is made anew
/// with `params` (its spec becomes `name:params`; `""`: none); for
/// `VARGR_FILTER_SYNC`, `params` is a time-out in milliseconds (MRNet's
/// `FILTER_UPSTREAM_SYNC` with `"%ud"`, making the stream wait for at most that long)
/// or a mode as for `vargr_stream_set_filter`. Otherwise as `vargr_stream_set_filter`.
///
/// # Safety
/// `s` is live; `params` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn vargr_stream_set_filter_parameters(
    s: *const vargr_stream,
    role: c_int,
    params: *const c_char,
) -> c_int {
    guard("vargr_stream_set_filter_parameters", || {
        // SAFETY: the caller's contract.
        let (s, params) = unsafe { (ptr::handle(s, "s")?, ptr::string(params, "params")?) };
        let role = role_of(role)?;
        let spec = match role {
            FilterRole::Sync
                if !params.is_empty() && params.bytes().all(|b| b.is_ascii_digit()) =>
            {
                format!("timeout:{params}ms")
            }
            FilterRole::Sync => params.to_string(),
            FilterRole::Up | FilterRole::Down => {
                let now = s.stream.filter(role)?;
                if now.is_empty() {
                    return Err(Error::invalid(
                        "the stream has no down filter to give parameters to",
                    ));
                }
                let name = now.split(':').next().unwrap_or_default();
                match params {
                    "" => name.to_string(),
                    p => format!("{name}:{p}"),
                }
            }
        };
        Ok(s.stream.set_filter(role, &spec)?)
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

/// Waits for the next packet multicast on stream `stream` (MRNet's back-end
/// `Stream::recv`), leaving other streams' packets and messages from other back-ends
/// for `vargr_backend_recv` or other threads: a thread per stream works.
/// `VARGR_ERR_CLOSED` once the network is shut down.
///
/// Ownership: `*out` belongs to the caller (NULL on error); free it with
/// `vargr_packet_free`.
///
/// # Safety
/// `be` is a live back-end handle; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_backend_recv_stream(
    be: *const vargr_backend,
    stream: u32,
    out: *mut *mut vargr_packet,
) -> c_int {
    guard("vargr_backend_recv_stream", || {
        // SAFETY: forwarded contract.
        unsafe { recv_stream(be, stream, None, out) }
    })
}

/// Like `vargr_backend_recv_stream`, giving up with `VARGR_ERR_TIMEOUT` after
/// `timeout_ms` (0: only what is there already).
///
/// # Safety
/// As `vargr_backend_recv_stream`.
#[no_mangle]
pub unsafe extern "C" fn vargr_backend_recv_stream_timeout(
    be: *const vargr_backend,
    stream: u32,
    timeout_ms: u32,
    out: *mut *mut vargr_packet,
) -> c_int {
    guard("vargr_backend_recv_stream_timeout", || {
        // SAFETY: forwarded contract.
        unsafe { recv_stream(be, stream, Some(timeout_ms), out) }
    })
}

/// # Safety
/// As `vargr_backend_recv_stream`.
unsafe fn recv_stream(
    be: *const vargr_backend,
    stream: u32,
    timeout_ms: Option<u32>,
    out: *mut *mut vargr_packet,
) -> Result<()> {
    // SAFETY: the caller's contract.
    let (be, out) = unsafe { (ptr::handle(be, "be")?, ptr::out(out, "out")?) };
    *out = std::ptr::null_mut();
    let timeout = timeout_ms.map(|t| Duration::from_millis(t.into()));
    let what = format!(
        "no packet on stream {stream} within {} ms",
        timeout_ms.unwrap_or(0)
    );
    give_packet(
        out,
        be.backend.recv_stream(stream, timeout).map_err(Into::into),
        &what,
    )
}

/// A file descriptor readable while `vargr_backend_recv` would return at once (MRNet's
/// `get_DataNotificationFd` on a back-end); see `vargr_network_notification_fd`.
///
/// Ownership: the descriptor belongs to the back-end (do not read or close it).
///
/// # Safety
/// `be` is live; `fd` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_backend_notification_fd(
    be: *const vargr_backend,
    fd: *mut c_int,
) -> c_int {
    guard("vargr_backend_notification_fd", || {
        // SAFETY: the caller's contract.
        let (be, fd) = unsafe { (ptr::handle(be, "be")?, ptr::out(fd, "fd")?) };
        *fd = be.backend.notification_fd(None)?;
        Ok(())
    })
}

/// A file descriptor readable while `vargr_backend_recv_stream` on `stream` would
/// return at once; see `vargr_backend_notification_fd`.
///
/// # Safety
/// `be` is live; `fd` is writable.
#[no_mangle]
pub unsafe extern "C" fn vargr_backend_stream_notification_fd(
    be: *const vargr_backend,
    stream: u32,
    fd: *mut c_int,
) -> c_int {
    guard("vargr_backend_stream_notification_fd", || {
        // SAFETY: the caller's contract.
        let (be, fd) = unsafe { (ptr::handle(be, "be")?, ptr::out(fd, "fd")?) };
        *fd = be.backend.notification_fd(Some(stream))?;
        Ok(())
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

// ---- observed elements (PATHS' last-observe) ----------------------------------------

/// Publishes `len` bytes at `value` as version `version` of observed element
/// `element`: back-ends waiting in `vargr_backend_observe_newer` get it through the
/// caches of the nodes above them. Versions only grow: an older or equal one is
/// `VARGR_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// `net` is a live network handle; `value` is NULL (with `len == 0`) or readable for
/// `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_publish(
    net: *const vargr_network,
    element: u32,
    version: u64,
    value: *const u8,
    len: usize,
) -> c_int {
    guard("vargr_network_publish", || {
        // SAFETY: the caller's contract.
        let (net, value) = unsafe { (ptr::handle(net, "net")?, ptr::slice(value, len, "value")?) };
        with_network(net, |n| Ok(n.publish(element, version, value)?))
    })
}

/// Publishes a value of observed element `element` from this back-end; it travels up
/// to the front-end, which keeps it if it is the newest.
///
/// # Safety
/// `be` is a live back-end handle; `value` as in `vargr_network_publish`.
#[no_mangle]
pub unsafe extern "C" fn vargr_backend_publish(
    be: *const vargr_backend,
    element: u32,
    version: u64,
    value: *const u8,
    len: usize,
) -> c_int {
    guard("vargr_backend_publish", || {
        // SAFETY: the caller's contract.
        let (be, value) = unsafe { (ptr::handle(be, "be")?, ptr::slice(value, len, "value")?) };
        Ok(be.backend.publish(element, version, value)?)
    })
}

/// Waits up to `timeout_ms` for a value of observed element `element` newer than
/// `*have` (`have` NULL: any value), the newest the tree holds, from the nearest cache
/// that has one. On success `*version` is its version, `*len` its length, and its
/// bytes are in `buf`. A value longer than `cap` is `VARGR_ERR_INVALID_ARGUMENT` with
/// `*len` set to the length needed; the value stays in this back-end's cache, so
/// asking again with a buffer that large returns it at once. `VARGR_ERR_TIMEOUT` when
/// nothing newer arrives in time.
///
/// # Safety
/// `be` is a live back-end handle; `have` is NULL or readable; `version` and `len` are
/// writable; `buf` is NULL (with `cap == 0`) or writable for `cap` bytes.
#[no_mangle]
pub unsafe extern "C" fn vargr_backend_observe_newer(
    be: *const vargr_backend,
    element: u32,
    have: *const u64,
    timeout_ms: u32,
    version: *mut u64,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> c_int {
    guard("vargr_backend_observe_newer", || {
        // SAFETY: the caller's contract.
        let (be, out) = unsafe {
            (
                ptr::handle(be, "be")?,
                Observed::new(version, buf, cap, len)?,
            )
        };
        // SAFETY: NULL or readable, per the contract.
        let have = unsafe { have.as_ref() }.copied();
        let timeout = Duration::from_millis(timeout_ms.into());
        out.fill(element, be.backend.observe_newer(element, have, timeout)?)
    })
}

/// `vargr_backend_observe_newer` at the front-end: a value of `element` newer than
/// `*have` that a back-end published (or this front-end's own), with the same buffer
/// rules and errors. The network is held for at most 50 ms at a time while waiting, so
/// other threads' calls on it (and `vargr_network_shutdown`) go on meanwhile.
///
/// # Safety
/// `net` is a live network handle; the other arguments as in
/// `vargr_backend_observe_newer`.
#[no_mangle]
pub unsafe extern "C" fn vargr_network_observe_newer(
    net: *const vargr_network,
    element: u32,
    have: *const u64,
    timeout_ms: u32,
    version: *mut u64,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> c_int {
    guard("vargr_network_observe_newer", || {
        // SAFETY: the caller's contract.
        let (net, out) = unsafe {
            (
                ptr::handle(net, "net")?,
                Observed::new(version, buf, cap, len)?,
            )
        };
        // SAFETY: NULL or readable, per the contract.
        let have = unsafe { have.as_ref() }.copied();
        let deadline = Instant::now() + Duration::from_millis(timeout_ms.into());
        loop {
            let slice = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50));
            match with_network(net, |n| Ok(n.observe_newer(element, have, slice)))? {
                Err(TbonError::ObserveTimeout { .. }) if Instant::now() < deadline => continue,
                got => return out.fill(element, got?),
            }
        }
    })
}

/// Where an observed value goes: the caller's version, buffer and length.
struct Observed<'a> {
    version: &'a mut u64,
    buf: &'a mut [u8],
    len: &'a mut usize,
}

impl Observed<'_> {
    /// # Safety
    /// As `vargr_backend_observe_newer`'s `version`, `buf`, `cap` and `len`.
    unsafe fn new<'a>(
        version: *mut u64,
        buf: *mut u8,
        cap: usize,
        len: *mut usize,
    ) -> Result<Observed<'a>> {
        // SAFETY: the caller's contract.
        unsafe {
            Ok(Observed {
                version: ptr::out(version, "version")?,
                buf: ptr::slice_mut(buf, cap, "buf")?,
                len: ptr::out(len, "len")?,
            })
        }
    }

    /// Copies version `v` of `element` out; too small a buffer says the length needed.
    fn fill(self, element: u32, (v, value): (u64, bytes::Bytes)) -> Result<()> {
        *self.len = value.len();
        let cap = self.buf.len();
        let Some(dst) = self.buf.get_mut(..value.len()) else {
            return Err(Error::new(
                vargr_status::VARGR_ERR_INVALID_ARGUMENT,
                format!(
                    "version {v} of element {element} is {} bytes, the buffer {cap}",
                    value.len()
                ),
            ));
        };
        dst.copy_from_slice(&value);
        *self.version = v;
        Ok(())
    }
}
