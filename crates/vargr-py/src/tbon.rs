//! The tree from Python: `Topology`, `Network` (the front-end), `Communicator`,
//! `Stream` and `Backend`, over `vargr_tbon`.
//!
//! Custom filters written in Python run at the front-end. A stream whose `up` filter is
//! a callable is opened in the tree as a pass-through (`null` with `dont_wait`, the
//! tree's fast path), so every back-end packet reaches the front-end unchanged; there a
//! [`SyncFilter`] (the same state machine every node of the tree runs) groups them into
//! waves by the stream's synchronization mode, and the callable gets each wave's
//! packets in the thread that called `Stream.recv`, holding the GIL. Internal nodes
//! run the `vargr` binary (or the package's `vargr-commnode`), which has no Python
//! filters registered, so a Python filter cannot run below the root; a built-in filter
//! can, and a stream with a built-in `up` filter runs it at every node as usual.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use vargr_filter::{SyncFilter, SyncMode};
use vargr_tbon::{
    AnyStream, AttachSpec, Backend, BackendSpec, Communicator, FilterRole, Network, NetworkOptions,
    NodeFilters, NodeSel, Packet, Stream, StreamOptions, TbonError, TreeEvent,
};
use vargr_topo::{Spec, Topology};

use crate::block;
use crate::errors::{self, Kind};
use crate::packet::{self, PyPacket};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    if !s.is_finite() || s < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{what} must be a non-negative number of seconds, got {s}"
        )));
    }
    Ok(Duration::from_secs_f64(s))
}

fn json_to_py<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(v).map_err(|e| PyValueError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

/// Runs `f` on a thread of its own and waits for it in slices, so that Ctrl-C
/// interrupts a long start-up; an abandoned result is dropped on that thread (a
/// network shuts itself down when dropped).
fn interruptible<T: Send + 'static>(
    py: Python<'_>,
    f: impl FnOnce() -> T + Send + 'static,
) -> PyResult<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("vargr-start".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| errors::new_err(Kind::Startup, e.to_string()))?;
    let got = block::wait(py, None, move |slice| match rx.recv_timeout(slice) {
        Ok(v) => Some(Some(v)),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Some(None),
    })?;
    got.flatten()
        .ok_or_else(|| errors::new_err(Kind::Startup, "the start-up thread panicked"))
}

/// The shape of a tree: a spec (`kary:4@16`, `flat:8`, `1x4x16`), an MRNet topology
/// file's text (`host:0 => host:1 host:2 ;`), a TOML topology's text, or the path of a
/// file holding either.
#[pyclass(frozen, module = "vargr", name = "Topology")]
#[derive(Clone)]
pub struct PyTopology {
    pub inner: Topology,
}

impl PyTopology {
    /// A topology from whatever the user passed: a `Topology`, a path, or text.
    pub fn from_any(obj: &Bound<'_, PyAny>) -> PyResult<Topology> {
        if let Ok(t) = obj.cast::<PyTopology>() {
            return Ok(t.get().inner.clone());
        }
        if let Ok(s) = obj.extract::<String>() {
            return parse_text(&s);
        }
        // os.PathLike
        let path: std::path::PathBuf = obj.extract().map_err(|_| {
            PyTypeError::new_err("topology must be a vargr.Topology, a str or an os.PathLike")
        })?;
        Topology::load(&path).map_err(errors::topo)
    }
}

fn parse_text(s: &str) -> PyResult<Topology> {
    let trimmed = s.trim();
    let path = std::path::Path::new(trimmed);
    if !trimmed.contains('\n') && (path.exists() || Spec::looks_like_spec(trimmed)) {
        return Topology::load(path).map_err(errors::topo);
    }
    if trimmed.contains("=>") {
        return Topology::parse_mrnet(s, "<topology text>").map_err(errors::topo);
    }
    if trimmed.contains('=') || trimmed.contains('[') {
        return Topology::parse_toml(s, "<topology text>").map_err(errors::topo);
    }
    Err(errors::new_err(
        Kind::Topology,
        format!(
            "{trimmed:?} is not a topology: expected a spec ({}), MRNet topology text \
             (host:0 => host:1 ;), TOML text, or the path of a file",
            vargr_topo::SPEC_FORMS
        ),
    ))
}

#[pymethods]
impl PyTopology {
    #[new]
    fn new(source: &Bound<'_, PyAny>) -> PyResult<PyTopology> {
        Ok(PyTopology {
            inner: PyTopology::from_any(source)?,
        })
    }

    /// Number of back-ends (leaves).
    #[getter]
    fn num_backends(&self) -> usize {
        self.inner.num_backends()
    }

    /// Levels below the front-end.
    #[getter]
    fn depth(&self) -> usize {
        self.inner.depth()
    }

    /// Internal nodes (commnodes), which run the `vargr` commnode program.
    #[getter]
    fn num_internal(&self) -> usize {
        self.inner.internal().len()
    }

    /// Back-end ranks below node `node` (global node ids: root 0, breadth-first).
    fn backends_under(&self, node: u32) -> Vec<u32> {
        self.inner.backends_under(node)
    }

    /// A text drawing of the tree.
    fn draw(&self) -> String {
        self.inner.draw()
    }

    fn to_mrnet(&self) -> String {
        self.inner.to_mrnet()
    }

    fn to_toml(&self) -> String {
        self.inner.to_toml()
    }

    fn to_dot(&self) -> String {
        self.inner.to_dot()
    }

    /// Number of nodes, front-end included.
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Topology({} nodes, {} back-ends, depth {})",
            self.inner.len(),
            self.inner.num_backends(),
            self.inner.depth()
        )
    }
}

/// A set of back-end ranks a stream talks to.
#[pyclass(frozen, module = "vargr", name = "Communicator")]
pub struct PyCommunicator {
    inner: Communicator,
}

#[pymethods]
impl PyCommunicator {
    /// The back-end ranks, sorted.
    #[getter]
    fn ranks(&self) -> Vec<u32> {
        self.inner.ranks().to_vec()
    }

    fn __len__(&self) -> usize {
        self.inner.ranks().len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Communicator({})",
            vargr_tbon::fmt_ranks(self.inner.ranks())
        )
    }
}

/// `all`, `wait_for_all`, `dont_wait`, `timeout:250ms` (Python spellings accepted).
fn parse_sync(s: &str) -> PyResult<SyncMode> {
    s.replace('_', "-")
        .parse()
        .map_err(|e: vargr_filter::FilterError| PyValueError::new_err(e.to_string()))
}

