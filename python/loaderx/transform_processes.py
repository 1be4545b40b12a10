"""Internal: transforms in worker processes, batches through shared memory.

``DataLoader(..., transform_mode='process')`` runs the batch work that
follows the native gather (the per-sample `map` and the `transform`,
``batch_work.py``) in worker processes instead of threads, so Python code
that holds the GIL runs on as many cores as there are workers. The
threads of ``transform_pool.py`` still order, bound and deliver the
batches: each hands a step's batch to an idle process and waits for its
result without the GIL.

Batches travel through shared memory, not pickles. The native loader of
a DataLoader with processes gathers its big batch buffers into shared
memory files (``Loader(..., shared_memory=True)``); a process is sent each
file's descriptor once (SCM_RIGHTS) and keeps it mapped, so it works on the
gathered batch itself, and an array it passes through or changes in place
comes back as that same memory, without a copy. Everything else goes
through two arenas per process, an input and an output one: files made
with ``memfd_create`` (nameless, so nothing is left in /dev/shm whatever
happens; an unlinked temporary file where there is no memfd), which the
parent and the process both map. The parent copies a small or private
array into the input arena; the process writes the arrays it makes into
its output arena, and the parent copies them out (the consumer may keep a
batch as long as it likes, and the arena is reused). Only the batch's
structure (keys, dtypes, shapes, places) and what is not an array (a byte
stream's items) go through the pipe.

A process dies with the loader: it exits when told to, when its pipe
closes, when it finds its parent gone (checked twice a second while it
waits), and on Linux at once when the parent process dies
(``PR_SET_PDEATHSIG``, set for processes started from the main thread).
"""

from __future__ import annotations

import atexit
import collections
import functools
import math
import mmap
import multiprocessing
import os
import pickle
import queue
import select
import signal
import sys
import tempfile
import threading
import time
import traceback
import weakref
from multiprocessing import reduction
from typing import Any, Callable, NamedTuple

import numpy as np

from ._native import BatchMemory
from .transform_pool import with_note

#: Where arrays start in an arena: a cache line, so that the copies run at
#: full speed and every dtype is aligned.
_ALIGN = 64

#: How often a waiting process checks that its parent is still there.
_PARENT_CHECK = 0.5

#: How many shared batch buffers a process keeps mapped: a loader's
#: recycled buffers (steps ahead plus those with the consumer, per
#: stream) in the usual configurations.
_MAPPED = 32

#: Messages are plain pickles (nothing in them needs multiprocessing's own
#: reducers), which skip the ForkingPickler made for every message.
_PROTOCOL = pickle.HIGHEST_PROTOCOL

#: How long close() waits for a process to exit before it kills it.
_EXIT_TIMEOUT = 0.5


#: Where a packed array is: in the arena its writer wrote it to, or in
#: the arena that the batch came in (a result passed through); a tuple is
#: the key of a shared batch buffer (its file's device and inode).
WRITTEN, CAME_IN = 0, 1


class _Array(NamedTuple):
    """An array's place in a batch's structure: `offset` bytes into the
    memory `where` says. A built-in dtype travels as its string: a dtype
    object pickles several times slower, and this goes both ways every
    step; a structured or user-defined one (bfloat16) as itself, which its
    string does not describe."""

    offset: int
    dtype: str | np.dtype
    shape: tuple[int, ...]
    where: int | tuple[int, int] = WRITTEN


def _dtype_name(dtype: np.dtype) -> str | np.dtype:
    return dtype.str if dtype.isbuiltin == 1 else dtype


@functools.lru_cache(maxsize=None)
def _named_dtype(name: str) -> np.dtype:
    return np.dtype(name)


def _dtype(name: str | np.dtype) -> np.dtype:
    return _named_dtype(name) if type(name) is str else name


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


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _span(memory: Any) -> tuple[int, int]:
    """The addresses a mapping covers (an empty span for none)."""
    if memory is None:
        return 0, 0
    start = _address(np.frombuffer(memory, np.uint8))
    return start, start + len(memory)


def _batch_memory(a: np.ndarray) -> tuple[np.ndarray, Any] | None:
    """The native batch buffer `a` views: the array made of it and its
    owner, when the owner is shared memory."""
    while isinstance(a, np.ndarray):
        if isinstance(a.base, BatchMemory):
            return (a, a.base) if a.base.fd is not None else None
        a = a.base
    return None


