"""MPI-IO as a program written for mpi4py uses it, on vargr.MPI (run by test_io.py).

Four ranks in a 2x2 grid write their blocks of an 8x12 array of doubles through a
subarray filetype with Write_all, read them back with Read_all and Read_at, write a
column of a 20x4 int matrix in two Write_all calls that tile the view (the file pointer
moves by what was written), and see a missing file refused with ERR_NO_SUCH_FILE.
Each rank prints "rank R mpi file OK".
"""

from __future__ import annotations

import os
import sys

import numpy as np
from vargr import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
assert size == 4, "run with 4 ranks"
base = sys.argv[1]

# A block of the 8x12 array: rows 4*(rank // 2).., columns 6*(rank % 2)..
r0, c0 = 4 * (rank // 2), 6 * (rank % 2)
whole = np.arange(96, dtype="f8").reshape(8, 12) / 4
block = np.ascontiguousarray(whole[r0 : r0 + 4, c0 : c0 + 6])
filetype = MPI.DOUBLE.Create_subarray([8, 12], [4, 6], [r0, c0]).Commit()
path = os.path.join(base, "array.bin")
fh = MPI.File.Open(comm, path, MPI.MODE_WRONLY | MPI.MODE_CREATE)
fh.Set_view(0, MPI.DOUBLE, filetype)
fh.Write_all(block)
assert fh.Get_position() == 24, fh.Get_position()
fh.Close()
if rank == 0:
    assert np.array_equal(np.fromfile(path, dtype="f8").reshape(8, 12), whole)
comm.Barrier()

fh = MPI.File.Open(comm, path, MPI.MODE_RDONLY)
fh.Set_view(0, MPI.DOUBLE, filetype)
back = np.empty_like(block)
fh.Read_all(back)
assert np.array_equal(back, block)
row = np.empty(6, dtype="f8")
fh.Read_at(6, row)  # the block's second row: etypes 6..12 of the view
assert np.array_equal(row, block[1])
assert fh.Get_size() == 96 * 8
fh.Close()

# A column of a 20x4 int matrix: the subarray's extent is the whole 10x4 tile, so the
# second Write_all continues at row 10.
col = MPI.INT.Create_subarray([10, 4], [10, 1], [0, rank])
path2 = os.path.join(base, "columns.bin")
fh = MPI.File.Open(comm, path2, MPI.MODE_RDWR | MPI.MODE_CREATE)
fh.Set_view(0, MPI.INT, col)
fh.Write_all(np.arange(10, dtype="i4") + 100 * rank)
fh.Write_all(np.arange(10, 20, dtype="i4") + 100 * rank)
assert fh.Get_position() == 20
fh.Seek(-5, MPI.SEEK_CUR)
assert fh.Get_position() == 15
fh.Close()
if rank == 0:
    got = np.fromfile(path2, dtype="i4").reshape(20, 4)
    want = np.arange(20, dtype="i4")[:, None] + 100 * np.arange(4, dtype="i4")[None, :]
    assert np.array_equal(got, want), got

# A missing file, on every rank.
try:
    MPI.File.Open(comm, os.path.join(base, "missing", "f"), MPI.MODE_RDONLY)
except MPI.Exception as e:
    assert e.Get_error_class() == MPI.ERR_NO_SUCH_FILE, e
else:
    raise AssertionError("a missing file opened")

comm.Barrier()
print(f"rank {rank} mpi file OK", flush=True)
