"""Reliability seen from Python: checksums, verify(), locking between
handles, and the error codes they raise."""

import os
import pickle

import numpy as np
import pytest

from loaderx import Dataset, Zrecord, ZrecordError


def _flip_middle_of_record(path, index):
    with open(os.path.join(path, "meta.zr"), "rb") as f:
        f.seek(16 + 16 * index)
        e = f.read(16)
    offset = int.from_bytes(e[0:4], "little")
    phys = int.from_bytes(e[4:8], "little")
    chunk = int.from_bytes(e[12:14], "little")
    with open(os.path.join(path, f"{chunk}.zr"), "r+b") as f:
        f.seek(offset + phys // 2)
        b = f.read(1)
        f.seek(offset + phys // 2)
        f.write(bytes([b[0] ^ 0x40]))
    return chunk, offset


def test_checksums_turn_silent_damage_into_an_error(tmp_path):
    path = str(tmp_path / "d.zr")
    data = np.random.default_rng(0).integers(0, 255, size=(50, 64), dtype=np.uint8)
    Dataset.write(path, data, codec="raw", checksums=True).close()
    chunk, offset = _flip_middle_of_record(path, 7)
    # Without checks the damaged sample comes back wrong, silently.
    with Dataset(path) as plain:
        assert not np.array_equal(plain[7], data[7])
    with Dataset(path, checksums=True) as ds:
        with pytest.raises(ZrecordError) as e:
            ds[7]
        assert e.value.code == -7
        assert "record 7" in str(e.value) and "d.zr" in str(e.value)
        np.testing.assert_array_equal(ds[8], data[8])
        report = ds.verify()
    assert report["checksummed"] and report["records"] == 50
    assert [(b["index"], b["chunk"], b["offset"]) for b in report["bad"]] == [(7, chunk, offset)]


def test_verify_of_a_healthy_store_is_clean(tmp_path):
    with Zrecord(str(tmp_path / "z.zr"), "zstd", checksums=True) as z:
        z.append(np.arange(4000, dtype=np.uint8), 40, 100)
        z.delete([3, 9])
        z.compact()
        assert z.verify() == {"records": 38, "checksummed": True, "bad": []}


def test_delete_needs_the_only_open_handle(tmp_path):
    path = str(tmp_path / "d.zr")
    Dataset.write(path, np.arange(10, dtype=np.int32)).close()
    first, second = Dataset(path), Dataset(path)
    with pytest.raises(ZrecordError) as e:
        first.delete([0])
    assert e.value.code == -10 and "busy" in str(e.value)
    assert len(first) == 10
    second.close()
    first.delete([0])
    assert len(first) == 9
    first.close()


def test_pickled_dataset_keeps_its_checksum_setting(tmp_path):
    path = str(tmp_path / "d.zr")
    Dataset.write(path, np.arange(10, dtype=np.int16), checksums=True).close()
    with Dataset(path, checksums=True) as ds:
        copy = pickle.loads(pickle.dumps(ds))
    try:
        assert copy._checksums is True
        np.testing.assert_array_equal(copy[:], np.arange(10, dtype=np.int16))
    finally:
        copy.close()
