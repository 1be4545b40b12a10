"""Ragged datasets: samples of one dtype whose shapes differ.

A :class:`RaggedDataset` is a directory holding two Zrecord stores:

* the directory itself: one record per sample, the sample's C-order bytes;
* ``shapes.zr/`` inside it: one record per sample, its shape as ``ndim``
  little-endian int64 values.

A sharded one (``"sharded": true`` in its schema) holds two collections
there instead, whose shards have the same names and lengths
(docs/FORMAT.md, "Collections"): the shapes collection lists no shard the
values collection does not.

and a ``schema.json`` whose ``"format"`` is ``"loaderx-ragged"``, so that a
loaderx 0.5.0 (or a fixed-shape :class:`~loaderx.Dataset`) refuses the
directory cleanly instead of misreading it. This module holds the dataset
and its writer; what it shares with ``Dataset`` is in ``dataset_base.py``,
``schema_file.py`` and ``indexing.py``.

A batch of ragged samples comes back packed, with no padding: the samples'
values concatenated into one flat array, ``offsets`` (``len + 1`` element
offsets into it) and ``shapes``; or, with ``pad=True``, as one dense array
padded to the batch's largest shape, with each sample's ``lengths`` and
``shapes``. That format is ``ragged_batch.py``'s; :func:`pack` and
:func:`pad_batch` are importable from here too.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ._native import MAX_RECORD_LEN, Collection, Zrecord
from .dataset_base import WRITE_CHUNK_BYTES, DatasetBase
from .indexing import int_key, position, positions, slice_positions
from .ragged_batch import SHAPE_DTYPE, pack, pad_batch
from .schema_file import (
    SCHEMA,
    codec_arg,
    create_schema,
    dtype_name,
    reading_schema,
    recordable_dtype,
    schema_codec,
    schema_count,
    schema_dtype,
)
from .sharding import align, aligned_writer, discard, new_prefix, publish_aligned
from .writer_lock import writer_lock

FORMAT = "loaderx-ragged"
FORMAT_VERSION = 1
#: The store of per-sample shapes, inside the dataset's directory.
SHAPES = "shapes.zr"
#: The lock file a writer holds (``writer_lock.py``).
LOCK = "ragged.lock"


def _open_collections(
    path: Path, shards: Sequence[str] | None, checksums: bool | None, read_only: bool
) -> tuple[Collection, Collection]:
    """The values and shapes collections of the sharded dataset at `path`
    (only `shards`, when given). The shapes are opened first: a writer
    publishes its shards in the values first, so the values list at least
    the shapes' shards, in the same order."""
    shapes = Collection(path / SHAPES, shards=shards, checksums=checksums, read_only=read_only)
    try:
        values = Collection(path, shards=shards, checksums=checksums, read_only=read_only)
    except BaseException:
        shapes.close()
        raise
    if values.shards[: len(shapes.shards)] != shapes.shards:
        values.close()
        shapes.close()
        raise ValueError(
            f"{path}: the shapes collection's shards {shapes.shards} are not the first of the "
            f"values collection's {values.shards}; the dataset is damaged"
        )
    return values, shapes


def _open_stores(
    path: Path, codec: str, checksums: bool | None, create: bool, read_only: bool = False
) -> tuple[Zrecord, Zrecord]:
    """The values store and the shapes store of the dataset at `path`."""
    values = Zrecord(path, codec, create=create, checksums=checksums, read_only=read_only)
    try:
        shapes = Zrecord(
            path / SHAPES, "raw", create=create, checksums=checksums, read_only=read_only
        )
    except BaseException:
        values.close()
        raise
    return values, shapes


