#!/usr/bin/env bash
# The conversion benchmark: loaderx convert against Hugging Face, WebDataset,
# ArrayRecord and loaderx 2.8 on Fashion-MNIST (bench/convert_bench.py).
# Writes docs/benchmarks-convert.{md,png,json}; extra flags go to the script.
#
#   bash bench/convert.sh            # about 4 minutes on 2 cores
#   bash bench/convert.sh --quick    # one run each, report in bench/out/
#
# bash bench/run.sh runs it after the read benchmarks (a full run, or --quick).
#
# Sets up (each step skipped when done): our .venv (scripts/setup.sh) with
# the convert extras and the peers, Fashion-MNIST (scripts/fashion-mnist.sh),
# and .loaderx28-venv, loaderx 2.8.19 from PyPI with datasets, run only in
# its own subprocess.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

bash scripts/setup.sh
bash scripts/fashion-mnist.sh
.venv/bin/python -c "import datasets, webdataset, pyarrow, matplotlib, array_record, elpv_dataset" \
    2>/dev/null \
    || .venv/bin/python -m pip install --quiet "pyarrow>=12" datasets webdataset matplotlib \
        array-record elpv-dataset
if [ ! -x .loaderx28-venv/bin/python ]; then
    python3 -m venv .loaderx28-venv
fi
# loaderx 2.8.19 asks for numpy>=2.5, which PyPI does not have yet; it runs
# on numpy 2.4, so it goes in without its declared dependencies, then those.
.loaderx28-venv/bin/python -c "import loaderx.converter, datasets" 2>/dev/null \
    || { .loaderx28-venv/bin/python -m pip install --quiet --no-deps "loaderx==2.8.19" \
         && .loaderx28-venv/bin/python -m pip install --quiet numpy "ml-dtypes>=0.5" datasets; } \
    || echo "convert: loaderx 2.8 unavailable; its rows are left out" >&2
mkdir -p bench/out
exec .venv/bin/python bench/convert_bench.py "$@"
