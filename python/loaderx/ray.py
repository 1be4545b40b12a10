"""Ray Data as the distributed engine (``pip install loaderx[ray]``).

* :func:`write` writes a ``ray.data.Dataset`` into a sharded table: each
  of Ray's write tasks, on whatever node it runs, writes its rows into new
  shards of its own (``table_shards.ShardWriter``); when every task has
  finished, the driver publishes all their shards at once, in the order of
  the tasks. A task that dies leaves shards nobody publishes, which the
  driver then removes (their names begin with the write's); a write that
  fails leaves the table as it was.
* :func:`read` reads a table, or a dataset of any kind, as a
  ``ray.data.Dataset``: read tasks over ranges of whole shards, each
  gathering its rows in blocks, columns typed as the streams are (fixed
  streams as tensor columns, ragged streams as variable-shaped tensors,
  byte streams as binary or string columns).

The table's folder must be on a file system that every node and the driver
see at the same path (a local disk for a one-machine cluster; NFS or the
like for many machines).
"""

from __future__ import annotations

import os
import secrets
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import ray.data
from ray.data.block import BlockAccessor, BlockMetadata
from ray.data.datasource import Datasink, Datasource, ReadTask

from ._native import MAX_RECORDS, Collection
from .bytes_dataset import PackedItems
from .table import (MANIFEST, Table, check_streams, create, open_path, publish_shards,
                    read_manifest, table_lock)
from .table_shards import ShardWriter, collections

#: Rows a read task gathers into one block.
BLOCK_ROWS = 8192
#: About how many bytes a read task reads at least, by default: a task opens
#: the table and costs Ray a scheduling round trip, so hundreds of small ones
#: (Ray asks for 200 by default) would cost more than their reads.
TASK_BYTES = 16 << 20


def write(
    dataset: ray.data.Dataset,
    path: str | os.PathLike[str],
    *,
    codec: str | Mapping[str, str] = "zstd",
    level: int | None = None,
    shard_rows: int | None = None,
    kinds: Mapping[str, str] | None = None,
    classes: Mapping[str, list[str]] | None = None,
    checksums: bool | None = None,
    durable: bool = True,
    ray_remote_args: dict[str, Any] | None = None,
    concurrency: int | None = None,
) -> Table:
    """Writes the rows of `dataset` into the sharded table at `path`
    (created with its columns as streams when missing, appended to when it
    holds a sharded table of the same streams); returns the table, open.

    Each write task makes its own shards (a new one every `shard_rows`
    rows; by default the table's, or 2**24 for a new table), on its node;
    they are published together once all tasks have finished, so readers see
    all of the dataset's rows or none. With `durable` (the default) the
    shards reach stable storage before they are published; without, a
    crash of any process still loses nothing published, a power loss may.
    `codec`, `level`, `kinds`, `classes` and `checksums` as for
    :meth:`loaderx.Table.write`;
    `ray_remote_args` and `concurrency` go to Ray's ``write_datasink``.
    """
    sink = TableDatasink(path, codec=codec, level=level, shard_rows=shard_rows, kinds=kinds,
                         classes=classes, checksums=checksums, durable=durable)
    dataset.write_datasink(sink, ray_remote_args=ray_remote_args or {},
                           concurrency=concurrency)
    return Table(path, checksums=checksums)


def read(
    path: str | os.PathLike[str],
    *,
    columns: Sequence[str] | None = None,
    override_num_blocks: int | None = None,
) -> ray.data.Dataset:
    """The table at `path` (its committed rows), or the dataset there, as a
    ``ray.data.Dataset``, one column per stream (``data`` for a dataset),
    only `columns` when given. Rows keep the table's order when Ray
    preserves order (``DataContext.execution_options.preserve_order``)."""
    return ray.data.read_datasource(TableDatasource(path, columns=columns),
                                    override_num_blocks=override_num_blocks)


