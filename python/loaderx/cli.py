"""The ``loaderx`` command (also ``python -m loaderx``): convert, info,
verify, compact and bench, on a table or a single dataset.

Bad input (a missing path, an unreadable file, a damaged store) is one line
on stderr, ``loaderx: error: ...``, and exit status 1; a usage error exit
status 2. Long work shows a progress bar on a terminal and nothing in a
pipe; ``--quiet`` silences it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import __version__
from ._native import ZrecordError
from .table import Table, open_path


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line `argv` (default: ``sys.argv[1:]``); returns the
    exit status."""
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (OSError, ValueError, TypeError, KeyError, ZrecordError) as e:
        message = str(e) if not isinstance(e, KeyError) else str(e.args[0])
        print(f"loaderx: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("loaderx: interrupted", file=sys.stderr)
        return 130


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loaderx", description="loaderx stores and tables")
    p.add_argument("--version", action="version", version=f"loaderx {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("convert", help="convert npy/npz/IDX/Parquet/Arrow files, image "
                       "folders, Hugging Face datasets or WebDataset shards")
    c.add_argument("src", type=Path)
    c.add_argument("dst", type=Path)
    c.add_argument("--from", dest="source",
                   choices=["npy", "npz", "idx", "images", "parquet", "arrow", "hf", "webdataset"],
                   help="the kind of SRC (detected when omitted)")
    c.add_argument("--codec", default="flate",
                   choices=["raw", "flate", "lz4", "zstd", "zstd-dict"])
    c.add_argument("--level", type=int, default=None,
                   help="the codec's level (flate 1-12, zstd up to 22)")
    c.add_argument("--image-size", type=image_size, metavar="HxW",
                   help="decode images to HxW RGB instead of keeping their bytes")
    c.add_argument("--max-side", type=int, default=None, metavar="N",
                   help="re-encode images as JPEGs no larger than N on either side")
    c.add_argument("--quality", type=int, default=None, metavar="Q",
                   help="re-encode images as JPEGs of quality Q (1-95; default 90)")
    c.add_argument("--checksums", action=argparse.BooleanOptionalAction, default=None,
                   help="keep per-record checksums (the default)")
    c.add_argument("--workers", type=int, default=None, help="image reading threads")
    c.add_argument("--shard-rows", type=int, default=None, metavar="N",
                   help="write a sharded table, shards of at most N rows")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.set_defaults(run=run_convert)

    i = sub.add_parser("info", help="streams, kinds, shapes, rows, bytes, checksums")
    i.add_argument("path", type=Path)
    i.add_argument("--json", action="store_true", help="print JSON")
    i.set_defaults(run=run_info)

    v = sub.add_parser("verify", help="decode every record and check its checksum")
    v.add_argument("path", type=Path)
    v.set_defaults(run=run_verify)

    k = sub.add_parser("compact", help="reclaim the space deletes left")
    k.add_argument("path", type=Path)
    k.set_defaults(run=run_compact)

    b = sub.add_parser("bench", help="gather and loader throughput on this machine")
    b.add_argument("path", type=Path)
    b.add_argument("--batch-size", type=int, default=256)
    b.add_argument("--seconds", type=float, default=2.0)
    b.set_defaults(run=run_bench)
    return p


def image_size(text: str) -> tuple[int, int]:
    try:
        h, w = (int(x) for x in text.lower().split("x"))
        if h > 0 and w > 0:
            return h, w
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text!r} is not a size HxW such as 224x224")


# -- commands -------------------------------------------------------------------


def run_convert(args: argparse.Namespace) -> int:
    from .convert import convert

    started = time.perf_counter()
    with convert(args.src, args.dst, source=args.source, codec=args.codec, level=args.level,
                 image_size=args.image_size, max_side=args.max_side, quality=args.quality,
                 checksums=args.checksums, workers=args.workers, shard_rows=args.shard_rows,
                 progress=False if args.quiet else None) as table:
        if not args.quiet:
            print(f"{args.dst}: {table.rows} rows, streams "
                  f"{', '.join(f'{n} ({k})' for n, k in table.kinds.items())} "
                  f"in {time.perf_counter() - started:.1f} s")
    return 0


def streams_of(path: Path) -> tuple[Any, dict[str, Any]]:
    """What `path` holds, and its streams by name (a single dataset is one
    stream named after its directory)."""
    opened = open_path(path, read_only=True)
    if isinstance(opened, Table):
        return opened, dict(opened)
    return opened, {path.name: opened}


def store_paths(ds: Any) -> list[Path]:
    """Every store of the dataset `ds`: its one or two (ragged), or each
    shard of its collections."""
    paths = []
    for records in ds._stores():
        shards = getattr(records, "shards", None)  # a Collection
        paths += ([Path(records.path) / name for name in shards] if shards is not None
                  else [Path(records.path)])
    return paths


def each_store(ds: Any, run: Any) -> list[Any]:
    """`run(store)` on every store of `ds`, each opened read-only."""
    from ._native import Zrecord

    results = []
    for path in store_paths(ds):
        with Zrecord(path, create=False, read_only=True) as store:
            results.append(run(store))
    return results


