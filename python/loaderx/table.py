"""Tables: aligned streams in one folder.

A :class:`Table` is a directory holding one dataset per named stream (a
fixed-shape :class:`~loaderx.Dataset`, a :class:`~loaderx.RaggedDataset` or
a :class:`~loaderx.BytesDataset`), all of one length, whose i-th items
belong together, and a manifest, ``table.json``, whose ``length`` is the
commit point of every change (docs/FORMAT.md, "Tables"):

* an append writes its rows to every stream (durably), then the manifest
  with the new length; records past the committed length belong to an
  append that has not committed, and nobody reads them;
* a delete first records the rows it removes in the manifest, then deletes
  them from every store (each store's delete is atomic and, given the same
  length and rows, moves the same records), then commits the new length.

A writer (or an opener that finds an interrupted delete) first repairs the
table: it trims every store back to the committed length and finishes a
recorded delete. Writers take the table's lock (``table.lock``) for the
whole change; readers take none.

A sharded table (``"sharded": true``, manifest version 2) keeps each stream
as a sharded dataset, its shards aligned across streams; writers make new
shards without the lock and take it only to publish them
(``table_shards.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Sequence, Union

import numpy as np

from ._native import StoreBusyError, Zrecord, ZrecordError
from .bytes_dataset import BytesDataset
from .dataset import Dataset
from .indexing import positions
from .ragged import SHAPES, RaggedDataset
from .schema_file import SCHEMA, read_json, sync_dir
from .table_shards import (KINDS, ShardWriter, committed, finish_delete, plan_delete,
                           publish, shard_deletes_begun)
from .writer_lock import writer_lock

FORMAT = "loaderx-table"
FORMAT_VERSION = 1
#: The manifest version of a sharded table, which readers of version 1
#: refuse.
SHARDED_VERSION = 2
MANIFEST = "table.json"
LOCK = "table.lock"
#: What a stream name may be: it is a directory name inside the table.
STREAM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")

StreamDataset = Union[Dataset, RaggedDataset, BytesDataset]


class Table(Mapping[str, StreamDataset]):
    """A read-only mapping of stream name to dataset, every stream
    ``rows`` long; ``DataLoader(table, ...)`` loads all its streams.

    Attributes:
        path (Path): The table's directory.
        rows (int): The number of committed rows.
        kinds (dict): Each stream's kind: ``'fixed'``, ``'ragged'`` or ``'bytes'``.
        classes (dict): Class names per stream, for label streams.
        source (dict): Where the data came from, as the writer recorded it.
        shards (list | None): For a sharded table, the committed shards this
            handle reads, in order; None for a table of single stores.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        checksums: bool | None = None,
        read_only: bool = False,
        shards: Sequence[str] | None = None,
    ) -> None:
        """Opens the table in the directory `path`. A delete that a crash
        interrupted is finished first, which needs write access and no
        other handle on the table; `checksums` and `read_only` as for
        :class:`~loaderx.Dataset`. For a sharded table, `shards` names the
        committed shards to read (a host's part, docs/data.md); the others
        are not opened.

        Raises:
            FileNotFoundError: `path` holds no table.json.
            ValueError: table.json is malformed, or a delete was
                interrupted and this handle may not finish it.
        """
        self.path = Path(path).resolve()
        self._checksums = checksums
        self._read_only = read_only
        self._view = None if shards is None else [str(s) for s in shards]
        manifest = read_manifest(self.path)
        if manifest["delete"] is not None:
            if read_only:
                raise ValueError(
                    f"{self.path}: a delete was interrupted; open the table once with write "
                    "access to finish it before reading"
                )
            with table_lock(self.path):
                manifest = repair(self.path, read_manifest(self.path), timeout=0.0)
        self.rows: int = manifest["length"]
        self.kinds: dict[str, str] = dict(manifest["streams"])
        self.classes: dict[str, list[str]] = manifest.get("classes") or {}
        self.source: dict[str, Any] = manifest.get("source") or {}
        self.shards: list[str] | None = None
        options: dict[str, Any] = {}
        if manifest.get("sharded"):
            self.shards = view(self.path, committed(self.path, manifest), shards)
            options = {"shards": self.shards}
        elif shards is not None:
            raise ValueError(f"{self.path}: shards= reads part of a sharded table; this one "
                             "is not sharded")
        self._streams: dict[str, StreamDataset] = {}
        try:
            for name, kind in self.kinds.items():
                ds = KINDS[kind](self.path / name, checksums=checksums, read_only=read_only,
                                 **options)
                self._streams[name] = ds
                if shards is not None:
                    self.rows = len(ds)
                ds._limit = self.rows
                if len(ds) < self.rows:
                    raise ValueError(
                        f"{self.path}: stream {name!r} holds {len(ds)} rows, the table "
                        f"{self.rows}; the table is damaged"
                    )
        except BaseException:
            self.close()
            raise

    # -- the mapping ----------------------------------------------------------

    def __getitem__(self, name: str) -> StreamDataset:
        try:
            return self._streams[name]
        except KeyError:
            raise KeyError(f"{self.path} has no stream {name!r} (streams: {list(self)})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._streams)

    def __len__(self) -> int:
        """The number of streams (a Mapping's length); ``rows`` counts rows."""
        return len(self._streams)

    def row(self, i: int) -> dict[str, Any]:
        """Row `i` (negative counts from the end): each stream's item."""
        return {name: ds[i] for name, ds in self._streams.items()}

    # -- lifetime -------------------------------------------------------------

    def close(self) -> None:
        """Closes every stream. Idempotent."""
        streams, self._streams = self._streams, {}
        for ds in streams.values():
            ds.close()

    @property
    def closed(self) -> bool:
        return not self._streams

    def __enter__(self) -> "Table":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen, (str(self.path), self._checksums, self._read_only, self._view))

    def __repr__(self) -> str:
        streams = ", ".join(f"{name}: {kind}" for name, kind in self.kinds.items())
        return f"Table({str(self.path)!r}, rows={self.rows}, streams={{{streams}}})"

    # -- writing --------------------------------------------------------------

    @classmethod
    def write(
        cls,
        path: str | os.PathLike[str],
        columns: Mapping[str, Any],
        *,
        kinds: Mapping[str, str] | None = None,
        codec: str | Mapping[str, str] = "flate",
        level: int | None = None,
        classes: Mapping[str, list[str]] | None = None,
        source: Mapping[str, Any] | None = None,
        durable: bool = True,
        checksums: bool | None = None,
        timeout: float = 60.0,
        shard_rows: int | None = None,
    ) -> "Table":
        """Appends the rows of `columns` (stream name to its items, all of
        one length) to the table at `path`, creating it with those streams
        when it does not exist; returns the table, open.

        With `shard_rows`, a new table is sharded (docs/FORMAT.md, "Sharded
        tables"): every stream a sharded dataset, a new shard every
        `shard_rows` rows. A write to a sharded table makes new shards of
        its own (at most `shard_rows` rows each, the table's own by default)
        and publishes them at the end, all at once; many writers may write
        to it at the same time. With `durable`, its shards reach stable
        storage before they are published.

        A column's kind is ``kinds[name]`` if given, else ``'fixed'`` for a
        NumPy array, ``'bytes'`` for a sequence of str or bytes, and
        ``'ragged'`` for a sequence of arrays. `codec` is one codec for
        every stream or one per stream name, `level` its level (see
        :meth:`loaderx.Dataset.write`); `classes` and `source` are
        recorded in the manifest of a new table. After a crash at any point
        the table holds the rows of the appends that returned, and maybe
        those of the one in flight, in every stream alike.

        Raises:
            ValueError: columns of different lengths, stream names that
                differ from the table's, an unknown kind, or a bad name.
        """
        path = Path(path)
        if not columns:
            raise ValueError("a table needs at least one stream")
        counts = {name: len(col) for name, col in columns.items()}
        if len(set(counts.values())) > 1:
            raise ValueError(f"every column must have the same number of rows, got {counts}")
        for name in columns:
            stream_name(name)
        path.mkdir(parents=True, exist_ok=True)
        with table_lock(path):
            manifest = create(path, columns, kinds=kinds, codec=codec, classes=classes,
                              source=source, checksums=checksums, shard_rows=shard_rows)
            if not manifest.get("sharded"):
                manifest = repair(path, manifest, timeout)
                check_streams(path, manifest, columns)
                for name, col in columns.items():
                    write_rows(path / name, manifest["streams"][name], col, level=level,
                               durable=durable, checksums=checksums, timeout=timeout)
                manifest["length"] += next(iter(counts.values()))
                write_manifest(path, manifest)
                return cls(path, checksums=checksums)
        check_streams(path, manifest, columns)
        writer = ShardWriter(path, manifest["streams"], shard_rows or manifest["shard_rows"],
                             checksums=checksums, level=level, timeout=timeout, durable=durable)
        try:
            writer.write(columns)
            shards = writer.sync()
        except BaseException:
            writer.discard()
            raise
        publish_shards(path, shards)
        return cls(path, checksums=checksums)

    def delete(self, rows: Any, *, timeout: float = 0.0) -> None:
        """Removes rows `rows` (ints, negative from the end) from every
        stream, keeping them aligned: the last rows move into the holes, as
        :meth:`loaderx.Dataset.delete` does. Needs every store to itself,
        waiting up to `timeout` seconds for other handles to close, then
        raises StoreBusyError having deleted nothing (unless a stream did its
        part before another refused: the next handle to open the table
        alone finishes it); this table's own handles are closed and
        reopened around the delete.
        In a sharded table each shard deletes its own rows (its last rows
        fill its holes), in every stream alike; a handle of part of the
        table's shards (``shards=``) takes no deletes (ValueError)."""
        if self._view is not None:
            raise ValueError(f"{self.path}: this handle reads part of the table's shards; "
                             "delete rows through a handle of the whole table")
        targets = np.unique(positions(rows, self.rows).reshape(-1)).tolist()
        # The table is reopened by its path below: the rows chosen here
        # must not be deleted from another table renamed into its place.
        for ds in self._streams.values():
            ds._check_folder()
        self.close()
        reopen = dict(checksums=self._checksums, read_only=self._read_only, shards=self._view)
        try:
            with table_lock(self.path):
                manifest = repair(self.path, read_manifest(self.path), timeout)
                if manifest.get("sharded"):
                    manifest["delete"] = plan_delete(self.path, manifest, targets)
                else:
                    manifest["delete"] = {"from": manifest["length"], "rows": targets}
                write_manifest(self.path, manifest)
                try:
                    repair(self.path, manifest, timeout)
                except StoreBusyError:
                    # Refused before any store changed: the delete did not
                    # happen, and no later handle is to finish it (nor to be
                    # refused opening the table while it cannot).
                    if not delete_begun(self.path, manifest):
                        write_manifest(self.path, {**manifest, "delete": None})
                    raise
        except BaseException:
            # The handle opens again if the table does: not while a delete
            # that a stream carried out waits for the others.
            with contextlib.suppress(ZrecordError):
                self.__init__(self.path, **reopen)
            raise
        self.__init__(self.path, **reopen)


