# ruff: noqa: N999 -- the module is named MPI, as mpi4py's is.
"""mpi4py's ``MPI`` namespace on vargr: ``from vargr import MPI`` instead of
``from mpi4py import MPI``, and start the program with ``vargr run -n N python prog.py``.

The names, signatures and semantics follow mpi4py (and so MPI): ``COMM_WORLD``,
lower-case methods that pickle Python objects, upper-case methods on buffers given as a
bare buffer or as ``[buf, MPI.DOUBLE]``, ``[buf, count, MPI.INT]`` or
``[buf, (counts, displs), MPI.DOUBLE]``, non-blocking point-to-point with ``Request``,
``ANY_SOURCE``/``ANY_TAG``, ``Status``, the reduction operators including ``MINLOC``,
``MAXLOC`` and ``Op.Create``, ``Split``/``Dup``, Cartesian grids, and errors as
``MPI.Exception`` with an error class.

What runs where: point-to-point and the common collectives go straight to vargr's Rust
core (the wildcard matching, the collective algorithms, the compressed links between
sites). Collectives that vargr has no algorithm for (``scan``, ``exscan``,
``reduce_scatter``, the ``v`` variants, reductions with ``LXOR``, ``BXOR``, ``MINLOC``,
``MAXLOC`` or a user operator on buffers) are built here from vargr's gathers, which is
correct for every input but moves more data than a dedicated algorithm would.
Non-blocking collectives (``Iallreduce`` …) complete when called, and sends are eager
(``ssend``/``issend`` complete once vargr holds the data, before the receive). Not provided:
one-sided communication (``Win``), ``File`` (MPI-IO), dynamic processes (``Spawn``) and
inter-communicators.
"""

from __future__ import annotations

import os
import pickle as _pickle
import socket
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import numpy.typing as npt

from . import World as _join
from . import _vargr

if TYPE_CHECKING:  # the stub's dependency, not the package's
    from typing_extensions import Self

Array = npt.NDArray[Any]

# ---- constants -------------------------------------------------------------------------

ANY_SOURCE = -1
ANY_TAG = -1
PROC_NULL = -2
ROOT = -3
UNDEFINED = -32766
BOTTOM: Any = None
_TAG_MAX = (1 << 31) - 1
IDENT, CONGRUENT, SIMILAR, UNEQUAL = 0, 1, 2, 3
CART, GRAPH, DIST_GRAPH = 1, 2, 3
THREAD_SINGLE, THREAD_FUNNELED, THREAD_SERIALIZED, THREAD_MULTIPLE = 0, 1, 2, 3
COMM_TYPE_SHARED = 1
MAX_PROCESSOR_NAME = 256
VERSION, SUBVERSION = 3, 1
IN_PLACE: Any = _vargr.IN_PLACE

# Attribute keys of Comm.Get_attr (``comm.Get_attr(MPI.TAG_UB)`` is the largest tag).
TAG_UB, HOST, IO, WTIME_IS_GLOBAL, APPNUM, UNIVERSE_SIZE, LASTUSEDCODE = range(7)

# Array orders (Create_subarray), file open modes and seek origins (Open MPI's values).
ORDER_C, ORDER_FORTRAN = 0, 1
MODE_CREATE = 1
MODE_RDONLY = 2
MODE_WRONLY = 4
MODE_RDWR = 8
MODE_DELETE_ON_CLOSE = 16
MODE_UNIQUE_OPEN = 32
MODE_EXCL = 64
MODE_APPEND = 128
MODE_SEQUENTIAL = 256
SEEK_SET, SEEK_CUR, SEEK_END = 600, 602, 604

# Error classes (the values of MPICH and Open MPI agree on these).
SUCCESS = 0
ERR_BUFFER = 1
ERR_COUNT = 2
ERR_TYPE = 3
ERR_TAG = 4
ERR_COMM = 5
ERR_RANK = 6
ERR_REQUEST = 7
ERR_ROOT = 8
ERR_GROUP = 9
ERR_OP = 10
ERR_TOPOLOGY = 11
ERR_DIMS = 12
ERR_ARG = 13
ERR_UNKNOWN = 14
ERR_TRUNCATE = 15
ERR_OTHER = 16
ERR_INTERN = 17
ERR_IN_STATUS = 18
ERR_PENDING = 19
# File errors (Open MPI's values; programs compare against these names).
ERR_ACCESS = 20
ERR_AMODE = 21
ERR_BAD_FILE = 22
ERR_FILE_EXISTS = 25
ERR_FILE = 27
ERR_IO = 35
ERR_NO_SPACE = 36
ERR_NO_SUCH_FILE = 37
ERR_UNSUPPORTED_OPERATION = 52
ERR_LASTCODE = 92

_ERROR_NAMES = {
    v: k
    for k, v in list(globals().items())
    if k.startswith("ERR_") or k == "SUCCESS"
    if isinstance(v, int)
}


class Exception(RuntimeError):
    """An MPI error: ``Get_error_class()`` tells which kind (``MPI.ERR_RANK`` …)."""

    def __init__(self, ierr: int = ERR_OTHER, message: str = "") -> None:
        self.ierr = ierr
        self.message = message or Get_error_string(ierr)
        super().__init__(self.message)

    @property
    def error_class(self) -> int:
        return self.ierr

    @property
    def error_code(self) -> int:
        return self.ierr

    def Get_error_class(self) -> int:
        return self.ierr

    def Get_error_code(self) -> int:
        return self.ierr

    def Get_error_string(self) -> str:
        return self.message

    def __int__(self) -> int:
        return self.ierr


def Get_error_class(errorcode: int) -> int:
    return errorcode


def Get_error_string(errorcode: int) -> str:
    name = _ERROR_NAMES.get(errorcode, "ERR_UNKNOWN")
    return f"MPI_{name}: " + name.replace("ERR_", "").lower().replace("_", " ")


def _error(e: BaseException) -> Exception:
    """vargr's error as an MPI error of the class that fits it."""
    if isinstance(e, Exception):
        return e
    text = str(e)
    if "does not fit" in text or "truncated" in text or "bytes, expected" in text:
        cls = ERR_TRUNCATE
    elif "out of range" in text and "rank" in text:
        cls = ERR_RANK
    elif "tag" in text and "too large" in text:
        cls = ERR_TAG
    elif "request" in text:
        cls = ERR_REQUEST
    else:
        cls = ERR_OTHER
    return Exception(cls, text)


def _call(f: Callable[..., Any], *args: Any) -> Any:
    try:
        return f(*args)
    except _vargr.VargrError as e:
        raise _error(e) from e


# ---- environment -----------------------------------------------------------------------

_state = {"finalized": False}


def Init() -> None:
    """A no-op: importing this module initialises, as with mpi4py."""


def Init_thread(required: int = THREAD_MULTIPLE) -> int:
    return THREAD_SERIALIZED


def Query_thread() -> int:
    return THREAD_SERIALIZED


def Is_thread_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def Finalize() -> None:
    """Flushes what is still queued for other ranks; further calls are no-ops."""
    if not _state["finalized"]:
        _state["finalized"] = True
        _vargr.finish()


def Is_initialized() -> bool:
    return True


def Is_finalized() -> bool:
    return _state["finalized"]


def Wtime() -> float:
    return time.perf_counter()


def Wtick() -> float:
    return time.get_clock_info("perf_counter").resolution


def Get_processor_name() -> str:
    return socket.gethostname()


def Get_version() -> tuple[int, int]:
    return (VERSION, SUBVERSION)


def get_vendor() -> tuple[str, tuple[int, int, int]]:
    """The MPI implementation underneath, as mpi4py names it."""
    return ("vargr", (0, 1, 0))


def Get_library_version() -> str:
    from . import __name__ as pkg

    return f"{pkg} (vargr's mpi4py-compatible layer)"


def Compute_dims(nnodes: int, dims: int | Sequence[int]) -> list[int]:
    """Balanced grid dimensions, as ``MPI_Dims_create`` (zeros are filled in)."""
    out = [0] * dims if isinstance(dims, int) else list(dims)
    fixed = 1
    for d in out:
        if d < 0:
            raise Exception(ERR_DIMS, f"negative dimension in {out}")
        if d:
            fixed *= d
    if fixed == 0 or nnodes % fixed:
        raise Exception(ERR_DIMS, f"{nnodes} nodes do not fill dimensions {out}")
    free = [i for i, d in enumerate(out) if d == 0]
    left = nnodes // fixed
    factors: list[int] = []
    n, f = left, 2
    while n > 1:
        while n % f == 0:
            factors.append(f)
            n //= f
        f += 1
    sizes = [1] * len(free)
    for f in sorted(factors, reverse=True):
        sizes[sizes.index(min(sizes))] *= f
    for i, s in zip(free, sorted(sizes, reverse=True)):
        out[i] = s
    return out


# ---- pickling ---------------------------------------------------------------------------


class Pickle:
    """How lower-case calls turn objects into bytes (mpi4py's ``MPI.pickle``):
    ``dumps``/``loads`` may be replaced, e.g. by dill or cloudpickle."""

    def __init__(
        self,
        dumps: Callable[..., bytes] = _pickle.dumps,
        loads: Callable[..., Any] = _pickle.loads,
        protocol: int | None = None,
    ) -> None:
        self._dumps, self._loads = dumps, loads
        self.PROTOCOL = _pickle.HIGHEST_PROTOCOL if protocol is None else protocol

    def dumps(self, obj: Any) -> bytes:
        return self._dumps(obj, self.PROTOCOL)

    def loads(self, data: bytes) -> Any:
        return self._loads(data)


pickle = Pickle()


# ---- info and memory -------------------------------------------------------------------


class Info(dict[str, str]):
    """Hints (``MPI_Info``): vargr takes none, but programs may pass them."""

    @staticmethod
    def Create(items: Any = None) -> Info:
        return Info(items or {})

    def Dup(self) -> Info:
        return Info(self)

    def Free(self) -> None:
        self.clear()

    def Get(self, key: str) -> str | None:
        return self.get(key)

    def Set(self, key: str, value: str) -> None:
        self[key] = value

    def Delete(self, key: str) -> None:
        del self[key]

    def Get_nkeys(self) -> int:
        return len(self)

    def Get_nthkey(self, n: int) -> str:
        return list(self)[n]


INFO_NULL = Info()
INFO_ENV = Info()
BSEND_OVERHEAD = 0


def Alloc_mem(size: int, info: Info | None = None) -> memoryview:
    return memoryview(bytearray(size))


