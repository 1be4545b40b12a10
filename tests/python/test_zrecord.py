"""loaderx.Zrecord: the raw byte-record store."""

import threading

import numpy as np
import pytest

from conftest import Counter, compressible, random_bytes
from loaderx import MAX_RECORD_LEN, V1_MAX_RECORD_LEN, InvalidArgumentError, Zrecord, ZrecordError

CODECS = ["raw", "flate", "lz4", "zstd", "zstd-dict"]


@pytest.fixture
def store(tmp_path):
    z = Zrecord(tmp_path / "z.zr")
    yield z
    z.close()


def fill(z, n=20, item_len=100, seed=0, codec=None):
    src = compressible(seed, n * item_len).reshape(n, item_len)
    first = z.append(src, n, item_len, codec)
    return first, src


def code_of(excinfo):
    return excinfo.value.code


# -- basic calls -------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_fixed_append_and_gather_round_trip(tmp_path, codec):
    with Zrecord(tmp_path / "z", codec=codec) as z:
        assert z.codec == codec and len(z) == 0
        first, src = fill(z, n=50, item_len=333)
        assert first == 0 and len(z) == 50
        second = z.append(random_bytes(9, 333 * 5), 5, 333)
        assert second == 50 and len(z) == 55
        idxs = np.array([49, 0, 7, 7, 54], dtype=np.uint64)
        dst = np.zeros((5, 333), np.uint8)
        z.gather(idxs, dst, 333)
        assert dst[:4].tobytes() == src[[49, 0, 7, 7]].tobytes()
        assert dst[4].tobytes() == random_bytes(9, 333 * 5)[4 * 333:].tobytes()
        assert np.array_equal(z.lengths([0, 54]), [333, 333])
        assert z.lengths([0]).dtype == np.uint32


def test_ragged_append_and_gather_var(store):
    recs = [b"", b"a", b"hello world" * 50, bytes(range(256)), b"x" * 5000]
    lens = np.array([len(r) for r in recs], np.uint32)
    offsets = np.concatenate([[0], np.cumsum(lens[:-1])]).astype(np.uint64)
    src = np.frombuffer(b"".join(recs), np.uint8)
    assert store.append_var(src, offsets, lens) == 0
    assert list(store.lengths(range(5))) == list(lens)
    # Gather in reverse order, packed back to front.
    order = [4, 3, 2, 1, 0]
    olens = lens[order]
    ooffs = np.concatenate([[0], np.cumsum(olens[:-1])]).astype(np.uint64)
    dst = np.zeros(int(lens.sum()), np.uint8)
    store.gather_var(order, dst, ooffs)
    assert dst.tobytes() == b"".join(recs[i] for i in order)


def test_src_may_be_bytes_bytearray_memoryview_or_any_dtype(store):
    store.append(b"abcdef", 2, 3)
    store.append(bytearray(b"ghi"), 1, 3)
    store.append(memoryview(b"jkl"), 1, 3)
    store.append(np.frombuffer(b"mno", np.uint8), 1, 3)  # read-only is fine
    f = np.array([1.5, -2.0], np.float32)
    store.append(f, 2, 4)
    dst = np.zeros(5, "S3")
    store.gather(range(5), dst, 3)
    assert dst.tobytes() == b"abcdefghijklmno"
    out = np.zeros(2, np.float32)
    store.gather([5, 6], out, 4)
    assert np.array_equal(out, f)


def test_dst_of_any_dtype_and_shape_is_treated_as_bytes(store):
    store.append(np.arange(8, dtype=np.int64), 4, 16)
    for dst in (np.zeros((2, 2, 2), np.int64), np.zeros(64, np.uint8),
                np.zeros((4, 2), np.complex64).view(np.float64)):
        store.gather([0, 1, 2, 3], dst, 16)
        assert dst.tobytes() == np.arange(8, dtype=np.int64).tobytes()


