"""Fork safety: stores and loaders across os.fork() and multiprocessing."""

import multiprocessing
import os
import time
import warnings
import zlib

import numpy as np
import pytest

from loaderx import DataLoader, Dataset, Sampler

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


def run_in_child(body, timeout=30.0):
    """Runs `body()` in a forked child; returns its exit code (99 on a hang,
    98 on an exception)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
        pid = os.fork()
    if pid == 0:
        code = 98
        try:
            code = 0 if body() else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return 99


def warm_up(ds):
    """A gather large enough to run on the engine's worker pool, so the pool
    exists in the parent before the fork."""
    idxs = np.arange(len(ds)).repeat(20)  # 480 KB: several shards
    return ds[idxs].tobytes() == ds.__getitems__(idxs).tobytes()


def test_a_dataset_opened_before_fork_gathers_in_the_child(small):
    ds, ls, data, _ = small
    warm_up(ds)

    def child():
        many = np.arange(500).repeat(20)[::-1]
        return (ds[many].tobytes() == data[many].tobytes()
                and ds[3].tobytes() == data[3].tobytes() and warm_up(ds))

    assert run_in_child(child) == 0
    assert ds[:].tobytes() == data.tobytes()  # and the parent is unharmed


def test_a_new_loader_works_in_the_child_and_the_parents_does_not_hang(small):
    ds, ls, data, labels = small
    warm_up(ds)
    parent = DataLoader(ds, ls, num_workers=2, batch_size=16, prefetch_size=2, mode=0)
    next(parent)
    time.sleep(0.05)  # the parent's workers are waiting on a full window

    def child():
        try:
            next(parent)
        except RuntimeError as e:
            if "fork" not in str(e):
                return False
        else:
            return False
        parent.close()  # a no-op in the child, and must not hang
        with DataLoader(ds, ls, num_workers=2, batch_size=16, mode=0) as loader:
            batches = [next(loader) for _ in range(5)]
        sampler = Sampler(len(ds), 16, 0)
        for b in batches:
            idxs = next(sampler).astype(np.int64)
            if b["data"].tobytes() != data[idxs].tobytes():
                return False
            if b["label"].tobytes() != labels[idxs].tobytes():
                return False
        return True

    assert run_in_child(child) == 0
    assert next(parent)["data"].tobytes() == data[16:32].tobytes()
    parent.close()


def _gather_crc(args):
    path, idxs = args
    with Dataset(path) as ds:
        return zlib.crc32(ds[idxs].tobytes())


_INHERITED = {}


def _gather_inherited(idxs):
    return _INHERITED["ds"][idxs].tobytes()


def test_multiprocessing_fork_pool(small, tmp_path):
    ds, _, data, _ = small
    warm_up(ds)
    _INHERITED["ds"] = ds
    chunks = [np.arange(i, 500, 7).repeat(40) for i in range(7)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with multiprocessing.get_context("fork").Pool(2) as pool:
            got = pool.map(_gather_inherited, chunks, chunksize=1)
            crcs = pool.map(_gather_crc, [(str(tmp_path / "data.zr"), c) for c in chunks])
    assert got == [data[c].tobytes() for c in chunks]
    assert crcs == [zlib.crc32(data[c].tobytes()) for c in chunks]


def _forked_error(call, pid):
    """Whether `call()` raises StoreForkedError naming the opener `pid`."""
    from loaderx import StoreForkedError
    try:
        call()
    except StoreForkedError as e:
        return f"opened in process {pid}" in str(e) and "open it again" in str(e)
    return False


def test_a_child_forked_during_an_append_is_refused_at_once(tmp_path):
    """The writer mutex may be copied held by the appending thread, which the
    child does not have: the child's append must refuse before touching it,
    not block forever."""
    import threading
    from loaderx import Zrecord
    z = Zrecord(tmp_path / "s.zr", "raw")
    stop = threading.Event()
    big = np.zeros(1 << 20, np.uint8)

    def appender():
        while not stop.is_set():
            z.append(big, 256, 4096, durable=True)

    parent = os.getpid()
    thread = threading.Thread(target=appender)
    thread.start()
    try:
        time.sleep(0.05)
        codes = [run_in_child(lambda: _forked_error(lambda: z.append(b"x" * 8, 1, 8),
                                                    parent), timeout=10.0)
                 for _ in range(3)]
    finally:
        stop.set()
        thread.join()
    assert codes == [0, 0, 0]
    z.close()


def test_parent_and_child_appending_after_fork_lose_nothing(tmp_path):
    from loaderx import Zrecord
    z = Zrecord(tmp_path / "s.zr", "raw")
    z.append(np.zeros(8, np.uint8), 1, 8)
    parent = os.getpid()

    def child():
        refused = _forked_error(lambda: z.append(np.ones(8, np.uint8), 1, 8), parent)
        # A new handle in the child is its own: it appends normally.
        with Zrecord(tmp_path / "s.zr", "raw") as own:
            own.append(np.full(8, 2, np.uint8), 1, 8)
        return refused

    pid_code = run_in_child(child)
    for i in range(200):
        z.append(np.full(8, 3, np.uint8), 1, 8)
    assert pid_code == 0
    got = np.zeros((len(z), 8), np.uint8)
    z.gather(np.arange(len(z)), got, 8)
    assert len(z) == 202 and sorted(got[:, 0].tolist()) == [0, 2] + [3] * 200
    z.close()


def test_a_child_cannot_delete_under_its_parents_loader(small):
    ds, ls, data, _ = small
    loader = DataLoader(ds, ls, num_workers=2, batch_size=16, mode=0)
    next(loader)
    parent = os.getpid()

    def child():
        return (_forked_error(lambda: ds.delete([0]), parent)
                and _forked_error(ds.compact, parent)
                and ds[5].tobytes() == data[5].tobytes())  # reads go on

    assert run_in_child(child) == 0
    assert len(ds) == len(data) and next(loader)["data"].tobytes() == data[16:32].tobytes()
    loader.close()


def test_datasets_opened_anew_in_the_child_work_normally(small, tmp_path):
    ds, _, data, _ = small

    def child():
        with Dataset(ds.path) as mine:
            with DataLoader(mine, num_workers=2, batch_size=16, mode=0) as loader:
                first = next(loader)["data"].tobytes() == data[:16].tobytes()
        Dataset.write(tmp_path / "new", data[:10])
        with Dataset(tmp_path / "new") as new:
            new.delete([0])
            return first and len(new) == 9
    assert run_in_child(child) == 0
