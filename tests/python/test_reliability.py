"""Reliability seen from Python: checksums, verify(), locking between
handles, and the error codes they raise."""

import os
import pickle
import subprocess
import sys

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
    with Dataset(path, checksums=False) as plain:
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
        assert z.verify() == {"records": 38, "checksummed": True, "unchecked": 0, "bad": []}


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


# -- across processes ----------------------------------------------------------

#: Bytes per record of the multi-process tests: (writer, seq) and filler.
_REC = 48


def _record(writer, seq):
    head = np.array([writer, seq], dtype="<u4").tobytes()
    return head + bytes([(writer * 31 + seq) % 251]) * (_REC - len(head))


def _append_many(path, writer, batches, per_batch, busy_counter, go):
    """A writer process: appends `batches` batches, retrying when the other
    writer holds the append lock, and counts how often that happened."""
    import time

    z = Zrecord(path, "raw")
    go.wait(30)
    busy = 0
    for b in range(batches):
        src = b"".join(_record(writer, b * per_batch + k) for k in range(per_batch))
        while True:
            try:
                z.append(np.frombuffer(src, dtype=np.uint8), per_batch, _REC)
                break
            except ZrecordError as e:
                assert e.code == -10 and "busy" in str(e), e
                busy += 1
                time.sleep(0.0005)
    z.close()
    with busy_counter.get_lock():
        busy_counter.value += busy


