"""python/bench/trace_load.py: what tracing costs, estimated from a trace's records."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def trace_load() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "bench" / "trace_load.py"
    spec = importlib.util.spec_from_file_location("trace_load", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["trace_load"] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def ev(cat: str, kind: str, ts: float, dur: float, seq: int = 0) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "ts": ts, "dur": dur, "args": {"collective": kind, "seq": seq}}


def test_blocking_pairs_count_once_and_polls_spread_over_their_windows() -> None:
    m = trace_load()
    events = [
        # A blocking send: its message and its call, one record in memory.
        ev("send", "p2p", 100.0, 5.0),
        ev("user", "send", 100.0, 5.0),
        # A non-blocking send: the call and, later, its message.
        ev("user", "isend", 200.0, 1.0),
        ev("send", "p2p", 200.0, 900.0),
        ev("call", "allreduce", 1500.0, 10.0),
        # 4000 unsuccessful tests from 5 ms to 15 ms: half in each 10 ms window.
        ev("user", "test-polls", 5000.0, 10000.0, seq=4000),
    ]
    load = m.load_of(events, record_ns=100.0, poll_ns=10.0, window_us=10000.0)
    assert (load.records, load.polls) == (4, 4000)
    # Window 0: 4 records (400 ns) and 2000 polls (20000 ns) of 10 ms.
    assert load.busiest_start_s == 0.0
    assert abs(load.busiest_pct - 100 * 20400 / 10e6) < 1e-9
    # The run spans its first record (0.1 ms) to the polls' end (15 ms).
    assert abs(load.whole_run_pct - 100 * 40400 / 14.9e6) < 1e-9
