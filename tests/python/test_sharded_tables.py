"""Sharded tables and sharded ragged datasets: every stream a collection
whose shards have the same names and lengths as the others'. They read and
load as the same data written unsharded (bit-exact against the columns
written); writers in several processes add to one table at once; a publish
cut off between its collections leaves the table as it was, and the next
publisher completes it; a host's view opens only its shards; a table of
more shards than the process may hold files open loads right.
"""

import errno
import json
import multiprocessing
import subprocess
import sys

import numpy as np
import pytest

import loaderx.sharding
from conftest import copy_store
from loaderx import (Collection, DataLoader, RaggedDataset, Sampler, StoreBusyError, Table,
                     ZrecordError)
from loaderx.table_shards import ShardWriter, collections


def columns(n, seed=0, start=0):
    rng = np.random.default_rng(seed)
    return {
        "image": rng.integers(0, 255, (n, 4, 3), dtype=np.uint8),
        "label": np.arange(start, start + n, dtype=np.int64),
        "text": [f"row {start + i}" * ((start + i) % 4) for i in range(n)],
        "tokens": [rng.integers(0, 99, size=((start + i) % 6 + 1, 2)).astype(np.int32)
                   for i in range(n)],
    }


def assert_rows(table, cols, rows=None):
    rows = np.arange(len(cols["label"])) if rows is None else rows
    assert np.array_equal(table["image"][rows], cols["image"][rows])
    assert np.array_equal(table["label"][rows], cols["label"][rows])
    assert table["text"][rows] == [cols["text"][r] for r in rows]
    got = table["tokens"][rows]
    assert len(got) == len(rows)
    assert all(np.array_equal(g, cols["tokens"][r]) for g, r in zip(got, rows))


def test_a_sharded_table_reads_and_loads_as_the_same_table_unsharded(tmp_path):
    cols = columns(1000)
    first = {k: v[:600] for k, v in cols.items()}
    rest = {k: v[600:] for k, v in cols.items()}
    Table.write(tmp_path / "s", first, shard_rows=128, codec="zstd").close()
    table = Table.write(tmp_path / "s", rest)  # the table's shard_rows
    # 600 rows: 4 full shards and 88 rows; 400 more: 3 full and 16.
    assert table.rows == 1000 and len(table.shards) == 9
    for name in ("image", "label", "text"):
        assert Collection(tmp_path / "s" / name).shards == table.shards
    assert Collection(tmp_path / "s" / "tokens" / "shapes.zr").shards == table.shards
    manifest = json.loads((tmp_path / "s" / "table.json").read_text())
    assert (manifest["version"], manifest["sharded"], manifest["shard_rows"]) == (2, True, 128)
    assert_rows(table, cols)
    order = np.random.default_rng(1).permutation(1000)[:200]
    assert_rows(table, cols, order)
    one = Table.write(tmp_path / "one", cols)
    kw = dict(batch_size=50, mode=Sampler.Mode.SHUFFLE, seed=4)
    with DataLoader(table, **kw) as sharded, DataLoader(one, **kw) as single:
        for _ in range(25):  # more than an epoch
            a, b = next(sharded), next(single)
            for key in ("image", "label", "text"):
                assert np.array_equal(a[key], b[key]), key
            assert np.array_equal(a["tokens"]["values"], b["tokens"]["values"])
    table.close(), one.close()


def _write_rows(path, seed, start, n):
    Table.write(path, columns(n, seed=seed, start=start), shard_rows=50).close()


def test_writers_in_several_processes_add_to_one_table_at_once(tmp_path):
    Table.write(tmp_path / "t", columns(10, seed=9, start=9000), shard_rows=50).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_rows, args=(tmp_path / "t", w, w * 1000, 100 + w))
             for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with Table(tmp_path / "t") as table:
        assert table.rows == 10 + sum(100 + w for w in range(4))
        labels = table["label"][:]
        # Each writer's rows are together and in order, whatever the order
        # of the writers; every stream is aligned with the labels.
        for w in range(4):
            mine = np.flatnonzero((labels >= w * 1000) & (labels < w * 1000 + 100 + w))
            assert np.array_equal(labels[mine], np.arange(w * 1000, w * 1000 + 100 + w))
            assert np.all(np.diff(mine) == 1)
            want = columns(100 + w, seed=w, start=w * 1000)
            assert np.array_equal(table["image"][mine], want["image"])
            assert table["text"][mine] == want["text"]
            assert all(np.array_equal(g, t) for g, t in zip(table["tokens"][mine],
                                                              want["tokens"]))


