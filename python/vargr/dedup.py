"""vargr's global redundancy elimination: send only what the other side lacks.

Data is cut into segments by content (FastCDC by default, so an insertion moves few
boundaries), segments are named by short fingerprints, and a receiver that already
holds a segment rebuilds it from its cache. :func:`segment` and :func:`fingerprint`
show the first two steps; :class:`Session` runs the whole two-level fingerprint
protocol between an in-memory sender and receiver and reports what each transfer
cost, given everything sent before (what ``vargr sync`` and a dedup link stage send).
"""

from __future__ import annotations

import os
from typing import Any, Union

from ._vargr import dedup as _dedup

Data = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]", Any]

Session = _dedup.Session


def segment(data: Data, segmenter: str = "cdc") -> list[tuple[int, int]]:
    """The segments of ``data`` (bytes, a buffer, or a file path) as ``(offset,
    length)`` pairs, cut by ``segmenter`` (``cdc``, ``cdc:MIN:AVG:MAX``, ``static:4k``,
    ``sw``)."""
    if isinstance(data, os.PathLike):
        data = os.fspath(data)
    result: list[tuple[int, int]] = _dedup.segment(data, segmenter)
    return result


def fingerprint(segment: bytes | bytearray | memoryview | Any, bits: int | None = None) -> int:
    """The 64-bit fingerprint vargr names ``segment`` by, cut to ``bits`` if given
    (the protocol sends 40)."""
    result: int = _dedup.fingerprint(segment, bits)
    return result


__all__ = ["Session", "fingerprint", "segment"]
