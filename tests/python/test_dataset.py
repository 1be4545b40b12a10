"""loaderx.Dataset: NumPy samples over a Zrecord store."""

import json
import zlib

import numpy as np
import pytest

import loaderx
from conftest import array_of, compressible, same_bytes
from loaderx import MAX_RECORD_LEN, V1_MAX_RECORD_LEN, DataLoader, Dataset, Zrecord, ZrecordError
from loaderx import sharding as sharding_module

CODECS = ["raw", "flate", "lz4", "zstd", "zstd-dict"]
DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
          "uint64", "float16", "float32", "float64", "complex64", "complex128"]
SHAPES = {"scalar": (37,), "1d": (23, 9), "3d": (11, 2, 3, 4)}


# -- round trips ------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_is_bit_exact(tmp_path, codec, dtype, shape):
    src = array_of(dtype, shape, seed=zlib.crc32(f"{codec}{dtype}{shape}".encode()))
    if codec != "raw" and dtype in ("uint8", "int64"):
        src = compressible(5, src.nbytes).view(src.dtype).reshape(shape)
    ds = Dataset.write(tmp_path / "ds", src, codec=codec, durable=False)
    assert len(ds) == shape[0]
    assert ds.dtype == src.dtype and ds.shape == shape[1:] and ds.codec == codec
    assert same_bytes(ds[:], src)
    perm = np.random.default_rng(0).permutation(shape[0])
    assert same_bytes(ds[perm], src[perm])
    assert same_bytes(ds[shape[0] - 1], src[-1])
    ds.close()
    again = Dataset(tmp_path / "ds")
    assert same_bytes(again.__getitems__(perm), src[perm])
    again.close()


def test_scalar_samples_come_back_as_numpy_scalars(tmp_path):
    ds = Dataset.write(tmp_path / "ds", np.arange(10, dtype=np.int16), durable=False)
    assert ds.shape == ()
    assert isinstance(ds[3], np.int16) and ds[3] == 3
    assert ds[[3]].shape == (1,)


def test_other_dtypes_that_schema_json_can_record(tmp_path):
    for i, src in enumerate([np.array([b"ab", b"cde"], "S3"), np.array(["x", "yz"], "<U2"),
                             np.arange(4, dtype=">u4").reshape(2, 2),
                             np.array([1, 2], "datetime64[s]")]):
        ds = Dataset.write(tmp_path / f"ds{i}", src, durable=False)
        assert same_bytes(ds[:], src)
        ds.close()


# -- indexing -----------------------------------------------------------------------


def test_every_kind_of_index(small):
    ds, _, data, _ = small
    assert same_bytes(ds[0], data[0])
    assert same_bytes(ds[-1], data[-1])
    assert same_bytes(ds[np.int32(7)], data[7])
    assert same_bytes(ds[np.uint64(499)], data[499])
    for key in (slice(None), slice(10, 20), slice(None, None, 7), slice(None, None, -1),
                slice(-5, None), slice(400, 10, -33), slice(20, 10), slice(1000, 2000)):
        assert same_bytes(ds[key], data[key]), key
    for key in ([3, 1, 4, 1, 5], [-1, -500], np.array([2, 7, 1], np.uint8),
                np.array([[1, 2], [3, -4]]), [], np.array([], np.int64)):
        assert same_bytes(ds[key], data[np.asarray(key, dtype=np.int64)]), key
    mask = np.zeros(500, bool)
    mask[[0, 17, 499]] = True
    assert same_bytes(ds[mask], data[mask])
    assert same_bytes(ds[list(mask)], data[mask])
    assert same_bytes(ds.__getitems__([5, 6, 5]), data[[5, 6, 5]])
    assert ds.__getitems__([]).shape == (0, 3, 4)
    assert same_bytes(ds.__getitems__(mask), data[mask])


