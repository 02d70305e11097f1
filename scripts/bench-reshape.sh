#!/usr/bin/env bash
# Did restructuring change speed? `vargr bench tree` and `vargr bench coll` with a build
# from before (BASE) and after (NEW), in interleaved rounds on one machine.
#
#   scripts/bench-reshape.sh BASE_VARGR NEW_VARGR [ROUNDS]
#
# Both must be release builds of the same profile; NEW's `vargr bench` runs the
# vargr-bench beside it. Writes bench/results/reshape.json (one record per benchmark
# record, tagged with build and round) and prints medians over the rounds:
#   tree: round-trip median (µs) and pipelined waves/s, unix links, flat:16, 1x4x16,
#         flat:64, 1x8x64;
#   coll: mean time per call of the slowest rank (µs), allreduce and bcast of 8 B and
#         64 KiB on 4 and 16 ranks, as processes and as threads, vargr only.
set -euo pipefail
BASE=${1:?usage: $0 BASE_VARGR NEW_VARGR [ROUNDS]}
NEW=${2:?usage: $0 BASE_VARGR NEW_VARGR [ROUNDS]}
ROUNDS=${3:-3}
cd "$(dirname "$0")/.."
OUT=bench/results/reshape.json
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

run() { # build binary round
  local build=$1 bin=$2 round=$3
  for n in 16 64; do
    VARGR_COMMNODE="$bin" "$bin" bench tree --backends "$n" --no-floor \
      --json "$WORK/tree-$build-$round-$n.json" >/dev/null
  done
  VARGR_COMMNODE="$bin" "$bin" bench coll --no-mpi --ranks 4,16 --bytes 8,65536 \
    --ops allreduce,bcast --json "$WORK/coll-$build-$round.json" >/dev/null
}

# ABBA order: drift of the machine's state over the run does not favour either build.
for round in $(seq "$ROUNDS"); do
  echo "round $round of $ROUNDS" >&2
  if [ $((round % 2)) = 1 ]; then
    run base "$BASE" "$round"
    run new "$NEW" "$round"
  else
    run new "$NEW" "$round"
    run base "$BASE" "$round"
  fi
done

python3 - "$WORK" "$OUT" <<'PY'
import glob, json, os, statistics, sys
work, out = sys.argv[1], sys.argv[2]
records = []
for path in sorted(glob.glob(os.path.join(work, "*.json"))):
    kind, build, round_ = os.path.basename(path).split("-")[:3]
    for r in json.load(open(path)):
        records.append(dict(r, kind=kind, build=build, round=int(round_.split(".")[0])))
json.dump(records, open(out, "w"), indent=1)

def table(kind, key, metrics):
    rows = {}
    for r in records:
        if r["kind"] == kind:
            rows.setdefault(key(r), {}).setdefault(r["build"], []).append(r)
    for k in sorted(rows):
        cells = []
        for m in metrics:
            b = statistics.median(x[m] for x in rows[k]["base"])
            n = statistics.median(x[m] for x in rows[k]["new"])
            cells.append(f"{m} {b:,.1f} -> {n:,.1f} ({(n - b) / b * 100:+.1f} %)")
        print(f"{kind} {k}: " + "; ".join(cells))

table("tree", lambda r: r["topology"], ["rtt_median_us", "waves_per_s"])
table("coll", lambda r: (r["op"], r["bytes"], r["ranks"], r["transport"]), ["per_call_us"])
PY
