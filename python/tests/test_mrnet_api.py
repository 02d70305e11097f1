"""What MRNet's API has beyond streams, from Python: receiving from any stream,
notification descriptors for select(), per-stream receive on back-end threads, changing
a running stream's filters, filters per kind of node, and tree-event callbacks."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import vargr
from conftest import PYTHON, clean_env, script, vargr_binary

ECHO = [PYTHON, script("echo_backend.py")]
TAG_ECHO, TAG_RANK, TAG_THREADS = 1, 2, 8


@pytest.fixture(autouse=True)
def commnode_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VARGR_COMMNODE", vargr_binary())
    for k in list(os.environ):
        if k not in clean_env():
            monkeypatch.delenv(k)


@pytest.fixture
def net() -> Iterator[vargr.Network]:
    # kary:2@4: a front-end, two commnodes, four back-ends.
    with vargr.Network("kary:2@4", backend=ECHO) as n:
        yield n


def readable(fd: Any, timeout: float) -> bool:
    r, _, _ = select.select([fd], [], [], timeout)
    return bool(r)


def test_recv_any_and_select_on_the_network_and_its_streams(net: vargr.Network) -> None:
    a = net.open_stream(up="sum")
    b = net.open_stream(up="max")
    assert not readable(net, 0) and not readable(b, 0)
    a.send(TAG_RANK, "%d", 10)
    assert readable(net, 30)
    assert readable(net.notification_fd(), 0)  # level-triggered: until received
    b.send(TAG_RANK, "%d", 100)
    assert readable(b, 30)
    got = dict(net.recv_any(timeout=30) for _ in range(2))
    assert got[a.id].values == (40 + 6,) and got[b.id].values == (103,)
    assert not readable(net, 0)
    with pytest.raises(vargr.VargrTimeoutError):
        net.recv_any(timeout=0.05)
    again = net.stream(b.id)
    again.send(TAG_RANK, "%d", 1)
    assert b.recv(timeout=30).values == (4,)
    with pytest.raises(vargr.VargrError, match="4242"):
        net.stream(4242)


def test_set_filter_and_filters_per_kind_of_node(net: vargr.Network) -> None:
    s = net.open_stream(up="sum")
    s.send(TAG_RANK, "%d", 0)
    assert s.recv(timeout=30).values == (6,)
    s.set_filter("up", "max")
    assert s.filter("up") == "max"
    s.send(TAG_RANK, "%d", 0)
    assert s.recv(timeout=30).values == (3,)
    s.set_filter("sync", "timeout:250ms")
    assert s.filter("sync") == "timeout:250ms"
    with pytest.raises(vargr.VargrError, match="no_such_filter"):
        s.set_filter("up", "no_such_filter")
    with pytest.raises(ValueError, match="role"):
        s.set_filter("sideways", "max")
    # Back-ends make a one-element array of their value; the commnodes sum arrays, the
    # front-end takes the larger commnode's.
    h = net.open_stream(up="sum", up_backend="concat", up_frontend="max")
    h.send(TAG_RANK, "%d", 0)
    (arr,) = h.recv(timeout=30).values
    assert arr.tolist() == [2 + 3]


def test_nodes_run_the_filters_given_them_by_depth_and_node(net: vargr.Network) -> None:
    # Commnode 1 (back-ends 0, 1) takes the max, commnode 2 (back-ends 2, 3) the min,
    # the front-end concatenates; "sum" anywhere would give another answer.
    s = net.open_stream(
        up="sum",
        per_node=[
            {"depth": 1, "up": "max"},
            {"node": 2, "up": "min"},
            {"depth": 0, "up": "concat"},
        ],
    )
    s.send(TAG_RANK, "%d", 100)
    (arr,) = s.recv(timeout=30).values
    assert arr.tolist() == [101, 102]
    with pytest.raises(vargr.VargrError, match="k_of_m"):
        net.open_stream(up="sum", per_node=[{"depth": 0, "sync": "k_of_m:1"}])
    with pytest.raises(ValueError, match="exactly one of depth and node"):
        net.open_stream(up="sum", per_node=[{"depth": 0, "node": 1, "up": "max"}])


def test_a_plugin_sync_filter_waits_for_k_of_n(tmp_path: Any) -> None:
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    so = str(tmp_path / "libsync_filters.so")
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-I",
            os.path.join(root, "crates/vargr-filter/include"),
            os.path.join(root, "examples/filter-plugin/sync_filters.c"),
            "-o",
            so,
        ],
        check=True,
    )
    with vargr.Network("flat:4", backend=ECHO, plugins=[so]) as n:
        s = n.open_stream(up="concat", sync="k_of_n:2", wave_deadline=30.0)
        s.send(TAG_RANK, "%d", 0)
        waves = [s.recv(timeout=30).values[0].tolist() for _ in range(2)]
        assert [len(w) for w in waves] == [2, 2]
        assert sorted(waves[0] + waves[1]) == [0, 1, 2, 3]


def test_back_ends_receive_per_stream_on_threads(net: vargr.Network) -> None:
    ctl = net.open_stream(up="null", sync="dontwait")
    s1 = net.open_stream(up="sum")
    s2 = net.open_stream(up="max")
    ctl.send(TAG_THREADS, "%aud", [s1.id, s2.id])
    for k in range(2):
        s2.send(TAG_ECHO, "%d", 0)
        assert s2.recv(timeout=30).values == (30 + k,)
        s1.send(TAG_ECHO, "%d", 0)
        assert s1.recv(timeout=30).values == (60 + 4 * k,)


def test_event_callbacks_report_a_killed_commnode_and_the_adoptions() -> None:
    events: list[dict[str, Any]] = []
    seen = threading.Event()

    def on_event(e: dict[str, Any]) -> None:
        events.append(e)
        if e["kind"] == "reparented":
            seen.set()

    with vargr.Network("kary:2@4", backend=ECHO) as n:
        n.on_event(on_event)
        os.kill(n.child_pids()[0], signal.SIGKILL)
        assert seen.wait(30), events
        # Each orphan is adopted on its own: wait for both.
        deadline = time.monotonic() + 30
        adopted: set[int] = set()
        while time.monotonic() < deadline:
            adopted = {b for e in events if e["kind"] == "reparented" for b in e["backends"]}
            if len(adopted) == 2:
                break
            time.sleep(0.05)
        lost = [e for e in events if e["kind"] == "node_lost"]
        assert lost and lost[0]["node"] in (1, 2), events
        assert set(lost[0]["backends"]) == adopted, events
        # Every back-end answers again.
        s = n.open_stream(up="sum")
        s.send(TAG_RANK, "%d", 0)
        assert s.recv(timeout=30).values == (6,)
