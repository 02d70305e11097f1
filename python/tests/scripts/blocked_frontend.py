"""A front-end that blocks in Stream.recv() on back-ends that never answer; prints
READY once blocked. Ctrl-C must end it with KeyboardInterrupt."""

from __future__ import annotations

import sys

import vargr


def main() -> None:
    backend = [sys.executable, sys.argv[1]]
    with vargr.Network("flat:2", backend=backend) as net:
        stream = net.open_stream(up="sum")
        stream.send(7, "%d", 0)  # tag 7: the back-ends never answer
        print("READY", flush=True)
        stream.recv()


if __name__ == "__main__":
    main()
