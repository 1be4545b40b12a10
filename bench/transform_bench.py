"""Transforms in worker processes: samples per second through the
DataLoader with `map`/`transform` on threads and in processes, and the
same per-sample function under Grain. Run by `bash bench/run.sh
transforms`; writes docs/benchmarks-transforms.{md,json,png} (--quick: one
short round, into bench/out/benchmarks-transforms-quick.*).

The data: Fashion-MNIST train (60,000 images, uint8 (28, 28), and int64
labels), converted once by `loaderx.convert` (raw codec) into the table
bench/out/transform-bench/fashion-mnist, and its two arrays saved beside
it as .npy files for Grain's random-access source.

Every configuration delivers shuffled batches to a trivial consumer; ours
gathers on 2 native workers:

1. A GIL-bound per-sample function, `features` (the pixels' variance in
   pure Python), on batches of 256: ours as `map=` on 1 and 2 transform
   threads and on 1 and 2 transform processes (the default start method);
   Grain's `MapDataset.map` with the same function, batched, on 2 worker
   processes (`mp_prefetch`), with its default read options and with
   `ReadOptions(num_threads=0)`, which Grain advises for data in memory.
2. A transform that does nothing (`transform=identity`) on batches of 2048,
   8192 and 32768 (1.6, 6.4 and 25.7 MB of images): on 2 threads and on 2
   processes, what carrying a batch to a process and back costs; and the
   loader without a transform.

Each configuration runs in a process of its own (`--config NAME`), which
first reads its files once (page cache), then takes its first batch and a
warm-up untimed; rounds run every configuration once in turn, and a figure
is the median over the rounds, a ratio the median of the rounds' own
ratios. Each process also reports its peak RSS and
the sum of its worker processes' peaks.
"""

import multiprocessing
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
import common  # noqa: E402
from harness import machine  # noqa: E402

DATA = common.OUT / "transform-bench"
TABLE = DATA / "fashion-mnist"
ARRAYS = {name: DATA / f"{name}.npy" for name in ("image", "label")}
#: The batches of the pass-through configurations: at least 1 MiB of images.
LARGE = (2048, 8192, 32768)
#: Bytes of one sample (a 28 x 28 uint8 image and an int64 label), for MB/s.
SAMPLE_BYTES = 28 * 28 + 8


def features(sample):
    """A feature computed in pure Python, holding the GIL throughout: the
    variance of the image's pixels."""
    px = sample["image"].ravel().tolist()
    mean = sum(px) / len(px)
    return {"f": sum((v - mean) * (v - mean) for v in px) / len(px), "label": sample["label"]}


def identity(batch):
    """The transform that does nothing: a top-level function, so that it
    pickles for the spawn and forkserver start methods too."""
    return batch


#: name -> (row label, DataLoader arguments; None for Grain), in report order.
MAP = {
    "map-threads-1": ("ours, 1 thread", dict(map=features, transform_workers=1)),
    "map-threads-2": ("ours, 2 threads", dict(map=features, transform_workers=2)),
    "map-processes-1": ("ours, 1 process", dict(map=features, transform_workers=1,
                                                transform_mode="process")),
    "map-processes-2": ("ours, 2 processes", dict(map=features, transform_workers=2,
                                                  transform_mode="process")),
    "grain": ("Grain, 2 worker processes", None),
    "grain-threads-0": ("Grain, 2 worker processes, num_threads=0", None),
}
#: name -> (row label, DataLoader arguments, batch size).
PASS = {
    f"pass-{kind}-{size}": (f"{label}, batches of {size}", kw, size)
    for size in LARGE
    for kind, label, kw in [
        ("plain", "ours, no transform", dict()),
        ("threads", "ours, identity on 2 threads", dict(transform=identity, transform_workers=2)),
        ("processes", "ours, identity in 2 processes",
         dict(transform=identity, transform_workers=2, transform_mode="process")),
    ]
}
CONFIGS = {**MAP, **PASS}
GRAIN = ("grain", "grain-threads-0")
#: (what, configuration, against, the least ratio wanted).
TARGETS = [
    ("map: 2 processes / 2 threads", "map-processes-2", "map-threads-2", 1.7),
    ("map: 2 processes / 1 process", "map-processes-2", "map-processes-1", 1.8),
    ("map: ours, 2 processes / Grain, 2 workers", "map-processes-2", "Grain", 1.5),
    *((f"pass-through, batches of {size} ({size * 784 / 1e6:.1f} MB): 2 processes / 2 threads",
       f"pass-processes-{size}", f"pass-threads-{size}", 0.9) for size in LARGE),
]


