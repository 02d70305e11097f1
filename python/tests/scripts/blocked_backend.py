"""A back-end that blocks in recv() until Ctrl-C: writes its pid to argv[1], and
"interrupted" there once KeyboardInterrupt reaches it."""

from __future__ import annotations

import os
import sys

import vargr


def main() -> None:
    path = sys.argv[1]
    be = vargr.Backend.attach()
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    try:
        be.recv()
    except KeyboardInterrupt:
        with open(path, "w") as f:
            f.write("interrupted")


if __name__ == "__main__":
    main()
