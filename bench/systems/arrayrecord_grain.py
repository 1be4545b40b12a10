"""ArrayRecord written with ArrayRecordWriter('group_size:1,uncompressed') (one
record per group: Grain's advice for random access; uncompressed because
that read fastest here), read through Grain's ArrayRecordDataSource and its
batched __getitems__; the list of bytes is joined into the output array."""

import importlib.metadata
import logging

import numpy as np

logging.getLogger("absl").setLevel(logging.ERROR)

import grain.python as grain  # noqa: E402
from array_record.python.array_record_module import ArrayRecordWriter  # noqa: E402

OPTIONS = "group_size:1,uncompressed"


class System:
    def __init__(self, name, **_):
        self.src = None

    def version(self):
        return (f"grain {importlib.metadata.version('grain')}, "
                f"array-record {importlib.metadata.version('array-record')} ({OPTIONS})")

    def store_path(self, base):
        return base.with_suffix(".array_record")

    def write(self, path, array):
        w = ArrayRecordWriter(str(path), OPTIONS)
        try:
            for start in range(0, len(array), 4096):
                block = np.ascontiguousarray(array[start:start + 4096])
                for row in block:
                    w.write(row.tobytes())
        finally:
            w.close()

    def open(self, path):
        self.src = grain.ArrayRecordDataSource(str(path))
        return len(self.src)

    def set_layout(self, dtype, shape):
        self.dtype, self.shape = np.dtype(dtype), tuple(shape)

    def gather(self, idxs):
        recs = self.src.__getitems__(idxs.tolist())
        return np.frombuffer(b"".join(recs), dtype=self.dtype).reshape(len(recs), *self.shape)

    def close(self):
        src, self.src = self.src, None
        if src is not None and hasattr(src, "__exit__"):
            src.__exit__(None, None, None)
