//! `vargr.File` and `vargr.View`: collective file I/O (crates/vargr-io) from Python.
//!
//! Why here and not in Python: the data must go from the caller's buffer (a numpy array,
//! a bytearray) to vargr-io without a copy and with the GIL released, as the
//! communicator's buffer calls do; only argument checking and error mapping happen here.
//!
//! Errors follow the rest of the package, with one addition: a collective operation
//! fails on every rank, and the ranks whose own part succeeded get
//! `IoError::Elsewhere` with the failing rank's message, error class and OS error
//! number. Those ranks raise the class the failing rank raises (an `OSError` subclass,
//! `vargr.FileViewError`, ...), so that every rank of an SPMD program takes the same
//! `except`.

use std::path::PathBuf;
use std::sync::{Mutex, TryLockError};

use pyo3::exceptions::{PyOSError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;
use vargr_coll::ElemKind;
use vargr_io::{
    Aggregation, Count, ErrorClass, Hints, IoError, IoStats, Mode, Order, Run, Solver, View,
};

use crate::block;
use crate::coll::PyComm;
use crate::errors::{self, Kind};

// ---- arguments ------------------------------------------------------------------------

/// A non-negative int argument; a negative one is a ValueError naming `name`.
fn nonneg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<u64> {
    match obj.extract::<u64>() {
        Ok(v) => Ok(v),
        Err(e) => {
            let py = obj.py();
            if obj.lt(0).unwrap_or(false) {
                Err(PyValueError::new_err(format!(
                    "{name} must not be negative, got {obj}"
                )))
            } else if e.is_instance_of::<PyOverflowError>(py) {
                Err(PyOverflowError::new_err(format!(
                    "{name} is larger than 2**64 - 1: {obj}"
                )))
            } else {
                Err(PyTypeError::new_err(format!(
                    "{name} must be an int, got {}",
                    type_name(obj)
                )))
            }
        }
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// A sequence of non-negative ints.
fn counts(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<u64>> {
    obj.try_iter()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{name} must be a sequence of ints, got {}",
                type_name(obj)
            ))
        })?
        .enumerate()
        .map(|(i, x)| nonneg(&x?, &format!("{name}[{i}]")))
        .collect()
}

/// A sequence of (a, b) pairs of non-negative ints.
fn pairs(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<(u64, u64)>> {
    let bad = || {
        PyTypeError::new_err(format!(
            "{name} must be a sequence of (offset, length) pairs"
        ))
    };
    obj.try_iter()
        .map_err(|_| bad())?
        .enumerate()
        .map(|(i, p)| {
            let p = p?;
            if p.len().ok() != Some(2) || p.is_instance_of::<PyString>() {
                return Err(bad());
            }
            Ok((
                nonneg(&p.get_item(0)?, &format!("{name}[{i}][0]"))?,
                nonneg(&p.get_item(1)?, &format!("{name}[{i}][1]"))?,
            ))
        })
        .collect()
}

fn mode_of(mode: &str) -> PyResult<Mode> {
    Ok(match mode {
        "r" => Mode::READ,
        "r+" | "rw" => Mode::READ_WRITE,
        // Write-only files are opened for reading too: a collective write whose views
        // leave holes reads them back first (data sieving).
        "w" | "w+" | "create" => Mode::create(),
        "x" | "x+" => Mode {
            exclusive: true,
            ..Mode::create()
        },
        // As dbm.open's "c": read-write, created if missing, kept as it is otherwise
        // (MPI's MODE_CREATE).
        "c" => Mode {
            truncate: false,
            ..Mode::create()
        },
        _ => {
            return Err(PyValueError::new_err(format!(
                "mode {mode:?}: use \"r\", \"r+\" (or \"rw\"), \"w\" (or \"w+\", \"create\": created and emptied), \"c\" (created if missing, not emptied) or \"x\" (created, must not exist)"
            )))
        }
    })
}

/// The element kind of a numpy dtype, or of a vargr element name ("f64", "bytes").
fn elem_of(dtype: &Bound<'_, PyAny>) -> PyResult<ElemKind> {
    if let Ok(s) = dtype.cast::<PyString>() {
        if let Ok(k) = s.to_cow()?.parse::<ElemKind>() {
            return Ok(k);
        }
    }
    let py = dtype.py();
    let d = py.import("numpy")?.getattr("dtype")?.call1((dtype,))?;
    let kind: String = d.getattr("kind")?.extract()?;
    let size: usize = d.getattr("itemsize")?.extract()?;
    let native: bool = d.getattr("isnative")?.extract()?;
    let k = match (kind.as_str(), size) {
        _ if !native => None,
        ("b" | "u", 1) => Some(ElemKind::U8),
        ("i", 1) => Some(ElemKind::I8),
        ("u", 2) => Some(ElemKind::U16),
        ("i", 2) => Some(ElemKind::I16),
        ("u", 4) => Some(ElemKind::U32),
        ("i", 4) => Some(ElemKind::I32),
        ("u", 8) => Some(ElemKind::U64),
        ("i", 8) => Some(ElemKind::I64),
        ("f", 4) => Some(ElemKind::F32),
        ("f", 8) => Some(ElemKind::F64),
        _ => None,
    };
    k.ok_or_else(|| {
        PyValueError::new_err(format!(
            "dtype {d}: compression knows native integers and float32/float64; pass dtype=None to send bytes"
        ))
    })
}

/// A C-contiguous buffer's memory, valid while `keep` (the numpy view of it) lives.
struct Buf<'py> {
    _keep: Bound<'py, PyAny>,
    ptr: usize,
    len: usize,
}

