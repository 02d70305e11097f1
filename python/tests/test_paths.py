"""Path specifications from Python: a tree built from one (a built-in stage on its
links), Python stages at both ends of a path (the back-end's first, the element's
last), and errors that name the path, the stage and where it ran."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import vargr
from conftest import PYTHON, clean_env, script, vargr_binary

TAG_ECHO = 1
SPEC = """
[element]
name = "E"
host = "fe"

[[path]]
from = "a:0-1"
stages = ["py:stamp", "codec:fixed:lz4", "remote:fe", "py:shout"]
"""


@pytest.fixture(autouse=True)
def commnode_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VARGR_COMMNODE", vargr_binary())
    for k in list(os.environ):
        if k not in clean_env():
            monkeypatch.delenv(k)


def shout(p: vargr.Packet) -> vargr.Packet:
    return vargr.Packet(p.tag, p.format, str(p.values[0]).upper(), stream=p.stream)


def test_a_specification_checks_merges_and_draws() -> None:
    paths = vargr.Paths(SPEC)
    assert paths.element == "E"
    assert paths.last == ["shout"]
    assert sorted(paths.first) == [0, 1] and paths.first[0] == ["stamp"]
    assert paths.topology.num_backends == 2
    assert sorted(paths.links.values()) == [["codec:fixed:lz4"], ["codec:fixed:lz4"]]
    assert paths.draw().splitlines()[0] == "E @ fe:0 (element) py:shout"
    with pytest.raises(vargr.TopologyError, match=r'path 1 \(from "a:0"\), stage "xor:1"'):
        vargr.Paths(
            '[element]\nname = "E"\nhost = "fe"\n[[path]]\nfrom = "a:0"\nstages = ["remote:fe", "xor:1"]\n'
        )


def test_python_stages_run_at_both_ends_of_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "paths.toml"
    f.write_text(SPEC)
    monkeypatch.setenv("VARGR_TEST_PATHS", str(f))
    paths = vargr.Paths(f)
    with vargr.Network(
        paths.topology, backend=[PYTHON, script("paths_backend.py")], paths=paths
    ) as net:
        s = vargr.paths.open_stream(net, paths, {"shout": shout}, sync="dontwait")
        s.send(TAG_ECHO, "%s", "hello")
        got = sorted(s.recv(timeout=30).values[0] for _ in range(2))
        assert got == ["HELLO VIA 0", "HELLO VIA 1"]
        with pytest.raises(ValueError, match="shout"):
            vargr.paths.open_stream(net, paths, {})


def test_a_failing_python_stage_names_itself_and_where_it_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "paths.toml"
    f.write_text(SPEC)
    monkeypatch.setenv("VARGR_TEST_PATHS", str(f))
    paths = vargr.Paths(f)

    def broken(p: vargr.Packet) -> vargr.Packet:
        raise RuntimeError("no voice")

    with vargr.Network(
        paths.topology, backend=[PYTHON, script("paths_backend.py")], paths=paths
    ) as net:
        s = vargr.paths.open_stream(net, paths, {"shout": broken}, sync="dontwait")
        s.send(TAG_ECHO, "%s", "hello")
        with pytest.raises(
            vargr.paths.StageError, match="python stage shout at element E: RuntimeError: no voice"
        ):
            s.recv(timeout=30)
        # The tree is unaffected: the next result comes (and fails the same way).
        with pytest.raises(vargr.paths.StageError):
            s.recv(timeout=30)
