"""A program for the live monitor, in mpi4py: ITERS rounds of an Allreduce that rank
LATE reaches last (it sleeps first), and a Barrier. Prints one checksum per rank.

usage: monitor_check.py ITERS LATE SLEEP_S
"""

import sys
import time
from array import array

from mpi4py import MPI


def main() -> None:
    iters, late, pause = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    total = 0
    mine = array("q", [0] * 4)
    got = array("q", [0] * 4)
    for i in range(iters):
        if rank == late:
            time.sleep(pause)
        for k in range(len(mine)):
            mine[k] = rank + i + k
        comm.Allreduce(mine, got, op=MPI.SUM)
        total += sum(got)
        comm.Barrier()
    # One write: mpirun forwards the ranks' output as it comes, and print's two writes
    # (the text, then the newline) interleave with other ranks' lines.
    sys.stdout.write(f"rank {rank} checksum {total}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
