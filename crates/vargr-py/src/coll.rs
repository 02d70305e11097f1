//! Ranks and collectives from Python, with mpi4py's names: `vargr.World()` joins the
//! job this process was started in (`vargr run`, `mpirun`, `srun`; one rank per
//! process) and returns its world `Comm`.
//!
//! As in mpi4py, lowercase methods take Python objects and return new ones, uppercase
//! methods work on numpy buffers in place. Unlike mpi4py, the lowercase reductions
//! (`allreduce`, `reduce`) reduce numbers and numpy arrays natively (Python `float`
//! as f64, `int` as i64, arrays by dtype) instead of pickling them: an 8-byte
//! `allreduce` costs the Rust call plus a few hundred nanoseconds. Every rank must then
//! pass the same kind of value (all floats, or arrays of one dtype and shape). Other
//! objects, and user operators, go through pickle and are reduced in Python in rank
//! order.
//!
//! Every call releases the GIL while it communicates. A `Comm` is used by one thread at
//! a time, like an MPI communicator: a second thread calling into a busy one gets an
//! error instead of a deadlock. Collectives block in vargr's transport, which has no
//! timed receive, so Ctrl-C interrupts them only through the launcher (which ends the
//! job); joining the job and the tree's calls are interruptible.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, TryLockError};
use std::time::Duration;

use bytes::Bytes;
use numpy::{
    Element, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyList, PyTuple};
use vargr_coll::{Comm, CondAllreduce, CondOp, ElemKind, Job, Op, Predicate};

use crate::block;
use crate::errors::{self, Kind};

// ---- joining the job ------------------------------------------------------------------

/// The job, once joined (or why it could not be).
static JOB: OnceLock<Result<Job, String>> = OnceLock::new();
static JOIN: std::sync::Once = std::sync::Once::new();
static WORLD: PyOnceLock<Py<PyComm>> = PyOnceLock::new();

/// Joins the job on a thread of its own (wire-up may wait a minute for slow peers)
/// and waits for it in slices, so that Ctrl-C interrupts the wait.
fn job(py: Python<'_>) -> PyResult<&'static Job> {
    JOIN.call_once(|| {
        std::thread::Builder::new()
            .name("vargr-join".into())
            .spawn(|| {
                let _ = JOB.set(vargr_config::join_job().map_err(|e| e.to_string()));
            })
            .expect("starting the join thread");
    });
    let got = block::wait(py, None, |slice| {
        let until = std::time::Instant::now() + slice;
        loop {
            if let Some(r) = JOB.get() {
                return Some(r);
            }
            if std::time::Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    })?;
    match got {
        Some(Ok(job)) => Ok(job),
        Some(Err(e)) => Err(errors::new_err(Kind::Job, e.clone())),
        None => Err(errors::new_err(Kind::Job, "joining the job gave no result")),
    }
}

/// The world communicator of this process's rank (joins the job on the first call).
#[pyfunction]
pub fn world(py: Python<'_>) -> PyResult<Py<PyComm>> {
    if let Some(w) = WORLD.get(py) {
        return Ok(w.clone_ref(py));
    }
    let job = job(py)?;
    let ranks = job.local_ranks();
    if ranks.len() != 1 {
        return Err(errors::new_err(
            Kind::Job,
            format!(
                "this process hosts {} ranks ({}..{}): vargr.World() needs one rank per \
                 process (run without --ranks-per-process)",
                ranks.len(),
                ranks.start,
                ranks.end
            ),
        ));
    }
    let comm = job
        .world(ranks.start)
        .and_then(|w| w.comm())
        .map_err(errors::coll)?;
    let w = Py::new(py, PyComm::new(comm))?;
    let _ = WORLD.set(py, w);
    Ok(WORLD.get(py).expect("set above").clone_ref(py))
}

/// A communicator of this rank alone (MPI's `COMM_SELF`, and the world of a program
/// started without a launcher, as MPI's singleton init).
#[pyfunction]
pub fn solo() -> PyResult<PyComm> {
    let ep = vargr_coll::Fabric::new(1)
        .endpoint(0)
        .expect("a fabric of one has rank 0");
    let comm = vargr_coll::World::new(std::sync::Arc::new(ep))
        .comm()
        .map_err(errors::coll)?;
    Ok(PyComm::new(comm))
}

/// Whether a launcher (`vargr run`, `mpirun`, `srun`) started this process as a rank.
#[pyfunction]
pub fn in_job() -> bool {
    vargr_net::wireup::rank_from_env().is_ok()
}

/// Writes what is still queued for other ranks (and the trace file under
/// `vargr run --trace`). Registered with `atexit` by `vargr.World()`.
#[pyfunction]
pub fn finish(py: Python<'_>) {
    if let Some(Ok(job)) = JOB.get() {
        py.detach(|| job.finish());
    }
}

/// Writes this process's event records to `DIR/<host>-<first rank>.vtr` (readable by
/// `vargr trace report`); returns the path.
#[pyfunction]
pub fn write_trace(py: Python<'_>, dir: std::path::PathBuf) -> PyResult<std::path::PathBuf> {
    let job = job(py)?;
    py.detach(|| job.write_trace(&dir)).map_err(errors::coll)
}

// ---- operators ------------------------------------------------------------------------

enum OpKind {
    Builtin(Op),
    /// `Op.Create(function, commute)`: `function(a, b)` returns `a ∘ b` for objects and
    /// `function(invec, inoutvec)` sets `inoutvec = invec ∘ inoutvec` for buffers.
    User {
        func: Py<PyAny>,
        commute: bool,
    },
}

/// A reduction operator: `vargr.SUM`, `PROD`, `MIN`, `MAX`, `LAND`, `LOR`, `BAND`,
/// `BOR`, or `Op.Create(function, commute=True)`.
#[pyclass(frozen, module = "vargr", name = "Op")]
pub struct PyOp {
    kind: OpKind,
    name: String,
}

impl PyOp {
    pub fn builtin(op: Op) -> PyOp {
        PyOp {
            name: op.name().to_ascii_uppercase(),
            kind: OpKind::Builtin(op),
        }
    }

    fn native(&self) -> Option<&Op> {
        match &self.kind {
            OpKind::Builtin(op) => Some(op),
            OpKind::User { .. } => None,
        }
    }

    /// `a ∘ b` on Python objects (`a` the lower ranks' side), with MPI's semantics.
    fn combine<'py>(
        &self,
        a: &Bound<'py, PyAny>,
        b: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = a.py();
        match &self.kind {
            OpKind::User { func, .. } => func.bind(py).call1((a, b)),
            OpKind::Builtin(op) => match op {
                Op::Sum => a.add(b),
                Op::Prod => a.mul(b),
                Op::Min => Ok(if b.lt(a)? { b.clone() } else { a.clone() }),
                Op::Max => Ok(if b.gt(a)? { b.clone() } else { a.clone() }),
                Op::Land => Ok(PyBool::new(py, a.is_truthy()? && b.is_truthy()?)
                    .to_owned()
                    .into_any()),
                Op::Lor => Ok(PyBool::new(py, a.is_truthy()? || b.is_truthy()?)
                    .to_owned()
                    .into_any()),
                Op::Band => a.bitand(b),
                Op::Bor => a.bitor(b),
                Op::User(_) => Err(PyValueError::new_err("a Rust user operator in Python")),
            },
        }
    }

    /// Folds values in rank order.
    fn fold<'py>(&self, values: Vec<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let mut it = values.into_iter();
        let mut acc = it
            .next()
            .ok_or_else(|| PyValueError::new_err("nothing to reduce"))?;
        for v in it {
            acc = self.combine(&acc, &v)?;
        }
        Ok(acc)
    }
}

