#!/usr/bin/env bash
# Create .ref050-venv with the reference implementation (loaderx==0.5.0 from
# PyPI) and numpy, for the two-way compatibility tests in tests/compat/.
#
# Best effort: if PyPI cannot be reached or the wheel does not install on this
# platform, print why and exit 0 -- the compat tests then skip themselves.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REF=.ref050-venv
PY="${PYTHON:-python3}"

ref_ok() {
    [ -x "$REF/bin/python" ] && "$REF/bin/python" - <<'PY' >/dev/null 2>&1
import importlib.metadata as md, numpy, loaderx
assert md.version("loaderx") == "0.5.0"
PY
}

if ref_ok; then
    echo "ref050-venv: $REF already has loaderx 0.5.0"
    exit 0
fi

skip() {
    echo "ref050-venv: $*; the compat tests with loaderx 0.5.0 will be skipped" >&2
    exit 0
}

if [ ! -x "$REF/bin/python" ]; then
    "$PY" -m venv "$REF" || skip "cannot create $REF"
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$REF/bin/python" -m pip install --quiet --no-input --timeout 30 --retries 1 \
    "loaderx==0.5.0" numpy || skip "cannot install loaderx==0.5.0 from PyPI"

ref_ok || skip "loaderx 0.5.0 installed but does not import"
echo "ref050-venv: $REF ready ($("$REF/bin/python" -c 'import loaderx, os; print(os.path.dirname(loaderx.__file__))'))"
