"""NumPy-shaped view over a Zrecord store.

Zrecord stores raw bytes, so the tensor type lives here: a small
``schema.json`` inside the store records the per-sample dtype and shape (the
only loaderx-level metadata, written exactly as loaderx 0.5.0 writes it).
Reads decode straight into a freshly allocated output array, one native call
per batch with the GIL released.
"""

from __future__ import annotations

import json
import operator
import os
from pathlib import Path
from typing import Any

import numpy as np

from ._native import MAX_RECORD_LEN, Zrecord

SCHEMA = "schema.json"
FORMAT = "loaderx-zrecord"
FORMAT_VERSION = 1
CODECS = ("raw", "flate", "lz4", "zstd")

#: Bytes of source data handed to one append call by `Dataset.write`.
WRITE_CHUNK_BYTES = 64 << 20


def _schema_text(dtype: np.dtype, shape: tuple, codec: str) -> str:
    """schema.json's text, byte for byte what loaderx 0.5.0 writes."""
    schema = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "dtype": dtype.str,
        "shape": list(shape),
        "codec": codec,
    }
    return json.dumps(schema, indent=2) + "\n"


def _write_atomically(path: Path, text: str, durable: bool) -> None:
    """Writes `text` to `path` through a temporary file and a rename, so a
    reader sees either no file or the whole of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable and hasattr(os, "O_DIRECTORY"):
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Dataset:
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

    def __init__(self, path: str | os.PathLike[str], *, checksums: bool = False) -> None:
        """Opens the dataset in the directory `path`.

        With `checksums`, every read is checked against per-record CRC32C
        checksums (created for the samples already there if the dataset has
        none yet); damage then raises ZrecordError (code -7) instead of
        returning wrong values.

        Raises:
            FileNotFoundError: `path` holds no schema.json.
            ValueError: schema.json is not a loaderx dataset schema.
            ZrecordError: the store itself cannot be opened.
        """
        self.path = Path(path)
        schema_path = self.path / SCHEMA
        if not schema_path.is_file():
            raise FileNotFoundError(
                f"{schema_path} not found; {self.path} is not a loaderx dataset"
            )
        try:
            schema = json.loads(schema_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"{schema_path} cannot be read as JSON: {e}") from e
        if not isinstance(schema, dict) or schema.get("format") != FORMAT:
            raise ValueError(f"{schema_path} is not a {FORMAT} schema")
        if schema.get("version", FORMAT_VERSION) != FORMAT_VERSION:
            raise ValueError(
                f"{schema_path} has schema version {schema.get('version')!r}; "
                f"this loaderx reads version {FORMAT_VERSION}"
            )
        try:
            self.dtype = np.dtype(schema["dtype"])
            self.shape = tuple(int(d) for d in schema["shape"])
            self.codec = str(schema.get("codec", "flate"))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{schema_path} is malformed: {e!r}") from e
        self._itemsize = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self._checksums = checksums
        self._store: Zrecord | None = Zrecord(
            self.path, self.codec, create=False, checksums=checksums
        )

    # -- the store ----------------------------------------------------------

    def _zr(self) -> Zrecord:
        store = self._store
        if store is None:
            raise ValueError(f"{self.path}: operation on a closed Dataset")
        return store

    def __len__(self) -> int:
        """The number of samples; they are exactly the indices 0..len."""
        return len(self._zr())

    # -- reading ------------------------------------------------------------

    def _gather(self, idxs: np.ndarray, lead: tuple) -> np.ndarray:
        flat = self._zr().gather_array(idxs, self._itemsize)
        return flat.view(self.dtype).reshape(*lead, *self.shape)

    def _positions(self, key: Any, n: int) -> np.ndarray:
        """Non-negative int64 positions of an array-like index `key`, checked
        against `n`; keeps the key's shape (a mask gives a 1-D result)."""
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
            raise IndexError(
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
            raise IndexError(f"index {int(bad)} is out of range for a dataset of {n} samples")
        return pos

    def __getitem__(self, key: Any) -> Any:
        """One sample for an integer index, otherwise a stacked batch."""
        n = len(self)
        if isinstance(key, (bool, np.bool_)):
            raise TypeError("a boolean is not a dataset index; use a boolean mask array")
        if isinstance(key, (int, np.integer)):
            i = operator.index(key)
            j = i + n if i < 0 else i
            if not 0 <= j < n:
                raise IndexError(f"index {i} is out of range for a dataset of {n} samples")
            return self._gather(np.array([j], dtype=np.uint64), (1,))[0]
        if isinstance(key, slice):
            pos = np.arange(*key.indices(n), dtype=np.int64)
        else:
            pos = self._positions(key, n)
        return self._gather(pos.reshape(-1).view(np.uint64), pos.shape)

    def __getitems__(self, idxs: Any) -> np.ndarray:
        """The samples `idxs` (array-like of int, or a boolean mask), shaped
        ``(len(idxs), *self.shape)``. The batched fast path."""
        pos = self._positions(idxs, len(self)).reshape(-1)
        # Non-negative int64 positions: the same bits as uint64, no copy.
        return self._gather(pos.view(np.uint64), pos.shape)

    # -- writing ------------------------------------------------------------

    @classmethod
    def write(
        cls,
        path: str | os.PathLike[str],
        array: Any,
        codec: str = "flate",
        chunk_bytes: int = WRITE_CHUNK_BYTES,
        *,
        durable: bool = True,
        checksums: bool = False,
    ) -> "Dataset":
        """Persists `array` as a dataset, one record per slice along axis 0.

        A 1-D array becomes a dataset of scalars. The array is streamed in
        chunks of at most `chunk_bytes` (at least one sample each), so an
        mmapped ``np.load(..., mmap_mode='r')`` array is never read into
        memory whole; non-contiguous arrays are copied chunk by chunk.

        When `path` already holds a dataset of the same dtype and shape, the
        samples are appended to it, with the codec it records. Otherwise the
        store is created first and its schema.json written (atomically) right
        after. `durable` flushes every chunk to stable storage before the
        next, so a power loss never leaves wrong samples behind; `checksums`
        keeps a CRC32C per sample (see `Dataset(path, checksums=True)`).

        Returns:
            Dataset: the dataset, opened.

        Raises:
            ValueError: unknown codec, a 0-d array, a sample over
                MAX_RECORD_LEN bytes, or a dtype/shape that differs from the
                dataset already at `path`.
            TypeError: an object (or otherwise unstorable) dtype.
        """
        if codec not in CODECS:
            raise ValueError(f"unknown codec {codec!r}, expected one of {list(CODECS)}")
        chunk_bytes = operator.index(chunk_bytes)
        if chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be at least 1, not {chunk_bytes}")
        array = np.asanyarray(array)
        if array.ndim < 1:
            raise ValueError("array must have a sample axis (at least one dimension)")
        dtype = np.dtype(array.dtype)
        if dtype.hasobject:
            raise TypeError(f"cannot store an array of Python objects ({dtype})")
        if np.dtype(dtype.str) != dtype:
            raise TypeError(
                f"dtype {dtype} cannot be recorded in schema.json (as {dtype.str!r})"
            )
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
        if not new:
            existing = cls(path)
            try:
                if (existing.dtype.str, existing.shape) != (dtype.str, shape):
                    raise ValueError(
                        f"{path} holds {existing.dtype.str}{existing.shape} samples, "
                        f"cannot append {dtype.str}{shape}"
                    )
                codec = existing.codec
            finally:
                existing.close()

        store = Zrecord(path, codec, checksums=checksums)
        try:
            if new:
                if len(store) != 0:
                    raise ValueError(
                        f"{path} holds a Zrecord store of {len(store)} records but no "
                        f"{SCHEMA}; refusing to turn it into a dataset"
                    )
                _write_atomically(schema_path, _schema_text(dtype, shape, codec), durable)
            step = max(1, chunk_bytes // max(itemsize, 1))
            for start in range(0, len(array), step):
                block = np.ascontiguousarray(array[start : start + step], dtype=dtype)
                store.append(block, len(block), itemsize, durable=durable)
        finally:
            store.close()
        return cls(path, checksums=checksums)

    # -- maintenance --------------------------------------------------------

    def delete(self, idxs: Any) -> None:
        """Removes samples `idxs` (ints, negative from the end, or a mask).

        ``len`` shrinks and the survivors stay addressable as 0..len: the
        tail is moved into each hole, so surviving samples may change index.
        Needs exclusive access (no DataLoader running on the dataset).
        """
        pos = self._positions(idxs, len(self)).reshape(-1)
        self._zr().delete(pos.astype(np.uint64))

    def compact(self) -> None:
        """Reclaims on disk the space that `delete` left behind."""
        self._zr().compact()

    def stats(self) -> dict[str, int]:
        """Storage usage: records, live_bytes, chunk_bytes and reclaimable."""
        return self._zr().stats()

    def verify(self) -> dict[str, Any]:
        """Checks every sample; see `loaderx.Zrecord.verify`."""
        return self._zr().verify()

    # -- lifetime -----------------------------------------------------------

    def close(self) -> None:
        """Closes the dataset. Idempotent."""
        store, self._store = getattr(self, "_store", None), None
        if store is not None:
            store.close()

    @property
    def closed(self) -> bool:
        """Whether `close()` has been called."""
        return self._store is None

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        # Pickles by path: the copy reopens the store (worker processes).
        return (_reopen, (type(self), str(self.path), self._checksums))

    def __repr__(self) -> str:
        if self._store is None:
            return f"Dataset({str(self.path)!r}, closed)"
        return (
            f"Dataset({str(self.path)!r}, len={len(self)}, dtype={self.dtype}, "
            f"shape={self.shape}, codec={self.codec!r})"
        )


def _reopen(cls: type, path: str, checksums: bool) -> Dataset:
    """Unpickles a Dataset by opening its directory again."""
    return cls(path, checksums=checksums)