#[pymethods]
impl PyOp {
    /// A user operator, as in mpi4py: `function(a, b)` returns `a ∘ b` for the
    /// lowercase (object) reductions; for buffers, `function(invec, inoutvec)` stores
    /// `invec ∘ inoutvec` into `inoutvec` (numpy arrays of the call's dtype).
    #[staticmethod]
    #[pyo3(name = "Create", signature = (function, commute = true))]
    fn create(function: Bound<'_, PyAny>, commute: bool) -> PyResult<PyOp> {
        if !function.is_callable() {
            return Err(PyTypeError::new_err("Op.Create needs a callable"));
        }
        let name = function
            .getattr("__name__")
            .and_then(|n| n.extract::<String>())
            .unwrap_or_else(|_| "user".into());
        Ok(PyOp {
            kind: OpKind::User {
                func: function.unbind(),
                commute,
            },
            name,
        })
    }

    /// Applies the operator to two Python objects (`a ∘ b`).
    fn __call__<'py>(
        &self,
        a: &Bound<'py, PyAny>,
        b: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.combine(a, b)
    }

    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    #[getter]
    fn is_commutative(&self) -> bool {
        match &self.kind {
            OpKind::Builtin(op) => op.is_commutative(),
            OpKind::User { commute, .. } => *commute,
        }
    }

    fn __repr__(&self) -> String {
        match &self.kind {
            OpKind::Builtin(_) => format!("vargr.{}", self.name),
            OpKind::User { .. } => format!("vargr.Op.Create({})", self.name),
        }
    }
}

/// `IN_PLACE`: pass as `sendbuf` to reduce into `recvbuf` in place.
#[pyclass(frozen, module = "vargr", name = "InPlace")]
pub struct PyInPlace;

#[pymethods]
impl PyInPlace {
    fn __repr__(&self) -> &'static str {
        "vargr.IN_PLACE"
    }
}

// ---- numpy buffers --------------------------------------------------------------------

/// What a numpy buffer holds: one of vargr's element kinds, or booleans (which
/// reductions treat as logical values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Num {
    Elem(ElemKind),
    Bool,
}

fn num_of(a: &Bound<'_, PyUntypedArray>) -> Option<Num> {
    let d = a.dtype();
    if d.is_native_byteorder() == Some(false) {
        return None;
    }
    Some(match (d.kind(), d.itemsize()) {
        (b'b', 1) => Num::Bool,
        (b'i', 1) => Num::Elem(ElemKind::I8),
        (b'u', 1) => Num::Elem(ElemKind::U8),
        (b'i', 2) => Num::Elem(ElemKind::I16),
        (b'u', 2) => Num::Elem(ElemKind::U16),
        (b'i', 4) => Num::Elem(ElemKind::I32),
        (b'u', 4) => Num::Elem(ElemKind::U32),
        (b'i', 8) => Num::Elem(ElemKind::I64),
        (b'u', 8) => Num::Elem(ElemKind::U64),
        (b'f', 4) => Num::Elem(ElemKind::F32),
        (b'f', 8) => Num::Elem(ElemKind::F64),
        _ => return None,
    })
}

/// Runs `$body` with `$T` the Rust type of a numeric kind; `$bool` for booleans.
macro_rules! with_num {
    ($n:expr, $T:ident => $body:expr, bool => $bool:expr) => {
        match $n {
            Num::Elem(ElemKind::I8) => {
                type $T = i8;
                $body
            }
            Num::Elem(ElemKind::U8) => {
                type $T = u8;
                $body
            }
            Num::Elem(ElemKind::I16) => {
                type $T = i16;
                $body
            }
            Num::Elem(ElemKind::U16) => {
                type $T = u16;
                $body
            }
            Num::Elem(ElemKind::I32) => {
                type $T = i32;
                $body
            }
            Num::Elem(ElemKind::U32) => {
                type $T = u32;
                $body
            }
            Num::Elem(ElemKind::I64) => {
                type $T = i64;
                $body
            }
            Num::Elem(ElemKind::U64) => {
                type $T = u64;
                $body
            }
            Num::Elem(ElemKind::F32) => {
                type $T = f32;
                $body
            }
            Num::Elem(ElemKind::F64) => {
                type $T = f64;
                $body
            }
            Num::Bool => $bool,
        }
    };
}

fn array<'a, 'py>(
    obj: &'a Bound<'py, PyAny>,
    what: &str,
) -> PyResult<&'a Bound<'py, PyUntypedArray>> {
    obj.cast::<PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a numpy array, got {}",
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })
}

/// A C-contiguous numpy buffer's bytes, for calls that only move data.
struct Raw {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the array object is kept alive by the caller's reference for the whole call,
// and its memory is plain bytes; numpy itself lets other threads touch it without the
// GIL in the same way.
unsafe impl Send for Raw {}

impl Raw {
    fn of(obj: &Bound<'_, PyAny>, what: &str, writable: bool) -> PyResult<Raw> {
        let a = array(obj, what)?;
        if !a.is_c_contiguous() {
            return Err(PyValueError::new_err(format!(
                "{what} must be C-contiguous (use numpy.ascontiguousarray)"
            )));
        }
        // SAFETY: `a` is a live ndarray; its fields are read, not written.
        let (data, flags) = unsafe {
            let f = &(*a.as_array_ptr()).fields;
            (f.data, f.flags)
        };
        if writable && flags & numpy::npyffi::flags::NPY_ARRAY_WRITEABLE == 0 {
            return Err(PyValueError::new_err(format!("{what} is read-only")));
        }
        Ok(Raw {
            ptr: data.cast(),
            len: a.len() * a.dtype().itemsize(),
        })
    }

    fn overlaps(&self, other: &Raw) -> bool {
        let (a, b) = (self.ptr as usize, other.ptr as usize);
        self.len > 0 && other.len > 0 && a < b + other.len && b < a + self.len
    }

    /// # Safety
    /// No other slice of this memory may be alive while the result is.
    unsafe fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        std::slice::from_raw_parts(self.ptr, self.len)
    }

    /// # Safety
    /// As [`Raw::bytes`].
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_mut(&self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        std::slice::from_raw_parts_mut(self.ptr, self.len)
    }
}

