#!/usr/bin/env bash
# Builds vargr's C library and installs it under PREFIX:
#   PREFIX/include/vargr.h, PREFIX/include/vargr_filter.h (the filter plugin ABI),
#   PREFIX/include/vargr_stage.h (the stage plugin ABI)
#   PREFIX/lib/libvargr.so, PREFIX/lib/libvargr.a
#   PREFIX/lib/pkgconfig/vargr.pc            (shared, with an rpath to PREFIX/lib)
#   PREFIX/lib/pkgconfig/vargr-static.pc     (libvargr.a linked in: no libvargr.so needed)
#   PREFIX/lib/cmake/vargr/vargrConfig.cmake, vargrConfigVersion.cmake
#   PREFIX/bin/vargr                         (the commnode binary; not with --no-vargr)
#
# Usage: scripts/install-capi.sh PREFIX [--debug] [--no-vargr]
#   --debug       install a debug build (target/debug); the default release build uses
#                 the workspace's fat LTO and takes minutes
#   --no-vargr    do not build and install the vargr binary (front-ends of trees with
#                 internal nodes run it as their commnodes, and `vargr run` starts ranks)
# Honours CARGO_TARGET_DIR. Then:
#   cc prog.c $(pkg-config --cflags --libs vargr)         (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig)
#   cc prog.c $(pkg-config --cflags --libs vargr-static)  (no libvargr.so at run time)
# or find_package(vargr CONFIG REQUIRED) with CMAKE_PREFIX_PATH=PREFIX. Programs linked
# with vargr.pc find libvargr.so through their rpath; linked some other way, add
# PREFIX/lib to LD_LIBRARY_PATH. Front-ends find the commnode binary through
# VARGR_COMMNODE=PREFIX/bin/vargr (pkg-config --variable=commnode vargr) or PREFIX/bin
# on the PATH.
set -euo pipefail

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

prefix=""
profile=release
with_vargr=1
for a in "$@"; do
  case "$a" in
    --debug) profile=debug ;;
    --with-vargr) with_vargr=1 ;;  # the default; kept for older scripts
    --no-vargr) with_vargr=0 ;;
    -h|--help) usage ;;
    -*) echo "install-capi.sh: unknown option $a" >&2; usage ;;
    *) [ -z "$prefix" ] || { echo "install-capi.sh: more than one PREFIX given" >&2; usage; }
       prefix="$a" ;;
  esac
done
[ -n "$prefix" ] || usage

root="$(cd "$(dirname "$0")/.." && pwd)"
capi="$root/crates/vargr-capi"
target="${CARGO_TARGET_DIR:-$root/target}"
out="$target/$profile"
flags=()
[ "$profile" = release ] && flags+=(--release)

cd "$root"
echo "== building libvargr ($profile)"
cargo build "${flags[@]}" -p vargr-capi
if [ "$with_vargr" = 1 ]; then
  echo "== building the vargr binary ($profile)"
  cargo build "${flags[@]}" -p vargr-cli --bin vargr
fi

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)"
[ -n "$version" ] || { echo "install-capi.sh: no version in $root/Cargo.toml" >&2; exit 1; }
# What libvargr.a needs besides itself (rustc --print native-static-libs on Linux).
static_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"

mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"
echo "== installing vargr $version into $prefix"
install -d "$prefix/include" "$prefix/lib/pkgconfig" "$prefix/lib/cmake/vargr"
install -m 0644 "$capi/include/vargr.h" "$prefix/include/vargr.h"
install -m 0644 "$root/crates/vargr-filter/include/vargr_filter.h" "$prefix/include/vargr_filter.h"
install -m 0644 "$root/crates/vargr-stage/include/vargr_stage.h" "$prefix/include/vargr_stage.h"
install -m 0755 "$out/libvargr.so" "$prefix/lib/libvargr.so"
install -m 0644 "$out/libvargr.a" "$prefix/lib/libvargr.a"
for pc in vargr vargr-static; do
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" -e "s|@STATIC_LIBS@|$static_libs|g" \
    "$capi/cmake/$pc.pc.in" > "$prefix/lib/pkgconfig/$pc.pc"
done
install -m 0644 "$capi/cmake/vargrConfig.cmake" "$prefix/lib/cmake/vargr/vargrConfig.cmake"
sed -e "s|@VERSION@|$version|g" "$capi/cmake/vargrConfigVersion.cmake.in" \
  > "$prefix/lib/cmake/vargr/vargrConfigVersion.cmake"
if [ "$with_vargr" = 1 ]; then
  install -d "$prefix/bin"
  install -m 0755 "$out/vargr" "$prefix/bin/vargr"
fi
echo "installed: $prefix/include/vargr{,_filter}.h, $prefix/lib/libvargr.{so,a}, vargr{,-static}.pc, cmake/vargr"
[ "$with_vargr" = 1 ] && echo "commnodes: export VARGR_COMMNODE=$prefix/bin/vargr (or put $prefix/bin on the PATH)"
echo "libvargr.so is found through the rpath vargr.pc adds; otherwise: export LD_LIBRARY_PATH=$prefix/lib"
exit 0
