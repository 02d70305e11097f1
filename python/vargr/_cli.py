"""Console scripts of the package.

``vargr-commnode commnode`` is what a tree started from Python runs at its internal
nodes, so a Python front-end needs no ``vargr`` binary (and never one of another
version, whose protocol might differ).
"""

from __future__ import annotations

import sys


def commnode_main() -> None:
    """Entry point of ``vargr-commnode``."""
    from . import _vargr

    if sys.argv[1:] != ["commnode"]:
        print(
            "usage: vargr-commnode commnode\n"
            "(started by a vargr network for its internal nodes, with VARGR_PARENT, "
            "VARGR_NODE and VARGR_SECRET set)",
            file=sys.stderr,
        )
        sys.exit(2)
    try:
        _vargr.run_commnode()
    except _vargr.VargrError as e:
        print(f"vargr-commnode: {e}", file=sys.stderr)
        sys.exit(1)
