"""The batch format of ragged samples: packed, or padded to a dense array.

A packed batch is ``{'values', 'offsets', 'shapes'}``: the samples'
elements back to back, ``n + 1`` element offsets and an int64 ``(n, ndim)``
array of shapes. :func:`pad_batch` turns it into ``{'values', 'lengths',
'shapes'}``. Both ``RaggedDataset.batch`` (``ragged.py``, which re-exports
these functions) and the loader's ragged streams build their batches here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: One sample's shape: ``ndim`` little-endian int64 values, a row of a
#: batch's ``shapes`` and, byte for byte, a record of the shapes store.
SHAPE_DTYPE = np.dtype("<i8")


def pack(
    values: np.ndarray, byte_lengths: np.ndarray, shapes: np.ndarray, dtype: np.dtype
) -> dict[str, np.ndarray]:
    """The unpadded batch of gathered ragged records: ``values`` (the
    records' elements back to back, 1-D), ``offsets`` (int64, ``n + 1``
    element offsets: record k is ``values[offsets[k]:offsets[k + 1]]``) and
    ``shapes`` (int64, ``(n, ndim)``)."""
    counts = np.prod(shapes, axis=1, dtype=np.int64)
    if not np.array_equal(counts * dtype.itemsize, byte_lengths.astype(np.int64)):
        bad = int(np.argmax(counts * dtype.itemsize != byte_lengths))
        raise ValueError(
            f"ragged record {bad} of the batch holds {int(byte_lengths[bad])} bytes, but its "
            f"shape {tuple(shapes[bad])} needs {int(counts[bad]) * dtype.itemsize}: the "
            "values and shapes stores disagree"
        )
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return {"values": values.view(dtype), "offsets": offsets, "shapes": shapes}


def pad_batch(batch: dict[str, np.ndarray], pad_value: Any = 0) -> dict[str, np.ndarray]:
    """A packed batch (see :func:`pack`) as one dense array padded with
    `pad_value` to the largest shape of the batch: ``values`` of shape
    ``(n, *max_shape)``, ``lengths`` (int64 ``(n,)``, each record's size
    along its first axis) and ``shapes``."""
    values, offsets, shapes = batch["values"], batch["offsets"], batch["shapes"]
    n, ndim = shapes.shape
    max_shape = tuple(int(d) for d in shapes.max(axis=0)) if n else (0,) * ndim
    dense = np.full((n, *max_shape), pad_value, dtype=values.dtype)
    if ndim == 1:
        # One vectorised scatter: row k's first lengths[k] slots, in C order,
        # are exactly the packed values.
        mask = np.arange(max_shape[0]) < shapes[:, :1]
        dense[mask] = values
    else:
        for k in range(n):
            shape = tuple(int(d) for d in shapes[k])
            region = (k, *(slice(0, d) for d in shape))
            dense[region] = values[offsets[k] : offsets[k + 1]].reshape(shape)
    return {"values": dense, "lengths": shapes[:, 0].copy(), "shapes": shapes}
