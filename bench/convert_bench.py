"""Conversion throughput and bytes on disk: `loaderx convert` against what
users would otherwise write the same data with. Run by bench/convert.sh,
which sets up the peers; writes docs/benchmarks-convert.md and .png.

The source is Fashion-MNIST's training set (60,000 images of 28x28 uint8
and their labels) as a Hugging Face `datasets.Dataset` in memory (the image
a fixed-length sequence of 784 uint8, the label an int64), the input every
peer takes. Each system converts it into its own format on disk, timed to
the end of its close, 3 runs, median:

* ours: `loaderx.convert(dataset, dst, codec=...)`, raw, zstd and
  zstd-dict, durable (the default: every group synced before the table
  commits it) and, for raw and zstd, with ``durable=False``, as the peers
  write (none of them syncs);
* Hugging Face `save_to_disk` and `to_parquet`;
* WebDataset's `TarWriter` (one `.bin` and one `.cls` per sample);
* ArrayRecord's writer (one record per sample: image bytes, then label);
* loaderx 2.8's `converter.convert` (PyPI, its own venv), raw and zstd.

"Reading the source alone" iterates the dataset's Arrow batches and copies
every image and label into NumPy: the floor a conversion cannot beat. The
source is in memory, so that floor is a memory copy.

A second table takes sources from files, one per kind the converter reads
(Fashion-MNIST as Debian's gzipped IDX files, as `.npy`, `.npz`, Parquet
and WebDataset shards; elpv-dataset's solar-cell PNGs as an image folder),
and sets a raw conversion against reading the same source alone: iterating
the converter's own reader over every row (`loaderx.sources`), which is
what a conversion does besides writing, and copying every array (a
memory-mapped `.npy` is otherwise never read). Files are read warm from the
page cache (one untimed pass first). Every timed run starts after an `os.sync()`,
so that the writeback of the run before does not run into it.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
# bench/datasets.py (the workloads) would shadow Hugging Face's datasets.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != BENCH]
FASHION = Path(os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
REF28 = ROOT / ".loaderx28-venv" / "bin" / "python"


def idx(path):
    import gzip

    data = gzip.open(path).read()
    ndim = data[3]
    shape = [int.from_bytes(data[4 + 4 * k: 8 + 4 * k], "big") for k in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def source():
    import datasets

    images = idx(FASHION / "train-images-idx3-ubyte.gz").reshape(-1, 784)
    labels = idx(FASHION / "train-labels-idx1-ubyte.gz").astype(np.int64)
    features = datasets.Features({
        "image": datasets.Sequence(datasets.Value("uint8"), length=784),
        "label": datasets.Value("int64"),
    })
    import pyarrow as pa

    table = pa.table({
        "image": pa.FixedSizeListArray.from_arrays(pa.array(images.reshape(-1)), 784),
        "label": pa.array(labels),
    })
    ds = datasets.Dataset(table, info=datasets.DatasetInfo(features=features))
    return ds, images, labels


def disk_bytes(path):
    """Bytes the files under `path` occupy on disk: allocated blocks, not
    apparent sizes (a store's meta.zr and checksums.zr are sparse)."""
    path = Path(path)
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    return sum(f.stat().st_blocks * 512 for f in files)


def read_alone(ds, _dst):
    for batch in ds.data.table.to_batches(max_chunksize=8192):
        np.asarray(batch.column(0).flatten()).copy()
        np.asarray(batch.column(1)).copy()


def ours(codec, durable=True):
    def run(ds, dst):
        import loaderx

        loaderx.convert(ds, dst, codec=codec, durable=durable, progress=False).close()
    return run


def hf_save(ds, dst):
    ds.save_to_disk(str(dst))


def hf_parquet(ds, dst):
    ds.to_parquet(str(dst))


def webdataset(ds, dst):
    import webdataset as wds

    Path(dst).mkdir()
    table = ds.data.table
    with wds.TarWriter(str(Path(dst) / "shard-000000.tar")) as sink:
        k = 0
        for batch in table.to_batches(max_chunksize=8192):
            images = np.asarray(batch.column(0).flatten()).reshape(-1, 784)
            labels = np.asarray(batch.column(1))
            for image, label in zip(images, labels):
                sink.write({"__key__": f"{k:06d}", "bin": image.tobytes(), "cls": int(label)})
                k += 1


def array_record(ds, dst):
    from array_record.python.array_record_module import ArrayRecordWriter

    writer = ArrayRecordWriter(str(dst), "group_size:1")
    for batch in ds.data.table.to_batches(max_chunksize=8192):
        images = np.asarray(batch.column(0).flatten()).reshape(-1, 784)
        labels = np.asarray(batch.column(1))
        for image, label in zip(images, labels):
            writer.write(image.tobytes() + int(label).to_bytes(8, "little"))
    writer.close()


REF28_RUN = """
import sys, time, datasets
from loaderx import converter
ds = datasets.load_from_disk(sys.argv[1])
t = time.perf_counter()
converter.convert(ds, sys.argv[2], codec=sys.argv[3])
print(time.perf_counter() - t)
"""


def loaderx28(codec, saved):
    def run(_ds, dst):
        out = subprocess.run([str(REF28), "-c", REF28_RUN, str(saved), str(dst), codec],
                             capture_output=True, text=True, check=True)
        return float(out.stdout.strip().splitlines()[-1])
    return run


def disk_inputs(tmp, images, labels):
    """The inputs on disk, by name: (path, source kind, bytes of rows)."""
    import elpv_dataset
    import pyarrow as pa
    import pyarrow.parquet as pq
    import webdataset as wds

    tmp = Path(tmp)
    rows = images.nbytes + labels.nbytes
    np.save(tmp / "train.npy", images)
    np.savez(tmp / "train.npz", image=images, label=labels)
    pq.write_table(pa.table({
        "image": pa.FixedSizeListArray.from_arrays(pa.array(images.reshape(-1)), 784),
        "label": pa.array(labels),
    }), tmp / "train.parquet")
    (tmp / "wds").mkdir()
    with wds.TarWriter(str(tmp / "wds" / "shard-000000.tar")) as sink:
        for k, (image, label) in enumerate(zip(images, labels)):
            sink.write({"__key__": f"{k:06d}", "bin": image.tobytes(), "cls": int(label)})
    data = Path(elpv_dataset.__file__).parent / "data"
    cells = tmp / "cells"
    for line in (data / "labels.csv").read_text().splitlines():
        name, _, kind = line.split()
        (cells / kind).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data / name, cells / kind / Path(name).name)
    cell_bytes = sum(f.stat().st_size for f in cells.rglob("*.png"))
    cell_bytes += 8 * sum(1 for _ in cells.rglob("*.png"))
    return {
        "Fashion-MNIST IDX (gzip)": (FASHION / "train-images-idx3-ubyte.gz", "idx", rows),
        "Fashion-MNIST .npy (images)": (tmp / "train.npy", "npy", images.nbytes),
        "Fashion-MNIST .npz": (tmp / "train.npz", "npz", rows),
        "Fashion-MNIST Parquet": (tmp / "train.parquet", "parquet", rows),
        "Fashion-MNIST WebDataset": (tmp / "wds", "webdataset", rows),
        "elpv PNG image folder": (cells, "images", cell_bytes),
    }