def Free_mem(mem: memoryview) -> None:
    pass


def Attach_buffer(buf: Any) -> None:
    """Sends are eager, so a buffer for buffered sends is never needed."""


def Detach_buffer() -> Any:
    return None


# ---- datatypes -------------------------------------------------------------------------


class Datatype:
    """An element type, as numpy sees it (structured for the pair types of MINLOC)."""

    def __init__(self, name: str, dtype: Any) -> None:
        self.name = name
        self.dtype = np.dtype(dtype) if dtype is not None else None

    @property
    def size(self) -> int:
        return 0 if self.dtype is None else self.dtype.itemsize

    @property
    def extent(self) -> int:
        return self.size

    @property
    def lb(self) -> int:
        return 0

    @property
    def ub(self) -> int:
        return self.extent

    @property
    def typechar(self) -> str:
        return "" if self.dtype is None else self.dtype.char

    def Get_size(self) -> int:
        return self.size

    def Get_extent(self) -> tuple[int, int]:
        return (0, self.extent)

    def Get_name(self) -> str:
        return self.name

    def Commit(self) -> Datatype:
        return self

    def Free(self) -> None:
        pass

    def Dup(self) -> Datatype:
        return Datatype(self.name, self.dtype)

    def Create_contiguous(self, count: int) -> Datatype:
        if self.dtype is None:
            raise Exception(ERR_TYPE, "DATATYPE_NULL has no contiguous form")
        return Datatype(f"{self.name}x{count}", np.dtype((self.dtype, (count,))))

    # Derived types with gaps describe file views (MPI.File.Set_view's filetype); they
    # are not buffer types here.

    def Create_vector(self, count: int, blocklength: int, stride: int) -> Datatype:
        e = _type_runs(self)[2]
        return self.Create_hvector(count, blocklength, stride * e)

    def Create_hvector(self, count: int, blocklength: int, stride: int) -> Datatype:
        e = _type_runs(self)[2]
        return _Layout.of(self, [(i * stride, blocklength) for i in range(count)], e, "hvector")

    def Create_indexed(self, blocklengths: Sequence[int], displacements: Sequence[int]) -> Datatype:
        e = _type_runs(self)[2]
        return self.Create_hindexed(blocklengths, [d * e for d in displacements])

    def Create_hindexed(
        self, blocklengths: Sequence[int], displacements: Sequence[int]
    ) -> Datatype:
        if len(blocklengths) != len(displacements):
            raise Exception(ERR_ARG, "blocklengths and displacements differ in length")
        e = _type_runs(self)[2]
        return _Layout.of(self, list(zip(displacements, blocklengths)), e, "hindexed")

    def Create_indexed_block(self, blocklength: int, displacements: Sequence[int]) -> Datatype:
        return self.Create_indexed([blocklength] * len(displacements), displacements)

    def Create_subarray(
        self,
        sizes: Sequence[int],
        subsizes: Sequence[int],
        starts: Sequence[int],
        order: int = ORDER_C,
    ) -> Datatype:
        runs, size, e = _type_runs(self)
        if size != e or len(runs) != 1:
            raise Exception(ERR_TYPE, "subarrays of types with gaps are not supported")
        try:
            view = _vargr.View.subarray(
                0,
                list(sizes),
                list(subsizes),
                list(starts),
                "F" if order == ORDER_FORTRAN else "C",
                elem_bytes=e,
            )
        except (ValueError, OverflowError) as err:
            raise Exception(ERR_ARG, str(err)) from err
        extent = int(np.prod(sizes)) * e
        return _Layout(f"subarray({self.name})", view.runs, view.nbytes, extent, self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Datatype) and (self.name, self.dtype) == (other.name, other.dtype)

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"<mpi4py-compatible Datatype {self.name}>"


class _Layout(Datatype):
    """A derived type with gaps: byte runs within one extent (a file view's filetype)."""

    def __init__(
        self, name: str, runs: list[tuple[int, int]], size: int, extent: int, base: Datatype
    ) -> None:
        super().__init__(name, None)
        self.runs = runs
        self._size = size
        self._extent = extent
        self.base = base

    @staticmethod
    def of(old: Datatype, blocks: list[tuple[int, int]], old_extent: int, kind: str) -> _Layout:
        """Blocks of (byte displacement, count of `old`), each laid out as `old` is."""
        runs: list[tuple[int, int]] = []
        old_runs, old_size, _ = _type_runs(old)
        for disp, count in blocks:
            if disp < 0 or count < 0:
                raise Exception(
                    ERR_ARG, f"{kind}: negative displacement or count ({disp}, {count})"
                )
            for k in range(count):
                for off, n in old_runs:
                    at = disp + k * old_extent + off
                    if runs and runs[-1][0] + runs[-1][1] == at:
                        runs[-1] = (runs[-1][0], runs[-1][1] + n)
                    else:
                        runs.append((at, n))
        size = sum(c for _, c in blocks) * old_size
        extent = max((d + c * old_extent for d, c in blocks), default=0)
        return _Layout(f"{kind}({old.name})", runs, size, extent, old)

    @property
    def size(self) -> int:
        return self._size

    @property
    def extent(self) -> int:
        return self._extent

    def Dup(self) -> Datatype:
        return _Layout(self.name, list(self.runs), self._size, self._extent, self.base)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Layout) and (self.runs, self._extent) == (
            other.runs,
            other._extent,
        )

    def __hash__(self) -> int:
        return hash((self.name, self._extent))


def _type_runs(t: Datatype) -> tuple[list[tuple[int, int]], int, int]:
    """A type's byte runs within one extent, its size and its extent."""
    if isinstance(t, _Layout):
        return t.runs, t.size, t.extent
    if t.dtype is None:
        raise Exception(ERR_TYPE, "DATATYPE_NULL has no layout")
    return [(0, t.size)], t.size, t.extent


def _pair(value: str) -> Any:
    # The C structs: {value; int} with C's alignment.
    return np.dtype([("v", value), ("i", "i4")], align=True)


DATATYPE_NULL = Datatype("DATATYPE_NULL", None)
BYTE = Datatype("BYTE", "B")
PACKED = Datatype("PACKED", "B")
CHAR = Datatype("CHAR", "S1")
WCHAR = Datatype("WCHAR", "U1")
SIGNED_CHAR = Datatype("SIGNED_CHAR", "b")
UNSIGNED_CHAR = Datatype("UNSIGNED_CHAR", "B")
SHORT = Datatype("SHORT", "h")
UNSIGNED_SHORT = Datatype("UNSIGNED_SHORT", "H")
INT = Datatype("INT", "i")
UNSIGNED = UNSIGNED_INT = Datatype("UNSIGNED", "I")
LONG = Datatype("LONG", "l")
UNSIGNED_LONG = Datatype("UNSIGNED_LONG", "L")
LONG_LONG = Datatype("LONG_LONG", "q")
UNSIGNED_LONG_LONG = Datatype("UNSIGNED_LONG_LONG", "Q")
FLOAT = Datatype("FLOAT", "f")
DOUBLE = Datatype("DOUBLE", "d")
LONG_DOUBLE = Datatype("LONG_DOUBLE", "g")
C_BOOL = BOOL = Datatype("C_BOOL", "?")
INT8_T = Datatype("INT8_T", "i1")
INT16_T = Datatype("INT16_T", "i2")
INT32_T = Datatype("INT32_T", "i4")
INT64_T = Datatype("INT64_T", "i8")
UINT8_T = Datatype("UINT8_T", "u1")
UINT16_T = Datatype("UINT16_T", "u2")
UINT32_T = Datatype("UINT32_T", "u4")
UINT64_T = Datatype("UINT64_T", "u8")
AINT = OFFSET = COUNT = Datatype("AINT", "q")
C_COMPLEX = C_FLOAT_COMPLEX = Datatype("C_FLOAT_COMPLEX", "F")
C_DOUBLE_COMPLEX = Datatype("C_DOUBLE_COMPLEX", "D")
C_LONG_DOUBLE_COMPLEX = Datatype("C_LONG_DOUBLE_COMPLEX", "G")
CHARACTER = Datatype("CHARACTER", "S1")
LOGICAL = Datatype("LOGICAL", "i4")
INTEGER = Datatype("INTEGER", "i4")
REAL = Datatype("REAL", "f4")
DOUBLE_PRECISION = Datatype("DOUBLE_PRECISION", "f8")
COMPLEX = Datatype("COMPLEX", "F")
DOUBLE_COMPLEX = Datatype("DOUBLE_COMPLEX", "D")
SHORT_INT = Datatype("SHORT_INT", _pair("i2"))
INT_INT = TWOINT = Datatype("TWOINT", _pair("i4"))
LONG_INT = Datatype("LONG_INT", _pair("i8"))
FLOAT_INT = Datatype("FLOAT_INT", _pair("f4"))
DOUBLE_INT = Datatype("DOUBLE_INT", _pair("f8"))
LONG_DOUBLE_INT = Datatype("LONG_DOUBLE_INT", _pair("g"))

_BY_CHAR: dict[str, Datatype] = {}
for _t in (
    BYTE,
    CHAR,
    SIGNED_CHAR,
    SHORT,
    UNSIGNED_SHORT,
    INT,
    UNSIGNED,
    LONG,
    UNSIGNED_LONG,
    LONG_LONG,
    UNSIGNED_LONG_LONG,
    FLOAT,
    DOUBLE,
    LONG_DOUBLE,
    C_BOOL,
    C_FLOAT_COMPLEX,
    C_DOUBLE_COMPLEX,
    C_LONG_DOUBLE_COMPLEX,
    WCHAR,
):
    assert _t.dtype is not None
    _BY_CHAR.setdefault(_t.dtype.char, _t)


def _datatype_of(dtype: Any) -> Datatype:
    dt = np.dtype(dtype)
    found = _BY_CHAR.get(dt.char)
    return found if found is not None and found.dtype == dt else Datatype(str(dt), dt)


# ---- buffers ---------------------------------------------------------------------------


def _as_array(buf: Any, dtype: Any = None) -> Array:
    """A numpy view of any object with the buffer protocol (no copy)."""
    if isinstance(buf, np.ndarray):
        arr = buf
    else:
        try:
            mv = memoryview(buf)
        except TypeError:
            raise Exception(ERR_BUFFER, f"{type(buf).__name__} does not expose a buffer") from None
        arr = np.asarray(mv)
    if dtype is not None:
        want = np.dtype(dtype)
        if arr.dtype != want:
            flat = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
            arr = flat.reshape(-1).view(np.uint8).view(want)
    return arr


