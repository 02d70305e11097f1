"""Path specifications (seed 001's PATHS) from Python, with Python stages at the ends.

A :class:`vargr.Paths` is a checked, merged path specification; a tree started with
``vargr.Network(paths.topology, backend, paths=paths)`` gives each link the stages its
paths name (built-in ones, C plugins' and Rust programs'). The stages of a path that are
Python callables (``py:NAME`` in the file) run at its ends, in the Python processes
there:

* at the element (after the last ``remote``): :func:`open_stream` returns a stream whose
  ``recv`` passes every result through them, in order;
* at a back-end (first on the path): :func:`backend` wraps a :class:`vargr.Backend` so
  that ``send`` passes every packet through them before it goes up.

A Python stage takes a :class:`vargr.Packet` and returns one (``None`` drops it). One
that raises raises :class:`StageError`, naming the stage and where it ran; the tree is
unaffected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._vargr import Backend, Network, Packet, Paths, Stream, VargrError

__all__ = ["PathBackend", "PathStream", "StageError", "backend", "open_stream"]

PyStage = Callable[[Packet], "Packet | None"]


class StageError(VargrError):
    """A Python stage of a path failed: ``stage`` names it, ``where`` where it ran."""

    def __init__(self, stage: str, where: str, cause: BaseException) -> None:
        super().__init__(f"python stage {stage} at {where}: {type(cause).__name__}: {cause}")
        self.stage = stage
        self.where = where


def _resolve(names: list[str], stages: Mapping[str, PyStage]) -> list[tuple[str, PyStage]]:
    missing = [n for n in names if n not in stages]
    if missing:
        raise ValueError(f"the paths name Python stages not given in stages=: {', '.join(missing)}")
    return [(n, stages[n]) for n in names]


def _run(chain: list[tuple[str, PyStage]], where: str, p: Packet) -> Packet | None:
    for name, f in chain:
        try:
            out = f(p)
        except Exception as e:
            raise StageError(name, where, e) from e
        if out is None:
            return None
        if not isinstance(out, Packet):
            raise StageError(name, where, TypeError(f"returned {type(out).__name__}, not a Packet"))
        p = out
    return p


class PathStream:
    """The paths' stream at the element: results pass the element's Python stages."""

    def __init__(self, stream: Stream, chain: list[tuple[str, PyStage]], where: str) -> None:
        self.stream = stream
        self._chain = chain
        self._where = where

    def send(self, tag: int, fmt: str, *values: Any) -> None:
        self.stream.send(tag, fmt, *values)

    def recv(self, timeout: float | None = None) -> Packet:
        """The next result that the element's stages keep."""
        while True:
            p = _run(self._chain, self._where, self.stream.recv(timeout=timeout))
            if p is not None:
                return p


def open_stream(
    net: Network,
    paths: Paths,
    stages: Mapping[str, PyStage] | None = None,
    **kw: Any,
) -> PathStream:
    """Opens the paths' stream to every back-end of ``net`` (started with
    ``paths=paths``): each node reduces as its paths say, and results pass the Python
    stages at the element, found by name in ``stages``. Other keywords go to
    :meth:`Network.open_stream` (``sync``, ``wave_deadline``...)."""
    chain = _resolve(paths.last, stages or {})
    filters = paths.filters
    per_node: list[dict[str, int | str]] = [
        {"node": n, "up": f} for n, f in filters.items() if n != 0
    ]
    s = net.open_stream(up=filters.get(0, "identity"), per_node=per_node, **kw)
    return PathStream(s, chain, f"element {paths.element}")


class PathBackend:
    """A back-end whose packets pass its paths' first (Python) stages on the way up."""

    def __init__(self, be: Backend, chain: list[tuple[str, PyStage]]) -> None:
        self.backend = be
        self._chain = chain

    def recv(self, timeout: float | None = None) -> Packet:
        return self.backend.recv(timeout=timeout)

    def send(self, stream: int, tag: int, fmt: str, *values: Any) -> None:
        p = _run(
            self._chain, f"back-end {self.backend.rank}", Packet(tag, fmt, *values, stream=stream)
        )
        if p is not None:
            self.backend.send_packet(p)


def backend(be: Backend, paths: Paths, stages: Mapping[str, PyStage] | None = None) -> PathBackend:
    """Wraps a back-end (``Backend.attach()``) with the Python stages its path starts with."""
    return PathBackend(be, _resolve(paths.first.get(be.rank, []), stages or {}))
