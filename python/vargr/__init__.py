"""vargr from Python: tree overlay networks, rank collectives, compression and dedup.

vargr is a communication layer for programs on networks slower than they would like.
This package exposes it to the two kinds of Python users it has:

* tool builders (MRNet's users): a front-end starts a tree with :class:`Network`,
  opens :class:`Stream` s with built-in or Python filters, multicasts with
  ``send(tag, fmt, *values)`` and receives reduced waves with ``recv()``; back-ends
  join with :meth:`Backend.attach`;
* parallel programs (mpi4py's users): ``comm = vargr.World()`` under ``vargr run``,
  ``mpirun`` or ``srun``, then ``comm.allreduce(x, op=vargr.SUM)``,
  ``comm.Allreduce(sendbuf, recvbuf)`` and the rest of mpi4py's names.

Shared files: :meth:`File.open` on a communicator, a :class:`View` per rank, then
``write_all``/``read_all`` (two-phase collective I/O, aggregators chosen by locality
with ``aggregation="la-two-phase"``). They are top-level names like :class:`Comm`, whose
companion they are; the submodules hold function namespaces.

:mod:`vargr.codec` and :mod:`vargr.dedup` hold the codec and redundancy-elimination
entry points; :mod:`vargr.paths` runs path specifications (:class:`Paths`) with Python
stages at their ends. Everything calls the Rust libraries directly (the extension module
``vargr._vargr``); errors are :class:`VargrError` subclasses carrying the Rust message.

Blocking calls release the GIL and can be interrupted with Ctrl-C: the tree's calls
(``Stream.recv``, ``Backend.recv``, start-up), joining a job, and collectives (a
collective interrupted on one rank does not complete there).

Nothing in ``__all__`` is named like a builtin, so ``from vargr import *`` shadows none:
the timeout error is :class:`VargrTimeoutError` (still a builtin ``TimeoutError``); its
old name ``vargr.TimeoutError`` remains as an alias outside ``__all__``.
"""

from __future__ import annotations

import atexit
import json
import os
from typing import Any

from . import _vargr, codec, dedup, paths
from ._vargr import (
    BAND,
    BOR,
    IN_PLACE,
    LAND,
    LOR,
    MAX,
    MIN,
    PROD,
    SUM,
    Backend,
    CodecError,
    CollectiveError,
    Comm,
    Communicator,
    CondAllreduce,
    CondOutcome,
    DedupError,
    File,
    FileError,
    FileStats,
    FileViewError,
    FilterError,
    FormatError,
    InPlace,
    JobError,
    Network,
    NetworkError,
    NodeLostError,
    Op,
    Packet,
    Paths,
    PeerLostError,
    ShutdownError,
    StartupError,
    Stream,
    Topology,
    TopologyError,
    VargrError,
    VargrTimeoutError,
    View,
)

# The crate's version, compiled into the extension: the wheel's too (maturin takes it from
# the crate), read without importlib.metadata, whose import alone made `import vargr` take
# 31 ms instead of 11 (every rank of a job pays it).
__version__: str = _vargr.__version__

# The timeout error's former name, kept for code that uses it (out of __all__: it would
# shadow the builtin under `from vargr import *`).
TimeoutError = VargrTimeoutError

__all__ = [
    "BAND",
    "BOR",
    "IN_PLACE",
    "LAND",
    "LOR",
    "MAX",
    "MIN",
    "PROD",
    "SUM",
    "Backend",
    "CodecError",
    "CollectiveError",
    "Comm",
    "Communicator",
    "CondAllreduce",
    "CondOutcome",
    "DedupError",
    "File",
    "FileError",
    "FileStats",
    "FileViewError",
    "FilterError",
    "FormatError",
    "InPlace",
    "JobError",
    "Network",
    "NetworkError",
    "NodeLostError",
    "Op",
    "Packet",
    "Paths",
    "PeerLostError",
    "ShutdownError",
    "StartupError",
    "Stream",
    "Topology",
    "TopologyError",
    "VargrError",
    "VargrTimeoutError",
    "View",
    "World",
    "codec",
    "dedup",
    "finish",
    "paths",
    "trace_diff",
    "trace_report",
    "write_trace",
]

_finish_registered = False


def World() -> Comm:
    """The world communicator of this process's rank.

    Joins the job this process was started in (``vargr run``, ``mpirun`` or ``srun``:
    rank and size come from the launcher's variables) on the first call, and returns
    the same :class:`Comm` afterwards. One rank per process. Raises :class:`JobError`
    when the process was not started by a launcher or the wire-up fails.
    """
    global _finish_registered
    comm = _vargr.world()
    if not _finish_registered:
        # Eager sends still queued at exit must reach their peers.
        atexit.register(_vargr.finish)
        _finish_registered = True
    return comm


def finish() -> None:
    """Sends whatever is still queued for other ranks (and writes the trace under
    ``vargr run --trace``). Called at exit; call it before ``os._exit``."""
    _vargr.finish()


def write_trace(directory: str | os.PathLike[str]) -> str:
    """Writes this process's event records to ``directory`` (for ``vargr trace
    report``) and returns the file's path."""
    return str(_vargr.write_trace(os.fspath(directory)))


def trace_report(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The analysis of the run traced into ``directory`` (``vargr run --trace``), as
    ``vargr trace report --json`` prints it: per collective the culprit and every
    rank's arrival and departure orders, latencies, links, stages and tree nodes.
    Raises ``OSError`` when the directory holds no trace and ``ValueError`` for a
    file that is not one."""
    result: dict[str, Any] = json.loads(_vargr.trace_report(os.fspath(directory)))
    return result


def trace_diff(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> dict[str, Any]:
    """Two traced runs compared collector by collector, as ``vargr trace diff
    --json`` prints them: ``rows`` (calls, mean, median and p90 per call, total time
    and bytes in each, and the change), ``only_a`` and ``only_b``."""
    result: dict[str, Any] = json.loads(_vargr.trace_diff(os.fspath(a), os.fspath(b)))
    return result
