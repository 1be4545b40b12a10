"""NumPy-shaped view over a Zrecord store: :class:`Dataset`.

Zrecord stores raw bytes, so the tensor type lives here: ``schema.json``
records the per-sample dtype and shape, exactly as loaderx 0.5.0 writes it
(``schema_file.py``). Reads gather a batch in one native call with the GIL
released, into memory recycled from dropped batches. The base class
(``dataset_base.py``) and the index conversion (``indexing.py``) are
shared with ``ragged.py``.
"""

from __future__ import annotations

import operator
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ._native import MAX_RECORD_LEN, InvalidArgumentError, Zrecord
from .dataset_base import WRITE_CHUNK_BYTES, DatasetBase
from .sharding import RecordsWriter, Shards, open_records
from .indexing import int_key, leading_key, position, positions, slice_positions
from .schema_file import CODECS  # noqa: F401 - loaderx.dataset.CODECS
from .schema_file import (
    SCHEMA,
    codec_arg,
    create_schema,
    dtype_name,
    reading_schema,
    recordable_dtype,
    schema_codec,
    schema_dtype,
    schema_shape,
)

FORMAT = "loaderx-zrecord"
FORMAT_VERSION = 1


class Dataset(DatasetBase):
    """A dataset of fixed-shape NumPy samples stored one per Zrecord record.

    Indexing follows NumPy on the sample axis: ``ds[i]`` (negative counts
    from the end) is one sample; a slice, an integer array or list, or a
    boolean mask of length ``len(ds)`` gives a stacked batch. Out-of-range
    indices raise IndexError.

    Attributes:
        path (Path): The store's directory.
        dtype (np.dtype): Per-sample dtype.
        shape (tuple): Per-sample shape (``()`` for scalars).
        codec (str): The codec new records are written with.
    """

    _kind = "Dataset"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        checksums: bool | None = None,
        read_only: bool = False,
        shards: Sequence[str] | None = None,
    ) -> None:
        """Opens the dataset in the directory `path`.

        For a sharded dataset, `shards` names the shards to read (folder
        names, as `loaderx.Collection.published(path)` lists them): the part
        of it that one host holds, in the manifest's order; the others are
        not opened at all (docs/data.md, "Hosts that hold a part").

        With `read_only`, or when this process may not write the store's
        files (permissions, a read-only mount), it is opened for reading
        only: reads work, `delete` and `compact` raise StoreReadOnlyError.

        Reads are checked against the per-record CRC32C checksums that
        datasets written by this implementation keep: damage raises
        CorruptStoreError (a ZrecordError, code -7) instead of returning
        wrong values. Each sample is checked the first time this handle
        reads it. By default (``checksums=None``) a dataset without
        checksums (one written by loaderx 0.5.0) is read unchecked and left
        as it is; ``checksums=True`` creates them for the samples already
        there; ``checksums=False`` reads unchecked.

        Raises:
            FileNotFoundError: `path` holds no schema.json.
            ValueError: schema.json is not a loaderx dataset schema, a
                field of it is malformed (the message names the file and
                the field), or its samples are not the size of the records
                (checked against record 0; every read checks its own).
            ZrecordError: the store itself cannot be opened.
        """
        self.path = Path(path).resolve()
        with reading_schema(self.path, FORMAT, FORMAT_VERSION, "loaderx dataset") as schema:
            self.dtype = schema_dtype(schema["dtype"])
            self.shape = schema_shape(schema["shape"], self.dtype, MAX_RECORD_LEN)
            self.codec = schema_codec(schema.get("codec", "flate"))
            self.sharded = schema.get("sharded", False) is True
        self._itemsize = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self._checksums = checksums
        self._read_only = read_only
        self._shards = None if shards is None else [str(s) for s in shards]
        self._open = (
            open_records(self.path, self.codec, self.sharded, self._shards, checksums, read_only),
        )
        if len(self):
            try:
                self._check_sizes(np.zeros(1, dtype=np.uint64))
            except ValueError:
                self.close()
                raise

    # -- the store ----------------------------------------------------------

    def _zr(self) -> Zrecord:
        return self._stores()[0]

    def __len__(self) -> int:
        """The number of samples; they are exactly the indices 0..len."""
        return self._capped(len(self._zr()))

    def _layout_repr(self) -> str:
        return f"dtype={self.dtype}, shape={self.shape}"

    # -- reading ------------------------------------------------------------

    def _check_sizes(self, idxs: np.ndarray) -> None:
        """ValueError unless records `idxs` (uint64) all hold one sample of
        the schema's size, naming the first that does not. A schema.json
        that describes larger samples than the records would otherwise read
        as zero-padded values (the store's plain fixed-stride gather pads,
        0.5.0's contract); reads use the exact gather, which refuses such a
        record, and come here only to say which one. A table read per
        index, no record data."""
        lens = self._zr().lengths(idxs)
        bad = np.flatnonzero(lens != self._itemsize)
        if bad.size:
            k = int(bad[0])
            raise ValueError(
                f"{self.path}: sample {int(idxs[k])} is a record of {int(lens[k])} bytes, but "
                f"schema.json describes samples of {self._itemsize} bytes "
                f"({self.dtype.str} of shape {self.shape})"
            )

    def _gather(self, pos: np.ndarray) -> np.ndarray:
        """The samples at int64 positions `pos` (non-negative), stacked in
        the shape of `pos`."""
        idxs = pos.reshape(-1).view(np.uint64)
        try:
            flat = self._zr().gather_array(idxs, self._itemsize, exact=True)
        except InvalidArgumentError:
            self._check_sizes(idxs)  # names the sample and both sizes
            raise
        return flat.view(self.dtype).reshape(*pos.shape, *self.shape)

    def __getitem__(self, key: Any) -> Any:
        """One sample for an integer index, otherwise a stacked batch. A
        tuple indexes as NumPy would index the array of all samples:
        ``ds[i, j]`` is ``ds[i][j]``, ``ds[:, 0]`` the first element of every
        sample (only the samples selected are read)."""
        n = len(self)
        if isinstance(key, tuple):
            if not key:
                return self._gather(slice_positions(slice(None), n))
            pos, local = leading_key(key[0], n)
            return self._gather(pos)[(local, *key[1:])]
        i = int_key(key)
        if i is not None:
            return self._gather(np.array([position(i, n)], dtype=np.int64))[0]
        if isinstance(key, slice):
            return self._gather(slice_positions(key, n))
        return self._gather(positions(key, n))

    def __getitems__(self, idxs: Any) -> np.ndarray:
        """The samples `idxs` (array-like of int, or a boolean mask), shaped
        ``(len(idxs), *self.shape)``. The batched fast path."""
        return self._gather(positions(idxs, len(self)).reshape(-1))

    # -- writing ------------------------------------------------------------

    @classmethod
    def write(
        cls,
        path: str | os.PathLike[str],
        array: Any,
        codec: str = "flate",
        chunk_bytes: int = WRITE_CHUNK_BYTES,
        *,
        level: int | None = None,
        durable: bool = True,
        checksums: bool | None = None,
        timeout: float = 60.0,
        shard_records: int | None = None,
        shard_bytes: int | None = None,
    ) -> "Dataset":
        """Persists `array` as a dataset, one record per slice along axis 0.

        A 1-D array becomes a dataset of scalars. The array is streamed in
        chunks of at most `chunk_bytes` (at least one sample each), so an
        mmapped ``np.load(..., mmap_mode='r')`` array is never read into
        memory whole; non-contiguous arrays are copied chunk by chunk.

        `level` is the codec's level (flate 1-12, default 6; zstd up to 22,
        default 3; see docs/loader.md); readers need not know it. When
        `path` already holds a dataset of the same dtype and shape, the
        samples are appended to it, with the codec it records. Otherwise the
        store is created first and its schema.json written (atomically) right
        after. `durable` flushes every chunk to stable storage before the
        next, so a power loss never leaves wrong samples behind. A new
        dataset keeps a CRC32C per sample unless `checksums` is False
        (see `Dataset(path, checksums=...)`).
        While another handle or process appends to the store, each append
        waits for it, up to `timeout` seconds (then StoreBusyError).

        With `shard_records` or `shard_bytes`, or when `path` holds a sharded
        dataset already, the samples go to a sharded collection instead of
        one store (docs/FORMAT.md, "Collections"): new shards of this call's
        own, a new one each `shard_records` samples or `shard_bytes` bytes,
        published all at once at the end, so that readers see none of them
        or all, and many writers (processes, hosts sharing the folder) may
        add to one dataset at once. Its samples are read as one dataset.

        A write that fails partway (a full disk, a killed process) leaves a
        store with the chunks it committed, a prefix of `array`, and a
        sharded dataset without any of this call's samples (and, unless
        the process was killed, without the shard folders it made).

        Returns:
            Dataset: the dataset, opened.

        Raises:
            ValueError: unknown codec, a 0-d array, a sample over
                MAX_RECORD_LEN bytes, or a dtype/shape that differs from the
                dataset already at `path`.
            TypeError: an object (or otherwise unstorable) dtype.
            StoreIOError: an OSError, the system refused a write (`errno`
                is errno.ENOSPC when the disk is full).
        """
        codec = codec_arg(codec)
        chunk_bytes = operator.index(chunk_bytes)
        if chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be at least 1, not {chunk_bytes}")
        array = np.asanyarray(array)
        if array.ndim < 1:
            raise ValueError("array must have a sample axis (at least one dimension)")
        dtype = recordable_dtype(np.dtype(array.dtype))
        shape = tuple(int(d) for d in array.shape[1:])
        itemsize = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if itemsize > MAX_RECORD_LEN:
            raise ValueError(
                f"a sample of {itemsize} bytes exceeds the {MAX_RECORD_LEN} byte record limit"
            )

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        schema_path = path / SCHEMA
        new = not schema_path.is_file()
        sharded = shard_records is not None or shard_bytes is not None
        if not new:
            codec, sharded = cls._codec_to_append(path, dtype, shape)
        writer = RecordsWriter(path, codec, sharded, checksums, shard_records, shard_bytes)
        written = False
        try:
            if new:
                layout = {"shape": list(shape), **({"sharded": True} if sharded else {})}
                created = writer.records() == 0 and create_schema(
                    path, FORMAT, FORMAT_VERSION, dtype, layout, codec, durable
                )
                if not created:
                    if not schema_path.is_file():
                        raise ValueError(
                            f"{path} holds a Zrecord store of {writer.records()} records but "
                            f"no {SCHEMA}; refusing to turn it into a dataset"
                        )
                    # Another writer created the dataset meanwhile: append
                    # to it, if its samples are of this kind.
                    codec, _ = cls._codec_to_append(path, dtype, shape)
            append_samples(writer.target, array, dtype, chunk_bytes, codec=codec, level=level,
                           durable=durable, timeout=timeout)
            written = True
        finally:
            writer.finish(published=written)
        return cls(path, checksums=checksums)

    @classmethod
    def _codec_to_append(cls, path: Path, dtype: np.dtype, shape: tuple) -> tuple[str, bool]:
        """The codec of the dataset at `path` and whether it is sharded, once
        its samples are known to be of `dtype` and `shape` (else ValueError)."""
        existing = cls(path)
        try:
            if (existing.dtype, existing.shape) != (dtype, shape):
                raise ValueError(
                    f"{path} holds {dtype_name(existing.dtype)}{existing.shape} samples, "
                    f"cannot append {dtype_name(dtype)}{shape}"
                )
            return existing.codec, existing.sharded
        finally:
            existing.close()

    # -- maintenance --------------------------------------------------------

    def delete(self, idxs: Any, *, timeout: float = 0.0) -> None:
        """Removes samples `idxs` (ints, negative from the end, or a mask).

        ``len`` shrinks and the survivors stay addressable as 0..len: the
        tail is moved into each hole, so surviving samples may change index.
        Needs exclusive access (no DataLoader running on the dataset, no
        other handle open): waits for it up to `timeout` seconds, by default
        not at all, then raises StoreBusyError.
        """
        pos = positions(idxs, len(self)).reshape(-1).astype(np.uint64)
        if self.sharded:
            Shards(self).delete(pos, timeout)
        else:
            self._zr().delete(pos, timeout=timeout)

    def compact(self, *, timeout: float = 0.0) -> None:
        """Reclaims on disk the space that `delete` left behind; waits for
        exclusive access as `delete` does."""
        if self.sharded:
            Shards(self).compact(timeout)
        else:
            self._zr().compact(timeout=timeout)

    def stats(self) -> dict[str, int]:
        """Storage usage: records, live_bytes, chunk_bytes and reclaimable
        (of all shards, for a sharded dataset)."""
        return Shards(self).stats() if self.sharded else self._zr().stats()

    def verify(self) -> dict[str, Any]:
        """Checks every sample; see `loaderx.Zrecord.verify`. A sharded
        dataset's bad samples are named by their index in it."""
        return Shards(self).verify() if self.sharded else self._zr().verify()


def append_samples(target: Any, array: np.ndarray, dtype: np.dtype, chunk_bytes: int,
                   **options: Any) -> None:
    """Appends the samples of `array`, as `dtype`, to `target` (a store or a
    collection writer) in chunks of at most `chunk_bytes` (at least one
    sample each); `options` go to each append."""
    itemsize = int(np.prod(array.shape[1:], dtype=np.int64)) * dtype.itemsize
    step = max(1, chunk_bytes // max(itemsize, 1))
    for start in range(0, len(array), step):
        block = np.ascontiguousarray(array[start : start + step], dtype=dtype)
        target.append(block, len(block), itemsize, **options)
