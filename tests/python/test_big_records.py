"""Records over 1 MiB, up to 1 GiB: samples, byte items and ragged samples
of several MiB round-trip bit-exact and load through the DataLoader; a
store becomes format 2 with its first such record (loaderx 0.5.0 refuses
it: tests/compat); one record of exactly 1 GiB is written and read back.
"""

import hashlib

import numpy as np
import pytest

from loaderx import (MAX_RECORD_LEN, V1_MAX_RECORD_LEN, BytesDataset, DataLoader, Dataset,
                     RaggedDataset, Sampler, Zrecord)


def version(path):
    with Zrecord(path, create=False, read_only=True) as z:
        return z.version


@pytest.mark.parametrize("codec", ["raw", "zstd", "flate"])
def test_samples_of_several_mib_round_trip_and_load(tmp_path, codec):
    rng = np.random.default_rng(1)
    # 3 MiB a sample, half of it noise so that every codec has work.
    data = rng.integers(0, 4, (10, 768, 1024)).astype(np.float32)
    data[:, ::2] = rng.standard_normal((10, 384, 1024))
    ds = Dataset.write(tmp_path / "x", data, codec=codec, durable=False)
    assert ds.shape == (768, 1024) and len(ds) == 10
    assert version(tmp_path / "x") == 2
    assert np.array_equal(ds[np.arange(10)], data)
    assert np.array_equal(ds[7], data[7])
    index = Dataset.write(tmp_path / "i", np.arange(10), durable=False)
    with DataLoader({"x": ds, "i": index}, batch_size=4, mode=Sampler.Mode.SHUFFLE, seed=3,
                    num_workers=2) as loader:
        for _ in range(6):
            batch = next(loader)
            assert np.array_equal(batch["x"], data[batch["i"]])
    ds.close(), index.close()


def test_a_store_of_samples_up_to_one_mib_stays_format_1(tmp_path):
    Dataset.write(tmp_path / "x", np.zeros((3, V1_MAX_RECORD_LEN), np.uint8),
                  durable=False).close()
    assert version(tmp_path / "x") == 1


def test_byte_items_and_ragged_samples_over_one_mib(tmp_path):
    rng = np.random.default_rng(2)
    items = [b"a", rng.bytes(20 << 20), b"", rng.bytes(V1_MAX_RECORD_LEN + 1), b"z" * 5_000_000]
    docs = BytesDataset.write(tmp_path / "b", items, codec="zstd", durable=False)
    assert version(tmp_path / "b") == 2
    assert [docs[i] for i in range(len(items))] == items
    assert docs.lengths(np.arange(len(items))).tolist() == [len(b) for b in items]
    docs.close()

    arrays = [rng.standard_normal((n, 1000)) for n in (3, 400, 1, 200)]  # 3.2 and 1.6 MB
    ragged = RaggedDataset.write(tmp_path / "r", arrays, codec="lz4", durable=False)
    for i, a in enumerate(arrays):
        assert np.array_equal(ragged[i], a)
    ragged.close()


def test_a_record_of_one_gib(tmp_path):
    record = np.arange(MAX_RECORD_LEN // 8, dtype=np.uint64).view(np.uint8)
    digest = hashlib.sha256(record).hexdigest()
    with Zrecord(tmp_path / "g", "raw") as z:
        z.append(b"small", 1, 5)
        z.append(record, 1, MAX_RECORD_LEN)
        del record
        assert z.version == 2 and len(z) == 2
        back = z.gather_array([1], MAX_RECORD_LEN, exact=True)
        assert hashlib.sha256(back).hexdigest() == digest
        del back
        assert bytes(z.gather_array([0], 5, exact=True)) == b"small"
