"""One pass-through configuration, timed with the CPU it costs: what
bench/README.md ("Transforms in processes") quotes.

    bench/.venv/bin/python bench/transform_micro.py MODE BATCH [WORKERS] [--map]

MODE is `none` (no transform), `thread` or `process` (`transform=identity`
on WORKERS transform threads or processes, 2 by default); with `--map`,
the per-sample `map=features` of bench/transform_bench.py instead (the
GIL-bound part of its report, which uses batches of 256). Reads the table
that `bash bench/run.sh transforms` converts (bench/out/transform-bench);
gathers shuffled batches of BATCH samples on 2 native workers for 1 s
untimed, then 3 s timed, and prints samples per second and the CPU time a
batch cost, this process's and its worker processes' together (and theirs
alone, and the consuming thread's: the one that calls next(), which with
processes packs and unpacks every batch). Alternate the modes a few times:
single runs move by ±10 %.
"""

import multiprocessing
import os
import sys
import threading
import time

import loaderx
from transform_bench import features

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", "transform-bench",
                     "fashion-mnist")


def identity(batch):
    return batch


def process_cpu(pid, task=None):
    """(user, system) CPU seconds of process `pid` (of its thread `task`),
    from /proc."""
    stat = f"/proc/{pid}/task/{task}/stat" if task else f"/proc/{pid}/stat"
    with open(stat) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds():
    """(this process's CPU seconds, its live children's, this thread's)."""
    children = sum(sum(process_cpu(child.pid)) for child in multiprocessing.active_children())
    consumer = sum(process_cpu(os.getpid(), threading.get_native_id()))
    return sum(os.times()[:2]), children, consumer


def main():
    args = [a for a in sys.argv[1:] if a != "--map"]
    mode, size = args[0], int(args[1])
    workers = int(args[2]) if len(args) > 2 else 2
    work = dict(map=features) if "--map" in sys.argv else dict(transform=identity)
    kw = {} if mode == "none" else dict(transform_workers=workers, transform_mode=mode, **work)
    with loaderx.DataLoader(loaderx.Table(TABLE, read_only=True), batch_size=size,
                            num_workers=2, mode=loaderx.Sampler.Mode.SHUFFLE, **kw) as loader:
        next(loader)
        t = time.perf_counter()
        while time.perf_counter() - t < 1:
            next(loader)
        own, children, consumer = cpu_seconds()
        n, t = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t) < 3:
            next(loader)
            n += 1
        own2, children2, consumer2 = cpu_seconds()
    total = (own2 - own + children2 - children) / n * 1e6
    print(f"{mode:8s} batch {size}: {n * size / elapsed:,.0f} samples/s, "
          f"CPU {total:.0f} µs a batch (worker processes {(children2 - children) / n * 1e6:.0f}, "
          f"consuming thread {(consumer2 - consumer) / n * 1e6:.0f})")


if __name__ == "__main__":
    main()
