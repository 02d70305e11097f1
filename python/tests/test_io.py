"""vargr.File and vargr.View: views and argument checks in this process (one rank), and
collective I/O for real under `vargr run -n 4` (scripts/io_check.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import vargr
from conftest import PYTHON, clean_env, run, script, vargr_binary
from vargr import _vargr


def run_case(*args: str, sites: int | None = None) -> str:
    cmd = [vargr_binary(), "run", "-n", "4"]
    if sites:
        cmd += ["--sites", str(sites)]
    r = run([*cmd, "--", PYTHON, script("io_check.py"), *args], timeout=180)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    got = sorted(
        line for line in r.stdout.splitlines() if line.startswith("rank ") and line.endswith(" ok")
    )
    assert got == [f"rank {n} ok" for n in range(4)], r.stdout
    return r.stdout


def stats(out: str) -> dict[int, tuple[int, int, int, list[int]]]:
    """`stats R BETWEEN WITHIN KEPT AGGREGATORS` lines by rank."""
    rows = {}
    for line in out.splitlines():
        if line.startswith("stats "):
            _, rank, between, within, kept, aggs = line.split()
            rows[int(rank)] = (
                int(between),
                int(within),
                int(kept),
                [int(a) for a in aggs.split(",")],
            )
    assert sorted(rows) == [0, 1, 2, 3], out
    return rows


def test_views_mirror_the_rust_constructors() -> None:
    # A 4x6 array of 8-byte elements, rows 1..3 and columns 2..5 (crates/vargr-io's test).
    c = vargr.View.subarray(0, (4, 6), (2, 3), (1, 2), elem_bytes=8)
    assert c.runs == [(64, 24), (112, 24)] and c.nbytes == 48
    f = vargr.View.subarray(0, [4, 6], [2, 3], [1, 2], "F", elem_bytes=8)
    assert f.runs == [(72, 16), (104, 16), (136, 16)]
    assert vargr.View.vector(8, 3, 4, 10).runs == [(8, 4), (18, 4), (28, 4)]
    assert vargr.View.indexed(100, [(0, 2), (5, 1)], 8).runs == [(100, 16), (140, 8)]
    assert vargr.View.from_runs([(0, 4), (4, 4), (16, 8)]).runs == [(0, 8), (16, 8)]
    assert vargr.View.contiguous(5, 0).runs == [] and vargr.View.contiguous(5, 3).nbytes == 3
    assert vargr.View.contiguous(0, 8) == vargr.View.from_runs([(0, 8)])
    # numpy integers are ints too.
    a = np.zeros((4, 6))
    assert vargr.View.subarray(0, a.shape, (2, 3), (np.int64(1), 2), elem_bytes=a.itemsize) == c
    assert "2 runs, 48 bytes" in repr(c)


def test_bad_views_raise_value_errors_naming_the_problem() -> None:
    with pytest.raises(vargr.FileViewError, match="run 1 at offset 2"):
        vargr.View.from_runs([(0, 4), (2, 4)])
    with pytest.raises(ValueError, match="dimension 0"):
        vargr.View.subarray(0, (4,), (3,), (2,), elem_bytes=8)
    with pytest.raises(ValueError, match="blocks would overlap"):
        vargr.View.vector(0, 2, 8, 4)
    with pytest.raises(ValueError, match="order"):
        vargr.View.subarray(0, (4,), (1,), (0,), "X", elem_bytes=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"offset must not be negative, got -1"):
        vargr.View.contiguous(-1, 4)
    with pytest.raises(ValueError, match=r"starts\[1\] must not be negative"):
        vargr.View.subarray(0, (4, 4), (1, 1), (0, -2), elem_bytes=1)
    with pytest.raises(ValueError, match=r"runs\[0\]\[1\] must not be negative"):
        vargr.View.from_runs([(0, -4)])
    with pytest.raises(OverflowError, match="length"):
        vargr.View.contiguous(0, 2**64)
    with pytest.raises(TypeError, match="pairs"):
        vargr.View.from_runs([(0, 1, 2)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        vargr.View.subarray(0, (4,), (1,), (0,), "C", 8)  # type: ignore[call-arg]


def test_one_rank_file_round_trip_and_checks(tmp_path: Path) -> None:
    comm = _vargr.solo()
    path = tmp_path / "one.bin"
    a = np.arange(24, dtype=np.float64).reshape(4, 6)
    block = np.ascontiguousarray(a[1:3, 2:5])
    with vargr.File.open(comm, path, "w") as f:
        assert not f.closed and f.path == path
        f.set_view(vargr.View.subarray(0, a.shape, block.shape, (1, 2), elem_bytes=8), "float64")
        assert f.view.nbytes == block.nbytes
        f.write_all(block)
        assert f.stats.bytes_kept == block.nbytes and f.stats.aggregators == [0]
        assert f.stats.bytes_sieved > 0  # the holes between the rows were read first
        assert f.size() == 136
        back = np.zeros_like(block)
        f.read_all(back)
        assert np.array_equal(back, block)
        with pytest.raises(vargr.FileViewError, match="gave 24 bytes for a view of 48") as e:
            f.write_all(block[:1])
        assert e.value.rank == 0
        with pytest.raises(TypeError, match="C-contiguous"):
            f.write_all(a[1:3, 2:5])
        with pytest.raises(TypeError, match="buffer protocol"):
            f.write_all([1.0, 2.0])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="read-only"):
            f.read_all(block.tobytes())
        with pytest.raises(ValueError, match="compression knows"):
            f.set_view(f.view, np.complex128)
        f.set_view(vargr.View.contiguous(0, 8), "f64")
        f.set_view(vargr.View.contiguous(0, 8), np.dtype("<i4"))
        f.set_size(200)
        f.preallocate(256)
        assert f.size() == 256
        f.sync()
    assert f.closed
    f.close()  # again: nothing
    with pytest.raises(ValueError, match="closed"):
        f.write_all(block)
    assert path.read_bytes()[64:88] == block[0].tobytes()


def test_open_checks_its_settings(tmp_path: Path) -> None:
    comm = _vargr.solo()
    p = tmp_path / "f.bin"
    with pytest.raises(ValueError, match="mode"):
        vargr.File.open(comm, p, "a")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="la-two-phase"):
        vargr.File.open(comm, p, "w", solver="hungarian")
    with pytest.raises(ValueError, match="solver"):
        vargr.File.open(comm, p, "w", aggregation="la-two-phase", solver="simplex")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cb_buffer_size must not be negative"):
        vargr.File.open(comm, p, "w", cb_buffer_size=-1)
    with pytest.raises(FileNotFoundError):
        vargr.File.open(comm, p, "r")
    with pytest.raises(vargr.FileError, match="node labels"):
        vargr.File.open(comm, p, "w", nodes=[0, 1])
    vargr.File.open(comm, p, "x").close()
    with pytest.raises(FileExistsError) as e:
        vargr.File.open(comm, p, "x")
    assert e.value.errno == 17 and e.value.filename == str(p)
    # An exception inside the block releases the file without a collective close.
    with pytest.raises(RuntimeError), vargr.File.open(comm, p, "r+") as f:
        raise RuntimeError("inside")
    assert f.closed


@pytest.mark.parametrize("how", ["two-phase", "la-two-phase", "la-blocks-hungarian"])
def test_four_ranks_write_and_read_a_2d_array_through_subarray_views(
    tmp_path: Path, how: str
) -> None:
    out = run_case("collective", str(tmp_path / "a.bin"), how)
    rows = stats(out)
    # One host: one node, one aggregator; everything stays on the node.
    assert all(s[0] == 0 for s in rows.values()), rows
    assert sum(s[1] + s[2] for s in rows.values()) == 8 * 10 * 8, rows
    assert all(s[3] == [0] for s in rows.values()), rows


@pytest.mark.parametrize("how", ["two-phase", "la-two-phase"])
def test_two_sites_are_two_nodes_and_bytes_cross_between_them(tmp_path: Path, how: str) -> None:
    out = run_case("collective", str(tmp_path / "a.bin"), how, sites=2)
    rows = stats(out)
    # Each half of the file holds blocks of a rank of either site (io_check.py).
    assert sum(s[0] for s in rows.values()) > 0, rows
    assert sum(s[0] + s[1] + s[2] for s in rows.values()) == 8 * 10 * 8, rows
    aggs = rows[0][3]
    assert len(aggs) == 2 and {a // 2 for a in aggs} == {0, 1}, rows  # one per site


def test_independent_write_at_and_read_at(tmp_path: Path) -> None:
    run_case("independent", str(tmp_path / "d.bin"))


def test_overlapping_views_raise_on_every_rank(tmp_path: Path) -> None:
    out = run_case("overlap", str(tmp_path / "e.bin"))
    raised = [line for line in out.splitlines() if " raised " in line]
    assert len(raised) == 4, out
    assert all("FileViewError" in line and "ranks 1 and 2 both write" in line for line in raised), (
        out
    )


def test_a_missing_directory_raises_on_every_rank(tmp_path: Path) -> None:
    out = run_case("missing", str(tmp_path / "no" / "f.bin"))
    raised = sorted(
        line.split(" raised ")[0]
        for line in out.splitlines()
        if " raised FileNotFoundError" in line
    )
    assert raised == [f"rank {n}" for n in range(4)], out


def test_ctrl_c_interrupts_a_rank_blocked_in_write_all(tmp_path: Path) -> None:
    marker = tmp_path / "rank1"
    args = ["interrupt", str(tmp_path / "i.bin"), str(marker)]
    p = subprocess.Popen(
        [vargr_binary(), "run", "-n", "2", "--", PYTHON, script("io_check.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    try:
        end = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < end:
            time.sleep(0.05)
        assert marker.exists(), "rank 1 never reached write_all"
        time.sleep(0.3)  # now inside write_all
        os.kill(int(marker.read_text()), signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert marker.read_text() == "interrupted"
    assert sorted(line for line in out.splitlines() if line.endswith(" ok")) == [
        "rank 0 ok",
        "rank 1 ok",
    ]


def test_mpi4py_style_file_io_through_vargr_mpi(tmp_path: Path) -> None:
    """MPI.File: Open, Set_view with subarray filetypes, Write_all/Read_all, Read_at,
    a file pointer over a tiled view, Seek, and error classes (scripts/mpi_file.py)."""
    r = run(
        [vargr_binary(), "run", "-n", "4", "--", PYTHON, script("mpi_file.py"), str(tmp_path)],
        timeout=180,
    )
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    got = sorted(line for line in r.stdout.splitlines() if line.endswith("mpi file OK"))
    assert got == [f"rank {n} mpi file OK" for n in range(4)], r.stdout