def open_path(path: str | os.PathLike[str], **options: Any) -> Table | StreamDataset:
    """Opens what the directory `path` holds (``loaderx.open``): a
    :class:`Table`, or a single dataset of any kind; `options` go to its
    constructor (``checksums=``, ``read_only=``).

    Raises:
        FileNotFoundError: `path` holds neither table.json nor schema.json.
    """
    path = Path(path)
    if (path / MANIFEST).is_file():
        return Table(path, **options)
    by_format = {"loaderx-zrecord": Dataset, "loaderx-ragged": RaggedDataset,
                 "loaderx-bytes": BytesDataset}
    try:
        fmt = json.loads((path / SCHEMA).read_text(encoding="utf-8")).get("format")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} holds neither {MANIFEST} nor {SCHEMA}: it is not a loaderx table or "
            "dataset"
        ) from None
    except (OSError, ValueError, AttributeError):
        fmt = None
    # An unknown format goes to Dataset, whose error names the file.
    return by_format.get(fmt, Dataset)(path, **options)


def _reopen(path: str, checksums: bool | None, read_only: bool,
            shards: list[str] | None = None) -> Table:
    return Table(path, checksums=checksums, read_only=read_only, shards=shards)


def view(path: Path, names: list[str], shards: Sequence[str] | None) -> list[str]:
    """The committed shards `names` a handle reads: those in `shards` (in
    the table's order), or all."""
    if shards is None:
        return names
    wanted = {str(s) for s in shards}
    missing = wanted - set(names)
    if missing:
        raise ValueError(f"{path}: the table has not committed shards {sorted(missing)}")
    return [n for n in names if n in wanted]