class Shared:
    """The shared batch buffers a batch views, by key: the array made of
    each and its descriptor."""

    def __init__(self) -> None:
        self.buffers: dict[tuple[int, int], tuple[np.ndarray, int]] = {}

    def place(self, a: np.ndarray) -> _Array | None:
        found = _batch_memory(a)
        if found is None or not a.flags.c_contiguous:
            return None
        root, owner = found
        st = os.fstat(owner.fd)
        key = (st.st_dev, st.st_ino)
        self.buffers[key] = (root, owner.fd)
        return _Array(_address(a) - _address(root), _dtype_name(a.dtype), a.shape, key)


# The walks below are module functions that pass what they need along: a
# nested function that calls itself is a reference cycle, which would keep
# the batch it holds (and its shared buffer) alive until the cyclic
# garbage collector happened to run.


def pack(value: Any, arena: Arena, places: Callable[[np.ndarray], _Array | None]) -> Any:
    """`value`'s structure, its arrays replaced by their places: where
    `places` finds them already (shared memory both sides map), or copied
    into `arena` (grown to hold them). Dicts, lists and tuples are walked;
    anything else is left for the pipe to pickle."""
    copies: list[tuple[np.ndarray, int]] = []
    tree = _place(value, places, copies)
    arena.reserve(copies[-1][1] + copies[-1][0].nbytes if copies else 0)
    for a, offset in copies:
        np.ndarray(a.shape, a.dtype, buffer=arena.map, offset=offset)[...] = a
    return tree


