"""The loader features of real training runs against the plain loader on
the same data, and packing against Grain's packers on the same samples.
Run by `bash bench/run.sh training` (and at the end of a full run of
bench/run.sh); writes docs/benchmarks-training.{md,json}.

1. Throughput ratios. Fashion-MNIST train (60,000 28x28 uint8 images and
   int64 labels, stored raw), and the harness's workload A (20,000 records
   of 12 KiB and int64 labels, raw), through the DataLoader, 2 workers,
   batch 256, shuffled, a trivial consumer; in rounds, each configuration
   timed in turn for --seconds, medians over the rounds:
   * plain: DataLoader({'image', 'label'});
   * mixture: DataLoader(Mixture([table, table], [0.5, 0.5])): two
     sources of the same data (sources of other lengths would change the
     cost of the shuffle itself, not of mixing: a shuffle's keyed
     permutation takes 1-4 tries per index depending on the length);
   * finite: DataLoader(..., epochs=1000): a finite pass, never ending
     within the timing;
   * plain + an int32 stream: the plain loader with a third stream of
     int32 values, what a mixture's `source` stream adds to each batch
     (the cost of a stream, mostly fixed per batch, shows on small
     records).
2. Packing. Real lengths: the Python standard library's source files cut
   into blocks at blank lines, one byte a token (lengths over the row
   cut to a row), rows of 1024 tokens. The padding fraction (padding
   tokens over row tokens) of the first N samples packed by our first-fit
   and best-fit over windows of several sizes, and by Grain's
   FirstFitPackIterDataset and BestFitPackIterDataset with several bin
   counts; and tokens per second of CPU time (per core) of the
   PackedLoader against Grain's first-fit packer reading the same samples
   from memory.
"""

import argparse
import os
import resource
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

from common import FASHION, timed, write_report

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
ROW = 1024


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def tables(tmp):
    """The data of the throughput runs, by name: tables of image and label."""
    import datasets as workloads
    from loaderx import Dataset, convert

    fm = convert(FASHION / "train-images-idx3-ubyte.gz", Path(tmp) / "fm", codec="raw",
                 progress=False)
    workloads.ensure(False, ["A"], log=lambda *_: None)
    a = workloads.data_dir(False)
    a = {"image": Dataset.write(Path(tmp) / "a", np.load(a / "A.npy", mmap_mode="r"),
                                codec="raw", durable=False),
         "label": Dataset.write(Path(tmp) / "a-label", np.load(a / "A-labels.npy"),
                                codec="raw", durable=False)}
    return {"Fashion-MNIST (784 B)": dict(fm), "A (12 KiB)": a}


def with_int32_stream(table, tmp):
    """`table` and a third stream of int32 zeros, as long as its others."""
    from loaderx import Dataset

    n = len(table["label"])
    extra = Dataset.write(Path(tmp) / f"int32-{n}", np.zeros(n, np.int32), codec="raw",
                          durable=False)
    return dict(table, int32=extra)


def features(table, seconds, rounds, tmp):
    from loaderx import DataLoader, Mixture

    three = with_int32_stream(table, tmp)

    common = dict(batch_size=256, mode=2, seed=1, num_workers=2)
    configs = {
        "plain": lambda: DataLoader(table, **common),
        "mixture, exact": lambda: DataLoader(Mixture([table, table], [0.5, 0.5]), **common),
        "mixture, drawn": lambda: DataLoader(
            Mixture([table, table], [0.5, 0.5], proportions="drawn"), **common),
        "finite pass": lambda: DataLoader(table, epochs=1000, **common),
        "plain + an int32 stream": lambda: DataLoader(three, **common),
    }
    runs = {name: [] for name in configs}
    for _ in range(rounds):
        for name, make in configs.items():
            with make() as loader:
                runs[name].append(timed(loader, seconds))
    return {name: statistics.median(r) for name, r in runs.items()}


def real_lengths(limit):
    """Blocks of the standard library's sources, cut at blank lines: bytes."""
    lengths = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        try:
            text = path.read_bytes()
        except OSError:
            continue
        for block in text.split(b"\n\n"):
            if block.strip():
                lengths.append(min(len(block), ROW))
        if len(lengths) >= limit:
            break
    return np.array(lengths[:limit], dtype=np.uint32)


def ours_padding(lengths, method, window):
    from loaderx._native import pack

    used = rows = 0
    for at in range(0, len(lengths), window):
        placed = pack(lengths[at:at + window], ROW, method, "split")
        rows += int(placed["rows"])
        used += int(placed["length"].sum())
    return 1 - used / (rows * ROW)


def grain_packer(kind, samples, bins):
    import grain
    import grain.experimental as ge

    ds = grain.MapDataset.source(samples).to_iter_dataset()
    cls = ge.FirstFitPackIterDataset if kind == "first-fit" else ge.BestFitPackIterDataset
    return cls(ds, length_struct={"tokens": ROW}, num_packing_bins=bins, shuffle_bins=False)