def test_append_uses_the_default_or_the_given_codec(tmp_path):
    with Zrecord(tmp_path / "z", codec="raw") as z:
        z.append(compressible(0, 4096), 1, 4096)
        assert z.stats()["live_bytes"] == 4096
        z.append(compressible(0, 4096), 1, 4096, "zstd")
        assert z.stats()["live_bytes"] < 2 * 4096
        with pytest.raises(ValueError, match="codec"):
            z.append(b"x", 1, 1, "brotli")


def test_idxs_accept_lists_ranges_and_integer_arrays(store):
    fill(store, n=10)
    want = store.lengths(np.array([1, 2, 3], np.uint64))
    for idxs in ([1, 2, 3], range(1, 4), np.array([1, 2, 3], np.int8),
                 np.array([1, 2, 3], np.uint16), np.array([[1, 2, 3]])[0],
                 np.arange(1, 7)[::2] - np.array([0, 1, 2])):
        assert np.array_equal(store.lengths(idxs), want)
    assert store.lengths([]).shape == (0,)


def test_delete_compact_and_stats(store):
    _, src = fill(store, n=100, item_len=1000)
    before = store.stats()
    assert set(before) == {"records", "live_bytes", "chunk_bytes", "reclaimable"}
    assert before["records"] == 100 and before["reclaimable"] == 0
    store.delete([0, 5, 5, 99])
    assert len(store) == 97
    assert store.stats()["reclaimable"] > 0
    store.compact()
    after = store.stats()
    assert after["records"] == 97 and after["reclaimable"] == 0
    # The survivors are exactly the records not deleted, in some order.
    dst = np.zeros((97, 1000), np.uint8)
    store.gather(range(97), dst, 1000)
    got = sorted(r.tobytes() for r in dst)
    assert got == sorted(src[i].tobytes() for i in range(100) if i not in (0, 5, 99))


def test_sync_and_reopen(tmp_path):
    z = Zrecord(tmp_path / "z")
    _, src = fill(z, n=3)
    z.sync()
    z.close()
    z = Zrecord(tmp_path / "z", create=False)
    dst = np.zeros((3, 100), np.uint8)
    z.gather([0, 1, 2], dst, 100)
    assert dst.tobytes() == src.tobytes()
    z.close()


def test_path_property_repr_and_context_manager(tmp_path):
    path = tmp_path / "z"
    with Zrecord(path) as z:
        assert z.path == str(path)
        assert repr(z) == f"Zrecord('{path}', len=0, codec='flate')"
        assert not z.closed
    assert z.closed
    assert "closed" in repr(z)
    z.close()  # idempotent


# -- bad input -----------------------------------------------------------------


def test_a_closed_store_raises_value_error(tmp_path):
    z = Zrecord(tmp_path / "z")
    z.close()
    dst = np.zeros(4, np.uint8)
    calls = [lambda: len(z), z.sync, lambda: z.lengths([0]), lambda: z.gather([0], dst, 4),
             lambda: z.gather_var([0], dst, [0]), lambda: z.append(b"x", 1, 1),
             lambda: z.append_var(b"x", [0], [1]), lambda: z.delete([0]), z.compact, z.stats]
    for call in calls:
        with pytest.raises(ValueError, match="closed"):
            call()


