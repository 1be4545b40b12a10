"""Internal: the writing of sharded tables (docs/FORMAT.md, "Sharded tables").

A sharded table's streams are sharded datasets whose shards have the same
names and the same numbers of rows. A write makes new shards of its own in
every stream, named alike (one prefix, ``sharding.new_prefix``), without
the table's lock, so that many writers (processes, Ray tasks, hosts sharing
the folder) write at once. Its shards are published later, by it or by
another process, holding the table's lock: stream by stream in the
manifest's order (a ragged stream's values, then its shapes), then the
table's new length goes to ``table.json``, the commit. A crash between
leaves the first streams listing shards the others do not and the table has
not committed; the next publisher completes that publish first
(``sharding.align``), since every shard was synced before any was listed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ._native import Collection, Zrecord
from .bytes_dataset import BytesDataset, append_items
from .dataset import Dataset, append_samples
from .dataset_base import WRITE_CHUNK_BYTES
from .ragged import SHAPES, RaggedDataset, append_ragged
from .sharding import align, aligned_writer, discard, new_prefix, publish_aligned

#: The dataset class of each stream kind.
KINDS: dict[str, type] = {"fixed": Dataset, "ragged": RaggedDataset, "bytes": BytesDataset}


def collections(path: Path, streams: Mapping[str, str]) -> list[Path]:
    """The collections of a sharded table's streams, in the order they are
    published: a ragged stream's values before its shapes."""
    out = []
    for name, kind in streams.items():
        out.append(path / name)
        if kind == "ragged":
            out.append(path / name / SHAPES)
    return out


class ShardWriter:
    """Writes rows into new shards of every stream of the sharded table at
    `path`, named after one prefix, a new shard every `shard_rows` rows; it
    publishes nothing. `sync()` makes them durable (unless not `durable`)
    and names them for :func:`publish`."""

    def __init__(self, path: Path, streams: Mapping[str, str], shard_rows: int, *,
                 checksums: bool | None = None, level: int | None = None,
                 timeout: float = 60.0, durable: bool = True, under: str | None = None) -> None:
        if shard_rows < 1:
            raise ValueError(f"shard_rows must be at least 1, not {shard_rows}")
        self.path = path
        self.shard_rows = shard_rows
        # Under a write's name, its writers' shards are found by it.
        self.prefix = new_prefix() if under is None else f"{under}-{new_prefix()}"
        self.rows = 0
        self._options = {"level": level, "durable": False, "timeout": timeout}
        # Each stream's kind, its layout (from its dataset) and its writers.
        self._streams: dict[str, tuple[str, Any, tuple[Any, ...]]] = {}
        for name, kind in streams.items():
            with KINDS[kind](path / name, read_only=True) as ds:
                writers: tuple[Any, ...] = (
                    aligned_writer(path / name, ds.codec, self.prefix, checksums,
                                   durable=durable),)
                if kind == "ragged":
                    writers += (aligned_writer(path / name / SHAPES, "raw", self.prefix,
                                               checksums, durable=durable),)
                layout = ds.kind if kind == "bytes" else (ds.dtype, getattr(ds, "shape", None),
                                                          getattr(ds, "ndim", None))
            self._streams[name] = (kind, layout, writers)

    def write(self, columns: Mapping[str, Any]) -> None:
        """Appends the rows of `columns` (stream name to its items, all of
        one length, every stream of the table)."""
        if set(columns) != set(self._streams):
            raise ValueError(
                f"{self.path} has streams {sorted(self._streams)}, the columns are "
                f"{sorted(columns)}"
            )
        counts = {name: len(col) for name, col in columns.items()}
        if len(set(counts.values())) > 1:
            raise ValueError(f"every column must have the same number of rows, got {counts}")
        n = next(iter(counts.values()))
        columns = {name: self._checked(name, col) for name, col in columns.items()}
        done = 0
        while done < n:
            take = min(n - done, self.shard_rows - self.rows % self.shard_rows)
            for name, col in columns.items():
                self._append(name, col[done : done + take])
            done += take
            self.rows += take
            if self.rows % self.shard_rows == 0:
                for w in self._writers():
                    w.end_shard()

    def _checked(self, name: str, column: Any) -> Any:
        kind, layout, _ = self._streams[name]
        if kind != "fixed":
            return column
        a = np.asanyarray(column)
        dtype, shape, _ = layout
        if (a.dtype, a.shape[1:]) != (dtype, shape):
            raise ValueError(
                f"{self.path / name} holds {dtype}{shape} samples, cannot append "
                f"{a.dtype}{a.shape[1:]}"
            )
        return a

    def _append(self, name: str, rows: Any) -> None:
        kind, layout, writers = self._streams[name]
        if kind == "fixed":
            append_samples(writers[0], rows, layout[0], WRITE_CHUNK_BYTES, **self._options)
        elif kind == "bytes":
            append_items(writers[0], rows, layout, WRITE_CHUNK_BYTES, **self._options)
        else:
            append_ragged(writers[0], writers[1], rows, layout[0], layout[2], WRITE_CHUNK_BYTES,
                          **self._options)

    def _writers(self) -> list[Any]:
        """The collection writers of every stream (a ragged stream's two)."""
        return [w for _, _, writers in self._streams.values() for w in writers]

    def discard(self) -> None:
        """Removes the shards written, none of them published: the write
        failed."""
        discard(self._writers())

    def sync(self) -> list[str]:
        """Makes every shard durable (unless not `durable`); returns their
        names, in order."""
        names: list[str] = []
        for w in self._writers():
            w.sync()
            names = w.shards
        return names


