#!/usr/bin/env bash
# Runs every test of vargr, installing what the tests need first.
# Usage: scripts/test.sh        (the README's test command; .ci/run calls it)
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1; }
apt_install() {
  if need apt-get; then
    (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  fi
}

echo "== toolchain"
if ! need cargo; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs) and re-run" >&2
  exit 1
fi
need cc || apt_install build-essential
# Attach-mode tests start back-ends with a real mpirun (and the benchmarks compare with MPI).
need mpirun || apt_install openmpi-bin libopenmpi-dev
# libvargr_mpi.so's tests run NetPIPE (a program no one here wrote) under the shim, and
# check that a program of MPICH, the other MPI ABI, is refused at start. MPICH's
# alternatives rank below Open MPI's: mpirun and mpicc stay Open MPI's.
need NPopenmpi || apt_install netpipe-openmpi
need mpicc.mpich || apt_install mpich libmpich-dev
# ... and Fortran programs (mpifort needs gfortran).
need gfortran || apt_install gfortran
# ... and mpi4py's demos (from its sdist, which the test downloads with pip) with
# Debian's mpi4py, built for /usr/bin/python3 and the system's Open MPI.
/usr/bin/python3 -c "import mpi4py" 2>/dev/null || apt_install python3-mpi4py
# ... and the HPC Challenge, whose kernels verify their own results.
need hpcc || apt_install hpcc
# vargr bench dedup compares with rsync and zstd --patch-from.
need rsync || apt_install rsync
need zstd || apt_install zstd
# The C API's examples are built with CMake's package config and with pkg-config.
need cmake || apt_install cmake
need pkg-config || apt_install pkg-config
# vargr sync HOST:PATH is tested against a real sshd (started by the test itself).
{ need ssh && [ -x /usr/sbin/sshd ]; } || apt_install openssh-client openssh-server
if [ "$(id -u)" = 0 ] && [ -x /usr/sbin/sshd ]; then
  export VARGR_REQUIRE_SSHD=1
fi
# Varg's tests use real VNC parts: TigerVNC's Xvnc (vncpasswd for its VNC authentication,
# xsetroot to draw on it), real viewers under Xvfb captured with xwd (TigerVNC's vncviewer,
# xtightvncviewer, vncsnapshot with djpeg), and the X programs of bench/vnc/session.sh.
vnc_tools="Xvnc vncpasswd xsetroot vncviewer xtightvncviewer vncsnapshot Xvfb xwd xclock xdotool xterm feh gnuplot pnmcat djpeg"
all_present=1
for t in $vnc_tools; do need "$t" || all_present=0; done
[ "$all_present" = 1 ] || apt_install tigervnc-standalone-server tigervnc-tools tigervnc-viewer \
  xtightvncviewer vncsnapshot xvfb x11-apps x11-xserver-utils xdotool xterm feh gnuplot-x11 \
  netpbm libjpeg-turbo-progs
if need Xvnc; then
  export VARGR_REQUIRE_XVNC=1
fi
rustup component list --installed 2>/dev/null | grep -q clippy || rustup component add clippy rustfmt || true
cargo --version
# Disk is shared and sometimes short: a run once died of "No space left on device". A run
# builds everything once, so incremental caches only cost space, and full debug info
# more than doubles every test binary; line tables keep backtraces readable.
export CARGO_INCREMENTAL=0
export CARGO_PROFILE_DEV_DEBUG=line-tables-only
df -h . 2>/dev/null | tail -n 1 | awk '{print "disk: " $4 " free of " $2}'

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "== build"
cargo build --workspace --bins --quiet
# The MPI interposition libraries beside vargr, where `vargr mpi-run` finds them (tests
# of other crates, such as `vargr bench mpi-shim`'s, start programs under them).
cargo build --quiet -p vargr-mpi -p vargr-mpi-mpich
# Integration tests start real processes: point them at the freshly built binary.
export VARGR_BIN="$PWD/target/debug/vargr"
export VARGR_COMMNODE="$VARGR_BIN"

echo "== fuzz target builds"
# In the workspace's target directory, which holds most of their dependencies already
# (fuzz/Cargo.toml repeats the workspace's profile overrides so that they match).
cargo build --quiet --manifest-path fuzz/Cargo.toml --target-dir target
# Not a workspace member, so the checks above do not see it.
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
cargo clippy --quiet --manifest-path fuzz/Cargo.toml --target-dir target --all-targets -- -D warnings

echo "== fuzzing"
# The stable runner (no nightly, no cargo-fuzz): each target replays fuzz/corpus/NAME/,
# where every crash found is kept as a regression, then mutates it for 8 seconds. A
# debug build: it needs no build of its own (a release build of the dependencies took
# 68 s on 2 cores and ran most targets only 1-5 times faster: the codecs are optimised
# in debug builds too), and its overflow checks and debug assertions turn silent
# wrap-arounds into findings. A failure names the target and saves the input in
# fuzz/artifacts/NAME/; the log's seed replays the run.
cargo test --quiet --manifest-path fuzz/Cargo.toml --target-dir target --lib
target/debug/fuzz-run --seconds 8

echo "== bare C floor builds"
make -s -C bench/floor

echo "== tests"
cargo test --workspace --quiet 2>&1 | tee target/test.log
grep -q "test result:" target/test.log

echo "== python package"
# What users install is the wheel, so the tests install the wheel: scripts/build-wheels.sh
# builds the abi3 manylinux wheel, pip installs that file, and python/tests run against
# the installed package (VARGR_REQUIRE_WHEEL=1 makes test_packaging.py check that the
# package under test came from that wheel, not from the source tree).
# The dev profile, not the release one users get: on 2 shared cores the dev wheel took
# 35 s after a build of the vargr binary (its crates are reused) and the release one
# 5.4 min (3.2 min of CPU: fat LTO with one codegen unit, nothing reusable from the test
# builds), in a CI run limited to 90 minutes. The packaging (tags, metadata, files) is
# the same in both; only the optimisation differs, and the code is what the tests test.
PYVENV="$PWD/target/pyvenv"
[ -x "$PYVENV/bin/python" ] || python3 -m venv "$PYVENV" \
  || { apt_install python3-venv python3-dev && python3 -m venv "$PYVENV"; }
"$PYVENV/bin/pip" install -q "maturin==1.16.0" "numpy>=1.21" "pytest==9.2.0" "ruff==0.17.6" "mypy==2.4.1"
WHEEL=$(PATH="$PYVENV/bin:$PATH" PYTHON="$PYVENV/bin/python" scripts/build-wheels.sh --profile dev | tail -n 1)
# The version does not change from build to build: uninstall first so that pip installs
# this wheel instead of finding the requirement already satisfied.
"$PYVENV/bin/pip" uninstall -qq -y vargr
"$PYVENV/bin/pip" install -q "$WHEEL"
"$PYVENV/bin/ruff" format --check python examples/python crates/vargr-mpi/tests/py
"$PYVENV/bin/ruff" check python examples/python crates/vargr-mpi/tests/py
"$PYVENV/bin/mypy" python/vargr python/tests python/bench examples/python crates/vargr-mpi/tests/py

echo "== python tests"
VARGR_REQUIRE_MPIRUN=1 VARGR_REQUIRE_WHEEL=1 "$PYVENV/bin/python" -m pytest -q python/tests 2>&1 | tee target/pytest.log
du -sh target 2>/dev/null | awk '{print "target directory: " $1}'
