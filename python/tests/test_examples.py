"""The porting guide's Python example (MRNet's IntegerAddition) runs and checks itself."""

from __future__ import annotations

from conftest import PYTHON, REPO, run


def test_integer_addition_runs_on_a_tree_of_python_back_ends() -> None:
    fe = REPO / "examples" / "python" / "integer_addition_fe.py"
    r = run([PYTHON, str(fe), "kary:2@4"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "integer_addition: OK" in r.stdout
    assert r.stdout.count("Success!") == 7
