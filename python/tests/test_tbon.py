"""Trees from Python: a front-end in this process, back-ends as real Python processes
(scripts/echo_backend.py), commnodes as real processes; filters built in and Python."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import vargr
from conftest import PYTHON, clean_env, script, vargr_binary

ECHO = [PYTHON, script("echo_backend.py")]
TAG_ECHO, TAG_RANK, TAG_ARRAY, TAG_P2P_START, TAG_P2P_REPORT, TAG_SILENT = 1, 2, 3, 4, 6, 7
TAG_OBSERVE = 9
TAG_PUBLISH = 10


@pytest.fixture(autouse=True)
def commnode_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Internal nodes run the vargr binary built with this tree (fast to start).
    monkeypatch.setenv("VARGR_COMMNODE", vargr_binary())
    for k in list(os.environ):
        if k not in clean_env():
            monkeypatch.delenv(k)


@pytest.fixture
def net() -> Iterator[vargr.Network]:
    # kary:2@4: a front-end, two commnodes, four back-ends.
    with vargr.Network("kary:2@4", backend=ECHO) as n:
        yield n


def test_multicast_and_sum_up_a_tree_of_real_processes(net: vargr.Network) -> None:
    assert net.num_backends == 4
    assert net.topology.num_internal == 2
    assert len(net.child_pids()) == 2
    s = net.open_stream(up="sum")
    s.send(TAG_RANK, "%d", 1000)
    p = s.recv(timeout=30)
    assert p.values == (4 * 1000 + 0 + 1 + 2 + 3,)
    assert p.tag == TAG_RANK and p.stream == s.id and p.format == "%d"
    assert p.source is None  # a filter's result


def test_numpy_arrays_go_down_and_come_back_reduced(net: vargr.Network) -> None:
    s = net.open_stream(up="max")
    s.send(TAG_ARRAY, "%d", 0)
    p = s.recv(timeout=30)
    (arr,) = p.values
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float64
    np.testing.assert_array_equal(arr, np.arange(4, dtype=np.float64) + 3)
    echo = net.open_stream(net.communicator([2]), up="null")
    data = np.linspace(0.0, 1.0, 1000)
    echo.send(TAG_ECHO, "%alf %ad %s", data, [1, -2, 3], "text")
    back = echo.recv(timeout=30)
    np.testing.assert_array_equal(back[0], data)
    assert back[1].dtype == np.int32 and back[1].tolist() == [1, -2, 3]
    assert back[2] == "text" and back.source == 2


def test_a_python_filter_sees_each_wave_of_every_back_end(net: vargr.Network) -> None:
    waves: list[list[int]] = []

    def spread(packets: list[vargr.Packet]) -> vargr.Packet:
        # One wave: one packet per back-end, in communicator order.
        sources = [p.source for p in packets]
        waves.append([int(p[0]) for p in packets])
        values = [int(p[0]) for p in packets]
        return vargr.Packet(packets[0].tag, "%d %ad", max(values) - min(values), sources)

    s = net.open_stream(up=spread)
    for base in (10, 20):
        s.send(TAG_RANK, "%d", base)
    first, second = s.recv(timeout=30), s.recv(timeout=30)
    assert first.values[0] == 3 and first[1].tolist() == [0, 1, 2, 3]
    assert second.values[0] == 3 and first.stream == s.id
    assert sorted(waves) == [[10, 11, 12, 13], [20, 21, 22, 23]]


def test_a_python_filter_on_some_back_ends_with_dont_wait(net: vargr.Network) -> None:
    seen: list[Any] = []

    def count(packets: list[vargr.Packet]) -> list[vargr.Packet]:
        seen.append(len(packets))
        return packets

    s = net.open_stream(net.communicator([1, 3]), up=count, sync="dont_wait")
    s.send(TAG_RANK, "%d", 0)
    got = sorted(s.recv(timeout=30).values[0] for _ in range(2))
    assert got == [1, 3] and seen == [1, 1]


def test_a_filter_that_raises_raises_in_recv(net: vargr.Network) -> None:
    def broken(packets: list[vargr.Packet]) -> None:
        raise RuntimeError("filter bug")

    s = net.open_stream(up=broken)
    s.send(TAG_RANK, "%d", 0)
    with pytest.raises(RuntimeError, match="filter bug"):
        s.recv(timeout=30)


def test_back_ends_message_each_other_through_the_tree(net: vargr.Network) -> None:
    s = net.open_stream(up="null", sync="dontwait")
    s.send(TAG_P2P_START, "%d", 0)
    pairs = sorted(tuple(s.recv(timeout=30).values) for _ in range(4))
    # Each back-end told the next one, which reported (sender, itself).
    assert pairs == [(0, 1), (1, 2), (2, 3), (3, 0)]


def test_back_ends_observe_the_newest_published_value(net: vargr.Network) -> None:
    # Observed elements (PATHS' last-observe): each back-end sees only growing versions
    # and ends on the newest; no value is older than one it had.
    s = net.open_stream(up="null", sync="dontwait")
    s.send(TAG_OBSERVE, "%ud %uld", 5, 20)
    for version in range(1, 21):
        net.publish(5, version, version.to_bytes(8, "little") * 4)
    with pytest.raises(vargr.NetworkError):
        net.publish(5, 20, b"not newer")
    for _ in range(4):
        seen = list(s.recv(timeout=30).values[0])
        assert seen == sorted(set(seen)) and seen[-1] == 20, seen


def test_the_front_end_observes_what_a_back_end_publishes(net: vargr.Network) -> None:
    # Back-end 0 publishes versions 1..12 of element 6; the front-end sees only growing
    # versions and ends on the newest, then times out asking for a newer one.
    s = net.open_stream(up="null", sync="dontwait")
    s.send(TAG_PUBLISH, "%ud %uld", 6, 12)
    seen: list[int] = []
    while not seen or seen[-1] < 12:
        version, value = net.observe_newer(6, seen[-1] if seen else None, timeout=30)
        assert value == version.to_bytes(8, "little") * 4, (version, value)
        seen.append(version)
    assert seen == sorted(set(seen)), seen
    for _ in range(4):
        s.recv(timeout=30)
    with pytest.raises(vargr.VargrTimeoutError):
        net.observe_newer(6, 12, timeout=0.2)


def test_recv_times_out_with_vargr_timeout_error(net: vargr.Network) -> None:
    s = net.open_stream(up="sum")
    s.send(TAG_SILENT, "%d", 0)
    with pytest.raises(vargr.VargrTimeoutError) as e:
        s.recv(timeout=0.2)
    assert isinstance(e.value, TimeoutError) and isinstance(e.value, vargr.VargrError)


def test_monitoring_sees_every_node(net: vargr.Network) -> None:
    s = net.open_stream(up="sum")
    s.send(TAG_RANK, "%d", 0)
    s.recv(timeout=30)
    status = net.status(budget=2.0)
    assert status["kind"] == "network"
    assert len(status["nodes"]) == 7 and status["missing"] == []
    pulled = net.pull(["tbon/*"], budget=2.0)
    assert sorted(pulled) == list(range(7))
    assert all(v is not None for v in pulled.values())
    clocks = net.clock_alignment(wait=5.0)
    assert 0 in clocks and clocks[0]["offset_ns"] == 0


def test_the_package_commnode_runs_internal_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    commnode = shutil.which("vargr-commnode") or str(Path(PYTHON).parent / "vargr-commnode")
    if not Path(commnode).is_file():
        pytest.fail(
            "vargr-commnode is not installed beside this Python: install the package first "
            "(pip install the wheel of scripts/build-wheels.sh, or pip install .)"
        )
    monkeypatch.delenv("VARGR_COMMNODE")
    with vargr.Network("kary:2@4", backend=ECHO, commnode=commnode) as n:
        # The front-end's children are the two commnodes: Python processes running
        # this package's commnode.
        for pid in n.child_pids():
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert any(b"vargr-commnode" in w for w in cmdline), cmdline
        s = n.open_stream(up="sum")
        s.send(TAG_RANK, "%d", 1)
        assert s.recv(timeout=30).values == (4 + 6,)


@pytest.mark.parametrize("security", ["mac", "encrypt"])
def test_a_tree_over_tcp_runs_with_each_link_protection(security: str) -> None:
    with vargr.Network("kary:2@4", backend=ECHO, transport="tcp", link_security=security) as n:
        s = n.open_stream(up="sum")
        s.send(TAG_RANK, "%d", 1)
        assert s.recv(timeout=30).values == (4 + 6,)


def test_an_unknown_link_protection_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="rot13"):
        vargr.Network("flat:1", backend=ECHO, link_security="rot13")


def test_a_killed_commnode_is_an_event_naming_its_back_ends() -> None:
    import os
    import signal
    import time

    with vargr.Network("kary:2@4", backend=ECHO) as n:
        s = n.open_stream(up="sum")
        s.send(TAG_RANK, "%d", 1)
        assert s.recv(timeout=30).values == (4 + 6,)
        assert n.events() == []
        os.kill(n.child_pids()[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not n.events():
            time.sleep(0.05)
        lost = [e for e in n.events() if e["kind"] == "node_lost"]
        assert len(lost) == 1, n.events()
        assert lost[0]["host"] == "localhost"
        assert len(lost[0]["backends"]) == 2 and set(lost[0]["backends"]) <= {0, 1, 2, 3}


def test_an_unknown_recovery_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="pray"):
        vargr.Network("flat:1", backend=ECHO, recovery="pray")


def test_threads_launcher_runs_python_back_ends_in_this_process() -> None:
    def backend(be: vargr.Backend) -> None:
        for p in be:
            be.send(p, p.tag, "%lf", float(p[0]) * (be.rank + 1))

    with vargr.Network("kary:2@4", backend=backend, launcher="threads") as n:
        s = n.open_stream(up="sum")
        s.send(1, "%lf", 0.5)
        assert s.recv(timeout=30).values == (0.5 * (1 + 2 + 3 + 4),)


def test_a_lost_back_end_is_named(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    backend = [PYTHON, script("blocked_backend.py"), str(pidfile)]
    with vargr.Network("flat:1", backend=backend, heartbeat=0.2, heartbeat_timeout=0.6) as n:
        s = n.open_stream(up="sum")
        for _ in range(300):
            if pidfile.exists():
                break
            import time

            time.sleep(0.05)
        os.kill(int(pidfile.read_text()), 9)
        with pytest.raises(vargr.NodeLostError) as e:
            s.recv(timeout=30)
        assert e.value.backends == [0]
        assert "lost" in str(e.value)
        assert n.faults()


def test_bad_back_end_program_fails_start_up_with_its_name() -> None:
    with pytest.raises(vargr.NetworkError, match="no-such-program"):
        vargr.Network("flat:2", backend=["/no/such/dir/no-such-program"], startup_timeout=10)


def test_back_ends_started_by_mpirun_attach_through_the_rendezvous() -> None:
    import shutil

    mpirun = shutil.which("mpirun")
    if mpirun is None:
        if os.environ.get("VARGR_REQUIRE_MPIRUN"):
            pytest.fail("mpirun is required (VARGR_REQUIRE_MPIRUN is set) but not on the PATH")
        pytest.skip("mpirun not found: install Open MPI (apt-get install openmpi-bin)")
    launch = [mpirun, "--allow-run-as-root", "--oversubscribe", "-n", "{n}", *ECHO]
    with vargr.Network("kary:2@4", backend=launch, launcher="attach") as n:
        s = n.open_stream(up="sum")
        s.send(TAG_RANK, "%d", 100)
        # Back-end ranks come from OMPI_COMM_WORLD_RANK: 0..3, each exactly once.
        assert s.recv(timeout=60).values == (400 + 0 + 1 + 2 + 3,)
