"""Internal: NumPy-style sample indices turned into store positions.

``Dataset`` and ``RaggedDataset`` index their samples the same way: an int
(negative counts from the end), a slice, an integer array or list, or a
boolean mask of ``len`` samples. A ``Dataset`` also takes a tuple, as NumPy
does (:func:`leading_key`): its first element selects samples, the rest
index within them. These functions check such a key against
the number of samples and give the non-negative positions that the native
store gathers, raising the IndexError or TypeError that NumPy would. An
index out of range is a ``ZrecordIndexError``: an ``IndexError`` and a
``ZrecordError`` with code -3, as loaderx 0.5.0 raised.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ._native import ZrecordIndexError


def int_key(key: Any) -> int | None:
    """`key` as an int when it is one (a Python or NumPy integer), None for
    any other key; TypeError for a bool, which NumPy would take as a mask."""
    if isinstance(key, (bool, np.bool_)):
        raise TypeError("a boolean is not a dataset index; use a boolean mask array")
    if isinstance(key, (int, np.integer)):
        return operator.index(key)
    return None


def position(i: int, n: int) -> int:
    """The position of index `i` (negative counts from the end) among `n`."""
    j = i + n if i < 0 else i
    if not 0 <= j < n:
        raise ZrecordIndexError(f"index {i} is out of range for a dataset of {n} samples")
    return j


def slice_positions(key: slice, n: int) -> np.ndarray:
    """The int64 positions a slice selects among `n`."""
    return np.arange(*key.indices(n), dtype=np.int64)


def positions(key: Any, n: int) -> np.ndarray:
    """Non-negative int64 positions of an array-like index `key`, checked
    against `n`; keeps the key's shape (a mask gives a 1-D result). Viewed
    as uint64 (the same bits, no copy) they are what the store takes."""
    arr = np.asarray(key)
    if arr.dtype == np.bool_:
        if arr.ndim != 1 or arr.shape[0] != n:
            raise IndexError(
                f"boolean index of shape {arr.shape} does not match a dataset of "
                f"{n} samples"
            )
        return np.flatnonzero(arr).astype(np.int64, copy=False)
    if arr.size == 0:
        return np.zeros(arr.shape, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(
            "dataset indices must be integers, slices, integer arrays or boolean "
            f"masks, not {type(key).__name__} of {arr.dtype}"
        )
    if arr.dtype.kind == "u" and int(arr.max()) >= n:
        raise ZrecordIndexError(
            f"index {int(arr.max())} is out of range for a dataset of {n} samples"
        )
    # No copy of an int64 key, and no pass for negative positions unless
    # there are some: this runs once per batch.
    pos = arr.astype(np.int64, copy=False)
    lo, hi = int(pos.min()), int(pos.max())
    if lo < 0:
        pos = np.where(pos < 0, pos + n, pos)
        lo, hi = int(pos.min()), int(pos.max())
    if lo < 0 or hi >= n:
        bad = arr.flat[int(np.argmax((pos < 0) | (pos >= n)))]
        raise ZrecordIndexError(f"index {int(bad)} is out of range for a dataset of {n} samples")
    return pos


def leading_key(first: Any, n: int) -> tuple[np.ndarray, Any]:
    """For a tuple key ``(first, *rest)`` over `n` samples: the 1-D positions
    of the samples `first` selects, and the key that selects the same
    samples, in the same shape, from an array of just those samples stacked
    in that order. Indexing that array with ``(local, *rest)`` is then
    exactly NumPy's ``array[first, *rest]`` (its rules for mixing integer,
    slice and array indices included), having read only those samples."""
    i = int_key(first)
    if i is not None:
        return np.array([position(i, n)], dtype=np.int64), 0
    if isinstance(first, slice):
        return slice_positions(first, n), slice(None)
    if first is Ellipsis:  # every sample; the rest indexes from the last axis
        return slice_positions(slice(None), n), Ellipsis
    if first is None:
        raise TypeError(
            "the first index of a tuple must select samples (an int, slice, "
            f"Ellipsis, integer array or boolean mask), not {first!r}"
        )
    pos = positions(first, n)
    return pos.reshape(-1), np.arange(pos.size).reshape(pos.shape)
