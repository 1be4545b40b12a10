"""Ragged datasets: samples of one dtype whose shapes differ.

A :class:`RaggedDataset` is a directory holding two Zrecord stores:

* the directory itself: one record per sample, the sample's C-order bytes;
* ``shapes.zr/`` inside it: one record per sample, its shape as ``ndim``
  little-endian int64 values.

and a ``schema.json`` whose ``"format"`` is ``"loaderx-ragged"``, so that a
loaderx 0.5.0 (or a fixed-shape :class:`~loaderx.Dataset`) refuses the
directory cleanly instead of misreading it.

A batch of ragged samples comes back packed, with no padding: the samples'
values concatenated into one flat array, ``offsets`` (``len + 1`` element
offsets into it) and ``shapes``; or, with ``pad=True``, as one dense array
padded to the batch's largest shape, with each sample's ``lengths`` and
``shapes``.
"""

from __future__ import annotations

import itertools
import json
import operator
import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ._native import MAX_RECORD_LEN, Zrecord
from .dataset import CODECS, SCHEMA, WRITE_CHUNK_BYTES, _write_atomically

FORMAT = "loaderx-ragged"
FORMAT_VERSION = 1
#: The store of per-sample shapes, inside the dataset's directory.
SHAPES = "shapes.zr"
_SHAPE_DTYPE = np.dtype("<i8")


def _schema_text(dtype: np.dtype, ndim: int, codec: str) -> str:
    schema = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "dtype": dtype.str,
        "ndim": ndim,
        "codec": codec,
    }
    return json.dumps(schema, indent=2) + "\n"


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