/// One `per_node` rule: `{"depth": D}` or `{"node": N}`, with `up` and/or `sync`.
fn node_rule(d: &Bound<'_, PyDict>) -> PyResult<NodeFilters> {
    let get = |k: &str| -> PyResult<Option<Bound<'_, PyAny>>> { d.get_item(k) };
    let num =
        |k: &str| -> PyResult<Option<u32>> { get(k)?.map(|v| v.extract::<u32>()).transpose() };
    let text = |k: &str| -> PyResult<Option<String>> {
        get(k)?.map(|v| v.extract::<String>()).transpose()
    };
    for k in d.keys() {
        let k: String = k.extract()?;
        if !matches!(k.as_str(), "depth" | "node" | "up" | "sync") {
            return Err(PyValueError::new_err(format!(
                "per_node rule key {k:?}: expected depth or node, up, sync"
            )));
        }
    }
    let at = match (num("node")?, num("depth")?) {
        (Some(n), None) => NodeSel::Node(n),
        (None, Some(depth)) => NodeSel::Depth(depth),
        _ => {
            return Err(PyValueError::new_err(
                "a per_node rule has exactly one of depth and node",
            ))
        }
    };
    Ok(NodeFilters {
        at,
        up: text("up")?,
        sync: text("sync")?,
    })
}

/// The front-end's commnode program when neither the caller nor the configuration
/// (`VARGR_COMMNODE`) names one: the `vargr-commnode` script installed with this package
/// (same version as this extension, so the protocol matches). None: vargr's own default
/// (`vargr` on the PATH).
fn default_commnode(py: Python<'_>) -> PyResult<Option<String>> {
    let scripts: String = py
        .import("sysconfig")?
        .call_method1("get_path", ("scripts",))?
        .extract()?;
    let here = std::path::Path::new(&scripts).join("vargr-commnode");
    if here.is_file() {
        return Ok(Some(here.display().to_string()));
    }
    let found = py
        .import("shutil")?
        .call_method1("which", ("vargr-commnode",))?;
    found.extract::<Option<String>>()
}

/// What runs at the leaves, from the Python arguments.
fn backend_spec(
    py: Python<'_>,
    backend: Option<&Bound<'_, PyAny>>,
    launcher: &str,
    attach_file: Option<std::path::PathBuf>,
) -> PyResult<(BackendSpec, Option<String>)> {
    let argv = |b: Option<&Bound<'_, PyAny>>| -> PyResult<Option<Vec<String>>> {
        match b {
            None => Ok(None),
            Some(b) => {
                if b.extract::<String>().is_ok() {
                    return Err(PyTypeError::new_err(
                        "backend must be a list of arguments (argv), not one string",
                    ));
                }
                let v: Vec<String> = b.extract().map_err(|_| {
                    PyTypeError::new_err("backend must be a list of str (the back-end's argv)")
                })?;
                if v.is_empty() {
                    return Err(PyValueError::new_err("backend argv is empty"));
                }
                Ok(Some(v))
            }
        }
    };
    match launcher {
        "threads" => {
            let f = backend
                .filter(|b| b.is_callable())
                .ok_or_else(|| {
                    PyTypeError::new_err(
                        "launcher='threads' runs backend(vargr.Backend) on a thread per back-end: \
                         backend must be a callable",
                    )
                })?
                .clone()
                .unbind();
            let spec = BackendSpec::threads(move |be: Backend| {
                Python::attach(|py| {
                    let r = Py::new(py, PyBackend { inner: be })
                        .and_then(|b| f.call1(py, (b,)).map(|_| ()));
                    if let Err(e) = r {
                        // A shutdown ends a back-end's loop; anything else is the
                        // user's to see.
                        let shutdown = errors::is(py, &e, Kind::Shutdown);
                        if !shutdown {
                            e.print(py);
                        }
                    }
                });
            });
            Ok((spec, None))
        }
        "attach" => Ok((
            BackendSpec::Attach(AttachSpec {
                launch: argv(backend)?,
                file: attach_file,
            }),
            None,
        )),
        "local" => {
            let v = argv(backend)?.ok_or_else(|| {
                PyTypeError::new_err("backend is required: the argv of the back-end program")
            })?;
            let _ = py;
            Ok((
                BackendSpec::Command {
                    program: v[0].clone(),
                    args: v[1..].to_vec(),
                },
                None,
            ))
        }
        template if template.contains("{cmd}") => {
            let v = argv(backend)?.ok_or_else(|| {
                PyTypeError::new_err("backend is required: the argv of the back-end program")
            })?;
            Ok((
                BackendSpec::Command {
                    program: v[0].clone(),
                    args: v[1..].to_vec(),
                },
                Some(template.to_string()),
            ))
        }
        other => Err(PyValueError::new_err(format!(
            "launcher {other:?}: expected 'local', 'threads', 'attach' or a remote-shell \
             template containing {{cmd}} (e.g. 'ssh -o BatchMode=yes {{host}} {{cmd}}')"
        ))),
    }
}

/// A running tree, seen from its front-end.
///
/// `Network(topology, backend=[argv...], launcher="local")` starts the tree: every
/// internal node runs the commnode program and every leaf runs `backend` (with
/// `VARGR_*` variables that `Backend.attach()` reads). Other launchers: `"threads"`
/// (`backend` is a callable run with a `vargr.Backend` on a thread per leaf, the whole
/// tree in this process), `"attach"` (back-ends started by another launcher join
/// through a rendezvous; `backend` is then that launcher's argv, `{n}` standing for
/// the number of back-ends, or None), or a remote-shell template such as
/// `"ssh -o BatchMode=yes {host} {cmd}"`.
///
/// Use it as a context manager, or call `shutdown()`.
#[pyclass(frozen, module = "vargr", name = "Network")]
pub struct PyNetwork {
    inner: Mutex<Option<Network>>,
    /// Receives from any stream without holding `inner` (which shutdown takes).
    any: AnyStream,
    /// Threads calling `on_event` callbacks; joined at shutdown.
    event_threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    topology: Topology,
    startup: Duration,
}

impl PyNetwork {
    fn with<R>(&self, f: impl FnOnce(&Network) -> PyResult<R>) -> PyResult<R> {
        let g = lock(&self.inner);
        match g.as_ref() {
            Some(n) => f(n),
            None => Err(errors::tbon(TbonError::Shutdown)),
        }
    }
}

