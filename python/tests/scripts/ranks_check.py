"""Every rank collective checked for real; run under `vargr run -n N` or `mpirun -n N`.

Each rank prints `rank R ok` at the end, or fails with the first wrong result (an
AssertionError naming the call). Every expected value is computed independently of
vargr from the rank numbers.
"""

from __future__ import annotations

import os

import numpy as np
import vargr


def check(what: str, got: object, want: object) -> None:
    if isinstance(want, np.ndarray):
        ok = isinstance(got, np.ndarray) and got.dtype == want.dtype and np.array_equal(got, want)
    else:
        ok = got == want and type(got) is type(want)
    assert ok, f"{what}: got {got!r}, expected {want!r}"


def objects(comm: vargr.Comm) -> None:
    r, p = comm.rank, comm.size
    check("allreduce float", comm.allreduce(float(r + 1)), p * (p + 1) / 2)
    check("allreduce int max", comm.allreduce(r * 10, op=vargr.MAX), (p - 1) * 10)
    check("allreduce bool land", comm.allreduce(r > 0, op=vargr.LAND), False)
    check("allreduce bool lor", comm.allreduce(r > 0, op=vargr.LOR), p > 1)
    check("allreduce prod", comm.allreduce(r + 2, op=vargr.PROD), int(np.prod(np.arange(2, p + 2))))
    x = np.arange(5, dtype=np.float64) * (r + 1)
    before = x.copy()
    want = np.arange(5, dtype=np.float64) * (p * (p + 1) / 2)
    check("allreduce f64 array", comm.allreduce(x), want)
    check("allreduce leaves its input", x, before)
    check(
        "allreduce i32 matrix min",
        comm.allreduce(np.full((2, 3), r - 1, dtype=np.int32), op=vargr.MIN),
        np.full((2, 3), -1, dtype=np.int32),
    )
    check("allreduce numpy scalar", comm.allreduce(np.float32(0.5)), np.float32(0.5 * p))
    # Not numbers: pickled and reduced in rank order (list + list concatenates).
    check("allreduce lists", comm.allreduce([r]), list(range(p)))
    digits = vargr.Op.Create(lambda a, b: a * 10 + b, commute=False)
    check(
        "allreduce user op",
        comm.allreduce(r + 1, op=digits),
        int("".join(str(i + 1) for i in range(p))),
    )
    red = comm.reduce(float(r), root=p - 1)
    check("reduce float", red, float(p * (p - 1) / 2) if r == p - 1 else None)
    red = comm.reduce(np.array([r, 1], dtype=np.int64), op=vargr.SUM, root=0)
    if r == 0:
        check("reduce array", red, np.array([p * (p - 1) // 2, p], dtype=np.int64))
    else:
        check("reduce array elsewhere", red, None)

    small = comm.bcast({"from": "root", "n": 3} if r == 0 else None, root=0)
    check("bcast small", small, {"from": "root", "n": 3})
    big = comm.bcast(bytes(range(256)) * 400 if r == p - 1 else None, root=p - 1)
    check("bcast large", big, bytes(range(256)) * 400)
    check("allgather", comm.allgather(("r", r)), [("r", i) for i in range(p)])
    g = comm.gather(r * r, root=1 % p)
    check("gather", g, [i * i for i in range(p)] if r == 1 % p else None)
    mine = comm.scatter([f"item{i}" for i in range(p)] if r == 0 else None, root=0)
    check("scatter", mine, f"item{r}")
    got = comm.alltoall([(r, j) for j in range(p)])
    check("alltoall", got, [(i, r) for i in range(p)])
    comm.send({"hello": r}, dest=(r + 1) % p, tag=5)
    check("send/recv", comm.recv(source=(r - 1) % p, tag=5), {"hello": (r - 1) % p})
    comm.barrier()


def buffers(comm: vargr.Comm) -> None:
    r, p = comm.rank, comm.size
    total = p * (p + 1) // 2
    send = np.full(3, r + 1, dtype=np.float64)
    recv = np.empty(3, dtype=np.float64)
    comm.Allreduce(send, recv, op=vargr.SUM)
    check("Allreduce f64", recv, np.full(3, float(total)))
    buf = np.full(4, r + 1, dtype=np.float32)
    comm.Allreduce(vargr.IN_PLACE, buf)
    check("Allreduce in place f32", buf, np.full(4, float(total), dtype=np.float32))
    buf = np.array([r, -r], dtype=np.int64)
    comm.Allreduce(vargr.IN_PLACE, buf, op=vargr.MAX)
    check("Allreduce i64 max", buf, np.array([p - 1, 0], dtype=np.int64))
    flags = np.array([r == 0, True, False])
    out = np.empty(3, dtype=bool)
    comm.Allreduce(flags, out, op=vargr.LOR)
    check("Allreduce bool lor", out, np.array([True, True, False]))
    try:
        comm.Allreduce(np.zeros(2, dtype=np.float64), np.zeros(2, dtype=np.float32))
        raise AssertionError("mismatched dtypes were accepted")
    except TypeError:
        pass  # refused before anything was sent, on every rank alike

    def scaled_max(invec: np.ndarray, inoutvec: np.ndarray) -> None:
        inoutvec[:] = np.maximum(invec, inoutvec)

    user = vargr.Op.Create(scaled_max)
    x = np.array([r, p - r], dtype=np.int32)
    y = np.empty_like(x)
    comm.Allreduce(x, y, op=user)
    check("Allreduce user op", y, np.array([p - 1, p], dtype=np.int32))

    total_buf = np.zeros(2, dtype=np.uint16) if r == 0 else None
    comm.Reduce(np.array([1, r], dtype=np.uint16), total_buf, op=vargr.SUM, root=0)
    if r == 0:
        check("Reduce", total_buf, np.array([p, p * (p - 1) // 2], dtype=np.uint16))

    b = np.arange(6, dtype=np.complex128) if r == 0 else np.zeros(6, dtype=np.complex128)
    comm.Bcast(b, root=0)
    check("Bcast complex", b, np.arange(6, dtype=np.complex128))
    every = np.empty(2 * p, dtype=np.int16)
    comm.Allgather(np.array([r, 10 * r], dtype=np.int16), every)
    check("Allgather", every, np.array([v for i in range(p) for v in (i, 10 * i)], dtype=np.int16))
    root_buf = np.empty(p, dtype=np.float64) if r == 0 else None
    comm.Gather(np.array([r / 2]), root_buf, root=0)
    if r == 0:
        check("Gather", root_buf, np.arange(p) / 2)
    part = np.empty(2, dtype=np.int32)
    comm.Scatter(np.arange(2 * p, dtype=np.int32) if r == 0 else None, part, root=0)
    check("Scatter", part, np.array([2 * r, 2 * r + 1], dtype=np.int32))
    a2a = np.empty(p, dtype=np.int64)
    comm.Alltoall(np.arange(p, dtype=np.int64) + 100 * r, a2a)
    check("Alltoall", a2a, np.arange(p, dtype=np.int64) * 100 + r)
    comm.Send(np.full(3, r, dtype=np.float64), dest=(r + 1) % p, tag=9)
    into = np.zeros(8, dtype=np.float64)
    n = comm.Recv(into, source=(r - 1) % p, tag=9)
    check("Recv count", n, 3)
    check("Recv data", into[:3], np.full(3, float((r - 1) % p)))


def communicators(comm: vargr.Comm) -> None:
    r, p = comm.rank, comm.size
    half = comm.Split(color=r % 2, key=-r)
    assert half is not None
    members = [i for i in range(p) if i % 2 == r % 2]
    check("Split size", half.size, len(members))
    # key=-r orders the group by descending world rank.
    check("Split rank", half.rank, sorted(members, reverse=True).index(r))
    check("Split allreduce", half.allreduce(r), sum(members))
    dup = comm.Dup()
    check("Dup allreduce", dup.allreduce(1), p)
    check("Get_rank", (comm.Get_rank(), comm.Get_size()), (r, p))
    # Conditional allreduce: sum of (r + 1) over ranks against thresholds below and
    # above the total.
    total = p * (p + 1) / 2
    check("cond_allreduce holds", comm.cond_allreduce(float(r + 1), total - 0.5, ">").holds, True)
    check("cond_allreduce fails", bool(comm.cond_allreduce(float(r + 1), total + 0.5, ">")), False)
    with comm.conditional(1.0, ">=", op=vargr.MAX) as cond:
        check("conditional max", cond(float(r)).holds, p - 1 >= 1)


def main() -> None:
    comm = vargr.World()
    objects(comm)
    buffers(comm)
    communicators(comm)
    comm.barrier()
    # One write(2) of a short line: ranks sharing a pipe cannot interleave it.
    os.write(1, f"rank {comm.rank} ok\n".encode())


if __name__ == "__main__":
    main()
