"""The transform pool: transforms run off the consumer's thread, ahead of it,
on `transform_workers` Python threads; results come in step order and
exceptions reach the consumer at their step with their traceback."""

import threading
import time
import traceback

import numpy as np
import pytest

from conftest import WATCHDOG
from loaderx import DataLoader, Dataset

N = 400


@pytest.fixture
def ids(tmp_path):
    ds = Dataset.write(tmp_path / "ids", np.arange(N, dtype=np.int64), durable=False)
    ls = Dataset.write(tmp_path / "sq", np.arange(N, dtype=np.int64) ** 2, durable=False)
    yield ds, ls
    ds.close()
    ls.close()


def transform_threads():
    return [t for t in threading.enumerate() if t.name.startswith("loaderx-transform")]


def test_the_transform_runs_off_the_consumer_thread_by_default(ids):
    ds, ls = ids
    where = []

    def transform(pair):
        where.append(threading.get_ident())
        return pair

    with DataLoader(ds, ls, batch_size=8, transform=transform) as loader:
        next(loader)
        assert len(transform_threads()) == 1
    assert where and threading.get_ident() not in where
    where.clear()
    with DataLoader(ds, ls, batch_size=8, transform=transform, transform_workers=0) as loader:
        next(loader)
        assert transform_threads() == []
    assert where == [threading.get_ident()]


@pytest.mark.parametrize("workers", [1, 3])
def test_results_come_in_step_order_whatever_the_transform_times(ids, workers):
    ds, ls = ids
    rng = np.random.default_rng(0)
    delays = rng.uniform(0, 0.004, size=1000)

    def transform(pair):
        x, y = pair
        time.sleep(delays[int(x[0]) % 1000])
        return x, y + 1

    with DataLoader(ds, ls, batch_size=10, mode=0, transform=transform,
                    transform_workers=workers) as loader:
        for step in range(60):
            batch = next(loader)
            start = step * 10 % N
            assert np.array_equal(batch["data"], np.arange(start, start + 10))
            assert np.array_equal(batch["label"], np.arange(start, start + 10) ** 2 + 1)
        assert len(transform_threads()) == workers


def test_the_pool_overlaps_the_transform_with_the_consumer(ids):
    # Shown by what runs, not by timing: while the consumer is busy with
    # batch 0 (it calls nothing), the pool transforms the batches after it;
    # inline (0 workers) nothing is transformed until the consumer asks.
    ds, ls = ids
    for workers in (0, 2):
        done = []
        ready = threading.Event()

        def transform(pair, done=done, ready=ready):
            done.append(int(pair[0][0]))
            if len(done) >= 3:
                ready.set()
            return pair

        with DataLoader(ds, ls, batch_size=8, mode=0, transform=transform,
                        transform_workers=workers) as loader:
            next(loader)
            # The consumer's own work on batch 0.
            overlapped = ready.wait(WATCHDOG if workers else 0.2)
            assert overlapped == bool(workers), (workers, done)
            # (pool threads may finish out of order; delivery is ordered)
            assert sorted(done)[:3] == ([0, 8, 16] if workers else [0]), done


def test_an_exception_reaches_the_consumer_with_its_traceback(ids):
    ds, ls = ids

    def failing_transform(pair):
        x, y = pair
        if x[0] == 30:
            raise ValueError(f"cannot transform the batch starting at {x[0]}")
        return pair

    for workers in (0, 1, 3):
        with DataLoader(ds, ls, batch_size=10, mode=0, transform=failing_transform,
                        transform_workers=workers) as loader:
            for _ in range(3):
                next(loader)
            with pytest.raises(ValueError, match="starting at 30") as info:
                next(loader)
            frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
            assert "failing_transform" in frames  # the transform's own frame
            assert "__next__" in frames  # continued by the consumer's call
            if hasattr(info.value, "__notes__"):
                assert any("step 3" in n for n in info.value.__notes__)
            # The loader carries on with the next step.
            assert next(loader)["data"][0] == 40
            assert loader.step == 5


