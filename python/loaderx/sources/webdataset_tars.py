"""Internal: WebDataset tar shards as a conversion source (Python's
``tarfile``; no extra needed). The source is one ``.tar`` file or a folder
of them, read in name order. Files are grouped into samples by key (the
file name up to its first dot, with its folder); each extension (what
follows that dot: ``jpg``, ``cls``, ``txt``, ``json``, ``seg.png``...)
becomes a stream. ``cls`` holds an integer label and becomes an int64
stream; ``txt`` and ``json`` become ``str`` byte streams; every other
extension keeps its files' bytes. Every sample must have the same
extensions."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from . import fingerprint

#: Extensions read as text, and the one read as an integer label.
TEXT = ("txt", "json")
LABEL = "cls"


def split_name(name: str) -> tuple[str, str]:
    """A tar member's (key, extension): WebDataset's convention."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext.lower()


class WebDatasetSource:
    #: Parsing tar headers in Python runs beside the writes, which release the GIL.
    overlap = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self.shards = sorted(path.glob("*.tar")) if path.is_dir() else [path]
        if not self.shards:
            raise ValueError(f"{path}: holds no .tar shards")
        exts: set[str] | None = None
        self.rows = 0
        for shard, key, sample in self._samples():
            if exts is None:
                exts = set(sample)
            elif set(sample) != exts:
                raise ValueError(
                    f"{shard}: sample {key!r} has files {sorted(sample)}, the first sample "
                    f"{sorted(exts)}"
                )
            self.rows += 1
        if not exts:
            raise ValueError(f"{path}: its shards hold no samples")
        self.exts = sorted(exts)
        self.kinds = {e: "fixed" if e == LABEL else "bytes" for e in self.exts}
        self.classes: dict[str, list[str]] = {}

    def describe(self) -> dict[str, Any]:
        return {"from": "webdataset", "path": str(self.path.resolve()),
                "files": fingerprint(self.shards)}

    def _samples(self) -> Iterator[tuple[Path, str, dict[str, bytes]]]:
        """Every sample: its shard, its key and its files by extension."""
        for shard in self.shards:
            try:
                with tarfile.open(shard, "r|*") as tar:
                    key, files = None, {}
                    for member in tar:
                        if not member.isfile():
                            continue
                        k, ext = split_name(member.name)
                        if k != key and files:
                            yield shard, key, files
                            files = {}
                        key = k
                        f = tar.extractfile(member)
                        files[ext] = f.read() if f else b""
                    if files:
                        yield shard, key, files
            except (tarfile.TarError, OSError) as e:
                raise ValueError(f"{shard}: not a readable tar file: {e}") from None

    def groups(self, start: int, max_bytes: int) -> Iterator[dict[str, Any]]:
        group: list[tuple[Path, str, dict[str, bytes]]] = []
        size = 0
        for row, (shard, key, files) in enumerate(self._samples()):
            if row < start:
                continue
            group.append((shard, key, files))
            size += sum(map(len, files.values()))
            if size >= max_bytes or len(group) >= 4096:
                yield self._columns(group)
                group, size = [], 0
        if group:
            yield self._columns(group)

    def _columns(self, group: list[tuple[Path, str, dict[str, bytes]]]) -> dict[str, Any]:
        columns: dict[str, Any] = {}
        for ext in self.exts:
            if ext == LABEL:
                columns[ext] = np.array([label(s, k, f[ext]) for s, k, f in group], dtype=np.int64)
            elif ext in TEXT:
                columns[ext] = [text(s, k, ext, f[ext]) for s, k, f in group]
            else:
                columns[ext] = [f[ext] for _, _, f in group]
        return columns


def label(shard: Path, key: str, data: bytes) -> int:
    try:
        return int(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"{shard}: sample {key!r}: its cls file is not an integer") from None


def text(shard: Path, key: str, ext: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{shard}: sample {key!r}: its {ext} file is not UTF-8") from None


def open_source(path: Path, kind: str, **_: Any) -> WebDatasetSource:
    return WebDatasetSource(path)
