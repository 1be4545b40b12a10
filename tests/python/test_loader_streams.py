"""Many streams per sample: the dict form, the 0.5.0 positional forms, and
ragged streams (RaggedDataset), all gathered with the same indices."""

import pickle

import numpy as np
import pytest

from conftest import array_of, same_bytes
from loaderx import DataLoader, Dataset, RaggedDataset, Sampler
from loaderx.ragged import pad_batch

N = 200


def ragged_samples(n=N, ndim=1, seed=0):
    rng = np.random.default_rng(seed)
    if ndim == 1:
        return [rng.integers(-1000, 1000, size=int(rng.integers(0, 12))).astype(np.int32)
                for _ in range(n)]
    return [rng.standard_normal((int(rng.integers(1, 5)), int(rng.integers(0, 4)), 2))
            .astype(np.float32) for _ in range(n)]


@pytest.fixture
def three(tmp_path):
    image = array_of(np.uint8, (N, 4, 4), seed=5)
    label = np.arange(N, dtype=np.int64)
    mask = (np.arange(N) % 3 == 0)
    dss = {
        "image": Dataset.write(tmp_path / "image", image, durable=False),
        "label": Dataset.write(tmp_path / "label", label, durable=False),
        "mask": Dataset.write(tmp_path / "mask", mask, durable=False),
    }
    yield dss, {"image": image, "label": label, "mask": mask}
    for ds in dss.values():
        ds.close()


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_the_dict_form_gathers_every_stream_with_the_same_indices(three, mode):
    dss, arrays = three
    sampler = Sampler(N, 16, mode, 4)
    with DataLoader(dss, batch_size=16, mode=mode, seed=4, num_workers=3) as loader:
        for step in range(20):
            batch = next(loader)
            assert list(batch) == ["image", "label", "mask"]
            idxs = sampler.batch(step).astype(np.int64)
            assert np.array_equal(batch["label"], idxs)
            for key, arr in arrays.items():
                assert same_bytes(batch[key], arr[idxs]), (step, key)
    assert loader.streams == dss


def test_the_positional_forms_keep_working(three):
    dss, arrays = three
    with DataLoader(dss["image"], dss["label"], batch_size=8, mode=0) as loader:
        batch = next(loader)
    assert set(batch) == {"data", "label"}
    assert same_bytes(batch["data"], arrays["image"][:8])
    with DataLoader(dss["image"], batch_size=8, mode=0) as loader:
        batch = next(loader)
        assert "running" in repr(loader)
    assert list(batch) == ["data"] and same_bytes(batch["data"], arrays["image"][:8])


def test_the_dict_form_transform_takes_and_returns_the_batch(three):
    dss, arrays = three

    def transform(batch):
        return {"x": batch["image"].astype(np.float32) / 255, "y": batch["label"]}

    for workers in (0, 2):
        with DataLoader(dss, batch_size=8, mode=0, transform=transform,
                        transform_workers=workers) as loader:
            batch = next(loader)
        assert set(batch) == {"x", "y"} and batch["x"].dtype == np.float32
        assert np.array_equal(batch["y"], np.arange(8))


def test_stream_arguments_are_checked(three, tmp_path):
    dss, _ = three
    short = Dataset.write(tmp_path / "short", np.zeros(N - 1), durable=False)
    with pytest.raises(ValueError, match="same length"):
        DataLoader({**dss, "short": short})
    with pytest.raises(ValueError, match="same length"):
        DataLoader(dss["image"], short)
    with pytest.raises(ValueError, match="at least one"):
        DataLoader({})
    with pytest.raises(TypeError, match="stream 'x'"):
        DataLoader({"x": np.zeros(3)})
    with pytest.raises(TypeError, match="str"):
        DataLoader({1: dss["label"]})
    with pytest.raises(TypeError):
        DataLoader(dss, dss["label"])
    with pytest.raises(TypeError, match="Dataset"):
        DataLoader(None)
    with pytest.raises(ValueError, match="ragged"):
        DataLoader(dss, pad=["image"])
    short.close()


# -- ragged -----------------------------------------------------------------------


def test_a_ragged_dataset_round_trips_and_appends(tmp_path):
    samples = ragged_samples(50)
    ds = RaggedDataset.write(tmp_path / "r", samples, durable=False)
    assert len(ds) == 50 and ds.dtype == np.int32 and ds.ndim == 1
    for i in (0, 7, 49, -1):
        assert same_bytes(ds[i], samples[i])
    assert all(same_bytes(a, samples[i]) for a, i in zip(ds[3:9], range(3, 9)))
    assert np.array_equal(ds.shapes([1, 2]), [[len(samples[1])], [len(samples[2])]])
    ds.close()
    more = [np.array([1, 2, 3], np.int16)]  # cast to the dataset's int32
    ds = RaggedDataset.write(tmp_path / "r", more, durable=False)
    assert len(ds) == 51 and same_bytes(ds[50], np.array([1, 2, 3], np.int32))
    back = pickle.loads(pickle.dumps(ds))
    assert len(back) == 51 and "RaggedDataset" in repr(back)
    back.close()
    ds.close()
    assert "closed" in repr(ds)


