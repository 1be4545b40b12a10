#!/usr/bin/env bash
# Run every check the project has, in the order CI runs them:
#   setup -> cargo fmt --check -> clippy -D warnings -> cargo test (debug)
#   -> cargo test (release) -> fuzz targets (unoptimised build; corpus
#   replay, 10 s each)
#   -> foreign targets (cargo check for macOS, Windows,
#   aarch64) -> wheels and sdist into dist/ -> extras the tests need
#   (ml_dtypes, Pillow, tqdm) and real data (elpv-dataset, Fashion-MNIST,
#   the photographs of plasma-workspace-wallpapers)
#   -> reference venv, jax (best
#   effort) -> pytest tests/ (tests/packaging installs the wheels and sdist)
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
step fmt bash -c "cargo fmt --all --check && cargo fmt --all --check --manifest-path fuzz/Cargo.toml"
step clippy cargo clippy --workspace --all-targets -- -D warnings
step "cargo test (debug)" cargo test --workspace
step "cargo test (release)" cargo test --workspace --release
step fuzz env FUZZ_SECONDS=10 FUZZ_PROFILE=dev bash scripts/fuzz.sh
step "foreign targets" bash scripts/check-targets.sh
step wheels bash scripts/build-wheels.sh

# The extras whose tests must run (a test that skips for a missing extra
# does not count), installed from PyPI unless present; the writers the
# converter tests build their inputs with (datasets, webdataset); and the
# real data they read: elpv-dataset's images (PyPI) and Fashion-MNIST (the
# Debian package).
step "extras: ml, convert, ray" bash -c '.venv/bin/python -c \
    "import ml_dtypes, PIL, tqdm, pyarrow, datasets, webdataset, elpv_dataset, ray.data" \
    2>/dev/null || .venv/bin/python -m pip install --quiet --disable-pip-version-check \
       "ml_dtypes>=0.3" "Pillow>=9" "tqdm>=4.60" "pyarrow>=12" "ray[data]>=2.9" datasets \
       webdataset elpv-dataset'
step "real data: Fashion-MNIST" bash scripts/fashion-mnist.sh
step "real data: photographs" bash scripts/wallpapers.sh

if [ "${SKIP_REF050:-0}" != 1 ]; then
    # Best effort: makes tests/compat run against loaderx 0.5.0; never fails.
    CURRENT="reference venv"
    echo
    echo "==> [$((SECONDS - START))s] reference venv: bash scripts/ref050-venv.sh (best effort)"
    bash scripts/ref050-venv.sh || echo "reference venv: unavailable, compat tests will skip"
fi

if [ "${SKIP_JAX:-0}" != 1 ]; then
    # Best effort: JAX (CPU) for the device-hand-off tests, which skip
    # without it. A test dependency only; the package needs numpy alone.
    CURRENT="test extras"
    echo
    echo "==> [$((SECONDS - START))s] test extras: jax (best effort)"
    .venv/bin/python -c 'import jax' 2>/dev/null \
        || .venv/bin/python -m pip install --quiet --disable-pip-version-check jax \
        || echo "test extras: jax unavailable, its tests will skip"
fi

run_pytest() {
    local rc=0
    # The slowest tests are listed, to keep an eye on the suite's time.
    .venv/bin/python -m pytest tests/ -ra -q --durations=15 "$@" || rc=$?
    if [ $rc -eq 5 ]; then
        echo "pytest collected no tests; that counts as a failure" >&2
    fi
    return $rc
}
step pytest run_pytest

CURRENT=""
echo
echo "==> all checks passed in $((SECONDS - START))s"