def publish(path: Path, streams: Mapping[str, str], shards: Sequence[str]) -> int:
    """Publishes `shards` (synced by writers of the table at `path`) in every
    stream, after completing any publish a crash cut off; returns the rows
    the streams now hold alike, the table's length to commit. Callers hold
    the table's lock."""
    paths = collections(path, streams)
    align(paths)
    publish_aligned(paths, shards)
    with Collection(paths[-1]) as last:
        return len(last)


def committed(path: Path, manifest: Mapping[str, Any]) -> list[str]:
    """The shards the table has committed (those its length covers), in
    order, checked to be the first shards of every stream."""
    paths = collections(path, manifest["streams"])
    with Collection(paths[-1], read_only=True) as last:
        starts = [int(s) for s in last.starts]
        names = last.shards
    if manifest["length"] not in starts:
        raise ValueError(
            f"{path}: the table's length {manifest['length']} is not a shard boundary of "
            f"{paths[-1]}; the table is damaged"
        )
    names = names[: starts.index(manifest["length"])]
    for p in paths[:-1]:
        if Collection.published(p)[: len(names)] != names:
            raise ValueError(
                f"{path}: {p} does not list the table's shards {names} first; the table is "
                "damaged"
            )
    return names


def plan_delete(path: Path, manifest: Mapping[str, Any], rows: Sequence[int]) -> dict[str, Any]:
    """The journal of a delete of the table's `rows` (sorted, unique): for
    each committed shard holding some, its rows before and the rows to go,
    counted within it. Every stream deletes the same rows of a shard, so the
    shards stay aligned; the index stays dense, rebuilt from the shards'
    lengths."""
    names = committed(path, manifest)
    with Collection(collections(path, manifest["streams"])[-1], read_only=True) as last:
        starts = np.asarray(last.starts[: len(names) + 1], dtype=np.int64)
    targets = np.asarray(rows, dtype=np.int64)
    shard_of = np.searchsorted(starts, targets, side="right") - 1
    return {
        "from": manifest["length"],
        "rows": [int(r) for r in targets],
        "shards": {
            names[s]: {"from": int(starts[s + 1] - starts[s]),
                       "rows": (targets[shard_of == s] - starts[s]).tolist()}
            for s in np.unique(shard_of).tolist()
        },
    }


def shard_deletes_begun(path: Path, manifest: Mapping[str, Any]) -> bool:
    """Whether any store of any shard the recorded delete names has
    carried out its part."""
    pending = manifest["delete"]
    for collection in collections(path, manifest["streams"]):
        for name, shard in pending["shards"].items():
            with Zrecord(collection / name, create=False, read_only=True) as store:
                if len(store) != shard["from"]:
                    return True
    return False


def finish_delete(path: Path, manifest: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    """Carries out the recorded delete in every store of every shard it
    names (a store that already holds its rows less was done before an
    interruption) and returns the manifest to commit. Callers hold the
    table's lock."""
    pending = manifest["delete"]
    for collection in collections(path, manifest["streams"]):
        for name, shard in pending["shards"].items():
            with Zrecord(collection / name, create=False) as store:
                n = len(store)
                if n == shard["from"] - len(shard["rows"]):
                    continue
                if n != shard["from"]:
                    raise ValueError(
                        f"{collection / name} holds {n} records; the delete recorded in "
                        f"{path} expects {shard['from']}. The table is damaged"
                    )
                store.delete(np.array(shard["rows"], dtype=np.uint64), timeout=timeout)
    return {**manifest, "length": pending["from"] - len(pending["rows"]), "delete": None}
