"""One benchmark job of one system, in its own process; prints one JSON result.

    python bench/worker.py --job store  --system ours --codec lz4 --workload A
    python bench/worker.py --job loader --system ref050 --codec raw --workload B
    .ref050-venv/bin/python bench/worker.py --job open24 --system ref050

Jobs:
  store   write MB/s (repeated on a bounded prefix), the full store, bytes on
          disk, open time, a bit-exact check against the source, then warm
          and cold random-batch gathers. Leaves the store for the loader jobs.
  loader  loaderx.DataLoader batches/s with a trivial consumer, and the peak
          RSS of the process (ours and 0.5.0).
  bare    a plain `for` over Dataset.__getitems__ of data and labels at the
          same batch size: what the DataLoader is measured against; also
          the same loop keeping the previous batch alive.
  build24 build the store of 2^24 one-byte records (ours, cached).
  open24  open time of that store.

The last stdout line is `RESULT {json}`. The harness (bench/harness.py) runs
this with bench/.venv's python, or .ref050-venv's for --system ref050.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import common  # noqa: E402
from common import BATCH, emit  # noqa: E402

TINY_N = 1 << 24


def rm(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def load_system(name: str, **kw):
    from systems import MODULES
    mod = importlib.import_module(f"systems.{MODULES[name]}")
    sysobj = mod.System(name, **kw)
    if name in ("ours", "ours_unchecked", "ref050"):
        import importlib.metadata as md
        v = md.version("loaderx")
        # Never let one loaderx stand in for the other.
        if (name == "ref050") != (v == "0.5.0"):
            raise RuntimeError(f"--system {name} but this interpreter has loaderx {v}")
    return sysobj


def store_base(args) -> Path:
    tag = args.system + (f"-{args.codec}" if args.system in ("ours", "ref050") else "")
    return Path(args.stores) / args.workload / tag


def mb_s(batches_s: float, sample_bytes: int) -> float:
    return batches_s * BATCH * sample_bytes / 1e6


def gather_stats(run: dict, sample_bytes: int) -> dict:
    run = dict(run)
    run["mb_s"] = mb_s(run["batches_s"], sample_bytes)
    run["records_s"] = run["batches_s"] * BATCH
    run.pop("next", None)
    return run


# -- store ----------------------------------------------------------------------

def job_store(args) -> dict:
    meta = common.load_meta(args.quick)[args.workload]
    src = common.source(args.quick, args.workload)
    n, shape, dtype = len(src), src.shape[1:], src.dtype
    sample_bytes = meta["sample_bytes"]
    res = {"status": "ok", "n": n, "sample_bytes": sample_bytes}
    sysobj = load_system(args.system, codec=args.codec, durable=True)
    res["version"] = sysobj.version()
    base = store_base(args)
    base.parent.mkdir(parents=True, exist_ok=True)
    store = store_of(args, sysobj)
    if args.system != "numpy_ram":
        rm(store)

    # 1. Writes. Repeated on a prefix of at most --write-cap bytes (all of A,
    #    C and D; 20 % of B), so that every system writes the same bytes.
    k = min(n, max(1, args.write_cap // sample_bytes))
    res["write_records"] = k
    res["write_bytes"] = k * sample_bytes
    common.prewarm(common.data_dir(args.quick) / f"{args.workload}.npy")
    modes = [True, False] if args.system == "ours" else [None]
    writes = {str(m): [] for m in modes}
    kept = None
    if args.system != "numpy_ram":
        for r in range(args.repeats):
            for durable in modes:
                if durable is not None:
                    sysobj.durable = durable
                p = sysobj.store_path(base.with_name(f"{base.name}-w{r}-{durable}"))
                rm(p)
                t0 = time.perf_counter()
                sysobj.write(p, src[:k])
                dt = time.perf_counter() - t0
                writes[str(durable)].append(k * sample_bytes / dt / 1e6)
                if kept is not None:
                    rm(kept)
                kept = p
        res["write_mb_s_runs"] = writes
        res["write_mb_s"] = {m: common.median(v) for m, v in writes.items()}
        # 2. The store the reads use: the last prefix write when it was everything.
        if k == n:
            os.replace(kept, store)
        else:
            rm(kept)
            if args.system == "ours":
                sysobj.durable = False
            t0 = time.perf_counter()
            sysobj.write(store, src)
            res["full_write_s"] = time.perf_counter() - t0
    res["store"] = str(store)
    res["disk_bytes"] = common.disk_bytes(store)

    # 3. Open time (warm: the store was just written or read).
    opens = []
    for _ in range(args.open_repeats):
        t0 = time.perf_counter()
        got_n = sysobj.open(store)
        opens.append(time.perf_counter() - t0)
        sysobj.close()
    res["open_ms"] = common.median(opens) * 1e3
    if got_n != n:
        return {**res, "status": f"FAILED: store holds {got_n} records, source {n}"}

    def reopen():
        open_store(sysobj, store, dtype, shape)

    # 4. Bit-exact check against the source before anything is timed.
    reopen()
    check = common.index_pool(n, args.verify_batches, seed=7)
    check[0, :2] = [0, n - 1]
    for idxs in check:
        got = np.asarray(sysobj.gather(idxs))
        want = src[idxs]
        if got.shape != want.shape or got.dtype != want.dtype or not np.array_equal(got, want):
            sysobj.close()
            return {**res, "status": f"FAILED: gather differs from the source "
                                     f"(got {got.dtype}{got.shape}, want {want.dtype}{want.shape})"}
    res["verified_batches"] = len(check)

    sysobj.close()
    gc.collect()

    # 5. Warm gathers are the gather job's, which the harness runs in rounds.
    # 6. Cold gathers: close, drop the store's pages, reopen, gather.
    pool, pos = common.index_pool(n, 4096, seed=42), 0
    if args.system != "numpy_ram" and not args.no_cold:
        cold = []
        for _ in range(args.repeats):
            sysobj.close()
            gc.collect()
            common.drop_cache(store)
            resident = common.resident_fraction(store)
            t0 = time.perf_counter()
            reopen()
            open_cold = time.perf_counter() - t0
            run = gather_stats(common.timed_loop(sysobj.gather, pool, args.cold_seconds,
                                                 start=pos), sample_bytes)
            pos += run["batches"]
            run["resident_before"] = resident
            run["open_ms"] = open_cold * 1e3
            cold.append(run)
        res["cold_runs"] = cold
        sysobj.close()
    return res


def store_of(args, sysobj) -> Path:
    """Where the store job leaves a system's store of the workload (numpy in
    RAM reads the source file itself)."""
    if args.system == "numpy_ram":
        return common.data_dir(args.quick) / f"{args.workload}.npy"
    return sysobj.store_path(store_base(args))


def open_store(sysobj, store: Path, dtype, shape) -> None:
    sysobj.open(store)
    if hasattr(sysobj, "set_layout"):
        sysobj.set_layout(dtype, shape)


def job_gather(args) -> dict:
    """One warm gather run of the store the store job left: every store byte
    in the page cache, a warm-up, then --seconds of timed batches. The
    harness runs it for every system in turn, --repeats rounds, so that the
    runs a ratio compares are interleaved over the same minutes."""
    meta = common.load_meta(args.quick)[args.workload]
    src = common.source(args.quick, args.workload)
    sysobj = load_system(args.system, codec=args.codec)
    store = store_of(args, sysobj)
    common.prewarm(store)
    open_store(sysobj, store, src.dtype, src.shape[1:])
    pool = common.index_pool(len(src), 4096, seed=42)
    warmup = common.timed_loop(sysobj.gather, pool, args.warmup)
    run = common.timed_loop(sysobj.gather, pool, args.seconds, start=warmup["next"])
    sysobj.close()
    return {"status": "ok", "run": gather_stats(run, meta["sample_bytes"])}


# -- loader / bare ----------------------------------------------------------------

def _open_pair(args):
    import loaderx
    load_system(args.system)  # the version check
    base = store_base(args)
    data = base.with_suffix(".zr")
    labels = base.with_name(base.name + "-labels").with_suffix(".zr")
    if not (labels / "schema.json").is_file():
        rm(labels)
        lab = np.load(common.labels_path(args.quick, args.workload))
        ds = loaderx.Dataset.write(str(labels), lab, codec="raw")
        if hasattr(ds, "close"):
            ds.close()
    return loaderx, loaderx.Dataset(str(data)), loaderx.Dataset(str(labels)), data


def _check_batches(args, batches) -> str | None:
    """Checks (data, label) pairs against the source: label is the sample index
    for A-C; for D (real labels) the image must be a source image with that label."""
    src = common.source(args.quick, args.workload)
    labels = np.load(common.labels_path(args.quick, args.workload))
    by_row = None
    for data, label in batches:
        if data.shape != (BATCH, *src.shape[1:]) or data.dtype != src.dtype:
            return f"batch is {data.dtype}{data.shape}"
        if labels.dtype == np.int64:  # index labels
            if not np.array_equal(data, src[np.asarray(label, dtype=np.int64)]):
                return "data differs from the source rows its labels name"
        else:
            if by_row is None:
                by_row = {}
                flat = np.ascontiguousarray(src).reshape(len(src), -1)
                for i in range(len(src)):
                    by_row.setdefault(flat[i].tobytes(), set()).add(int(labels[i]))
            for row, lab in zip(data.reshape(len(data), -1), label):
                if int(lab) not in by_row.get(row.tobytes(), ()):
                    return "a (data, label) pair is not a (sample, label) pair of the source"
    return None


def _dataloader(loaderx, ds, ls, args):
    return loaderx.DataLoader(ds, ls, num_workers=args.workers, batch_size=BATCH,
                              prefetch_size=args.prefetch)


def _pull(it, seconds: float) -> None:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        next(it)


def _timed_pull(it, seconds: float, sample_bytes: int) -> dict:
    """Pulls batches for `seconds` with a trivial consumer, which keeps each
    batch until it has the next, as a training step does."""
    count = 0
    t0 = time.perf_counter()
    while True:
        b = next(it)
        b["data"].shape  # the trivial consumer
        count += 1
        dt = time.perf_counter() - t0
        if dt >= seconds:
            break
    del b
    return {"batches": count, "seconds": dt, "batches_s": count / dt,
            "mb_s": mb_s(count / dt, sample_bytes)}


def job_loader(args) -> dict:
    loaderx, ds, ls, data_path = _open_pair(args)
    sample_bytes = ds._itemsize
    label_bytes = ls._itemsize
    common.prewarm(data_path)
    res = {"status": "ok", "version": f"loaderx {loaderx.__version__}",
           "num_workers": args.workers, "prefetch": args.prefetch,
           "batch_bytes": BATCH * (sample_bytes + label_bytes)}
    loader = _dataloader(loaderx, ds, ls, args)
    sampler = common.RssSampler()
    it = iter(loader)
    first = next(it)
    if first["data"].shape != (BATCH, *ds.shape):
        return {**res, "status": f"FAILED: batch shape {first['data'].shape}"}
    del first
    _pull(it, args.warmup)
    res["runs"] = [_timed_pull(it, args.seconds, sample_bytes) for _ in range(args.repeats)]
    res["peak_rss_mib"] = common.peak_rss_mib()  # before the check touches the source
    res["rss_peaks"] = sampler.stop()
    batches = [(b["data"], b["label"]) for b in (next(it), next(it))]
    err = _check_batches(args, batches)
    if err:
        res["status"] = f"FAILED: {err}"
    if args.system == "ours":
        loader.close()
    # loaderx 0.5.0's close() can block on a full queue; its threads are daemons,
    # so the worker just exits (emit() flushes first).
    return res


def job_bare(args) -> dict:
    loaderx, ds, ls, data_path = _open_pair(args)
    sample_bytes = ds._itemsize
    common.prewarm(data_path)
    pool = common.index_pool(len(ds), 4096, seed=43)
    idx0 = pool[0]
    err = _check_batches(args, [(ds.__getitems__(idx0), ls.__getitems__(idx0))])
    if err:
        return {"status": f"FAILED: {err}"}

    def step(idxs):
        ds.__getitems__(idxs)
        ls.__getitems__(idxs)

    # The same loop keeping the previous batch alive while it gathers the
    # next, as a consumer of any prefetching loader does: then two batches'
    # memory alternates instead of one buffer being rewritten while cached.
    kept = [None]

    def step_kept(idxs):
        kept[0] = (ds.__getitems__(idxs), ls.__getitems__(idxs))

    run = common.timed_loop(step, pool, args.warmup)
    pos = run["next"]
    runs, kept_runs, dl_runs = [], [], []
    for _ in range(args.repeats):
        for fn, out in ((step, runs), (step_kept, kept_runs)):
            run = common.timed_loop(fn, pool, args.seconds, start=pos)
            pos = run["next"]
            out.append(gather_stats(run, sample_bytes))
        kept[0] = None
        if args.system == "ours":
            dl_runs.append(_dataloader_run(loaderx, ds, ls, args, sample_bytes))
    res = {"status": "ok", "version": f"loaderx {loaderx.__version__}", "runs": runs,
           "kept_runs": kept_runs, "peak_rss_mib": common.peak_rss_mib(),
           "rss_now": common.rss_now()}
    if dl_runs:
        res["dl_runs"] = dl_runs
    return res


def _dataloader_run(loaderx, ds, ls, args, sample_bytes) -> dict:
    """One timed DataLoader run after a bare and a kept one (the DataLoader /
    bare target): a ratio of two figures taken seconds apart in one process does
    not move with the load of a shared machine as figures of two processes
    a minute apart do. A fresh loader, closed after, so that the bare loops
    run with no loader alive."""
    loader = _dataloader(loaderx, ds, ls, args)
    it = iter(loader)
    _pull(it, args.warmup)
    run = _timed_pull(it, args.seconds, sample_bytes)
    loader.close()
    return run


# -- the 2^24-record store ---------------------------------------------------------

def tiny_path() -> Path:
    return common.OUT / "data" / "tiny24.zr"


def job_build24(args) -> dict:
    import loaderx
    path = tiny_path()
    done = path / ".complete"
    if done.is_file():
        return {"status": "ok", "cached": True}
    rm(path)
    t0 = time.perf_counter()
    z = loaderx.Zrecord(str(path), "raw")
    src = (np.arange(TINY_N, dtype=np.uint64) & 0xFF).astype(np.uint8)
    z.append(src, TINY_N, 1, durable=True)
    z.close()
    done.write_text("2^24 x 1 byte, record i = i & 0xFF\n")
    return {"status": "ok", "cached": False, "build_s": time.perf_counter() - t0}


def job_open24(args) -> dict:
    import loaderx
    load_system(args.system)
    path = tiny_path()
    ours = args.system == "ours"

    def open_():
        return loaderx.Zrecord(str(path), "raw", create=False) if ours else loaderx.Zrecord(str(path), "raw")

    def close(z):
        if hasattr(z, "close"):
            z.close()
        else:
            del z  # 0.5.0 closes in __del__ (if at all)

    z = open_()
    if len(z) != TINY_N:
        return {"status": f"FAILED: {len(z)} records, want {TINY_N}"}
    idxs = np.array([0, 1, 255, 256, TINY_N - 1, 12345678], dtype=np.uint64)
    out = np.empty(len(idxs), dtype=np.uint8)
    z.gather(idxs, out, 1)
    if not np.array_equal(out, (idxs & 0xFF).astype(np.uint8)):
        return {"status": "FAILED: records differ"}
    close(z)
    warm = []
    for _ in range(max(5, args.open_repeats)):
        t0 = time.perf_counter()
        z = open_()
        len(z)
        warm.append(time.perf_counter() - t0)
        close(z)
        gc.collect()
    cold = []
    for _ in range(args.repeats):
        common.drop_cache(path)
        t0 = time.perf_counter()
        z = open_()
        len(z)
        cold.append(time.perf_counter() - t0)
        close(z)
        gc.collect()
    return {"status": "ok", "version": f"loaderx {loaderx.__version__}",
            "open_ms_runs": [w * 1e3 for w in warm], "cold_open_ms_runs": [c * 1e3 for c in cold],
            "open_ms": common.median(warm) * 1e3, "cold_open_ms": common.median(cold) * 1e3}


JOBS = {"store": job_store, "gather": job_gather, "loader": job_loader, "bare": job_bare,
        "build24": job_build24, "open24": job_open24}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--job", choices=sorted(JOBS), required=True)
    p.add_argument("--system", required=True)
    p.add_argument("--codec", default="raw")
    p.add_argument("--workload", default="A")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--stores", default=str(common.OUT / "stores"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2.0, help="timed gather seconds per run")
    p.add_argument("--cold-seconds", type=float, default=1.0)
    p.add_argument("--no-cold", action="store_true")
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--write-cap", type=int, default=320 << 20)
    p.add_argument("--open-repeats", type=int, default=5)
    p.add_argument("--verify-batches", type=int, default=4)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--prefetch", type=int, default=4)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    try:
        res = JOBS[args.job](args)
    except Exception as e:  # reported, not hidden
        res = {"status": f"ERROR: {type(e).__name__}: {e}",
               "traceback": traceback.format_exc()[-2000:]}
    res["job_s"] = time.perf_counter() - t0
    res["load_end"] = os.getloadavg()
    emit(res)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