def test_a_publish_cut_off_between_streams_is_completed_by_the_next(tmp_path):
    path = tmp_path / "t"
    cols = columns(300)
    Table.write(path, {k: v[:100] for k, v in cols.items()}, shard_rows=64).close()
    manifest = json.loads((path / "table.json").read_text())
    writer = ShardWriter(path, manifest["streams"], 64)
    writer.write({k: v[100:200] for k, v in cols.items()})
    shards = writer.sync()
    # A publisher that stops after the first two collections of four (the
    # ragged stream's values and shapes are the last two of five).
    for p in collections(path, manifest["streams"])[:2]:
        Collection.publish(p, shards)
    with Table(path) as table:
        assert table.rows == 100
        assert_rows(table, {k: v[:100] for k, v in cols.items()})
    # Unpublished shards of a writer that died are never read either.
    dead = ShardWriter(path, manifest["streams"], 64)
    dead.write({k: v[:10] for k, v in cols.items()})
    dead.sync()
    table = Table.write(path, {k: v[200:] for k, v in cols.items()})
    assert table.rows == 300
    assert_rows(table, cols)
    table.close()


def test_a_host_opens_only_the_committed_shards_it_names(tmp_path):
    cols = columns(500)
    with Table.write(tmp_path / "t", cols, shard_rows=100) as table:
        names = table.shards
    with Table(tmp_path / "t", shards=[names[3], names[1]]) as part:
        assert part.shards == [names[1], names[3]] and part.rows == 200
        rows = np.r_[100:200, 300:400]
        assert np.array_equal(part["label"][:], cols["label"][rows])
        assert part["text"][:] == [cols["text"][r] for r in rows]
    with pytest.raises(ValueError, match="not committed shards"):
        Table(tmp_path / "t", shards=["nope-0"])
    with pytest.raises(ValueError, match="not sharded"):
        Table(Table.write(tmp_path / "u", cols).path, shards=names[:1])


def test_a_sharded_table_manifest_is_checked(tmp_path):
    Table.write(tmp_path / "t", columns(20), shard_rows=8).close()
    file = tmp_path / "t" / "table.json"
    good = json.loads(file.read_text())
    for change, message in [({"version": 1}, "only it"), ({"sharded": False}, "only it"),
                            ({"shard_rows": 0}, "shard_rows"), ({"version": 3}, "version 3"),
                            ({"length": 19}, "not a shard boundary")]:
        file.write_text(json.dumps({**good, **change}))
        with pytest.raises(ValueError, match=message):
            Table(tmp_path / "t")


def test_a_sharded_ragged_dataset_completes_a_write_cut_off_between_its_collections(tmp_path):
    rng = np.random.default_rng(3)
    items = [rng.integers(0, 9, size=(i % 5 + 1, 2)).astype(np.int16) for i in range(90)]
    path = tmp_path / "r"
    ds = RaggedDataset.write(path, items[:40], "zstd", shard_records=16)
    assert ds.sharded and len(Collection(path).shards) == 3
    assert all(np.array_equal(a, b) for a, b in zip(ds[:], items[:40]))
    ds.close()
    # A write whose shapes were not published yet: its samples are not read.
    from loaderx.sharding import aligned_writer, new_prefix
    prefix = new_prefix()
    values = aligned_writer(path, "zstd", prefix, None)
    shapes = aligned_writer(path / "shapes.zr", "raw", prefix, None)
    from loaderx.ragged import append_ragged
    append_ragged(values, shapes, items[40:60], np.dtype(np.int16), 2, 1 << 20)
    values.sync(), shapes.sync()
    Collection.publish(path, values.shards)
    with RaggedDataset(path) as ds:
        assert len(ds) == 40
    ds = RaggedDataset.write(path, items[60:])
    assert len(ds) == 90
    assert all(np.array_equal(a, b) for a, b in zip(ds[:], items))
    with RaggedDataset(path, shards=Collection(path).shards[-1:]) as last:
        assert all(np.array_equal(a, b) for a, b in zip(last[:], items[60:]))
    ds.close()


def assert_deleted(table, cols, shard_rows, deleted):
    """Each shard lost exactly its rows of `deleted` and kept the rest,
    and every stream still agrees row by row (labels name the rows)."""
    labels = table["label"][np.arange(table.rows)]
    assert table.rows == len(cols["label"]) - len(deleted)
    starts = Collection(table.path / "label").starts
    kept = set(range(len(cols["label"]))) - set(deleted)
    for s in range(len(starts) - 1):
        before = set(range(s * shard_rows, min((s + 1) * shard_rows, len(cols["label"]))))
        assert set(labels[starts[s]:starts[s + 1]].tolist()) == before & kept, s
    table_rows = np.arange(table.rows)
    assert_rows(table, {k: ([v[i] for i in labels] if isinstance(v, list) else v[labels])
                        for k, v in cols.items()}, table_rows)


