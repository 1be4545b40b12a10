"""Byte and string datasets: one item of any length per record.

A :class:`BytesDataset` holds items that are not arrays: text, encoded
images or audio, JSON. Its directory is one Zrecord store, a record per
item holding the item's bytes (a ``str`` item's UTF-8 encoding), and a
``schema.json`` whose ``"format"`` is ``"loaderx-bytes"`` and whose
``"kind"`` says whether items come back as ``bytes`` or ``str``
(docs/FORMAT.md, "Byte datasets").
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ._native import MAX_RECORD_LEN
from .dataset_base import WRITE_CHUNK_BYTES, DatasetBase
from .sharding import RecordsWriter, Shards, open_records
from .indexing import int_key, position, positions, slice_positions
from .schema_file import SCHEMA, codec_arg, create_schema_fields, reading_schema, schema_codec

FORMAT = "loaderx-bytes"
FORMAT_VERSION = 1
#: What a dataset's items are: ``bytes``, or ``str`` (stored as UTF-8).
KINDS = ("bytes", "str")


def item_bytes(item: Any, kind: str) -> bytes:
    """`item` as the bytes a record of a `kind` dataset holds."""
    if kind == "str":
        if not isinstance(item, str):
            raise TypeError(f"a str dataset takes str items, not {type(item).__name__}")
        return item.encode("utf-8")
    if isinstance(item, str):
        raise TypeError("a bytes dataset takes bytes-like items, not str")
    return bytes(item)


class PackedItems:
    """Items of a `kind` dataset held back to back in one buffer, as Arrow's
    binary and string arrays hold them: item ``k`` is
    ``values[offsets[k]:offsets[k + 1]]``. :func:`append_items` appends
    them from the buffer as it is, with no object per item."""

    def __init__(self, values: np.ndarray, offsets: np.ndarray, kind: str) -> None:
        self.values = values
        self.offsets = offsets
        self.kind = kind

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                raise ValueError("packed items take slices with a step of 1")
            return PackedItems(self.values, self.offsets[start : max(start, stop) + 1],
                               self.kind)
        k = position(key, len(self))
        item = self.values[self.offsets[k] : self.offsets[k + 1]].tobytes()
        return item.decode("utf-8") if self.kind == "str" else item


def items_of(flat: np.ndarray, lengths: np.ndarray, kind: str) -> list[Any]:
    """The items of a gathered batch: `flat` holds their bytes back to back,
    `lengths` says how many each has."""
    data = flat.tobytes()
    ends = np.cumsum(lengths, dtype=np.int64).tolist()
    starts = [0, *ends[:-1]]
    if kind == "str":
        return [data[a:b].decode("utf-8") for a, b in zip(starts, ends)]
    return [data[a:b] for a, b in zip(starts, ends)]


class BytesDataset(DatasetBase):
    """A dataset of ``bytes`` or ``str`` items of any length, one per record.

    ``ds[i]`` is item ``i`` (negative counts from the end); a slice, an
    integer array or list, or ``ds.__getitems__(idxs)`` gives a list of
    items. It is a stream of a :class:`~loaderx.DataLoader` in the dict form
    (``DataLoader({'text': texts, 'label': labels})``), where its batch is a
    list of items.

    Attributes:
        path (Path): The dataset's directory.
        kind (str): ``'bytes'`` or ``'str'``.
        codec (str): The codec new items are written with.
    """

    _kind = "BytesDataset"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        checksums: bool | None = None,
        read_only: bool = False,
        shards: Sequence[str] | None = None,
    ) -> None:
        """Opens the byte dataset in the directory `path`; `checksums`,
        `read_only` and (for a sharded one) `shards` as for
        :class:`~loaderx.Dataset`.

        Raises:
            FileNotFoundError: `path` holds no schema.json.
            ValueError: schema.json is not a byte dataset schema.
            ZrecordError: the store cannot be opened.
        """
        self.path = Path(path).resolve()
        with reading_schema(self.path, FORMAT, FORMAT_VERSION, "loaderx byte dataset") as schema:
            self.kind = schema_kind(schema["kind"])
            self.codec = schema_codec(schema.get("codec", "flate"))
            self.sharded = schema.get("sharded", False) is True
        self._checksums = checksums
        self._read_only = read_only
        self._shards = None if shards is None else [str(s) for s in shards]
        self._open = (
            open_records(self.path, self.codec, self.sharded, self._shards, checksums, read_only),
        )

    def __len__(self) -> int:
        """The number of items; they are exactly the indices 0..len."""
        return self._capped(len(self._stores()[0]))

    def _layout_repr(self) -> str:
        return f"kind={self.kind!r}"

    # -- reading --------------------------------------------------------------

    def lengths(self, idxs: Any) -> np.ndarray:
        """The byte lengths of items `idxs`, as uint32."""
        return self._stores()[0].lengths(positions(idxs, len(self)).reshape(-1).view(np.uint64))

    def __getitem__(self, key: Any) -> Any:
        """One item for an integer index, otherwise a list of items."""
        i = int_key(key)
        if i is not None:
            return self.__getitems__([position(i, len(self))])[0]
        if isinstance(key, slice):
            return self.__getitems__(slice_positions(key, len(self)))
        return self.__getitems__(key)

    def __getitems__(self, idxs: Any) -> list[Any]:
        """Items `idxs` as a list."""
        store = self._stores()[0]
        pos = positions(idxs, len(self)).reshape(-1).view(np.uint64)
        lengths = store.lengths(pos)
        ends = np.cumsum(lengths, dtype=np.uint64)
        flat = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
        store.gather_var(pos, flat, ends - lengths)
        return items_of(flat, lengths, self.kind)

    # -- writing --------------------------------------------------------------

    @classmethod
    def write(
        cls,
        path: str | os.PathLike[str],
        items: Iterable[Any],
        codec: str = "flate",
        *,
        kind: str | None = None,
        level: int | None = None,
        durable: bool = True,
        checksums: bool | None = None,
        chunk_bytes: int = WRITE_CHUNK_BYTES,
        timeout: float = 60.0,
        shard_records: int | None = None,
        shard_bytes: int | None = None,
    ) -> "BytesDataset":
        """Persists `items` (bytes-like, or str) as a byte dataset, one record
        each, appending when `path` holds one of the same kind already.

        `kind` is ``'bytes'`` or ``'str'``; by default the existing dataset's,
        else ``'str'`` when the first item is a str. Items are written in
        groups of about `chunk_bytes`; `level`, `durable`, `checksums`,
        `timeout`, `shard_records` and `shard_bytes` (a sharded dataset) as for
        :meth:`loaderx.Dataset.write`.

        Raises:
            ValueError: unknown codec or kind, an item over MAX_RECORD_LEN
                bytes, or a dataset of another kind at `path`.
            TypeError: an item that is not of the dataset's kind.
        """
        codec = codec_arg(codec)
        path = Path(path)
        it = iter(items)
        first = next(it, None)
        sharded = shard_records is not None or shard_bytes is not None
        if (path / SCHEMA).is_file():
            with cls(path) as existing:
                if kind is not None and kind != existing.kind:
                    raise ValueError(f"{path} holds {existing.kind} items, cannot append {kind}")
                kind, codec, sharded = existing.kind, existing.codec, existing.sharded
        elif kind is None:
            kind = "str" if isinstance(first, str) else "bytes"
        kind = schema_kind(kind)
        path.mkdir(parents=True, exist_ok=True)
        writer = RecordsWriter(path, codec, sharded, checksums, shard_records, shard_bytes)
        store = writer.target
        written = False
        try:
            if not (path / SCHEMA).is_file():
                if writer.records():
                    raise ValueError(
                        f"{path} holds a Zrecord store of {writer.records()} records but no "
                        f"{SCHEMA}; refusing to turn it into a byte dataset"
                    )
                fields = {"kind": kind, "codec": codec, **({"sharded": True} if sharded else {})}
                if not create_schema_fields(path, FORMAT, FORMAT_VERSION, fields, durable):
                    with cls(path) as existing:
                        if existing.kind != kind:
                            raise ValueError(
                                f"another writer created a {existing.kind} dataset at {path}"
                            )
            append_items(store, itertools.chain([] if first is None else [first], it), kind,
                         chunk_bytes, level=level, durable=durable, timeout=timeout)
            written = True
        finally:
            writer.finish(published=written)
        return cls(path, checksums=checksums)

    # -- maintenance ------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Storage usage: records, live_bytes, chunk_bytes and reclaimable
        (of all shards, for a sharded dataset)."""
        return Shards(self).stats() if self.sharded else self._stores()[0].stats()

    def verify(self) -> dict[str, Any]:
        """Checks every item; see `loaderx.Zrecord.verify`."""
        return Shards(self).verify() if self.sharded else self._stores()[0].verify()


