"""Measurement and orchestration helpers shared by the benchmark scripts
(the harness, bench/*_bench.py) and the per-system workers.

Only the standard library and NumPy: this module is imported by workers
running in bench/.venv *and* in .ref050-venv (loaderx 0.5.0), so it must not
pull in anything else.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import mmap
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"
#: Fashion-MNIST's IDX files (scripts/fashion-mnist.sh installs them).
FASHION = Path(os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))

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


def children_peak_rss_mib() -> float:
    """The sum of the peak RSS (VmHWM) of this process's live descendants,
    found by their parent in /proc/*/stat (no /proc/PID/task/*/children on
    every kernel)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0.0, list(parents.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += parents.get(pid, [])
        try:
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("VmHWM"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


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


# -- the benchmark scripts: options, a process per run, rounds, the report ----

def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.2f}] {msg}", flush=True)


def versions(*dists: str) -> dict:
    """The versions of the packages `dists`, read without importing them
    (None for one not installed)."""
    from importlib import metadata

    out = {}
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def bench_args(doc: str, worker: str, job_timeout: int, report: str,
               rounds: int = 5) -> argparse.Namespace:
    """The parsed options of a script that runs each configuration in a
    process of its own, described by the first paragraph of its docstring
    `doc`: `worker` is the hidden flag naming the configuration a worker
    process runs; the timing settings not given are --quick's or a full
    run's (`rounds` rounds), and --out becomes the report's path stem."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one short round, into bench/out/")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--seconds", type=float, default=None, help="timed seconds per run")
    p.add_argument("--warmup", type=float, default=None,
                   help="untimed seconds after the first batch")
    p.add_argument("--job-timeout", type=int, default=job_timeout)
    p.add_argument("--install-status", default=str(OUT / "install.json"))
    p.add_argument("--out", default=None, help="report path stem")
    p.add_argument(worker, help=argparse.SUPPRESS)
    args = p.parse_args()
    args.rounds = args.rounds or (1 if args.quick else rounds)
    args.seconds = args.seconds or (1.0 if args.quick else 4.0)
    args.warmup = args.warmup or (0.3 if args.quick else 1.0)
    # A smoke test's report goes to bench/out/, never over the published one.
    args.out = Path(args.out) if args.out else (OUT / f"benchmarks-{report}-quick" if args.quick
                                                else ROOT / "docs" / f"benchmarks-{report}")
    return args


def run_job(script: str, worker: list[str], args: argparse.Namespace, label: str, rate,
            env: dict | None = None) -> dict:
    """Runs one configuration in a process of its own: `script` again with
    `worker` (its hidden flag and the configuration's name) and the timings
    of `args`. Returns the result that process printed, or why there is none,
    with the load average at its start; logs `label` and `rate(result)`, or
    the failure (and its traceback or error output on stderr)."""
    argv = [sys.executable, str(script), *worker, "--seconds", str(args.seconds),
            "--warmup", str(args.warmup)]
    load = os.getloadavg()[0]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=args.job_timeout,
                           cwd=ROOT, env=env)
        lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
        res = json.loads(lines[-1][len("RESULT "):]) if lines else {
            "status": f"ERROR: exited {p.returncode} without a result", "stderr": p.stderr[-2000:]}
    except subprocess.TimeoutExpired:
        res = {"status": f"TIMEOUT after {args.job_timeout} s"}
    res["load_start"] = load
    log(f"{label} {rate(res) if res['status'] == 'ok' else res['status'][:160]}")
    if res["status"] != "ok":
        print(res.get("traceback") or res.get("stderr", ""), file=sys.stderr)
    return res


def run_rounds(needs: dict, args: argparse.Namespace, run) -> dict:
    """Runs every configuration of `needs` (name -> the packages of
    --install-status it needs) once in turn, --rounds times: name -> its
    results, each `run(name)` or, without a package it needs, why not."""
    try:
        install = json.loads(Path(args.install_status).read_text())
    except (OSError, ValueError):  # not installed by bench/run.sh: assume all is there
        install = {}
    missing = {name: [pkg for pkg in pkgs if install.get(pkg, "ok") != "ok"]
               for name, pkgs in needs.items()}
    runs = {name: [] for name in needs}
    for r in range(args.rounds):
        log(f"round {r + 1} of {args.rounds}")
        for name in needs:
            if missing[name]:
                runs[name].append({"status": "NOT INSTALLED: " + "; ".join(
                    f"{pkg}: {install[pkg]}" for pkg in missing[name])})
            else:
                runs[name].append(run(name))
    return runs


def medians(runs: list[dict], keys) -> dict:
    """The medians of `keys` over the rounds of one configuration's runs that
    succeeded, or the last run's status when none did."""
    ok = [r for r in runs if r["status"] == "ok"]
    if not ok:
        return {"status": runs[-1]["status"]}
    # A figure the process could not read (None: no RssFile sample, say) counts as 0.
    return {"status": "ok", "rounds": len(ok),
            **{k: statistics.median(r[k] or 0.0 for r in ok) for k in keys}}


def machine_line(results: dict) -> str:
    """The report's closing paragraph: the machine, the load average at the
    start of the benchmark and of each run, and the packages' versions."""
    m = results["machine"]
    loads = [m["loadavg_start"][0]] + [
        run["load_start"] for runs in results["runs"].values() for run in runs
        if "load_start" in run]
    return (f"Machine: {m['nproc']} cores, {m['cpu']}, {m['ram']}, Python {m['python']}; "
            f"{m['date']}; load average at the start of the benchmark and of each run "
            f"{min(loads):.2f} to {max(loads):.2f} (the 1-minute figure; 2 is both cores "
            "busy). Versions: "
            + ", ".join(f"{k} {v}" for k, v in results["versions"].items() if v) + ".")


def write_report(stem: Path, text: str, results: dict, chart=None) -> None:
    """Writes `text` to stem.md, `results` to stem.json and, given `chart`,
    the figure `chart(results)` draws to stem.png; then prints `text`."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    if chart:
        # Imported here: the workers (and .ref050-venv) have no matplotlib.
        import matplotlib

        matplotlib.use("Agg")  # no display; chart's pyplot draws off screen
        import matplotlib.pyplot as plt

        fig = chart(results)
        fig.tight_layout()
        fig.savefig(stem.with_suffix(".png"), dpi=100)
        plt.close(fig)
    print(text)