#[pymethods]
impl PyNetwork {
    #[new]
    #[pyo3(signature = (
        topology,
        backend = None,
        *,
        launcher = "local",
        attach_file = None,
        transport = None,
        link_security = None,
        recovery = None,
        commnode = None,
        startup_timeout = 30.0,
        heartbeat = 0.5,
        heartbeat_timeout = 1.5,
        queue_limit = None,
        plugins = Vec::new(),
        trace_dir = None,
        monitor_status = None,
        monitor_period = 0.5,
        paths = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        topology: &Bound<'_, PyAny>,
        backend: Option<&Bound<'_, PyAny>>,
        launcher: &str,
        attach_file: Option<std::path::PathBuf>,
        transport: Option<String>,
        link_security: Option<String>,
        recovery: Option<String>,
        commnode: Option<String>,
        startup_timeout: f64,
        heartbeat: f64,
        heartbeat_timeout: f64,
        queue_limit: Option<usize>,
        plugins: Vec<String>,
        trace_dir: Option<std::path::PathBuf>,
        monitor_status: Option<std::path::PathBuf>,
        monitor_period: f64,
        paths: Option<PyRef<'_, crate::paths::PyPaths>>,
    ) -> PyResult<PyNetwork> {
        let topo = PyTopology::from_any(topology)?;
        if paths.as_ref().is_some_and(|p| p.built.topology != topo) {
            return Err(PyValueError::new_err(
                "paths= runs on its own topology: pass paths.topology as the topology",
            ));
        }
        let (spec, remote) = backend_spec(py, backend, launcher, attach_file)?;
        let mut opts = NetworkOptions {
            remote_template: remote,
            startup_timeout: seconds("startup_timeout", startup_timeout)?,
            heartbeat: seconds("heartbeat", heartbeat)?,
            heartbeat_timeout: seconds("heartbeat_timeout", heartbeat_timeout)?,
            monitor_period: seconds("monitor_period", monitor_period)?,
            plugins,
            trace_dir,
            monitor_status,
            ..NetworkOptions::default()
        };
        if let Some(t) = transport {
            opts.transport = t;
        }
        if let Some(s) = link_security {
            opts.link_security = s.parse().map_err(pyo3::exceptions::PyValueError::new_err)?;
        }
        if let Some(r) = recovery {
            opts.recovery = r.parse().map_err(pyo3::exceptions::PyValueError::new_err)?;
        }
        if let Some(q) = queue_limit {
            opts.queue_limit = q;
        }
        opts.commnode_program = commnode;
        if let Some(p) = &paths {
            opts = p.built.network_options(opts);
        }
        vargr_config::from_process()
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?
            .tree_defaults(&mut opts);
        if opts.commnode_program.is_none() {
            opts.commnode_program = default_commnode(py)?;
        }
        let t = topo.clone();
        let net = interruptible(py, move || Network::new(t, spec, opts))?.map_err(errors::tbon)?;
        let startup = net.startup_time();
        Ok(PyNetwork {
            any: net.any_stream(),
            event_threads: Mutex::new(Vec::new()),
            inner: Mutex::new(Some(net)),
            topology: topo,
            startup,
        })
    }

    /// Number of back-ends.
    #[getter]
    fn num_backends(&self) -> usize {
        self.topology.num_backends()
    }

    #[getter]
    fn topology(&self) -> PyTopology {
        PyTopology {
            inner: self.topology.clone(),
        }
    }

    /// Seconds from the start to every back-end reporting ready.
    #[getter]
    fn startup_time(&self) -> f64 {
        self.startup.as_secs_f64()
    }

    /// Every back-end.
    fn broadcast_communicator(&self) -> PyResult<PyCommunicator> {
        self.with(|n| {
            Ok(PyCommunicator {
                inner: n.broadcast_communicator(),
            })
        })
    }

    /// Some back-ends, by rank.
    fn communicator(&self, ranks: Vec<u32>) -> PyResult<PyCommunicator> {
        self.with(|n| {
            Ok(PyCommunicator {
                inner: n.communicator(&ranks).map_err(errors::tbon)?,
            })
        })
    }

    /// Opens a stream to `comm` (default: every back-end).
    ///
    /// `up` is the upstream filter: a built-in name (`sum`, `min`, `max`, `avg`,
    /// `concat`, `null`, `equivalence`, `histogram:lo,hi,bins`, `timealign:secs`, or a
    /// plugin's), run at every node of the tree, or a Python callable that gets each
    /// wave's packets (a list of `Packet`, in member order) at the front-end and returns
    /// the packets to deliver (a `Packet`, an iterable of them, or None). `sync` is the
    /// synchronization mode (`all`, `dont_wait`, `timeout:250ms`); `down` a downstream
    /// filter; `latest` keeps only the newest packet of each source for slow readers.
    /// `up_backend` and `up_frontend` give the back-ends and the front-end up filters of
    /// their own (MRNet's per-node filter assignment): the back-ends run theirs on each
    /// packet they send, the front-end its own last; `up` is then the commnodes'.
    /// `sync` may also name a user sync filter loaded from a plugin (`k_of_n:2`), for a
    /// stream whose `up` is a filter name. `per_node` gives some of the front-end's and
    /// commnodes' nodes filters of their own: dicts with `depth` (0 is the front-end) or
    /// `node` (a node id; wins over `depth`), and `up` and/or `sync`. No packet waits at a
    /// node longer than `wave_deadline` seconds whatever its sync filter decides (None:
    /// no deadline); the first overdue wave at a node is reported as that filter's error.
    #[pyo3(signature = (
        comm = None, up = None, *, sync = "all", down = None, latest = false,
        up_backend = None, up_frontend = None, per_node = None, wave_deadline = 60.0,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn open_stream(
        &self,
        py: Python<'_>,
        comm: Option<&Bound<'_, PyCommunicator>>,
        up: Option<&Bound<'_, PyAny>>,
        sync: &str,
        down: Option<String>,
        latest: bool,
        up_backend: Option<String>,
        up_frontend: Option<String>,
        per_node: Option<Vec<Bound<'_, PyDict>>>,
        wave_deadline: Option<f64>,
    ) -> PyResult<PyStream> {
        let filter = up.filter(|u| u.is_callable()).map(|u| u.clone().unbind());
        // A Python filter's waves are made here, by a built-in mode; a tree's by any
        // sync filter its nodes know.
        let mode = match (parse_sync(sync), &filter) {
            (Ok(m), _) => Some(m),
            (Err(e), Some(_)) => return Err(e),
            (Err(_), None) => None,
        };
        let rules = per_node
            .unwrap_or_default()
            .iter()
            .map(node_rule)
            .collect::<PyResult<Vec<_>>>()?;
        let deadline = wave_deadline
            .map(|s| {
                Duration::try_from_secs_f64(s).map_err(|_| {
                    PyValueError::new_err(format!(
                        "wave_deadline must be a non-negative number of seconds, not {s}"
                    ))
                })
            })
            .transpose()?;
        let up_name = match (up, &filter) {
            (_, Some(_)) => "null".to_string(),
            (None, None) => "null".to_string(),
            (Some(u), None) => u.extract::<String>().map_err(|_| {
                PyTypeError::new_err("up must be a filter name (str) or a callable")
            })?,
        };
        let tree_sync = match (&filter, mode) {
            (Some(_), _) => SyncMode::DontWait.to_string(),
            (None, Some(m)) => m.to_string(),
            (None, None) => sync.to_string(),
        };
        let mut opts = StreamOptions::new(&up_name)
            .sync(tree_sync)
            .per_role(up_backend.as_deref(), up_frontend.as_deref())
            .wave_deadline(deadline);
        opts.per_node = rules;
        opts.down = down;
        if latest {
            opts = opts.latest();
        }
        self.with(|n| {
            let comm = match comm {
                Some(c) => c.get().inner.clone(),
                None => n.broadcast_communicator(),
            };
            let stream = py
                .detach(|| n.open_stream(&comm, opts))
                .map_err(errors::tbon)?;
            let filter = filter.map(|func| PyFilter {
                func,
                slot_of: comm
                    .ranks()
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (*r, i))
                    .collect(),
                state: Mutex::new(FilterState {
                    sync: SyncFilter::new(mode.unwrap_or(SyncMode::WaitForAll), comm.ranks().len()),
                    waves: VecDeque::new(),
                    ready: VecDeque::new(),
                }),
            });
            Ok(PyStream {
                inner: Arc::new(stream),
                filter,
            })
        })
    }

    /// Process ids of the front-end's child processes.
    fn child_pids(&self) -> PyResult<Vec<u32>> {
        self.with(|n| Ok(n.child_pids()))
    }

    /// Changes of the tree seen so far, oldest first, as dicts with a `kind`:
    /// `node_lost` (node, host, backends), `reparented` (node, lost_parent, new_parent,
    /// backends) or `waves_lost` (stream, first, end, backends, lost).
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let events = self.with(|n| Ok(n.events()))?;
        events.iter().map(|e| event_dict(py, e)).collect()
    }

    /// Calls `callback(event)` for each change of the tree from now on (MRNet's
    /// `register_EventCallback`), with a dict as `events()` gives, on a thread of its
    /// own (so the callback may use the network); it stops at shutdown, which waits for
    /// it. An exception in the callback is printed and the thread goes on.
    fn on_event(&self, callback: Py<PyAny>) -> PyResult<()> {
        let mut events = self.with(|n| Ok(n.tree_events()))?;
        let t = std::thread::Builder::new()
            .name("vargr-py-events".into())
            .spawn(move || {
                while let Ok(got) = events.next_timeout(Duration::from_millis(500)) {
                    let Some(e) = got else { continue };
                    Python::attach(|py| {
                        let r = event_dict(py, &e).and_then(|d| callback.call1(py, (d,)));
                        if let Err(err) = r {
                            err.print(py);
                        }
                    });
                }
            })
            .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?;
        lock(&self.event_threads).push(t);
        Ok(())
    }

    /// The next result on any stream (MRNet's `Network::recv`), as `(stream_id,
    /// packet)`. Waits at most `timeout` seconds (None: until one arrives), raising
    /// `vargr.VargrTimeoutError`; a stream's error is raised as for `Stream.recv`. Streams
    /// with results waiting are served in turn.
    #[pyo3(signature = (timeout = None))]
    fn recv_any(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<(u32, PyPacket)> {
        self.with(|_| Ok(()))?;
        let any = self.any.clone();
        let got = block::wait(py, timeout, move |slice| match any.recv(Some(slice)) {
            Ok(None) => None,
            r => Some(r),
        })?;
        match got {
            Some(Ok(Some((id, Ok(p))))) => Ok((id, PyPacket::from_rust(py, p)?)),
            Some(Ok(Some((_, Err(e))))) | Some(Err(e)) => Err(errors::tbon(e)),
            Some(Ok(None)) | None => Err(errors::new_err(
                Kind::Timeout,
                "no result on any stream within the timeout".to_string(),
            )),
        }
    }

    /// A file descriptor readable while `recv_any` would return at once (MRNet's
    /// `get_DataNotificationFd`), for `select`, `selectors` or an event loop. It stays
    /// readable until the results are received and becomes readable at shutdown. It
    /// belongs to the network: do not read or close it. `fileno()` is the same, so a
    /// network can be passed to `select.select` itself.
    fn notification_fd(&self) -> PyResult<i32> {
        self.with(|n| n.notification_fd(None).map_err(errors::tbon))
    }

    fn fileno(&self) -> PyResult<i32> {
        self.notification_fd()
    }

    /// Another handle on the open stream `id` (MRNet's `get_Stream`), e.g. the stream a
    /// `recv_any` result came from. It has no Python filter.
    fn stream(&self, id: u32) -> PyResult<PyStream> {
        self.with(|n| {
            Ok(PyStream {
                inner: Arc::new(n.stream(id).map_err(errors::tbon)?),
                filter: None,
            })
        })
    }

    /// Publishes `value` (bytes) as version `version` of observed element `element`
    /// (PATHS' last-observe): back-ends waiting in `Backend.observe_newer` get it
    /// through the caches of the nodes above them. Versions only grow: an older or
    /// equal one raises `vargr.NetworkError`.
    fn publish(&self, element: u32, version: u64, value: &[u8]) -> PyResult<()> {
        self.with(|n| n.publish(element, version, value).map_err(errors::tbon))
    }

    /// Waits for a value of observed element `element` newer than version `have`
    /// (None: any) at the front-end, one a back-end published (or this front-end's
    /// own), and returns `(version, value)`. Raises `vargr.VargrTimeoutError` after
    /// `timeout` seconds (None: wait for ever); Ctrl-C interrupts the wait.
    #[pyo3(signature = (element, have = None, timeout = None))]
    fn observe_newer<'py>(
        &self,
        py: Python<'py>,
        element: u32,
        have: Option<u64>,
        timeout: Option<f64>,
    ) -> PyResult<(u64, Bound<'py, pyo3::types::PyBytes>)> {
        // The network is held for one slice at a time, so that other threads' calls
        // (and shutdown) go on between them.
        let got = block::wait(py, timeout, |slice| {
            match self.with(|n| Ok(n.observe_newer(element, have, slice))) {
                Ok(Err(TbonError::ObserveTimeout { .. })) => None,
                Ok(r) => Some(r.map_err(errors::tbon)),
                Err(e) => Some(Err(e)),
            }
        })?;
        match got {
            Some(r) => r.map(|(version, value)| (version, pyo3::types::PyBytes::new(py, &value))),
            None => Err(errors::tbon(TbonError::ObserveTimeout { element, have })),
        }
    }

    /// Faults seen so far (lost nodes, failed filters), oldest first, as messages.
    fn faults(&self) -> PyResult<Vec<String>> {
        self.with(|n| Ok(n.faults().iter().map(|e| e.to_string()).collect()))
    }

    /// One pull through the tree's monitor plane, as `vargr top` shows it: per node
    /// frame and byte rates, filter time, records lost and clock error; per stream
    /// packet and wave rates and the path to the back-end that completes waves last.
    #[pyo3(signature = (budget = 1.0))]
    fn status<'py>(&self, py: Python<'py>, budget: f64) -> PyResult<Bound<'py, PyAny>> {
        let budget = seconds("budget", budget)?;
        let status = self.with(|n| {
            let scope = vargr_tbon::monitor::NetworkStatus::scope();
            let t0 = Instant::now();
            let pulled = py.detach(|| n.pull(&scope, budget));
            let clocks = n.clock_alignment();
            Ok(vargr_tbon::monitor::NetworkStatus::of(
                &pulled,
                t0.elapsed().as_secs_f64(),
                &clocks,
            ))
        })?;
        let v = serde_json::to_value(&status).map_err(|e| PyValueError::new_err(e.to_string()))?;
        json_to_py(py, &v)
    }

    /// Pulls every node's event collectors matching `collectors` (glob patterns,
    /// default all), reduced at the source by `reduce` (`counts`, `stats` or
    /// `last-arrival`). Returns {node id: reply dict, or None if it did not answer
    /// within `budget` seconds}.
    #[pyo3(signature = (collectors = None, reduce = "counts", budget = 1.0, by_seq = false))]
    fn pull<'py>(
        &self,
        py: Python<'py>,
        collectors: Option<Vec<String>>,
        reduce: &str,
        budget: f64,
        by_seq: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        use vargr_trace::scope::{Reduce, Reply, Scope};
        let reduce = match reduce.replace('_', "-").as_str() {
            "counts" => Reduce::Counts,
            "stats" => Reduce::Stats,
            "last-arrival" => Reduce::LastArrival,
            other => {
                return Err(PyValueError::new_err(format!(
                    "reduce {other:?}: expected counts, stats or last-arrival \
                     (whole records: use trace_dir)"
                )))
            }
        };
        let scope = Scope {
            collectors: collectors.unwrap_or_default(),
            reduce,
            by_seq,
            sample: 0,
        };
        let budget = seconds("budget", budget)?;
        let pulled = self.with(|n| Ok(py.detach(|| n.pull(&scope, budget))))?;
        let out = PyDict::new(py);
        for (node, answer) in &pulled.answers {
            let v = match answer {
                vargr_tbon::monitor::Answer::Missing => None,
                vargr_tbon::monitor::Answer::Reply(r) => match r {
                    Reply::Counts(x) => serde_json::to_value(x).ok(),
                    Reply::Stats(x) => serde_json::to_value(x).ok(),
                    Reply::Calls(x) => serde_json::to_value(x).ok(),
                    Reply::Records(_) => None,
                },
            };
            match v {
                Some(v) => out.set_item(node, json_to_py(py, &v)?)?,
                None => out.set_item(node, py.None())?,
            }
        }
        Ok(out)
    }

    /// Clock alignment of every node that reported: {node: {"offset_ns", "error_ns",
    /// "hops", "aligned"}}, `local = front-end + offset`. With `wait` (seconds), first
    /// waits until every node has reported.
    #[pyo3(signature = (wait = None))]
    fn clock_alignment<'py>(
        &self,
        py: Python<'py>,
        wait: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let wait = wait.map(|w| seconds("wait", w)).transpose()?;
        let map = self.with(|n| {
            Ok(match wait {
                Some(w) => py.detach(|| n.wait_clock_alignment(w)),
                None => n.clock_alignment(),
            })
        })?;
        let out = PyDict::new(py);
        for (node, a) in map {
            let v = serde_json::to_value(a).map_err(|e| PyValueError::new_err(e.to_string()))?;
            out.set_item(node, json_to_py(py, &v)?)?;
        }
        Ok(out)
    }

    /// Shuts the tree down: every node stops and exits; stragglers are killed after a
    /// grace period. Calling it again does nothing.
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        let net = lock(&self.inner).take();
        let r = match net {
            Some(n) => py.detach(|| n.shutdown()).map_err(errors::tbon),
            None => Ok(()),
        };
        // No callback runs once this returns (unless called from one).
        let threads = std::mem::take(&mut *lock(&self.event_threads));
        py.detach(|| join_others(threads));
        r
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.shutdown(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if lock(&self.inner).is_some() {
            "running"
        } else {
            "shut down"
        };
        format!(
            "Network({} nodes, {} back-ends, {state})",
            self.topology.len(),
            self.topology.num_backends()
        )
    }
}

