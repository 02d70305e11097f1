"""vargr.File checked for real; run under `vargr run -n 4`: `io_check.py CASE PATH [ARGS]`.

Cases:

* ``collective PATH HOW``: with HOW ``two-phase``, ``la-two-phase`` (bytes, Jonker-Volgenant)
  or ``la-blocks-hungarian``, an 8x10 float64 array in 2x2 blocks,
  one per rank (ranks numbered down the columns of the process grid, so that each
  half of the file holds blocks of two ranks that ``--sites 2`` puts on different
  nodes); each rank writes its block through a subarray view with ``write_all``, every
  rank compares the file with numpy's ``tofile`` of the whole array, then reads its
  block back with ``read_all``. Prints ``stats R BETWEEN WITHIN KEPT AGGREGATORS`` of
  the write.
* ``independent PATH``: interleaved vector views written in two pieces with
  ``write_at`` from a bytearray and a memoryview, read back with ``read_at``, plus the
  argument errors (negative offsets, non-contiguous and read-only buffers).
* ``overlap PATH``: ranks 1 and 2 have overlapping views; every rank must raise.
* ``missing PATH``: PATH's directory does not exist; every rank must raise.
* ``interrupt PATH MARKER`` (2 ranks): rank 1 writes its pid to MARKER and blocks in
  ``write_all``, which rank 0 never calls; Ctrl-C must end the wait with
  KeyboardInterrupt, after which rank 1 writes "interrupted" to MARKER and tells rank 0.

Each rank prints ``rank R ok`` at the end, or fails with an AssertionError.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import vargr

ROWS, COLS = 8, 10


def whole() -> np.ndarray:
    """The global array, computed without vargr."""
    i, j = np.meshgrid(np.arange(ROWS), np.arange(COLS), indexing="ij")
    return (i * 100 + j + 0.25).astype(np.float64)


def collective(comm: vargr.Comm, path: str, args: list[str]) -> None:
    assert comm.size == 4, "the collective case needs 4 ranks"
    how = args[0]
    # Rank r is at row r % 2, column r // 2 of the 2x2 process grid.
    r0, c0 = (comm.rank % 2) * (ROWS // 2), (comm.rank // 2) * (COLS // 2)
    a = whole()
    block = np.ascontiguousarray(a[r0 : r0 + ROWS // 2, c0 : c0 + COLS // 2])
    view = vargr.View.subarray(0, a.shape, block.shape, (r0, c0), elem_bytes=a.itemsize)
    assert view.nbytes == block.nbytes, (view, block.nbytes)
    if how == "two-phase":
        f = vargr.File.open(comm, path, "w", cb_buffer_size=96)
    elif how == "la-two-phase":
        f = vargr.File.open(comm, path, "w", aggregation="la-two-phase", cb_buffer_size=96)
    else:
        assert how == "la-blocks-hungarian", how
        f = vargr.File.open(
            comm,
            path,
            "w",
            aggregation="la-two-phase",
            count="blocks",
            solver="hungarian",
            cb_buffer_size=96,
        )
    with f:
        f.set_view(view, dtype=block.dtype)
        f.write_all(block)
        s = f.stats
        print(
            f"stats {comm.rank} {s.bytes_between_nodes} {s.bytes_within_node} "
            f"{s.bytes_kept} {','.join(map(str, s.aggregators))}",
            flush=True,
        )
        # 96-byte rounds: a 320-byte domain takes several.
        assert s.rounds >= 4, s
        assert f.size() == a.nbytes, (f.size(), a.nbytes)
        with tempfile.TemporaryDirectory() as d:
            want = Path(d) / "want.bin"
            a.tofile(want)
            got = Path(path).read_bytes()
            assert got == want.read_bytes(), "the file differs from numpy's tofile"
        back = np.zeros_like(block)
        f.read_all(back)
        assert np.array_equal(back, block), (back, block)
        comm.barrier()


def independent(comm: vargr.Comm, path: str) -> None:
    p, r = comm.size, comm.rank
    # Rank r's data: 4 blocks of 16 bytes, the file interleaving every rank's blocks.
    view = vargr.View.vector(16 * r, 4, 16, 16 * p)
    assert view.runs == [(16 * r + 16 * p * k, 16) for k in range(4)], view.runs
    data = bytes((r * 64 + k) % 256 for k in range(64))
    with vargr.File.open(comm, path, "create") as f:
        f.set_view(view)
        f.write_at(0, bytearray(data[:24]))
        f.write_at(24, memoryview(data)[24:])
        f.sync()
        comm.barrier()
        back = bytearray(64)
        assert f.read_at(0, back) == 64
        assert bytes(back) == data, (back, data)
        part = np.zeros(5, dtype=np.uint8)
        assert f.read_at(40, part) == 5
        assert part.tobytes() == data[40:45]
        bad: list[tuple[Callable[[], object], str]] = [
            (lambda: f.write_at(-1, data), "offset"),
            (lambda: f.read_at(-8, back), "offset"),
            (lambda: f.set_size(-1), "n"),
        ]
        for call, what in bad:
            try:
                call()
            except (OverflowError, ValueError) as e:
                assert what in str(e), e
            else:
                raise AssertionError(f"a negative {what} was accepted")
        try:
            f.write_at(0, np.zeros((4, 4), dtype=np.float64)[:, ::2])
        except TypeError as e:
            assert "C-contiguous" in str(e), e
        else:
            raise AssertionError("a non-contiguous buffer was accepted")
        try:
            f.read_at(0, data)
        except TypeError as e:
            assert "read-only" in str(e), e
        else:
            raise AssertionError("a read-only buffer was read into")
        try:
            f.write_at(60, data[:8])
        except ValueError as e:
            assert "past the view" in str(e), e
        else:
            raise AssertionError("a write past the view was accepted")
    assert f.closed
    want = b"".join(
        bytes((q * 64 + k * 16 + b) % 256 for b in range(16)) for k in range(4) for q in range(p)
    )
    assert Path(path).read_bytes() == want
    try:
        f.size()
    except ValueError as e:
        assert "closed" in str(e), e
    else:
        raise AssertionError("a closed file answered")


def overlap(comm: vargr.Comm, path: str) -> None:
    # Rank r writes bytes 100r .. 100r+100, except rank 2, which starts at 150.
    start = 150 if comm.rank == 2 else 100 * comm.rank
    with vargr.File.open(comm, path, "w") as f:
        f.set_view(vargr.View.contiguous(start, 100))
        try:
            f.write_all(np.zeros(100, dtype=np.uint8))
        except vargr.FileViewError as e:
            assert isinstance(e, ValueError)
            assert "ranks 1 and 2" in str(e), e
            print(f"rank {comm.rank} raised {type(e).__name__}: {e}", flush=True)
        else:
            raise AssertionError("overlapping views were written")
        # The file is still usable by every rank after the failed call.
        f.set_view(vargr.View.contiguous(100 * comm.rank, 100))
        f.write_all(np.full(100, comm.rank, dtype=np.uint8))
    assert Path(path).read_bytes() == bytes(np.repeat(np.arange(comm.size, dtype=np.uint8), 100))


def missing(comm: vargr.Comm, path: str) -> None:
    try:
        vargr.File.open(comm, path, "w")
    except FileNotFoundError as e:
        assert e.errno == 2, e
        assert "rank 0" in str(e), e
        print(f"rank {comm.rank} raised {type(e).__name__}: {e}", flush=True)
    else:
        raise AssertionError("a file in a missing directory was opened")


def interrupt(comm: vargr.Comm, path: str, marker: str) -> None:
    f = vargr.File.open(comm, path, "w")
    if comm.rank == 1:
        try:
            with f:
                f.set_view(vargr.View.contiguous(0, 8))
                with open(marker + ".tmp", "w") as m:
                    m.write(str(os.getpid()))
                os.replace(marker + ".tmp", marker)
                f.write_all(bytes(8))
        except KeyboardInterrupt:
            # Leaving the block by an exception released the file without a collective.
            assert f.closed
            with open(marker, "w") as m:
                m.write("interrupted")
            comm.send("done", dest=0, tag=6)
    else:
        assert comm.recv(source=1, tag=6) == "done"


def main() -> None:
    case, path, *args = sys.argv[1:]
    comm = vargr.World()
    if case == "collective":
        collective(comm, path, args)
    elif case == "independent":
        independent(comm, path)
    elif case == "overlap":
        overlap(comm, path)
    elif case == "missing":
        missing(comm, path)
    elif case == "interrupt":
        interrupt(comm, path, args[0])
    else:
        raise SystemExit(f"unknown case {case}")
    print(f"rank {comm.rank} ok", flush=True)


if __name__ == "__main__":
    main()
