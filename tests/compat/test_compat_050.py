"""Two-way on-disk compatibility with the reference loaderx 0.5.0.

The reference (the Zig implementation, ``loaderx==0.5.0`` from PyPI) lives in
its own venv, ``.ref050-venv`` (made by ``scripts/ref050-venv.sh``), and only
ever runs in a subprocess (``ref050_helper.py``); our ``loaderx`` runs in this
process. Both drive the same cases from ``compat_cases.py``. Four scenarios:

* ``ref_writes``    0.5.0 writes every single-phase case; ours reads it.
* ``ours_writes``   ours writes every single-phase case; 0.5.0 reads it.
* ``ref_then_ours`` 0.5.0 creates a store, ours appends (deletes, compacts).
* ``ours_then_ref`` ours creates a store, 0.5.0 appends (deletes, compacts).
* ``ours_writes_ext`` ours writes what 0.5.0 cannot (empty records); 0.5.0
  must still read it.

In every scenario both implementations read the final store back, and each
must return exactly the bytes the model predicts; both must also report the
same ``stats()`` for the same store. The module skips when the reference venv
is missing or cannot import loaderx 0.5.0 (PyPI unreachable): what it then
loses is the write direction (0.5.0 reading ours, and the two appending to
each other's stores). The read direction does not depend on it:
``test_golden_050.py`` reads committed stores that 0.5.0 wrote, in every run.
"""

import importlib.util
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
REF_PY = REPO / ".ref050-venv" / "bin" / "python"
HELPER = HERE / "ref050_helper.py"


