"""The endless, step-based DataLoader.

Gathering happens on Rust threads (the native ``Loader``, over the zloader
crate) outside the GIL: for each step, in order, the sampler's indices are
gathered from every stream (the dataset, the labelset, or any number of
named datasets) into fresh buffers, which become NumPy arrays without a
copy. Batches come out in sampler order whatever `num_workers` is, so a run
is reproducible from its seed, and resumable from its step
(:meth:`DataLoader.state_dict`).

A `transform` runs on a small pool of Python threads (``transform_workers``)
ahead of the consumer, and its results are still delivered in step order.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import operator
import os
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any, Callable, Iterable

import numpy as np

from ._native import Loader, Sampler
from .dataset import Dataset
from .ragged import RaggedDataset, pack, pad_batch

#: Version of the dict that `DataLoader.state_dict` returns.
STATE_VERSION = 1

#: Seconds a waiting consumer or pool thread sleeps between checks for
#: close() and for signals (Ctrl-C).
_WAIT_SLICE = 0.05

#: How long close() waits for the transform threads, in seconds. A thread
#: still inside a slow transform is left to finish on its own (it is a daemon
#: and delivers nothing once the loader is closed).
_JOIN_TIMEOUT = 0.5


def _positive(name: str, value: Any) -> int:
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None
    if value < 1:
        raise ValueError(f"{name} must be at least 1, not {value}")
    return value


def _non_negative(name: str, value: Any) -> int:
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None
    if value < 0:
        raise ValueError(f"{name} must be at least 0, not {value}")
    return value


def _shard_arg(shard: Any) -> tuple[int, int]:
    if shard is None:
        return (0, 1)
    try:
        index, count = shard
        index, count = operator.index(index), operator.index(count)
    except (TypeError, ValueError):
        raise TypeError(
            f"shard must be a pair of ints (index, count), not {shard!r}"
        ) from None
    if count < 1:
        raise ValueError(f"shard count must be at least 1, not {count}")
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is out of range for {count} shards")
    return index, count


# -- streams --------------------------------------------------------------------


class _Fixed:
    """A Dataset stream: one native store of fixed-size records."""

    kind = "fixed"

    def __init__(self, ds: Dataset) -> None:
        self.dtype = ds.dtype
        self.shape = tuple(ds.shape)
        self.stores = [ds._zr()]
        self.record_lens: list[int | None] = [ds._itemsize]
        self.identity = {"kind": "fixed", "dtype": ds.dtype.str, "shape": list(ds.shape)}

    def assemble(self, buffers: Iterable[Any], n: int) -> np.ndarray:
        (buf,) = buffers
        return buf.view(self.dtype).reshape((n, *self.shape))


class _Ragged:
    """A RaggedDataset stream: its values store (ragged) and its shapes
    store (fixed, ndim int64 per record)."""

    kind = "ragged"

    def __init__(self, ds: RaggedDataset, pad: bool) -> None:
        values, shapes = ds._stores()
        self.dtype = ds.dtype
        self.ndim = ds.ndim
        self.pad = pad
        self.stores = [values, shapes]
        self.record_lens = [None, ds.ndim * 8]
        self.identity = {"kind": "ragged", "dtype": ds.dtype.str, "ndim": ds.ndim}

    def assemble(self, buffers: Iterable[Any], n: int) -> dict[str, np.ndarray]:
        (values, lengths), shapes = buffers
        shapes = shapes.view("<i8").reshape(n, self.ndim)
        batch = pack(values, lengths, shapes, self.dtype)
        return pad_batch(batch) if self.pad else batch


# -- the pipeline between the native loader and the consumer --------------------

_LIVE: "weakref.WeakSet[_Pipeline]" = weakref.WeakSet()


@atexit.register
def _close_live_pipelines() -> None:
    # A loader still alive at interpreter exit is closed before finalization
    # starts, so no thread is left waiting on it.
    for pipeline in list(_LIVE):
        pipeline.close()


class _Pipeline:
    """The native loader and, with `workers` > 0, a pool of Python threads
    that run `work` (assembly + transform) on its batches ahead of the
    consumer, at most `ahead` steps ahead of it. Holds no reference to the
    DataLoader, so an abandoned DataLoader is collected (and closes this)."""

    def __init__(
        self, native: Loader, work: Callable[[Any], Any], workers: int, ahead: int
    ) -> None:
        self.native = native
        self.work = work
        self.pid = os.getpid()
        self.threads: list[threading.Thread] = []
        self.cond = threading.Condition()
        self.stopped = False
        self.taking = False  # a pool thread is inside next(native)
        self.next_deliver = native.next_step  # step of the next delivery
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
        return self.native.next_step

    # The native call, and which step it consumed.
    def _native_next(self) -> tuple[int, Any, BaseException | None]:
        """(step, item, error): the native loader's next batch, or the error
        it raised for that step. Raises StopIteration once closed, and an
        interruption (a signal handler's exception) as is: no step is
        consumed then (the native loader keeps a batch that was ready)."""
        step = self.native.next_step
        try:
            item = next(self.native)
        except StopIteration:
            raise
        except BaseException as e:
            if self.native.next_step == step:
                raise  # interrupted: nothing consumed
            return step, None, e
        return step, item, None

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
        if not self.threads:
            step, item, error = self._native_next()
            self.next_deliver = step + 1
            if error is not None:
                return step, _raiser(error)
            work = self.work
            return step, lambda: work(item)
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
                    return step, (lambda: value) if ok else _raiser(value)
                if self.stopped:
                    raise StopIteration
                cond.wait(_WAIT_SLICE)

    def _run(self) -> None:
        cond = self.cond
        while True:
            with cond:
                while not self.stopped and (
                    self.taking or self.native.next_step - self.next_deliver >= self.ahead
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
                    result = (True, self.work(item))
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

    def close(self) -> None:
        if os.getpid() != self.pid:
            return  # the threads do not exist here; the locks may be copied mid-use
        _LIVE.discard(self)
        if self.threads:
            with self.cond:
                self.stopped = True
                self.results.clear()
                self.cond.notify_all()
        self.native.close()
        deadline = time.monotonic() + _JOIN_TIMEOUT
        current = threading.current_thread()
        for t in self.threads:
            if t is not current:
                t.join(max(0.0, deadline - time.monotonic()))


def _raiser(error: BaseException) -> Callable[[], Any]:
    def throw() -> Any:
        raise error

    return throw


def _with_note(error: BaseException, note: str) -> None:
    if hasattr(error, "add_note") and note not in getattr(error, "__notes__", ()):
        error.add_note(note)


# -- the loader -----------------------------------------------------------------


class DataLoader:
    """An endless iterator of batches: dicts of arrays, one per stream.

    The streams are given as

    * ``DataLoader(dataset, labelset)`` (loaderx 0.5.0): batches
      ``{'data': ..., 'label': ...}``, and `transform` takes and returns the
      pair ``(data, label)``;
    * ``DataLoader(dataset)``: batches ``{'data': ...}``;
    * ``DataLoader({'image': ds1, 'label': ds2, 'tokens': ragged, ...})``:
      batches with those keys. A :class:`Dataset` stream gives an array of
      ``(batch, *shape)``; a :class:`~loaderx.ragged.RaggedDataset` stream a
      dict ``{'values', 'offsets', 'shapes'}`` (or, padded, ``{'values',
      'lengths', 'shapes'}``). `transform` takes the batch dict and returns
      what the iteration yields.

    Every stream is gathered with the same indices, so their lengths must
    match. Each step draws indices from a :class:`Sampler` of
    ``(len, batch_size, mode, seed, shard)``; `num_workers` Rust threads
    (at most one per core: more would only take turns on the cores, which
    is slower) gather ahead of the consumer, up to `prefetch_size` finished
    steps beyond the one each of them is gathering.

    `batch_size` is the **global** batch size. With ``shard=(index,
    count)`` (e.g. ``(jax.process_index(), jax.process_count())``) this
    loader yields only the index-th of count equal, contiguous parts of each
    global batch: ``batch_size // count`` samples (batch_size must be
    divisible by count). The count loaders of a job see every sample of a
    global step exactly once between them.

    The loader never ends on its own; ``len()`` raises TypeError. Close it
    (or use it as a context manager) to stop its threads; after ``close()``
    iteration stops. While it runs, the datasets cannot be deleted from or
    compacted. :meth:`state_dict` / `state=` resume it exactly.
    """

    def __init__(
        self,
        dataset: Dataset | Mapping[str, Dataset | RaggedDataset],
        labelset: Dataset | None = None,
        num_workers: int = 4,
        batch_size: int = 256,
        prefetch_size: int = 4,
        mode: int | Sampler.Mode = 1,
        seed: int = 42,
        transform: Callable[[Any], Any] | None = None,
        *,
        shard: tuple[int, int] | None = None,
        state: Mapping[str, Any] | None = None,
        transform_workers: int | None = None,
        pad: bool | Iterable[str] = False,
    ) -> None:
        """Starts the loader.

        Args:
            transform: applied to every batch (see the class docstring), on
                `transform_workers` Python threads; its exceptions are raised
                by ``next()`` at that batch's step, with their traceback.
            shard: ``(index, count)``: this process's part of each global
                batch.
            state: a :meth:`state_dict` to resume from.
            transform_workers: threads running `transform` ahead of the
                consumer (default 1 with a transform, 0 without); 0 runs it
                in the consuming thread.
            pad: pad ragged streams to the batch's largest shape: True for
                all of them, or the names of those to pad.

        Raises:
            ValueError: the streams' lengths differ, a dataset is empty or
                closed, a size is out of range, the mode is unknown, the
                batch size is not divisible by the shard count, or `state`
                belongs to another configuration.
            TypeError: a stream is not a Dataset (or, in the dict form, a
                RaggedDataset).
        """
        self._pipe: _Pipeline | None = None
        streams = self._streams_of(dataset, labelset)
        lengths = {name: len(ds) for name, ds in streams.items()}
        if len(set(lengths.values())) > 1:
            if labelset is not None:
                raise ValueError(
                    f"dataset and labelset must have the same length "
                    f"({len(dataset)} != {len(labelset)})"  # type: ignore[arg-type]
                )
            raise ValueError(f"all streams must have the same length, got {lengths}")
        num_workers = _positive("num_workers", num_workers)
        batch_size = _positive("batch_size", batch_size)
        prefetch_size = _positive("prefetch_size", prefetch_size)
        if transform is not None and not callable(transform):
            raise TypeError("transform must be callable")
        if transform_workers is None:
            transform_workers = 0 if transform is None else 1
        transform_workers = _non_negative("transform_workers", transform_workers)
        shard = _shard_arg(shard)
        padded = self._padded(pad, streams)

        self.dataset = dataset
        self.labelset = labelset
        #: The streams by name, in batch order.
        self.streams: dict[str, Dataset | RaggedDataset] = streams
        #: The sampler's configuration (its shard of each global batch); the
        #: loader runs on a copy of it.
        self.sampler = Sampler(next(iter(lengths.values())), batch_size, mode, seed, shard=shard)
        self._legacy_pair = labelset is not None
        self._transform = transform
        self._num_workers = num_workers
        self._prefetch_size = prefetch_size
        self._transform_workers = transform_workers
        self._layouts = {
            name: _Ragged(ds, name in padded) if isinstance(ds, RaggedDataset) else _Fixed(ds)
            for name, ds in streams.items()
        }
        self._identity = self._make_identity(lengths)
        step = 0 if state is None else self._check_state(state)
        self._closed_step = step
        self._start(step)

    # -- construction -----------------------------------------------------------

    @staticmethod
    def _streams_of(dataset: Any, labelset: Any) -> dict[str, Any]:
        if isinstance(dataset, Mapping):
            if labelset is not None:
                raise TypeError("give the streams either as a dict or as dataset, labelset")
            if not dataset:
                raise ValueError("a DataLoader needs at least one stream")
            streams = {}
            for name, ds in dataset.items():
                if not isinstance(name, str):
                    raise TypeError(f"stream names must be str, not {type(name).__name__}")
                if not isinstance(ds, (Dataset, RaggedDataset)):
                    raise TypeError(
                        f"stream {name!r} must be a loaderx.Dataset or RaggedDataset, "
                        f"not {type(ds).__name__}"
                    )
                streams[name] = ds
            return streams
        for name, ds in (("dataset", dataset), ("labelset", labelset)):
            if ds is not None and not isinstance(ds, Dataset):
                raise TypeError(f"{name} must be a loaderx.Dataset, not {type(ds).__name__}")
        if dataset is None:
            raise TypeError("dataset must be a loaderx.Dataset, not None")
        if labelset is None:
            return {"data": dataset}
        return {"data": dataset, "label": labelset}

    @staticmethod
    def _padded(pad: Any, streams: dict[str, Any]) -> set[str]:
        ragged = {name for name, ds in streams.items() if isinstance(ds, RaggedDataset)}
        if isinstance(pad, (bool, np.bool_)):
            return ragged if pad else set()
        if isinstance(pad, str):
            pad = [pad]
        names = set(pad)
        unknown = names - ragged
        if unknown:
            raise ValueError(
                f"pad names {sorted(unknown)}, which are not ragged streams "
                f"(ragged streams: {sorted(ragged)})"
            )
        return names

    def _make_identity(self, lengths: dict[str, int]) -> dict[str, Any]:
        s = self.sampler
        streams = {
            name: {**layout.identity, "length": lengths[name]}
            for name, layout in self._layouts.items()
        }
        blob = json.dumps(streams, sort_keys=True, separators=(",", ":")).encode()
        return {
            "sampler": {
                "mode": int(s.mode),
                "seed": s.seed,
                "batch_size": s.batch_size,
                "length": s.length,
                "shard": list(s.shard),
            },
            "streams": streams,
            "fingerprint": hashlib.sha256(blob).hexdigest()[:16],
        }

    def _work(self) -> Callable[[Any], Any]:
        """What turns a native batch into the delivered one: the streams'
        arrays, then the transform. References no DataLoader."""
        layouts = list(self._layouts.items())
        widths = [len(layout.stores) for _, layout in layouts]
        transform = self._transform
        legacy_pair = self._legacy_pair

        def work(item: Any) -> Any:
            _step, indices, buffers = item
            n = len(indices)
            batch = {}
            at = 0
            for (name, layout), width in zip(layouts, widths):
                batch[name] = layout.assemble(buffers[at : at + width], n)
                at += width
            if transform is None:
                return batch
            if legacy_pair:
                data, label = transform((batch["data"], batch["label"]))
                return {"data": data, "label": label}
            return transform(batch)

        return work

    def _start(self, step: int) -> None:
        stores, record_lens = [], []
        for layout in self._layouts.values():
            stores += layout.stores
            record_lens += layout.record_lens
        index, count = self.sampler.shard
        sampler = Sampler(
            self.sampler.length,
            self.sampler.batch_size,
            self.sampler.mode,
            self.sampler.seed,
            shard=(index, count),
        )
        sampler.seek(step)
        native = Loader(stores, record_lens, sampler, self._num_workers, self._prefetch_size)
        workers = self._transform_workers
        self._pipe = _Pipeline(native, self._work(), workers, ahead=workers + 1)

    # -- iteration --------------------------------------------------------------

    def __len__(self) -> int:
        """Raises TypeError: an endless loader has no length."""
        raise TypeError("an endless (step-based) DataLoader has no length")

    def __iter__(self) -> "DataLoader":
        return self

    def __next__(self) -> Any:
        """The next batch, in step order; waits for it with the GIL released,
        waking regularly to let signal handlers (Ctrl-C) run."""
        pipe = self._pipe
        if pipe is None:
            raise StopIteration
        step, thunk = pipe.take()
        try:
            return thunk()
        except Exception as e:
            # The exception itself, with its own traceback (the transform's
            # frames, on whichever thread ran it) continued by this call's.
            _with_note(e, f"(raised while loading step {step} of a loaderx.DataLoader)")
            raise

    @property
    def step(self) -> int:
        """The step of the next batch that iteration yields (a step whose
        transform or gather raised counts as yielded)."""
        pipe = self._pipe
        return self._closed_step if pipe is None else pipe.next_step

    # -- state ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """A small JSON-serialisable dict from which ``DataLoader(...,
        state=...)`` or :meth:`load_state_dict` continues exactly where this
        loader is: with the next batch the *consumer* gets (the workers'
        prefetching does not count).

        Keys: ``version``, ``step`` (the next step to deliver), ``sampler``
        (mode, seed, batch_size, length, shard), ``streams`` (each stream's
        kind, length, dtype and shape or ndim) and ``fingerprint`` (a hash
        of ``streams``).
        """
        return self._state_at(self.step)

    def _state_at(self, step: int) -> dict[str, Any]:
        ident = json.loads(json.dumps(self._identity))  # a deep copy
        return {"version": STATE_VERSION, "step": step, **ident}

    def _check_state(self, state: Any) -> int:
        """The step of `state`, after checking that it belongs to this
        loader's configuration; ValueError otherwise."""
        if not isinstance(state, Mapping):
            raise ValueError(f"a loader state must be a dict, not {type(state).__name__}")
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"loader state version {state.get('version')!r} is not supported "
                f"(this loaderx reads version {STATE_VERSION})"
            )
        step = state.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 1 << 64:
            raise ValueError(f"loader state step must be an int in [0, 2**64), not {step!r}")
        mine = self._identity
        problems = []
        theirs = state.get("sampler")
        if not isinstance(theirs, Mapping):
            problems.append("it has no sampler")
        else:
            for key, value in mine["sampler"].items():
                got = theirs.get(key)
                if isinstance(got, tuple):
                    got = list(got)
                if got != value:
                    problems.append(f"sampler {key} is {got!r} in the state but {value!r} here")
        streams = state.get("streams")
        if not isinstance(streams, Mapping):
            problems.append("it has no streams")
        else:
            if set(streams) != set(mine["streams"]):
                problems.append(
                    f"the state has streams {sorted(streams)} but this loader "
                    f"{sorted(mine['streams'])}"
                )
            for name in set(streams) & set(mine["streams"]):
                if streams[name] != mine["streams"][name]:
                    problems.append(
                        f"stream {name!r} is {streams[name]} in the state but "
                        f"{mine['streams'][name]} here"
                    )
        if not problems and state.get("fingerprint") != mine["fingerprint"]:
            problems.append("the stream fingerprint differs")
        if problems:
            raise ValueError(
                "the loader state belongs to another loader configuration: " + "; ".join(problems)
            )
        return step

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continues from `state` (a :meth:`state_dict`, possibly of another
        process): the next batch is the one the saved loader would have
        delivered next. Restarts the workers; on a closed loader only the
        position is set.

        Raises:
            ValueError: `state` belongs to another sampler configuration or
                other streams (lengths, dtypes, shapes).
        """
        step = self._check_state(state)
        pipe = self._pipe
        self._closed_step = step
        if pipe is not None:
            self._pipe = None
            pipe.close()
            self._start(step)

    # -- lifetime ---------------------------------------------------------------

    def close(self) -> None:
        """Stops and joins the worker threads and releases the datasets.
        Prompt in every state; idempotent."""
        pipe = getattr(self, "_pipe", None)
        if pipe is not None:
            self._closed_step = pipe.next_step
            self._pipe = None
            pipe.close()

    @property
    def closed(self) -> bool:
        """Whether `close()` has been called."""
        return self._pipe is None

    def __enter__(self) -> "DataLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._pipe is None else "running"
        if isinstance(self.dataset, Mapping):
            return f"DataLoader({self.streams!r}, {self.sampler!r}, {state})"
        if self.labelset is None:
            return f"DataLoader({self.dataset!r}, {self.sampler!r}, {state})"
        return f"DataLoader({self.dataset!r}, {self.labelset!r}, {self.sampler!r}, {state})"