impl Drop for PyNetwork {
    fn drop(&mut self) {
        let net = self
            .inner
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let threads = std::mem::take(
            &mut *self
                .event_threads
                .get_mut()
                .unwrap_or_else(|p| p.into_inner()),
        );
        if net.is_some() || !threads.is_empty() {
            // Without the GIL: back-ends running as threads of this process, and event
            // callbacks, need it to see the shutdown and end.
            Python::attach(|py| {
                py.detach(move || {
                    if let Some(n) = net {
                        let _ = n.shutdown();
                    }
                    join_others(threads);
                })
            });
        }
    }
}

/// Joins the threads, except the calling one (a callback that shut the network down).
fn join_others(threads: Vec<std::thread::JoinHandle<()>>) {
    let me = std::thread::current().id();
    for t in threads {
        if t.thread().id() != me {
            let _ = t.join();
        }
    }
}

/// A Python filter and the front-end's wave assembly for it.
struct PyFilter {
    func: Py<PyAny>,
    /// Back-end rank → position in the communicator (the sync filter's slot).
    slot_of: HashMap<u32, usize>,
    state: Mutex<FilterState>,
}

struct FilterState {
    sync: SyncFilter,
    /// Waves released by the sync filter, not yet given to the callable.
    waves: VecDeque<Vec<Packet>>,
    /// The callable's output, not yet delivered.
    ready: VecDeque<Py<PyPacket>>,
}