def test_bad_destinations_raise_and_write_nothing(store):
    fill(store, n=4, item_len=8)
    with pytest.raises(ValueError, match="C-contiguous"):
        store.gather([0], np.zeros((8, 2), np.uint8)[:, 0], 8)
    with pytest.raises(ValueError, match="C-contiguous"):
        store.gather([0], np.zeros((4, 4), np.uint8, order="F"), 8)
    ro = np.zeros(8, np.uint8)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        store.gather([0], ro, 8)
    with pytest.raises(ValueError, match="read-only"):
        store.gather([0], np.frombuffer(bytes(8), np.uint8), 8)
    for not_array in (bytearray(8), b"\0" * 8, [0] * 8, None):
        with pytest.raises(TypeError, match="numpy.ndarray"):
            store.gather([0], not_array, 8)
    with pytest.raises(TypeError, match="objects"):
        store.gather([0], np.empty(8, object), 8)
    dst = np.full(16, 7, np.uint8)
    with pytest.raises(ZrecordError) as e:
        store.gather([0, 1, 2], dst, 8)  # needs 24 bytes
    assert code_of(e) == -6 and "too small" in str(e.value)
    assert (dst == 7).all(), "a refused gather must write nothing"
    with pytest.raises(ZrecordError) as e:
        store.gather([0], dst, 4)  # stride shorter than the record
    assert code_of(e) == -6
    with pytest.raises(ZrecordError) as e:
        store.gather_var([0, 1], dst, [0, 4])  # overlapping ranges
    assert code_of(e) == -6 and "overlap" in str(e.value)
    with pytest.raises(ZrecordError) as e:
        store.gather_var([0, 1], dst, [0])
    assert code_of(e) == -9


def test_bad_sources_raise(store):
    with pytest.raises(ValueError, match="C-contiguous"):
        store.append(np.zeros((4, 4), np.uint8)[:, ::2], 1, 8)
    with pytest.raises(TypeError, match="objects"):
        store.append(np.array([object()] * 8), 1, 8)
    for bad in ("text", 12, [1, 2, 3], None):
        with pytest.raises(TypeError, match="src"):
            store.append(bad, 1, 1)
    with pytest.raises(ZrecordError) as e:
        store.append(b"abc", 2, 2)  # 4 bytes asked of a 3-byte source
    assert code_of(e) == -9
    with pytest.raises(ZrecordError) as e:
        store.append_var(b"abc", [2], [2])
    assert code_of(e) == -9
    with pytest.raises(ZrecordError) as e:
        store.append_var(b"abc", [0, 1], [1])
    assert code_of(e) == -9
    with pytest.raises(ValueError, match="32-bit"):
        store.append_var(b"abc", [0], [1 << 32])
    with pytest.raises(ValueError, match="n must be an int in 0"):
        store.append(b"abc", -1, 1)
    assert len(store) == 0


def test_indices_out_of_range_negative_or_not_integers(store):
    fill(store, n=4, item_len=8)
    dst = np.zeros(64, np.uint8)
    for call in (lambda i: store.gather(i, dst, 8), store.lengths, store.delete,
                 lambda i: store.gather_var(i, dst, [0] * len(i))):
        with pytest.raises(ZrecordError) as e:
            call([0, 4])
        assert code_of(e) == -3 and "index 4" in str(e.value)
        with pytest.raises(IndexError, match="negative"):
            call([0, -1])
        with pytest.raises(TypeError):
            call([0.5, 1.0])
        with pytest.raises(TypeError):
            call(np.array([True, False]))
        with pytest.raises(ValueError, match="one-dimensional"):
            call(np.zeros((1, 2), np.int64))
        with pytest.raises((TypeError, ValueError)):
            call("01")
    assert len(store) == 4


def test_records_over_one_gib_are_refused(store):
    big = np.zeros(MAX_RECORD_LEN + 1, np.uint8)  # calloc'd: never touched
    with pytest.raises(ZrecordError) as e:
        store.append(big, 1, MAX_RECORD_LEN + 1)
    assert code_of(e) == -4
    with pytest.raises(ZrecordError) as e:
        store.append_var(big, [0], [MAX_RECORD_LEN + 1])
    assert code_of(e) == -4
    assert len(store) == 0 and store.version == 1
    store.append(big, 1, V1_MAX_RECORD_LEN)  # exactly 1 MiB: still format 1
    assert len(store) == 1 and store.version == 1


def test_a_batch_over_the_record_limit_of_the_store_is_full(store):
    with pytest.raises(ZrecordError) as e:
        store.append(b"", (1 << 24) + 1, 0)
    assert code_of(e) == -5