# -- the manifest ---------------------------------------------------------------


def read_manifest(path: Path) -> dict[str, Any]:
    """The table's manifest, its fields checked."""
    file = path / MANIFEST
    m = read_json(file, f"{path} is not a loaderx table")
    bad = None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        bad = f"it is not a {FORMAT} manifest"
    elif m.get("version") not in (FORMAT_VERSION, SHARDED_VERSION):
        bad = (f"it has version {m.get('version')!r}; this loaderx reads {FORMAT_VERSION} and "
               f"{SHARDED_VERSION}")
    elif (m["version"] == SHARDED_VERSION) != (m.get("sharded", False) is True):
        bad = f"version {SHARDED_VERSION}, and only it, says 'sharded': true"
    elif m.get("sharded") and not (isinstance(m.get("shard_rows"), int)
                                   and not isinstance(m["shard_rows"], bool)
                                   and m["shard_rows"] >= 1):
        bad = f"field 'shard_rows' must be a positive int, not {m.get('shard_rows')!r}"
    elif not isinstance(m.get("length"), int) or isinstance(m["length"], bool) or m["length"] < 0:
        bad = f"field 'length' must be a non-negative int, not {m.get('length')!r}"
    elif not isinstance(m.get("streams"), dict) or not m["streams"]:
        bad = "field 'streams' must map stream names to kinds"
    elif any(kind not in KINDS for kind in m["streams"].values()):
        bad = f"a stream kind is not one of {list(KINDS)}: {m['streams']}"
    elif any(not isinstance(n, str) or not STREAM_NAME.fullmatch(n) for n in m["streams"]):
        bad = f"a stream name is not a plain directory name: {list(m['streams'])}"
    elif m.get("delete") is not None and not (
        isinstance(m["delete"], dict)
        and isinstance(m["delete"].get("from"), int)
        and isinstance(m["delete"].get("rows"), list)
        and (not m.get("sharded") or (
            isinstance(m["delete"].get("shards"), dict)
            and all(isinstance(d, dict) and isinstance(d.get("from"), int)
                    and isinstance(d.get("rows"), list) for d in m["delete"]["shards"].values())))
    ):
        bad = ("field 'delete' must be null or {'from': int, 'rows': [int, ...]}, in a sharded "
               "table with 'shards': {name: {'from': int, 'rows': [int, ...]}}")
    if bad:
        raise ValueError(f"{file} is malformed: {bad}")
    m.setdefault("delete", None)
    return m


