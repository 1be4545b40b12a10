"""The DataLoader against the bare `__getitems__` loop, timed in turn in one
process, for several (workers x prefetch) configurations: the measurements
behind bench/README.md's "Workers and cores".

    .venv/bin/python bench/loader_micro.py A raw 4x4 2x4 1x4   # after bench/run.sh made the data

Writes the workload and an int64 label store to a temporary directory, then
5 rounds of: the bare loop (data + labels), the same keeping the previous
batch alive, and for each configuration a fresh DataLoader (warmed 0.3 s,
closed after), 1.5 s each. Prints medians in MB/s of samples and each one's
ratio to the bare loop.
"""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx import DataLoader, Dataset

SECONDS = 1.5
WARMUP = 0.3
BATCH = 256

workload, codec = sys.argv[1], sys.argv[2]
configs = [tuple(int(x) for x in c.split("x")) for c in sys.argv[3:]] or [(4, 4)]
src = np.load(Path(__file__).parent / "out" / "data" / "full" / f"{workload}.npy", mmap_mode="r")
with tempfile.TemporaryDirectory(dir=Path(__file__).parent / "out") as tmp:
    ds = Dataset.write(Path(tmp) / "data.zr", src, codec=codec)
    ls = Dataset.write(Path(tmp) / "labels.zr", np.arange(len(src), dtype=np.int64), codec=codec)
    size = ds._itemsize
    pool = np.random.default_rng(0).integers(0, len(ds), (4096, BATCH))

    def bare(keep: bool) -> float:
        kept, n = None, 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < SECONDS:
            idxs = pool[n % len(pool)]
            batch = (ds.__getitems__(idxs), ls.__getitems__(idxs))
            kept = batch if keep else None
            del batch
            n += 1
        del kept
        return n * BATCH * size / 1e6 / (time.perf_counter() - t0)

    def loader(workers: int, prefetch: int) -> float:
        with DataLoader(ds, ls, num_workers=workers, batch_size=BATCH,
                        prefetch_size=prefetch) as dl:
            it = iter(dl)
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < WARMUP:
                next(it)
            n = 0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < SECONDS:
                next(it)["data"].shape  # the trivial consumer
                n += 1
            return n * BATCH * size / 1e6 / (time.perf_counter() - t0)

    ways = {"bare __getitems__": lambda: bare(False),
            "bare, previous batch kept": lambda: bare(True),
            **{f"DataLoader {w} workers, prefetch {p}": (lambda w=w, p=p: loader(w, p))
               for w, p in configs}}
    runs = {name: [] for name in ways}
    bare(False)  # warm: page cache and mappings
    for _ in range(5):
        for name, way in ways.items():
            runs[name].append(way())
    base = np.median(runs["bare __getitems__"])
    for name, xs in runs.items():
        print(f"{workload} {codec} {name}: {np.median(xs):,.0f} MB/s ({np.median(xs) / base:.2f}×)")
    ds.close()
    ls.close()
