"""loaderx.DataLoader: order, transform, shutdown and bad input."""

import gc
import time

import numpy as np
import pytest

import loaderx
from conftest import WATCHDOG, Counter, close_under_a_waiting_consumer, compressible, loader_threads, returns_within, same_bytes
from loaderx import DataLoader, Dataset, Sampler, ZrecordError
from loaderx._native import gather_threads


def take(loader, n):
    return [next(loader) for _ in range(n)]


def wait_for_no_loader_threads(timeout=WATCHDOG):
    deadline = time.monotonic() + timeout
    while loader_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return loader_threads()


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_batches_follow_the_sampler_whatever_the_worker_count(small, mode):
    ds, ls, data, labels = small
    runs = []
    for workers in (1, 4):
        with DataLoader(ds, ls, num_workers=workers, batch_size=32, prefetch_size=3,
                        mode=mode, seed=11) as loader:
            runs.append(take(loader, 25))
    sampler = Sampler(len(ds), 32, mode, 11)
    for step, (a, b) in enumerate(zip(*runs)):
        idxs = next(sampler).astype(np.int64)
        for key in ("data", "label"):
            assert same_bytes(a[key], b[key]), (step, key)
        assert same_bytes(a["data"], data[idxs])
        assert same_bytes(a["label"], labels[idxs])
        assert a["data"].shape == (32, 3, 4) and a["label"].shape == (32,)


def test_defaults_match_0_5_0(small):
    ds, ls, _, _ = small
    loader = DataLoader(ds, ls)
    batch = next(loader)
    assert set(batch) == {"data", "label"}
    assert batch["data"].shape == (256, 3, 4) and batch["label"].dtype == np.int64
    assert loader.sampler.mode == Sampler.Mode.IID and loader.sampler.seed == 42
    assert loader.dataset is ds and loader.labelset is ls
    loader.close()


def test_batches_are_writable_arrays_that_own_their_memory(small):
    ds, ls, _, _ = small
    with DataLoader(ds, ls, batch_size=8) as loader:
        a, b = next(loader), next(loader)
        a["data"][:] = 0  # writable, and not shared with the next batch
        assert not np.shares_memory(a["data"], b["data"])
        assert a["data"].flags.writeable


def test_transform_gets_and_returns_a_data_label_pair(small):
    ds, ls, data, labels = small

    def transform(pair):
        x, y = pair
        return x[:, 0], y + 1

    with DataLoader(ds, ls, batch_size=16, mode=0, transform=transform) as loader:
        batch = next(loader)
    assert same_bytes(batch["data"], data[:16, 0])
    assert np.array_equal(batch["label"], labels[:16] + 1)


def test_an_exception_in_transform_reaches_the_consumer_and_close_is_prompt(small):
    ds, ls, _, _ = small
    calls = []

    def transform(pair):
        calls.append(1)
        if len(calls) == 3:
            raise KeyError("boom")
        return pair

    loader = DataLoader(ds, ls, batch_size=8, transform=transform)
    take(loader, 2)
    with pytest.raises(KeyError, match="boom"):
        next(loader)
    next(loader)  # the loader itself carries on
    returns_within(loader.close)
    assert loader.closed and wait_for_no_loader_threads() == []


def test_close_is_prompt_with_a_full_queue(small):
    ds, ls, _, _ = small
    loader = DataLoader(ds, ls, num_workers=4, batch_size=64, prefetch_size=2)
    next(loader)
    time.sleep(0.2)  # the workers fill the window and wait
    returns_within(loader.close)
    assert loader.closed
    with pytest.raises(StopIteration):
        next(loader)
    loader.close()  # idempotent
    assert wait_for_no_loader_threads() == []


def test_close_is_prompt_with_an_empty_queue(tmp_path):
    """Closing while the workers are still gathering big first batches."""
    rec = 64 << 10
    big = Dataset.write(tmp_path / "big", np.tile(compressible(1, rec), (64, 1)),
                        durable=False)
    lab = Dataset.write(tmp_path / "lab", np.zeros(64, np.uint8), durable=False)
    loader = DataLoader(big, lab, num_workers=2, batch_size=256, prefetch_size=4)
    returns_within(loader.close)
    assert wait_for_no_loader_threads() == []


def test_close_from_another_thread_ends_a_waiting_consumer(small):
    ds, ls, _, _ = small
    # A slow transform keeps the consumer busy; a second consumer thread
    # waits on next() when close() lands.
    loader = DataLoader(ds, ls, num_workers=1, batch_size=8, prefetch_size=1)
    close_under_a_waiting_consumer(loader)


def test_a_loader_dropped_without_close_stops_its_threads(small):
    ds, ls, _, _ = small
    assert wait_for_no_loader_threads() == []
    loader = DataLoader(ds, ls, num_workers=3, batch_size=16, prefetch_size=2)
    next(loader)
    # At most one worker per core starts; a thread names itself once it runs.
    expected = min(3, gather_threads())
    deadline = time.monotonic() + WATCHDOG
    while len(loader_threads()) < expected and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(loader_threads()) == expected
    del loader
    gc.collect()
    assert wait_for_no_loader_threads() == []
    ds.delete([0])  # the datasets are free again
    ls.delete([0])


