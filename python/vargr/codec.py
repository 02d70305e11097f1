"""vargr's lossless codecs and its adaptive compression engine.

Slow links make compression pay, but which codec pays depends on the data and the link.
These are the entry points the codec stage itself uses: :func:`compress` with a named
codec (``lz4``, ``zstd:3``, ``fpc``, ``shuffle-zstd:1``, ...), :func:`decompress`,
:func:`measure` (ratio and speed of every codec on some data), :func:`choose` (what the
adaptive engine would pick on a link, as ``vargr codec bench`` shows) and
:class:`Engine` (the engine itself, deciding per message and link).

Buffers are ``bytes``-like objects or numpy arrays; a C-contiguous numpy array is read
without a copy and its dtype gives the element type (``float64`` arrays meet FPC).
"""

from __future__ import annotations

from typing import Any, Union

from ._vargr import codec as _codec

Buffer = Union[bytes, bytearray, memoryview, Any]

Engine = _codec.Engine


def compress(data: Buffer, codec: str = "lz4", elem: str | None = None) -> bytes:
    """Compresses ``data`` with ``codec`` into a self-describing frame (raw-framed when
    the codec does not make it smaller). ``elem`` (``u8``, ``i32``, ``f64``, ...) says
    what the bytes hold; default: the numpy dtype, else bytes."""
    result: bytes = _codec.compress(data, codec, elem)
    return result


def decompress(frame: Buffer, max_len: int = 1 << 30) -> bytes:
    """The original bytes of a frame; refuses one announcing more than ``max_len``."""
    result: bytes = _codec.decompress(frame, max_len)
    return result


def decompress_array(frame: Buffer, max_len: int = 1 << 30) -> Any:
    """Like :func:`decompress`, as a numpy array of the frame's element type."""
    import numpy as np

    info = frame_info(frame)
    return np.frombuffer(decompress(frame, max_len), dtype=_DTYPES[info["elem"]])


_DTYPES = {
    "u8": "uint8",
    "i8": "int8",
    "u16": "uint16",
    "i16": "int16",
    "u32": "uint32",
    "i32": "int32",
    "u64": "uint64",
    "i64": "int64",
    "f32": "float32",
    "f64": "float64",
}


def frame_info(frame: Buffer) -> dict[str, Any]:
    """A frame's header: ``codec``, ``elem``, ``original_len``, ``frame_len``."""
    result: dict[str, Any] = _codec.frame_info(frame)
    return result


def codecs() -> list[str]:
    """The codecs the engine and the benchmarks try, by name."""
    result: list[str] = _codec.codecs()
    return result


def measure(data: Buffer, elem: str | None = None) -> list[dict[str, Any]]:
    """Ratio and speed (MB/s of original data) of every codec that fits ``elem`` on
    ``data``: one dict per codec."""
    result: list[dict[str, Any]] = _codec.measure(data, elem)
    return result


def choose(
    data: Buffer,
    elem: str | None = None,
    bandwidth: str | None = "100mbit",
    latency: str = "0ms",
) -> dict[str, Any]:
    """What the adaptive engine picks for one message of ``data`` on a link of
    ``bandwidth`` (``100mbit``, ``1gbit``, ``50MB/s``; None: unlimited) and one-way
    ``latency`` (``1ms``), after measuring every codec on it: ``codec``, ``reason``,
    ``measures``."""
    result: dict[str, Any] = _codec.choose(data, elem, bandwidth, latency)
    return result


__all__ = [
    "Engine",
    "choose",
    "codecs",
    "compress",
    "decompress",
    "decompress_array",
    "frame_info",
    "measure",
]
