#!/usr/bin/env bash
# The main job: set everything up, make sure Fashion-MNIST is present, then
# convert it into loaderx stores and train a softmax classifier through the
# DataLoader (examples/train_fashion_mnist.py; extra arguments go to it).
#
#   scripts/demo.sh
#   scripts/demo.sh --steps 50        # arguments are passed to the example
#
# Fashion-MNIST comes from the Debian package dataset-fashion-mnist; as root
# the script installs it with apt-get, otherwise it says what to run.
# FASHION_MNIST_DIR points the example at another copy of the IDX files.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

DATA_DIR="${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
FILES=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz
       t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)

have_data() {
    local f
    for f in "${FILES[@]}"; do
        [ -s "$DATA_DIR/$f" ] || return 1
    done
}

if ! have_data; then
    if [ -n "${FASHION_MNIST_DIR:-}" ]; then
        echo "demo: FASHION_MNIST_DIR=$DATA_DIR lacks ${FILES[*]}" >&2
        exit 1
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "demo: Fashion-MNIST is missing from $DATA_DIR." >&2
        echo "demo: install it with:  sudo apt-get install dataset-fashion-mnist" >&2
        echo "demo: (or set FASHION_MNIST_DIR to a directory holding ${FILES[*]})" >&2
        exit 1
    fi
    echo "demo: installing the Debian package dataset-fashion-mnist"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q dataset-fashion-mnist </dev/null; then
        apt-get update -q </dev/null
        apt-get install -y -q dataset-fashion-mnist </dev/null
    fi
    if ! have_data; then
        echo "demo: dataset-fashion-mnist is installed but $DATA_DIR lacks ${FILES[*]}" >&2
        exit 1
    fi
fi

exec .venv/bin/python examples/train_fashion_mnist.py --source "$DATA_DIR" "$@"
