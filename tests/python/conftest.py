"""Shared helpers of the Python test suite."""

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import loaderx


def run_hosts(script, argvs, timeout=120):
    """Runs `script` in one Python process per argument list, all at once
    (the hosts of a job), and returns what each printed, parsed as JSON."""
    procs = [subprocess.Popen([sys.executable, "-c", script, *map(str, argv)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for argv in argvs]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    return results


def copy_store(src, dst):
    """Copies a store (or any folder) keeping its files sparse: a `meta.zr`
    is 256 MiB of which a fresh store writes a few pages, and a plain copy
    writes every zero."""
    subprocess.run(["cp", "-R", "--sparse=always", str(src), str(dst)], check=True)


def random_bytes(seed, n):
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


def array_of(dtype, shape, seed=0):
    """An array of `shape` whose bytes are random: every bit pattern of the
    dtype (NaN payloads, negative zeros, bools other than 0/1 excluded) can
    occur, so comparisons must be bit-exact."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        return (random_bytes(seed, n) & 1).astype(bool).reshape(shape)
    raw = random_bytes(seed, n * dtype.itemsize)
    return raw.view(dtype).reshape(shape)


def compressible(seed, n):
    """Bytes that every codec shrinks (runs of a few values)."""
    rng = np.random.default_rng(seed)
    return np.repeat(rng.integers(0, 4, size=n // 16 + 1, dtype=np.uint8), 16)[:n]


def same_bytes(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


#: Seconds a test waits for something that should take milliseconds (a close,
#: threads ending) before calling it a hang. Generous on purpose: it catches
#: a hang, it does not measure speed, so a loaded machine never trips it.
WATCHDOG = 30.0


def returns_within(call, seconds=WATCHDOG):
    """`call()`'s result, run on a helper thread; fails the test if the call
    has not returned after `seconds` (a hang), instead of hanging the suite."""
    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as e:  # re-raised in the test's thread
            outcome["error"] = e

    t = threading.Thread(target=run, name="test-watchdog", daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"{call!r} did not return within {seconds:.0f} s: it hangs")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def close_under_a_waiting_consumer(loader):
    """Closes `loader` from this thread while another thread iterates it,
    and checks that close() returns and the consumer's loop ends, without
    an error."""
    ended = threading.Event()
    raised = []

    def consume():
        try:
            for _ in loader:
                pass
        except BaseException as e:  # noqa: BLE001: checked below
            raised.append(e)
        finally:
            ended.set()

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.1)
    returns_within(loader.close)
    assert ended.wait(WATCHDOG), "the consumer did not end after close()"
    t.join()
    assert raised == [], f"the consumer's loop raised {raised[0]!r} instead of ending"


def loader_threads():
    """Names of this process's zloader worker threads (Linux /proc)."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        if name.startswith("zloader"):
            names.append(name)
    return names


@pytest.fixture
def small(tmp_path):
    """A dataset of 500 float32 (3, 4) samples and its labels."""
    data = array_of(np.float32, (500, 3, 4), seed=1)
    labels = np.arange(500, dtype=np.int64) * 7
    ds = loaderx.Dataset.write(tmp_path / "data.zr", data, durable=False)
    ls = loaderx.Dataset.write(tmp_path / "label.zr", labels, durable=False)
    yield ds, ls, data, labels
    ds.close()
    ls.close()


class Counter(threading.Thread):
    """A Python thread that counts as fast as the GIL lets it."""

    def __init__(self):
        super().__init__(daemon=True)
        self.count = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.count += 1

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join()