fn pickle(py: Python<'_>) -> PyResult<&(Py<PyAny>, Py<PyAny>)> {
    static PICKLE: PyOnceLock<(Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();
    PICKLE.get_or_try_init(py, || {
        let m = py.import("pickle")?;
        Ok((m.getattr("dumps")?.unbind(), m.getattr("loads")?.unbind()))
    })
}

fn dumps(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let py = obj.py();
    let b = pickle(py)?.0.bind(py).call1((obj, -1))?;
    Ok(b.cast::<PyBytes>()?.as_bytes().to_vec())
}

fn loads<'py>(py: Python<'py>, b: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    pickle(py)?.1.bind(py).call1((PyBytes::new(py, b),))
}

fn numpy_generic(py: Python<'_>) -> PyResult<&Py<PyAny>> {
    static GENERIC: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    GENERIC.get_or_try_init(py, || Ok(py.import("numpy")?.getattr("generic")?.unbind()))
}

/// Splits `data` into pieces of `counts` bytes.
fn split_counts(counts: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut at = 0;
    counts
        .iter()
        .map(|&n| {
            let r = at..at + n;
            at += n;
            r
        })
        .collect()
}

// ---- the communicator -----------------------------------------------------------------

type CondKey = (u8, u8, u64);

/// A communicator: this rank's handle on a group of ranks (mpi4py's `Intracomm`).
#[pyclass(frozen, module = "vargr", name = "Comm")]
pub struct PyComm {
    comm: Mutex<Comm>,
    rank: usize,
    size: usize,
    /// Conditional allreduces set up by `cond_allreduce`, per (op, predicate, threshold).
    conds: Mutex<HashMap<CondKey, CondAllreduce>>,
}

impl PyComm {
    fn new(comm: Comm) -> PyComm {
        PyComm {
            rank: comm.rank(),
            size: comm.size(),
            comm: Mutex::new(comm),
            conds: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `f` on the communicator with the GIL released.
    pub(crate) fn run<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Comm) -> vargr_coll::Result<R> + Send,
    ) -> PyResult<R> {
        let r = py.detach(|| {
            block::interruptible(|| match self.comm.try_lock() {
                Ok(c) => Some(f(&c)),
                Err(TryLockError::Poisoned(p)) => Some(f(&p.into_inner())),
                Err(TryLockError::WouldBlock) => None,
            })
        });
        match r {
            Some(r) => r.map_err(errors::coll),
            None => Err(busy()),
        }
    }

    fn check_root(&self, root: usize) -> PyResult<()> {
        if root >= self.size {
            return Err(errors::new_err(
                Kind::Collective,
                format!(
                    "root {root} is out of range for a communicator of {} ranks",
                    self.size
                ),
            ));
        }
        Ok(())
    }

    /// Every rank's pickled object, in rank order.
    fn allgather_bytes(&self, py: Python<'_>, mine: Vec<u8>) -> PyResult<(Vec<u8>, Vec<usize>)> {
        let n = [mine.len() as u64];
        let mut lens = vec![0u64; self.size];
        let total = self.run(py, |c| {
            c.allgather(&n, &mut lens)?;
            let counts: Vec<usize> = lens.iter().map(|&l| l as usize).collect();
            let mut all = vec![0u8; counts.iter().sum()];
            c.allgatherv(
                &mine,
                &mut all,
                &counts,
                &vargr_coll::packed_displs(&counts),
            )?;
            Ok((all, counts))
        })?;
        Ok(total)
    }

    /// Every rank's pickled object at `root` (None elsewhere).
    fn gather_bytes(
        &self,
        py: Python<'_>,
        mine: Vec<u8>,
        root: usize,
    ) -> PyResult<Option<(Vec<u8>, Vec<usize>)>> {
        self.check_root(root)?;
        let me = self.rank;
        let size = self.size;
        self.run(py, |c| {
            let n = [mine.len() as u64];
            let mut lens = vec![0u64; if me == root { size } else { 0 }];
            c.gather(&n, &mut lens, root)?;
            let counts: Vec<usize> = lens.iter().map(|&l| l as usize).collect();
            let mut all = vec![0u8; counts.iter().sum()];
            let displs = vargr_coll::packed_displs(&counts);
            c.gatherv(&mine, &mut all, &counts, &displs, root)?;
            Ok((me == root).then_some((all, counts)))
        })
    }

    fn unpickle_all<'py>(
        py: Python<'py>,
        all: &[u8],
        counts: &[usize],
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        split_counts(counts)
            .into_iter()
            .map(|r| loads(py, &all[r]))
            .collect()
    }

    /// Native allreduce or reduce of a numpy array into a new array.
    fn reduce_array<'py>(
        &self,
        py: Python<'py>,
        a: &Bound<'py, PyUntypedArray>,
        op: &Op,
        root: Option<usize>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(num) = num_of(a) else {
            return Ok(None);
        };
        let out = a.call_method1("copy", ("C",))?;
        let keep = match root {
            Some(r) => r == self.rank,
            None => true,
        };
        let work = out.clone();
        with_num!(num, T => {
            let arr = work.cast::<PyArrayDyn<T>>()?;
            let mut rw = arr.try_readwrite()?;
            let buf = rw.as_slice_mut()?;
            match root {
                None => self.run(py, |c| c.allreduce(buf, op))?,
                Some(r) => {
                    let send = buf.to_vec();
                    self.run(py, |c| c.reduce(&send, buf, op, r))?
                }
            }
        }, bool => {
            bool_reduce(self, py, &work, op, root)?
        });
        Ok(Some(if keep { out } else { py.None().into_bound(py) }))
    }
}

/// Booleans reduce as bytes (0 or 1) with the logical and bitwise operators, MIN, MAX.
fn bool_reduce(
    comm: &PyComm,
    py: Python<'_>,
    work: &Bound<'_, PyAny>,
    op: &Op,
    root: Option<usize>,
) -> PyResult<()> {
    if matches!(op, Op::Sum | Op::Prod) {
        return Err(PyTypeError::new_err(format!(
            "{} is not defined for bool arrays (use LAND, LOR, BAND, BOR, MIN or MAX)",
            op.name()
        )));
    }
    let arr = work.cast::<PyArrayDyn<bool>>()?;
    let mut rw = arr.try_readwrite()?;
    let b = rw.as_slice_mut()?;
    // SAFETY: bool has the layout of u8; these operators keep every byte 0 or 1.
    let buf: &mut [u8] = unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr().cast(), b.len()) };
    match root {
        None => comm.run(py, |c| c.allreduce(buf, op)),
        Some(r) => {
            let send = buf.to_vec();
            comm.run(py, |c| c.reduce(&send, buf, op, r))
        }
    }
}

fn busy() -> PyErr {
    errors::new_err(
        Kind::Collective,
        "this communicator is busy in another thread: a communicator's calls must come \
         from one thread at a time (use Dup() for another thread)",
    )
}

