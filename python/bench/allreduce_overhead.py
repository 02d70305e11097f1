"""What a Python allreduce of 8 bytes costs, for comparison with the same call from Rust.

Run under a launcher, like the Rust side (`vargr-bench coll-bench-rank`):

    vargr run -n 2 -- python python/bench/allreduce_overhead.py --iters 20000
    vargr run -n 2 -- vargr-bench coll-bench-rank --op allreduce --bytes 8 \
        --iters 20000 --warmup 2000

The loop is the one `crates/vargr-bench/src/coll_rank.rs` times: untimed warm-up
calls, one barrier, then timed calls with no barrier between them; per iteration the
slowest rank's time counts (a max-reduce of the per-rank times at rank 0). It times
three forms: the object form on a Python float (`comm.allreduce(x)`), the buffer form on
numpy arrays (`comm.Allreduce(send, recv)`) and the buffer form in place
(`comm.Allreduce(vargr.IN_PLACE, buf)`). Rank 0 prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Callable

import numpy as np
import vargr


def percentile(sorted_us: list[float], q: float) -> float:
    """Nearest-rank percentile, as `vargr bench` computes it."""
    if not sorted_us:
        return float("nan")
    k = max(0, min(len(sorted_us) - 1, round(q / 100.0 * (len(sorted_us) - 1))))
    return sorted_us[k]


def measure(
    comm: vargr.Comm, call: Callable[[], object], iters: int, warmup: int
) -> dict[str, float]:
    for _ in range(warmup):
        call()
    times = np.empty(iters, dtype=np.float64)
    clock = time.perf_counter
    comm.barrier()
    start = clock()
    for i in range(iters):
        t0 = clock()
        call()
        times[i] = (clock() - t0) * 1e6
    total = clock() - start
    worst = np.empty_like(times) if comm.rank == 0 else None
    comm.Reduce(times, worst, op=vargr.MAX, root=0)
    total_max = comm.reduce(total, op=vargr.MAX, root=0)
    if comm.rank != 0:
        return {}
    assert worst is not None
    s = sorted(worst.tolist())
    return {
        "iters": iters,
        "median_us": percentile(s, 50),
        "p90_us": percentile(s, 90),
        "p99_us": percentile(s, 99),
        "mean_us": float(np.mean(worst)),
        "min_us": s[0],
        "per_call_us": float(total_max) * 1e6 / iters,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=2000)
    a = ap.parse_args()
    comm = vargr.World()
    r, p = comm.rank, comm.size

    x = float(r + 1)
    send = np.array([float(r + 1)])
    recv = np.empty(1)
    buf = np.zeros(1)
    forms = {
        "object_float": lambda: comm.allreduce(x),
        "buffer": lambda: comm.Allreduce(send, recv),
        "buffer_in_place": lambda: comm.Allreduce(vargr.IN_PLACE, buf),
    }
    results = {name: measure(comm, call, a.iters, a.warmup) for name, call in forms.items()}
    # The timed calls were real collectives: check one of each.
    want = p * (p + 1) / 2
    assert comm.allreduce(x) == want
    comm.Allreduce(send, recv)
    assert recv[0] == want
    if r == 0:
        print(
            json.dumps(
                {
                    "benchmark": "python-allreduce-overhead",
                    "bytes": 8,
                    "ranks": p,
                    "python": ".".join(map(str, __import__("sys").version_info[:3])),
                    "results": results,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
