"""Internal: ``.npy`` (one fixed stream, ``data``) and ``.npz`` files (one
fixed stream per array, named after it) as conversion sources. A ``.npy``
is memory-mapped, and an ``.npz``'s members (stored or compressed) are read
a group at a time, so a group is read when it is written and never the
whole file."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np

from . import array_groups, fingerprint, stream_groups


class NumpySource:
    #: A group is a memory copy: a reading thread would only contend with the writes.
    overlap = False

    def __init__(self, path: Path, kind: str) -> None:
        self.path = path
        self.kind = kind
        try:
            if kind == "npy":
                self.arrays = {"data": np.load(path, mmap_mode="r", allow_pickle=False)}
                heads = {"data": (self.arrays["data"].shape, self.arrays["data"].dtype, False)}
            else:
                with zipfile.ZipFile(path) as z:
                    heads = {}
                    for member in z.namelist():
                        if member.endswith(".npy"):
                            with z.open(member) as f:
                                heads[member[:-4]] = npy_header(f)
        except (ValueError, OSError, zipfile.BadZipFile) as e:
            raise ValueError(f"{path}: not a readable .{kind} file: {e}") from None
        if not heads:
            raise ValueError(f"{path}: holds no arrays")
        lengths = {}
        for name, (shape, dtype, fortran) in heads.items():
            if not shape:
                raise ValueError(f"{path}: array {name!r} is 0-d; every array needs a row axis")
            if dtype.hasobject:
                raise ValueError(f"{path}: array {name!r} holds Python objects")
            if fortran and len(shape) > 1:
                raise ValueError(
                    f"{path}: array {name!r} is stored in Fortran order, whose rows cannot be "
                    "read one group at a time; save it in C order"
                )
            lengths[name] = shape[0]
        self.heads = heads
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{path}: the arrays have different lengths {lengths}")
        self.rows = next(iter(lengths.values()))
        self.kinds = {name: "fixed" for name in heads}
        self.classes: dict[str, list[str]] = {}

    def describe(self) -> dict[str, Any]:
        return {"from": self.kind, "path": str(self.path.resolve()),
                "files": fingerprint([self.path])}

    def groups(self, start: int, max_bytes: int) -> Iterator[dict[str, Any]]:
        if self.kind == "npy":
            return array_groups(self.arrays, start, max_bytes)

        def opener(name: str) -> Any:
            def open_rows() -> tuple[IO[bytes], np.dtype, tuple[int, ...]]:
                z = zipfile.ZipFile(self.path)
                f = z.open(name + ".npy")
                z.close()  # the member keeps the file open until it is closed
                shape, dtype, _ = npy_header(f)
                return f, dtype, shape[1:]
            return open_rows

        return stream_groups({n: opener(n) for n in self.heads}, self.rows, start, max_bytes)


def npy_header(f: IO[bytes]) -> tuple[tuple[int, ...], np.dtype, bool]:
    """Reads the header of the ``.npy`` data in `f`: (shape, dtype,
    Fortran order), leaving `f` at the first item."""
    version = np.lib.format.read_magic(f)
    read = {(1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0}.get(version)
    if read is None:
        raise ValueError(f"unsupported .npy version {version}")
    shape, fortran, dtype = read(f)
    return tuple(shape), np.dtype(dtype), fortran

def open_source(path: Path, kind: str, **_: Any) -> NumpySource:
    return NumpySource(path, kind)