class _Msg:
    """A buffer spec as mpi4py takes it, resolved to a flat contiguous numpy array of
    elements. A non-contiguous array is copied (and, for a receive, copied back).

    As in mpi4py, an explicit count is per block (a gather's receive buffer holds
    ``blocks`` of them), an inferred one is the whole buffer; a displacement with an
    integer count is an offset in elements, with a sequence of counts it is the
    ``v`` calls' displacements.
    """

    def __init__(self, spec: Any, writable: bool, blocks: int = 1) -> None:
        self.counts: list[int] | None = None
        self.displs: list[int] | None = None
        buf: Any = spec
        count: Any = None
        displ: Any = None
        datatype: Any = None
        if isinstance(spec, (list, tuple)):
            if len(spec) == 2:
                buf, count = spec
                if isinstance(count, (Datatype, str)):
                    count, datatype = None, count
                elif isinstance(count, (list, tuple)):
                    count, displ = count
            elif len(spec) == 3:
                buf, count, datatype = spec
                if isinstance(count, (list, tuple)) and len(count) == 2 and not _ints(count):
                    count, displ = count
            elif len(spec) == 4:
                buf, count, displ, datatype = spec
            else:
                raise Exception(ERR_ARG, "a message is a buffer or a list of 2 to 4 items")
        if isinstance(datatype, str):
            datatype = _datatype_of(datatype)
        dtype = datatype.dtype if datatype is not None else None
        arr = np.empty(0, dtype or "B") if buf is None else _as_array(buf, dtype)
        self.orig = arr
        self.copied = not arr.flags.c_contiguous
        flat = np.ascontiguousarray(arr).reshape(-1)
        self.datatype = datatype or _datatype_of(flat.dtype)
        if np.ndim(count) > 0:
            self.counts = [int(c) for c in count]
            if displ is None:
                displ = [sum(self.counts[:i]) for i in range(len(self.counts))]
            self.displs = [int(d) for d in displ]
        else:
            start = int(displ or 0)
            if count is not None:
                end = start + int(count) * blocks
                if end > flat.size:
                    raise Exception(
                        ERR_COUNT, f"{blocks} x {count} elements exceed the buffer's {flat.size}"
                    )
                flat = flat[start:end]
            else:
                flat = flat[start:]
        self.arr = flat
        if writable and not self.arr.flags.writeable:
            raise Exception(ERR_BUFFER, "the receive buffer is read-only")

    @property
    def count(self) -> int:
        return int(self.arr.size)

    def block(self, i: int) -> Array:
        assert self.counts is not None and self.displs is not None
        return self.arr[self.displs[i] : self.displs[i] + self.counts[i]]

    def done(self) -> None:
        """Copies a receive made into a contiguous copy back into the caller's array."""
        if self.copied:
            self.orig[...] = self.arr.reshape(self.orig.shape)


def _ints(x: Any) -> bool:
    """Whether `x` is a sequence of counts rather than a (counts, displs) pair."""
    return all(np.ndim(v) == 0 for v in x) and len(x) != 2


def _msg(spec: Any, writable: bool = False, blocks: int = 1) -> _Msg:
    return _Msg(spec, writable, blocks)


def _bytes_of(arr: Array) -> bytes:
    return arr.tobytes()


def _fill(m: _Msg, data: bytes, source: int = -1, tag: int = -1) -> int:
    """Copies a received message into a receive buffer; the element count."""
    item = m.arr.dtype.itemsize or 1
    if len(data) > m.arr.nbytes or len(data) % item:
        raise Exception(
            ERR_TRUNCATE,
            f"a message of {len(data)} bytes from rank {source} (tag {tag}) does not fit "
            f"a receive buffer of {m.arr.nbytes} bytes of {item}-byte elements",
        )
    n = len(data) // item
    m.arr[:n] = np.frombuffer(data, dtype=m.arr.dtype, count=n)
    m.done()
    return n


# ---- status and requests ---------------------------------------------------------------


class _StatusField:
    """One integer field of a `Status`, kept in its array (see `Status.tomemory`)."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __get__(self, status: Status, owner: type | None = None) -> int:
        return int(status._mem[self.index])

    def __set__(self, status: Status, value: int) -> None:
        status._mem[self.index] = value


class Status:
    """What a receive or probe found (``source``, ``tag``, size in bytes)."""

    def __init__(self, status: Status | None = None) -> None:
        if status is not None and not isinstance(status, Status):
            raise TypeError(f"Status() takes a Status, not {type(status).__name__}")
        # source, tag, error, bytes, cancelled: one array, so that tomemory() aliases it.
        self._mem = np.array([ANY_SOURCE, ANY_TAG, SUCCESS, 0, 0], dtype=np.int64)
        if status is not None:
            self._mem[:] = status._mem

    source = _StatusField(0)
    tag = _StatusField(1)
    error = _StatusField(2)
    nbytes = _StatusField(3)

    @property
    def cancelled(self) -> bool:
        return bool(self._mem[4])

    @cancelled.setter
    def cancelled(self, flag: bool) -> None:
        self._mem[4] = int(bool(flag))

    def tomemory(self) -> memoryview:
        """The status's fields as writable memory (source, tag, error, …)."""
        return memoryview(self._mem.data)

    def __getstate__(self) -> list[int]:
        return [int(v) for v in self._mem]

    def __setstate__(self, state: list[int]) -> None:
        self._mem = np.array(state, dtype=np.int64)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Status) and bool((self._mem == other._mem).all())

    def __hash__(self) -> int:
        return hash(tuple(int(v) for v in self._mem))

    def _set(self, source: int, tag: int, nbytes: int) -> None:
        self.source, self.tag, self.nbytes = source, tag, nbytes

    def Get_source(self) -> int:
        return self.source

    def Get_tag(self) -> int:
        return self.tag

    def Get_error(self) -> int:
        return self.error

    def Set_source(self, source: int) -> None:
        self.source = source

    def Set_tag(self, tag: int) -> None:
        self.tag = tag

    def Set_error(self, error: int) -> None:
        self.error = error

    def Get_count(self, datatype: Datatype = BYTE) -> int:
        size = datatype.Get_size()
        if size == 0:
            return 0
        return self.nbytes // size if self.nbytes % size == 0 else UNDEFINED

    def Get_elements(self, datatype: Datatype) -> int:
        return self.Get_count(datatype)

    def Set_elements(self, datatype: Datatype, count: int) -> None:
        self.nbytes = count * datatype.Get_size()

    def Is_cancelled(self) -> bool:
        return self.cancelled

    def Set_cancelled(self, flag: bool) -> None:
        self.cancelled = bool(flag)

    @property
    def count(self) -> int:
        return self.nbytes

    @count.setter
    def count(self, value: int) -> None:
        self.nbytes = value

    def __repr__(self) -> str:
        return f"<Status source={self.source} tag={self.tag} bytes={self.nbytes}>"


def _live(requests: Sequence[Request]) -> list[int]:
    """Where the active requests are: the calls on many requests skip the others."""
    return [i for i, r in enumerate(requests) if r._active]


def _unpickle(data: bytes) -> Any:
    """A received object; an empty message (a buffer send of nothing) is None, as in
    mpi4py."""
    return pickle.loads(data) if data else None


def _fill_status(status: Status | None, source: int, tag: int, nbytes: int) -> None:
    if status is not None:
        status._set(source, tag, nbytes)


