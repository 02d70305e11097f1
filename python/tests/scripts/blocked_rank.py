"""A rank blocked in a receive until Ctrl-C, run under `vargr run -n 2`.

Rank 1 writes its pid to argv[1] and waits for a message rank 0 never sends; once
KeyboardInterrupt reaches it, it writes "interrupted" there and tells rank 0, which
was waiting for exactly that, so the job ends cleanly.
"""

from __future__ import annotations

import os
import sys

import vargr


def main() -> None:
    path = sys.argv[1]
    comm = vargr.World()
    if comm.rank == 1:
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(path + ".tmp", path)
        try:
            comm.recv(source=0, tag=5)
        except KeyboardInterrupt:
            with open(path, "w") as f:
                f.write("interrupted")
            comm.send("done", dest=0, tag=6)
    else:
        assert comm.recv(source=1, tag=6) == "done"


if __name__ == "__main__":
    main()
