"""IntegerAddition, back-end: MRNet's example rewritten for vargr in Python.

Started by the front-end (one process per leaf of the topology): joins the tree and
answers each request on the stream it came from, until the front-end shuts the network
down (iterating over the back-end then ends).
"""

from __future__ import annotations

import vargr

PROT_SUM, PROT_ARRAY, PROT_RANK = 100, 101, 102


def main() -> None:
    be = vargr.Backend.attach()
    for p in be:
        if p.tag == PROT_SUM:
            value, iterations = p.values
            for i in range(iterations):
                be.send(p.stream, p.tag, "%d", value * i)
        elif p.tag == PROT_ARRAY:
            be.send(p.stream, p.tag, "%d %alf", 1, [float(be.rank), 2.0])
        elif p.tag == PROT_RANK:
            be.send(p.stream, p.tag, "%ud", be.rank)


if __name__ == "__main__":
    main()
