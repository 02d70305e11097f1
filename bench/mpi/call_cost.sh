#!/usr/bin/env bash
# Instructions libvargr_mpi.so adds to an MPI call, counted by callgrind (valgrind):
# bench/mpi/call_cost.c run without the library ("off"), preloaded without tracing
# ("preload") and tracing ("trace"), each with N and 2N rounds; per round is the
# difference divided by N, so start-up cancels; MPI_Finalize (which writes the trace
# file, a cost that grows with the records) is not counted.
#
#   bench/mpi/call_cost.sh [LIB]     (default target/release/libvargr_mpi.so)
set -euo pipefail
cd "$(dirname "$0")/../.."
lib=${1:-target/release/libvargr_mpi.so}
command -v valgrind >/dev/null || { echo "call_cost.sh needs valgrind" >&2; exit 1; }
[ -f "$lib" ] || { echo "no $lib: cargo build --release -p vargr-mpi" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/call_cost" bench/mpi/call_cost.c
n=100000
count() { # mode what rounds
  local env=()
  case $1 in
    preload) env=(LD_PRELOAD="$lib") ;;
    trace) env=(LD_PRELOAD="$lib" VARGR_MPI_TRACE="$work/trace") ;;
  esac
  env "${env[@]}" valgrind --tool=callgrind --callgrind-out-file="$work/cg" \
    --collect-atstart=no --toggle-collect=main --toggle-collect=MPI_Finalize \
    "$work/call_cost" "$2" "$3" 2>&1 | sed -n 's/.*Collected : //p'
}
printf '%-9s %-8s %s\n' what mode "instructions per round"
for what in polls messages blocking; do
  for mode in off preload trace; do
    one=$(count $mode $what $n)
    two=$(count $mode $what $((2 * n)))
    printf '%-9s %-8s %d\n' $what $mode $(((two - one) / n))
  done
done
