"""Transforms in worker processes (transform_mode='process'): the same
batches as threads, in step order, with every start method; exact resume;
per-sample maps; a worker's exception raised at its step with its
traceback; a killed or crashed worker an error naming the step and the
signal, the loader going on, and one that cannot read its batch an error
saying so; close() prompt in every state, out of file
descriptors too; no process, descriptor or shared-memory segment left
after many loaders, nor after the parent is killed; clear refusals (an
unpicklable transform under spawn, a daemonic parent).
"""

import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time

import ml_dtypes
import numpy as np
import pytest

import loaderx
import loaderx.transform_processes
from loaderx import DataLoader, Dataset, Sampler

from conftest import WATCHDOG, close_under_a_waiting_consumer, returns_within

METHODS = [m for m in ("fork", "spawn", "forkserver")
           if m in multiprocessing.get_all_start_methods()]


@pytest.fixture
def streams(tmp_path):
    rng = np.random.default_rng(3)
    x = Dataset.write(tmp_path / "x", rng.integers(0, 256, (240, 16, 8), dtype=np.uint8))
    y = Dataset.write(tmp_path / "y", np.arange(240, dtype=np.int64))
    yield {"x": x, "y": y}
    x.close(), y.close()


def square_sum(batch):
    """A transform that keeps a stream, drops one and adds one."""
    x = batch["x"].astype(np.int64)
    return {"x": batch["x"], "s": (x * x).sum(axis=(1, 2)), "pid": os.getpid(),
            "y": batch["y"]}


def noisy(sample, rng):
    """A per-sample map with the sample's generator."""
    return {"x": sample["x"].mean() + rng.standard_normal(), "y": sample["y"],
            "tags": list(range(int(sample["y"]) % 3))}


def fail_at_label_100(batch):
    if 100 in batch["y"]:
        raise KeyError("label 100 is cursed")
    return batch


def die_at_label_100(batch):
    if 100 in batch["y"]:
        os.kill(os.getpid(), signal.SIGKILL)
    return batch


def segfault_at_label_100(batch):
    if 100 in batch["y"]:
        import ctypes
        import faulthandler

        faulthandler.disable()  # pytest's would print the crash's stack
        ctypes.string_at(0)  # a crash in native code
    return batch


def growing(batch):
    """Results four times bigger at each step of a sequential loader over
    64 samples in batches of 8: each reply grows its process's arena."""
    step = int(batch["y"][0]) // 8
    return {"y": batch["y"], "pad": np.zeros(1024 << 2 * step, np.uint8)}


def slow_first_step(batch):
    """Step 0 of a sequential loader takes a second, the others no time;
    each batch says when its transform ended (the clock all processes
    share)."""
    if batch["y"][0] == 0:
        time.sleep(1)
    return {"y": batch["y"], "ended": time.monotonic()}


def sleep_long(batch):
    time.sleep(60)
    return batch


def children():
    """The pids of this process's live children (Linux /proc), less those
    that outlive every loader by design (multiprocessing's forkserver and
    resource tracker, once started)."""
    me = str(os.getpid())
    lasting = _lasting()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if fields[1] == me and fields[0] != "Z" and int(pid) not in lasting:
            found.append(int(pid))
    return found


def _lasting():
    """multiprocessing's own lasting helpers, started here once if at all."""
    from multiprocessing import forkserver, resource_tracker

    pids = set()
    for helper in (forkserver._forkserver, resource_tracker._resource_tracker):
        pid = getattr(helper, "_forkserver_pid", None) or getattr(helper, "_pid", None)
        if pid:
            pids.add(pid)
    return pids


def take(loader, n):
    return [next(loader) for _ in range(n)]


def same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


def loader(streams, **kw):
    options = dict(batch_size=16, mode=Sampler.Mode.SHUFFLE, seed=7, num_workers=2)
    options.update(kw)
    return DataLoader(streams, **options)


@pytest.mark.parametrize("method", METHODS)
def test_processes_give_the_threads_batches_in_step_order(streams, method):
    with loader(streams, transform=square_sum) as threads:
        want = take(threads, 20)
    with loader(streams, transform=square_sum, transform_mode="process",
                transform_workers=2, start_method=method) as processes:
        got = take(processes, 20)
    pids = {b.pop("pid") for b in got}
    assert os.getpid() not in pids and len(pids) >= 1
    for w, g in zip(want, got):
        w.pop("pid")
        same(w, g)
    assert children() == []


