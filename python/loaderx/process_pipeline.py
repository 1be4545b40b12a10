"""Internal: the consumer's side of transform processes.

With ``transform_mode='process'`` the DataLoader's batches go from the
native loader to the transform processes (``transform_processes.py``) and
back without a thread in between: the consumer's own call to ``next()``
hands each idle process the next finished batch, then waits for the
process that holds the step it delivers, and before it returns hands the
freed process a batch again, so the processes work while the consumer
does. While it waits, a process that finished a later step has its result
taken and gets the next batch, so that it does not wait for the slower
one (on a per-sample map, processes used to wait 3-5 % of the time). A
thread per process, as with transform threads, would cost a wake-up and a
GIL hand-over a batch on each side, which the measured pass-through of big
batches could not afford (bench/README.md).

Batches are delivered in step order, whichever process finishes first.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Any, Callable

from ._native import Loader
from .transform_pool import MAX_STEP, ended, raiser
from .transform_processes import _WAIT_SLICE, TransformProcesses, _Process

#: How many steps a process may have in flight (held, or done and not
#: delivered yet) while the consumer waits for an earlier one.
_AHEAD = 2

#: What a step in flight holds while no process has its batch yet: the
#: native loader's batch.
_STAGED = object()


def _handle_signals() -> None:
    """Nothing: calling a Python function is where the interpreter runs the
    handlers of signals that came during native calls."""


class ProcessPipeline:
    """The native loader and the transform processes, driven by the
    consumer: `take` as `TransformPool.take`. `prepare(item)` turns a
    native batch into `(batch, seeds, context)` for a process, `finish(result,
    context)` the process's result into the delivered batch."""

    def __init__(
        self,
        native: Loader,
        prepare: Callable[[Any], tuple[Any, Any, Any]],
        finish: Callable[[Any, Any], Any],
        processes: TransformProcesses,
        end: int | None = None,
    ) -> None:
        self.native = native
        self.prepare = prepare
        self.finish = finish
        self.processes = processes
        self.end = MAX_STEP + 1 if end is None else end
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.stopped = False
        #: The steps taken from the native loader and not delivered yet,
        #: `next_deliver` up to `next_take`: each with `_STAGED` and the
        #: native batch, with the process holding it and the batch's context
        #: for `finish`, or, once done, with None and `(True, batch)` or
        #: `(False, error)`.
        self.in_flight: dict[int, tuple[Any, Any]] = {}
        self.next_deliver = native.next_step
        # Counted here as a Python int, as TransformPool does.
        self.next_take = native.next_step

    @staticmethod
    def holds(processes: int) -> int:
        """The most native batches a pipeline of `processes` holds at once
        besides the one delivered: up to `_AHEAD` steps in flight a process,
        and one more each for the process a collected reply frees."""
        return (_AHEAD + 1) * processes

    @property
    def next_step(self) -> int:
        """The step of the next delivery."""
        return self.next_deliver

    def take(self) -> tuple[int, Callable[[], Any]]:
        """The next step and a thunk that returns its batch or raises its
        error. Raises StopIteration once closed.

        A signal handler's exception (Ctrl-C's KeyboardInterrupt) can come
        at any point of the work here; each step of it is recorded so that
        the next call takes up where it stopped, without losing a batch or
        giving a process the same batch twice."""
        if os.getpid() != self.pid:
            next(self.native)  # raises the native "created in another process" error
            raise RuntimeError("this loader was created in another process")
        with self.lock:
            step = self.next_deliver
            if self.stopped:
                raise StopIteration
            if step not in self.in_flight:
                if step >= self.end:
                    raise ended(self.end)
                self._take_native(wait=True)
            if self.in_flight[step][0] is _STAGED:
                self._hand(step, wait=True)
            p, outcome = self.in_flight[step]
            if p is not None:
                ok, value = self._wait(step, p, outcome)
                # The step is done; the freed process gets the next batch
                # before this returns (a signal handler's exception while it
                # does leaves the done step to the next call).
                p.sent = 0
                self.in_flight[step] = (None, (ok, value))
                self._fill()
                _, outcome = self.in_flight[step]
            # A signal that came during a native call above is handled now,
            # while the batch can still be kept, not by the first Python
            # call after this returns, which would lose it.
            _handle_signals()
            # No call between these statements.
            del self.in_flight[step]
            self.next_deliver = step + 1
        ok, value = outcome
        return step, (lambda: value) if ok else raiser(value)

    def _wait(self, step: int, p: _Process, context: Any) -> tuple[bool, Any]:
        """Waits for `p`'s reply for `step`: `(True, batch)` or `(False,
        error)`. Raises StopIteration when the pipeline stops meanwhile."""
        while True:
            try:
                if p.posted != p.sent:
                    p.post()
                if p.reply(wait=False):
                    break
            except (EOFError, OSError):
                if self.stopped:
                    raise StopIteration from None
                return self._died(step, p)
            if self.stopped:
                raise StopIteration
            # Outside the `try`: what the other processes and the native
            # loader raise there is not `p`'s death.
            self._wait_any(p)
        # Whatever interrupts these leaves the reply to be read again.
        ok, value = p.result()
        return (True, self.finish(value, context)) if ok else (False, value)

    def _died(self, step: int, p: _Process) -> tuple[bool, Any]:
        """The outcome of `step`, whose process `p` died; a new process takes
        its place."""
        error = p.death(step)
        self.processes.replace(p)
        return False, error

    def _wait_any(self, p: _Process) -> None:
        """Waits up to a slice for `p`'s reply, taking meanwhile the replies of
        the other processes holding later steps, each of which then gets the
        next batch: a process that finished before `p` works on instead of
        waiting for the consumer. Up to `_AHEAD` steps a process are in
        flight, so one slow step cannot make the others run on without end."""
        self._fill()  # an idle process (the first steps) gets a batch first
        waiting = select.poll()
        waiting.register(p.sock, select.POLLIN)
        others: dict[int, tuple[int, _Process, Any]] = {}
        if len(self.in_flight) < _AHEAD * len(self.processes.all):
            for later, (q, context) in self.in_flight.items():
                if isinstance(q, _Process) and q is not p:
                    others[q.sock.fileno()] = (later, q, context)
                    waiting.register(q.sock, select.POLLIN)
        for fd, _ in waiting.poll(_WAIT_SLICE * 1000):
            if fd in others:
                self._collect(*others[fd])

    def _collect(self, step: int, q: _Process, context: Any) -> None:
        """Takes `q`'s reply for `step` ahead of its delivery (when the whole
        reply is in) and hands `q` the next batch."""
        try:
            if not q.reply(wait=False):
                return
            ok, value = q.result()
            outcome = (True, self.finish(value, context)) if ok else (False, value)
        except (EOFError, OSError):
            outcome = self._died(step, q)
        # No call between these statements (as in take()).
        q.sent = 0
        self.in_flight[step] = (None, outcome)
        self._fill()

    def _fill(self) -> None:
        """Hands every idle process a finished batch, as far as there are."""
        for step, (p, _) in list(self.in_flight.items()):
            if p is _STAGED and not self._hand(step, wait=False):
                return
        while self.next_take < self.end and not self.stopped:
            if self._idle() is None or not self._take_native(wait=False):
                return

    def _idle(self) -> _Process | None:
        """A process holding no batch. One holding a batch that no step in
        flight here holds (a batch of a closed pipeline, an earlier run of
        the loader, or one whose hand-over was cut short) is idle once its
        reply is in, which is read and dropped; one that died is replaced."""
        for p in self.processes.all:
            if not p.sent:
                return p
        holding = {id(p) for p, _ in self.in_flight.values()}
        for p in list(self.processes.all):
            if id(p) in holding:
                continue
            try:
                if p.posted != p.sent:
                    p.post()
                if not p.reply(wait=False):
                    continue
                p.result()  # for the buffers it no longer maps
            except (EOFError, OSError):
                self.processes.replace(p)
                return self._idle()
            p.sent = 0
            return p
        return None

    def _take_native(self, wait: bool) -> bool:
        """Takes the native loader's next batch (waiting for it with
        `wait`, else only when it is finished) and hands it to an idle
        process if there is one; False when there was no batch to take.
        Raises StopIteration once closed."""
        try:
            item = next(self.native) if wait else self.native.next_ready()
        except StopIteration:
            raise
        except BaseException as e:
            if self.native.next_step == self.next_take:
                # Interrupted (a signal handler's exception): the native
                # loader keeps the batch for its next call.
                raise
            item, error = None, e  # the step's gather failed
        else:
            if item is None:
                return False
            error = None
        step = self.next_take
        # No call between these statements.
        self.next_take = step + 1
        self.in_flight[step] = (_STAGED, item) if error is None else (None, (False, error))
        if error is None:
            self._hand(step, wait=False)
        return True

    def _hand(self, step: int, wait: bool) -> bool:
        """Hands the staged `step` to an idle process (waiting for one with
        `wait`); False when none was idle."""
        _, item = self.in_flight[step]
        p = self._idle()
        while p is None:
            if not wait:
                return False
            # Every process still holds a batch that no step here holds:
            # wait a slice for one of them.
            try:
                self.processes.all[0].reply(wait=True)
            except (EOFError, OSError):
                pass  # _idle replaces it
            if self.stopped:
                raise StopIteration
            p = self._idle()
        try:
            batch, seeds, context = self.prepare(item)
        except Exception as e:  # noqa: BLE001: raised at its step
            self.in_flight[step] = (None, (False, e))
            return True
        p.load(batch, seeds, self)
        self.in_flight[step] = (p, context)
        try:
            p.post()
        except OSError:
            pass  # the process is gone: waiting for its reply says so
        return True

    def stop(self) -> None:
        """Delivers nothing more: a waiting consumer gets StopIteration."""
        self.stopped = True

    def close(self) -> None:
        if os.getpid() != self.pid:
            return
        self.stop()
        self.native.close()
        # The batches in flight go now, unless a consumer is inside take()
        # (it leaves at once, and they go with this object); a signal
        # handler that closes the loader inside take() must not wait here.
        if self.lock.acquire(blocking=False):
            try:
                self.in_flight.clear()
            finally:
                self.lock.release()