def test_a_sharded_table_deletes_rows_shard_by_shard_in_every_stream(tmp_path):
    cols = columns(300)
    table = Table.write(tmp_path / "t", cols, shard_rows=64)
    deleted = [0, 5, 63, 64, 200, 201, 250, 299]  # four shards, the last one's last row
    table.delete(deleted[:-1] + [-1])
    assert_deleted(table, cols, 64, deleted)
    with DataLoader(table, batch_size=32, mode=Sampler.Mode.SHUFFLE, seed=1) as loader:
        batch = next(loader)
        assert np.array_equal(batch["image"], cols["image"][batch["label"]])
    # A later write still appends aligned shards after the shorter ones.
    Table.write(tmp_path / "t", columns(10, start=300)).close()
    again = Table(tmp_path / "t")
    assert again.rows == 300 - 8 + 10
    assert sorted(again["label"][np.arange(again.rows)].tolist())[-10:] == list(range(300, 310))
    with pytest.raises(ValueError, match="part of the table's shards"):
        Table(tmp_path / "t", shards=again.shards[:1]).delete([0])
    table.close(), again.close()


def test_a_delete_cut_off_between_streams_is_finished_by_the_next_open(tmp_path):
    """The journal in table.json is written before any store changes; a
    crash after some streams deleted leaves the table to be finished by the
    next handle that can write, to the rows an uncut delete leaves."""
    from loaderx.table import read_manifest, write_manifest
    from loaderx.table_shards import plan_delete
    from loaderx import Zrecord

    cols = columns(200)
    Table.write(tmp_path / "t", cols, shard_rows=50).close()
    copy_store(tmp_path / "t", tmp_path / "whole")
    rows = [3, 49, 50, 120, 199]
    with Table(tmp_path / "whole") as whole:
        whole.delete(rows)
    manifest = read_manifest(tmp_path / "t")
    manifest["delete"] = plan_delete(tmp_path / "t", manifest, rows)
    write_manifest(tmp_path / "t", manifest)
    paths = collections(tmp_path / "t", manifest["streams"])
    for p in paths[:2]:  # "image" and "label" deleted, "text" and "tokens" not
        for name, shard in manifest["delete"]["shards"].items():
            with Zrecord(p / name, create=False) as store:
                store.delete(np.array(shard["rows"], dtype=np.uint64))
    with pytest.raises(ValueError, match="delete was interrupted"):
        Table(tmp_path / "t", read_only=True)
    with Table(tmp_path / "t") as table, Table(tmp_path / "whole") as whole:
        assert table.rows == whole.rows == 195
        assert_deleted(table, cols, 50, rows)
        everything = np.arange(195)
        for name in ("image", "label"):
            assert np.array_equal(table[name][everything], whole[name][everything])
        assert table["text"][everything] == whole["text"][everything]
    assert json.loads((tmp_path / "t" / "table.json").read_text())["delete"] is None


# Run in a process of its own, under the low limit on open files it sets.
_UNDER_FEW_FILES = """
import resource, sys
import numpy as np
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
from loaderx import DataLoader, Sampler, Table
table = Table(sys.argv[1])
loader = DataLoader(table, batch_size=256, mode=Sampler.Mode.SHUFFLE, seed=3)
seen = []
for _, batch in zip(range(12), loader):
    want = (batch["label"][:, None] * 7 % 251).astype(np.uint8).repeat(8, axis=1)
    assert np.array_equal(batch["image"], want)
    seen.append(batch["label"])
loader.close()
print(len(np.unique(np.concatenate(seen))))
"""


