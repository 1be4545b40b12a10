"""loaderx.ray on a real multi-node Ray cluster on this machine: a head and
a second raylet node, each with one CPU, every server on 127.0.0.1 (checked
against the machine's listening sockets), started and stopped here.

Ray writes a dataset into a sharded table from tasks on both nodes and
reads it back bit-exact and typed as the streams are; a write task killed
mid-write is retried, its shards are never published and are removed once
the write is; a write that fails leaves the table as it was.
"""

import os
import signal
import sys

import numpy as np
import pytest

# Read when Ray is imported: with it, Ray's servers bind to 127.0.0.1 and
# its nodes take that address (without it, every interface).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
ray = pytest.importorskip("ray")
import ray.data  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import loaderx  # noqa: E402
import loaderx.ray as lxray  # noqa: E402
from loaderx import Collection, Dataset, Table  # noqa: E402


def listening() -> set[str]:
    """The local addresses of every listening TCP socket on the machine."""
    found = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    found.add(fields[1])
    return found


def loopback(address: str) -> bool:
    host = address.split(":")[0]
    # 127.0.0.1 as /proc writes it, in IPv4 and as an IPv4-mapped IPv6.
    return host in ("0100007F", "0000000000000000FFFF00000100007F")


@pytest.fixture(scope="module")
def cluster():
    before = listening()
    c = Cluster(initialize_head=True,
                head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    ray.init(address=c.address, log_to_driver=False)
    # Workers cannot import this module: its sinks travel by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.execution_options.preserve_order = True
    try:
        yield {"new_listeners": listening() - before}
    finally:
        ray.shutdown()
        c.shutdown()


def rows(n, start=0):
    return [{
        "image": np.full((4, 3), (start + i) % 251, np.uint8) + np.arange(12, dtype=np.uint8)
        .reshape(4, 3),
        "label": start + i,
        "text": f"row {start + i}" * ((start + i) % 3),
        "tokens": np.arange((start + i) % 5 + 1, dtype=np.int32) * (start + i),
    } for i in range(n)]


def assert_table_holds(table, items):
    assert table.rows == len(items)
    assert np.array_equal(table["image"][:], np.stack([r["image"] for r in items]))
    assert np.array_equal(table["label"][:], [r["label"] for r in items])
    assert table["text"][:] == [r["text"] for r in items]
    assert all(np.array_equal(a, r["tokens"]) for a, r in zip(table["tokens"][:], items))


class NodeRecordingSink(lxray.TableDatasink):
    """Notes in a file the node each write task ran on."""

    def __init__(self, path, notes, **kw):
        super().__init__(path, **kw)
        self.notes = notes

    def write(self, blocks, ctx):
        node = ray.get_runtime_context().get_node_id()
        with open(os.path.join(self.notes, f"{ctx.task_idx}"), "w") as f:
            f.write(node)
        return super().write(blocks, ctx)


def test_the_cluster_has_two_nodes_and_listens_on_loopback_only(cluster):
    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 2
    assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
    assert cluster["new_listeners"]
    assert all(loopback(a) for a in cluster["new_listeners"]), cluster["new_listeners"]


def test_write_from_both_nodes_and_read_back(cluster, tmp_path):
    items = rows(3000)
    ds = ray.data.from_items(items, override_num_blocks=8)
    notes = tmp_path / "notes"
    notes.mkdir()
    sink = NodeRecordingSink(tmp_path / "t", str(notes), shard_rows=256)
    ds.write_datasink(sink, ray_remote_args={"scheduling_strategy": "SPREAD"})
    assert len({p.read_text() for p in notes.iterdir()}) == 2
    with Table(tmp_path / "t") as table:
        assert_table_holds(table, items)
        # Each task's rows end in a shard of its own.
        assert len(table.shards) >= 8

    back = lxray.read(tmp_path / "t")
    schema = back.schema()
    types = dict(zip(schema.names, map(str, schema.types)))
    assert "shape=(4, 3), dtype=uint8" in types["image"]
    assert types["label"] == "int64" and types["text"] == "string"
    assert "VariableShaped" in types["tokens"] and "int32" in types["tokens"]
    got = back.take_all()
    assert len(got) == len(items)
    for g, r in zip(got, items):
        assert np.array_equal(g["image"], r["image"]) and g["label"] == r["label"]
        assert g["text"] == r["text"] and np.array_equal(g["tokens"], r["tokens"])
    # Read tasks over ranges of whole shards (as many as asked for once
    # tasks may be small), one column only.
    source = lxray.TableDatasource(tmp_path / "t", columns=["label"], task_bytes=1)
    bounds = [0, *np.cumsum([len(Collection(tmp_path / "t" / "label", shards=[s]))
                             for s in Collection.published(tmp_path / "t" / "label")])]
    tasks = source.get_read_tasks(5)
    ends = np.cumsum([t.metadata.num_rows for t in tasks])
    assert len(tasks) == 5 and ends[-1] == 3000 and set(ends) <= set(bounds)
    assert len(lxray.TableDatasource(tmp_path / "t").get_read_tasks(5)) == 1  # 300 kB
    labels = ray.data.read_datasource(source, override_num_blocks=5)
    assert labels.schema().names == ["label"]
    assert [r["label"] for r in labels.take_all()] == list(range(3000))

    # A second write appends its own shards (not synced: the same bytes).
    more = rows(500, start=3000)
    table = lxray.write(ray.data.from_items(more, override_num_blocks=3), tmp_path / "t",
                        durable=False)
    assert_table_holds(table, items + more)
    table.close()


def test_read_a_dataset(cluster, tmp_path):
    x = np.random.default_rng(0).integers(0, 9, (1000, 7), dtype=np.int16)
    Dataset.write(tmp_path / "d", x, shard_records=300).close()
    got = lxray.read(tmp_path / "d", override_num_blocks=3).take_batch(1000)["data"]
    assert np.array_equal(got, x)


class KilledOnceSink(lxray.TableDatasink):
    """Task 1's first attempt writes a block's rows, then its process is
    SIGKILLed: a write task dying mid-write."""

    def __init__(self, path, marker, **kw):
        super().__init__(path, **kw)
        self.marker = marker

    def write(self, blocks, ctx):
        def blocks_then_death():
            for k, block in enumerate(blocks):
                yield block
                if ctx.task_idx == 1 and k == 0:
                    try:
                        os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
                    except FileExistsError:
                        continue  # the retry lives
                    # Its first block is in its shards by now: flush them.
                    os.kill(os.getpid(), signal.SIGKILL)
        return super().write(blocks_then_death(), ctx)


def test_a_write_task_killed_mid_write_publishes_nothing_of_its_first_attempt(cluster,
                                                                              tmp_path):
    items = rows(2000)
    ds = ray.data.from_items(items, override_num_blocks=4).repartition(2)
    sink = KilledOnceSink(tmp_path / "t", str(tmp_path / "killed"), shard_rows=100)
    ds.write_datasink(sink)
    assert (tmp_path / "killed").exists()
    with Table(tmp_path / "t") as table:
        assert_table_holds(table, items)
        published = set(table.shards)
    # The dead attempt's shards, which nothing lists, were removed once the
    # write was published: every stream (a ragged one's shapes too) holds
    # just the published shards.
    for name in ("image", "label", "text", "tokens"):
        for path in (tmp_path / "t" / name, tmp_path / "t" / name / "shapes.zr"):
            if path.is_dir():  # shapes: the ragged stream's only
                on_disk = {p.name for p in path.iterdir()
                           if p.is_dir() and p.name != "shapes.zr"}
                assert on_disk == published, path
                assert set(Collection.published(path)) == published


class FailingSink(lxray.TableDatasink):
    def write(self, blocks, ctx):
        if ctx.task_idx == 1:
            list(blocks)
            raise RuntimeError("this task fails")
        return super().write(blocks, ctx)


def test_a_failed_write_leaves_the_table_as_it_was(cluster, tmp_path):
    first = rows(300)
    lxray.write(ray.data.from_items(first, override_num_blocks=2), tmp_path / "t").close()
    ds = ray.data.from_items(rows(600, start=300), override_num_blocks=3)
    with pytest.raises(Exception, match="this task fails"):
        ds.write_datasink(FailingSink(tmp_path / "t"), ray_remote_args={"max_retries": 0})
    with Table(tmp_path / "t") as table:
        assert_table_holds(table, first)


def test_a_table_of_single_stores_is_refused(cluster, tmp_path):
    Table.write(tmp_path / "t", {"label": np.arange(5)}).close()
    with pytest.raises(Exception, match="table of single stores"):
        lxray.write(ray.data.from_items([{"label": 1}]), tmp_path / "t")
    assert loaderx.open(tmp_path / "t").rows == 5


class _Task:
    task_idx = 0


def test_arrow_byte_and_string_columns_are_written_from_their_buffers(tmp_path):
    """Binary and string columns of Arrow blocks (sliced, in several chunks,
    32- and 64-bit offsets, empty items) reach the table as Arrow holds
    them, without an object per item, in groups that cross shards."""
    import pyarrow as pa

    from loaderx.bytes_dataset import PackedItems, append_items

    rng = np.random.default_rng(5)
    blobs = [rng.bytes(int(n)) for n in rng.integers(0, 300, 400)]
    texts = [f"é{i}" * (i % 4) for i in range(400)]
    part = lambda lo, hi: pa.table({  # noqa: E731
        "blob": pa.array(blobs[lo:hi], pa.binary()),
        "big": pa.array(blobs[lo:hi], pa.large_binary()),
        "text": pa.array(texts[lo:hi], pa.string()),
        "wide": pa.array(texts[lo:hi], pa.large_string()),
        "label": pa.array(np.arange(lo, hi)),
    })
    block = pa.concat_tables([part(0, 150), part(150, 400)]).slice(7, 380)
    columns = lxray.columns_of(block)
    assert all(isinstance(columns[n], PackedItems) for n in ("blob", "big", "text", "wide"))
    assert list(columns) == block.column_names

    sink = lxray.TableDatasink(tmp_path / "t", codec="raw", shard_rows=100, durable=False)
    sink.on_write_start()
    result = type("Result", (), {"write_returns": [sink.write([block], _Task())]})
    sink.on_write_complete(result)
    with Table(tmp_path / "t") as table:
        assert table["blob"][:] == blobs[7:387] and table["big"][:] == blobs[7:387]
        assert table["text"][:] == texts[7:387] and table["wide"][:] == texts[7:387]
        assert np.array_equal(table["label"][:], np.arange(7, 387))
        assert len(table.shards) == 4

    # Groups of a few bytes each: every item still lands whole, in order.
    store = loaderx.Zrecord(tmp_path / "s", "raw")
    packed = PackedItems(np.frombuffer(b"".join(blobs), np.uint8),
                         np.cumsum([0] + [len(b) for b in blobs]), "bytes")
    assert append_items(store, packed[3:40], "bytes", 5) == 37
    idxs = np.arange(len(store))
    lens = store.lengths(idxs).astype(np.int64)
    flat = np.zeros(int(lens.sum()), np.uint8)
    store.gather_var(idxs, flat, np.cumsum(lens) - lens)
    assert [bytes(b) for b in np.split(flat, np.cumsum(lens)[:-1])] == blobs[3:40]
    with pytest.raises(TypeError, match="a str dataset takes str items"):
        append_items(store, packed, "str", 1 << 20)
    # Refused from the offsets alone, before any byte is read.
    huge = PackedItems(np.zeros(2, np.uint8), np.array([0, loaderx.MAX_RECORD_LEN + 1]), "bytes")
    with pytest.raises(ValueError, match="exceeds"):
        append_items(store, huge, "bytes", 1 << 20)
