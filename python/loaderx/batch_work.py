"""Internal: the Python work on an assembled batch, the same on a transform
thread and in a transform process: the per-sample `map`, then the
whole-batch `transform`, each with the samples' random generators when
``sample_rngs=True``. A top-level class, so that it pickles (for processes
started by spawn or forkserver) whenever the user's functions do.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .sample_rngs import SampleRngs


class BatchWork:
    """``work(batch, seeds)``: `map` on every sample, the results stacked,
    then `transform` on the batch. `seeds` are the samples' seeds (uint64,
    one per sample) when the functions take generators, else None."""

    def __init__(
        self,
        transform: Callable[..., Any] | None,
        map: Callable[..., Any] | None,
        legacy_pair: bool,
        sample_rngs: bool,
    ) -> None:
        self.transform = transform
        self.map = map
        self.legacy_pair = legacy_pair
        self.sample_rngs = sample_rngs

    @property
    def active(self) -> bool:
        """Whether there is work: a map or a transform."""
        return self.transform is not None or self.map is not None

    def __call__(self, batch: Any, seeds: np.ndarray | None) -> Any:
        rngs = SampleRngs(seeds) if self.sample_rngs else None
        if self.map is not None:
            batch = self._map(batch, rngs)
        if self.transform is None:
            return batch
        # loaderx 0.5.0's transform takes and returns the pair (data, label).
        args: list[Any] = [(batch["data"], batch["label"]) if self.legacy_pair else batch]
        if rngs is not None:
            args.append(rngs)
        if self.legacy_pair:
            data, label = self.transform(*args)
            return {"data": data, "label": label}
        return self.transform(*args)

    def _map(self, batch: dict[str, Any], rngs: SampleRngs | None) -> dict[str, Any]:
        n = _samples(batch)
        results = []
        for k in range(n):
            sample = {name: value[k] for name, value in batch.items()}
            results.append(self.map(sample, rngs[k]) if rngs is not None else self.map(sample))
        return stack(results)


def _samples(batch: dict[str, Any]) -> int:
    """The batch's sample count, from its streams; a stream whose batch
    value is not per sample (a packed ragged stream) is refused."""
    counts = set()
    for name, value in batch.items():
        if not isinstance(value, (np.ndarray, list)):
            raise TypeError(
                f"map= takes one sample at a time, and stream {name!r} is a "
                f"{type(value).__name__} per batch (a ragged stream: give it pad= to have it "
                "an array per sample)"
            )
        counts.add(len(value))
    if len(counts) > 1:
        raise ValueError(f"the streams hold different numbers of samples: {sorted(counts)}")
    return counts.pop() if counts else 0


def stack(results: list[Any]) -> Any:
    """The results of `map` as a batch: a dict of stacked values for dict
    results (a key's values as one array when they are arrays or numbers of
    one shape and dtype kind, else as a list), one array, or a list."""
    if results and all(type(r) is dict for r in results):
        keys = list(results[0])
        if all(list(r) == keys for r in results):
            return {key: _stacked([r[key] for r in results]) for key in keys}
        raise ValueError("map= returned dicts with different keys for the samples of a batch")
    return _stacked(results)


def _stacked(values: list[Any]) -> Any:
    fast = _stacked_alike(values)
    if fast is not None:
        return fast
    if values and all(isinstance(v, (np.ndarray, np.generic, int, float, bool)) for v in values):
        arrays = [np.asarray(v) for v in values]
        first = arrays[0]
        if all(a.shape == first.shape and a.dtype == first.dtype for a in arrays):
            return np.stack(arrays)
    return values


def _stacked_alike(values: list[Any]) -> np.ndarray | None:
    """The common cases of `_stacked` without an array made per value (a
    third of a cheap map's cost a sample): values all of one scalar type,
    or all arrays of one shape and dtype. None for anything else."""
    if not values:
        return None
    kind = type(values[0])
    if kind is np.ndarray:
        first = values[0]
        shape, dtype = first.shape, first.dtype
        if all(type(v) is np.ndarray and v.shape == shape and v.dtype == dtype for v in values):
            return np.stack(values)
        return None
    if kind is int:
        if all(type(v) is int for v in values):
            stacked = np.array(values)
            # Past int64, np.asarray makes each value another dtype.
            return stacked if stacked.dtype == np.int64 else None
        return None
    # A number type has one dtype (a string or date type has many).
    numeric = kind in (float, bool) or issubclass(kind, (np.number, np.bool_))
    if numeric and all(type(v) is kind for v in values):
        return np.array(values)
    return None