def read_source(path, kind):
    from loaderx.convert import GROUP_BYTES
    from loaderx.sources import open_source

    reader = open_source(path, kind, image_size=None, workers=os.cpu_count() or 1)
    for group in reader.groups(0, GROUP_BYTES):
        for column in group.values():
            # A memory-mapped source's group is a view: copy it, as the
            # conversion reads it, to read its bytes.
            if isinstance(column, np.ndarray):
                column.copy()


def disk_sources(tmp, images, labels, repeats):
    """Per input on disk: seconds to read it alone and to convert it raw."""
    import loaderx

    out = {}
    for name, (path, kind, nbytes) in disk_inputs(tmp, images, labels).items():
        read_source(path, kind)  # warms the page cache
        runs = {"read": [], "raw, durable=False": [], "raw": []}
        for r in range(repeats):
            for how, seconds in runs.items():
                dst = Path(tmp) / f"disk-{r}"
                os.sync()  # no writeback of the run before runs into this one
                t0 = time.perf_counter()
                if how == "read":
                    read_source(path, kind)
                else:
                    loaderx.convert(path, dst, source=kind, codec="raw", progress=False,
                                    durable=how == "raw").close()
                seconds.append(time.perf_counter() - t0)
                shutil.rmtree(dst, ignore_errors=True)
        out[name] = {how: nbytes / 1e6 / statistics.median(t) for how, t in runs.items()}
        print(f"{name}: " + ", ".join(f"{k} {v:,.0f} MB/s" for k, v in out[name].items()),
              flush=True)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true",
                   help="one run each, report under bench/out (a smoke test)")
    p.add_argument("--out", default=None,
                   help="report path stem (default docs/benchmarks-convert, or "
                   "bench/out/benchmarks-convert-quick with --quick)")
    args = p.parse_args()
    if args.quick:
        args.repeats = 1
    if args.out is None:
        args.out = str(BENCH / "out" / "benchmarks-convert-quick" if args.quick
                       else ROOT / "docs" / "benchmarks-convert")
    ds, images, labels = source()
    src_bytes = images.nbytes + labels.nbytes
    with tempfile.TemporaryDirectory(dir=BENCH / "out") as tmp:
        saved = Path(tmp) / "source-hf"
        ds.save_to_disk(str(saved))
        systems = {
            "reading the source alone": read_alone,
            "ours, raw": ours("raw"),
            "ours, zstd": ours("zstd"),
            "ours, zstd-dict": ours("zstd-dict"),
            "ours, raw, durable=False": ours("raw", durable=False),
            "ours, zstd, durable=False": ours("zstd", durable=False),
            "Hugging Face save_to_disk": hf_save,
            "Hugging Face to_parquet": hf_parquet,
            "WebDataset TarWriter": webdataset,
            "ArrayRecord writer": array_record,
        }
        if REF28.exists():
            systems["loaderx 2.8, raw"] = loaderx28("raw", saved)
            systems["loaderx 2.8, zstd"] = loaderx28("zstd", saved)
        results = {}
        for name, run in systems.items():
            times, size = [], None
            for r in range(args.repeats):
                dst = Path(tmp) / f"out-{len(results)}-{r}"
                os.sync()  # no writeback of the run before runs into this one
                t0 = time.perf_counter()
                inner = run(ds, dst)
                times.append(inner if isinstance(inner, float) else time.perf_counter() - t0)
                if dst.exists():
                    size = disk_bytes(dst)
                    shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
            seconds = statistics.median(times)
            results[name] = {"seconds": seconds, "mb_s": src_bytes / 1e6 / seconds,
                             "size": None if size is None else size / src_bytes}
            print(f"{name}: {results[name]['mb_s']:,.0f} MB/s, size "
                  f"{results[name]['size'] if size is not None else '-'}", flush=True)
        disk = disk_sources(tmp, images, labels, args.repeats)
    report(results, disk, args.out, src_bytes, args.repeats)


