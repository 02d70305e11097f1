"""Ctrl-C interrupts blocking calls: a front-end blocked in Stream.recv, a back-end
blocked in Backend.recv and a rank blocked in a receive all get KeyboardInterrupt when
sent SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import PYTHON, clean_env, script, vargr_binary


def wait_for(cond: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_ctrl_c_interrupts_a_front_end_blocked_in_recv() -> None:
    env = clean_env({"VARGR_COMMNODE": vargr_binary()})
    p = subprocess.Popen(
        [PYTHON, script("blocked_frontend.py"), script("echo_backend.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.strip() == "READY", p.stderr.read() if p.stderr else ""
        time.sleep(0.3)  # now inside recv()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert "KeyboardInterrupt" in err, err
    assert p.returncode != 0


def test_ctrl_c_interrupts_a_back_end_blocked_in_recv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vargr

    monkeypatch.setenv("VARGR_COMMNODE", vargr_binary())
    marker = tmp_path / "backend"
    with vargr.Network("flat:1", backend=[PYTHON, script("blocked_backend.py"), str(marker)]):
        assert wait_for(lambda: marker.exists(), 30), "the back-end never started"
        pid = int(marker.read_text())
        time.sleep(0.3)  # now inside recv()
        os.kill(pid, signal.SIGINT)
        assert wait_for(lambda: marker.read_text() == "interrupted", 30)


@pytest.mark.parametrize("timeout", [0.0, 0.3])
def test_short_timeouts_end_waits_without_a_signal(timeout: float) -> None:
    import vargr

    with vargr.Network("flat:1", backend=lambda be: be.recv(), launcher="threads") as n:
        s = n.open_stream(up="sum")
        t0 = time.monotonic()
        with pytest.raises(vargr.VargrTimeoutError):
            s.recv(timeout=timeout)
        assert time.monotonic() - t0 < 30


def test_ctrl_c_interrupts_a_rank_blocked_in_a_receive(tmp_path: Path) -> None:
    marker = tmp_path / "rank1"
    p = subprocess.Popen(
        [vargr_binary(), "run", "-n", "2", "--", PYTHON, script("blocked_rank.py"), str(marker)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    try:
        assert wait_for(lambda: marker.exists(), 30), "rank 1 never started"
        time.sleep(0.3)  # now inside recv()
        os.kill(int(marker.read_text()), signal.SIGINT)
        assert wait_for(lambda: marker.read_text() == "interrupted", 30)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