def create(path: Path, columns: Mapping[str, Any], *, kinds: Mapping[str, str] | None,
           codec: str | Mapping[str, str], classes: Mapping[str, list[str]] | None,
           source: Mapping[str, Any] | None, checksums: bool | None,
           shard_rows: int | None) -> dict[str, Any]:
    """The manifest of the table at `path`, after creating the table with
    the streams of `columns` (sharded with `shard_rows`) when it has none.
    Callers hold the table's lock."""
    if not (path / MANIFEST).is_file():
        want = {name: column_kind(name, col, (kinds or {}).get(name))
                for name, col in columns.items()}
        for name, col in columns.items():
            create_stream(path / name, want[name], col, codec_of(codec, name),
                          checksums=checksums, sharded=shard_rows is not None)
        sharding = ({"version": SHARDED_VERSION, "sharded": True, "shard_rows": shard_rows}
                    if shard_rows is not None else {"version": FORMAT_VERSION})
        write_manifest(path, {
            "format": FORMAT, **sharding, "length": 0, "streams": want,
            "classes": dict(classes or {}), "source": dict(source or {}), "delete": None,
        })
    return read_manifest(path)


def check_streams(path: Path, manifest: Mapping[str, Any], columns: Mapping[str, Any]) -> None:
    if set(manifest["streams"]) != set(columns):
        raise ValueError(
            f"{path} has streams {sorted(manifest['streams'])}, the columns are {sorted(columns)}"
        )


def publish_shards(path: Path, shards: Sequence[str]) -> None:
    """Publishes shards that writers of the sharded table at `path` made
    (``table_shards.ShardWriter``) and commits the table's new length,
    holding the table's lock."""
    with table_lock(path):
        manifest = read_manifest(path)
        length = publish(path, manifest["streams"], shards)
        if length != manifest["length"]:
            write_manifest(path, {**manifest, "length": length})


def write_manifest(path: Path, manifest: Mapping[str, Any]) -> None:
    """Replaces the manifest whole and durably: a temporary file, synced,
    renamed over it, and the directory synced. The rename is the commit."""
    file = path / MANIFEST
    tmp = path / f".{MANIFEST}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(manifest, indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, file)
    sync_dir(path)


def table_lock(path: Path) -> AbstractContextManager[None]:
    """The table's writer lock, ``table.lock`` (``writer_lock.py``)."""
    return writer_lock(path, LOCK)