/// A tree event as a dict with a `kind`: `node_lost` (node, host, backends),
/// `reparented` (node, lost_parent, new_parent, backends) or `waves_lost` (stream,
/// first, end, backends, lost).
fn event_dict<'py>(py: Python<'py>, e: &TreeEvent) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match e {
        TreeEvent::NodeLost {
            node,
            host,
            backends,
        } => {
            d.set_item("kind", "node_lost")?;
            d.set_item("node", node)?;
            d.set_item("host", host)?;
            d.set_item("backends", backends.clone())?;
        }
        TreeEvent::Reparented {
            node,
            lost_parent,
            new_parent,
            backends,
        } => {
            d.set_item("kind", "reparented")?;
            d.set_item("node", node)?;
            d.set_item("lost_parent", lost_parent)?;
            d.set_item("new_parent", new_parent)?;
            d.set_item("backends", backends.clone())?;
        }
        TreeEvent::WavesLost {
            stream,
            first,
            end,
            backends,
            lost,
        } => {
            d.set_item("kind", "waves_lost")?;
            d.set_item("stream", stream)?;
            d.set_item("first", first)?;
            d.set_item("end", end)?;
            d.set_item("backends", backends.clone())?;
            d.set_item("lost", lost)?;
        }
    }
    Ok(d)
}