# -- the data -----------------------------------------------------------------

def make_data():
    """The table (a conversion into a complete table of the same source
    returns at once) and its arrays as .npy files; returns the sample count."""
    import loaderx

    DATA.mkdir(parents=True, exist_ok=True)
    table = loaderx.convert(common.FASHION / "train-images-idx3-ubyte.gz", TABLE, codec="raw",
                            durable=False, progress=False)
    try:
        streams = dict(table)
        n = len(streams["label"])
        for name, path in ARRAYS.items():
            if not path.is_file():
                partial = path.with_suffix(".partial.npy")
                np.save(partial, streams[name][np.arange(n)])
                os.replace(partial, path)
    finally:
        table.close()
    return n


def features_us(samples=2000):
    """What `features` costs a sample on one core, in µs: the best of 3
    passes over the first `samples` images."""
    images = np.asarray(np.load(ARRAYS["image"], mmap_mode="r")[:samples])
    passes = []
    for _ in range(3):
        t0 = time.perf_counter()
        for image in images:
            features({"image": image, "label": np.int64(0)})
        passes.append((time.perf_counter() - t0) / samples * 1e6)
    return min(passes)


class Arrays:
    """Grain's random-access source: a sample of the .npy arrays, mapped in
    the process that reads them. Grain pickles the pipeline to the workers
    it spawns, and a mapped array would pickle as a copy of its data: only
    the length goes, and each worker maps the files itself."""

    def __init__(self, n):
        self.n = n
        self.arrays = None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.arrays is None:
            # Plain arrays viewing the mappings: indexing a np.memmap costs
            # 3 µs a sample more.
            self.arrays = {k: np.asarray(np.load(p, mmap_mode="r")) for k, p in ARRAYS.items()}
        return {k: a[i] for k, a in self.arrays.items()}

    def __getstate__(self):
        return {"n": self.n, "arrays": None}


# -- the configurations: each a generator of batch dicts -------------------------

def ours(batch_size, **kw):
    import loaderx

    with loaderx.DataLoader(loaderx.Table(TABLE, read_only=True), batch_size=batch_size,
                            num_workers=2, mode=loaderx.Sampler.Mode.SHUFFLE, **kw) as loader:
        yield from loader