def grain_padding(kind, samples, bins):
    used = rows = 0
    for packed in grain_packer(kind, samples, bins):
        seg = packed["tokens_segment_ids"]
        used += int((seg > 0).sum())
        rows += 1
    return 1 - used / (rows * ROW)


def packing(tmp, lengths, seconds):
    from loaderx import PackedLoader, RaggedDataset

    rng = np.random.default_rng(0)
    samples = [{"tokens": rng.integers(0, 256, n, dtype=np.int32)} for n in lengths]
    padding = {}
    for method in ("first-fit", "best-fit"):
        for window in (256, 1024, 4096):
            padding[f"ours, {method}, window {window}"] = ours_padding(lengths, method, window)
    grain_error = None
    try:
        for kind in ("first-fit", "best-fit"):
            for bins in (64, 256, 1024):
                padding[f"Grain {kind}, {bins} bins"] = grain_padding(kind, samples, bins)
    except Exception as e:  # Grain missing or changed: say so, keep ours
        grain_error = f"{type(e).__name__}: {e}"
    tokens = RaggedDataset.write(Path(tmp) / "tokens", [s["tokens"] for s in samples],
                                 codec="raw")
    speed = {}
    with PackedLoader(tokens, ROW, batch_size=64, window=1024, mode=0,
                      num_workers=1) as loader:
        next(loader)
        c0, t0, n = cpu_seconds(), time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            n += int((next(loader)["segment_ids"] > 0).sum())
        speed["ours, PackedLoader first-fit (from the store)"] = n / (cpu_seconds() - c0)
    tokens.close()
    if grain_error is None:
        it = iter(grain_packer("first-fit", samples, 64))
        c0, t0, n = cpu_seconds(), time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            try:
                n += int((next(it)["tokens_segment_ids"] > 0).sum())
            except StopIteration:
                break
        speed["Grain FirstFitPackIterDataset, 64 bins (from memory)"] = n / (cpu_seconds() - c0)
    return padding, speed, grain_error


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--samples", type=int, default=100_000)
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-training"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory(dir=BENCH / "out") as tmp:
        speeds = {name: features(t, args.seconds, args.rounds, tmp)
                  for name, t in tables(tmp).items()}
        lengths = real_lengths(args.samples)
        padding, packing_speed, grain_error = packing(tmp, lengths, args.seconds)
    results = {"loader": speeds, "padding": padding, "packing_speed": packing_speed,
               "lengths": {"samples": len(lengths), "mean": float(lengths.mean()),
                           "median": float(np.median(lengths)), "row": ROW},
               "grain_error": grain_error, "command": "bash bench/run.sh training",
               "cores": os.cpu_count()}
    report(results, args)


def report(r, args):
    lines = [
        "# Training-run features: throughput and packing",
        "",
        "Generated by `bash bench/run.sh training` (bench/training_bench.py); rerun it rather "
        "than edit.",
        "",
        f"## Throughput against the plain loader (median of {args.rounds} rounds of "
        f"{args.seconds:g} s)",
        "",
        "Raw stores, batch 256, shuffled, 2 workers, a trivial consumer. The mixture mixes "
        "the data with itself, two sources of its length. The last row of each is the plain "
        "loader with a third stream of int32 values: what the mixture's `source` stream "
        "adds to each batch.",
        "",
        "| data | loader | samples/s | / plain (target ≥ 0.95×) |",
        "|---|---|---|---|",
    ]
    for data, runs in r["loader"].items():
        for name, v in runs.items():
            lines.append(f"| {data} | {name} | {v:,.0f} | {v / runs['plain']:.2f}× |")
    L = r["lengths"]
    lines += [
        "",
        "## Packing: padding on real lengths",
        "",
        f"{L['samples']:,} blocks of the Python standard library's sources (cut at blank "
        f"lines), one byte a token: mean {L['mean']:.0f}, median {L['median']:.0f} tokens; "
        f"rows of {L['row']} (longer blocks cut to a row). Padding: padding tokens over all "
        "row tokens.",
        "",
        "| packer | padding |",
        "|---|---|",
    ]
    for name, v in r["padding"].items():
        lines.append(f"| {name} | {100 * v:.2f} % |")
    if r["grain_error"]:
        lines.append(f"\nGrain could not run: {r['grain_error']}")
    lines += ["", "## Packing speed (tokens per CPU second: per core)", "",
              "| packer | tokens / CPU s |", "|---|---|"]
    for name, v in r["packing_speed"].items():
        lines.append(f"| {name} | {v:,.0f} |")
    speeds = list(r["packing_speed"].values())
    if len(speeds) == 2:
        lines.append(f"\nOurs / Grain's first-fit: {speeds[0] / speeds[1]:.1f}× "
                     "(target ≥ 2×); ours per core: "
                     f"{speeds[0] / 1e6:.1f} M tokens/s (target ≥ 1 M).")
    write_report(Path(args.out), "\n".join(lines) + "\n", r)


if __name__ == "__main__":
    sys.exit(main())
