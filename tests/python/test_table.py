"""Tables (loaderx.Table, loaderx.open) and byte datasets: aligned streams,
round trips against the source, the DataLoader over a table, and alignment
after kill -9 at any moment of an append or a delete."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import loaderx
from loaderx import BytesDataset, DataLoader, Dataset, RaggedDataset, StoreBusyError, Table


def rows(start, n):
    """Rows whose streams all derive from the row id, so that alignment is
    checkable: label == id, text == f"row {id}", tokens == [id] * (id % 5 + 1)."""
    ids = np.arange(start, start + n, dtype=np.int64)
    return {
        "label": ids,
        "text": [f"row {i}" for i in ids],
        "blob": [bytes([i % 256]) * (i % 7) for i in ids],
        "tokens": [np.full(i % 5 + 1, i, dtype=np.int32) for i in ids],
    }


def check_aligned(table):
    """Every row's items belong together; returns the row ids in order."""
    ids = table["label"][:]
    assert len(ids) == table.rows
    for name in table:
        assert len(table[name]) == table.rows, name
    texts, blobs, tokens = table["text"][:], table["blob"][:], table["tokens"][:]
    for k, i in enumerate(ids.tolist()):
        assert texts[k] == f"row {i}"
        assert blobs[k] == bytes([i % 256]) * (i % 7)
        np.testing.assert_array_equal(tokens[k], np.full(i % 5 + 1, i, dtype=np.int32))
    return ids.tolist()


def test_a_table_round_trips_every_kind_of_stream(tmp_path):
    path = tmp_path / "t"
    t = Table.write(path, rows(0, 50), classes={"label": ["a", "b"]}, source={"from": "test"})
    assert t.rows == 50 and sorted(t) == ["blob", "label", "text", "tokens"]
    assert t.kinds == {"label": "fixed", "text": "bytes", "blob": "bytes", "tokens": "ragged"}
    assert check_aligned(t) == list(range(50))
    assert isinstance(t["text"], BytesDataset) and t["text"].kind == "str"
    assert t["blob"].kind == "bytes" and t["blob"][3] == b"\x03\x03\x03"
    t.close()
    Table.write(path, rows(50, 30)).close()
    with loaderx.open(path) as t:
        assert isinstance(t, Table)
        assert t.classes == {"label": ["a", "b"]} and t.source == {"from": "test"}
        assert check_aligned(t) == list(range(80))
        assert t.row(-1)["text"] == "row 79"
    # Each stream is a dataset of its own kind, which loaderx.open opens alone too.
    assert isinstance(loaderx.open(path / "label"), Dataset)
    assert isinstance(loaderx.open(path / "tokens"), RaggedDataset)
    assert loaderx.open(path / "text")[:2] == ["row 0", "row 1"]


def test_a_dataloader_loads_a_table_directly(tmp_path):
    Table.write(tmp_path / "t", rows(0, 64)).close()
    table = loaderx.open(tmp_path / "t")
    with DataLoader(table, batch_size=16, seed=3) as loader:
        for _ in range(8):
            batch = next(loader)
            ids = batch["label"].tolist()
            assert batch["text"] == [f"row {i}" for i in ids]
            assert batch["blob"] == [bytes([i % 256]) * (i % 7) for i in ids]
            values, offsets = batch["tokens"]["values"], batch["tokens"]["offsets"]
            for k, i in enumerate(ids):
                assert (values[offsets[k] : offsets[k + 1]] == i).all()
    table.close()


def test_byte_datasets_write_read_and_refuse_the_other_kind(tmp_path):
    items = [b"", b"\x00\xff" * 1000, bytes(range(256))]
    ds = BytesDataset.write(tmp_path / "b", items, codec="zstd")
    assert ds[:] == items and ds[-1] == items[-1] and ds[[2, 0]] == [items[2], items[0]]
    assert ds.lengths([0, 1]).tolist() == [0, 2000]
    ds.close()
    with pytest.raises(TypeError, match="bytes dataset takes bytes-like"):
        BytesDataset.write(tmp_path / "b", ["text"])
    with pytest.raises(ValueError, match="holds bytes items, cannot append str"):
        BytesDataset.write(tmp_path / "b", ["text"], kind="str")
    texts = BytesDataset.write(tmp_path / "s", ["héllo", "", "wörld"])
    assert texts.kind == "str" and texts[0] == "héllo" and texts[1:] == ["", "wörld"]
    with pytest.raises(IndexError):
        texts[3]


def test_columns_of_different_lengths_or_other_streams_are_refused(tmp_path):
    with pytest.raises(ValueError, match="same number of rows"):
        Table.write(tmp_path / "t", {"a": np.arange(3), "b": ["x"]})
    Table.write(tmp_path / "t", {"a": np.arange(3)}).close()
    with pytest.raises(ValueError, match="streams"):
        Table.write(tmp_path / "t", {"b": np.arange(3)})
    with pytest.raises(ValueError, match="stream name"):
        Table.write(tmp_path / "u", {"../x": np.arange(3)})
    with pytest.raises(FileNotFoundError, match="neither table.json nor schema.json"):
        loaderx.open(tmp_path / "nothing")


def test_a_delete_keeps_every_stream_aligned(tmp_path):
    t = Table.write(tmp_path / "t", rows(0, 40))
    t.delete([0, 5, 39, -2])
    assert t.rows == 36
    ids = check_aligned(t)
    assert sorted(ids) == sorted(set(range(40)) - {0, 5, 38, 39})
    t.close()