def test_unknown_codec_and_not_a_store(tmp_path):
    with pytest.raises(ValueError, match="codec"):
        Zrecord(tmp_path / "z", codec="gzip")
    assert not (tmp_path / "z").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ZrecordError) as e:
        Zrecord(tmp_path / "empty", create=False)
    assert code_of(e) == -8
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "meta.zr").write_bytes(b"NOPE" + bytes(100))
    with pytest.raises(ZrecordError) as e:
        Zrecord(tmp_path / "junk")
    assert code_of(e) == -8
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(ZrecordError) as e:
        Zrecord(tmp_path / "file")
    assert code_of(e) == -2


def test_a_corrupt_record_is_reported_not_returned(tmp_path):
    with Zrecord(tmp_path / "z") as z:
        z.append(compressible(0, 10000), 1, 10000)
        assert z.stats()["live_bytes"] < 10000  # stored compressed
    chunk = tmp_path / "z" / "0.zr"
    with open(chunk, "r+b") as f:
        f.write(random_bytes(5, 64).tobytes())
    with Zrecord(tmp_path / "z") as z:
        dst = np.zeros(10000, np.uint8)
        with pytest.raises(ZrecordError) as e:
            z.gather([0], dst, 10000)
        assert code_of(e) == -7 and "record 0" in str(e.value)


def test_delete_while_the_store_is_shared_is_refused(tmp_path, small):
    import loaderx
    ds, ls, _, _ = small
    loader = loaderx.DataLoader(ds, ls, num_workers=1, batch_size=4)
    next(loader)
    for call in (lambda: ds.delete([0]), ds.compact):
        with pytest.raises(ZrecordError) as e:
            call()
        assert code_of(e) == -10 and "busy" in str(e.value)
    assert len(ds) == 500
    loader.close()
    ds.delete([0])
    ds.compact()
    assert len(ds) == 499


# -- threads -------------------------------------------------------------------


def test_a_large_gather_releases_the_gil(tmp_path):
    """A counter thread keeps running during a ~300 MiB gather of flate
    records: the call must not hold the GIL."""
    with Zrecord(tmp_path / "big", codec="flate") as z:
        rec = compressible(3, V1_MAX_RECORD_LEN)
        z.append(np.tile(rec, 8), 8, V1_MAX_RECORD_LEN)
        assert z.stats()["live_bytes"] < 8 * V1_MAX_RECORD_LEN // 2
        idxs = np.arange(300) % 8
        dst = np.empty((300, V1_MAX_RECORD_LEN), np.uint8)
        with Counter() as counter:
            while counter.count == 0:
                pass
            before = counter.count
            z.gather(idxs, dst, V1_MAX_RECORD_LEN)
            during = counter.count - before
        assert dst[299].tobytes() == rec.tobytes()
        assert during > 1000, f"the counter advanced only {during} times during the gather"


def test_concurrent_gathers_from_eight_threads_are_bit_exact(tmp_path):
    n, item = 400, 3000
    src = np.stack([compressible(i, item) ^ np.uint8(i % 251) for i in range(n)])
    with Zrecord(tmp_path / "z", codec="zstd") as z:
        z.append(src, n, item)
        errors = []

        def work(seed):
            rng = np.random.default_rng(seed)
            try:
                for _ in range(30):
                    idxs = rng.integers(0, n, size=64)
                    dst = np.empty((64, item), np.uint8)
                    z.gather(idxs, dst, item)
                    assert dst.tobytes() == src[idxs].tobytes()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors



