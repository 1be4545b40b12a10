"""Turns bench/out/results.json into the Markdown report, the targets section
and the PNG chart. Figures are medians over the runs of one harness run."""

from __future__ import annotations

import math
from pathlib import Path

from common import BATCH, MIB, median

GATHER_ORDER = ["ours-raw", "ours-flate", "ours-lz4", "ours-zstd", "0.5.0-raw", "0.5.0-flate",
                "numpy-mmap", "numpy-RAM", "lmdb", "h5py", "arrow-ipc", "arrayrecord-grain"]


# -- extracting figures -----------------------------------------------------------

def ok(r) -> bool:
    return isinstance(r, dict) and r.get("status") == "ok"


def runs_median(r, runs_key, key):
    if not ok(r) or not r.get(runs_key):
        return None
    return median([x[key] for x in r[runs_key]])


def spread(r, runs_key, key):
    """(max - min) / median over the runs, in percent."""
    if not ok(r) or not r.get(runs_key):
        return None
    xs = [x[key] for x in r[runs_key]]
    m = median(xs)
    return 100 * (max(xs) - min(xs)) / m if m else None


def gather(results, w, cfg, key="mb_s", runs="warm_runs"):
    return runs_median(results["stores"].get(w, {}).get(cfg), runs, key)


def write_mb(results, w, cfg, durable="True"):
    r = results["stores"].get(w, {}).get(cfg)
    if not ok(r) or "write_mb_s" not in r:
        return None
    wm = r["write_mb_s"]
    return wm.get(durable, wm.get("None"))


def rss_bound_mib(r):
    """The issue's bound on a loader's RSS: (prefetch + workers + 2) batches + 64 MiB."""
    return (r["prefetch"] + r["num_workers"] + 2) * r["batch_bytes"] / MIB + 64


def loader_bs(results, kind, w, cfg, runs="runs"):
    return runs_median(results[kind].get(w, {}).get(cfg), runs, "batches_s")


# -- formatting -------------------------------------------------------------------

def fmt(x, digits=None):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if digits is not None:
        return f"{x:.{digits}f}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def status_cell(r) -> str:
    if r is None:
        return "not run"
    s = r.get("status", "?")
    return "ok" if s == "ok" else s.replace("|", "/")[:140]


def ratio(a, b):
    return a / b if a is not None and b else None


# -- targets ------------------------------------------------------------------------

