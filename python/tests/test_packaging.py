"""The package as installed: its version, what `import *` brings, and how it was built.

scripts/test.sh installs the wheel that scripts/build-wheels.sh builds and sets
VARGR_REQUIRE_WHEEL=1, so that these tests fail when the tests would otherwise exercise
something else (a source tree on sys.path, or a `pip install .` from the directory):
what users install is the wheel, and the wheel is what is tested.
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
import vargr
from conftest import PYTHON, REPO, clean_env, run
from packaging.version import Version

PUBLIC_MODULES = ["vargr", "vargr.codec", "vargr.dedup", "vargr.paths"]


def crate_version() -> str:
    """The workspace's version in Cargo.toml (the crate's, which the wheel carries)."""
    text = (REPO / "Cargo.toml").read_text()
    found = re.search(
        r'^\[workspace\.package\][^\[]*?^version = "([^"]+)"', text, re.MULTILINE | re.DOTALL
    )
    assert found, "no version in Cargo.toml's [workspace.package]"
    return found.group(1)


def test_version_is_the_crates_and_the_distributions() -> None:
    assert vargr.__version__ == crate_version()
    # The same version as the installed metadata's, which maturin writes in PEP 440's
    # spelling (a crate's 1.0.0-alpha.1 is 1.0.0a1 there).
    assert Version(vargr.__version__) == Version(metadata.version("vargr"))


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_import_star_shadows_no_builtin(module: str) -> None:
    exported = set(importlib.import_module(module).__all__)
    assert not exported & set(dir(builtins)), "names in __all__ that shadow builtins"
    # The statement itself, at the top level of a fresh interpreter: the names it binds.
    code = (
        "before = set(globals()) | {'before'}\n"
        f"from {module} import *\n"
        "print('\\n'.join(sorted(set(globals()) - before)))\n"
    )
    r = run([PYTHON, "-c", code], timeout=60, env=clean_env())
    assert r.returncode == 0, r.stderr
    bound = set(r.stdout.split())
    assert bound == exported
    assert not bound & set(dir(builtins))


def test_the_old_timeout_error_name_still_works() -> None:
    assert vargr.TimeoutError is vargr.VargrTimeoutError
    assert "TimeoutError" not in vargr.__all__
    assert vargr.VargrTimeoutError.__name__ == "VargrTimeoutError"
    assert issubclass(vargr.VargrTimeoutError, builtins.TimeoutError)


def test_importing_needs_no_typing_extensions() -> None:
    # Only the stubs import typing_extensions, and only type checkers read those: the
    # package does not declare it, so importing must work without it.
    code = (
        "import sys\n"
        "sys.modules['typing_extensions'] = None\n"
        "import vargr, vargr.codec, vargr.dedup\n"
        "print(vargr.__version__)\n"
    )
    r = run([PYTHON, "-c", code], timeout=60, env=clean_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == vargr.__version__


def test_metadata_names_the_license_and_ships_its_texts() -> None:
    dist = metadata.distribution("vargr")
    assert dist.metadata["License-Expression"] == "MIT OR Apache-2.0"
    shipped = {Path(str(f)).name for f in dist.files or [] if "licenses" in Path(str(f)).parts}
    assert {"LICENSE-MIT", "LICENSE-APACHE"} <= shipped
    assert dist.metadata["Requires-Python"] == ">=3.9"
    assert "Typing :: Typed" in (dist.metadata.get_all("Classifier") or [])


def test_the_extension_is_built_for_the_stable_abi() -> None:
    assert vargr._vargr.__file__ is not None
    assert vargr._vargr.__file__.endswith(".abi3.so")


@pytest.mark.skipif(
    os.environ.get("VARGR_REQUIRE_WHEEL") != "1",
    reason="VARGR_REQUIRE_WHEEL=1 (scripts/test.sh) checks that the wheel is under test",
)
def test_the_package_under_test_is_the_installed_wheel() -> None:
    here = Path(vargr.__file__).resolve()
    assert REPO / "python" not in here.parents, f"vargr imported from the source tree: {here}"
    assert any(here.is_relative_to(Path(p).resolve()) for p in sys.path if "-packages" in p)
    dist = metadata.distribution("vargr")
    # pip records where it installed from (PEP 610): a wheel file, not a directory.
    origin = json.loads(dist.read_text("direct_url.json") or "{}")
    assert "archive_info" in origin and origin["url"].endswith(".whl"), origin
    tags = [
        line.split(": ", 1)[1]
        for line in (dist.read_text("WHEEL") or "").splitlines()
        if line.startswith("Tag: ")
    ]
    manylinux = re.compile(r"cp39-abi3-manylinux(2014|_2_\d+)_\w+")
    assert tags and all(manylinux.fullmatch(t) for t in tags), tags
