"""IntegerAddition, front-end: MRNet's example rewritten for vargr in Python.

    python integer_addition_fe.py TOPOLOGY

Starts a tree whose leaves run integer_addition_be.py (this interpreter), multicasts a
value and an iteration count on a stream whose up-filter sums, and checks each summed
wave; then sums an array field, and asks the first and last back-ends for the maximum
of their ranks over a sub-communicator. TOPOLOGY is an MRNet topology file or a spec
such as kary:2@4. Prints one line per check and "integer_addition: OK" when all passed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import vargr

PROT_SUM, PROT_ARRAY, PROT_RANK = 100, 101, 102
BACKEND = str(Path(__file__).resolve().with_name("integer_addition_be.py"))


def main() -> int:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} TOPOLOGY", file=sys.stderr)
        return 2
    failures = 0
    with vargr.Network(sys.argv[1], backend=[sys.executable, BACKEND]) as net:
        n = net.num_backends
        everyone = net.broadcast_communicator()
        add = net.open_stream(everyone, up="sum", sync="all")
        print(f"network: {n} back-ends")
        send_val, num_iters = 32, 5
        add.send(PROT_SUM, "%d %d", send_val, num_iters)
        for i in range(num_iters):
            p = add.recv(timeout=30)
            expected = n * i * send_val
            ok = p.tag == PROT_SUM and p[0] == expected
            failures += not ok
            print(f"Iteration {i}: {'Success' if ok else 'Failure'}! {p[0]} vs {expected}")

        arrays = net.open_stream(everyone, up="sum")
        arrays.send(PROT_ARRAY, "")
        count, sums = arrays.recv(timeout=30).values
        ok = count == n and list(sums) == [n * (n - 1) / 2, 2.0 * n]
        failures += not ok
        print(f"Arrays: {'Success' if ok else 'Failure'}! count {count}, sums {list(sums)}")

        ends = net.communicator([0, n - 1])
        ranks = net.open_stream(ends, up="max")
        ranks.send(PROT_RANK, "")
        (top,) = ranks.recv(timeout=30).values
        ok = top == n - 1
        failures += not ok
        print(f"Max rank: {'Success' if ok else 'Failure'}! {top}")
    print(f"integer_addition: {'FAILED' if failures else 'OK'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