@pytest.mark.parametrize("method", METHODS)
def test_processes_outlast_a_pause_longer_than_their_parent_check(streams, method):
    # An idle process looks for its parent every half second: under the
    # forkserver start method it used to look for the loader's process,
    # which is not its parent there, and left at the first pause.
    with loader(streams, transform=square_sum, transform_mode="process",
                transform_workers=2, start_method=method) as processes:
        take(processes, 2)
        time.sleep(1.2)
        assert len(take(processes, 6)) == 6


def every_dtype(batch):
    """Arrays of the dtypes a built-in dtype's string names and of those it
    does not (structured, bfloat16, one with metadata), empty, 0-d and not
    contiguous."""
    y = batch["y"]
    rec = np.zeros(len(y), dtype=[("label", "<i4"), ("half", "<f2"), ("code", "S3")])
    rec["label"], rec["half"], rec["code"] = y, y / 2, [b"a%d" % (v % 10) for v in y]
    return {
        "bfloat16": (y / 3).astype(ml_dtypes.bfloat16), "record": rec,
        "big": y.astype(">u4"), "when": y.astype("datetime64[s]"), "text": y.astype("U4"),
        "flag": y % 2 == 0, "complex": y * (1 + 2j), "empty": np.zeros((0, 3), np.float32),
        "scalar": np.float64(y.sum()) * np.ones(()), "strided": batch["x"][:, ::2, 1],
        # After a plain int64: the two dtypes are equal, and hash the same.
        "plain": y, "tagged": y.astype(np.dtype("<i8", metadata={"unit": "s"})),
    }


def test_every_dtype_comes_back_as_it_was_made(streams):
    with loader(streams, transform=every_dtype) as threads:
        want = take(threads, 6)
    with loader(streams, transform=every_dtype, transform_mode="process",
                transform_workers=2) as processes:
        got = take(processes, 6)
    for w, g in zip(want, got):
        assert {k: (v.dtype, v.dtype.metadata, v.shape) for k, v in w.items()} == \
            {k: (v.dtype, v.dtype.metadata, v.shape) for k, v in g.items()}
        for k in w:
            assert w[k].tobytes() == g[k].tobytes(), k


def masked(batch):
    return {"y": np.ma.masked_array(batch["y"], mask=batch["y"] % 3 == 0), "x": batch["x"]}


def test_an_array_subclass_comes_back_as_itself(streams):
    with loader(streams, transform=masked, transform_mode="process",
                transform_workers=2) as processes:
        for b in take(processes, 4):
            assert type(b["y"]) is np.ma.MaskedArray and type(b["x"]) is np.ndarray
            assert np.array_equal(b["y"].mask, b["y"].data % 3 == 0)


def test_resume_with_processes_is_bit_identical(streams):
    kw = dict(transform=square_sum, transform_mode="process", transform_workers=2)
    with loader(streams, **kw) as whole:
        want = take(whole, 12)
    with loader(streams, **kw) as first:
        take(first, 5)
        state = first.state_dict()
    with loader(streams, state=state, **kw) as second:
        got = take(second, 7)
    for w, g in zip(want[5:], got):
        w.pop("pid"), g.pop("pid")
        same(w, g)


def slow_square_sum(batch):
    time.sleep(0.2)
    return square_sum(batch)


def test_a_state_loaded_while_processes_hold_batches_resumes_exactly(streams):
    # The processes still hold batches of the abandoned run when the loader
    # restarts: their late replies are dropped, not delivered.
    kw = dict(transform=slow_square_sum, transform_mode="process", transform_workers=2)
    with loader(streams, **kw) as it:
        take(it, 4)
        start = it.state_dict()
        take(it, 3)
        it.load_state_dict(start)
        again = take(it, 4)
    with loader(streams, **kw) as fresh:
        take(fresh, 4)
        want = take(fresh, 4)
    for w, g in zip(want, again):
        w.pop("pid"), g.pop("pid")
        same(w, g)


