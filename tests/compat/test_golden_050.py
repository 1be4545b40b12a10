"""Stores written by loaderx 0.5.0, committed, read by ours in every run.

``golden/`` holds small stores that the reference (``loaderx==0.5.0`` from
PyPI) wrote through ``make_golden.py``: raw and flate, fixed-length and
ragged records, 1-byte records and a 64 KiB compressible one, a store after a
delete, stores after delete + compact, and ``Dataset.write`` stores with their
``schema.json``. ``golden/manifest.json`` pins every record's length and
SHA-256 (computed by the generator from the bytes it wrote, with deletes
applied by the model), and what 0.5.0 reports: ``len``, ``stats()``, dtype
and shape.

Unlike ``test_compat_050.py`` this needs neither the reference nor PyPI, and
it never skips: the read direction of compatibility is checked offline.
"""

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import loaderx

GOLDEN = Path(__file__).resolve().parent / "golden"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())
STORES = MANIFEST["stores"]


def _restore(name, tmp_path):
    """The store as 0.5.0 left it: each committed file (trailing zeros cut,
    see make_golden.py) copied and extended back, sparse, to its size."""
    dst = tmp_path / name
    dst.mkdir()
    for fname, size in STORES[name]["files"].items():
        src = GOLDEN / name / fname
        shutil.copyfile(src, dst / fname)
        assert os.path.getsize(dst / fname) <= size, f"{src} is larger than 0.5.0 wrote it"
        os.truncate(dst / fname, size)
    return dst


def _check_records(name, got):
    """`got`: every record's bytes in index order, as ours read them."""
    want = STORES[name]["records"]
    assert len(got) == len(want), f"{name}: {len(got)} records, 0.5.0 wrote {len(want)}"
    for i, (rec, w) in enumerate(zip(got, want)):
        assert len(rec) == w["len"], f"{name}[{i}]: {len(rec)} bytes, expected {w['len']}"
        if "hex" in w:
            assert rec.hex() == w["hex"], f"{name}[{i}]: bytes differ"
        assert hashlib.sha256(rec).hexdigest() == w["sha256"], f"{name}[{i}]: bytes differ"


def test_manifest_covers_what_the_issue_asks():
    """Guard against a regenerated manifest silently dropping a kind of store."""
    kinds = {(s["kind"], s["codec"]) for s in STORES.values()}
    assert {("zrecord", "raw"), ("zrecord", "flate"), ("dataset", "raw"),
            ("dataset", "flate")} <= kinds
    names = set(STORES)
    for want in ("fixed", "ragged", "deleted", "deleted_compacted"):
        assert any(n.endswith(want) for n in names), want
    lens = [r["len"] for s in STORES.values() for r in s["records"]]
    assert 1 in lens and max(lens) >= 64 << 10
    assert MANIFEST["written_by"].startswith("loaderx 0.5.0")


ZR = sorted(n for n, s in STORES.items() if s["kind"] == "zrecord")
DS = sorted(n for n, s in STORES.items() if s["kind"] == "dataset")


@pytest.mark.parametrize("name", ZR)
def test_zrecord_reads_golden_store(name, tmp_path):
    entry = STORES[name]
    path = _restore(name, tmp_path)
    with loaderx.Zrecord(str(path), codec=entry["codec"]) as z:
        n = len(z)
        assert n == entry["len"]
        assert {k: int(v) for k, v in z.stats().items()} == entry["stats"]
        idxs = np.arange(n, dtype=np.uint64)
        lens = np.asarray(z.lengths(idxs), dtype=np.int64)
        assert lens.tolist() == [r["len"] for r in entry["records"]]
        # Every record in one gather_var, in index order ...
        offsets = np.zeros(n, dtype=np.uint64)
        offsets[1:] = np.cumsum(lens[:-1])
        dst = np.zeros(int(lens.sum()), dtype=np.uint8)
        z.gather_var(idxs, dst, offsets)
        _check_records(name, [dst[o:o + ln].tobytes() for o, ln in zip(offsets.tolist(), lens.tolist())])
        # ... and in reverse order, which reads the chunk backwards.
        rev = idxs[::-1].copy()
        rdst = np.zeros_like(dst)
        roff = np.zeros(n, dtype=np.uint64)
        roff[1:] = np.cumsum(lens[::-1][:-1])
        z.gather_var(rev, rdst, roff)
        got = [rdst[o:o + ln].tobytes() for o, ln in zip(roff.tolist(), lens[::-1].tolist())]
        _check_records(name, got[::-1])
        # Fixed-stride gather over each group of equal-length records.
        for ln in sorted(set(lens.tolist())):
            sel = idxs[lens == ln]
            g = np.zeros(len(sel) * ln, dtype=np.uint8)
            z.gather(sel, g, ln)
            for j, i in enumerate(sel):
                rec = g[j * ln:(j + 1) * ln].tobytes()
                assert hashlib.sha256(rec).hexdigest() == entry["records"][int(i)]["sha256"], (
                    f"{name}[{i}]: gather(stride={ln}) differs")


@pytest.mark.parametrize("name", DS)
def test_dataset_reads_golden_store(name, tmp_path):
    entry = STORES[name]
    path = _restore(name, tmp_path)
    ds = loaderx.Dataset(str(path))
    try:
        n = len(ds)
        assert n == entry["len"]
        assert np.dtype(ds.dtype).str == entry["dtype"]
        assert list(ds.shape) == entry["shape"]
        assert {k: int(v) for k, v in ds.stats().items()} == entry["stats"]
        batch = np.ascontiguousarray(ds[np.arange(n)])
        assert batch.shape == (n, *entry["shape"])
        assert batch.dtype.str == entry["dtype"]
        _check_records(name, [batch[i].tobytes() for i in range(n)])
        _check_records(name, [np.ascontiguousarray(ds[i]).tobytes() for i in range(n)])
        rev = np.ascontiguousarray(ds.__getitems__(list(range(n))[::-1]))
        _check_records(name, [rev[i].tobytes() for i in range(n)][::-1])
    finally:
        ds.close()
