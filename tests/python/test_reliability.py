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