def test_two_processes_appending_at_once_lose_and_mix_nothing(tmp_path):
    import multiprocessing as mp

    path = str(tmp_path / "z.zr")
    Zrecord(path, "raw").close()
    ctx = mp.get_context("spawn")
    busy, go = ctx.Value("i", 0), ctx.Barrier(2)
    batches, per_batch = 1000, 7
    procs = [
        ctx.Process(target=_append_many, args=(path, w, batches, per_batch, busy, go))
        for w in (1, 2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with Zrecord(path, "raw") as z:
        n = len(z)
        assert n == 2 * batches * per_batch
        out = np.empty(n * _REC, dtype=np.uint8)
        z.gather(np.arange(n, dtype=np.uint64), out, _REC)
    recs = out.reshape(n, _REC)
    seen = {1: [], 2: []}
    for r in recs:
        writer, seq = np.frombuffer(r[:8].tobytes(), dtype="<u4")
        assert r.tobytes() == _record(int(writer), int(seq))
        seen[int(writer)].append(int(seq))
    # Every record once, each writer's in its own order, batches never split.
    for w in (1, 2):
        assert seen[w] == list(range(batches * per_batch))
    owners = [int(np.frombuffer(r[:4].tobytes(), dtype="<u4")[0]) for r in recs]
    runs = np.flatnonzero(np.diff(owners)) + 1
    assert all(r % per_batch == 0 for r in runs), "an append was interleaved with another"
    print(f"append lock contended {busy.value} times")


def _read_until_told(path, data, stop, ready, result):
    try:
        with Dataset(path) as ds:
            ready.set()
            rounds = 0
            while not stop.is_set() or rounds == 0:
                np.testing.assert_array_equal(ds[:], data)
                rounds += 1
        result.value = rounds
    except BaseException:
        result.value = -1
        raise


def test_a_reader_process_blocks_delete_and_reads_on_unharmed(tmp_path):
    import multiprocessing as mp

    path = str(tmp_path / "d.zr")
    data = np.arange(2000 * 16, dtype=np.int32).reshape(2000, 16)
    Dataset.write(path, data).close()
    ctx = mp.get_context("spawn")
    stop, ready, result = ctx.Event(), ctx.Event(), ctx.Value("i", 0)
    reader = ctx.Process(target=_read_until_told, args=(path, data, stop, ready, result))
    reader.start()
    try:
        assert ready.wait(30)
        with Dataset(path) as ds:
            for attempt in (ds.delete, lambda _: ds.compact()):
                with pytest.raises(ZrecordError) as e:
                    attempt([0, 5])
                assert e.value.code == -10 and "d.zr" in str(e.value)
            assert len(ds) == 2000
    finally:
        stop.set()
        reader.join(30)
    assert reader.exitcode == 0 and result.value > 0
    # With the reader gone the delete runs.
    with Dataset(path) as ds:
        ds.delete([0, 5])
        assert len(ds) == 1998


def _create_and_write(path, writer, dtype, go, outcome):
    """Writes 10 samples that name their writer, at the same moment as the
    other processes; outcome: 1 written, 2 refused as another kind."""
    rows = np.full((10, 4), writer, dtype=dtype)
    rows[:, 1] = np.arange(10)
    go.wait()
    while True:
        try:
            Dataset.write(path, rows, codec="raw").close()
            outcome.value = 1
            return
        except ValueError as e:
            assert "cannot append" in str(e), e
            outcome.value = 2
            return
        except ZrecordError as e:
            if e.code != -10:  # another handle appending: its turn first
                raise


@pytest.mark.parametrize("round_", range(4))
def test_processes_creating_one_dataset_at_once_never_mix_dtypes(tmp_path, round_):
    import multiprocessing as mp

    path = str(tmp_path / "d.zr")
    ctx = mp.get_context("spawn")
    kinds = {1: "<f4", 2: "<i4", 3: "<f4", 4: "<i4"}
    go = ctx.Barrier(len(kinds))
    outcomes = {w: ctx.Value("i", 0) for w in kinds}
    procs = [
        ctx.Process(target=_create_and_write, args=(path, w, kinds[w], go, outcomes[w]))
        for w in kinds
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    written = [w for w in kinds if outcomes[w].value == 1]
    refused = [w for w in kinds if outcomes[w].value == 2]
    assert sorted(written + refused) == sorted(kinds)
    with Dataset(path) as ds:
        # One kind won; every writer of that kind wrote, each once; the
        # others were refused rather than stored under the winner's dtype.
        assert {kinds[w] for w in written} == {ds.dtype.str}
        assert all(kinds[w] != ds.dtype.str for w in refused)
        got = sorted(tuple(int(v) for v in row[:2]) for row in ds[:])
    assert got == sorted((w, i) for w in written for i in range(10))
    assert not [f for f in os.listdir(path) if f.endswith(".tmp")]


def test_a_schema_is_created_once_and_never_replaced(tmp_path):
    from loaderx.schema_file import SCHEMA, create_schema

    first = create_schema(tmp_path, "loaderx-zrecord", 1, np.dtype("<f4"), {"shape": [2]}, "raw", True)
    text = (tmp_path / SCHEMA).read_text()
    second = create_schema(tmp_path, "loaderx-zrecord", 1, np.dtype("<i4"), {"shape": [2]}, "raw", True)
    assert (first, second) == (True, False)
    assert (tmp_path / SCHEMA).read_text() == text and '"<f4"' in text
    assert sorted(os.listdir(tmp_path)) == [SCHEMA]


APPENDER = r"""
import sys
import numpy as np
from loaderx import Zrecord

path, who = sys.argv[1], int(sys.argv[2])
with Zrecord(path, "raw") as z:
    for batch in range(1000):
        n = 1 + batch % 3
        rec = np.zeros((n, 4), np.uint32)
        rec[:, 0], rec[:, 1], rec[:, 2] = who, batch, np.arange(n)
        z.append(rec, n, 16)
"""


def test_four_processes_appending_at_once_all_succeed(tmp_path):
    """Appends queue for the append lock instead of failing as busy: four
    processes each append 1,000 small batches to one store at once; every
    record is there exactly once, and each batch's records are contiguous
    and in order."""
    import subprocess
    import sys
    path = str(tmp_path / "shared.zr")
    Zrecord(path, "raw").close()
    procs = [subprocess.Popen([sys.executable, "-c", APPENDER, path, str(who)],
                              stderr=subprocess.PIPE, text=True) for who in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    with Zrecord(path) as z:
        n = len(z)
        recs = z.gather_array(np.arange(n), 16).view(np.uint32).reshape(n, 4)
    assert n == 4 * sum(1 + b % 3 for b in range(1000))
    keys = [tuple(r) for r in recs[:, :3].tolist()]
    assert len(set(keys)) == n
    first = {}
    for i, (who, batch, k) in enumerate(keys):
        first.setdefault((who, batch), i - k)
        assert first[(who, batch)] == i - k, f"batch {batch} of {who} is split"


def test_a_delete_waits_for_the_other_handles_up_to_its_timeout(tmp_path):
    from loaderx import StoreBusyError
    z = Zrecord(tmp_path / "s", "raw")
    z.append(b"abcd", 4, 1)
    other = Zrecord(tmp_path / "s")
    with pytest.raises(StoreBusyError, match="0.050 s"):
        z.delete([0], timeout=0.05)
    with pytest.raises(StoreBusyError):
        z.compact()
    with pytest.raises(ValueError, match="timeout"):
        z.delete([0], timeout=-1)
    import threading
    threading.Timer(0.1, other.close).start()
    z.delete([0], timeout=60)
    assert len(z) == 3


TRUNCATED_READER = """
import os, sys, time
import numpy as np
import loaderx
from loaderx import Dataset
path, victim, how = sys.argv[1], sys.argv[2], sys.argv[3]
data = np.arange(40000, dtype=np.int32).reshape(100, 400)
if how == "collection":
    Dataset.write(path, data, codec="raw", shard_records=25)
    victim = os.path.join(loaderx.Collection.published(path)[2], victim)
else:
    Dataset.write(path, data, codec="raw")
ds = Dataset(path)
assert ds[:].sum() == data.sum()  # every page mapped and read, the files checked
target = os.path.join(path, victim)
if how == "link":  # the same file under another name, in another folder
    os.link(target, os.path.join(os.path.dirname(path), "link"))
    target = os.path.join(os.path.dirname(path), "link")
if how == "fork":  # truncated by the parent, read by a forked child
    child = os.fork()
    if child:
        os.truncate(target, 100)
        sys.exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
    while os.path.getsize(target) != 100:
        time.sleep(0.01)
else:
    os.truncate(target, 100)  # another program, say
try:
    ds[np.arange(100)]
except (loaderx.CorruptStoreError, loaderx.NotAStoreError) as e:
    assert os.path.basename(victim) in str(e) and "100 bytes" in str(e), e
    print("refused:", e)
"""


@pytest.mark.parametrize(
    "victim, how",
    [("0.zr", "store"), ("meta.zr", "store"), ("0.zr", "collection"),
     ("meta.zr", "collection"), ("0.zr", "link"), ("0.zr", "fork")],
)
def test_a_file_truncated_behind_an_open_store_is_an_error_not_sigbus(tmp_path, victim, how):
    """Read in a child: a SIGBUS shows as its exit status, not a dead suite.
    The first read checks the files; the next one must see that one changed
    (docs/reliability.md, "Files changed behind the store")."""
    child = subprocess.run(
        [sys.executable, "-c", TRUNCATED_READER, str(tmp_path / "ds"), victim, how],
        capture_output=True, text=True, timeout=120,
    )
    assert child.returncode == 0 and "refused:" in child.stdout, (child.returncode, child.stderr)


FULL_DISK = """
import errno, os, subprocess, sys
import numpy as np
import loaderx
folder = sys.argv[1]
# A file system of 2 MiB of this process's own (gone when it exits).
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", folder], check=True)
filler = os.path.join(folder, "filler")
with open(filler, "wb") as f:
    f.write(b"\\1" * (512 << 10))
store = loaderx.Zrecord(os.path.join(folder, "s"))
ones = (np.arange(256) % 251).astype(np.uint8)
n = 0
try:
    while True:  # one-byte records: the table fills the disk, not the data
        store.append(ones, 256, 1, "raw")
        n += 256
except loaderx.StoreIOError as e:
    assert e.errno == errno.ENOSPC, e
    print("full:", e)
try:
    loaderx.Dataset.write(os.path.join(folder, "ds"), np.zeros(100_000, np.uint8))
except OSError as e:
    assert e.errno == errno.ENOSPC, e
# A sharded write that fails removes the shards it made (readers never saw
# them): they would go on holding the full disk.
sharded = os.path.join(folder, "sharded")
try:
    loaderx.Dataset.write(sharded, np.arange(100_000), shard_records=10_000)
except OSError as e:
    assert e.errno == errno.ENOSPC, e
assert not [x for x in os.listdir(sharded) if os.path.isdir(os.path.join(sharded, x))]
os.remove(filler)
store.append(ones, 256, 1, "raw")
n += 256
assert store.stats()["records"] == n
got = np.zeros(n, np.uint8)
store.gather(np.arange(n), got, 1)
assert np.array_equal(got, np.resize(ones, n)) and not store.verify()["bad"]
print("after:", n)
"""

#: Runs a command in mount and user namespaces of its own, where it may mount
#: a tmpfs as if it were root, seen by no other process.
ISOLATED = ["unshare", "--mount", "--map-root-user"]


def test_a_full_disk_is_an_error_not_sigbus(tmp_path):
    """The table files are written through mappings, where a full disk was
    SIGBUS; appends on a full tmpfs fail with ENOSPC and change nothing,
    and append again once there is room."""
    if sys.platform != "linux":
        pytest.skip("tmpfs in a namespace of its own is Linux's")
    if subprocess.run(ISOLATED + ["true"], capture_output=True).returncode != 0:
        pytest.skip("this system lets no process make a mount namespace (unshare)")
    folder = tmp_path / "small"
    folder.mkdir()
    child = subprocess.run(ISOLATED + [sys.executable, "-c", FULL_DISK, str(folder)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, (child.returncode, child.stderr)
    full, after = child.stdout.splitlines()
    assert "meta.zr" in full or "checksums.zr" in full, full
    assert "No space left" in full, full
    assert int(after.split()[1]) > 10_000


@pytest.mark.parametrize("codec", ["raw", "flate"])
def test_damage_is_never_silent_in_a_dataset_written_with_the_defaults(tmp_path, codec):
    data = np.random.default_rng(1).integers(0, 255, size=(40, 64), dtype=np.uint8)
    # Payload damage to sample 7; sample 9's table entry shifted by 4 bytes,
    # which a raw record decodes without complaint.
    path = str(tmp_path / "d.zr")
    Dataset.write(path, data, codec=codec).close()
    _flip_middle_of_record(path, 7)
    with open(os.path.join(path, "meta.zr"), "r+b") as f:
        f.seek(16 + 16 * 9)
        offset = int.from_bytes(f.read(4), "little")
        f.seek(16 + 16 * 9)
        f.write((offset + 4).to_bytes(4, "little"))
    with Dataset(path) as ds:
        for i in (7, 9):
            with pytest.raises(ZrecordError) as e:
                ds[i]
            assert e.value.code == -7 and f"record {i}" in str(e.value)
        keep = [i for i in range(40) if i not in (7, 9)]
        np.testing.assert_array_equal(ds[keep], data[keep])
        assert sorted(b["index"] for b in ds.verify()["bad"]) == [7, 9]


def test_handles_opened_by_a_relative_path_keep_their_folder_after_a_chdir(tmp_path, monkeypatch):
    # The same relative names under a/ (values 1) and b/ (values 2): after
    # the process moves to b/, a handle opened in a/ must go on reading,
    # pickling and deleting a/'s data, not b/'s.
    from loaderx import RaggedDataset, Table

    def make(fill):
        Dataset.write("ds", np.full((40, 4), fill, np.uint8), codec="raw")
        Dataset.write("sharded", np.full((40, 4), fill, np.uint8), codec="raw", shard_records=10)
        RaggedDataset.write("ragged", [np.full(k % 5 + 1, fill, np.uint8) for k in range(40)])
        Table.write("table", {"x": np.full(40, fill, np.int64),
                              "y": np.full((40, 2), fill, np.float32)})

    for folder, fill in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        make(fill)
    monkeypatch.chdir(tmp_path / "a")
    handles = [Dataset("ds"), Dataset("sharded"), RaggedDataset("ragged"), Table("table")]
    monkeypatch.chdir(tmp_path / "b")

    def values(handle):
        if isinstance(handle, Table):
            return np.concatenate([handle["x"][:].ravel(), handle["y"][:].ravel()])
        if isinstance(handle, RaggedDataset):
            return np.concatenate([handle[k] for k in range(len(handle))])
        return handle[:].ravel()

    for handle in handles:
        assert set(values(handle).tolist()) == {1}, handle
        # What a spawned process or a Ray worker gets: it reopens by path.
        again = pickle.loads(pickle.dumps(handle))
        assert set(values(again).tolist()) == {1}, again
        again.close()
    table = handles[-1]
    table.delete([0, 1])
    assert table.rows == 38
    for handle in handles:
        handle.close()
    for folder, rows in (("b", 40), ("a", 38)):
        table = Table(tmp_path / folder / "table")
        assert table.rows == rows, folder
        table.close()


def test_handles_opened_through_a_link_keep_its_target_when_it_is_pointed_elsewhere(tmp_path):
    # A deployment's `current -> v1` swapped for `current -> v2` while a
    # job reads through `current`: the job goes on with v1.
    from loaderx import Table

    for version, fill in (("v1", 1), ("v2", 2)):
        Dataset.write(tmp_path / version / "ds", np.full((40, 4), fill, np.uint8), codec="raw")
        Table.write(tmp_path / version / "table", {"x": np.full(40, fill, np.int64)},
                    shard_rows=10)

    def point(version):
        new = tmp_path / "current.new"
        new.symlink_to(tmp_path / version)
        os.replace(new, tmp_path / "current")

    point("v1")
    handles = [Dataset(tmp_path / "current" / "ds"), Table(tmp_path / "current" / "table")]
    point("v2")
    for handle in handles:
        for h in (handle, pickle.loads(pickle.dumps(handle))):
            values = h["x"][:] if isinstance(h, Table) else h[:]
            assert set(np.asarray(values).ravel().tolist()) == {1}, h
            h.close()


def test_handles_fail_rather_than_read_another_folder_renamed_into_their_place(tmp_path):
    # A deployment that swaps versions by renames (`mv data data.old && mv
    # data.new data`) while a job reads `data`: a handle whose chunk files
    # or shards are not all open yet must not open the new version's in
    # their place. Without checksums, which would call them damaged.
    from loaderx import RaggedDataset, Table

    for version, fill in (("data", 1), ("new", 2)):
        folder = tmp_path / version
        Dataset.write(folder / "ds", np.full((40, 4), fill, np.uint8), codec="raw",
                      checksums=False)
        Dataset.write(folder / "sharded", np.full((40, 4), fill, np.uint8), codec="raw",
                      shard_records=10, checksums=False)
        RaggedDataset.write(folder / "ragged", [np.full(k % 5 + 1, fill, np.uint8)
                                                for k in range(40)], checksums=False)
        Table.write(folder / "table", {"x": np.full(40, fill, np.int64)}, shard_rows=10,
                    checksums=False)
    data = tmp_path / "data"
    handles = [Dataset(data / "ds"), Dataset(data / "sharded"), RaggedDataset(data / "ragged"),
               Table(data / "table")]
    os.rename(data, tmp_path / "old")
    os.rename(tmp_path / "new", data)
    reads = [lambda h: h[:], lambda h: h[:], lambda h: h[0], lambda h: h["x"][:]]
    for handle, read in zip(handles, reads):
        with pytest.raises(ZrecordError, match="no longer at this path") as e:
            read(handle)
        assert str(data) in str(e.value)
        # Nor are the rows this handle chose deleted from the new version
        # (a sharded dataset and a table reopen their stores by path; a
        # RaggedDataset has no delete).
        if not isinstance(handle, RaggedDataset):
            with pytest.raises(ZrecordError, match="no longer at this path"):
                handle.delete([0])
        handle.close()
    # Opened again, the path gives the new version, whole.
    assert set(Dataset(data / "ds")[:].ravel().tolist()) == {2}
    assert [len(Dataset(data / name)) for name in ("ds", "sharded")] == [40, 40]
    assert len(RaggedDataset(data / "ragged")) == 40
    assert Table(data / "table").rows == 40
