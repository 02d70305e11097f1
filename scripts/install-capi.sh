#!/usr/bin/env bash
# Builds vargr's C library and installs it under PREFIX:
#   PREFIX/include/vargr.h
#   PREFIX/lib/libvargr.so, PREFIX/lib/libvargr.a
#   PREFIX/lib/pkgconfig/vargr.pc
#   PREFIX/lib/cmake/vargr/vargrConfig.cmake, vargrConfigVersion.cmake
#   PREFIX/bin/vargr                         (with --with-vargr)
#
# Usage: scripts/install-capi.sh PREFIX [--debug] [--with-vargr]
#   --debug       install a debug build (target/debug); the default release build uses
#                 the workspace's fat LTO and takes minutes
#   --with-vargr  also build and install the vargr binary: front-ends of trees with
#                 internal nodes run it as their commnodes, and `vargr run` starts ranks
# Honours CARGO_TARGET_DIR. Then: pkg-config --cflags --libs vargr (with
# PKG_CONFIG_PATH=PREFIX/lib/pkgconfig), or find_package(vargr CONFIG REQUIRED) with
# CMAKE_PREFIX_PATH=PREFIX.
set -euo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

prefix=""
profile=release
with_vargr=0
for a in "$@"; do
  case "$a" in
    --debug) profile=debug ;;
    --with-vargr) with_vargr=1 ;;
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
install -m 0755 "$out/libvargr.so" "$prefix/lib/libvargr.so"
install -m 0644 "$out/libvargr.a" "$prefix/lib/libvargr.a"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" -e "s|@STATIC_LIBS@|$static_libs|g" \
  "$capi/cmake/vargr.pc.in" > "$prefix/lib/pkgconfig/vargr.pc"
install -m 0644 "$capi/cmake/vargrConfig.cmake" "$prefix/lib/cmake/vargr/vargrConfig.cmake"
sed -e "s|@VERSION@|$version|g" "$capi/cmake/vargrConfigVersion.cmake.in" \
  > "$prefix/lib/cmake/vargr/vargrConfigVersion.cmake"
if [ "$with_vargr" = 1 ]; then
  install -d "$prefix/bin"
  install -m 0755 "$out/vargr" "$prefix/bin/vargr"
fi
echo "installed: $prefix/include/vargr.h, $prefix/lib/libvargr.{so,a}, vargr.pc, cmake/vargr"
