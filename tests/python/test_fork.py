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