class Request:
    """A non-blocking operation: ``wait``/``test`` for objects (lower-case calls),
    ``Wait``/``Test`` for buffers (upper-case calls).

    A request is active from the call that makes it until a wait or a successful test
    completes it; ``REQUEST_NULL`` and completed requests are inactive, and the calls on
    many requests skip them, as MPI's do. Sends (eager) and collectives (done when
    called) are active requests with nothing left to wait for."""

    def __init__(
        self,
        impl: _vargr.Request | None = None,
        recv: _Msg | None = None,
        pickled: bool = False,
        value: Any = None,
        active: bool = True,
    ) -> None:
        self._impl = impl
        self._recv = recv
        self._pickled = pickled
        self._value = value
        self._active = active
        self._status: tuple[int, int, int] | None = None

    def _complete(self, got: tuple[int, int, bytes] | None, status: Status | None) -> Any:
        self._impl = None
        self._active = False
        if got is None:
            # A send, an inactive request, a receive from PROC_NULL, or a collective:
            # an empty status unless the request set one.
            _fill_status(status, *(self._status or (ANY_SOURCE, ANY_TAG, 0)))
            value, self._value = self._value, None
            return value
        source, tag, data = got
        _fill_status(status, source, tag, len(data))
        if self._recv is not None:
            _fill(self._recv, data, source, tag)
            return None
        return _unpickle(data) if self._pickled else data

    def __bool__(self) -> bool:
        return self._active

    def _is_null(self) -> bool:
        # A completed request's handle is MPI_REQUEST_NULL; a persistent one's only
        # once freed.
        return not self._active

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Request):
            return NotImplemented
        return self is other or (self._is_null() and other._is_null())

    def __hash__(self) -> int:
        return id(self)

    def _ready(self) -> bool:
        """Whether a wait would return at once without asking vargr."""
        return self._impl is None

    def wait(self, status: Status | None = None) -> Any:
        if self._impl is None:
            return self._complete(None, status)
        got = _call(self._impl.wait)
        return self._complete(got, status)

    def test(self, status: Status | None = None) -> tuple[bool, Any]:
        if self._impl is None:
            return True, self._complete(None, status)
        done, got = _call(self._impl.test)
        if not done:
            return False, None
        return True, self._complete(got, status)

    def Wait(self, status: Status | None = None) -> bool:
        self.wait(status)
        return True

    def Test(self, status: Status | None = None) -> bool:
        return self.test(status)[0]

    def Get_status(self, status: Status | None = None) -> bool:
        if self._impl is None:
            _fill_status(status, *(self._status or (ANY_SOURCE, ANY_TAG, 0)))
        return self._impl is None

    get_status = Get_status

    def Cancel(self) -> None:
        if self._impl is not None and _call(self._impl.cancel):
            self._impl = None
            self._value = None

    cancel = Cancel

    def Free(self) -> None:
        self._impl = None
        self._active = False

    free = Free

    # Completion of many requests.

    @staticmethod
    def waitany(requests: Sequence[Request], status: Status | None = None) -> tuple[int, Any]:
        live = _live(requests)
        if not live:
            _fill_status(status, ANY_SOURCE, ANY_TAG, 0)
            return UNDEFINED, None
        for i in live:
            if requests[i]._ready():
                return i, requests[i]._complete(None, status)
        impls = [requests[i]._impl for i in live]
        try:
            k, got = _vargr.Request.wait_any([r for r in impls if r is not None])
        except _vargr.VargrError as e:
            if "different communicators" not in str(e):
                raise _error(e) from e
        else:
            i = live[k]
            return i, requests[i]._complete(got, status)
        while True:  # requests of several communicators: poll them in turn
            for i in live:
                done, value = requests[i].test(status)
                if done:
                    return i, value
            time.sleep(20e-6)

    @staticmethod
    def Waitany(requests: Sequence[Request], status: Status | None = None) -> int:
        return Request.waitany(requests, status)[0]

    @staticmethod
    def waitall(requests: Sequence[Request], statuses: list[Status] | None = None) -> list[Any]:
        if isinstance(statuses, list):
            statuses.extend(Status() for _ in range(len(requests) - len(statuses)))
        out = []
        for i, r in enumerate(requests):
            st = statuses[i] if statuses is not None and i < len(statuses) else None
            out.append(r.wait(st))
        return out

    @staticmethod
    def Waitall(requests: Sequence[Request], statuses: list[Status] | None = None) -> bool:
        Request.waitall(requests, statuses)
        return True

    @staticmethod
    def testany(requests: Sequence[Request], status: Status | None = None) -> tuple[int, bool, Any]:
        live = _live(requests)
        if not live:
            _fill_status(status, ANY_SOURCE, ANY_TAG, 0)
            return UNDEFINED, True, None
        for i in live:
            done, value = requests[i].test(status)
            if done:
                return i, True, value
        return UNDEFINED, False, None

    @staticmethod
    def Testany(requests: Sequence[Request], status: Status | None = None) -> tuple[int, bool]:
        i, flag, _ = Request.testany(requests, status)
        return i, flag

    @staticmethod
    def testall(
        requests: Sequence[Request], statuses: list[Status] | None = None
    ) -> tuple[bool, list[Any] | None]:
        # Only complete them all once all can complete (MPI's testall).
        for r in requests:
            if r._impl is not None:
                done, got = _call(r._impl.test)
                if not done:
                    return False, None
                r._impl = None
                r._value = r._complete_later(got)
        return True, Request.waitall(requests, statuses)

    def _complete_later(self, got: tuple[int, int, bytes] | None) -> Any:
        """Keeps what a test took, for the wait that completes the request."""
        if got is None:
            return self._value
        source, tag, data = got
        self._status = (source, tag, len(data))
        if self._recv is not None:
            _fill(self._recv, data, source, tag)
            return None
        return _unpickle(data) if self._pickled else data

    @staticmethod
    def Testall(requests: Sequence[Request], statuses: list[Status] | None = None) -> bool:
        return Request.testall(requests, statuses)[0]

    @staticmethod
    def testsome(
        requests: Sequence[Request], statuses: list[Status] | None = None
    ) -> tuple[list[int] | None, list[Any] | None]:
        live = _live(requests)
        if not live:
            return None, None
        idx, out = [], []
        for i in live:
            done, value = requests[i].test()
            if done:
                idx.append(i)
                out.append(value)
        return idx, out

    @staticmethod
    def Testsome(
        requests: Sequence[Request], statuses: list[Status] | None = None
    ) -> list[int] | None:
        return Request.testsome(requests, statuses)[0]

    @staticmethod
    def waitsome(
        requests: Sequence[Request], statuses: list[Status] | None = None
    ) -> tuple[list[int] | None, list[Any] | None]:
        if not any(r._active for r in requests):
            return None, None
        i, value = Request.waitany(requests)
        idx, out = [i], [value]
        more, values = Request.testsome(requests)
        return idx + (more or []), out + (values or [])

    @staticmethod
    def Waitsome(
        requests: Sequence[Request], statuses: list[Status] | None = None
    ) -> list[int] | None:
        return Request.waitsome(requests, statuses)[0]

    @staticmethod
    def get_status_any(
        requests: Sequence[Request], status: Status | None = None
    ) -> tuple[int, bool]:
        live = _live(requests)
        if not live:
            _fill_status(status, ANY_SOURCE, ANY_TAG, 0)
            return UNDEFINED, True
        ready = [i for i in live if requests[i]._ready()]
        return (ready[0], True) if ready else (UNDEFINED, False)

    Get_status_any = get_status_any

    @staticmethod
    def get_status_all(requests: Sequence[Request], statuses: list[Status] | None = None) -> bool:
        return all(r._ready() for r in requests)

    Get_status_all = get_status_all

    @staticmethod
    def get_status_some(
        requests: Sequence[Request], statuses: list[Status] | None = None
    ) -> list[int] | None:
        live = _live(requests)
        if not live:
            return None
        return [i for i in live if requests[i]._ready()]

    Get_status_some = get_status_some


REQUEST_NULL = Request(active=False)


class Prequest(Request):
    """A persistent request (``Send_init``/``Recv_init``): each ``Start`` runs it once."""

    def __init__(self, start: Callable[[], Request]) -> None:
        super().__init__(active=False)
        self._start = start
        self._freed = False

    def _is_null(self) -> bool:
        return self._freed

    def Free(self) -> None:
        super().Free()
        self._freed = True

    free = Free

    def Start(self) -> None:
        r = self._start()
        self._impl, self._recv, self._value = r._impl, r._recv, r._value
        self._status, self._active = r._status, True

    @staticmethod
    def Startall(requests: Sequence[Prequest]) -> None:
        for r in requests:
            r.Start()

    start = Start
    startall = Startall


def _done(value: Any = None) -> Request:
    return Request(None, value=value)


def _at_once(blocking: Callable[..., Any]) -> Callable[..., Request]:
    """The non-blocking form of a collective that completes when called: runs
    `blocking` (looked up on the communicator, so that a subclass's own version runs)
    and returns a request with nothing left to wait for."""
    name = blocking.__name__

    def start(self: Any, *args: Any, **kwargs: Any) -> Request:
        getattr(self, name)(*args, **kwargs)
        return _done()

    start.__name__ = "I" + name[0].lower() + name[1:]
    start.__doc__ = f"``{name}``, as a request complete when it returns."
    return start


def _from_proc_null() -> Request:
    r = Request()
    r._status = (PROC_NULL, ANY_TAG, 0)
    return r


# ---- operators -------------------------------------------------------------------------


def _minloc(a: Any, b: Any, pick: Callable[[Any, Any], bool]) -> Any:
    (va, ia), (vb, ib) = a, b
    if pick(va, vb) or (va == vb and ia < ib):
        return (va, ia)
    return (vb, ib)


def _pairs(x: Array, y: Array, smaller: bool) -> Array:
    """MINLOC/MAXLOC over structured (value, index) arrays: y becomes the result."""
    vx, vy = x["v"], y["v"]
    better = (vx < vy) if smaller else (vx > vy)
    take = better | ((vx == vy) & (x["i"] < y["i"]))
    out = y.copy()
    out[take] = x[take]
    return out


class Op:
    """A reduction operator: the predefined ones or ``Op.Create(function, commute)``."""

    def __init__(
        self,
        name: str,
        pyfn: Callable[[Any, Any], Any],
        npfn: Callable[[Array, Array], Array] | None = None,
        native: _vargr.Op | None = None,
        commute: bool = True,
        user: Callable[..., Any] | None = None,
    ) -> None:
        self.name = name
        self._py = pyfn
        self._np = npfn
        self._native = native
        self._commute = commute
        self._user = user

    @staticmethod
    def Create(function: Callable[..., Any], commute: bool = False) -> Op:
        """A user operator. mpi4py calls it as ``function(inbuf, inoutbuf, datatype)``
        on buffers (the result goes into ``inoutbuf``) and, for objects, the lower-case
        calls use ``function(a, b)`` when it takes two arguments."""

        def on_objects(a: Any, b: Any) -> Any:
            try:
                return function(a, b)
            except TypeError:
                out = np.array(b, copy=True)
                function(np.asarray(a), out, _datatype_of(out.dtype))
                return out

        def on_arrays(x: Array, y: Array) -> Array:
            out = np.array(y, copy=True)
            function(x, out, _datatype_of(out.dtype))
            return out

        return Op("user", on_objects, on_arrays, None, commute, function)

    def Is_commutative(self) -> bool:
        return self._commute

    @property
    def is_commutative(self) -> bool:
        return self._commute

    @property
    def is_predefined(self) -> bool:
        return self._user is None

    def Free(self) -> None:
        pass

    def __call__(self, x: Any, y: Any) -> Any:
        return self._py(x, y)

    def _arrays(self, x: Array, y: Array) -> Array:
        """`x op y` elementwise (y is the accumulated right-hand side)."""
        if self._np is None:
            return np.array([self._py(a, b) for a, b in zip(x, y)], dtype=y.dtype)
        return self._np(x, y)

    def Reduce_local(self, inbuf: Any, inoutbuf: Any) -> None:
        src, dst = _msg(inbuf), _msg(inoutbuf, writable=True)
        dst.arr[...] = self._arrays(src.arr, dst.arr)
        dst.done()

    def __repr__(self) -> str:
        return f"<mpi4py-compatible Op {self.name}>"


def _logical(f: Callable[[Any, Any], Any]) -> Callable[[Array, Array], Array]:
    return lambda x, y: f(x, y).astype(y.dtype)


SUM = Op("SUM", lambda a, b: a + b, np.add, _vargr.SUM)
PROD = Op("PROD", lambda a, b: a * b, np.multiply, _vargr.PROD)
MAX = Op("MAX", lambda a, b: max(a, b), np.maximum, _vargr.MAX)
MIN = Op("MIN", lambda a, b: min(a, b), np.minimum, _vargr.MIN)
LAND = Op("LAND", lambda a, b: a and b, _logical(np.logical_and), _vargr.LAND)
LOR = Op("LOR", lambda a, b: a or b, _logical(np.logical_or), _vargr.LOR)
LXOR = Op("LXOR", lambda a, b: bool(a) != bool(b), _logical(np.logical_xor))
BAND = Op("BAND", lambda a, b: a & b, np.bitwise_and, _vargr.BAND)
BOR = Op("BOR", lambda a, b: a | b, np.bitwise_or, _vargr.BOR)
BXOR = Op("BXOR", lambda a, b: a ^ b, np.bitwise_xor)
MINLOC = Op(
    "MINLOC", lambda a, b: _minloc(a, b, lambda x, y: x < y), lambda x, y: _pairs(x, y, True)
)
MAXLOC = Op(
    "MAXLOC", lambda a, b: _minloc(a, b, lambda x, y: x > y), lambda x, y: _pairs(x, y, False)
)
REPLACE = Op("REPLACE", lambda a, b: b, lambda x, y: y.copy(), None, False)
NO_OP = Op("NO_OP", lambda a, b: a, lambda x, y: x.copy(), None, False)
OP_NULL = Op("OP_NULL", lambda a, b: a)