class TableDatasink(Datasink):
    """Ray's side of :func:`write`."""

    def __init__(self, path: str | os.PathLike[str], *, codec: str | Mapping[str, str] = "zstd",
                 level: int | None = None, shard_rows: int | None = None,
                 kinds: Mapping[str, str] | None = None,
                 classes: Mapping[str, list[str]] | None = None,
                 checksums: bool | None = None, durable: bool = True) -> None:
        self.path = Path(path).absolute()
        self.durable = durable
        self.codec = codec
        self.level = level
        self.shard_rows = shard_rows
        self.kinds = dict(kinds or {})
        self.classes = dict(classes or {})
        self.checksums = checksums
        #: The write's name, which its tasks' shards begin with: what dead
        #: attempts left is found by it (``on_write_complete``).
        self.write_name = secrets.token_hex(4)

    def on_write_start(self, schema: Any = None) -> None:
        if (self.path / MANIFEST).is_file():
            with Table(self.path, read_only=True) as table:
                if table.shards is None:
                    raise ValueError(f"{self.path} is a table of single stores; Ray writes "
                                     "sharded tables")
        self.path.mkdir(parents=True, exist_ok=True)

    def write(self, blocks: Any, ctx: Any) -> tuple[int, list[str]]:
        """Writes one task's blocks into new shards, synced, not published;
        returns the task's index and the shards' names."""
        writer = None
        for block in blocks:
            cols = columns_of(block)
            if not cols or not len(next(iter(cols.values()))):
                continue
            if writer is None:
                writer = self._writer(cols)
            writer.write(cols)
        return ctx.task_idx, writer.sync() if writer is not None else []

    def _writer(self, cols: Mapping[str, Any]) -> ShardWriter:
        # The first task to get here creates the table; the others wait on
        # its lock and find it.
        with table_lock(self.path):
            manifest = create(self.path, cols, kinds=self.kinds, codec=self.codec,
                              classes=self.classes, source={"from": "ray.data"},
                              checksums=self.checksums,
                              shard_rows=self.shard_rows or MAX_RECORDS)
        check_streams(self.path, manifest, cols)
        return ShardWriter(self.path, manifest["streams"],
                           self.shard_rows or manifest["shard_rows"], checksums=self.checksums,
                           level=self.level, durable=self.durable, under=self.write_name)

    def on_write_complete(self, write_result: Any) -> None:
        """Publishes every task's shards, in the order of the tasks, then
        removes the shards of the tasks' dead attempts (Ray retried them):
        every task is done, and nothing lists them."""
        shards = [name for _, names in sorted(write_result.write_returns) for name in names]
        if shards:
            publish_shards(self.path, shards)
        if not (self.path / MANIFEST).is_file():
            return  # no task had a row
        for path in collections(self.path, read_manifest(self.path)["streams"]):
            try:
                Collection.remove_unpublished(path, self.write_name)
            except Exception as e:  # noqa: BLE001: the write is published; say what stays
                warnings.warn(f"loaderx.ray.write: unpublished shards of dead tasks stay in "
                              f"{path}: {e}", stacklevel=2)

    @property
    def supports_distributed_writes(self) -> bool:
        return True


def columns_of(block: Any) -> dict[str, Any]:
    """A Ray block's columns as NumPy arrays (object arrays for arrays of
    differing shapes), and an Arrow block's binary and string columns as
    :class:`~loaderx.bytes_dataset.PackedItems` over Arrow's own buffer:
    as Parquet's writer takes them, with no Python object per item (an
    object array of them, and the buffer joined from it again, cost about
    a third of the time of writing photographs)."""
    if not isinstance(block, pa.Table):
        return dict(BlockAccessor.for_block(block).to_numpy())
    packed = {name: packed_items(column.chunk(0) if column.num_chunks == 1
                                 else column.combine_chunks())
              for name, column in zip(block.column_names, block.columns)
              if column.type in BINARY and column.null_count == 0}
    rest = block.drop_columns(list(packed))
    arrays = dict(BlockAccessor.for_block(rest).to_numpy()) if rest.num_columns else {}
    return {name: packed[name] if name in packed else arrays[name]
            for name in block.column_names}


#: The item kind of each Arrow type that holds its items back to back.
BINARY = {pa.binary(): "bytes", pa.large_binary(): "bytes", pa.string(): "str",
          pa.large_string(): "str"}


def packed_items(array: Any) -> PackedItems:
    """An Arrow binary or string array (one chunk, no nulls) as packed items
    over its buffers."""
    kind = BINARY[array.type]
    wide = array.type in (pa.large_binary(), pa.large_string())
    _, offsets, values = array.buffers()
    offsets = np.frombuffer(offsets, dtype=np.int64 if wide else np.int32)
    values = np.frombuffer(values, dtype=np.uint8) if values is not None else np.empty(0, np.uint8)
    return PackedItems(values, offsets[array.offset : array.offset + len(array) + 1], kind)


