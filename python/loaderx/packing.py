"""Sequence packing: ragged token streams packed into ``[batch, length]``
rows, with the segment ids and positions that MaxText and Flax models take.

:class:`PackedLoader` runs a :class:`~loaderx.DataLoader` whose steps are
*windows* of samples (``window`` per host). A window is packed on the
loader's transform thread: the native ``pack`` (zsampler's ``packing.rs``)
places its samples into rows first-fit or best-fit, and NumPy scatters the
tokens. The rows of consecutive windows are then cut into batches in order,
so a run is deterministic, and its state is the window being cut and the
row reached in it: a small JSON dict that resumes it exactly.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any, Callable, Iterable

import numpy as np

from ._native import pack
from .dataloader import DataLoader
from .loader_args import positive, shard_arg
from .ragged import RaggedDataset

#: Version of the dict that `PackedLoader.state_dict` returns.
PACKED_STATE_VERSION = 1

#: The two streams a packed batch adds.
SEGMENT_IDS, POSITIONS = "segment_ids", "positions"

#: How many recent batches' states a PackedLoader can still give.
_STATES_KEPT = 64

METHODS = ("first-fit", "best-fit")
LONG = ("split", "drop")


class PackedLoader:
    """An endless iterator of packed batches.

    Each batch is ``{name: [rows, length] array for every packed stream,
    'segment_ids': int32 [rows, length], 'positions': int32 [rows, length]}``:
    a row holds samples one after the other, ``segment_ids`` numbers them
    1, 2, ... within the row (0 is padding, whose tokens are `pad_value`),
    and ``positions`` counts each sample's tokens from 0.

    Args:
        dataset: a 1-D :class:`~loaderx.RaggedDataset` (its stream is called
            ``tokens``), or a table or dict of streams, of which `streams`
            are packed.
        length: tokens per row.
        batch_size: rows per global batch (divisible by the shard count).
        streams: the names of the streams to pack together (default: all of
            them); each must be a 1-D ragged stream whose samples have the
            lengths of the first's (tokens and their loss mask, say). A
            stream of another kind is refused: pick the streams to pack.
        method: ``'first-fit'`` or ``'best-fit'``.
        window: samples packed together per host; larger windows pad
            less (more samples to fill each row's end) and hold more in
            memory.
        long: a sample longer than a row is ``'split'`` into rows' worth
            (each piece its own segment) or ``'drop'``-ped.
        pad_value: the token of padding.
        mode, seed, shard, num_workers, prefetch_size: as for the
            DataLoader; `shard=(index, count)` packs this host's part of
            every window into ``batch_size // count`` rows per batch.
        state: a :meth:`state_dict` to resume from (same shard count).
        transform: applied to every packed batch, in the consumer's thread.
    """

    def __init__(
        self,
        dataset: RaggedDataset | Mapping[str, Any],
        length: int,
        batch_size: int = 64,
        *,
        streams: Iterable[str] | None = None,
        method: str = "first-fit",
        window: int = 1024,
        long: str = "split",
        pad_value: Any = 0,
        mode: int = 1,
        seed: int = 42,
        shard: tuple[int, int] | None = None,
        state: Mapping[str, Any] | None = None,
        num_workers: int = 4,
        prefetch_size: int = 4,
        transform: Callable[[Any], Any] | None = None,
    ) -> None:
        self._inner: DataLoader | None = None
        if isinstance(dataset, RaggedDataset):
            dataset = {"tokens": dataset}
        if not isinstance(dataset, Mapping):
            raise TypeError(
                f"dataset must be a RaggedDataset or a table of streams, not "
                f"{type(dataset).__name__}"
            )
        names = list(dataset) if streams is None else list(streams)
        if not names:
            raise ValueError("no stream to pack")
        for name in names:
            ds = dataset.get(name)
            if ds is None:
                raise ValueError(f"no stream {name!r} to pack; the streams: {sorted(dataset)}")
            if not isinstance(ds, RaggedDataset) or ds.ndim != 1:
                raise ValueError(
                    f"stream {name!r} is not a 1-D ragged stream and cannot be packed; "
                    "choose the streams to pack with streams="
                )
        for name in (SEGMENT_IDS, POSITIONS):
            if name in names:
                raise ValueError(f"a packed batch adds {name!r}, and a stream has that name")
        self.length = positive("length", length, 2**31 - 1)
        self.batch_size = positive("batch_size", batch_size)
        self.window = positive("window", window)
        index, count = shard_arg(shard)
        if self.batch_size % count:
            raise ValueError(
                f"the global batch size {self.batch_size} is not divisible by the shard "
                f"count {count}"
            )
        if method not in METHODS:
            raise ValueError(f"method must be 'first-fit' or 'best-fit', not {method!r}")
        if long not in LONG:
            raise ValueError(f"long must be 'split' or 'drop', not {long!r}")
        self.method, self.long, self.streams = method, long, names
        self.rows_per_batch = self.batch_size // count
        self._config = {"length": self.length, "batch_size": self.batch_size,
                        "method": method, "window": self.window, "long": long,
                        "streams": names}
        packer = _window_packer(names, self.length, method, long, pad_value)
        start_window, self._row, self._step = 0, 0, 0
        inner_state = None
        if state is not None:
            inner_state, self._row, self._step = self._check_state(state)
            start_window = inner_state["step"]
        self._inner = DataLoader(
            {name: dataset[name] for name in names}, batch_size=self.window * count,
            mode=mode, seed=seed, shard=(index, count), state=inner_state,
            num_workers=num_workers, prefetch_size=prefetch_size, transform=packer,
        )
        self._transform = transform
        self._window = start_window  # the window of the block being cut
        self._block: dict[str, np.ndarray] | None = None
        # Windows in a row without a token before the data counts as empty:
        # more than an epoch's worth (the dataset is empty, or every sample
        # is dropped).
        n = len(dataset[names[0]])
        self._empty_limit = -(-n // (self.window * count)) + 1
        self._empty = 0
        # Where each recent batch began, (window, row) by step: the state
        # at a batch a consumer holds but has not used yet (loaderx.jax
        # puts batches on device ahead of the training step).
        self._starts: collections.OrderedDict[int, tuple[int, int]] = collections.OrderedDict()

    # -- iteration --------------------------------------------------------------

    def __iter__(self) -> "PackedLoader":
        return self

    def __next__(self) -> Any:
        """The next batch of ``batch_size // shard count`` rows."""
        if self._inner is None:
            raise StopIteration
        self._starts[self._step] = (self._window, self._row)
        while len(self._starts) > _STATES_KEPT:
            self._starts.popitem(last=False)
        want = self.rows_per_batch
        parts: list[dict[str, np.ndarray]] = []
        while want:
            if self._block is None:
                self._block = next(self._inner)
            rows = len(self._block[SEGMENT_IDS])
            self._empty = self._empty + 1 if rows == 0 else 0
            if self._empty > self._empty_limit:
                raise ValueError(
                    f"{self._empty} windows in a row packed into no row: the streams hold "
                    "no tokens to pack (empty samples, or only samples that long='drop' drops)"
                )
            take = min(want, rows - self._row)
            parts.append({k: v[self._row : self._row + take] for k, v in self._block.items()})
            self._row += take
            want -= take
            if self._row == rows:
                self._block, self._row = None, 0
                self._window += 1
        batch = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        self._step += 1
        return batch if self._transform is None else self._transform(batch)

    @property
    def step(self) -> int:
        """Packed batches delivered so far."""
        return self._step

    # -- state ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """A small JSON-serialisable dict from which ``PackedLoader(...,
        state=...)`` continues with the next batch: the packing settings,
        the window being cut (the inner loader's state at it), the row
        reached in it and the batches delivered."""
        return self._state_at(self._step)

    def _state_at(self, step: int) -> dict[str, Any]:
        """The state at `step`: this loader's, or that of one of the last
        batches it delivered (ValueError for others)."""
        if self._inner is None:
            raise ValueError("the PackedLoader is closed")
        if step == self._step:
            window, row = self._window, self._row
        elif step in self._starts:
            window, row = self._starts[step]
        else:
            raise ValueError(
                f"a PackedLoader keeps the states of its last {_STATES_KEPT} batches, not of "
                f"step {step} (it is at step {self._step})"
            )
        return {
            "version": PACKED_STATE_VERSION,
            "step": step,
            "packing": dict(self._config),
            "windows": self._inner._state_at(window),
            "row": row,
        }

    def _check_state(self, state: Any) -> tuple[dict[str, Any], int, int]:
        if not isinstance(state, Mapping) or state.get("version") != PACKED_STATE_VERSION:
            raise ValueError(
                f"not a packed loader state of version {PACKED_STATE_VERSION}: {state!r:.80}"
            )
        if state.get("packing") != self._config:
            raise ValueError(
                f"the packed loader state was saved with {state.get('packing')}, this loader "
                f"packs with {self._config}"
            )
        row, step = state.get("row"), state.get("step")
        for name, value in (("row", row), ("step", step)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"packed loader state {name} must be an int >= 0, not {value!r}")
        return dict(state["windows"]), row, step

    # -- lifetime ---------------------------------------------------------------

    def close(self) -> None:
        """Stops the inner loader's threads; idempotent."""
        inner, self._inner = self._inner, None
        if inner is not None:
            inner.close()

    def __enter__(self) -> "PackedLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PackedLoader({self._config}, step={self._step})"


def _window_packer(
    names: list[str], length: int, method: str, long: str, pad_value: Any
) -> Callable[[dict[str, Any]], dict[str, np.ndarray]]:
    """The transform that packs one window (a ragged batch per stream) into
    its rows."""

    def pack_window(batch: dict[str, Any]) -> dict[str, np.ndarray]:
        first = batch[names[0]]["offsets"]
        sizes = np.diff(first)
        for name in names[1:]:
            other = np.diff(batch[name]["offsets"])
            if not np.array_equal(other, sizes):
                k = int(np.argmax(other != sizes))
                raise ValueError(
                    f"sample {k} of the window has {int(sizes[k])} {names[0]!r} tokens but "
                    f"{int(other[k])} {name!r} ones: packed streams need equal lengths"
                )
        placed = pack(sizes.astype(np.uint32), length, method, long)
        rows = int(placed["rows"])
        n = placed["length"].astype(np.int64)
        ends = np.cumsum(n)
        within = np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - n, n)
        dst = np.repeat(placed["row"].astype(np.int64) * length + placed["offset"], n) + within
        src = np.repeat(first[placed["sample"].astype(np.int64)] + placed["start"], n) + within
        out = {}
        for name in names:
            values = batch[name]["values"]
            rows_of = np.full(rows * length, pad_value, dtype=values.dtype)
            rows_of[dst] = values[src]
            out[name] = rows_of.reshape(rows, length)
        segments = np.zeros(rows * length, np.int32)
        segments[dst] = np.repeat(placed["segment"].astype(np.int32), n)
        positions = np.zeros(rows * length, np.int32)
        positions[dst] = within
        out[SEGMENT_IDS] = segments.reshape(rows, length)
        out[POSITIONS] = positions.reshape(rows, length)
        return out

    return pack_window