class RaggedDataset(DatasetBase):
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

    _kind = "RaggedDataset"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        checksums: bool | None = None,
        read_only: bool = False,
        shards: Sequence[str] | None = None,
    ) -> None:
        """Opens the ragged dataset in the directory `path`; `checksums`,
        `read_only` and (for a sharded one) `shards` as for
        :class:`~loaderx.Dataset`.

        Raises:
            FileNotFoundError: `path` holds no schema.json.
            ValueError: schema.json is not a ragged dataset schema, or the
                shapes store holds more samples than the values store.
            ZrecordError: a store cannot be opened.
        """
        self.path = Path(path).resolve()
        with reading_schema(
            self.path,
            FORMAT,
            FORMAT_VERSION,
            "loaderx ragged dataset",
            hints={"loaderx-zrecord": " (open it with loaderx.Dataset)"},
        ) as schema:
            self.dtype = schema_dtype(schema["dtype"])
            self.ndim = schema_count("ndim", schema["ndim"], 1)
            self.codec = schema_codec(schema.get("codec", "flate"))
            self.sharded = schema.get("sharded", False) is True
        self._checksums = checksums
        self._read_only = read_only
        self._shards = None if shards is None else [str(s) for s in shards]
        if self._shards is not None and not self.sharded:
            raise ValueError(f"{self.path}: shards= reads part of a sharded dataset; this one "
                             "is not sharded")
        if self.sharded:
            values, shapes = _open_collections(self.path, self._shards, checksums, read_only)
        else:
            values, shapes = _open_stores(
                self.path, self.codec, checksums, create=False, read_only=read_only
            )
        self._open = (values, shapes)
        if len(shapes) > len(values):
            self.close()
            raise ValueError(
                f"{self.path}: the shapes store holds {len(shapes)} samples but the values "
                f"store only {len(values)}; the dataset is damaged"
            )

    # -- the stores -----------------------------------------------------------

    def __len__(self) -> int:
        """The number of samples (those with a shape: a write interrupted
        between its two stores leaves values that are not samples yet)."""
        return self._capped(len(self._stores()[1]))

    def _layout_repr(self) -> str:
        return f"dtype={self.dtype}, ndim={self.ndim}"

    # -- reading --------------------------------------------------------------

    def _positions(self, key: Any) -> np.ndarray:
        """The uint64 positions of `key` (a slice or an array-like index),
        flattened."""
        n = len(self)
        if isinstance(key, slice):
            pos = slice_positions(key, n)
        else:
            pos = positions(key, n).reshape(-1)
        return pos.view(np.uint64)

    def _gather_shapes(self, pos: np.ndarray) -> np.ndarray:
        out = np.empty((len(pos), self.ndim), dtype=SHAPE_DTYPE)
        self._stores()[1].gather(pos, out, self.ndim * SHAPE_DTYPE.itemsize)
        return out

    def shapes(self, idxs: Any) -> np.ndarray:
        """The shapes of samples `idxs`, as an int64 ``(len(idxs), ndim)``
        array."""
        return self._gather_shapes(self._positions(idxs))

    def batch(self, idxs: Any, pad: bool = False, pad_value: Any = 0) -> dict[str, np.ndarray]:
        """Samples `idxs` as a packed batch: ``{'values', 'offsets',
        'shapes'}`` (see the module docstring), or with `pad` a dense
        ``{'values', 'lengths', 'shapes'}`` padded with `pad_value`."""
        values_store, _ = self._stores()
        pos = self._positions(idxs)
        shapes = self._gather_shapes(pos)
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
        i = int_key(key)
        if i is not None:
            return self.__getitems__([position(i, len(self))])[0]
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
        ndim: int | None = None,
        level: int | None = None,
        durable: bool = True,
        checksums: bool | None = None,
        chunk_bytes: int = WRITE_CHUNK_BYTES,
        timeout: float = 60.0,
        shard_records: int | None = None,
    ) -> "RaggedDataset":
        """Persists `arrays` (an iterable of array-likes of one number of
        dimensions, at least 1) as a ragged dataset, one sample each.

        The dtype is `dtype`, else the existing dataset's, else the first
        array's; the number of dimensions `ndim`, else the first array's
        (with both `dtype` and `ndim`, `arrays` may be empty). Every array
        is cast to the dtype under NumPy's ``same_kind`` rule (a narrower
        int is fine, float to int is a TypeError). When `path` already holds a
        ragged dataset of the same dtype and ndim, the samples are appended.
        Samples are written in groups of about `chunk_bytes`: values first,
        then their shapes, so a crash can leave values without a shape but
        never a shape without values (and the next write repairs it).
        Writers wait for each other (a lock on ``ragged.lock`` in the
        directory), so two never interleave their stores' appends; each
        append waits up to `timeout` seconds for another handle's append.

        With `shard_records`, or when `path` holds a sharded ragged dataset
        already, the samples go to new shards of this call's own, a new one
        each `shard_records` samples, published at the end (as
        :meth:`loaderx.Dataset.write` does).

        Returns:
            RaggedDataset: the dataset, opened.

        Raises:
            ValueError: unknown codec, a 0-d array, mixed numbers of
                dimensions, a sample over MAX_RECORD_LEN bytes, or a dataset
                of another dtype/ndim already at `path`.
            TypeError: an object dtype, or an unsafe cast.
        """
        codec = codec_arg(codec)
        path = Path(path)
        sharded = shard_records is not None
        it = iter(arrays)
        first = next(it, None)
        want = np.dtype(dtype) if dtype is not None else None
        path.mkdir(parents=True, exist_ok=True)
        # One writer at a time: two would interleave the appends of the two
        # stores and misalign values and shapes.
        with writer_lock(path, LOCK):
            schema_path = path / SCHEMA
            existing = None
            if schema_path.is_file():
                existing = cls(path)
                try:
                    if want is None:
                        want = existing.dtype
                    ndim = existing.ndim
                    sharded = existing.sharded
                    if existing.dtype != want:
                        raise ValueError(
                            f"{path} holds {dtype_name(existing.dtype)} samples, cannot append "
                            f"{dtype_name(want)}"
                        )
                    codec = existing.codec
                finally:
                    existing.close()
            elif first is None and (want is None or ndim is None):
                raise ValueError(
                    "cannot create a ragged dataset from no arrays without dtype and ndim"
                )
            else:
                if want is None:
                    want = np.asarray(first).dtype
                if ndim is None:
                    ndim = np.asarray(first).ndim
            want = recordable_dtype(want)
            if ndim < 1:
                raise ValueError("ragged samples must have at least one dimension")

            items = itertools.chain([] if first is None else [first], it)
            options = {"level": level, "durable": durable, "timeout": timeout}
            if sharded:
                _write_shards(path, items, want, ndim, codec, checksums, shard_records,
                              chunk_bytes, existing is None, durable, options)
            else:
                _write_stores(path, items, want, ndim, codec, checksums, chunk_bytes,
                              existing is None, durable, options)
        return cls(path, checksums=checksums)


