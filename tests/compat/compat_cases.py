"""Cases shared by both sides of the loaderx 0.5.0 compatibility check.

This module is loaded twice: by ``test_compat_050.py`` inside our own Python
process (driving our ``loaderx``), and by ``ref050_helper.py`` inside a
subprocess running the reference venv's Python (driving ``loaderx==0.5.0``).
It depends on NumPy only, and it receives the ``loaderx`` module to drive as
an argument, so neither process ever imports the other's implementation.

A case is a list of *phases*, each a list of operations applied to one store.
Who runs which phase (ours or the reference) is decided by the test, so the
same case serves "0.5.0 writes, ours reads", "ours writes, 0.5.0 reads" and
"one creates, the other appends". The expected content of the store after
any prefix of phases comes from a model: a list of ``bytes`` records, with
deletion modelled exactly as the 0.5.0 spec describes it (process the batch in
descending index order, move the last record into the hole, drop the length).

All data comes from a counter-based generator (splitmix64 over ``arange``),
so both processes regenerate the same bytes regardless of NumPy version.
"""

import json
import os

import numpy as np

MAX_RECORD = 1 << 20

# --------------------------------------------------------------------------
# Deterministic data
# --------------------------------------------------------------------------

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(seed, n):
    """n pseudo-random uint64 values; a pure function of (seed, n)."""
    with np.errstate(over="ignore"):
        z = np.arange(n, dtype=np.uint64) + np.uint64(seed * 0x1000003 + 1)
        z = z * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z & _M64


