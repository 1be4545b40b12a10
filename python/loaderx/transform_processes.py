"""Internal: transforms in worker processes, batches through shared memory.

``DataLoader(..., transform_mode='process')`` runs the batch work that
follows the native gather (the per-sample `map` and the `transform`,
``batch_work.py``) in worker processes instead of threads, so Python code
that holds the GIL runs on as many cores as there are workers. This file
is a process and the protocol it speaks; ``process_pipeline.py`` keeps the
processes busy and delivers their batches in step order.

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
batch as long as it likes, and the arena is reused). The batch's structure
(keys, dtypes, shapes, places) follows the arrays in the arena: for the
usual batch, a dict of arrays with numeric dtypes, as a message that
native code writes and reads in one call on each side
(``crates/loaderx-python/src/batch_message.rs``); for any other, with what
is not an array (a byte stream's items), as a pickle. Only a fixed header
goes through the socket between the two, in one system call each way:
the arena's size, where the message lies in it, and its form (native,
pickled, or a process's error).

A process dies with the loader: it exits when told to, when its socket
closes, when it finds its parent gone (checked twice a second while it
waits), and on Linux at once when the parent process dies
(``PR_SET_PDEATHSIG``, set for processes started from the main thread).
Its parent is the loader's process, or under the forkserver start method
the server, which exits when the process that started it does.
It also exits, with its own status and a line on its stderr, when it
cannot read a batch it was sent; the parent names that in the step's
error and starts another.
"""

from __future__ import annotations

import array
import atexit
import collections
import functools
import itertools
import math
import mmap
import multiprocessing
# Imported now, not by the first Process.join with a timeout: close() must
# work when the process has no descriptor left to open a module with.
import multiprocessing.connection  # noqa: F401
import os
import pickle
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
import traceback
import weakref
from multiprocessing import reduction
from typing import Any, Callable, NamedTuple

import numpy as np

from ._native import (
    BATCH_ALIGN,
    PLACE_CAME_IN,
    PLACE_SHARED,
    PLACE_WRITTEN,
    array_address,
    message_places,
    pack_batch,
    shared_place,
    unpack_batch,
)
from .transform_pool import with_note

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

#: Seconds one wait of the parent for a process's reply lasts before it
#: checks for close() and runs signal handlers (Ctrl-C).
_WAIT_SLICE = 0.05

#: The one message of the socket, each way: the batch's number (0 asks the
#: process to exit), the sender's arena size, the message's offset and
#: length in that arena, and its form (`_PACKED` or `_PICKLED`).
_HEADER = struct.Struct("<QQQQQ")

#: The forms of a message: written by `pack_batch` (a dict of numeric
#: arrays), a pickle (any other batch), or a process's error.
_PACKED, _PICKLED, _FAILED = 1, 2, 3

#: The status a process exits with when it cannot read a batch it was
#: sent (a damaged message, a pickle it cannot load, a shared buffer it
#: cannot map), after saying why on its stderr: it cannot take later
#: batches either, as it no longer knows which buffers it holds.
_UNREADABLE = 3

#: Batch numbers, unique in this process: a process takes each once.
_SEQUENCE = itertools.count(1)

#: Most descriptors one message carries (a batch's new shared buffers),
#: and the room for them in a receive.
_MAX_FDS = 64
_FD_BYTES = array.array("i").itemsize
_ANCILLARY = socket.CMSG_LEN(_MAX_FDS * _FD_BYTES)

#: Where a packed array is: in the arena its writer wrote it to, or in
#: the arena that the batch came in (a result passed through); from
#: `_SHARED` on, in the shared batch buffer numbered `where - _SHARED`.
WRITTEN, CAME_IN, _SHARED = PLACE_WRITTEN, PLACE_CAME_IN, PLACE_SHARED

class _Array(NamedTuple):
    """An array's place in a pickled tree: `offset` bytes into the memory
    `where` says. A built-in dtype travels as its string: a dtype object pickles
    several times slower, and this goes both ways every step; a structured
    or user-defined one (bfloat16) as itself, which its string does not
    describe."""

    offset: int
    dtype: str | np.dtype
    shape: tuple[int, ...]
    where: int = WRITTEN


#: Built-in dtypes' names, by dtype: `dtype.str` builds its string anew at
#: every read, ten times slower than looking it up here.
_NAMES: dict[np.dtype, str] = {}


