"""Internal: ``.npy`` (one fixed stream, ``data``) and ``.npz`` files (one
fixed stream per array, named after it) as conversion sources. Arrays are
memory-mapped where NumPy can (``.npy``), so a group is read when it is
written and never the whole file."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from . import array_groups


class NumpySource:
    def __init__(self, path: Path, kind: str) -> None:
        self.path = path
        self.kind = kind
        try:
            if kind == "npy":
                self.arrays = {"data": np.load(path, mmap_mode="r", allow_pickle=False)}
            else:
                with np.load(path, allow_pickle=False) as npz:
                    self.arrays = {name: npz[name] for name in npz.files}
        except (ValueError, OSError, zipfile.BadZipFile) as e:
            raise ValueError(f"{path}: not a readable .{kind} file: {e}") from None
        if not self.arrays:
            raise ValueError(f"{path}: holds no arrays")
        lengths = {}
        for name, a in self.arrays.items():
            if a.ndim == 0:
                raise ValueError(f"{path}: array {name!r} is 0-d; every array needs a row axis")
            if a.dtype.hasobject:
                raise ValueError(f"{path}: array {name!r} holds Python objects")
            lengths[name] = len(a)
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{path}: the arrays have different lengths {lengths}")
        self.rows = next(iter(lengths.values()))
        self.kinds = {name: "fixed" for name in self.arrays}
        self.classes: dict[str, list[str]] = {}

    def describe(self) -> dict[str, Any]:
        return {"from": self.kind, "path": str(self.path.resolve())}

    def groups(self, start: int, max_bytes: int) -> Iterator[dict[str, Any]]:
        return array_groups(self.arrays, start, max_bytes)

def open_source(path: Path, kind: str, **_: Any) -> NumpySource:
    return NumpySource(path, kind)