class TableDatasource(Datasource):
    """Ray's side of :func:`read`: read tasks over ranges of whole shards,
    as many as Ray asks for but each of about `task_bytes` at least."""

    def __init__(self, path: str | os.PathLike[str], *,
                 columns: Sequence[str] | None = None, task_bytes: int = TASK_BYTES) -> None:
        self.path = Path(path).absolute()
        self.task_bytes = max(1, task_bytes)
        with open_path(self.path, read_only=True) as opened:
            streams = dict(opened) if isinstance(opened, Table) else {"data": opened}
            self.columns = list(streams) if columns is None else [str(c) for c in columns]
            missing = set(self.columns) - set(streams)
            if missing:
                raise ValueError(f"{self.path} has no streams {sorted(missing)}")
            first = streams[self.columns[0]]
            self.rows = len(first)
            # Shard boundaries, where the streams are sharded alike.
            stores = first._stores()
            starts = getattr(stores[-1], "starts", None)
            self.bounds = sorted({0, self.rows, *(int(s) for s in starts if s < self.rows)}) \
                if starts is not None else [0, self.rows]
            self.row_bytes = sum(row_bytes(streams[c]) for c in self.columns)

    def estimate_inmemory_data_size(self) -> int | None:
        return self.rows * self.row_bytes

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        tasks = []
        wanted = -(-self.rows * self.row_bytes // self.task_bytes)
        for lo, hi in ranges(self.bounds, max(1, min(parallelism, wanted))):
            meta = BlockMetadata(num_rows=hi - lo, size_bytes=(hi - lo) * self.row_bytes,
                                 input_files=None, exec_stats=None)
            path, cols = str(self.path), self.columns
            tasks.append(ReadTask(lambda lo=lo, hi=hi: read_rows(path, cols, lo, hi), meta,
                                  per_task_row_limit=per_task_row_limit))
        return tasks


def ranges(bounds: Sequence[int], parallelism: int) -> list[tuple[int, int]]:
    """About `parallelism` ranges of rows from shard `bounds`: whole shards
    grouped to about equal rows, or one shard (a single store) split."""
    total = bounds[-1]
    if total == 0:
        return []
    if len(bounds) - 1 < parallelism:
        # Fewer shards than tasks: split rows evenly, shard bounds ignored.
        cuts = np.linspace(0, total, min(parallelism, total) + 1).astype(int)
        return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]
    out, lo = [], 0
    for k in range(1, parallelism + 1):
        target = total * k // parallelism
        hi = next(b for b in bounds if b >= target)
        if hi > lo:
            out.append((lo, hi))
            lo = hi
    return out


def row_bytes(ds: Any) -> int:
    """About how many bytes a row of `ds` takes in memory: exact for a fixed
    stream, else the mean of up to 64 items spread over it."""
    if hasattr(ds, "shape"):
        return int(np.prod(ds.shape, dtype=np.int64)) * ds.dtype.itemsize
    n = len(ds)
    if n == 0:
        return 0
    sample = ds[np.linspace(0, n - 1, min(n, 64)).astype(np.int64)]
    return max(1, sum(len(x) if isinstance(x, (bytes, str)) else x.nbytes for x in sample)
               // len(sample))


def read_rows(path: str, columns: list[str], lo: int, hi: int) -> Iterator[Any]:
    """Rows `lo` to `hi` of the table or dataset at `path`, in blocks."""
    with open_path(path, read_only=True) as opened:
        streams = dict(opened) if isinstance(opened, Table) else {"data": opened}
        for start in range(lo, hi, BLOCK_ROWS):
            stop = min(hi, start + BLOCK_ROWS)
            yield BlockAccessor.batch_to_block(
                {c: as_column(streams[c][start:stop]) for c in columns})


def as_column(items: Any) -> np.ndarray:
    """A stream's items as a NumPy column: an array as it is, a list (of
    arrays, bytes or str) as an object array."""
    if isinstance(items, np.ndarray):
        return items
    out = np.empty(len(items), dtype=object)
    for k, item in enumerate(items):  # arrays of one shape must not broadcast
        out[k] = item
    return out
