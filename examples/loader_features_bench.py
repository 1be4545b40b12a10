#!/usr/bin/env python3
"""Throughput of loaderx.DataLoader with each feature enabled, against the
plain loader in the same run.

Data: Fashion-MNIST (60000 uint8 28x28 images + uint8 labels) converted to
flate stores in a temporary directory when the IDX files are found (the
Debian package dataset-fashion-mnist, or $FASHION_MNIST_DIR), otherwise
synthetic data of the same shapes.

Every configuration is timed `--repeats` times, the configurations
interleaved within each repeat (so drift of the machine hits all alike);
the table shows the median. A run pulls `--batches` batches after a
warm-up of 10, doing nothing with them (pure loader throughput; the
transform configurations do convert to float32).

    python examples/loader_features_bench.py                 # the table
    python examples/loader_features_bench.py --batches 100   # quicker
"""

import argparse
import gzip
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import loaderx
from loaderx import DataLoader, Dataset

SOURCE = Path(os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    _, code, ndim = struct.unpack(">HBB", raw[:4])
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def make_stores(workdir):
    images_gz = SOURCE / "train-images-idx3-ubyte.gz"
    if images_gz.is_file():
        images = read_idx(images_gz)
        labels = read_idx(SOURCE / "train-labels-idx1-ubyte.gz")
        origin = f"Fashion-MNIST train set from {SOURCE}"
    else:
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, size=(60000, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=60000).astype(np.uint8)
        origin = "synthetic uint8 (60000, 28, 28) data (Fashion-MNIST not found)"
    stores = {
        "image": Dataset.write(workdir / "image.zr", images, durable=False),
        "label": Dataset.write(workdir / "label.zr", labels, durable=False),
        # A third stream of the same length: a per-sample uint8 mask.
        "mask": Dataset.write(workdir / "mask.zr", (labels % 2).astype(np.uint8),
                              durable=False),
    }
    return stores, origin


def to_float(pair):
    images, labels = pair
    return images.astype(np.float32) * np.float32(1 / 255), labels.astype(np.int32)


def configurations(stores, args):
    img, lab = stores["image"], stores["label"]
    common = dict(num_workers=args.workers, batch_size=args.batch_size)

    def plain():
        return DataLoader(img, lab, **common)

    def shuffle():
        return DataLoader(img, lab, mode=2, **common)

    def three():
        return DataLoader(dict(stores), **common)

    def shard():
        return DataLoader(img, lab, shard=(0, 2), **common)

    def transform_inline():
        return DataLoader(img, lab, transform=to_float, transform_workers=0, **common)

    def transform_pool():
        return DataLoader(img, lab, transform=to_float, transform_workers=2, **common)

    def resumed():
        with DataLoader(img, lab, **common) as first:
            next(first)
            state = first.state_dict()
        return DataLoader(img, lab, state={**state, "step": 1000}, **common)

    configs = [
        ("plain (IID, 2 streams)", plain, None),
        ("SHUFFLE", shuffle, None),
        ("3 streams", three, None),
        ("shard 1/2 (half batch)", shard, None),
        ("transform, in consumer thread", transform_inline, None),
        ("transform pool (2 threads)", transform_pool, None),
        ("resumed + state_dict() every step", resumed, "state"),
    ]
    try:
        import jax  # noqa: F401

        configs.append(("jax adapter, size=2 (CPU)", plain, "jax"))
    except ImportError:
        print("jax is not installed: the jax adapter row is skipped")
    return configs


def run(make, extra, batches):
    loader = make()
    it = loader
    if extra == "jax":
        import jax

        from loaderx.jax import device_put_iterator

        it = device_put_iterator(loader, size=2)
    for _ in range(10):
        next(it)
    started = time.perf_counter()
    for _ in range(batches):
        batch = next(it)
        if extra == "state":
            loader.state_dict()
        elif extra == "jax":
            jax.block_until_ready(batch)
    seconds = time.perf_counter() - started
    loader.close()
    return batches / seconds


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=4)
    args = p.parse_args(argv)
    print(f"loaderx {loaderx.__version__}, numpy {np.__version__}, python "
          f"{sys.version.split()[0]}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        stores, origin = make_stores(Path(tmp))
        print(f"data: {origin}; batch_size {args.batch_size}, num_workers {args.workers}, "
              f"{args.batches} batches per run, median of {args.repeats}")
        configs = configurations(stores, args)
        rates = {name: [] for name, _, _ in configs}
        for _ in range(args.repeats):
            for name, make, extra in configs:
                rates[name].append(run(make, extra, args.batches))
        t = time.perf_counter()
        with DataLoader(stores["image"], stores["label"], batch_size=args.batch_size,
                        state={**DataLoader(stores["image"], stores["label"],
                                            batch_size=args.batch_size).state_dict(),
                               "step": 10**6}) as resumed:
            next(resumed)
        first_batch_ms = (time.perf_counter() - t) * 1e3
        for ds in stores.values():
            ds.close()
    plain = statistics.median(rates[configs[0][0]])
    print()
    print("| configuration | batches/s | samples/s | vs plain |")
    print("|---|---:|---:|---:|")
    for name, _, _ in configs:
        med = statistics.median(rates[name])
        per_batch = args.batch_size // 2 if name.startswith("shard") else args.batch_size
        print(f"| {name} | {med:,.0f} | {med * per_batch:,.0f} | {med / plain:.2f}x |")
    print()
    print(f"resume: DataLoader(..., state=step 10**6) to its first batch: {first_batch_ms:.1f} ms")


if __name__ == "__main__":
    main()
