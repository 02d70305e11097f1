"""Checks vargr.MPI's semantics on every rank against closed forms, as an mpi4py program
would use them: wildcards and requests, buffer specs of every shape, the collectives
vargr builds in Python, MINLOC/MAXLOC, Cartesian grids and error classes. Prints
"rank R ok" (run by test_mpi4py.py under `vargr run -np 4`)."""

from __future__ import annotations

import array

import numpy as np
from vargr import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
right, left = (rank + 1) % size, (rank - 1) % size

# Wildcards: rank 0 hears from everyone, in each sender's order, with the status filled.
if rank == 0:
    seen: dict[int, list[int]] = {}
    for _ in range(2 * (size - 1)):
        st = MPI.Status()
        msg = comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
        assert msg == (st.Get_source(), st.Get_tag()), (msg, st)
        seen.setdefault(st.Get_source(), []).append(st.Get_tag())
    assert seen == {r: [7, 3] for r in range(1, size)}, seen
else:
    comm.send((rank, 7), dest=0, tag=7)
    comm.send((rank, 3), dest=0, tag=3)

comm.Barrier()  # later messages must not meet the wildcards above

# Requests: a ring of Irecv/Isend completed by Waitall, and waitany over posted objects.
got = np.zeros(3, dtype="d")
reqs = [comm.Irecv([got, MPI.DOUBLE], source=left, tag=1)]
reqs.append(comm.Isend(np.full(3, rank, dtype="d"), dest=right, tag=1))
MPI.Request.Waitall(reqs)
assert (got == left).all(), got
objs = [comm.irecv(source=s, tag=2) for s in range(size)]
for s in range(size):
    comm.send(rank * 100 + s, dest=s, tag=2)
values = set()
for _ in range(size):
    i, v = MPI.Request.waitany(objs)
    values.add(v)
    objs[i] = MPI.REQUEST_NULL
assert values == {s * 100 + rank for s in range(size)}, values

# Probe sizes a message; Get_count in elements of a type.
comm.Send([np.arange(5 + rank, dtype="i"), MPI.INT], dest=right, tag=4)
st = MPI.Status()
comm.Probe(source=MPI.ANY_SOURCE, tag=4, status=st)
n = st.Get_count(MPI.INT)
assert (st.Get_source(), n) == (left, 5 + left), (st, n)
buf = np.empty(n, dtype="i")
comm.Recv(buf, source=st.Get_source(), tag=4)
assert list(buf) == list(range(5 + left))

# Buffers of every kind: array.array, bytearray, memoryview, non-contiguous numpy.
a = array.array("i", [rank] * 4)
b = array.array("i", [0] * 4)
comm.Allreduce(a, b, op=MPI.SUM)
assert list(b) == [sum(range(size))] * 4
raw = bytearray(8)
comm.Bcast([raw, MPI.BYTE] if rank else [bytearray(b"vargr!!!"), MPI.BYTE], root=0)
assert raw == b"vargr!!!" or rank == 0, raw
strided = np.zeros((4, 2), dtype="d")
col = strided[:, 1]  # not contiguous
comm.Allreduce(np.full(4, rank + 1.0), col, op=MPI.MAX)
assert (strided[:, 1] == size).all() and (strided[:, 0] == 0).all(), strided
mv = memoryview(bytearray(np.full(2, rank, dtype="q").tobytes())).cast("q")
out = np.zeros(2, dtype="q")
comm.Allreduce([mv, MPI.INT64_T], [out, MPI.INT64_T], op=MPI.SUM)
assert (out == sum(range(size))).all()
z = np.array([rank + 1j * rank], dtype="D")
zs = np.zeros(1, dtype="D")
comm.Allreduce(z, zs, op=MPI.SUM)
assert zs[0] == sum(range(size)) * (1 + 1j)

