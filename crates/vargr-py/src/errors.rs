//! Rust errors as Python exceptions: one hierarchy under `vargr.VargrError`, carrying the
//! Rust error's message unchanged.
//!
//! The classes are made at import time with Python's own `type()`, not pyo3's
//! `create_exception!`, because some need two bases: `vargr.VargrTimeoutError` is also
//! a builtin `TimeoutError` and the input errors are also `ValueError`s, so code that
//! catches the builtin classes keeps working. No class is named like a builtin (the
//! timeout class was `TimeoutError`, which `from vargr import *` made shadow the
//! builtin); python/vargr/__init__.py keeps `vargr.TimeoutError` as an alias.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// Every exception class of the package, in creation order (bases first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Vargr,
    Topology,
    Format,
    Network,
    Startup,
    NodeLost,
    Filter,
    Shutdown,
    Timeout,
    Collective,
    Job,
    PeerLost,
    Codec,
    Dedup,
    File,
    FileView,
}

impl Kind {
    const ALL: [Kind; 16] = [
        Kind::Vargr,
        Kind::Topology,
        Kind::Format,
        Kind::Network,
        Kind::Startup,
        Kind::NodeLost,
        Kind::Filter,
        Kind::Shutdown,
        Kind::Timeout,
        Kind::Collective,
        Kind::Job,
        Kind::PeerLost,
        Kind::Codec,
        Kind::Dedup,
        Kind::File,
        Kind::FileView,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Vargr => "VargrError",
            Kind::Topology => "TopologyError",
            Kind::Format => "FormatError",
            Kind::Network => "NetworkError",
            Kind::Startup => "StartupError",
            Kind::NodeLost => "NodeLostError",
            Kind::Filter => "FilterError",
            Kind::Shutdown => "ShutdownError",
            Kind::Timeout => "VargrTimeoutError",
            Kind::Collective => "CollectiveError",
            Kind::Job => "JobError",
            Kind::PeerLost => "PeerLostError",
            Kind::Codec => "CodecError",
            Kind::Dedup => "DedupError",
            Kind::File => "FileError",
            Kind::FileView => "FileViewError",
        }
    }

    /// (vargr base, builtin base, docstring).
    fn spec(self) -> (Option<Kind>, Option<&'static str>, &'static str) {
        match self {
            Kind::Vargr => (None, None, "Base class of every error vargr raises."),
            Kind::Topology => (
                Some(Kind::Vargr),
                Some("ValueError"),
                "A topology that does not parse or validate (names file, line and column).",
            ),
            Kind::Format => (
                Some(Kind::Vargr),
                Some("ValueError"),
                "A format string that does not parse, or values that do not match it.",
            ),
            Kind::Network => (
                Some(Kind::Vargr),
                None,
                "An error of a tree (front-end or back-end).",
            ),
            Kind::Startup => (
                Some(Kind::Network),
                None,
                "The tree could not be started or joined.",
            ),
            Kind::NodeLost => (
                Some(Kind::Network),
                None,
                "A node of the tree was lost; `node`, `host` and `backends` say which.",
            ),
            Kind::Filter => (
                Some(Kind::Network),
                None,
                "A filter failed at some node of the tree.",
            ),
            Kind::Shutdown => (Some(Kind::Network), None, "The network was shut down."),
            Kind::Timeout => (
                Some(Kind::Vargr),
                Some("TimeoutError"),
                "A blocking call gave up after its timeout.",
            ),
            Kind::Collective => (
                Some(Kind::Vargr),
                None,
                "An error of a rank collective or point-to-point call.",
            ),
            Kind::Job => (
                Some(Kind::Collective),
                None,
                "Joining the parallel job failed.",
            ),
            Kind::PeerLost => (
                Some(Kind::Collective),
                None,
                "Another rank of the job was lost.",
            ),
            Kind::Codec => (
                Some(Kind::Vargr),
                Some("ValueError"),
                "A codec name, parameter or compressed frame that is not valid.",
            ),
            Kind::Dedup => (
                Some(Kind::Vargr),
                None,
                "A segmenter or dedup protocol error.",
            ),
            Kind::File => (
                Some(Kind::Vargr),
                None,
                "A collective file operation failed; `rank` names the rank whose part failed.",
            ),
            Kind::FileView => (
                Some(Kind::File),
                Some("ValueError"),
                "A file view that cannot be made, data of the wrong length for a view, or views of two ranks that overlap in a collective write.",
            ),
        }
    }
}