fn typed_slices<'a, T: Element>(
    send: &'a Bound<'_, PyAny>,
    recv: &'a Bound<'_, PyAny>,
) -> PyResult<(
    numpy::PyReadonlyArrayDyn<'a, T>,
    numpy::PyReadwriteArrayDyn<'a, T>,
)> {
    let r = recv.cast::<PyArrayDyn<T>>()?;
    let s = send
        .cast::<PyArrayDyn<T>>()
        .map_err(|_| PyTypeError::new_err("sendbuf and recvbuf must have the same dtype"))?;
    let rw = r.try_readwrite().map_err(|e| {
        PyValueError::new_err(format!(
            "recvbuf: {e} (pass vargr.IN_PLACE as sendbuf to reduce in place)"
        ))
    })?;
    let ro = s.try_readonly().map_err(|e| {
        PyValueError::new_err(format!(
            "sendbuf: {e} (pass vargr.IN_PLACE as sendbuf to reduce in place)"
        ))
    })?;
    Ok((ro, rw))
}

/// A buffer reduction: `send` (None: in place) into `recv` (None: not the root).
fn buffer_reduce(
    comm: &PyComm,
    py: Python<'_>,
    send: Option<&Bound<'_, PyAny>>,
    recv: Option<&Bound<'_, PyAny>>,
    op: &PyOp,
    root: Option<usize>,
) -> PyResult<()> {
    let me = comm.rank;
    let significant = root.is_none_or(|r| r == me);
    // The buffer whose dtype decides: the receive buffer where it matters.
    let lead = match (significant, recv, send) {
        (true, Some(r), _) => r,
        (false, _, Some(s)) => s,
        (false, Some(r), None) => r,
        (true, None, _) => return Err(PyValueError::new_err("recvbuf is required")),
        (false, None, None) => return Err(PyValueError::new_err("sendbuf is required")),
    };
    let la = array(lead, "buffer")?;
    if !la.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "buffers must be C-contiguous (use numpy.ascontiguousarray)",
        ));
    }
    let num = num_of(la).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "cannot reduce dtype {}: use a numeric dtype (int8..uint64, float32, float64) or bool",
            la.dtype()
        ))
    })?;
    if let Some(s) = send {
        if !array(s, "sendbuf")?.is_c_contiguous() {
            return Err(PyValueError::new_err(
                "sendbuf must be C-contiguous (use numpy.ascontiguousarray)",
            ));
        }
    }
    let user;
    let native: &Op = match op.native() {
        Some(o) => o,
        None => {
            user = user_buffer_op(op, la.dtype().unbind())?;
            &user
        }
    };
    with_num!(num, T => {
        match (significant, send, recv) {
            (true, None, Some(r)) => {
                let arr = r.cast::<PyArrayDyn<T>>()?;
                let mut rw = arr.try_readwrite()?;
                let buf = rw.as_slice_mut()?;
                match root {
                    None => comm.run(py, |c| c.allreduce(buf, native)),
                    Some(rt) => {
                        let input = buf.to_vec();
                        comm.run(py, |c| c.reduce(&input, buf, native, rt))
                    }
                }
            }
            (true, Some(s), Some(r)) => {
                let (ro, mut rw) = typed_slices::<T>(s, r)?;
                let input = ro.as_slice()?;
                let out = rw.as_slice_mut()?;
                if input.len() != out.len() {
                    return Err(PyValueError::new_err(format!(
                        "sendbuf has {} elements, recvbuf {}",
                        input.len(),
                        out.len()
                    )));
                }
                match root {
                    None => comm.run(py, |c| c.allreduce_into(input, out, native)),
                    Some(rt) => comm.run(py, |c| c.reduce(input, out, native, rt)),
                }
            }
            (false, Some(s), _) => {
                let arr = s.cast::<PyArrayDyn<T>>()?;
                let ro = arr.try_readonly()?;
                let input = ro.as_slice()?;
                let rt = root.unwrap_or(0);
                comm.run(py, |c| c.reduce(input, &mut [], native, rt))
            }
            (false, None, Some(r)) => {
                // IN_PLACE at a non-root: the receive buffer is the input.
                let arr = r.cast::<PyArrayDyn<T>>()?;
                let ro = arr.try_readonly()?;
                let input = ro.as_slice()?;
                let rt = root.unwrap_or(0);
                comm.run(py, |c| c.reduce(input, &mut [], native, rt))
            }
            _ => Err(PyValueError::new_err("recvbuf is required")),
        }
    }, bool => {
        if matches!(native, Op::Sum | Op::Prod) {
            return Err(PyTypeError::new_err(
                "SUM and PROD are not defined for bool arrays (use LAND, LOR, BAND, BOR, MIN or MAX)",
            ));
        }
        // Booleans as bytes: copy in, reduce, copy out (bool arrays are small).
        let to_u8 = |a: &Bound<'_, PyAny>| -> PyResult<Vec<u8>> {
            let arr = a.cast::<PyArrayDyn<bool>>()?;
            Ok(arr.try_readonly()?.as_slice()?.iter().map(|&b| u8::from(b)).collect())
        };
        let input = match send {
            Some(s) => to_u8(s)?,
            None => to_u8(recv.expect("checked above"))?,
        };
        let mut out = input.clone();
        match root {
            None => comm.run(py, |c| c.allreduce(&mut out, native))?,
            Some(rt) => comm.run(py, |c| c.reduce(&input, &mut out, native, rt))?,
        }
        if let (true, Some(r)) = (significant, recv) {
            let arr = r.cast::<PyArrayDyn<bool>>()?;
            let mut rw = arr.try_readwrite()?;
            let dst = rw.as_slice_mut()?;
            if dst.len() != out.len() {
                return Err(PyValueError::new_err("sendbuf and recvbuf differ in length"));
            }
            for (d, s) in dst.iter_mut().zip(&out) {
                *d = *s != 0;
            }
        }
        Ok(())
    })
}

/// A Python buffer operator as a vargr operator for one call: `function(invec,
/// inoutvec)` on numpy arrays of the call's dtype. An exception inside is printed and
/// leaves `inoutvec` as it was (the collective must go on on every rank).
fn user_buffer_op(op: &PyOp, dtype: Py<numpy::PyArrayDescr>) -> PyResult<Op> {
    let OpKind::User { func, commute } = &op.kind else {
        unreachable!("native operators are handled by the caller")
    };
    let func = Python::attach(|py| func.clone_ref(py));
    let f = move |inout: &mut [u8], input: &[u8]| {
        Python::attach(|py| {
            let r = (|| -> PyResult<()> {
                let np = py.import("numpy")?;
                let d = dtype.bind(py);
                let a = np.call_method1("frombuffer", (PyBytes::new(py, input), d))?;
                let b = np
                    .call_method1("frombuffer", (PyBytes::new(py, inout), d))?
                    .call_method0("copy")?;
                func.bind(py).call1((&a, &b))?;
                let out = b.call_method0("tobytes")?;
                let out = out.cast::<PyBytes>()?.as_bytes();
                if out.len() == inout.len() {
                    inout.copy_from_slice(out);
                }
                Ok(())
            })();
            if let Err(e) = r {
                e.print(py);
            }
        })
    };
    Ok(if *commute {
        Op::user(&op.name, f)
    } else {
        Op::user_noncommutative(&op.name, f)
    })
}

