"""A back-end whose path starts with a Python stage: echoes each packet through the
stages its path (the file in $VARGR_TEST_PATHS) names first, from vargr.paths.backend."""

from __future__ import annotations

import os

import vargr


def main() -> None:
    be = vargr.Backend.attach()
    paths = vargr.Paths(os.environ["VARGR_TEST_PATHS"])

    def stamp(p: vargr.Packet) -> vargr.Packet:
        return vargr.Packet(p.tag, p.format, f"{p.values[0]} via {be.rank}", stream=p.stream)

    pb = vargr.paths.backend(be, paths, {"stamp": stamp})
    while True:
        try:
            p = pb.recv()
        except vargr.ShutdownError:
            return
        pb.send(p.stream, p.tag, p.format, *p.values)


if __name__ == "__main__":
    main()