def grain_batches(name):
    import grain

    n = len(np.load(ARRAYS["label"], mmap_mode="r"))
    read = grain.ReadOptions(num_threads=0) if name == "grain-threads-0" else None
    # Batched after to_iter_dataset, as bench/image_bench.py found it must be:
    # a MapDataset's batch is built whole by each read thread of a worker.
    ds = (grain.MapDataset.source(Arrays(n)).shuffle(seed=0).repeat().map(features)
          .to_iter_dataset(read).batch(common.BATCH)
          .mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    it = iter(ds)
    try:
        yield from it
    finally:
        it.close()  # stops the workers now, not whenever the iterator is collected


def batches(name):
    if name in GRAIN:
        return grain_batches(name)
    if name in MAP:
        return ours(common.BATCH, **MAP[name][1])
    _, kw, size = PASS[name]
    return ours(size, **kw)


def check(name, batch):
    """Every configuration must deliver the same thing, or its rate means little."""
    if name in MAP:
        want = {"f": (np.float64, (common.BATCH,)), "label": (np.int64, (common.BATCH,))}
    else:
        size = PASS[name][2]
        want = {"image": (np.uint8, (size, 28, 28)), "label": (np.int64, (size,))}
    got = {k: (v.dtype, v.shape) for k, v in batch.items()}
    if got != {k: (np.dtype(d), s) for k, (d, s) in want.items()}:
        raise ValueError(f"batches of {got}, not {want}")


def worker(name, seconds, warmup):
    """Times one configuration in this process and prints its RESULT line."""
    try:
        for path in ARRAYS.values() if name in GRAIN else [TABLE]:
            common.prewarm(path)
        run = batches(name)
        try:
            check(name, next(run))
            rate = common.timed(run, seconds, warmup)
            children = common.children_peak_rss_mib()  # while the workers live
        finally:
            run.close()
        common.emit({"status": "ok", "samples_s": rate, "peak_rss_mib": common.peak_rss_mib(),
                     "children_rss_mib": children})
    except Exception as e:
        common.emit({"status": f"ERROR: {type(e).__name__}: {e}",
                     "traceback": traceback.format_exc()})


# -- the orchestrator -------------------------------------------------------------

def versions():
    """The benchmarked packages' versions (ours as imported: the checkout's
    code when PYTHONPATH points at it)."""
    import loaderx

    return {"loaderx": loaderx.__version__, **common.versions("grain", "numpy")}


def run_config(name, args):
    return common.run_job(__file__, ["--config", name], args, f"{name:18s}",
                          lambda res: f"{res['samples_s']:10,.0f} samples/s")


def main():
    # Nine rounds: single rounds' ratios range over a third on this machine,
    # and the targets are ratios a few hundredths from 1.
    args = common.bench_args(__doc__, "--config", job_timeout=300, report="transforms",
                             rounds=9)
    if args.config:
        return worker(args.config, args.seconds, args.warmup)

    started = machine()
    common.log("converting the table (once)")
    n = make_data()
    cost = features_us()
    common.log(f"features: {cost:.0f} µs a sample on one core")
    runs = common.run_rounds({name: ["grain"] if name in GRAIN else [] for name in CONFIGS},
                             args, lambda name: run_config(name, args))
    results = {
        "machine": started,
        "command": "bash bench/run.sh transforms" + (" --quick" * args.quick),
        "settings": {k: getattr(args, k) for k in ("quick", "rounds", "seconds", "warmup")},
        "data": {"samples": n, "table_bytes": common.disk_bytes(TABLE),
                 "features_us": cost, "large_batch": LARGE,
                 "start_method": multiprocessing.get_start_method()},
        "versions": versions(),
        "configs": {name: common.medians(r, ("samples_s", "peak_rss_mib", "children_rss_mib"))
                    for name, r in runs.items()},
        "runs": runs,
    }
    report(results, args.out)


# -- the report ---------------------------------------------------------------------

def grain_best(c):
    """The faster Grain configuration that ran, or None."""
    ok = [n for n in GRAIN if c[n]["status"] == "ok"]
    return max(ok, key=lambda n: c[n]["samples_s"]) if ok else None


def report(r, stem):
    c, d, st = r["configs"], r["data"], r["settings"]
    grain = grain_best(c)

    def ratio(name, base):
        # The median of the rounds' own ratios: in a round the two ran one
        # shortly after the other, so a change of the machine's speed
        # between rounds (a third, some hours) does not enter the ratio.
        base = grain if base == "Grain" else base
        if base is None:
            return None
        ratios = [a["samples_s"] / b["samples_s"] for a, b in zip(r["runs"][name], r["runs"][base])
                  if a["status"] == "ok" and b["status"] == "ok"]
        return statistics.median(ratios) if ratios else None

    def cell(x):
        return "–" if x is None else f"{x:.2f}×"

    def rate(name):
        v = c[name]
        return f"{v['samples_s']:,.0f}" if v["status"] == "ok" else v["status"]

    rounds = f"{st['rounds']} round{'s' * (st['rounds'] > 1)}"
    cores = r["machine"]["nproc"]
    lines = [
        "# Transforms in worker processes: a GIL-bound map, and batches passed through",
        "",
        "Generated by `bash bench/run.sh transforms` (bench/transform_bench.py); rerun it "
        "rather than edit.",
        "",
        f"**The data.** Fashion-MNIST train: {d['samples']:,} images, uint8 28 × 28, and int64 "
        "labels, converted by `loaderx.convert` into a raw table "
        f"({d['table_bytes'] / 1e6:,.1f} MB on disk); Grain reads the same two arrays from "
        "`.npy` files, memory-mapped in each of its workers. Every process reads its files "
        "once before it is timed, so they come from the page cache.",
        "",
        "**What is timed.** Samples per second delivered as shuffled batches to a trivial "
        f"consumer, on this machine's {r['machine']['nproc']} cores ({r['machine']['cpu']}). "
        "Ours is `DataLoader(table, batch_size=..., num_workers=2, mode=SHUFFLE, ...)`, its "
        "transform processes started by multiprocessing's default start method "
        f"(`{d['start_method']}` here). Each configuration runs in a process of its own; its "
        f"first batch and a warm-up of {st['warmup']:g} s go untimed, then {st['seconds']:g} s "
        f"are timed; rounds run every configuration once in turn, and each figure is the "
        f"median of {rounds}. Each ratio is the median of the rounds' own ratios (the two "
        "configurations of a round ran within a minute of each other), so it may differ from "
        "the ratio of the two medians.",
        "",
        "## A GIL-bound per-sample function",
        "",
        "`features(sample)`: `px = sample['image'].ravel().tolist()`, then the pixels' "
        "variance in pure Python (their mean, then `sum((v - mean) * (v - mean) for v in px) "
        "/ len(px)`); it returns `{'f': variance, 'label': sample['label']}`. It costs "
        f"{d['features_us']:.0f} µs a sample on one core (the best of 3 passes over 2,000 "
        f"images), so that one core can run it at most {1e6 / d['features_us']:,.0f} times a "
        f"second, {cores} cores {cores * 1e6 / d['features_us']:,.0f}.",
        "",
        "- **ours**: `map=features`, batches of 256, `transform_workers=1` or `2`, "
        "`transform_mode='thread'` or `'process'`.",
        "- **Grain**: `MapDataset.source(arrays).shuffle(seed=0).repeat().map(features)"
        ".to_iter_dataset(read_options).batch(256).mp_prefetch(MultiprocessingOptions("
        "num_workers=2))`: the same function on 2 worker processes (spawned by Grain), with "
        "the default read options (16 threads a worker) and with `ReadOptions(num_threads=0)`, "
        "which Grain's documentation advises for data in memory (fewer threads fighting for "
        "the GIL). Batched after `to_iter_dataset`, as the image benchmark found it must be.",
        "",
        "| configuration | samples/s | / ours, 1 thread | / Grain | / the cores' bound |",
        "|---|---|---|---|---|",
    ]
    bound = cores * 1e6 / d["features_us"]

    def of_bound(name):
        return f"{c[name]['samples_s'] / bound:.0%}" if c[name]["status"] == "ok" else "–"

    for name, (label, _) in MAP.items():
        lines.append(f"| {label} | {rate(name)} | {cell(ratio(name, 'map-threads-1'))} | "
                     f"{cell(ratio(name, 'Grain'))} | {of_bound(name)} |")
    if grain:
        lines += ["", f"\"Grain\" is the faster of the two: {MAP[grain][0]}."]
    lines += ["", f"The cores' bound is {cores} cores running `features` and nothing else "
              f"({bound:,.0f} samples/s); the loader's gather, the consumer and the batches' "
              "passage between processes share those cores. Ours with 2 processes at 1.5× "
              "Grain would need "
              + (f"{1.5 * c[grain]['samples_s'] / bound:.0%} of it." if grain else "Grain's rate.")]
    lines += [
        "",
        "## A transform that does nothing, on batches of at least 1 MiB",
        "",
        "`transform=identity` (`def identity(batch): return batch`) on batches of "
        + ", ".join(f"{size} ({size * 784 / 1e6:.1f} MB of images)" for size in d["large_batch"])
        + ", `transform_workers=2`: what carrying a batch to a process and back costs, against "
        "threads, which hand the batch over as it is. The images (and the labels from 64 KiB "
        "on) are gathered into shared memory that the processes map and come back as that "
        "memory, without a copy; smaller arrays are copied into the process's input arena and "
        "out of it. What is left is a fixed cost a batch, on the cores that the gather uses "
        "too: its structure packed and unpacked on both sides, a message each way through a "
        "socket, and the process and the consumer woken. "
        f"MB/s counts a sample's {SAMPLE_BYTES} bytes (image and label).",
        "",
        "| configuration | samples/s | MB/s | / no transform | / 2 threads |",
        "|---|---|---|---|---|",
    ]
    for name, (label, _, size) in PASS.items():
        v = c[name]
        mbs = f"{v['samples_s'] * SAMPLE_BYTES / 1e6:,.0f}" if v["status"] == "ok" else "–"
        lines.append(f"| {label} | {rate(name)} | {mbs} | "
                     f"{cell(ratio(name, f'pass-plain-{size}'))} | "
                     f"{cell(ratio(name, f'pass-threads-{size}'))} |")
    lines += ["", "## Targets", ""]
    for what, name, base, want in TARGETS:
        got = ratio(name, base)
        lines.append(f"- {what} ≥ {want:g}×: " + ("not measured" if got is None else
                     f"{got:.2f}×, {'met' if got >= want else 'not met'}"))
    lines += [
        "",
        "## Memory",
        "",
        "Peak RSS is each configuration's process's own high-water mark (VmHWM, not "
        "`ru_maxrss`, which a process started by `subprocess` inherits from its parent's; it "
        "includes the table's pages it maps); worker processes are the sum of their own "
        "peaks, read before they are stopped. A forked process starts with its parent's "
        "pages, shared until written, and counts them in its own peak too, so the sum "
        "overstates the memory used together.",
        "",
        "| configuration | peak RSS | worker processes | together |",
        "|---|---|---|---|",
    ]
    for name, (label, *_) in CONFIGS.items():
        v = c[name]
        if v["status"] != "ok":
            lines.append(f"| {label} | {v['status']} | | |")
            continue
        kids = v["children_rss_mib"]
        lines.append(f"| {label} | {v['peak_rss_mib']:,.0f} MiB | "
                     + (f"{kids:,.0f} MiB" if kids else "–")
                     + f" | {v['peak_rss_mib'] + kids:,.0f} MiB |")
    lines += ["", common.machine_line(r)]
    common.write_report(stem, "\n".join(lines) + "\n", r, chart)


def chart(r):
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    c = r["configs"]
    parts = [(MAP, "samples/s: features (pure Python) as map=, batches of 256"),
             (PASS, "samples/s: identity transform")]
    parts = [([n for n in configs if c[n]["status"] == "ok"], configs, xlabel)
             for configs, xlabel in parts]
    fig, axes = plt.subplots(2, 1, figsize=(9, 0.45 * sum(len(n) for n, _, _ in parts) + 3),
                             height_ratios=[max(len(n), 1) for n, _, _ in parts])
    for ax, (names, configs, xlabel) in zip(axes, parts):
        y = list(range(len(names)))[::-1]
        ax.barh(y, [c[n]["samples_s"] for n in names],
                color=["tab:gray" if n in GRAIN or n.startswith("pass-plain") else
                       "tab:orange" if "process" in n else "tab:blue" for n in names])
        ax.set_yticks(y, [configs[n][0] for n in names])
        for yi, n in zip(y, names):
            ax.text(c[n]["samples_s"], yi, f" {c[n]['samples_s']:,.0f}", va="center")
        ax.set_xlabel(xlabel)
        ax.xaxis.set_major_formatter(FuncFormatter(
            lambda x, _: f"{x / 1e6:g} M" if x >= 1e6 else f"{x:,.0f}"))
        ax.margins(x=0.2)
    rounds = r["settings"]["rounds"]
    fig.suptitle(f"Transforms on threads (blue) and in processes (orange), "
                 f"{r['machine']['nproc']} cores, median of {rounds} round{'s' * (rounds > 1)}")
    return fig


if __name__ == "__main__":
    sys.exit(main())
