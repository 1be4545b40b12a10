"""Where a batch's time goes, for one workload and codec: the measurements
behind bench/README.md's "What the profile showed".

    .venv/bin/python bench/gather_micro.py D lz4            # after bench/run.sh made the data
    RAYON_NUM_THREADS=1 .venv/bin/python bench/gather_micro.py D lz4   # one gather thread

Times 256-record batches of random indices, median of 5 passes:
`Dataset.__getitems__` (recycled batch memory), the same keeping the previous
batch alive (as a training loop does), `np.empty` + `Zrecord.gather` (fresh
memory each batch, as before batch memory was recycled), `Zrecord.gather` into
one preallocated array (memory already mapped), into two taken in turn, and
as many batches from a `DataLoader` (4 workers, 4 steps of prefetch).
"""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx import DataLoader, Dataset

workload, codec = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "raw"
src = np.load(Path(__file__).parent / "out" / "data" / "full" / f"{workload}.npy", mmap_mode="r")
with tempfile.TemporaryDirectory() as tmp:
    ds = Dataset.write(Path(tmp) / "s.zr", src, codec=codec)
    zr, size = ds._zr(), ds._itemsize
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, len(ds), 256) for _ in range(max(20, (1 << 30) // (256 * size)))]
    wide = [b.astype(np.uint64) for b in batches]
    outs = [np.empty(256 * size, dtype=np.uint8) for _ in range(2)]
    kept = [None]
    loader = DataLoader(ds, num_workers=4, batch_size=256, prefetch_size=4)
    steps = iter(loader)

    def fresh(i):
        zr.gather(i, np.empty(256 * size, dtype=np.uint8), size)

    def keep(b):
        kept[0] = ds.__getitems__(b)

    ways = {
        "recycled (__getitems__)": lambda: [ds.__getitems__(b).shape for b in batches],
        "previous batch kept (__getitems__)": lambda: [keep(b) for b in batches],
        "fresh (np.empty + gather)": lambda: [fresh(i) for i in wide],
        "preallocated (gather)": lambda: [zr.gather(i, outs[0], size) for i in wide],
        "two preallocated in turn (gather)": lambda: [
            zr.gather(i, outs[k % 2], size) for k, i in enumerate(wide)],
        "DataLoader": lambda: [next(steps)["data"].shape for _ in batches],
    }
    for way in ways.values():
        way()  # warm: page cache and mappings
    for name, way in ways.items():
        runs = []
        for _ in range(5):
            t = time.perf_counter()
            way()
            runs.append(len(batches) * 256 * size / 1e6 / (time.perf_counter() - t))
        print(f"{workload} {codec} {name}: {np.median(runs):,.0f} MB/s")
    loader.close()
    kept[0] = None
    ds.close()