BUSY_RACE = r"""
import sys, threading
import numpy as np
from loaderx import Zrecord, ZrecordError

sys.setswitchinterval(1e-6)  # switch threads as often as possible
z = Zrecord(sys.argv[1], codec="raw")
z.append(np.zeros(4000, np.uint8), 1000, 4)
busy = [0, 0]
other = []

def gathers():
    dst = np.empty(4000, np.uint8)
    for _ in range(3000):
        try:
            z.gather(np.arange(min(len(z), 1000)), dst, 4)
        except ZrecordError as e:
            (busy.__setitem__(0, busy[0] + 1) if e.code == -10 else other.append(e))

def deletes():
    for _ in range(3000):
        for call in (lambda: z.append(b"abcd", 1, 4), lambda: z.delete([len(z) - 1])):
            try:
                call()
            except ZrecordError as e:
                (busy.__setitem__(1, busy[1] + 1) if e.code == -10 else other.append(e))

threads = [threading.Thread(target=f) for f in (gathers, deletes)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not other, other
print("done", busy)
"""


def test_busy_errors_between_threads_of_one_handle_never_deadlock(tmp_path):
    """One thread gathers while another appends and deletes through the same
    handle: each gets busy errors when the other holds the store, and the
    process never freezes (the busy error used to be built while the
    handle's slot was locked; building it can let another thread run, which
    then waited for the slot holding the GIL). Run in a child process, so a
    deadlock is a timeout, not a frozen suite."""
    import subprocess
    import sys
    try:
        run = subprocess.run([sys.executable, "-c", BUSY_RACE, str(tmp_path / "s")],
                             capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("gather and delete on one handle from two threads deadlocked")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("done"), run.stdout


def test_each_engine_error_kind_is_a_zrecord_error_and_a_builtin_one(tmp_path):
    """0.5.0 code catching ZrecordError by code keeps working, and Python
    code catching the built-in exception works too: an index out of range is
    both a ZrecordError with code -3 and an IndexError, in Zrecord and in
    both dataset kinds."""
    import loaderx
    from loaderx import RaggedDataset
    from loaderx.ragged import RaggedDataset as _  # noqa: F401
    z = Zrecord(tmp_path / "z", codec="raw")
    z.append(b"abcd", 1, 4)
    ds = loaderx.Dataset.write(tmp_path / "ds", np.zeros((3, 2), np.float32))
    rs = RaggedDataset.write(tmp_path / "rs", [np.zeros(2, np.int32), np.zeros(3, np.int32)])
    for call in (lambda: z.gather([5], np.empty(4, np.uint8), 4), lambda: z.lengths([1]),
                 lambda: ds[3], lambda: ds[[0, 7]], lambda: ds[np.array([9], np.uint64)],
                 lambda: rs[2], lambda: rs[[0, 5]]):
        with pytest.raises(IndexError) as e:
            call()
        assert isinstance(e.value, ZrecordError) and e.value.code == -3
        assert type(e.value) is loaderx.ZrecordIndexError
    with pytest.raises(FileNotFoundError) as e:
        Zrecord(tmp_path / "nothing", create=False)
    assert isinstance(e.value, loaderx.NotAStoreError) and e.value.code == -8
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "meta.zr").write_bytes(b"NOPE" + bytes(100))
    with pytest.raises(loaderx.NotAStoreError) as e:
        Zrecord(tmp_path / "junk")
    assert e.value.code == -8 and not isinstance(e.value, FileNotFoundError)
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(OSError) as e:
        Zrecord(tmp_path / "file")
    assert type(e.value) is loaderx.StoreIOError and e.value.code == -2
    with pytest.raises(ValueError) as e:
        z.gather([0], np.empty(2, np.uint8), 4)
    assert type(e.value) is loaderx.BufferTooSmallError and e.value.code == -6
    with pytest.raises(ValueError) as e:
        z.append(b"abc", 2, 4)
    assert type(e.value) is loaderx.InvalidArgumentError and e.value.code == -9
    other = Zrecord(tmp_path / "z")
    with pytest.raises(loaderx.StoreBusyError) as e:
        z.delete([0])
    assert isinstance(e.value, ZrecordError) and e.value.code == -10
    other.close()
    for name in ("CorruptStoreError", "StoreFullError", "RecordTooLargeError",
                 "StoreMemoryError"):
        cls = getattr(loaderx, name)
        assert issubclass(cls, ZrecordError) and cls.__module__ == "loaderx"
    assert loaderx.CorruptStoreError.code == -7 and loaderx.StoreFullError.code == -5
    assert issubclass(loaderx.RecordTooLargeError, ValueError)
    assert issubclass(loaderx.StoreMemoryError, MemoryError)