def test_records_past_the_committed_length_are_not_rows(tmp_path):
    """An append that died before its manifest: a stream longer than the
    table. Readers do not see the extra records; the next writer trims them
    before it appends, so the streams stay aligned."""
    path = tmp_path / "t"
    Table.write(path, rows(0, 10)).close()
    Dataset.write(path / "label", np.array([999], dtype=np.int64)).close()
    BytesDataset.write(path / "text", ["row 999"]).close()
    with loaderx.open(path) as t:
        assert t.rows == 10 and len(t["label"]) == 10 and check_aligned(t) == list(range(10))
    Table.write(path, rows(10, 5)).close()
    with loaderx.open(path) as t:
        assert check_aligned(t) == list(range(15))


WRITER = """
import os
import sys
import numpy as np
sys.path.insert(0, sys.argv[3])
from test_table import rows
from loaderx import Table

path, what = sys.argv[1], sys.argv[2]
if what == "append":
    start = Table(path).rows if os.path.exists(os.path.join(path, "table.json")) else 0
    while True:
        with Table.write(path, rows(start, 7)) as t:
            start = t.rows
        print(start, flush=True)
else:
    rng = np.random.default_rng(int(sys.argv[4]))
    t = Table(path)
    while t.rows > 3:
        t.delete(rng.choice(t.rows, size=3, replace=False))
        print(t.rows, flush=True)
"""


def kill_cycles(path, what, seed, cycles=8):
    """Runs the writer `cycles` times on the table at `path`, each time
    killing it with SIGKILL at a random moment after its first committed
    change, and checks after each kill that the table reopens aligned (so
    the next cycle's writer starts from what the kill left). Returns the
    row ids after the last kill."""
    here = os.path.dirname(__file__)
    rng = np.random.default_rng(seed)
    for _ in range(cycles):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), what, here, str(rng.integers(1 << 30))],
            stdout=subprocess.PIPE, text=True,
        )
        try:
            proc.stdout.readline()
            time.sleep(rng.uniform(0, 0.15))
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
            proc.stdout.close()
        with Table(path) as t:
            ids = check_aligned(t)
    return ids


@pytest.mark.parametrize("seed", range(3))
def test_kill_9_during_appends_leaves_aligned_streams(tmp_path, seed):
    path = tmp_path / "t"
    ids = kill_cycles(path, "append", seed)
    # Each cycle's writer starts from the committed rows, so ids are unique,
    # contiguous and a whole number of 7-row appends.
    assert ids == list(range(len(ids))) and len(ids) % 7 == 0


@pytest.mark.parametrize("seed", range(3))
def test_kill_9_during_deletes_leaves_aligned_streams(tmp_path, seed):
    path = tmp_path / "t"
    Table.write(path, rows(0, 3000)).close()
    ids = kill_cycles(path, "delete", seed)
    assert len(set(ids)) == len(ids) and (3000 - len(ids)) % 3 == 0
    with open(path / "table.json") as f:
        assert json.load(f)["delete"] is None


RAGGED_APPENDER = """
import sys
import numpy as np
from loaderx import RaggedDataset

path, who = sys.argv[1], int(sys.argv[2])
for k in range(150):
    n = k % 5 + 1
    RaggedDataset.write(path, [np.full(n, who * 1000 + k, dtype=np.int32)], durable=False).close()
"""


def test_concurrent_ragged_writers_never_misalign_values_and_shapes(tmp_path):
    """Each writer holds ragged.lock: without it, two writers interleave the
    appends of the values and the shapes stores."""
    path = tmp_path / "r"
    RaggedDataset.write(path, [np.zeros(1, dtype=np.int32)]).close()
    procs = [subprocess.Popen([sys.executable, "-c", RAGGED_APPENDER, str(path), str(w)])
             for w in (1, 2)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    with RaggedDataset(path) as ds:
        samples = ds[1:]
    assert len(samples) == 300
    seen = set()
    for s in samples:
        value = int(s[0])
        assert (s == value).all() and len(s) == value % 1000 % 5 + 1, s
        seen.add(value)
    assert seen == {w * 1000 + k for w in (1, 2) for k in range(150)}


@pytest.mark.parametrize("shard_rows", [None, 4])
def test_a_refused_delete_changes_nothing_now_or_later(tmp_path, shard_rows):
    """A delete refused because another handle has the table open
    (StoreBusyError) deletes nothing: the handle stays usable, other handles
    open the table as before, and no later handle carries the delete out."""
    n = 12
    kw = {} if shard_rows is None else {"shard_rows": shard_rows}
    Table.write(tmp_path / "t", {"label": np.arange(n), "image": np.arange(2 * n).reshape(n, 2)},
                **kw)
    reader = Table(tmp_path / "t")
    writer = Table(tmp_path / "t")
    with pytest.raises(StoreBusyError):
        writer.delete([5])
    assert writer.rows == n and writer["label"][5] == 5
    with Table(tmp_path / "t") as other:
        assert other.rows == n
    reader.close()
    writer.close()
    with Table(tmp_path / "t") as again:
        assert again.rows == n
        assert np.array_equal(again["label"][:], np.arange(n))
        again.delete([5])
        assert again.rows == n - 1


def test_a_delete_refused_after_one_stream_is_finished_by_the_next_handle(tmp_path):
    """A delete that one stream carried out before another refused it (a
    handle had that stream's dataset open) stays recorded: the table does
    not open while it cannot be finished, and the next handle that opens it
    alone finishes it, the streams aligned."""
    n = 12
    Table.write(tmp_path / "t", {"label": np.arange(n), "image": np.arange(2 * n).reshape(n, 2)})
    image = Dataset(tmp_path / "t" / "image")
    writer = Table(tmp_path / "t")
    with pytest.raises(StoreBusyError):
        writer.delete([5])
    with pytest.raises(StoreBusyError):
        Table(tmp_path / "t")
    image.close()
    with Table(tmp_path / "t") as again:
        assert again.rows == n - 1
        assert again["label"][5] == 11 and np.array_equal(again["image"][5], [22, 23])
