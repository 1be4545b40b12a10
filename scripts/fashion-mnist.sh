#!/usr/bin/env bash
# Makes sure Fashion-MNIST's IDX files are present (the Debian package
# dataset-fashion-mnist): as root it installs the package with apt-get,
# otherwise it says what to run. FASHION_MNIST_DIR points at another copy.
# Used by scripts/demo.sh and scripts/test.sh (the converter tests read it).
set -euo pipefail

DATA_DIR="${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
FILES=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz
       t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)

have_data() {
    local f
    for f in "${FILES[@]}"; do
        [ -s "$DATA_DIR/$f" ] || return 1
    done
}

have_data && exit 0
if [ -n "${FASHION_MNIST_DIR:-}" ]; then
    echo "fashion-mnist: FASHION_MNIST_DIR=$DATA_DIR lacks ${FILES[*]}" >&2
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "fashion-mnist: Fashion-MNIST is missing from $DATA_DIR." >&2
    echo "fashion-mnist: install it with:  sudo apt-get install dataset-fashion-mnist" >&2
    echo "fashion-mnist: (or set FASHION_MNIST_DIR to a directory holding ${FILES[*]})" >&2
    exit 1
fi
echo "fashion-mnist: installing the Debian package dataset-fashion-mnist"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q dataset-fashion-mnist </dev/null; then
    apt-get update -q </dev/null
    apt-get install -y -q dataset-fashion-mnist </dev/null
fi
if ! have_data; then
    echo "fashion-mnist: dataset-fashion-mnist is installed but $DATA_DIR lacks ${FILES[*]}" >&2
    exit 1
fi
