#!/usr/bin/env bash
# Builds the wheel of the Python package `vargr` with maturin: one wheel for CPython 3.9
# and every later version (the extension uses the stable ABI, pyo3's abi3-py39), tagged
# manylinux with the oldest glibc that the extension's symbols allow, so that pip takes it
# on any Linux whose glibc is that new or newer.
#
# Usage: scripts/build-wheels.sh [--profile release|dev] [--zig] [--compatibility TAG]
#                                [--out DIR]
#   --profile release  (default) what users install: fat LTO, stripped. Slow to build.
#   --profile dev      what scripts/test.sh tests: the same code unoptimised but for the
#                      codecs (see Cargo.toml), with symbols, reusing the test build's
#                      artifacts. Into DIR/dev, so that it never stands where a release
#                      wheel is expected (both have the same file name).
#   --zig              link with zig (`pip install 'maturin[zig]'`: PyPI's ziglang) against
#                      glibc 2.17's symbols: a manylinux2014 (manylinux_2_17) wheel, which
#                      pip takes on any glibc from 2.17 on (RHEL 8 has 2.28).
#   --compatibility T  require platform tag T (e.g. manylinux_2_28); the build fails when
#                      the extension needs a newer glibc. Default: the oldest tag that
#                      maturin's auditwheel check finds the extension satisfies.
#   --out DIR          default target/wheels of the repository (whatever CARGO_TARGET_DIR).
# Needs maturin on PATH (or $MATURIN) and a CPython 3.9+ ($PYTHON, default python3).
# Prints the wheel's path as the last line of its standard output.
#
# Without --zig the tag is only as old as the glibc this machine links against: Rust's
# std takes the newest symbol versions of the glibc it links with. On Debian 12 (glibc
# 2.36) that is manylinux_2_34 (glibc 2.34 moved pthread_* and dl* into libc under new
# versions), which excludes e.g. RHEL 8 (2.28) and Ubuntu 20.04 (2.31); --zig or an older
# build host (a manylinux container) gives an older tag.
set -euo pipefail
caller="$PWD"
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$self")/.."

profile=release
compatibility=
zig=
out="$PWD/target/wheels"
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="${2:?--profile needs release or dev}"; shift 2 ;;
    --zig) zig=1; shift ;;
    --compatibility) compatibility="${2:?--compatibility needs a tag}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2
           case "$out" in /*) ;; *) out="$caller/$out" ;; esac ;;
    -h|--help) sed -n '2,22p' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-wheels.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

MATURIN="${MATURIN:-maturin}"
PYTHON="${PYTHON:-python3}"

args=(build --locked --interpreter "$PYTHON" --auditwheel check)
case "$profile" in
  release) args+=(--release --strip) ;;
  dev) args+=(--profile dev); out="$out/dev" ;;
  *) echo "build-wheels.sh: --profile is release or dev, not $profile" >&2; exit 2 ;;
esac
[ -n "$zig" ] && args+=(--zig)
[ -n "$compatibility" ] && args+=(--compatibility "$compatibility")
command -v "$MATURIN" >/dev/null || {
  echo "build-wheels.sh: maturin not found: pip install 'maturin>=1.9.4,<2' (or set MATURIN)" >&2
  exit 1
}

# A fresh output directory holds exactly the wheel built now.
mkdir -p "$out"
rm -f "$out"/vargr-*.whl
start=$(date +%s)
# maturin's report goes to stderr: stdout is the wheel's path alone.
"$MATURIN" "${args[@]}" --out "$out" >&2
wheels=("$out"/vargr-*.whl)
if [ "${#wheels[@]}" -ne 1 ] || [ ! -f "${wheels[0]}" ]; then
  echo "build-wheels.sh: expected one wheel in $out, found: ${wheels[*]}" >&2
  exit 1
fi
wheel="${wheels[0]}"
case "$(basename "$wheel")" in
  *-cp39-abi3-manylinux*.whl) ;;
  *) echo "build-wheels.sh: $wheel is not an abi3 manylinux wheel" >&2; exit 1 ;;
esac
echo "build-wheels.sh: $profile wheel in $(($(date +%s) - start)) s, $(du -h "$wheel" | cut -f1): $wheel" >&2
echo "$wheel"