def targets(results) -> list[tuple[str, float | None, str, bool | None]]:
    """(what, measured, required, met) for every target of the issue."""
    out = []

    def add(what, value, op, bound, unit="×", note=""):
        if value is None:
            out.append((what, None, f"{op} {bound}{unit}", None, note))
            return
        met = value >= bound if op == "≥" else value < bound if op == "<" else value <= bound
        out.append((what, value, f"{op} {bound}{unit}", met, note))

    ws = list(results["stores"])
    lim = results.get("limits", {})

    def limit(w, key):
        v = lim.get(w, {}).get(key) if isinstance(lim.get(w), dict) else None
        return v or None
    for w in [w for w in ("A", "B", "C") if w in ws]:
        add(f"{w}: raw gather / 0.5.0 raw gather",
            ratio(gather(results, w, "ours-raw"), gather(results, w, "0.5.0-raw")), "≥", 2)
        ceiling = ratio(gather(results, w, "numpy-RAM"), gather(results, w, "numpy-mmap"))
        c1, c2 = limit(w, "copy_1core_mb_s"), limit(w, "copy_2cores_mb_s")
        note = f"numpy in RAM / numpy memmap = {fmt(ceiling)} in this run" if ceiling else ""
        if c1 and c2:
            note += (f"; limit: a random-order copy of these records runs at {fmt(c1)} MB/s on "
                     f"one core and {fmt(c2)} on two ({fmt(c2 / c1)}×), numpy copies on one")
        add(f"{w}: raw gather / numpy memmap fancy indexing",
            ratio(gather(results, w, "ours-raw"), gather(results, w, "numpy-mmap")), "≥", 1.3,
            note=note)
    for w in ws:
        add(f"{w}: raw gather with checksums (the default) / without",
            ratio(gather(results, w, "ours-raw"), gather(results, w, "ours-raw-unchecked")),
            "≥", 0.9, note="warm gathers: each handle checks a record the first time it reads it")
    if "B" in ws:
        add("B: raw gather / numpy in RAM",
            ratio(gather(results, "B", "ours-raw"), gather(results, "B", "numpy-RAM")), "≥", 0.8)
    for w in ws:
        ref = gather(results, w, "0.5.0-flate")
        dec1, dec2 = limit(w, "flate_decode_mb_s"), limit(w, "flate_decode_2cores_mb_s")
        note = (f"limit: libdeflate alone, with no store, decodes these records in a random "
                f"order at {fmt(dec1)} MB/s on one core and {fmt(dec2)} on two: "
                f"{fmt(ratio(dec2, ref))}× 0.5.0 as measured on two cores, "
                f"{fmt(ratio(2 * dec1, ref))}× with a perfect two-core scaling"
                if dec1 and dec2 and ref else "")
        add(f"{w}: flate gather / 0.5.0 flate gather",
            ratio(gather(results, w, "ours-flate"), ref), "≥", 4, note=note)
    for w in ws:
        ref = write_mb(results, w, "0.5.0-flate")
        e6, e1 = limit(w, "flate6_encode_mb_s"), limit(w, "flate1_encode_mb_s")
        e6_2, e1_2 = (limit(w, "flate6_encode_2cores_mb_s"),
                      limit(w, "flate1_encode_2cores_mb_s"))
        note = (f"limit: libdeflate alone, with no store, encodes these records at {fmt(e6)} "
                f"MB/s on one core and {fmt(e6_2)} on two at level 6 (what we write), at "
                f"{fmt(e1)} and {fmt(e1_2)} at level 1 (its fastest): as measured on two cores "
                f"{fmt(ratio(e6_2, ref))}× 0.5.0 at level 6 and {fmt(ratio(e1_2, ref))}× at "
                f"level 1, with a perfect two-core scaling {fmt(ratio(2 * e6, ref))}× and "
                f"{fmt(ratio(2 * e1, ref))}×" if e6 and e1 and e6_2 and e1_2 and ref else "")
        add(f"{w}: flate write (durable=True) / 0.5.0 flate write",
            ratio(write_mb(results, w, "ours-flate", "True"), ref), "≥", 4, note=note)
        add(f"{w}: flate write (durable=False) / 0.5.0 flate write",
            ratio(write_mb(results, w, "ours-flate", "False"), ref), "≥", 4, note=note)
    for w in ws:
        l4, c1 = limit(w, "lz4_decode_mb_s"), limit(w, "copy_1core_mb_s")
        note = (f"limit: LZ4 alone decodes these records at {fmt(l4)} MB/s per core, a "
                f"random-order copy runs at {fmt(c1)}: {fmt(ratio(l4, c1))}× per core"
                if l4 and c1 else "")
        add(f"{w}: lz4 gather / our raw gather",
            ratio(gather(results, w, "ours-lz4"), gather(results, w, "ours-raw")), "≥", 0.5,
            note=note)
    for w in results.get("loader", {}):
        for cfg in results["loader"][w]:
            if not cfg.startswith("ours-"):
                continue
            codec = cfg.split("-", 1)[1]
            dl, bare = loader_bs(results, "loader", w, cfg), loader_bs(results, "bare", w, cfg)
            kept = loader_bs(results, "bare", w, cfg, "kept_runs")
            dl_turn = loader_bs(results, "bare", w, cfg, "dl_runs")
            note = (f"DataLoader and bare loop timed in turn in one process; the bare loop "
                    f"keeping the previous batch alive while it gathers the next (as the "
                    f"consumer of any prefetching loader does) runs at "
                    f"{fmt(ratio(kept, bare), 2)}× the bare loop, DataLoader / that loop = "
                    f"{fmt(ratio(dl_turn, kept), 2)}; the DataLoader in its own process / bare = "
                    f"{fmt(ratio(dl, bare), 2)}" if kept and bare and dl and dl_turn else "")
            add(f"{w} ({codec}): DataLoader / bare __getitems__ loop", ratio(dl_turn, bare), "≥", 0.9,
                note=note)
            add(f"{w} ({codec}): DataLoader / 0.5.0 DataLoader",
                ratio(dl, loader_bs(results, "loader", w, f"0.5.0-{codec}")), "≥", 2)
    if "A" in ws:
        add("A: raw gather / LMDB gather",
            ratio(gather(results, "A", "ours-raw"), gather(results, "A", "lmdb")), "≥", 2)
        add("A: raw gather / ArrayRecord+Grain gather",
            ratio(gather(results, "A", "ours-raw"), gather(results, "A", "arrayrecord-grain")),
            "≥", 8)
    o = results.get("open24", {}).get("ours")
    add("open of a 2^24-record store (warm page cache), ms",
        o.get("open_ms") if ok(o) else None, "<", 50, " ms")
    add("open of a 2^24-record store (cold: meta.zr dropped), ms",
        o.get("cold_open_ms") if ok(o) else None, "<", 50, " ms")
    for w in results.get("loader", {}):
        for cfg, r in results["loader"][w].items():
            if not cfg.startswith("ours-") or not ok(r):
                if cfg.startswith("ours-"):
                    add(f"{w} ({cfg}): loader peak RSS, MiB", None, "≤", "limit", "")
                continue
            rss_limit = rss_bound_mib(r)
            peaks = r.get("rss_peaks", {})
            note = f"peak {fmt(r['peak_rss_mib'])} MiB"
            if "RssAnon" in peaks:
                met = "within" if peaks["RssAnon"] <= rss_limit else "over"
                note += (f"; sampled peaks: {fmt(peaks['RssAnon'])} MiB anonymous ({met} the "
                         f"limit: batches, buffers, Python) and {fmt(peaks.get('RssFile'))} MiB "
                         f"file-backed (the store's mapped pages, shared libraries)")
            kept, dropped, pread = (limit(w, k) for k in
                                    ("mapped_kept_mb_s", "mapped_dropped_mb_s", "pread_mb_s"))
            if kept and dropped and pread:
                note += (f"; limit: the store's pages count as RSS because gathers read them "
                         f"mapped; reading these records without keeping pages mapped runs at "
                         f"{fmt(pread / kept)}× (a pread per record) or {fmt(dropped / kept)}× "
                         f"(mapping dropped after each batch) the speed on one core")
            add(f"{w} ({cfg.split('-', 1)[1]}): loader peak RSS / "
                f"((prefetch+workers+2) × batch + 64 MiB = {rss_limit:.0f} MiB)",
                r["peak_rss_mib"] / rss_limit, "≤", 1, note=note)
    return out


