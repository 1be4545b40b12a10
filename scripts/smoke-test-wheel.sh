#!/usr/bin/env bash
# Install loaderx into a fresh virtual environment that holds only numpy,
# then run the quick start (tests/packaging/quick_start.py) from an empty
# folder, so the installed package is the one imported, and the installed
# `loaderx` command.
#
#   scripts/smoke-test-wheel.sh dist                  # the wheel in dist/ that fits this machine
#   scripts/smoke-test-wheel.sh dist/loaderx-X.whl    # this wheel
#   scripts/smoke-test-wheel.sh dist/loaderx-X.tar.gz # build from the sdist (needs Rust)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
artifact=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
PY="${PYTHON:-$(command -v python3 || command -v python)}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
unset PYTHONPATH VIRTUAL_ENV

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m venv "$work/venv"
vpy="$work/venv/bin/python"
[ -x "$vpy" ] || vpy="$work/venv/Scripts/python.exe"   # Windows
"$vpy" -m pip install --quiet numpy
if [ -d "$artifact" ]; then
    "$vpy" -m pip install --quiet --no-deps --no-index --find-links "$artifact" loaderx
else
    "$vpy" -m pip install --quiet --no-deps "$artifact"
fi
mkdir "$work/run"
cd "$work/run"
"$vpy" "$ROOT/tests/packaging/quick_start.py"
# The console script the package installs.
cli="$work/venv/bin/loaderx"
[ -x "$cli" ] || cli="$work/venv/Scripts/loaderx.exe"   # Windows
"$cli" --version