impl<'py> Buf<'py> {
    /// Any object with the buffer protocol (numpy arrays of any dtype, bytearray,
    /// memoryview, bytes when only read). abi3 for Python 3.9 has no buffer API, so the
    /// buffer is reached through `memoryview` and `numpy.frombuffer`.
    fn of(obj: &Bound<'py, PyAny>, what: &str, writable: bool) -> PyResult<Buf<'py>> {
        let py = obj.py();
        let builtins = py.import("builtins")?;
        let mv = builtins.getattr("memoryview")?.call1((obj,)).map_err(|_| {
            PyTypeError::new_err(format!(
                "{what} must support the buffer protocol (a numpy array, bytearray, memoryview), got {}",
                type_name(obj)
            ))
        })?;
        if !mv.getattr("c_contiguous")?.extract::<bool>()? {
            return Err(PyTypeError::new_err(format!(
                "{what} must be C-contiguous (numpy.ascontiguousarray makes a copy that is)"
            )));
        }
        if writable && mv.getattr("readonly")?.extract::<bool>()? {
            return Err(PyTypeError::new_err(format!(
                "{what} is read-only: reading needs a writable buffer"
            )));
        }
        let np = py.import("numpy")?;
        let a = np.call_method1("frombuffer", (&mv, np.getattr("uint8")?))?;
        let (ptr, len): (usize, usize) = a
            .getattr("__array_interface__")?
            .get_item("data")?
            .get_item(0)
            .and_then(|p| Ok((p.extract()?, a.len()?)))?;
        Ok(Buf { _keep: a, ptr, len })
    }

    /// # Safety
    /// No other slice of this memory may be alive while the result is.
    unsafe fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        std::slice::from_raw_parts(self.ptr as *const u8, self.len)
    }

    /// # Safety
    /// As [`Buf::bytes`].
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_mut(&self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.len)
    }
}

// ---- errors ---------------------------------------------------------------------------