def random_bytes(seed, n):
    """n incompressible bytes."""
    words = _splitmix64(seed, (n + 7) // 8)
    return words.view(np.uint8)[:n].copy()


def compressible_bytes(seed, n):
    """n bytes that Deflate shrinks a lot: short runs over a small alphabet."""
    r = random_bytes(seed, (n + 15) // 16)
    return np.repeat(r & np.uint8(0x07), 16)[:n].astype(np.uint8) + np.uint8(ord("a"))


def random_ints(seed, n, lo, hi):
    """n ints in [lo, hi)."""
    return lo + (_splitmix64(seed, n) % np.uint64(hi - lo)).astype(np.int64)


def permutation(seed, n):
    return np.argsort(_splitmix64(seed, n), kind="stable").astype(np.int64)


def distinct_indices(seed, n, k):
    """k distinct indices below n, in a scrambled (not sorted) order."""
    return permutation(seed, n)[:k]


# --------------------------------------------------------------------------
# Operations. Each is a plain tuple so it can be applied by either process.
# --------------------------------------------------------------------------


def op_append(records, codec=None):
    """Fixed-length append: all records the same length."""
    return ("append", [bytes(r) for r in records], codec)


def op_append_var(records, codec=None):
    return ("append_var", [bytes(r) for r in records], codec)


def op_delete(idxs):
    return ("delete", [int(i) for i in idxs])


def op_compact():
    return ("compact",)


def op_write(array, codec="flate", chunk_bytes=64 << 20):
    """Dataset.write (creates the store, or appends to an existing one)."""
    return ("write", array, codec, chunk_bytes)


def _fixed(seed, n, item_len, compressible):
    gen = compressible_bytes if compressible else random_bytes
    flat = gen(seed, n * item_len)
    return [flat[i * item_len:(i + 1) * item_len].tobytes() for i in range(n)]


def _ragged(seed, n, lo, hi, compressible):
    gen = compressible_bytes if compressible else random_bytes
    lens = random_ints(seed + 7, n, lo, hi)
    flat = gen(seed, int(lens.sum()))
    out, pos = [], 0
    for ln in lens:
        out.append(flat[pos:pos + ln].tobytes())
        pos += int(ln)
    return out


def _mixed_ragged(seed):
    """Ragged records mixing compressible and incompressible ones, plus the
    extreme lengths 1 byte and exactly MAX_RECORD."""
    a = _ragged(seed, 60, 1, 5000, True)
    b = _ragged(seed + 1, 60, 1, 5000, False)
    recs = [x for pair in zip(a, b) for x in pair]
    recs.insert(17, b"\x00")
    recs.insert(40, compressible_bytes(seed + 2, MAX_RECORD).tobytes())
    recs.insert(41, random_bytes(seed + 3, MAX_RECORD).tobytes())
    return recs


def _dtype_arrays(seed):
    """(name, array) for Dataset.write over several dtypes and shapes."""
    out = []

    def bits(s, dtype, shape):
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return random_bytes(s, n).view(dtype).reshape(shape)

    out.append(("u8_img", (compressible_bytes(seed, 300 * 28 * 28) * 3).reshape(300, 28, 28)))
    out.append(("u8_label", (random_ints(seed + 1, 300, 0, 10)).astype(np.uint8)))
    out.append(("i64_label", random_ints(seed + 2, 257, -5, 5).astype(np.int64)))
    out.append(("f32_3x4", bits(seed + 3, np.float32, (200, 3, 4))))
    out.append(("f64_7", bits(seed + 4, np.float64, (150, 7))))
    out.append(("f16_2x2x2", bits(seed + 5, np.float16, (99, 2, 2, 2))))
    out.append(("i16_5", bits(seed + 6, np.int16, (120, 5))))
    out.append(("i32_scalar", bits(seed + 7, np.int32, (64,))))
    out.append(("be_u32_3", bits(seed + 8, ">u4", (50, 3))))
    out.append(("bool_10", (random_bytes(seed + 9, 80 * 10) & 1).astype(bool).reshape(80, 10)))
    out.append(("c64_2", bits(seed + 10, np.complex64, (40, 2))))
    return out


def _zrecord_cases(codec):
    """Zrecord cases for one store codec."""
    c = {}
    base = 100 if codec == "raw" else 200
    c["fixed_compressible"] = [[op_append(_fixed(base + 1, 400, 300, True))]]
    c["fixed_incompressible"] = [[op_append(_fixed(base + 2, 400, 300, False))]]
    c["fixed_two_appends"] = [[
        op_append(_fixed(base + 3, 100, 1000, True)),
        op_append(_fixed(base + 4, 50, 17, False)),
    ]]
    c["ragged_mixed"] = [[op_append_var(_mixed_ragged(base + 5))]]
    other = "flate" if codec == "raw" else "raw"
    c["per_append_codec"] = [[
        op_append(_fixed(base + 6, 30, 512, True), codec=other),
        op_append_var(_ragged(base + 7, 40, 1, 3000, True), codec=codec),
        op_append_var(_ragged(base + 8, 40, 1, 3000, True), codec=other),
    ]]
    recs = _mixed_ragged(base + 9)
    c["delete_compact"] = [[
        op_append_var(recs),
        op_append(_fixed(base + 10, 64, 256, True)),
        op_delete(distinct_indices(base + 11, len(recs) + 64, 40)),
        op_compact(),
    ]]
    c["delete_no_compact"] = [[
        op_append_var(_ragged(base + 12, 200, 1, 2000, False)),
        op_delete(distinct_indices(base + 13, 200, 25)),
        op_delete([199 - 25, 0]),
    ]]
    return {f"zr_{codec}_{k}": _zr(codec, v) for k, v in c.items()}


def _zr(codec, phases):
    return {"kind": "zrecord", "codec": codec, "phases": phases}


def _ds(codec, phases):
    return {"kind": "dataset", "codec": codec, "phases": phases}


def single_phase_cases():
    """Cases whose whole history is written by one implementation."""
    cases = {}
    cases.update(_zrecord_cases("raw"))
    cases.update(_zrecord_cases("flate"))
    for codec in ("raw", "flate"):
        for name, arr in _dtype_arrays(300 if codec == "raw" else 400):
            cases[f"ds_{codec}_{name}"] = _ds(codec, [[op_write(arr, codec)]])
        arr = _dtype_arrays(500)[0][1]
        # A small chunk_bytes makes Dataset.write stream in several appends.
        cases[f"ds_{codec}_streamed"] = _ds(codec, [[op_write(arr, codec, chunk_bytes=10_000)]])
        cases[f"ds_{codec}_delete_compact"] = _ds(codec, [[
            op_write(arr, codec),
            op_delete(distinct_indices(501, len(arr), 31)),
            op_compact(),
        ]])
    return cases


def two_phase_cases():
    """Cases where one implementation creates the store and the other appends
    (and, for some, deletes and compacts) afterwards."""
    cases = {}
    for codec in ("raw", "flate"):
        s = 600 if codec == "raw" else 700
        cases[f"zr_{codec}_append"] = _zr(codec, [
            [op_append(_fixed(s, 120, 400, True)),
             op_append_var(_ragged(s + 1, 80, 1, 4000, False))],
            [op_append(_fixed(s + 2, 90, 333, False)),
             op_append_var(_mixed_ragged(s + 3))],
        ])
        cases[f"zr_{codec}_append_after_delete"] = _zr(codec, [
            [op_append_var(_ragged(s + 4, 150, 1, 3000, True)),
             op_delete(distinct_indices(s + 5, 150, 20)),
             op_compact()],
            [op_append_var(_ragged(s + 6, 70, 1, 3000, False)),
             op_delete(distinct_indices(s + 7, 200, 10)),
             op_compact()],
        ])
        arrs = _dtype_arrays(s + 8)
        cases[f"ds_{codec}_append"] = _ds(codec, [
            [op_write(arrs[3][1], codec)],
            [op_write(_dtype_arrays(s + 9)[3][1], codec)],
        ])
    return cases


def extension_cases():
    """Histories only ours can write: 0.5.0 refuses to append an empty record
    (it reports it as over the size limit) but reads one fine, so a store
    holding empty records must still be readable by 0.5.0."""
    cases = {}
    for codec in ("raw", "flate"):
        recs = _ragged(800, 50, 1, 3000, codec == "flate")
        for i in (0, 7, 8, 49):
            recs.insert(i, b"")
        cases[f"zr_{codec}_empty_records"] = _zr(codec, [[
            op_append_var(recs),
            op_delete([3, 30]),
            op_compact(),
        ]])
    return cases


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------


def is_dataset(case):
    return case["kind"] == "dataset"


def expected(case, phases=None):
    """Expected records (list of bytes) after the first `phases` phases, plus
    (dtype, shape) for a Dataset case."""
    recs, schema = [], None
    for phase in case["phases"][:phases]:
        for op in phase:
            kind = op[0]
            if kind in ("append", "append_var"):
                recs.extend(op[1])
            elif kind == "write":
                arr = np.ascontiguousarray(op[1])
                if schema is None:
                    schema = (arr.dtype.str, tuple(arr.shape[1:]))
                recs.extend(arr[i].tobytes() for i in range(len(arr)))
            elif kind == "delete":
                for i in sorted(set(op[1]), reverse=True):
                    recs[i] = recs[-1]
                    recs.pop()
            elif kind == "compact":
                pass
            else:
                raise ValueError(kind)
    return recs, schema


# --------------------------------------------------------------------------
# Driving an implementation (ours or the reference, passed in as `lx`)
# --------------------------------------------------------------------------


def apply_phase(lx, path, case, phase_no):
    """Apply phase `phase_no` of `case` to the store at `path` with `lx`."""
    phase = case["phases"][phase_no]
    if is_dataset(case):
        ds = None
        for op in phase:
            if op[0] == "write":
                if ds is not None:
                    ds.close()
                ds = lx.Dataset.write(path, op[1], codec=op[2], chunk_bytes=op[3])
            else:
                if ds is None:
                    ds = lx.Dataset(path)
                if op[0] == "delete":
                    ds.delete(op[1])
                elif op[0] == "compact":
                    ds.compact()
        if ds is not None and hasattr(ds, "close"):
            ds.close()
        return
    z = lx.Zrecord(path, codec=case["codec"])
    try:
        for op in phase:
            kind = op[0]
            if kind == "append":
                recs = op[1]
                item_len = len(recs[0])
                src = np.frombuffer(b"".join(recs), dtype=np.uint8)
                z.append(src, len(recs), item_len, codec=op[2])
            elif kind == "append_var":
                recs = op[1]
                lens = np.array([len(r) for r in recs], dtype=np.uint32)
                offsets = np.zeros(len(recs), dtype=np.uint64)
                offsets[1:] = np.cumsum(lens[:-1], dtype=np.uint64)
                src = np.frombuffer(b"".join(recs), dtype=np.uint8)
                z.append_var(src, offsets, lens, codec=op[2])
            elif kind == "delete":
                z.delete(np.array(op[1], dtype=np.uint64))
            elif kind == "compact":
                z.compact()
    finally:
        z.close()


def read_store(lx, path, case, out_prefix):
    """Read everything back from the store with `lx` and save it to
    `out_prefix.npz` (+ `.json`) for the test to compare. Reads in table
    order and in a scrambled order, through every read path the API has."""
    meta = {}
    arrays = {}
    if is_dataset(case):
        ds = lx.Dataset(path)
        n = len(ds)
        meta["len"] = n
        meta["dtype"] = np.dtype(ds.dtype).str
        meta["shape"] = list(ds.shape)
        meta["stats"] = {k: int(v) for k, v in ds.stats().items()}
        whole = np.ascontiguousarray(ds[np.arange(n)])
        arrays["ordered"] = whole.reshape(-1).view(np.uint8) if whole.size else np.zeros(0, np.uint8)
        arrays["ordered_shape"] = np.array(whole.shape, dtype=np.int64)
        perm = permutation(999, n)
        got = np.ascontiguousarray(ds.__getitems__(perm))
        arrays["perm"] = perm
        arrays["permuted"] = got.reshape(-1).view(np.uint8)
        singles = [0, n // 2, n - 1] if n else []
        arrays["singles"] = np.array(singles, dtype=np.int64)
        arrays["single_bytes"] = np.frombuffer(
            b"".join(np.ascontiguousarray(ds[i]).tobytes() for i in singles), dtype=np.uint8)
        if hasattr(ds, "close"):
            ds.close()
    else:
        z = lx.Zrecord(path, codec=case["codec"])
        try:
            n = len(z)
            meta["len"] = n
            meta["stats"] = {k: int(v) for k, v in z.stats().items()}
            idxs = np.arange(n, dtype=np.uint64)
            lens = np.asarray(z.lengths(idxs), dtype=np.uint32)
            arrays["lengths"] = lens
            offsets = np.zeros(n, dtype=np.uint64)
            if n:
                offsets[1:] = np.cumsum(lens[:-1], dtype=np.uint64)
            dst = np.zeros(int(lens.sum()), dtype=np.uint8)
            z.gather_var(idxs, dst, offsets)
            arrays["ordered"] = dst
            perm = permutation(999, n).astype(np.uint64)
            plens = lens[perm.astype(np.int64)]
            poff = np.zeros(n, dtype=np.uint64)
            if n:
                poff[1:] = np.cumsum(plens[:-1], dtype=np.uint64)
            pdst = np.zeros(int(plens.sum()), dtype=np.uint8)
            z.gather_var(perm, pdst, poff)
            arrays["perm"] = perm.astype(np.int64)
            arrays["permuted"] = pdst
            # Fixed-stride gather over the records of the most common length.
            if n:
                common = int(np.bincount(lens).argmax())
                sel = perm[lens[perm.astype(np.int64)] == common]
                gdst = np.zeros(len(sel) * common, dtype=np.uint8)
                z.gather(sel, gdst, common)
                arrays["fixed_sel"] = sel.astype(np.int64)
                arrays["fixed_stride"] = np.array([common], dtype=np.int64)
                arrays["fixed"] = gdst
        finally:
            z.close()
    np.savez(out_prefix + ".npz", **arrays)
    with open(out_prefix + ".json", "w") as f:
        json.dump(meta, f)


def store_files(path):
    """{file name: apparent size} of a store directory."""
    return {f: os.path.getsize(os.path.join(path, f)) for f in sorted(os.listdir(path))}
