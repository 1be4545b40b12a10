#!/usr/bin/env bash
# What the Python tests need beyond the package, fetched into .venv and the
# system: the extras whose tests must run (a test that skips for a missing
# extra does not count; torch among them), installed from PyPI unless
# present; pytest-xdist, with which scripts/test.sh runs the suite on two
# workers; the writers the converter tests build their inputs with
# (datasets, webdataset); the real data they read: elpv-dataset's images
# (PyPI), Fashion-MNIST and the photographs of plasma-workspace-wallpapers
# (Debian packages); then, best effort, loaderx 0.5.0 (.ref050-venv) and
# JAX, whose tests skip without them. Needs scripts/setup.sh's .venv.
# scripts/test.sh runs it beside the Rust builds, since it waits on the
# network rather than on the cores.
#
#   scripts/test-inputs.sh
#   SKIP_REF050=1 scripts/test-inputs.sh   # do not fetch loaderx 0.5.0
#   SKIP_JAX=1 scripts/test-inputs.sh      # do not install jax
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
START=$SECONDS
step() {
    echo "==> [+$((SECONDS - START))s] $1"
}

step "extras: ml, convert, ray; pytest-xdist"
.venv/bin/python -c \
    "import ml_dtypes, PIL, tqdm, pyarrow, datasets, webdataset, elpv_dataset, ray.data, xdist" \
    2>/dev/null || .venv/bin/python -m pip install --quiet --disable-pip-version-check \
    "ml_dtypes>=0.3" "Pillow>=9" "tqdm>=4.60" "pyarrow>=12" "ray[data]>=2.9" datasets \
    webdataset elpv-dataset "pytest-xdist>=3"
# PyPI's Linux torch is the CUDA build, some 5 GB with its libraries; the
# CPU-only wheels live on an index this machine does not reach. Not cached
# (a second copy of the wheels would double the disk it takes) nor
# byte-compiled (half of torch's own install time, taken from the builds
# running beside it; the test compiles what it imports).
step "extras: torch"
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install --quiet \
    --disable-pip-version-check --no-cache-dir --no-compile "torch>=2"
step "real data: Fashion-MNIST"
bash scripts/fashion-mnist.sh
step "real data: photographs"
bash scripts/wallpapers.sh

if [ "${SKIP_REF050:-0}" != 1 ]; then
    step "reference venv: loaderx 0.5.0 (best effort)"
    bash scripts/ref050-venv.sh || echo "reference venv: unavailable, compat tests will skip"
fi
if [ "${SKIP_JAX:-0}" != 1 ]; then
    # A test dependency only; the package needs numpy alone.
    step "test extras: jax (best effort)"
    .venv/bin/python -c 'import jax' 2>/dev/null \
        || .venv/bin/python -m pip install --quiet --disable-pip-version-check jax \
        || echo "test extras: jax unavailable, its tests will skip"
fi
step "done"