/// The error of a failed file call as a Python exception, with `.rank` the rank whose
/// part failed.
fn io_err(e: IoError) -> PyErr {
    let (err, rank) = match e {
        IoError::Comm(c) => return errors::coll(c),
        IoError::Os {
            op,
            ref path,
            rank,
            ref source,
        } => (
            os_err(
                source.raw_os_error(),
                format!("{op} (rank {rank}): {source}"),
                Some(path.display().to_string()),
            ),
            rank,
        ),
        IoError::At {
            op,
            ref path,
            rank,
            offset,
            end,
            ref source,
        } => (
            os_err(
                source.raw_os_error(),
                format!("{op} bytes {offset}..{end} (rank {rank}): {source}"),
                Some(path.display().to_string()),
            ),
            rank,
        ),
        IoError::View(ref v) => return errors::new_err(Kind::FileView, v.to_string()),
        IoError::Overlap { first, .. } => (errors::new_err(Kind::FileView, e.to_string()), first),
        IoError::Length { rank, .. } => (errors::new_err(Kind::FileView, e.to_string()), rank),
        IoError::Refused { rank, .. } => (errors::new_err(Kind::File, e.to_string()), rank),
        IoError::Elsewhere {
            rank, class, errno, ..
        } => (
            match class {
                ErrorClass::Os => os_err(errno, e.to_string(), None),
                ErrorClass::View => errors::new_err(Kind::FileView, e.to_string()),
                ErrorClass::Comm | ErrorClass::Other => errors::new_err(Kind::File, e.to_string()),
            },
            rank,
        ),
    };
    Python::attach(|py| {
        let _ = err.value(py).setattr("rank", rank);
    });
    err
}

fn os_err(errno: Option<i32>, msg: String, path: Option<String>) -> PyErr {
    // OSError(errno, strerror, filename) picks the subclass (FileNotFoundError, ...).
    match (errno, path) {
        (Some(n), Some(p)) => PyOSError::new_err((n, msg, p)),
        (Some(n), None) => PyOSError::new_err((n, msg)),
        (None, _) => PyOSError::new_err(msg),
    }
}

fn closed() -> PyErr {
    PyValueError::new_err("I/O operation on a closed vargr.File")
}

// ---- View -----------------------------------------------------------------------------

/// The file bytes a rank's data occupies (an MPI file view), in file order.
#[pyclass(frozen, module = "vargr", name = "View", eq)]
#[derive(Clone, PartialEq)]
pub struct PyView {
    view: View,
}

fn made(v: Result<View, vargr_io::ViewError>) -> PyResult<PyView> {
    v.map(|view| PyView { view })
        .map_err(|e| errors::new_err(Kind::FileView, e.to_string()))
}

#[pymethods]
impl PyView {
    /// `length` bytes from `offset`.
    #[staticmethod]
    fn contiguous(offset: &Bound<'_, PyAny>, length: &Bound<'_, PyAny>) -> PyResult<PyView> {
        made(View::contiguous(
            nonneg(offset, "offset")?,
            nonneg(length, "length")?,
        ))
    }

    /// `count` blocks of `block` bytes, `stride` bytes apart, from `disp`.
    #[staticmethod]
    fn vector(
        disp: &Bound<'_, PyAny>,
        count: &Bound<'_, PyAny>,
        block: &Bound<'_, PyAny>,
        stride: &Bound<'_, PyAny>,
    ) -> PyResult<PyView> {
        made(View::vector(
            nonneg(disp, "disp")?,
            nonneg(count, "count")?,
            nonneg(block, "block")?,
            nonneg(stride, "stride")?,
        ))
    }