def report(results, disk, out, src_bytes, repeats):
    peers = {k: v for k, v in results.items()
             if not k.startswith(("ours", "reading"))}
    fastest = max(peers.values(), key=lambda v: v["mb_s"])
    fastest_name = next(k for k, v in peers.items() if v is fastest)
    read = results["reading the source alone"]["mb_s"]
    lines = [
        "# Conversion benchmark",
        "",
        "Generated by `bash bench/convert.sh` (bench/convert_bench.py); rerun it rather than edit.",
        f"Source: Fashion-MNIST train as a Hugging Face dataset in memory, "
        f"{src_bytes / 1e6:.1f} MB of images and labels. Median of {repeats} runs; size is bytes "
        "on disk "
        "over the source's bytes.",
        "",
        f"![conversion throughput and size](benchmarks-convert.png)",
        "",
        "| system | MB/s | size | vs the fastest peer |",
        "|---|---|---|---|",
    ]
    for name, r in results.items():
        size = "-" if r["size"] is None else f"{r['size']:.3f}"
        lines.append(f"| {name} | {r['mb_s']:,.0f} | {size} | {r['mb_s'] / fastest['mb_s']:.2f}× |")
    zstd = results["ours, zstd, durable=False"]
    raw = results["ours, raw, durable=False"]
    small = {k: v for k, v in peers.items() if v["size"] is not None and v["size"] <= zstd["size"]}
    small_name = max(small, key=lambda k: small[k]["mb_s"]) if small else None
    lines += [
        "",
        "## Targets",
        "",
        f"- ours, zstd (durable=False, as the peers write) / the fastest peer ({fastest_name}): "
        f"{zstd['mb_s'] / fastest['mb_s']:.2f}× "
        f"(target ≥ 2×), at size {zstd['size']:.3f} against {fastest['size']:.3f} "
        f"(target: equal or smaller)",
        f"- ours, raw (durable=False) / reading the source alone: {raw['mb_s'] / read:.2f}× "
        "(target ≥ 0.8×)",
    ]
    if small_name:
        lines.insert(-1, (
            f"- ours, zstd (durable=False) / the fastest peer whose output is no larger "
            f"({small_name}, size {small[small_name]['size']:.3f}): "
            f"{zstd['mb_s'] / small[small_name]['mb_s']:.2f}× (target ≥ 2×); durable: "
            f"{results['ours, zstd']['mb_s'] / small[small_name]['mb_s']:.2f}×"))
    lines += [
        "",
        "## Sources on disk: a raw conversion against reading the source alone",
        "",
        "MB/s of rows (for the image folder, of its files) read or converted; "
        "\"read\" iterates the converter's own reader over every row.",
        "",
        "| source | read alone | raw, durable=False | raw (durable) | durable=False / read "
        "(target ≥ 0.8×) |",
        "|---|---|---|---|---|",
    ]
    for name, r in disk.items():
        lines.append(f"| {name} | {r['read']:,.0f} | {r['raw, durable=False']:,.0f} | "
                     f"{r['raw']:,.0f} | {r['raw, durable=False'] / r['read']:.2f}× |")
    Path(out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    Path(out).with_suffix(".json").write_text(
        json.dumps({"in_memory": results, "on_disk": disk}, indent=1) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    names = [n for n in results if results[n]["size"] is not None]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.barh(names, [results[n]["mb_s"] for n in names])
    a.axvline(read, color="k", ls="--", lw=1, label="reading the source alone")
    a.set_xlabel("MB/s of source converted")
    a.legend(loc="lower right", fontsize=8)
    b.barh(names, [results[n]["size"] for n in names])
    b.set_xlabel("bytes on disk / source bytes")
    b.set_yticklabels([])
    fig.tight_layout()
    fig.savefig(Path(out).with_suffix(".png"), dpi=100)


if __name__ == "__main__":
    main()