fn op_or_sum<'a>(op: Option<&'a Bound<'_, PyOp>>, sum: &'a PyOp) -> &'a PyOp {
    op.map(|o| o.get()).unwrap_or(sum)
}

static SUM: OnceLock<PyOp> = OnceLock::new();

fn sum_op() -> &'static PyOp {
    SUM.get_or_init(|| PyOp::builtin(Op::Sum))
}

#[pymethods]
impl PyComm {
    /// This rank's number in the communicator.
    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    #[getter]
    fn size(&self) -> usize {
        self.size
    }

    #[allow(non_snake_case)]
    fn Get_rank(&self) -> usize {
        self.rank
    }

    #[allow(non_snake_case)]
    fn Get_size(&self) -> usize {
        self.size
    }

    /// Blocks until every rank has called it.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |c| c.barrier())
    }

    #[allow(non_snake_case)]
    fn Barrier(&self, py: Python<'_>) -> PyResult<()> {
        self.barrier(py)
    }

    /// Every rank gets the reduction of every rank's `sendobj` by `op` (default SUM).
    /// Numbers and numpy arrays reduce natively (same type and shape on every rank);
    /// other objects are pickled and reduced in rank order.
    #[pyo3(signature = (sendobj, op = None))]
    fn allreduce<'py>(
        &self,
        py: Python<'py>,
        sendobj: &Bound<'py, PyAny>,
        op: Option<&Bound<'py, PyOp>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = op_or_sum(op, sum_op());
        if let Some(native) = op.native() {
            if let Ok(f) = sendobj.cast_exact::<PyFloat>() {
                let mut x = [f.value()];
                self.run(py, |c| c.allreduce(&mut x, native))?;
                return Ok(PyFloat::new(py, x[0]).into_any());
            }
            if let Some(r) = self.native_int(py, sendobj, native, None)? {
                return Ok(r);
            }
            if let Some(r) = self.native_array(py, sendobj, native, None)? {
                return Ok(r);
            }
        }
        let (all, counts) = self.allgather_bytes(py, dumps(sendobj)?)?;
        op.fold(PyComm::unpickle_all(py, &all, &counts)?)
    }

    /// The reduction of every rank's `sendobj` at `root` (None elsewhere).
    #[pyo3(signature = (sendobj, op = None, root = 0))]
    fn reduce<'py>(
        &self,
        py: Python<'py>,
        sendobj: &Bound<'py, PyAny>,
        op: Option<&Bound<'py, PyOp>>,
        root: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.check_root(root)?;
        let op = op_or_sum(op, sum_op());
        if let Some(native) = op.native() {
            if let Ok(f) = sendobj.cast_exact::<PyFloat>() {
                let x = [f.value()];
                let mut out = [0.0f64];
                self.run(py, |c| c.reduce(&x, &mut out, native, root))?;
                return Ok(if self.rank == root {
                    PyFloat::new(py, out[0]).into_any()
                } else {
                    py.None().into_bound(py)
                });
            }
            if let Some(r) = self.native_int(py, sendobj, native, Some(root))? {
                return Ok(r);
            }
            if let Some(r) = self.native_array(py, sendobj, native, Some(root))? {
                return Ok(r);
            }
        }
        match self.gather_bytes(py, dumps(sendobj)?, root)? {
            Some((all, counts)) => op.fold(PyComm::unpickle_all(py, &all, &counts)?),
            None => Ok(py.None().into_bound(py)),
        }
    }

    /// The root's `obj` on every rank (pickled; the root gets its own object back).
    #[pyo3(signature = (obj = None, root = 0))]
    fn bcast<'py>(
        &self,
        py: Python<'py>,
        obj: Option<Bound<'py, PyAny>>,
        root: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.check_root(root)?;
        let obj = obj.unwrap_or_else(|| py.None().into_bound(py));
        // One collective for small objects: the first block carries the length too.
        const HEAD: usize = 256;
        let is_root = self.rank == root;
        let data = if is_root { dumps(&obj)? } else { Vec::new() };
        let mut head = [0u8; HEAD];
        if is_root {
            head[..8].copy_from_slice(&(data.len() as u64).to_le_bytes());
            let n = data.len().min(HEAD - 8);
            head[8..8 + n].copy_from_slice(&data[..n]);
        }
        let body = self.run(py, |c| {
            c.bcast(&mut head, root)?;
            let len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes")) as usize;
            let first = len.min(HEAD - 8);
            let mut body = Vec::with_capacity(len);
            body.extend_from_slice(&head[8..8 + first]);
            if len > first {
                let mut rest = if is_root {
                    data[first..].to_vec()
                } else {
                    vec![0u8; len - first]
                };
                c.bcast(&mut rest, root)?;
                body.extend_from_slice(&rest);
            }
            Ok(body)
        })?;
        if is_root {
            return Ok(obj);
        }
        loads(py, &body)
    }

    /// Every rank's `sendobj`, as a list in rank order, on every rank.
    fn allgather<'py>(
        &self,
        py: Python<'py>,
        sendobj: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let (all, counts) = self.allgather_bytes(py, dumps(sendobj)?)?;
        PyList::new(py, PyComm::unpickle_all(py, &all, &counts)?)
    }

    /// Every rank's `sendobj` as a list at `root` (None elsewhere).
    #[pyo3(signature = (sendobj, root = 0))]
    fn gather<'py>(
        &self,
        py: Python<'py>,
        sendobj: &Bound<'py, PyAny>,
        root: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        match self.gather_bytes(py, dumps(sendobj)?, root)? {
            Some((all, counts)) => {
                Ok(PyList::new(py, PyComm::unpickle_all(py, &all, &counts)?)?.into_any())
            }
            None => Ok(py.None().into_bound(py)),
        }
    }

    /// Element `i` of the root's sequence `sendobj` (one per rank) on rank `i`.
    #[pyo3(signature = (sendobj = None, root = 0))]
    fn scatter<'py>(
        &self,
        py: Python<'py>,
        sendobj: Option<Bound<'py, PyAny>>,
        root: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.check_root(root)?;
        let is_root = self.rank == root;
        let (mut flat, mut counts) = (Vec::new(), Vec::new());
        if is_root {
            let seq = sendobj.ok_or_else(|| {
                PyValueError::new_err("scatter: the root must pass a sequence of size objects")
            })?;
            let items: Vec<Bound<'py, PyAny>> = seq.try_iter()?.collect::<PyResult<_>>()?;
            if items.len() != self.size {
                return Err(PyValueError::new_err(format!(
                    "scatter: the root passed {} objects for {} ranks",
                    items.len(),
                    self.size
                )));
            }
            for it in &items {
                let b = dumps(it)?;
                counts.push(b.len());
                flat.extend_from_slice(&b);
            }
        }
        let mine = self.run(py, |c| {
            let lens: Vec<u64> = counts.iter().map(|&n| n as u64).collect();
            let mut my_len = [0u64];
            c.scatter(&lens, &mut my_len, root)?;
            let mut mine = vec![0u8; my_len[0] as usize];
            c.scatterv(
                &flat,
                &counts,
                &vargr_coll::packed_displs(&counts),
                &mut mine,
                root,
            )?;
            Ok(mine)
        })?;
        loads(py, &mine)
    }

    /// Element `j` of every rank's sequence (one object per rank) goes to rank `j`;
    /// returns the list of what every rank sent to this one.
    fn alltoall<'py>(
        &self,
        py: Python<'py>,
        sendobj: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let items: Vec<Bound<'py, PyAny>> = sendobj.try_iter()?.collect::<PyResult<_>>()?;
        if items.len() != self.size {
            return Err(PyValueError::new_err(format!(
                "alltoall: {} objects for {} ranks",
                items.len(),
                self.size
            )));
        }
        let mut flat = Vec::new();
        let mut counts = Vec::with_capacity(items.len());
        for it in &items {
            let b = dumps(it)?;
            counts.push(b.len());
            flat.extend_from_slice(&b);
        }
        let size = self.size;
        let (all, rcounts) = self.run(py, |c| {
            let lens: Vec<u64> = counts.iter().map(|&n| n as u64).collect();
            let mut rlens = vec![0u64; size];
            c.alltoall(&lens, &mut rlens)?;
            let rcounts: Vec<usize> = rlens.iter().map(|&n| n as usize).collect();
            let mut all = vec![0u8; rcounts.iter().sum()];
            c.alltoallv(
                &flat,
                &counts,
                &vargr_coll::packed_displs(&counts),
                &mut all,
                &rcounts,
                &vargr_coll::packed_displs(&rcounts),
            )?;
            Ok((all, rcounts))
        })?;
        PyList::new(py, PyComm::unpickle_all(py, &all, &rcounts)?)
    }

    /// Sends a picklable object to rank `dest` (eager: returns at once).
    #[pyo3(signature = (obj, dest, tag = 0))]
    fn send(&self, py: Python<'_>, obj: &Bound<'_, PyAny>, dest: usize, tag: u64) -> PyResult<()> {
        let data = Bytes::from(dumps(obj)?);
        self.run(py, |c| c.send_bytes(dest, tag, data))
    }

    /// Receives the next object from rank `source` with `tag` (either any if None, as
    /// mpi4py's `ANY_SOURCE` and `ANY_TAG`).
    #[pyo3(signature = (buf = None, source = None, tag = None))]
    fn recv<'py>(
        &self,
        py: Python<'py>,
        buf: Option<&Bound<'py, PyAny>>,
        source: Option<usize>,
        tag: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = buf;
        let m = self.run(py, |c| c.recv_any(source, tag))?;
        loads(py, &m.data)
    }

    // ---- raw point to point, for vargr.MPI ---------------------------------------------

    /// Sends `data` (any object with the buffer protocol, sent as its bytes).
    fn _send_bytes(&self, py: Python<'_>, data: &[u8], dest: usize, tag: u64) -> PyResult<()> {
        let data = Bytes::copy_from_slice(data);
        self.run(py, |c| c.send_bytes(dest, tag, data))
    }

    /// Like `_send_bytes`, as a request (complete at once: sends are eager).
    fn _isend_bytes(
        slf: &Bound<'_, Self>,
        data: &[u8],
        dest: usize,
        tag: u64,
    ) -> PyResult<crate::p2p::PyRequest> {
        let data = Bytes::copy_from_slice(data);
        let req = slf
            .get()
            .run(slf.py(), |c| c.isend_bytes(dest, tag, data))?;
        Ok(crate::p2p::PyRequest::new(slf.clone().unbind(), req))
    }

    /// Receives the next message from `source` with `tag` (either any if None):
    /// `(source, tag, bytes)`.
    #[pyo3(signature = (source = None, tag = None))]
    fn _recv_bytes<'py>(
        &self,
        py: Python<'py>,
        source: Option<usize>,
        tag: Option<u64>,
    ) -> PyResult<crate::p2p::Message<'py>> {
        let m = self.run(py, |c| c.recv_any(source, tag))?;
        Ok(crate::p2p::message(py, &m))
    }

    /// Posts a receive from `source` with `tag` (either any if None).
    #[pyo3(signature = (source = None, tag = None))]
    fn _irecv(
        slf: &Bound<'_, Self>,
        source: Option<usize>,
        tag: Option<u64>,
    ) -> PyResult<crate::p2p::PyRequest> {
        let req = slf.get().run(slf.py(), |c| c.irecv(source, tag))?;
        Ok(crate::p2p::PyRequest::new(slf.clone().unbind(), req))
    }

    /// `(source, tag, length)` of the message a receive from `source` with `tag` would
    /// get, waiting for one if `wait`, else None if there is none yet.
    #[pyo3(signature = (source = None, tag = None, wait = true))]
    fn _probe(
        &self,
        py: Python<'_>,
        source: Option<usize>,
        tag: Option<u64>,
        wait: bool,
    ) -> PyResult<Option<(usize, u64, usize)>> {
        let st = self.run(py, |c| {
            if wait {
                c.probe(source, tag).map(Some)
            } else {
                c.iprobe(source, tag)
            }
        })?;
        Ok(st.map(|s| (s.source, s.tag, s.len)))
    }

    // ---- buffers (uppercase) ----------------------------------------------------------

    /// `recvbuf` = reduction of every rank's `sendbuf` (numpy arrays of one dtype and
    /// size); `sendbuf=vargr.IN_PLACE` reduces `recvbuf` in place.
    #[allow(non_snake_case)]
    #[pyo3(signature = (sendbuf, recvbuf, op = None))]
    fn Allreduce(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        op: Option<&Bound<'_, PyOp>>,
    ) -> PyResult<()> {
        let send = (!sendbuf.is_instance_of::<PyInPlace>()).then_some(sendbuf);
        buffer_reduce(self, py, send, Some(recvbuf), op_or_sum(op, sum_op()), None)
    }

    /// The reduction of every rank's `sendbuf` into the root's `recvbuf` (ignored
    /// elsewhere, may be None). At the root `sendbuf=vargr.IN_PLACE` reduces in place.
    #[allow(non_snake_case)]
    #[pyo3(signature = (sendbuf, recvbuf = None, op = None, root = 0))]
    fn Reduce(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: Option<&Bound<'_, PyAny>>,
        op: Option<&Bound<'_, PyOp>>,
        root: usize,
    ) -> PyResult<()> {
        self.check_root(root)?;
        let send = (!sendbuf.is_instance_of::<PyInPlace>()).then_some(sendbuf);
        let recv = recvbuf.filter(|r| !r.is_none());
        buffer_reduce(self, py, send, recv, op_or_sum(op, sum_op()), Some(root))
    }

    /// The root's `buf` into every rank's `buf` (same size everywhere; any dtype).
    #[allow(non_snake_case)]
    #[pyo3(signature = (buf, root = 0))]
    fn Bcast(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, root: usize) -> PyResult<()> {
        self.check_root(root)?;
        let raw = Raw::of(buf, "buf", self.rank != root)?;
        // SAFETY: `buf` stays referenced for the call; nothing else borrows it here.
        self.run(py, move |c| c.bcast(unsafe { raw.bytes_mut() }, root))
    }

    /// Every rank's `sendbuf` side by side in every rank's `recvbuf` (size times as
    /// large; any dtype).
    #[allow(non_snake_case)]
    fn Allgather(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let s = Raw::of(sendbuf, "sendbuf", false)?;
        let r = Raw::of(recvbuf, "recvbuf", true)?;
        if s.overlaps(&r) {
            return Err(PyValueError::new_err("sendbuf and recvbuf overlap"));
        }
        // SAFETY: two live, disjoint arrays, borrowed only for the call.
        self.run(py, move |c| unsafe {
            c.allgather(s.bytes(), r.bytes_mut())
        })
    }

    /// Every rank's `sendbuf` side by side in the root's `recvbuf` (ignored elsewhere).
    #[allow(non_snake_case)]
    #[pyo3(signature = (sendbuf, recvbuf = None, root = 0))]
    fn Gather(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: Option<&Bound<'_, PyAny>>,
        root: usize,
    ) -> PyResult<()> {
        self.check_root(root)?;
        let s = Raw::of(sendbuf, "sendbuf", false)?;
        let r = match recvbuf.filter(|r| !r.is_none() && self.rank == root) {
            Some(r) => Some(Raw::of(r, "recvbuf", true)?),
            None if self.rank == root => {
                return Err(PyValueError::new_err("Gather: the root needs a recvbuf"))
            }
            None => None,
        };
        if r.as_ref().is_some_and(|r| s.overlaps(r)) {
            return Err(PyValueError::new_err("sendbuf and recvbuf overlap"));
        }
        // SAFETY: as in Allgather.
        self.run(py, move |c| unsafe {
            match &r {
                Some(r) => c.gather(s.bytes(), r.bytes_mut(), root),
                None => c.gather(s.bytes(), &mut [], root),
            }
        })
    }

    /// Consecutive blocks of the root's `sendbuf` (ignored elsewhere) into every rank's
    /// `recvbuf`.
    #[allow(non_snake_case)]
    #[pyo3(signature = (sendbuf, recvbuf, root = 0))]
    fn Scatter(
        &self,
        py: Python<'_>,
        sendbuf: Option<&Bound<'_, PyAny>>,
        recvbuf: &Bound<'_, PyAny>,
        root: usize,
    ) -> PyResult<()> {
        self.check_root(root)?;
        let r = Raw::of(recvbuf, "recvbuf", true)?;
        let s = match sendbuf.filter(|s| !s.is_none() && self.rank == root) {
            Some(s) => Some(Raw::of(s, "sendbuf", false)?),
            None if self.rank == root => {
                return Err(PyValueError::new_err("Scatter: the root needs a sendbuf"))
            }
            None => None,
        };
        if s.as_ref().is_some_and(|s| s.overlaps(&r)) {
            return Err(PyValueError::new_err("sendbuf and recvbuf overlap"));
        }
        // SAFETY: as in Allgather.
        self.run(py, move |c| unsafe {
            match &s {
                Some(s) => c.scatter(s.bytes(), r.bytes_mut(), root),
                None => c.scatter(&[], r.bytes_mut(), root),
            }
        })
    }

    /// Block `j` of every rank's `sendbuf` into block `i` of rank `j`'s `recvbuf`.
    #[allow(non_snake_case)]
    fn Alltoall(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let s = Raw::of(sendbuf, "sendbuf", false)?;
        let r = Raw::of(recvbuf, "recvbuf", true)?;
        if s.overlaps(&r) {
            return Err(PyValueError::new_err("sendbuf and recvbuf overlap"));
        }
        // SAFETY: as in Allgather.
        self.run(py, move |c| unsafe { c.alltoall(s.bytes(), r.bytes_mut()) })
    }

    /// Sends a numpy buffer to rank `dest` (eager).
    #[allow(non_snake_case)]
    #[pyo3(signature = (buf, dest, tag = 0))]
    fn Send(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, dest: usize, tag: u64) -> PyResult<()> {
        let a = array(buf, "buf")?;
        let raw = Raw::of(buf, "buf", false)?;
        // Typed sends tell a compressing link what the bytes hold.
        match num_of(a) {
            Some(n) if n != Num::Bool => with_num!(n, T => {
                let arr = buf.cast::<PyArrayDyn<T>>()?;
                let ro = arr.try_readonly()?;
                let s = ro.as_slice()?;
                self.run(py, |c| c.send(dest, tag, s))
            }, bool => unreachable!("excluded above")),
            _ => {
                // SAFETY: `buf` is live for the call and only read.
                let data = Bytes::copy_from_slice(unsafe { raw.bytes() });
                self.run(py, move |c| c.send_bytes(dest, tag, data))
            }
        }
    }

    /// Receives into a numpy buffer from rank `source`; returns the number of elements
    /// received (a longer message is an error).
    #[allow(non_snake_case)]
    #[pyo3(signature = (buf, source, tag = 0))]
    fn Recv(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        source: usize,
        tag: u64,
    ) -> PyResult<usize> {
        let raw = Raw::of(buf, "buf", true)?;
        let item = array(buf, "buf")?.dtype().itemsize().max(1);
        let data = self.run(py, |c| c.recv_bytes(source, tag))?;
        if data.len() > raw.len || data.len() % item != 0 {
            return Err(errors::new_err(
                Kind::Collective,
                format!(
                    "Recv: a message of {} bytes does not fit a buffer of {} bytes ({}-byte elements)",
                    data.len(),
                    raw.len,
                    item
                ),
            ));
        }
        // SAFETY: `buf` is live, writable and not otherwise borrowed during the copy.
        unsafe { raw.bytes_mut()[..data.len()].copy_from_slice(&data) };
        Ok(data.len() / item)
    }

    // ---- communicators and conditional allreduce -------------------------------------

    /// Collective: ranks with the same `color` form a new communicator, ordered by
    /// (`key`, rank); `color=None` takes part and gets None.
    #[allow(non_snake_case)]
    #[pyo3(signature = (color = None, key = 0))]
    fn Split(&self, py: Python<'_>, color: Option<u32>, key: i32) -> PyResult<Option<PyComm>> {
        Ok(self.run(py, |c| c.split(color, key))?.map(PyComm::new))
    }

    /// Collective: a copy of this communicator with its own traffic (e.g. for a
    /// library, or another thread).
    #[allow(non_snake_case)]
    fn Dup(&self, py: Python<'_>) -> PyResult<PyComm> {
        Ok(PyComm::new(self.run(py, |c| c.dup())?))
    }

    /// Sets up a conditional allreduce (collective): `CondAllreduce.__call__(value)`
    /// tells whether `reduce(op, values) <pred> threshold` holds, deciding without
    /// remote sites when this site's values settle it.
    #[pyo3(signature = (threshold, pred = ">", op = None))]
    fn conditional(
        &self,
        py: Python<'_>,
        threshold: f64,
        pred: &str,
        op: Option<&Bound<'_, PyOp>>,
    ) -> PyResult<PyCondAllreduce> {
        let (cop, p) = cond_args(op, pred)?;
        let c = self.run(py, |c| c.conditional(cop, p, threshold))?;
        Ok(PyCondAllreduce {
            inner: Mutex::new(Some(c)),
        })
    }

    /// Whether `reduce(op, every rank's value) <pred> threshold` holds (the seed's
    /// conditional allreduce: decided from this site's values alone when they settle
    /// it). The first call with given (threshold, pred, op) sets it up collectively.
    /// Contributions must have the sign that makes partial sums bounds of the total
    /// (non-negative for sum with > or >=).
    #[pyo3(signature = (value, threshold, pred = ">", op = None))]
    fn cond_allreduce(
        &self,
        py: Python<'_>,
        value: f64,
        threshold: f64,
        pred: &str,
        op: Option<&Bound<'_, PyOp>>,
    ) -> PyResult<PyCondOutcome> {
        let (cop, p) = cond_args(op, pred)?;
        let key: CondKey = (cop as u8, p as u8, threshold.to_bits());
        let mut conds = self.conds.try_lock().map_err(|_| busy())?;
        let cond = match conds.entry(key) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(self.run(py, |c| c.conditional(cop, p, threshold))?)
            }
        };
        let out = py
            .detach(|| block::interruptible(|| cond.cond_allreduce(value)))
            .map_err(errors::coll)?;
        Ok(PyCondOutcome::from(out))
    }

    fn __repr__(&self) -> String {
        format!("Comm(rank {} of {})", self.rank, self.size)
    }
}

