"""Write the golden loaderx 0.5.0 stores in tests/compat/golden/.

Run ONLY with the reference venv's Python (``scripts/ref050-venv.sh`` makes
it), from the repository root:

    .ref050-venv/bin/python tests/compat/make_golden.py

The stores and ``manifest.json`` it writes are committed; ``test_golden_050.py``
reads them with our package in every run, offline. Rerun this script only to
add a store (it rewrites the whole folder).

What the manifest pins, and where each value comes from:

* ``records``: length and SHA-256 of every record (and its bytes in hex when
  short), computed here with ``hashlib`` from the bytes this script handed to
  0.5.0, with deletes applied by the model in ``compat_cases.expected`` (tail
  moved into the hole). Neither implementation computes them.
* ``stats``, ``len``, ``dtype``/``shape``: what 0.5.0 reports for the store,
  which our package must report identically.
* ``files``: each file's apparent size. 0.5.0 creates ``meta.zr`` at 256 MiB
  and each chunk file at 4 GiB, sparse; committing that is impossible, so each
  file is committed without its trailing zero bytes (checked to be zeros
  before they are cut) and the test extends it back, sparse, to this size.
  The store it opens is therefore byte-for-byte the one 0.5.0 left.

Before writing, the script reads every store back with 0.5.0 and checks it
against the model, so a fixture never pins a reference bug unnoticed.
"""

import hashlib
import json
import os
import shutil
import sys
import tempfile

import numpy as np

import loaderx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compat_cases as cc  # noqa: E402 - next to this file

GOLDEN = os.path.join(HERE, "golden")
HEX_MAX = 64  # records up to this length are also pinned byte by byte


def _ragged_records(seed, codec_friendly):
    """A handful of ragged records: two of 1 byte, short random ones, one
    64 KiB compressible one (Deflate shrinks it to well under 1 KiB)."""
    recs = [b"\x00", b"\xff"]
    recs += cc._ragged(seed, 4, 2, 300, codec_friendly)
    recs.insert(3, cc.compressible_bytes(seed + 1, 64 << 10).tobytes())
    recs += [cc.random_bytes(seed + 2, 1000).tobytes()]
    return recs


def _cases():
    """{name: case} in compat_cases' format (kind, codec, phases)."""
    cases = {}
    for codec, s in (("raw", 10), ("flate", 20)):
        cases[f"zr_{codec}_fixed"] = cc._zr(codec, [[
            cc.op_append(cc._fixed(s, 6, 300, True)),
            cc.op_append(cc._fixed(s + 1, 3, 1, False)),  # fixed records of 1 byte
        ]])
        cases[f"zr_{codec}_ragged"] = cc._zr(codec, [[
            cc.op_append_var(_ragged_records(s + 2, True)),
            # A store may mix codecs: the other one for this append.
            cc.op_append_var(cc._ragged(s + 3, 3, 1, 200, True),
                             codec="flate" if codec == "raw" else "raw"),
        ]])
        recs = _ragged_records(s + 4, False)
        cases[f"zr_{codec}_deleted"] = cc._zr(codec, [[
            cc.op_append_var(recs),
            cc.op_delete([1, 3]),
        ]])
        cases[f"zr_{codec}_deleted_compacted"] = cc._zr(codec, [[
            cc.op_append_var(recs),
            cc.op_delete([0, 5, 2]),
            cc.op_compact(),
        ]])
    f32 = cc.random_bytes(30, 7 * 3 * 4 * 4).view(np.float32).reshape(7, 3, 4)
    cases["ds_flate_f32_3x4"] = cc._ds("flate", [[cc.op_write(f32, "flate")]])
    labels = cc.random_ints(31, 9, -5, 5).astype(np.int64)
    cases["ds_raw_i64_scalar"] = cc._ds("raw", [[cc.op_write(labels, "raw")]])
    img = (cc.compressible_bytes(32, 8 * 16 * 16)).reshape(8, 16, 16)
    cases["ds_flate_u8_deleted_compacted"] = cc._ds("flate", [[
        cc.op_write(img, "flate"),
        cc.op_delete([0, 6]),
        cc.op_compact(),
    ]])
    return cases


