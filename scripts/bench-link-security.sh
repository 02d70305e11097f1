#!/usr/bin/env bash
# What protecting every frame costs: the same benchmarks run with a build from before
# link protection (BASE: no trailer on any frame) and with this build under MACs and
# under encryption, in interleaved rounds on one machine.
#
#   scripts/bench-link-security.sh BASE_VARGR NEW_VARGR [ROUNDS]
#
# Both binaries must be release builds of the same profile, and BASE's `bench tree` must
# take --transport (commit 8374421 with that flag added; see docs/benchmarks.md). A NEW
# vargr runs `bench` as the vargr-bench program beside it: build both (-p vargr-cli).
# Writes bench/results/link-security.json: one record per run.
#   tree: `vargr bench tree --transport tcp` round trip (median and mean of the
#         front-end's broadcast-and-sum waves) and pipelined waves/s;
#   sync: `vargr sync` of a 256 MiB tree to a `vargr sync --serve` daemon on loopback,
#         fresh caches each run (every segment crosses), wall-clock MB/s.
set -euo pipefail
BASE=${1:?usage: $0 BASE_VARGR NEW_VARGR [ROUNDS]}
NEW=${2:?usage: $0 BASE_VARGR NEW_VARGR [ROUNDS]}
ROUNDS=${3:-3}
cd "$(dirname "$0")/.."
OUT=bench/results/link-security.json
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

# The data: 256 MiB that compresses about 2:1 (text-like) and does not repeat, so the
# sync is bound by CPU, not by dedup.
mkdir -p "$WORK/src"
python3 - "$WORK/src" <<'PY'
import os, random, sys
rng = random.Random(7)
words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(5000)]
for i in range(64):
    parts, n = [], 0
    while n < 4 << 20:
        w = rng.choice(words) + (b"\n" if rng.random() < 0.1 else b" ")
        parts.append(w)
        n += len(w)
    with open(os.path.join(sys.argv[1], f"f{i:02}.txt"), "wb") as f:
        f.write(b"".join(parts)[: 4 << 20])
PY
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$WORK/key"
chmod 600 "$WORK/key"

echo "[" > "$OUT.tmp"
first=1
emit() {
  if [ $first = 0 ]; then echo "," >> "$OUT.tmp"; fi
  first=0
  printf '%s' "$1" >> "$OUT.tmp"
}

tree_run() { # label binary security...
  local label=$1 bin=$2
  shift 2
  VARGR_COMMNODE="$bin" "$bin" bench tree --transport tcp --topology kary:4@16 --no-floor --iters 3000 \
    --waves 20000 --json "$WORK/tree.json" "$@" > /dev/null
  python3 - "$WORK/tree.json" "$label" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r = r[0] if isinstance(r, list) else r
print(json.dumps({"bench": "tree", "build": sys.argv[2], "topology": r["topology"],
                  "transport": "tcp", "rtt_median_us": r["rtt_median_us"],
                  "rtt_mean_us": r["rtt_mean_us"], "waves_per_s": r["waves_per_s"]}))
PY
}

sync_run() { # label binary security...
  local label=$1 bin=$2
  shift 2
  rm -rf "$WORK/served" "$WORK/dcache" "$WORK/ccache"
  mkdir -p "$WORK/served"
  "$bin" sync --serve "$WORK/served" --listen tcp:127.0.0.1:0 --secret-file "$WORK/key" \
    --cache-dir "$WORK/dcache" 2> "$WORK/daemon.log" &
  local pid=$!
  local port=""
  for _ in $(seq 100); do
    port=$(sed -n 's/.* on tcp:127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/daemon.log" | head -1)
    [ -n "$port" ] && break
    sleep 0.05
  done
  local t0 t1
  t0=$(date +%s.%N)
  "$bin" sync "$WORK/src" "vargr://127.0.0.1:$port/copy" --secret-file "$WORK/key" \
    --cache-dir "$WORK/ccache" --quiet "$@" > /dev/null
  t1=$(date +%s.%N)
  kill $pid; wait $pid 2>/dev/null || true
  cmp -s "$WORK/src/f63.txt" "$WORK/served/copy/f63.txt"
  python3 -c "import json,sys; s=float(sys.argv[2])-float(sys.argv[1]); print(json.dumps({'bench':'sync','build':sys.argv[3],'bytes':256<<20,'seconds':s,'mb_per_s':(256<<20)/s/1e6}))" "$t0" "$t1" "$label"
}

for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  emit "$(tree_run base "$BASE")"
  emit "$(tree_run mac "$NEW" --link-security mac)"
  emit "$(tree_run encrypt "$NEW" --link-security encrypt)"
  emit "$(sync_run base "$BASE")"
  emit "$(sync_run mac "$NEW" --link-security mac)"
  emit "$(sync_run encrypt "$NEW" --link-security encrypt)"
done
echo "]" >> "$OUT.tmp"
mv "$OUT.tmp" "$OUT"

python3 - "$OUT" <<'PY'
import json, statistics, sys
rs = json.load(open(sys.argv[1]))
def med(bench, build, key):
    return statistics.median(r[key] for r in rs if r["bench"] == bench and r["build"] == build)
print(f"{'build':8} {'tree rtt median us':>19} {'rtt mean us':>12} {'waves/s':>9} {'sync MB/s':>10}")
for b in ["base", "mac", "encrypt"]:
    print(f"{b:8} {med('tree', b, 'rtt_median_us'):19.1f} {med('tree', b, 'rtt_mean_us'):12.1f} "
          f"{med('tree', b, 'waves_per_s'):9.0f} {med('sync', b, 'mb_per_s'):10.1f}")
PY
