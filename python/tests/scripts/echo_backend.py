"""A back-end for the tree tests, started as a real process by vargr.Network.

Tags: 1 echo the packet; 2 answer base + rank; 3 an f64 array of rank + 0..3; 4 send a
point-to-point message to the next back-end, which reports it (tag 6) on the stream
named in the message; 7 never answer.
"""

from __future__ import annotations

import numpy as np
import vargr

TAG_ECHO, TAG_RANK, TAG_ARRAY, TAG_P2P_START, TAG_P2P, TAG_P2P_REPORT, TAG_SILENT = (
    1,
    2,
    3,
    4,
    5,
    6,
    7,
)


def main() -> None:
    be = vargr.Backend.attach()
    for p in be:
        if p.tag == TAG_ECHO:
            be.send(p, p.tag, p.format, *p.values)
        elif p.tag == TAG_RANK:
            be.send(p, p.tag, "%d", p[0] + be.rank)
        elif p.tag == TAG_ARRAY:
            values = np.arange(4, dtype=np.float64) + be.rank
            be.send(p, p.tag, "%alf", values)
        elif p.tag == TAG_P2P_START:
            dest = (be.rank + 1) % be.num_backends
            be.send_to(dest, TAG_P2P, "%ud %ud", p.stream, be.rank)
        elif p.tag == TAG_P2P:
            stream, sender = p.values
            be.send(stream, TAG_P2P_REPORT, "%ud %ud", sender, be.rank)


if __name__ == "__main__":
    main()
