"""Ray Data: writing a dataset into a sharded table with loaderx.ray and
reading it back, against Ray's own Parquet writer and reader on the same
data and the same cluster. Run by `bash bench/run.sh ray`; writes
docs/benchmarks-ray.{md,json,png} (--quick: one round on a quarter of the
data, into bench/out/benchmarks-ray-quick.*).

The cluster: Ray's `ray.cluster_utils.Cluster` on this machine, a head and
a second raylet node of one CPU each, every server on 127.0.0.1, started
once and used by every configuration.

Two data sets, each held as a materialized Ray dataset of 8 blocks, so
every writer starts from the same blocks in Ray's object store:

* pixels: Fashion-MNIST train (60,000 uint8 28 x 28 images and int64
  labels, from the Debian package) repeated 4 times, 240,000 rows, 190 MB:
  an image tensor column and a label column;
* photos: the 1,248 JPEG crops of scripts/wallpaper_crops.py (500 x 375,
  quality 90, cut from Debian's plasma-workspace-wallpapers), repeated 4
  times, 4,992 rows, 168 MB: the files' bytes (a binary column) and the
  picture's number as the label.

Each round, in turn, for each data set: loaderx.ray.write into a new table
(pixels: zstd, zstd with durable=False, which syncs nothing, as Parquet's
writer does not, and raw; photos: raw, raw with durable=False, zstd
with durable=False, which takes the files' few compressible bytes, as
Parquet's snappy and zstd do, and zstd-dict with durable=False at its
default level and at level -1, whose dictionary also takes the JPEG headers
the files share, as Parquet's zstd does across the rows of a page), and
`write_parquet` (Ray's default compression, snappy, then zstd, then none)
into a new folder; then each output is read
back whole, `loaderx.ray.read` or `ray.data.read_parquet`, its blocks
iterated as NumPy batches on the driver (`iter_batches(batch_size=None)`;
see `consume`). The files were just written, so reads come from the page
cache for both. One untimed round first starts Ray's workers and imports.
A figure is the median over the rounds; sizes are bytes on disk.
"""

import argparse
import gzip
import logging
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

# Read when Ray is imported: Ray's servers then bind to 127.0.0.1 only.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import common  # noqa: E402
from harness import machine  # noqa: E402

WORK = common.OUT / "ray-bench"
COPIES = 4


def pixels(copies: int) -> dict:
    """Fashion-MNIST train, `copies` times over."""
    def idx(name, offset):
        with gzip.open(common.FASHION / name) as f:
            return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)
    images = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)
    labels = idx("train-labels-idx1-ubyte.gz", 8).astype(np.int64)
    return {"image": np.concatenate([images] * copies), "label": np.tile(labels, copies)}


def photos(copies: int) -> dict:
    """The wallpaper crops' JPEG bytes and picture numbers, `copies` times over."""
    sys.path.insert(0, str(common.ROOT / "scripts"))
    import wallpaper_crops

    files = sorted(wallpaper_crops.make(common.OUT / "wallpaper-crops").rglob("*.jpg"))
    pictures = sorted({f.parent.name for f in files})
    data = np.empty(len(files), dtype=object)
    data[:] = [f.read_bytes() for f in files]
    labels = np.array([pictures.index(f.parent.name) for f in files], dtype=np.int64)
    return {"image": np.concatenate([data] * copies), "label": np.tile(labels, copies)}


