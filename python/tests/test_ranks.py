"""Ranks in separate processes: scripts/ranks_check.py checks every collective for
real under `vargr run` and under Open MPI's `mpirun`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import vargr
from conftest import PYTHON, clean_env, run, script, vargr_binary


def assert_all_ok(out: str, n: int) -> None:
    got = sorted(line for line in out.splitlines() if line.startswith("rank "))
    assert got == sorted(f"rank {r} ok" for r in range(n)), out


def test_collectives_under_vargr_run() -> None:
    r = run(
        [vargr_binary(), "run", "-n", "3", "--", PYTHON, script("ranks_check.py")],
        timeout=180,
    )
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert_all_ok(r.stdout, 3)


def test_python_ranks_write_their_trace_at_exit(tmp_path: Path) -> None:
    # vargr.World() registers Job::finish with atexit: queued sends are flushed and,
    # under --trace, each process writes its trace file.
    out = tmp_path / "trace"
    r = run(
        [
            vargr_binary(),
            "run",
            "-n",
            "2",
            "--trace",
            str(out),
            "--",
            PYTHON,
            script("ranks_check.py"),
        ],
        timeout=180,
    )
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert_all_ok(r.stdout, 2)
    assert len(list(out.glob("*.vtr"))) == 2, sorted(p.name for p in out.iterdir())


def test_traces_monitors_and_top_name_python_ranks(tmp_path: Path) -> None:
    # Rank 1 sleeps before each allreduce: every view of the job must name it.
    slow = [PYTHON, script("slow_rank.py"), "1", "300"]
    trace = tmp_path / "trace"
    r = run([vargr_binary(), "run", "-n", "3", "--trace", str(trace), "--", *slow], timeout=180)
    assert r.returncode == 0, r.stderr
    report = run([vargr_binary(), "trace", "report", str(trace)])
    assert report.returncode == 0, report.stderr
    assert "collective instances on 3 ranks" in report.stdout, report.stdout
    assert "culprit: rank 1 (last in " in report.stdout, report.stdout
    # The same analysis from Python.
    doc = vargr.trace_report(trace)
    allreduce = next(c for c in doc["collectives"] if c["collector"].endswith("allreduce"))
    assert allreduce["culprit"] == 1, allreduce
    same = vargr.trace_diff(trace, trace)
    row = next(r for r in same["rows"] if r["collector"].endswith("allreduce"))
    assert row["change"]["calls"] == 0 and row["change"]["mean"] == 0.0, row
    with pytest.raises(OSError, match="no trace files"):
        vargr.trace_report(tmp_path)

    status = tmp_path / "status.json"
    monitor = ["--monitor", "load-balance,stats", "--status", str(status)]
    r = run([vargr_binary(), "run", "-n", "3", *monitor, "--", *slow], timeout=180)
    assert r.returncode == 0, r.stderr
    assert "vargr monitor (final): allreduce: rank 1 arrived last" in r.stderr, r.stderr
    top = run([vargr_binary(), "top", "--once", str(status)])
    assert top.returncode == 0, top.stderr
    row = next(line for line in top.stdout.splitlines() if line.startswith("allreduce"))
    assert "rank 1 (" in row, top.stdout


def test_collectives_under_mpirun() -> None:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        if os.environ.get("VARGR_REQUIRE_MPIRUN"):
            pytest.fail("mpirun is required (VARGR_REQUIRE_MPIRUN is set) but not on the PATH")
        pytest.skip("mpirun not found: install Open MPI (apt-get install openmpi-bin)")
    r = run(
        [
            mpirun,
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            "2",
            PYTHON,
            script("ranks_check.py"),
        ],
        timeout=180,
        env=clean_env(),
    )
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert_all_ok(r.stdout, 2)


def test_ranks_as_threads_are_refused_with_a_clear_message() -> None:
    code = (
        "import vargr\n"
        "try:\n"
        "    vargr.World()\n"
        "except vargr.JobError as e:\n"
        "    print('JobError:', e)\n"
    )
    # vargr run sees a Python program and refuses before anything starts.
    r = run(
        [vargr_binary(), "run", "-n", "2", "--ranks-per-process", "2", "--", PYTHON, "-c", code],
        timeout=120,
    )
    assert r.returncode != 0 and "Python rank" in r.stderr, f"{r.stdout}\n{r.stderr}"
    # Started in a way it cannot see through (here `env`), the binding refuses.
    r = run(
        [
            vargr_binary(),
            "run",
            "-n",
            "2",
            "--ranks-per-process",
            "2",
            "--",
            "env",
            PYTHON,
            "-c",
            code,
        ],
        timeout=120,
    )
    assert "one rank per process" in r.stdout, f"{r.stdout}\n{r.stderr}"
