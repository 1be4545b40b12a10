"""Converting the formats people hold into a loaderx table:
``loaderx.convert(src, dst, ...)`` and ``loaderx convert SRC DST``.

A source module (``sources/``) reads the input and yields its rows in
groups; each group is appended to the table as one commit (``table.py``),
so memory stays bounded by a few groups and a conversion killed at any
moment leaves a table of the groups that committed. Where reading takes
CPU of its own (decompressing, decoding Parquet), a thread reads the next
group while the current one is written, so reading and writing overlap. Run again, it checks that the
table came from the same source with the same options and continues after
its last committed row: no row twice, none missing.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, TypeVar

import numpy as np

from .progress import Progress
from .schema_file import codec_arg
from .sources import open_source
from .table import MANIFEST, Table, read_manifest

#: Bytes of source rows per group (one table append).
GROUP_BYTES = 16 << 20


def convert(
    src: str | os.PathLike[str] | Any,
    dst: str | os.PathLike[str],
    *,
    source: str | None = None,
    codec: str = "flate",
    level: int | None = None,
    image_size: tuple[int, int] | None = None,
    max_side: int | None = None,
    quality: int | None = None,
    checksums: bool | None = None,
    durable: bool = True,
    workers: int | None = None,
    progress: bool | None = None,
    group_bytes: int = GROUP_BYTES,
    shard_rows: int | None = None,
) -> Table:
    """Converts `src` into the table at `dst` and returns it, open.

    `src` is a file or folder, or a Hugging Face ``datasets.Dataset``.
    `source` names the kind of input (``npy``, ``npz``, ``idx``,
    ``images``, ``parquet``, ``arrow``, ``hf``, ``webdataset``); it is
    detected when None. `codec` is the codec of every
    stream and `level` its level; `image_size` ``(height, width)`` decodes an image folder's
    images to that size instead of keeping their encoded bytes; `max_side` and `quality`
    re-encode them instead as JPEGs of that quality (default 90), shrunk so that neither
    side exceeds `max_side` (the aspect kept; smaller images are not enlarged); `durable`
    (the default) makes each group's rows reach stable storage before the
    table commits them, as ``Dataset.write`` does; `workers`
    threads read and decode images (default: the CPU count); `progress`
    shows a bar (None: when stderr is a terminal). With `shard_rows` the
    table is sharded (``Table.write(..., shard_rows=)``): each group of
    about `group_bytes` of source rows goes to shards of its own, of at most
    `shard_rows` rows. When `dst` holds a
    table converted from the same source with the same options, the
    conversion continues after its committed rows.

    Raises:
        FileNotFoundError: `src` does not exist.
        ValueError: the source cannot be read (the message names the file,
            row or column), or `dst` holds something else.
    """
    if isinstance(src, (str, os.PathLike)):
        src = Path(src)
    dst = Path(dst)
    codec = codec_arg(codec)
    workers = workers or os.cpu_count() or 1
    reader = open_source(src, source, image_size=image_size, max_side=max_side,
                         quality=quality, workers=workers)
    described = {**reader.describe(), "codec": codec, "level": level,
                 **({"shard_rows": shard_rows} if shard_rows is not None else {})}
    start = 0
    if (dst / MANIFEST).is_file():
        before = read_manifest(dst)
        if before.get("source") != described:
            raise ValueError(
                f"{dst} holds a table converted from {before.get('source')}; this conversion "
                f"is {described}: convert into another directory"
            )
        start = before["length"]
    elif dst.exists() and any(dst.iterdir()):
        raise ValueError(f"{dst} exists and is not a loaderx table: convert into a new directory")
    name = src.name if isinstance(src, Path) else type(src).__name__
    bar = Progress(reader.rows, f"{name} -> {dst.name}", progress, initial=start)
    try:
        groups = reader.groups(start, group_bytes)
        for group in read_ahead(groups) if reader.overlap else groups:
            Table.write(dst, group, kinds=reader.kinds, codec=codec, level=level,
                        classes=reader.classes, source=described, checksums=checksums,
                        durable=durable, shard_rows=shard_rows).close()
            first = next(iter(group.values()))
            bar.update(len(first), sum(group_nbytes(col) for col in group.values()))
    finally:
        bar.close()
    if not (dst / MANIFEST).is_file():
        raise ValueError(f"{src}: holds no rows to convert")
    return Table(dst, checksums=checksums)


T = TypeVar("T")


def read_ahead(items: Iterator[T]) -> Iterator[T]:
    """`items`, the next one read on a thread while the caller works on the
    one before: reading a source (decompressing, parsing, file reads) and
    writing the table release the GIL, so they overlap. At most two items
    are alive beside the caller's."""
    with ThreadPoolExecutor(1, thread_name_prefix="loaderx-convert-read") as pool:
        pending = pool.submit(next, items, None)
        while (item := pending.result()) is not None:
            pending = pool.submit(next, items, None)
            yield item


def group_nbytes(column: Any) -> int:
    """The bytes of a group's column: an array's, or its items' together."""
    if isinstance(column, np.ndarray):
        return column.nbytes
    return sum(len(x) if isinstance(x, (bytes, str)) else np.asarray(x).nbytes for x in column)
