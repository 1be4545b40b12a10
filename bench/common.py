"""Measurement helpers shared by the harness and the per-system workers.

Only the standard library and NumPy: this module is imported by workers
running in bench/.venv *and* in .ref050-venv (loaderx 0.5.0), so it must not
pull in anything else.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import mmap
import os
import resource
import threading
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"

#: The batch size of every gather and loader measurement.
BATCH = 256

MIB = 1 << 20


# -- the datasets -------------------------------------------------------------

def data_dir(quick: bool) -> Path:
    return OUT / "data" / ("quick" if quick else "full")


def load_meta(quick: bool) -> dict:
    return json.loads((data_dir(quick) / "meta.json").read_text())


def source(quick: bool, workload: str) -> np.ndarray:
    """The source array of `workload`, memory-mapped read-only."""
    return np.load(data_dir(quick) / f"{workload}.npy", mmap_mode="r")


def labels_path(quick: bool, workload: str) -> Path:
    return data_dir(quick) / f"{workload}-labels.npy"


def index_pool(n: int, batches: int, seed: int) -> np.ndarray:
    """`batches` batches of BATCH uniform random indices in 0..n (int64),
    the same for every system given the same seed."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(batches, BATCH), dtype=np.int64)


# -- timing -------------------------------------------------------------------

def percentile_ms(lat: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(lat), q) * 1e3) if lat else float("nan")


def timed_loop(step, pool: np.ndarray, seconds: float, min_batches: int = 3,
               start: int = 0) -> dict:
    """Calls `step(idxs)` on successive batches of `pool` until `seconds` have
    passed (and at least `min_batches` ran); returns throughput and latency."""
    lat = []
    i = start
    t0 = time.perf_counter()
    now = t0
    while now - t0 < seconds or len(lat) < min_batches:
        idxs = pool[i % len(pool)]
        i += 1
        t = time.perf_counter()
        step(idxs)
        now = time.perf_counter()
        lat.append(now - t)
    elapsed = now - t0
    return {
        "batches": len(lat),
        "seconds": elapsed,
        "batches_s": len(lat) / elapsed,
        "p50_ms": percentile_ms(lat, 50),
        "p95_ms": percentile_ms(lat, 95),
        "p99_ms": percentile_ms(lat, 99),
        "next": i,
    }


def timed(loader, seconds: float, warmup: float = 0.3) -> float:
    """Samples per second through `loader`, an iterable of batch dicts with a
    `label` stream, for `seconds`. Its first batch and `warmup` seconds more
    go untimed: the first waits for the start-up while the workers fill their
    prefetch buffers, and the warm-up drains them, so the timing starts in
    the steady state instead of counting batches made before it."""
    it = iter(loader)
    next(it)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warmup:
        next(it)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        n += len(next(it)["label"])
    return n / (time.perf_counter() - t0)


def median(xs):
    xs = [x for x in xs if x is not None]
    return float(np.median(xs)) if xs else None


# -- files and the page cache -------------------------------------------------

def store_files(path: Path) -> list[Path]:
    """Every regular file of a store (a directory or a single file)."""
    path = Path(path)
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file())


def disk_bytes(path: Path) -> int:
    """Bytes really allocated on disk (st_blocks; loaderx 0.5.0's chunk files
    are 4 GiB sparse files, so st_size would mislead)."""
    return sum(os.stat(p).st_blocks * 512 for p in store_files(path))


def data_extents(fd: int, size: int):
    """The (start, end) byte ranges of a file that hold data, not holes."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole remains
            return
        end = os.lseek(fd, start, os.SEEK_HOLE)
        yield start, end
        pos = end


def prewarm(path: Path) -> None:
    """Reads every allocated byte of the store once, so its pages are in the
    page cache (holes of sparse files, e.g. loaderx's meta.zr and 0.5.0's
    4 GiB chunk files, are skipped)."""
    buf = bytearray(MIB)  # reused: the prewarm must not raise the peak RSS
    for p in store_files(path):
        fd = os.open(p, os.O_RDONLY)
        try:
            for start, end in data_extents(fd, os.fstat(fd).st_size):
                for off in range(start, end, MIB):
                    os.preadv(fd, [buf], off)
        finally:
            os.close(fd)


def drop_cache(path: Path) -> None:
    """Evicts the store's pages from the page cache: fsync (dirty pages cannot
    be dropped), then POSIX_FADV_DONTNEED on every file. Pages still mapped by
    a process stay, so close the system first."""
    for p in store_files(path):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


_libc = None


def resident_fraction(path: Path) -> float | None:
    """Fraction of the store's allocated pages in the page cache (mincore),
    to show that a cold pass really starts cold. None if it cannot be told."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        page = mmap.PAGESIZE
        resident = total = 0
        for p in store_files(path):
            size = os.path.getsize(p)
            if size == 0:
                continue
            alloc = os.stat(p).st_blocks * 512
            npages = (size + page - 1) // page
            vec_res = _mincore_file(p, size, npages)
            if vec_res is None:
                return None
            resident += vec_res
            total += min(npages, (alloc + page - 1) // page)
        return resident / total if total else None
    except Exception:
        return None


def _mincore_file(p: Path, size: int, npages: int) -> int | None:
    libc = _libc
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(p, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            vec = (ctypes.c_ubyte * npages)()
            if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                return None
            return int(np.frombuffer(vec, dtype=np.uint8).astype(bool).sum())
        finally:
            libc.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)


def peak_rss_mib() -> float:
    """Peak resident set size of this process: VmHWM, which starts afresh at
    exec (ru_maxrss does not: a worker would inherit the harness's peak)."""
    return rss_now().get("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_now() -> dict:
    """RssAnon / RssFile / RssShmem of this process now, in MiB (/proc/self/status):
    file-backed pages are mapped store pages, anonymous ones are buffers."""
    out = {}
    try:
        for line in open("/proc/self/status"):
            key = line.split(":", 1)[0]
            if key in ("RssAnon", "RssFile", "RssShmem", "VmHWM"):
                out[key] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return out


class RssSampler:
    """Samples rss_now() every `interval` seconds on a thread of its own and
    keeps each figure's peak: the kernel keeps only the total's (VmHWM), and
    the split tells buffers (anonymous) from mapped file pages."""

    def __init__(self, interval: float = 0.02):
        self.peak: dict = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            for key, value in rss_now().items():
                self.peak[key] = max(self.peak.get(key, 0.0), value)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        return self.peak


def emit(result: dict) -> None:
    """Prints the worker's result as the last stdout line, tagged."""
    print("RESULT " + json.dumps(result), flush=True)