def test_an_interrupted_wait_for_a_process_loses_no_step(streams):
    # A signal handler's exception (as Ctrl-C's KeyboardInterrupt) that lands
    # while next() waits for a process leaves the step to the next call.
    class Interrupted(Exception):
        pass

    landed = []

    def interrupt(signum, frame):
        landed.append(frame.f_code.co_name)
        raise Interrupted

    with loader(streams, transform=square_sum) as threads:
        want = take(threads, 4)
    old = signal.signal(signal.SIGALRM, interrupt)
    got = {}
    try:
        with loader(streams, transform=slow_square_sum, transform_mode="process",
                    transform_workers=1) as it:
            while it.step < 4:
                before = it.step
                signal.setitimer(signal.ITIMER_REAL, 0.05)  # inside the 0.2 s wait
                try:
                    batch = next(it)
                except Interrupted:
                    if landed[-1] == "_wait_any":  # the wait for the process
                        assert it.step == before
                    continue
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                got[it.step - 1] = batch
    finally:
        signal.signal(signal.SIGALRM, old)
    # (One that lands just after a native call returned may cost that step,
    # as it may without processes.)
    assert landed.count("_wait_any") >= 3, landed
    assert got, landed
    for step, g in got.items():
        w = dict(want[step])
        w.pop("pid"), g.pop("pid")
        same(w, g)


class InterruptedOnce:
    """A native loader whose batch (its step number) is kept back once by
    an interruption: the call raises and the step is not consumed, as the
    native loader does when a signal handler raises while it hands a batch
    over (here TimeoutError, as a handler of SIGALRM might raise)."""

    def __init__(self, interrupt_at):
        self.next_step = 0
        self.interrupt_at = interrupt_at

    def _take(self):
        if self.next_step == self.interrupt_at:
            self.interrupt_at = None
            raise TimeoutError("interrupted")
        step, self.next_step = self.next_step, self.next_step + 1
        return step

    def __next__(self):
        return self._take()

    def next_ready(self):
        return self._take()

    def close(self):
        pass


def add_one(batch, seeds):
    return {"s": batch["s"] + 1}


@pytest.mark.parametrize("interrupt_at", [0, 1, 2, 3])
def test_an_interruption_that_keeps_the_native_batch_shifts_no_step(interrupt_at):
    # Whether the interrupted take was waiting (the step delivered next) or
    # not (a process being refilled), the step is taken again, not counted
    # as failed: every later step still gets its own batch.
    from loaderx.process_pipeline import ProcessPipeline

    processes = loaderx.transform_processes.TransformProcesses(add_one, 2, None)
    pipeline = ProcessPipeline(
        InterruptedOnce(interrupt_at),
        prepare=lambda step: ({"s": np.array([step])}, None, step),
        finish=lambda batch, step: (step, int(batch["s"][0])),
        processes=processes,
    )
    try:
        got = []
        while len(got) < 6:
            try:
                step, thunk = pipeline.take()
            except TimeoutError:
                continue
            got.append((step, thunk()))
        assert got == [(k, (k, k + 1)) for k in range(6)]
    finally:
        pipeline.close()
        processes.close()


def test_a_finite_padded_pass_ends_with_processes_as_with_threads(streams):
    kw = dict(batch_size=50, epochs=2, last_batch="pad", transform=square_sum)
    with loader(streams, **kw) as threads:
        want = list(threads)
    with loader(streams, transform_mode="process", transform_workers=2, **kw) as it:
        got = list(it)
        assert len(got) == len(it) == len(want)
        with pytest.raises(StopIteration):
            next(it)
    for w, g in zip(want, got):
        w.pop("pid"), g.pop("pid")
        same(w, g)


def invert_in_place(batch):
    batch["x"][...] = 255 - batch["x"]
    return batch


def shared_file(a):
    """The (device, inode) of the shared batch file `a` views, or None."""
    while isinstance(a, np.ndarray):
        if isinstance(a.base, loaderx._native.BatchMemory):
            fd = a.base.fd
            return None if fd is None else os.fstat(fd)[1:3]
        a = a.base
    return None


