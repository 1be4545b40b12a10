#!/usr/bin/env bash
# Run every check the project has, in the order CI runs them:
#   setup -> cargo fmt --check (the workspace and fuzz/) -> clippy -D warnings
#   -> cargo test (debug) -> cargo test (release) -> fuzz targets (corpus
#   replay, 5 s each) -> foreign targets (cargo check for macOS and
#   Windows, aarch64 Linux) -> this machine's wheel and the sdist into dist/
#   -> pytest tests/ (tests/packaging installs the wheel and sdist).
# From setup on, scripts/test-inputs.sh fetches in the background what the
# Python tests need (extras, real data; loaderx 0.5.0 and JAX at best
# effort); pytest waits for it.
# Stops at the first failure and says which step failed.
#
#   scripts/test.sh                 # everything
#   SKIP_REF050=1 scripts/test.sh   # do not try to fetch loaderx 0.5.0 from PyPI
#   SKIP_JAX=1 scripts/test.sh      # do not try to install jax for its tests
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

START=$SECONDS
CURRENT=""

on_exit() {
    rc=$?
    if [ -n "${INPUTS:-}" ]; then
        kill -- -"$INPUTS" 2>/dev/null || true
    fi
    if [ $rc -ne 0 ] && [ -n "$CURRENT" ]; then
        echo >&2
        echo "==> FAILED: step '$CURRENT' (exit $rc) after $((SECONDS - START))s" >&2
    fi
}
trap on_exit EXIT

step() {
    CURRENT=$1
    shift
    echo
    echo "==> [$((SECONDS - START))s] $CURRENT: $*"
    "$@"
}

step setup bash scripts/setup.sh
# The test inputs (extras, real data, loaderx 0.5.0, JAX) download beside
# the builds, in a process group of their own that stops with this script.
INPUTS_LOG=target/test-inputs.log
mkdir -p target
setsid --wait bash scripts/test-inputs.sh >"$INPUTS_LOG" 2>&1 </dev/null &
INPUTS=$!
echo "==> [$((SECONDS - START))s] test inputs: bash scripts/test-inputs.sh, in the background (log: $INPUTS_LOG)"

# The native builds below link the libjpeg-turbo that setup built once
# (scripts/libjpeg-turbo.sh); the wheels build it from the crate.
TURBOJPEG_LIB_DIR=$(bash scripts/libjpeg-turbo.sh)
export TURBOJPEG_SOURCE=explicit TURBOJPEG_LIB_DIR

step fmt bash -c "cargo fmt --all --check && cargo fmt --all --check --manifest-path fuzz/Cargo.toml"
step clippy cargo clippy --workspace --all-targets -- -D warnings
# No --workspace: the binding crate (loaderx-python) has no Rust tests;
# clippy covers it, and the Python tests test it.
step "cargo test (debug)" cargo test
step "cargo test (release)" cargo test --release
step fuzz bash scripts/fuzz.sh
step "foreign targets" bash scripts/check-targets.sh
# The wheel for this machine only: the aarch64 wheel's release build took
# 75-100 s of CI's 15 minutes, and the engine's aarch64 build is checked
# above. `bash scripts/build-wheels.sh` (and the hosted workflow) builds both.
step wheels env WHEEL_TARGETS="$(uname -m)" bash scripts/build-wheels.sh

inputs() {
    local rc=0
    wait "$INPUTS" || rc=$?
    INPUTS=""
    cat "$INPUTS_LOG"
    return $rc
}
step "test inputs (waiting for the download)" inputs

run_pytest() {
    local rc=0
    # The slowest tests are listed, to keep an eye on the suite's time. Two
    # pytest-xdist workers, each taking whole files (a file's fixtures, such
    # as the Ray cluster, are made once): 170 s -> about 100 s on 2 cores.
    .venv/bin/python -m pytest tests/ -ra -q --durations=15 -n 2 --dist loadfile "$@" || rc=$?
    if [ $rc -eq 5 ]; then
        echo "pytest collected no tests; that counts as a failure" >&2
    fi
    return $rc
}
step pytest run_pytest

CURRENT=""
echo
echo "==> all checks passed in $((SECONDS - START))s"
