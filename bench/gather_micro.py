"""Where a batch's time goes, for one workload and codec: the measurements
behind bench/README.md's "What the profile showed".

    .venv/bin/python bench/gather_micro.py D lz4            # after bench/run.sh made the data
    RAYON_NUM_THREADS=1 .venv/bin/python bench/gather_micro.py D lz4   # one gather thread

Times 256-record batches of random indices three ways, median of 5 passes:
`Dataset.__getitems__` (recycled batch memory), `np.empty` + `Zrecord.gather`
(fresh memory each batch, as before batch memory was recycled) and
`Zrecord.gather` into one preallocated array (memory already mapped).
"""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx import Dataset

workload, codec = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "raw"
src = np.load(Path(__file__).parent / "out" / "data" / "full" / f"{workload}.npy", mmap_mode="r")
with tempfile.TemporaryDirectory() as tmp:
    ds = Dataset.write(Path(tmp) / "s.zr", src, codec=codec)
    zr, size = ds._zr(), ds._itemsize
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, len(ds), 256) for _ in range(max(20, (1 << 30) // (256 * size)))]
    wide = [b.astype(np.uint64) for b in batches]
    out = np.empty(256 * size, dtype=np.uint8)

    def fresh(i):
        zr.gather(i, np.empty(256 * size, dtype=np.uint8), size)

    ways = {
        "recycled (__getitems__)": lambda: [ds.__getitems__(b).shape for b in batches],
        "fresh (np.empty + gather)": lambda: [fresh(i) for i in wide],
        "preallocated (gather)": lambda: [zr.gather(i, out, size) for i in wide],
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
    ds.close()
