"""What tracing costs a program, estimated from its own trace: per rank, the records and
polls it wrote, and the busiest stretch of the run.

    vargr mpi-run --trace out/ -- mpirun -n 2 hpcc
    vargr trace export out/ -o out/trace.json
    python python/bench/trace_load.py out/trace.json --record-ns 45 --poll-ns 3

A program too noisy to time at the 1 % scale (HPCC's kernels on a shared machine) can
still be weighed: every traced call leaves a record, and the runs of unsuccessful tests
and probes say how many polls they were, so the count of records and polls in each
window of the run (10 ms by default) times what one of each costs (measured within one
run by `vargr bench mpi-shim --pcontrol-pairs`) is what tracing added to that window.
Every record is costed as a traced call, though a non-blocking message's record reads no
clock: the figures are an upper bound. A blocking call and its message are one record in
memory and two in the file; the file's pair counts once. Prints one line per rank, or
JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

# What a blocking call's one record is expanded into: the message and the call itself,
# with the same times (vargr-mpi's events.rs, `expand`).
BLOCKING_CALLS = {"send", "ssend", "rsend", "bsend", "recv", "sendrecv", "sendrecv_replace"}


@dataclass
class Load:
    rank: str
    records: int
    polls: int
    seconds: float
    whole_run_pct: float
    busiest_start_s: float
    busiest_pct: float


def load_of(
    events: list[dict[str, Any]], record_ns: float, poll_ns: float, window_us: float
) -> Load:
    """The cost of one process's events (trace-event JSON, times in microseconds)."""
    messages = {(e["ts"], e["dur"]) for e in events if e.get("cat") in ("send", "recv")}
    cost: dict[int, float] = defaultdict(float)  # ns by window
    records = polls = 0
    for e in events:
        args = e.get("args", {})
        kind = args.get("collective", "")
        t0, dur = float(e["ts"]), float(e["dur"])
        if kind.endswith("-polls"):
            n = int(args["seq"])
            polls += n
            first, last = int(t0 // window_us), int((t0 + dur) // window_us)
            for w in range(first, last + 1):
                share = 1.0
                if first != last:
                    lo, hi = max(t0, w * window_us), min(t0 + dur, (w + 1) * window_us)
                    share = (hi - lo) / dur
                cost[w] += n * poll_ns * share
            continue
        if e.get("cat") == "user" and kind in BLOCKING_CALLS and (e["ts"], e["dur"]) in messages:
            continue
        records += 1
        cost[int(t0 // window_us)] += record_ns
    start = min(float(e["ts"]) for e in events)
    end = max(float(e["ts"]) + float(e["dur"]) for e in events)
    span_us = max(end - start, window_us)
    busiest = max(cost.items(), key=lambda kv: kv[1], default=(0, 0.0))
    return Load(
        rank="",
        records=records,
        polls=polls,
        seconds=span_us / 1e6,
        whole_run_pct=100 * sum(cost.values()) / (span_us * 1e3),
        busiest_start_s=busiest[0] * window_us / 1e6,
        busiest_pct=100 * busiest[1] / (window_us * 1e3),
    )


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("trace", help="JSON of `vargr trace export DIR -o FILE`")
    p.add_argument("--record-ns", type=float, required=True, help="cost of one traced call")
    p.add_argument("--poll-ns", type=float, required=True, help="cost of one poll inside a run")
    p.add_argument("--window-ms", type=float, default=10.0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    with open(a.trace) as f:
        doc = json.load(f)
    names: dict[int, str] = {}
    by_process: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "X":
            by_process[e["pid"]].append(e)
    if not by_process:
        print(f"{a.trace}: no events", file=sys.stderr)
        return 1
    loads = []
    for pid, events in sorted(by_process.items()):
        load = load_of(events, a.record_ns, a.poll_ns, a.window_ms * 1e3)
        load.rank = names.get(pid, str(pid))
        loads.append(load)
    if a.json:
        print(json.dumps([asdict(x) for x in loads], indent=1))
        return 0
    for x in loads:
        print(
            f"{x.rank}: {x.records} records and {x.polls} polls in {x.seconds:.2f} s: "
            f"{x.whole_run_pct:.2f} % of the run; busiest {a.window_ms:g} ms "
            f"(from {x.busiest_start_s:.2f} s): {x.busiest_pct:.2f} %"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
