"""The benchmark orchestrator: run by bench/run.sh, which sets up the venvs.

It generates (or reuses) the datasets, runs every measurement in a worker
subprocess per system (bench/worker.py; loaderx 0.5.0's under
.ref050-venv's python), collects their JSON results into
bench/out/results.json, and writes the report: docs/benchmarks.md and
docs/benchmarks.png for a full run, bench/out/benchmarks-quick.{md,png}
for --quick. Nothing here imports a benchmarked system.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import log  # noqa: E402
import datasets  # noqa: E402
import report  # noqa: E402

BENCH = common.BENCH
ROOT = common.ROOT
WORKER = BENCH / "worker.py"

#: (config name, system, codec): every store/gather configuration, in report order.
CONFIGS = [
    ("ours-raw", "ours", "raw"),
    ("ours-raw-unchecked", "ours_unchecked", "raw"),
    ("ours-flate", "ours", "flate"),
    ("ours-lz4", "ours", "lz4"),
    ("ours-zstd", "ours", "zstd"),
    ("0.5.0-raw", "ref050", "raw"),
    ("0.5.0-flate", "ref050", "flate"),
    ("numpy-mmap", "numpy_mmap", None),
    ("numpy-RAM", "numpy_ram", None),
    ("lmdb", "lmdb", None),
    ("h5py", "h5py", None),
    ("arrow-ipc", "arrow", None),
    ("arrayrecord-grain", "arrayrecord", None),
]

#: system -> the packages of bench/out/install.json it needs.
NEEDS = {
    "ours": ["loaderx (ours)"], "ours_unchecked": ["loaderx (ours)"], "ref050": ["loaderx==0.5.0"], "numpy_mmap": ["numpy"],
    "numpy_ram": ["numpy"], "lmdb": ["lmdb"], "h5py": ["h5py"], "arrow": ["pyarrow"],
    "arrayrecord": ["array-record", "grain"],
}


def machine() -> dict:
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "ram": mem, "kernel": platform.release(),
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "loadavg_start": os.getloadavg()}


class Runner:
    def __init__(self, args):
        self.args = args
        self.loads = []
        self.jobs = []

    def python_for(self, system: str) -> str:
        return self.args.ref_python if system == "ref050" else sys.executable

    def run(self, job: str, system: str, **kw) -> dict:
        a = self.args
        argv = [self.python_for(system), str(WORKER), "--job", job, "--system", system,
                "--repeats", str(a.repeats), "--seconds", str(a.seconds),
                "--cold-seconds", str(a.cold_seconds), "--warmup", str(a.warmup),
                "--write-cap", str(a.write_cap)]
        if a.quick:
            argv.append("--quick")
        if a.no_cold:
            argv.append("--no-cold")
        for k, v in kw.items():
            if v is not None:
                argv += [f"--{k.replace('_', '-')}", str(v)]
        load = os.getloadavg()
        self.loads.append(load[0])
        label = " ".join(f"{k}={v}" for k, v in kw.items() if v is not None)
        t0 = time.perf_counter()
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=a.job_timeout,
                               cwd=ROOT)
            lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
            if lines:
                res = json.loads(lines[-1][len("RESULT "):])
            else:
                res = {"status": f"ERROR: worker exited {p.returncode} without a result",
                       "stderr": p.stderr[-2000:]}
        except subprocess.TimeoutExpired:
            res = {"status": f"TIMEOUT after {a.job_timeout} s"}
        res["load_start"] = load
        res["wall_s"] = time.perf_counter() - t0
        self.jobs.append({"job": job, "system": system, **kw, "status": res["status"],
                          "wall_s": res["wall_s"], "load_start": load[0]})
        status = res["status"]
        log(f"{job:7s} {system:11s} {label:22s} {res['wall_s']:6.1f} s  {status[:160]}")
        if status != "ok" and "traceback" in res:
            print(res["traceback"], file=sys.stderr)
        return res


def limits(workloads, quick) -> dict:
    """Runs crates/zrecord/examples/codec_limits.rs over the workloads' .npy files:
    random-order copies on one and two cores, codec speeds on one core."""
    files = {w: common.data_dir(quick) / f"{w}.npy" for w in workloads}
    argv = ["cargo", "run", "--release", "--quiet", "-p", "zrecord", "--example", "codec_limits",
            "--", *map(str, files.values())]
    log("measuring limits: " + " ".join(argv))
    try:
        p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"status": f"failed: {e}"}
    if p.returncode != 0:
        return {"status": f"failed: {p.stderr.strip()[-300:]}"}
    by_file = {json.loads(line)["file"]: json.loads(line) for line in p.stdout.splitlines() if line}
    return {"status": "ok", **{w: by_file.get(str(f), {}) for w, f in files.items()}}


def main(argv=None):
    p = argparse.ArgumentParser(description="loaderx benchmark harness (run via bench/run.sh)")
    p.add_argument("--quick", action="store_true", help="small N, short timings (smoke test)")
    p.add_argument("--workloads", default="A,B,C,D")
    p.add_argument("--systems", default=",".join(c[0] for c in CONFIGS),
                   help="comma-separated config names (default: all)")
    p.add_argument("--loader-codecs", default="raw,flate",
                   help="codecs the DataLoader runs are made with")
    p.add_argument("--repeats", type=int, default=3, help="runs per figure (median reported)")
    p.add_argument("--seconds", type=float, default=None, help="timed seconds per gather run")
    p.add_argument("--cold-seconds", type=float, default=None)
    p.add_argument("--warmup", type=float, default=None)
    p.add_argument("--write-cap", type=int, default=320 << 20,
                   help="bytes of each workload the timed writes write")
    p.add_argument("--no-cold", action="store_true")
    p.add_argument("--job-timeout", type=int, default=900)
    p.add_argument("--ref-python", default=str(ROOT / ".ref050-venv" / "bin" / "python"))
    p.add_argument("--install-status", default=str(common.OUT / "install.json"))
    p.add_argument("--out", default=None, help="report path stem (default: docs/benchmarks "
                   "for a full run, bench/out/benchmarks-quick for --quick)")
    p.add_argument("--report-only", action="store_true",
                   help="rewrite the report from the saved results.json")
    p.add_argument("--keep-stores", action="store_true")
    args = p.parse_args(argv)
    if args.seconds is None:
        args.seconds = 0.3 if args.quick else 2.0
    if args.cold_seconds is None:
        args.cold_seconds = 0.2 if args.quick else 1.0
    if args.warmup is None:
        args.warmup = 0.1 if args.quick else 0.5
    if args.repeats < 3:
        log(f"note: --repeats {args.repeats} < 3; medians of fewer than 3 runs")
    stem = Path(args.out) if args.out else (
        common.OUT / "benchmarks-quick" if args.quick else ROOT / "docs" / "benchmarks")
    results_path = common.OUT / ("results-quick.json" if args.quick else "results.json")

    if args.report_only:
        results = json.loads(results_path.read_text())
        report.write(results, stem)
        print(report.targets_text(results))
        return

    t_start = time.perf_counter()
    cmd = " ".join(["bash bench/run.sh", *map(shlex.quote, argv or sys.argv[1:])])
    install = {}
    try:
        install = json.loads(Path(args.install_status).read_text())
    except (OSError, ValueError):
        log(f"no install status at {args.install_status}")
    results = {"machine": machine(), "command": cmd, "install": install,
               "settings": {k: getattr(args, k) for k in
                            ("quick", "repeats", "seconds", "cold_seconds", "warmup",
                             "write_cap", "loader_codecs", "no_cold")},
               "batch": common.BATCH, "stores": {}, "loader": {}, "bare": {}, "open24": {}}
    log(f"machine: {results['machine']}")

    workloads = [w for w in args.workloads.split(",") if w]
    wanted = set(args.systems.split(","))
    configs = [c for c in CONFIGS if c[0] in wanted]

    # 1. Data (cached).
    results["datasets"], results["datasets_failed"] = {}, {}
    for w in list(workloads):
        try:
            results["datasets"][w] = datasets.ensure(args.quick, [w], log=log)[w]
        except Exception as e:  # e.g. Fashion-MNIST not installed: report, run the rest
            results["datasets_failed"][w] = f"{type(e).__name__}: {e}"
            log(f"workload {w} skipped: {results['datasets_failed'][w]}")
            workloads.remove(w)

    # 1b. What the memory and the codecs do on their own (the measured limits).
    results["limits"] = limits(workloads, args.quick)

    runner = Runner(args)

    def installed(system):
        bad = [pkg for pkg in NEEDS[system] if install.get(pkg, "ok") != "ok"]
        return None if not bad else "NOT INSTALLED: " + "; ".join(
            f"{pkg}: {install[pkg]}" for pkg in bad)

    # 2. The 2^24-record store (built once with ours, cached) and its open time.
    if installed("ours") is None:
        results["build24"] = runner.run("build24", "ours")
        for system in ("ours", "ref050"):
            why = installed(system)
            results["open24"][system] = {"status": why} if why else runner.run("open24", system)

    # 3. Per workload: every store configuration, then the loaders.
    for w in workloads:
        results["stores"][w] = {}
        for name, system, codec in configs:
            why = installed(system)
            if why:
                results["stores"][w][name] = {"status": why}
                continue
            results["stores"][w][name] = runner.run("store", system, workload=w, codec=codec)
        # Warm gathers in rounds, each timing every store once: the runs of two
        # systems that a ratio compares are then spread over the same minutes,
        # not taken a minute apart, once each, while the host's load drifts.
        for _ in range(args.repeats):
            for name, system, codec in configs:
                r = results["stores"][w][name]
                if r["status"] != "ok":
                    continue
                g = runner.run("gather", system, workload=w, codec=codec)
                if g["status"] == "ok":
                    r.setdefault("warm_runs", []).append(g["run"])
                else:
                    r["status"] = f"gather: {g['status']}"
        results["loader"][w] = {}
        results["bare"][w] = {}
        for codec in args.loader_codecs.split(","):
            for system, cfg in (("ours", f"ours-{codec}"), ("ref050", f"0.5.0-{codec}")):
                st = results["stores"][w].get(cfg, {}).get("status")
                if st != "ok":
                    why = st or "store not built (config not selected)"
                    results["loader"][w][cfg] = {"status": f"skipped: {why}"}
                    results["bare"][w][cfg] = {"status": f"skipped: {why}"}
                    continue
                results["loader"][w][cfg] = runner.run("loader", system, workload=w, codec=codec)
                results["bare"][w][cfg] = runner.run("bare", system, workload=w, codec=codec)
        if not args.keep_stores:
            shutil.rmtree(common.OUT / "stores" / w, ignore_errors=True)
        results_path.write_text(json.dumps(results, indent=1))  # partial results survive

    results["jobs"] = runner.jobs
    results["loads"] = {"min": min(runner.loads, default=None), "max": max(runner.loads, default=None),
                        "mean": sum(runner.loads) / len(runner.loads) if runner.loads else None}
    results["machine"]["loadavg_end"] = os.getloadavg()
    results["total_s"] = time.perf_counter() - t_start
    results_path.write_text(json.dumps(results, indent=1))
    report.write(results, stem)
    log(f"done in {results['total_s'] / 60:.1f} min; results {results_path}; "
        f"report {stem}.md, {stem}.png")
    print()
    print(report.summary_text(results))
    print(report.targets_text(results))


if __name__ == "__main__":
    main()