def nbytes(cols: dict) -> int:
    return sum(c.nbytes if c.dtype != object else sum(map(len, c)) for c in cols.values())


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def timed(fn) -> float:
    os.sync()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def consume(ds) -> int:
    """Iterates `ds` on the driver, each block as a NumPy batch: re-batching
    to a fixed size costs Ray the same for every source, and for the photos'
    binary column it took most of the time (4.8 s of 168 MB already in the
    object store, against 1.4 s for the whole read block by block)."""
    rows = 0
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        rows += len(batch["label"])
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    rounds = args.rounds or (1 if args.quick else 5)
    copies = 1 if args.quick else COPIES
    stem = Path(args.out) if args.out else (
        common.OUT / "benchmarks-ray-quick" if args.quick
        else common.ROOT / "docs" / "benchmarks-ray")

    import ray
    import ray.data
    from ray.cluster_utils import Cluster
    from ray.data.block import BlockAccessor

    import loaderx.ray as lxray

    sets = {"pixels": pixels(copies), "photos": photos(copies)}
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.WARNING)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    results = {"machine": machine(),
               "versions": common.versions("ray", "pyarrow", "numpy", "loaderx"), "sets": {}}
    results["machine"]["loadavg_start"] = os.getloadavg()
    try:
        for set_name, cols in sets.items():
            rows = len(cols["label"])
            source = ray.data.from_arrow([
                BlockAccessor.batch_to_block({k: v[s] for k, v in cols.items()})
                for s in np.array_split(np.arange(rows), 8)]).materialize()
            # (codec, durable, level); None is the codec's default level.
            ours = ([("zstd", True, None), ("zstd", False, None), ("raw", True, None)]
                    if set_name == "pixels"
                    else [("raw", True, None), ("raw", False, None), ("zstd", False, None),
                          ("zstd-dict", False, None), ("zstd-dict", False, -1)])
            writers = {
                f"ours, {c}" + ("" if level is None else f", level {level}")
                + ("" if durable else ", durable=False"):
                    (lambda out, c=c, durable=durable, level=level:
                     lxray.write(source, out, codec=c, level=level, durable=durable).close())
                for c, durable, level in ours}
            for c in ("snappy", "zstd", "none"):
                writers[f"Ray Parquet, {c}"] = (
                    lambda out, c=c: source.write_parquet(str(out), compression=c))
            runs = {name: {"write_s": [], "read_s": [], "bytes": 0} for name in writers}
            for r in range(rounds + 1):
                common.log(f"{set_name}: " + (f"round {r} of {rounds}" if r else "warm-up"))
                for name, write in writers.items():
                    out = WORK / set_name / name.replace(", ", "-").replace(" ", "-")
                    shutil.rmtree(out, ignore_errors=True)
                    write_s = timed(lambda: write(out))
                    read = ((lambda: lxray.read(out)) if name.startswith("ours")
                            else (lambda: ray.data.read_parquet(str(out))))
                    got = []
                    read_s = timed(lambda: got.append(consume(read())))
                    assert got == [rows], (name, got, rows)
                    if r:
                        runs[name]["write_s"].append(write_s)
                        runs[name]["read_s"].append(read_s)
                        runs[name]["bytes"] = disk_bytes(out)
                        common.log(f"  {name}: write {write_s:.2f} s, read {read_s:.2f} s")
                    shutil.rmtree(out, ignore_errors=True)
            results["sets"][set_name] = {
                "rows": rows, "source_bytes": nbytes(cols),
                "systems": {name: {"write_s": statistics.median(x["write_s"]),
                                   "read_s": statistics.median(x["read_s"]),
                                   "bytes": x["bytes"], "rounds": len(x["write_s"])}
                            for name, x in runs.items()}}
    finally:
        ray.shutdown()
        cluster.shutdown()
    common.write_report(stem, report(results), results, chart)


def report(r: dict) -> str:
    lines = [
        "# Ray Data: loaderx.ray against Ray's Parquet",
        "",
        "Generated by `bash bench/run.sh ray` (bench/ray_bench.py, whose docstring says how "
        "it measures and on what data), on a Ray cluster of two nodes of one CPU each on this "
        "machine. MB/s are the source's megabytes over the median time of "
        f"{min(x['rounds'] for d in r['sets'].values() for x in d['systems'].values())} "
        "rounds; size is bytes on disk over the source's bytes.",
    ]
    for set_name, d in r["sets"].items():
        s, mb = d["systems"], d["source_bytes"] / 1e6
        lines += ["", f"## {set_name}: {d['rows']:,} rows, {mb:.0f} MB", "",
                  "| system | write MB/s | read MB/s | size |", "|---|---|---|---|"]
        for name, x in s.items():
            lines.append(f"| {name} | {mb / x['write_s']:.0f} | {mb / x['read_s']:.0f} | "
                         f"{x['bytes'] / d['source_bytes']:.3f} |")
        lines += ["", "Ours against each Parquet output no smaller than ours (time ratios, "
                  "higher is better for us):", ""]
        for ours in (n for n in s if n.startswith("ours")):
            peers = [n for n in s if n.startswith("Ray") and s[n]["bytes"] >= s[ours]["bytes"]]
            for peer in peers:
                lines.append(f"* {ours} vs {peer}: write "
                             f"{s[peer]['write_s'] / s[ours]['write_s']:.2f}×, read "
                             f"{s[peer]['read_s'] / s[ours]['read_s']:.2f}×")
            if not peers:
                smallest = min((n for n in s if n.startswith("Ray")), key=lambda n: s[n]["bytes"])
                lines.append(f"* {ours}: every Parquet output is smaller; against "
                             f"{smallest}: write {s[smallest]['write_s'] / s[ours]['write_s']:.2f}"
                             f"×, read {s[smallest]['read_s'] / s[ours]['read_s']:.2f}×")
    lines += ["", common.machine_line({**r, "runs": {}}), ""]
    return "\n".join(lines)


def chart(r: dict):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(r["sets"]), 2, figsize=(10, 2.2 + 1.6 * len(r["sets"])),
                             squeeze=False)
    for row, (set_name, d) in zip(axes, r["sets"].items()):
        s, mb = d["systems"], d["source_bytes"] / 1e6
        names = list(s)
        for a, key, title in ((row[0], "write_s", "write"), (row[1], "read_s", "read")):
            a.barh(names, [mb / s[n][key] for n in names],
                   color=["tab:blue" if n.startswith("ours") else "tab:gray" for n in names])
            a.set_title(f"{set_name}: {title}, MB/s (higher is better)", fontsize=9)
            a.invert_yaxis()
    return fig


if __name__ == "__main__":
    main()
