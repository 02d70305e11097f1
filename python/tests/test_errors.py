"""Errors: one hierarchy under vargr.VargrError, carrying the Rust message."""

from __future__ import annotations

import pytest
import vargr
from conftest import PYTHON, clean_env, run


def test_the_hierarchy_also_subclasses_the_builtin_classes() -> None:
    assert issubclass(vargr.VargrTimeoutError, TimeoutError)
    assert issubclass(vargr.TopologyError, ValueError)
    assert issubclass(vargr.CodecError, ValueError)
    for cls in (vargr.NodeLostError, vargr.ShutdownError, vargr.StartupError, vargr.FilterError):
        assert issubclass(cls, vargr.NetworkError) and issubclass(cls, vargr.VargrError)
    for coll in (vargr.JobError, vargr.PeerLostError):
        assert issubclass(coll, vargr.CollectiveError)
    assert vargr.VargrError.__module__ == "vargr"


def test_topologies_from_specs_text_and_files(tmp_path: pytest.TempPathFactory) -> None:
    t = vargr.Topology("kary:2^2")
    assert (len(t), t.num_backends, t.depth, t.num_internal) == (7, 4, 2, 2)
    again = vargr.Topology(t.to_mrnet())
    assert again.to_mrnet() == t.to_mrnet()
    f = tmp_path / "tree.top"  # type: ignore[operator]
    f.write_text("fe:0 => be:0 be:1 ;\n")
    assert vargr.Topology(f).num_backends == 2
    assert vargr.Topology(str(f)).num_backends == 2
    assert "back-ends" in repr(t) and t.draw()


def test_a_bad_topology_names_where_it_is_wrong() -> None:
    with pytest.raises(vargr.TopologyError, match="<topology text>:2:"):
        vargr.Topology("fe:0 => be:0 ;\nbe:0 be:1 ;\n")
    with pytest.raises(vargr.TopologyError, match="kary"):
        vargr.Topology("kary:0@4")
    with pytest.raises(ValueError, match="not a topology"):
        vargr.Topology("nonsense")


def test_network_arguments_are_checked_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="launcher"):
        vargr.Network("flat:2", backend=["x"], launcher="carrier-pigeon")
    with pytest.raises(TypeError, match="argv"):
        vargr.Network("flat:2", backend="just-a-string")
    with pytest.raises(TypeError, match="callable"):
        vargr.Network("flat:2", backend=["x"], launcher="threads")


def test_world_outside_a_job_raises_job_error() -> None:
    code = (
        "import vargr\n"
        "try:\n"
        "    vargr.World()\n"
        "except vargr.JobError as e:\n"
        "    print('JobError:', e)\n"
    )
    r = run([PYTHON, "-c", code], timeout=60, env=clean_env())
    assert r.returncode == 0, r.stderr
    assert "JobError:" in r.stdout and "rank is unknown" in r.stdout