def test_an_abandoned_iterator_stops_its_threads(small):
    ds, ls, _, _ = small

    def first_batches():
        for i, batch in enumerate(DataLoader(ds, ls, batch_size=4)):
            if i == 3:
                return batch

    assert first_batches()["data"].shape == (4, 3, 4)
    gc.collect()
    assert wait_for_no_loader_threads() == []


def test_waiting_for_a_batch_releases_the_gil(tmp_path):
    rec = 512 << 10
    big = Dataset.write(tmp_path / "big", np.tile(compressible(2, rec), (32, 1)),
                        durable=False)
    lab = Dataset.write(tmp_path / "lab", np.zeros(32, np.uint8), durable=False)
    with DataLoader(big, lab, num_workers=1, batch_size=256, prefetch_size=1) as loader:
        with Counter() as counter:
            while counter.count == 0:
                pass
            before = counter.count
            batch = next(loader)  # ~128 MiB to decode before it is ready
            during = counter.count - before
    assert batch["data"].shape == (256, rec)
    assert during > 1000


def test_the_datasets_are_busy_while_a_loader_runs(small):
    ds, ls, _, _ = small
    with DataLoader(ds, ls, batch_size=4) as loader:
        next(loader)
        with pytest.raises(ZrecordError) as e:
            ls.compact()
        assert e.value.code == -10
    ls.compact()


def test_len_raises_type_error(small):
    ds, ls, _, _ = small
    with DataLoader(ds, ls, batch_size=4) as loader:
        with pytest.raises(TypeError):
            len(loader)
        assert iter(loader) is loader
        assert "running" in repr(loader)
    assert "closed" in repr(loader)


def test_bad_arguments(small, tmp_path):
    ds, ls, _, _ = small
    short = Dataset.write(tmp_path / "short", np.zeros(499, np.int64), durable=False)
    with pytest.raises(ValueError, match="same length"):
        DataLoader(ds, short)
    for kwargs in ({"num_workers": 0}, {"batch_size": 0}, {"prefetch_size": 0},
                   {"mode": 7}, {"batch_size": -3}):
        with pytest.raises(ValueError):
            DataLoader(ds, ls, **kwargs)
    for kwargs in ({"num_workers": 1.5}, {"transform": 3}):
        with pytest.raises(TypeError):
            DataLoader(ds, ls, **kwargs)
    with pytest.raises(TypeError, match="Dataset"):
        DataLoader(np.zeros(500), ls)
    empty = Dataset.write(tmp_path / "e1", np.zeros((0, 2)), durable=False)
    empty2 = Dataset.write(tmp_path / "e2", np.zeros(0), durable=False)
    with pytest.raises(ValueError, match="length"):
        DataLoader(empty, empty2)
    closed = Dataset(tmp_path / "short")
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        DataLoader(closed, short)
    assert wait_for_no_loader_threads() == []


def test_counts_and_seed_out_of_range_name_the_argument_and_its_range(small):
    ds, ls, _, _ = small
    for kwargs, error, words in (
        ({"seed": -1}, ValueError, ["seed", "0 to 18446744073709551615", "-1"]),
        ({"seed": 2**64}, ValueError, ["seed", "0 to 18446744073709551615"]),
        ({"num_workers": 2**70}, ValueError, ["num_workers", "1 to 1024"]),
        ({"transform_workers": 2**70}, ValueError, ["transform_workers", "0 to 1024"]),
        ({"prefetch_size": 10**12}, ValueError, ["prefetch_size", "1 to 1024"]),
        ({"prefetch_size": 1025}, ValueError, ["prefetch_size", "1 to 1024"]),
        ({"batch_size": True}, TypeError, ["batch_size", "bool"]),
        ({"num_workers": np.bool_(True)}, TypeError, ["num_workers", "bool"]),
        ({"seed": 1.0}, TypeError, ["seed", "float"]),
    ):
        with pytest.raises(error) as info:
            DataLoader(ds, ls, **kwargs)
        for word in words:
            assert word in str(info.value), (kwargs, str(info.value))
    # The bounds themselves are accepted.
    for kwargs in ({"seed": 0}, {"seed": 2**64 - 1}, {"seed": np.uint64(2**64 - 1)},
                   {"prefetch_size": 1024, "num_workers": 1024}):
        with DataLoader(ds, ls, batch_size=4, **kwargs) as loader:
            assert next(loader)["data"].shape == (4, 3, 4)
    assert wait_for_no_loader_threads() == []


def test_a_dataset_closed_under_a_running_loader_stays_readable_by_it(small):
    ds, ls, data, _ = small
    with DataLoader(ds, ls, batch_size=8, mode=0) as loader:
        ds.close()
        batch = next(loader)
    assert same_bytes(batch["data"], data[:8])


def test_the_native_loader_yields_steps_in_order(small):
    ds, ls, _, _ = small
    s = Sampler(len(ds), 5, 2, 1)
    s.seek(7)
    native = loaderx._native.Loader([ds._zr(), ls._zr()], [48, 8], s, 2, 2)
    steps = [next(native) for _ in range(3)]
    assert [st for st, _, _, _ in steps] == [7, 8, 9]
    assert np.array_equal(steps[0][1], s.batch(7))
    assert steps[0][3] is None  # no mixture: no sources
    assert [b.dtype for b in steps[0][2]] == [np.uint8, np.uint8]
    native.close()
    assert native.closed
    with pytest.raises(StopIteration):
        next(native)
    with pytest.raises(ValueError, match="record lengths"):
        loaderx._native.Loader([ds._zr()], [48, 8], s)
