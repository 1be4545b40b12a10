"""How zstd's level trades size for speed, against DEFLATE-6: the
measurement behind the default zstd level (bench/README.md, "zstd levels").

    bench/.venv/bin/python bench/zstd_levels.py A D     # after bench/run.sh made the data

For each workload, writes a flate store (level 6, what 0.5.0 reads), zstd
stores at several levels and zstd-dict stores (with a dictionary trained on
the first records), then reports each store's stored/logical size,
its write speed, and its warm gather speed (random 256-record batches, 2 s,
median of 3), next to loaderx 0.5.0's gather of the flate store (run under
.ref050-venv's Python, in its own process).
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx import Dataset

BENCH = Path(__file__).parent
REF_PYTHON = BENCH.parent / ".ref050-venv" / "bin" / "python"
LEVELS = [3, 6, 9, 12, 15, 19]
DICT_LEVELS = [3, 6, 9, 12]

GATHER = """
import sys, time, json
import numpy as np
from loaderx import Dataset
ds = Dataset(sys.argv[1])
rng = np.random.default_rng(0)
runs = []
for _ in range(3):
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < float(sys.argv[2]):
        ds.__getitems__(rng.integers(0, len(ds), 256)) if hasattr(ds, '__getitems__') else ds[rng.integers(0, len(ds), 256)]
        n += 1
    runs.append(n / (time.perf_counter() - t0))
print(json.dumps(sorted(runs)[1]))
"""


def gather_batches_s(python, path, seconds=2.0):
    out = subprocess.run([str(python), "-c", GATHER, str(path), str(seconds)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


for workload in sys.argv[1:]:
    src = np.load(BENCH / "out" / "data" / "full" / f"{workload}.npy", mmap_mode="r")
    sample = src[0].nbytes
    with tempfile.TemporaryDirectory(dir=BENCH / "out") as tmp:
        rows = []
        stores = [("flate", 6)] + [("zstd", lvl) for lvl in LEVELS]
        stores += [("zstd-dict", lvl) for lvl in DICT_LEVELS]
        for codec, level in stores:
            path = Path(tmp) / f"{codec}{level}.zr"
            t0 = time.perf_counter()
            Dataset.write(path, src, codec=codec, level=level, durable=False).close()
            write_mb_s = src.nbytes / 1e6 / (time.perf_counter() - t0)
            with Dataset(path) as ds:
                stats = ds.stats()
            size = stats["live_bytes"] / src.nbytes
            mb_s = gather_batches_s(sys.executable, path) * 256 * sample / 1e6
            rows.append((codec, level, size, write_mb_s, mb_s, path))
        ref = gather_batches_s(REF_PYTHON, rows[0][5]) * 256 * sample / 1e6
        print(f"{workload}: 0.5.0 flate gather {ref:,.0f} MB/s")
        for codec, level, size, write_mb_s, mb_s, _ in rows:
            print(f"{workload} {codec:9s} level {level:2d}: size {size:.3f} of the source, "
                  f"write {write_mb_s:,.0f} MB/s, gather {mb_s:,.0f} MB/s = "
                  f"{mb_s / ref:.1f}x 0.5.0 flate", flush=True)