fn filter_role(role: &str) -> PyResult<FilterRole> {
    match role {
        "up" => Ok(FilterRole::Up),
        "sync" => Ok(FilterRole::Sync),
        "down" => Ok(FilterRole::Down),
        r => Err(PyValueError::new_err(format!(
            "filter role {r:?}: expected 'up', 'sync' or 'down'"
        ))),
    }
}

/// A logical channel between the front-end and a communicator's back-ends.
#[pyclass(frozen, module = "vargr", name = "Stream")]
pub struct PyStream {
    inner: Arc<Stream>,
    filter: Option<PyFilter>,
}

impl PyStream {
    /// Waits for the next packet from the tree.
    fn recv_raw(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Packet> {
        let s = self.inner.clone();
        let got = block::wait(py, timeout, move |slice| match s.recv_timeout(slice) {
            Ok(None) => None,
            r => Some(r),
        })?;
        match got {
            Some(Ok(Some(p))) => Ok(p),
            Some(Err(e)) => Err(errors::tbon(e)),
            Some(Ok(None)) | None => Err(errors::new_err(
                Kind::Timeout,
                format!("no packet on stream {} within the timeout", self.inner.id()),
            )),
        }
    }

    /// Runs the callable on one queued wave; false if none was queued.
    fn run_one_wave(&self, py: Python<'_>, f: &PyFilter) -> PyResult<bool> {
        let Some(wave) = lock(&f.state).waves.pop_front() else {
            return Ok(false);
        };
        let packets: Vec<Py<PyPacket>> = wave
            .into_iter()
            .map(|p| Py::new(py, PyPacket::from_rust(py, p)?))
            .collect::<PyResult<_>>()?;
        let out = f.func.call1(py, (PyList::new(py, packets)?,))?;
        let out = out.bind(py);
        let mut results: Vec<Py<PyPacket>> = Vec::new();
        if out.is_none() {
        } else if let Ok(p) = out.cast::<PyPacket>() {
            results.push(p.clone().unbind());
        } else {
            for item in out.try_iter().map_err(|_| {
                PyTypeError::new_err(
                    "a stream filter must return a Packet, an iterable of Packets, or None",
                )
            })? {
                let item = item?;
                let p = item.cast::<PyPacket>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "a stream filter returned {}, not a vargr.Packet",
                        item.get_type()
                            .name()
                            .map(|n| n.to_string())
                            .unwrap_or_default()
                    ))
                })?;
                results.push(p.clone().unbind());
            }
        }
        let id = self.inner.id();
        let mut fixed = Vec::with_capacity(results.len());
        for p in results {
            // Results travel on this stream, whatever the filter put in the packet.
            let pp = p.get();
            if pp.stream == id {
                fixed.push(p);
            } else {
                fixed.push(Py::new(
                    py,
                    PyPacket {
                        stream: id,
                        tag: pp.tag,
                        source: pp.source,
                        format: pp.format.clone(),
                        values: pp.values(py).clone().unbind(),
                    },
                )?);
            }
        }
        lock(&f.state).ready.extend(fixed);
        Ok(true)
    }

    fn recv_filtered(
        &self,
        py: Python<'_>,
        f: &PyFilter,
        timeout: Option<f64>,
    ) -> PyResult<Py<PyPacket>> {
        let deadline = match timeout {
            Some(t) => Some(Instant::now() + seconds("timeout", t)?),
            None => None,
        };
        loop {
            if let Some(p) = lock(&f.state).ready.pop_front() {
                return Ok(p);
            }
            if self.run_one_wave(py, f)? {
                continue;
            }
            let now = Instant::now();
            let due = lock(&f.state).sync.poll_timeout();
            if due.is_some_and(|t| t <= now) {
                let mut st = lock(&f.state);
                let waves = st.sync.on_timeout(now);
                st.waves.extend(waves);
                continue;
            }
            let mut slice = block::SLICE;
            if let Some(t) = due {
                slice = slice.min(t - now);
            }
            if let Some(d) = deadline {
                if now >= d {
                    return Err(errors::new_err(
                        Kind::Timeout,
                        format!("no packet on stream {} within the timeout", self.inner.id()),
                    ));
                }
                slice = slice.min(d - now);
            }
            let s = self.inner.clone();
            let got = py.detach(move || s.recv_timeout(slice));
            py.check_signals()?;
            match got {
                Ok(None) => {}
                Ok(Some(p)) => {
                    let mut st = lock(&f.state);
                    let waves = match f.slot_of.get(&p.source) {
                        Some(&slot) => st.sync.push(slot, p, Instant::now()),
                        None => vec![vec![p]],
                    };
                    st.waves.extend(waves);
                }
                Err(e) => {
                    // Stop waiting for back-ends that are gone, then say so.
                    if let TbonError::NodeLost { backends, .. } = &e {
                        let mut st = lock(&f.state);
                        for b in backends {
                            if let Some(&slot) = f.slot_of.get(b) {
                                let waves = st.sync.remove_child(slot, Instant::now());
                                st.waves.extend(waves);
                            }
                        }
                    }
                    return Err(errors::tbon(e));
                }
            }
        }
    }
}

