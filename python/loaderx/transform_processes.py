"""Internal: transforms in worker processes, batches through shared memory.

``DataLoader(..., transform_mode='process')`` runs the batch work that
follows the native gather (the per-sample `map` and the `transform`,
``batch_work.py``) in worker processes instead of threads, so Python code
that holds the GIL runs on as many cores as there are workers. The
threads of ``transform_pool.py`` still order, bound and deliver the
batches: each hands a step's batch to an idle process and waits for its
result without the GIL.

Batches travel through shared memory, not pickles. Each process has an
input and an output arena: a file made with ``memfd_create`` (nameless, so
nothing is left in /dev/shm whatever happens; an unlinked temporary file
where there is no memfd), mapped by the parent and the process. The
parent copies a batch's arrays into the input arena; the process runs the
work on arrays that view it, writes the result's arrays into its output
arena, and the parent copies them out (the consumer may keep a batch as
long as it likes, and the arena is reused for the next one). Only the
batch's structure (keys, dtypes, shapes, offsets) and what is not an array
(a byte stream's items) go through the pipe.

A process dies with the loader: it exits when told to, when its pipe
closes, when it finds its parent gone (checked twice a second while it
waits), and on Linux at once when the parent process dies
(``PR_SET_PDEATHSIG``, set for processes started from the main thread).
"""

from __future__ import annotations

import atexit
import mmap
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import tempfile
import threading
import traceback
import weakref
from multiprocessing import reduction
from typing import Any, Callable, NamedTuple

import numpy as np

from .transform_pool import with_note

#: Where arrays start in an arena: a cache line, so that the copies run at
#: full speed and every dtype is aligned.
_ALIGN = 64

#: How often a waiting process checks that its parent is still there.
_PARENT_CHECK = 0.5

#: How long close() waits for a process to exit before it kills it.
_EXIT_TIMEOUT = 0.5


class _Array(NamedTuple):
    """An array's place in an arena, in a batch's structure: in the arena
    written for it, or (`in_input`) where the batch that came in already
    holds it."""

    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]
    in_input: bool = False


class Arena:
    """A shared memory file that grows as batches need, and this process's
    mapping of it. Whoever writes grows it and tells the reader its size."""

    def __init__(self, fd: int, size: int = 0) -> None:
        self.fd = fd
        self.size = 0
        self.map: mmap.mmap | None = None
        self.remap(size)

    @classmethod
    def create(cls) -> "Arena":
        if hasattr(os, "memfd_create"):
            return cls(os.memfd_create("loaderx-batch", os.MFD_CLOEXEC))
        with tempfile.TemporaryFile() as f:  # unlinked: it has no name either
            return cls(os.dup(f.fileno()))

    def __reduce__(self) -> Any:
        # To a spawned or forkserver process, the descriptor goes as a
        # descriptor (SCM_RIGHTS), as multiprocessing sends its pipes.
        return _rebuild_arena, (reduction.DupFd(self.fd), self.size)

    def reserve(self, size: int) -> None:
        """Makes the file at least `size` bytes (growing by half at least,
        so that a slowly growing batch does not remap every time)."""
        if size > self.size:
            size = max(size, self.size + self.size // 2)
            size = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
            os.ftruncate(self.fd, size)
            self.remap(size)

    def remap(self, size: int) -> None:
        """Maps `size` bytes of the file (the size its writer said). An old
        mapping is dropped, not closed: arrays that view it keep it alive."""
        if size != self.size:
            self.map = mmap.mmap(self.fd, size) if size else None
            self.size = size

    def close(self) -> None:
        self.map = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _rebuild_arena(fd: Any, size: int) -> Arena:
    return Arena(fd.detach(), size)


def _plain_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) and not value.dtype.hasobject