impl PyComm {
    fn native_int<'py>(
        &self,
        py: Python<'py>,
        obj: &Bound<'py, PyAny>,
        op: &Op,
        root: Option<usize>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let is_bool = obj.cast_exact::<PyBool>().is_ok();
        if !is_bool && obj.cast_exact::<PyInt>().is_err() {
            return Ok(None);
        }
        let x = [obj.extract::<i64>()?];
        let mut out = x;
        match root {
            None => self.run(py, |c| c.allreduce(&mut out, op))?,
            Some(r) => self.run(py, |c| c.reduce(&x, &mut out, op, r))?,
        }
        if root.is_some_and(|r| r != self.rank) {
            return Ok(Some(py.None().into_bound(py)));
        }
        let logical = matches!(
            op,
            Op::Land | Op::Lor | Op::Band | Op::Bor | Op::Min | Op::Max
        );
        Ok(Some(if is_bool && logical {
            PyBool::new(py, out[0] != 0).to_owned().into_any()
        } else {
            out[0].into_pyobject(py)?.into_any()
        }))
    }

    fn native_array<'py>(
        &self,
        py: Python<'py>,
        obj: &Bound<'py, PyAny>,
        op: &Op,
        root: Option<usize>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        if let Ok(a) = obj.cast::<PyUntypedArray>() {
            return self.reduce_array(py, a, op, root);
        }
        // numpy scalars (np.float32(1.5)): as 0-d arrays, back to scalars.
        if obj.is_instance(numpy_generic(py)?.bind(py))? {
            let a = py.import("numpy")?.call_method1("asarray", (obj,))?;
            let a = a.cast::<PyUntypedArray>()?;
            return match self.reduce_array(py, a, op, root)? {
                Some(r) if !r.is_none() => Ok(Some(r.get_item(PyTuple::empty(py))?)),
                other => Ok(other),
            };
        }
        Ok(None)
    }
}

