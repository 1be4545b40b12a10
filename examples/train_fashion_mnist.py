#!/usr/bin/env python3
"""Train a softmax classifier on Fashion-MNIST, fed by loaderx.

1. Read the IDX files of the Debian package ``dataset-fashion-mnist`` with
   NumPy (gzip + a parsed IDX header + ``np.frombuffer``).
2. Convert them into loaderx stores with ``Dataset.write``, once per codec
   (``raw`` and ``flate``), timing the conversion and measuring the bytes on
   disk.
3. Train multinomial logistic regression (softmax, NumPy only) by minibatch
   SGD on batches drawn by ``loaderx.DataLoader`` from the flate stores; the
   loader's ``transform`` turns the uint8 images into float32 in [0, 1].
4. Measure the loader without training (pure iteration), and
   ``Dataset.__getitems__`` against NumPy fancy indexing of the same in-RAM
   array, on the same random batches.
5. Evaluate on the t10k set read back through ``Dataset``.

    python examples/train_fashion_mnist.py                 # the full demo
    python examples/train_fashion_mnist.py --steps 20 --iter-batches 20 \\
        --repeats 1 --train-limit 2000                     # a smoke test

``main(argv)`` returns a dict of the measured numbers, so a test can import
this file and call it.
"""

import argparse
import gzip
import os
import shutil
import struct
import sys
import time
from pathlib import Path

import numpy as np

import loaderx

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = Path(os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
DEFAULT_WORKDIR = REPO / "data" / "fashion-mnist"
FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
CODECS = ("raw", "flate")

# IDX element type codes -> big-endian NumPy dtypes.
IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path):
    """Read a (gzipped) IDX file into a native-endian NumPy array.

    Header: two zero bytes, an element type code, the number of dimensions,
    then one big-endian u32 per dimension; the data follows, row-major.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4:
        raise ValueError(f"{path}: too short for an IDX header")
    zero, code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or code not in IDX_TYPES or ndim == 0:
        raise ValueError(f"{path}: not an IDX file (magic {raw[:4].hex()})")
    header = 4 + 4 * ndim
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(IDX_TYPES[code])
    count = int(np.prod(dims, dtype=np.int64))
    if len(raw) - header != count * dtype.itemsize:
        raise ValueError(f"{path}: {len(raw) - header} data bytes, header says {dims} of {dtype}")
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return data.astype(dtype.newbyteorder("="), copy=False)


def load_source(source, train_limit=None):
    missing = [n for n in FILES.values() if not (source / n).is_file()]
    if missing:
        raise SystemExit(f"Fashion-MNIST not found in {source} (missing {', '.join(missing)}); "
                         "install the Debian package dataset-fashion-mnist or set FASHION_MNIST_DIR")
    arrays = {k: read_idx(source / n) for k, n in FILES.items()}
    if train_limit:
        arrays["train_images"] = arrays["train_images"][:train_limit]
        arrays["train_labels"] = arrays["train_labels"][:train_limit]
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        assert images.dtype == np.uint8 and images.shape[1:] == (28, 28), images.shape
        assert labels.dtype == np.uint8 and labels.shape == (len(images),), labels.shape
    return arrays


def allocated_bytes(path):
    """Bytes a directory really occupies on disk (chunk files are sparse)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.stat(os.path.join(root, f)).st_blocks * 512
    return total


def mb(n):
    return n / 1e6


def convert(arrays, workdir):
    """Write every array into a store per codec; return the timings/sizes."""
    report = {}
    for codec in CODECS:
        t0 = time.perf_counter()
        for name, arr in arrays.items():
            path = workdir / codec / f"{name}.zr"
            if path.exists():
                shutil.rmtree(path)  # Dataset.write appends to an existing store
            path.parent.mkdir(parents=True, exist_ok=True)
            loaderx.Dataset.write(str(path), arr, codec=codec).close()
        seconds = time.perf_counter() - t0
        stores = {name: loaderx.Dataset(str(workdir / codec / f"{name}.zr")) for name in arrays}
        chunk = sum(int(ds.stats()["chunk_bytes"]) for ds in stores.values())
        for ds in stores.values():
            ds.close()
        report[codec] = {
            "seconds": seconds,
            "chunk_bytes": chunk,
            "allocated": allocated_bytes(workdir / codec),
        }
    return report


