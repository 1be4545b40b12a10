"""Internal: the transform pool between the native loader and the consumer.

:class:`TransformPool` owns the native ``Loader`` and, when asked for
workers, a few Python threads that run the batch work (stream assembly and
the transform) ahead of the consumer; whatever order they finish in,
batches are delivered in step order. The DataLoader (``dataloader.py``)
builds one per run and hands it the work from ``loader_streams.py``.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from typing import Any, Callable

from ._native import Loader

#: Seconds a waiting consumer or pool thread sleeps between checks for
#: close() and for signals (Ctrl-C).
_WAIT_SLICE = 0.05

#: How long close() waits for the transform threads, in seconds. A thread
#: still inside a slow transform is left to finish on its own (it is a daemon
#: and delivers nothing once the loader is closed).
_JOIN_TIMEOUT = 0.5

#: The last step there is: the native loader counts steps in an unsigned
#: 64-bit integer (and would wrap to 0 after it), so a loader that has
#: delivered this step refuses to go on instead of repeating step 0.
MAX_STEP = 2**64 - 1

_LIVE: "weakref.WeakSet[TransformPool]" = weakref.WeakSet()

#: Per thread, the pools whose work (assembly + transform) it is running: a
#: transform that calls next() on its own loader would wait for the batch it
#: is itself producing (forever, with one pool thread), so take() refuses.
_WORKING = threading.local()


@atexit.register
def _close_live_pools() -> None:
    # A loader still alive at interpreter exit is closed before finalization
    # starts, so no thread is left waiting on it.
    for pool in list(_LIVE):
        pool.close()


class TransformPool:
    """The native loader and, with `workers` > 0, a pool of Python threads
    that run `work` (assembly + transform) on its batches ahead of the
    consumer, at most `ahead` steps ahead of it. Holds no reference to the
    DataLoader, so an abandoned DataLoader is collected (and closes this)."""

    def __init__(
        self,
        native: Loader,
        work: Callable[[Any], Any],
        workers: int,
        ahead: int,
        end: int | None = None,
    ) -> None:
        self.native = native
        # The first step not to deliver: a finite pass's step count, or
        # none after the last step there is.
        self.end = MAX_STEP + 1 if end is None else end
        self.work = work
        self.pid = os.getpid()
        self.threads: list[threading.Thread] = []
        self.cond = threading.Condition()
        self.stopped = False
        self.taking = False  # a pool thread is inside next(native)
        self.next_deliver = native.next_step  # step of the next delivery
        # The native loader's next step, counted here as a Python int: the
        # native counter is a u64 that wraps to 0 past MAX_STEP, and pool
        # threads compare it with next_deliver to stay `ahead` steps ahead.
        self.next_take = native.next_step
        self.ahead = ahead
        self.results: dict[int, tuple[bool, Any]] = {}
        _LIVE.add(self)
        for i in range(workers):
            t = threading.Thread(
                target=self._run, name=f"loaderx-transform-{i}", daemon=True
            )
            self.threads.append(t)
            t.start()

    @property
    def next_step(self) -> int:
        """The step of the next delivery: what the consumer gets next, not
        how far the native workers or the pool have run ahead."""
        if self.threads or os.getpid() != self.pid:
            return self.next_deliver
        return self.next_take

    # The native call, and which step it consumed.
    def _native_next(self) -> tuple[int, Any, BaseException | None]:
        """(step, item, error): the native loader's next batch, or the error
        it raised for that step. Raises StopIteration once closed, and an
        interruption (a signal handler's exception) as is: no step is
        consumed then (the native loader keeps a batch that was ready)."""
        before = self.native.next_step
        try:
            item = next(self.native)
        except StopIteration:
            raise
        except BaseException as e:
            if self.native.next_step == before:
                raise  # interrupted: nothing consumed
            step, self.next_take = self.next_take, self.next_take + 1
            return step, None, e
        step, self.next_take = self.next_take, self.next_take + 1
        return step, item, None

    def _do_work(self, item: Any) -> Any:
        """`work(item)`, marked as running on this thread for this pool."""
        working = _WORKING.__dict__.setdefault("pools", set())
        working.add(id(self))
        try:
            return self.work(item)
        finally:
            working.discard(id(self))

    def take(self) -> tuple[int, Callable[[], Any]]:
        """The next step and a thunk that returns its batch or raises its
        error. Raises StopIteration once closed.

        The position (`next_step`) moves in one step with the hand-over, so
        an exception that a signal handler raises at any point leaves it
        naming the batch the consumer gets next (a batch can be lost to a
        Ctrl-C that lands in the instant after it was handed over, but the
        position is never wrong and nothing waits for it)."""
        if os.getpid() != self.pid:
            next(self.native)  # raises the native "created in another process" error
            raise RuntimeError("this loader was created in another process")
        if id(self) in getattr(_WORKING, "pools", ()):
            raise RuntimeError(
                "a DataLoader's transform called next() on that same DataLoader; it "
                "would wait for the batch it is producing itself"
            )
        if not self.threads:
            if self.next_take >= self.end:
                raise ended(self.end)
            step, item, error = self._native_next()
            self.next_deliver = step + 1
            if error is not None:
                return step, raiser(error)
            return step, lambda: self._do_work(item)
        cond = self.cond
        with cond:
            while True:
                step = self.next_deliver
                result = self.results.get(step)
                if result is not None:
                    # No call between these two statements: the interpreter
                    # runs signal handlers only at calls and jumps.
                    self.next_deliver = step + 1
                    del self.results[step]
                    cond.notify_all()
                    ok, value = result
                    return step, (lambda: value) if ok else raiser(value)
                if self.stopped:
                    raise StopIteration
                if step >= self.end:
                    raise ended(self.end)
                cond.wait(_WAIT_SLICE)

    def _run(self) -> None:
        cond = self.cond
        while True:
            with cond:
                while not self.stopped and (
                    self.taking
                    or self.next_take - self.next_deliver >= self.ahead
                    or self.next_take >= self.end
                ):
                    cond.wait(_WAIT_SLICE)
                if self.stopped:
                    return
                self.taking = True
            try:
                step, item, error = self._native_next()
            except BaseException:  # StopIteration: closed
                with cond:
                    self.taking = False
                    self.stopped = True
                    cond.notify_all()
                return
            with cond:
                self.taking = False
                cond.notify_all()
            if error is None:
                try:
                    result = (True, self._do_work(item))
                except BaseException as e:
                    result = (False, e)
            else:
                result = (False, error)
            del item, error
            with cond:
                if self.stopped:
                    return
                self.results[step] = result
                cond.notify_all()
            del result

    def stop(self) -> None:
        """Delivers nothing more: a result that comes in later (an error of
        work cut short by the closing) is dropped, and a waiting consumer
        gets StopIteration."""
        if self.threads and os.getpid() == self.pid:
            with self.cond:
                self.stopped = True
                self.results.clear()
                self.cond.notify_all()

    def close(self) -> None:
        if os.getpid() != self.pid:
            return  # the threads do not exist here; the locks may be copied mid-use
        _LIVE.discard(self)
        self.stop()
        self.native.close()
        deadline = time.monotonic() + _JOIN_TIMEOUT
        current = threading.current_thread()
        for t in self.threads:
            if t is not current:
                t.join(max(0.0, deadline - time.monotonic()))



def ended(end: int) -> BaseException:
    """What taking past the end raises: StopIteration after a finite pass
    of `end` steps, OverflowError after the last step there is."""
    if end <= MAX_STEP:
        return StopIteration()
    return OverflowError(
        f"this DataLoader has delivered its last step, {MAX_STEP}: steps are unsigned "
        "64-bit integers, and no step comes after it"
    )


def raiser(error: BaseException) -> Callable[[], Any]:
    def throw() -> Any:
        raise error

    return throw


def with_note(error: BaseException, note: str) -> None:
    """Adds `note` to `error` once (Python 3.11+; a no-op before)."""
    if hasattr(error, "add_note") and note not in getattr(error, "__notes__", ()):
        error.add_note(note)