class RaggedDataset:
    """A dataset of NumPy samples of one dtype and one number of dimensions,
    each with its own shape.

    ``ds[i]`` is sample ``i`` (negative counts from the end) as an array of
    its own shape; ``ds[slice]``, ``ds[list_of_ints]`` and
    ``ds.__getitems__(idxs)`` give a list of arrays; ``ds.batch(idxs)`` a
    packed batch dict. It is a stream of a :class:`~loaderx.DataLoader` in
    the dict form: ``DataLoader({'tokens': ragged, ...})``.

    Attributes:
        path (Path): The dataset's directory.
        dtype (np.dtype): The samples' dtype.
        ndim (int): The samples' number of dimensions.
        codec (str): The codec new samples are written with.
    """

    def __init__(self, path: str | os.PathLike[str], *, checksums: bool = False) -> None:
        """Opens the ragged dataset in the directory `path`.

        Raises:
            FileNotFoundError: `path` holds no schema.json.
            ValueError: schema.json is not a ragged dataset schema, or the
                shapes store holds more samples than the values store.
            ZrecordError: a store cannot be opened.
        """
        self.path = Path(path)
        schema_path = self.path / SCHEMA
        if not schema_path.is_file():
            raise FileNotFoundError(
                f"{schema_path} not found; {self.path} is not a loaderx ragged dataset"
            )
        try:
            schema = json.loads(schema_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"{schema_path} cannot be read as JSON: {e}") from e
        if not isinstance(schema, dict) or schema.get("format") != FORMAT:
            fmt = schema.get("format") if isinstance(schema, dict) else None
            hint = " (open it with loaderx.Dataset)" if fmt == "loaderx-zrecord" else ""
            raise ValueError(f"{schema_path} is not a {FORMAT} schema{hint}")
        if schema.get("version", FORMAT_VERSION) != FORMAT_VERSION:
            raise ValueError(
                f"{schema_path} has schema version {schema.get('version')!r}; "
                f"this loaderx reads version {FORMAT_VERSION}"
            )
        try:
            self.dtype = np.dtype(schema["dtype"])
            self.ndim = int(schema["ndim"])
            self.codec = str(schema.get("codec", "flate"))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{schema_path} is malformed: {e!r}") from e
        if self.ndim < 1:
            raise ValueError(f"{schema_path} is malformed: ndim must be at least 1")
        self._checksums = checksums
        self._values: Zrecord | None = None
        self._shapes: Zrecord | None = None
        values = Zrecord(self.path, self.codec, create=False, checksums=checksums)
        try:
            shapes = Zrecord(self.path / SHAPES, "raw", create=False, checksums=checksums)
        except BaseException:
            values.close()
            raise
        self._values, self._shapes = values, shapes
        if len(shapes) > len(values):
            self.close()
            raise ValueError(
                f"{self.path}: the shapes store holds {len(shapes)} samples but the values "
                f"store only {len(values)}; the dataset is damaged"
            )

    # -- the stores -----------------------------------------------------------

    def _stores(self) -> tuple[Zrecord, Zrecord]:
        values, shapes = self._values, self._shapes
        if values is None or shapes is None:
            raise ValueError(f"{self.path}: operation on a closed RaggedDataset")
        return values, shapes

    def __len__(self) -> int:
        """The number of samples (those with a shape: a write interrupted
        between its two stores leaves values that are not samples yet)."""
        return len(self._stores()[1])

    # -- reading --------------------------------------------------------------

    def _positions(self, key: Any) -> np.ndarray:
        n = len(self)
        if isinstance(key, slice):
            return np.arange(*key.indices(n), dtype=np.int64)
        arr = np.asarray(key)
        if arr.dtype == np.bool_:
            if arr.shape != (n,):
                raise IndexError(
                    f"boolean index of shape {arr.shape} does not match a dataset of "
                    f"{n} samples"
                )
            return np.flatnonzero(arr)
        if arr.size == 0:
            return np.zeros(0, dtype=np.int64)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"ragged dataset indices must be integers, not {arr.dtype}")
        pos = arr.reshape(-1).astype(np.int64)
        pos = np.where(pos < 0, pos + n, pos)
        if int(pos.min()) < 0 or int(pos.max()) >= n:
            raise IndexError(f"index out of range for a dataset of {n} samples")
        return pos

    def shapes(self, idxs: Any) -> np.ndarray:
        """The shapes of samples `idxs`, as an int64 ``(len(idxs), ndim)``
        array."""
        pos = self._positions(idxs).astype(np.uint64)
        out = np.empty((len(pos), self.ndim), dtype=_SHAPE_DTYPE)
        self._stores()[1].gather(pos, out, self.ndim * _SHAPE_DTYPE.itemsize)
        return out

    def batch(self, idxs: Any, pad: bool = False, pad_value: Any = 0) -> dict[str, np.ndarray]:
        """Samples `idxs` as a packed batch: ``{'values', 'offsets',
        'shapes'}`` (see the module docstring), or with `pad` a dense
        ``{'values', 'lengths', 'shapes'}`` padded with `pad_value`."""
        values_store, _ = self._stores()
        pos = self._positions(idxs).astype(np.uint64)
        shapes = self.shapes(pos)
        lengths = values_store.lengths(pos)
        ends = np.cumsum(lengths, dtype=np.uint64)
        offsets = ends - lengths
        raw = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
        values_store.gather_var(pos, raw, offsets)
        packed = pack(raw, lengths, shapes, self.dtype)
        return pad_batch(packed, pad_value) if pad else packed

    def __getitem__(self, key: Any) -> Any:
        """One sample (an array of its own shape) for an integer index,
        otherwise a list of samples."""
        if isinstance(key, (bool, np.bool_)):
            raise TypeError("a boolean is not a dataset index; use a boolean mask array")
        if isinstance(key, (int, np.integer)):
            n = len(self)
            i = operator.index(key)
            j = i + n if i < 0 else i
            if not 0 <= j < n:
                raise IndexError(f"index {i} is out of range for a dataset of {n} samples")
            return self.__getitems__([j])[0]
        return self.__getitems__(key)

    def __getitems__(self, idxs: Any) -> list[np.ndarray]:
        """Samples `idxs` as a list of arrays, each of its own shape."""
        b = self.batch(idxs)
        values, offsets, shapes = b["values"], b["offsets"], b["shapes"]
        return [
            values[offsets[k] : offsets[k + 1]].reshape(tuple(shapes[k]))
            for k in range(len(shapes))
        ]

    # -- writing --------------------------------------------------------------

    @classmethod
    def write(
        cls,
        path: str | os.PathLike[str],
        arrays: Iterable[Any],
        codec: str = "flate",
        dtype: Any = None,
        *,
        durable: bool = True,
        checksums: bool = False,
        chunk_bytes: int = WRITE_CHUNK_BYTES,
    ) -> "RaggedDataset":
        """Persists `arrays` (an iterable of array-likes of one number of
        dimensions, at least 1) as a ragged dataset, one sample each.

        The dtype is `dtype`, else the existing dataset's, else the first
        array's; every array is cast to it under NumPy's ``same_kind`` rule
        (a narrower int is fine, float to int is a TypeError). When `path` already holds a
        ragged dataset of the same dtype and ndim, the samples are appended.
        Samples are written in groups of about `chunk_bytes`: values first,
        then their shapes, so a crash can leave values without a shape but
        never a shape without values (and the next write repairs it).

        Returns:
            RaggedDataset: the dataset, opened.

        Raises:
            ValueError: unknown codec, a 0-d array, mixed numbers of
                dimensions, a sample over MAX_RECORD_LEN bytes, or a dataset
                of another dtype/ndim already at `path`.
            TypeError: an object dtype, or an unsafe cast.
        """
        if codec not in CODECS:
            raise ValueError(f"unknown codec {codec!r}, expected one of {list(CODECS)}")
        path = Path(path)
        it = iter(arrays)
        first = next(it, None)
        want = np.dtype(dtype) if dtype is not None else None
        path.mkdir(parents=True, exist_ok=True)
        schema_path = path / SCHEMA
        existing = None
        if schema_path.is_file():
            existing = cls(path)
            try:
                if want is None:
                    want = existing.dtype
                ndim = existing.ndim
                if existing.dtype.str != want.str:
                    raise ValueError(
                        f"{path} holds {existing.dtype.str} samples, cannot append {want.str}"
                    )
                codec = existing.codec
            finally:
                existing.close()
        else:
            if first is None:
                raise ValueError("cannot create a ragged dataset from no arrays")
            if want is None:
                want = np.asarray(first).dtype
            ndim = np.asarray(first).ndim
        if want.hasobject:
            raise TypeError(f"cannot store an array of Python objects ({want})")
        if np.dtype(want.str) != want:
            raise TypeError(f"dtype {want} cannot be recorded in schema.json")
        if ndim < 1:
            raise ValueError("ragged samples must have at least one dimension")

        values = Zrecord(path, codec, checksums=checksums)
        try:
            shapes = Zrecord(path / SHAPES, "raw", checksums=checksums)
        except BaseException:
            values.close()
            raise
        try:
            if existing is None:
                if len(values) or len(shapes):
                    raise ValueError(
                        f"{path} holds Zrecord stores but no {SCHEMA}; refusing to turn them "
                        "into a ragged dataset"
                    )
                _write_atomically(schema_path, _schema_text(want, ndim, codec), durable)
            elif len(values) > len(shapes):
                # An interrupted write: values without shapes. They are the
                # tail of the store, so deleting them moves nothing.
                values.delete(np.arange(len(shapes), len(values), dtype=np.uint64))
            group: list[np.ndarray] = []
            group_bytes = 0

            def flush() -> None:
                nonlocal group, group_bytes
                if not group:
                    return
                lens = np.array([a.nbytes for a in group], dtype=np.uint64)
                offsets = np.cumsum(lens, dtype=np.uint64) - lens
                src = np.concatenate([a.reshape(-1).view(np.uint8) for a in group])
                dims = np.array([a.shape for a in group], dtype=_SHAPE_DTYPE)
                values.append_var(src, offsets, lens, durable=durable)
                shapes.append(dims, len(group), ndim * _SHAPE_DTYPE.itemsize, durable=durable)
                group, group_bytes = [], 0

            for item in itertools.chain([] if first is None else [first], it):
                a = np.asarray(item)
                if a.ndim != ndim:
                    raise ValueError(
                        f"every sample must have {ndim} dimensions, got shape {a.shape}"
                    )
                if a.dtype != want:
                    if not np.can_cast(a.dtype, want, casting="same_kind"):
                        raise TypeError(f"cannot cast a {a.dtype} sample to {want} safely")
                    a = a.astype(want)
                a = np.ascontiguousarray(a)
                if a.nbytes > MAX_RECORD_LEN:
                    raise ValueError(
                        f"a sample of {a.nbytes} bytes exceeds the {MAX_RECORD_LEN} byte "
                        "record limit"
                    )
                group.append(a)
                group_bytes += a.nbytes
                if group_bytes >= chunk_bytes:
                    flush()
            flush()
        finally:
            values.close()
            shapes.close()
        return cls(path, checksums=checksums)

    # -- lifetime -------------------------------------------------------------

    def close(self) -> None:
        """Closes the dataset. Idempotent."""
        for name in ("_values", "_shapes"):
            store = getattr(self, name, None)
            setattr(self, name, None)
            if store is not None:
                store.close()

    @property
    def closed(self) -> bool:
        """Whether `close()` has been called."""
        return self._values is None

    def __enter__(self) -> "RaggedDataset":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        return (_reopen, (type(self), str(self.path), self._checksums))

    def __repr__(self) -> str:
        if self.closed:
            return f"RaggedDataset({str(self.path)!r}, closed)"
        return (
            f"RaggedDataset({str(self.path)!r}, len={len(self)}, dtype={self.dtype}, "
            f"ndim={self.ndim}, codec={self.codec!r})"
        )


def _reopen(cls: type, path: str, checksums: bool) -> RaggedDataset:
    return cls(path, checksums=checksums)