fn cond_args(op: Option<&Bound<'_, PyOp>>, pred: &str) -> PyResult<(CondOp, Predicate)> {
    let cop = match op.map(|o| o.get().native()) {
        None => CondOp::Sum,
        Some(Some(Op::Sum)) => CondOp::Sum,
        Some(Some(Op::Max)) => CondOp::Max,
        Some(Some(Op::Min)) => CondOp::Min,
        _ => {
            return Err(PyValueError::new_err(
                "cond_allreduce supports SUM, MAX and MIN",
            ))
        }
    };
    let p = match pred.trim() {
        ">" => Predicate::Greater,
        ">=" => Predicate::GreaterEq,
        "<" => Predicate::Less,
        "<=" => Predicate::LessEq,
        other => {
            return Err(PyValueError::new_err(format!(
                "predicate {other:?}: expected >, >=, < or <="
            )))
        }
    };
    Ok((cop, p))
}

/// What one conditional allreduce returned; true when the condition holds.
#[pyclass(frozen, module = "vargr", name = "CondOutcome")]
pub struct PyCondOutcome {
    /// Whether `result <pred> threshold` holds for the global result.
    #[pyo3(get)]
    holds: bool,
    /// The value the decision was made on: the global result when every site's value
    /// was used, else a partial result (only for the test, and for logging).
    #[pyo3(get)]
    value: f64,
    /// Decided from this site's values alone.
    #[pyo3(get)]
    local: bool,
    /// Remote sites whose values were used.
    #[pyo3(get)]
    remote_used: u32,
}