def test_batches_go_and_come_back_through_shared_memory_without_copies(tmp_path):
    rng = np.random.default_rng(5)
    x = Dataset.write(tmp_path / "x", rng.integers(0, 256, (4096, 32, 32), dtype=np.uint8))
    y = Dataset.write(tmp_path / "y", np.arange(4096, dtype=np.int64))
    streams = {"x": x, "y": y}
    with loader(streams, batch_size=256) as plain:
        want = take(plain, 30)
    files = set()
    with loader(streams, batch_size=256, transform=invert_in_place,
                transform_mode="process", transform_workers=2) as it:
        for w in want:
            got = next(it)
            # The batch the process changed in place is the gathered memory
            # itself (256 KiB of it: a shared file), not a copy of it.
            assert np.array_equal(got["x"], 255 - w["x"]) and np.array_equal(got["y"], w["y"])
            files.add(shared_file(got["x"]))
            del got
    assert None not in files, "a batch came back as a copy"
    # The loader's batch memory is recycled: a few files, not one a step.
    assert len(files) <= 12, len(files)
    x.close(), y.close()


def pass_through(batch):
    return batch


def test_buffers_a_process_stopped_mapping_are_sent_again(tmp_path, monkeypatch):
    # One mapping kept (forked processes inherit the setting): nearly every
    # batch finds a buffer unmapped and its descriptor sent again, each
    # batch's two streams in two buffers of their own.
    monkeypatch.setattr(loaderx.transform_processes, "_MAPPED", 1)
    rng = np.random.default_rng(6)
    x = Dataset.write(tmp_path / "x", rng.integers(0, 256, (1024, 64, 64), dtype=np.uint8))
    y = Dataset.write(tmp_path / "y", rng.random((1024, 1024)))
    streams = {"x": x, "y": y}
    with loader(streams, batch_size=64) as plain:
        want = take(plain, 40)
    files = set()
    with loader(streams, batch_size=64, transform=pass_through, transform_mode="process",
                transform_workers=2, start_method="fork") as it:
        for w in want:
            got = next(it)
            same(w, got)
            files.update(shared_file(got[k]) for k in got)
            del got
    assert None not in files, "a batch came back as a copy"
    x.close(), y.close()


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_map_runs_per_sample_and_its_results_are_stacked(streams, mode):
    with loader(streams, map=noisy, sample_rngs=True, transform_mode=mode,
                transform_workers=2) as it:
        batches = take(it, 4)
    with loader(streams) as plain:
        raw = take(plain, 4)
    for b, r in zip(batches, raw):
        assert b["x"].dtype == np.float64 and b["x"].shape == (16,)
        assert np.array_equal(b["y"], r["y"])
        assert b["tags"] == [list(range(int(y) % 3)) for y in r["y"]]
        # The sample's generator is (seed, step, position)'s: the noise is
        # the same in threads and processes.
        assert np.all(np.abs(b["x"] - r["x"].mean(axis=(1, 2))) < 6)
    if mode == "process":
        with loader(streams, map=noisy, sample_rngs=True) as threads:
            for b, t in zip(batches, take(threads, 4)):
                same(b, t)


def test_processes_go_on_with_later_steps_while_the_consumer_waits_for_a_slow_one(streams):
    # The consumer waits for step 0; the other process's finished steps are
    # taken meanwhile and it gets the next batches, up to two steps in
    # flight a process, and the batches still come in step order.
    with loader(streams, mode=Sampler.Mode.SEQUENTIAL, transform=slow_first_step,
                transform_mode="process", transform_workers=2) as it:
        got = take(it, 8)
    assert [int(b["y"][0]) for b in got] == [16 * k for k in range(8)]
    ahead = [k for k, b in enumerate(got) if b["ended"] < got[0]["ended"]]
    assert ahead == [1, 2, 3], ahead


def test_a_workers_exception_is_raised_at_its_step_with_its_traceback(streams):
    with loader(streams, mode=Sampler.Mode.SEQUENTIAL, transform=fail_at_label_100,
                transform_mode="process", transform_workers=2) as it:
        take(it, 6)  # labels 0..95
        with pytest.raises(KeyError, match="cursed") as raised:
            next(it)  # step 6: labels 96..111
        notes = "".join(getattr(raised.value, "__notes__", []))
        assert "fail_at_label_100" in notes and "step 6" in notes
        assert next(it)["y"][0] == 112, "the next step is delivered"


@pytest.mark.parametrize(("transform", "signame"), [(die_at_label_100, "SIGKILL"),
                                                    (segfault_at_label_100, "SIGSEGV")])