def test_the_pool_reads_the_native_loader_ahead_but_boundedly(ids):
    ds, ls = ids
    calls = []

    def transform(pair):
        calls.append(int(pair[0][0]))
        return pair

    with DataLoader(ds, ls, batch_size=1, mode=0, transform=transform, transform_workers=2,
                    prefetch_size=2) as loader:
        next(loader)
        time.sleep(0.2)
        # Delivered 1; the pool may hold workers + 1 steps beyond it.
        assert 1 < len(calls) <= 1 + 3
        assert calls == sorted(calls) or len(set(calls)) == len(calls)


def test_transform_workers_is_checked(ids):
    ds, ls = ids
    with pytest.raises(ValueError, match="transform_workers"):
        DataLoader(ds, ls, transform_workers=-1)
    with pytest.raises(TypeError, match="transform_workers"):
        DataLoader(ds, ls, transform_workers=1.5)
    # A pool without a transform is allowed (it assembles the batches).
    with DataLoader(ds, ls, batch_size=4, mode=0, transform_workers=2) as loader:
        assert np.array_equal(next(loader)["data"], [0, 1, 2, 3])


def _run_with_watchdog(tmp_path, body):
    """Runs `body` in a fresh interpreter that has `ds`, a 100-sample Dataset
    of int64 ids; a regression that hangs fails the test by the watchdog."""
    import subprocess
    import sys
    import textwrap

    Dataset.write(tmp_path / "ids", np.arange(100, dtype=np.int64), durable=False).close()
    script = (f"import numpy as np\nfrom loaderx import DataLoader, Dataset\n"
              f"ds = Dataset({str(tmp_path / 'ids')!r})\n" + textwrap.dedent(body))
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=WATCHDOG)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for {WATCHDOG:.0f} s")
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.split()


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_a_transform_calling_next_on_its_own_loader_raises(tmp_path, workers):
    """It used to deadlock (with a pool thread, the transform waits for the
    batch it is itself producing)."""
    words = _run_with_watchdog(tmp_path, f"""
        import threading
        box, ready = [], threading.Event()

        def transform(batch):
            ready.wait()  # until the loader is in the box
            try:
                next(box[0])
            except RuntimeError as e:
                assert "transform called next()" in str(e), e
                return {{"data": batch["data"], "refused": True}}
            return {{"data": batch["data"], "refused": False}}

        loader = DataLoader(ds, batch_size=4, mode=0, transform=transform,
                            transform_workers={workers})
        box.append(loader)
        ready.set()
        for step in range(3):
            batch = next(loader)
            assert batch["refused"] and batch["data"][0] == 4 * step, (step, batch)
        # Another loader may be iterated from a transform. (Several pool
        # threads call next(other) in any order: any of its batches.)
        other = DataLoader(ds, batch_size=2, mode=0)
        with DataLoader(ds, batch_size=4, mode=0, transform=lambda b: next(other),
                        transform_workers={workers}) as outer:
            got = next(outer)["data"].tolist()
            assert len(got) == 2 and got[0] % 2 == 0 and got[1] == got[0] + 1, got
        other.close()
        loader.close()
        print("ok")
    """)
    assert words == ["ok"]


@pytest.mark.parametrize("workers", [None, 0, 1, 3])
def test_the_last_step_is_2_to_the_64_minus_1_and_nothing_follows_it(tmp_path, workers):
    """A state near 2**64 used to hang with a transform pool (its step count
    and the native u64 one, which wraps to 0, disagreed) and, without one,
    went on from step 0 again."""
    transform = "None" if workers is None else "lambda b: b"
    words = _run_with_watchdog(tmp_path, f"""
        first = DataLoader(ds, batch_size=4, mode=0)
        state = {{**first.state_dict(), "step": 2**64 - 3}}
        first.close()
        loader = DataLoader(ds, batch_size=4, mode=0, state=state, transform={transform},
                            transform_workers={0 if workers is None else workers})
        for step in (2**64 - 3, 2**64 - 2, 2**64 - 1):
            assert loader.step == step
            want = (4 * step) % 100
            assert next(loader)["data"][0] == want, step
        for _ in range(2):
            try:
                next(loader)
            except OverflowError as e:
                assert "last step" in str(e) and str(2**64 - 1) in str(e), e
            else:
                raise AssertionError("a step past 2**64 - 1 was delivered")
        assert loader.step == 2**64
        loader.close()
        print("ok")
    """)
    assert words == ["ok"]
