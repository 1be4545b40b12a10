"""The step-based DataLoader (endless, or a finite pass): the class and its
public surface.

Rust threads (the native ``Loader``) gather each step's indices from every
stream outside the GIL, into batch memory recycled from dropped batches,
and the arrays come out in sampler order, so a run is reproducible from its
seed and resumable from its step. The class delegates to ``loader_args.py``
(argument checks), ``loader_streams.py`` (stream adapters),
``loader_state.py`` (state dicts) and ``transform_pool.py`` (the threads
that run `transform` ahead of the consumer, delivering in step order).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Iterable

import numpy as np

from ._native import Loader, Sampler
from .dataset import Dataset
from .loader_args import (
    MAX_PREFETCH,
    MAX_SEED,
    MAX_WORKERS,
    VALID,
    images_arg,
    non_negative,
    pad_arg,
    pass_args,
    positive,
    shard_arg,
    stream_lengths,
    streams_arg,
    transform_mode_arg,
)
from .loader_state import STATE_VERSION  # noqa: F401 - loaderx.dataloader.STATE_VERSION
from .loader_state import check_state, identity, state_at
from .loader_streams import assembler, native_streams, stream_adapters
from .bytes_dataset import BytesDataset
from .images import Images
from .mixture import SOURCE, Mixture
from .ragged import RaggedDataset
from .batch_work import BatchWork
from .transform_pool import TransformPool, with_note
from .process_pipeline import ProcessPipeline
from .transform_processes import TransformProcesses


class DataLoader:
    """An iterator of batches, endless or a finite pass: dicts of arrays, one
    per stream.

    The streams are given as

    * ``DataLoader(dataset, labelset)`` (loaderx 0.5.0): batches
      ``{'data': ..., 'label': ...}``, and `transform` takes and returns the
      pair ``(data, label)``;
    * ``DataLoader(dataset)``: batches ``{'data': ...}``;
    * ``DataLoader({'image': ds1, 'label': ds2, 'tokens': ragged, ...})``:
      batches with those keys. A :class:`Dataset` stream gives an array of
      ``(batch, *shape)``; a :class:`~loaderx.ragged.RaggedDataset` stream a
      dict ``{'values', 'offsets', 'shapes'}`` (or, padded, ``{'values',
      'lengths', 'shapes'}``); a :class:`BytesDataset` stream a list of its
      items. A :class:`Table` is such a dict. `transform` takes the batch
      dict and returns what the iteration yields;
    * ``DataLoader(Mixture([source, ...], weights))``: a weighted mixture of
      datasets or tables with the same streams; batches also hold
      ``source``, each sample's int32 source number (see
      :class:`~loaderx.Mixture`).

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
    global step exactly once between them. A state saved with one shard
    count resumes with another (elastic resume): the global batches do not
    depend on it.

    By default the loader never ends (``len()`` raises TypeError). With
    ``epochs=n`` (SEQUENTIAL or SHUFFLE) it makes a finite pass: every
    sample n times, in ``len(loader)`` steps, the same on every shard, then
    StopIteration. The last step's samples are shared out evenly between
    the shards; with ``last_batch='partial'`` its batches are shorter, with
    ``'pad'`` they are full size, padded with the pass's last sample, and
    every batch of the pass has a bool ``valid`` stream marking its real
    samples (what multi-host JAX needs: the same shapes everywhere).

    Close it (or use it as a context manager) to stop its threads; after
    ``close()`` iteration stops. While it runs, the datasets cannot be
    deleted from or compacted. :meth:`state_dict` / `state=` resume it
    exactly.
    """

    def __init__(
        self,
        dataset: Dataset | Mapping[str, Dataset | RaggedDataset | BytesDataset] | Mixture,
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
        epochs: int | None = None,
        last_batch: str = "partial",
        sample_rngs: bool = False,
        images: Mapping[str, Images] | None = None,
        map: Callable[..., Any] | None = None,
        transform_mode: str = "thread",
        start_method: str | None = None,
    ) -> None:
        """Starts the loader.

        Args:
            num_workers: native gather threads, 1 to 1024 (at most one per
                core runs).
            batch_size: the global batch size, at least 1 (and at most the
                most records a store can hold).
            prefetch_size: finished steps the workers may hold ahead of the
                consumer, 1 to 1024; each holds a whole batch in memory.
            seed: the sampler's seed, 0 to 2**64 - 1.
            transform: applied to every batch (see the class docstring), on
                `transform_workers` Python threads (or processes); its
                exceptions are raised by ``next()`` at that batch's step,
                with their traceback.
            shard: ``(index, count)``: this process's part of each global
                batch.
            state: a :meth:`state_dict` to resume from.
            transform_workers: threads (or processes) running `map` and
                `transform` ahead of the consumer (default 1 with either, 0
                without), 0 to 1024; 0 runs them in the consuming thread.
            pad: pad ragged streams to the batch's largest shape: True for
                all of them, or the names of those to pad.
            epochs: make a finite pass of that many epochs (None: endless).
            last_batch: a finite pass's last batch: ``'partial'`` (shorter)
                or ``'pad'`` (full, with a ``valid`` mask stream).
            sample_rngs: call ``transform(batch, rngs)``, `rngs` a
                :class:`~loaderx.sample_rngs.SampleRngs` of one random
                generator per sample, seeded from (seed, step, position in
                the global batch): the same draws after a resume, on any
                number of workers or shards.
            images: byte streams of encoded images (JPEG, PNG, WebP) to decode
                natively, by name: each is delivered as a fixed-shape array,
                decoded, cropped, resized, flipped and normalised on the
                native workers as its :class:`~loaderx.Images` says.
            map: applied to each sample before `transform`: ``map(sample)``
                (``map(sample, rng)`` with `sample_rngs`), `sample` a dict
                of the sample's value in every stream; the results make the
                batch: dicts with the same keys become a dict whose values
                are stacked into arrays where they are arrays or numbers of
                one shape and dtype (lists otherwise), other results an
                array or a list.
            transform_mode: ``'thread'`` (the default) runs `map` and
                `transform` on Python threads; ``'process'`` in
                `transform_workers` processes (at least 1), so that Python
                code holding the GIL runs on as many cores. Batches reach
                them and come back through shared memory; their exceptions
                are raised by ``next()`` at their step, with the process's
                traceback as a note, and a process that dies fails its step
                with an error naming the signal (a new one takes its place).
            start_method: the multiprocessing start method of the
                processes (``'fork'``, ``'spawn'``, ``'forkserver'``; None:
                multiprocessing's default). With spawn and forkserver the
                functions are pickled: one that cannot be is a TypeError
                here.

        Raises:
            ValueError: the streams' lengths differ, a dataset is empty or
                closed, a size is out of range, the mode is unknown, the
                batch size is not divisible by the shard count, a finite
                pass is asked of the IID mode, or `state` belongs to another
                configuration.
            TypeError: a stream is not a Dataset (or, in the dict form, a
                RaggedDataset or BytesDataset), or a count or the seed is not an int (a bool
                is not a count).
        """
        self._pool: TransformPool | ProcessPipeline | None = None
        self._processes: TransformProcesses | None = None
        mixture = dataset if isinstance(dataset, Mixture) else None
        if mixture is not None:
            if labelset is not None:
                raise TypeError("a Mixture holds its streams; give no labelset")
            sources = mixture.streams
        else:
            sources = [streams_arg(dataset, labelset)]
        streams = sources[0]
        lengths = stream_lengths(streams, pair=labelset is not None)
        num_workers = positive("num_workers", num_workers, MAX_WORKERS)
        batch_size = positive("batch_size", batch_size)
        prefetch_size = positive("prefetch_size", prefetch_size, MAX_PREFETCH)
        seed = non_negative("seed", seed, MAX_SEED)
        for name, fn in (("transform", transform), ("map", map)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable")
        batch_work = BatchWork(transform, map, labelset is not None, bool(sample_rngs))
        if transform_workers is None:
            transform_workers = 1 if batch_work.active else 0
        transform_workers = non_negative("transform_workers", transform_workers, MAX_WORKERS)
        transform_mode_arg(transform_mode, batch_work.active, transform_workers)
        shard = shard_arg(shard)
        padded = pad_arg(pad, streams)
        decoded = images_arg(images, streams)
        epochs, last_batch = pass_args(epochs, last_batch, streams)
        if mixture is not None and epochs is not None:
            raise ValueError("a Mixture is endless: epochs= is for a dataset or a table")
        if sample_rngs and not batch_work.active:
            raise ValueError("sample_rngs=True needs a transform or map to hand the generators to")

        self.dataset = dataset
        self.labelset = labelset
        #: The streams by name, in batch order.
        self.streams: dict[str, Dataset | RaggedDataset | BytesDataset] = streams
        #: The sampler's configuration (its shard of each global batch): a
        #: Sampler, or a MixtureSampler for a Mixture; the loader runs on a
        #: copy of it.
        self.sampler: Any
        if mixture is not None:
            self.sampler = mixture.sampler(mode, batch_size, seed, shard)
        else:
            self.sampler = Sampler(
                next(iter(lengths.values())), batch_size, mode, seed, shard=shard,
                epochs=epochs, last_batch=last_batch,
            )
        self._batch_work = batch_work
        self._num_workers = num_workers
        self._prefetch_size = prefetch_size
        self._transform_workers = transform_workers
        # One set of adapters per source (one without a mixture); the first
        # assembles the batches, all give their stores.
        self._sources = [stream_adapters(source, padded, decoded) for source in sources]
        self._adapters = self._sources[0]
        self._identity = identity(self.sampler, self._adapters, lengths)
        step = 0 if state is None else check_state(state, self._identity)
        self._closed_step = step
        # The processes start before this loader's native threads: a fork
        # then copies no thread of its own in the middle of its work.
        if transform_mode == "process":
            self._processes = TransformProcesses(self._batch_work, transform_workers, start_method)
        self._start(step)

    # -- construction -----------------------------------------------------------

    def _work(self) -> tuple[Callable[[Any], tuple[Any, Any, Any]], Callable[[Any, Any], Any]]:
        """What turns a native batch into the delivered one, in two parts
        around the map and transform: `prepare(item)` gives the streams'
        arrays, the samples' seeds and the context `finish(batch, context)`
        needs after the work. References no DataLoader."""
        assemble = assembler(self._adapters)
        sampler = self.sampler
        padded = getattr(sampler, "last_batch", None) == "pad"
        seeded = self._batch_work.sample_rngs

        def prepare(item: Any) -> tuple[Any, Any, Any]:
            batch = assemble(item)
            step, indices, _, sources = item
            if sources is not None:
                batch[SOURCE] = sources
            seeds = sampler.sample_seeds(step) if seeded else None
            return batch, seeds, (step, len(indices))

        def finish(batch: Any, context: tuple[int, int]) -> Any:
            if padded and isinstance(batch, dict):
                step, n = context
                batch[VALID] = np.arange(n) < sampler.valid_len(step)
            return batch

        return prepare, finish

    def _start(self, step: int) -> None:
        per_source = [native_streams(adapters) for adapters in self._sources]
        stores: list[Any] = per_source[0][0]
        if len(per_source) > 1:
            # A mixture: each stream reads from one store per source.
            stores = [list(column) for column in zip(*(s for s, _ in per_source))]
        record_lens = per_source[0][1]
        workers = self._transform_workers
        # The transform threads' steps taken from the native loader and not
        # delivered yet.
        ahead = workers + 1
        processes = self._processes is not None
        # Batches for processes are gathered into memory they can map; the
        # native loader keeps recycled memory for those the transform stage
        # holds too.
        native = Loader(stores, record_lens, self.sampler, self._num_workers,
                        self._prefetch_size, step=step, shared_memory=processes,
                        held=ProcessPipeline.holds(workers) if processes else ahead)
        prepare, finish = self._work()
        end = getattr(self.sampler, "steps", None)
        if processes:
            self._pool = ProcessPipeline(native, prepare, finish, self._processes, end=end)
            return
        batch_work = self._batch_work

        def work(item: Any) -> Any:
            batch, seeds, context = prepare(item)
            if batch_work.active:
                batch = batch_work(batch, seeds)
            return finish(batch, context)

        self._pool = TransformPool(native, work, workers, ahead=ahead, end=end)

    # -- iteration --------------------------------------------------------------

    def __len__(self) -> int:
        """The steps of a finite pass (``epochs=``), counted from step 0.

        Raises:
            TypeError: the loader is endless.
        """
        steps = getattr(self.sampler, "steps", None)
        if steps is None:
            raise TypeError("an endless (step-based) DataLoader has no length")
        return steps

    def __iter__(self) -> "DataLoader":
        return self

    def __next__(self) -> Any:
        """The next batch, in step order; waits for it with the GIL released,
        waking regularly to let signal handlers (Ctrl-C) run.

        Raises:
            StopIteration: a finite pass is over, or the loader is closed.
            RuntimeError: called from this loader's own `transform` (it
                would wait for the batch it is producing).
            OverflowError: the loader has delivered step 2**64 - 1, the
                last one (steps are unsigned 64-bit integers).
        """
        pool = self._pool
        if pool is None:
            raise StopIteration
        step, thunk = pool.take()
        try:
            return thunk()
        except Exception as e:
            # The exception itself, with its own traceback (the transform's
            # frames, on whichever thread ran it) continued by this call's.
            with_note(e, f"(raised while loading step {step} of a loaderx.DataLoader)")
            raise

    @property
    def step(self) -> int:
        """The step of the next batch that iteration yields (a step whose
        transform or gather raised counts as yielded)."""
        pool = self._pool
        return self._closed_step if pool is None else pool.next_step

    # -- state ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """A small JSON-serialisable dict from which ``DataLoader(...,
        state=...)`` or :meth:`load_state_dict` continues exactly where this
        loader is: with the next batch the *consumer* gets (the workers'
        prefetching does not count).

        Keys: ``version``, ``step`` (the next step to deliver), ``sampler``
        (mode, seed, batch_size, length, shard, and a finite pass's epochs
        and last_batch), ``streams`` (each stream's
        kind, length, dtype and shape or ndim) and ``fingerprint`` (a hash
        of ``streams``).
        """
        return self._state_at(self.step)

    def _state_at(self, step: int) -> dict[str, Any]:
        # The state of this loader at another step: loaderx.jax reports the
        # step of the batch it will yield next, behind the loader's own.
        return state_at(self._identity, step)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continues from `state` (a :meth:`state_dict`, possibly of another
        process): the next batch is the one the saved loader would have
        delivered next. Restarts the workers; on a closed loader only the
        position is set.

        The state may come from a loader with another shard count (elastic
        resume): the global batch of a step does not depend on it.

        Raises:
            ValueError: `state` belongs to another sampler configuration or
                other streams (lengths, dtypes, shapes).
        """
        step = check_state(state, self._identity)
        pool = self._pool
        self._closed_step = step
        if pool is not None:
            self._pool = None
            pool.close()
            self._start(step)

    # -- lifetime ---------------------------------------------------------------

    def close(self) -> None:
        """Stops and joins the worker threads (and transform processes) and
        releases the datasets. Prompt in every state; idempotent."""
        pool = getattr(self, "_pool", None)
        processes = getattr(self, "_processes", None)
        if processes is not None:
            # The processes go before the threads are joined, so that a
            # thread waiting on one wakes at once; its error, after the
            # pool has stopped, is dropped.
            if pool is not None:
                pool.stop()
            self._processes = None
            processes.close()
        if pool is not None:
            self._closed_step = pool.next_step
            self._pool = None
            pool.close()

    @property
    def closed(self) -> bool:
        """Whether `close()` has been called."""
        return self._pool is None

    def __enter__(self) -> "DataLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._pool is None else "running"
        if isinstance(self.dataset, (Mapping, Mixture)):
            return f"DataLoader({self.streams!r}, {self.sampler!r}, {state})"
        if self.labelset is None:
            return f"DataLoader({self.dataset!r}, {self.sampler!r}, {state})"
        return f"DataLoader({self.dataset!r}, {self.labelset!r}, {self.sampler!r}, {state})"