def describe(name: str, ds: Any) -> dict[str, Any]:
    """One stream's line of ``info``."""
    stores = ds._stores()
    stats = each_store(ds, lambda s: s.stats())
    n = len(ds)
    logical = int(stores[0].lengths(np.arange(len(stores[0]), dtype=np.uint64)).sum())
    d: dict[str, Any] = {"stream": name, "kind": type(ds).__name__, "rows": n}
    if hasattr(ds, "shape"):
        d["dtype"], d["shape"] = str(ds.dtype), list(ds.shape)
    elif hasattr(ds, "ndim"):
        d["dtype"], d["ndim"] = str(ds.dtype), ds.ndim
    else:
        d["items"] = ds.kind
    stored = sum(s["live_bytes"] for s in stats)
    d.update({
        "codec": ds.codec,
        "logical_bytes": logical,
        "stored_bytes": stored,
        "disk_bytes": sum(s["chunk_bytes"] for s in stats),
        "reclaimable_bytes": sum(s["reclaimable"] for s in stats),
        "ratio": round(stored / logical, 3) if logical else None,
        "checksums": all((p / "checksums.zr").is_file() for p in store_paths(ds)),
    })
    return d


def run_info(args: argparse.Namespace) -> int:
    opened, streams = streams_of(args.path)
    with opened:
        info: dict[str, Any] = {"path": str(args.path), "streams": [
            describe(name, ds) for name, ds in streams.items()]}
        if isinstance(opened, Table):
            info.update(table=True, rows=opened.rows, classes=opened.classes,
                        source=opened.source)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    what = f"table, {info['rows']} rows" if info.get("table") else "dataset"
    print(f"{args.path}: {what}")
    for s in info["streams"]:
        layout = (f"{s['dtype']}{tuple(s['shape'])}" if "shape" in s
                  else f"{s['dtype']}, ndim {s['ndim']}" if "ndim" in s else s["items"])
        ratio = f"{s['ratio']:.2f}" if s["ratio"] is not None else "-"
        print(f"  {s['stream']}: {s['kind']} {layout}, {s['rows']} rows, codec {s['codec']}, "
              f"{mb(s['logical_bytes'])} logical, {mb(s['stored_bytes'])} stored "
              f"(ratio {ratio}), {mb(s['disk_bytes'])} on disk, "
              f"{mb(s['reclaimable_bytes'])} reclaimable, "
              f"checksums {'yes' if s['checksums'] else 'no'}")
    if info.get("classes"):
        for name, classes in info["classes"].items():
            print(f"  classes of {name}: {', '.join(classes)}")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    opened, streams = streams_of(args.path)
    bad = 0
    with opened:
        for name, ds in streams.items():
            for path, report in zip(store_paths(ds), each_store(ds, lambda s: s.verify())):
                bad += len(report["bad"])
                note = "" if report["checksummed"] else ", no checksums (decoded only)"
                if report["unchecked"]:
                    note += f", {report['unchecked']} written by a program without checksums"
                print(f"{name} ({path}): {report['records']} records, "
                      f"{len(report['bad'])} bad{note}")
                for b in report["bad"]:
                    print(f"  record {b['index']} (chunk {b['chunk']}, offset {b['offset']}): "
                          f"{b['reason']}")
    return 1 if bad else 0


def run_compact(args: argparse.Namespace) -> int:
    from ._native import Zrecord

    opened, streams = streams_of(args.path)
    paths = [path for ds in streams.values() for path in store_paths(ds)]
    opened.close()
    for path in paths:
        with Zrecord(path, create=False) as store:
            before = store.stats()["chunk_bytes"]
            store.compact()
            print(f"{path}: {mb(before)} -> {mb(store.stats()['chunk_bytes'])}")
    return 0


def run_bench(args: argparse.Namespace) -> int:
    from .dataloader import DataLoader

    opened, streams = streams_of(args.path)
    with opened:
        n = len(next(iter(streams.values())))
        if n == 0:
            raise ValueError(f"{args.path}: holds no rows to read")
        rng = np.random.default_rng(0)
        for name, ds in streams.items():
            batches, nbytes, t0 = 0, 0, time.perf_counter()
            while time.perf_counter() - t0 < args.seconds:
                got = ds.__getitems__(rng.integers(0, n, args.batch_size))
                nbytes += got.nbytes if isinstance(got, np.ndarray) else sum(
                    len(x) if isinstance(x, (bytes, str)) else x.nbytes for x in got)
                batches += 1
            dt = time.perf_counter() - t0
            print(f"{name}: gather {batches / dt:,.1f} batches/s, {nbytes / dt / 1e6:,.0f} MB/s")
        with DataLoader(streams, batch_size=min(args.batch_size, n), mode=2) as loader:
            next(loader)
            batches, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < args.seconds:
                next(loader)
                batches += 1
            dt = time.perf_counter() - t0
        print(f"DataLoader (all streams): {batches / dt:,.1f} batches/s of {args.batch_size}")
    return 0


def mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"