def _record_entry(rec):
    entry = {"len": len(rec), "sha256": hashlib.sha256(rec).hexdigest()}
    if len(rec) <= HEX_MAX:
        entry["hex"] = rec.hex()
    return entry


def _read_back(path, case):
    """Every record as 0.5.0 reads it, plus what it reports about the store."""
    info = {}
    if cc.is_dataset(case):
        ds = loaderx.Dataset(path)
        n = len(ds)
        got = [np.ascontiguousarray(ds[i]).tobytes() for i in range(n)]
        info.update(dtype=np.dtype(ds.dtype).str, shape=list(ds.shape),
                    stats={k: int(v) for k, v in ds.stats().items()})
        ds.close()
    else:
        with loaderx.Zrecord(path, codec=case["codec"]) as z:
            n = len(z)
            idxs = np.arange(n, dtype=np.uint64)
            lens = np.asarray(z.lengths(idxs), dtype=np.int64)
            got = []
            for i in range(n):
                dst = np.zeros(int(lens[i]), dtype=np.uint8)
                z.gather_var(np.array([i], np.uint64), dst, np.zeros(1, np.uint64))
                got.append(dst.tobytes())
            info["stats"] = {k: int(v) for k, v in z.stats().items()}
    info["len"] = n
    return got, info


def _commit_trimmed(src, dst):
    """Copy src to dst without its trailing zero bytes; return src's size."""
    size = os.path.getsize(src)
    with open(src, "rb") as f:
        data = f.read(min(size, 8 << 20))
        # Only the head is ever non-zero in these small stores; prove the
        # rest is zeros before dropping it. SEEK_DATA skips the holes, so this
        # does not read gigabytes of sparse zeros.
        pos = len(data)
        while pos < size:
            try:
                pos = os.lseek(f.fileno(), pos, os.SEEK_DATA)
            except OSError:  # ENXIO: nothing but holes past pos
                break
            f.seek(pos)
            block = f.read(1 << 20)
            if block.strip(b"\x00"):
                raise SystemExit(f"{src}: non-zero bytes past 8 MiB; cannot trim")
            pos += len(block)
    with open(dst, "wb") as f:
        f.write(data.rstrip(b"\x00"))
    return size


def main():
    if loaderx.__version__ != "0.5.0":
        raise SystemExit(f"run with the loaderx 0.5.0 reference venv, not {loaderx.__file__}")
    if os.path.isdir(GOLDEN):
        shutil.rmtree(GOLDEN)
    os.makedirs(GOLDEN)
    manifest = {
        "written_by": f"loaderx {loaderx.__version__} (PyPI), tests/compat/make_golden.py",
        "numpy": np.__version__,
        "stores": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in sorted(_cases().items()):
            path = os.path.join(tmp, name)
            cc.apply_phase(loaderx, path, case, 0)
            recs, schema = cc.expected(case)
            got, info = _read_back(path, case)
            if got != recs:
                raise SystemExit(f"{name}: loaderx 0.5.0 reads back other bytes than it was given")
            entry = {"kind": case["kind"], "codec": case["codec"], **info}
            if schema is not None and (schema[0], list(schema[1])) != (info["dtype"], info["shape"]):
                raise SystemExit(f"{name}: 0.5.0 reports {info['dtype']}{info['shape']}, wrote {schema}")
            entry["records"] = [_record_entry(r) for r in recs]
            out = os.path.join(GOLDEN, name)
            os.makedirs(out)
            entry["files"] = {f: _commit_trimmed(os.path.join(path, f), os.path.join(out, f))
                              for f in sorted(os.listdir(path))}
            manifest["stores"][name] = entry
    with open(os.path.join(GOLDEN, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(d, f))
                for d, _, fs in os.walk(GOLDEN) for f in fs)
    print(f"wrote {len(manifest['stores'])} stores, {total} bytes, to {GOLDEN}")


if __name__ == "__main__":
    main()