def _dtype_name(dtype: np.dtype) -> str | np.dtype:
    # Checked first: a dtype with metadata equals the built-in one it
    # extends, and would find that one's name, without the metadata.
    if dtype.isbuiltin != 1:
        return dtype
    name = _NAMES.get(dtype)
    if name is None:
        name = _NAMES[dtype] = dtype.str
    return name


@functools.lru_cache(maxsize=None)
def _named_dtype(name: str) -> np.dtype:
    return np.dtype(name)


def _dtype(name: str | np.dtype) -> np.dtype:
    return _named_dtype(name) if type(name) is str else name


class Arena:
    """A shared memory file that grows as batches need, and this process's
    mapping of it (`map`, and `view`, the same bytes as a uint8 array).
    Whoever writes grows it and tells the reader its size."""

    def __init__(self, fd: int, size: int = 0) -> None:
        self.fd = fd
        self.size = 0
        self.map: mmap.mmap | None = None
        self.view: np.ndarray | None = None
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
            self.view = np.frombuffer(self.map, np.uint8) if size else None
            self.size = size

    def close(self) -> None:
        self.map = self.view = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _rebuild_arena(fd: Any, size: int) -> Arena:
    return Arena(fd.detach(), size)


def _plain_array(value: Any) -> bool:
    # Not a subclass (a masked array is more than its bytes): that is
    # pickled whole, as any other value.
    return type(value) is np.ndarray and not value.dtype.hasobject


def _span(memory: np.ndarray | None) -> tuple[int, int]:
    """The addresses a memory (a uint8 array) covers (an empty span for none)."""
    if memory is None:
        return 0, 0
    start = array_address(memory)
    return start, start + len(memory)


#: Finds where an array already lies in memory both sides map: `(offset,
#: where)`, or None when it must be copied.
Place = Callable[[np.ndarray], "tuple[int, int] | None"]


class Shared:
    """The shared batch buffers a batch views, by place (`where`): the
    array made of each and its descriptor."""

    def __init__(self) -> None:
        self.buffers: dict[int, tuple[np.ndarray, int]] = {}

    def place(self, a: np.ndarray) -> tuple[int, int] | None:
        return shared_place(a, self.buffers)


def _finder(spans: list[tuple[int, int, int]]) -> Place:
    """What finds an array that lies whole and contiguous in one of the
    memories of `spans` (`(where, start, stop)`)."""

    def place(a: np.ndarray) -> tuple[int, int] | None:
        at = array_address(a)
        for where, start, stop in spans:
            if start <= at and at + a.nbytes <= stop and a.flags.c_contiguous:
                return at - start, where
        return None

    return place


# The walks below are module functions that pass what they need along: a
# nested function that calls itself is a reference cycle, which would keep
# the batch it holds (and its shared buffer) alive until the cyclic
# garbage collector happened to run.


def layout(value: Any, place: Place) -> tuple[Any, list[tuple[np.ndarray, int]]]:
    """How `value` is pickled when `pack_batch` cannot pack it: its tree of
    dicts, lists and tuples, its arrays replaced by `_Array` places, where
    `place` finds them already (shared memory both sides map) or at
    offsets of the arena; and the arrays to copy there, with their
    offsets."""
    copies: list[tuple[np.ndarray, int]] = []
    return _walk(value, place, copies), copies


def write(arena: Arena, copies: list[tuple[np.ndarray, int]], payload: bytes) -> tuple[int, int]:
    """Copies the arrays `layout` placed into `arena`, and the pickled
    `payload` behind them, growing the arena to hold it all; returns the
    payload's offset and length."""
    at = _aligned(copies)
    arena.reserve(at + len(payload))
    for a, offset in copies:
        np.ndarray(a.shape, a.dtype, arena.map, offset)[...] = a
    arena.map[at:at + len(payload)] = payload
    return at, len(payload)


