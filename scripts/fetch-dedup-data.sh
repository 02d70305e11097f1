#!/bin/sh
# Real data for `vargr bench dedup`: consecutive source releases of a large package that
# nobody on this project wrote, so that syncing "the next version" is measured on the
# kind of change real software makes between releases (a version string in every path,
# edited files here and there, translations rebuilt), not on edits made to suit vargr.
#
#   scripts/fetch-dedup-data.sh [DIR]        (default DIR: target/dedup-data)
#
# Environment: PKG (default Django), VERSIONS (default "5.0.1 5.0.2 5.0.3 5.0.4",
# consecutive releases, oldest first), PYTHON (default python3).
#
# Each release's sdist is fetched with `pip download --no-deps --no-binary :all:` into
# DIR/sdist and unpacked to an uncompressed tar, DIR/PKG-VERSION.tar (about 60 MB each
# for Django 5.0); DIR/manifest.tsv lists them in order (name, version, file, bytes,
# source), which the benchmark reads.
#
# Why Django and not numpy, scipy or pandas: pip prepares an sdist's metadata before it
# saves it, and those three build with meson-python, which has no metadata hook, so pip
# compiles the whole package (many CPU-minutes) just to download it. Django's sdist is
# as large as numpy's once unpacked, pure source, and its metadata takes seconds.
#
# Idempotent: releases already unpacked are neither downloaded nor unpacked again.
# Exit status non-zero, with the reason on stderr, if something is missing.
set -eu

DIR=${1:-target/dedup-data}
PKG=${PKG:-Django}
VERSIONS=${VERSIONS:-"5.0.1 5.0.2 5.0.3 5.0.4"}
PYTHON=${PYTHON:-python3}

fail() {
    echo "fetch-dedup-data: $*" >&2
    exit 1
}

command -v gzip >/dev/null 2>&1 || fail "gzip not found (needed to unpack the sdists)"
mkdir -p "$DIR/sdist" || fail "cannot create $DIR/sdist"

# The sdist of PKG==$1 in DIR/sdist, if there (PyPI spells the name either way).
sdist_of() {
    norm=$(printf '%s' "$PKG" | tr 'A-Z-' 'a-z_')
    for f in "$DIR"/sdist/*; do
        base=$(basename "$f" | tr 'A-Z-' 'a-z_')
        case "$base" in
        "$norm"_"$1".tar.gz | "$norm"_"$1".tgz)
            printf '%s\n' "$f"
            return 0
            ;;
        esac
    done
    return 1
}

n=0
for v in $VERSIONS; do
    n=$((n + 1))
    tar="$DIR/$PKG-$v.tar"
    if [ -s "$tar" ]; then
        continue
    fi
    if ! sdist_of "$v" >/dev/null; then
        command -v "$PYTHON" >/dev/null 2>&1 || fail "$PYTHON not found (needed for pip)"
        echo "fetch-dedup-data: downloading $PKG $v (sdist) ..." >&2
        # Bounded retries, so that an offline machine fails in seconds, not minutes.
        if ! "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
            --retries 1 --timeout 60 --dest "$DIR/sdist" "$PKG==$v" >"$DIR/pip.log" 2>&1; then
            echo "fetch-dedup-data: 'pip download $PKG==$v' failed (see $DIR/pip.log):" >&2
            tail -n 3 "$DIR/pip.log" >&2
            exit 1
        fi
    fi
    src=$(sdist_of "$v") || fail "pip saved no .tar.gz sdist of $PKG $v in $DIR/sdist (a .zip sdist is not handled)"
    gzip -dc "$src" >"$tar.tmp" || {
        rm -f "$tar.tmp"
        fail "unpacking $src failed"
    }
    mv "$tar.tmp" "$tar"
done
[ "$n" -ge 2 ] || fail "VERSIONS must name at least two releases (got: $VERSIONS)"

# The manifest, oldest release first, rewritten from VERSIONS every time.
: >"$DIR/manifest.tsv.tmp"
for v in $VERSIONS; do
    tar="$DIR/$PKG-$v.tar"
    bytes=$(wc -c <"$tar" | tr -d ' ')
    printf '%s\t%s\t%s\t%s\t%s\n' "$PKG-$v" "$v" "$(basename "$tar")" "$bytes" \
        "PyPI sdist $(basename "$(sdist_of "$v")"), gunzipped" >>"$DIR/manifest.tsv.tmp"
done
mv "$DIR/manifest.tsv.tmp" "$DIR/manifest.tsv"

printf '%-16s %-8s %11s  %s\n' name version bytes source
while IFS="$(printf '\t')" read -r name version file bytes source; do
    printf '%-16s %-8s %11s  %s\n' "$name" "$version" "$bytes" "$source"
done <"$DIR/manifest.tsv"
