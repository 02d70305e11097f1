"""Shared fixtures: where the vargr binary is, and a runner for subprocesses.

The tests start real processes (back-ends, commnodes, ranks). Every subprocess gets a
timeout, so a broken build fails a test instead of hanging the run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# A run started in the background by a shell without job control (`cmd &` in a script,
# nohup) ignores SIGINT, and every process it starts inherits that: Python then installs
# no KeyboardInterrupt handler, and the Ctrl-C tests would wait for an interrupt that
# never comes. Restoring Python's handler here makes the processes the tests start
# inherit the default disposition, as under a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TESTS = Path(__file__).resolve().parent
SCRIPTS = TESTS / "scripts"
REPO = TESTS.parent.parent


def vargr_binary() -> str:
    """The `vargr` binary: $VARGR_BIN (set by scripts/test.sh), else target/debug/vargr."""
    env = os.environ.get("VARGR_BIN")
    if env:
        return env
    built = REPO / "target" / "debug" / "vargr"
    if built.is_file():
        return str(built)
    found = shutil.which("vargr")
    if found:
        return found
    raise RuntimeError("no vargr binary: build it with `cargo build --bin vargr` or set VARGR_BIN")


@pytest.fixture(scope="session")
def vargr_bin() -> str:
    return vargr_binary()


def script(name: str) -> str:
    return str(SCRIPTS / name)


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without any launcher's rank variables (a test started under
    mpirun or vargr run must not leak them into the jobs it starts)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VARGR_JOB", "VARGR_RANK", "OMPI_", "PMIX_", "PMI_", "SLURM_"))
        and k not in ("VARGR_SIZE", "VARGR_RENDEZVOUS", "VARGR_PARENT", "VARGR_NODE")
    }
    if extra:
        env.update(extra)
    return env


def run(
    args: list[str], timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs a command to completion with a timeout, capturing its output."""
    return subprocess.run(
        args,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else clean_env(),
        stdin=subprocess.DEVNULL,
    )


PYTHON = sys.executable
