"""Internal: IDX files (the format of MNIST and Fashion-MNIST, optionally
gzipped) as conversion sources. The source is an images file; when the
matching labels file lies beside it (``*-labels-idx1-ubyte``), the table
gets a ``label`` stream too."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from . import array_groups

#: IDX type codes (the third byte of the magic) and their dtypes.
DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Path) -> np.ndarray:
    """The array an IDX file holds, in native byte order."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as e:
        raise ValueError(f"{path}: cannot be read: {e}") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in DTYPES:
        raise ValueError(f"{path}: not an IDX file (bad magic)")
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{path}: truncated IDX header")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    dtype = np.dtype(DTYPES[data[2]])
    count = int(np.prod(shape, dtype=np.int64))
    if len(data) - header != count * dtype.itemsize:
        raise ValueError(
            f"{path}: IDX header says {shape} ({count * dtype.itemsize} bytes), the file holds "
            f"{len(data) - header}"
        )
    a = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return a.astype(dtype.newbyteorder("="), copy=False)


def labels_beside(images: Path) -> Path | None:
    name = images.name
    if "images-idx3" not in name:
        return None
    labels = images.with_name(name.replace("images-idx3", "labels-idx1"))
    return labels if labels.is_file() else None


class IdxSource:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.arrays = {"image" if labels_beside(path) else "data": read_idx(path)}
        labels = labels_beside(path)
        if labels is not None:
            self.labels_path = labels
            self.arrays["label"] = read_idx(labels).astype(np.int64)
            if len(self.arrays["label"]) != len(self.arrays["image"]):
                raise ValueError(
                    f"{labels}: {len(self.arrays['label'])} labels for "
                    f"{len(self.arrays['image'])} images in {path}"
                )
        self.rows = len(next(iter(self.arrays.values())))
        self.kinds = {name: "fixed" for name in self.arrays}
        self.classes: dict[str, list[str]] = {}

    def describe(self) -> dict[str, Any]:
        return {"from": "idx", "path": str(self.path.resolve())}

    def groups(self, start: int, max_bytes: int) -> Iterator[dict[str, Any]]:
        return array_groups(self.arrays, start, max_bytes)

def open_source(path: Path, kind: str, **_: Any) -> IdxSource:
    return IdxSource(path)
