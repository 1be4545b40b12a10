"""Apache Arrow IPC file (pyarrow): one fixed_size_binary column in a single
record batch (zero-copy from the source array), uncompressed; read
memory-mapped (zero-copy), a batch is Table.take(indices) viewed as the
output array.

One record batch, not one per 64 MiB: pyarrow 26's ChunkedArray.take
concatenates all chunks first, which made a 25-chunk B store gather at
5 MB/s -- a pitfall a user would avoid, so the harness avoids it too."""

import numpy as np

import pyarrow as pa
import pyarrow.ipc



class System:
    def __init__(self, name, **_):
        self.table = None

    def version(self):
        return f"pyarrow {pa.__version__}"

    def store_path(self, base):
        return base.with_suffix(".arrow")

    def write(self, path, array):
        row = array[0].nbytes
        schema = pa.schema([("x", pa.binary(row))])
        block = np.ascontiguousarray(array)  # an mmapped .npy: no copy
        col = pa.Array.from_buffers(pa.binary(row), len(block), [None, pa.py_buffer(block)])
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as w:
            w.write_batch(pa.record_batch([col], schema=schema))

    def open(self, path):
        self.src = pa.memory_map(str(path), "r")
        self.table = pa.ipc.open_file(self.src).read_all()
        self.col = self.table.column(0)
        return self.table.num_rows

    def set_layout(self, dtype, shape):
        self.dtype, self.shape = np.dtype(dtype), tuple(shape)

    def gather(self, idxs):
        arr = self.col.take(pa.array(idxs)).combine_chunks()
        row = arr.type.byte_width
        flat = np.frombuffer(arr.buffers()[1], dtype=np.uint8,
                             count=len(arr) * row, offset=arr.offset * row)
        return flat.view(self.dtype).reshape(len(arr), *self.shape)

    def close(self):
        self.table = self.col = None
        src, self.src = getattr(self, "src", None), None
        if src is not None:
            src.close()