# Collectives vargr.MPI builds itself: scan, exscan, reduce_scatter, the v variants.
assert comm.scan(rank + 1) == sum(range(1, rank + 2))
assert comm.exscan(rank + 1) == (sum(range(1, rank + 1)) if rank else None)
x = np.arange(size * 2, dtype="i") + rank
rs = np.zeros(2, dtype="i")
comm.Reduce_scatter_block(x, rs, op=MPI.SUM)
assert list(rs) == [size * (2 * rank + k) + sum(range(size)) for k in range(2)], rs
counts = [r + 1 for r in range(size)]
displs = [sum(counts[:r]) for r in range(size)]
allv = np.zeros(sum(counts), dtype="d")
comm.Allgatherv(np.full(rank + 1, float(rank)), [allv, (counts, displs), MPI.DOUBLE])
assert list(allv) == [float(r) for r in range(size) for _ in range(r + 1)], allv
mine = np.zeros(rank + 1, dtype="d")
comm.Scatterv([allv, (counts, displs), MPI.DOUBLE] if rank == 0 else None, mine, root=0)
assert (mine == rank).all(), mine

# MINLOC and MAXLOC, on objects and on pair buffers.
assert comm.allreduce((abs(rank - 1), rank), op=MPI.MINLOC) == (0, 1)
pair = np.array([(float(rank % 2), rank)], dtype=MPI.DOUBLE_INT.dtype)
best = np.zeros(1, dtype=MPI.DOUBLE_INT.dtype)
comm.Allreduce([pair, MPI.DOUBLE_INT], [best, MPI.DOUBLE_INT], op=MPI.MAXLOC)
assert (best["v"][0], best["i"][0]) == (1.0, 1), best
assert comm.allreduce(rank % 2 == 1, op=MPI.LXOR) == ((size // 2) % 2 == 1)
assert comm.allreduce(1 << rank, op=MPI.BXOR) == (1 << size) - 1


# A user operator on buffers, non-commutative: the result is in rank order.
def concat(inbuf: object, inout: object, datatype: object) -> None:
    i, o = np.frombuffer(inbuf, dtype="i"), np.frombuffer(inout, dtype="i")  # type: ignore[call-overload]
    o[:] = i * 10 ** len(str(int(o[0]))) + o  # a op b = the digits of a, then of b


digits = np.zeros(1, dtype="i")
comm.Allreduce(np.array([rank + 1], dtype="i"), digits, op=MPI.Op.Create(concat, commute=False))
assert digits[0] == int("".join(str(r + 1) for r in range(size))), digits

# Cartesian grids.
dims = MPI.Compute_dims(size, 2)
cart = comm.Create_cart(dims, periods=[True, False])
me = cart.Get_coords(cart.Get_rank())
assert cart.Get_cart_rank(me) == cart.Get_rank()
src, dest = cart.Shift(1, 1)
assert (dest == MPI.PROC_NULL) == (me[1] == dims[1] - 1)
src, dest = cart.Shift(0, 1)
assert dest == cart.Get_cart_rank([(me[0] + 1) % dims[0], me[1]])
cart.Sendrecv(np.array([cart.rank], dtype="i"), dest, 9, got := np.zeros(1, dtype="i"), src, 9)
assert got[0] == src, (got, src)
row = cart.Sub([False, True])
assert row.Get_size() == dims[1]

# Split by parity; errors carry their class.
half = comm.Split(rank % 2, rank)
assert half.Get_size() == (size + 1 - rank % 2) // 2
for dest, tag, cls in ((size, 0, MPI.ERR_RANK), (0, -5, MPI.ERR_TAG)):
    try:
        comm.send(1, dest=dest, tag=tag)
    except MPI.Exception as e:
        assert e.Get_error_class() == cls, (e, cls)
    else:
        raise AssertionError("no error")
short = np.zeros(1, dtype="i")
comm.Send(np.zeros(4, dtype="i"), dest=right, tag=11)
try:
    comm.Recv(short, source=left, tag=11)
except MPI.Exception as e:
    assert e.Get_error_class() == MPI.ERR_TRUNCATE, e
else:
    raise AssertionError("no truncation error")
assert comm.Get_attr(MPI.TAG_UB) >= 32767

comm.Barrier()
print(f"rank {rank} ok")