def to_float(batch):
    """DataLoader transform: (uint8 images, labels) -> (float32 [0,1] rows, int64)."""
    images, labels = batch
    x = images.reshape(len(images), -1).astype(np.float32)
    x *= np.float32(1.0 / 255.0)
    return x, labels.astype(np.int64)


def softmax_sgd_step(W, b, x, y, lr):
    """One SGD step on the mean cross-entropy; returns the batch loss."""
    logits = x @ W + b
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = float(-np.log(p[rows, y] + 1e-12).mean())
    p[rows, y] -= 1.0
    p /= len(y)
    W -= lr * (x.T @ p)
    b -= lr * p.sum(axis=0)
    return loss


def train(images_ds, labels_ds, args, sample_bytes):
    W = np.zeros((28 * 28, 10), dtype=np.float32)
    b = np.zeros(10, dtype=np.float32)
    loader = loaderx.DataLoader(images_ds, labels_ds, num_workers=args.workers,
                                batch_size=args.batch_size, seed=args.seed, transform=to_float)
    with loader:
        it = iter(loader)
        first = next(it)  # the pipeline's start-up is not training throughput
        t0 = time.perf_counter()
        wait = 0.0
        losses = []
        batch = first
        for step in range(args.steps):
            if step:
                tw = time.perf_counter()
                batch = next(it)
                wait += time.perf_counter() - tw
            x, y = batch["data"], batch["label"]
            assert x.shape == (args.batch_size, 784) and x.dtype == np.float32, x.shape
            # Cosine-decayed learning rate.
            lr = args.lr * 0.5 * (1.0 + np.cos(np.pi * step / args.steps))
            losses.append(softmax_sgd_step(W, b, x, y, np.float32(lr)))
            if (step + 1) % max(1, args.steps // 6) == 0 or step + 1 == args.steps:
                print(f"  step {step + 1:5d}  loss {np.mean(losses[-50:]):.4f}  lr {lr:.3f}")
        seconds = time.perf_counter() - t0
    batches_s = args.steps / seconds
    return W, b, {
        "seconds": seconds,
        "batches_s": batches_s,
        "mb_s": mb(batches_s * args.batch_size * sample_bytes),
        "wait_fraction": wait / seconds,
    }


def iterate(images_ds, labels_ds, args, sample_bytes):
    """Pull batches without doing anything with them."""
    loader = loaderx.DataLoader(images_ds, labels_ds, num_workers=args.workers,
                                batch_size=args.batch_size, seed=args.seed + 1)
    with loader:
        it = iter(loader)
        next(it)
        t0 = time.perf_counter()
        for _ in range(args.iter_batches):
            batch = next(it)
        seconds = time.perf_counter() - t0
    assert batch["data"].shape == (args.batch_size, 28, 28) and batch["data"].dtype == np.uint8
    batches_s = args.iter_batches / seconds
    return {"batches_s": batches_s, "mb_s": mb(batches_s * args.batch_size * sample_bytes)}


def bench_getitems(stores, images, args):
    """Median time per batch of ds.__getitems__ vs images[idx], same batches."""
    rng = np.random.default_rng(args.seed)
    batches = [rng.choice(len(images), args.batch_size, replace=False) for _ in range(20)]
    candidates = {f"Dataset[{codec}]": ds.__getitems__ for codec, ds in stores.items()}
    candidates["numpy fancy index"] = images.__getitem__
    for name, get in candidates.items():  # warm caches, check equality
        for idx in batches[:2]:
            assert np.array_equal(get(idx), images[idx]), name
    result = {}
    for name, get in candidates.items():
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for idx in batches:
                get(idx)
            times.append((time.perf_counter() - t0) / len(batches))
        per_batch = float(np.median(times))
        result[name] = {
            "us_per_batch": per_batch * 1e6,
            "mb_s": mb(args.batch_size * images[0].nbytes / per_batch),
        }
    return result


def evaluate(W, b, images_ds, labels_ds, images_np, labels_np):
    images = images_ds[:]
    labels = labels_ds[:]
    assert np.array_equal(images, images_np) and np.array_equal(labels, labels_np), \
        "test set read back through Dataset differs from the source"
    x = images.reshape(len(images), -1).astype(np.float32) / 255.0
    pred = np.argmax(x @ W + b, axis=1)
    acc = float((pred == labels).mean())
    per_class = [float((pred[labels == c] == c).mean()) for c in range(10)]
    return acc, per_class


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", type=Path, default=DEFAULT_SOURCE,
                   help="directory with the Fashion-MNIST IDX .gz files (default: %(default)s)")
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                   help="where the stores are written (default: %(default)s)")
    p.add_argument("--steps", type=int, default=600, help="SGD steps (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.5, help="peak learning rate (cosine decay)")
    p.add_argument("--workers", type=int, default=4, help="DataLoader num_workers")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--iter-batches", type=int, default=500,
                   help="batches in the pure-iteration pass (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=7,
                   help="timed repeats of the __getitems__ benchmark (default: %(default)s)")
    p.add_argument("--train-limit", type=int, default=None,
                   help="use only the first N training samples (for a quick smoke test)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    t_start = time.perf_counter()
    print(f"loaderx {getattr(loaderx, '__version__', '?')} from {Path(loaderx.__file__).parent}")
    print(f"numpy {np.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs")

    t0 = time.perf_counter()
    arrays = load_source(args.source, args.train_limit)
    src_bytes = sum(a.nbytes for a in arrays.values())
    print(f"\nread IDX files from {args.source}: train {arrays['train_images'].shape}, "
          f"test {arrays['test_images'].shape}, {mb(src_bytes):.1f} MB, "
          f"{time.perf_counter() - t0:.2f}s")

    print(f"\n== conversion (Dataset.write) into {args.workdir}")
    conv = convert(arrays, args.workdir)
    for codec, r in conv.items():
        print(f"  {codec:5s}  {r['seconds']:6.2f}s  {mb(src_bytes) / r['seconds']:7.1f} MB/s   "
              f"data {mb(r['chunk_bytes']):6.1f} MB ({r['chunk_bytes'] / src_bytes:5.1%} of source)   "
              f"allocated on disk {mb(r['allocated']):6.1f} MB")

    sample_bytes = 28 * 28 + 1  # one uint8 image and its uint8 label
    stores = {c: loaderx.Dataset(str(args.workdir / c / "train_images.zr")) for c in CODECS}
    train_labels = loaderx.Dataset(str(args.workdir / "flate" / "train_labels.zr"))
    images_ds = stores["flate"]
    print(f"  train store: len {len(images_ds)}, dtype {images_ds.dtype}, shape {images_ds.shape}, "
          f"stats {images_ds.stats()}")

    print(f"\n== training: softmax regression, {args.steps} steps of {args.batch_size} "
          f"(flate store, {args.workers} workers)")
    W, b, tr = train(images_ds, train_labels, args, sample_bytes)
    print(f"  {tr['seconds']:.2f}s  {tr['batches_s']:.0f} batches/s  {tr['mb_s']:.1f} MB/s "
          f"(uint8 sample bytes)  {tr['wait_fraction']:.0%} of the time waiting for the loader")

    print(f"\n== pure iteration: {args.iter_batches} batches, no training")
    it = iterate(images_ds, train_labels, args, sample_bytes)
    print(f"  {it['batches_s']:.0f} batches/s  {it['mb_s']:.1f} MB/s")

    print(f"\n== Dataset.__getitems__ vs numpy fancy indexing, {args.batch_size} random "
          f"indices per batch, 20 batches, median of {args.repeats}")
    gi = bench_getitems(stores, arrays["train_images"], args)
    for name, r in gi.items():
        print(f"  {name:18s} {r['us_per_batch']:8.1f} us/batch  {r['mb_s']:8.1f} MB/s")

    test_images = loaderx.Dataset(str(args.workdir / "flate" / "test_images.zr"))
    test_labels = loaderx.Dataset(str(args.workdir / "flate" / "test_labels.zr"))
    acc, per_class = evaluate(W, b, test_images, test_labels,
                              arrays["test_images"], arrays["test_labels"])
    print(f"\n== evaluation on t10k ({len(test_images)} samples, read back through Dataset)")
    print("  " + "  ".join(f"{c}: {a:.0%}" for c, a in zip(CLASSES, per_class)))
    print(f"  test accuracy: {acc:.2%}")
    for ds in (*stores.values(), train_labels, test_images, test_labels):
        ds.close()
    total = time.perf_counter() - t_start
    print(f"\ndone in {total:.1f}s")
    return {"conversion": conv, "train": tr, "iterate": it, "getitems": gi,
            "accuracy": acc, "seconds": total}


if __name__ == "__main__":
    main()