def targets_text(results) -> str:
    lines = ["## Targets", ""]
    for what, value, need, met, note in targets(results):
        mark = "n/a (not measured)" if met is None else ("MET" if met else "NOT MET")
        lines.append(f"- **{mark}** — {what}: {fmt(value)} (target {need})"
                     + (f" — {note}" if note else ""))
    t = targets(results)
    n_met = sum(1 for x in t if x[3])
    n_not = sum(1 for x in t if x[3] is False)
    lines += ["", f"{n_met} met, {n_not} not met, {len(t) - n_met - n_not} not measured."]
    return "\n".join(lines) + "\n"


# -- tables -----------------------------------------------------------------------

def machine_text(results) -> str:
    m = results["machine"]
    loads = results.get("loads", {})
    la = lambda t: ", ".join(f"{x:.2f}" for x in t) if t else "?"
    return (f"- **Machine:** {m['cpu']}, {m['nproc']} CPUs (nproc), {m['ram']} RAM, "
            f"Linux {m['kernel']}, Python {m['python']}\n"
            f"- **Date:** {m['date']}; whole run {results.get('total_s', 0) / 60:.1f} min\n"
            f"- **Load average** (1, 5, 15 min): {la(m.get('loadavg_start'))} at the start, "
            f"{la(m.get('loadavg_end'))} at the end; 1-min load at job starts "
            f"{fmt(loads.get('min'))}–{fmt(loads.get('max'))} (mean {fmt(loads.get('mean'))}). "
            f"The machine is shared with other builds: compare ratios within this run, "
            f"not absolute numbers across runs.\n"
            f"- **Command:** `{results['command']}`\n")