    /// The block `starts .. starts + subsizes` of an array of `sizes` elements of
    /// `elem_bytes` each, stored at `disp` in `order` ("C" or "F").
    #[staticmethod]
    #[pyo3(signature = (disp, sizes, subsizes, starts, order = "C", *, elem_bytes))]
    fn subarray(
        disp: &Bound<'_, PyAny>,
        sizes: &Bound<'_, PyAny>,
        subsizes: &Bound<'_, PyAny>,
        starts: &Bound<'_, PyAny>,
        order: &str,
        elem_bytes: &Bound<'_, PyAny>,
    ) -> PyResult<PyView> {
        let order = match order {
            "C" | "c" => Order::C,
            "F" | "f" | "Fortran" => Order::Fortran,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "order {order:?}: use \"C\" (last dimension fastest) or \"F\" (first)"
                )))
            }
        };
        made(View::subarray(
            nonneg(disp, "disp")?,
            &counts(sizes, "sizes")?,
            &counts(subsizes, "subsizes")?,
            &counts(starts, "starts")?,
            order,
            nonneg(elem_bytes, "elem_bytes")?,
        ))
    }

    /// Blocks given as (displacement, length) in elements of `elem_bytes`, from `disp`;
    /// displacements must grow.
    #[staticmethod]
    fn indexed(
        disp: &Bound<'_, PyAny>,
        blocks: &Bound<'_, PyAny>,
        elem_bytes: &Bound<'_, PyAny>,
    ) -> PyResult<PyView> {
        made(View::indexed(
            nonneg(disp, "disp")?,
            &pairs(blocks, "blocks")?,
            nonneg(elem_bytes, "elem_bytes")?,
        ))
    }

    /// File runs given as (offset, length) in bytes, in file order, not overlapping.
    #[staticmethod]
    fn from_runs(runs: &Bound<'_, PyAny>) -> PyResult<PyView> {
        let runs = pairs(runs, "runs")?;
        made(View::from_runs(
            runs.into_iter().map(|(o, l)| Run::new(o, l)),
        ))
    }

    /// The view's file runs as (offset, length), merged, in file order.
    #[getter]
    fn runs(&self) -> Vec<(u64, u64)> {
        self.view.runs().iter().map(|r| (r.offset, r.len)).collect()
    }

    /// Bytes of data the view holds (what `write_all` and `read_all` take).
    #[getter]
    fn nbytes(&self) -> u64 {
        self.view.bytes()
    }

    fn __repr__(&self) -> String {
        let runs = self.view.runs();
        let shown: Vec<String> = runs
            .iter()
            .take(4)
            .map(|r| format!("({}, {})", r.offset, r.len))
            .collect();
        let more = if runs.len() > 4 { ", ..." } else { "" };
        format!(
            "vargr.View({} runs, {} bytes: [{}{more}])",
            runs.len(),
            self.view.bytes(),
            shown.join(", ")
        )
    }
}

// ---- stats ----------------------------------------------------------------------------

/// What the last collective operation moved, as this rank saw it.
#[pyclass(frozen, module = "vargr", name = "FileStats", get_all)]
pub struct PyFileStats {
    /// The rank that aggregated each file domain.
    aggregators: Vec<usize>,
    rounds: u64,
    /// Data bytes this rank sent to ranks of other nodes.
    bytes_between_nodes: u64,
    /// Data bytes this rank sent to other ranks of its node.
    bytes_within_node: u64,
    /// Data bytes this rank aggregated itself.
    bytes_kept: u64,
    /// Bytes this rank read to fill holes before writing.
    bytes_sieved: u64,
}

impl From<&IoStats> for PyFileStats {
    fn from(s: &IoStats) -> PyFileStats {
        PyFileStats {
            aggregators: s.aggregators.clone(),
            rounds: s.rounds,
            bytes_between_nodes: s.bytes_between_nodes,
            bytes_within_node: s.bytes_within_node,
            bytes_kept: s.bytes_kept,
            bytes_sieved: s.bytes_sieved,
        }
    }
}

#[pymethods]
impl PyFileStats {
    fn __repr__(&self) -> String {
        format!(
            "vargr.FileStats(aggregators={:?}, rounds={}, bytes_between_nodes={}, bytes_within_node={}, bytes_kept={}, bytes_sieved={})",
            self.aggregators,
            self.rounds,
            self.bytes_between_nodes,
            self.bytes_within_node,
            self.bytes_kept,
            self.bytes_sieved
        )
    }
}

// ---- File -----------------------------------------------------------------------------

/// A file shared by the ranks of a communicator (MPI-IO's `MPI_File`).
#[pyclass(frozen, module = "vargr", name = "File")]
pub struct PyFile {
    file: Mutex<Option<vargr_io::File>>,
    path: PathBuf,
}