def too_long(length: int) -> ValueError:
    """The error for an item of `length` bytes, past the record limit."""
    return ValueError(f"an item of {length} bytes exceeds the {MAX_RECORD_LEN} byte record limit")


def append_items(target: Any, items: Iterable[Any], kind: str, chunk_bytes: int,
                 **options: Any) -> int:
    """Appends `items` of `kind` to `target` (a store or a collection
    writer), in groups of about `chunk_bytes`; `options` go to each append.
    Returns how many it appended."""
    if isinstance(items, PackedItems):
        return append_packed(target, items, kind, chunk_bytes, **options)
    group: list[bytes] = []
    group_bytes = 0
    count = 0

    def flush() -> None:
        nonlocal group, group_bytes
        if group:
            lens = np.fromiter(map(len, group), dtype=np.uint64, count=len(group))
            src = np.frombuffer(b"".join(group), dtype=np.uint8)
            target.append_var(src, np.cumsum(lens, dtype=np.uint64) - lens, lens, **options)
        group, group_bytes = [], 0

    for item in items:
        b = item_bytes(item, kind)
        if len(b) > MAX_RECORD_LEN:
            raise too_long(len(b))
        group.append(b)
        group_bytes += len(b)
        count += 1
        if group_bytes >= chunk_bytes:
            flush()
    flush()
    return count


def append_packed(target: Any, items: PackedItems, kind: str, chunk_bytes: int,
                  **options: Any) -> int:
    """:func:`append_items` of packed items: each group of about
    `chunk_bytes` straight from their buffer."""
    if items.kind != kind:
        raise TypeError(f"a {kind} dataset takes {kind} items, not {items.kind}")
    offsets = np.asarray(items.offsets, dtype=np.uint64)
    lens = np.diff(offsets)
    if len(lens) and int(lens.max()) > MAX_RECORD_LEN:
        raise too_long(int(lens.max()))
    start = 0
    while start < len(lens):
        # At least one item a group, then as many as fit in `chunk_bytes`.
        stop = max(start + 1, int(np.searchsorted(offsets, offsets[start] + chunk_bytes,
                                                  side="right")) - 1)
        stop = min(stop, len(lens))
        target.append_var(items.values, offsets[start:stop], lens[start:stop], **options)
        start = stop
    return len(lens)


def schema_kind(value: Any) -> str:
    """A byte dataset's ``kind``: one of :data:`KINDS`."""
    if value not in KINDS:
        raise ValueError(f"field 'kind' must be one of {list(KINDS)}, not {value!r}")
    return value