#[pymethods]
impl PyStream {
    /// The stream id.
    #[getter]
    fn id(&self) -> u32 {
        self.inner.id()
    }

    /// Number of back-ends the stream talks to.
    #[getter]
    fn num_members(&self) -> usize {
        self.inner.num_members()
    }

    /// Multicasts `values` (described by the MRNet format `fmt`, e.g. `"%d %alf"`) to
    /// every back-end of the stream, with `tag`.
    #[pyo3(signature = (tag, fmt, *values))]
    fn send(
        &self,
        py: Python<'_>,
        tag: i32,
        fmt: &str,
        values: &Bound<'_, PyTuple>,
    ) -> PyResult<()> {
        let p = packet::build(self.inner.id(), tag, fmt, values)?;
        let s = self.inner.clone();
        py.detach(move || s.send_packet(p)).map_err(errors::tbon)
    }

    /// Multicasts a packet (its stream is replaced by this one).
    fn send_packet(&self, py: Python<'_>, packet: &Bound<'_, PyPacket>) -> PyResult<()> {
        let p = packet.get().to_rust(py)?;
        let s = self.inner.clone();
        py.detach(move || s.send_packet(p)).map_err(errors::tbon)
    }

    /// The next result on this stream: a wave reduced by the stream's filters. Waits at
    /// most `timeout` seconds (None: until one arrives), raising `vargr.VargrTimeoutError`;
    /// raises `NodeLostError` or `FilterError` when the tree reports one for this
    /// stream (later results still come). Ctrl-C interrupts the wait.
    #[pyo3(signature = (timeout = None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Py<PyPacket>> {
        match &self.filter {
            Some(f) => self.recv_filtered(py, f, timeout),
            None => {
                let p = self.recv_raw(py, timeout)?;
                Py::new(py, PyPacket::from_rust(py, p)?)
            }
        }
    }

    /// Replaces one of the stream's filters at every node (MRNet's
    /// `set_FilterParameters`): `role` is `"up"`, `"sync"` or `"down"`; `spec` a filter
    /// spec (`"max"`, `"histogram:0,100,10"`), a sync mode (`"timeout:250ms"`), or `""`
    /// to remove the down filter. It applies from the next multicast on; a bad spec
    /// raises and changes nothing. Not for streams with a Python filter.
    fn set_filter(&self, py: Python<'_>, role: &str, spec: &str) -> PyResult<()> {
        if self.filter.is_some() {
            return Err(PyValueError::new_err(
                "this stream's up filter is a Python callable at the front-end",
            ));
        }
        let role = filter_role(role)?;
        let s = self.inner.clone();
        let spec = spec.to_string();
        py.detach(move || s.set_filter(role, &spec))
            .map_err(errors::tbon)
    }

    /// The stream's current filter spec of `role` (`""`: no down filter).
    fn filter(&self, role: &str) -> PyResult<String> {
        self.inner.filter(filter_role(role)?).map_err(errors::tbon)
    }

    /// A file descriptor readable while `recv` would return at once (MRNet's
    /// `Stream::get_DataNotificationFd`); see `Network.notification_fd`. `fileno()` is
    /// the same, so a stream can be passed to `select.select`. Not for streams with a
    /// Python filter (their waves are made in `recv`).
    fn fileno(&self) -> PyResult<i32> {
        if self.filter.is_some() {
            return Err(PyValueError::new_err(
                "a stream with a Python filter has no notification descriptor",
            ));
        }
        self.inner.notification_fd().map_err(errors::tbon)
    }

    fn __repr__(&self) -> String {
        format!(
            "Stream(id={}, members={}{})",
            self.inner.id(),
            self.inner.num_members(),
            if self.filter.is_some() {
                ", python filter"
            } else {
                ""
            }
        )
    }
}

/// A back-end's handle on the tree that started it.
///
/// `Backend.attach()` joins from the environment the network set (or, in attach mode,
/// `VARGR_RENDEZVOUS` and the rank from `mpirun`/`srun`). Iterating over a back-end
/// yields the packets the front-end sends until it shuts the network down.
#[pyclass(frozen, module = "vargr", name = "Backend")]
pub struct PyBackend {
    inner: Backend,
}

#[pymethods]
impl PyBackend {
    /// Joins the network that started this process.
    #[staticmethod]
    fn attach(py: Python<'_>) -> PyResult<PyBackend> {
        // Joined on another thread: this one (the main thread, which carries the
        // parent-death signal) is untied before the join, or the death of the parent
        // commnode just after it would kill the process before it could be adopted.
        let tie = Backend::loosen_for_join();
        let be = interruptible(py, Backend::from_env)?.map_err(errors::tbon)?;
        tie.settle(&be).map_err(errors::tbon)?;
        Ok(PyBackend { inner: be })
    }

    /// This back-end's rank, 0..num_backends.
    #[getter]
    fn rank(&self) -> u32 {
        self.inner.rank()
    }

    #[getter]
    fn num_backends(&self) -> u32 {
        self.inner.num_backends()
    }

    /// The topology node id of this back-end.
    #[getter]
    fn node_id(&self) -> u32 {
        self.inner.node_id()
    }

