"""A sharded table of many small shards, loaded shuffled: time a step and
the memory the process holds, under the open-file limit it is given.

    python bench/many_shards.py SHARDS [--rows-per-shard 16] [--files N]
                                [--steps 250] [--rounds 3] [--dir PATH]

Writes (once, kept in --dir, default bench/out/many-shards-SHARDS) a table
of two fixed streams (`x`: 8 float32, `y`: int64), `rows-per-shard` rows a
shard, and loads it with a DataLoader (batches of 256, shuffled), after
lowering this process's soft limit on open files to --files if given.
Prints the milliseconds a step of each round (after one round of warm-up),
their median, and the process's resident memory (now and at its peak).
Each stream is a collection of SHARDS stores; see bench/README.md, "Sharded
collections", for what the open-file limit does to them.
"""

from __future__ import annotations

import argparse
import pathlib
import resource
import statistics
import time

import numpy as np


def memory_mib() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in MiB."""
    found = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) // 1024
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shards", type=int)
    parser.add_argument("--rows-per-shard", type=int, default=16)
    parser.add_argument("--files", type=int, help="soft limit on open files")
    parser.add_argument("--steps", type=int, default=250, help="steps a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=pathlib.Path)
    args = parser.parse_args()
    if args.files:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.files, hard))
    # After the limit: loaderx reads it when a collection first opens a shard.
    from loaderx import DataLoader, Sampler, Table

    path = args.dir or pathlib.Path(__file__).parent / "out" / f"many-shards-{args.shards}"
    rows = args.shards * args.rows_per_shard
    if not (path / "table.json").exists():
        y = np.arange(rows, dtype=np.int64)
        x = (y[:, None] * 8 + np.arange(8)).astype(np.float32)
        start = time.perf_counter()
        Table.write(path, {"x": x, "y": y}, shard_rows=args.rows_per_shard, codec="raw")
        print(f"wrote {args.shards} shards of {args.rows_per_shard} rows in "
              f"{time.perf_counter() - start:.1f} s")
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    loader = DataLoader(Table(path), batch_size=256, mode=Sampler.Mode.SHUFFLE, seed=0)
    batches = iter(loader)
    per_step = []
    for round_ in range(args.rounds + 1):
        start = time.perf_counter()
        for _ in range(args.steps):
            batch = next(batches)
        if round_:  # the first round warms up
            per_step.append((time.perf_counter() - start) / args.steps * 1e3)
        assert np.array_equal(batch["x"][:, 0], batch["y"] * 8), "rows out of step"
    loader.close()
    print(f"{args.shards} shards x 2 streams, open-file limit {limit}: "
          f"{', '.join(f'{t:.2f}' for t in per_step)} ms a step "
          f"(median {statistics.median(per_step):.2f}); memory {memory_mib()} MiB")


if __name__ == "__main__":
    main()
