"""Sharded collections from Python: Dataset.write(..., shard_records=) makes
a dataset of many stores that reads, and loads through the DataLoader, as
one (bit-exact against the array written, and against the same data in one
store); writers in several processes add to one dataset, each publishing
its shards at once; Collection and CollectionWriter directly; what sharded
datasets do not have yet is refused clearly.
"""

import multiprocessing
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import copy_store, run_hosts
from loaderx import (BytesDataset, Collection, CollectionWriter, DataLoader, Dataset, Sampler,
                     StoreBusyError)


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
    # An empty selection is an empty array, as from one store (it panicked).
    for empty in ([], np.array([], np.int64), slice(5, 5)):
        assert ds[empty].shape == one[empty].shape == (0, 3, 5)
        assert ds[empty].dtype == np.int32
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
    ds.close()


def test_deletes_and_compaction_work_per_shard_and_keep_the_index_dense(tmp_path):
    x = np.arange(100, dtype=np.int64) * 10
    ds = Dataset.write(tmp_path / "d", x, shard_records=30, codec="raw")
    model = list(x)
    ds.delete([0, 45, 99, 31])        # shards 0, 1 and 3
    for i in sorted([0, 45, 99, 31], reverse=True):
        model.pop(i)  # the values, whatever order each shard keeps them in
    assert len(ds) == 96
    assert sorted(ds[np.arange(96)].tolist()) == sorted(model)
    before = ds.stats()
    assert before["records"] == 96 and before["reclaimable"] > 0
    ds.compact()
    after = ds.stats()
    assert after["reclaimable"] == 0 and after["live_bytes"] == before["live_bytes"]
    report = ds.verify()
    assert report["records"] == 96 and report["bad"] == []
    # A loader holds the shards: a delete waits for them, then says so.
    with DataLoader(ds, batch_size=8) as loader:
        next(loader)
        with pytest.raises(StoreBusyError):
            ds.delete([1])
    assert len(ds) == 96
    ds.close()


def test_a_shards_store_opened_by_any_path_waits_for_the_collections_readers(tmp_path):
    # A shard's store opened directly, even as `.` from inside its folder,
    # is known for a shard: its delete is refused while a reader has the
    # collection open (it would renumber rows the reader has not read yet).
    ds = Dataset.write(tmp_path / "d", np.arange(12, dtype=np.int64), shard_records=4)
    assert ds[0] == 0  # the reader has opened the first shard's store only
    shard = tmp_path / "d" / Collection(tmp_path / "d").shards[1]
    delete = ("import loaderx\n"
              "with loaderx.Zrecord('.', create=False) as z:\n"
              "    try:\n"
              "        z.delete([0])\n"
              "    except loaderx.StoreBusyError as e:\n"
              "        print('busy:', e)\n")
    out = subprocess.run([sys.executable, "-c", delete], cwd=shard, capture_output=True,
                         text=True, check=True).stdout
    assert "busy:" in out and "readers of the collection" in out, out
    assert np.array_equal(ds[np.arange(12)], np.arange(12))
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


HOST = """
import json, sys
from loaderx import Collection, DataLoader, Dataset, NotAStoreError, Sampler

path, mine, other = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
# This host's folder holds its own shards only: another's does not open, and
# neither does the whole dataset.
for attempt in (lambda: Collection(path, shards=[other]), lambda: Dataset(path)):
    try:
        attempt()
    except NotAStoreError:
        pass
    else:
        sys.exit("opened a shard this host does not hold")
ds = Dataset(path, shards=mine)
kw = dict(batch_size=16, mode=Sampler.Mode.SHUFFLE, seed=3, num_workers=2, epochs=1,
          last_batch="partial")
with DataLoader(ds, **kw) as loader:
    whole = [b["data"][:, 0].tolist() for b in loader]
with DataLoader(ds, **kw) as first:
    head = [next(first)["data"][:, 0].tolist() for _ in range(3)]
    state = first.state_dict()
with DataLoader(ds, state=state, **kw) as rest:
    tail = [b["data"][:, 0].tolist() for b in rest]
assert head + tail == whole, "the resumed epoch differs"
print(json.dumps(sum(whole, [])))
"""


def test_hosts_that_hold_a_part_cover_the_whole_dataset_each_epoch(tmp_path):
    """Three processes stand for three hosts, each with a folder holding the
    dataset's manifest and its own shards only (its local disk); each reads
    its shards for one epoch (and resumes one exactly); together they read
    every sample exactly once."""
    import json
    import shutil

    path = tmp_path / "all"
    ids = np.arange(600, dtype=np.int32)
    Dataset.write(path, np.stack([ids, 2 * ids], axis=1), shard_records=50).close()
    names = Collection.published(path)
    assert len(names) == 12
    argvs = []
    for host in range(3):
        mine = names[host::3]
        local = tmp_path / f"host{host}"
        local.mkdir()
        for f in path.iterdir():
            if f.is_file():
                shutil.copy(f, local / f.name)
        for name in mine:
            copy_store(path / name, local / name)
        argvs.append([local, json.dumps(mine), names[(host + 1) % 3]])
    seen = []
    for got in run_hosts(HOST, argvs):
        assert len(got) == 200
        seen += got
    assert sorted(seen) == list(range(600))


def test_a_sharded_byte_dataset(tmp_path):
    items = [os.urandom(n) for n in range(0, 4000, 97)]
    docs = BytesDataset.write(tmp_path / "b", items, codec="zstd", shard_bytes=10_000)
    assert docs.sharded and len(Collection(tmp_path / "b").shards) > 5
    assert docs[np.arange(len(items))] == items
    more = BytesDataset.write(tmp_path / "b", [b"tail"])
    assert more.sharded and more[-1] == b"tail" and len(more) == len(items) + 1
    assert more.stats()["records"] == len(items) + 1 and more.verify()["bad"] == []
    with DataLoader({"doc": more}, batch_size=8, num_workers=2) as loader:
        batch = next(loader)
        assert len(batch["doc"]) == 8
    docs.close(), more.close()
