"""ml_dtypes types (bfloat16, float8_*): stored, recorded in schema.json by
name, and read back bit-exact through every kind of dataset and the loader.
ml_dtypes comes with the ``ml`` extra, which CI installs."""

import json

import ml_dtypes
import numpy as np
import pytest

from loaderx import DataLoader, Dataset, RaggedDataset

TYPES = [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]


def values(kind, shape):
    return (np.random.default_rng(0).standard_normal(shape) * 3).astype(kind)


@pytest.mark.parametrize("kind", TYPES, ids=lambda t: t.__name__)
def test_a_dataset_of_an_ml_dtype_round_trips_bit_exact(tmp_path, kind):
    a = values(kind, (20, 3, 4))
    with Dataset.write(tmp_path / "d", a) as ds:
        assert ds.dtype == np.dtype(kind)
        got = ds[:]
    assert got.dtype == np.dtype(kind)
    np.testing.assert_array_equal(got.view(np.uint8), a.view(np.uint8))
    schema = json.loads((tmp_path / "d" / "schema.json").read_text())
    assert schema["dtype"] == kind.__name__
    with Dataset(tmp_path / "d") as ds, DataLoader(ds, batch_size=5, mode=0) as dl:
        batch = next(dl)["data"]
        assert batch.dtype == np.dtype(kind)
        np.testing.assert_array_equal(batch.view(np.uint8), a[:5].view(np.uint8))


def test_ragged_datasets_take_ml_dtypes_too(tmp_path):
    arrays = [values(ml_dtypes.bfloat16, (n,)) for n in (3, 0, 7)]
    with RaggedDataset.write(tmp_path / "r", arrays) as ds:
        for got, want in zip(ds[:], arrays):
            assert got.dtype == np.dtype(ml_dtypes.bfloat16)
            np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_two_float8_types_of_one_size_are_not_confused(tmp_path):
    # Both are one byte; their NumPy str says nothing of which is which.
    Dataset.write(tmp_path / "d", values(ml_dtypes.float8_e4m3fn, (4, 2))).close()
    with pytest.raises(ValueError, match="float8_e4m3fn.*cannot append float8_e5m2"):
        Dataset.write(tmp_path / "d", values(ml_dtypes.float8_e5m2, (4, 2)))


def test_an_unknown_dtype_name_is_refused_naming_the_field(tmp_path):
    Dataset.write(tmp_path / "d", np.zeros((2, 2), dtype=np.float32)).close()
    path = tmp_path / "d" / "schema.json"
    schema = json.loads(path.read_text())
    schema["dtype"] = "bfloat17"
    path.write_text(json.dumps(schema))
    match = "'dtype' 'bfloat17' is not a NumPy dtype, nor an ml_dtypes type"
    with pytest.raises(ValueError, match=match):
        Dataset(tmp_path / "d")