def test_integer_arguments_out_of_range_name_the_argument_and_its_range(tmp_path):
    """Not OverflowError("can't convert negative int to unsigned") or "int
    too big to convert": a ValueError naming the argument and its range, a
    TypeError for a bool or a non-int."""
    from loaderx import Sampler
    z = Zrecord(tmp_path / "z", codec="raw")
    iid = Sampler.Mode.IID
    cases = [
        (lambda: z.append(b"abcd", -1, 4), ValueError, "n must be an int in 0..="),
        (lambda: z.append(b"abcd", 2**70, 4), ValueError, "n must be an int in 0..="),
        (lambda: z.append(b"abcd", 1, -4), ValueError, "item_len must be an int in 0..="),
        (lambda: z.append(b"abcd", True, 4), TypeError, "n must be an int, not bool"),
        (lambda: z.gather([0], np.empty(4, np.uint8), -4), ValueError, "stride must be"),
        (lambda: z.gather_array([0], 2**65), ValueError, "stride must be"),
        (lambda: z.gather_array([0], 1.5), TypeError, "stride must be an int, not float"),
        (lambda: Sampler(10, 2, iid, seed=-1), ValueError, "seed must be an int in 0..="),
        (lambda: Sampler(10, 2, iid, seed=2**64), ValueError, "not 18446744073709551616"),
        (lambda: Sampler(-10, 2, iid), ValueError, "length must be"),
        (lambda: Sampler(10, -2, iid), ValueError, "batch_size must be"),
        (lambda: Sampler(10, 2, iid).seek(-1), ValueError, "step must be"),
        (lambda: Sampler(10, 2, iid).batch(2**64), ValueError, "step must be"),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind, match=message.replace(".", r"\.")):
            call()
    assert Sampler(10, 2, iid).seed == 42
    assert Sampler(10, 2, iid, seed=2**64 - 1).seed == 2**64 - 1


def test_a_codec_level_changes_the_size_not_the_bytes_read_back(tmp_path):
    data = np.tile(np.arange(4096, dtype=np.uint8) // 7, (50, 1))
    sizes = {}
    for codec, level in [("flate", 1), ("flate", 12), ("zstd", 1), ("zstd", 19), ("zstd", -5)]:
        with Zrecord(str(tmp_path / f"{codec}{level}"), codec) as z:
            z.append(data, 50, 4096, level=level)
            out = np.empty_like(data)
            z.gather(np.arange(50, dtype=np.uint64), out, 4096)
            np.testing.assert_array_equal(out, data)
            sizes[codec, level] = z.stats()["live_bytes"]
    assert sizes["flate", 12] <= sizes["flate", 1]
    assert sizes["zstd", 19] <= sizes["zstd", 1] <= sizes["zstd", -5]


@pytest.mark.parametrize("codec, level, says", [
    ("zstd", 23, "level 23 is outside -131072..=22 for codec zstd"),
    ("flate", 0, "level 0 is outside 1..=12 for codec flate"),
    ("lz4", 3, "codec lz4 has no levels"),
    ("raw", 1, "codec raw has no levels"),
])
def test_a_level_the_codec_lacks_is_refused(tmp_path, codec, level, says):
    with Zrecord(str(tmp_path / "z"), codec) as z:
        with pytest.raises(InvalidArgumentError, match=says):
            z.append(b"abcd" * 100, 1, 400, level=level)
        with pytest.raises(TypeError, match="level must be an int, not bool"):
            z.append(b"abcd" * 100, 1, 400, level=True)
        assert len(z) == 0