def _load_cases():
    spec = importlib.util.spec_from_file_location("compat_cases_050", HERE / "compat_cases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


cc = _load_cases()


def _ref_env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env["PYTHONNOUSERSITE"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _ref(*args, timeout=600):
    """Run the helper with the reference Python; return its JSON result."""
    proc = subprocess.run(
        [str(REF_PY), str(HELPER), *map(str, args)],
        capture_output=True, text=True, env=_ref_env(), cwd=str(HERE), timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"reference helper {args[:1]} failed (rc={proc.returncode}):\n"
            f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _reference_reason():
    if not REF_PY.exists():
        return (f"{REF_PY.relative_to(REPO)} is missing; run scripts/ref050-venv.sh "
                "(needs PyPI) to enable the loaderx 0.5.0 compatibility tests")
    try:
        info = _ref("version", timeout=120)
    except Exception as e:  # noqa: BLE001 - any failure means "no reference"
        return f"{REF_PY.relative_to(REPO)} cannot import loaderx 0.5.0: {e}"
    if info.get("version") != "0.5.0":
        return f"reference venv has loaderx {info.get('version')}, not 0.5.0"
    return None


_REASON = _reference_reason()
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

import loaderx  # noqa: E402 - ours, only once the reference is known to exist

if ".ref050-venv" in Path(loaderx.__file__).resolve().parts:
    raise RuntimeError(f"test process imported the reference loaderx from {loaderx.__file__}")

SINGLE = cc.single_phase_cases()
TWO = cc.two_phase_cases()
EXT = cc.extension_cases()
ALL_CASES = {**SINGLE, **TWO, **EXT}

# scenario -> (cases, who runs each phase)
SCENARIOS = {
    "ref_writes": (SINGLE, ("ref",)),
    "ours_writes": (SINGLE, ("ours",)),
    "ref_then_ours": (TWO, ("ref", "ours")),
    "ours_then_ref": (TWO, ("ours", "ref")),
    "ours_writes_ext": (EXT, ("ours",)),
}


def _ours_apply(workdir, names, phase):
    errors = {}
    for name in names:
        store = workdir / name / "store"
        store.parent.mkdir(parents=True, exist_ok=True)
        try:
            cc.apply_phase(loaderx, str(store), ALL_CASES[name], phase)
            errors[name] = None
        except Exception:  # noqa: BLE001 - reported per case
            errors[name] = traceback.format_exc()
    return errors


def _ours_read(workdir, names):
    errors = {}
    for name in names:
        try:
            cc.read_store(loaderx, str(workdir / name / "store"), ALL_CASES[name],
                          str(workdir / name / "read_ours"))
            errors[name] = None
        except Exception:  # noqa: BLE001 - reported per case
            errors[name] = traceback.format_exc()
    return errors


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    """Run all four scenarios once; return {scenario: {case: report}}."""
    root = tmp_path_factory.mktemp("compat050")
    result = {}
    for scenario, (cases, writers) in SCENARIOS.items():
        workdir = root / scenario
        workdir.mkdir()
        names = sorted(cases)
        report = {n: {"write": [], "read_ours": None, "read_ref": None} for n in names}
        for phase, who in enumerate(writers):
            # A case whose earlier phase failed is not run further.
            todo = [n for n in names if all(e is None for _, e in report[n]["write"])]
            if who == "ref":
                try:
                    errs = _ref("apply", workdir, phase, *todo)
                except Exception as e:  # noqa: BLE001
                    errs = {n: f"reference helper crashed: {e}" for n in todo}
            else:
                errs = _ours_apply(workdir, todo, phase)
            for n in todo:
                report[n]["write"].append((who, errs.get(n, "no result")))
        readable = [n for n in names if all(e is None for _, e in report[n]["write"])]
        for n, e in _ours_read(workdir, readable).items():
            report[n]["read_ours"] = e
        try:
            ref_errs = _ref("read", workdir, *readable)
        except Exception as e:  # noqa: BLE001
            ref_errs = {n: f"reference helper crashed: {e}" for n in readable}
        for n in readable:
            report[n]["read_ref"] = ref_errs.get(n, "no result")
        result[scenario] = (workdir, report)
    return result


def _params():
    for scenario, (cases, _) in SCENARIOS.items():
        for name in sorted(cases):
            yield pytest.param(scenario, name, id=f"{scenario}-{name}")


def _load(prefix):
    with np.load(str(prefix) + ".npz") as z:
        arrays = {k: z[k] for k in z.files}
    with open(str(prefix) + ".json") as f:
        meta = json.load(f)
    return arrays, meta


def _check_read(reader, arrays, meta, case, recs, schema):
    where = f"read by {reader}"
    assert meta["len"] == len(recs), f"{where}: len {meta['len']} != expected {len(recs)}"
    cat = np.frombuffer(b"".join(recs), dtype=np.uint8)
    if cc.is_dataset(case):
        assert meta["dtype"] == schema[0], f"{where}: dtype {meta['dtype']} != {schema[0]}"
        assert tuple(meta["shape"]) == schema[1], f"{where}: shape {meta['shape']} != {schema[1]}"
        assert tuple(arrays["ordered_shape"]) == (len(recs), *schema[1]), f"{where}: batch shape"
    else:
        lens = np.array([len(r) for r in recs], dtype=np.uint32)
        assert np.array_equal(arrays["lengths"], lens), f"{where}: lengths() differ"
    assert np.array_equal(arrays["ordered"], cat), f"{where}: records 0..N differ"
    perm = arrays["perm"]
    want = np.frombuffer(b"".join(recs[i] for i in perm), dtype=np.uint8)
    assert np.array_equal(arrays["permuted"], want), f"{where}: scrambled gather differs"
    if cc.is_dataset(case):
        want = np.frombuffer(b"".join(recs[i] for i in arrays["singles"]), dtype=np.uint8)
        assert np.array_equal(arrays["single_bytes"], want), f"{where}: ds[i] differs"
    elif "fixed" in arrays:
        want = np.frombuffer(b"".join(recs[i] for i in arrays["fixed_sel"]), dtype=np.uint8)
        assert np.array_equal(arrays["fixed"], want), f"{where}: fixed-stride gather differs"


@pytest.mark.parametrize("scenario,name", list(_params()))
def test_compat(outcome, scenario, name):
    workdir, report = outcome[scenario]
    rep = report[name]
    if scenario == "ours_writes_ext" and rep["write"][0][1] is not None:
        pytest.skip(f"ours refuses this history (as 0.5.0 does): {rep['write'][0][1].splitlines()[-1]}")
    for phase, (who, err) in enumerate(rep["write"]):
        assert err is None, f"phase {phase} written by {who} failed:\n{err}"
    case = ALL_CASES[name]
    recs, schema = cc.expected(case)
    assert rep["read_ref"] is None, f"reading with loaderx 0.5.0 failed:\n{rep['read_ref']}"
    assert rep["read_ours"] is None, f"reading with ours failed:\n{rep['read_ours']}"
    ours, ours_meta = _load(workdir / name / "read_ours")
    ref, ref_meta = _load(workdir / name / "read_ref")
    _check_read("loaderx 0.5.0", ref, ref_meta, case, recs, schema)
    _check_read("ours", ours, ours_meta, case, recs, schema)
    assert ours_meta["stats"] == ref_meta["stats"], (
        f"stats() of the same store differ: ours {ours_meta['stats']} vs 0.5.0 {ref_meta['stats']}")


def _all_raw(case):
    """True when no record of the case can have been compressed."""
    if case["codec"] != "raw":
        return False
    return all(op[0] not in ("append", "append_var") or op[2] in (None, "raw")
               for phase in case["phases"] for op in phase)


def _head(path, n):
    with open(path, "rb") as f:
        return f.read(n)


@pytest.mark.parametrize("name", sorted(SINGLE))
def test_same_layout(outcome, name):
    """The same history written by each implementation gives the same file
    names, the same meta.zr size and header fields, the same schema.json and,
    where nothing is compressed, byte-identical metadata and chunk data."""
    ref_dir = outcome["ref_writes"][0] / name / "store"
    ours_dir = outcome["ours_writes"][0] / name / "store"
    if not (ref_dir.is_dir() and ours_dir.is_dir()):
        pytest.fail("store missing (see test_compat for the write error)")
    ref_files, ours_files = cc.store_files(str(ref_dir)), cc.store_files(str(ours_dir))
    missing = sorted(set(ref_files) - set(ours_files))
    assert not missing, f"ours lacks files 0.5.0 writes: {missing}"
    # Our checksum sidecar is the one file ours adds (0.5.0 ignores files it
    # does not know; the two-way cases show it reads such stores).
    extra = sorted(set(ours_files) - set(ref_files))
    assert extra in ([], ["checksums.zr"]), f"extra store files: {extra}"
    assert ours_files["meta.zr"] == ref_files["meta.zr"], "meta.zr sizes differ"
    n = len(cc.expected(SINGLE[name])[0])
    ref_meta = _head(ref_dir / "meta.zr", 16 + 16 * n)
    ours_meta = _head(ours_dir / "meta.zr", 16 + 16 * n)
    # magic[4] version:u16 | length:u32 at offset 12
    assert ours_meta[:6] == ref_meta[:6], "magic/version differ"
    assert ours_meta[12:16] == ref_meta[12:16], "header length differs"
    if _all_raw(SINGLE[name]):
        assert ours_meta == ref_meta, "header or record table differs"
        tail_chunk = int.from_bytes(ref_meta[6:8], "little")
        tail_offset = int.from_bytes(ref_meta[8:12], "little")
        assert tail_chunk == 0, "case expected to fit one chunk"
        a = _head(ref_dir / "0.zr", tail_offset)
        b = _head(ours_dir / "0.zr", tail_offset)
        assert a == b, "chunk 0 data differs"
    if (ref_dir / "schema.json").exists():
        ref_schema = json.loads((ref_dir / "schema.json").read_text())
        ours_schema = json.loads((ours_dir / "schema.json").read_text())
        assert ours_schema == ref_schema, "schema.json differs"


def test_reference_is_isolated():
    """Guard: the reference really is 0.5.0 and really is another interpreter."""
    info = _ref("version")
    assert info["version"] == "0.5.0"
    assert Path(info["file"]).resolve() != Path(loaderx.__file__).resolve()
    assert Path(sys.prefix).resolve() != (REPO / ".ref050-venv").resolve()


REFUSES = """
import sys
import numpy as np
from loaderx import Dataset
try:
    ds = Dataset(sys.argv[1])
    got = ds[np.arange(len(ds))]
except Exception as e:  # 0.5.0's own exception classes
    print("refused:", type(e).__name__, str(e)[:200])
else:
    print("read:", got.dtype, got.shape)
"""


@pytest.mark.parametrize("what", ["zstd-dict", "bfloat16", "big-records"])
def test_0_5_0_refuses_what_it_cannot_read_cleanly(tmp_path, what):
    """A store that needs a feature 0.5.0 lacks (the zstd-dict codec, an
    ml_dtypes dtype, records over 1 MiB: format 2) makes 0.5.0 raise, neither
    crash nor return bytes."""
    rng = np.random.default_rng(0)
    data = (rng.integers(0, 4, size=(3000, 512)) * 3).astype(np.uint8)
    if what == "big-records":
        data = data.reshape(3, -1)  # 512,000 bytes a sample: 1.5 MiB
        data = np.concatenate([data, data, data], axis=1)
    if what == "bfloat16":
        import ml_dtypes

        data = data.astype(np.float32).astype(ml_dtypes.bfloat16)
    codec = "zstd-dict" if what == "zstd-dict" else "flate"
    loaderx.Dataset.write(tmp_path / "d", data, codec=codec).close()
    if what == "zstd-dict":
        assert (tmp_path / "d" / "zstd.dict").is_file()
    proc = subprocess.run([str(REF_PY), "-c", REFUSES, str(tmp_path / "d")], capture_output=True,
                          text=True, env=_ref_env(), timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("refused:"), proc.stdout
    if what == "big-records":
        assert "version" in proc.stdout.lower(), proc.stdout
