"""Programs written for mpi4py run on ``vargr.MPI`` with one changed import.

The programs are mpi4py's own, fetched from PyPI (its source distribution, pinned, kept
in ``target/mpi4py``): the tutorial's examples, extracted from ``docs/source/tutorial.rst``,
and the demos. Each runs under ``vargr run -n 4`` after ``from mpi4py import MPI``
becomes ``from vargr import MPI``; nothing else in them is touched.
"""

from __future__ import annotations

import json
import re
import shutil
import tarfile
import textwrap
import urllib.request
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, clean_env, run, script, vargr_binary

VERSION = "4.1.2"
CACHE = REPO / "target" / "mpi4py"
# Tutorial examples that need what vargr.MPI does not offer (MPI-IO, dynamic processes,
# one-sided windows), recognised by what they call.
UNSUPPORTED = ("MPI.File", "Spawn", "Get_parent", "MPI.Win", "cupy", "numba")


def source() -> Path:
    """mpi4py's source tree, downloaded once from PyPI."""
    tree = CACHE / f"mpi4py-{VERSION}"
    if (tree / "demo").is_dir():
        return tree
    CACHE.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen("https://pypi.org/pypi/mpi4py/json", timeout=60) as r:
        meta = json.load(r)
    url = next(u["url"] for u in meta["releases"][VERSION] if u["packagetype"] == "sdist")
    archive = CACHE / f"mpi4py-{VERSION}.tar.gz"
    with urllib.request.urlopen(url, timeout=120) as r, open(archive, "wb") as f:
        shutil.copyfileobj(r, f)
    with tarfile.open(archive) as t:
        t.extractall(CACHE, filter="data")
    return tree


def ported(text: str) -> str:
    """The one-line change: mpi4py's MPI becomes vargr's."""
    return text.replace("from mpi4py import MPI", "from vargr import MPI")


def tutorial_examples() -> list[str]:
    rst = (source() / "docs" / "source" / "tutorial.rst").read_text()
    blocks = []
    # Literal blocks: the indented lines after a paragraph ending in "::".
    for m in re.finditer(r"::\n\n((?:(?: .*)?\n)+)", rst):
        code = textwrap.dedent(m.group(1))
        # Interactive sessions (">>>", wrapping C/Fortran code) are not programs.
        runnable = code.startswith("from mpi4py import MPI") or "\nfrom mpi4py import MPI" in code
        if runnable and ">>>" not in code and not any(u in code for u in UNSUPPORTED):
            blocks.append(code)
    return blocks


def run_ranks(prog: Path, n: int = 4, stdin: str | None = None) -> str:
    args = [vargr_binary(), "run", "-np", str(n), PYTHON, str(prog)]
    if stdin is None:
        r = run(args, timeout=180)
    else:
        import subprocess

        r = subprocess.run(
            args,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=180,
            env=clean_env(),
            check=False,
        )
    assert r.returncode == 0, f"{prog.name}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.mark.parametrize("n", [3, 4])
def test_vargr_mpi_semantics_on_every_rank(n: int) -> None:
    # Wildcards, requests, buffer specs, the collectives built in Python, MINLOC,
    # user operators, grids and error classes, checked against closed forms.
    out = run_ranks(Path(script("mpi_check.py")), n=n)
    assert sorted(out.splitlines()) == sorted(f"rank {r} ok" for r in range(n)), out


def test_the_tutorials_examples_run_with_one_changed_import(tmp_path: Path) -> None:
    examples = tutorial_examples()
    # Point-to-point (objects, non-blocking, buffers), the object and buffer
    # collectives, the matrix-vector product and Allreduce.
    assert len(examples) >= 10, examples
    for i, code in enumerate(examples):
        prog = tmp_path / f"tutorial_{i}.py"
        prog.write_text(ported(code))
        run_ranks(prog)


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """mpi4py's demo directory, ported."""
    out = tmp_path / "demo"
    shutil.copytree(source() / "demo", out)
    for f in out.rglob("*.py"):
        f.write_text(ported(f.read_text()))
    return out


def test_hello_world(demo: Path) -> None:
    out = run_ranks(demo / "helloworld.py")
    for r in range(4):
        assert f"I am process {r} of 4" in out


def test_compute_pi_reads_rank_0s_input(demo: Path) -> None:
    out = run_ranks(demo / "compute-pi" / "cpi-cco.py", stdin="1000\n0\n")
    assert "pi is approximately 3.14159" in out, out


def test_mandelbrot_gathers_every_line(demo: Path) -> None:
    run_ranks(demo / "mandelbrot" / "mandelbrot.py")


def test_reductions_pass_their_own_tests(demo: Path) -> None:
    out = run_ranks(demo / "reductions" / "test_reductions.py")
    assert "FAILED" not in out


def test_sequential_section_runs_on_every_rank(demo: Path) -> None:
    # The ranks print in turn, but their lines reach the launcher through one pipe per
    # process, so the order in which they arrive is not theirs (nor under mpirun).
    out = run_ranks(demo / "sequential" / "test_seq.py")
    ranks = sorted(int(m) for m in re.findall(r"I am process (\d+)", out))
    assert ranks == [0, 1, 2, 3], out


@pytest.mark.parametrize("bench", ["osu_latency.py", "osu_barrier.py", "osu_bcast.py"])
def test_osu_benchmarks_of_the_demos(demo: Path, bench: str) -> None:
    n = 2 if bench == "osu_latency.py" else 4
    out = run_ranks(demo / bench, n=n)
    # A table of measurements: lines of numbers under the "#" header.
    assert re.search(r"^\s*\d[\d.]*(\s+\d[\d.]*)*\s*$", out, re.MULTILINE), out


# Files of mpi4py's own test suite (test/) that pass whole on vargr.MPI. The suite
# imports `mpi4py.MPI`, so a stand-in `mpi4py` package whose MPI is vargr's is put first
# on the path; the tests themselves are mpi4py's, unchanged.
CONFORMING = [
    "test_cco_obj.py",
    "test_status.py",
    "test_p2p_obj_matched.py",
    "test_msgzero.py",
    "test_mpimem.py",
    "test_mpiapi.py",
]


@pytest.mark.parametrize("n", [2, 4])
def test_files_of_mpi4pys_own_suite_pass(tmp_path: Path, n: int) -> None:
    shim = tmp_path / "shim" / "mpi4py"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(
        "import sys\nfrom vargr import MPI\nsys.modules['mpi4py.MPI'] = MPI\n"
        f"__version__ = {VERSION!r}\n"
    )
    suite = source() / "test"
    for name in CONFORMING:
        env = clean_env({"PYTHONPATH": f"{shim.parent}:{suite}"})
        r = run([vargr_binary(), "run", "-np", str(n), PYTHON, str(suite / name)], env=env)
        assert r.returncode == 0, f"{name} on {n} ranks:\n{r.stdout}\n{r.stderr}"
        assert re.search(r"^OK\b", r.stderr, re.MULTILINE), f"{name}:\n{r.stderr}"
