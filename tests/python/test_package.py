"""The package surface: exports, version, constants and the error type."""

import pickle
import re
import subprocess
import sys
from pathlib import Path

import loaderx
from loaderx import _native

ROOT = Path(__file__).resolve().parents[2]


def test_all_lists_exactly_the_public_api():
    assert loaderx.__all__ == [
        "Dataset", "DataLoader", "Mixture", "Images", "PackedLoader", "RaggedDataset", "BytesDataset", "Table", "open", "convert",
        "Zrecord", "Collection", "CollectionWriter", "ZrecordError",
        "ZrecordIndexError", "StoreBusyError", "StoreNotFoundError", "NotAStoreError",
        "CorruptStoreError", "InvalidArgumentError", "BufferTooSmallError",
        "RecordTooLargeError", "StoreFullError", "StoreIOError", "StoreReadOnlyError",
        "StoreForkedError", "StoreMemoryError",
        "Sampler", "SampleRngs", "MAX_RECORD_LEN", "MAX_RECORDS", "V1_MAX_RECORD_LEN",
        "__version__",
    ]
    for name in loaderx.__all__:
        assert hasattr(loaderx, name), name


def test_version_comes_from_the_crate():
    cargo = (ROOT / "Cargo.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', cargo, re.M).group(1)
    assert loaderx.__version__ == version == "0.6.0"
    assert _native.__version__ == loaderx.__version__


def test_record_limits_are_one_gib_and_one_mib_in_format_1():
    assert loaderx.MAX_RECORDS == 1 << 24
    assert loaderx.MAX_RECORD_LEN == 1 << 30
    assert loaderx.V1_MAX_RECORD_LEN == 1 << 20


def test_zrecord_error_is_a_runtime_error_that_pickles_with_its_code(tmp_path):
    assert issubclass(loaderx.ZrecordError, RuntimeError)
    z = loaderx.Zrecord(tmp_path / "z")
    try:
        z.lengths([3])
    except loaderx.ZrecordError as e:
        err = e
    z.close()
    assert err.code == -3
    assert str(tmp_path / "z") in str(err) and "3" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is loaderx.ZrecordIndexError
    assert isinstance(back, loaderx.ZrecordError) and isinstance(back, IndexError)
    assert back.code == -3 and str(back) == str(err)


def test_every_public_object_has_a_docstring():
    objs = [loaderx, loaderx.Dataset, loaderx.DataLoader, loaderx.Zrecord,
            loaderx.ZrecordError, loaderx.Sampler, loaderx.Sampler.Mode, _native.Loader]
    for cls in objs[1:]:
        for name, member in vars(cls).items():
            if name.startswith("_") or not callable(getattr(member, "__get__", None)):
                continue
            objs.append(member)
    for obj in objs:
        assert (getattr(obj, "__doc__", None) or "").strip(), f"{obj!r} has no docstring"


def test_the_installed_package_depends_on_numpy_only():
    from importlib.metadata import requires
    reqs = [r for r in (requires("loaderx") or []) if "extra ==" not in r]
    assert [re.split(r"[<>=!~; ]", r)[0] for r in reqs] == ["numpy"]


def test_importing_loaderx_starts_no_thread():
    code = ("import os, numpy; n = len(os.listdir('/proc/self/task')); import loaderx; "
            "print(n, len(os.listdir('/proc/self/task')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    with_numpy, with_loaderx = map(int, out.split())
    assert with_loaderx == with_numpy
