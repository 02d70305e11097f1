"""Python against Rust, 8-byte allreduce, same loop, same launcher: prints one JSON object.

    python python/bench/compare_allreduce.py --vargr target/release/vargr --ranks 2

runs `vargr run -n RANKS -- vargr-bench coll-bench-rank --op allreduce --bytes 8` (the
Rust side of `vargr bench coll`; vargr-bench is the program beside --vargr) and
`vargr run -n RANKS -- python allreduce_overhead.py`
(this interpreter, so the vargr package it imports is the one measured), alternating
them `--rounds` times so that load on the machine hits both alike, and reports each
side's median and p90 (per iteration, the slowest rank) and the Python overhead per
form: the median of the round medians, Python minus Rust. The issue's target: at most
5 µs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def run(cmd: list[str], timeout: float) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def percentile(s: list[float], q: float) -> float:
    k = max(0, min(len(s) - 1, round(q / 100.0 * (len(s) - 1))))
    return s[k]


def rust_round(vargr: str, ranks: int, iters: int, warmup: int) -> dict[str, float]:
    bench = str(Path(vargr).with_name("vargr-bench"))
    out = run(
        [vargr, "run", "-n", str(ranks), "--", bench, "coll-bench-rank"]
        + ["--op", "allreduce", "--bytes", "8"]
        + ["--iters", str(iters), "--warmup", str(warmup)],
        timeout=600,
    )
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    res = json.loads(line[len("RESULT ") :])
    s = sorted(res["times_us"])
    return {
        "median_us": percentile(s, 50),
        "p90_us": percentile(s, 90),
        "per_call_us": res["total_s"] * 1e6 / res["iters"],
    }


def python_round(vargr: str, ranks: int, iters: int, warmup: int) -> dict[str, Any]:
    out = run(
        [vargr, "run", "-n", str(ranks), "--", sys.executable]
        + [str(HERE / "allreduce_overhead.py"), "--iters", str(iters), "--warmup", str(warmup)],
        timeout=600,
    )
    line = next(x for x in out.splitlines() if x.startswith("{"))
    results: dict[str, Any] = json.loads(line)["results"]
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vargr", default="target/release/vargr")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    rust: list[dict[str, float]] = []
    py: list[dict[str, Any]] = []
    for _ in range(a.rounds):
        rust.append(rust_round(a.vargr, a.ranks, a.iters, a.warmup))
        py.append(python_round(a.vargr, a.ranks, a.iters, a.warmup))
    rust_median = statistics.median(r["median_us"] for r in rust)
    forms = sorted(py[0])
    summary = {
        "benchmark": "python-vs-rust-allreduce-8B",
        "ranks": a.ranks,
        "iters": a.iters,
        "rounds": a.rounds,
        "rust": {"median_us": rust_median, "rounds": rust},
        "python": {
            f: {
                "median_us": statistics.median(p[f]["median_us"] for p in py),
                "rounds": [p[f] for p in py],
            }
            for f in forms
        },
        "overhead_us": {
            f: statistics.median(p[f]["median_us"] - r["median_us"] for p, r in zip(py, rust))
            for f in forms
        },
        "target_us": 5.0,
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