def test_int64_keys_read_right_and_are_left_as_they_were(small):
    """An int64 key reaches the store without a copy where it can (a uint64
    view of its positions): strided keys, with and without negative indices,
    must read the right samples, and the caller's key must not change."""
    ds, _, data, _ = small
    base = np.arange(-500, 500, dtype=np.int64)
    for key in (base[999::-3], base[500::7], base[::-1].reshape(25, 40)[:, ::3]):
        kept = key.copy()
        assert same_bytes(ds[key], data[key])
        assert same_bytes(ds.__getitems__(key), data[key.reshape(-1)])
        assert np.array_equal(key, kept)


def test_bad_indices_raise(small):
    ds, _, _, _ = small
    for key in (500, -501, 10**30, np.int64(500), [0, 500], [-501], np.array([500], np.uint64),
                np.array([2**63], np.uint64)):
        with pytest.raises(IndexError, match="out of range"):
            ds[key]
    with pytest.raises(IndexError):
        ds.__getitems__([0, 500])
    for mask in (np.ones(499, bool), np.ones(501, bool), np.ones((500, 1), bool), [True]):
        with pytest.raises(IndexError, match="boolean index"):
            ds[mask]
    for key in (1.5, "0", None, [0.5], True, np.bool_(False)):
        with pytest.raises(TypeError):
            ds[key]


def test_a_tuple_key_indexes_like_numpy(small):
    """``ds[0, 1]`` is ``ds[0][1]`` (it used to give samples 0 and 1): the
    first element of a tuple selects samples, the rest index within them,
    with NumPy's rules for mixing ints, slices and arrays."""
    ds, _, data, _ = small
    mask = np.zeros(500, bool)
    mask[[3, 9]] = True
    for key in ((0, 1), (0, 1, 2), (-1, slice(None), 3), (slice(10, 20), 0),
                (slice(None, None, -50), Ellipsis, 1), ([4, 2, 4], 2), (np.array([[1, 2]]), 0, 0),
                ([0, 2], slice(None), [1, 3]), (0, slice(None), [1, 2]), (mask, 1, 2),
                (Ellipsis, 0), (7,), (np.int64(3), np.int64(2)), ()):
        got, want = ds[key], data[key]
        assert np.asarray(got).shape == np.asarray(want).shape, key
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), key
    with pytest.raises(IndexError, match="out of range for a dataset"):
        ds[500, 0]
    with pytest.raises(IndexError, match="axis 1"):
        ds[0, 3]
    with pytest.raises(TypeError, match="first index of a tuple"):
        ds[None, 0]


# -- writing ------------------------------------------------------------------------


def test_schema_json_is_written_as_loaderx_0_5_0_writes_it(tmp_path):
    Dataset.write(tmp_path / "ds", np.zeros((3, 28, 28), np.uint8), durable=False).close()
    text = (tmp_path / "ds" / "schema.json").read_text()
    assert text == (
        '{\n  "format": "loaderx-zrecord",\n  "version": 1,\n  "dtype": "|u1",\n'
        '  "shape": [\n    28,\n    28\n  ],\n  "codec": "flate"\n}\n'
    )
    assert list(json.loads(text)) == ["format", "version", "dtype", "shape", "codec"]
    Dataset.write(tmp_path / "lab", np.zeros(3, "<f8"), codec="zstd", durable=False).close()
    assert json.loads((tmp_path / "lab" / "schema.json").read_text()) == {
        "format": "loaderx-zrecord", "version": 1, "dtype": "<f8", "shape": [],
        "codec": "zstd"}
    # No temporary file is left behind; the checksums sidecar is there.
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == [
        "0.zr", "checksums.zr", "meta.zr", "schema.json"]


def test_write_appends_to_a_matching_dataset(tmp_path):
    a, b = array_of("f4", (10, 2), 1), array_of("f4", (5, 2), 2)
    Dataset.write(tmp_path / "ds", a, durable=False).close()
    ds = Dataset.write(tmp_path / "ds", b, codec="raw", durable=False)
    assert len(ds) == 15
    assert same_bytes(ds[:], np.concatenate([a, b]))
    assert ds.codec == "flate", "appending keeps the dataset's recorded codec (as 0.5.0)"
    ds.close()


