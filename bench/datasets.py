"""The benchmark workloads, generated deterministically into bench/out/data.

    A  20000 x 12 KiB uint8, correlated bytes (each byte = previous + 0..6)
    B  200000 x 2048 int32 tokens, a truncated power law (Zipf-like) over 50000 ids
    C  2000 x 224 x 224 x 3 uint8, smooth image-like (low-frequency sinusoids + noise)
    D  Fashion-MNIST train: 60000 x 28 x 28 uint8, and its uint8 labels

Each is saved as `<name>.npy` (plus `<name>-labels.npy`: the sample index as
int64 for A-C, the real labels for D) and cached: `meta.json` records the
generator version and parameters, and a workload is regenerated only when
those or the file size no longer match. `--quick` uses smaller N (same
generators, so the quick data is a different, smaller dataset, not a prefix).
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np

from common import data_dir

#: Bump when a generator changes, so cached data is regenerated.
GEN_VERSION = 1

FULL_N = {"A": 20000, "B": 200000, "C": 2000, "D": 60000}
QUICK_N = {"A": 2000, "B": 10000, "C": 200, "D": 6000}
SPEC = {
    "A": ((12288,), "uint8", "20000 x 12 KiB correlated bytes (byte = previous + U{0..6})"),
    "B": ((2048,), "int32", "200000 x 2048 int32 tokens, truncated power law (s=1.1) over 50000 ids"),
    "C": ((224, 224, 3), "uint8", "2000 x 224x224x3 uint8 smooth images (sinusoids + noise)"),
    "D": ((28, 28), "uint8", "Fashion-MNIST train, 60000 x 28x28 uint8"),
}
FASHION_DIR = Path(os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
VOCAB = 50000
ZIPF_S = 1.1


def gen_A(out, rng, start, stop):
    n = stop - start
    inc = rng.integers(0, 7, size=(n, out.shape[1]), dtype=np.uint8)
    inc[:, 0] = rng.integers(0, 256, size=n, dtype=np.uint8)
    out[start:stop] = np.cumsum(inc, axis=1, dtype=np.uint8)


def gen_B(out, rng, start, stop):
    # Inverse-CDF sample of a continuous power law x^-s on [1, VOCAB+1),
    # floored to ids 0..VOCAB-1: a Zipf-like token distribution.
    u = rng.random((stop - start, out.shape[1]))
    e = 1.0 - ZIPF_S
    x = (1.0 + u * ((VOCAB + 1.0) ** e - 1.0)) ** (1.0 / e)
    out[start:stop] = np.minimum(np.floor(x) - 1.0, VOCAB - 1).astype(np.int32)


def gen_C(out, rng, start, stop):
    n = stop - start
    h, w, c = out.shape[1:]
    k = 4  # sinusoids per channel
    y = (np.arange(h, dtype=np.float32) / h)[:, None]
    x = (np.arange(w, dtype=np.float32) / w)[None, :]
    fx = rng.uniform(0, 3, size=(n, c, k, 1, 1)).astype(np.float32)
    fy = rng.uniform(0, 3, size=(n, c, k, 1, 1)).astype(np.float32)
    ph = rng.uniform(0, 2 * np.pi, size=(n, c, k, 1, 1)).astype(np.float32)
    amp = rng.uniform(10, 40, size=(n, c, k, 1, 1)).astype(np.float32)
    base = rng.uniform(64, 192, size=(n, c, 1, 1)).astype(np.float32)
    img = base + (amp * np.sin(2 * np.pi * (fx * x + fy * y) + ph)).sum(axis=2)
    img += rng.integers(-3, 4, size=img.shape).astype(np.float32)
    out[start:stop] = np.clip(img, 0, 255).astype(np.uint8).transpose(0, 2, 3, 1)


# IDX element type codes -> big-endian NumPy dtypes (from examples/train_fashion_mnist.py).
IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path):
    """Reads a (gzipped) IDX file into a native-endian array (the reader of
    examples/train_fashion_mnist.py, copied so this venv needs no loaderx)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    zero, code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or code not in IDX_TYPES or ndim == 0:
        raise ValueError(f"{path}: not an IDX file (magic {raw[:4].hex()})")
    header = 4 + 4 * ndim
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(IDX_TYPES[code])
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return data.astype(dtype.newbyteorder("="), copy=False)


def fashion(n):
    images = FASHION_DIR / "train-images-idx3-ubyte.gz"
    labels = FASHION_DIR / "train-labels-idx1-ubyte.gz"
    if not (images.is_file() and labels.is_file()):
        raise FileNotFoundError(
            f"Fashion-MNIST not found in {FASHION_DIR}: install the Debian package "
            "dataset-fashion-mnist (scripts/demo.sh does, as root) or set FASHION_MNIST_DIR"
        )
    x, y = read_idx(images), read_idx(labels)
    assert x.shape[1:] == (28, 28) and x.dtype == np.uint8 and len(y) == len(x)
    return x[:n], y[:n]


GENERATORS = {"A": gen_A, "B": gen_B, "C": gen_C}


def _params(name, n):
    shape, dtype, desc = SPEC[name]
    return {"gen_version": GEN_VERSION, "n": n, "shape": list(shape), "dtype": dtype,
            "desc": desc if n == FULL_N[name] else f"{desc} (quick: N={n})",
            "seed": 1000 + ord(name)}


def ensure(quick: bool, names=("A", "B", "C", "D"), log=print) -> dict:
    """Generates the missing or stale workloads; returns meta.json's content."""
    d = data_dir(quick)
    d.mkdir(parents=True, exist_ok=True)
    meta_path = d / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    sizes = QUICK_N if quick else FULL_N
    for name in names:
        want = _params(name, sizes[name])
        path = d / f"{name}.npy"
        lpath = d / f"{name}-labels.npy"
        have = meta.get(name)
        ok = (have is not None and {k: have.get(k) for k in want} == want
              and path.is_file() and lpath.is_file()
              and path.stat().st_size == have.get("file_bytes"))
        if ok:
            continue
        t0 = time.perf_counter()
        n, shape, dtype = want["n"], tuple(want["shape"]), np.dtype(want["dtype"])
        tmp = path.with_suffix(".tmp.npy")
        if name == "D":
            x, y = fashion(n)
            want["n"] = n = len(x)
            np.save(tmp, x)
            labels = y.astype(np.uint8)
        else:
            rng = np.random.default_rng(want["seed"])
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=(n, *shape))
            per = int(max(1, (32 << 20) // (int(np.prod(shape)) * dtype.itemsize)))
            for start in range(0, n, per):
                GENERATORS[name](out, rng, start, min(n, start + per))
            out.flush()
            del out
            labels = np.arange(n, dtype=np.int64)
        os.replace(tmp, path)
        np.save(lpath, labels)
        want["file_bytes"] = path.stat().st_size
        want["sample_bytes"] = int(np.prod(shape)) * dtype.itemsize
        want["label_dtype"] = str(labels.dtype)
        meta[name] = want
        meta_path.write_text(json.dumps(meta, indent=2))
        log(f"generated {name} ({n} x {shape} {dtype}, {want['file_bytes'] / 2**20:.0f} MiB) "
            f"in {time.perf_counter() - t0:.1f} s")
    return meta


if __name__ == "__main__":
    ensure("--quick" in sys.argv)
