"""Internal: IDX files (the format of MNIST and Fashion-MNIST, optionally
gzipped) as conversion sources. The source is an images file; when the
matching labels file lies beside it (``*-labels-idx1-ubyte``), the table
gets a ``label`` stream too."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np

from . import fingerprint, stream_groups

#: IDX type codes (the third byte of the magic) and their dtypes.
DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def open_idx(path: Path) -> tuple[IO[bytes], np.dtype, tuple[int, ...]]:
    """An IDX file opened past its header: the file, the items' dtype (big
    endian, as stored) and the array's shape."""
    opener = gzip.open if path.name.endswith(".gz") else open
    f = opener(path, "rb")
    try:
        head = f.read(4)
        if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in DTYPES:
            raise ValueError(f"{path}: not an IDX file (bad magic)")
        ndim = head[3]
        dims = f.read(4 * ndim)
        if len(dims) < 4 * ndim:
            raise ValueError(f"{path}: truncated IDX header")
        shape = struct.unpack(f">{ndim}I", dims)
        dtype = np.dtype(DTYPES[head[2]])
        if opener is open:
            count = int(np.prod(shape, dtype=np.int64))
            held = path.stat().st_size - 4 - 4 * ndim
            if held != count * dtype.itemsize:
                raise ValueError(
                    f"{path}: IDX header says {shape} ({count * dtype.itemsize} bytes), the file "
                    f"holds {held}"
                )
        return f, dtype, shape
    except (OSError, EOFError) as e:
        f.close()
        raise ValueError(f"{path}: cannot be read: {e}") from None
    except BaseException:
        f.close()
        raise


def idx_shape(path: Path) -> tuple[int, ...]:
    f, _, shape = open_idx(path)
    f.close()
    return shape


def labels_beside(images: Path) -> Path | None:
    name = images.name
    if "images-idx3" not in name:
        return None
    labels = images.with_name(name.replace("images-idx3", "labels-idx1"))
    return labels if labels.is_file() else None


class IdxSource:
    #: Decompressing gzip takes a core of its own.
    overlap = True

    def __init__(self, path: Path) -> None:
        self.path = path
        labels = labels_beside(path)
        self.files = {"image" if labels else "data": path}
        shapes = {"image" if labels else "data": idx_shape(path)}
        if labels is not None:
            self.files["label"] = labels
            shapes["label"] = idx_shape(labels)
            if shapes["label"][:1] != shapes["image"][:1]:
                raise ValueError(
                    f"{labels}: {shapes['label'][0]} labels for {shapes['image'][0]} images "
                    f"in {path}"
                )
        if not shapes[next(iter(shapes))]:
            raise ValueError(f"{path}: a 0-d IDX array has no rows")
        self.rows = shapes[next(iter(shapes))][0]
        self.kinds = {name: "fixed" for name in self.files}
        self.classes: dict[str, list[str]] = {}

    def describe(self) -> dict[str, Any]:
        return {"from": "idx", "path": str(self.path.resolve()),
                "files": fingerprint(self.files.values())}

    def groups(self, start: int, max_bytes: int) -> Iterator[dict[str, Any]]:
        def opener(path: Path) -> Any:
            def open_rows() -> tuple[IO[bytes], np.dtype, tuple[int, ...]]:
                f, dtype, shape = open_idx(path)
                return f, dtype, shape[1:]
            return open_rows

        for group in stream_groups({n: opener(p) for n, p in self.files.items()},
                                   self.rows, start, max_bytes):
            if "label" in group:
                group["label"] = group["label"].astype(np.int64)
            yield group

def open_source(path: Path, kind: str, **_: Any) -> IdxSource:
    return IdxSource(path)
