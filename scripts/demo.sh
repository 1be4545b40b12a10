#!/usr/bin/env bash
# The main job: set everything up, make sure Fashion-MNIST is present, then
# convert it into loaderx stores and train a softmax classifier through the
# DataLoader (examples/train_fashion_mnist.py; extra arguments go to it).
#
#   scripts/demo.sh
#   scripts/demo.sh --steps 50        # arguments are passed to the example
#
# Fashion-MNIST comes from the Debian package dataset-fashion-mnist
# (scripts/fashion-mnist.sh: as root it installs it with apt-get, otherwise
# it says what to run). FASHION_MNIST_DIR points at another copy.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

bash scripts/fashion-mnist.sh
DATA_DIR="${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"

exec .venv/bin/python examples/train_fashion_mnist.py --source "$DATA_DIR" "$@"
