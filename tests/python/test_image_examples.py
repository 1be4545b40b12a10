"""examples/train_images.py on both of its data sets, in small settings:
training through image streams must end well above chance.

Each run is a process of its own (conftest's ``run_hosts``), as the example
runs from the command line: it keeps NumPy's BLAS to one thread, which only
works before NumPy is imported, and pytest has imported it. The wallpaper
crops are made once into data/wallpaper-crops, where the example keeps them.
"""

import sys
from pathlib import Path

import pytest

from conftest import run_hosts

pytest.importorskip("PIL")

REPO = Path(__file__).resolve().parents[2]
sys.path += [str(REPO / "examples"), str(REPO / "scripts")]
import train_fashion_mnist  # noqa: E402
import wallpaper_crops  # noqa: E402

RUN = f"""
import contextlib, json, sys
sys.path.insert(0, {str(REPO / "examples")!r})
import train_images
with contextlib.redirect_stdout(sys.stderr):  # stdout carries the result alone
    result = train_images.main(sys.argv[1:])
print(json.dumps(result))
"""


def run_example(*argv):
    return run_hosts(RUN, [argv], timeout=300)[0]


def test_softmax_on_fashion_mnist_pngs(tmp_path):
    source = train_fashion_mnist.DEFAULT_SOURCE
    if not all((source / name).is_file() for name in train_fashion_mnist.FILES.values()):
        pytest.skip(f"no Fashion-MNIST in {source}: bash scripts/fashion-mnist.sh")
    result = run_example("fashion", "--workdir", tmp_path, "--steps", 150,
                         "--train-limit", 5000, "--test-limit", 1000)
    assert (result["train_rows"], result["test_rows"]) == (5000, 1000)
    assert result["train"]["images_s"] > 0
    assert result["chance"] < 0.2
    assert result["accuracy"] > 0.7, result


def test_mlp_on_wallpaper_crops(tmp_path):
    if not any(wallpaper_crops.WALLPAPERS.rglob("*.jpg")):
        pytest.skip(f"no wallpapers in {wallpaper_crops.WALLPAPERS}: bash scripts/wallpapers.sh")
    result = run_example("wallpapers", "--workdir", tmp_path, "--steps", 100,
                         "--batch-size", 32, "--size", 32, "--hidden", 64)
    assert result["train_rows"] + result["test_rows"] == 1248  # the crops, split 4:1
    assert 0.2 < result["test_rows"] / 1248 < 0.25
    assert result["train"]["images_s"] > 0
    assert result["chance"] < 0.1
    assert result["accuracy"] > 0.4, result