def pack(value: Any, arena: Arena, came_in: Arena | None = None) -> Any:
    """`value`'s structure, its arrays copied into `arena` (grown to hold
    them) and replaced by their places; an array that is a whole contiguous
    part of `came_in` (a batch passed through) is only pointed at. Dicts,
    lists and tuples are walked; anything else is left for the pipe to
    pickle."""
    arrays: list[np.ndarray] = []
    end = 0
    start, stop = _span(came_in)

    def place(v: Any) -> Any:
        nonlocal end
        if _plain_array(v):
            at = v.__array_interface__["data"][0]
            if start <= at and at + v.nbytes <= stop and v.flags.c_contiguous and v.nbytes:
                return _Array(at - start, v.dtype, v.shape, in_input=True)
            offset = -(-end // _ALIGN) * _ALIGN
            end = offset + v.nbytes
            arrays.append(v)
            return _Array(offset, v.dtype, v.shape)
        if type(v) is dict:
            return {k: place(x) for k, x in v.items()}
        if type(v) in (list, tuple):
            return type(v)(place(x) for x in v)
        return v

    tree = place(value)
    arena.reserve(end)
    for a, where in zip(arrays, _written(tree)):
        if a.nbytes:
            np.ndarray(a.shape, a.dtype, buffer=arena.map, offset=where.offset)[...] = a
    return tree


def _span(arena: Arena | None) -> tuple[int, int]:
    """The addresses `arena`'s mapping covers (an empty span for none)."""
    if arena is None or arena.map is None:
        return 0, 0
    start = np.frombuffer(arena.map, np.uint8).__array_interface__["data"][0]
    return start, start + arena.size


def _written(tree: Any) -> list[_Array]:
    """The places of the arrays pack wrote, in the order it met them."""
    found: list[_Array] = []

    def walk(v: Any) -> None:
        if isinstance(v, _Array):
            if not v.in_input:
                found.append(v)
        elif type(v) is dict:
            for x in v.values():
                walk(x)
        elif type(v) in (list, tuple):
            for x in v:
                walk(x)

    walk(tree)
    return found


def unpack(tree: Any, arena: Arena, copy: bool, came_in: Arena | None = None) -> Any:
    """The value `pack` packed: its arrays views of `arena` (or of
    `came_in`, for those it points at there), or copies of them."""

    def take(v: Any) -> Any:
        if isinstance(v, _Array):
            if not np.prod(v.shape, dtype=np.int64):
                return np.empty(v.shape, v.dtype)
            source = came_in if v.in_input and came_in is not None else arena
            a = np.ndarray(v.shape, v.dtype, buffer=source.map, offset=v.offset)
            return a.copy() if copy else a
        if type(v) is dict:
            return {k: take(x) for k, x in v.items()}
        if type(v) in (list, tuple):
            return type(v)(take(x) for x in v)
        return v

    return take(tree)


# -- the worker process ------------------------------------------------------


def _die_with_parent(with_pdeathsig: bool) -> None:
    if with_pdeathsig and sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass  # the parent check below still ends it


def _serve(conn: Any, inp: Arena, out: Arena, work: Callable[..., Any], parent: int,
           with_pdeathsig: bool) -> None:
    """A worker process: runs `work(batch, seeds)` on each batch it is sent,
    until it is sent None or its parent is gone."""
    _die_with_parent(with_pdeathsig)
    # Ctrl-C goes to the whole process group; the parent decides what it
    # means, and closes the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            while not conn.poll(_PARENT_CHECK):
                if os.getppid() != parent:
                    return
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        size, tree, seeds = message
        inp.remap(size)
        try:
            result = work(unpack(tree, inp, copy=False), seeds)
            reply: tuple = ("ok", pack(result, out, came_in=inp), out.size)
            del result
            payload = reduction.ForkingPickler.dumps(reply)
        except BaseException as e:  # noqa: BLE001: every error goes back to next()
            payload = reduction.ForkingPickler.dumps(("error", *_portable(e)))
        conn.send_bytes(payload)


def _portable(error: BaseException) -> tuple[Any, str]:
    """The error as the parent can rebuild it (itself, when it pickles; a
    RuntimeError naming it otherwise), and its traceback as text."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        pickle.loads(pickle.dumps(error))
        return error, text
    except Exception:  # noqa: BLE001: any pickling failure
        return RuntimeError(f"{type(error).__name__}: {error}"), text


# -- the parent's side ------------------------------------------------------


class _Process:
    """One worker process, its pipe and its arenas."""

    def __init__(self, context: Any, work: Callable[..., Any], index: int) -> None:
        self.inp, self.out = Arena.create(), Arena.create()
        self.conn, child = context.Pipe()
        main = threading.current_thread() is threading.main_thread()
        self.process = context.Process(
            target=_serve, name=f"loaderx-transform-{index}", daemon=True,
            args=(child, self.inp, self.out, work, os.getpid(), main),
        )
        try:
            self.process.start()
        finally:
            child.close()

    def run(self, step: int, batch: Any, seeds: Any) -> Any:
        tree = pack(batch, self.inp)
        self.conn.send((self.inp.size, tree, seeds))
        reply = self.conn.recv()
        if reply[0] == "error":
            _, error, text = reply
            with_note(error, f"in loaderx transform process {self.process.pid}:\n{text}")
            raise error
        _, tree, size = reply
        self.out.remap(size)
        return unpack(tree, self.out, copy=True, came_in=self.inp)

    def death(self, step: int) -> RuntimeError:
        """The error of a step whose process died under it."""
        self.process.join(_EXIT_TIMEOUT)
        code = self.process.exitcode
        if code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        elif code is not None:
            how = f"exited with status {code}"
        else:
            how = "stopped answering"
        return RuntimeError(
            f"loaderx transform process {self.process.pid} {how} while transforming step "
            f"{step}"
        )

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass

    def close(self) -> None:
        self.process.join(_EXIT_TIMEOUT)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()
        self.inp.close()
        self.out.close()
        self.process.close()


_LIVE: "weakref.WeakSet[TransformProcesses]" = weakref.WeakSet()


@atexit.register
def _close_live() -> None:
    # Processes still running at interpreter exit are stopped while the
    # interpreter can still join them.
    for processes in list(_LIVE):
        processes.close()


class TransformProcesses:
    """`count` worker processes running `work(batch, seeds)`. `run` is
    called from any thread and takes an idle process; a process that died
    is replaced by a new one."""

    def __init__(self, work: Callable[..., Any], count: int, start_method: str | None) -> None:
        if multiprocessing.current_process().daemon:
            raise RuntimeError(
                "transform_mode='process' cannot start processes here: this process is a "
                "daemonic worker of another pool (a PyTorch DataLoader or multiprocessing "
                "worker), and those may not have children; use transform_mode='thread'"
            )
        self.context = multiprocessing.get_context(start_method)
        self.method = self.context.get_start_method()
        if self.method != "fork":
            try:
                reduction.ForkingPickler.dumps(work)
            except Exception as e:  # noqa: BLE001: any pickling failure
                raise TypeError(
                    f"transform_mode='process' with the {self.method!r} start method sends "
                    f"the transform to its processes, and it cannot be pickled ({e}): define "
                    "it at the top level of a module, or use start_method='fork'"
                ) from None
        self.work = work
        self.count = count
        self.lock = threading.Lock()
        self.closed = False
        self.all: list[_Process] = []
        self.idle: queue.Queue[_Process] = queue.Queue()
        _LIVE.add(self)
        try:
            for i in range(count):
                self._add(i)
        except BaseException:
            self.close()
            raise

    def _add(self, index: int) -> None:
        p = _Process(self.context, self.work, index)
        with self.lock:
            if self.closed:  # closed while it started
                p.stop()
                p.close()
                return
            self.all.append(p)
        self.idle.put(p)

    def run(self, step: int, batch: Any, seeds: Any) -> Any:
        """`work(batch, seeds)` in an idle process; its error is raised here,
        with the process's traceback as a note."""
        while True:
            try:
                p = self.idle.get(timeout=_PARENT_CHECK)
                break
            except queue.Empty:
                if self.closed:
                    raise RuntimeError("the loader's transform processes are closed") from None
        try:
            result = p.run(step, batch, seeds)
        except (EOFError, OSError):
            # The process is gone: closed under this thread (close() then
            # owns it), or dead, and then this thread takes it out.
            with self.lock:
                if self.closed:
                    raise RuntimeError("the loader's transform processes are closed") from None
                self.all.remove(p)
            error = p.death(step)
            p.close()
            self._start_another()
            raise error from None
        except BaseException:
            self.idle.put(p)
            raise
        self.idle.put(p)
        return result

    def _start_another(self) -> None:
        """A process in place of one that died."""
        try:
            self._add(len(self.all))
        except Exception:  # noqa: BLE001: a new process could not start
            pass  # the next run waits for the others; close() still works

    def close(self) -> None:
        """Stops every process (killing those that do not exit at once) and
        frees the arenas. Idempotent."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            processes = list(self.all)
        _LIVE.discard(self)
        for p in processes:
            p.stop()
        for p in processes:
            p.close()
