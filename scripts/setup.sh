#!/usr/bin/env bash
# Set up the development environment: a virtual environment in .venv with
# numpy, pytest and maturin, and our loaderx package built (release mode) and
# installed into it. Idempotent; when nothing changed it only checks and exits.
#
#   scripts/setup.sh            # create / refresh .venv
#   LOADERX_REBUILD=1 scripts/setup.sh   # force a rebuild of the extension
#
# Needs only what a fresh machine has: the Rust toolchain and python3 (>= 3.9)
# with the venv module; everything else comes from PyPI, but for cmake and
# nasm, which build libjpeg-turbo (scripts/build-tools.sh, which
# scripts/libjpeg-turbo.sh calls, installs them as root from Debian's
# packages).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"

log() { echo "setup: $*"; }

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

# 1. The virtual environment.
if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

# 2. Tools and runtime dependencies, only when missing.
missing=()
"$VPY" -c 'import numpy' 2>/dev/null || missing+=(numpy)
"$VPY" -c 'import pytest' 2>/dev/null || missing+=(pytest)
[ -x "$VENV/bin/maturin" ] || missing+=("maturin>=1.5,<2")
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    "$VPY" -m pip install --quiet "${missing[@]}"
fi

# 3. Build and install our package (maturin develop: the native module goes
#    next to the Python sources in python/loaderx/, which the venv imports in
#    place), linking libjpeg-turbo built once by scripts/libjpeg-turbo.sh.
#    Skipped when no input of the build changed since the last one.
if [ ! -f pyproject.toml ]; then
    echo "setup: pyproject.toml not found at $ROOT; cannot build loaderx" >&2
    exit 1
fi

build_inputs_hash() {
    {
        "$VPY" -c 'import sys; print(sys.version)'
        rustc -V
        find pyproject.toml Cargo.toml Cargo.lock crates python \
            -type f \( -name '*.rs' -o -name '*.toml' -o -name '*.lock' -o -name '*.pyi' \
                       -o -name 'build.rs' -o -name '*.typed' \) \
            -not -path '*/target/*' -print0 2>/dev/null \
            | LC_ALL=C sort -z | xargs -0 sha256sum
    } | sha256sum | cut -d' ' -f1
}

STAMP="$VENV/.loaderx-build"
want=$(build_inputs_hash)
have=$(cat "$STAMP" 2>/dev/null || true)
if [ "${LOADERX_REBUILD:-0}" != 1 ] && [ "$want" = "$have" ] \
    && "$VPY" -c 'import loaderx' 2>/dev/null; then
    log "loaderx is up to date in $VENV"
    exit 0
fi

TURBOJPEG_LIB_DIR=$(bash scripts/libjpeg-turbo.sh)
export TURBOJPEG_SOURCE=explicit TURBOJPEG_LIB_DIR
log "building loaderx (maturin develop --release)"
rm -f "$STAMP"
(
    export VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH"
    unset CONDA_PREFIX
    "$VENV/bin/maturin" develop --release --quiet
)
"$VPY" -c 'import loaderx, sys; print("setup: loaderx", getattr(loaderx, "__version__", "?"), "from", loaderx.__file__)'
echo "$want" > "$STAMP"