static TYPES: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

/// Creates the classes and adds them to `m` (called once, from the module's init).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let builtins = py.import("builtins")?;
    let type_fn = builtins.getattr("type")?;
    let mut made: Vec<Py<PyType>> = Vec::with_capacity(Kind::ALL.len());
    for kind in Kind::ALL {
        let (parent, builtin, doc) = kind.spec();
        let mut bases: Vec<Bound<'_, PyAny>> = Vec::new();
        match parent {
            Some(p) => bases.push(made[p as usize].bind(py).clone().into_any()),
            None => bases.push(py.get_type::<PyException>().into_any()),
        }
        if let Some(b) = builtin {
            bases.push(builtins.getattr(b)?);
        }
        let ns = PyDict::new(py);
        ns.set_item("__module__", "vargr")?;
        ns.set_item("__doc__", doc)?;
        let t = type_fn.call1((kind.name(), PyTuple::new(py, bases)?, ns))?;
        let t = t.cast_into::<PyType>()?;
        m.add(kind.name(), &t)?;
        made.push(t.unbind());
    }
    let _ = TYPES.set(py, made);
    Ok(())
}

/// A `vargr` exception of `kind` with `msg`.
pub fn new_err(kind: Kind, msg: impl Into<String>) -> PyErr {
    let msg = msg.into();
    Python::attach(|py| match TYPES.get(py) {
        Some(types) => PyErr::from_type(types[kind as usize].bind(py).clone(), msg),
        None => PyException::new_err(msg),
    })
}

/// Whether `e` is a vargr exception of `kind` (or a subclass).
pub fn is(py: Python<'_>, e: &PyErr, kind: Kind) -> bool {
    TYPES
        .get(py)
        .is_some_and(|t| e.is_instance(py, t[kind as usize].bind(py)))
}

/// Tree errors, with the lost node's details as attributes of `NodeLostError`.
pub fn tbon(e: vargr_tbon::TbonError) -> PyErr {
    use vargr_tbon::TbonError as E;
    let kind = match &e {
        E::Startup(_) => Kind::Startup,
        E::NodeLost { .. } | E::ParentLost(_) => Kind::NodeLost,
        E::Filter { .. } => Kind::Filter,
        E::Shutdown => Kind::Shutdown,
        E::Timeout(_) | E::ObserveTimeout { .. } => Kind::Timeout,
        E::Wire(_) => Kind::Format,
        _ => Kind::Network,
    };
    let err = new_err(kind, e.to_string());
    if let E::NodeLost {
        node,
        host,
        backends,
        ..
    } = &e
    {
        Python::attach(|py| {
            let v = err.value(py);
            let _ = v.setattr("node", *node);
            let _ = v.setattr("host", host.as_str());
            let _ = v.setattr("backends", backends.clone());
        });
    }
    err
}

pub fn coll(e: vargr_coll::CollError) -> PyErr {
    use vargr_coll::CollError as E;
    if let E::Interrupted { .. } = e {
        return crate::block::take_interrupt();
    }
    let kind = match &e {
        E::Job { .. } => Kind::Job,
        E::PeerLost { .. } => Kind::PeerLost,
        E::Timeout { .. } => Kind::Timeout,
        _ => Kind::Collective,
    };
    new_err(kind, e.to_string())
}

pub fn wire(e: vargr_wire::WireError) -> PyErr {
    new_err(Kind::Format, e.to_string())
}

pub fn topo(e: vargr_topo::TopoError) -> PyErr {
    new_err(Kind::Topology, e.to_string())
}

pub fn codec(e: vargr_codec::CodecError) -> PyErr {
    new_err(Kind::Codec, e.to_string())
}

pub fn dedup(e: impl std::fmt::Display) -> PyErr {
    new_err(Kind::Dedup, e.to_string())
}