@pytest.mark.parametrize("other", [np.zeros((3, 2), "f8"), np.zeros((3, 3), "f4"),
                                   np.zeros(3, "f4"), np.zeros((3, 2), ">f4")])
def test_write_refuses_a_different_dtype_or_shape(tmp_path, other):
    Dataset.write(tmp_path / "ds", np.zeros((4, 2), "f4"), durable=False).close()
    with pytest.raises(ValueError, match="cannot append"):
        Dataset.write(tmp_path / "ds", other, durable=False)
    ds = Dataset(tmp_path / "ds")
    assert len(ds) == 4
    ds.close()


def test_write_refuses_bad_arrays_and_arguments(tmp_path):
    path = tmp_path / "ds"
    with pytest.raises(ValueError, match="codec"):
        Dataset.write(path, np.zeros(3), codec="gzip")
    with pytest.raises(ValueError, match="sample axis"):
        Dataset.write(path, np.float32(1))
    with pytest.raises(ValueError, match="record limit"):
        Dataset.write(path, np.zeros((2, MAX_RECORD_LEN // 8 + 1), np.float64))
    with pytest.raises(TypeError, match="objects"):
        Dataset.write(path, np.array([1, "a", None], dtype=object))
    with pytest.raises(TypeError, match="schema.json"):
        Dataset.write(path, np.zeros(3, dtype=[("a", "i4"), ("b", "f4")]))
    with pytest.raises(ValueError, match="chunk_bytes"):
        Dataset.write(path, np.zeros(3), chunk_bytes=0)
    assert not (path / "schema.json").exists()
    # A sample of exactly 1 MiB is fine (bigger ones too: test_big_records.py).
    ds = Dataset.write(path, np.zeros((2, V1_MAX_RECORD_LEN), np.uint8), durable=False)
    assert len(ds) == 2
    ds.close()


def test_write_refuses_a_raw_store_without_schema(tmp_path):
    with loaderx.Zrecord(tmp_path / "z") as z:
        z.append(b"abc", 3, 1)
    with pytest.raises(ValueError, match="no schema.json"):
        Dataset.write(tmp_path / "z", np.zeros(3, np.uint8))


class _CountingZrecord:
    """Wraps the native Zrecord and records the bytes of every append."""

    sizes = []

    def __init__(self, *args, **kwargs):
        self._z = loaderx.Zrecord(*args, **kwargs)

    def append(self, src, n, item_len, codec=None, **kwargs):
        self.sizes.append(np.asarray(src).nbytes)
        return self._z.append(src, n, item_len, codec, **kwargs)

    def __getattr__(self, name):
        return getattr(self._z, name)

    def __len__(self):
        return len(self._z)


@pytest.mark.parametrize("layout", ["mmap", "strided"])
def test_write_streams_in_bounded_chunks(tmp_path, monkeypatch, layout):
    sample = (64, 64)  # 16 KiB of float32 per sample
    n = 600  # ~9.4 MiB in all
    src = array_of("f4", (n, *sample), 3)
    if layout == "mmap":
        np.save(tmp_path / "src.npy", src)
        arr = np.load(tmp_path / "src.npy", mmap_mode="r")
    else:
        big = np.zeros((n, sample[0], sample[1] * 2), np.float32)
        big[:, :, ::2] = src
        arr = big[:, :, ::2]
        assert not arr.flags.c_contiguous
    _CountingZrecord.sizes = []
    # The store that Dataset.write appends to (sharding.RecordsWriter).
    monkeypatch.setattr(sharding_module, "Zrecord", _CountingZrecord)
    chunk = 1 << 20
    ds = Dataset.write(tmp_path / "ds", arr, chunk_bytes=chunk, durable=False)
    sizes = _CountingZrecord.sizes
    assert sum(sizes) == src.nbytes
    assert max(sizes) <= chunk and len(sizes) == -(-src.nbytes // chunk)
    assert same_bytes(ds[:], src)
    ds.close()


def test_write_takes_array_likes_and_durable_writes(tmp_path):
    ds = Dataset.write(tmp_path / "ds", [[1, 2], [3, 4]])
    assert ds.dtype == np.array([1]).dtype
    assert ds[1].tolist() == [3, 4]
    ds.close()


# -- maintenance -----------------------------------------------------------------------


def test_delete_compact_stats(small):
    ds, _, data, _ = small
    before = ds.stats()
    assert set(before) == {"records", "live_bytes", "chunk_bytes", "reclaimable"}
    assert before["records"] == 500
    ds.delete([7, 12, 40, -1])
    assert len(ds) == 496
    assert ds.stats()["reclaimable"] > 0
    ds.compact()
    after = ds.stats()
    assert after["records"] == 496 and after["reclaimable"] == 0
    kept = {data[i].tobytes() for i in range(500) if i not in (7, 12, 40, 499)}
    assert {s.tobytes() for s in ds[:]} == kept
    mask = np.zeros(496, bool)
    mask[:10] = True
    ds.delete(mask)
    assert len(ds) == 486
    with pytest.raises(IndexError):
        ds.delete([486])
    with pytest.raises(IndexError):
        ds.delete(np.ones(3, bool))
    assert len(ds) == 486


# -- opening and closing -----------------------------------------------------------------


def test_a_path_that_is_not_a_dataset(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        Dataset(tmp_path / "nope")
    p = tmp_path / "nope"
    assert str(e.value) == f"{p}/schema.json not found; {p} is not a loaderx dataset"
    with loaderx.Zrecord(tmp_path / "raw"):
        pass
    with pytest.raises(FileNotFoundError):
        Dataset(tmp_path / "raw")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "schema.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="schema"):
        Dataset(tmp_path / "bad")
    (tmp_path / "bad" / "schema.json").write_text("{not json")
    with pytest.raises(ValueError, match="JSON"):
        Dataset(tmp_path / "bad")
    # A schema without its store.
    (tmp_path / "bad" / "schema.json").write_text(json.dumps(
        {"format": "loaderx-zrecord", "version": 1, "dtype": "<f4", "shape": [], "codec": "raw"}))
    with pytest.raises(ZrecordError) as e:
        Dataset(tmp_path / "bad")
    assert e.value.code == -8


def test_close_context_manager_and_repr(small, tmp_path):
    ds, _, _, _ = small
    path = tmp_path / "data.zr"
    assert repr(ds) == f"Dataset('{path}', len=500, dtype=float32, shape=(3, 4), codec='flate')"
    with Dataset(path) as other:
        assert len(other) == 500
    assert other.closed
    assert repr(other) == f"Dataset('{path}', closed)"
    for call in (lambda: len(other), lambda: other[0], lambda: other[:3], other.stats,
                 lambda: other.__getitems__([0]), lambda: other.delete([0]), other.compact):
        with pytest.raises(ValueError, match="closed"):
            call()
    other.close()  # idempotent


def _tamper(path, **fields):
    schema = json.loads((path / "schema.json").read_text())
    schema.update(fields)
    (path / "schema.json").write_text(json.dumps(schema))


def test_a_schema_whose_samples_differ_from_the_records_is_refused(tmp_path):
    """schema.json is not trusted: samples of another size than the records
    used to read zero-padded (larger) or fail with an unrelated message."""
    path = tmp_path / "ds"
    Dataset.write(path, np.arange(5 * 12, dtype=np.float32).reshape(5, 3, 4),
                  durable=False).close()
    for fields, size in (({"shape": [4, 4]}, 64), ({"shape": [2, 4]}, 32),
                         ({"dtype": "<U3"}, 144), ({"dtype": "<f8"}, 96), ({"shape": []}, 4)):
        _tamper(path, dtype="<f4", shape=[3, 4])
        _tamper(path, **fields)
        with pytest.raises(ValueError) as e:
            Dataset(path)
        for word in (str(path), "sample 0", "48 bytes", f"{size} bytes"):
            assert word in str(e.value), (fields, str(e.value))
    # A later record of another size (a raw append behind the schema's back)
    # is refused by the read that reaches it, never padded.
    _tamper(path, dtype="<f4", shape=[3, 4])
    with Zrecord(str(path), "flate") as z:
        z.append(np.zeros(8, np.uint8), 1, 8)
    ds = Dataset(path)
    assert ds[4].shape == (3, 4)
    for key in (5, [0, 5], slice(None), (5, 0)):
        with pytest.raises(ValueError, match=r"sample 5 is a record of 8 bytes.*48 bytes"):
            ds[key]
    with pytest.raises(ValueError, match="sample 5"):
        ds.__getitems__([5])
    # The loader's native gathers refuse it too, rather than pad it.
    with DataLoader({"x": ds}, batch_size=6, mode=0) as loader:
        with pytest.raises(ValueError, match="record 5 is 8 bytes, not the 48"):
            next(loader)
    ds.close()


@pytest.mark.parametrize("field,value,words", [
    ("shape", [-1, 4], ["'shape'", "non-negative ints"]),
    ("shape", [1.5], ["'shape'", "non-negative ints"]),
    ("shape", [True, 3], ["'shape'", "non-negative ints"]),
    ("shape", "34", ["'shape'", "a list"]),
    ("shape", 12, ["'shape'", "a list"]),
    ("shape", [10**9, 10**9], ["'shape'", "record limit"]),
    ("dtype", "|O", ["'dtype'", "Python objects"]),
    ("dtype", "xx", ["'dtype'", "not a NumPy dtype"]),
    ("dtype", 5, ["'dtype'", "dtype string"]),
    ("dtype", None, ["'dtype'", "dtype string"]),
    ("codec", "gzip", ["'codec'", "gzip"]),
    ("codec", 3, ["'codec'"]),
    ("dtype", "MISSING", ["no field 'dtype'"]),
])
def test_a_malformed_schema_field_is_named_at_open(tmp_path, field, value, words):
    path = tmp_path / "ds"
    Dataset.write(path, np.zeros((3, 3, 4), np.float32), durable=False).close()
    if value == "MISSING":
        schema = json.loads((path / "schema.json").read_text())
        del schema[field]
        (path / "schema.json").write_text(json.dumps(schema))
    else:
        _tamper(path, **{field: value})
    with pytest.raises(ValueError) as e:
        Dataset(path)
    assert str(path / "schema.json") in str(e.value)
    for word in words:
        assert word in str(e.value), str(e.value)


def test_a_malformed_ragged_schema_field_is_named_at_open(tmp_path):
    from loaderx import RaggedDataset

    path = tmp_path / "rg"
    RaggedDataset.write(path, [np.arange(3, dtype=np.int16)], durable=False).close()
    for fields, word in (({"ndim": 0}, "'ndim'"), ({"ndim": True}, "'ndim'"),
                         ({"ndim": "1"}, "'ndim'"), ({"dtype": "|O"}, "'dtype'")):
        _tamper(path, ndim=1, dtype="<i2")
        _tamper(path, **fields)
        with pytest.raises(ValueError, match=str(path / "schema.json")) as e:
            RaggedDataset(path)
        assert word in str(e.value)


def test_a_dataset_pickles_by_path(small):
    import pickle
    ds, _, data, _ = small
    copy = pickle.loads(pickle.dumps(ds))
    assert same_bytes(copy[:5], data[:5])
    copy.close()
