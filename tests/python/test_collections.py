"""Sharded collections from Python: Dataset.write(..., shard_records=) makes
a dataset of many stores that reads, and loads through the DataLoader, as
one (bit-exact against the array written, and against the same data in one
store); writers in several processes add to one dataset, each publishing
its shards at once; Collection and CollectionWriter directly; what sharded
datasets do not have yet is refused clearly.
"""

import multiprocessing
import os

import numpy as np
import pytest

from loaderx import Collection, CollectionWriter, DataLoader, Dataset, Sampler


def test_a_sharded_dataset_reads_and_loads_as_one(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 1000, (1000, 3, 5)).astype(np.int32)
    ds = Dataset.write(tmp_path / "x", x, shard_records=128, codec="zstd")
    assert ds.sharded and len(ds) == 1000
    shards = Collection(tmp_path / "x").shards
    assert len(shards) == 8
    assert np.array_equal(ds[np.arange(1000)], x)
    assert np.array_equal(ds[-1], x[-1])
    order = rng.permutation(1000)[:300]
    assert np.array_equal(ds[order], x[order])
    one = Dataset.write(tmp_path / "one", x)
    kw = dict(batch_size=64, mode=Sampler.Mode.SHUFFLE, seed=4, num_workers=2)
    with DataLoader(ds, **kw) as sharded, DataLoader(one, **kw) as single:
        for _ in range(40):  # more than two epochs
            assert np.array_equal(next(sharded)["data"], next(single)["data"])
    ds.close(), one.close()


def test_appending_to_a_sharded_dataset_publishes_new_shards(tmp_path):
    a = np.arange(10, dtype=np.int64)
    Dataset.write(tmp_path / "d", a, shard_records=4).close()
    # Appended without naming shard sizes: the dataset is sharded already.
    ds = Dataset.write(tmp_path / "d", a + 100)
    assert ds.sharded
    assert np.array_equal(ds[np.arange(20)], np.concatenate([a, a + 100]))
    assert list(Collection(tmp_path / "d").starts)[:4] == [0, 4, 8, 10]
    with pytest.raises(NotImplementedError, match="sharded"):
        ds.delete([0])
    ds.close()


def _write_part(path, part):
    Dataset.write(path, np.full((50, 2), part, np.int16), shard_records=20).close()


def test_writers_in_several_processes_add_to_one_dataset(tmp_path):
    path = tmp_path / "d"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_write_part, args=(path, p)) for p in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    ds = Dataset(path)
    got = ds[np.arange(len(ds))]
    assert len(ds) == 200
    # Each writer's samples are there, together and whole.
    for p in range(4):
        assert (got[:, 0] == p).sum() == 50
    ds.close()


def test_collection_writer_and_reader_directly(tmp_path):
    w = CollectionWriter(tmp_path / "c", "raw", shard_records=3)
    items = [os.urandom(n) for n in (5, 0, 17, 1, 2, 300, 9)]
    lens = np.array([len(b) for b in items], np.uint32)
    src = b"".join(items)
    w.append_var(src, np.cumsum(lens) - lens, lens)
    with Collection(tmp_path / "c") as unpublished:
        assert len(unpublished) == 0 and unpublished.generation == 0
    assert w.publish() == 1
    with Collection(tmp_path / "c") as c:
        assert len(c) == 7 and c.shards == w.shards
        assert list(c.lengths(range(7))) == list(lens)
        dst = np.zeros(int(lens.sum()), np.uint8)
        c.gather_var(np.arange(7), dst, np.cumsum(lens) - lens)
        assert dst.tobytes() == src
        fixed = c.gather_array([5, 3], 300)
        assert fixed[:300].tobytes() == items[5]
        assert fixed[300:301].tobytes() == items[3] and not fixed[301:].any()
    with pytest.raises(ValueError, match="closed"):
        len(c)
