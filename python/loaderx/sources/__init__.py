"""Internal: the formats ``loaderx convert`` reads, one module each.

A source reads one input (a file or a directory) and yields its rows in
groups: dicts of stream name to the group's items (a NumPy array for a
fixed stream, a list of ``bytes``/``str`` for a byte stream, a list of
arrays for a ragged one), always in the same order, so that a conversion
interrupted after ``n`` committed rows resumes by skipping them. Each has

* ``rows``: how many rows it holds;
* ``kinds``: each stream's kind (``fixed``, ``ragged`` or ``bytes``);
* ``classes``: class names per stream, for label streams;
* ``describe()``: what the table's manifest records as its ``source``,
  including a :func:`fingerprint` of its files, so that a conversion
  resumed over a source that changed since is refused;
* ``overlap``: whether reading a group takes enough CPU of its own that a
  thread should read the next group while the current one is written (on
  two cores, a reader that is only a memory copy slows the writes down);
* ``groups(start, max_bytes)``: the rows from ``start`` on, in groups of
  about ``max_bytes``.

:func:`open_source` picks the module by name, or by what `path` looks like.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Mapping

import numpy as np

#: Source kind -> its module (imported on demand: some need extras).
KINDS = {
    "npy": "numpy_files",
    "npz": "numpy_files",
    "idx": "idx",
    "images": "image_folder",
    "parquet": "arrow_tables",
    "arrow": "arrow_tables",
    "hf": "arrow_tables",
    "webdataset": "webdataset_tars",
}


def detect(path: Path) -> str:
    """The source kind of `path`, from its name and contents."""
    name = path.name.lower()
    if path.is_file():
        if name.endswith(".npy"):
            return "npy"
        if name.endswith(".npz"):
            return "npz"
        if "idx" in name and (name.endswith("-ubyte") or name.endswith("-ubyte.gz")):
            return "idx"
        if name.endswith(".parquet"):
            return "parquet"
        if name.endswith((".arrow", ".feather", ".ipc")):
            return "arrow"
        if name.endswith(".tar"):
            return "webdataset"
    elif path.is_dir():
        from .image_folder import looks_like_image_folder

        if (path / "state.json").is_file() and (path / "dataset_info.json").is_file():
            return "hf"
        if any(path.glob("*.tar")):
            return "webdataset"
        if looks_like_image_folder(path):
            return "images"
    elif not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    raise ValueError(
        f"{path}: cannot tell what kind of source this is; say it with --from "
        f"({', '.join(sorted(KINDS))})"
    )


def fingerprint(paths: Iterable[Path]) -> str:
    """A hash of the files' names, sizes and modification times: it
    changes when a file is added, removed, replaced or rewritten."""
    h = hashlib.sha256()
    for path in paths:
        st = path.stat()
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def open_source(path: Any, kind: str | None, **options: Any) -> Any:
    """The source reading `path`, of `kind` (detected when None); `path`
    may also be a ``datasets.Dataset`` object (kind ``hf``)."""
    import importlib

    if not isinstance(path, Path):
        kind = "hf"
    elif not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    kind = kind or detect(path)
    if kind not in KINDS:
        raise ValueError(f"unknown source kind {kind!r}; known: {', '.join(sorted(KINDS))}")
    module = importlib.import_module(f".{KINDS[kind]}", __name__)
    return module.open_source(path, kind, **options)


def array_groups(
    arrays: Mapping[str, np.ndarray], start: int, max_bytes: int
) -> Iterator[dict[str, np.ndarray]]:
    """The rows of `arrays` (all of one length) from `start` on, in groups of
    about `max_bytes` (at least one row), each a contiguous copy."""
    rows = len(next(iter(arrays.values())))
    row_bytes = sum(a[0].nbytes for a in arrays.values()) if rows else 1
    step = max(1, max_bytes // max(row_bytes, 1))
    for at in range(start, rows, step):
        yield {name: np.ascontiguousarray(a[at : at + step]) for name, a in arrays.items()}


def stream_groups(
    opens: Mapping[str, Callable[[], tuple[IO[bytes], np.dtype, tuple[int, ...]]]],
    rows: int,
    start: int,
    max_bytes: int,
) -> Iterator[dict[str, np.ndarray]]:
    """The rows from `start` on, in groups of about `max_bytes`, read from
    files of rows back to back (a gzip stream, a member of a zip), so that
    only one group is ever in memory. Each of `opens` opens its stream's
    file positioned at row 0 and says the rows' dtype and shape."""
    files = {name: open_() for name, open_ in opens.items()}
    try:
        row_bytes = {name: dt.itemsize * int(np.prod(shape, dtype=np.int64))
                     for name, (_, dt, shape) in files.items()}
        step = max(1, max_bytes // max(sum(row_bytes.values()), 1))
        for name, (f, _, _) in files.items():
            f.seek(start * row_bytes[name], 1)  # gzip and zip members seek forward
        for at in range(start, rows, step):
            n = min(step, rows - at)
            group = {}
            for name, (f, dt, shape) in files.items():
                where = getattr(f, "name", name)
                try:
                    data = f.read(n * row_bytes[name])
                except (OSError, EOFError) as e:
                    raise ValueError(f"{where}: cannot be read: {e}") from None
                if len(data) != n * row_bytes[name]:
                    raise ValueError(f"{where}: the file ends before row {rows}")
                a = np.frombuffer(data, dtype=dt).reshape((n, *shape))
                group[name] = a.astype(dt.newbyteorder("="), copy=False)
            yield group
    finally:
        for f, _, _ in files.values():
            f.close()

