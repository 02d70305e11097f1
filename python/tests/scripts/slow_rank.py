"""Every rank allreduces ITERS times; rank SLOW sleeps 2 ms before each call, so it
arrives last (traces and monitors must name it). Usage: slow_rank.py SLOW ITERS."""

import sys
import time

from vargr import MPI

slow, iters = int(sys.argv[1]), int(sys.argv[2])
comm = MPI.COMM_WORLD
for i in range(iters):
    if comm.rank == slow:
        time.sleep(0.002)
    comm.allreduce(float(i), op=MPI.SUM)