def _fold(op: Op, values: Sequence[Any], arrays: bool) -> Any:
    """x0 op x1 op … op xn-1, in rank order (bracketed from the right, as MPI's user
    functions compute ``inout = in op inout``)."""
    acc = values[-1]
    for v in reversed(values[:-1]):
        acc = op._arrays(v, acc) if arrays else op._py(v, acc)
    return acc


# The dtypes vargr's core reduces natively.
_NATIVE_KINDS = {np.dtype(c) for c in ("i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f4", "f8")}


def _native(op: Op, arr: Array) -> bool:
    return op._native is not None and arr.dtype in _NATIVE_KINDS


# ---- matched probes --------------------------------------------------------------------


class Message:
    """A message taken out of matching by ``mprobe``/``improbe``: only this handle's
    ``recv`` (or ``Recv``) gets it, whatever other receives are posted. ``Message(m)``
    is another handle on the same message, as in mpi4py."""

    def __init__(self, message: Message | None = None) -> None:
        self._got: tuple[int, int, bytes] | None = None
        self._state = "null"  # "null", "message" or "noproc" (from PROC_NULL)
        if message is not None:
            self._got, self._state = message._got, message._state

    @staticmethod
    def _of(got: tuple[int, int, bytes] | None) -> Message:
        m = Message()
        m._got, m._state = got, ("noproc" if got is None else "message")
        return m

    def __bool__(self) -> bool:
        return self._state != "null"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return self is other or (self._state == other._state and self._state != "message")

    def __hash__(self) -> int:
        return id(self)

    def _take(self, status: Status | None) -> tuple[int, int, bytes]:
        if self._state == "null":
            raise Exception(ERR_REQUEST, "MESSAGE_NULL cannot be received")
        if self._state == "noproc":
            # A handle becomes null once received; the predefined constant stays.
            if self is not MESSAGE_NO_PROC:
                self._state = "null"
            _fill_status(status, PROC_NULL, ANY_TAG, 0)
            return (PROC_NULL, ANY_TAG, b"")
        got = self._got
        assert got is not None
        self._got, self._state = None, "null"
        _fill_status(status, got[0], got[1], len(got[2]))
        return got

    def recv(self, status: Status | None = None) -> Any:
        return _unpickle(self._take(status)[2])

    def irecv(self) -> Request:
        return _done(self.recv())

    def Recv(self, buf: Any, status: Status | None = None) -> None:
        source, tag, data = self._take(status)
        if source != PROC_NULL:
            _fill(_msg(buf, writable=True), data, source, tag)

    def Irecv(self, buf: Any) -> Request:
        self.Recv(buf)
        return _done()

    @staticmethod
    def probe(
        comm: Comm, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> Message:
        return comm.mprobe(source, tag, status)

    @staticmethod
    def iprobe(
        comm: Comm, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> Message | None:
        return comm.improbe(source, tag, status)


MESSAGE_NULL = Message()
MESSAGE_NO_PROC = Message._of(None)


# ---- error handlers and attribute keys -------------------------------------------------


class Errhandler:
    """What a communicator does on an error. vargr.MPI always raises `MPI.Exception`
    (mpi4py's default, ``ERRORS_RETURN``); the others are accepted and kept."""

    def __init__(self, name: str = "ERRHANDLER_NULL") -> None:
        self.name = name

    def Free(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<mpi4py-compatible Errhandler {self.name}>"


ERRHANDLER_NULL = Errhandler()
ERRORS_RETURN = Errhandler("ERRORS_RETURN")
ERRORS_ARE_FATAL = Errhandler("ERRORS_ARE_FATAL")
ERRORS_ABORT = Errhandler("ERRORS_ABORT")
KEYVAL_INVALID = -1
_keyvals = {"next": 100}


# ---- groups ---------------------------------------------------------------------------


class Group:
    """An ordered set of processes, named by their ranks in ``COMM_WORLD``."""

    def __init__(self, members: Sequence[int] | Group | None = None) -> None:
        self._members: list[int] = list(
            members._members if isinstance(members, Group) else members or []
        )

    @property
    def size(self) -> int:
        return len(self._members)

    @property
    def rank(self) -> int:
        me = COMM_WORLD.rank
        return self._members.index(me) if me in self._members else UNDEFINED

    def Get_size(self) -> int:
        return self.size

    def Get_rank(self) -> int:
        return self.rank

    def Dup(self) -> Group:
        return Group(self)

    def Free(self) -> None:
        self._members = []

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Group) and self._members == other._members

    def __hash__(self) -> int:
        return hash(tuple(self._members))

    def Compare(self, other: Group) -> int:
        if self._members == other._members:
            return IDENT
        return SIMILAR if set(self._members) == set(other._members) else UNEQUAL

    def Translate_ranks(
        self, ranks: Sequence[int] | None = None, group: Group | None = None
    ) -> list[int]:
        ranks = list(range(self.size)) if ranks is None else list(ranks)
        out = []
        for r in ranks:
            if r == PROC_NULL:
                out.append(PROC_NULL)
                continue
            if not 0 <= r < self.size:
                raise Exception(ERR_RANK, f"rank {r} is not in a group of {self.size}")
            w = self._members[r]
            if group is None:
                out.append(w)
            else:
                out.append(group._members.index(w) if w in group._members else UNDEFINED)
        return out

    def Incl(self, ranks: Sequence[int]) -> Group:
        return Group([self._members[r] for r in ranks])

    def Excl(self, ranks: Sequence[int]) -> Group:
        drop = set(ranks)
        return Group([m for i, m in enumerate(self._members) if i not in drop])

    @staticmethod
    def _ranges(ranks: Sequence[tuple[int, int, int]]) -> list[int]:
        out: list[int] = []
        for first, last, stride in ranks:
            out.extend(range(first, last + (1 if stride > 0 else -1), stride))
        return out

    def Range_incl(self, ranks: Sequence[tuple[int, int, int]]) -> Group:
        return self.Incl(Group._ranges(ranks))

    def Range_excl(self, ranks: Sequence[tuple[int, int, int]]) -> Group:
        return self.Excl(Group._ranges(ranks))

    @staticmethod
    def Union(group1: Group, group2: Group) -> Group:
        return Group(group1._members + [m for m in group2._members if m not in group1._members])

    @staticmethod
    def Intersection(group1: Group, group2: Group) -> Group:
        return Group([m for m in group1._members if m in group2._members])

    @staticmethod
    def Difference(group1: Group, group2: Group) -> Group:
        return Group([m for m in group1._members if m not in group2._members])

    def __repr__(self) -> str:
        return f"<mpi4py-compatible Group {self._members}>"


GROUP_EMPTY = Group()
GROUP_NULL = Group()


# ---- communicators ---------------------------------------------------------------------


def _check_tag(tag: int, any_ok: bool) -> int | None:
    if tag == ANY_TAG and any_ok:
        return None
    if not 0 <= tag <= _TAG_MAX:
        raise Exception(ERR_TAG, f"tag {tag} is outside 0..{_TAG_MAX}")
    return tag


class Comm:
    """A communicator (mpi4py's ``Intracomm``)."""

    _impl: _vargr.Comm | None
    _world: list[int] | None
    _name: str

    def __new__(cls, comm: _vargr.Comm | Comm | None = None, *args: Any) -> Comm:  # noqa: PYI034
        # `Comm(other)` (what mpi4py's subclasses pass to __new__) shares other's handle.
        self = object.__new__(cls)
        self._impl = comm._impl if isinstance(comm, Comm) else comm
        self._name = ""
        # Members' ranks in COMM_WORLD (groups are named by them); learnt when the
        # communicator is made, which is collective.
        self._world = comm._world if isinstance(comm, Comm) else None
        if isinstance(self, Cartcomm):
            grid = comm if isinstance(comm, Cartcomm) else None
            self.dims = list(grid.dims) if grid else []
            self.periods = list(grid.periods) if grid else []
        return self

    @property
    def _c(self) -> _vargr.Comm:
        if self._impl is None:
            raise Exception(ERR_COMM, "COMM_NULL (or a freed communicator)")
        return self._impl

    def __bool__(self) -> bool:
        return self._impl is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Comm) and self._impl is other._impl

    def __hash__(self) -> int:
        return id(self._impl)

    # -- identity

    def Get_rank(self) -> int:
        return self._c.rank

    def Get_size(self) -> int:
        return self._c.size

    @property
    def rank(self) -> int:
        return self._c.rank

    @property
    def size(self) -> int:
        return self._c.size

    def Get_name(self) -> str:
        return self._name

    def Set_name(self, name: str) -> None:
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = value

    @property
    def info(self) -> Info:
        return Info()

    @info.setter
    def info(self, info: Info) -> None:
        pass

    def Get_info(self) -> Info:
        return Info()

    def Set_info(self, info: Info) -> None:
        """vargr takes no hints."""

    @staticmethod
    def Get_parent() -> Comm:
        """No process here was spawned: ``COMM_NULL``."""
        return COMM_NULL

    def Is_inter(self) -> bool:
        return False

    def Is_intra(self) -> bool:
        return True

    @property
    def is_inter(self) -> bool:
        return False

    @property
    def is_intra(self) -> bool:
        return True

    def Get_topology(self) -> int:
        return UNDEFINED

    @property
    def topology(self) -> int:
        return self.Get_topology()

    def Get_attr(self, keyval: int) -> Any:
        if keyval >= 100:
            return self.__dict__.get("_attrs", {}).get(keyval)
        return {
            TAG_UB: _TAG_MAX,
            HOST: PROC_NULL,
            IO: self.rank,
            WTIME_IS_GLOBAL: False,
            APPNUM: None,
            UNIVERSE_SIZE: COMM_WORLD.size,
            LASTUSEDCODE: ERR_LASTCODE,
        }.get(keyval)

    def Get_errhandler(self) -> Errhandler:
        return getattr(self, "_errhandler", ERRORS_RETURN)

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        self._errhandler = errhandler

    @staticmethod
    def Create_keyval(
        copy_fn: Callable[..., Any] | None = None,
        delete_fn: Callable[..., Any] | None = None,
        nopython: bool = False,
    ) -> int:
        _keyvals["next"] += 1
        return _keyvals["next"]

    @staticmethod
    def Free_keyval(keyval: int) -> int:
        return KEYVAL_INVALID

    def Set_attr(self, keyval: int, attrval: Any) -> None:
        if keyval < 100:
            raise Exception(ERR_ARG, f"attribute key {keyval} is predefined")
        self.__dict__.setdefault("_attrs", {})[keyval] = attrval

    def Delete_attr(self, keyval: int) -> None:
        self.__dict__.get("_attrs", {}).pop(keyval, None)

    def Compare(self, other: Comm) -> int:
        return IDENT if self == other else UNEQUAL

    def Abort(self, errorcode: int = 0) -> None:
        """Ends the job: this process exits with `errorcode`, and the launcher stops the
        other ranks."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(errorcode or 1)

    # -- communicator management

    def Get_group(self) -> Group:
        if self._world is None:
            raise Exception(ERR_COMM, "this communicator's group is unknown")
        return Group(self._world)

    @property
    def group(self) -> Group:
        return self.Get_group()

    @classmethod
    def _made(cls, impl: _vargr.Comm | None) -> Comm:
        """A communicator of this class just made collectively, knowing its members."""
        c = cls(impl) if impl is not None else COMM_NULL
        if impl is not None:
            c._world = c.allgather(COMM_WORLD.rank)
        return c

    def Create(self, group: Group) -> Comm:
        """Collective: the members of `group` get a communicator in its order."""
        me = COMM_WORLD.rank
        inside = me in group._members
        got = _call(self._c.Split, 0 if inside else None, group._members.index(me) if inside else 0)
        return self._made(got)

    def Dup(self, info: Info | None = None) -> Comm:
        return self._made(_call(self._c.Dup))

    def Dup_with_info(self, info: Info) -> Comm:
        return self.Dup()

    def Idup(self, info: Info | None = None) -> tuple[Comm, Request]:
        return self.Dup(), _done()

    def Idup_with_info(self, info: Info) -> tuple[Comm, Request]:
        return self.Idup()

    def Clone(self) -> Comm:
        return self.Dup()

    def Free(self) -> None:
        self._impl = None

    def Split(self, color: int = 0, key: int = 0) -> Comm:
        c = None if color == UNDEFINED else color
        if c is not None and c < 0:
            raise Exception(ERR_ARG, f"color {color} is negative")
        got = _call(self._c.Split, c, key)
        return Comm._made(got)

    def Split_type(self, split_type: int, key: int = 0) -> Comm:
        if split_type == UNDEFINED:
            return self.Split(UNDEFINED, key)
        hosts = self.allgather(Get_processor_name())
        return self.Split(hosts.index(hosts[self.rank]), key)

    def Create_cart(
        self,
        dims: Sequence[int],
        periods: Sequence[bool] | None = None,
        reorder: bool = False,
    ) -> Cartcomm:
        dims = list(dims)
        n = int(np.prod(dims)) if dims else 1
        if n > self.size:
            raise Exception(ERR_DIMS, f"a grid of {dims} needs {n} ranks, the comm has {self.size}")
        periods = list(periods) if periods is not None else [False] * len(dims)
        sub = self.Split(0 if self.rank < n else UNDEFINED, self.rank)
        if not sub:
            return Cartcomm(None)
        return Cartcomm._grid(sub, dims, periods)

    # -- point to point, objects

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        if dest == PROC_NULL:
            return
        data = pickle.dumps(obj)
        _call(self._c._send_bytes, data, dest, _check_tag(tag, False))

    ssend = bsend = send

    def recv(
        self,
        buf: Any = None,
        source: int = ANY_SOURCE,
        tag: int = ANY_TAG,
        status: Status | None = None,
    ) -> Any:
        if source == PROC_NULL:
            _fill_status(status, PROC_NULL, ANY_TAG, 0)
            return None
        src = None if source == ANY_SOURCE else source
        got_src, got_tag, data = _call(self._c._recv_bytes, src, _check_tag(tag, True))
        _fill_status(status, got_src, got_tag, len(data))
        return _unpickle(data)

    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        self.send(obj, dest, tag)
        return _done()

    issend = ibsend = isend

    def irecv(self, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        if source == PROC_NULL:
            return _from_proc_null()
        src = None if source == ANY_SOURCE else source
        impl = _call(self._c._irecv, src, _check_tag(tag, True))
        return Request(impl, pickled=True)

    def sendrecv(
        self,
        sendobj: Any,
        dest: int,
        sendtag: int = 0,
        recvbuf: Any = None,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
        status: Status | None = None,
    ) -> Any:
        self.send(sendobj, dest, sendtag)
        return self.recv(None, source, recvtag, status)

    def probe(
        self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> bool:
        return self._probe(source, tag, status, True)

    def iprobe(
        self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> bool:
        return self._probe(source, tag, status, False)

    Probe = probe
    Iprobe = iprobe

    def mprobe(
        self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> Message:
        """Matched probe: waits for a message and takes it out of matching."""
        if source == PROC_NULL:
            _fill_status(status, PROC_NULL, ANY_TAG, 0)
            return Message._of(None)
        src = None if source == ANY_SOURCE else source
        got = _call(self._c._recv_bytes, src, _check_tag(tag, True))
        _fill_status(status, got[0], got[1], len(got[2]))
        return Message._of(got)

    def improbe(
        self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> Message | None:
        """Like `mprobe` without waiting: None if no message matches yet."""
        if source == PROC_NULL:
            return self.mprobe(source, tag, status)
        if not self.iprobe(source, tag):
            return None
        return self.mprobe(source, tag, status)

    Mprobe = mprobe
    Improbe = improbe

    def _probe(self, source: int, tag: int, status: Status | None, wait: bool) -> bool:
        if source == PROC_NULL:
            _fill_status(status, PROC_NULL, ANY_TAG, 0)
            return True
        src = None if source == ANY_SOURCE else source
        got = _call(self._c._probe, src, _check_tag(tag, True), wait)
        if got is None:
            return False
        _fill_status(status, *got)
        return True

    # -- point to point, buffers

    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        if dest == PROC_NULL:
            return
        m = _msg(buf)
        _call(self._c._send_bytes, _bytes_of(m.arr), dest, _check_tag(tag, False))

    Ssend = Bsend = Rsend = Send

    def Recv(
        self,
        buf: Any,
        source: int = ANY_SOURCE,
        tag: int = ANY_TAG,
        status: Status | None = None,
    ) -> None:
        if source == PROC_NULL:
            _fill_status(status, PROC_NULL, ANY_TAG, 0)
            return
        m = _msg(buf, writable=True)
        src = None if source == ANY_SOURCE else source
        got_src, got_tag, data = _call(self._c._recv_bytes, src, _check_tag(tag, True))
        _fill_status(status, got_src, got_tag, len(data))
        _fill(m, data, got_src, got_tag)

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        self.Send(buf, dest, tag)
        return _done()

    Issend = Ibsend = Irsend = Isend

    def Irecv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        if source == PROC_NULL:
            return _from_proc_null()
        m = _msg(buf, writable=True)
        src = None if source == ANY_SOURCE else source
        return Request(_call(self._c._irecv, src, _check_tag(tag, True)), recv=m)

    def Sendrecv(
        self,
        sendbuf: Any,
        dest: int,
        sendtag: int = 0,
        recvbuf: Any = None,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
        status: Status | None = None,
    ) -> None:
        self.Send(sendbuf, dest, sendtag)
        self.Recv(recvbuf, source, recvtag, status)

    def Send_init(self, buf: Any, dest: int, tag: int = 0) -> Prequest:
        return Prequest(lambda: self.Isend(buf, dest, tag))

    Ssend_init = Bsend_init = Rsend_init = Send_init

    def Recv_init(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Prequest:
        return Prequest(lambda: self.Irecv(buf, source, tag))

    def Isendrecv(
        self,
        sendbuf: Any,
        dest: int,
        sendtag: int = 0,
        recvbuf: Any = None,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
    ) -> Request:
        r = self.Irecv(recvbuf, source, recvtag) if recvbuf is not None else _done()
        self.Send(sendbuf, dest, sendtag)
        return r

    def Isendrecv_replace(
        self,
        buf: Any,
        dest: int,
        sendtag: int = 0,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
    ) -> Request:
        m = _msg(buf)
        data = _bytes_of(m.arr)
        r = self.Irecv(buf, source, recvtag)
        if dest != PROC_NULL:
            _call(self._c._send_bytes, data, dest, _check_tag(sendtag, False))
        return r

    def Sendrecv_replace(
        self,
        buf: Any,
        dest: int,
        sendtag: int = 0,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
        status: Status | None = None,
    ) -> None:
        m = _msg(buf, writable=True)
        if dest != PROC_NULL:
            _call(self._c._send_bytes, _bytes_of(m.arr), dest, _check_tag(sendtag, False))
        self.Recv(buf, source, recvtag, status)

    # -- collectives, objects

    def barrier(self) -> None:
        _call(self._c.barrier)

    Barrier = barrier

    Ibarrier = _at_once(barrier)

    def _root(self, root: int) -> int:
        if not 0 <= root < self.size:
            raise Exception(ERR_ROOT, f"root {root} is out of range for {self.size} ranks")
        return root

    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        return _call(self._c.bcast, obj, self._root(root))

    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        return _call(self._c.gather, sendobj, self._root(root))  # type: ignore[no-any-return]

    def scatter(self, sendobj: Sequence[Any] | None = None, root: int = 0) -> Any:
        if self.rank == self._root(root) and (sendobj is None or len(sendobj) != self.size):
            raise Exception(ERR_ARG, f"scatter needs a sequence of {self.size} objects")
        return _call(self._c.scatter, sendobj, root)

    def allgather(self, sendobj: Any) -> list[Any]:
        return _call(self._c.allgather, sendobj)  # type: ignore[no-any-return]

    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        if len(sendobj) != self.size:
            raise Exception(ERR_ARG, f"alltoall needs a sequence of {self.size} objects")
        return _call(self._c.alltoall, list(sendobj))  # type: ignore[no-any-return]

    def reduce(self, sendobj: Any, op: Op = SUM, root: int = 0) -> Any:
        root = self._root(root)
        if op._native is not None and _plain(sendobj):
            return _call(self._c.reduce, sendobj, op._native, root)
        values = self.gather(sendobj, root)
        return _fold(op, values, False) if values is not None else None

    def allreduce(self, sendobj: Any, op: Op = SUM) -> Any:
        if op._native is not None and _plain(sendobj):
            return _call(self._c.allreduce, sendobj, op._native)
        return _fold(op, self.allgather(sendobj), False)

    def scan(self, sendobj: Any, op: Op = SUM) -> Any:
        return _fold(op, self.allgather(sendobj)[: self.rank + 1], False)

    def exscan(self, sendobj: Any, op: Op = SUM) -> Any:
        values = self.allgather(sendobj)[: self.rank]
        return _fold(op, values, False) if values else None

    # -- collectives, buffers

    def Bcast(self, buf: Any, root: int = 0) -> None:
        m = _msg(buf, writable=True)
        _call(self._c.Bcast, m.arr.view(np.uint8), self._root(root))
        m.done()

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM, root: int = 0) -> None:
        root = self._root(root)
        me = self.rank == root
        if sendbuf is IN_PLACE or sendbuf is None:
            if not me:
                raise Exception(ERR_BUFFER, "IN_PLACE is for the root of Reduce")
            r: _Msg | None = _msg(recvbuf, writable=True)
            assert r is not None
            send = r.arr.copy()
        else:
            send = _msg(sendbuf).arr
            r = _msg(recvbuf, writable=True) if me else None
        if _native(op, send):
            out = r.arr if r is not None else None
            _call(self._c.Reduce, send, out, op._native, root)
        else:
            all_ = self.gather(send, root)
            if all_ is not None and r is not None:
                r.arr[...] = _fold(op, all_, True)
        if r is not None:
            r.done()

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        r = _msg(recvbuf, writable=True)
        send = r.arr.copy() if sendbuf is IN_PLACE else _msg(sendbuf).arr
        if send.size != r.count:
            raise Exception(ERR_COUNT, f"Allreduce: send has {send.size} elements, recv {r.count}")
        if _native(op, send) and send.dtype == r.arr.dtype:
            _call(self._c.Allreduce, send, r.arr, op._native)
        else:
            r.arr[...] = _fold(op, self.allgather(send), True)
        r.done()

    def Scan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        r = _msg(recvbuf, writable=True)
        send = r.arr.copy() if sendbuf is IN_PLACE else _msg(sendbuf).arr
        r.arr[...] = _fold(op, self.allgather(send)[: self.rank + 1], True)
        r.done()

    def Exscan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        r = _msg(recvbuf, writable=True)
        send = r.arr.copy() if sendbuf is IN_PLACE else _msg(sendbuf).arr
        values = self.allgather(send)[: self.rank]
        if values:
            r.arr[...] = _fold(op, values, True)
            r.done()

    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        r = _msg(recvbuf, writable=True)
        if sendbuf is IN_PLACE:
            send = _as_array(recvbuf).reshape(-1).copy()
        else:
            send = _msg(sendbuf, blocks=self.size).arr
        n = send.size // self.size
        whole = np.empty_like(send)
        self.Allreduce(send, whole, op)
        r.arr[:n] = whole[self.rank * n : (self.rank + 1) * n]
        r.done()

    def Reduce_scatter(
        self, sendbuf: Any, recvbuf: Any, recvcounts: Sequence[int] | None = None, op: Op = SUM
    ) -> None:
        r = _msg(recvbuf, writable=True)
        send = _as_array(recvbuf).reshape(-1).copy() if sendbuf is IN_PLACE else _msg(sendbuf).arr
        counts = list(recvcounts) if recvcounts is not None else self.allgather(r.count)
        whole = np.empty_like(send)
        self.Allreduce(send, whole, op)
        start = sum(counts[: self.rank])
        r.arr[: counts[self.rank]] = whole[start : start + counts[self.rank]]
        r.done()

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        root = self._root(root)
        me = self.rank == root
        r = _msg(recvbuf, writable=True, blocks=self.size) if me else None
        if sendbuf is IN_PLACE:
            assert r is not None
            n = r.count // self.size
            send = r.arr[root * n : (root + 1) * n].copy()
        else:
            send = _msg(sendbuf).arr
        sb = np.ascontiguousarray(send).view(np.uint8)
        # MPI lets the receive buffer be larger than what arrives.
        out = r.arr.view(np.uint8)[: sb.size * self.size] if r is not None else None
        _call(self._c.Gather, sb, out, root)
        if r is not None:
            r.done()

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        root = self._root(root)
        me = self.rank == root
        send = _msg(sendbuf, blocks=self.size).arr if me else None
        if recvbuf is IN_PLACE:
            assert send is not None
            n = send.size // self.size
            keep = send[root * n : (root + 1) * n].copy()
            scratch = np.empty_like(keep)
            _call(self._c.Scatter, send.view(np.uint8), scratch.view(np.uint8), root)
            return
        r = _msg(recvbuf, writable=True)
        rb = r.arr.view(np.uint8)
        sb = send.view(np.uint8)[: rb.size * self.size] if send is not None else None
        _call(self._c.Scatter, sb, rb, root)
        r.done()

    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        r = _msg(recvbuf, writable=True, blocks=self.size)
        n = r.count // self.size
        if sendbuf is IN_PLACE:
            send = r.arr[self.rank * n : (self.rank + 1) * n].copy()
        else:
            send = _msg(sendbuf).arr
        sb = np.ascontiguousarray(send).view(np.uint8)
        _call(self._c.Allgather, sb, r.arr.view(np.uint8)[: sb.size * self.size])
        r.done()

    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        r = _msg(recvbuf, writable=True, blocks=self.size)
        send = r.arr.copy() if sendbuf is IN_PLACE else _msg(sendbuf, blocks=self.size).arr
        _call(self._c.Alltoall, send.view(np.uint8), r.arr.view(np.uint8))
        r.done()

    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        root = self._root(root)
        me = self.rank == root
        r = _msg(recvbuf, writable=True) if me else None
        if sendbuf is IN_PLACE:
            assert r is not None
            send = r.block(root).copy() if r.counts else r.arr.copy()
        else:
            send = _msg(sendbuf).arr
        blocks = self.gather(send, root)
        if r is not None and blocks is not None:
            counts, displs = _layout(r, [b.size for b in blocks])
            for b, c, d in zip(blocks, counts, displs):
                r.arr[d : d + c] = b[:c]
            r.done()

    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        root = self._root(root)
        parts = None
        if self.rank == root:
            s = _msg(sendbuf)
            counts, displs = _layout(s, None, self.size)
            parts = [s.arr[d : d + c].copy() for c, d in zip(counts, displs)]
        part = self.scatter(parts, root)
        if recvbuf is IN_PLACE:
            return
        r = _msg(recvbuf, writable=True)
        r.arr[: part.size] = part
        r.done()

    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        r = _msg(recvbuf, writable=True)
        send = r.block(self.rank).copy() if sendbuf is IN_PLACE else _msg(sendbuf).arr
        blocks = self.allgather(send)
        counts, displs = _layout(r, [b.size for b in blocks])
        for b, c, d in zip(blocks, counts, displs):
            r.arr[d : d + c] = b[:c]
        r.done()

    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        r = _msg(recvbuf, writable=True)
        s = _msg(sendbuf) if sendbuf is not IN_PLACE else r
        scounts, sdispls = _layout(s, None, self.size)
        parts = [s.arr[d : d + c].copy() for c, d in zip(scounts, sdispls)]
        got = self.alltoall(parts)
        counts, displs = _layout(r, [g.size for g in got])
        for g, c, d in zip(got, counts, displs):
            r.arr[d : d + c] = g[:c]
        r.done()

    # Non-blocking collectives: they complete when called.
    Ibcast = _at_once(Bcast)
    Iallreduce = _at_once(Allreduce)
    Ireduce = _at_once(Reduce)
    Igather = _at_once(Gather)
    Iscatter = _at_once(Scatter)
    Iallgather = _at_once(Allgather)
    Ialltoall = _at_once(Alltoall)
    Iscan = _at_once(Scan)
    Iexscan = _at_once(Exscan)
    Ireduce_scatter_block = _at_once(Reduce_scatter_block)
    Ireduce_scatter = _at_once(Reduce_scatter)
    Igatherv = _at_once(Gatherv)
    Iscatterv = _at_once(Scatterv)
    Iallgatherv = _at_once(Allgatherv)
    Ialltoallv = _at_once(Alltoallv)

    def ibarrier(self) -> Request:
        return self.Ibarrier()

    def ibcast(self, obj: Any = None, root: int = 0) -> Request:
        return _done(self.bcast(obj, root))

    def iallreduce(self, sendobj: Any, op: Op = SUM) -> Request:
        return _done(self.allreduce(sendobj, op))

    def __repr__(self) -> str:
        if self._impl is None:
            return "<mpi4py-compatible Comm COMM_NULL>"
        return f"<mpi4py-compatible Comm rank {self.rank} of {self.size}>"


Intracomm = Comm


def _plain(obj: Any) -> bool:
    """Whether vargr's core reduces `obj` natively (numbers and numeric arrays)."""
    if isinstance(obj, bool):
        return False
    if isinstance(obj, (int, float)):
        return not isinstance(obj, int) or -(1 << 63) <= obj < (1 << 63)
    return isinstance(obj, np.ndarray) and obj.dtype in _NATIVE_KINDS


def _layout(m: _Msg, sizes: list[int] | None, size: int = 0) -> tuple[list[int], list[int]]:
    """Counts and displacements of a v-spec, defaulting to `sizes` packed in order (or
    an even split into `size` blocks)."""
    if m.counts is not None and m.displs is not None:
        return m.counts, m.displs
    if sizes is None:
        n = m.count // size
        sizes = [n] * size
    return sizes, [sum(sizes[:i]) for i in range(len(sizes))]


class Cartcomm(Comm):
    """A communicator with a Cartesian grid (row-major rank order, as MPI's)."""

    dims: list[int]
    periods: list[bool]

    @staticmethod
    def _grid(base: Comm, dims: Sequence[int], periods: Sequence[bool]) -> Cartcomm:
        c = Cartcomm(base)
        c.dims, c.periods = list(dims), [bool(p) for p in periods]
        return c

    def Get_topology(self) -> int:
        return CART

    def Get_dim(self) -> int:
        return len(self.dims)

    @property
    def ndim(self) -> int:
        return len(self.dims)

    def Get_topo(self) -> tuple[list[int], list[int], list[int]]:
        return self.dims, [int(p) for p in self.periods], self.Get_coords(self.rank)

    @property
    def topo(self) -> tuple[list[int], list[int], list[int]]:
        return self.Get_topo()

    @property
    def coords(self) -> list[int]:
        return self.Get_coords(self.rank)

    def Get_coords(self, rank: int) -> list[int]:
        if not 0 <= rank < self.size:
            raise Exception(ERR_RANK, f"rank {rank} is out of range for {self.size} ranks")
        out = []
        for d in reversed(self.dims):
            out.append(rank % d)
            rank //= d
        return out[::-1]

    def Get_cart_rank(self, coords: Sequence[int]) -> int:
        rank = 0
        for c, d, p in zip(coords, self.dims, self.periods):
            if not 0 <= c < d:
                if not p:
                    raise Exception(ERR_RANK, f"coordinates {list(coords)} are off the grid")
                c %= d
            rank = rank * d + c
        return rank

    def Shift(self, direction: int, disp: int) -> tuple[int, int]:
        """(source, dest) of a shift by `disp` along `direction`; PROC_NULL off the edge."""
        if not 0 <= direction < len(self.dims):
            raise Exception(ERR_DIMS, f"direction {direction} of a {len(self.dims)}-D grid")
        me = self.Get_coords(self.rank)

        def at(step: int) -> int:
            c = list(me)
            c[direction] += step
            d = self.dims[direction]
            if not 0 <= c[direction] < d:
                if not self.periods[direction]:
                    return PROC_NULL
                c[direction] %= d
            return self.Get_cart_rank(c)

        return at(-disp), at(disp)

    def Sub(self, remain_dims: Sequence[bool]) -> Cartcomm:
        me = self.Get_coords(self.rank)
        color = sum(
            c * int(np.prod([d for d, r in zip(self.dims[i + 1 :], remain_dims[i + 1 :]) if not r]))
            for i, (c, r) in enumerate(zip(me, remain_dims))
            if not r
        )
        sub = self.Split(color, self.rank)
        keep = [i for i, r in enumerate(remain_dims) if r]
        return Cartcomm._grid(sub, [self.dims[i] for i in keep], [self.periods[i] for i in keep])

    def Dup(self, info: Info | None = None) -> Cartcomm:
        return Cartcomm._grid(Comm._made(_call(self._c.Dup)), self.dims, self.periods)


# ---- files ---------------------------------------------------------------------------


def _file_error(e: BaseException) -> Exception:
    """vargr.File's errors as MPI error classes."""
    if isinstance(e, FileNotFoundError):
        return Exception(ERR_NO_SUCH_FILE, str(e))
    if isinstance(e, FileExistsError):
        return Exception(ERR_FILE_EXISTS, str(e))
    if isinstance(e, PermissionError):
        return Exception(ERR_ACCESS, str(e))
    if isinstance(e, OSError) and e.errno in (28, 27):  # ENOSPC, EFBIG
        return Exception(ERR_NO_SPACE, str(e))
    if isinstance(e, _vargr.FileViewError):
        return Exception(ERR_ARG, str(e))
    if isinstance(e, (OSError, _vargr.FileError)):
        return Exception(ERR_IO, str(e))
    if isinstance(e, _vargr.VargrError):
        return _error(e)
    return Exception(ERR_OTHER, str(e))


def _io(f: Callable[..., Any], *args: Any) -> Any:
    try:
        return f(*args)
    except (OSError, _vargr.VargrError) as e:
        raise _file_error(e) from e


def _file_bytes(buf: Any, writable: bool) -> memoryview:
    """The bytes of a buffer argument: a buffer, or mpi4py's [buf, ...] spec."""
    if isinstance(buf, (list, tuple)):
        buf = buf[0]
    if isinstance(buf, np.ndarray) and not buf.flags.c_contiguous:
        raise Exception(ERR_BUFFER, "file I/O needs a C-contiguous buffer")
    m = memoryview(buf)
    if writable and m.readonly:
        raise Exception(ERR_BUFFER, "reading into a read-only buffer")
    return m.cast("B") if m.format != "B" or m.ndim != 1 else m


class File:
    """An mpi4py-compatible file over vargr.File (collective I/O by two-phase).

    The view tiles ``filetype`` from ``disp``, as MPI's does; each rank keeps its own
    file pointer in units of ``etype``.
    """

    def __init__(self, impl: Any, comm: Comm, amode: int, path: str) -> None:
        self._f = impl
        self._comm = comm
        self._amode = amode
        self._path = path
        self._disp = 0
        self._etype: Datatype = BYTE
        self._filetype: Datatype = BYTE
        self._pos = 0

    @classmethod
    def Open(
        cls, comm: Comm, filename: Any, amode: int = MODE_RDONLY, info: Info | None = None
    ) -> File:
        access = amode & (MODE_RDONLY | MODE_WRONLY | MODE_RDWR)
        if access not in (MODE_RDONLY, MODE_WRONLY, MODE_RDWR):
            raise Exception(ERR_AMODE, "give exactly one of MODE_RDONLY, MODE_WRONLY, MODE_RDWR")
        if access == MODE_RDONLY and amode & (MODE_CREATE | MODE_EXCL):
            raise Exception(ERR_AMODE, "MODE_RDONLY with MODE_CREATE or MODE_EXCL")
        if amode & MODE_CREATE:
            mode = "x" if amode & MODE_EXCL else "c"
        else:
            mode = "r" if access == MODE_RDONLY else "r+"
        path = os.fspath(filename)
        f = File(_io(_vargr.File.open, comm._c, path, mode), comm, amode, path)
        if amode & MODE_APPEND:
            f._pos = f.Get_size()
        return f

    @classmethod
    def Delete(cls, filename: Any, info: Info | None = None) -> None:
        try:
            os.remove(os.fspath(filename))
        except OSError as e:
            raise _file_error(e) from e

    def Close(self) -> None:
        _io(self._f.close)
        if self._amode & MODE_DELETE_ON_CLOSE and self._comm.rank == 0:
            File.Delete(self._path)
        self._comm.Barrier()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._f.closed:
            self.Close()

    def Get_amode(self) -> int:
        return self._amode

    def Get_size(self) -> int:
        return int(_io(self._f.size))

    def Set_size(self, size: int) -> None:
        _io(self._f.set_size, size)

    def Preallocate(self, size: int) -> None:
        _io(self._f.preallocate, size)

    def Sync(self) -> None:
        _io(self._f.sync)

    def Set_view(
        self,
        disp: int = 0,
        etype: Datatype | None = None,
        filetype: Datatype | None = None,
        datarep: str = "native",
        info: Info | None = None,
    ) -> None:
        if datarep != "native":
            raise Exception(ERR_UNSUPPORTED_OPERATION, f"data representation {datarep!r}")
        self._disp = disp
        self._etype = etype if etype is not None else BYTE
        self._filetype = filetype if filetype is not None else self._etype
        self._pos = 0

    def Get_view(self) -> tuple[int, Datatype, Datatype, str]:
        return self._disp, self._etype, self._filetype, "native"

    def Seek(self, offset: int, whence: int = SEEK_SET) -> None:
        if whence == SEEK_CUR:
            offset += self._pos
        elif whence == SEEK_END:
            offset += self.Get_size() // max(1, self._etype.size)
        if offset < 0:
            raise Exception(ERR_ARG, f"seek to a negative position ({offset})")
        self._pos = offset

    def Get_position(self) -> int:
        return self._pos

    def _view(self, at: int, n: int) -> Any:
        """The file runs of data bytes at .. at + n of the tiled view."""
        runs, size, extent = _type_runs(self._filetype)
        out: list[tuple[int, int]] = []
        if size == 0:
            raise Exception(ERR_TYPE, "a filetype of 0 bytes")
        tile, skip = divmod(at, size)
        left = n
        while left > 0:
            base = self._disp + tile * extent
            for off, length in runs:
                if skip >= length:
                    skip -= length
                    continue
                take = min(length - skip, left)
                out.append((base + off + skip, take))
                left -= take
                skip = 0
                if left == 0:
                    break
            tile += 1
        try:
            return _vargr.View.from_runs(out)
        except ValueError as e:
            raise Exception(ERR_ARG, f"the view's runs are not in file order: {e}") from e

    def _rw(self, offset: int, buf: Any, write: bool, collective: bool) -> int:
        data = _file_bytes(buf, writable=not write)
        at = offset * self._etype.size
        view = self._view(at, len(data))
        elem = (
            self._etype.dtype
            if self._etype.dtype is not None and self._etype.dtype.kind in "iuf"
            else None
        )
        _io(self._f.set_view, view, elem)
        if collective:
            _io(self._f.write_all if write else self._f.read_all, data)
        elif write:
            _io(self._f.write_at, 0, data)
        else:
            _io(self._f.read_at, 0, data)
        return len(data) // max(1, self._etype.size)

    # Explicit offsets (in etypes from the view's start); the file pointer stays.
    def Write_at_all(self, offset: int, buf: Any, status: Any = None) -> None:
        self._rw(offset, buf, True, True)

    def Read_at_all(self, offset: int, buf: Any, status: Any = None) -> None:
        self._rw(offset, buf, False, True)

    def Write_at(self, offset: int, buf: Any, status: Any = None) -> None:
        self._rw(offset, buf, True, False)

    def Read_at(self, offset: int, buf: Any, status: Any = None) -> None:
        self._rw(offset, buf, False, False)

    # The individual file pointer, which advances by what was moved.
    def Write_all(self, buf: Any, status: Any = None) -> None:
        self._pos += self._rw(self._pos, buf, True, True)

    def Read_all(self, buf: Any, status: Any = None) -> None:
        self._pos += self._rw(self._pos, buf, False, True)

    def Write(self, buf: Any, status: Any = None) -> None:
        self._pos += self._rw(self._pos, buf, True, False)

    def Read(self, buf: Any, status: Any = None) -> None:
        self._pos += self._rw(self._pos, buf, False, False)


FILE_NULL: File | None = None


# ---- the world -------------------------------------------------------------------------

COMM_NULL = Comm(None)
COMM_WORLD = Comm(_join() if _vargr.in_job() else _vargr.solo())
COMM_WORLD._world = list(range(COMM_WORLD.size))
COMM_SELF = Comm(_vargr.solo())
COMM_SELF._world = [COMM_WORLD.rank]