def _aligned(copies: list[tuple[np.ndarray, int]]) -> int:
    """The first aligned offset past the arrays copied so far."""
    end = copies[-1][1] + copies[-1][0].nbytes if copies else 0
    return -(-end // BATCH_ALIGN) * BATCH_ALIGN


def _walk(v: Any, place: Place, copies: list[tuple[np.ndarray, int]]) -> Any:
    if _plain_array(v):
        dtype = _dtype_name(v.dtype)
        if not v.nbytes:
            return _Array(0, dtype, v.shape)
        found = place(v)
        if found is not None:
            return _Array(found[0], dtype, v.shape, found[1])
        offset = _aligned(copies)
        copies.append((v, offset))
        return _Array(offset, dtype, v.shape)
    if type(v) is dict:
        return {k: _walk(x, place, copies) for k, x in v.items()}
    if type(v) in (list, tuple):
        return type(v)(_walk(x, place, copies) for x in v)
    return v


def unpack(tree: Any, memories: dict[int, Any], copy: bool) -> Any:
    """The value that `layout` and `write` packed, its arrays views of
    `memories[where]` (uint8 arrays), or, with `copy`, copies of those in
    the arenas (which are reused)."""
    if isinstance(tree, _Array):
        offset, dtype, shape, where = tree
        dtype = _dtype(dtype)
        if not math.prod(shape):
            return np.empty(shape, dtype)
        # Positional: keyword arguments make the call half as slow again.
        a = np.ndarray(shape, dtype, memories[where], offset)
        return a.copy() if copy and where < _SHARED else a
    if type(tree) is dict:
        return {k: unpack(x, memories, copy) for k, x in tree.items()}
    if type(tree) in (list, tuple):
        return type(tree)(unpack(x, memories, copy) for x in tree)
    return tree


def pack_message(arena: Arena, batch: Any, seeds: Any, ints: list[int],
                 spans: list[tuple[int, int, int]] | None,
                 place: Place) -> tuple[int, int, int, Any]:
    """Writes `batch` (with `seeds` and `ints`) into `arena` for the other
    side: natively where `pack_batch` can (with `spans` as it takes them),
    else as a pickle of `(tree, seeds, ints, places)`, `place` finding its
    arrays and `places` the shared buffers they lie in. Returns the
    message's offset, length and form, and `pack_batch`'s shared buffers
    (None for a pickle)."""
    packed = pack_batch(arena.view, batch, seeds, ints, spans)
    if type(packed) is int:  # the arena is too small for it
        arena.reserve(packed)
        packed = pack_batch(arena.view, batch, seeds, ints, spans)
    if packed is not None:
        at, length, shared = packed
        return at, length, _PACKED, shared
    places: dict[int, None] = {}

    def placing(a: np.ndarray) -> tuple[int, int] | None:
        found = place(a)
        if found is not None and found[1] >= _SHARED:
            places[found[1]] = None
        return found

    tree, copies = layout(batch, placing)
    payload = pickle.dumps((tree, seeds, ints, list(places)), _PROTOCOL)
    return (*write(arena, copies, payload), _PICKLED, None)


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
    by place, with the addresses each covers, the least recently used
    dropped past `_MAPPED` (a buffer the loader freed is kept mapped until
    then)."""

    def __init__(self) -> None:
        #: Each mapping as a uint8 array (which keeps the mapping).
        self.maps: collections.OrderedDict[int, np.ndarray] = collections.OrderedDict()
        self.spans: dict[int, tuple[int, int]] = {}

    def receive(self, fds: list[int], wheres: list[int]) -> None:
        """Maps the buffers `wheres` from their descriptors `fds`, which it
        closes; ValueError when the two do not match."""
        try:
            if len(fds) != len(wheres):
                raise ValueError(f"{len(fds)} descriptors came for the shared buffers {wheres}")
            for fd, where in zip(fds, wheres):
                self.maps[where] = np.frombuffer(mmap.mmap(fd, os.fstat(fd).st_size), np.uint8)
                self.spans[where] = _span(self.maps[where])
        finally:
            for fd in fds:
                os.close(fd)

    def use(self, wheres: list[int]) -> list[int]:
        """Marks `wheres` used now; drops (and returns) the mappings beyond
        the bound that are not among them."""
        for where in wheres:
            self.maps.move_to_end(where)
        if len(self.maps) <= _MAPPED:
            return []
        dropped = [w for w in self.maps if w not in wheres][: len(self.maps) - _MAPPED]
        for where in dropped:
            del self.maps[where], self.spans[where]
        return dropped


def _serve(sock: socket.socket, inp: Arena, out: Arena, work: Callable[..., Any],
           parent: int | None, with_pdeathsig: bool) -> None:
    """A worker process: runs `work(batch, seeds)` on each batch it is sent,
    until it is told to exit or its parent (`parent`, or the process that
    started this one where it is `None`) is gone."""
    _die_with_parent(with_pdeathsig)
    if parent is None:
        parent = os.getppid()
    # Ctrl-C goes to the whole process group; the parent decides what it
    # means, and closes the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    mapped = _Mapped()
    # A receive gives up after a while, to check that the parent is there.
    _wait_slices(sock, _PARENT_CHECK)
    came_in = _span(inp.view)
    last = 0
    while True:
        try:
            header, fds = _receive(sock)
        except BlockingIOError:
            if os.getppid() != parent:
                return
            continue
        except OSError:
            return  # the socket is gone
        if len(header) != _HEADER.size:
            return  # the socket closed
        seq, size, at, length, form = _HEADER.unpack(header)
        if not seq:
            return
        if seq <= last:  # a message posted again: it came the first time
            for fd in fds:
                os.close(fd)
            continue
        last = seq
        try:
            if size != inp.size:
                inp.remap(size)
                came_in = _span(inp.view)
            if form == _PACKED:
                places = message_places(inp.view, at, length)
            else:
                tree, seeds, _, places = pickle.loads(inp.map[at:at + length])
            # The buffers not mapped yet are those whose descriptors came,
            # in the order of the places.
            mapped.receive(fds, [where for where in places if where not in mapped.maps])
        except Exception as e:  # noqa: BLE001: named on stderr, then the exit status
            print(f"loaderx transform process {os.getpid()} cannot read the batch the loader "
                  f"sent it: {e!r}", file=sys.stderr, flush=True)
            raise SystemExit(_UNREADABLE) from None
        dropped = mapped.use(places)
        memories: dict[int, Any] = {WRITTEN: inp.view}
        spans = [(CAME_IN, *came_in)]
        for where in places:
            memories[where] = mapped.maps[where]
            spans.append((where, *mapped.spans[where]))
        try:
            if form == _PACKED:
                batch, seeds, _ = unpack_batch(inp.view, at, length, memories, False)
            else:
                batch = unpack(tree, memories, copy=False)
            # A result's array that is part of what came in (the input
            # arena or this batch's shared buffers) goes back as its place.
            result = work(batch, seeds)
            del batch
            at, length, form, _ = pack_message(out, result, None, dropped, spans,
                                               _finder(spans))
            del result
        except BaseException as e:  # noqa: BLE001: every error goes back to next()
            payload = pickle.dumps((*_portable(e), dropped), _PROTOCOL)
            at, length = write(out, [], payload)
            form = _FAILED
        try:
            sock.sendall(_HEADER.pack(seq, out.size, at, length, form))
        except OSError:
            return


def _receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """A message's header and the descriptors that came with it:
    `socket.recv_fds` without its wrapping, which cost 1.3 µs of its 3.5
    (a send and receive of a header, timed alone)."""
    header, ancillary, _, _ = sock.recvmsg(_HEADER.size, _ANCILLARY)
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(array.array("i", data[:len(data) - len(data) % _FD_BYTES]))
    return header, fds


def _wait_slices(sock: socket.socket, seconds: float) -> None:
    """Makes a blocking receive on `sock` give up (EAGAIN) after `seconds`:
    one system call a wait, where a poll first would be two."""
    whole = int(seconds)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                    struct.pack("@ll", whole, int((seconds - whole) * 1e6)))


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
    """One worker process, its socket and its arenas, and the batch it
    holds: `sent` is that batch's sequence number (0 when it holds none)."""

    def __init__(self, context: Any, work: Callable[..., Any], index: int) -> None:
        self.inp, self.out = Arena.create(), Arena.create()
        #: The shared batch buffers the process has mapped.
        self.known: set[int] = set()
        #: The number of the batch it holds (0 when it holds none), and
        #: the last number posted.
        self.sent = self.posted = 0
        self.message: tuple[bytes, list[int]] = (b"", [])
        #: The shared batch buffers of the batch it holds: `(array, descriptor)`
        #: by place.
        self.shared: dict[int, tuple[np.ndarray, int]] | None = None
        #: Who sent the batch it holds (a ProcessPipeline).
        self.owner: Any = None
        #: The last header received: a reply is in only when its sequence
        #: number is `sent`, so a reply read by a call that a signal handler
        #: then interrupted is not waited for again.
        self.header = bytearray(_HEADER.size)
        self.sock, child = socket.socketpair()
        _wait_slices(self.sock, _WAIT_SLICE)
        main = threading.current_thread() is threading.main_thread()
        # A forkserver's worker is the server's child, not this process's:
        # it watches the server, which exits when this process does.
        parent = None if context.get_start_method() == "forkserver" else os.getpid()
        self.process = context.Process(
            target=_serve, name=f"loaderx-transform-{index}", daemon=True,
            args=(child, self.inp, self.out, work, parent, main),
        )
        try:
            self.process.start()
        finally:
            child.close()

    def load(self, batch: Any, seeds: Any, owner: Any) -> None:
        """Gives the process `batch` for `owner`: writes it to the input
        arena and makes the message that `post` sends."""
        shared = Shared()
        at, length, form, buffers = pack_message(self.inp, batch, seeds, [], None, shared.place)
        if buffers is None:
            buffers = shared.buffers
        # The process maps the buffers it has not yet, in the order of the
        # places (the message's order, which both sides read alike).
        new = [where for where in buffers if where not in self.known]
        seq = next(_SEQUENCE)
        message = (_HEADER.pack(seq, self.inp.size, at, length, form),
                   [buffers[where][1] for where in new])
        sending = set(new)
        # No call between these statements (the interpreter runs signal
        # handlers only at calls and jumps): a load cut short leaves the
        # process as it was.
        self.known |= sending
        self.shared, self.owner, self.message, self.sent = buffers, owner, message, seq

    def post(self) -> None:
        """Sends the message of the batch it holds. Sending it again is
        harmless (the process takes a number once), which is what makes a
        send that a signal handler's exception may have cut short safe to
        repeat. Raises OSError when the process is gone."""
        header, fds = self.message
        if fds:
            socket.send_fds(self.sock, [header], fds)
        else:
            self.sock.sendall(header)
        self.posted = self.sent

    def reply(self, wait: bool) -> bool:
        """Whether the reply to the batch it holds is in, waiting for it up
        to `_WAIT_SLICE` seconds with `wait`. Raises EOFError or OSError
        when the process is gone."""
        if _HEADER.unpack_from(self.header)[0] == self.sent:
            return True
        view, got = memoryview(self.header), 0
        while got < _HEADER.size:
            try:
                n = self.sock.recv_into(view[got:], 0, 0 if wait else socket.MSG_DONTWAIT)
            except BlockingIOError:
                if not got:
                    return False
                continue  # the rest of a header is on its way
            if not n:
                raise EOFError
            got += n
        return _HEADER.unpack_from(self.header)[0] == self.sent

    def result(self) -> tuple[bool, Any]:
        """`(True, result)`, or `(False, error)` with the process's
        traceback as the error's note, from the reply that is in. May be
        called again (nothing it reads is reused before the next load)."""
        _, size, at, length, form = _HEADER.unpack(self.header)
        self.out.remap(size)
        if form == _FAILED:
            error, text, dropped = pickle.loads(self.out.map[at:at + length])
            self.known.difference_update(dropped)
            with_note(error, f"in loaderx transform process {self.process.pid}:\n{text}")
            return False, error
        memories: dict[int, Any] = {WRITTEN: self.out.view, CAME_IN: self.inp.view}
        assert self.shared is not None
        for where, (root, _) in self.shared.items():
            memories[where] = root
        # Shared batch buffers are delivered as they are (views that keep
        # them alive); what the arenas hold is copied, as they are reused.
        if form == _PACKED:
            result, _, dropped = unpack_batch(self.out.view, at, length, memories, True)
        else:
            tree, _, dropped, _ = pickle.loads(self.out.map[at:at + length])
            result = unpack(tree, memories, copy=True)
        self.known.difference_update(dropped)
        return True, result

    def death(self, step: int) -> RuntimeError:
        """The error of a step whose process died under it."""
        self.process.join(_EXIT_TIMEOUT)
        code = self.process.exitcode
        if code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        elif code == _UNREADABLE:
            how = "could not read the batch it was sent (its stderr says why)"
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
            self.sock.sendall(_HEADER.pack(0, 0, 0, 0, 0))
        except OSError:
            pass

    def close(self, deadline: float | None = None) -> None:
        """Waits until `deadline` (monotonic; `_EXIT_TIMEOUT` from now by
        default) for the process to exit, kills it if it has not, and frees
        its socket and arenas."""
        if deadline is None:
            deadline = time.monotonic() + _EXIT_TIMEOUT
        self.process.join(max(0.0, deadline - time.monotonic()))
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        # The batch it held goes now (its shared buffers and descriptors),
        # not when the collector breaks the cycle with its owner.
        self.shared = self.owner = None
        self.sock.close()
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
    """`count` worker processes running `work(batch, seeds)`, for one
    ProcessPipeline at a time; a process that died is replaced."""

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

    def replace(self, p: _Process) -> None:
        """Takes out `p`, which died, and starts another in its place (when
        one cannot start, the others go on)."""
        with self.lock:
            if self.closed or p not in self.all:
                return
            self.all.remove(p)
        p.close()
        try:
            self._add(len(self.all))
        except Exception:  # noqa: BLE001: a new process could not start
            pass

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