def test_a_killed_worker_fails_its_step_naming_the_signal(streams, transform, signame):
    with loader(streams, mode=Sampler.Mode.SEQUENTIAL, transform=transform,
                transform_mode="process", transform_workers=2) as it:
        take(it, 6)
        with pytest.raises(RuntimeError, match=rf"killed by {signame} .*step 6"):
            next(it)
        assert next(it)["y"][0] == 112, "a new process takes the dead one's place"
        assert len(children()) == 2
    assert children() == []


def test_a_batch_a_process_cannot_read_fails_its_step_saying_why(streams, tmp_path, monkeypatch,
                                                                capfd):
    # The next message any process reads is damaged (forked processes
    # inherit the patch; the flag file goes with the first).
    flag, real = tmp_path / "damage-next", loaderx.transform_processes.message_places

    def damaged_once(*args):
        try:
            os.unlink(flag)
        except FileNotFoundError:
            return real(*args)
        raise ValueError("a damaged message")

    monkeypatch.setattr(loaderx.transform_processes, "message_places", damaged_once)
    with loader(streams, mode=Sampler.Mode.SEQUENTIAL, transform=pass_through,
                transform_mode="process", transform_workers=2, start_method="fork") as it:
        take(it, 2)
        flag.touch()
        got, errors = [], []
        for _ in range(8):
            try:
                got.append(int(next(it)["y"][0]))
            except RuntimeError as e:
                errors.append(str(e))
        assert len(errors) == 1 and "could not read the batch it was sent" in errors[0], errors
        assert "cannot read the batch the loader sent it: ValueError('a damaged message')" in \
            capfd.readouterr().err
        # The step failed alone: a new process took the others.
        assert len(got) == 7 and got == sorted(got) and got[-1] == 16 * 9
        assert len(children()) == 2
    assert children() == []


def test_close_is_prompt_while_processes_are_busy(streams, monkeypatch):
    # close() gives busy processes one grace period in all, then kills them:
    # every process is waited for until the same deadline, not one each.
    deadlines = []
    close = loaderx.transform_processes._Process.close

    def recording(self, deadline=None):
        deadlines.append(deadline)
        close(self, deadline)

    monkeypatch.setattr(loaderx.transform_processes._Process, "close", recording)
    it = loader(streams, transform=sleep_long, transform_mode="process", transform_workers=4)
    time.sleep(1)  # every process inside the transform
    returns_within(it.close)
    assert len(deadlines) == 4 and None not in deadlines and len(set(deadlines)) == 1
    assert children() == []
    # And with a consumer waiting in next() on another thread.
    it = loader(streams, transform=sleep_long, transform_mode="process", transform_workers=2)
    close_under_a_waiting_consumer(it)
    assert children() == []


OUT_OF_DESCRIPTORS = """
import errno, os, sys
import numpy as np
import loaderx
sys.path.insert(0, {tests!r})
from test_transform_processes import growing
x = loaderx.Dataset.write({x!r}, np.zeros((64, 4, 2), np.uint8))
y = loaderx.Dataset.write({y!r}, np.arange(64, dtype=np.int64))
it = loaderx.DataLoader({{'x': x, 'y': y}}, batch_size=8, transform=growing,
                        transform_mode='process', transform_workers=2,
                        mode=loaderx.Sampler.Mode.SEQUENTIAL)
firsts = [int(next(it)['y'][0])]
print(' '.join(str(p.process.pid) for p in it._processes.all), flush=True)

def exhaust():
    held = []
    try:
        while True:
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        return held

held = exhaust()
failed = 0
for _ in range(5):
    try:
        firsts.append(int(next(it)['y'][0]))
    except OSError as e:  # mapping a grown arena takes a descriptor
        assert e.errno == errno.EMFILE, e
        failed += 1
assert failed, "no step needed a new descriptor"
for fd in held:
    os.close(fd)
firsts.append(int(next(it)['y'][0]))
print(' '.join(map(str, firsts)), flush=True)
held = exhaust()
it.close()
print('closed', flush=True)
"""