def test_a_table_of_more_shards_than_files_allowed_loads_right(tmp_path):
    """A table of two streams over 600 shards each, loaded shuffled by a
    process allowed 256 open files (each open shard store holds three or
    four): every batch right, where it used to fail with "Too many open
    files" (each batch held all its shards open at once)."""
    rows = 1200
    label = np.arange(rows, dtype=np.int64)
    image = (label[:, None] * 7 % 251).astype(np.uint8).repeat(8, axis=1)
    Table.write(tmp_path / "t", {"label": label, "image": image}, shard_rows=2)
    out = subprocess.run([sys.executable, "-c", _UNDER_FEW_FILES, str(tmp_path / "t")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout) == rows  # 12 batches of 256 cover every row


def test_a_delete_waits_for_the_readers_of_a_sharded_table(tmp_path):
    """A delete renumbers a shard's rows: while a reader has the table open,
    even one that has not opened that shard's store yet, the delete is
    refused (or waits, with a timeout), as it is for a table of one store
    per stream; the reader reads its rows right all the while."""
    n = 12
    Table.write(tmp_path / "t", {"label": np.arange(n), "image": np.arange(2 * n).reshape(n, 2)},
                shard_rows=4)
    reader = Table(tmp_path / "t")
    assert reader["label"][0] == 0
    writer = Table(tmp_path / "t")
    for timeout in (0.0, 0.2):
        with pytest.raises(StoreBusyError, match="readers of the collection have it open"):
            writer.delete([5], timeout=timeout)
    assert reader["label"][5] == 5 and np.array_equal(reader["image"][5], [10, 11])
    reader.close()
    writer.delete([5])
    assert writer.rows == n - 1
    assert writer["label"][4] == 4 and writer["label"][5] == 7  # its shard's last row
    writer.close()


def test_rows_deleted_by_another_handle_are_an_error_not_other_rows(tmp_path):
    """A reader opened before a program that takes no locks (loaderx
    0.5.0, or one that removed the readers' lock files) deleted rows of a
    shard it had not opened yet gets an error naming that shard when it
    reads there (the rows under its old numbers are gone), where it read
    the rows moved into the holes; shards without deletes read on."""
    n = 12
    Table.write(tmp_path / "t", {"label": np.arange(n), "image": np.arange(2 * n).reshape(n, 2)},
                shard_rows=4)
    reader = Table(tmp_path / "t")
    assert reader["label"][0] == 0
    for lock in (tmp_path / "t").glob("*/collection.lock"):
        lock.unlink()
    writer = Table(tmp_path / "t")
    writer.delete([5])
    writer.close()
    for stream in ("label", "image"):
        with pytest.raises(ZrecordError, match="records were deleted from it since"):
            reader[stream][4]
    assert reader["label"][9] == 9
    assert np.array_equal(reader["image"][9], [18, 19])
    reader.close()
    with Table(tmp_path / "t") as again:
        assert again["label"][4] == 4 and again["label"][5] == 7


def shard_folders(path):
    """The folders of the collection at `path` that hold a store."""
    return sorted(x.name for x in path.iterdir() if (x / "meta.zr").is_file())


class FailingPublish:
    """A CollectionWriter whose publish fails after its shards were written
    and synced (a full disk at the manifest, say)."""

    writer_class = loaderx.sharding.CollectionWriter

    def __init__(self, *args, **kwargs):
        self.writer = self.writer_class(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.writer, name)

    def publish(self):
        self.writer.sync()
        raise OSError(errno.ENOSPC, "no space left for the manifest")


def test_a_publish_that_fails_removes_the_shards_it_made(tmp_path, monkeypatch):
    path = tmp_path / "d"
    loaderx.Dataset.write(path, np.arange(40, dtype=np.int64), shard_records=16).close()
    published = shard_folders(path)
    monkeypatch.setattr(loaderx.sharding, "CollectionWriter", FailingPublish)
    with pytest.raises(OSError, match="manifest"):
        loaderx.Dataset.write(path, np.arange(100, dtype=np.int64))
    assert shard_folders(path) == published
    monkeypatch.undo()
    with loaderx.Dataset(path) as ds:
        assert len(ds) == 40 and np.array_equal(ds[np.arange(40)], np.arange(40))


def test_a_write_that_fails_removes_the_shards_it_made(tmp_path):
    # Readers never see the shards of a write that fails; it removes them,
    # which a crash cannot, so they do not hold the disk (a full one, say).
    cols = columns(600)
    Table.write(tmp_path / "s", cols, shard_rows=128).close()
    bad = columns(400, start=600)
    bad["text"][300] = 5  # after two shards of the 400 rows
    with pytest.raises(TypeError, match="str items"):
        Table.write(tmp_path / "s", bad)
    for path in collections(tmp_path / "s", {"image": "fixed", "label": "fixed",
                                              "text": "bytes", "tokens": "ragged"}):
        assert shard_folders(path) == sorted(Collection(path).shards), path
    with Table(tmp_path / "s") as table:
        assert table.rows == 600
        assert_rows(table, cols)

    def failing():
        yield from (np.arange(i % 5 + 1, dtype=np.int32) for i in range(50))
        raise RuntimeError("the source failed")

    path = tmp_path / "r"
    RaggedDataset.write(path, [np.arange(3, dtype=np.int32)] * 10, shard_records=8).close()
    with pytest.raises(RuntimeError, match="source failed"):
        RaggedDataset.write(path, failing())
    for p in (path, path / "shapes.zr"):
        assert shard_folders(p) == sorted(Collection(p).shards), p
    with RaggedDataset(path) as ds:
        assert len(ds) == 10