def test_a_ragged_dataset_is_refused_by_dataset_and_vice_versa(tmp_path):
    RaggedDataset.write(tmp_path / "r", ragged_samples(5), durable=False).close()
    Dataset.write(tmp_path / "d", np.zeros((5, 2)), durable=False).close()
    schema = (tmp_path / "r" / "schema.json").read_text()
    assert '"format": "loaderx-ragged"' in schema
    with pytest.raises(ValueError, match="loaderx-zrecord"):
        Dataset(tmp_path / "r")
    with pytest.raises(ValueError, match="loaderx.Dataset"):
        RaggedDataset(tmp_path / "d")
    with pytest.raises(ValueError, match="dimensions"):
        RaggedDataset.write(tmp_path / "x", [np.zeros(3), np.zeros((2, 2))], durable=False)
    with pytest.raises(ValueError, match="<i4"):
        RaggedDataset.write(tmp_path / "r", [np.zeros(2)], dtype=np.float64, durable=False)
    with pytest.raises(TypeError, match="cast"):
        RaggedDataset.write(tmp_path / "r", [np.zeros(2)], durable=False)


def test_an_interrupted_write_is_invisible_and_repaired(tmp_path):
    from loaderx import Zrecord

    ds = RaggedDataset.write(tmp_path / "r", ragged_samples(10), durable=False)
    ds.close()
    # Values appended without their shapes, as a crash between the two
    # stores would leave them.
    z = Zrecord(tmp_path / "r")
    z.append(np.zeros(8, np.uint8), 2, 4)
    z.close()
    ds = RaggedDataset(tmp_path / "r")
    assert len(ds) == 10
    ds.close()
    ds = RaggedDataset.write(tmp_path / "r", [np.array([5, 6], np.int32)], durable=False)
    assert len(ds) == 11 and same_bytes(ds[10], np.array([5, 6], np.int32))
    ds.close()


@pytest.mark.parametrize("ndim", [1, 3])
def test_ragged_batches_pack_and_pad(tmp_path, ndim):
    samples = ragged_samples(N, ndim=ndim, seed=ndim)
    ds = RaggedDataset.write(tmp_path / "r", samples, durable=False)
    idxs = [5, 0, 17, 5, 199]
    packed = ds.batch(idxs)
    for k, i in enumerate(idxs):
        o = packed["offsets"]
        got = packed["values"][o[k]:o[k + 1]].reshape(tuple(packed["shapes"][k]))
        assert same_bytes(got, samples[i])
    dense = ds.batch(idxs, pad=True, pad_value=-1)
    max_shape = tuple(np.max([samples[i].shape for i in idxs], axis=0))
    assert dense["values"].shape == (len(idxs), *max_shape)
    for k, i in enumerate(idxs):
        region = (k, *(slice(0, d) for d in samples[i].shape))
        assert same_bytes(dense["values"][region], samples[i])
        assert dense["lengths"][k] == samples[i].shape[0]
        assert (dense["values"][k] == -1).sum() == dense["values"][k].size - samples[i].size
    ds.close()


@pytest.mark.parametrize("pad", [False, True])
def test_the_loader_takes_ragged_streams(tmp_path, three, pad):
    dss, arrays = three
    samples = ragged_samples(N, seed=9)
    tokens = RaggedDataset.write(tmp_path / "tokens", samples, durable=False)
    sampler = Sampler(N, 12, 2, 1)
    with DataLoader({"label": dss["label"], "tokens": tokens}, batch_size=12, mode=2,
                    seed=1, pad=pad, num_workers=2) as loader:
        for step in range(15):
            batch = next(loader)
            idxs = sampler.batch(step).astype(np.int64)
            assert np.array_equal(batch["label"], idxs)
            want = tokens.batch(idxs, pad=pad)
            assert set(batch["tokens"]) == set(want)
            for key in want:
                assert same_bytes(batch["tokens"][key], want[key]), (step, key)
        state = loader.state_dict()
    assert state["streams"]["tokens"] == {"kind": "ragged", "dtype": "<i4", "ndim": 1,
                                          "length": N}
    tokens.close()


def test_padding_can_be_chosen_per_stream(tmp_path):
    a = RaggedDataset.write(tmp_path / "a", ragged_samples(20, seed=1), durable=False)
    b = RaggedDataset.write(tmp_path / "b", ragged_samples(20, seed=2), durable=False)
    with DataLoader({"a": a, "b": b}, batch_size=4, pad={"b"}) as loader:
        batch = next(loader)
    assert "offsets" in batch["a"] and "lengths" in batch["b"]
    assert batch["b"]["values"].ndim == 2
    # Padding a packed batch afterwards gives what pad= gives.
    assert pad_batch(batch["a"])["values"].shape == (4, int(batch["a"]["shapes"].max()))
    a.close()
    b.close()