    /// The next packet from the front-end (any stream) or from another back-end.
    /// Raises `ShutdownError` once the network is shut down, `vargr.VargrTimeoutError` after
    /// `timeout` seconds. Ctrl-C interrupts the wait.
    #[pyo3(signature = (timeout = None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<PyPacket> {
        let be = self.inner.clone();
        let got = block::wait(py, timeout, move |slice| match be.recv_timeout(slice) {
            Ok(None) => None,
            r => Some(r),
        })?;
        match got {
            Some(Ok(Some(p))) => PyPacket::from_rust(py, p),
            Some(Err(e)) => Err(errors::tbon(e)),
            Some(Ok(None)) | None => Err(errors::new_err(
                Kind::Timeout,
                format!(
                    "back-end {}: no packet within the timeout",
                    self.inner.rank()
                ),
            )),
        }
    }

    /// The next packet multicast on `stream` (an id), leaving other streams' packets
    /// and back-end messages for `recv` or other threads (MRNet's back-end
    /// `Stream::recv`): a thread per stream works. Raises as `recv` does.
    #[pyo3(signature = (stream, timeout = None))]
    fn recv_stream(&self, py: Python<'_>, stream: u32, timeout: Option<f64>) -> PyResult<PyPacket> {
        let be = self.inner.clone();
        let got = block::wait(py, timeout, move |slice| {
            match be.recv_stream(stream, Some(slice)) {
                Ok(None) => None,
                r => Some(r),
            }
        })?;
        match got {
            Some(Ok(Some(p))) => PyPacket::from_rust(py, p),
            Some(Err(e)) => Err(errors::tbon(e)),
            Some(Ok(None)) | None => Err(errors::new_err(
                Kind::Timeout,
                format!(
                    "back-end {}: no packet on stream {stream} within the timeout",
                    self.inner.rank()
                ),
            )),
        }
    }

    /// A file descriptor readable while `recv` (`stream` None) or `recv_stream(stream)`
    /// would return at once (MRNet's `get_DataNotificationFd`). It belongs to the
    /// back-end: do not read or close it. `fileno()` is the one for `recv`.
    #[pyo3(signature = (stream = None))]
    fn notification_fd(&self, stream: Option<u32>) -> PyResult<i32> {
        self.inner.notification_fd(stream).map_err(errors::tbon)
    }

    fn fileno(&self) -> PyResult<i32> {
        self.notification_fd(None)
    }

    /// Sends values up `stream` (an id, or a received packet whose stream to answer
    /// on) towards the front-end, through the stream's filters.
    #[pyo3(signature = (stream, tag, fmt, *values))]
    fn send(
        &self,
        py: Python<'_>,
        stream: &Bound<'_, PyAny>,
        tag: i32,
        fmt: &str,
        values: &Bound<'_, PyTuple>,
    ) -> PyResult<()> {
        let id = match stream.cast::<PyPacket>() {
            Ok(p) => p.get().stream,
            Err(_) => stream.extract::<u32>().map_err(|_| {
                PyTypeError::new_err("stream must be a stream id (int) or a vargr.Packet")
            })?,
        };
        let mut p = packet::build(id, tag, fmt, values)?;
        p.source = self.inner.rank();
        let be = self.inner.clone();
        py.detach(move || be.send_packet(&p)).map_err(errors::tbon)
    }

    /// Sends a packet up its stream.
    fn send_packet(&self, py: Python<'_>, packet: &Bound<'_, PyPacket>) -> PyResult<()> {
        let mut p = packet.get().to_rust(py)?;
        p.source = self.inner.rank();
        let be = self.inner.clone();
        py.detach(move || be.send_packet(&p)).map_err(errors::tbon)
    }

    /// Sends values to back-end `rank`, routed through the tree.
    #[pyo3(signature = (rank, tag, fmt, *values))]
    fn send_to(
        &self,
        py: Python<'_>,
        rank: u32,
        tag: i32,
        fmt: &str,
        values: &Bound<'_, PyTuple>,
    ) -> PyResult<()> {
        let format = packet::parse_format(fmt)?;
        let values = packet::to_values(&format, values)?;
        let be = self.inner.clone();
        let fmt = fmt.to_string();
        py.detach(move || be.send_to(rank, tag, &fmt, values))
            .map_err(errors::tbon)
    }

    /// Publishes `value` (bytes) as version `version` of observed element `element`;
    /// it travels up to the front-end, which keeps it if it is the newest.
    fn publish(&self, py: Python<'_>, element: u32, version: u64, value: Vec<u8>) -> PyResult<()> {
        let be = self.inner.clone();
        py.detach(move || be.publish(element, version, &value))
            .map_err(errors::tbon)
    }

    /// Waits for a value of observed element `element` newer than version `have`
    /// (None: any) and returns `(version, value)`: the newest the tree holds, from the
    /// nearest cache that has one (PATHS' last-observe). Raises `vargr.VargrTimeoutError`
    /// after `timeout` seconds (None: wait for ever); Ctrl-C interrupts the wait.
    #[pyo3(signature = (element, have = None, timeout = None))]
    fn observe_newer<'py>(
        &self,
        py: Python<'py>,
        element: u32,
        have: Option<u64>,
        timeout: Option<f64>,
    ) -> PyResult<(u64, Bound<'py, pyo3::types::PyBytes>)> {
        let be = self.inner.clone();
        // Each slice asks again; a value that came after a slice gave up waits in this
        // back-end's cache, so the next slice's request is answered at once.
        let got = block::wait(py, timeout, move |slice| {
            match be.observe_newer(element, have, slice) {
                Err(TbonError::ObserveTimeout { .. }) => None,
                r => Some(r),
            }
        })?;
        match got {
            Some(Ok((version, value))) => Ok((version, pyo3::types::PyBytes::new(py, &value))),
            Some(Err(e)) => Err(errors::tbon(e)),
            None => Err(errors::tbon(TbonError::ObserveTimeout { element, have })),
        }
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyPacket>> {
        let be = self.inner.clone();
        let got = block::wait(py, None, move |slice| match be.recv_timeout(slice) {
            Ok(None) => None,
            r => Some(r),
        })?;
        match got {
            Some(Ok(Some(p))) => Ok(Some(PyPacket::from_rust(py, p)?)),
            Some(Err(TbonError::Shutdown)) => Ok(None),
            Some(Err(e)) => Err(errors::tbon(e)),
            Some(Ok(None)) | None => Ok(None),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Backend(rank={} of {}, node {})",
            self.inner.rank(),
            self.inner.num_backends(),
            self.inner.node_id()
        )
    }
}

/// Runs this process as an internal node of a tree (what `vargr-commnode commnode`
/// does): joins its parent from the environment, starts its sub-tree, and forwards and
/// filters until the tree shuts down.
#[pyfunction]
pub fn run_commnode(py: Python<'_>) -> PyResult<()> {
    py.detach(|| {
        let boot = vargr_tbon::Bootstrap::from_env()?;
        vargr_tbon::commnode::run(
            boot,
            vargr_tbon::spawn::Spawner::Processes(vargr_net::launch::Launcher::Local),
        )
    })
    .map_err(errors::tbon)
}