def _create_schema(path: Path, want: np.dtype, ndim: int, codec: str, sharded: bool,
                   durable: bool) -> None:
    layout = {"ndim": ndim, **({"sharded": True} if sharded else {})}
    if not create_schema(path, FORMAT, FORMAT_VERSION, want, layout, codec, durable):
        # A ragged write appends to two stores, which concurrent writers
        # would interleave: refuse rather than misalign.
        raise ValueError(
            f"another writer created a dataset at {path} at the same time; ragged datasets "
            "take one writer at a time"
        )


def _write_stores(path: Path, items: Iterable[Any], want: np.dtype, ndim: int, codec: str,
                  checksums: bool | None, chunk_bytes: int, new: bool, durable: bool,
                  options: dict[str, Any]) -> None:
    """Appends `items` to the dataset's two stores (created when `new`)."""
    values, shapes = _open_stores(path, codec, checksums, create=True)
    try:
        if new:
            if len(values) or len(shapes):
                raise ValueError(
                    f"{path} holds Zrecord stores but no {SCHEMA}; refusing to turn them into "
                    "a ragged dataset"
                )
            _create_schema(path, want, ndim, codec, False, durable)
        elif len(values) > len(shapes):
            # An interrupted write: values without shapes. They are the tail
            # of the store, so deleting them moves nothing.
            values.delete(np.arange(len(shapes), len(values), dtype=np.uint64))
        append_ragged(values, shapes, items, want, ndim, chunk_bytes, **options)
    finally:
        values.close()
        shapes.close()


def _write_shards(path: Path, items: Iterable[Any], want: np.dtype, ndim: int, codec: str,
                  checksums: bool | None, shard_records: int | None, chunk_bytes: int,
                  new: bool, durable: bool, options: dict[str, Any]) -> None:
    """Appends `items` to new shards of the sharded dataset (created when
    `new`), published in the values collection, then the shapes'."""
    if new:
        _create_schema(path, want, ndim, codec, True, durable)
    paths = [path, path / SHAPES]
    prefix = new_prefix()
    values = aligned_writer(path, codec, prefix, checksums, shard_records)
    shapes = aligned_writer(path / SHAPES, "raw", prefix, checksums, shard_records)
    # A write cut off between its two publishes is completed first.
    align(paths)
    try:
        append_ragged(values, shapes, items, want, ndim, chunk_bytes, **options)
        values.sync()
        shapes.sync()
    except BaseException:
        discard([values, shapes])
        raise
    publish_aligned(paths, values.shards)


def append_ragged(values: Any, shapes: Any, items: Iterable[Any], want: np.dtype, ndim: int,
                  chunk_bytes: int, **options: Any) -> int:
    """Appends the samples `items`, cast to `want`, to a ragged dataset's
    values and shapes (stores or collection writers): in groups of about
    `chunk_bytes`, values first. Returns how many it appended."""
    group: list[np.ndarray] = []
    group_bytes = 0
    count = 0

    def flush() -> None:
        nonlocal group, group_bytes
        if not group:
            return
        lens = np.array([a.nbytes for a in group], dtype=np.uint64)
        offsets = np.cumsum(lens, dtype=np.uint64) - lens
        src = np.concatenate([a.reshape(-1).view(np.uint8) for a in group])
        dims = np.array([a.shape for a in group], dtype=SHAPE_DTYPE)
        values.append_var(src, offsets, lens, **options)
        # The shapes store's codec is raw: it takes no level.
        shapes.append(dims, len(group), ndim * SHAPE_DTYPE.itemsize,
                      **{k: v for k, v in options.items() if k != "level"})
        group, group_bytes = [], 0

    for item in items:
        a = np.asarray(item)
        if a.ndim != ndim:
            raise ValueError(f"every sample must have {ndim} dimensions, got shape {a.shape}")
        if a.dtype != want:
            if not np.can_cast(a.dtype, want, casting="same_kind"):
                raise TypeError(f"cannot cast a {a.dtype} sample to {want} safely")
            a = a.astype(want)
        a = np.ascontiguousarray(a)
        if a.nbytes > MAX_RECORD_LEN:
            raise ValueError(
                f"a sample of {a.nbytes} bytes exceeds the {MAX_RECORD_LEN} byte record limit"
            )
        group.append(a)
        group_bytes += a.nbytes
        count += 1
        if group_bytes >= chunk_bytes:
            flush()
    flush()
    return count