impl From<vargr_coll::CondOutcome> for PyCondOutcome {
    fn from(o: vargr_coll::CondOutcome) -> Self {
        PyCondOutcome {
            holds: o.holds,
            value: o.value,
            local: o.local,
            remote_used: o.remote_used,
        }
    }
}

#[pymethods]
impl PyCondOutcome {
    fn __bool__(&self) -> bool {
        self.holds
    }

    fn __repr__(&self) -> String {
        format!(
            "CondOutcome(holds={}, value={}, local={}, remote_used={})",
            if self.holds { "True" } else { "False" },
            self.value,
            if self.local { "True" } else { "False" },
            self.remote_used
        )
    }
}

/// A conditional allreduce set up by `Comm.conditional`; call it once per iteration on
/// every rank. `close()` (or leaving a `with` block) is collective across sites.
#[pyclass(frozen, module = "vargr", name = "CondAllreduce")]
pub struct PyCondAllreduce {
    inner: Mutex<Option<CondAllreduce>>,
}

#[pymethods]
impl PyCondAllreduce {
    fn __call__(&self, py: Python<'_>, value: f64) -> PyResult<PyCondOutcome> {
        let mut g = self.inner.try_lock().map_err(|_| busy())?;
        let c = g.as_mut().ok_or_else(|| {
            errors::new_err(Kind::Collective, "the conditional allreduce was closed")
        })?;
        let out = py
            .detach(|| block::interruptible(|| c.cond_allreduce(value)))
            .map_err(errors::coll)?;
        Ok(out.into())
    }

    /// Stops the prefetch threads once every site has closed.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let c = self.inner.try_lock().map_err(|_| busy())?.take();
        match c {
            Some(c) => py.detach(|| c.close()).map_err(errors::coll),
            None => Ok(()),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}
