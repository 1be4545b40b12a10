"""The cost of checksums on the first read of each record: the case the
harness's warm gathers leave out (bench/README.md, "Checksums by default").

    bench/.venv/bin/python bench/checksum_micro.py A B C D   # after bench/run.sh made the data

For each workload, writes a raw dataset with checksums (the default) and one
without, then times one pass over every record in random 256-record batches
through a fresh handle, which checks every record it reads (the first
epoch), and a second pass through the same handle, which checks none
(later epochs). The two datasets take turns, 5 rounds; medians.
"""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx import Dataset

for workload in sys.argv[1:]:
    src = np.load(Path(__file__).parent / "out" / "data" / "full" / f"{workload}.npy",
                  mmap_mode="r")
    with tempfile.TemporaryDirectory(dir=Path(__file__).parent / "out") as tmp:
        paths = {}
        for name, checksums in (("checked", None), ("unchecked", False)):
            paths[name] = (Path(tmp) / f"{name}.zr", checksums)
            Dataset.write(paths[name][0], src, codec="raw", durable=False,
                          checksums=checksums).close()
        order = np.random.default_rng(0).permutation(len(src))
        batches = np.array_split(order, max(1, len(order) // 256))
        times = {(name, p): [] for name in paths for p in ("first", "again")}
        for _ in range(5):
            for name, (path, checksums) in paths.items():
                with Dataset(path, **({} if checksums is None else {"checksums": False})) as ds:
                    for p in ("first", "again"):
                        t = time.perf_counter()
                        for b in batches:
                            ds.__getitems__(b)
                        times[(name, p)].append(time.perf_counter() - t)
        mb = src.nbytes / 1e6
        for p in ("first", "again"):
            checked = mb / np.median(times[("checked", p)])
            unchecked = mb / np.median(times[("unchecked", p)])
            print(f"{workload} {p:5s} pass: checked {checked:,.0f} MB/s, unchecked "
                  f"{unchecked:,.0f} MB/s, ratio {checked / unchecked:.2f}", flush=True)