def _place(v: Any, places: Callable[[np.ndarray], _Array | None],
           copies: list[tuple[np.ndarray, int]]) -> Any:
    if _plain_array(v):
        found = places(v) if v.nbytes else None
        if found is not None:
            return found
        if not v.nbytes:
            return _Array(0, _dtype_name(v.dtype), v.shape)
        end = copies[-1][1] + copies[-1][0].nbytes if copies else 0
        offset = -(-end // _ALIGN) * _ALIGN
        copies.append((v, offset))
        return _Array(offset, _dtype_name(v.dtype), v.shape)
    if type(v) is dict:
        return {k: _place(x, places, copies) for k, x in v.items()}
    if type(v) in (list, tuple):
        return type(v)(_place(x, places, copies) for x in v)
    return v


def unpack(tree: Any, memory: Callable[[Any], Any], copy: Callable[[Any], bool]) -> Any:
    """The value `pack` packed, its arrays views of the memory that
    `memory(where)` gives (an mmap or an array), or copies of them where
    `copy(where)`."""
    if isinstance(tree, _Array):
        dtype = _dtype(tree.dtype)
        if not math.prod(tree.shape):
            return np.empty(tree.shape, dtype)
        a = np.ndarray(tree.shape, dtype, buffer=memory(tree.where), offset=tree.offset)
        return a.copy() if copy(tree.where) else a
    if type(tree) is dict:
        return {k: unpack(x, memory, copy) for k, x in tree.items()}
    if type(tree) in (list, tuple):
        return type(tree)(unpack(x, memory, copy) for x in tree)
    return tree


# -- the worker process ------------------------------------------------------


def _die_with_parent(with_pdeathsig: bool) -> None:
    if with_pdeathsig and sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass  # the parent check below still ends it


class _Mapped:
    """A worker's mappings of the shared batch buffers it has been sent,
    by key, with the addresses each covers, the least recently used dropped
    past `_MAPPED` (a buffer the loader freed is kept mapped until then)."""

    def __init__(self) -> None:
        self.maps: collections.OrderedDict[tuple[int, int], mmap.mmap] = (
            collections.OrderedDict())
        self.spans: dict[tuple[int, int], tuple[int, int]] = {}

    def receive(self, conn: Any, keys: list[tuple[int, int]]) -> None:
        for key in keys:
            fd = reduction.recv_handle(conn)
            try:
                self.maps[key] = mmap.mmap(fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)
            self.spans[key] = _span(self.maps[key])

    def use(self, keys: set[tuple[int, int]]) -> list[tuple[int, int]]:
        """Marks `keys` used now; drops (and returns) the mappings beyond
        the bound that are not among them."""
        for key in keys:
            self.maps.move_to_end(key)
        dropped = [key for key in self.maps if key not in keys][: max(0, len(self.maps) - _MAPPED)]
        for key in dropped:
            del self.maps[key], self.spans[key]
        return dropped


def _finder(spans: list[tuple[Any, int, int]]) -> Callable[[np.ndarray], _Array | None]:
    """What finds an array that lies whole and contiguous in one of the
    memories of `spans` (`(where, start, stop)`): its place there."""

    def place(a: np.ndarray) -> _Array | None:
        at = _address(a)
        for where, start, stop in spans:
            if start <= at and at + a.nbytes <= stop and a.flags.c_contiguous:
                return _Array(at - start, _dtype_name(a.dtype), a.shape, where)
        return None

    return place


def _serve(conn: Any, inp: Arena, out: Arena, work: Callable[..., Any], parent: int,
           with_pdeathsig: bool) -> None:
    """A worker process: runs `work(batch, seeds)` on each batch it is sent,
    until it is sent None or its parent is gone."""
    _die_with_parent(with_pdeathsig)
    # Ctrl-C goes to the whole process group; the parent decides what it
    # means, and closes the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    mapped = _Mapped()
    # One poll object for the life of the process: Connection.poll builds a
    # selector on every call, a cost paid each step.
    ready = select.poll()
    ready.register(conn.fileno(), select.POLLIN)
    came_in = _span(inp.map)
    while True:
        try:
            while not ready.poll(_PARENT_CHECK * 1000):
                if os.getppid() != parent:
                    return
            message = pickle.loads(conn.recv_bytes())
            if message is None:
                return
            size, tree, seeds, keys, new = message
            mapped.receive(conn, new)
        except (EOFError, OSError):
            return
        if size != inp.size:
            inp.remap(size)
            came_in = _span(inp.map)
        keys = set(keys)
        dropped = mapped.use(keys)

        def memory(where: Any) -> Any:
            return inp.map if where == WRITTEN else mapped.maps[where]

        # A result's array that is part of what came in (the input arena or
        # this batch's shared buffers) goes back as its place there.
        places = _finder([(CAME_IN, *came_in), *((key, *mapped.spans[key]) for key in keys)])
        try:
            result = work(unpack(tree, memory, copy=lambda where: False), seeds)
            reply: tuple = ("ok", pack(result, out, places), out.size, dropped)
            del result
            payload = pickle.dumps(reply, _PROTOCOL)
        except BaseException as e:  # noqa: BLE001: every error goes back to next()
            payload = pickle.dumps(("error", *_portable(e), dropped), _PROTOCOL)
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
        #: The shared batch buffers the process has mapped.
        self.known: set[tuple[int, int]] = set()
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

    def run(self, batch: Any, seeds: Any) -> Any:
        shared = Shared()
        tree = pack(batch, self.inp, shared.place)
        new = [key for key in shared.buffers if key not in self.known]
        self.conn.send_bytes(pickle.dumps((self.inp.size, tree, seeds, list(shared.buffers), new),
                                          _PROTOCOL))
        for key in new:
            reduction.send_handle(self.conn, shared.buffers[key][1], self.process.pid)
            self.known.add(key)
        reply = pickle.loads(self.conn.recv_bytes())
        self.known.difference_update(reply[-1])
        if reply[0] == "error":
            _, error, text, _ = reply
            with_note(error, f"in loaderx transform process {self.process.pid}:\n{text}")
            raise error
        _, tree, size, _ = reply
        self.out.remap(size)

        def memory(where: Any) -> Any:
            if where == WRITTEN:
                return self.out.map
            if where == CAME_IN:
                return self.inp.map
            return shared.buffers[where][0]

        # Shared batch buffers are delivered as they are (views that keep
        # them alive); what the arenas hold is copied, as they are reused.
        return unpack(tree, memory, copy=lambda where: not isinstance(where, tuple))

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
            self.conn.send_bytes(pickle.dumps(None))
        except OSError:
            pass

    def close(self, deadline: float | None = None) -> None:
        """Waits until `deadline` (monotonic; `_EXIT_TIMEOUT` from now by
        default) for the process to exit, kills it if it has not, and frees
        its pipe and arenas."""
        if deadline is None:
            deadline = time.monotonic() + _EXIT_TIMEOUT
        self.process.join(max(0.0, deadline - time.monotonic()))
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
        if sys.platform == "win32":
            # The arenas and batch files travel as POSIX descriptors.
            raise RuntimeError("transform_mode='process' needs a POSIX system (Linux, macOS); "
                               "use transform_mode='thread' on Windows")
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
            result = p.run(batch, seeds)
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
        # One wait for them all, so that closing many busy processes takes
        # no longer than closing one.
        deadline = time.monotonic() + _EXIT_TIMEOUT
        for p in processes:
            p.close(deadline)