def repair(path: Path, manifest: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Brings every store back to the committed length (the records an
    interrupted append left past it go) and finishes a recorded delete;
    returns the manifest, committed. Callers hold the table lock."""
    if manifest.get("sharded"):
        # Shards are published whole, so there is nothing past the length to
        # take back: only a delete to finish.
        if manifest["delete"] is None:
            return manifest
        manifest = finish_delete(path, manifest, timeout)
        write_manifest(path, manifest)
        return manifest
    length = manifest["length"]
    pending = manifest["delete"]
    for name, kind in manifest["streams"].items():
        for store in stream_stores(path / name, kind):
            with store:
                n = len(store)
                if pending is not None and n == pending["from"] - len(pending["rows"]):
                    continue  # deleted before the interruption
                if n > length:
                    store.delete(np.arange(length, n, dtype=np.uint64), timeout=timeout)
                elif n < length:
                    raise ValueError(
                        f"{path}: stream {name!r} holds {n} records, fewer than the table's "
                        f"{length} rows; the table is damaged"
                    )
                if pending is not None:
                    store.delete(np.array(pending["rows"], dtype=np.uint64), timeout=timeout)
    if pending is not None:
        manifest = {**manifest, "length": length - len(pending["rows"]), "delete": None}
        write_manifest(path, manifest)
    return manifest


def delete_begun(path: Path, manifest: Mapping[str, Any]) -> bool:
    """Whether any store has carried out its part of the recorded delete."""
    if manifest.get("sharded"):
        return shard_deletes_begun(path, manifest)
    for name, kind in manifest["streams"].items():
        for store in stream_stores(path / name, kind, read_only=True):
            with store:
                if len(store) != manifest["delete"]["from"]:
                    return True
    return False


def stream_stores(path: Path, kind: str, read_only: bool = False) -> list[Zrecord]:
    """The native stores of the stream at `path`, open for writing (or
    only for reading)."""
    if kind == "ragged":
        return [Zrecord(path, create=False, read_only=read_only),
                Zrecord(path / SHAPES, create=False, read_only=read_only)]
    return [Zrecord(path, create=False, read_only=read_only)]


# -- streams --------------------------------------------------------------------


def stream_name(name: Any) -> str:
    if not isinstance(name, str) or not STREAM_NAME.fullmatch(name) or name in (MANIFEST, LOCK):
        raise ValueError(
            f"stream name {name!r} must be letters, digits, '_', '.' or '-' (not first)"
        )
    return name


def codec_of(codec: str | Mapping[str, str], name: str) -> str:
    return codec if isinstance(codec, str) else codec.get(name, "flate")


def column_kind(name: str, column: Any, kind: str | None) -> str:
    """The kind of stream `column` makes: `kind` if given, else judged by
    the column's type and first item."""
    if kind is not None:
        if kind not in KINDS:
            raise ValueError(f"stream {name!r}: kind {kind!r} is not one of {list(KINDS)}")
        return kind
    if isinstance(column, np.ndarray) and column.dtype != object:
        return "fixed"
    first = column[0] if len(column) else None
    if isinstance(first, (str, bytes, bytearray, memoryview)):
        return "bytes"
    if first is None:
        raise ValueError(f"stream {name!r}: give kinds={{{name!r}: ...}} for an empty column")
    return "ragged"


def create_stream(
    path: Path, kind: str, column: Any, codec: str, *, checksums: bool | None, sharded: bool
) -> None:
    """Creates the empty stream of `kind` at `path` for the items of
    `column` (their dtype and dimensions), sharded or not, unless it
    exists."""
    # Any limit makes a sharded dataset; the table's writers set their own.
    shard = {"shard_records": 1} if sharded else {}
    if kind == "fixed":
        a = np.asanyarray(column)
        Dataset.write(path, a[:0], codec, checksums=checksums, **shard).close()
    elif kind == "ragged":
        first = np.asarray(column[0])
        RaggedDataset.write(path, [], codec, first.dtype, ndim=first.ndim,
                            checksums=checksums, **shard).close()
    else:
        first = column[0] if len(column) else b""
        BytesDataset.write(path, [], codec, kind="str" if isinstance(first, str) else "bytes",
                           checksums=checksums, **shard).close()


def write_rows(path: Path, kind: str, column: Any, **options: Any) -> None:
    """Appends the items of `column` to the stream at `path`."""
    if kind == "fixed":
        Dataset.write(path, np.asanyarray(column), **options).close()
    elif kind == "ragged":
        RaggedDataset.write(path, column, **options).close()
    else:
        BytesDataset.write(path, column, **options).close()