def test_out_of_descriptors_a_step_waits_and_close_still_works(tmp_path):
    # Every descriptor taken (a leak elsewhere in the program, a low
    # `ulimit -n`): a step that needs one fails with EMFILE and comes again
    # once some are free, and close() still stops the workers, which needs
    # no new file, rather than fail where the standard library opens one.
    script = OUT_OF_DESCRIPTORS.format(tests=os.path.dirname(__file__),
                                       x=str(tmp_path / "x"), y=str(tmp_path / "y"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=WATCHDOG)
    assert done.returncode == 0, done.stderr
    pids, firsts, said = done.stdout.splitlines()
    firsts = [int(f) for f in firsts.split()]
    assert firsts == [8 * k for k in range(len(firsts))]  # no step lost or repeated
    assert said == "closed"
    # Closed, the workers were waited for: none is left, even as a zombie.
    for pid in map(int, pids.split()):
        assert not os.path.exists(f"/proc/{pid}")


def test_no_process_descriptor_or_segment_survives_many_loaders(streams):
    def fds():
        return len(os.listdir("/proc/self/fd"))

    def segments():
        return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()

    with loader(streams, transform=square_sum, transform_mode="process") as warm:
        next(warm)
    before = (fds(), segments())
    for _ in range(200):
        with loader(streams, transform=square_sum, transform_mode="process") as it:
            next(it)
    assert children() == []
    assert (fds(), segments()) == before


def test_closing_frees_the_shared_batch_memory_without_the_collector(tmp_path):
    # A process holds the last batch it was given (and the parent its
    # buffers); closing the loader lets them go at once, with no cycle left
    # for the garbage collector.
    def batch_files():
        found = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                found += "loaderx-batch" in os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                pass
        return found

    x = Dataset.write(tmp_path / "x", np.zeros((4096, 32, 32), np.uint8))
    gc.collect()
    gc.disable()
    try:
        it = loader({"x": x}, batch_size=256, transform=invert_in_place,
                    transform_mode="process", transform_workers=2)
        take(it, 4)
        assert batch_files() > 0
        it.close()
        assert batch_files() == 0
    finally:
        gc.enable()
        x.close()


PARENT = """
import os, sys, time
import numpy as np
import loaderx
sys.path.insert(0, {tests!r})
from test_transform_processes import square_sum
x = loaderx.Dataset.write({x!r}, np.zeros((64, 4, 2), np.uint8))
y = loaderx.Dataset.write({y!r}, np.arange(64, dtype=np.int64))
it = loaderx.DataLoader({{'x': x, 'y': y}}, batch_size=8, transform=square_sum,
                        transform_mode='process', transform_workers=2,
                        start_method={method!r})
next(it)
print(' '.join(str(p.process.pid) for p in it._processes.all), flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("method", METHODS)
def test_killing_the_parent_leaves_no_worker_behind(tmp_path, method):
    script = PARENT.format(tests=os.path.dirname(__file__), x=str(tmp_path / "x"),
                           y=str(tmp_path / "y"), method=method)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2
        parent.send_signal(signal.SIGKILL)
        parent.wait(WATCHDOG)
        deadline = time.monotonic() + 10
        while any(os.path.exists(f"/proc/{p}") for p in pids):
            assert time.monotonic() < deadline, "a worker outlived its parent"
            time.sleep(0.05)
    finally:
        parent.kill()
        parent.wait()


def test_refusals_are_clear(streams):
    if "spawn" in METHODS:
        with pytest.raises(TypeError, match="cannot be pickled"):
            loader(streams, transform=lambda b: b, transform_mode="process",
                   start_method="spawn")
    with pytest.raises(ValueError, match="transform or a map"):
        loader(streams, transform_mode="process")
    with pytest.raises(ValueError, match="transform_workers >= 1"):
        loader(streams, transform=square_sum, transform_mode="process", transform_workers=0)
    with pytest.raises(ValueError, match="transform_mode"):
        loader(streams, transform=square_sum, transform_mode="fiber")
    assert children() == []


def build_in_a_daemon(paths):
    """Run in a multiprocessing pool's (daemonic) worker."""
    x, y = (loaderx.Dataset(p) for p in paths)
    try:
        DataLoader({"x": x, "y": y}, transform=square_sum, transform_mode="process")
    except RuntimeError as e:
        return str(e)
    return "started"


def test_a_daemonic_parent_is_refused_clearly(streams, tmp_path):
    paths = [str(tmp_path / "x"), str(tmp_path / "y")]
    with multiprocessing.get_context("fork").Pool(1) as pool:
        said = pool.apply(build_in_a_daemon, (paths,))
    assert "daemonic" in said and "transform_mode='thread'" in said