impl PyFile {
    /// Runs `f` on the open file with the GIL released; Ctrl-C ends its waits.
    fn run<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut vargr_io::File) -> vargr_io::Result<R> + Send,
    ) -> PyResult<R> {
        let r = py.detach(|| {
            block::interruptible(|| {
                let mut g = self.file.lock().unwrap_or_else(|p| p.into_inner());
                g.as_mut().map(f)
            })
        });
        match r {
            Some(r) => r.map_err(io_err),
            None => Err(closed()),
        }
    }
}

#[pymethods]
impl PyFile {
    /// Opens `path` on every rank of `comm` (collective).
    #[staticmethod]
    #[pyo3(signature = (
        comm, path, mode = "r", *, aggregation = "two-phase", count = None, solver = None,
        cb_nodes = None, cb_buffer_size = None, compress = true, nodes = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn open(
        py: Python<'_>,
        comm: &Bound<'_, PyComm>,
        path: PathBuf,
        mode: &str,
        aggregation: &str,
        count: Option<&str>,
        solver: Option<&str>,
        cb_nodes: Option<&Bound<'_, PyAny>>,
        cb_buffer_size: Option<&Bound<'_, PyAny>>,
        compress: bool,
        nodes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyFile> {
        let mode = mode_of(mode)?;
        let aggregation = match aggregation {
            "two-phase" => {
                if count.is_some() || solver.is_some() {
                    return Err(PyValueError::new_err(
                        "count and solver choose LA-Two-Phase's aggregators: they need aggregation=\"la-two-phase\"",
                    ));
                }
                Aggregation::TwoPhase
            }
            "la-two-phase" => Aggregation::Locality {
                count: match count.unwrap_or("bytes") {
                    "bytes" => Count::Bytes,
                    "blocks" => Count::Blocks,
                    c => {
                        return Err(PyValueError::new_err(format!(
                            "count {c:?}: use \"bytes\" or \"blocks\""
                        )))
                    }
                },
                solver: solver
                    .unwrap_or("jonker-volgenant")
                    .parse::<Solver>()
                    .map_err(PyValueError::new_err)?,
            },
            a => {
                return Err(PyValueError::new_err(format!(
                    "aggregation {a:?}: use \"two-phase\" or \"la-two-phase\""
                )))
            }
        };
        let hints = Hints {
            cb_nodes: cb_nodes
                .map(|n| self::nonneg(n, "cb_nodes").map(|n| n as usize))
                .transpose()?,
            cb_buffer_size: match cb_buffer_size {
                Some(n) => nonneg(n, "cb_buffer_size")?,
                None => Hints::default().cb_buffer_size,
            },
            aggregation,
            compress,
            elem: ElemKind::U8,
            nodes: nodes
                .map(|n| counts(n, "nodes").map(|v| v.into_iter().map(|x| x as usize).collect()))
                .transpose()?,
        };
        let p = path.clone();
        let file = comm
            .get()
            .run(py, move |c| Ok(vargr_io::File::open(c, &p, mode, hints)))?
            .map_err(io_err)?;
        Ok(PyFile {
            file: Mutex::new(Some(file)),
            path,
        })
    }

    /// Sets this rank's view; `dtype` (a numpy dtype or a name such as "float64" or
    /// "f64") tells compressing links what the data holds, None sends it as bytes.
    #[pyo3(signature = (view, dtype = None))]
    fn set_view(
        &self,
        py: Python<'_>,
        view: &PyView,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let elem = dtype.map(elem_of).transpose()?.unwrap_or(ElemKind::U8);
        let view = view.view.clone();
        self.run(py, move |f| {
            f.hints_mut().elem = elem;
            f.set_view(view);
            Ok(())
        })
    }

    /// This rank's view.
    #[getter]
    fn view(&self, py: Python<'_>) -> PyResult<PyView> {
        self.run(py, |f| {
            Ok(PyView {
                view: f.view().clone(),
            })
        })
    }

    /// Writes every rank's `buf` through its view (collective); `buf` holds exactly the
    /// view's bytes.
    fn write_all(&self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<()> {
        let b = Buf::of(buf, "buf", false)?;
        // SAFETY: `buf` (kept by `b`) lives through the call and is only read.
        let data = unsafe { b.bytes() };
        self.run(py, move |f| f.write_all(data))
    }

    /// Reads every rank's view into its `buf` (collective), a writable buffer of exactly
    /// the view's bytes. Bytes past the end of the file read as zeros.
    fn read_all(&self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<()> {
        let b = Buf::of(buf, "buf", true)?;
        // SAFETY: `buf` lives through the call; nothing else borrows it from Rust.
        let data = unsafe { b.bytes_mut() };
        self.run(py, move |f| f.read_all(data))
    }

    /// Writes `buf` as data bytes `offset ..` of this rank's view (independent).
    fn write_at(
        &self,
        py: Python<'_>,
        offset: &Bound<'_, PyAny>,
        buf: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let at = nonneg(offset, "offset")?;
        let b = Buf::of(buf, "buf", false)?;
        // SAFETY: as in write_all.
        let data = unsafe { b.bytes() };
        self.run(py, move |f| f.write_at(at, data))
    }

    /// Reads data bytes `offset ..` of this rank's view into `buf` (independent);
    /// returns the bytes read, fewer if the file ends first.
    fn read_at(
        &self,
        py: Python<'_>,
        offset: &Bound<'_, PyAny>,
        buf: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let at = nonneg(offset, "offset")?;
        let b = Buf::of(buf, "buf", true)?;
        // SAFETY: as in read_all.
        let data = unsafe { b.bytes_mut() };
        self.run(py, move |f| f.read_at(at, data))
    }

    /// The file's size in bytes.
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        self.run(py, |f| f.size())
    }

    /// Makes the file `n` bytes long (collective).
    fn set_size(&self, py: Python<'_>, n: &Bound<'_, PyAny>) -> PyResult<()> {
        let n = nonneg(n, "n")?;
        self.run(py, move |f| f.set_size(n))
    }

    /// Reserves disk space for the first `n` bytes (collective).
    fn preallocate(&self, py: Python<'_>, n: &Bound<'_, PyAny>) -> PyResult<()> {
        let n = nonneg(n, "n")?;
        self.run(py, move |f| f.preallocate(n))
    }

    /// Flushes every rank's writes to the disk (collective).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |f| f.sync())
    }

    /// Syncs and closes the file on every rank (collective); closing again does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let r = py.detach(|| {
            block::interruptible(|| {
                let f = self.file.lock().unwrap_or_else(|p| p.into_inner()).take();
                f.map(|f| f.close())
            })
        });
        r.unwrap_or(Ok(())).map_err(io_err)
    }

    /// Without waiting for the lock (with the GIL held, waiting could deadlock with a
    /// collective in another thread that checks for signals): a file in use is open.
    #[getter]
    fn closed(&self) -> bool {
        match self.file.try_lock() {
            Ok(g) => g.is_none(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().is_none(),
            Err(TryLockError::WouldBlock) => false,
        }
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// What the last collective operation moved, as this rank saw it.
    #[getter]
    fn stats(&self, py: Python<'_>) -> PyResult<PyFileStats> {
        self.run(py, |f| Ok(PyFileStats::from(f.stats())))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Closes the file (collective) when the block ends normally. After an exception
    /// the file is only released here: the other ranks may not be closing it, and a
    /// collective close would wait for them forever.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        if exc_type.is_none() {
            self.close(py)?;
        } else {
            let f = py.detach(|| self.file.lock().unwrap_or_else(|p| p.into_inner()).take());
            drop(f);
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { "closed" } else { "open" };
        format!("vargr.File({:?}, {state})", self.path.display().to_string())
    }
}