def summary_text(results) -> str:
    """A short plain-text table of warm gather MB/s, for the console."""
    ws = list(results["stores"])
    lines = ["warm gather MB/s (median)".ljust(20) + "".join(w.rjust(10) for w in ws)]
    for cfg in GATHER_ORDER:
        cells = []
        for w in ws:
            r = results["stores"][w].get(cfg)
            v = gather(results, w, cfg)
            cells.append((fmt(v) if v is not None else ("FAILED" if r and "FAIL" in r.get("status", "")
                                                        else "—")).rjust(10))
        lines.append(cfg.ljust(20) + "".join(cells))
    return "\n".join(lines) + "\n"


def workload_table(results, w) -> str:
    d = results["datasets"][w]
    rows = [f"### Workload {w}: {d['desc']}", "",
            f"{d['n']} samples of {d['sample_bytes']:,} bytes ({d['file_bytes'] / MIB:,.0f} MiB as .npy). "
            f"Timed writes write the first {_write_records(results, w):,} samples.", "",
            "| system | write MB/s | gather MB/s (warm) | spread | records/s | batch p50 / p95 / p99 ms "
            "| cold gather MB/s | on disk MiB | open ms | status |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for cfg in GATHER_ORDER:
        r = results["stores"][w].get(cfg)
        if r is None:
            continue
        if cfg.startswith("ours-"):
            wr = f"{fmt(write_mb(results, w, cfg, 'True'))} durable / {fmt(write_mb(results, w, cfg, 'False'))} not"
        elif cfg == "numpy-RAM":
            wr = "(n/a)"
        else:
            wr = fmt(write_mb(results, w, cfg))
        lat = (f"{fmt(runs_median(r, 'warm_runs', 'p50_ms'))} / {fmt(runs_median(r, 'warm_runs', 'p95_ms'))}"
               f" / {fmt(runs_median(r, 'warm_runs', 'p99_ms'))}")
        sp = spread(r, "warm_runs", "mb_s")
        rows.append("| " + " | ".join([
            cfg, wr if ok(r) else "—", fmt(gather(results, w, cfg)),
            f"±{sp / 2:.0f} %" if sp is not None else "—",
            fmt(gather(results, w, cfg, "records_s")), lat if ok(r) else "—",
            fmt(gather(results, w, cfg, runs="cold_runs")) if cfg != "numpy-RAM" else "(n/a)",
            fmt(r["disk_bytes"] / MIB) if ok(r) else "—",
            fmt(r.get("open_ms")) if ok(r) else "—", status_cell(r)]) + " |")
    return "\n".join(rows) + "\n"


def _write_records(results, w):
    for r in results["stores"][w].values():
        if ok(r) and "write_records" in r:
            return r["write_records"]
    return results["datasets"][w]["n"]


def rss_cell(r) -> str:
    if not ok(r):
        return "—"
    peaks = r.get("rss_peaks", {})
    extra = (f" ({fmt(peaks['RssAnon'])} anon + {fmt(peaks['RssFile'])} file)"
             if "RssAnon" in peaks and "RssFile" in peaks else "")
    return fmt(r.get("peak_rss_mib")) + extra


def loader_table(results) -> str:
    rows = ["| workload | codec | ours DataLoader batches/s (own process) "
            "| ours DataLoader, in turn with bare | bare `__getitems__` batches/s | DL in turn / bare "
            "| bare, previous batch kept | DL in turn / that "
            "| 0.5.0 DataLoader batches/s | ours / 0.5.0 (own processes) | 0.5.0 bare batches/s "
            "| ours peak RSS MiB (sampled peaks: anon + file-backed) | RSS limit MiB "
            "| 0.5.0 peak RSS MiB | status |",
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for w, cfgs in results.get("loader", {}).items():
        for cfg in cfgs:
            if not cfg.startswith("ours-"):
                continue
            codec = cfg.split("-", 1)[1]
            ref = f"0.5.0-{codec}"
            dl, bare = loader_bs(results, "loader", w, cfg), loader_bs(results, "bare", w, cfg)
            kept = loader_bs(results, "bare", w, cfg, "kept_runs")
            dl_turn = loader_bs(results, "bare", w, cfg, "dl_runs")
            rdl, rbare = loader_bs(results, "loader", w, ref), loader_bs(results, "bare", w, ref)
            r, rr = cfgs[cfg], cfgs.get(ref)
            limit = rss_bound_mib(r) if ok(r) else None
            statuses = {k: status_cell(v) for k, v in (("ours DL", r), ("ours bare", results["bare"][w].get(cfg)),
                                                       ("0.5.0 DL", rr), ("0.5.0 bare", results["bare"][w].get(ref)))}
            st = "ok" if all(s == "ok" for s in statuses.values()) else "; ".join(
                f"{k}: {s}" for k, s in statuses.items() if s != "ok")
            rows.append("| " + " | ".join([
                w, codec, fmt(dl), fmt(dl_turn), fmt(bare), fmt(ratio(dl_turn, bare), 2),
                fmt(kept), fmt(ratio(dl_turn, kept), 2), fmt(rdl), fmt(ratio(dl, rdl), 2),
                fmt(rbare), rss_cell(r), fmt(limit), rss_cell(rr), st]) + " |")
    return "\n".join(rows) + "\n"


def open_table(results) -> str:
    rows = ["| store | ours open ms | 0.5.0 open ms |", "|---|--:|--:|"]
    o24 = results.get("open24", {})
    o, r = o24.get("ours"), o24.get("ref050")
    rows.append(f"| 2^24 one-byte records, warm | {fmt(o.get('open_ms')) if ok(o) else status_cell(o)} "
                f"| {fmt(r.get('open_ms')) if ok(r) else status_cell(r)} |")
    rows.append(f"| 2^24 one-byte records, cold (meta.zr dropped) | "
                f"{fmt(o.get('cold_open_ms')) if ok(o) else status_cell(o)} "
                f"| {fmt(r.get('cold_open_ms')) if ok(r) else status_cell(r)} |")
    for w in results["stores"]:
        for codec in ("raw", "flate"):
            a = results["stores"][w].get(f"ours-{codec}")
            b = results["stores"][w].get(f"0.5.0-{codec}")
            if a is None and b is None:
                continue
            ca = runs_median(a, "cold_runs", "open_ms")
            cb = runs_median(b, "cold_runs", "open_ms")
            rows.append(f"| {w} {codec} Dataset, warm / cold | "
                        f"{fmt(a.get('open_ms')) if ok(a) else '—'} / {fmt(ca)} | "
                        f"{fmt(b.get('open_ms')) if ok(b) else '—'} / {fmt(cb)} |")
    return "\n".join(rows) + "\n"


def install_table(results) -> str:
    rows = ["| package | install | version used |", "|---|---|---|"]
    versions = {}
    for w in results["stores"].values():
        for cfg, r in w.items():
            if ok(r):
                versions.setdefault(cfg.split("-")[0] if cfg.startswith(("ours", "0.5.0")) else cfg,
                                    r["version"].split(" (/")[0])
    names = {"loaderx (ours)": "ours", "loaderx==0.5.0": "0.5.0", "lmdb": "lmdb", "h5py": "h5py",
             "pyarrow": "arrow-ipc", "array-record": "arrayrecord-grain", "grain": "arrayrecord-grain",
             "numpy": "numpy-mmap"}
    for pkg, st in results.get("install", {}).items():
        if pkg in ("maturin", "matplotlib"):
            continue
        rows.append(f"| {pkg} | {st} | {versions.get(names.get(pkg, ''), '—')} |")
    failed = []
    for w, cfgs in results["stores"].items():
        for cfg, r in cfgs.items():
            if not ok(r):
                failed.append(f"{w}/{cfg}: {status_cell(r)}")
    for kind in ("loader", "bare"):
        for w, cfgs in results.get(kind, {}).items():
            for cfg, r in cfgs.items():
                if not ok(r):
                    failed.append(f"{kind} {w}/{cfg}: {status_cell(r)}")
    for w, why in results.get("datasets_failed", {}).items():
        failed.append(f"workload {w} not run: {why}")
    text = "\n".join(rows) + "\n"
    text += ("\nEvery system passed the bit-exact check (a few batches of random indices, "
             "plus the first and last sample, compared with the source array) before it was timed.\n"
             if not failed else
             "\n**Not measured** (failed the bit-exact check, errored or not installed):\n\n"
             + "\n".join(f"- {f}" for f in failed) + "\n")
    return text


def markdown(results, png_name) -> str:
    s = results["settings"]
    parts = [
        "# loaderx benchmarks", "",
        "Generated by `bench/run.sh` (bench/harness.py); do not edit by hand — rerun it. "
        "Raw results: `bench/out/results.json`.", "",
        machine_text(results),
        f"![warm and cold random-batch gather throughput per workload and system]({png_name})", "",
        "## Method", "",
        f"- Every system runs in its own worker process (`bench/worker.py --system …`); loaderx 0.5.0 "
        f"(PyPI) runs under its own venv's Python. Each figure is the **median of {s['repeats']} runs**: "
        f"warm gathers come from {s['repeats']} rounds, each of which times every system's store once "
        f"in a process of its own, so that the runs a ratio compares are interleaved over the same "
        f"minutes; the other figures' runs are made in one process, one after the other.",
        f"- **Gather:** batches of {BATCH} uniform random indices (the same index sequence for every "
        f"system), each returned as one `(256, *shape)` NumPy array; {s['warmup']} s warm-up, then "
        f"{s['seconds']} s of timed batches per run. MB/s is 10^6 bytes of samples delivered per second. "
        f"**Warm:** every byte of the store read once beforehand (page cache hot). **Cold:** the system is "
        f"closed, every file of the store is fsync'ed and dropped with `posix_fadvise(POSIX_FADV_DONTNEED)` "
        f"(mincore confirms 0 % resident), the store reopened and {s['cold_seconds']} s of batches timed. "
        f"On this VM the virtual disk is fast, so cold is often close to warm.",
        f"- **Write:** the natural bulk write of each system from the memory-mapped `.npy`, timed to the "
        f"end of its close; repeated on the first {s['write_cap'] / MIB:.0f} MiB of the workload "
        f"(everything but B) into fresh paths. Ours both with `durable=True` (the default: fsync per "
        f"64 MiB chunk) and `durable=False`; 0.5.0 has no durability switch.",
        "- **Systems:** ours (`loaderx.Dataset`, codecs raw / flate / lz4 / zstd); loaderx 0.5.0 "
        "(raw / flate); NumPy `np.load(mmap_mode='r')[idxs]`; NumPy array in RAM `a[idxs]` (the ceiling); "
        "LMDB (one key per sample, `txn.get` per index, copied into the batch); h5py (contiguous "
        "uncompressed dataset, one fancy read of the sorted unique indices); pyarrow IPC file "
        "(fixed_size_binary column, memory-mapped, `Table.take`); ArrayRecord "
        "(`group_size:1,uncompressed`) read through Grain's `ArrayRecordDataSource.__getitems__`.",
        f"- **DataLoader:** `loaderx.DataLoader(data, labels, num_workers=4, batch_size=256, prefetch_size=4)` "
        f"pulled with a trivial consumer (reads `batch['data'].shape`) for {s['seconds']} s per run, "
        f"against a plain `for` loop of `data.__getitems__(idxs)` + `labels.__getitems__(idxs)` at the "
        f"same batch size. The loader job (its own process) gives the DataLoader figure, its peak RSS "
        f"and the comparison with 0.5.0's; for the DataLoader / bare target the bare job times, in "
        f"turn in one process, the bare loop, the loop keeping the previous batch, and a fresh "
        f"DataLoader (warmed for {s['warmup']} s, closed after), {s['repeats']} times: the two "
        f"figures of a ratio are then seconds apart, not a minute and a process apart. Labels: the sample index (int64) for A–C, the real "
        f"labels for D. The stores were checked bit-exact in their store job; in the loader job two "
        f"delivered batches are also checked against the source (data rows named by the index labels; "
        f"for D, image → label lookup), after the timing so that the check does not raise the peak RSS. "
        f"Peak RSS is `VmHWM` of the loader's process (`ru_maxrss` would carry the harness's peak across exec); the table also shows the peaks of its "
        f"anonymous and file-backed parts, sampled every 20 ms from `/proc/self/status` while it ran: "
        f"our reads map the chunk files, so store pages the process touched count as file-backed RSS.",
        "- **Noise:** the machine is shared with other agents' builds (see the load average above). "
        "The spread column is the spread of the warm gather rounds; between two full runs on this "
        "machine single figures moved by up to ~2× (ratios less), so treat a ratio within ~20 % of its "
        "target as undecided and rerun the pair in question (`--workloads … --systems …`).",
        "- **Open:** `Dataset(path)` (median of 5, warm) and, after dropping the store's pages, the cold "
        "reopen; the 2^24 store (2^24 one-byte raw records, built once with `Zrecord.append` and cached) "
        "is opened with `Zrecord(path, 'raw')`.",
        "",
        targets_text(results),
        "## Gather, write, size and open per workload", "",
    ]
    for w in results["stores"]:
        parts.append(workload_table(results, w))
    parts += ["## DataLoader", "", loader_table(results),
              "## Open time", "", open_table(results),
              "## Systems: installation and verification", "", install_table(results)]
    return "\n".join(parts)


# -- the chart -----------------------------------------------------------------------

def chart(results, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ws = list(results["stores"])
    fig, axes = plt.subplots(1, len(ws), figsize=(4.2 * len(ws), 5.8), sharey=True, squeeze=False)
    colors = {"ours": "#1f6feb", "0.5.0": "#8957e5", "numpy": "#2da44e", "lmdb": "#bf8700",
              "h5py": "#cf222e", "arrow": "#e16f24", "arrayrecord": "#6e7781"}
    cfgs = GATHER_ORDER[::-1]
    for ax, w in zip(axes[0], ws):
        warm = [gather(results, w, c) or 0 for c in cfgs]
        cold = [gather(results, w, c, runs="cold_runs") or 0 for c in cfgs]
        y = range(len(cfgs))
        col = [colors.get(c.split("-")[0], "#444") for c in cfgs]
        ax.barh([i + 0.2 for i in y], warm, height=0.4, color=col, label="warm page cache")
        ax.barh([i - 0.2 for i in y], cold, height=0.4, color=col, alpha=0.45, hatch="//",
                label="cold (pages dropped)")
        for i, (v, c) in enumerate(zip(warm, cfgs)):
            r = results["stores"][w].get(c)
            txt = f"{v:,.0f}" if v else ("FAILED" if r and "FAIL" in r.get("status", "") else "n/a")
            ax.text(max(v, 1) * 1.08, i + 0.2, txt, va="center", fontsize=7)
        for i, v in enumerate(cold):
            if v:
                ax.text(v * 1.08, i - 0.2, f"{v:,.0f}", va="center", fontsize=6, color="#555")
        ax.set_xscale("log")
        vals = [v for v in warm + cold if v]
        if vals:
            ax.set_xlim(min(vals) / 2, max(vals) * 6)
        d = results["datasets"][w]
        ax.set_title(f"{w}: {d['n']:,} × {d['sample_bytes']:,} B", fontsize=10)
        ax.set_xlabel("gather MB/s (batch 256, log scale)")
        ax.grid(axis="x", which="both", alpha=0.25)
    axes[0][0].set_yticks(range(len(cfgs)))
    axes[0][0].set_yticklabels(cfgs, fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    m = results["machine"]
    fig.suptitle(f"loaderx random-batch gather, median of {results['settings']['repeats']} runs — "
                 f"{m['nproc']} CPUs, {m['cpu'][:40]}, load {m['loadavg_start'][0]:.1f}", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results, stem: Path) -> None:
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    png = stem.with_suffix(".png")
    try:
        chart(results, png)
    except Exception as e:  # the table is the record; say why the chart is missing
        print(f"report: no chart ({type(e).__name__}: {e})")
    stem.with_suffix(".md").write_text(markdown(results, png.name))
